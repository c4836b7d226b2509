"""Importers stream: memory does not grow with the size of the file.

Each import runs in a process of its own writing a SQLite file; the measure is the growth
of its peak resident set (``VmHWM``) over its size just before the import. The target
is under 200 MB for a 1,000,000-line file; these tests import a proportional share (20,000
lines in the fast suite, 100,000 in the slow one) against the same share of the budget.
``benchmarks/import_bench.py --memory`` measures the full million (benchmarks/README.md).

Files of one session per line (HH pairs, OASST trees) are the hard case: the store holds
no handle of a session once it is dropped, and the importer returns the sessions as a
packed :class:`SessionList` (about 30 bytes each), finding repeated ids in a set that
moves to a temporary SQLite file past 50,000 ids.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench():
    """benchmarks/import_bench.py: the same file generators and measuring process as the benchmark."""
    name = "sessionkit_import_bench"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "import_bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def peak_growth(fmt: str, lines: int, folder: Path) -> dict:
    bench = _bench()
    path = folder / f"{fmt}.jsonl"
    bench.GENERATORS[fmt](path, lines)
    return bench.measure_import(fmt, path, folder / f"{fmt}.db", repo=REPO)


def _check_returned(fmt: str, lines: int, got: dict) -> None:
    """What the importer returned matches the store: every message (OpenAI) or every session, the
    file's last one last."""
    if fmt == "openai":
        assert got["returned"] == got["messages"] and got["last"].startswith("oai-"), got
        return
    assert got["returned"] == got["sessions"], got
    last = {"oasst": f"oasst-tree-{lines // 10 - 1}", "oasst-trees": f"oasst-tree-{lines - 1}",
            "jsonl": f"s{(lines - 2) // 100}"}.get(fmt)  # its first line is the export's header
    assert got["last"] == last if last else got["last"].startswith("hh-"), got


def _budget(lines: int) -> float:
    """The share of 200 MB for 1,000,000 lines, plus 4 MB for what does not scale (caches, code)."""
    return 200 * lines / 1_000_000 + 4


@pytest.mark.skipif(sys.platform != "linux", reason="reads the peak resident set from /proc/self/status")
@pytest.mark.parametrize("fmt", ["openai", "oasst", "jsonl", "hh"])
def test_peak_memory_of_20000_lines(fmt, tmp_path):
    got = peak_growth(fmt, 20_000, tmp_path)
    _check_returned(fmt, 20_000, got)
    assert got["messages"] > 10_000
    assert got["growth_mb"] < _budget(20_000), got


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="reads the peak resident set from /proc/self/status")
@pytest.mark.parametrize("fmt", ["openai", "oasst", "jsonl", "hh", "oasst-trees"])
def test_peak_memory_of_100000_lines(fmt, tmp_path):
    got = peak_growth(fmt, 100_000, tmp_path)
    _check_returned(fmt, 100_000, got)
    assert got["messages"] > 50_000
    assert got["growth_mb"] < _budget(100_000), got
