"""What one look at a store's change marker costs (``store.change_marker()``).

``sessionkit view`` keeps an open page live by asking the store for its change marker every
``--poll`` seconds (default 1) per open page. For each engine, a store of N messages (ten a
session, imported in one transaction) is asked for its marker many times, and the median is
set beside a raw ``SELECT 1`` through the same driver on a connection of its own (the least
a round trip to that database costs): sqlite3 on the same file, DuckDB in memory (the file is
held by the store), psycopg on the same server. A marker is two lookups at the end of a
primary key (SQLite, PostgreSQL) or one ``max(seq)`` and a counter (DuckDB): its cost must
not grow with the store.

    .venv/bin/python benchmarks/change_marker_bench.py                 # 100,000 messages
    .venv/bin/python benchmarks/change_marker_bench.py 1000000         # another size
    SESSIONKIT_PG_URL=postgresql://... adds PostgreSQL
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sessionkit as sk

LOOKS = 2000


def median_ms(fn: Callable[[], object], n: int = LOOKS) -> float:
    for _ in range(50):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def fill(store: sk.Store, messages: int) -> None:
    with store.transaction():
        for k in range(messages // 10):
            items = [
                (
                    {
                        "id": f"m{j}",
                        "role": "user" if j % 2 == 0 else "assistant",
                        "parts": [{"type": "text", "text": f"message {j} of session {k}"}],
                    },
                    f"m{j - 1}" if j else None,
                    None,
                )
                for j in range(10)
            ]
            store.session(f"s{k:06d}").import_many(items)


def raw(kind: str, target: str) -> Callable[[], object]:
    if kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(target)
        return lambda: con.execute("SELECT 1").fetchone()
    if kind == "duckdb":
        import duckdb

        con = duckdb.connect()
        return lambda: con.execute("SELECT 1").fetchone()
    import psycopg

    pcon = psycopg.connect(os.environ["SESSIONKIT_PG_URL"], autocommit=True)
    return lambda: pcon.execute("SELECT 1").fetchone()


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    folder = Path(tempfile.mkdtemp())
    targets = {"sqlite": str(folder / "m.db"), "duckdb": str(folder / "m.duckdb")}
    if os.environ.get("SESSIONKIT_PG_URL"):
        url = os.environ["SESSIONKIT_PG_URL"]
        targets["postgresql"] = url + ("&" if "?" in url else "?") + f"schema=bench_marker_{os.getpid()}"
    print(f"{'engine':>10} | {'messages':>9} | {'marker':>9} | {'SELECT 1':>9} | ratio")
    print("-" * 56)
    for kind, target in targets.items():
        with sk.open_store(target) as store:
            fill(store, messages)
            marker = median_ms(store.change_marker)
            base = median_ms(raw(kind, target))
            print(f"{kind:>10} | {messages:>9,} | {marker:>6.3f} ms | {base:>6.3f} ms | {marker / base:5.1f}x")
        if kind == "postgresql":
            import psycopg

            with psycopg.connect(os.environ["SESSIONKIT_PG_URL"], autocommit=True) as con:
                con.execute(f"DROP SCHEMA bench_marker_{os.getpid()} CASCADE")


if __name__ == "__main__":
    main()
