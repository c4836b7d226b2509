"""Stores and sessions: opening, closing, reopening, listing, deleting; capabilities."""

from __future__ import annotations

import gc
import threading
from dataclasses import FrozenInstanceError

import pytest

import sessionkit as sk

from ._common import ISO_MS, chain, ids_of, msg


class TestStoresAndSessions:
    """docs/stores.md: stores, sessions, listing, stats, durability basics, schema."""

    def test_S1_context_manager_and_close(self, store):
        with store as st:
            assert st is store
            st.session("s").append(msg("a"))
        with pytest.raises(sk.StoreClosed):
            store.session("s")
        with pytest.raises(sk.StoreClosed):
            store.stats()
        store.close()  # idempotent
        assert isinstance(sk.StoreClosed("x"), sk.SessionKitError)

    def test_S1_session_handle_use_after_close(self, store):
        s = store.session("s")
        s.append(msg("a"))
        store.close()
        with pytest.raises(sk.StoreClosed):
            s.append(msg("b"))
        with pytest.raises(sk.StoreClosed):
            s.get_history()

    def test_S1_unknown_target_is_value_error(self):
        for bad in ("notes.txt", "mysql://x", "store", ""):
            with pytest.raises(ValueError):
                sk.open_store(bad)
        with pytest.raises(TypeError):
            sk.open_store(42)

    def test_S2_session_handle_is_cached(self, store):
        a = store.session("x")
        a.compact_after(123)
        assert store.session("x") is a
        assert store.session() is store.session("")
        assert store.session().session_id == ""
        assert a.session_id == "x"

    def test_S2_settings_outlive_the_handle(self, store):
        # store.session(id) holds handles only while in use; one given a compaction
        # function and threshold keeps them for the next store.session(id)
        calls = []
        store.session("kept").on_compaction(lambda m, ctx: calls.append(ctx.leaf_id)).compact_after(0)
        gc.collect()
        store.session("kept").append(msg("k1", "word " * 20))
        assert calls == ["k1"]
        assert store.session("kept") is store.session("kept")
        store.session("other").append(msg("o1", "word " * 20))  # no settings: nothing runs
        assert calls == ["k1"]

    def test_S2_sessions_share_nothing(self, store):
        a, b = store.session("a"), store.session("b")
        a.append(msg("same", "alpha words"))
        b.append(msg("same", "beta words"))
        a.append(msg("only-a", "alpha again"))
        assert a.get("same")["parts"][0]["text"] == "alpha words"
        assert b.get("same")["parts"][0]["text"] == "beta words"
        assert b.get("only-a") is None
        assert len(a) == 2 and len(b) == 1
        assert ids_of(b.get_history()) == ["same"]
        assert {h.id for h in b.search("words")} == {"same"}
        assert all(h.session_id == "b" for h in b.search("words"))
        assert {h.session_id for h in store.search("words")} == {"a", "b"}
        with pytest.raises(sk.MessageNotFound):
            b.append(msg("x"), parent_id="only-a")

    def test_S3_list_sessions_newest_activity_first(self, store):
        store.session("old").append(msg("1"))
        store.session("new").append(msg("1"))
        store.session("empty")
        store.session("old").append(msg("2"))
        infos = store.list_sessions()
        assert [i.id for i in infos] == ["old", "new"]
        assert infos[0].message_count == 2 and infos[1].message_count == 1
        for info in infos:
            assert ISO_MS.match(info.created_at) and ISO_MS.match(info.updated_at)
            assert info.created_at <= info.updated_at

    def test_S3_delete_session(self, store):
        a, b = store.session("a"), store.session("b")
        chain(a, 3)
        chain(b, 2)
        a.search("message")  # build the index
        store.delete_session("a")
        assert len(a) == 0
        assert [i.id for i in store.list_sessions()] == ["b"]
        assert store.search("message", session_id="a") == []
        assert len(store.search("message")) == 2
        with pytest.raises(sk.SessionNotFound) as info:
            store.delete_session("a")
        assert isinstance(info.value, LookupError)
        with pytest.raises(sk.SessionNotFound):
            store.delete_session("never")

    def test_S4_stats(self, store):
        st = store.stats()
        for key in ("sessions", "messages", "compactions", "blobs", "blob_bytes", "indexed_messages", "bytes"):
            assert key in st
        assert st["sessions"] == 0 and st["messages"] == 0
        chain(store.session("a"), 3)
        chain(store.session("b"), 2)
        st = store.stats()
        assert st["sessions"] == 2 and st["messages"] == 5
        assert st["indexed_messages"] == 0

    def test_S5_threads_share_one_store(self, store):
        errors = []

        def work(t):
            try:
                s = store.session(f"t{t}")
                for i in range(50):
                    s.append(msg(f"{t}-{i}"))
                    store.session("shared").append(msg(f"{t}-{i}"), parent_id=None)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for k in range(4):
            s = store.session(f"t{k}")
            assert ids_of(s.get_history()) == [f"{k}-{i}" for i in range(50)]
        assert len(store.session("shared")) == 200

    def test_S5_appends_survive_reopen(self, store, reopen):
        s = store.session("s")
        chain(s, 5)
        again = reopen(store)
        if again is None:
            pytest.skip("this engine keeps nothing after close (in-memory)")
        assert ids_of(again.session("s").get_history()) == [f"m{i}" for i in range(5)]
        again.close()

    def test_S6_schema_version_and_prefix(self, store, reopen, raw_sql):
        tables = raw_sql(store, "tables")
        if tables is None:
            pytest.skip("engine gives no raw access")
        assert tables and all(t.startswith("sessionkit_") for t in tables)
        assert raw_sql(store, "version") >= 1

    def test_S6_newer_schema_refused(self, store, reopen, raw_sql):
        if raw_sql(store, "version") is None:
            pytest.skip("engine gives no raw access")
        raw_sql(store, "bump")
        again = reopen(store, expect_error=sk.SchemaVersionError)
        if again is None:
            pytest.skip("in-memory store cannot be reopened")

    def test_S13_a_garbage_schema_version_is_StoreCorrupt(self, store, reopen, raw_sql):
        if raw_sql(store, "version") is None:
            pytest.skip("engine gives no raw access")
        raw_sql(store, "garbage")
        again = reopen(store, expect_error=sk.StoreCorrupt)
        if again is None:
            pytest.skip("in-memory store cannot be reopened")

    def test_S13_reads_racing_deletes_see_before_or_after(self, store):
        """A reader never gets an error from a delete in another thread: each read is a
        state the store was in (a path is a chain of parent and child), or the message
        is gone (MessageNotFound for an explicit leaf that was deleted)."""
        s = store.session("race")
        s.append(msg("root", "common words here"))
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer():
            try:
                for r in range(25):
                    ids = [f"b{r}-{i}" for i in range(6)]
                    parent = "root"
                    for mid in ids:
                        s.append(msg(mid, "common words here"), parent_id=parent)
                        parent = mid
                    s.delete(ids[0], subtree=True)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                stop.set()

        def check_path(path, whole=True):
            # a chain from the root; a stream may end early where a message was deleted
            assert path and path[0]["id"] == "root" or not whole
            for a, b in zip(path, path[1:]):
                assert b["id"].split("-")[0] == a["id"].split("-")[0] or a["id"] == "root"

        def reader():
            try:
                while not stop.is_set():
                    check_path(s.get_history())
                    check_path(list(s.history()) or [{"id": "root"}])  # a prefix of the path
                    newest = list(s.history(newest_first=True))
                    check_path(newest[::-1], whole=False)  # a suffix of the path
                    for m in s.branches("root"):
                        assert m["id"].endswith("-0")
                    for hit in s.search("common words"):
                        assert hit.content == "common words here"
                    for hit in store.search("common"):
                        assert hit.session_id == "race"
                    window = s.recent_history(10**6)
                    if window.messages:
                        assert window.messages[-1]["id"] == window.messages[-1]["id"]
                    leaf = s.latest_leaf()
                    if leaf is not None and leaf["id"] != "root":
                        try:
                            check_path(s.get_history(leaf_id=leaf["id"]))
                        except sk.MessageNotFound:
                            pass  # deleted after the leaf was read: the state after
            except BaseException as exc:  # reported below
                errors.append(exc)

        s.search("common")  # the index exists, so every write keeps it
        threads = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors


class TestCapabilities:
    """``store.capabilities``: what the engine declares; ``store.coordination`` exists only with it."""

    def test_capabilities_are_declared(self, store):
        caps = store.capabilities
        assert isinstance(caps, sk.store.Capabilities)
        assert all(isinstance(getattr(caps, f), bool) for f in ("bulk_insert", "coordination", "shared_feed"))
        with pytest.raises(FrozenInstanceError):
            caps.coordination = not caps.coordination  # type: ignore[misc,unused-ignore]

    def test_coordination_needs_the_capability(self, store):
        coordination = store.coordination
        assert (coordination is not None) is store.capabilities.coordination
        if coordination is None:
            return  # an engine one process serves has no holds and no signals
        name = f"conformance-{id(store)}"
        assert coordination.try_hold(name) is True
        assert coordination.hold_taken(name) is True
        assert coordination.try_hold(name) is False  # not re-entrant
        coordination.release_hold(name)
        assert coordination.hold_taken(name) is False
        coordination.signal("s", "note", {"x": 1})  # best effort, to other processes
