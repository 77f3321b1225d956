# Two entry points for users: `make serve` and `make test`. Everything else is for developers.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# pytest workers for make test. Two on two cores: much of the suite waits (server start-ups are
# single-threaded imports, live sessions are paced at real time), so the other worker fills the
# idle core (2-core AMD EPYC Zen 3: 1612 s in one process, 1096 s in two). A whole file goes to
# one worker (--dist loadfile), so each module's server starts once.
TEST_WORKERS ?= 2

.PHONY: install serve test lint typecheck protos bench-offline bench-smoke bench-selftest clean system-deps cuda-check \
	image-base image image-check

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# torch first and pinned: the CPU wheel lies on local disk; a looser spec would fetch a CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[dev]'
	touch $(STAMP)

# engine._C: the C++ kernels (and the CUDA ones, on a CUDA torch with nvcc) compiled against the
# installed torch, outside pip (its build isolation would fetch a CUDA torch to build against).
# A failed build is logged and the engine runs the Python reference; the op tests then fail.
EXT_SOURCES := $(wildcard engine/csrc/*.cpp engine/csrc/*.cu engine/csrc/*.h engine/csrc/*.cuh) engine/csrc/build.py
EXT_STAMP := build/ext/.built

$(EXT_STAMP): $(STAMP) $(EXT_SOURCES)
	$(PY) -m engine.csrc.build
	@mkdir -p $(@D) && touch $@

install: $(STAMP) $(EXT_STAMP)

# Every .cu file must compile with this machine's nvcc (object files only: no GPU needed).
cuda-check: install
	$(PY) -m engine.csrc.build --cuda-check

# compileall: the server's bytecode ahead of its start (the image does the same), which a
# PYTHONDONTWRITEBYTECODE environment would otherwise compile from source at every start.
serve: install
	$(PY) -m compileall -q app engine protos oasr >/dev/null
	$(VENV)/bin/uvicorn --factory app.main:create_app --host $${OASR_HOST:-0.0.0.0} --port $${OASR_PORT:-8000}

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy --follow-imports=silent -m engine.types -m engine.config -m engine.errors

# Debian's chromium (browser test), promtool (alert rules), PostgreSQL (the shared jobs store;
# tests start their own server with initdb + pg_ctl), and buildah + debootstrap (make image-check,
# when no docker daemon or podman is here): installed when missing and we can (root with apt-get);
# otherwise those tests skip with a reason.
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  missing=""; command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  { command -v podman >/dev/null 2>&1 || command -v buildah >/dev/null 2>&1; } || missing="$$missing buildah"; \
	  command -v debootstrap >/dev/null 2>&1 || missing="$$missing debootstrap"; \
	  command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	  { command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } \
	    || missing="$$missing postgresql"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) \
	      >/dev/null 2>&1 || echo "could not install$$missing; their tests will skip"; \
	  fi; \
	fi

# The image check follows the suite when a container tool is here (system-deps installs buildah
# where it can); its base tarball and build layers are cached, so a second run rebuilds little.
test: lint system-deps
	$(PY) -m engine.csrc.build --cuda-check --if-nvcc
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile
	@if command -v docker >/dev/null 2>&1 || command -v podman >/dev/null 2>&1 || command -v buildah >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory image-check; \
	else echo "image-check skipped: no docker, podman or buildah here"; fi

# The server image (tools/image.py): built with docker, podman or buildah, whichever is here. Where
# the Dockerfile's registry base cannot be pulled, image-base makes a Debian bookworm base with
# debootstrap (its tarball cached in OASR_IMAGE_CACHE) and the build uses it. image-check builds,
# serves inside the image, transcribes a dev clip over HTTP and gRPC, and stops it.
image-base: $(STAMP)
	$(PY) -m tools.image base

# IMAGE_ARGS: more build arguments, e.g. --build-arg BASE_IMAGE=nvidia/cuda:... (docs/deployment.md).
image: $(STAMP)
	$(PY) -m tools.image build $(IMAGE_ARGS)

image-check: $(STAMP)
	$(PY) -m tools.image check $(IMAGE_ARGS)

protos: install
	$(PY) -m protos.generate

bench-offline: install
	$(PY) -m benchmarks.offline --beam

bench-smoke: install
	$(PY) -m benchmarks.asrbench smoke-all --plots

bench-selftest: install
	$(PY) -m benchmarks.asrbench run --profile selftest --backend mock

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache engine/_C*.so
