"""The DuckDB engine's per-file state (``sessionkit.store.engines.duckdb.state.FileState``): its
invariant, checked against the database and the journal file after each step of real
stores (appends, chains, branches, imports, updates, deletes, a merge at the journal's
size, a rollback, a process killed with rows in the journal), and its journal file and id
sets driven directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import msg

duckdb = pytest.importorskip("duckdb")

import sessionkit as sk  # noqa: E402
from sessionkit.store import LATEST  # noqa: E402
from sessionkit.store._values import Node  # noqa: E402
from sessionkit.store.engines.duckdb import state as state_module  # noqa: E402
from sessionkit.store.engines.duckdb.state import FileState  # noqa: E402


def check(store) -> FileState:
    """The store's file state after its invariant was checked (raises AssertionError)."""
    eng = store._engine
    eng._shared.check(eng._direct)
    return eng._shared


def three_appends(store):
    """Session ``s`` of ``store`` after three appends and a recent window (its path cached)."""
    s = store.session("s")
    for i in range(3):
        s.append(msg(f"m{i}", f"text {i}"))
    s.recent_history(0, min_messages=3)
    return s


def stored(store) -> int:
    return store._engine._direct("SELECT count(*) FROM sessionkit_messages")[0][0]


@pytest.mark.parametrize("where", ["file", "memory"])
def test_the_invariant_holds_after_each_kind_of_write_and_a_merge_at_the_journal_size(tmp_path, monkeypatch, where):
    monkeypatch.setattr(state_module, "_JOURNAL_ROWS", 8)
    with sk.open_store(tmp_path / "s.duckdb" if where == "file" else "duckdb:///:memory:") as store:
        s, t = store.session("s"), store.session("t")
        for i in range(5):
            s.append(msg(f"m{i}", f"text {i}"))
            assert check(store).pending == i + 1 and stored(store) == 0  # in the journal
        state = check(store)
        assert state.keys["s"] == {f"m{i}" for i in range(5)} and state.tails["s"].id == "m4"
        s.append_many([msg(f"c{i}", f"chain {i}") for i in range(3)])  # 8 rows: moved at once
        state = check(store)
        assert state.pending == 0 and stored(store) == 8
        assert not s.append(msg("m2", "again")).inserted
        check(store)
        t.append(msg("t0", "other session"))
        s.append(msg("b0", "a branch"), parent_id="m1")
        assert check(store).tails["s"].id == "b0"
        assert [m["id"] for m in s.recent_history(0, min_messages=3).messages] == ["m0", "m1", "b0"]
        state = check(store)
        assert state.pending == 0 and state.paths.get("s") is not None
        s.import_many([(msg(f"i{i}", f"imported {i}"), LATEST, None) for i in range(3)])
        assert check(store).tails["s"].id == "i2"
        s.update(msg("i1", "changed"))
        check(store)
        s.append(msg("after", "after the update"))
        check(store)
        s.delete("after")
        check(store)
        s.append(msg("after2", "after the delete"))
        assert check(store).tails["s"].id == "after2"
        store.search("text")  # the index is built: appends with text take a transaction
        s.append(msg("indexed", "indexed words"))
        assert check(store).index_on is True


def test_the_invariant_holds_after_a_rollback(tmp_path):
    with sk.open_store(tmp_path / "r.duckdb") as store:
        s = three_appends(store)
        with pytest.raises(RuntimeError, match="undo"):
            with store.transaction():
                s.append(msg("gone", "rolled back"))
                raise RuntimeError("undo")
        state = check(store)
        # nothing the transaction saw is kept; the journal's rows stay counted, all moved
        assert not state.tails and not state.keys and state.sids is None and state.pending == 0
        assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2"]
        assert s.append(msg("m3", "after")).inserted and not s.append(msg("m0", "dup")).inserted
        check(store)


