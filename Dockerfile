# One image for the gangrun controller and for workers (as a base for training images).
#   docker build -t gangrun:dev .
#   controller: gangrun controller --leader-election ...   (deploy/deployment.yaml)
#   worker:     FROM gangrun:dev, add your code; gangrun renders `python -m gangrun.launch -- <command>`
# Add the torch extra (pip install '.[kubernetes,torch]') for nprocPerNode > 1, which runs torchrun.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir --prefix=/install '.[kubernetes]'

FROM python:3.11-slim
COPY --from=build /install /usr/local
# A fixed non-root user matching deploy/deployment.yaml's runAsUser.
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin gangrun
USER 65532
ENV PYTHONUNBUFFERED=1
CMD ["gangrun", "--help"]
