"""Fixtures for the analysis tests: stores, matplotlib set up headless, a store of real data.

The engines come from the store matrix of tests/conftest.py (``engine``: SQLite, DuckDB,
PostgreSQL). Everything is a fixture (no helper imports), so the tests run under any pytest
import mode.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

import pytest

# matplotlib must never touch the user's config folder nor open a window in tests
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="sessionkit-mpl-"))
os.environ["MPLBACKEND"] = "Agg"

import sessionkit as sk

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The tests on the sample data (``real``) are slow, on every engine: the import takes
    seconds. Those of one engine form one pytest-xdist group, so one worker imports its
    store (a session fixture) instead of each."""
    for item in items:
        if "real" in getattr(item, "fixturenames", ()) and HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
            engine = getattr(item, "callspec", None) and item.callspec.params.get("engine")
            item.add_marker(pytest.mark.xdist_group(f"analysis-real-{engine}"))


#: How much of each source the DuckDB variant imports (None: all of it). DuckDB takes about a
#: millisecond a statement, and the tau-bench import writes session by session: its whole
#: files would take some 20 s on DuckDB alone. Every tree, 60 trajectories (whose most called
#: tools are still unique) and 500 pairs (HH imports commit 200 at a time) cover the same cases.
DUCKDB_SAMPLE = {"oasst": None, "tau": 60, "hh": 500}
#: What the ``sample`` store holds of each source.
SAMPLE = {"oasst": 10, "tau": 10, "hh": 30}


@pytest.fixture
def store(engine, new_store):
    """An empty store of each engine (in memory where the engine has it)."""
    return new_store(engine, memory=True)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    if "matplotlib.pyplot" in __import__("sys").modules:
        import matplotlib.pyplot as plt

        plt.close("all")


@pytest.fixture(scope="session")
def sources() -> dict:
    """The three source files, parsed."""
    with open(DATA / "en_100_tree.jsonl", encoding="utf-8") as fh:
        oasst = [json.loads(line) for line in fh if line.strip()]
    with gzip.open(DATA / "gpt-4o-airline.json.gz", "rt", encoding="utf-8") as fh:
        tau = json.load(fh)
    with gzip.open(DATA / "hh-rlhf-harmless-base-test.jsonl.gz", "rt", encoding="utf-8") as fh:
        hh = [json.loads(line) for line in fh if line.strip()]
    return {"oasst": oasst, "tau": tau, "hh": hh}


def _import(store, sources: dict, limits: dict, folder: Path) -> dict:
    """Imports the first ``limits[k]`` records of each source (None: all); returns them."""
    picked = {k: sources[k][: limits[k]] for k in ("oasst", "tau", "hh")}
    oasst_path = folder / "oasst.jsonl"
    oasst_path.write_text("".join(json.dumps(t) + "\n" for t in picked["oasst"]), encoding="utf-8")
    sk.io.import_oasst(store, oasst_path)
    for rec in picked["tau"]:
        sk.io.import_openai(store.session(f"tau-{rec['task_id']}-{rec['trial']}"), rec["traj"])
    if picked["hh"]:
        hh_path = folder / "hh.jsonl"
        hh_path.write_text("".join(json.dumps(r) + "\n" for r in picked["hh"]), encoding="utf-8")
        sk.io.import_hh(store, hh_path)
    return picked


@pytest.fixture(scope="session")
def real(engine, new_shared_store, sources, tmp_path_factory):
    """A store per engine with OASST trees, tau-bench trajectories and HH pairs (see DUCKDB_SAMPLE).

    Returns ``{"store", "engine", "oasst", "tau", "hh"}``, the last three being the source
    records that were imported.
    """
    limits = DUCKDB_SAMPLE if engine == "duckdb" else {"oasst": None, "tau": None, "hh": None}
    s = new_shared_store(engine, memory=True)
    picked = _import(s, sources, limits, tmp_path_factory.mktemp(f"real-{engine}"))
    yield {"store": s, "engine": engine, **picked}
    s.close()


@pytest.fixture
def sample(engine, new_store, sources, tmp_path):
    """Like ``real``, with a few records of each source (``SAMPLE``): every kind of tree the
    real data has, in a store small enough to read session by session."""
    s = new_store(engine, memory=True)
    picked = _import(s, sources, SAMPLE, tmp_path)
    return {"store": s, "engine": engine, **picked}
