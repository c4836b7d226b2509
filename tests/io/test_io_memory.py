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

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORDS = "the to and a of is in that it flight booking seat refund order deploy server error retry cache".split()


def _text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def gen_openai(path: Path, lines: int) -> None:
    rng = random.Random(1)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            k = i % 4
            if k == 0:
                rec = {"role": "user", "content": _text(rng, 30)}
            elif k == 1:
                rec = {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function",
                       "function": {"name": "search", "arguments": json.dumps({"q": _text(rng, 3)})}}]}
            elif k == 2:
                rec = {"role": "tool", "tool_call_id": f"call_{i - 1}", "content": _text(rng, 40)}
            else:
                rec = {"role": "assistant", "content": _text(rng, 60)}
            out.write(json.dumps(rec) + "\n")


def gen_oasst(path: Path, lines: int) -> None:
    """Flat messages, trees of 10."""
    rng = random.Random(2)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            tree, k = divmod(i, 10)
            parent = None if k == 0 else f"{tree}-{(k - 1) // 2}"
            out.write(json.dumps({"message_id": f"{tree}-{k}", "parent_id": parent,
                                  "message_tree_id": f"tree-{tree}", "role": "prompter" if k % 2 == 0 else "assistant",
                                  "text": _text(rng, 40), "created_date": "2023-02-05T10:00:00Z"}) + "\n")


def gen_oasst_trees(path: Path, lines: int) -> None:
    rng = random.Random(3)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            prompt = {"message_id": f"{i}-0", "role": "prompter", "text": _text(rng, 25), "replies": [
                {"message_id": f"{i}-1", "role": "assistant", "text": _text(rng, 25), "replies": []}]}
            out.write(json.dumps({"message_tree_id": f"t{i}", "prompt": prompt}) + "\n")


def gen_hh(path: Path, lines: int) -> None:
    rng = random.Random(4)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            head = f"\n\nHuman: {_text(rng, 15)} {i}"
            out.write(json.dumps({"chosen": head + f"\n\nAssistant: {_text(rng, 30)}",
                                  "rejected": head + f"\n\nAssistant: {_text(rng, 30)}"}) + "\n")


def gen_jsonl(path: Path, lines: int) -> None:
    """A sessionkit export: sessions of 100 messages."""
    rng = random.Random(5)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            sid, k = divmod(i, 100)
            msg = {"id": f"m{k}", "role": "user", "parts": [{"type": "text", "text": _text(rng, 40)}]}
            out.write(json.dumps({"type": "message", "session_id": f"s{sid}",
                                  "parent_id": None if k == 0 else f"m{k - 1}", "message": msg}) + "\n")


GENERATORS = {"openai": gen_openai, "oasst": gen_oasst, "oasst-trees": gen_oasst_trees, "hh": gen_hh,
              "jsonl": gen_jsonl}

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import sessionkit as sk
import sessionkit.io


def rss(field):
    # kB from /proc/self/status: VmHWM is the peak of this process image (ru_maxrss also
    # counts the parent's peak, inherited across fork and exec)
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


fmt, path, db = sys.argv[2], sys.argv[3], sys.argv[4]
store = sk.open_store(db)
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak starts again from the current size
    before = rss("VmRSS")
except OSError:
    before = rss("VmHWM")
t = time.perf_counter()
if fmt == "openai":
    result = sk.io.import_openai(store.session("chat"), path)
elif fmt.startswith("oasst"):
    result = sk.io.import_oasst(store, path)
else:
    result = getattr(sk.io, "import_" + fmt)(store, path)
seconds = time.perf_counter() - t
peak = rss("VmHWM")
stats = store.stats()
returned = len(result)
last = result[-1]
last = last.message["id"] if fmt == "openai" else last.session_id
store.close()
print(json.dumps({"growth_mb": (peak - before) / 1024, "messages": stats["messages"], "sessions": stats["sessions"],
                  "returned": returned, "last": last}))
"""


def peak_growth(fmt: str, lines: int, folder: Path) -> dict:
    path = folder / f"{fmt}.jsonl"
    GENERATORS[fmt](path, lines)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(REPO), fmt, str(path), str(folder / f"{fmt}.db")],
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check_returned(fmt: str, lines: int, got: dict) -> None:
    """What the importer returned matches the store: every message (OpenAI) or every session, the
    file's last one last."""
    if fmt == "openai":
        assert got["returned"] == got["messages"] and got["last"].startswith("oai-"), got
        return
    assert got["returned"] == got["sessions"], got
    last = {"oasst": f"oasst-tree-{lines // 10 - 1}", "oasst-trees": f"oasst-t{lines - 1}",
            "jsonl": f"s{(lines - 1) // 100}"}.get(fmt)
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
