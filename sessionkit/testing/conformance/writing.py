"""Writing: appends (single and chains), bulk imports, updates, deletes, transactions."""

from __future__ import annotations

import datetime as _dt

import pytest

import sessionkit as sk

from ._common import ISO_MS, chain, ids_of, msg, snapshot_store, strip_created, summary_fn


class TestWriting:
    """docs/message-tree.md: append, import, latest leaf, update, delete, clear."""

    def test_W1_default_attaches_to_latest_leaf(self, store):
        s = store.session("s")
        r = s.append(msg("a"))
        assert r.inserted is True
        assert strip_created(r.message) == msg("a")
        s.append(msg("b", role="assistant"))
        s.append(msg("c"))
        assert ids_of(s.get_history()) == ["a", "b", "c"]
        assert s.branches("a")[0]["id"] == "b"

    def test_W1_explicit_parent_makes_branch(self, store):
        s = store.session("s")
        chain(s, 3)  # m0 m1 m2
        s.append(msg("alt", role="assistant"), parent_id="m0")
        assert ids_of(s.branches("m0")) == ["m1", "alt"]
        assert ids_of(s.get_history()) == ["m0", "alt"]
        assert ids_of(s.get_history(leaf_id="m2")) == ["m0", "m1", "m2"]

    def test_W1_new_root(self, store):
        s = store.session("s")
        chain(s, 2)
        s.append(msg("root2"), parent_id=None)
        assert ids_of(s.get_history()) == ["root2"]
        assert s.path_length() == 1

    def test_W1_unknown_parent(self, store):
        s = store.session("s")
        s.append(msg("a"))
        before = snapshot_store(store)
        with pytest.raises(sk.MessageNotFound) as info:
            s.append(msg("b"), parent_id="nope")
        assert isinstance(info.value, LookupError)
        assert "nope" in str(info.value)
        assert snapshot_store(store) == before

    def test_W1_duplicate_id_first_write_wins(self, store):
        s = store.session("s")
        events: list = []
        store.subscribe(events.append)
        first = s.append(msg("a", "first"))
        s.append(msg("b"))
        again = s.append(msg("a", "second"), parent_id=None)
        assert again.inserted is False
        assert again.message["parts"][0]["text"] == "first"
        assert again.message == first.message
        assert len(s) == 2
        assert ids_of(s.get_history()) == ["a", "b"]
        assert [e.type for e in events] == ["append", "append"]

    def test_W1_retry_is_safe_even_with_parent_gone(self, store):
        s = store.session("s")
        s.append(msg("a"))
        s.append(msg("b"), parent_id="a")
        again = s.append(msg("b"), parent_id="zzz")
        assert again.inserted is False

    def test_W2_client_source_strips_reserved_metadata(self, store_factory):
        store = store_factory(reserved_metadata_keys=["cost", "internal"])
        s = store.session("s")
        s.append(msg("c", metadata={"cost": 1, "internal": "x", "kept": 2}), source="client")
        s.append(msg("v", metadata={"cost": 1, "kept": 2}))
        assert s.get("c")["metadata"] == {"kept": 2}
        assert s.get("v")["metadata"] == {"cost": 1, "kept": 2}
        with pytest.raises(ValueError):
            s.append(msg("z"), source="browser")

    def test_W3_import_message(self, store):
        s = store.session("s")
        events: list = []
        store.subscribe(events.append)
        t0 = _dt.datetime(2021, 5, 6, 7, 8, 9, 123000, tzinfo=_dt.UTC)
        r = s.import_message(msg("a"), created_at=t0)
        assert r.inserted
        s.import_message(msg("b"), parent_id="a", created_at=1_600_000_000_000)
        assert s.get("a")["createdAt"] == "2021-05-06T07:08:09.123Z"
        assert s.get("b")["createdAt"] == "2020-09-13T12:26:40.000Z"
        assert s.import_message(msg("a", "again")).inserted is False
        assert s.get("a")["parts"][0]["text"] == "text of a"
        assert events == []
        with pytest.raises(sk.MessageNotFound):
            s.import_message(msg("c"), parent_id="missing")
        assert ids_of(s.get_history()) == ["a", "b"]
        # imports default to a new root
        s.import_message(msg("r2"))
        assert s.branches("a")[0]["id"] == "b"
        assert ids_of(s.get_history()) == ["r2"]

    def test_W3_import_never_compacts(self, store):
        s = store.session("s")
        calls = []
        s.on_compaction(lambda m, ctx: calls.append(1)).compact_after(0)
        s.import_message(msg("a", "many words " * 50))
        s.import_message(msg("b", "many words " * 50), parent_id="a")
        assert calls == []

    def test_W4_latest_leaf_uses_write_order_not_time(self, store):
        s = store.session("s")
        s.append(msg("a", createdAt="2030-01-01T00:00:00.000Z"))
        s.append(msg("b", createdAt="2000-01-01T00:00:00.000Z"), parent_id=None)
        assert s.latest_leaf()["id"] == "b"
        s.import_message(msg("c", createdAt="1990-01-01T00:00:00.000Z"), parent_id="a")
        assert s.latest_leaf()["id"] == "c"
        s.update(msg("b", "updated"))
        assert s.latest_leaf()["id"] == "c"
        assert store.session("empty").latest_leaf() is None

    def test_W4_latest_leaf_after_deleting_it(self, store):
        s = store.session("s")
        chain(s, 3)
        s.append(msg("x"), parent_id="m0")
        s.delete("x")
        assert s.latest_leaf()["id"] == "m2"
        s.append(msg("y"))
        assert ids_of(s.get_history()) == ["m0", "m1", "m2", "y"]

    def test_W5_update_replaces_content_in_place(self, store):
        s = store.session("s")
        chain(s, 3)
        events: list = []
        store.subscribe(events.append)
        created = s.get("m1")["createdAt"]
        s.update(msg("m1", "rewritten", role="assistant", metadata={"edited": True}))
        got = s.get("m1")
        assert got["parts"][0]["text"] == "rewritten"
        assert got["metadata"] == {"edited": True}
        assert got["createdAt"] == created
        assert ids_of(s.get_history()) == ["m0", "m1", "m2"]
        assert [e.type for e in events] == ["update"]
        assert events[0].message_ids == ("m1",)
        with pytest.raises(sk.MessageNotFound):
            s.update(msg("nope"))

    def test_W5_update_changes_sizes_seen_by_windows(self, store):
        s = store.session("s")
        chain(s, 3)
        before = s.recent_history(10**9).total_content_bytes
        s.update(msg("m0", "x" * 5000))
        after = s.recent_history(10**9).total_content_bytes
        assert after > before + 4000
        assert s.recent_history(10**9, leaf_id="m2").total_content_bytes == after

    def test_W6_delete_leaf_and_refusals(self, store):
        s = store.session("s")
        chain(s, 3)
        before = snapshot_store(store)
        with pytest.raises(sk.MessageNotFound):
            s.delete(["m2", "ghost"])
        with pytest.raises(ValueError):
            s.delete("m1")
        assert snapshot_store(store) == before
        s.delete("m2")
        assert ids_of(s.get_history()) == ["m0", "m1"]
        s.delete(["m1", "m0"])  # parent and child together
        assert len(s) == 0

    def test_W6_delete_subtree(self, store):
        s = store.session("s")
        chain(s, 4)
        s.append(msg("alt"), parent_id="m1")
        s.append(msg("alt2"), parent_id="alt")
        events: list = []
        store.subscribe(events.append)
        s.delete("m1", subtree=True)
        assert ids_of(s.get_history(compacted=False)) == ["m0"]
        assert len(s) == 1
        assert events[0].type == "delete"
        assert set(events[0].message_ids) == {"m1", "m2", "m3", "alt", "alt2"}

    def test_W6_clear(self, store):
        s, other = store.session("s"), store.session("o")
        chain(s, 6)
        chain(other, 2)
        s.on_compaction(lambda m, c: sk.CompactionResult("m1", "m3", "sum")).compact()
        s.search("message")
        s.clear()
        assert len(s) == 0 and s.compactions() == [] and s.get_history() == []
        assert s.search("message") == []
        assert len(other) == 2 and len(other.search("message")) == 2
        s.append(msg("fresh"))
        assert ids_of(s.get_history()) == ["fresh"]


