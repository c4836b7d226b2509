#!/usr/bin/env python3
"""The DuckDB engine as a session store, against raw DuckDB and the SQLite engine, in turns.

    python benchmarks/duckdb_store_bench.py [--appends 1000] [--convs 200] [--n 10000] [--phrase-store 2000]
                                            [--lengths 25,100,400,1600] [--skip-phrases]

The peer comparison (``peers/run.py``) runs one store after another, so a machine whose
load changes between them moves the ratios; here the two sides of each ratio run in
turns, one operation each, in one process, so they share the machine's state:

- *appends*: one ``session.append`` (one commit) of the peer workload's messages, then
  one raw DuckDB single-row INSERT (one autocommitted transaction, the same durability)
  of the same message's JSON into a three-column table; once in one conversation, once in
  ``--convs`` conversations of 20 messages, one after another;
- *reads* on ``--n`` messages in one conversation (built by import): the newest 20
  (``recent_history(0, min_messages=20)``) against the SQLite engine's, and the whole
  path (``get_history()``) against raw DuckDB's ``ORDER BY seq`` read decoding each row;
- *phrases*: a store of ``--phrase-store`` messages plus one of 2,000 words of the same
  vocabulary; each phrase is a run of that message's words. For each length, a quoted
  phrase, the same words unquoted (every word must occur, in any order), their ratio, and
  the phrase's time per word against the shortest phrase's (1.0: linear in the length).
"""

from __future__ import annotations

import argparse
import json
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


def appends(count: int, folder: Path, convs: int = 1) -> None:
    """``count`` single appends, in one conversation or in ``convs`` conversations of
    ``count // convs`` messages each, one conversation after another (as in the peer
    benchmark's many-conversation column)."""
    import duckdb

    per = count // convs
    work = [(f"conv-{c}", m) for c in range(convs) for m in workload.conversation(c, per)]
    store = sk.open_store(folder / f"a{convs}.duckdb")
    raw = duckdb.connect(str(folder / f"raw{convs}.duckdb"))
    raw.execute("CREATE TABLE msgs (conv VARCHAR NOT NULL, seq INTEGER NOT NULL, data VARCHAR NOT NULL)")
    mine = theirs = 0.0
    for i, (conv, m) in enumerate(work):
        t = time.perf_counter()
        store.session(conv).append(m)
        mine += time.perf_counter() - t
        t = time.perf_counter()
        raw.execute("INSERT INTO msgs VALUES (?, ?, ?)", (conv, i, json.dumps(m)))
        theirs += time.perf_counter() - t
    raw.close()
    store.close()
    where = "in one conversation" if convs == 1 else f"in {convs:,}x{per} conversations"
    print(
        f"| single appends, {len(work):,} {where} | {len(work) / mine:,.0f}/s "
        f"| raw DuckDB {len(work) / theirs:,.0f}/s | {theirs / mine:.2f}x rate | >= 0.8x |"
    )


def without_journal(store: sk.Store) -> None:
    """Make ``store``'s DuckDB engine write as if it had no journal: a single append takes
    the indexed insert, a chain the batched insert (the engine's other ways, unchanged)."""
    engine = store._engine  # the benchmark's one reach into the engine: its one choice of way
    choose = engine._way

    def way(sid, preps, chain=False):
        chosen = choose(sid, preps, chain)
        if chosen != "journal":
            return chosen
        return "transaction" if chain else "indexed"

    engine._way = way


def journal(count: int, chain: int, folder: Path) -> None:
    """The append journal against the same engine without it, and raw DuckDB, in turns:
    ``count`` single appends in one conversation, then the same messages as
    ``append_many`` chains of ``chain`` (one commit each)."""
    import duckdb

    msgs = workload.conversation(0, count)
    for what, size in (("single appends", 1), (f"append_many of {chain}", chain)):
        stores = {k: sk.open_store(folder / f"j-{k}-{size}.duckdb") for k in ("journal", "none")}
        without_journal(stores["none"])
        raw = duckdb.connect(str(folder / f"j-raw-{size}.duckdb"))
        raw.execute("CREATE TABLE msgs (conv VARCHAR NOT NULL, seq INTEGER NOT NULL, data VARCHAR NOT NULL)")
        spent = {"journal": 0.0, "none": 0.0, "raw": 0.0}
        for start in range(0, count, size):
            part = msgs[start : start + size]
            for kind, st in stores.items():
                t = time.perf_counter()
                if size == 1:
                    st.session("c").append(part[0])
                else:
                    st.session("c").append_many(part)
                spent[kind] += time.perf_counter() - t
            t = time.perf_counter()
            rows = [("c", start + i, json.dumps(m)) for i, m in enumerate(part)]
            if size == 1:
                raw.execute("INSERT INTO msgs VALUES (?, ?, ?)", rows[0])
            else:
                raw.execute("BEGIN")
                raw.executemany("INSERT INTO msgs VALUES (?, ?, ?)", rows)
                raw.execute("COMMIT")
            spent["raw"] += time.perf_counter() - t
        read = {}
        for kind, st in stores.items():
            assert len(st.session("c").get_history()) == count
            read[kind] = median_ms(st.session("c").get_history, 3)
            st.close()
        raw.close()
        rate = {k: count / v for k, v in spent.items()}
        print(
            f"| {what}, {count:,} in one conversation | {rate['journal']:,.0f}/s "
            f"({rate['journal'] / rate['raw']:.2f}x raw) | {rate['none']:,.0f}/s "
            f"({rate['none'] / rate['raw']:.2f}x raw) | {rate['raw']:,.0f}/s "
            f"| {rate['journal'] / rate['none']:.2f}x | {read['journal'] / read['none']:.2f}x |"
        )


