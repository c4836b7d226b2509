"""The views of ``store.sql`` against a Python reference, on every engine.

The reference is :class:`sessionkit.analysis._tables.StoreData`: every message read
through the public API, decoded in Python, and the tree columns taken from the store's
tree read model (:class:`sessionkit.store.Tree`). The views compute the same from the
stored analysis columns in SQL (see ``sessionkit/store/sql/views.py``). Stores here hold
branches, several roots, compactions (nested, superseded, and one whose range is not a
path), updates, deletes, clears, imports, runs and events; each is compared after
every step, so an analysis cache refreshed from the change log is checked after each
kind of write, including writes by a second store object on the same store.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from helpers import msg, wait_until, with_tools

import sessionkit as sk
from sessionkit.analysis import arrow_table
from sessionkit.analysis._tables import StoreData

VIEWS = ("messages", "sessions", "compactions", "runs", "events", "labels")
KEYS = {
    "messages": ("session_id", "id"),
    "sessions": ("session_id",),
    "compactions": ("session_id", "id"),
    "runs": ("run_id",),
    "events": ("session_id", "seq"),
    "labels": ("id",),
}


def _norm(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _rows(table, columns) -> list[dict]:
    out = []
    for row in table.select(columns).to_pylist():
        out.append({k: _norm(v) for k, v in row.items()})
    return out


def _keyed(rows, name):
    return {tuple(r[k] for k in KEYS[name]): r for r in rows}


def assert_views_match(store):
    """Every view equals the Python reference, row by row and column by column."""
    data = StoreData(store)
    for name in VIEWS:
        ref = arrow_table(data, name, extra=True) if name == "messages" else arrow_table(data, name)
        got = store.to_arrow(name)
        columns = ref.column_names
        assert set(columns) <= set(got.column_names), name
        want, have = _keyed(_rows(ref, columns), name), _keyed(_rows(got, columns), name)
        assert sorted(have, key=repr) == sorted(want, key=repr), name
        for key, row in want.items():
            if name == "messages" and row["metadata"] is not None:  # the same JSON, maybe spelled otherwise
                assert json.loads(have[key]["metadata"]) == json.loads(row["metadata"])
                have[key] = {**have[key], "metadata": row["metadata"]}
            assert have[key] == row, (name, key)
    seqs = store.sql("SELECT seq FROM messages ORDER BY seq")["seq"].tolist()
    assert seqs == [r["seq"] for r in _rows(arrow_table(data, "messages", extra=True), ["seq"])]


def _comp(cid, start, end, summary="summary"):
    return sk.Compaction(cid, start, end, summary, "2024-05-01T00:00:00.000Z", 900, 90)


def scenario(store, other=None):
    """Writes of every kind, yielding after each so the views are compared there. ``other``
    (a second store object on the same store, or None) makes some of the writes."""
    w = other or store
    a = store.session("a")
    for i in range(6):
        m = msg(f"a{i}", role="user" if i % 2 == 0 else "assistant")
        a.append(with_tools(m, "search") if i == 3 else m)
    yield "appends"
    a.append(with_tools(msg("b1", "branch"), "calc", "search"), parent_id="a2")  # a branch point at a2
    a.append(msg("b2", "on the branch", "assistant"))
    a.append(msg("r2", "second root"), parent_id=None)
    yield "branches"
    a.add_label("a2", "good", rating=4, note="", author="ana")  # an empty note is no NULL (PostgreSQL's CSV)
    a.add_label("b2", "branch-end", target="branch", rating=-1.5)
    w.add_label("a", "a5", "bad", note='line\nbreak, "quoted"')
    yield "labels"
    a.import_compaction(_comp("c-old", "a0", "a3"))
    a.import_compaction(_comp("c-new", "a1", "a4"))  # overlaps the older one: the newer wins there
    a.import_compaction(_comp("c-broken", "b1", "a5"))  # b1 is not above a5: covers nothing
    a.import_compaction(_comp("c-branch", "a2", "b2"))
    yield "compactions"
    ws = w.session("a")
    ws.update(with_tools(msg("a3", "rewritten", "assistant", metadata={"edited": True}), "fetch"))
    yield "update"
    ws.import_many(
        [
            (msg("i1", "imported", "assistant"), "a5", 1_700_000_000_000),
            (with_tools(msg("i2", "imported too"), "calc"), "i1", None),
        ]
    )
    w.session("z").import_message(msg("z1", "another session", metadata={"k": [1, 2]}), created_at=1_600_000_000_000)
    yield "imports"
    ws.delete("b2")  # a compaction endpoint: c-branch goes with it
    yield "delete"
    w.run_log.begin("a", "a.1", "hello")
    w.run_log.end(
        "a.1", status="completed", usage={"in": 10, "out": 4.9, "cost_usd": 0.5, "model": "m", "cache_read": True}
    )
    w.run_log.begin("solo", "solo.1", None)  # a session with a run and nothing else
    w.run_log.begin("a", "a.2", "what if", meta={"at": "a2", "variant": "terse", "settings": {"temperature": 0}})
    w.run_log.begin("a", "a.3", "again", meta={"at": None, "variant": 3, "note": 'é \\ "q"'})  # no id, no name
    w.run_log.append_events(
        "a",
        [
            {"run_id": "a.1", "kind": "run.start", "ts": "2024-05-01T00:00:01.000Z"},
            {"run_id": "a.1", "kind": "run.end", "ts": "2024-05-01T00:00:02.500Z"},
        ],
    )
    w.run_log.append_events("ev", [{"kind": "note"}])
    yield "runs and events"
    assert w.remove_label(w.labels(tag="bad")[0].id)
    w.add_label("z", "z1", "in z", rating=0)
    yield "label removed"
    last = store.session("z").append(msg("z2", "newest"))
    assert last.inserted
    w.session("z").delete("z2")  # the newest row: SQLite may give its seq to the next row
    store.session("y").append(msg("y1", "takes the seq"))
    yield "seq reuse"
    z = w.session("z")
    z.clear()
    z.append(msg("z9", "after clear"))
    yield "clear"
    w.delete_session("ev")
    a.append_many([msg("n1", "many one"), with_tools(msg("n2", "many two", "assistant"), "search")], parent_id="r2")
    yield "delete session, append_many"
    ws.delete(["a1"], subtree=True)
    yield "delete subtree"


@pytest.mark.slow
def test_views_match_the_python_reference_after_every_kind_of_write(engine, new_store):
    store = new_store(engine)
    for step in scenario(store):
        assert_views_match(store), step


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_views_follow_writes_of_another_store_object(engine, new_store):
    if engine == "duckdb":
        store = new_store(engine)
        other = sk.open_store(store.path)  # the same file in this process
    else:
        store = new_store(engine)
        other = sk.open_store(store.path)
    try:
        for step in scenario(store, other):
            assert_views_match(store), step
            assert_views_match(other), step
    finally:
        other.close()


def test_tree_columns_by_hand(engine, new_store):
    """A small tree whose answers are written down: runs of rows, branches, compactions."""
    store = new_store(engine, memory=True)
    s = store.session("t")
    s.append(msg("r"))
    s.append(msg("x"))
    s.append(msg("y"))
    s.append(msg("x2"), parent_id="r")
    s.append(msg("y2"), parent_id="x")  # under x, not after it: a new run
    s.import_compaction(_comp("c1", "r", "y2"))
    df = store.sql("SELECT id, n_children, on_latest_path, compacted_by FROM messages ORDER BY seq")
    rows = {
        r["id"]: (
            r["n_children"],
            r["on_latest_path"],
            r["compacted_by"] if isinstance(r["compacted_by"], str) else None,
        )
        for r in df.to_dict("records")
    }
    assert rows == {
        "r": (2, True, "c1"),
        "x": (2, True, "c1"),
        "y": (0, False, None),
        "x2": (0, False, None),
        "y2": (0, True, "c1"),
    }


def test_a_query_that_names_no_tree_column_gives_the_same_rows(engine, new_store):
    store = new_store(engine, memory=True)
    for _ in scenario(store):
        pass
    light = store.sql("SELECT session_id, id, role, text, tokens FROM messages ORDER BY seq")
    full = store.sql("SELECT * FROM messages ORDER BY seq")[["session_id", "id", "role", "text", "tokens"]]
    assert light.equals(full)
    assert store.sql("SELECT count(*) AS n FROM messages WHERE on_latest_path")["n"][0] > 0


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM messages",
        "INSERT INTO sessionkit_messages (seq) VALUES (1)",
        "UPDATE sessionkit_messages SET role = 'x'",
        "DROP TABLE sessionkit_messages",
        "CREATE TABLE t AS SELECT 1",
        "ATTACH ':memory:' AS other",
        "SELECT 1; DELETE FROM messages",
    ],
)
def test_a_query_cannot_write_the_store(engine, new_store, statement):
    store = new_store(engine, memory=True)
    store.session("s").append(msg("m1"))
    with pytest.raises(ValueError, match="store.sql"):
        store.sql(statement)
    assert len(store.session("s")) == 1
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 1


def test_nextval_is_refused_on_a_duckdb_store(new_store):
    store = new_store("duckdb", memory=True)
    with pytest.raises(ValueError, match="nextval"):
        store.sql("SELECT nextval('sessionkit_seq')")


def test_a_duckdb_query_sees_one_snapshot_while_writers_go_on(new_store):
    """A long query on a DuckDB store reads one state: rows committed while it runs do not show."""
    import threading

    store = new_store("duckdb")
    s = store.session("s")
    s.append_many([msg(f"m{i}") for i in range(200)])
    started, counts = threading.Event(), []

    def writer():
        started.wait()
        for i in range(50):
            s.append(msg(f"w{i}"))

    t = threading.Thread(target=writer)
    t.start()
    # one statement reads the table twice (through two views); a writer committing in between
    # would make them differ
    query = (
        "SELECT (SELECT count(*) FROM messages) AS a, (SELECT count(*) FROM range(3000000)) AS pause,"
        " (SELECT sum(message_count) FROM sessions) AS b"
    )
    started.set()
    for _ in range(5):
        row = store.sql(query).iloc[0]
        counts.append((row["a"], row["b"]))
    t.join()
    assert all(a == b for a, b in counts)
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 250


def test_runs_df_events_df_and_to_arrow(engine, new_store):
    store = new_store(engine, memory=True)
    for _ in scenario(store):
        pass
    runs = store.runs_df()
    assert list(runs["run_id"]) == ["a.1", "a.2", "a.3", "solo.1"]
    # where a run started and its variant, read out of its meta (a.3's are no id and no name)
    picked = (
        runs[["started_at_message", "variant"]]
        .astype(object)
        .where(runs[["started_at_message", "variant"]].notna(), None)
    )
    assert picked.values.tolist() == [[None, None], ["a2", "terse"], [None, None], [None, None]]
    assert json.loads(runs["meta"].tolist()[1])["settings"] == {"temperature": 0}
    assert runs["tokens_out"].tolist()[0] == 4 and runs["cost_usd"].tolist()[0] == 0.5
    assert runs["cache_read"].isna().tolist()[0]  # a bool is not a count
    events = store.events_df(session_ids=["a"])
    assert list(events["kind"]) == ["run.start", "run.end"] and list(events["seq"]) == [0, 1]
    assert str(events["ts"].dt.tz) == "UTC"
    assert store.events_df().shape[0] == 2  # "ev" was deleted with its session
    table = store.to_arrow("messages")
    import pyarrow as pa

    assert isinstance(table, pa.Table) and table.num_rows == sum(
        len(store.session(i.id)) for i in store.list_sessions()
    )
    with pytest.raises(ValueError, match="unknown view"):
        store.to_arrow("nothing")


def test_wide_columns_are_read_when_a_query_first_names_them(engine, new_store):
    """``text`` and ``metadata`` join the analysis cache when a query first names them; the
    rows written before and after are all right then (checked against the reference)."""
    store = new_store(engine)
    s = store.session("w")
    s.append(msg("w1", "first words", metadata={"n": 1}))
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 1  # no text read yet
    s.append(msg("w2", "second words"))
    s.update(msg("w1", "first words, changed", metadata={"n": 2}))
    got = store.sql("SELECT id, text, metadata FROM messages ORDER BY seq")
    assert got["text"].tolist() == ["first words, changed", "second words"]
    assert json.loads(got["metadata"][0]) == {"n": 2}
    s.append(msg("w3", "third words"))
    assert store.sql("SELECT list(text ORDER BY seq) AS t FROM messages")["t"][0].tolist() == [
        "first words, changed",
        "second words",
        "third words",
    ]
    assert_views_match(store)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize("reader", ["adbc", "store connection"])
def test_a_sqlite_file_cache_through_either_reader(new_store, monkeypatch, reader):
    """A SQLite file's cache reads through the ADBC driver when it is installed, else through
    the store's own connection (pages of Python rows): both give the reference's views."""
    from sessionkit.store.engines.sqlite import analysis as sqlite_source
    from sessionkit.store.sql import cache as _cache

    if reader == "adbc":
        pytest.importorskip("adbc_driver_sqlite", reason="the ADBC SQLite driver is in the analysis extra")
    else:
        monkeypatch.setattr(sqlite_source, "_adbc_sqlite", lambda: None)
        monkeypatch.setattr(_cache, "_PAGE", 3)  # several pages
    store = new_store("sqlite-file")
    for step in scenario(store):
        assert_views_match(store), step
    assert (store._engine._analysis._adbc is not None) == (reader == "adbc")


@pytest.mark.slow
def test_a_first_load_of_many_driver_batches_equals_the_reference(new_store):
    """The ADBC driver hands rows over in batches (1,024 rows each by default), read ahead
    by a thread while DuckDB writes the ones before: a store of several batches, with
    branches and deletes between them, loads into a new cache file in full and in order."""
    pytest.importorskip("adbc_driver_sqlite", reason="the ADBC SQLite driver is in the analysis extra")
    store = new_store("sqlite-file")
    for k in range(6):
        s = store.session(f"b{k}")
        parent = None
        items = []
        for i in range(700):
            m = msg(f"m{i}", f"words {k} {i}", "user" if i % 2 else "assistant")
            if i % 9 == 0:
                m = with_tools(m, "t")
            items.append((m, parent, None))
            parent = m["id"] if i != 400 else items[300][0]["id"]  # a branch under message 300
        s.import_many(items)
    store.session("b2").delete("m650", subtree=True)
    path = store.path
    store.close()
    with sk.open_store(path) as again:  # a new store object: its cache loads from nothing
        assert again.sql("SELECT count(*) AS n FROM messages")["n"][0] == 6 * 700 - 50
        assert threading_names() == set()
        assert_views_match(again)


def threading_names() -> set[str]:
    import threading

    return {t.name for t in threading.enumerate() if t.name.startswith("sessionkit-cache")}


def _batches(n: int, fail_at: int | None = None):
    import pyarrow as pa

    def gen():
        for k in range(n):
            if k == fail_at:
                raise OSError("disk I/O error while reading")
            yield pa.record_batch({"k": pa.array(range(k * 100, k * 100 + 100), pa.int64())})

    schema = pa.schema([("k", pa.int64())])
    return pa.RecordBatchReader.from_batches(schema, gen())


def test_the_read_ahead_gives_every_batch_in_order_and_an_error_of_the_driver():
    """The thread reading ahead hands every batch to DuckDB in order; an error of the reader
    ends the DuckDB statement with that error; a consumer that stops early stops the thread."""
    import duckdb

    from sessionkit.store.engines.sqlite.analysis import _read_ahead

    con = duckdb.connect()
    with _read_ahead(_batches(50)) as reader:
        con.register("b", reader)
        got = [r[0] for r in con.execute("SELECT k FROM b").fetchall()]
    assert got == list(range(5000))
    assert threading_names() == set()
    with _read_ahead(_batches(50, fail_at=7)) as reader:
        con.register("b", reader)
        with pytest.raises(Exception, match="disk I/O error while reading"):
            con.execute("CREATE TABLE t AS SELECT k FROM b").fetchall()
    assert threading_names() == set()
    with _read_ahead(_batches(10_000)) as reader:
        assert next(iter(reader)).num_rows == 100  # then stops reading
    assert threading_names() == set()


AWKWARD_TEXTS = [
    "",
    "NULL",
    "null",
    "N/A",
    "NaN",
    "a, b",
    'say "hi"',
    '""',
    "two\nlines",
    "cr\r\nlf",
    "\\.",
    "tab\there",
    "é ü 日本 🙂",
    "-1",
    " padded ",
    "\\N",
]


def test_texts_that_csv_or_null_markers_could_bend_arrive_unchanged(engine, new_store):
    """PostgreSQL's cache reads its rows as CSV (COPY): empty texts, the words CSV readers
    take for NULL, quotes, commas, line breaks and ``\\.`` arrive as they were written, in
    every column that holds text (and the same on every engine)."""
    store = new_store(engine)
    sid = 'awkward, "session"\n'
    s = store.session(sid)
    parent = None
    for k, text in enumerate(AWKWARD_TEXTS):
        m = {"id": f"m{k}", "role": "user", "parts": [{"type": "text", "text": text}], "metadata": {"v": text}}
        if k % 2:
            m["parts"].append(
                {"type": 'tool-a,"b"', "toolCallId": f"call{k}", "state": "input-available", "input": {"q": text}}
            )
        s.append(m, parent_id=parent)
        parent = m["id"]
    s.import_compaction(sk.Compaction('c, "1"', "m1", "m4", 'sum\nmary, "quoted"', "2024-01-01T00:00:00.000Z", 10, 2))
    store.run_log.begin(sid, "r1", 'input, with "quotes"\nand a line')
    store.run_log.end("r1", status="completed", usage={"model": "NULL", "cost_usd": 0.5})
    store.run_log.begin(sid, "r2", "")  # an empty text, not a missing one
    store.run_log.end("r2", status="failed", error="")
    runs = store.to_arrow("runs").sort_by("run_id").select(["run_id", "input", "error"]).to_pylist()
    assert runs == [
        {"run_id": "r1", "input": 'input, with "quotes"\nand a line', "error": None},
        {"run_id": "r2", "input": "", "error": ""},
    ]
    got = store.sql("SELECT id, text FROM messages ORDER BY seq")
    assert got["text"].tolist() == [text for text in AWKWARD_TEXTS]
    assert_views_match(store)


def test_the_cache_stays_right_under_concurrent_writers(engine, new_store):
    """Writers on other threads (and, but for DuckDB, another store object) append, update and
    delete while queries run; once they stop, the views equal the reference."""
    import threading

    store = new_store(engine)
    other = store if engine == "duckdb" else sk.open_store(store.path)
    store.sql("SELECT count(*) FROM messages")  # the cache exists before the writers start
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            s = other.session(f"w{k}")
            for i in range(40):
                s.append(with_tools(msg(f"m{i}"), "t") if i % 3 == 0 else msg(f"m{i}"))
                if i % 7 == 6 and (i - 3) % 11 != 10:  # (not one deleted below)
                    s.update(msg(f"m{i - 3}", f"updated {i}", "assistant"))
                if i % 11 == 10:
                    s.delete(f"m{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        df = store.sql("SELECT session_id, count(*) AS n, sum(tokens) AS t FROM messages GROUP BY ALL")
        assert (df["n"] <= 40).all()
    for t in threads:
        t.join()
    assert not errors
    assert_views_match(store)
    if other is not store:
        other.close()


@pytest.mark.kill
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def test_the_cache_is_right_after_a_writer_process_is_killed(kind, new_store):
    """A process writing in a loop is killed (SIGKILL) at some point of a write; the views
    of a store that had its cache before then equal the reference."""
    import signal
    import subprocess
    import sys

    store = new_store(kind)  # (a DuckDB file admits one process)
    store.session("pre").append(msg("p1"))
    store.sql("SELECT count(*) FROM messages")
    code = (
        "import sys, sessionkit as sk\n"
        "st = sk.open_store(sys.argv[1])\n"
        "s = st.session('killed')\n"
        "print('ready', flush=True)\n"
        "i = 0\n"
        "while True:\n"
        "    s.append_many([{'id': f'k{i}', 'role': 'user', 'parts': [{'type': 'text', 'text': 'x' * 500}]},"
        " {'id': f'k{i}b', 'role': 'assistant', 'parts': [{'type': 'tool-t', 'toolCallId': 'c', 'input': {}}]}])\n"
        "    if i % 5 == 4:\n"
        "        s.update({'id': f'k{i - 2}', 'role': 'user', 'parts': [{'type': 'text', 'text': 'changed'}]})\n"
        "    i += 1\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, store.path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        # some writes have landed, more are coming: the refresh runs while it writes
        wait_until(
            lambda: len(store.session("killed")) >= 20 or proc.poll() is not None,
            what="the writer's first twenty messages",
        )
        assert proc.poll() is None, "the writer ended on its own"
        store.sql("SELECT count(*) FROM messages")  # a refresh while it writes
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(store.session("killed")) > 0
    assert_views_match(store)


def test_views_of_some_sessions_equal_the_store_wide_ones_filtered(engine, new_store):
    store = new_store(engine, memory=True)
    for _ in scenario(store):
        pass
    full = store.messages_df()
    for ids in (["a"], ["z", "y"], ["no such session"], ["it's", "a"]):
        some = store.messages_df(session_ids=ids)
        want = full[full["session_id"].isin(ids)].reset_index(drop=True)
        assert some.equals(want), ids
        got = store.sql_arrow("SELECT count(*) AS n FROM sessions", session_ids=ids).to_pylist()[0]["n"]
        assert got == len(set(ids) & {i.id for i in store.list_sessions()} | (set(ids) & {"solo"}))
    assert store.sql("SELECT count(DISTINCT session_id) AS n FROM messages")["n"][0] == len(store.list_sessions())


# ---------------------------------------------------------------------------
# The cache file beside a SQLite store (x.db-analysis.duckdb)


def _cache(store):
    return store._engine._analysis


def _count(store) -> int:
    return int(store.sql("SELECT count(*) AS n FROM messages")["n"][0])


def later(store):
    """Writes of every kind on a store the scenario wrote (a new store object), yielding after each."""
    a = store.session("later")
    a.append_many([msg(f"l{i}", role="user" if i % 2 == 0 else "assistant") for i in range(6)])
    a.append(msg("lb", "a branch"), parent_id="l3")
    yield "appends"
    a.update(with_tools(msg("l4", "rewritten later", "assistant"), "later"))
    yield "update"
    a.import_compaction(_comp("c-later", "l0", "l5"))
    yield "compaction"
    a.delete("l5")
    yield "delete"
    store.session("k").import_many([(msg("k1", "imported later"), None, 1_650_000_000_000)])
    yield "import"
    store.run_log.begin("k", "k.1", "go")
    store.run_log.append_events("k", [{"run_id": "k.1", "kind": "run.start"}])
    yield "runs and events"
    store.session("later").append(msg("l9", "appended later"))
    store.delete_session("k")
    yield "append, delete session"


@pytest.mark.slow
def test_postgresql_a_message_committed_below_the_highest_seq_held_is_read(new_store):
    """PostgreSQL commits transactions in any order: a message given a lower seq by a
    transaction still open when the cache read a higher one appears once it commits."""
    import threading

    store = new_store("postgresql")
    other = sk.open_store(store.path)
    try:
        store.session("a").append(msg("a0"))
        assert _count(store) == 1
        inside, release, errors = threading.Event(), threading.Event(), []

        def slow_writer() -> None:
            try:
                with other.transaction():
                    other.session("slow").append(msg("low"))  # its seq is taken now
                    inside.set()
                    release.wait(300)  # a hang guard: released right after the reads below
            except BaseException as exc:
                errors.append(exc)
                inside.set()

        thread = threading.Thread(target=slow_writer)
        thread.start()
        assert inside.wait(120) and not errors  # a hang guard
        store.session("a").append(msg("high"))  # a higher seq, committed first
        ids = store.sql("SELECT id FROM messages ORDER BY seq")["id"].tolist()
        assert ids == ["a0", "high"]
        release.set()
        thread.join(120)  # a hang guard
        assert not errors
        ids = store.sql("SELECT id, seq FROM messages ORDER BY seq")["id"].tolist()
        assert ids == ["a0", "low", "high"]
        assert_views_match(store)
    finally:
        release.set()
        other.close()


@pytest.mark.slow
def test_postgresql_a_query_with_nothing_committed_since_reads_nothing(new_store, monkeypatch):
    """A refresh whose snapshot sees what the last one saw runs one statement (the snapshot's
    state), not the log, the counts or the rows; a write by another store object changes it."""
    store = new_store("postgresql")
    for _ in scenario(store):
        pass
    _count(store)
    engine = store._engine
    statements: list[str] = []
    fetch = engine.fetch

    def counted(sql, params=()):
        statements.append(sql)
        return fetch(sql, params)

    monkeypatch.setattr(engine, "fetch", counted)
    monkeypatch.setattr(engine, "fetch_one", lambda sql, params=(): (counted(sql, params) or [None])[0])
    # The snapshot is the whole server's: a commit anywhere on it (another test's store) moves
    # it, and the refresh then looks further (and finds nothing of this store). Asked again
    # until a refresh meets a server with nothing committed since the last one.
    for _ in range(500):
        statements.clear()
        held = _count(store)
        if len(statements) == 1:
            break
    assert len(statements) == 1 and "pg_current_snapshot" in statements[0], statements
    with sk.open_store(store.path) as other:
        other.session("x").append(msg("x1"))
    statements.clear()
    assert _count(store) == held + 1
    assert len(statements) > 1
    assert_views_match(store)


@pytest.mark.slow
def test_postgresql_a_cache_load_that_fails_midway_leaves_the_store_and_cache_working(new_store, monkeypatch):
    """DuckDB stops reading a COPY after its first batch (an error): the query fails with it,
    nothing of the partial load stays in the cache, and the store object goes on: its writes
    and its next queries (on the same connections) equal the reference."""
    store = new_store("postgresql")
    s = store.session("big")
    s.import_many([(msg(f"m{i}", "words " * 50), f"m{i - 1}" if i else None, None) for i in range(3000)])
    from sessionkit.store.sql import cache as _cache

    real = _cache.Cache.insert_arrow
    failures = []

    def failing(self, table, cols, source, where=""):
        if table == "sessionkit_messages" and not failures:
            failures.append(table)
            next(iter(source))  # one batch read, then DuckDB fails
            raise _cache.duckdb_module().IOException("disk full while writing the cache")
        return real(self, table, cols, source, where)

    monkeypatch.setattr(_cache.Cache, "insert_arrow", failing)
    with pytest.raises(Exception, match="disk full while writing the cache"):
        store.sql("SELECT count(*) AS n FROM messages")
    assert failures
    assert _count(store) == 3000
    s.append(msg("after"))
    assert s.get("after")["id"] == "after"
    assert _count(store) == 3001
    assert_views_match(store)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_a_store_opened_again_reads_only_what_changed_since(new_store):
    """The cache outlives the store object: opened again (here or in a new process), a query
    reads the rows written since, and the views still equal the reference."""
    import subprocess
    import sys

    store = new_store("sqlite")
    path = store.path
    for _ in scenario(store):
        pass
    held = _count(store)
    store.close()
    assert Path(path + "-analysis.duckdb").exists()
    with sk.open_store(path) as again:
        again.session("late").append_many([msg("n1"), msg("n2"), msg("n3")])
        assert _count(again) == held + 3
        assert _cache(again).reads == 3
        for _ in later(again):
            assert_views_match(again)
    code = (
        "import sys, sessionkit as sk\n"
        "st = sk.open_store(sys.argv[1])\n"
        "st.session('new').append({'id': 'n', 'role': 'user', 'parts': [{'type': 'text', 'text': 'x'}]})\n"
        "st.sql('SELECT count(*) FROM messages')\n"
        "print(st._engine._analysis.reads, st._engine._analysis.file is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "True"]
    with sk.open_store(path) as last:
        assert_views_match(last)


@pytest.mark.parametrize(
    "harm",
    [
        "garbage",
        "truncated",
        "deleted",
        "older layout",
        "store of another",
        "store restored from an older copy",
        "cache from an older state",
    ],
)
def test_a_cache_file_that_does_not_describe_the_store_is_never_believed(new_store, tmp_path, harm):
    """Whatever happened to the cache file (or to the store beside it), the views equal the
    reference: a file that is not a cache of this store's state is made again."""
    import duckdb

    store = new_store("sqlite")
    path = store.path
    cache_file = path + "-analysis.duckdb"
    for _ in scenario(store):
        pass
    _count(store)
    copy = tmp_path / "copy"
    copy.mkdir()
    if harm == "store restored from an older copy":
        store.close()
        shutil.copy(path, copy / "store.db")
        store = sk.open_store(path)
    if harm == "cache from an older state":
        store.close()
        shutil.copy(cache_file, copy / "cache")
        store = sk.open_store(path)
    for _ in later(store):
        pass
    _count(store)
    store.close()
    if harm == "garbage":
        Path(cache_file).write_bytes(b"not a database" * 1000)
    elif harm == "truncated":
        data = Path(cache_file).read_bytes()
        Path(cache_file).write_bytes(data[: len(data) // 3])
    elif harm == "deleted":
        Path(cache_file).unlink()
    elif harm == "older layout":
        con = duckdb.connect(cache_file)
        con.execute("UPDATE sessionkit_cache_meta SET value = '0' WHERE key = 'format'")
        con.execute("DELETE FROM sessionkit_messages WHERE seq % 2 = 0")  # what an older layout held differs
        con.close()
    elif harm == "store of another":  # another store with as many rows, the same seqs, other contents
        other_path = str(tmp_path / "other.db")
        with sk.open_store(path) as mine, sk.open_store(other_path) as other:
            rows = mine.sql("SELECT session_id, count(*) AS n FROM messages GROUP BY ALL ORDER BY session_id")
            for sid, n in zip(rows["session_id"], rows["n"]):
                other.session(sid + "-other").append_many([msg(f"o{i}", "other") for i in range(n)])
        _remove_store(path)
        shutil.copy(other_path, path)
    elif harm == "store restored from an older copy":
        _remove_store(path)
        shutil.copy(copy / "store.db", path)
    elif harm == "cache from an older state":
        Path(cache_file + ".wal").unlink(missing_ok=True)
        shutil.copy(copy / "cache", cache_file)
    with sk.open_store(path) as again:
        assert_views_match(again)
        again.session("later").append(msg("l10", "after"))
        assert_views_match(again)


def _remove_store(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(path + suffix).unlink(missing_ok=True)


@pytest.mark.kill
def test_a_process_killed_while_it_refreshes_the_cache_file_leaves_it_right(new_store):
    """A process appending and querying in a loop is killed (SIGKILL), maybe in the middle of a
    refresh of the cache file: the next store object's views equal the reference."""
    import random
    import signal
    import subprocess
    import sys
    import time

    store = new_store("sqlite")
    path = store.path
    store.session("pre").append(msg("p1"))
    _count(store)
    store.close()
    code = (
        "import sys, sessionkit as sk\n"
        "st = sk.open_store(sys.argv[1])\n"
        "s = st.session('killed')\n"
        "st.sql('SELECT count(*) FROM messages')\n"
        "print('ready', flush=True)\n"
        "i = 0\n"
        "while True:\n"
        "    s.append_many([{'id': f'k{i}.{j}', 'role': 'user', 'parts': [{'type': 'text', 'text': 'x'}]}"
        " for j in range(200)])\n"
        "    if i % 3 == 2:\n"
        "        s.update({'id': f'k{i - 1}.0', 'role': 'user', 'parts': [{'type': 'text', 'text': 'changed'}]})\n"
        "    st.sql('SELECT role, count(*) FROM messages GROUP BY role')\n"
        "    print(i, flush=True)\n"
        "    i += 1\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(3):  # three rounds of writes and refreshes of the cache file done
            assert proc.stdout.readline().strip(), "the process ended on its own"
        # then the kill lands anywhere in a round: in its writes or in its refresh
        time.sleep(random.uniform(0.0, 0.3))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with sk.open_store(path) as again:
        assert len(again.session("killed")) > 0
        assert_views_match(again)
        assert _cache(again).file is not None


def test_store_objects_sharing_the_cache_file_under_concurrent_writers(new_store):
    """Two store objects on one file query from threads (one cache file, refreshed one at a
    time) while a third writes; afterwards both give the reference's views."""
    import threading

    first = new_store("sqlite")
    second, writer = sk.open_store(first.path), sk.open_store(first.path)
    _count(first)
    errors: list[BaseException] = []
    done = threading.Event()

    started = threading.Barrier(3)  # the writer starts once both readers have queried

    def write() -> None:
        try:
            started.wait(timeout=60)
            s = writer.session("w")
            for i in range(60):
                s.append(msg(f"m{i}"))
                if i % 9 == 8:
                    s.update(msg(f"m{i - 4}", "changed", "assistant"))
                if i % 13 == 12:
                    s.delete(f"m{i}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def query(store) -> None:
        try:
            first_query = True
            while first_query or not done.is_set():
                df = store.sql("SELECT count(*) AS n FROM messages WHERE session_id = 'w'")
                assert df["n"][0] <= 60
                if first_query:
                    first_query = False
                    started.wait(timeout=60)
        except BaseException as exc:
            errors.append(exc)
            started.abort()

    threads = [
        threading.Thread(target=write),
        threading.Thread(target=query, args=(first,)),
        threading.Thread(target=query, args=(second,)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _cache(first).file is not None and _cache(first).file == _cache(second).file
    assert_views_match(first)
    assert_views_match(second)
    second.close()
    writer.close()


@pytest.mark.slow
def test_a_cache_file_held_by_another_process_gives_a_cache_in_memory(new_store):
    """DuckDB lets one process write a file: a second process keeps its cache in memory."""
    import subprocess
    import sys

    store = new_store("sqlite")
    path = store.path
    store.session("a").append(msg("a1"))
    store.close()
    code = (
        "import sys, sessionkit as sk\n"
        "st = sk.open_store(sys.argv[1])\n"
        "st.sql('SELECT count(*) FROM messages')\n"
        "print('holding', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "holding"
        with sk.open_store(path) as here:
            here.session("a").append(msg("a2"))
            assert _count(here) == 2
            assert _cache(here).file is None
            assert_views_match(here)
    finally:
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=60)


def test_views_are_made_as_queries_name_them(engine, new_store):
    """Only the views a query names are defined for it; later queries (another view, a view
    reached through ``query_table`` that the parse tree does not show) still find theirs."""
    store = new_store(engine, memory=True)
    for _ in scenario(store):
        pass
    n = store.sql("SELECT count(*) AS n FROM messages")["n"][0]
    assert int(store.sql("SELECT sum(message_count) AS n FROM sessions")["n"][0]) == n
    got = store.sql("SELECT session_id, message_count FROM query_table('sessions') ORDER BY session_id")
    want = store.sql("SELECT session_id, message_count FROM sessions ORDER BY session_id")
    assert got.equals(want)
    assert int(store.sql("SELECT count(*) AS n FROM compactions")["n"][0]) == store.to_arrow("compactions").num_rows
    assert_views_match(store)


def test_every_view_gives_the_columns_and_types_of_view_columns(engine, new_store):
    """``sessionkit.store.VIEW_COLUMNS`` is the one list of the views' columns: each view's
    SQL gives those names, in that order, with Arrow types of those kinds."""
    import pyarrow as pa

    from sessionkit.store import VIEW_COLUMNS

    kinds = {
        "text": pa.types.is_string,
        "int": lambda t: t == pa.int64(),
        "bool": pa.types.is_boolean,
        "float": pa.types.is_floating,
        "time": pa.types.is_timestamp,
        "texts": lambda t: pa.types.is_list(t) and pa.types.is_string(t.value_type),
        "floats": lambda t: pa.types.is_list(t) and pa.types.is_floating(t.value_type),
    }
    store = new_store(engine, memory=True)
    for _ in scenario(store):
        pass
    for view, columns in VIEW_COLUMNS.items():
        got = store.to_arrow(view).schema
        assert got.names == [c for c, _ in columns], view
        for (name, kind), field in zip(columns, got):
            assert kinds[kind](field.type), (view, name, field.type)
