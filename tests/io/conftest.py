"""Fixtures for the import/export tests: engines, the sample data, a store holding it.

Everything is a fixture (no helper imports), so the tests run under any pytest import mode.
"""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path

import pytest

import sessionkit as sk

DATA = Path(__file__).resolve().parent.parent / "data"


def _duckdb_engine_missing() -> str | None:
    try:
        importlib.import_module("sessionkit.store.duckdb")
    except ImportError as exc:
        return f"the DuckDB engine (sessionkit.store.duckdb) is not available yet: {exc}"
    return None


_NO_DUCKDB = _duckdb_engine_missing()

ENGINES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("duckdb", id="duckdb", marks=pytest.mark.skipif(_NO_DUCKDB is not None, reason=_NO_DUCKDB or "")),
]


def _open(engine: str, folder: Path | None = None, name: str = "store"):
    if engine == "sqlite":
        return sk.open_store(":memory:" if folder is None else folder / f"{name}.db")
    return sk.open_store("duckdb:///:memory:" if folder is None else folder / f"{name}.duckdb")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def duckdb_missing() -> str | None:
    """Why the DuckDB engine cannot be used, or None when it can."""
    return _NO_DUCKDB


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    return request.param


@pytest.fixture
def make_store():
    """``make_store(engine, folder=None, name="store")``: a fresh store, closed after the test."""
    opened = []

    def make(engine: str, folder: Path | None = None, name: str = "store"):
        s = _open(engine, folder, name)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(engine, make_store):
    return make_store(engine)


@pytest.fixture(scope="session")
def oasst_path() -> Path:
    return DATA / "en_100_tree.jsonl"


@pytest.fixture(scope="session")
def tau_path() -> Path:
    return DATA / "gpt-4o-airline.json.gz"


@pytest.fixture(scope="session")
def hh_path() -> Path:
    return DATA / "hh-rlhf-harmless-base-test.jsonl.gz"


@pytest.fixture(scope="session")
def oasst_trees(oasst_path) -> list[dict]:
    with open(oasst_path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="session")
def tau_records(tau_path) -> list[dict]:
    with gzip.open(tau_path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="session")
def hh_records(hh_path) -> list[dict]:
    with gzip.open(hh_path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def tau_session_id(rec: dict) -> str:
    return f"tau-{rec['task_id']}-{rec['trial']}"


@pytest.fixture(scope="session")
def tau_sid():
    """``tau_sid(record)``: the session id a tau-bench trajectory is imported into."""
    return tau_session_id


@pytest.fixture(scope="module", params=ENGINES)
def loaded(request, oasst_path, tau_records, hh_path):
    """A store per engine holding all three samples; tests must not change it."""
    s = _open(request.param)
    oasst = sk.io.import_oasst(s, oasst_path)
    tau = []
    for rec in tau_records:
        session = s.session(tau_session_id(rec))
        sk.io.import_openai(session, rec["traj"])
        tau.append(session)
    hh = sk.io.import_hh(s, hh_path)
    yield {"store": s, "engine": request.param, "oasst": oasst, "tau": tau, "hh": hh}
    s.close()
