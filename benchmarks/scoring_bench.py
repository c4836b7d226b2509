"""Scorer overhead: ``store.score`` against calling the same scorer in a plain loop, measured in one run.

For each engine, the tau-bench airline trajectories of ``tests/data`` (OpenAI chats with
tool calls, imported with ``sk.io.import_openai``) are imported again under new session
ids until the store holds at least N turns (1,000 by default). Then, on each engine:

- ``loop``: the units of every turn are read once (the ``sk.scorers.Unit`` objects a
  scorer is handed) and the scorer is called on each in a plain ``for`` loop, its
  answers kept in a list: the scorer's own work and nothing else;
- ``score``: ``store.score(scorer, progress=False)`` on the same turns, a scorer that has
  labelled nothing yet: the view query, each unit's messages read from the store, the
  fingerprints, the scorer asked on worker threads and every answer written as a label;
- ``again``: the same ``store.score`` once more: every unit is read and fingerprinted, and
  only those the scorer answered None for (no label) are asked again.

Two scorers: the built-in ``sk.scorers.tool_error`` (labels the turns whose tool call
failed) and one that labels every turn (``seen``), to show what the label writes cost.
The overhead is the ``score`` time over the ``loop`` time, and per unit the difference.

    python benchmarks/scoring_bench.py                      # 1,000 turns, every engine
    python benchmarks/scoring_bench.py --turns 5000 --engines sqlite,duckdb

PostgreSQL runs when ``SESSIONKIT_PG_URL`` names a server (in a schema of its own, dropped after).
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

import sessionkit as sk  # noqa: E402

TAU = HERE.parent / "tests" / "data" / "gpt-4o-airline.json.gz"


def build(store, turns: int) -> int:
    """Import the tau-bench trajectories (again, under new ids) until ``turns`` turns are stored."""
    records = json.loads(gzip.decompress(TAU.read_bytes()))
    have, rnd = 0, 0
    while have < turns:
        for i, rec in enumerate(records):
            sk.io.import_openai(store.session(f"tau-{rnd}-{i}"), rec["traj"])
        rnd += 1
        have = store.sql("SELECT count(*) AS n FROM turns")["n"][0]
    return int(have)


@sk.scorers.scorer(name="seen", version=1)
def seen(unit):
    """Labels every unit (with its message count as the rating)."""
    return sk.Score("seen", rating=len(unit.messages))


def units_of(store, level: str = "turn") -> list:
    """The units ``store.score`` hands a scorer, read once (by a scorer that keeps them and labels nothing)."""
    got: list = []

    @sk.scorers.scorer(name="collect", version=1)
    def collect(unit):
        got.append(unit)

    store.score(collect, level=level, concurrency=1, progress=False)
    return got


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def plain_loop(scorer, units: list) -> list:
    return [scorer(u) for u in units]


def run(engine: str, url: str, turns: int) -> list[str]:
    store = sk.open_store(url)
    n = build(store, turns)
    units = units_of(store)
    rows = []
    for scorer in (sk.scorers.tool_error, seen):
        loop, answers = timed(plain_loop, scorer, units)
        first, counts = timed(store.score, scorer, progress=False)
        again, recount = timed(store.score, scorer, progress=False)
        labelled = sum(a is not None for a in answers)
        assert counts["units"] == recount["units"] == len(units) == n, (counts, recount, n)
        assert counts["labelled"] == labelled == recount["skipped"], (counts, recount, labelled)
        rows.append(
            f"| {engine} | `{scorer.name}` | {n:,} | {labelled:,} | {first / loop:,.0f}x |"
            f" {(first - loop) / n * 1e6:,.0f} us | {again / loop:,.0f}x |"
        )
    store.close()
    return rows


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--engines", default="sqlite,duckdb,postgresql")
    args = parser.parse_args()
    pg = os.environ.get("SESSIONKIT_PG_URL")
    print(
        "| engine | scorer | turns | labelled | score / loop | overhead per unit | score again / loop |\n"
        "|---|---|---:|---:|---:|---:|---:|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            if engine == "sqlite":
                url = str(Path(tmp) / "s.db")
            elif engine == "duckdb":
                url = str(Path(tmp) / "s.duckdb")
            elif engine == "postgresql":
                if not pg:
                    print(f"| {engine} | (SESSIONKIT_PG_URL not set: left out) |||||", flush=True)
                    continue
                # a schema of its own, dropped at the end
                url = pg + ("&" if "?" in pg else "?") + f"schema=bench_scoring_{os.getpid()}"
            else:
                raise SystemExit(f"unknown engine {engine!r}")
            try:
                for row in run(engine, url, args.turns):
                    print(row, flush=True)
            finally:
                if engine == "postgresql":
                    drop_schema(pg, f"bench_scoring_{os.getpid()}")


if __name__ == "__main__":
    main()