# The public API the layers above the store live on: chains, bulk imports,
# transactions, runs and events, records, the tree read model, scans, capabilities.


def _parent_of(session, mid):
    """The parent id of ``mid``, read from the raw path (not from the API under test)."""
    path = ids_of(session.get_history(leaf_id=mid, compacted=False))
    return path[-2] if len(path) > 1 else None


class TestAppendMany:
    """docs/message-tree.md: ``session.append_many`` appends a chain in one transaction."""

    def test_W7_chain_under_the_latest_leaf(self, store):
        s = store.session("s")
        s.append(msg("m0"))
        results = s.append_many([msg("a"), msg("b", role="assistant"), msg("c")])
        assert [r.inserted for r in results] == [True, True, True]
        assert ids_of(s.get_history()) == ["m0", "a", "b", "c"]
        assert [_parent_of(s, m) for m in ("a", "b", "c")] == ["m0", "a", "b"]
        assert [r.message for r in results] == [s.get("a"), s.get("b"), s.get("c")]
        assert all(ISO_MS.match(r.message["createdAt"]) for r in results)

    def test_W7_parent_none_and_explicit_parent(self, store):
        s = store.session("s")
        chain(s, 3)  # m0 m1 m2
        s.append_many([msg("r1"), msg("r2")], parent_id=None)
        assert ids_of(s.get_history(leaf_id="r2")) == ["r1", "r2"]
        s.append_many([msg("b1"), msg("b2")], parent_id="m0")
        assert ids_of(s.get_history(leaf_id="b2")) == ["m0", "b1", "b2"]
        assert ids_of(s.branches("m0")) == ["m1", "b1"]
        assert s.latest_leaf()["id"] == "b2"
        assert s.append_many([]) == [] and len(s) == 7

    def test_W7_unknown_parent_stores_nothing(self, store):
        s = store.session("s")
        chain(s, 2)
        before = snapshot_store(store)
        with pytest.raises(sk.MessageNotFound):
            s.append_many([msg("x"), msg("y")], parent_id="ghost")
        assert snapshot_store(store) == before

    @pytest.mark.parametrize(
        "bad, error",
        [
            ({"id": "bad", "parts": []}, ValueError),  # no role
            ({"id": "bad", "role": "user", "parts": [{"type": "text", "text": {1, 2}}]}, TypeError),
            ("not a message", TypeError),
        ],
    )
    def test_W7_one_invalid_message_stores_nothing(self, store, bad, error):
        s = store.session("s")
        chain(s, 2)
        events: list = []
        store.subscribe(events.append)
        before = snapshot_store(store)
        with pytest.raises(error):
            s.append_many([msg("x"), msg("y"), bad, msg("z")])
        assert snapshot_store(store) == before
        assert events == []
        if error is ValueError:
            with pytest.raises(sk.InvalidMessage, match="role"):
                s.append_many([msg("x"), bad])

    def test_W7_an_existing_id_keeps_its_place_and_the_next_attaches_under_it(self, store):
        s = store.session("s")
        chain(s, 2)  # m0 m1
        s.append(msg("y"), parent_id="m0")  # a branch beside m1
        stored = s.get("m1")
        results = s.append_many([msg("m1", "changed text"), msg("n")], parent_id="y")
        assert [r.inserted for r in results] == [False, True]
        assert results[0].message == s.get("m1") == stored  # the first write wins
        assert _parent_of(s, "m1") == "m0"  # not moved under y
        assert ids_of(s.get_history(leaf_id="n")) == ["m0", "m1", "n"]

    def test_W7_a_retried_chain_adds_nothing_and_sends_no_event(self, store):
        s = store.session("s")
        chain(s, 1)
        first = s.append_many([msg("a"), msg("b")])
        events: list = []
        store.subscribe(events.append)
        again = s.append_many([msg("a"), msg("b")])
        assert [r.inserted for r in again] == [False, False]
        assert [r.message for r in again] == [r.message for r in first]
        assert len(s) == 3 and events == []

    def test_W7_one_event_per_inserted_message_after_the_commit(self, store):
        s = store.session("s")
        chain(s, 1)  # m0
        seen = []

        def on_event(ev):  # every message of the chain is stored when the first event comes
            seen.append((ev.type, ev.message_ids, len(store.session("s"))))

        store.subscribe(on_event)
        s.append_many([msg("m0"), msg("a"), msg("b"), msg("c")], parent_id=None)
        assert seen == [("append", ("a",), 4), ("append", ("b",), 4), ("append", ("c",), 4)]

    def test_W7_compaction_is_checked_once_after_the_chain(self, store):
        s = store.session("s")
        calls = []

        def fn(messages, ctx):
            calls.append((ctx.leaf_id, ids_of(messages)))
            return None

        s.on_compaction(fn).compact_after(0)
        s.append_many([msg("a"), msg("b"), msg("c")])
        assert calls == [("c", ["a", "b", "c"])]
        s.append_many([msg("a"), msg("b")], parent_id=None)  # nothing inserted: no check
        assert len(calls) == 1

    def test_W7_client_source_strips_reserved_metadata(self, store_factory):
        st = store_factory(reserved_metadata_keys=["verified"])
        s = st.session("s")
        meta = {"verified": True, "note": "kept"}
        client = s.append_many([msg("a", metadata=dict(meta)), msg("b", metadata=dict(meta))], source="client")
        assert [r.message["metadata"] for r in client] == [{"note": "kept"}, {"note": "kept"}]
        assert s.get("b")["metadata"] == {"note": "kept"}
        server = s.append_many([msg("c", metadata=dict(meta))])
        assert server[0].message["metadata"] == meta
        with pytest.raises(ValueError, match="source"):
            s.append_many([msg("d")], source="browser")
        assert s.get("d") is None


