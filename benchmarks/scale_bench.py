"""sessionkit's SQLite engine at scale: 1,000,000 messages appended one call at a time.

Two stores, each filled by ``session.append`` one message per call (one commit each):
one conversation of N messages, and N/100 sessions of 100 messages (appended round
robin, as a server with many live sessions would). For each it prints the append rate
over time (per tenth of the run), then the recent-20 window, search and full path read
latencies and the file size at the end. Raw sqlite3 on a minimal table does the same
appends in the same run for the rate ratio.

    python benchmarks/scale_bench.py                # N = 1,000,000 (about 10 minutes on 2 cores)
    python benchmarks/scale_bench.py --n 100000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "peers"))
sys.path.insert(0, str(HERE))

from store_bench import raw_open  # noqa: E402
from workload import message  # noqa: E402

import sessionkit as sk  # noqa: E402


def order(n: int, sessions: int):
    """(session id, message) in append order: one conversation, or round robin over sessions."""
    if sessions == 1:
        for i in range(n):
            yield "c", message(0, i)
        return
    per = n // sessions
    for i in range(per):
        for s in range(sessions):
            yield f"s{s}", message(s, i)


def run(tmp: Path, n: int, sessions: int) -> list[str]:
    store = sk.open_store(tmp / f"scale{sessions}.db")
    raw = raw_open(tmp / f"raw{sessions}.db")
    tenth = n // 10
    rates, raw_rates = [], []
    last_parent: dict[str, str] = {}
    t0 = time.perf_counter()
    sk_time = raw_time = 0.0
    for k, (sid, m) in enumerate(order(n, sessions), 1):
        t = time.perf_counter()
        store.session(sid).append(m)
        t2 = time.perf_counter()
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(
            "INSERT OR IGNORE INTO m(session_id, id, parent_id, content) VALUES (?,?,?,?)",
            (sid, m["id"], last_parent.get(sid), json.dumps(m)),
        )
        raw.execute("COMMIT")
        t3 = time.perf_counter()
        last_parent[sid] = m["id"]
        sk_time += t2 - t
        raw_time += t3 - t2
        if k % tenth == 0:
            rates.append(tenth / sk_time)
            raw_rates.append(tenth / raw_time)
            sk_time = raw_time = 0.0
            print(
                f"    {k:>9,}: {rates[-1]:,.0f}/s (raw {raw_rates[-1]:,.0f}/s)  [{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
    sid = "c" if sessions == 1 else f"s{sessions // 2}"
    s = store.session(sid)
    recent = statistics.median(_times(lambda: s.recent_history(0, min_messages=20), 50))
    path = statistics.median(_times(lambda: s.get_history(), 3 if sessions == 1 else 50))
    store.search("warmup")
    search = statistics.median(_times(lambda: store.search("database migration", limit=10), 5))
    size = sum(p.stat().st_size for p in tmp.glob(f"scale{sessions}.db*"))
    path_len = s.path_length()
    store.close()
    raw.close()
    label = "1 conversation" if sessions == 1 else f"{sessions:,} sessions of {n // sessions}"
    ratio = [a / b for a, b in zip(rates, raw_rates)]
    return [
        f"| {n:,} messages, {label} | "
        f"{rates[0]:,.0f} -> {rates[-1]:,.0f}/s ({min(ratio):.2f}-{max(ratio):.2f}x raw) | "
        f"{recent * 1000:.2f} ms | {search * 1000:.1f} ms | "
        f"{path * 1000:,.0f} ms ({path_len:,} msgs) | {size / n:,.0f} B |"
    ]


def _times(fn, k):
    out = []
    for _ in range(k):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    lines = []
    with tempfile.TemporaryDirectory(prefix="sk-scale-") as d:
        for sessions in (1, args.n // 100):
            print(f"  {args.n:,} appends into {sessions:,} session(s):", flush=True)
            lines += run(Path(d), args.n, sessions)
    print(
        "\n| store | append rate, first -> last tenth (ratio to raw sqlite3 per tenth) | recent 20 | "
        "search top 10 | full path read | file bytes per message |\n|---|---|---:|---:|---:|---:|"
    )
    print("\n".join(lines))
    print(f"\nsessionkit {sk.__version__}, {os.cpu_count()} cores, one append per commit, WAL synchronous=NORMAL")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