def reads(n: int, folder: Path, reps: int) -> None:
    import duckdb

    msgs = workload.conversation(0, n)
    stores = {}
    for kind, suffix in (("duckdb", ".duckdb"), ("sqlite", ".db")):
        stores[kind] = sk.open_store(folder / f"r{suffix}")
        stores[kind].session("c").import_many([(m, LATEST, None) for m in msgs])
    raw = duckdb.connect(str(folder / "rawr.duckdb"))
    raw.execute("CREATE TABLE msgs (conv VARCHAR NOT NULL, seq INTEGER NOT NULL, data VARCHAR NOT NULL)")
    raw.executemany("INSERT INTO msgs VALUES (?, ?, ?)", [("c", i, json.dumps(m)) for i, m in enumerate(msgs)])
    duck, lite = stores["duckdb"].session("c"), stores["sqlite"].session("c")
    assert duck.get_history() == lite.get_history()
    times: dict[str, list[float]] = {k: [] for k in ("recent", "recent sqlite", "full", "full raw")}
    ops = {
        "recent": lambda: duck.recent_history(0, min_messages=20).messages,
        "recent sqlite": lambda: lite.recent_history(0, min_messages=20).messages,
        "full": duck.get_history,
        "full raw": lambda: [
            json.loads(d)
            for (d,) in raw.execute("SELECT data FROM msgs WHERE conv = ? ORDER BY seq", ("c",)).fetchall()
        ],
    }
    for i in range(reps * 20):
        for name, fn in ops.items():
            if name.startswith("full") and i % 20:
                continue  # 20 window reads per whole-path read
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(
        f"| recent 20 of {n:,} | {med['recent']:.3f} ms | SQLite engine {med['recent sqlite']:.3f} ms "
        f"| {med['recent'] / med['recent sqlite']:.2f}x time | <= 2x |"
    )
    print(
        f"| full path read of {n:,} | {med['full']:,.0f} ms | raw DuckDB {med['full raw']:,.0f} ms "
        f"| {med['full'] / med['full raw']:.2f}x time | <= 2x |"
    )
    raw.close()
    for st in stores.values():
        st.close()


def phrases(n: int, lengths: list[int], reps: int, folder: Path) -> None:
    words = workload._stream()[: max(lengths) + 400]
    store = sk.open_store(folder / "p.duckdb")
    s = store.session("c")
    s.import_many([(m, LATEST, None) for m in workload.conversation(0, n)])
    s.append({"id": "long", "role": "user", "parts": [{"type": "text", "text": " ".join(words)}]})
    store.search("deployment")  # builds the index
    print(f"\nPhrases: {n + 1:,} messages, the phrases taken from one message of {len(words):,} words.\n")
    print("| words | quoted | unquoted | quoted / unquoted | quoted per word, vs the shortest |")
    print("|---:|---:|---:|---:|---:|")
    base = None
    for k in lengths:
        phrase = " ".join(words[100 : 100 + k])
        hits = [h.id for h in store.search(f'"{phrase}"')]
        assert "long" in hits, f"the {k}-word phrase did not find its message"
        quoted = median_ms(lambda p=phrase: store.search(f'"{p}"'), reps)
        plain = median_ms(lambda p=phrase: store.search(p), reps)
        per_word = quoted / k
        base = base or per_word
        print(f"| {k:,} | {quoted:,.1f} ms | {plain:,.1f} ms | {quoted / plain:.2f}x | {per_word / base:.2f}x |")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=1000, help="single appends (each side)")
    ap.add_argument("--n", type=int, default=10_000, help="messages of the conversation the reads read")
    ap.add_argument("--phrase-store", type=int, default=2000, help="messages in the phrase store besides the long one")
    ap.add_argument("--lengths", default="25,100,400,1600", help="phrase lengths in words")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--convs", type=int, default=200, help="conversations of 20 messages appended one after another (0: none)"
    )
    ap.add_argument("--skip-phrases", action="store_true")
    ap.add_argument(
        "--journal",
        action="store_true",
        help="only the append journal against the same engine without it (and raw DuckDB), in turns",
    )
    ap.add_argument("--chain", type=int, default=10, help="messages per append_many in --journal")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.journal:
            print(
                "| appends | with the journal | without it | raw DuckDB | journal / without (rate)"
                " | full read, journal / without (time) |"
            )
            print("|---|---:|---:|---:|---:|---:|")
            journal(args.appends, args.chain, folder)
            return
        print("| measurement | sessionkit (DuckDB) | other side, same run | ratio | target |")
        print("|---|---:|---:|---:|---|")
        appends(args.appends, folder)
        if args.convs:
            appends(args.convs * 20, folder, convs=args.convs)
        reads(args.n, folder, args.reps)
        if not args.skip_phrases:
            phrases(args.phrase_store, [int(x) for x in args.lengths.split(",")], args.reps, folder)


if __name__ == "__main__":
    main()