class TestImports:
    """``session.import_many`` and ``session.import_compaction``: bulk import, idempotent, silent."""

    def test_import_many_parents_times_and_silence(self, store):
        s = store.session("s")
        calls: list = []
        events: list = []
        s.on_compaction(lambda m, c: calls.append(1)).compact_after(0)
        store.subscribe(events.append)
        when = _dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=_dt.UTC)
        results = s.import_many(
            [
                (msg("r"), None, when),
                (msg("a", role="assistant"), "r", 1_700_000_000_000),
                (msg("b"), "a", None),
                (msg("alt", role="assistant"), "r", None),
            ]
        )
        assert [r.inserted for r in results] == [True] * 4
        assert s.get("r")["createdAt"] == "2024-05-06T07:08:09.123Z"
        assert s.get("a")["createdAt"] == sk.messages.to_iso(1_700_000_000_000)
        assert ids_of(s.get_history(leaf_id="b")) == ["r", "a", "b"]
        assert ids_of(s.branches("r")) == ["a", "alt"]
        assert s.latest_leaf()["id"] == "alt"
        assert calls == [] and events == []

    def test_import_many_is_idempotent(self, store):
        s = store.session("s")
        items = [(msg(f"m{i}"), f"m{i - 1}" if i else None, None) for i in range(5)]
        first = s.import_many(items)
        again = s.import_many(items)
        assert [r.inserted for r in again] == [False] * 5
        assert [r.message for r in again] == [r.message for r in first] == s.get_history()
        assert len(s) == 5

    def test_import_many_latest_parent(self, store):
        s = store.session("s")
        chain(s, 2)
        s.import_many([(msg("x"), sk.LATEST, None), (msg("y"), sk.LATEST, None)])
        assert ids_of(s.get_history()) == ["m0", "m1", "x", "y"]

    @pytest.mark.parametrize(
        "bad_item",
        [
            (msg("z"), "ghost", None),  # unknown parent
            ({"id": "z", "role": "user"}, None, None),  # no parts
            (msg("z"), 42, None),  # a parent that is not an id
        ],
    )
    def test_import_many_stores_all_or_nothing(self, store, bad_item):
        s = store.session("s")
        chain(s, 1)
        before = snapshot_store(store)
        with pytest.raises((LookupError, ValueError, TypeError)):
            s.import_many([(msg("x"), "m0", None), (msg("y"), "x", None), bad_item])
        assert snapshot_store(store) == before

    def test_import_compaction_restores_exactly_and_once(self, store):
        s = store.session("s")
        chain(s, 5)
        events: list = []
        store.subscribe(events.append)
        comp = sk.Compaction("c0ffee", "m1", "m3", "an imported summary", "2024-01-02T03:04:05.678Z", 321, 12)
        assert s.import_compaction(comp) is True
        assert s.import_compaction(comp) is False
        assert s.compactions() == [comp]
        hist = s.get_history()
        assert ids_of(hist) == ["m0", "compaction:c0ffee", "m4"]
        assert hist[1]["createdAt"] == comp.created_at
        assert hist[1]["metadata"]["compaction"]["tokens_before"] == 321
        assert s.context_tokens() == s.path().tokens_model
        assert events == []
        with pytest.raises(sk.MessageNotFound):
            s.import_compaction(sk.Compaction("other", "m1", "ghost", "x", comp.created_at, 1, 1))
        with pytest.raises(TypeError):
            s.import_compaction({"id": "dict"})
        assert s.compactions() == [comp]


