"""Reading: histories, paths, the tree read model and scans."""

from __future__ import annotations

import json

import pytest

import sessionkit as sk

from ._common import b64_payload, chain, ids_of, msg, summary_fn


class TestReading:
    """docs/message-tree.md: history, windows, navigation."""

    def test_R1_history_streams_root_to_leaf(self, store):
        s = store.session("s")
        ids = chain(s, 600)
        it = s.history()
        assert next(it)["id"] == "m0"
        assert ids_of(it) == ids[1:]
        assert ids_of(s.history(newest_first=True)) == ids[::-1]

    def test_R1_newest_first_stops_early(self, store):
        s = store.session("s")
        chain(s, 300)
        it = s.history(newest_first=True)
        got = [next(it)["id"] for _ in range(3)]
        assert got == ["m299", "m298", "m297"]

    def test_R1_generator_does_not_block_writers(self, store):
        s = store.session("s")
        chain(s, 400)
        it = s.history()
        next(it)
        s.append(msg("during"))  # must not deadlock or fail
        rest = list(it)
        assert len(rest) == 399
        assert s.latest_leaf()["id"] == "during"

    def test_R1_a_message_deleted_while_streaming_ends_the_stream_before_it(self, store):
        s = store.session("s")
        chain(s, 200)  # the path below leaves this chain at m100, past the first batch
        s.append(msg("x0"), parent_id="m100")
        s.append_many([msg(f"x{i}") for i in range(1, 500)])
        s.append(msg("y0"), parent_id="m50")  # a branch written after: its row is not on the path
        path = [f"m{i}" for i in range(101)] + [f"x{i}" for i in range(500)]
        assert ids_of(s.history(leaf_id="x499")) == path == ids_of(s.get_history(leaf_id="x499"))
        it = s.history(leaf_id="x499")
        got = [next(it)["id"] for _ in range(10)]
        s.delete("x300", subtree=True)
        got += ids_of(it)
        assert got == path[: path.index("x300")]

        s = store.session("s")
        chain(s, 2)
        with pytest.raises(sk.MessageNotFound):
            s.history(leaf_id="nope")
        with pytest.raises(sk.MessageNotFound):
            s.get_history(leaf_id="nope")
        with pytest.raises(sk.MessageNotFound):
            s.path_length("nope")
        with pytest.raises(sk.MessageNotFound):
            s.recent_history(100, leaf_id="nope")
        assert store.session("empty").get_history() == []
        assert list(store.session("empty").history(newest_first=True)) == []

    def test_R2_get_history_equals_history(self, store):
        s = store.session("s")
        chain(s, 10)
        s.append(msg("b"), parent_id="m4")
        assert s.get_history() == list(s.history())
        assert s.get_history(leaf_id="m9") == list(s.history(leaf_id="m9"))

    def test_R2_path_slice_is_a_slice_of_the_raw_path(self, store):
        s = store.session("s")
        chain(s, 30)
        s.append(msg("b1"), parent_id="m9")
        s.append(msg("b2"), parent_id="b1")
        s.import_compaction(sk.Compaction("c", "m2", "m5", "summary", "2026-01-01T00:00:00Z", 10, 2))
        for leaf in (None, "b2", "m29", "m9"):
            raw = s.get_history(leaf_id=leaf, compacted=False)
            for start, count in ((0, 5), (3, 7), (8, 100), (len(raw) - 1, 1), (len(raw), 3), (0, 0)):
                assert s.path_slice(start, count, leaf_id=leaf) == raw[start : start + count], (leaf, start, count)
            pages = [s.path_slice(i, 4, leaf_id=leaf) for i in range(0, len(raw), 4)]
            assert [m for page in pages for m in page] == raw
        assert store.session("empty").path_slice(0, 10) == []
        with pytest.raises(sk.MessageNotFound):
            s.path_slice(0, 1, leaf_id="nope")
        for bad in (-1, 1.5, True, "2"):
            with pytest.raises(ValueError, match="start"):
                s.path_slice(bad, 1)
            with pytest.raises(ValueError, match="count"):
                s.path_slice(0, bad)

    def test_R3_recent_history_window(self, store):
        s = store.session("s")
        ids = chain(s, 50, text=lambda i: "w" * (100 + i))
        full = s.get_history()
        sizes = [len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode()) for m in full]
        total = sum(sizes)
        r = s.recent_history(total)
        assert ids_of(r.messages) == ids and r.truncated is False
        assert r.total_content_bytes == total
        budget = sum(sizes[-7:])
        r = s.recent_history(budget)
        assert ids_of(r.messages) == ids[-7:] and r.truncated is True
        assert r.total_content_bytes == total
        r = s.recent_history(budget + sizes[-8] - 1)
        assert ids_of(r.messages) == ids[-7:]
        r = s.recent_history(0)
        assert ids_of(r.messages) == ids[-1:]
        r = s.recent_history(0, min_messages=5)
        assert ids_of(r.messages) == ids[-5:]
        r = s.recent_history(10, min_messages=500)
        assert ids_of(r.messages) == ids and r.truncated is False
        r = s.recent_history(sum(sizes[10:20]), leaf_id="m19")
        assert ids_of(r.messages) == ids[10:20]
        assert r.total_content_bytes == sum(sizes[:20])
        empty = store.session("e").recent_history(100)
        assert empty.messages == [] and empty.truncated is False and empty.total_content_bytes == 0
        with pytest.raises(ValueError):
            s.recent_history(-1)

    @staticmethod
    def _expected_window(path, max_bytes, min_messages):
        """The longest suffix of ``path`` within ``max_bytes`` (at least ``min_messages``)."""
        sizes = [len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode()) for m in path]
        out: list = []
        total = 0
        for m, size in zip(reversed(path), reversed(sizes)):
            if len(out) >= min_messages and total + size > max_bytes:
                break
            out.append(m)
            total += size
        return out[::-1], sizes

    def test_R3_the_window_is_a_suffix_of_the_compacted_path(self, store):
        s = store.session("s")
        chain(s, 40, text=lambda i: "w" * (50 + 7 * i))
        # a branch that shares a compacted prefix, and one compaction inside another's
        # range that a newer, overlapping one replaces on read
        s.append(msg("b1", "a branch " * 30), parent_id="m25")
        s.append(msg("b2", "on the branch " * 10))
        s.on_compaction(summary_fn("m2", "m9")).compact(leaf_id="m39")
        s.on_compaction(summary_fn("m12", "m20")).compact(leaf_id="m39")
        s.on_compaction(summary_fn("m18", "m30")).compact(leaf_id="m39")  # newer, overlaps the one before
        s.on_compaction(summary_fn("m26", "m33")).compact(leaf_id="m39")  # on the main path only
        for leaf in ("m39", "b2", "m22", "m5"):
            path = s.get_history(leaf_id=leaf)
            raw_total = sum(n.bytes for n in s.path(leaf).nodes)
            for min_messages in (1, 3):
                for budget in [0, 500, 1500, 4000, 9000, 10**7]:
                    expected, _ = self._expected_window(path, budget, min_messages)
                    got = s.recent_history(budget, min_messages=min_messages, leaf_id=leaf)
                    assert got.messages == expected, (leaf, budget, min_messages)
                    assert got.truncated == (len(expected) < len(path))
                    assert got.total_content_bytes == raw_total
        assert ids_of(s.recent_history(10**7).messages) == ids_of(s.get_history())  # the latest leaf: b2
        raw = s.recent_history(10**7, compacted=False)
        assert ids_of(raw.messages) == ids_of(s.get_history(compacted=False))

    def test_R3_a_summary_counts_with_its_own_size(self, store):
        s = store.session("s")
        chain(s, 12, text=lambda i: "x" * 400)
        comp = s.on_compaction(summary_fn("m0", "m8")).compact()
        path = s.get_history()
        overlay = path[0]
        assert overlay["id"] == f"compaction:{comp.id}"
        _, sizes = self._expected_window(path, 0, 1)
        # exactly the summary and what follows it fits: the whole compacted path, not truncated
        got = s.recent_history(sum(sizes))
        assert got.messages == path and got.truncated is False
        got = s.recent_history(sum(sizes) - 1)  # one byte short: the summary is left out
        assert got.messages == path[1:] and got.truncated is True

    def test_R3_sizes_include_payloads_and_split_rows(self, store):
        s = store.session("s")
        _, b64 = b64_payload(20_000, "p")
        m = {"id": "p", "role": "user", "parts": [{"type": "file", "mediaType": "a/b", "data": b64}]}
        s.append(m)
        r = s.recent_history(1000)
        assert r.total_content_bytes > 20_000
        assert len(r.messages) == 1

    def test_R4_roots_and_nodes(self, store):
        s = store.session("s")
        chain(s, 3)
        s.append(msg("r2", "second tree"), parent_id=None)
        s.append(msg("x"), parent_id="m0")
        assert ids_of(s.roots()) == ["m0", "r2"]
        nodes = s.nodes()
        assert [n.id for n in nodes] == ["m0", "m1", "m2", "r2", "x"]
        by_id = {n.id: n for n in nodes}
        assert by_id["x"].parent_id == "m0" and by_id["x"].depth == 1
        assert by_id["m2"].depth == 2 and by_id["r2"].parent_id is None
        assert [n.seq for n in nodes] == sorted(n.seq for n in nodes)
        from sessionkit.messages import estimate_tokens

        assert by_id["m1"].tokens == estimate_tokens(s.get("m1"))
        assert by_id["m1"].role == "assistant"
        assert store.session("empty").nodes() == [] and store.session("empty").roots() == []

    def test_R4_navigation(self, store):
        s = store.session("s")
        chain(s, 3)
        s.append(msg("x"), parent_id="m0")
        s.append(msg("y"), parent_id="m0")
        assert s.get("m1")["id"] == "m1" and s.get("nope") is None
        assert s.latest_leaf()["id"] == "y"
        assert ids_of(s.branches("m0")) == ["m1", "x", "y"]
        assert s.branches("m2") == []
        with pytest.raises(sk.MessageNotFound):
            s.branches("nope")
        assert s.path_length() == 2
        assert s.path_length("m2") == 3
        assert len(s) == 5
        assert store.session("e").path_length() == 0
        assert len(store.session("e")) == 0


