"""Transcript: the entries it sends for each mode, tokens, compaction boundaries, fetching."""

from __future__ import annotations

import json

import pytest
import traitlets
from viewtools import front

import sessionkit as sk
from sessionkit.widgets import BranchTree, RunView, Transcript
from sessionkit.widgets._source import message_view


def _tokens(session):
    return {n.id: n.tokens for n in session._eng().nodes(session.session_id)}


def test_model_mode_lists_what_the_model_sees(trip):
    chat = Transcript(trip)
    seen = trip.get_history(compacted=True)
    assert [e["id"] for e in chat.entries] == [m["id"] for m in seen]
    assert [e["kind"] for e in chat.entries] == [
        "message",
        "summary",
        "message",
        "message",
        "message",
        "message",
        "message",
    ]
    tokens = _tokens(trip)
    (comp,) = trip.compactions()
    for e in chat.entries:
        assert e["tokens"] == (comp.tokens_after if e["kind"] == "summary" else tokens[e["id"]])
    path = chat._path
    assert path["tokens_model"] == trip.context_tokens()
    assert path["tokens_full"] == sum(tokens[m["id"]] for m in trip.get_history(compacted=False))
    (c,) = path["compactions"]
    assert (c["summary"], c["messages"], c["tokens_before"], c["tokens_after"]) == (
        comp.summary,
        4,
        comp.tokens_before,
        comp.tokens_after,
    )
    assert [m["id"] for m in chat.messages] == [m["id"] for m in seen]


def test_full_mode_marks_the_compacted_messages(trip):
    chat = Transcript(trip, mode="full")
    raw = trip.get_history(compacted=False)
    assert [e["id"] for e in chat.entries] == [m["id"] for m in raw]
    hidden = [e["id"] for e in chat.entries if e["kind"] == "hidden"]
    assert hidden == ["u1", "a1", "u2", "a2"]
    assert all(e["compaction"] == 0 for e in chat.entries if e["kind"] == "hidden")
    # the page's switch is a trait change
    chat.set_state({"mode": "model"})
    assert "summary" in [e["kind"] for e in chat.entries]


def test_messages_are_fetched_with_tool_calls_and_tokens(trip, record):
    chat = Transcript(trip, "a4")
    sent = record(chat)
    front(chat, {"type": "fetch", "ids": ["a2", "a4", "compaction:x"], "req": 3})
    (reply,) = sent.of("messages")
    assert set(reply["items"]) == {"a2", "a4"}
    assert reply["items"]["a4"] == message_view(trip.get("a4"), tokens=_tokens(trip)["a4"])
    tool = reply["items"]["a2"]["parts"][1]
    assert tool["name"] == "weather" and json.loads(tool["output"]) == {"high_c": 23, "rain_days": 4}
    assert reply["items"]["a2"]["usage"]["cost_usd"] == 0.0011


def test_bad_arguments(trip):
    with pytest.raises(sk.MessageNotFound):
        Transcript(trip, "missing")
    with pytest.raises(traitlets.TraitError):
        Transcript(trip, mode="everything")
    with pytest.raises(TypeError):
        Transcript(trip).link("not a tree")


@pytest.mark.parametrize(
    "make",
    [
        lambda s: Transcript(s, view="full"),
        lambda s: BranchTree(s, colapse=False),
        lambda s: RunView(hieght=300),
    ],
)
def test_misspelt_options_are_refused(trip, make):
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\): (view|colapse|hieght)"):
        make(trip)


def test_empty_session_and_plain_sessions(store):
    chat = Transcript(store.session("empty"))
    assert chat.entries == [] and chat.messages == []
    assert "0 entries" in chat.snapshot_html()
