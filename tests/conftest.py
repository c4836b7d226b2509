"""The store matrix every engine-facing test runs on, defined once.

Store variants (the ids of parametrised tests):

- ``sqlite-file``: a SQLite file
- ``sqlite-memory``: SQLite in memory
- ``sqlite-window``: a SQLite file whose search window (the second index of the newest
  messages) is four messages wide, so searches run with the window in place
- ``duckdb-file``: a DuckDB file
- ``duckdb-memory``: DuckDB in memory
- ``postgresql``: a schema of its own on the test server of ``tests/store/pg_cluster.py``
  (``SESSIONKIT_PG_URL`` or a throwaway cluster); without a server it skips, except under
  ``CI=true`` where it fails

Fixtures:

- ``new_store(kind, *, memory=False, folder=None, name=None, **options)``: a fresh store,
  closed after the test. ``kind`` is a variant, or an engine (``sqlite``, ``duckdb``,
  ``postgresql``) meaning its file variant, or its in-memory one with ``memory=True``
  (PostgreSQL has none: a fresh schema either way). ``new_shared_store`` is the same for
  session-scoped fixtures (closed at the end of the run).
- ``store_variant``: every variant, one test each.
- ``engine``: one parameter per engine: ``"sqlite"``, ``"duckdb"``, ``"postgresql"``.

Everything is a fixture (tests import nothing from here), so tests run under any pytest
import mode.
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

import sessionkit as sk

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # the PostgreSQL helpers of tests/store, under any import mode
    sys.path.insert(0, _TESTS)

from store.pg_cluster import new_store_url, pg_store_url, pg_url  # noqa: E402,F401  (fixtures)

#: variant -> (engine, in memory, options)
VARIANTS = {
    "sqlite-file": ("sqlite", False, {}),
    "sqlite-memory": ("sqlite", True, {}),
    "sqlite-window": ("sqlite", False, {"search_window": 4}),
    "duckdb-file": ("duckdb", False, {}),
    "duckdb-memory": ("duckdb", True, {}),
    "postgresql": ("postgresql", False, {}),
}
ENGINES = ("sqlite", "duckdb", "postgresql")
_SUFFIX = {"sqlite": ".db", "duckdb": ".duckdb"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _variant(kind: str, memory: bool) -> str:
    if kind == "postgresql":  # an engine and its only variant
        return kind
    if kind in ENGINES:
        return f"{kind}-memory" if memory else f"{kind}-file"
    if kind not in VARIANTS:
        raise ValueError(f"unknown store variant or engine {kind!r}; one of {[*VARIANTS, *ENGINES]}")
    if memory:
        raise ValueError(f"memory=True goes with an engine name, not the variant {kind!r}")
    return kind


# An empty DuckDB store costs a tenth of a second to create (its DDL), a hundred times what
# copying the file takes; the matrix opens hundreds. A fresh DuckDB file store without options
# is therefore a copy of one empty store this process created (with sk.open_store, as every
# other store): the copy is opened as a store that exists, what it would be after its first close.
_TEMPLATES: dict[str, Path] = {}


def _empty_store_file(engine: str, folder_factory) -> Path:
    if engine not in _TEMPLATES:
        path = Path(folder_factory()) / f"empty{_SUFFIX[engine]}"
        sk.open_store(path).close()
        _TEMPLATES[engine] = path
    return _TEMPLATES[engine]


class _Opener:
    """Opens stores of the matrix for one fixture scope and closes them at its end."""

    def __init__(self, request, folder_factory):
        self._request = request
        self._folder_factory = folder_factory
        self._folder = None
        self._names = itertools.count()
        self._opened: list = []

    def __call__(self, kind: str, *, memory: bool = False, folder=None, name=None, **options):
        variant = _variant(kind, memory)
        engine, in_memory, defaults = VARIANTS[variant]
        options = {**defaults, **options}
        if engine == "duckdb" and importlib.util.find_spec("duckdb") is None:
            message = "the duckdb package is not installed (pip install 'sessionkit[duckdb]')"
            if _in_ci():
                pytest.fail(f"DuckDB is required in CI: {message}", pytrace=False)
            pytest.skip(f"DuckDB tests skipped: {message}")
        if engine == "postgresql":
            self._request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
            target = new_store_url()
        elif in_memory:
            target = ":memory:" if engine == "sqlite" else "duckdb:///:memory:"
        else:
            if folder is None:
                if self._folder is None:
                    self._folder = self._folder_factory()
                folder = self._folder
            target = Path(folder) / f"{name or f'store{next(self._names)}'}{_SUFFIX[engine]}"
            if engine == "duckdb" and not options and not target.exists():
                shutil.copyfile(_empty_store_file(engine, self._folder_factory), target)
        store = sk.open_store(target, **options)
        self._opened = [s for s in self._opened if not s.closed]
        self._opened.append(store)
        return store

    def close_all(self) -> None:
        for store in reversed(self._opened):
            store.close()
        self._opened.clear()


@pytest.fixture
def new_store(request, tmp_path_factory):
    """``new_store(kind, *, memory=False, folder=None, name=None, **options)``: a fresh store
    of a variant or engine (see the module docstring), closed after the test."""
    opener = _Opener(request, lambda: tmp_path_factory.mktemp("stores"))
    yield opener
    opener.close_all()


@pytest.fixture(scope="session")
def new_shared_store(request, tmp_path_factory):
    """``new_store`` for session-scoped fixtures: the stores are closed at the end of the run."""
    opener = _Opener(request, lambda: tmp_path_factory.mktemp("shared-stores"))
    yield opener
    opener.close_all()


# The fast suite (``make test-fast``, ``-m "not slow"``) runs the matrix on SQLite (its three
# variants) and on DuckDB in memory (the conformance suite on it takes about 10 s: its appends go
# through the same journal and batch insert as a file's); DuckDB and PostgreSQL get their
# engine-specific tests there (test_duckdb_specific, test_postgres_specific) and the whole
# matrix in the full suite (``make test``): the conformance suite alone takes about 45 s on a
# DuckDB file on this 2-core machine.
_SLOW = pytest.mark.slow
_FAST_VARIANTS = ("sqlite-file", "sqlite-memory", "sqlite-window", "duckdb-memory")


@pytest.fixture(
    scope="session",
    params=[v if v in _FAST_VARIANTS else pytest.param(v, marks=_SLOW) for v in VARIANTS],
)
def store_variant(request) -> str:
    """Every store variant, one test each (ids: the variant names)."""
    return request.param


@pytest.fixture(scope="session", params=[e if e == "sqlite" else pytest.param(e, marks=_SLOW) for e in ENGINES])
def engine(request) -> str:
    """One parameter per engine: ``"sqlite"``, ``"duckdb"``, ``"postgresql"``."""
    return request.param


# -- markers and parallel groups, given from what a test uses ---------------------------------
#
# ``make test`` runs the suite on pytest-xdist workers (``--dist loadgroup``). A JupyterLab or
# Notebook 7 server is a session fixture: every test that uses one is put in one group, so they
# start once in one worker instead of once per worker. Chromium alone is a module fixture: the
# tests of a module that needs only the browser are a group of their own, so that those modules
# spread over the workers. The markers say what a
# test needs, for ``make test-fast`` (no browser, no PostgreSQL, no killed process):
#
# - ``browser``: a real Chromium (and usually a Jupyter server);
# - ``postgres``: the PostgreSQL test server (a test using its fixtures or a postgresql store
#   variant or engine; a module whose every test needs it says so: ``pytestmark``);
# - ``kill``: a process of its own that the test kills or stops (server, writer, kernel).

_BROWSER_FIXTURES = {"lab", "notebook7", "browser", "chromium_path", "nb", "nb7"}
_JUPYTER_FIXTURES = {"lab", "notebook7", "nb", "nb7", "host"}  # host: lab or notebook7, by parameter
_PG_FIXTURES = {"pg_url", "pg_store_url"}


def _uses_postgresql(item) -> bool:
    if _PG_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(
        v in ("postgresql", "postgres") for v in callspec.params.values() if isinstance(v, str)
    )


def _out_of_scope(item) -> bool:
    """A test of a class that its module's ``VARIANT_SCOPE`` does not run on this store variant."""
    scope = getattr(getattr(item, "module", None), "VARIANT_SCOPE", None)
    callspec = getattr(item, "callspec", None)
    if scope is None or callspec is None or item.cls is None:
        return False
    variant = callspec.params.get("store_variant")
    return variant in scope and item.cls.__name__ not in scope[variant]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    deselected = [item for item in items if _out_of_scope(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not _out_of_scope(item)]
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _BROWSER_FIXTURES:
            item.add_marker(pytest.mark.browser)
            if names & _JUPYTER_FIXTURES:
                item.add_marker(pytest.mark.xdist_group("browser"))
            else:  # Chromium alone starts once per module (its fixture's scope): one group per module
                item.add_marker(pytest.mark.xdist_group(f"browser-{item.module.__name__}"))
        if _uses_postgresql(item):
            item.add_marker(pytest.mark.postgres)


# Ctrl-C must reach the main thread as KeyboardInterrupt (test_analysis_stop presses it): a
# test that leaves SIGINT handled by anything but Python's default handler, or blocked, fails
# at its teardown, named, and what it found is put back so that the tests after it are not
# affected. (A suite started in the background of a shell starts with SIGINT ignored, which
# the Ctrl-C test sets aside for its own duration.)
@pytest.fixture(autouse=True)
def _ctrl_c_as_found():
    handler = signal.getsignal(signal.SIGINT)
    yield
    left = signal.getsignal(signal.SIGINT)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if (left is not handler and left is not signal.default_int_handler) or blocked:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        pytest.fail(f"the test left Ctrl-C {'blocked' if blocked else f'handled by {left!r}'} (put back)")


# Python's garbage collector scans every object it tracks at each full collection, some
# fifty times in a worker's run: the packages the tests import are most of them (litellm
# alone is some 375,000 objects, the agent SDKs and nbformat 100,000 each), and those
# scans were a sixth of the suite's CPU. What collection leaves is frozen (never scanned
# again), and so is what a test leaves after it imported more packages (they are imported
# when a test needs them): a full collection then scans what the tests made since.
_modules_frozen = 0


def _freeze() -> None:
    global _modules_frozen
    gc.collect(1)  # the young generations only: what the last test dropped
    gc.freeze()
    _modules_frozen = len(sys.modules)


def pytest_collection_finish(session):
    gc.collect()
    _freeze()


def pytest_runtest_logfinish(nodeid, location):
    if len(sys.modules) != _modules_frozen:
        _freeze()
