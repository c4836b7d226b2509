"""The DuckDB engine's append journal: single appends are committed as one JSON row each
in ``sessionkit_journal`` and moved into the messages table before any other statement.

What a user must never notice: every read (paths, lookups, counts, search, SQL
analysis, another store object on the file) sees every append; a duplicate id is still
refused; a killed process loses no acknowledged append; a failed move loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import msg

duckdb = pytest.importorskip("duckdb")

import sessionkit as sk  # noqa: E402
from sessionkit.errors import SessionKitError  # noqa: E402
from sessionkit.store._schema import SCHEMA_VERSION  # noqa: E402
from sessionkit.store.engines.duckdb import engine as engine_module  # noqa: E402
from sessionkit.store.engines.duckdb import state as state_module  # noqa: E402

#: what the ``store`` fixture (tests/store/conftest.py) opens here: a DuckDB file
STORE_KIND = "duckdb"


def file_rows(path) -> int:
    """Rows in the journal file beside the DuckDB file ``path`` (its first line is a header)."""
    try:
        with open(str(path) + engine_module._LOG_SUFFIX, "rb") as fh:
            return max(fh.read().count(b"\n") - 1, 0)
    except FileNotFoundError:
        return 0


def journal_rows(store) -> int:
    """Rows waiting in the journal (the file beside a store file, the table in memory), read
    without moving them."""
    eng = store._engine
    table = eng._direct("SELECT count(*) FROM sessionkit_journal")[0][0]
    return table + (file_rows(eng._file) if eng._file is not None else 0)


def moved_rows(store) -> int:
    """Rows in the messages table: those moved out of the journal or written there directly."""
    return store._engine._direct("SELECT count(*) FROM sessionkit_messages")[0][0]


def test_single_appends_wait_in_the_journal_until_a_read(store):
    s = store.session("s")
    for i in range(5):
        assert s.append(msg(f"m{i}", f"text {i}")).inserted
    assert journal_rows(store) == 5 and moved_rows(store) == 0  # the fast path was taken
    assert [m["id"] for m in s.recent_history(0, min_messages=3).messages] == ["m2", "m3", "m4"]
    for i in range(5, 8):
        s.append(msg(f"m{i}", f"text {i}"))
    pending = journal_rows(store)
    assert pending >= 3
    assert [m["id"] for m in s.recent_history(0, min_messages=3).messages] == ["m5", "m6", "m7"]
    assert journal_rows(store) == pending  # the recent window came from memory
    assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(8)]
    assert journal_rows(store) == pending  # the whole path came from memory too
    assert s.get("m3")["parts"][0]["text"] == "text 3"  # a read of the table moves the journal first
    assert journal_rows(store) == 0 and moved_rows(store) == 8


def test_a_session_with_no_row_in_the_journal_is_read_and_appended_to_without_moving_it(tmp_path):
    """A reopened store: an append to one session waits in the journal; the first append to
    another session finds its parent without moving it (all its rows are in the table), and
    a read of a third from the cache leaves it too; a read of the table moves it."""
    path = tmp_path / "j.duckdb"
    with sk.open_store(path) as st:
        for sid in "abc":
            st.session(sid).append_many([msg(f"{sid}{i}", f"text {i}") for i in range(4)])
    with sk.open_store(path) as st:
        assert [m["id"] for m in st.session("c").get_history()] == [f"c{i}" for i in range(4)]
        assert st.session("a").append(msg("a4", "waits in the journal")).inserted
        assert journal_rows(st) == 1 and moved_rows(st) == 12
        assert st.session("b").append(msg("b4", "also waits")).inserted
        assert [m["id"] for m in st.session("c").get_history()] == [f"c{i}" for i in range(4)]
        assert journal_rows(st) == 2 and moved_rows(st) == 12  # nothing moved for b, nor for c's read
        assert [m["id"] for m in st.session("b").get_history()] == [f"b{i}" for i in range(5)]
        assert [m["id"] for m in st.session("a").get_history()] == [f"a{i}" for i in range(5)]
        assert st.session("a").get("a2")["parts"][0]["text"] == "text 2"  # a read of the table: moved
        assert journal_rows(st) == 0 and moved_rows(st) == 14
        st._engine._shared.check(st._engine._direct)


@pytest.mark.parametrize("read", ["sql", "search", "count", "children", "other store", "sessions"])
def test_every_kind_of_read_sees_every_append(tmp_path, read):
    path = tmp_path / "r.duckdb"
    st = sk.open_store(path)
    try:
        s = st.session("s")
        for mid in "abc":
            s.append(msg(mid, f"{mid} kiwi" if mid != "c" else "no fruit"))
        assert journal_rows(st) == 3
        if read == "sql":
            got = st.sql("SELECT id, n_children FROM messages ORDER BY seq")
            assert list(got["id"]) == ["a", "b", "c"] and list(got["n_children"]) == [1, 1, 0]
        elif read == "search":
            assert sorted(h.id for h in st.search("kiwi")) == ["a", "b"]
        elif read == "count":
            assert len(s) == 3
        elif read == "children":
            assert [m["id"] for m in s.branches("b")] == ["c"]
        elif read == "other store":
            with sk.open_store(path) as other:
                assert [m["id"] for m in other.session("s").get_history()] == ["a", "b", "c"]
        else:
            assert [(info.id, info.message_count) for info in st.list_sessions()] == [("s", 3)]
        assert journal_rows(st) == 0
    finally:
        st.close()


AWKWARD = [
    "",
    "null",
    "NULL",
    '"quoted"',
    "back\\slash \\u0041",
    "line\nbreak\r\n",
    "tab\there",
    "emoji \U0001f600",
    "nul \x00 inside",
    "[1, 2]",
    '{"a": 1}',
    "ünïcödé 中文",
    "$[0]",
]


def _awkward_messages() -> list[dict]:
    out = []
    for i, text in enumerate(AWKWARD):
        parts = [{"type": "text", "text": text}]
        if i % 3 == 0:
            parts.append(
                {"type": "tool-call", "toolCallId": f"c{i}", "toolName": f"tool {text[:5]}", "input": {"q": text}}
            )
        out.append(
            {
                "id": f"m{i} {text[:6]}",
                "role": "assistant" if i % 2 else "user",
                "parts": parts,
                "metadata": {"k": text, "n": 2**40 + i},
                "createdAt": f"2026-01-01T00:00:{i:02d}.000Z",
            }
        )
    return out


def test_rows_moved_from_the_journal_equal_rows_written_in_one_batch(tmp_path):
    """Every column of every row, for texts a JSON path could bend, against the batched path."""
    cols = (
        "msg_key, session_id, id, parent_id, depth, role, created_at, bytes, tokens, path_bytes, path_tokens,"
        " chunks, text, n_parts, tool_names, metadata, content"
    )
    rows = {}
    for way in ("journal", "chain", "batch"):
        with sk.open_store(tmp_path / f"{way}.duckdb") as st:
            s = st.session("s \u00e9")
            if way == "journal":
                for m in _awkward_messages():
                    assert s.append(m).inserted
                assert journal_rows(st) == len(AWKWARD)
            elif way == "chain":
                assert all(r.inserted for r in s.append_many(_awkward_messages()))
                assert journal_rows(st) == 1  # one line for the whole chain
            else:
                with st.transaction():  # the batched insert
                    s.append_many(_awkward_messages())
                assert journal_rows(st) == 0
            rows[way] = st._engine.fetch(f"SELECT {cols} FROM sessionkit_messages ORDER BY seq")
            assert [m["parts"] for m in s.get_history()] == [m["parts"] for m in _awkward_messages()]
    assert len(rows["journal"]) == len(AWKWARD)
    assert rows["journal"] == rows["batch"] == rows["chain"]


def test_a_duplicate_id_is_refused_before_and_after_the_move_and_after_reopening(tmp_path):
    path = tmp_path / "d.duckdb"
    with sk.open_store(path) as st:
        s = st.session("s")
        assert s.append(msg("a", "first")).inserted
        assert journal_rows(st) == 1
        assert not s.append(msg("a", "again, in the journal")).inserted
        assert len(s) == 1  # a read moves it
        assert not s.append(msg("a", "again, in the table")).inserted
        assert st.session("t").append(msg("a", "same id, other session")).inserted
    with sk.open_store(path) as st:
        s = st.session("s")
        assert not s.append(msg("a", "again, after reopening")).inserted
        assert s.append(msg("b", "new")).inserted
        assert [m["parts"][0]["text"] for m in s.get_history()] == ["first", "new"]
        assert st.session("t").get("a")["parts"][0]["text"] == "same id, other session"


def test_ids_removed_by_deletes_and_clears_can_be_appended_again(store):
    s = store.session("s")
    for i in range(4):
        s.append(msg(f"m{i}", "x"))
    s.delete("m3")
    assert s.append(msg("m3", "back")).inserted
    s.clear()
    assert s.append(msg("m0", "after clear")).inserted
    assert [m["parts"][0]["text"] for m in s.get_history()] == ["after clear"]
    store.delete_session("s")
    assert store.session("s").append(msg("m0", "new session")).inserted
    # ids written by the transactional paths are known to the journal's check too
    store.session("s").append_many([msg("x1", "batch"), msg("x2", "batch")])
    assert not store.session("s").append(msg("x2", "again")).inserted
    s.update(msg("m0", "updated"))
    assert not s.append(msg("m0", "again")).inserted
    assert [m["parts"][0]["text"] for m in s.get_history()] == ["updated", "batch", "batch"]


def test_an_id_set_read_again_includes_the_journal(store, monkeypatch):
    monkeypatch.setattr(state_module, "_KEY_BUDGET", 4)
    s, t, u = (store.session(x) for x in "stu")
    for session, ids in ((s, "ab"), (t, "xyz"), (u, "w")):  # u's set pushes s's out
        for mid in ids:
            assert session.append(msg(mid, "x")).inserted
    assert journal_rows(store) == 6  # a session's first append reads its ids without moving the journal
    assert not s.append(msg("a", "again")).inserted
    assert [m["id"] for m in s.get_history()] == ["a", "b"]
    assert s.get("a")["parts"][0]["text"] == "x"


def test_a_long_journal_is_moved_by_the_append_that_fills_it(store, monkeypatch):
    monkeypatch.setattr(state_module, "_JOURNAL_ROWS", 10)
    s = store.session("s")
    for i in range(25):
        s.append(msg(f"m{i}", "x"))
        assert journal_rows(store) == (i + 1) % 10
    assert moved_rows(store) == 20
    assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(25)]


@pytest.mark.parametrize("many", [False, True], ids=["held", "too-many-to-hold"])
def test_a_new_session_reads_nothing_yet_a_stored_id_is_told_in_every_session(tmp_path, monkeypatch, many):
    # The sessions with stored messages are read once; a session outside them needs no read
    # before its first append. Every way a session gets messages keeps the set true: single
    # appends, chains, imports, an earlier opening, and a killed process's journal.
    if many:
        monkeypatch.setattr(state_module, "_SESSION_BUDGET", 1)  # held as "every session"
    path = tmp_path / "s.duckdb"
    with sk.open_store(path) as st:
        st.session("earlier").append(msg("e1", "stored by an earlier opening"))
    script = textwrap.dedent(f"""
        import os, sessionkit as sk
        st = sk.open_store({str(path)!r})
        st.session("killed").append({{"id": "k1", "role": "user", "parts": [{{"type": "text", "text": "k"}}]}})
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    with sk.open_store(path) as st:
        assert journal_rows(st) == 1  # the killed process's append waits in the journal
        st.session("fresh").append(msg("f1", "first"))
        st.session("chain").append_many([msg("c1", "one"), msg("c2", "two")])
        doc = tmp_path / "in.jsonl"
        with sk.open_store(tmp_path / "other.duckdb") as other:
            other.session("imported").append_many([msg("i1", "one"), msg("i2", "two")])
            sk.io.export_jsonl(other, doc)
        sk.io.import_jsonl(st, doc)
        st.session("single").append(msg("s1", "one"))
        for sid, mid in [
            ("earlier", "e1"),
            ("killed", "k1"),
            ("fresh", "f1"),
            ("chain", "c2"),
            ("imported", "i2"),
            ("single", "s1"),
        ]:
            assert st.session(sid).append(msg(mid, "again")).inserted is False, sid
        reads = []
        real = st._engine._direct

        def counting(sql, params=()):
            if sql.startswith("SELECT id FROM"):
                reads.append(params)
            return real(sql, params)

        monkeypatch.setattr(st._engine, "_direct", counting)
        assert st.session("brand-new").append(msg("n1", "first")).inserted
        assert st.session("brand-new").append(msg("n1", "again")).inserted is False
        assert reads == ([("brand-new",)] if many else [])  # held: a new session reads nothing
        counts = {
            sid: len(st.session(sid).get_history())
            for sid in ("earlier", "killed", "fresh", "chain", "imported", "single", "brand-new")
        }
    assert counts == {"earlier": 1, "killed": 1, "fresh": 1, "chain": 2, "imported": 2, "single": 1, "brand-new": 1}


