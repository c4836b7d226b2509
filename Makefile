# sessionkit: the two commands of README.md are `make demo` and `make test`.
# Both create the virtual environment in .venv on first use (uv when available, pip otherwise).

VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.sessionkit-installed
EXTRAS  ?= dev

export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup demo tour notebooks lint test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@if ! command -v uv >/dev/null 2>&1; then $(PYTHON) -m pip install --quiet uv || true; fi
	@if command -v uv >/dev/null 2>&1; then \
		uv venv --quiet --allow-existing -p $(PYTHON) $(VENV) && \
		uv pip install --quiet -p $(BIN)/python -e '.[$(EXTRAS)]'; \
	else \
		$(PYTHON) -m venv $(VENV) && \
		$(BIN)/pip install --quiet --upgrade pip && \
		$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'; \
	fi
	@touch $(STAMP)

## The main job: JupyterLab on the tour notebooks with a ready demo store (offline, no API key).
demo: setup
	$(BIN)/python -m sessionkit._lab

## The same demo store as a guided tour in the terminal.
tour: setup
	$(BIN)/sessionkit demo

## Re-run every notebook and save its outputs (what the notebook tests compare against).
notebooks: setup
	$(BIN)/python notebooks/run_all.py

# The tests write byte-code caches whatever PYTHONDONTWRITEBYTECODE says in the calling shell:
# without them every run (and every process a test starts) compiles litellm and the rest again.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

## ruff and mypy on the package (the tests and notebooks are not linted yet).
lint: setup
	$(BIN)/ruff check sessionkit benchmarks
	$(BIN)/mypy sessionkit

## Every test, after the lint.
test: setup lint
	$(PYTEST)

## Quick feedback: every test not marked slow (see the marker in pyproject.toml and
## tests/conftest.py): the store matrix on SQLite, the engine-specific DuckDB and PostgreSQL tests.
## Measured on a 2-core machine shared with other work: test-fast 3 min 37 s at a load
## average of 5-7 (86 s of CPU); test 18 min (measured before the conformance suite doubled).
test-fast: setup
	$(PYTEST) -m "not slow"

bench: setup
	$(BIN)/python benchmarks/store_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
