"""The DuckDB engine's in-process cache of each session's newest path rows.

A DuckDB file admits one process, so the engine keeps the newest rows of each session's
latest path (and whether the session has compactions) in memory, in step with its own
writes: a recent window then needs no statement. These tests drive a DuckDB store and a
SQLite store (which caches nothing) through the same random operations -- appends under
the latest leaf, branches, new roots, duplicates, chains, imports, updates, deletes,
clears, compactions, rolled-back transactions, reopening -- and after every step compare
every path read; and they read while other threads write.
"""

from __future__ import annotations

import contextlib
import random
import threading

import pytest

pytest.importorskip("duckdb")

import sessionkit as sk
from sessionkit.store import LATEST, Compaction

STAMP = "2026-01-01T00:00:{:02d}.{:03d}Z"


@contextlib.contextmanager
def statements(store):
    """The SQL of each statement the DuckDB store's own connection runs inside the block."""
    eng = store._engine
    calls: list[str] = []

    class Counting:
        def __init__(self, con):
            self.con = con

        def execute(self, sql, params=()):
            calls.append(sql)
            return self.con.execute(sql, params)

    real = eng._db
    eng._db = Counting(real)
    try:
        yield calls
    finally:
        eng._db = real


class Boom(Exception):
    pass


def outcome(fn):
    """What a call returned, or the type of what it raised."""
    try:
        return ("ok", fn())
    except sk.SessionKitError as exc:
        return ("raised", type(exc).__name__)
    except Boom:
        return ("raised", "Boom")


