"""Compaction: summaries over a range of a path, kept beside the originals."""

from __future__ import annotations

import asyncio

import pytest

import sessionkit as sk

from ._common import ISO_MS, chain, ids_of, msg, summary_fn


class TestCompaction:
    """docs/compaction.md: compaction overlays, thresholds, the ready-made function."""

    def test_C1_C5_overlay_on_read_originals_kept(self, store):
        s = store.session("s")
        ids = chain(s, 8)
        comp = s.on_compaction(summary_fn("m2", "m5", "the middle")).compact()
        assert isinstance(comp, sk.Compaction)
        assert (comp.from_id, comp.to_id, comp.summary) == ("m2", "m5", "the middle")
        hist = s.get_history()
        assert ids_of(hist) == ["m0", "m1", f"compaction:{comp.id}", "m6", "m7"]
        overlay = hist[2]
        assert overlay["role"] == "assistant"
        assert overlay["parts"] == [{"type": "text", "text": "the middle"}]
        assert overlay["createdAt"] == comp.created_at and ISO_MS.match(comp.created_at)
        meta = overlay["metadata"]["compaction"]
        assert meta == {
            "id": comp.id,
            "from_id": "m2",
            "to_id": "m5",
            "messages": 4,
            "tokens_before": comp.tokens_before,
        }
        assert ids_of(s.get_history(compacted=False)) == ids
        assert len(s) == 8 and s.path_length() == 8
        assert ids_of(s.history(newest_first=True)) == ["m7", "m6", f"compaction:{comp.id}", "m1", "m0"]
        assert ids_of(s.history(newest_first=True, compacted=False)) == ids[::-1]

    def test_C3_compaction_record(self, store):
        s = store.session("s")
        chain(s, 6, text=lambda i: "word " * 40)
        raw = s.get_history(compacted=False)
        from sessionkit.messages import estimate_tokens

        comp = s.on_compaction(summary_fn("m1", "m4", "short")).compact()
        assert comp.tokens_before == sum(estimate_tokens(m) for m in raw[1:5])
        assert comp.tokens_after == estimate_tokens(s.get_history()[1])
        assert comp.tokens_after < comp.tokens_before
        assert s.compactions() == [comp]
        assert store.stats()["compactions"] == 1

    def test_C3_compact_without_function(self, store):
        s = store.session("s")
        chain(s, 3)
        with pytest.raises(sk.UsageError):
            s.compact()

    def test_C3_function_may_decline(self, store):
        s = store.session("s")
        chain(s, 3)
        assert s.on_compaction(lambda m, c: None).compact() is None
        assert s.compactions() == []

    def test_C3_bad_ranges_refused(self, store):
        s = store.session("s")
        chain(s, 5)
        s.append(msg("side"), parent_id="m1")
        for a, b in (("m3", "m1"), ("m0", "ghost"), ("m0", "side")):
            with pytest.raises(ValueError):
                s.on_compaction(summary_fn(a, b)).compact(leaf_id="m4")
        assert s.compactions() == []

    def test_C2_auto_compaction_threshold(self, store):
        s = store.session("s")
        seen = []

        def fn(messages, ctx):
            seen.append((ids_of(messages), ctx.leaf_id, ctx.tokens, ctx.previous, ctx.session))
            return sk.CompactionResult(messages[0]["id"], messages[-2]["id"], "S")

        assert s.on_compaction(fn) is s
        assert s.compact_after(200) is s
        for i in range(6):
            s.append(msg(f"m{i}", "word " * 30))
            if i < 3:
                assert seen == []
        assert seen, "threshold crossed but function not called"
        first_ids, leaf, tokens, previous, sess = seen[0]
        assert sess is s and previous is None and tokens > 200
        assert leaf == first_ids[-1]
        assert s.context_tokens() <= tokens

    def test_C2_previous_and_overlay_passed_on(self, store):
        s = store.session("s")
        chain(s, 6)
        first = s.on_compaction(summary_fn("m1", "m3", "S1")).compact()
        seen = {}

        def fn(messages, ctx):
            seen["ids"] = ids_of(messages)
            seen["previous"] = ctx.previous
            return sk.CompactionResult(messages[1]["id"], messages[-2]["id"], "S2")

        s.on_compaction(fn)
        s.append(msg("m6"))
        second = s.compact()
        assert seen["ids"] == ["m0", f"compaction:{first.id}", "m4", "m5", "m6"]
        assert seen["previous"] == first
        # starting at the overlay maps back to the original start, so the newer one replaces it
        assert (second.from_id, second.to_id) == ("m1", "m5")
        assert ids_of(s.get_history()) == ["m0", f"compaction:{second.id}", "m6"]
        assert len(s.compactions()) == 2

    def test_C2_failing_function_keeps_conversation(self, store, caplog):
        s = store.session("s")

        def boom(messages, ctx):
            raise RuntimeError("summarizer down")

        s.on_compaction(boom).compact_after(0)
        r = s.append(msg("a"))
        assert r.inserted
        assert ids_of(s.get_history()) == ["a"]
        assert s.compactions() == []
        assert "summarizer down" in caplog.text or "compaction" in caplog.text.lower()

    def test_C2_duplicate_append_does_not_trigger(self, store):
        s = store.session("s")
        s.append(msg("a"))
        calls = []
        s.on_compaction(lambda m, c: calls.append(1)).compact_after(0)
        s.append(msg("a"))
        assert calls == []

    def test_C5_branch_local_and_shared_prefix(self, store):
        s = store.session("s")
        chain(s, 4)  # m0..m3
        s.append(msg("b2"), parent_id="m1")  # branch B: m0 m1 b2
        s.append(msg("b3"), parent_id="b2")
        shared = s.on_compaction(summary_fn("m0", "m1", "prefix")).compact(leaf_id="m3")
        on_a = s.on_compaction(summary_fn("m1", "m3", "branch A")).compact(leaf_id="m3")
        # newest on A overlaps the shared one: it wins there
        assert ids_of(s.get_history(leaf_id="m3")) == ["m0", f"compaction:{on_a.id}"]
        # B sees the shared prefix summary and is untouched by A's
        assert ids_of(s.get_history(leaf_id="b3")) == [f"compaction:{shared.id}", "b2", "b3"]

    def test_C5_newer_same_start_replaces(self, store):
        s = store.session("s")
        chain(s, 8)
        c1 = s.on_compaction(summary_fn("m1", "m3", "one")).compact()
        c2 = s.on_compaction(summary_fn("m1", "m5", "two")).compact()
        hist = s.get_history()
        assert ids_of(hist) == ["m0", f"compaction:{c2.id}", "m6", "m7"]
        assert c1 in s.compactions() and c2 in s.compactions()

    def test_C5_compaction_dropped_when_range_deleted(self, store):
        s = store.session("s")
        chain(s, 5)
        s.on_compaction(summary_fn("m2", "m4")).compact()
        s.delete("m4")
        assert s.compactions() == []
        assert ids_of(s.get_history()) == ["m0", "m1", "m2", "m3"]

    def test_C2_threshold_check_uses_compacted_tokens(self, store):
        s = store.session("s")
        chain(s, 6, text=lambda i: "word " * 100)
        s.on_compaction(summary_fn("m0", "m4", "tiny")).compact()
        calls = []
        s.on_compaction(lambda m, c: calls.append(c.tokens)).compact_after(500)
        s.append(msg("m6", "small"))
        assert calls == []  # raw path is ~900 tokens; compacted is far below 500

    def test_C4_create_compact_function(self, store):
        prompts = []

        def summarize(prompt):
            prompts.append(prompt)
            return f"summary #{len(prompts)}"

        s = store.session("s")
        fn = sk.create_compact_function(summarize, keep_recent_tokens=150, protect_head=2, min_tail_messages=2)
        s.on_compaction(fn)
        chain(s, 12, text=lambda i: f"turn {i} " + "lorem ipsum dolor " * 10)
        c1 = s.compact()
        assert c1.from_id == "m2"  # head of 2 protected
        hist = s.get_history()
        assert ids_of(hist[:2]) == ["m0", "m1"]
        tail = hist[3:]
        assert len(tail) >= 2
        from sessionkit.messages import estimate_tokens

        assert sum(estimate_tokens(m) for m in tail) <= 150 or len(tail) == 2
        assert "turn 2" in prompts[0] and "turn 0" not in prompts[0]
        chain(s, 6, prefix="n", text=lambda i: f"later {i} " + "lorem ipsum dolor " * 10)
        c2 = s.compact()
        assert c2.from_id == "m2"  # extends the first summary
        assert "summary #1" in prompts[1]
        hist = s.get_history()
        assert [m["id"] for m in hist].count(f"compaction:{c2.id}") == 1
        assert not any(m["id"] == f"compaction:{c1.id}" for m in hist)

    def test_C4_no_tail_kept_when_asked(self, store):
        s = store.session("s")
        chain(s, 5)
        fn = sk.create_compact_function(lambda p: "all", keep_recent_tokens=0, protect_head=0, min_tail_messages=0)
        comp = s.on_compaction(fn).compact()
        assert (comp.from_id, comp.to_id) == ("m0", "m4")
        assert ids_of(s.get_history()) == [f"compaction:{comp.id}"]

    def test_C4_async_summarize(self, store):
        async def summarize(prompt):
            await asyncio.sleep(0)
            return "async summary"

        s = store.session("s")
        s.on_compaction(sk.create_compact_function(summarize, keep_recent_tokens=0, protect_head=1))
        chain(s, 6)
        comp = s.compact()
        assert comp.summary == "async summary"

        async def inside_loop():
            s.append(msg("z"))
            return s.compact()

        comp2 = asyncio.run(inside_loop())
        assert comp2.summary == "async summary"

    def test_C4_tool_call_never_separated_from_result(self, store):
        s = store.session("s")
        chain(s, 4, text=lambda i: "x " * 50)
        s.append(
            {
                "id": "call",
                "role": "assistant",
                "parts": [{"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"}, "state": "input-available"}],
            }
        )
        s.append(
            {
                "id": "result",
                "role": "tool",
                "parts": [
                    {"type": "tool-lookup", "toolCallId": "t1", "output": "found " * 5, "state": "output-available"}
                ],
            }
        )
        s.append(msg("final", "done"))
        fn = sk.create_compact_function(lambda p: "s", keep_recent_tokens=30, protect_head=1, min_tail_messages=1)
        s.on_compaction(fn)
        comp = s.compact()
        hist_ids = ids_of(s.get_history())
        assert ("call" in hist_ids) == ("result" in hist_ids)
        assert comp.to_id not in ("call",)

    # Tool call shapes: (call message, result message), the call third on the path.
    TOOL_PAIRS = {
        "result-message": (
            {
                "id": "call",
                "role": "assistant",
                "parts": [{"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"}, "state": "input-available"}],
            },
            {
                "id": "result",
                "role": "tool",
                "parts": [
                    {"type": "tool-lookup", "toolCallId": "t1", "output": "found " * 40, "state": "output-available"}
                ],
            },
        ),
        "answered-part-repeated": (
            {
                "id": "call",
                "role": "assistant",
                "parts": [{"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"}, "state": "input-available"}],
            },
            {
                "id": "result",
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool-lookup",
                        "toolCallId": "t1",
                        "input": {"q": "a"},
                        "output": {"rows": ["found"] * 40},
                        "state": "output-available",
                    }
                ],
            },
        ),
        "error-result": (
            {
                "id": "call",
                "role": "assistant",
                "parts": [{"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "t1", "input": {}}],
            },
            {
                "id": "result",
                "role": "assistant",
                "parts": [
                    {
                        "type": "dynamic-tool",
                        "toolName": "lookup",
                        "toolCallId": "t1",
                        "input": {},
                        "state": "output-error",
                        "errorText": "failed " * 40,
                    }
                ],
            },
        ),
        "chat-completions": (
            {
                "id": "call",
                "role": "assistant",
                "parts": [],
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
            },
            {"id": "result", "role": "tool", "tool_call_id": "t1", "parts": [{"type": "text", "text": "found " * 40}]},
        ),
        "tool-role-without-id": (
            {"id": "call", "role": "assistant", "parts": [{"type": "text", "text": "let me look"}]},
            {"id": "result", "role": "tool", "parts": [{"type": "text", "text": "found " * 40}]},
        ),
    }

    @pytest.mark.parametrize("shape", sorted(TOOL_PAIRS))
    def test_C4_head_keeps_the_result_of_a_call_it_keeps(self, store, shape):
        call, result = self.TOOL_PAIRS[shape]
        s = store.session("s")
        chain(s, 2, prefix="h", text=lambda i: "head words " * 20)
        s.append(call)
        s.append(result)
        chain(s, 6, prefix="n", text=lambda i: f"later {i} " + "lorem ipsum " * 20)
        prompts: list = []

        def summarize(prompt):
            prompts.append(prompt)
            return "S"

        fn = sk.create_compact_function(summarize, keep_recent_tokens=60, protect_head=3, min_tail_messages=1)
        comp = s.on_compaction(fn).compact()
        hist = ids_of(s.get_history())
        assert hist[:4] == ["h0", "h1", "call", "result"]  # the call is in the head: its result too
        assert comp.from_id == "n0"
        assert "found" not in prompts[0] and "failed" not in prompts[0]
        # Compacting again extends that summary and still leaves the pair alone.
        chain(s, 4, prefix="m", text=lambda i: f"more {i} " + "lorem ipsum " * 20)
        comp2 = s.compact()
        assert comp2.from_id == "n0"
        assert ids_of(s.get_history())[:4] == ["h0", "h1", "call", "result"]

    @pytest.mark.parametrize("shape", sorted(TOOL_PAIRS))
    def test_C4_tail_keeps_the_call_of_a_result_it_keeps(self, store, shape):
        call, result = self.TOOL_PAIRS[shape]
        s = store.session("s")
        chain(s, 6, text=lambda i: "early words " * 20)
        s.append(call)
        s.append(result)
        fn = sk.create_compact_function(lambda p: "S", keep_recent_tokens=0, protect_head=1, min_tail_messages=1)
        comp = s.on_compaction(fn).compact()
        assert comp.to_id == "m5"  # the result is the tail, so its call is too
        assert ids_of(s.get_history())[-2:] == ["call", "result"]

    def test_C4_pairs_reused_call_ids_with_the_nearest_call(self, store):
        s = store.session("s")
        for turn in range(4):  # some providers number calls per response, so ids repeat
            s.append(
                {
                    "id": f"c{turn}",
                    "role": "assistant",
                    "parts": [{"type": "tool-lookup", "toolCallId": "call_0", "input": {"turn": turn}}],
                }
            )
            s.append(
                {
                    "id": f"r{turn}",
                    "role": "tool",
                    "parts": [
                        {
                            "type": "tool-lookup",
                            "toolCallId": "call_0",
                            "output": "row " * 30,
                            "state": "output-available",
                        }
                    ],
                }
            )
        fn = sk.create_compact_function(lambda p: "S", keep_recent_tokens=0, protect_head=1, min_tail_messages=1)
        comp = s.on_compaction(fn).compact()
        # The head c0 keeps r0; the tail r3 keeps c3; the pairs between are summarised.
        assert (comp.from_id, comp.to_id) == ("c1", "r2")
        assert ids_of(s.get_history()) == ["c0", "r0", f"compaction:{comp.id}", "c3", "r3"]

    def test_C4_head_pair_reaching_the_tail_leaves_nothing_to_summarise(self, store):
        s = store.session("s")
        s.append(msg("h0", "head"))
        s.append(
            {
                "id": "call",
                "role": "assistant",
                "parts": [{"type": "tool-lookup", "toolCallId": "t1", "input": {}, "state": "input-available"}],
            }
        )
        chain(s, 3, prefix="x", text=lambda i: "between " * 30)
        s.append(
            {
                "id": "result",
                "role": "tool",
                "parts": [{"type": "tool-lookup", "toolCallId": "t1", "output": "late", "state": "output-available"}],
            }
        )
        fn = sk.create_compact_function(lambda p: "S", keep_recent_tokens=0, protect_head=2, min_tail_messages=1)
        assert s.on_compaction(fn).compact() is None
        assert s.compactions() == []
