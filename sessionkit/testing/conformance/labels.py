"""Labels on messages and branches (docs/labels.md)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import sessionkit as sk

from ._common import ISO_MS, msg


def _tree(store):
    """Session ``s``: u1 -> a1 -> u2, and a second branch u1 -> b1; session ``t``: one message."""
    s = store.session("s")
    s.append(msg("u1", "deploy the service"))
    s.append(msg("a1", "deploying to staging", "assistant"))
    s.append(msg("u2", "deploy to production too"))
    s.append(msg("b1", "deploy later", "assistant"), parent_id="u1")
    store.session("t").append(msg("x", "deploy elsewhere"))
    return s


class TestLabels:
    """``add_label`` / ``remove_label`` / ``labels`` / ``import_labels`` and ``search(labels=...)``."""

    def test_a_label_is_stored_with_its_fields_and_a_new_id(self, store):
        s = _tree(store)
        first = s.add_label("a1", "hallucination", rating=2, note="made up a flag", author="ana")
        second = s.add_label("u2", "good-ending", target="branch", rating=4.5)
        assert isinstance(first, sk.Label) and first.id and first.id != second.id
        assert (first.session_id, first.message_id, first.tag, first.target) == ("s", "a1", "hallucination", "message")
        assert (first.rating, first.note, first.author) == (2.0, "made up a flag", "ana")
        assert ISO_MS.match(first.created_at)
        assert (second.target, second.rating, second.note, second.author) == ("branch", 4.5, None, None)
        assert s.labels() == [first, second]
        assert store.labels() == [first, second]
        assert s.labels("a1") == [first] and s.labels(["a1", "u2"]) == [first, second]
        assert store.session("t").labels() == []

    def test_labels_are_filtered_by_tag_author_rating_and_target(self, store):
        s = _tree(store)
        made = [
            s.add_label("u1", "bug", rating=1, author="ana"),
            s.add_label("a1", "bug", rating=5, author="bo"),
            s.add_label("a1", "style", author="ana"),
            s.add_label("u2", "bug", target="branch", rating=3),
            store.add_label("t", "x", "bug", rating=-2.5),
        ]
        assert store.labels(tag="bug") == [made[i] for i in (0, 1, 3, 4)]
        assert store.labels(tag=["style", "bug"], session_id="s") == made[:4]
        assert store.labels(tag=[]) == []
        assert store.labels(author="ana") == [made[0], made[2]]
        assert store.labels(min_rating=1, max_rating=3) == [made[0], made[3]]
        assert store.labels(max_rating=0) == [made[4]]
        assert store.labels(target="branch") == [made[3]]
        assert s.labels("a1", tag="bug") == [made[1]]
        assert store.labels(session_id="t", message_id="x") == [made[4]]

    def test_a_label_says_where_it_came_from_and_is_filtered_by_it(self, store):
        s = _tree(store)
        person = s.add_label("a1", "bug", author="ana")
        code = s.add_label("a1", "bug", source="code", scorer="tool_error@1", rationale="the call failed")
        judge = s.add_label("u2", "good", target="branch", source="llm", scorer="judge@2", rationale="it helps")
        older = s.add_label("a1", "bad", source="llm", scorer="judge@1")
        other = s.add_label("u1", "x", source="llm", scorer="judge_x@1")  # judge_ is not judge@
        assert (person.source, person.scorer, person.rationale) == ("human", None, None)
        assert (code.source, code.scorer, code.rationale) == ("code", "tool_error@1", "the call failed")
        assert store.labels() == [person, code, judge, older, other]
        assert store.labels(source="human") == [person]
        assert store.labels(source="llm") == [judge, older, other]
        assert store.labels(scorer="judge@2") == [judge]
        assert store.labels(scorer="judge") == [judge, older]
        assert store.labels(scorer="judge_x") == [other]
        assert store.labels(scorer="tool") == []
        assert s.labels("a1", source="code", scorer="tool_error") == [code]
        rows = store.sql("SELECT id, source, coalesce(scorer, '-'), coalesce(rationale, '-') FROM labels ORDER BY seq")
        assert [tuple(r) for r in rows.itertuples(index=False)] == [
            (x.id, x.source, x.scorer or "-", x.rationale or "-") for x in (person, code, judge, older, other)
        ]

    def test_refused_provenance_stores_nothing(self, store):
        s = _tree(store)
        refused: list[tuple[dict[str, Any], str]] = [
            ({"source": "robot", "scorer": "x@1"}, "'human', 'code' or 'llm'"),
            ({"source": "human", "scorer": "x@1"}, "names no scorer"),
            ({"source": "llm"}, "names its scorer"),
            ({"source": "code", "scorer": " x@1"}, "white space"),
            ({"source": "code", "scorer": 5}, "scorer must be a str"),
            ({"rationale": "r" * 20_001}, "rationale"),
        ]
        for fields, words in refused:
            with pytest.raises(sk.InvalidLabel, match=words):
                s.add_label("a1", "ok", **fields)
        with pytest.raises(sk.InvalidLabel, match="'human', 'code' or 'llm'"):
            store.labels(source="people")
        assert store.labels() == []

    def test_remove_by_id_takes_one_label_and_answers_whether_it_was_there(self, store):
        s = _tree(store)
        keep = s.add_label("a1", "keep")
        drop = s.add_label("a1", "drop")
        other = store.add_label("t", "x", "other")
        assert s.remove_label(other.id) is False  # another session's label
        assert s.remove_label(drop.id) is True
        assert s.remove_label(drop.id) is False
        assert store.remove_label("no such label") is False
        assert store.remove_label(other.id) is True
        assert store.labels() == [keep]

    def test_labels_go_with_their_message_session_and_nothing_else(self, store):
        s = _tree(store)
        on_u2 = s.add_label("u2", "gone-with-u2")
        on_a1 = s.add_label("a1", "stays")
        on_b1 = s.add_label("b1", "gone-with-b1", target="branch")
        on_t = store.add_label("t", "x", "other session")
        s.delete("u2")
        assert store.labels() == [on_a1, on_b1, on_t]
        assert on_u2 not in store.labels()
        s.delete("b1")
        assert store.labels() == [on_a1, on_t]
        s.clear()
        assert store.labels() == [on_t]
        store.delete_session("t")
        assert store.labels() == []
        # the same id written again is a new message: no label comes back with it
        store.session("t").append(msg("x", "again"))
        assert store.labels() == []

    def test_refused_labels_raise_a_clear_error_and_store_nothing(self, store):
        s = _tree(store)
        kept = s.add_label("u1", "kept")
        before = store.stats()
        refused: list[tuple[dict[str, Any], str]] = [
            ({"tag": ""}, "empty"),
            ({"tag": "   "}, "blank"),
            ({"tag": "x" * 101}, "101 characters"),
            ({"tag": " padded"}, "white space"),
            ({"tag": "two\nlines"}, "line break"),
            ({"tag": 7}, "must be a str"),
            ({"tag": "ok", "rating": math.nan}, "finite"),
            ({"tag": "ok", "rating": math.inf}, "finite"),
            ({"tag": "ok", "rating": -math.inf}, "finite"),
            ({"tag": "ok", "rating": True}, "must be a number"),
            ({"tag": "ok", "rating": "5"}, "must be a number"),
            ({"tag": "ok", "rating": 10**400}, "too large"),
            ({"tag": "ok", "note": 5}, "note must be a str"),
            ({"tag": "ok", "note": "\ud800"}, "note"),
            ({"tag": "ok", "author": "a" * 201}, "author"),
            ({"tag": "ok", "target": "path"}, "'message' or 'branch'"),
        ]
        for fields, words in refused:
            tag = fields.pop("tag")
            with pytest.raises(sk.InvalidLabel, match=words):
                s.add_label("a1", tag, **fields)
        with pytest.raises(sk.MessageNotFound, match="nope"):
            s.add_label("nope", "ok")
        with pytest.raises(sk.MessageNotFound):
            store.add_label("t", "u1", "ok")  # u1 is in s, not in t
        with pytest.raises(sk.InvalidLabel):
            store.labels(min_rating=math.nan)
        with pytest.raises(sk.InvalidLabel):
            store.labels(tag="")
        assert store.labels() == [kept]
        assert store.stats() == before

    def test_a_label_in_a_rolled_back_transaction_is_not_stored(self, store):
        s = _tree(store)
        with pytest.raises(RuntimeError), store.transaction():
            s.add_label("u1", "rolled back")
            assert [x.tag for x in s.labels()] == ["rolled back"]  # seen inside
            raise RuntimeError("roll back")
        assert store.labels() == []

    def test_import_keeps_ids_and_times_and_is_idempotent(self, store_factory):
        src = store_factory()
        _tree(src)
        made = [
            src.add_label("s", "a1", "bug", rating=1.5, note="n", author="ana"),
            src.add_label("s", "u2", "end", target="branch"),
            src.add_label("s", "a1", "ok", source="llm", scorer="judge@1", rationale="fine"),
        ]
        dst = store_factory()
        _tree(dst)
        assert dst.import_labels(made) == 3
        assert dst.import_labels([x.to_dict() for x in made]) == 0
        assert dst.labels() == made
        assert dst.labels(scorer="judge@1")[0].rationale == "fine"
        older = {
            k: v for k, v in made[0].to_dict().items() if k not in ("source", "scorer", "rationale", "fingerprint")
        }
        assert dst.import_labels([dict(older, id="older")]) == 1  # a label written before provenance: a person's
        assert dst.labels(session_id="s", message_id="a1", source="human")[-1].id == "older"
        with pytest.raises(sk.MessageNotFound):
            dst.import_labels([sk.Label("new", "s", "missing", "bug")])
        with pytest.raises(sk.InvalidLabel, match="no field 'colour'"):
            dst.import_labels([dict(made[0].to_dict(), id="other", colour="red")])
        with pytest.raises(sk.InvalidLabel, match="created_at"):
            dst.import_labels([dict(made[0].to_dict(), id="other", created_at="yesterday")])
        assert [x.id for x in dst.labels()] == [x.id for x in made] + ["older"]

    def test_labels_outlive_the_store_object(self, store, reopen):
        s = _tree(store)
        made = s.add_label("a1", "kept", rating=3)
        again = reopen(store)
        if again is None:
            pytest.skip("this store keeps nothing after close")
        assert again.labels() == [made]
        assert again.session("s").remove_label(made.id)

    def test_search_keeps_hits_in_labelled_messages_and_branches(self, store):
        s = _tree(store)

        def hits(**kw):
            return sorted((h.session_id, h.id) for h in store.search("deploy", limit=50, **kw))

        assert len(hits()) == 5
        assert hits(labels="none yet") == []
        s.add_label("a1", "mine")
        assert hits(labels="mine") == [("s", "a1")]
        s.add_label("u2", "path", target="branch")  # u1 -> a1 -> u2
        assert hits(labels="path") == [("s", "a1"), ("s", "u1"), ("s", "u2")]
        store.add_label("t", "x", "mine")
        assert hits(labels=["mine"]) == [("s", "a1"), ("t", "x")]
        assert sorted(h.id for h in s.search("deploy", labels=["mine", "path"])) == ["a1", "u1", "u2"]
        assert len(store.search("deploy", labels="path", limit=2)) == 2

    def test_search_with_many_branch_labels_is_the_union_of_their_paths(self, store):
        s = store.session("s")
        s.append_many(msg(f"m{i}", f"deploy step {i}") for i in range(60))
        for fork in (10, 25, 40):  # side branches off the chain, with their own matches
            s.append_many((msg(f"f{fork}.{i}", f"deploy side {fork} {i}") for i in range(8)), parent_id=f"m{fork}")
        other = store.session("o")
        other.append_many(msg(f"o{i}", f"deploy other {i}") for i in range(10))
        ends = ["m5", "m33", "f10.3", "f25.7", "f40.0", "m59", "m33", "o4"]
        for n, end in enumerate(ends):
            session = other if end.startswith("o") else s
            session.add_label(end, "picked" if n % 2 else "kept", target="branch")
        s.add_label("f40.6", "kept")  # a message label beside them
        s.add_label("f25.2", "other", target="branch")  # another tag: not asked for
        # the answer from public reads: every message on the path to each labelled end
        expected = {("s", "f40.6")}
        for end in ends:
            session = other if end.startswith("o") else s
            expected |= {(session.session_id, m["id"]) for m in session.get_history(leaf_id=end, compacted=False)}
        got = {(h.session_id, h.id) for h in store.search("deploy", limit=1000, labels=["picked", "kept"])}
        assert got == expected
        assert {h.id for h in s.search("deploy", limit=1000, labels="other")} == {f"m{i}" for i in range(26)} | {
            "f25.0",
            "f25.1",
            "f25.2",
        }

    def test_label_changes_reach_subscribers(self, store):
        s = _tree(store)
        seen = []
        unsubscribe = store.subscribe(lambda ev: seen.append((ev.type, ev.session_id, ev.message_ids)))
        try:
            made = s.add_label("a1", "x")
            s.remove_label(made.id)
        finally:
            unsubscribe()
        assert [e for e in seen if e[0] == "label"] == [("label", "s", ("a1",))] * 2
