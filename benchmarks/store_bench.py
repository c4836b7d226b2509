"""sessionkit's SQLite engine against raw sqlite3 doing the same work, in one run.

Each row times the same logical operation twice on the same machine, in the
same process, with the same settings (WAL, synchronous=NORMAL, a checkpoint
every 8,192 pages): once through
sessionkit's public API and once through stdlib ``sqlite3`` on a minimal table
(``seq, session_id, id, parent_id, content``), and prints the ratio. Raw reads
also decode each row's JSON, since a caller of either needs dicts.

    python benchmarks/store_bench.py            # full run (1,000,000-message scale rows)
    python benchmarks/store_bench.py --quick    # smaller sizes, about a minute

Targets (issue "session store"): appends >= 0.5x raw with search off and >= 0.5x
raw-with-FTS5-trigger once the index exists; a 10,000-message path read within
2x of a raw recursive query; recent window and search time flat in conversation
length; streaming peak memory growth under 50 MB for 100,000 messages.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "peers"))

from workload import message  # noqa: E402  (benchmarks/peers/workload.py: the shared workload)

import sessionkit as sk  # noqa: E402

RAW_SCHEMA = """
CREATE TABLE m (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, id TEXT NOT NULL,
                parent_id TEXT, content TEXT NOT NULL);
CREATE UNIQUE INDEX m_key ON m(session_id, id);
"""
RAW_FTS = """
CREATE VIRTUAL TABLE m_fts USING fts5(body, content='', tokenize='porter unicode61');
CREATE TRIGGER m_ai AFTER INSERT ON m BEGIN
  INSERT INTO m_fts(rowid, body) VALUES (new.seq, new.content);
END;
"""
RAW_PATH = """
WITH RECURSIVE up(seq, parent_id) AS (
  SELECT seq, parent_id FROM m WHERE session_id = ? AND id = ?
  UNION ALL
  SELECT m.seq, m.parent_id FROM up JOIN m ON m.session_id = ? AND m.id = up.parent_id
  {limit}
) SELECT m.content FROM up JOIN m ON m.seq = up.seq
"""


def raw_open(path: Path, fts: bool = False) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=8192")  # the same checkpoint interval sessionkit uses
    db.executescript(RAW_SCHEMA + (RAW_FTS if fts else ""))
    return db


def raw_append(db: sqlite3.Connection, sid: str, msg: dict, parent: str | None) -> None:
    """One message per commit, as sessionkit's append does."""
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "INSERT OR IGNORE INTO m(session_id, id, parent_id, content) VALUES (?,?,?,?)",
        (sid, msg["id"], parent, json.dumps(msg)),
    )
    db.execute("COMMIT")


def raw_bulk(db: sqlite3.Connection, sid: str, msgs) -> None:
    db.execute("BEGIN")
    parent = None
    rows = []
    for m in msgs:
        rows.append((sid, m["id"], parent, json.dumps(m)))
        parent = m["id"]
        if len(rows) >= 10_000:
            db.executemany("INSERT INTO m(session_id, id, parent_id, content) VALUES (?,?,?,?)", rows)
            rows.clear()
    if rows:
        db.executemany("INSERT INTO m(session_id, id, parent_id, content) VALUES (?,?,?,?)", rows)
    db.execute("COMMIT")


def raw_read_path(db: sqlite3.Connection, sid: str, leaf: str, limit: int | None = None) -> list[dict]:
    sql = RAW_PATH.format(limit=f"LIMIT {limit}" if limit else "")
    rows = db.execute(sql, (sid, leaf, sid)).fetchall()
    out = [json.loads(r[0]) for r in rows]
    out.reverse()
    return out


def sk_bulk(store, sid: str, msgs) -> None:
    """Build a long conversation fast (one transaction per 10,000 messages)."""
    session = store.session(sid)
    batch = []
    parent = None
    for m in msgs:
        batch.append((m, parent, None))
        parent = m["id"]
        if len(batch) >= 10_000:
            session.import_many(batch)
            batch.clear()
    if batch:
        session.import_many(batch)


def msgs_for(conv: int, n: int):
    for i in range(n):
        yield message(conv, i)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def median_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def medians_in_turns(fn_a, fn_b, repeat: int) -> tuple[float, float]:
    """Medians of ``fn_a`` and ``fn_b`` called alternately ``repeat`` times each."""
    a, b = [], []
    for _ in range(repeat):
        for fn, times in ((fn_a, a), (fn_b, b)):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b)


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, str, str, str]] = []

    def add(self, what: str, sk_val: str, raw_val: str, ratio: str, target: str = ""):
        self.rows.append((what, sk_val, raw_val, ratio, target))
        print(f"  {what}: sessionkit {sk_val} | raw {raw_val} | {ratio} {target}", flush=True)

    def markdown(self) -> str:
        head = "| measurement | sessionkit | raw sqlite3 | ratio | target |\n|---|---:|---:|---:|---|\n"
        return head + "\n".join("| " + " | ".join(r) + " |" for r in self.rows)


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}/s"


