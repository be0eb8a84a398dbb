# syntax=docker/dockerfile:1
# Two images from one file:
#   docker build --target runtime  -t cachefleet:0.1.0 .           inference server: CUDA, cuDNN,
#                                                                   onnxruntime-gpu (the gpu extra)
#   docker build --target operator -t cachefleet-operator:0.1.0 .  kopf operator on slim Python
# Builder stages make the wheel and the virtualenvs; the final stages receive only a finished
# virtualenv, run as an unprivileged user, and hold no compiler, pip or package cache.

# Base images, pinned. onnxruntime-gpu 1.31 is built against CUDA 13 and cuDNN 9: move
# CUDA_IMAGE and ONNXRUNTIME_GPU_VERSION together. Pin by digest (tag@sha256:...) in your own
# builds for byte-for-byte reproducible bases.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04
ARG ONNXRUNTIME_GPU_VERSION=1.31.1

# ---- wheel: the cachefleet wheel (pure Python) ----------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cli/ cli/
COPY runtime/ runtime/
COPY operator/ operator/
COPY bench/ bench/
RUN pip wheel --no-deps --wheel-dir /wheels .

# ---- runtime-build: cachefleet[gpu] (the runtime extra and onnxruntime-gpu), CUDA's Python ---
FROM ${CUDA_IMAGE} AS runtime-build
ARG ONNXRUNTIME_GPU_VERSION
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Ubuntu's python3 (3.12 on 24.04) moves with the pinned base image; apt pins would only rot.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/venv \
 && wheel="$(ls /wheels/cachefleet-*.whl)" \
 && /opt/venv/bin/pip install "${wheel}[gpu]" "onnxruntime-gpu==${ONNXRUNTIME_GPU_VERSION}" \
 && /opt/venv/bin/python -m pip uninstall --yes pip

# ---- runtime: the inference server ----------------------------------------------------------
FROM ${CUDA_IMAGE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# The same python3 the virtualenv was made with (same base image, same archive).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cachefleet \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin cachefleet
COPY --from=runtime-build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
ENTRYPOINT ["cachefleet"]
CMD ["serve", "--model-repository", "/models", "--host", "0.0.0.0", "--port", "8000"]

# ---- operator-build: a virtualenv with cachefleet[operator] (no server, no ONNX) -------------
FROM ${PYTHON_IMAGE} AS operator-build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/venv \
 && wheel="$(ls /wheels/cachefleet-*.whl)" \
 && /opt/venv/bin/pip install "${wheel}[operator]" \
 && /opt/venv/bin/python -m pip uninstall --yes pip

# ---- operator: the kopf operator ------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS operator
RUN python -m pip uninstall --yes pip setuptools wheel \
 && groupadd --system --gid 10001 cachefleet \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin cachefleet
COPY --from=operator-build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["cachefleet"]
CMD ["operator", "--liveness=http://0.0.0.0:8080/healthz", "--all-namespaces"]