def test_the_session_set_is_let_go_when_it_grows_past_its_budget(store, monkeypatch):
    monkeypatch.setattr(state_module, "_SESSION_BUDGET", 3)
    reads = []
    real = store._engine._direct

    def counting(sql, params=()):
        if sql.startswith("SELECT id FROM"):
            reads.append(params[0])
        return real(sql, params)

    monkeypatch.setattr(store._engine, "_direct", counting)
    for i in range(6):
        assert store.session(f"s{i}").append(msg(f"m{i}", "x")).inserted
    assert reads == ["s4", "s5"]  # held until a fourth session joined it, then each first append reads
    monkeypatch.setattr(state_module, "_KEY_BUDGET", 0)  # the id sets go too: reads tell the ids
    for i in range(6):
        assert store.session(f"s{i}").append(msg(f"m{i}", "again")).inserted is False
    assert sum(len(store.session(f"s{i}")) for i in range(6)) == 6


def test_a_session_too_large_for_the_id_set_takes_the_indexed_path(store, monkeypatch):
    monkeypatch.setattr(state_module, "_KEY_BUDGET", 8)
    big, small = store.session("big"), store.session("small")
    big.append_many([msg(f"m{i}", "x") for i in range(6)])  # over half the budget
    assert big.append(msg("m6", "x")).inserted
    assert journal_rows(store) == 0  # written straight into the messages table
    assert not big.append(msg("m2", "again")).inserted
    for i in range(3):
        assert small.append(msg(f"s{i}", "y")).inserted
    assert journal_rows(store) == 3
    assert not small.append(msg("s1", "again")).inserted
    assert len(big) == 7 and len(small) == 3