class Pair:
    """The same operations on a DuckDB store and a SQLite store, outcomes compared."""

    def __init__(self, folder, rng: random.Random):
        self.folder = folder
        self.rng = rng
        self.n = 0
        self.stores = {}
        self.open()

    def open(self):
        self.stores = {
            "duckdb": sk.open_store(self.folder / "c.duckdb"),
            "sqlite": sk.open_store(self.folder / "c.db"),
        }

    def close(self):
        for st in self.stores.values():
            st.close()

    def message(self, mid=None, size=None):
        self.n += 1
        size = self.rng.choice([1, 5, 40, 300]) if size is None else size
        text = " ".join(self.rng.choice(["alpha", "beta", "gamma", "delta", "echo"]) for _ in range(size))
        return {
            "id": mid or f"m{self.n}",
            "role": self.rng.choice(["user", "assistant"]),
            "parts": [{"type": "text", "text": text}],
            "createdAt": STAMP.format(self.n // 1000 % 60, self.n % 1000),
        }

    def do(self, fn):
        """Run fn(store) on both stores; both must give the same outcome."""
        got = {kind: outcome(lambda st=st: fn(st)) for kind, st in self.stores.items()}
        assert got["duckdb"] == got["sqlite"], got
        return got["duckdb"]

    def ids(self, sid):
        return [n.id for n in self.stores["sqlite"].session(sid).nodes()]

    def check(self, sid):
        """Every read of a path agrees between the engines (the cache's reads included)."""

        def reads(st):
            s = st.session(sid)
            out = {
                "latest": s.latest_leaf(),
                "history": s.get_history(),
                "raw": s.get_history(compacted=False),
                "streamed": list(s.history(newest_first=True)),
                "len": len(s),
            }
            for max_bytes, at_least in ((0, 1), (0, 3), (0, 20), (500, 1), (5_000, 2), (10**9, 1)):
                for compacted in (True, False):
                    w = s.recent_history(max_bytes, min_messages=at_least, compacted=compacted)
                    out[f"recent {max_bytes} {at_least} {compacted}"] = (w.messages, w.truncated, w.total_content_bytes)
            leaf = out["latest"]
            if leaf is not None:
                ids = self.ids(sid)
                other = ids[len(ids) // 2]
                out["other leaf"] = s.get_history(leaf_id=other)
                out["other window"] = s.recent_history(0, min_messages=4, leaf_id=other).messages
            return out

        a, b = (reads(self.stores[k]) for k in ("duckdb", "sqlite"))
        for key in b:
            assert a[key] == b[key], key
        # and the cached reads agree with the DuckDB store's own uncached stream of the path
        assert a["history"] == list(self.stores["duckdb"].session(sid).history())

    # -- operations -----------------------------------------------------------------
    def step(self, sid):
        rng = self.rng
        ids = self.ids(sid)
        op = rng.choice(
            ["append"] * 6
            + [
                "branch",
                "root",
                "duplicate",
                "chain",
                "import",
                "update",
                "delete",
                "clear",
                "compact",
                "rollback",
                "failed",
                "reopen",
                "big",
            ]
        )
        if op == "append" or not ids and op in ("branch", "duplicate", "update", "delete", "compact"):
            m = self.message()
            self.do(lambda st: st.session(sid).append(m).inserted)
        elif op == "branch":
            m, parent = self.message(), rng.choice(ids)
            self.do(lambda st: st.session(sid).append(m, parent_id=parent).inserted)
        elif op == "root":
            m = self.message()
            self.do(lambda st: st.session(sid).append(m, parent_id=None).inserted)
        elif op == "duplicate":
            m = self.message(mid=rng.choice(ids))
            self.do(lambda st: st.session(sid).append(m).inserted)
        elif op == "chain":
            ms = [self.message() for _ in range(rng.randint(1, 4))]
            self.do(lambda st: [r.inserted for r in st.session(sid).append_many(ms)])
        elif op == "import":
            items, last = [], None
            for _ in range(rng.randint(1, 5)):
                m = self.message()
                items.append((m, rng.choice([LATEST, last] if last else [LATEST, None]), None))
                last = m["id"]
            self.do(lambda st: [r.inserted for r in st.session(sid).import_many(items)])
        elif op == "update":
            m = self.message(mid=rng.choice(ids))
            self.do(lambda st: st.session(sid).update(m))
        elif op == "delete":
            victim = rng.choice(ids)
            self.do(lambda st: st.session(sid).delete(victim, subtree=True))
        elif op == "clear":
            self.do(lambda st: st.session(sid).clear())
        elif op == "compact":
            path = [m["id"] for m in self.stores["sqlite"].session(sid).get_history(compacted=False)]
            i = rng.randrange(len(path))
            j = rng.randrange(i, len(path))
            self.n += 1
            comp = Compaction(f"c{self.n}", path[i], path[j], f"summary {self.n}", STAMP.format(0, 0), 10, 1)
            self.do(lambda st: st.session(sid).import_compaction(comp))
        elif op == "rollback":  # writes inside a transaction that rolls back leave no trace
            ms = [self.message() for _ in range(2)]
            target = rng.choice(ids) if ids else None

            def tx(st):
                s = st.session(sid)
                with st.transaction():
                    s.append(ms[0])
                    if target is not None and rng_choice[0]:
                        s.update({**ms[1], "id": target})
                    else:
                        s.append(ms[1])
                    s.get_history()
                    s.recent_history(0, min_messages=3)
                    raise Boom

            rng_choice = [rng.random() < 0.5]
            self.do(tx)
        elif op == "failed":  # a chain whose last message is invalid stores nothing
            ms = [self.message(), {"id": "bad", "role": "user", "parts": "not a list"}]
            self.do(lambda st: st.session(sid).append_many(ms))
        elif op == "reopen":
            self.close()
            self.open()
        elif op == "big":  # longer than the cache keeps per row
            m = self.message(size=15_000)
            self.do(lambda st: st.session(sid).append(m).inserted)
        return op


# one seed in the fast suite, five more in the whole one
@pytest.mark.parametrize("seed", [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 6))])
@pytest.mark.slow
def test_cached_path_reads_match_sqlite_through_random_operations(tmp_path, seed):
    rng = random.Random(seed)
    pair = Pair(tmp_path, rng)
    try:
        seen = set()
        for _ in range(45):
            sid = rng.choice(["a", "b"])
            seen.add(pair.step(sid))
            pair.check(sid)
        for sid in ("a", "b"):
            pair.check(sid)
    finally:
        pair.close()
    assert len(seen) > 8  # the sequence exercised many kinds of operation


