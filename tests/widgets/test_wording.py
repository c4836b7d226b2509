"""What the views say: counts that agree with their nouns, costs that say when they are partial."""

from __future__ import annotations

import json
import re

import pytest
from helpers import msg

import sessionkit as sk
from sessionkit.widgets import _static
from sessionkit.widgets._source import branch_diff
from sessionkit.widgets._views import BranchTree, RunView, Transcript, _script_json

BAD_AGREEMENT = re.compile(
    r"(?<![\d,.])1 (messages|branch points|leaves|compactions|entries|runs|turns|model calls|"
    r"sessions|blobs|children|queued messages)\b"
)


def _usage(cost):
    return {"metadata": {"usage": {"in": 100, "out": 10, "cost_usd": cost, "model": "m"}}}


@pytest.fixture
def forked(store):
    """u1 -> a1 (priced) and u1 -> a2 (no usage) -> u2 -> a3 (usage, no price) -> u3 -> a4 (priced)."""
    s = store.session("forked")
    s.append(msg("u1", "Question", "user"))
    s.append(msg("a1", "Answer one", "assistant", **_usage(0.0002)), parent_id="u1")
    s.append(msg("a2", "Answer two, imported without usage", "assistant"), parent_id="u1")
    s.append(msg("u2", "More", "user"), parent_id="a2")
    s.append(msg("a3", "Unpriced model", "assistant", **_usage(None)), parent_id="u2")
    s.append(msg("u3", "And?", "user"), parent_id="a3")
    s.append(msg("a4", "Priced again", "assistant", **_usage(0.0001)), parent_id="u3")
    return s


def test_one_of_each_reads_in_the_singular(store):
    s = store.session("one")
    s.append(msg("u1", "hello", "user"))
    s.append(msg("a1", "hi", "assistant"))
    s.append(msg("u2", "again", "user"))
    s.append(msg("a2", "yes", "assistant"))
    s.on_compaction(lambda msgs, ctx: sk.CompactionResult("u1", "a1", "They greeted each other."))
    s.compact()
    tree = _static.tree_html(s)
    assert "1 branch point" not in tree and "0 branch points" in tree
    assert "1 leaf ·" in tree and "1 compaction ·" in tree
    chat = _static.transcript_html(s)
    assert "1 compaction on this path" in chat
    for html in (tree, chat, _static.store_html(store), _static.run_html(RunView().state)):
        assert not BAD_AGREEMENT.search(html), BAD_AGREEMENT.search(html).group(0)


def test_a_fork_counts_one_branch_point_and_two_leaves(forked):
    html = _static.tree_html(forked)
    assert "1 branch point ·" in html and "2 leaves" in html
    assert not BAD_AGREEMENT.search(html)


def test_plural_and_cost_formats():
    assert _static.plural(1, "leaf", "leaves") == "1 leaf"
    assert _static.plural(2, "leaf", "leaves") == "2 leaves"
    assert _static.plural(1_234, "message") == "1,234 messages"
    assert _static.fmt_cost(None) == "unknown"
    assert _static.fmt_cost(0.0001, unknown=2, total=3) == "≥ $0.0001 (2 of 3 unknown)"
    assert _static.fmt_cost(0.0, unknown=3, total=3) == "unknown"
    assert _static.fmt_cost(0.0, unknown=0, total=2) == "$0.0000"
    assert _static.fmt_cost(1.5) == "$1.50"


def test_a_branch_with_unpriced_replies_has_a_partial_cost(forked):
    d = branch_diff(forked, "a1", "a4")
    a, b = d["a"], d["b"]
    assert a["cost_usd"] == pytest.approx(0.0002) and a["cost_unknown"] == 0
    # a2 (no usage at all) and a3 (cost None) are unpriced; only a4 has a price
    assert b["cost_usd"] is None
    assert b["cost_known"] == 1 and b["cost_unknown"] == 2
    assert b["cost_known_usd"] == pytest.approx(0.0001)
    assert b["usage_known"] == 2 and b["usage_in"] == 200
    c = branch_diff(forked, "a1", "a2")["b"]
    assert c["usage_in"] is None and c["usage_out"] is None  # no usage recorded: unknown, not 0/0
    assert c["cost_usd"] is None and c["cost_known_usd"] is None


def test_run_usage_says_unknown_for_unpriced_calls(store):
    agent = sk.Agent(
        "t",
        "Be brief.",
        sk.testing.ScriptedModel(
            [
                {"text": "one", "usage": {"in": 10, "out": 2, "cost_usd": 0.0001}},
            ]
        ),
    )
    agent.run_sync("hi", session=store.session("r1"))
    agent2 = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel([{"text": "two", "usage": {"in": 10, "out": 2}}]))
    agent2.run_sync("hi", session=store.session("r1"))
    html = _static.run_html(RunView(store.session("r1")).state)
    assert "≥ $0.0001 (1 of 2 unknown)" in html
    assert "unpriced" not in html


def test_script_json_survives_html_comments_and_script_ends():
    value = {"text": "a <!-- b --> </script><script>alert(1)</script> & c"}
    out = _script_json(value)
    assert "<" not in out and ">" not in out
    assert json.loads(out) == value


def test_to_html_of_a_tree_with_markup_in_messages_embeds_valid_json(store, tmp_path):
    s = store.session("markup")
    s.append(msg("u1", "What does <!-- a comment --> do in </script> HTML?", "user"))
    s.append(msg("a1", "It hides text: <!-- like this.", "assistant"))
    for view in (BranchTree(s), Transcript(s)):
        page = view.to_html()
        payload = re.search(r'<script type="application/json" id="sk-payload">(.*?)</script>', page, re.S).group(1)
        assert "<!--" not in payload
        data = json.loads(payload)
        assert "<!--" in json.dumps(data, ensure_ascii=False)