def test_a_failed_move_loses_nothing_and_the_next_read_moves_the_rows(store, monkeypatch):
    s = store.session("s")
    for i in range(3):
        s.append(msg(f"m{i}", f"t{i}"))
    real = type(store._engine).execute
    calls = {"n": 0}

    def failing(self, sql, params=()):
        result = real(self, sql, params)
        if sql == engine_module._MOVE_JOURNAL_FILE:  # after the rows were copied
            calls["n"] += 1
            if calls["n"] == 1:
                with self.guard():
                    raise duckdb.IOException("IO Error: could not write file (no space left on device)")
        return result

    monkeypatch.setattr(type(store._engine), "execute", failing)
    with pytest.raises(SessionKitError, match="no space left"):
        s.get_history()
    assert calls["n"] == 1
    assert journal_rows(store) == 3 and moved_rows(store) == 0  # the copy was rolled back with it
    assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2"]
    assert journal_rows(store) == 0
    assert s.append(msg("m3", "after")).inserted and not s.append(msg("m1", "again")).inserted
    assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2", "m3"]


KILLED = textwrap.dedent(
    """
    import os, sys
    import sessionkit as sk
    store = sk.open_store(sys.argv[1])
    s = store.session("s")
    for i in range(int(sys.argv[2])):
        s.append({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"kiwi {i}"}]})
    os._exit(0)  # no close: the journal is left as a killed process leaves it
    """
)