def fmt_ms(x: float) -> str:
    return f"{x * 1000:.2f} ms" if x < 10 else f"{x:.1f} s"


def bench_appends(tmp: Path, table: Table, n: int) -> None:
    msgs = [message(1, i) for i in range(n)]
    # Interleave rounds so machine noise hits both sides alike; keep the best round.
    sk_rates, raw_rates = [], []
    for r in range(3):
        store = sk.open_store(tmp / f"append{r}.db")
        s = store.session("a")
        t = time.perf_counter()
        for m in msgs:
            s.append(m)
        sk_rates.append(n / (time.perf_counter() - t))
        store.close()
        db = raw_open(tmp / f"raw_append{r}.db")
        t = time.perf_counter()
        parent = None
        for m in msgs:
            raw_append(db, "a", m, parent)
            parent = m["id"]
        raw_rates.append(n / (time.perf_counter() - t))
        db.close()
    a, b = max(sk_rates), max(raw_rates)
    table.add(
        f"append, one per commit, search off ({n:,} msgs)", fmt_rate(a), fmt_rate(b), f"{a / b:.2f}x rate", ">= 0.5x"
    )

    sk_rates, raw_rates = [], []
    for r in range(3):
        store = sk.open_store(tmp / f"append_fts{r}.db")
        s = store.session("a")
        s.search("warmup")  # builds the (empty) index: from here on every write is indexed
        t = time.perf_counter()
        for m in msgs:
            s.append(m)
        sk_rates.append(n / (time.perf_counter() - t))
        assert store.stats()["indexed_messages"] == n
        store.close()
        db = raw_open(tmp / f"raw_append_fts{r}.db", fts=True)
        t = time.perf_counter()
        parent = None
        for m in msgs:
            raw_append(db, "a", m, parent)
            parent = m["id"]
        raw_rates.append(n / (time.perf_counter() - t))
        db.close()
    a, b = max(sk_rates), max(raw_rates)
    table.add(
        f"append with search index ({n:,} msgs; raw: FTS5 trigger)",
        fmt_rate(a),
        fmt_rate(b),
        f"{a / b:.2f}x rate",
        ">= 0.5x",
    )

    # The same with the search window in place (a window of n/4 messages, created by a
    # search after n/2 appends and filled by the next eight). Appends leave the window to the next search; its
    # triggers only check whether a row falls inside its range.
    sk_rates = []
    for r in range(3):
        store = sk.open_store(tmp / f"append_window{r}.db", search_window=n // 4)
        s = store.session("a")
        s.search("warmup")
        for m in (message(3, i) for i in range(n // 2)):
            s.append(m)
        s.search("warmup")  # makes the window; the searches after it fill it, a step each
        for _ in range(8):
            s.search("warmup")
        lo, hi = store._engine.index.window()
        assert lo is not None and hi - lo + 1 == n // 4
        t = time.perf_counter()
        for m in msgs:
            s.append(m)
        sk_rates.append(n / (time.perf_counter() - t))
        store.close()
    a = max(sk_rates)
    table.add(
        f"append with search index and window ({n:,} msgs, window {n // 4:,}; raw: FTS5 trigger)",
        fmt_rate(a),
        fmt_rate(b),
        f"{a / b:.2f}x rate",
        ">= 0.5x",
    )
    # What a search pays for those appends: the first search after 1,000 appends brings
    # the window up to date (copies 1,000 rows in, drops 1,000), against the same search
    # with nothing to catch up on.
    store = sk.open_store(tmp / "append_window0.db", search_window=n // 4)
    s = store.session("a")
    catch_up, steady = [], []
    for r in range(5):
        for i in range(1_000):
            s.append(message(4, r * 1_000 + i))
        t = time.perf_counter()
        s.search("error")
        catch_up.append(time.perf_counter() - t)
        steady.append(median_of(lambda: s.search("error"), 5))
    store.close()
    a, b = statistics.median(catch_up), statistics.median(steady)
    table.add(
        "first search after 1,000 appends: window catch-up (raw column: the same search again)",
        fmt_ms(a),
        fmt_ms(b),
        f"{a / b:.2f}x time",
        "",
    )


#: Search queries, each timed alone: two words no message holds together, two words in
#: ~4% and ~2% of messages, a phrase of two common words that rarely stand together, and
#: one word in about a quarter of all messages.
SEARCHES = ["deployment failed", "database migration", "kubernetes cluster", '"connection pool"', "error"]


def bench_reads(tmp: Path, table: Table, sizes: list[int], stream_n: int, search_sizes: list[int]) -> None:
    searches: list = []
    doors: list = []
    try:
        _bench_reads(tmp, table, sizes, stream_n, search_sizes, searches, doors)
    finally:  # grouped by query, each at every size
        for q, n, hits, a, b in sorted(searches, key=lambda row: SEARCHES.index(row[0])):
            table.add(
                f"search {q}, top 10, {n:,} msgs ({hits:,} matches)",
                fmt_ms(a),
                fmt_ms(b),
                f"{a / b:.2f}x time",
                "flat in n",
            )
        # Two doors to one index: session.search against store.search on a store of one session
        # (the "raw" column holds store.search here).
        for q, n, a, b in sorted(doors, key=lambda row: SEARCHES.index(row[0])):
            table.add(
                f"session.search {q} vs store.search, one session of {n:,} msgs",
                fmt_ms(a),
                fmt_ms(b),
                f"{a / b:.2f}x time",
                "<= 1.2x",
            )


def _bench_reads(tmp, table, sizes, stream_n, search_sizes, searches, doors) -> None:
    for n in sorted(set(sizes) | {10_000} | set(search_sizes)):
        t0 = time.perf_counter()
        store = sk.open_store(tmp / f"read{n}.db")
        sk_bulk(store, "c", msgs_for(2, n))
        db = raw_open(tmp / f"raw_read{n}.db", fts=True)
        raw_bulk(db, "c", msgs_for(2, n))
        print(f"  (built {n:,}-message conversations in {time.perf_counter() - t0:.1f} s)", flush=True)
        s = store.session("c")
        leaf = s.latest_leaf()["id"]
        # The timed lambdas run before the next iteration; their defaults pin this iteration's values.
        if n == 10_000:
            a = best(lambda s=s: s.get_history(), 5)
            b = best(lambda db=db, leaf=leaf: raw_read_path(db, "c", leaf), 5)
            table.add("full path read, 10,000 msgs", fmt_ms(a), fmt_ms(b), f"{a / b:.2f}x time", "<= 2x")
        if n in sizes:
            a = median_of(lambda s=s: s.recent_history(0, min_messages=20), 50)
            b = median_of(lambda db=db, leaf=leaf: raw_read_path(db, "c", leaf, limit=20), 50)
            table.add(f"recent 20 of a {n:,}-message path", fmt_ms(a), fmt_ms(b), f"{a / b:.2f}x time", "flat in n")
        if n in search_sizes:
            s.search("warmup")  # index build is a one-off cost, not part of the query time
            db.execute("SELECT count(*) FROM m_fts WHERE m_fts MATCH 'warmup'").fetchall()
            for q in SEARCHES:
                a = median_of(lambda store=store, q=q: store.search(q, limit=10), 7)
                b = median_of(
                    lambda db=db, q=q: db.execute(
                        "SELECT rowid FROM m_fts WHERE m_fts MATCH ? ORDER BY rank LIMIT 10", (q,)
                    ).fetchall(),
                    7,
                )
                hits = db.execute("SELECT count(*) FROM m_fts WHERE m_fts MATCH ?", (q,)).fetchone()[0]
                searches.append((q, n, hits, a, b))
                if n == max(search_sizes):
                    # the two doors timed in turns, so that a change of load meets both alike
                    doors.append(
                        (
                            q,
                            n,
                            *medians_in_turns(
                                lambda s=s, q=q: s.search(q, limit=10),
                                lambda store=store, q=q: store.search(q, limit=10),
                                15,
                            ),
                        )
                    )
        if n == stream_n:
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            count = 0
            for _ in s.history():
                count += 1
            peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            assert count == n
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            rows = raw_read_path(db, "c", leaf)
            raw_peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            del rows
            table.add(
                f"stream a {n:,}-message path: peak memory growth",
                f"{peak / 2**20:.1f} MB",
                f"{raw_peak / 2**20:.1f} MB (fetchall)",
                f"{peak / raw_peak:.2f}x",
                "< 50 MB",
            )
        # Both files checkpointed first: a WAL's size depends on when it was last
        # checkpointed (a big transaction such as the index build leaves a long one).
        store._engine._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = store.stats()["bytes"]
        raw_size = os.path.getsize(tmp / f"raw_read{n}.db") + os.path.getsize(tmp / f"raw_read{n}.db-wal")
        if n == max(sizes):
            table.add(
                f"file bytes per message ({n:,} msgs, index built)",
                f"{size / n:,.0f} B",
                f"{raw_size / n:,.0f} B",
                f"{size / raw_size:.2f}x",
                "",
            )
        store.close()
        db.close()
        for p in tmp.glob(f"*read{n}.db*"):
            p.unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    ap.add_argument("--out", help="also write the Markdown table to this file")
    ap.add_argument("--reads-only", action="store_true", help="skip the append runs")
    args = ap.parse_args(argv)
    if args.quick:
        appends, sizes, stream_n, search_sizes = 2_000, [10_000, 100_000], 100_000, [10_000, 100_000]
    else:
        appends, sizes, stream_n, search_sizes = (
            10_000,
            [10_000, 100_000, 1_000_000],
            100_000,
            [10_000, 100_000, 1_000_000],
        )
    print(
        f"sessionkit {sk.__version__}, SQLite {sqlite3.sqlite_version}, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores"
    )
    table = Table()
    with tempfile.TemporaryDirectory(prefix="sk-bench-") as d:
        tmp = Path(d)
        if not args.reads_only:
            bench_appends(tmp, table, appends)
        bench_reads(tmp, table, sizes, stream_n, search_sizes)
    md = table.markdown()
    print()
    print(md)
    if args.out:
        Path(args.out).write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
