"""Fixtures for the import/export tests: stores, the sample data, a store holding it.

The engines come from the store matrix of tests/conftest.py (``engine``: SQLite, DuckDB,
PostgreSQL). Everything is a fixture (no helper imports), so the tests run under any pytest
import mode.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import sessionkit as sk

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


def pytest_collection_modifyitems(config, items):
    """The tests on the whole sample data (``loaded``) are slow, on every engine: the import
    takes seconds on SQLite and 20 s on DuckDB, reading 2,312 HH pairs back a minute there."""
    for item in items:
        if "loaded" in getattr(item, "fixturenames", ()) and HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture
def make_store(new_store):
    """``make_store(engine, folder=None, name="store")``: a fresh store, closed after the test:
    in memory without a folder (PostgreSQL: a fresh schema either way)."""

    def make(engine: str, folder: Path | None = None, name: str = "store"):
        return new_store(engine, memory=folder is None, folder=folder, name=name)

    return make


@pytest.fixture
def store(engine, make_store):
    return make_store(engine)


@pytest.fixture
def mem_store(new_store):
    """One in-memory SQLite store, for tests where the engine does not matter."""
    return new_store("sqlite", memory=True)


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


#: How much of each sample the DuckDB variant imports (None: all of it). Bulk imports batch
#: their writes on every engine, so DuckDB gets the whole files but HH's: the HH tests read
#: every pair back one session at a time, about 30 ms a pair on DuckDB (70 s for 2,312),
#: and a few hundred pairs exercise the same engine code (the whole file runs on SQLite and
#: PostgreSQL, which also check its counts).
DUCKDB_SAMPLE = {"oasst": None, "tau": None, "hh": 300}


@pytest.fixture(scope="session")
def loaded(engine, new_shared_store, oasst_path, oasst_trees, tau_records, hh_path, hh_records, tmp_path_factory):
    """A store per engine holding the samples (see DUCKDB_SAMPLE); tests must not change it.

    Keys: ``store``, ``engine``, the sessions ``oasst``, ``tau``, ``hh``, and the source
    records imported ``oasst_trees``, ``tau_records``, ``hh_records`` with ``full`` telling
    which samples were imported whole.
    """
    limits = DUCKDB_SAMPLE if engine == "duckdb" else {"oasst": None, "tau": None, "hh": None}
    folder = tmp_path_factory.mktemp(f"loaded-{engine}")
    trees = oasst_trees[: limits["oasst"]]
    tau = tau_records[: limits["tau"]]
    pairs = hh_records[: limits["hh"]]
    if limits["oasst"] is not None:
        oasst_path = folder / "oasst.jsonl"
        oasst_path.write_text("".join(json.dumps(t) + "\n" for t in trees), encoding="utf-8")
    if limits["hh"] is not None:
        hh_path = folder / "hh.jsonl"
        hh_path.write_text("".join(json.dumps(r) + "\n" for r in pairs), encoding="utf-8")
    s = new_shared_store(engine, memory=True)
    oasst = sk.io.import_oasst(s, oasst_path)
    tau_sessions = []
    for rec in tau:
        session = s.session(tau_session_id(rec))
        sk.io.import_openai(session, rec["traj"])
        tau_sessions.append(session)
    hh = sk.io.import_hh(s, hh_path)
    yield {
        "store": s,
        "engine": engine,
        "oasst": oasst,
        "tau": tau_sessions,
        "hh": hh,
        "oasst_trees": trees,
        "tau_records": tau,
        "hh_records": pairs,
        "oasst_path": oasst_path,
        "hh_path": hh_path,
        "full": {k: v is None for k, v in limits.items()},
    }
    s.close()