KILLED = textwrap.dedent(
    """
    import os, sys
    import sessionkit as sk
    store = sk.open_store(sys.argv[1])
    for i in range(int(sys.argv[2])):
        store.session(f"s{i % 3}").append({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "t"}]})
    os._exit(0)  # no close: the journal is left as a killed process leaves it
    """
)


@pytest.mark.kill
def test_the_invariant_holds_after_a_process_was_killed_with_rows_in_the_journal(tmp_path):
    path = str(tmp_path / "k.duckdb")
    subprocess.run([sys.executable, "-c", KILLED, path, "9"], check=True, timeout=120)
    with sk.open_store(path) as store:
        state = check(store)  # counted on opening, not moved yet; their sessions unknown
        assert state.pending == 9 and state.log_rows == 9 and state.journal_sids is None
        assert stored(store) == 0
        assert not store.session("s1").append(msg("m4", "a duplicate of the killed process's")).inserted
        state = check(store)
        assert state.pending == 0 and stored(store) == 9
        store.session("s1").append(msg("new", "after"))
        assert check(store).keys["s1"] == {"m1", "m4", "m7", "new"}


def test_check_names_the_clause_that_does_not_hold(tmp_path):
    """The check can fail: each kind of drift it is there to catch is named."""
    with sk.open_store(tmp_path / "c.duckdb") as store:
        three_appends(store)
        state = check(store)
        drifts = [
            ("C1", lambda: state.tails.__setitem__("s", state.tails["s"]._replace(depth=99))),
            ("S2", lambda: state.keys["s"].add("never stored")),
            ("J1", lambda: setattr(state, "log_rows", state.log_rows + 1)),
            ("Q1", lambda: state.seqs.appendleft(0)),
            ("C2", lambda: state.paths.runs["s"].pop(1)),
            ("S3", lambda: setattr(state, "sids", set())),
        ]
        for clause, drift in drifts:
            saved = (dict(state.tails), {k: set(v) for k, v in state.keys.items()}, state.log_rows, list(state.seqs))
            saved_run, saved_sids = list(state.paths.runs["s"]), state.sids
            drift()
            with pytest.raises(AssertionError, match=clause):
                state.check(store._engine._direct)
            state.tails.clear()
            state.tails.update(saved[0])
            state.keys.clear()
            state.keys.update(saved[1])
            state.log_rows = saved[2]
            state.seqs.clear()
            state.seqs.extend(saved[3])
            state.paths.runs["s"] = saved_run
            state.sids = saved_sids
            state.check(store._engine._direct)


def test_a_path_read_asks_for_compactions_only_where_the_file_has_some(tmp_path, monkeypatch):
    """Clause C3's file flag: a file without compactions is asked once whether it has any,
    and a path read then reads none; a compaction written (or rolled back) is seen."""
    with sk.open_store(tmp_path / "c.duckdb") as store:
        s = three_appends(store)
        t = store.session("t")
        t.append_many([msg(f"t{i}", f"turn {i}") for i in range(4)])
        eng = store._engine
        asked: list[str] = []
        for name in ("fetch", "fetch_one"):
            real = getattr(eng, name)

            def counted(sql, *args, real=real, **kwargs):
                if "sessionkit_compactions" in sql:
                    asked.append(sql)
                return real(sql, *args, **kwargs)

            monkeypatch.setattr(eng, name, counted)
        eng._shared.any_compacted = None  # (the recent window of three_appends read it)
        for _ in range(2):
            assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2"]
            assert len(t.get_history()) == 4
        assert len(asked) == 1 and check(store).any_compacted is False
        comp = sk.Compaction("c1", "t0", "t2", "the first three turns", "2026-01-01T00:00:00.000Z", 30, 5)
        assert t.import_compaction(comp)
        assert check(store).any_compacted is True
        assert [m.get("metadata", {}).get("compaction") is not None for m in t.get_history()] == [True, False]
        assert [m["id"] for m in s.get_history()] == ["m0", "m1", "m2"] and s.compactions() == []
        check(store)
        # a compaction written in a transaction that rolls back: the flags are read again
        with pytest.raises(RuntimeError, match="undo"):
            with store.transaction():
                s.import_compaction(sk.Compaction("c2", "m0", "m1", "gone", "2026-01-01T00:00:00.000Z", 9, 2))
                assert len(s.get_history()) == 2  # inside it, the overlay shows
                raise RuntimeError("undo")
        assert check(store).any_compacted is None
        assert s.compactions() == [] and len(s.get_history()) == 3 and t.compactions() == [comp]
        state = check(store)
        state.any_compacted = False  # a drift the check names
        with pytest.raises(AssertionError, match="C3"):
            state.check(eng._direct)


