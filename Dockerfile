# One image for the gangrun controller and for workers, and a base for training images.
#
#   docker build -t gangrun:0.1.0 .
#   controller: gangrun controller --leader-election ...       (deploy/deployment.yaml)
#   worker:     gangrun renders `python -m gangrun.launch -- <command>`; the example manifests run
#               `python -m gangrun.examples.train`, which ships in the package
#
# The image is the wheel installed into python:3.11-slim. Where there is no Docker, build the same
# wheel and install it into any Python 3.11+ image (a CUDA/PyTorch base for GPU jobs):
#
#   python -m pip wheel --no-deps -w dist .     # or: python -m build --wheel
#   pip install 'dist/gangrun-0.1.0-py3-none-any.whl[kubernetes,s3]'     # in your image
#
# docs/kubernetes.md ("Images") has both ways step by step. Add the torch extra for nprocPerNode > 1,
# which runs torchrun, and for gangrun.torch.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps -w /dist . \
 && pip install --no-cache-dir --prefix=/install "$(ls /dist/gangrun-*.whl)[kubernetes,s3]"

FROM python:3.11-slim
COPY --from=build /install /usr/local
# A fixed non-root user matching deploy/deployment.yaml's runAsUser. The default checkpoint root
# (spec.checkpoint.uri unset) is writable by it; it lasts as long as the pod unless a volume is mounted there.
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin gangrun \
 && mkdir -p /var/lib/gangrun/checkpoints && chown -R 65532:65532 /var/lib/gangrun
USER 65532
ENV PYTHONUNBUFFERED=1
CMD ["gangrun", "--help"]
