# One image for the gangrun controller and for workers, and a base for training images.
#
#   docker build -t gangrun:0.1.0 .
#   controller: gangrun controller --leader-election ...       (deploy/deployment.yaml)
#   worker:     gangrun renders `python -m gangrun.launch -- <command>`; the example manifests run
#               `python -m gangrun.examples.train`, which ships in the package
#
# The image is the wheel installed into a virtualenv (/opt/gangrun, on PATH) on python:3.11-slim.
# Where there is no Docker, hack/build-images.sh builds it with buildah (on a Debian base, as root);
# or build the same wheel and install it into any Python 3.11+ image (a CUDA/PyTorch base for GPU jobs):
#
#   python -m pip wheel --no-deps -w dist .     # or: python -m build --wheel
#   pip install 'dist/gangrun-0.1.0-py3-none-any.whl[kubernetes,s3]'     # in your image
#
# docs/kubernetes.md ("Images") has both ways step by step. Add the torch extra for nprocPerNode > 1,
# which runs torchrun, and for gangrun.torch.
# BASE is any image with Python 3.11+ whose `python3 -m venv` works; hack/build-images.sh builds one from
# Debian packages (no registry needed) and passes it with --build-arg BASE=...
ARG BASE=python:3.11-slim
FROM ${BASE} AS build
# Optional, for a build behind a proxy or a mirror: pip's CA bundle and index (unset: pip's defaults).
ARG PIP_CERT
ARG PIP_INDEX_URL
# The extras installed with gangrun. hack/build-images.sh --flyte builds a second image with
# EXTRAS=kubernetes,s3,flyte: the Flyte connector's image and a base for Flyte tasks' (docs/flyte.md).
ARG EXTRAS=kubernetes,s3
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
# The dependencies first, in a layer of their own (installed with a stand-in package), so that a change
# to the source reuses it; at the versions the tests use (constraints.txt: the flyte extra's tree makes
# pip backtrack without them). "python-dateutil<3" steers pip: the newest kubernetes client wants
# python-dateutil>=3 while every aiobotocore (the s3 extra) wants <3, and pip otherwise backtracks
# through years of s3fs releases.
RUN python3 -m venv /opt/gangrun \
 && /opt/gangrun/bin/pip install --no-cache-dir --quiet --upgrade pip \
 && mkdir -p src/gangrun && touch src/gangrun/__init__.py \
 && /opt/gangrun/bin/pip install --no-cache-dir -c constraints.txt ".[$EXTRAS]" "python-dateutil<3" \
 && /opt/gangrun/bin/pip uninstall --yes gangrun && rm -rf src build
COPY src ./src
# pip leaves the bytecode it compiled in place: the image's user cannot write /opt/gangrun, so without it
# every worker's launcher and script would compile gangrun and its dependencies again at each start
# (2.3-2.6 s each, against 0.5 s, measured by benchmarks/bench_realnode.py).
RUN /opt/gangrun/bin/pip wheel --no-cache-dir --no-deps -w /dist . \
 && /opt/gangrun/bin/pip install --no-cache-dir --no-deps "$(ls /dist/gangrun-*.whl)"

FROM ${BASE}
COPY --from=build /opt/gangrun /opt/gangrun
ENV PATH=/opt/gangrun/bin:$PATH
# A fixed non-root user matching deploy/deployment.yaml's runAsUser. The default checkpoint root
# (spec.checkpoint.uri unset) is writable by it; it lasts as long as the pod unless a volume is mounted there.
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin gangrun \
 && mkdir -p /var/lib/gangrun/checkpoints && chown -R 65532:65532 /var/lib/gangrun
USER 65532
ENV PYTHONUNBUFFERED=1
CMD ["gangrun", "--help"]
