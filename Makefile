# sessionkit: the two commands of README.md are `make demo` and `make test`.
# Both create the virtual environment in .venv on first use (uv when available, pip otherwise).
# uv is asked to compile the packages' byte code as it installs them (pip does by default):
# otherwise the first processes of a fresh checkout's test run each compile litellm, pandas
# and the rest again, side by side.

VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
# Which extras of pyproject.toml `make setup` installs: dev (everything the tests need) by
# default; `make demo` and `make tour` install only the notebook extra (JupyterLab, widgets,
# analysis: no test tooling). Each set of extras has its own stamp, so `make test` after
# `make demo` still installs the test tools.
EXTRAS  ?= dev
STAMP    = $(VENV)/.sessionkit-installed-$(1)

export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup demo tour notebooks lint test test-fast coverage screenshots docs bench clean

setup: $(call STAMP,$(EXTRAS))

$(VENV)/.sessionkit-installed-%: pyproject.toml
	@if ! command -v uv >/dev/null 2>&1; then $(PYTHON) -m pip install --quiet uv || true; fi
	@if command -v uv >/dev/null 2>&1; then \
		uv venv --quiet --allow-existing -p $(PYTHON) $(VENV) && \
		uv pip install --quiet --compile-bytecode -p $(BIN)/python -e '.[$*]'; \
	else \
		$(PYTHON) -m venv $(VENV) && \
		$(BIN)/pip install --quiet --upgrade pip && \
		$(BIN)/pip install --quiet -e '.[$*]'; \
	fi
	@touch $@

## The main job: JupyterLab on the tour notebooks with a ready demo store (offline, no API key).
## It prints the store's path: `sessionkit view <that path>` shows the whole store in a browser.
demo: $(call STAMP,notebook)
	$(BIN)/python -m sessionkit._lab

## The same demo store as a guided tour in the terminal.
tour: $(call STAMP,notebook)
	$(BIN)/sessionkit demo

## Re-run every notebook and save its outputs (what the notebook tests compare against).
notebooks: setup
	$(BIN)/python notebooks/run_all.py

# The tests write byte-code caches whatever PYTHONDONTWRITEBYTECODE says in the calling shell:
# without them every run (and every process a test starts) compiles litellm and the rest again.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

# The front end's type checker: TypeScript, pinned in package.json and package-lock.json,
# installed into node_modules by `npm ci` (again whenever the lock file changes).
NODE_STAMP := node_modules/.sessionkit-installed

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	@touch $@

## ruff (lint and format) on the package, the tests, the benchmarks and the notebooks (their code
## cells); mypy on the package (the bodies of functions without annotations too); import-linter
## on the contracts of pyproject.toml (the layers, the store's wings); tsc on the
## widgets' JavaScript (tsconfig.json: every static/*.js is // @ts-check, against the typedefs of
## static/types.d.ts, which `python -m sessionkit.widgets._jstypes` writes from the payload TypedDicts).
## `ruff format sessionkit tests benchmarks notebooks` formats.
lint: setup $(NODE_STAMP)
	$(BIN)/ruff check sessionkit tests benchmarks notebooks
	$(BIN)/ruff format --check sessionkit tests benchmarks notebooks
	$(BIN)/mypy sessionkit
	$(BIN)/lint-imports
	node_modules/.bin/tsc -p tsconfig.json

# The suite runs on pytest-xdist workers, one more than the machine has cores by default
# (TEST_WORKERS=1 runs it in one process): much of its time is spent waiting on a browser, a
# server, a killed process or the database server, and with one worker per core a quarter of
# the cores' time went idle. --dist loadgroup keeps the tests that share a Jupyter server in one
# worker (tests/conftest.py puts them in one group); every other test goes to whichever worker
# is free.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# The fast suite hardly waits on anything: one worker per core.
FAST_WORKERS ?= auto

## Every test, after the lint.
test: setup lint
	$(PYTEST) $(XDIST)

## Quick feedback: the tests that need no browser, no PostgreSQL and no killed process, less
## the long runs marked slow (full state machines, large fuzz corpora, the notebooks).
test-fast: setup
	$(PYTEST) -n $(FAST_WORKERS) --dist loadgroup -m "not browser and not postgres and not kill and not slow"

## The whole suite with branch coverage of the package (what README's development section quotes).
coverage: setup
	$(PYTEST) $(XDIST) --cov=sessionkit --cov-branch --cov-report=term:skip-covered --cov-report=html:artifacts/coverage

## Refresh the committed screenshots of the views (docs images): the browser tests, saving into artifacts/screenshots.
screenshots: setup
	SESSIONKIT_SCREENSHOTS=$(CURDIR)/artifacts/screenshots $(PYTEST) -m browser tests/browser

## The documentation site (mkdocs.yml) into site/, offline; --strict fails on any warning.
## tests/test_docs.py builds it too, so `make test` fails on a broken page.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: setup
	$(BIN)/python benchmarks/store_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache site node_modules