@pytest.mark.slow  # a second process
def test_appends_left_in_the_journal_by_a_killed_process_are_moved_on_opening(tmp_path):
    path = str(tmp_path / "k.duckdb")
    subprocess.run([sys.executable, "-c", KILLED, path, "30"], check=True, timeout=120)
    assert file_rows(path) == 30
    con = duckdb.connect(path)
    try:
        assert con.execute("SELECT count(*) FROM sessionkit_messages").fetchone()[0] == 0
    finally:
        con.close()
    with sk.open_store(path) as st:
        s = st.session("s")
        assert not s.append(msg("m5", "a stored id")).inserted  # the move ran before the id check
        assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(30)]
        assert st.sql("SELECT count(*) AS n FROM messages")["n"][0] == 30
        assert len(st.search("kiwi", limit=100)) == 30
        assert s.append(msg("m30", "next")).inserted
        seqs = st.sql("SELECT seq FROM messages ORDER BY seq")["seq"].tolist()
        assert seqs == sorted(set(seqs)) and len(seqs) == 31


def test_a_version_6_file_gains_the_journal(tmp_path):
    path = str(tmp_path / "v6.duckdb")
    with sk.open_store(path) as st:
        st.session("s").append(msg("a", "before"))
        eng = st._engine
        with eng.write():
            eng.execute("DROP TABLE sessionkit_journal")
            eng.execute("DELETE FROM sessionkit_migrations WHERE version = 7")
            eng.execute("UPDATE sessionkit_meta SET value = '6' WHERE key = 'schema_version'")
    with sk.open_store(path) as st:
        assert st.stats()["schema_version"] == SCHEMA_VERSION
        assert 7 in [r[0] for r in st._engine.ledger()] and st._engine.ledger()[-1][0] == SCHEMA_VERSION
        s = st.session("s")
        assert s.append(msg("b", "after")).inserted and journal_rows(st) == 1
        assert [m["id"] for m in s.get_history()] == ["a", "b"]


