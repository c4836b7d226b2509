"""BranchTree: what it sends for a session, what clicks do, the diff, large trees."""

from __future__ import annotations

import inspect
import json
from collections import Counter

import pytest
from helpers import msg, wait_until
from viewtools import front

import sessionkit as sk
from sessionkit.widgets import BranchTree, Transcript
from sessionkit.widgets._source import message_preview, outline_rows, tree_data


def test_tree_arrays_match_the_store(trip):
    tree = BranchTree(trip)
    t = tree._tree
    nodes = trip._eng().nodes(trip.session_id)
    assert t["n"] == len(trip) == len(nodes)
    assert t["ids"] == [n.id for n in nodes]
    assert [t["ids"][p] if p >= 0 else None for p in t["parent"]] == [n.parent_id for n in nodes]
    assert [t["roles"][r] for r in t["role"]] == [n.role for n in nodes]
    assert t["tokens"] == [n.tokens for n in nodes]
    assert t["ids"][t["latest"]] == trip.latest_leaf()["id"]
    (band,) = t["compactions"]
    (comp,) = trip.compactions()
    assert (t["ids"][band["from"]], t["ids"][band["to"]]) == (comp.from_id, comp.to_id)
    assert band["summary"] == comp.summary and band["messages"] == 4
    assert (band["tokens_before"], band["tokens_after"]) == (comp.tokens_before, comp.tokens_after)
    # the tree travels without message text
    blob = json.dumps(t)
    for m in trip.get_history(compacted=False):
        for part in m["parts"]:
            if part["type"] == "text":
                assert part["text"] not in blob


def test_rows_collapse_unbranched_chains(trip):
    data = tree_data(trip)
    ix = data.index()
    rows = outline_rows(data)
    assert rows == [
        ("node", ix["sys"], 0),
        ("band", 0, 0),
        ("more", ix["u1"], ix["a3"], 0),
        ("node", ix["u3"], 0),
        ("node", ix["a4"], 1),
        ("node", ix["a4b"], 1),
        ("node", ix["u4"], 1),
        ("node", ix["a5"], 1),
    ]
    flat = outline_rows(data, collapse=False)
    assert [data.ids[r[1]] for r in flat if r[0] == "node"] == [
        "sys",
        "u1",
        "a1",
        "u2",
        "a2",
        "a3",
        "u3",
        "a4",
        "a4b",
        "u4",
        "a5",
    ]
    assert flat[1] == ("band", 0, 0)  # just before u1, where the compaction starts
    assert outline_rows(data, expanded={ix["sys"]}) == flat


def test_previews_are_fetched_on_demand(trip, record):
    tree = BranchTree(trip)
    sent = record(tree)
    front(tree, {"type": "fetch", "ids": ["u1", "a2", "nope"], "req": 7})
    (reply,) = sent.of("previews")
    assert reply["req"] == 7
    assert reply["items"] == {"u1": message_preview(trip.get("u1")), "a2": message_preview(trip.get("a2"))}
    assert reply["items"]["a2"].endswith("→ weather()")
    front(tree, {"type": "detail", "id": "a2"})
    (detail,) = sent.of("detail")
    tool = next(p for p in detail["message"]["parts"] if p["type"] == "tool")
    assert tool["name"] == "weather"
    assert tool["input"] == "city: Lisbon\nmonth: May"  # each argument by name (parts.input_text)
    assert json.loads(tool["output"]) == {"high_c": 23, "rain_days": 4}
    front(tree, {"type": "no-such-thing"})  # ignored, no answer, no error
    front(tree, "not a dict")
    assert len(sent) == 2


def test_click_sets_selected_id_and_a_linked_transcript_follows(trip):
    tree = BranchTree(trip)
    chat = Transcript(trip, follow=tree)
    assert chat.leaf_id is None and chat.following
    tree.set_state({"selected_id": "a4"})  # what a click's comm update does
    assert tree.selected_id == "a4"
    assert chat.leaf_id == "a4"
    assert [e["id"] for e in chat.entries] == [m["id"] for m in trip.get_history(leaf_id="a4")]
    assert [m["id"] for m in tree.selected_path()] == [m["id"] for m in trip.get_history(leaf_id="a4", compacted=False)]
    chat.unlink()
    tree.selected_id = "a5"
    assert chat.leaf_id == "a4"
    with pytest.raises(sk.MessageNotFound):
        tree.selected_id = "missing"


def test_branch_diff_from_the_fork_point(trip):
    tree = BranchTree(trip, selected_id="a4")
    tree.compare_id = "a5"
    d = tree.diff
    assert d["fork_id"] == "u3"
    assert d["shared_messages"] == 7
    tokens = {n.id: n.tokens for n in trip._eng().nodes(trip.session_id)}
    assert d["shared_tokens"] == sum(tokens[i] for i in ("sys", "u1", "a1", "u2", "a2", "a3", "u3"))
    assert d["a"]["messages"] == 1 and d["a"]["tokens"] == tokens["a4"]
    assert d["a"]["cost_usd"] == pytest.approx(0.0012)
    assert d["b"]["messages"] == 3 and d["b"]["tokens"] == tokens["a4b"] + tokens["u4"] + tokens["a5"]
    assert d["b"]["roles"] == {"assistant": 2, "user": 1}
    assert d["b"]["cost_usd"] is None  # a4b's model is unpriced: unknown, never zero
    assert d["tokens_delta"] == d["b"]["tokens"] - d["a"]["tokens"]
    tree.compare_id = None
    assert tree.diff == {}


def test_new_messages_reach_the_tree(trip):
    tree = BranchTree(trip)
    trip.append(msg("u9", "One more thing", "user"))
    wait_until(lambda: "u9" in tree._tree["ids"], what="the new message in the tree")
    assert tree._tree["ids"][tree._tree["latest"]] == "u9"
    tree.close()


def _engine_calls(monkeypatch, eng) -> Counter:
    """Counts the calls of each public method of a store's engine from now on."""
    calls: Counter = Counter()

    def counted(name, method):
        def call(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)

        return call

    for name, _ in inspect.getmembers(type(eng), inspect.isfunction):
        if not name.startswith("_"):
            monkeypatch.setattr(eng, name, counted(name, getattr(eng, name)))
    return calls


def test_ten_thousand_messages_are_sent_without_reading_content(store, new_store, monkeypatch):
    import nbhelpers

    big = nbhelpers.big_session(store)
    small = nbhelpers.big_session(new_store("sqlite", memory=True), 10)
    big_calls, small_calls = _engine_calls(monkeypatch, big._eng()), _engine_calls(monkeypatch, small._eng())
    BranchTree(small, live=False)
    tree = BranchTree(big, live=False)
    assert "contents" not in big_calls  # no message body read to send the tree
    # the same store reads for 10 messages as for 10,000: none per message
    assert big_calls == small_calls and big_calls["nodes"] == 1, big_calls
    assert tree._tree["n"] == 10_000
    assert len(json.dumps(tree._tree)) < 1_500_000
    rows = tree.rows()
    assert len(rows) < 10_000  # chains collapsed
    # every message is on exactly one row: its own, or hidden in a "n more" row
    parent = tree.data.parent
    seen = [r[1] for r in rows if r[0] == "node"]
    for r in rows:
        if r[0] == "more":
            i = r[2]
            while True:
                seen.append(i)
                if i == r[1]:
                    break
                i = parent[i]
    assert sorted(seen) == list(range(10_000))
