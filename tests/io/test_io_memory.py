"""Importers stream: memory does not grow with the size of the file.

The budget is 200 MB for a 1,000,000-line file, 200 bytes a line. What an importer
holds is bounded by its size thresholds: a transaction groups a few hundred records, an
import returns a plain list of handles up to 10,000 sessions and then a packed
:class:`SessionList` (about 30 bytes a session), and the set of ids seen so far moves to a
temporary SQLite file past 50,000 ids. A million-line file runs past all of them; these
tests lower the thresholds tenfold and more, so that files of hundreds of lines run in that
same regime, and compare the peak of the Python allocations (``tracemalloc``: the same
for the same input however busy the machine) while importing a file and one twice its
size. A streaming importer stays under 80 bytes a line there; one keeping the records it
read takes 1,000 to 3,000.

The resident set of a real million-line import (SQLite's own memory included) is
measured by ``benchmarks/import_bench.py --memory`` (benchmarks/README.md).
"""

from __future__ import annotations

import gc
import importlib.util
import sys
import tracemalloc
from pathlib import Path

import pytest
from helpers import import_file

import sessionkit as sk

REPO = Path(__file__).resolve().parents[2]

#: the per-line share of the 200 MB budget of a million lines
BYTES_PER_LINE = 200
#: lines of the smaller file: past every lowered threshold (the last one reached, a
#: transaction's group of chat messages, by 270 lines)
LINES = 400


def _generators() -> dict:
    """benchmarks/import_bench.py's file generators: the same files as the benchmark."""
    name = "sessionkit_import_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "import_bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].GENERATORS


@pytest.fixture
def low_thresholds(monkeypatch):
    """The importers' size thresholds, lowered so that small files reach the bounded regime."""
    from sessionkit.io import _common, jsonl, openai

    monkeypatch.setitem(_common.Batches.__init__.__kwdefaults__, "group", 20)  # records per transaction
    monkeypatch.setattr(openai, "_BATCH", 50)  # chat messages per write (4 writes per transaction)
    monkeypatch.setattr(jsonl, "_BATCH", 10)  # message lines per write (20 writes per transaction)
    monkeypatch.setattr(_common, "LIST_UP_TO", 100)  # then the packed SessionList
    monkeypatch.setitem(_common.SessionList.__init__.__kwdefaults__, "spill", 100)  # then the id set on disk


def _check_returned(fmt: str, lines: int, result, store) -> None:
    """What the importer returned matches the store: every message (OpenAI) or every session,
    the file's last one last."""
    stats = store.stats()
    if fmt == "openai":
        assert len(result) == stats["messages"] and result[-1].message["id"].startswith("oai-")
        return
    assert len(result) == stats["sessions"]
    last = {
        "oasst": f"oasst-tree-{lines // 10 - 1}",
        "oasst-trees": f"oasst-tree-{lines - 1}",
        "jsonl": f"s{(lines - 2) // 100}",
    }.get(fmt)  # a JSONL export's first line is its header
    last_id = result[-1].session_id
    assert last_id == last if last else last_id.startswith("hh-")


def peak_growth(fmt: str, lines: int, folder: Path) -> int:
    """Bytes allocated at the peak of importing a generated file of ``lines`` lines into a new
    store, over what was allocated before (the importer's result included)."""
    path = folder / f"{fmt}-{lines}.jsonl"
    _generators()[fmt](path, lines)
    # an in-memory SQLite store: its pages are SQLite's allocations, which tracemalloc does not see
    with sk.open_store(":memory:") as store:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = import_file("oasst" if fmt.startswith("oasst") else fmt, store, path)
        peak = tracemalloc.get_traced_memory()[1]
        _check_returned(fmt, lines, result, store)
        assert store.stats()["messages"] >= lines // 2
    return peak - before


@pytest.fixture
def traced():
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    yield
    if started:
        tracemalloc.stop()


# the files of one session per line (HH, OASST trees) are the hard case and run in the fast suite
@pytest.mark.parametrize(
    "fmt", [*(pytest.param(f, marks=pytest.mark.slow) for f in ("openai", "oasst", "jsonl")), "hh", "oasst-trees"]
)
@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_peak_memory_does_not_grow_with_the_file(fmt, tmp_path, low_thresholds, traced):
    small = peak_growth(fmt, LINES, tmp_path)
    large = peak_growth(fmt, 2 * LINES, tmp_path)
    per_line = (large - small) / LINES
    assert per_line < BYTES_PER_LINE, f"{fmt}: the peak grew {per_line:.0f} bytes a line ({small=} {large=})"
