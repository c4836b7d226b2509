"""Analysis where the data is: ``store.sql`` and DataFrames against raw DuckDB, measured in one run.

For each engine, N messages (1,000,000 by default: N/100 sessions of 100, the shared
workload of ``benchmarks/peers/workload.py``, every tenth session with a branch of 5
and a compaction) and one run per session are written through the public import API
(``session.import_many``, ``import_compaction``, ``store.run_log.begin``/``end``). Then four
queries run through ``store.sql`` and, as the baseline, on raw DuckDB tables of the
same columns (built in memory from the same messages):

- ``roles``: messages and tokens per role (GROUP BY);
- ``top20``: the 20 sessions with the most tokens;
- ``tools``: calls per tool name (UNNEST of the tool names);
- ``join``: messages and tokens per run status (messages JOIN runs).

The first query ever on each store is timed on its own (on SQLite it builds the
analysis cache file beside the store, on PostgreSQL an in-memory cache). Then each
query is timed first (on a store object just opened: SQLite reopens its cache file and
reads what changed since, PostgreSQL builds its cache again), again (warm), and again
after 1,000 new appends (the cache reads only what changed). ``messages_df()`` of every
message is compared with raw DuckDB's ``fetchdf()`` of the same columns. Peak memory:
the process's resident memory above its level before the query (sampled every
millisecond) and the peak of Python allocations (tracemalloc): the second shows that no query holds the store as
Python objects.

    python benchmarks/analysis_bench.py               # 1,000,000 messages
    python benchmarks/analysis_bench.py --n 100000    # quicker
    python benchmarks/analysis_bench.py --engines sqlite,duckdb
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE / "peers"))

from workload import message  # noqa: E402  (benchmarks/peers/workload.py)

import sessionkit as sk  # noqa: E402
from sessionkit import messages as _msg  # noqa: E402
from sessionkit.parts import tool_names  # noqa: E402

QUERIES = {
    "roles": "SELECT role, count(*) AS n, sum(tokens) AS tokens FROM messages GROUP BY role ORDER BY role",
    "top20": (
        "SELECT session_id, sum(tokens) AS tokens FROM messages GROUP BY session_id"
        " ORDER BY tokens DESC, session_id LIMIT 20"
    ),
    "tools": (
        "SELECT name, count(*) AS calls FROM (SELECT unnest(tool_names) AS name FROM messages)"
        " GROUP BY name ORDER BY calls DESC, name"
    ),
    "join": (
        "SELECT r.status, count(*) AS n, sum(m.tokens) AS tokens FROM messages m"
        " JOIN runs r ON r.session_id = m.session_id GROUP BY r.status ORDER BY r.status"
    ),
}
D1 = "session_id, id, parent_id, depth, role, text, n_parts, tool_names, tokens, bytes, created_at"
PER_SESSION = 100


def sessions_of(n: int):
    """``(session id, [(message, parent id, created_at)], compaction)`` of the workload."""
    for conv in range(n // PER_SESSION):
        items, parent = [], None
        for i in range(PER_SESSION - (5 if conv % 10 == 0 else 0)):
            m = message(conv, i)
            items.append((m, parent, None))
            parent = m["id"]
        if conv % 10 == 0:  # a branch of 5 under message 60
            parent = items[60][0]["id"]
            for i in range(PER_SESSION - 5, PER_SESSION):
                m = message(conv, i)
                items.append((m, parent, None))
                parent = m["id"]
        yield f"s{conv}", items


def build(store, n: int) -> float:
    t = time.perf_counter()
    for k, (sid, items) in enumerate(sessions_of(n)):
        s = store.session(sid)
        s.import_many(items)
        if k % 10 == 0:
            s.import_compaction(
                sk.Compaction(
                    f"c{k}", items[2][0]["id"], items[30][0]["id"], "summary", "2024-01-01T00:00:00.000Z", 5000, 100
                )
            )
    with store.transaction():
        for k in range(n // PER_SESSION):
            store.run_log.begin(f"s{k}", f"s{k}.1", "hello")
            store.run_log.end(
                f"s{k}.1",
                status="completed" if k % 7 else "failed",
                usage={"in": 10, "out": 5, "cost_usd": 0.001, "model": "m"},
            )
    return time.perf_counter() - t


def raw_tables(n: int):
    """The same messages and runs as raw DuckDB tables (in memory), from Arrow."""
    import duckdb
    import pyarrow as pa

    cols: dict[str, list] = {
        c: []
        for c in (
            "session_id",
            "id",
            "parent_id",
            "depth",
            "role",
            "text",
            "n_parts",
            "tool_names",
            "tokens",
            "bytes",
            "created_at",
        )
    }
    depth: dict[str, int] = {}
    for sid, items in sessions_of(n):
        depth.clear()
        for m, parent, _ in items:
            d = 0 if parent is None else depth[parent] + 1
            depth[m["id"]] = d
            for key, value in (
                ("session_id", sid),
                ("id", m["id"]),
                ("parent_id", parent),
                ("depth", d),
                ("role", m["role"]),
                ("text", _msg.message_text(m)),
                ("n_parts", len(m["parts"])),
                ("tool_names", tool_names(m)),
                ("tokens", _msg.estimate_tokens(m)),
                ("bytes", len(_msg.dumps(m))),
                ("created_at", m["createdAt"]),
            ):
                cols[key].append(value)
    src_messages = pa.table(cols)
    src_runs = pa.table(
        {
            "session_id": [f"s{k}" for k in range(n // PER_SESSION)],
            "status": ["completed" if k % 7 else "failed" for k in range(n // PER_SESSION)],
        }
    )
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.register("src_messages", src_messages)
    con.register("src_runs", src_runs)
    con.execute("CREATE TABLE messages AS SELECT * REPLACE (created_at::TIMESTAMPTZ AS created_at) FROM src_messages")
    con.execute("CREATE TABLE runs AS SELECT * FROM src_runs")
    return con


class Peak:
    """Peak resident memory above the level at start (sampled every millisecond); with
    ``python=True`` also the peak of Python allocations (tracemalloc, which slows Python
    code down: so timings are taken without it)."""

    def __init__(self, python: bool = False):
        self.python = python
        self.py_mb = 0.0

    def __enter__(self):
        gc.collect()
        self.base = self.rss()
        self.peak = self.base
        self.done = False
        self.thread = threading.Thread(target=self._sample, daemon=True)
        if self.python:
            tracemalloc.start()
        self.thread.start()
        return self

    def _sample(self):
        while not self.done:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.001)

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __exit__(self, *exc):
        self.done = True
        self.thread.join()
        self.peak = max(self.peak, self.rss())
        if self.python:
            self.py_mb = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        self.mb = (self.peak - self.base) / 2**20


def python_peak(target: str, fn) -> float:
    """Peak Python allocations (MB) of ``fn(store)`` on a store just opened."""
    with sk.open_store(target) as store, Peak(python=True) as p:
        fn(store)
    return p.py_mb


def timed(fn):
    with Peak() as p:
        t = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - t
    return elapsed, out, p


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _has_adbc() -> bool:
    import importlib.util

    return importlib.util.find_spec("adbc_driver_sqlite") is not None


def fmt(s: float) -> str:
    return f"{s * 1000:,.1f} ms" if s < 10 else f"{s:,.1f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="messages per store (100 per session)")
    ap.add_argument("--engines", default="duckdb,sqlite,postgresql")
    ap.add_argument("--url", default=os.environ.get("SESSIONKIT_PG_URL"), help="PostgreSQL database")
    ap.add_argument("--appends", type=int, default=1000, help="appends before the repeat query")
    ap.add_argument("--out", help="also write the Markdown report to this file")
    args = ap.parse_args(argv)
    n = args.n
    tmp = tempfile.TemporaryDirectory(prefix="sk-analysis-bench-")
    adbc = "with" if _has_adbc() else "without"
    lines = [
        f"{n:,} messages in {n // PER_SESSION:,} sessions; Python {sys.version.split()[0]}, "
        f"DuckDB {__import__('duckdb').__version__}, {os.cpu_count()} cores, {adbc} the ADBC SQLite driver",
        "",
    ]

    with sk.open_store() as warm:  # pandas and pyarrow load once per process, not per query: not timed
        warm.sql("SELECT count(*) FROM messages")
    print(f"raw DuckDB tables of {n:,} messages ...", flush=True)
    raw = raw_tables(n)
    raw_times = {name: best(lambda q=q: raw.execute(q).fetchall()) for name, q in QUERIES.items()}
    raw_df = best(lambda: raw.execute(f"SELECT {D1} FROM messages").fetchdf(), 2)
    expected = {name: raw.execute(q).fetchall() for name, q in QUERIES.items()}

    header = (
        "| engine | query | raw DuckDB | first | ratio | warm | ratio | after appends | ratio |"
        " peak RSS | peak Python |"
    )
    rows = [header, "|" + "---|" * 11]
    frames = [
        "| engine | messages_df() | raw fetchdf() | ratio | peak RSS | peak Python |",
        "|---|---|---|---|---|---|",
    ]
    for engine in args.engines.split(","):
        if engine == "postgresql":
            if not args.url:
                print("no PostgreSQL (--url or SESSIONKIT_PG_URL): skipped", flush=True)
                continue
            sep = "&" if "?" in args.url else "?"
            target = f"{args.url}{sep}schema=analysis_bench_{os.getpid()}"
        else:
            target = str(Path(tmp.name) / f"bench.{'db' if engine == 'sqlite' else 'duckdb'}")
        print(f"{engine}: building {n:,} messages through import_many ...", flush=True)
        with sk.open_store(target) as store:
            built = build(store, n)
        print(f"  built in {built:,.1f} s", flush=True)
        # The first query ever on the store: on SQLite it builds the cache file beside the
        # store (kept: later store objects and processes read only what changed since); on
        # PostgreSQL the cache is in memory and every store object builds its own.
        with sk.open_store(target) as store:
            cold, _, pc = timed(lambda: store.sql("SELECT count(*) FROM messages"))
        lines.append(f"- {engine}: built in {built:,.1f} s; first query ever {fmt(cold)} (peak RSS {pc.mb:,.0f} MB)")
        print(lines[-1], flush=True)
        for name, query in QUERIES.items():
            with sk.open_store(target) as store:  # a store just opened: nothing cached
                run = store.sql
                first, df, p1 = timed(lambda: run(query))  # noqa: B023 (called here)
                got = [tuple(r) for r in df.itertuples(index=False)]
                if [tuple(x) for x in got] != [tuple(x) for x in expected[name]]:
                    raise SystemExit(f"{engine} {name}: store.sql disagrees with raw DuckDB:\n{got}\n{expected[name]}")
                warm = best(lambda: run(query))  # noqa: B023
                s = store.session("appended")
                for i in range(args.appends):
                    s.append({"id": f"{name}-{i}", "role": "user", "parts": [{"type": "text", "text": "more"}]})
                after, _, _ = timed(lambda: run(query))  # noqa: B023
            # raw DuckDB again at this moment: on a shared machine the load moves within a run
            r = min(raw_times[name], best(lambda q=query: raw.execute(q).fetchall()))
            py = python_peak(target, lambda st, q=query: st.sql(q))
            rows.append(
                f"| {engine} | {name} | {fmt(r)} | {fmt(first)} | {first / r:,.1f}x | {fmt(warm)} |"
                f" {warm / r:,.1f}x | {fmt(after)} | {after / r:,.1f}x | {p1.mb:,.0f} MB |"
                f" {py:,.1f} MB |"
            )
            print(rows[-1], flush=True)
        with sk.open_store(target) as store:
            store.sql("SELECT count(*) FROM messages")  # the cache is built (SQLite, PostgreSQL)
            elapsed, df, p = timed(lambda: store.messages_df())
            assert len(df) == n + len(QUERIES) * args.appends
            again = best(lambda: store.messages_df(), 2)
        py = python_peak(target, lambda st: st.messages_df())
        took = min(elapsed, again)
        raw_df = best(lambda: raw.execute(f"SELECT {D1} FROM messages").fetchdf(), 2)  # the same moment
        frames.append(
            f"| {engine} | {fmt(took)} | {fmt(raw_df)} | {took / raw_df:,.1f}x | {p.mb:,.0f} MB | {py:,.1f} MB |"
        )
        print(frames[-1], flush=True)
    report = "\n".join(lines + ["", *rows, "", *frames]) + "\n"
    print()
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
