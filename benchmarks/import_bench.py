"""Bulk import and analysis on each engine, measured in one run.

Rows: importing the tau-bench airline trajectories (OpenAI chat format, 200
trajectories, 5,308 messages) with ``sk.io.import_openai``; importing N synthetic
messages (1,000,000 by default: 10,000 sessions of 100, the shared workload of
``benchmarks/peers/workload.py``) with batched writes; and one analysis query
(messages and tokens per role, plus the deepest path) over them with
``store.sql`` (DuckDB SQL over the store's views).

    python benchmarks/import_bench.py              # 1,000,000 messages
    python benchmarks/import_bench.py --n 100000   # quicker
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "peers"))

from workload import message  # noqa: E402

import sessionkit as sk  # noqa: E402

TAU = HERE.parent / "tests" / "data" / "gpt-4o-airline.json.gz"
QUERY = """
SELECT role, count(*) AS messages, sum(tokens) AS tokens, max(depth) + 1 AS deepest_path
FROM messages GROUP BY role ORDER BY messages DESC
"""


def tau_import(store) -> tuple[int, float]:
    records = json.loads(gzip.decompress(TAU.read_bytes()))
    t = time.perf_counter()
    for i, rec in enumerate(records):
        sk.io.import_openai(store.session(f"tau-{rec['task_id']}-{rec['trial']}-{i}"), rec["traj"])
    return sum(len(r["traj"]) for r in records), time.perf_counter() - t


def synthetic_import(store, n: int, per_session: int = 100) -> float:
    t = time.perf_counter()
    for conv in range(n // per_session):
        parent = None
        batch = []
        for i in range(per_session):
            m = message(conv, i)
            batch.append((m, parent, None))
            parent = m["id"]
        store.session(f"s{conv}").import_many(batch)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="synthetic messages (default 1,000,000)")
    ap.add_argument("--engines", default="sqlite,duckdb")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sk-import-") as d:
        for engine in args.engines.split(","):
            ext = {"sqlite": "db", "duckdb": "duckdb"}[engine]
            store = sk.open_store(Path(d) / f"tau.{ext}")
            n_tau, t_tau = tau_import(store)
            store.close()
            store = sk.open_store(Path(d) / f"big.{ext}")
            t_big = synthetic_import(store, args.n)
            size = sum(p.stat().st_size for p in Path(d).glob(f"big.{ext}*"))
            t = time.perf_counter()
            df = store.sql(QUERY)
            t_q = time.perf_counter() - t
            assert int(df["messages"].sum()) == args.n
            store.close()
            rows.append((engine, n_tau / t_tau, args.n / t_big, t_q, size / args.n))
            print(f"  {engine}: tau {n_tau / t_tau:,.0f} msg/s, synthetic {args.n / t_big:,.0f} msg/s, "
                  f"query {t_q:.1f} s, {size / args.n:,.0f} B/msg", flush=True)
            for p in Path(d).iterdir():
                p.unlink()
    base = rows[0]
    print(f"\n| engine | tau-bench import | {args.n:,} synthetic messages import | analysis query over "
          f"{args.n:,} | file bytes per message |\n|---|---:|---:|---:|---:|")
    for engine, a, b, q, s in rows:
        print(f"| {engine} | {a:,.0f} msg/s ({a / base[1]:.2f}x) | {b:,.0f} msg/s ({b / base[2]:.2f}x) | "
              f"{q:.1f} s ({q / base[3]:.2f}x) | {s:,.0f} B ({s / base[4]:.2f}x) |")
    print(f"\nsessionkit {sk.__version__}, {os.cpu_count()} cores; ratios are against the first engine.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
