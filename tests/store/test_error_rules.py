"""docs/errors.md on the file engines: a write lock held too long is StoreLocked after
``busy_timeout`` (which is honoured), a damaged file is StoreCorrupt, and no driver
error type (sqlite3.*, duckdb.*) ever leaves a call."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers import msg, wait_until

import sessionkit as sk

HOLD_WRITE_LOCK = textwrap.dedent(
    """
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    con.execute("ROLLBACK")
    """
)


class _Holder:
    """Another process holding a SQLite store's write lock until :meth:`release`."""

    def __init__(self, path: str):
        self.path = path
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD_WRITE_LOCK, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "holding"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture
def holder(tmp_path):
    path = str(tmp_path / "held.db")
    with sk.open_store(path) as st:
        st.session("s").append(msg("before"))
    h = _Holder(path)
    try:
        yield h
    finally:
        h.release()


def _busy_timeout_ms(store) -> int:
    """The busy timeout of the store's SQLite connection: how long SQLite itself waits for a lock."""
    return store._engine._db.execute("PRAGMA busy_timeout").fetchone()[0]


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize("timeout", [0.1, 0.3])
def test_a_write_lock_held_past_busy_timeout_is_StoreLocked_after_that_timeout(holder, timeout):
    write_lock_held = holder.path
    with sk.open_store(write_lock_held, busy_timeout=timeout) as st:
        # the option, not a built-in 30 s, is what SQLite waits for the lock
        assert _busy_timeout_ms(st) == int(timeout * 1000)
        s = st.session("s")
        for write in (
            lambda: s.append(msg("blocked")),
            lambda: s.append(msg("blocked"), parent_id=None),
            lambda: s.import_message(msg("blocked")),
            lambda: s.delete("before"),
        ):
            started = time.monotonic()
            with pytest.raises(sk.StoreLocked) as info:
                write()
            # a lower bound only: it really waited (a busy machine can only make it longer)
            assert time.monotonic() - started >= timeout * 0.8
            assert f"busy_timeout={timeout:g}" in str(info.value) and write_lock_held in str(info.value)
            assert not isinstance(info.value, sqlite3.Error)
            assert holder.proc.poll() is None  # given up while the other process still held the lock
        assert [m["id"] for m in s.get_history()] == ["before"]  # reads go on meanwhile; nothing stored


def test_a_writer_waits_for_the_lock_within_busy_timeout_then_writes(holder):
    with sk.open_store(holder.path, busy_timeout=60) as st:
        assert _busy_timeout_ms(st) == 60_000
        # SQLite traces a statement as it starts, before it waits for the lock: the first
        # writing statement of the append is where it asks for the write lock
        asked = threading.Event()
        writes = ("INSERT", "BEGIN", "UPDATE", "DELETE", "REPLACE")
        st._engine._db.set_trace_callback(lambda sql: asked.set() if sql.lstrip().upper().startswith(writes) else None)
        outcome: dict = {}

        def write():
            try:
                outcome["result"] = st.session("s").append(msg("after the wait"))
            except BaseException as exc:  # reported below
                outcome["error"] = exc

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        wait_until(asked.is_set, what="the append to ask for the write lock")
        # The other process keeps the lock half a second longer (a lower bound on the wait,
        # which a busy machine can only lengthen): the append is still waiting then, neither
        # failed nor done.
        time.sleep(0.5)
        assert writer.is_alive() and not outcome, outcome
        holder.release()
        writer.join(timeout=60)  # a hang guard: the lock is free now
        st._engine._db.set_trace_callback(None)
        assert not writer.is_alive() and "error" not in outcome, outcome
        assert outcome["result"].inserted
        assert [m["id"] for m in st.session("s").get_history()] == ["before", "after the wait"]


@pytest.mark.parametrize("bad", [-1, float("nan"), "30", True, 10**9])
def test_busy_timeout_must_be_a_number_of_seconds(tmp_path, bad):
    with pytest.raises(ValueError, match="busy_timeout"):
        sk.open_store(tmp_path / "s.db", busy_timeout=bad)


def _damage(path: str, keep: int, seed: int) -> None:
    """Overwrite everything after the first ``keep`` bytes of a file with noise."""
    size = os.path.getsize(path)
    rng = random.Random(seed)
    with open(path, "r+b") as fh:
        fh.seek(keep)
        fh.write(rng.randbytes(size - keep))


def _operations(st):
    s = st.session("s")
    return [
        lambda: st.stats(),
        lambda: st.list_sessions(),
        lambda: s.get_history(),
        lambda: list(s.history(newest_first=True)),
        lambda: s.recent_history(1000),
        lambda: s.get("m5"),
        lambda: s.branches("m1"),
        lambda: s.search("words"),
        lambda: s.append(msg("after")),
        lambda: s.delete("m10", subtree=True),
        lambda: len(s),
    ]


@pytest.mark.parametrize("suffix", [".db", ".duckdb"])
def test_a_damaged_file_gives_StoreCorrupt_never_a_driver_error(tmp_path, suffix):
    import duckdb

    path = str(tmp_path / f"s{suffix}")
    with sk.open_store(path) as st:
        s = st.session("s")
        for i in range(400):
            s.append(msg(f"m{i}", f"some words number {i} " * 20))
    # keep the header (SQLite's first page, DuckDB's headers) so the file still looks like a store
    _damage(path, keep=4096 if suffix == ".db" else 3 * 4096, seed=7)
    outcomes = []
    try:
        st = sk.open_store(path)
    except (sk.StoreCorrupt, ValueError) as exc:
        assert not isinstance(exc, (sqlite3.Error, duckdb.Error))
        outcomes.append(type(exc))
    else:
        with st:
            for op in _operations(st):
                try:
                    op()
                    outcomes.append("ok")
                except sk.StoreCorrupt as exc:
                    assert not isinstance(exc, (sqlite3.Error, duckdb.Error))
                    outcomes.append(sk.StoreCorrupt)
    assert sk.StoreCorrupt in outcomes or ValueError in outcomes, outcomes


def test_a_sqlite_page_damaged_under_an_open_store_is_StoreCorrupt(tmp_path):
    path = str(tmp_path / "s.db")
    with sk.open_store(path) as st:
        s = st.session("s")
        for i in range(300):
            s.append(msg(f"m{i}", "x" * 600))
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sessionkit_messages'").fetchone()[0]
    page = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:  # the messages table's root page: its b-tree can no longer be read
        fh.seek((root - 1) * page)
        fh.write(b"\xff" * page)
    with pytest.raises(sk.StoreCorrupt, match="damaged|malformed"):
        with sk.open_store(path) as st:
            st.session("s").get_history()
