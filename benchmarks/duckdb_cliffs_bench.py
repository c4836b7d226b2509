#!/usr/bin/env python3
"""Three DuckDB-engine workloads that once fell off a cliff, against the SQLite engine, in one run.

    python benchmarks/duckdb_cliffs_bench.py [--chain 1000] [--sessions 10000] [--big-mb 8]

- *a chain*: ``session.append_many`` of ``--chain`` messages (one call) against the same
  number of single ``session.append`` calls, on each engine, in new stores and in stores
  whose search index is built; the figure to read is the chain's time per message over
  the single appends' (at most 1.0: a batch is never slower than the same messages one
  by one);
- *many sessions*: ``--sessions`` sessions of one message each (one ``append`` each) on
  DuckDB against the same on the SQLite engine;
- *a big message*: one message whose text is ``--big-mb`` MB of the workload's words
  appended, then read back (``session.get``), on DuckDB against SQLite; once in a store
  without a search index, once in one whose index is built (the message is indexed as it
  is appended).

Each store is a new file in a temporary folder; messages are the peer workload's
(``peers/workload.py``). Both engines run in this process, one after the other per row.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's sessionkit
sys.path.insert(0, str(HERE / "peers"))

import workload  # noqa: E402

import sessionkit as sk  # noqa: E402

ENGINES = {"duckdb": "s.duckdb", "sqlite": "s.db"}


def _fresh(folder: Path, engine: str, name: str):
    return sk.open_store(folder / f"{name}-{ENGINES[engine]}")


def _indexed(st) -> None:
    st.session("o").append({"id": "o", "role": "user", "parts": [{"type": "text", "text": "hello"}]})
    st.search("hello")  # builds the search index: every later write keeps it


def chain(folder: Path, engine: str, n: int, indexed: bool = False) -> tuple[float, float]:
    """Seconds for ``n`` single appends and for one ``append_many`` of ``n`` messages
    (with ``indexed``, into stores whose search index is built)."""
    msgs = workload.conversation(0, n)
    st = _fresh(folder, engine, f"single{int(indexed)}")
    if indexed:
        _indexed(st)
    s = st.session("c")
    t = time.perf_counter()
    for m in msgs:
        s.append(m)
    single = time.perf_counter() - t
    st.close()
    st = _fresh(folder, engine, f"chain{int(indexed)}")
    if indexed:
        _indexed(st)
    s = st.session("c")
    t = time.perf_counter()
    s.append_many(msgs)
    many = time.perf_counter() - t
    assert len(s.get_history()) == n
    st.close()
    return single, many


def sessions(folder: Path, engine: str, n: int) -> float:
    msgs = workload.conversation(1, 1)
    st = _fresh(folder, engine, "sessions")
    t = time.perf_counter()
    for i in range(n):
        st.session(f"s{i}").append(dict(msgs[0], id=f"m{i}"))
    took = time.perf_counter() - t
    st.close()
    return took


def big(folder: Path, engine: str, mb: int, indexed: bool) -> float:
    """Seconds to append one message of ``mb`` MB of text and read it back; with
    ``indexed``, into a store whose search index is built (the message is indexed too)."""
    rng = random.Random(mb)
    words = rng.choices(workload.VOCAB, k=mb * 1024 * 1024 // 6)
    text = " ".join(words)[: mb * 1024 * 1024]
    st = _fresh(folder, engine, f"big{int(indexed)}")
    if indexed:
        _indexed(st)
    s = st.session("b")
    t = time.perf_counter()
    s.append({"id": "big", "role": "user", "parts": [{"type": "text", "text": text}]})
    back = s.get("big")
    took = time.perf_counter() - t
    assert back["parts"][0]["text"] == text
    st.close()
    return took


def _ms(seconds: float, n: int) -> str:
    return f"{seconds / n * 1000:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", type=int, default=1000)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--big-mb", type=int, default=8)
    args = ap.parse_args()
    n = args.chain
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("| measurement | DuckDB | SQLite | ratio | target |")
        print("|---|---:|---:|---:|---|")
        for indexed in (False, True):
            (d1, dn), (s1, sn) = chain(folder, "duckdb", n, indexed), chain(folder, "sqlite", n, indexed)
            what = ", search index built" if indexed else ""
            print(
                f"| append_many of {n:,} messages vs {n:,} single appends{what}, per message "
                f"| {_ms(dn, n)} vs {_ms(d1, n)} | {_ms(sn, n)} vs {_ms(s1, n)} "
                f"| DuckDB {dn / d1:.2f}x, SQLite {sn / s1:.2f}x time | <= 1x |"
            )
            print(
                f"| append_many of {n:,} messages{what}, DuckDB vs SQLite | {_ms(dn, n)} | {_ms(sn, n)} "
                f"| {dn / sn:.2f}x time | |"
            )
        duck, lite = sessions(folder, "duckdb", args.sessions), sessions(folder, "sqlite", args.sessions)
        print(
            f"| {args.sessions:,} one-message sessions | {duck:.2f} s | {lite:.2f} s "
            f"| {duck / lite:.2f}x time | <= 3x |"
        )
        for indexed in (False, True):
            duck, lite = big(folder, "duckdb", args.big_mb, indexed), big(folder, "sqlite", args.big_mb, indexed)
            what = ", search index built" if indexed else ""
            print(
                f"| a {args.big_mb} MB message appended and read back{what} | {duck:.2f} s | {lite:.2f} s "
                f"| {duck / lite:.2f}x time | <= 2x |"
            )


if __name__ == "__main__":
    main()