def test_recent_window_after_appends_needs_no_statement(tmp_path):
    """The point of the cache: a window within the newest rows is answered from memory."""
    st = sk.open_store(tmp_path / "w.duckdb")
    try:
        s = st.session("s")
        body = [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"hello {i}"}]} for i in range(80)]
        s.import_many([(m, LATEST, None) for m in body[:50]])
        for m in body[50:]:
            s.append(m)
        s.recent_history(0, min_messages=1)  # the first read learns whether the session has compactions
        with statements(st) as calls:
            window = s.recent_history(0, min_messages=20)
            assert calls == []
            whole = s.recent_history(10**9)  # longer than what is cached: read on from the database
            assert calls
        assert [m["id"] for m in window.messages] == [f"m{i}" for i in range(60, 80)]
        assert [m["id"] for m in whole.messages] == [m["id"] for m in body]
    finally:
        st.close()


def test_a_whole_path_is_read_from_the_cached_rows_and_then_from_the_database(tmp_path):
    """get_history of a conversation this process wrote: no statement while the path lies in
    the cached rows; above them (more rows than are kept, a message too long to keep) the
    database gives the rest; the messages are those a store opened afresh reads."""
    from sessionkit.store.engines.duckdb.state import _Paths

    path = tmp_path / "h.duckdb"
    st = sk.open_store(path)
    try:
        short, long_ = st.session("short"), st.session("long")
        for i in range(12):
            short.append({"id": f"s{i}", "role": "user", "parts": [{"type": "text", "text": f"hello {i}"}]})
        big = "word " * (_Paths.ROW_BYTES // 4)  # longer than a cached row may be
        for i in range(_Paths.ROWS + 40):
            text = big if i == _Paths.ROWS + 10 else f"turn {i}"
            long_.append({"id": f"l{i}", "role": "assistant", "parts": [{"type": "text", "text": text}]})
        short.append({"id": "side", "role": "user", "parts": [{"type": "text", "text": "a branch"}]}, parent_id="s5")
        short.get_history()  # the first read asks whether the file has compactions
        with statements(st) as calls:
            got = {"short": short.get_history()}
            assert calls == []  # the latest path (s0..s5, side) lies in the cached rows
            got["long"] = long_.get_history()  # cached above the long message only: the rest is read
            assert calls
            got["other leaf"] = short.get_history(leaf_id="s11")  # not the latest path: read
    finally:
        st.close()
    with sk.open_store(path) as fresh:  # nothing cached: every row read from the file
        assert got["short"] == fresh.session("short").get_history()
        assert [m["id"] for m in got["short"]] == [f"s{i}" for i in range(6)] + ["side"]
        assert got["long"] == fresh.session("long").get_history()
        assert len(got["long"]) == _Paths.ROWS + 40 and got["long"][_Paths.ROWS + 10]["parts"][0]["text"] == big
        assert got["other leaf"] == fresh.session("short").get_history(leaf_id="s11")


def test_an_agent_loop_on_a_reopened_store_reads_its_history_from_memory(tmp_path):
    """A store opened on a file written earlier: the first read of a conversation's history
    reads it and keeps it; each turn after (an append, then the history again) runs no
    statement, its append waits in the journal, and the history is the file's."""
    path = tmp_path / "a.duckdb"
    with sk.open_store(path) as st:
        st.session("c").append_many(
            [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"turn {i}"}]} for i in range(30)]
        )
        st.session("other").append({"id": "o", "role": "user", "parts": [{"type": "text", "text": "elsewhere"}]})
    st = sk.open_store(path)
    try:
        s = st.session("c")
        first = s.get_history()
        # the first append of a process reads once what every later one keeps: the stored
        # ids of the session, a block of sequence numbers, the journal's name
        s.append({"id": "t0", "role": "assistant", "parts": [{"type": "text", "text": "reply 0"}]})
        first = [*first, s.get("t0")]
        eng = st._engine
        with statements(st) as calls:
            for turn in range(1, 6):
                s.append({"id": f"t{turn}", "role": "assistant", "parts": [{"type": "text", "text": f"reply {turn}"}]})
                history = s.get_history()
                assert [m["id"] for m in history] == [m["id"] for m in first] + [f"t{k}" for k in range(1, turn + 1)]
            assert not any(sql.lstrip().upper().startswith("SELECT") for sql in calls), calls
        assert eng._shared.pending == 5  # the appends wait in the journal
    finally:
        st.close()
    with sk.open_store(path) as fresh:
        assert fresh.session("c").get_history() == history