def _branched(store):
    """m0..m3 with a branch b2, b3 under m1; compactions on the shared prefix and on branch A."""
    s = store.session("s")
    chain(s, 4)
    s.append(msg("b2", "branch b two", "assistant"), parent_id="m1")
    s.append(msg("b3", "branch b three"), parent_id="b2")
    shared = s.on_compaction(summary_fn("m0", "m1", "prefix")).compact(leaf_id="m3")
    on_a = s.on_compaction(summary_fn("m1", "m3", "branch A")).compact(leaf_id="m3")
    return s, shared, on_a


class TestTreeReadModel:
    """``session.tree()``, ``session.path()`` and ``session.get_many()``: what views, plots and the CLI draw."""

    def test_tree_nodes_latest_children_and_paths(self, store):
        s, shared, on_a = _branched(store)
        tree = s.tree()
        assert isinstance(tree, sk.store.Tree) and tree.session_id == "s"
        assert list(tree.nodes) == s.nodes() and len(tree) == len(s) == 6
        assert tree.latest_id == s.latest_leaf()["id"] == "b3"
        for node in tree.nodes:
            assert [n.id for n in tree.children(node.id)] == ids_of(s.branches(node.id))
            assert [n.id for n in tree.path(node.id)] == ids_of(s.get_history(leaf_id=node.id, compacted=False))
        assert [n.id for n in tree.path()] == ids_of(s.get_history(compacted=False))
        assert [n.id for n in tree.roots()] == ids_of(s.roots()) == ["m0"]
        assert "b2" in tree and "ghost" not in tree
        with pytest.raises(sk.MessageNotFound):
            tree.node("ghost")
        empty = store.session("empty").tree()
        assert (empty.nodes, empty.latest_id, empty.compactions, empty.path()) == ((), None, (), [])

    def test_tree_places_each_compaction(self, store):
        s, shared, on_a = _branched(store)
        # a range whose start is not above its end covers nothing (as a read would apply it nowhere)
        stray = sk.Compaction("stray", "b2", "m3", "stray", shared.created_at, 1, 1)
        s.import_compaction(stray)
        placed = {p.compaction.id: p for p in s.tree().compactions}
        assert [p.compaction for p in s.tree().compactions] == s.compactions()

        def raw_range(a, b, leaf):
            ids = ids_of(s.get_history(leaf_id=leaf, compacted=False))
            return tuple(ids[ids.index(a) : ids.index(b) + 1])

        assert placed[shared.id].ids == raw_range("m0", "m1", "m3") and placed[shared.id].messages == 2
        assert placed[on_a.id].ids == raw_range("m1", "m3", "m3") and placed[on_a.id].messages == 3
        assert placed["stray"].ids == () and placed["stray"].messages == 0
        assert placed[shared.id].superseded is True  # the newer one on branch A shares m1
        assert placed[on_a.id].superseded is False and placed["stray"].superseded is False
        assert s.tree().compacted_by() == {"m0": shared.id, "m1": on_a.id, "m2": on_a.id, "m3": on_a.id}

    def test_tree_build_from_scanned_rows_equals_session_tree(self, store):
        s, _, _ = _branched(store)
        nodes = [n for batch in store.scan("nodes") for sid, n in batch if sid == "s"]
        comps = [c for batch in store.scan("compactions") for sid, c in batch if sid == "s"]
        assert sk.store.Tree.build("s", reversed(nodes), comps) == s.tree()

    @pytest.mark.parametrize("leaf", ["m3", "b3", "m1", "m0", None])
    def test_path_spans_match_what_a_read_applies(self, store, leaf):
        from sessionkit.messages import estimate_tokens

        s, shared, on_a = _branched(store)
        path = s.path(leaf)
        raw = s.get_history(leaf_id=leaf, compacted=False)
        seen = s.get_history(leaf_id=leaf)
        assert path.leaf_id == raw[-1]["id"]
        assert [n.id for n in path.nodes] == ids_of(raw)
        assert [n.tokens for n in path.nodes] == [estimate_tokens(m) for m in raw]
        assert path.tokens_full == sum(estimate_tokens(m) for m in raw)
        assert path.tokens_model == s.context_tokens(leaf)
        # the model's view: each span where a read puts its summary
        view = [
            "compaction:" + i.compaction.id if isinstance(i, sk.store.CompactionSpan) else i.id
            for i in path.model_view()
        ]
        assert view == ids_of(seen)
        overlays = [m["metadata"]["compaction"] for m in seen if m["id"].startswith("compaction:")]
        assert [(sp.compaction.id, sp.messages) for sp in path.spans] == [(o["id"], o["messages"]) for o in overlays]
        for span in path.spans:
            covered = ids_of(raw)[span.start : span.end + 1]
            assert (covered[0], covered[-1]) == (span.compaction.from_id, span.compaction.to_id)
            assert span.tokens_full == sum(estimate_tokens(m) for m in raw[span.start : span.end + 1])
            assert span.tokens_model == span.compaction.tokens_after
            assert all(path.span_at(p) == span for p in range(span.start, span.end + 1))
        expected = {"m3": [on_a.id], "b3": [shared.id], "m1": [shared.id], "m0": [], None: [shared.id]}[leaf]
        assert [sp.compaction.id for sp in path.spans] == expected

    def test_path_of_an_empty_session_and_unknown_leaf(self, store):
        s = store.session("s")
        path = s.path()
        assert (path.leaf_id, path.nodes, path.spans, path.tokens_full, path.tokens_model) == (None, (), (), 0, 0)
        with pytest.raises(sk.MessageNotFound):
            s.path("ghost")

    def test_get_many_reads_a_batch(self, store):
        s = store.session("s")
        chain(s, 5)
        raw, b64 = b64_payload(5000, "many")
        s.append(
            {
                "id": "f",
                "role": "user",
                "parts": [{"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + b64}],
            }
        )
        store.session("t").append(msg("t0"))
        got = s.get_many(["m3", "ghost", "f", "m0", "m3", "t0", "compaction:x"])
        assert list(got) == ["m3", "f", "m0"]
        assert got == {k: s.get(k) for k in ("m3", "f", "m0")}
        got["m3"]["role"] = "changed"
        assert s.get("m3")["role"] == "assistant"
        assert s.get_many([]) == {} and s.get_many("m1") == {"m1": s.get("m1")}
        with pytest.raises(TypeError):
            s.get_many(["m1", 2])
        big = store.session("big")
        ids = chain(big, 90, prefix="b")
        wanted = ids[::-1][:80] + ["ghost", "m0"]  # many ids: read another way, same answer
        got = big.get_many(wanted)
        assert list(got) == ids[::-1][:80] and got == {k: big.get(k) for k in ids[::-1][:80]}


class TestScan:
    """``store.scan``: every row of a kind, in batches, in write order."""

    def _fill(self, store):
        a, b = store.session("a"), store.session("b")
        for i in range(4):  # interleaved writes: the scan must follow write order across sessions
            a.append(msg(f"a{i}"))
            b.append(msg(f"b{i}"))
        raw, b64 = b64_payload(5000, "scan")
        a.append({"id": "file", "role": "user", "parts": [{"type": "file", "mediaType": "image/png", "data": b64}]})
        a.on_compaction(summary_fn("a0", "a1")).compact()
        b.on_compaction(summary_fn("b1", "b2")).compact()
        store.run_log.begin("a", "a.1", "x")
        store.run_log.begin("runs-only", "r.1", "y")
        store.run_log.append_events("events-only", [{"kind": "k1"}, {"kind": "k2"}, {"kind": "k3"}])
        store.run_log.append_events("a", [{"kind": "a-event"}])
        return a, b

    def test_nodes_and_messages_in_write_order_in_small_batches(self, store):
        a, b = self._fill(store)
        batches = list(store.scan("nodes", batch_size=3))
        assert all(1 <= len(batch) <= 3 for batch in batches) and len(batches) == 3
        rows = [row for batch in batches for row in batch]
        expected = sorted([("a", n) for n in a.nodes()] + [("b", n) for n in b.nodes()], key=lambda r: r[1].seq)
        assert rows == expected
        assert [n.id for _, n in rows][:4] == ["a0", "b0", "a1", "b1"]
        messages = [row for batch in store.scan("messages", batch_size=2) for row in batch]
        assert [(sid, node) for sid, node, _ in messages] == expected
        assert all(m == store.session(sid).get(node.id) for sid, node, m in messages)
        one = [row for batch in store.scan("messages", session_ids=["b"], batch_size=100) for row in batch]
        assert [node.id for _, node, _ in one] == ["b0", "b1", "b2", "b3"]

    def test_compactions_runs_events_cover_every_session(self, store):
        a, b = self._fill(store)
        comps = [row for batch in store.scan("compactions", batch_size=1) for row in batch]
        assert comps == [("a", c) for c in a.compactions()] + [("b", c) for c in b.compactions()]
        runs = [row for batch in store.scan("runs") for row in batch]
        assert sorted((sid, r.run_id) for sid, r in runs) == [("a", "a.1"), ("runs-only", "r.1")]
        assert all(r == next(x for x in store.runs(sid) if x.run_id == r.run_id) for sid, r in runs)
        events = [row for batch in store.scan("events", batch_size=2) for row in batch]
        assert sorted((sid, e["seq"], e["kind"]) for sid, e in events) == [
            ("a", 0, "a-event"),
            ("events-only", 0, "k1"),
            ("events-only", 1, "k2"),
            ("events-only", 2, "k3"),
        ]
        only = [e["seq"] for sid, e in events if sid == "events-only"]
        assert only == [0, 1, 2]  # each session's rows in its order
        picked = [row for batch in store.scan("runs", session_ids=["runs-only", "b"]) for row in batch]
        assert [(sid, r.run_id) for sid, r in picked] == [("runs-only", "r.1")]

    def test_a_scan_of_an_empty_store_and_bad_arguments(self, store):
        assert list(store.scan("nodes")) == [] and list(store.scan("events")) == []
        with pytest.raises(ValueError, match="kind"):
            store.scan("tables")
        with pytest.raises(ValueError, match="batch_size"):
            store.scan("nodes", batch_size=0)
        with pytest.raises(TypeError):
            store.scan("nodes", session_ids=[1])
        store.close()
        with pytest.raises(sk.StoreClosed):
            store.scan("nodes")