@pytest.mark.slow  # threads racing
def test_threads_racing_on_the_same_ids_store_each_once_while_readers_move_the_journal(store):
    import threading

    ids = [f"m{i}" for i in range(150)]
    wins: dict[str, int] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(sid: str, order: list[str]) -> None:
        try:
            s = store.session(sid)
            for mid in order:
                if s.append(msg(mid, f"kiwi {mid}")).inserted:
                    with lock:
                        wins[f"{sid}/{mid}"] = wins.get(f"{sid}/{mid}", 0) + 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                for sid in ("a", "b"):
                    path = store.session(sid).get_history()
                    assert len({m["id"] for m in path}) == len(path)
                store.sql("SELECT session_id, count(*) AS n FROM messages GROUP BY ALL")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(sid, order)) for sid in ("a", "b") for order in (ids, ids[::-1])]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads + readers:
        t.start()
    for t in threads:
        t.join(timeout=300)
    stop.set()
    for t in readers:
        t.join(timeout=60)
    assert not errors, errors
    assert wins == {f"{sid}/{mid}": 1 for sid in ("a", "b") for mid in ids}
    for sid in ("a", "b"):
        nodes = store.session(sid).nodes()
        assert sorted(n.id for n in nodes) == sorted(ids)
        known = {n.id for n in nodes}
        assert all(n.parent_id is None or n.parent_id in known for n in nodes)
    got = store.sql(
        "SELECT session_id, count(*) AS n, count(DISTINCT id) AS d FROM messages GROUP BY ALL ORDER BY session_id"
    )
    assert list(got["n"]) == [150, 150] and list(got["d"]) == [150, 150]
    assert journal_rows(store) == 0


def test_single_appends_go_to_a_journal_file_beside_the_store_not_to_duckdb(tmp_path, monkeypatch):
    path = tmp_path / "f.duckdb"
    with sk.open_store(path) as st:
        statements = []
        real = st._engine._direct

        def counting(sql, params=()):
            statements.append(sql)
            return real(sql, params)

        monkeypatch.setattr(st._engine, "_direct", counting)
        s = st.session("s")
        for i in range(50):
            assert s.append(msg(f"m{i}", f"text {i}")).inserted
        assert file_rows(path) == 50
        # the first append reads the journal id and the session set; the others run no statement
        assert len(statements) <= 4
        assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(50)]
        assert file_rows(path) == 0
    assert not os.path.exists(str(path) + engine_module._LOG_SUFFIX)  # closed empty: removed


