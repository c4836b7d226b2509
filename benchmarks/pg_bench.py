"""sessionkit on PostgreSQL beside SQLite: appends and recent windows with 1, 2 and 4 writer processes.

Every writer process owns one conversation (a session) of the shared workload
(``benchmarks/peers/workload.py``: ~200-byte user turns, ~1 KB replies, a tool call with
a ~2 KB result every fifth message) and all writers share one store:

1. **appends**: all writers start together and append ``--messages`` messages each, one
   append per call (one transaction each, the latest leaf as parent); the rate is all
   appends divided by the time from the first start to the last finish.
2. **recent window**: the writers go on together, each alternating one append with one
   ``session.recent_history(32 KB)`` (what an agent loads before a model call); the
   latency of the reads is reported (median and 95th percentile, all writers pooled).

SQLite runs on a file in WAL mode with ``synchronous=NORMAL`` (sessionkit's default).
PostgreSQL runs on a throwaway local cluster with the server's defaults (``fsync=on``,
``synchronous_commit=on``: every commit waits for its WAL flush), and a second time with
``synchronous_commit=off`` set by the client in the URL (``?options=-c synchronous_commit=off``):
the closer match to SQLite's NORMAL, which also does not wait for the disk on commit.
The client and the server share this machine's cores.

    python benchmarks/pg_bench.py                 # 2,000 messages per writer
    python benchmarks/pg_bench.py --quick         # 400 per writer
    python benchmarks/pg_bench.py --url postgresql://user@host/db   # an existing server
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE / "peers"))

from workload import message  # noqa: E402  (benchmarks/peers/workload.py: the shared workload)

import sessionkit as sk  # noqa: E402

WINDOW_BYTES = 32_000


def _writer(target: str, conv: int, n: int, rounds: int, barrier, out) -> None:
    store = sk.open_store(target)
    session = store.session(f"c{conv}")
    first = [message(conv, i) for i in range(n)]
    second = [message(conv, i) for i in range(n, n + rounds)]
    session.recent_history(WINDOW_BYTES)  # connect and warm up before the clock
    barrier.wait()
    t0 = time.time()
    for m in first:
        session.append(m)
    t1 = time.time()
    barrier.wait()
    reads = []
    t2 = time.time()
    for m in second:
        session.append(m)
        r0 = time.perf_counter()
        window = session.recent_history(WINDOW_BYTES)
        reads.append(time.perf_counter() - r0)
        assert window.messages[-1]["id"] == m["id"]
    t3 = time.time()
    assert len(session) == n + rounds
    store.close()
    out.put((conv, t0, t1, t2, t3, reads))


def run(target_for, writers: int, n: int, rounds: int) -> dict:
    """Start ``writers`` processes on one store; return the append rate and read latencies."""
    ctx = mp.get_context("spawn")
    target = target_for()
    sk.open_store(target).close()  # create the schema outside the clock
    barrier = ctx.Barrier(writers)
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(target, w, n, rounds, barrier, out)) for w in range(writers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a writer failed (exit {p.exitcode})")
    start = min(r[1] for r in results)
    end = max(r[2] for r in results)
    reads = [x for r in results for x in r[5]]
    q = statistics.quantiles(reads, n=20)
    return {
        "rate": writers * n / (end - start),
        "p50": statistics.median(reads) * 1000,
        "p95": q[18] * 1000,
    }


def _with_query(url: str, **params: str) -> str:
    """``url`` with ``params`` appended to its query string (the rest kept as written)."""
    extra = "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in params.items())
    return url + ("&" if urllib.parse.urlsplit(url).query else "?") + extra


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2000, help="appends per writer in the append phase")
    ap.add_argument("--rounds", type=int, default=300, help="append+window rounds per writer")
    ap.add_argument("--writers", default="1,2,4", help="writer process counts (comma separated)")
    ap.add_argument("--quick", action="store_true", help="400 appends and 100 rounds per writer")
    ap.add_argument(
        "--url",
        default=os.environ.get("SESSIONKIT_PG_URL"),
        help="an existing PostgreSQL database (default: start a throwaway cluster)",
    )
    ap.add_argument("--out", help="also write the Markdown table to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = 400, 100
    counts = [int(x) for x in args.writers.split(",")]

    cluster = None
    url = args.url
    if not url:
        sys.path.insert(0, str(ROOT / "tests" / "store"))
        from pg_cluster import Cluster  # tests/store/pg_cluster.py

        cluster = Cluster(durable=True).start()
        url = cluster.url("postgres")
    tmp = tempfile.TemporaryDirectory(prefix="sk-pg-bench-")
    names = iter(range(1_000_000))

    def sqlite_target():
        return str(Path(tmp.name) / f"bench{next(names)}.db")

    def pg_target(**params):
        return lambda: _with_query(url, schema=f"bench_{os.getpid()}_{next(names)}", **params)

    engines = [
        ("SQLite (WAL, synchronous=NORMAL)", sqlite_target),
        ("PostgreSQL (synchronous_commit=on)", pg_target()),
        ("PostgreSQL (synchronous_commit=off)", pg_target(options="-c synchronous_commit=off")),
    ]
    import psycopg

    with psycopg.connect(url) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
    print(
        f"sessionkit {sk.__version__}, PostgreSQL {server}, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores; {args.messages} appends + {args.rounds} "
        f"append/window rounds per writer",
        flush=True,
    )
    results: dict[tuple[str, int], dict] = {}
    try:
        for writers in counts:
            for name, target_for in engines:
                r = run(target_for, writers, args.messages, args.rounds)
                results[(name, writers)] = r
                print(
                    f"  {writers} writer(s), {name}: {r['rate']:,.0f} appends/s, recent window "
                    f"p50 {r['p50']:.2f} ms, p95 {r['p95']:.2f} ms",
                    flush=True,
                )
    finally:
        tmp.cleanup()
        if cluster is not None:
            cluster.stop()

    base = engines[0][0]
    lines = [
        "| writers | engine | appends/s | vs SQLite | recent window p50 | p95 | p50 vs SQLite |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for writers in counts:
        ref = results[(base, writers)]
        for name, _ in engines:
            r = results[(name, writers)]
            lines.append(
                f"| {writers} | {name} | {r['rate']:,.0f} | {r['rate'] / ref['rate']:.2f}x | "
                f"{r['p50']:.2f} ms | {r['p95']:.2f} ms | {r['p50'] / ref['p50']:.2f}x |"
            )
    md = "\n".join(lines)
    print()
    print(md)
    if args.out:
        Path(args.out).write_text(md + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
