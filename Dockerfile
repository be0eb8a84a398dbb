# Two images from one file:
#   docker build --target runtime  -t cachefleet:<version> .           inference server: CUDA,
#                                                                       cuDNN, onnxruntime-gpu
#   docker build --target operator -t cachefleet-operator:<version> .  kopf operator on slim Python
# <version> is pyproject.toml's; scripts/build-images builds and smoke-tests both with podman.
#
# Layers, so that a code change rebuilds only the cachefleet layer: each image's dependencies
# come from a lock file (requirements/*.lock, every package pinned with its hashes; regenerate
# with scripts/lock) in a virtualenv of their own; the cachefleet wheel is installed apart,
# --no-deps, into /opt/cachefleet, which a .pth file in the virtualenv puts on sys.path. The final
# stages receive the finished virtualenv and the package, run as an unprivileged user, and hold
# no compiler, pip, setuptools or package cache.

# Base images, pinned. onnxruntime-gpu (its version is in requirements/runtime.lock) is built
# against CUDA 13 and cuDNN 9, which the CUDA image provides: move CUDA_IMAGE and the lock's
# onnxruntime-gpu together. Pin by digest (tag@sha256:...) in your own builds for byte-for-byte
# reproducible bases.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

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

# ---- runtime-deps: the locked dependencies of the gpu extra, on CUDA's Python ----------------
FROM ${CUDA_IMAGE} AS runtime-deps
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Ubuntu's python3 (3.12 on 24.04) moves with the pinned base image; apt pins would only rot.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY requirements/runtime.lock /tmp/runtime.lock
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-deps --only-binary=:all: --require-hashes -r /tmp/runtime.lock \
 && /opt/venv/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_path('purelib'), 'cachefleet.pth').write_text('/opt/cachefleet\n')"

# ---- runtime-package: the wheel alone, --no-deps (the only layer a code change rebuilds) ------
FROM runtime-deps AS runtime-package
COPY --from=wheel /wheels /wheels
# Byte-compiled here: the image sets PYTHONDONTWRITEBYTECODE and /opt is read-only to its user, so
# uncompiled modules are compiled from source at every start (a server's start: 2.3 s of CPU
# against 0.9 s compiled). unchecked-hash: no timestamps in the layer, no stat per import.
RUN /opt/venv/bin/pip install --no-deps --no-compile --target /opt/cachefleet /wheels/cachefleet-*.whl \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/cachefleet \
 && /opt/venv/bin/python -m cachefleet.cli.main samples /opt/cachefleet-samples --model simple

# ---- runtime-venv: the dependencies without pip ----------------------------------------------
FROM runtime-deps AS runtime-venv
RUN /opt/venv/bin/python -m pip uninstall --yes pip setuptools wheel

# ---- runtime: the inference server ----------------------------------------------------------
FROM ${CUDA_IMAGE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# The same python3 the virtualenv was made with (same base image, same archive), and the CA
# certificates rediss:// and https model downloads verify against (never left to the base).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cachefleet \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin cachefleet
COPY --from=runtime-venv /opt/venv /opt/venv
COPY --from=runtime-package /opt/cachefleet /opt/cachefleet
# The `simple` sample, generated at build time (never downloaded): examples/quickstart.yaml copies
# it out of this image (model.repository.image), so a first service needs no storage at all.
COPY --from=runtime-package /opt/cachefleet-samples /opt/cachefleet-samples
ENV PATH=/opt/cachefleet/bin:/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
# HTTP (KServe v2 / Triton) and gRPC (--grpc-port, 8001 as in Triton).
EXPOSE 8000 8001
ENTRYPOINT ["cachefleet"]
CMD ["serve", "--model-repository", "/models", "--host", "0.0.0.0", "--port", "8000"]

# ---- operator-deps: the locked dependencies of the operator extra (no server, no ONNX) ------
FROM ${PYTHON_IMAGE} AS operator-deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements/operator.lock /tmp/operator.lock
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-deps --only-binary=:all: --require-hashes -r /tmp/operator.lock \
 && /opt/venv/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_path('purelib'), 'cachefleet.pth').write_text('/opt/cachefleet\n')"

# ---- operator-package: the wheel alone, --no-deps --------------------------------------------
FROM operator-deps AS operator-package
COPY --from=wheel /wheels /wheels
RUN /opt/venv/bin/pip install --no-deps --no-compile --target /opt/cachefleet /wheels/cachefleet-*.whl \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/cachefleet

# ---- operator-venv: the dependencies without pip or setuptools --------------------------------
FROM operator-deps AS operator-venv
RUN /opt/venv/bin/python -m pip uninstall --yes pip setuptools wheel

# ---- operator: the kopf operator ------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS operator
# jemalloc is the operator's malloc (LD_PRELOAD; linked from where the architecture put it).
# 1,000 services on a real control plane: peak RSS 488 MiB with glibc's malloc, 436 with
# jemalloc; 117.6 CPU-seconds to all Ready, 95.9 (bench/results/2026-12-03-quiet-host.md).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjemalloc2 \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(find /usr/lib -name libjemalloc.so.2)" /usr/local/lib/libjemalloc.so.2 \
 && python -m pip uninstall --yes pip setuptools wheel \
 && groupadd --system --gid 10001 cachefleet \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin cachefleet
COPY --from=operator-venv /opt/venv /opt/venv
COPY --from=operator-package /opt/cachefleet /opt/cachefleet
ENV PATH=/opt/cachefleet/bin:/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LD_PRELOAD=/usr/local/lib/libjemalloc.so.2
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["cachefleet"]
# The arguments the chart and deploy/ pass (one replica): never join another operator's peering;
# the operator's metrics on 8081.
CMD ["operator", "--liveness=http://0.0.0.0:8080/healthz", "--metrics-port=8081", "--standalone", "--all-namespaces"]
