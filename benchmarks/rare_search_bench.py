"""A search for words few messages hold, on the SQLite engine, against raw FTS5.

One conversation of N messages of the peer workload (``peers/workload.py``), written as a
store and, for raw sqlite3, as a minimal table of the messages' JSON with an FTS5 index
(``porter``) of their texts built beside it. Two words are added to a few
messages (five and two of them), so each has that many matches; a word no message holds
is the third query. Each query runs ``session.search(q, limit=10)`` and raw's one
statement (bm25, top 10, FTS5's ``snippet()``, the JSON decoded), in turns, and each
ratio is of the medians.

    python benchmarks/rare_search_bench.py                 # 100,000 messages
    python benchmarks/rare_search_bench.py --n 20000 --repeat 101
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import workload

#: (word, the messages it is added to)
RARE = (("zebraflux", (10, 5_000, 50_000, 77_777, 99_990)), ("quokkaline", (11, 5_001)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages in the conversation")
    parser.add_argument("--repeat", type=int, default=51, help="runs of each query on each side")
    args = parser.parse_args()
    import sessionkit as sk

    messages = workload.conversation(1, args.n)
    for word, where in RARE:
        for i in where:
            if i < args.n:
                messages[i]["parts"][0]["text"] += " " + word
    with tempfile.TemporaryDirectory() as tmp:
        store = sk.open_store(str(Path(tmp) / "store.db"))
        session = store.session("c1")
        for start in range(0, args.n, 1_000):
            session.append_many(messages[start : start + 1_000])
        raw = sqlite3.connect(str(Path(tmp) / "raw.db"), isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("CREATE TABLE msgs (conv TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL)")
        raw.execute("CREATE UNIQUE INDEX msgs_conv_seq ON msgs(conv, seq)")
        raw.execute("CREATE VIRTUAL TABLE msgs_fts USING fts5(text, tokenize='porter unicode61')")
        raw.execute("BEGIN")
        raw.executemany("INSERT INTO msgs VALUES (?, ?, ?)", (("c1", i, json.dumps(m)) for i, m in enumerate(messages)))
        raw.executemany(
            "INSERT INTO msgs_fts (rowid, text) VALUES (?, ?)",
            ((i + 1, workload.text_of(m)) for i, m in enumerate(messages)),
        )
        raw.execute("COMMIT")

        def raw_search(query: str) -> list:
            rows = raw.execute(
                "SELECT m.data, snippet(msgs_fts, 0, '[', ']', '...', 12), bm25(msgs_fts) AS score"
                " FROM msgs_fts JOIN msgs m ON m.rowid = msgs_fts.rowid"
                " WHERE msgs_fts MATCH ? AND m.conv = ? ORDER BY score LIMIT 10",
                ('"' + query + '"', "c1"),
            ).fetchall()
            return [(json.loads(d), snip, score) for d, snip, score in rows]

        session.search("warm up")  # (the first search builds the store's index: not timed here)
        print(f"sessionkit from {Path(sk.__file__).parent.parent}")
        print(f"{args.n:,} messages; medians of {args.repeat} runs, the two sides in turns")
        print("| query | matches | session.search | raw FTS5 | ratio |")
        print("|---|---:|---:|---:|---:|")
        for query in [word for word, _ in RARE] + ["zzzqqq"]:
            ours, theirs = [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                hits = session.search(query, limit=10)
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                found = raw_search(query)
                theirs.append(time.perf_counter() - t)
            assert len(hits) == len(found), (query, len(hits), len(found))
            a, b = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
            print(f"| {query} | {len(hits)} | {a:.3f} ms | {b:.3f} ms | {a / b:.2f}x |")
        store.close()
        raw.close()


if __name__ == "__main__":
    main()