def test_the_first_read_of_a_session_finds_its_newest_row_and_its_path_in_one_statement(tmp_path):
    """A reopened store knows no session's newest row: the first read (get_history here,
    recent_history, an append's parent) reads it with the rows of its path below it, and
    the read that follows runs no more; both give what the file holds."""
    path = tmp_path / "f.duckdb"
    body = [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"turn {i}"}]} for i in range(30)]
    with sk.open_store(path) as st:
        st.session("c").append_many(body)
        st.session("d").append_many(body)
    st = sk.open_store(path)
    try:
        st.session("x").recent_history(0)  # (the first read asks whether the file has compactions)
        with statements(st) as calls:
            history = st.session("c").get_history()
            assert len([sql for sql in calls if "sessionkit_messages" in sql]) == 1, calls
            window = st.session("c").recent_history(0, min_messages=10).messages
            assert len([sql for sql in calls if "sessionkit_messages" in sql]) == 1, calls
            with st.transaction():  # inside a write the newest row alone is read, as before
                assert st.session("d").latest_leaf()["id"] == "m29"
        assert [m["id"] for m in history] == [m["id"] for m in body]
        assert [m["id"] for m in window] == [m["id"] for m in body[-10:]]
        assert [m["id"] for m in st.session("d").get_history()] == [m["id"] for m in body]
    finally:
        st.close()
    with sk.open_store(path) as fresh:
        assert [fresh.session("c").get(m["id"]) for m in body] == history  # each read by its id


def test_readers_and_writers_in_threads_see_whole_paths(tmp_path):
    """Readers in other threads always get a path (each message the parent of the next)
    and, once the writers are done, the same path as a store that caches nothing."""
    st = sk.open_store(tmp_path / "t.duckdb")
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(w):
        try:
            s = st.session("s")
            rng = random.Random(w)
            for i in range(60):
                mid = f"w{w}-{i}"
                body = {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"text {w} {i}"}]}
                r = rng.random()
                try:  # an earlier message of this writer may have been deleted (with a subtree)
                    if r < 0.1 and i:
                        s.append(body, parent_id=f"w{w}-{rng.randrange(i)}")
                    elif r < 0.15 and i:
                        s.update({**body, "id": f"w{w}-{rng.randrange(i)}", "parts": [{"type": "text", "text": "u"}]})
                    elif r < 0.18 and i > 2:
                        s.delete(f"w{w}-{i - 1}", subtree=True)
                    else:
                        s.append(body)
                except sk.MessageNotFound:
                    pass
        except BaseException as exc:  # reported below
            errors.append(exc)

    def reader():
        s = st.session("s")
        try:
            while not stop.is_set():
                window = s.recent_history(0, min_messages=15).messages
                nodes = {n.id: n for n in s.nodes()}
                for above, below in zip(window, window[1:]):
                    node = nodes.get(below["id"])
                    if node is not None and above["id"] in nodes:  # both still there when listed
                        assert node.parent_id == above["id"]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    try:
        assert not errors, errors
        s = st.session("s")
        expected = list(s.history())  # uncached: the path's skeleton, then contents
        assert s.get_history() == expected
        assert s.recent_history(0, min_messages=15).messages == expected[-15:]
        path = tmp_path / "t.duckdb"
        st.close()
        fresh = sk.open_store(path)
        try:
            assert fresh.session("s").get_history() == expected
        finally:
            fresh.close()
    finally:
        st.close()