def test_the_journal_file_alone(tmp_path):
    """Lines written, read back, emptied; a torn last line cut on recovery; a journal of
    another database set aside; an empty journal removed when the file closes."""
    base = str(tmp_path / "x.duckdb")
    state = FileState(base)
    assert state.recover(base, lambda header: True) == 0  # no journal yet
    state.write_line('[[1, "a"]]', False, lambda: "id1")
    state.write_line('[[2, "b"], [3, "c"]]', True, lambda: "unused: open already")
    assert state.lines() == ['[[1, "a"]]', '[[2, "b"], [3, "c"]]'] and state.log_rows == 2
    assert os.path.getsize(base + ".journal") == state.log_size
    state.close_file()  # rows in it: kept
    with open(base + ".journal", "ab") as fh:
        fh.write(b'[[4, "half')  # a process killed inside a write
    again = FileState(base)
    assert again.recover(base, lambda header: header == "sessionkit journal 1 id1") == 2
    assert again.lines() == ['[[1, "a"]]', '[[2, "b"], [3, "c"]]']
    again.empty_file(False)
    assert again.lines() == [] and again.log_rows == 0
    again.close_file()
    assert not os.path.exists(base + ".journal")  # empty: removed
    other = FileState(base)
    assert other.recover(base, lambda header: True) == 0
    other.write_line("[[5]]", False, lambda: "id2")
    other.close_file()
    assert FileState(base).recover(base, lambda header: header.endswith("id1")) == 0  # not this database's
    assert os.path.exists(base + ".journal.orphan") and not os.path.exists(base + ".journal")


def test_id_sets_are_read_once_and_kept_within_their_budget(monkeypatch):
    monkeypatch.setattr(state_module, "_KEY_BUDGET", 4)
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE sessionkit_messages (session_id VARCHAR, id VARCHAR)")
    con.execute("INSERT INTO sessionkit_messages VALUES ('a', '1'), ('a', '2'), ('b', '3'), ('c', '5'), ('c', '6')")
    con.execute("INSERT INTO sessionkit_messages SELECT 'big', 'x' || range FROM range(3)")
    reads: list[str] = []

    def read(sql, params=()):
        reads.append(sql)
        return con.execute(sql, params).fetchall()

    state = FileState()
    assert state.keys_of("a", read, lambda: None) == {"1", "2"}
    assert state.keys_of("a", read, lambda: None) == {"1", "2"} and len(reads) == 2  # sessions, then a's ids
    assert state.keys_of("new", read, lambda: None) == set() and len(reads) == 2  # not stored: no read
    assert state.keys_of("big", read, lambda: None) is None  # 3 ids: more than half the budget
    assert state.keys_of("b", read, lambda: None) == {"3"} and state.key_total == 3
    assert state.keys_of("c", read, lambda: None) == {"5", "6"}  # 5 ids held: the oldest set goes
    assert list(state.keys) == ["new", "b", "c"] and state.key_total == 3
    state.appended("new", Node(10, "n1", None, 0, 1, 1, 1, 1, "t", "user"), "{}")
    assert state.keys["new"] == {"n1"} and state.key_total == 4 and state.tails["new"].id == "n1"
    state.rolled_back()
    assert not state.keys and state.key_total == 0 and state.sids is None
