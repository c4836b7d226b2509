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

## ruff and mypy on the package (the tests and notebooks are not linted yet).
lint: setup
	$(BIN)/ruff check sessionkit benchmarks
	$(BIN)/mypy sessionkit

## Every test, after the lint.
test: setup lint
	$(BIN)/python -m pytest

## Quick feedback: everything but the slow crash and concurrency checks.
test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

bench: setup
	$(BIN)/python benchmarks/store_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