def test_a_half_written_last_line_is_cut_and_the_rows_before_it_kept(tmp_path):
    path = str(tmp_path / "h.duckdb")
    subprocess.run([sys.executable, "-c", KILLED, path, "5"], check=True, timeout=120)
    with open(path + engine_module._LOG_SUFFIX, "ab") as fh:
        fh.write(b'[99, "1:sm9')  # a process killed inside a write: that append never returned
    with sk.open_store(path) as st:
        s = st.session("s")
        assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(5)]
        assert s.append(msg("m5", "next")).inserted
        assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(6)]


def test_a_journal_file_of_another_database_is_set_aside(tmp_path):
    path = str(tmp_path / "o.duckdb")
    subprocess.run([sys.executable, "-c", KILLED, path, "3"], check=True, timeout=120)
    os.replace(path, str(tmp_path / "elsewhere.duckdb"))  # its journal stays behind
    with contextlib.suppress(FileNotFoundError):
        os.remove(path + ".wal")
    with sk.open_store(path) as st:  # a new database by the old name
        assert st.stats()["messages"] == 0
        s = st.session("s")
        assert s.append(msg("m0", "a new message")).inserted
        assert [m["parts"][0]["text"] for m in s.get_history()] == ["a new message"]
    assert os.path.exists(path + engine_module._LOG_SUFFIX + ".orphan")


def test_a_journal_file_not_emptied_after_its_move_is_moved_again_without_duplicates(store, monkeypatch):
    s = store.session("s")
    for i in range(3):
        s.append(msg(f"m{i}", f"t{i}"))
    real = engine_module.os.ftruncate
    calls = {"n": 0}

    def failing(fd, size):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real(fd, size)

    monkeypatch.setattr(engine_module.os, "ftruncate", failing)
    with pytest.raises(SessionKitError, match="cannot empty its journal"):
        s.get_history()
    assert journal_rows(store) == 3 and moved_rows(store) == 3  # committed, still in the file
    assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2"]
    assert journal_rows(store) == 0 and moved_rows(store) == 3
    assert s.append(msg("m3", "after")).inserted and not s.append(msg("m1", "again")).inserted
    assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2", "m3"]


def test_full_durability_appends_through_the_journal_file(tmp_path):
    path = tmp_path / "d.duckdb"
    with sk.open_store(path, durability="full") as st:
        s = st.session("s")
        for i in range(5):
            assert s.append(msg(f"m{i}", f"text {i}")).inserted
        assert file_rows(path) == 5
    with sk.open_store(path) as st:
        assert [m["id"] for m in st.session("s").get_history()] == [f"m{i}" for i in range(5)]


CHAIN_KILLED = textwrap.dedent(
    """
    import os, sys
    import sessionkit as sk
    store = sk.open_store(sys.argv[1])
    s = store.session("s")
    s.append({"id": "before", "role": "user", "parts": [{"type": "text", "text": "one append"}]})
    s.append_many([{"id": f"c{i}", "role": "user", "parts": [{"type": "text", "text": f"chain {i}"}]}
                   for i in range(int(sys.argv[2]))])
    os._exit(0)
    """
)


@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
def test_a_chain_is_one_journal_line_kept_whole_or_not_at_all(tmp_path, torn):
    path = str(tmp_path / "c.duckdb")
    subprocess.run([sys.executable, "-c", CHAIN_KILLED, path, "40"], check=True, timeout=120)
    assert file_rows(path) == 2  # the single append and the chain
    if torn:  # the process was killed inside the chain's write: that append_many never returned
        log = path + engine_module._LOG_SUFFIX
        data = open(log, "rb").read()
        with open(log, "wb") as fh:
            fh.write(data[: len(data) - len(data[data.rfind(b"\n", 0, len(data) - 1) :]) // 2])
    with sk.open_store(path) as st:
        s = st.session("s")
        expected = ["before"] if torn else ["before", *(f"c{i}" for i in range(40))]
        assert [m["id"] for m in s.get_history()] == expected
        assert st.stats()["messages"] == len(expected)
        assert s.append_many([msg("c0", "again"), msg("d", "next")])[1].inserted
        assert [m["id"] for m in s.get_history()][-1] == "d"
