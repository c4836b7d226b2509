"""Anthropic HH pairs: shared turns once, chosen and rejected replies as sibling branches."""

from __future__ import annotations

import gzip
import json
import re

import pytest

import sessionkit as sk

_TURN = re.compile(r"\n\n(Human|Assistant): ")


def _turns(text: str) -> list[tuple[str, str]]:
    pieces = _TURN.split(text)
    assert pieces[0] == ""
    return [({"Human": "user", "Assistant": "assistant"}[pieces[i]], pieces[i + 1]) for i in range(1, len(pieces), 2)]


def _render(history) -> str:
    names = {"user": "Human", "assistant": "Assistant"}
    return "".join(f"\n\n{names[m['role']]}: {m['parts'][0]['text']}" for m in history)


def test_every_pair_is_a_session_with_two_branches(loaded):
    sessions = loaded["hh"]
    hh_records = loaded["hh_records"]  # all 2,312 on SQLite (see DUCKDB_SAMPLE in conftest.py)
    assert len(sessions) == len(hh_records)  # the lines are distinct pairs
    at_last_reply = 0
    for rec, session in zip(hh_records, sessions):
        chosen_leaf = session.latest_leaf()  # the chosen conversation is written last
        assert chosen_leaf["metadata"]["hh"] == {"chosen": True}
        chosen = session.get_history()
        assert _render(chosen) == rec["chosen"]
        fork = next(m for m in chosen if "hh" in (m.get("metadata") or {}))
        shared = session.path_length(fork["id"]) - 1  # turns stored once, above the fork
        assert shared >= 1  # every pair here starts with the same Human turn
        parent_id = chosen[shared - 1]["id"]
        siblings = session.branches(parent_id)
        assert [m["metadata"]["hh"]["chosen"] for m in siblings] == [False, True]
        rejected_leaf = siblings[0]
        while session.branches(rejected_leaf["id"]):
            (rejected_leaf,) = session.branches(rejected_leaf["id"])
        assert _render(session.get_history(leaf_id=rejected_leaf["id"])) == rec["rejected"]
        a, b = _turns(rec["chosen"]), _turns(rec["rejected"])
        assert a[:shared] == b[:shared]
        assert len(session) == len(a) + len(b) - shared
        if a[:-1] == b[:-1] and a[-1][0] == b[-1][0] == "assistant":
            # the usual case: the branch is the last assistant reply, both replies are leaves
            assert siblings[1]["id"] == chosen_leaf["id"] and siblings[0]["id"] == rejected_leaf["id"]
            assert session.path_length() == len(a)
            at_last_reply += 1
    if loaded["full"]["hh"]:
        assert len(hh_records) == 2312
        assert at_last_reply == 2307  # as SOURCES.md counts: the other 5 part earlier


def test_message_counts_match_the_source(loaded):
    """Shared turns are stored once: messages = turns of both texts minus the common prefix."""
    expected = 0
    for rec in loaded["hh_records"]:
        a, b = _turns(rec["chosen"]), _turns(rec["rejected"])
        shared = 0
        while shared < min(len(a), len(b)) - 1 and a[shared] == b[shared]:
            shared += 1
        expected += len(a) + len(b) - shared
    assert sum(len(s) for s in loaded["hh"]) == expected


def test_reimport_adds_nothing(loaded):
    store = loaded["store"]
    before = store.stats()["messages"]
    again = sk.io.import_hh(store, loaded["hh_path"])
    assert store.stats()["messages"] == before
    assert [s.session_id for s in again] == [s.session_id for s in loaded["hh"]]


def test_plain_jsonl_and_malformed_lines(store, tmp_path, hh_records):
    plain = tmp_path / "pairs.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in hh_records[:5]), encoding="utf-8")
    sessions = sk.io.import_hh(store, plain)
    assert len(sessions) == 5

    bad = tmp_path / "bad.jsonl.gz"
    lines = [json.dumps(hh_records[0]), json.dumps({"chosen": hh_records[1]["chosen"]})]
    bad.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(sk.io.MalformedInput, match=r"line 2: field 'rejected' is missing"):
        sk.io.import_hh(store, bad)

    no_turns = tmp_path / "noturns.jsonl"
    no_turns.write_text(json.dumps({"chosen": "hello", "rejected": "\n\nHuman: hi"}) + "\n")
    with pytest.raises(sk.io.MalformedInput, match=r"line 1: field 'chosen': text before the first"):
        sk.io.import_hh(store, no_turns)


def test_identical_or_prefix_pairs_still_branch(store, tmp_path):
    path = tmp_path / "edge.jsonl"
    same = "\n\nHuman: hi\n\nAssistant: hello"
    longer = same + "\n\nHuman: more?\n\nAssistant: sure"
    path.write_text(
        json.dumps({"chosen": same, "rejected": same}) + "\n" + json.dumps({"chosen": same, "rejected": longer}) + "\n"
    )
    s1, s2 = sk.io.import_hh(store, path)
    assert [m["id"] for m in s1.branches("p0")] == ["r1", "c1"]
    assert [m["id"] for m in s2.branches("p0")] == ["r1", "c1"]
    assert [m["id"] for m in s2.get_history(leaf_id="r3")] == ["p0", "r1", "r2", "r3"]
