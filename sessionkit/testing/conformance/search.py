"""Full-text search."""

from __future__ import annotations

import pytest

from ._common import chain, msg, summary_fn


class TestSearch:
    """docs/search.md: full-text search semantics, safety, lazy index."""

    @pytest.fixture
    def corpus(self, store):
        s = store.session("s")
        s.append(msg("d1", "We are deploying the new service tonight"))
        s.append(msg("d2", "Deployments failed twice last week", role="assistant"))
        s.append(msg("d3", "The cat sat on the mat"))
        s.append(msg("d4", "mat sat cat the on"), parent_id="d1")  # a branch
        s.append(
            {
                "id": "d5",
                "role": "assistant",
                "parts": [
                    {"type": "reasoning", "text": "secret deploying thoughts"},
                    {"type": "tool-x", "toolCallId": "1", "input": {"q": "deploying"}, "output": "deploying"},
                ],
            }
        )
        store.session("other").append(msg("o1", "deploying elsewhere"))
        return s

    def test_Q1_stemming_and_case(self, store, corpus):
        hits = corpus.search("DEPLOYING")
        assert {h.id for h in hits} == {"d1", "d2"}
        assert {h.id for h in corpus.search("deployments")} == {"d1", "d2"}

    def test_Q1_hit_fields(self, store, corpus):
        hits = corpus.search("deployments failed")
        assert [h.id for h in hits] == ["d2"]
        h = hits[0]
        assert h.session_id == "s" and h.role == "assistant"
        assert h.content == "Deployments failed twice last week"
        assert "[Deployments]" in h.snippet and "[failed]" in h.snippet
        assert isinstance(h.score, float)

    def test_Q1_all_words_must_occur(self, store, corpus):
        assert {h.id for h in corpus.search("cat mat")} == {"d3", "d4"}
        assert corpus.search("cat deploying") == []

    def test_Q1_phrase(self, store, corpus):
        assert [h.id for h in corpus.search('"cat sat"')] == ["d3"]
        assert {h.id for h in corpus.search('"sat on the mat"')} == {"d3"}
        assert {h.id for h in corpus.search("sat cat")} == {"d3", "d4"}

    def test_Q1_only_text_parts_every_branch_and_compacted(self, store, corpus):
        assert all(h.id != "d5" for h in corpus.search("deploying"))
        corpus.on_compaction(summary_fn("d1", "d2", "x")).compact(leaf_id="d3")
        assert {h.id for h in corpus.search("deployments")} == {"d1", "d2"}
        assert {h.id for h in corpus.search("mat")} == {"d3", "d4"}

    def test_Q1_ranking_best_first(self, store):
        s = store.session("r")
        s.append(msg("weak", "apple " + "filler words here " * 30))
        s.append(msg("strong", "apple apple apple"))
        hits = s.search("apple")
        assert [h.id for h in hits] == ["strong", "weak"]
        assert hits[0].score >= hits[1].score

    def test_Q1_store_search_and_limit(self, store, corpus):
        assert {h.session_id for h in store.search("deploying")} == {"s", "other"}
        assert [h.session_id for h in store.search("deploying", session_id="other")] == ["other"]
        assert len(store.search("deploying", limit=1)) == 1
        assert store.search("deploying", limit=0) == []

    def test_Q1_session_search_alone_then_beside_others(self, store):
        # A store holding one session, then others interleaved within its range of rows:
        # a session's search keeps to its own messages either way.
        a = store.session("a")
        a.append(msg("a1", "walrus on the ice"))
        assert [h.id for h in a.search("walrus")] == ["a1"]
        b = store.session("b")
        b.append(msg("b1", "walrus in the sea"))
        a.append(msg("a2", "another walrus"))
        store.session("0-first").append(msg("z1", "walrus zero"))
        assert {h.id for h in a.search("walrus")} == {"a1", "a2"}
        assert [h.id for h in b.search("walrus")] == ["b1"]
        b.clear()
        assert {h.id for h in a.search("walrus")} == {"a1", "a2"}
        store.session("0-first").clear()
        assert {h.id for h in a.search("walrus")} == {"a1", "a2"}
        assert b.search("walrus") == []

    @pytest.mark.parametrize(
        "query",
        [
            "",
            "   ",
            '"',
            '""',
            '"unbalanced',
            "AND",
            "OR NOT",
            "NEAR(a b)",
            "a*",
            "*",
            "^x",
            "(",
            ")",
            "cat:",
            "col:val",
            "{a b}",
            "'",
            "\\",
            "-",
            "+",
            "\x00",
            "🚀",
            "!!! ??? ...",
            "a" * 5000,
            "cat " * 500,
            'cat "sat',
            "ü" * 10,
            "deploy* OR 1=1; --",
        ],
    )
    def test_Q2_any_string_is_safe(self, store, corpus, query):
        hits = corpus.search(query)
        assert isinstance(hits, list)
        if not query.strip():
            assert hits == []

    def test_Q1_bounded_candidates_rank_the_newest_matches(self, store):
        s = store.session("s")
        s.append(msg("old-best", "kiwi kiwi kiwi kiwi"))
        for i in range(6):
            s.append(msg(f"n{i}", "kiwi " + "padding words " * (i + 3)))
        assert s.search("kiwi")[0].id == "old-best"
        store.settings.search_candidates = 3
        hits = s.search("kiwi")
        assert {h.id for h in hits} == {"n3", "n4", "n5"}
        assert [h.id for h in hits] == ["n3", "n4", "n5"]  # shorter text ranks higher
        with pytest.raises(ValueError):
            store.settings.search_candidates = 0

    def test_Q3_lazy_index_then_kept_current(self, store):
        s = store.session("s")
        chain(s, 5)
        assert store.stats()["indexed_messages"] == 0
        s.append(msg("x", "zebra crossing"))
        assert store.stats()["indexed_messages"] == 0
        assert [h.id for h in s.search("zebra")] == ["x"]
        assert store.stats()["indexed_messages"] == 6
        s.append(msg("y", "zebra stripes"))
        s.import_message(msg("z", "zebra imported"))
        assert {h.id for h in s.search("zebra")} == {"x", "y", "z"}
        s.update(msg("x", "giraffe now"))
        assert {h.id for h in s.search("zebra")} == {"y", "z"}
        assert [h.id for h in s.search("giraffe")] == ["x"]
        s.delete("z")
        assert {h.id for h in s.search("zebra")} == {"y"}
        s.clear()
        assert s.search("zebra") == [] and s.search("giraffe") == []
        assert store.stats()["indexed_messages"] == 0
