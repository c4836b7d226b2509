#!/usr/bin/env python3
"""Quoted phrase search against the same words unquoted, by phrase length, on one engine.

    python benchmarks/phrase_bench.py [--engine duckdb|sqlite] [--n 2000] [--lengths 25,100,400,1600]

A store of ``--n`` messages of the peer workload (``peers/workload.py``) plus one message
of 2,000 words of the same vocabulary; each phrase is a run of that message's words, so
it matches there. For each length: the median time of the quoted phrase, of the same
words unquoted (every word must occur, in any order), their ratio, and the phrase's time
per word relative to the shortest phrase's (1.0 everywhere: linear in the length).
"""

from __future__ import annotations

import argparse
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
from sessionkit.store import LATEST  # noqa: E402


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["duckdb", "sqlite"], default="duckdb")
    ap.add_argument("--n", type=int, default=2000, help="messages in the store besides the long one")
    ap.add_argument("--lengths", default="25,100,400,1600", help="phrase lengths in words")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    words = workload._stream()[: max(lengths) + 400]
    with tempfile.TemporaryDirectory() as tmp:
        store = sk.open_store(Path(tmp) / ("p.duckdb" if args.engine == "duckdb" else "p.db"))
        s = store.session("c")
        s.import_many([(m, LATEST, None) for m in workload.conversation(0, args.n)])
        s.append({"id": "long", "role": "user", "parts": [{"type": "text", "text": " ".join(words)}]})
        store.search("deployment")  # builds the index
        print(f"{args.engine}: {args.n + 1:,} messages; phrases taken from one message of {len(words):,} words")
        print("| words | quoted | unquoted | quoted / unquoted | quoted per word, vs the shortest |")
        print("|---:|---:|---:|---:|---:|")
        base = None
        for k in lengths:
            phrase = " ".join(words[100 : 100 + k])
            hits = [h.id for h in store.search(f'"{phrase}"')]
            assert "long" in hits, f"the {k}-word phrase did not find its message"
            quoted = median_ms(lambda p=phrase: store.search(f'"{p}"'), args.reps)
            plain = median_ms(lambda p=phrase: store.search(p), args.reps)
            per_word = quoted / k
            base = base or per_word
            print(f"| {k:,} | {quoted:,.1f} ms | {plain:,.1f} ms | {quoted / plain:.2f}x | {per_word / base:.2f}x |")
        store.close()


if __name__ == "__main__":
    main()
