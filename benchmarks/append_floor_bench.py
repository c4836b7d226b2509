"""How fast a SQLite append can be with the keys a session store must keep.

`peers/run.py` compares the SQLite engine's appends with raw sqlite3 writing the peers'
minimal table: a row of (conversation, seq, JSON) and one index on (conversation, seq).
The engine's table keeps one more key: ``(session_id, id)``, unique, which makes an append
with a known id idempotent and finds a parent by its id. This script measures what that
key alone costs, in raw sqlite3 with no Python of sessionkit's, beside the engine:

- ``raw``: the peers' raw table (two b-trees: the rows, the (conversation, seq) index);
- ``raw + id key``: the same table with a text ``id`` column and a unique index on
  (conversation, id), as the engine keeps: three b-trees;
- ``engine's table``: raw sqlite3 writing rows with a plain ``INSERT`` into a store file
  that ``open_store`` made: the engine's columns and all its indexes, none of its Python.
  Each row's columns are computed beforehand (by ``messages.prepare``, outside the
  timing) but its JSON, which ``json.dumps`` writes in the loop as on the raw sides;
- ``sessionkit``: ``session.append`` on a new store.

It also times ``sessionkit.messages.prepare`` alone over the same messages: the checks and
encoding every append does before its statement (validation, the JSON, the token estimate,
the analysis columns), which raw's ``json.dumps`` does not.

Every side writes the same messages (peers/workload.py), one per commit, into a new file
in each round; the sides take turns, and each ratio is to ``raw`` in the same round
(medians over the rounds). Run at the engine's default durability (WAL, NORMAL) and at
``--durability full`` (WAL, FULL).

    python benchmarks/append_floor_bench.py [--n 10000] [--rounds 3] [--durability normal|full]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import workload  # noqa: E402

import sessionkit as sk  # noqa: E402
from sessionkit import messages  # noqa: E402


def _raw(with_key: bool, sync: str) -> Callable[[Path, list[dict]], float]:
    def run(path: Path, msgs: list[dict]) -> float:
        db = sqlite3.connect(str(path), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={sync}")
        db.execute("CREATE TABLE msgs (conv TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, data TEXT NOT NULL)")
        db.execute("CREATE UNIQUE INDEX msgs_conv_seq ON msgs(conv, seq)")
        if with_key:
            db.execute("CREATE UNIQUE INDEX msgs_conv_id ON msgs(conv, id)")
        conv = str(uuid.uuid4())
        sql = "INSERT INTO msgs (conv, seq, id, data) VALUES (?, ?, ?, ?)"
        start = time.perf_counter()
        for i, m in enumerate(msgs):
            db.execute(sql, (conv, i, m["id"], json.dumps(m)))
        elapsed = time.perf_counter() - start
        db.close()
        return elapsed

    return run


_COLUMNS = (
    "session_id, id, parent_id, depth, role, created_at, bytes, tokens, path_bytes, path_tokens,"
    " chunks, branch, text, n_parts, tool_names, metadata, content"
)


def _engine_table(sync: str) -> Callable[[Path, list[dict]], float]:
    def run(path: Path, msgs: list[dict]) -> float:
        sk.open_store(str(path)).close()  # the engine's schema, as a new store has it
        sid = str(uuid.uuid4())
        rows, parent, path_bytes, path_tokens = [], None, 0, 0
        for depth, m in enumerate(msgs):
            p = messages.prepare(m)
            path_bytes, path_tokens = path_bytes + p.bytes, path_tokens + p.tokens
            rows.append(
                (sid, p.id, parent, depth, p.role, p.created_at, p.bytes, p.tokens, path_bytes, path_tokens)
                + (0, 0, None, p.n_parts, p.tool_names, p.metadata)
            )
            parent = p.id
        db = sqlite3.connect(str(path), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={sync}")
        db.execute("PRAGMA wal_autocheckpoint=8192")  # the engine's
        sql = f"INSERT INTO sessionkit_messages ({_COLUMNS}) VALUES ({', '.join('?' * 17)})"
        start = time.perf_counter()
        for row, m in zip(rows, msgs, strict=True):
            db.execute(sql, (*row, json.dumps(m)))
        elapsed = time.perf_counter() - start
        db.close()
        return elapsed

    return run


def _sessionkit(durability: str) -> Callable[[Path, list[dict]], float]:
    def run(path: Path, msgs: list[dict]) -> float:
        opts = {"durability": "full"} if durability == "full" else {}
        store = sk.open_store(str(path), **opts)
        session = store.session(str(uuid.uuid4()))
        start = time.perf_counter()
        for m in msgs:
            session.append(m)
        elapsed = time.perf_counter() - start
        store.close()
        return elapsed

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000, help="messages per side and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--durability", choices=("normal", "full"), default="normal")
    args = ap.parse_args()
    sync = args.durability.upper()
    msgs = workload.conversation(0, args.n)
    sides = {
        "raw": _raw(False, sync),
        "raw + id key": _raw(True, sync),
        "engine's table": _engine_table(sync),
        "sessionkit": _sessionkit(args.durability),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    prepare_us: list[float] = []
    raw_us: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            times = {}
            for k, (name, run) in enumerate(sides.items()):
                times[name] = run(Path(tmp) / f"r{r}-{k}.db", msgs)
                rates[name].append(args.n / times[name])
            for name in sides:
                ratios[name].append(times["raw"] / times[name])
            start = time.perf_counter()
            for m in msgs:
                messages.prepare(m)
            prepare_us.append((time.perf_counter() - start) / args.n * 1e6)
            raw_us.append(times["raw"] / args.n * 1e6)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in sides), flush=True)
    print(f"\n{args.n:,} messages, one per commit, WAL, synchronous={sync}; medians of {args.rounds} rounds")
    print("| side | msg/s | ratio to raw |\n|---|---:|---:|")
    for name in sides:
        print(f"| {name} | {statistics.median(rates[name]):,.0f} | {statistics.median(ratios[name]):.2f}x |")
    prep, raw = statistics.median(prepare_us), statistics.median(raw_us)
    print(f"\nmessages.prepare alone: {prep:.1f} us a message, {prep / raw:.0%} of raw's whole append ({raw:.1f} us)")


if __name__ == "__main__":
    main()
