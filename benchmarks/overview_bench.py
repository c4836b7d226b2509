"""How long the viewer's overview takes on a store of 100,000 sessions (or the sizes given).

For each size, a SQLite store is built from a sessionkit JSONL file: every session a user
message and an assistant reply, written over 30 days; every tenth reply calls a tool (a
``bash`` call with its result in the part, one in five of them an error); every twentieth
session gets a label with a rating. The script times :func:`sessionkit.analysis.overview_data`
(what ``GET /api/overview`` answers and a bundle writes: one SQL query per figure over the
views) in this process, and gives it as a ratio to a raw query of the same store,
``store.sql("SELECT count(*) FROM sessions")`` (warm). "cold" is the first overview after the
store was opened and its analysis views filled by the raw count; "warm" the median of five more.

    .venv/bin/python benchmarks/overview_bench.py            # 100,000 sessions
    .venv/bin/python benchmarks/overview_bench.py 10000      # other sizes
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from jsonl_store import build_store, timed

import sessionkit as sk
from sessionkit.analysis import overview_data


def _messages(n: int) -> Iterator[tuple[str, str | None, dict]]:
    for k in range(n):
        sid = f"s{k:06d}"
        at = f"2026-11-{1 + k % 30:02d}T{k % 24:02d}:00:00.000Z"
        yield (
            sid,
            None,
            {"id": "u", "role": "user", "createdAt": at, "parts": [{"type": "text", "text": f"question {k}"}]},
        )
        parts: list[dict] = [{"type": "text", "text": f"answer {k}"}]
        if k % 10 == 0:
            state = "output-error" if k % 50 == 0 else "output-available"
            part = {"type": "tool-bash", "toolCallId": f"c{k}", "state": state, "input": {"command": "ls"}}
            part.update({"errorText": "Error: denied"} if state == "output-error" else {"output": "a b"})
            parts.append(part)
        yield sid, "u", {"id": "a", "role": "assistant", "createdAt": at, "parts": parts}


def build(path: Path, n: int) -> None:
    with build_store(path, _messages(n)) as store, store.transaction():
        for k in range(0, n, 20):
            store.add_label(f"s{k:06d}", "a", "good" if k % 3 else "bad", rating=float(k % 5))


def measure(n: int, folder: Path) -> dict:
    path = folder / f"overview-{n}.db"
    t_build = timed(lambda: build(path, n))
    with sk.open_store(path) as store:
        store.sql("SELECT count(*) AS n FROM sessions")  # fill the analysis views once
        raw = statistics.median(timed(lambda: store.sql("SELECT count(*) AS n FROM sessions")) for _ in range(5))
        got: dict = {}
        cold = timed(lambda: got.update(overview_data(store)))
        warm = statistics.median(timed(lambda: overview_data(store)) for _ in range(5))
    assert got["totals"]["sessions"] == n and got["totals"]["tool_calls"] == (n + 9) // 10, got["totals"]
    return {"sessions": n, "build_s": t_build, "raw_ms": raw * 1e3, "cold_ms": cold * 1e3, "warm_ms": warm * 1e3}


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [100_000]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, Path(tmp)) for n in sizes]
    print(f"{'sessions':>9} | {'raw count':>9} | {'overview cold':>18} | {'overview warm':>18}")
    print("-" * 64)
    for r in rows:
        raw = r["raw_ms"]

        def cell(ms: float, raw: float = raw) -> str:
            return f"{ms:8.1f} ms {ms / raw:5.1f}x"

        print(f"{r['sessions']:>9,} | {raw:6.1f} ms | {cell(r['cold_ms']):>18} | {cell(r['warm_ms']):>18}")
    print(
        "(ratios: against the raw store.sql count of the same store, warm; build: "
        + ", ".join(f"{r['sessions']:,}: {r['build_s']:.0f} s" for r in rows)
        + ")"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
