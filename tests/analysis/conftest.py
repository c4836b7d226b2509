"""Fixtures for the analysis tests: engines, matplotlib set up headless, a store of real data.

Everything is a fixture (no helper imports), so the tests run under any pytest import mode.
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

import sessionkit as sk  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data"


# The DuckDB engine ships with the package: a broken import must fail the run, not skip.
ENGINES = [pytest.param("sqlite", id="sqlite"), pytest.param("duckdb", id="duckdb")]

#: How much of each sample the DuckDB variant imports (None: all of it): bulk imports batch
#: their writes on every engine, so both engines get the whole files.
DUCKDB_SAMPLE = {"oasst": None, "tau": None, "hh": None}


def _open(engine: str):
    return sk.open_store(":memory:" if engine == "sqlite" else "duckdb:///:memory:")


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    return request.param


@pytest.fixture
def store(engine):
    with _open(engine) as s:
        yield s


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


@pytest.fixture(scope="session", params=ENGINES)
def real(request, sources, tmp_path_factory):
    """A store per engine with OASST trees, tau-bench trajectories and HH pairs (see DUCKDB_SAMPLE).

    Returns ``{"store", "engine", "oasst", "tau", "hh"}``, the last three being the source
    records that were imported.
    """
    engine = request.param
    limits = DUCKDB_SAMPLE if engine == "duckdb" else {"oasst": None, "tau": None, "hh": None}
    folder = tmp_path_factory.mktemp(f"real-{engine}")
    picked = {k: sources[k][: limits[k]] for k in ("oasst", "tau", "hh")}
    s = _open(engine)
    oasst_path = folder / "oasst.jsonl"
    oasst_path.write_text("".join(json.dumps(t) + "\n" for t in picked["oasst"]), encoding="utf-8")
    sk.io.import_oasst(s, oasst_path)
    for rec in picked["tau"]:
        sk.io.import_openai(s.session(f"tau-{rec['task_id']}-{rec['trial']}"), rec["traj"])
    if picked["hh"]:
        hh_path = folder / "hh.jsonl"
        hh_path.write_text("".join(json.dumps(r) + "\n" for r in picked["hh"]), encoding="utf-8")
        sk.io.import_hh(s, hh_path)
    yield {"store": s, "engine": engine, **picked}
    s.close()