class TestTransactions:
    """``store.transaction()``: many writes, one commit; events after it, none after a rollback."""

    def test_writes_commit_together_and_events_follow_the_commit(self, store):
        events: list = []
        store.subscribe(events.append)
        a, b = store.session("a"), store.session("b")
        with store.transaction() as tx:
            assert tx is store
            a.append(msg("a1"))
            a.append(msg("a2"))
            a.append_many([msg("a3"), msg("a4")])
            b.import_message(msg("b1"))
            b.update(msg("b1", "edited"))
            store.run_log.begin("a", "run-1", "hi")
            store.run_log.append_events("a", [{"run_id": "run-1", "kind": "run.start"}])
            store.session_records.put("a", "k", [(1, "one")])
            assert ids_of(a.get_history()) == ["a1", "a2", "a3", "a4"]  # reads see the transaction
            assert events == []
        assert [(e.type, e.message_ids) for e in events] == [
            ("append", ("a1",)),
            ("append", ("a2",)),
            ("append", ("a3",)),
            ("append", ("a4",)),
            ("update", ("b1",)),
        ]
        assert ids_of(a.get_history()) == ["a1", "a2", "a3", "a4"]
        assert b.get("b1")["parts"][0]["text"] == "edited"
        assert [r.run_id for r in store.runs("a")] == ["run-1"]
        assert [e["kind"] for e in store.events("a")] == ["run.start"]
        assert store.session_records.get("a", "k") == [(1, "one")]

    def test_an_error_rolls_everything_back_and_drops_the_events(self, store):
        s = store.session("s")
        chain(s, 2)
        before = snapshot_store(store)
        events: list = []
        store.subscribe(events.append)
        with pytest.raises(RuntimeError, match="changed my mind"):
            with store.transaction():
                s.append(msg("x"))
                s.append(msg("y"), parent_id="m0")
                s.delete("y")
                s.update(msg("m0", "edited"))
                store.session("t").append_many([msg("t1"), msg("t2")])
                s.on_compaction(summary_fn("m0", "x")).compact(leaf_id="x")
                store.run_log.begin("s", "run-1", "hi")
                store.session_records.put("s", "k", [(1, "one")])
                raise RuntimeError("changed my mind")
        assert snapshot_store(store) == before
        assert events == [] and store.runs("s") == [] and store.session_records.get("s", "k") == []
        s.append(msg("after"))  # writes after a rollback report as usual
        assert [e.message_ids for e in events] == [("after",)]

    def test_a_nested_transaction_joins_the_outer_one(self, store):
        s = store.session("s")
        events: list = []
        store.subscribe(events.append)
        with pytest.raises(ValueError):
            with store.transaction():
                s.append(msg("outer"))
                with store.transaction():
                    s.append(msg("inner"))
                assert events == []  # the inner exit commits nothing
                raise ValueError("abort")
        assert len(s) == 0 and events == []
        with store.transaction():
            s.append(msg("outer"))
            with store.transaction():
                s.append(msg("inner"))
        assert ids_of(s.get_history()) == ["outer", "inner"]
        assert [e.message_ids for e in events] == [("outer",), ("inner",)]

    def test_a_failed_write_inside_keeps_the_transaction_usable(self, store):
        s = store.session("s")
        with store.transaction():
            s.append(msg("a"))
            with pytest.raises(sk.MessageNotFound):
                s.append(msg("b"), parent_id="ghost")
            s.append(msg("c"))
        assert ids_of(s.get_history()) == ["a", "c"]

    def test_transaction_on_a_closed_store(self, store):
        store.close()
        with pytest.raises(sk.StoreClosed):
            with store.transaction():
                pass
