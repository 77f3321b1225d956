# Two entry points for users: `make serve` and `make test`. Everything else is for developers.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install serve test lint typecheck protos bench-offline bench-smoke bench-selftest clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# torch first and pinned: the CPU wheel lies on local disk; a looser spec would fetch a CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

serve: install
	$(VENV)/bin/uvicorn app.main:app --host $${OASR_HOST:-0.0.0.0} --port $${OASR_PORT:-8000}

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy --follow-imports=silent -m engine.types -m engine.config -m engine.errors

test: lint
	$(PY) -m pytest -q -ra

protos: install
	$(PY) -m protos.generate

bench-offline: install
	$(PY) -m benchmarks.offline

bench-smoke: install
	$(PY) -m benchmarks.asrbench smoke-all --plots

bench-selftest: install
	$(PY) -m benchmarks.asrbench run --profile selftest --backend mock

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
