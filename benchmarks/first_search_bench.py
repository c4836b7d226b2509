#!/usr/bin/env python3
"""The first search of a store (it builds the full-text index) against raw FTS5 building
an index of the same texts, on the SQLite engine.

    python benchmarks/first_search_bench.py [--sessions 100000] [--rounds 3]

A store of ``--sessions`` two-message sessions (the peer workload's messages) is written
once and copied; each round times, in turns, raw sqlite3 inserting every message's text
into an FTS5 table of the same tokenizer (``unicode61 remove_diacritics 0``) and the first
``store.search`` on a fresh copy, once with the store's stemming as it is and once with the
word-by-word stemming it replaced (``--no-before`` leaves that out), then the nine searches
after it on the store as it is (a store this large fills its search window in the first
eight). Medians of the rounds.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's sessionkit
sys.path.insert(0, str(HERE / "peers"))

import workload  # noqa: E402

import sessionkit as sk  # noqa: E402
from sessionkit.store import search as _search  # noqa: E402


def word_by_word(text: str) -> str:
    """The index text as it was made before: each word matched, folded and stemmed alone."""
    return " ".join(_search.stem(m.group()) for m in _search._WORD.finditer(text))


def build(path: Path, sessions: int) -> list[str]:
    store = sk.open_store(path)
    records = []
    for c in range(sessions):
        msgs = workload.conversation(c, 2)
        records.append((f"s{c}", [(m, None if i == 0 else msgs[i - 1]["id"], None) for i, m in enumerate(msgs)]))
        if len(records) == 5000:
            store.import_many(records)
            records = []
    if records:
        store.import_many(records)
    texts = [x or "" for x in store.sql_arrow("SELECT text FROM messages").column("text").to_pylist()]
    store.close()
    return texts


def raw_build(folder: Path, texts: list[str]) -> float:
    db = sqlite3.connect(folder / "raw.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("DROP TABLE IF EXISTS t")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize = 'unicode61 remove_diacritics 0')")
    db.commit()
    t = time.perf_counter()
    db.executemany("INSERT INTO t(body) VALUES (?)", [(x,) for x in texts])
    db.commit()
    spent = time.perf_counter() - t
    db.close()
    return spent


def first_search(source: Path, folder: Path, name: str, after: list[float] | None = None) -> float:
    copy = folder / f"{name}.db"
    shutil.copy(source, copy)
    store = sk.open_store(copy)
    t = time.perf_counter()
    store.search("kafka")
    spent = time.perf_counter() - t
    if after is not None:  # the next nine searches: the search window's eight steps, then one more
        for _ in range(9):
            t = time.perf_counter()
            store.search("kafka")
            after.append(time.perf_counter() - t)
    store.close()
    for p in folder.glob(f"{name}.db*"):
        p.unlink()
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-before", action="store_true", help="skip the word-by-word stemming")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = folder / "source.db"
        t = time.perf_counter()
        texts = build(source, args.sessions)
        print(f"({len(texts):,} messages in {args.sessions:,} sessions written in {time.perf_counter() - t:.0f} s)")
        times: dict[str, list[float]] = {"raw": [], "now": [], "before": []}
        now = _search.index_text
        after: list[list[float]] = []
        for _ in range(args.rounds):
            times["raw"].append(raw_build(folder, texts))
            after.append([])
            times["now"].append(first_search(source, folder, "now", after[-1]))
            if not args.no_before:
                _search.index_text = word_by_word
                try:
                    times["before"].append(first_search(source, folder, "before"))
                finally:
                    _search.index_text = now
        med = {k: statistics.median(v) for k, v in times.items() if v}
        print(f"\n| first search of {args.sessions:,} sessions | time | raw FTS5 build, same run | ratio | target |")
        print("|---|---:|---:|---:|---|")
        for key, label in (("before", "word-by-word stemming (before)"), ("now", "the store now")):
            if key in med:
                print(f"| {label} | {med[key]:.2f} s | {med['raw']:.2f} s | {med[key] / med['raw']:.2f}x | <= 2x |")
        steps = [statistics.median(col) for col in zip(*after)]
        print("\nthe searches after it (medians, s; a store past 1.25 x search_window fills its")
        print("search window in the first eight): " + ", ".join(f"{x:.3f}" for x in steps))


if __name__ == "__main__":
    main()
