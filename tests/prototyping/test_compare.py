"""compare(): one prompt from one message under several variants, concurrently, each a sibling branch."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import pytest

import sessionkit as sk
from sessionkit.agent import ROOT
from sessionkit.agent.models import ModelReply, TextDelta, make_usage
from sessionkit.errors import MessageNotFound, UsageError
from sessionkit.parts import text_of
from sessionkit.prototyping import COMPARISON_COLUMNS, compare
from sessionkit.testing import ScriptedModel


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Gauge:
    """A model that holds each call until ``width`` calls are in flight at once (or every call
    that can be), so the test sees how many variants ran concurrently."""

    def __init__(self, name: str, width: int, text: str) -> None:
        self.name, self.width, self.text = name, width, text
        self.shared: dict = {}

    async def stream(self, messages, *, tools):
        state = self.shared
        state["now"] = state.get("now", 0) + 1
        state["most"] = max(state.get("most", 0), state["now"])
        state.setdefault("full", asyncio.Event())
        if state["now"] >= self.width:
            state["full"].set()
        await asyncio.wait_for(state["full"].wait(), 30)
        state["now"] -= 1
        yield TextDelta(self.text)
        yield ModelReply(
            text=self.text,
            reasoning="",
            tool_calls=(),
            usage=make_usage(model=self.name, input_tokens=7, output_tokens=3, cache_read=0, cache_write=0),
            stop_reason="stop",
        )


def _one_turn(store, sid="c"):
    session = store.session(sid)
    result = sk.Agent("base", "Be helpful.", ScriptedModel(["A1"])).run_sync("Q1", session=session)
    return session, result.messages[-1]["id"]


def test_variants_run_from_one_node_as_sibling_branches_with_a_bound_and_errors_as_rows(engine, new_store):
    store = new_store(engine, name="compare")
    session, a1 = _one_turn(store)
    shared: dict = {}
    fast, slow = Gauge("fast-model", 2, "Reply A"), Gauge("slow-model", 2, "Reply B")
    fast.shared = slow.shared = shared
    tools = ScriptedModel([{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}, "It is 5."], name="tooly")
    broken = ScriptedModel([{"error": RuntimeError("provider down")}], name="broken")
    base = sk.Agent("base", "Be helpful.", ScriptedModel([]))
    seen: dict[str, list[str]] = {}

    comparison = asyncio.run(
        compare(
            "Q2?",
            session,
            base=base,
            variants={
                "a": sk.Agent("a", "Be helpful.", fast),
                "b": {"model": slow, "instructions": "Be terse."},
                "tools": {"model": tools, "tools": [add]},
                "broken": sk.Agent("x", "", broken),
            },
            concurrency=2,
            on_event=lambda name, ev: seen.setdefault(name, []).append(ev["kind"]),
        )
    )

    assert comparison.at == a1 and shared["most"] == 2  # two at once: the bound, reached
    assert [r["variant"] for r in comparison.rows] == ["a", "b", "tools", "broken"]
    a, b, t, x = comparison.rows
    assert (a["text"], a["status"], a["model"], a["input_tokens"], a["output_tokens"]) == (
        "Reply A",
        "completed",
        "fast-model",
        7,
        3,
    )
    assert b["text"] == "Reply B" and b["error"] is None and b["stop_reason"] == "stop"
    assert (t["text"], t["tool_calls"], t["tool_names"], t["stop_reason"]) == ("It is 5.", 1, ["add"], "stop")
    assert x["status"] == "failed" and x["text"] is None and "provider down" in x["error"] and x["leaf_id"] is None
    assert comparison.results["broken"] is None and comparison.results["a"].text == "Reply A"
    assert all(kinds[0] == "run.start" and kinds[-1] == "run.end" for kinds in seen.values()) and len(seen) == 4

    # every completed variant is a branch under the same message, labelled with its name and settings
    users = [m for m in session.branches(a1)]
    assert sorted(m["metadata"]["labels"]["variant"] for m in users) == ["a", "b", "tools"]
    labels = {m["metadata"]["labels"]["variant"]: m["metadata"]["labels"]["settings"] for m in users}
    assert labels["b"]["instructions"] == "Be terse." and labels["b"]["model"] == "slow-model"
    assert labels["tools"]["tools"] == ["add"]
    for row in (a, b, t):
        path = session.get_history(leaf_id=row["leaf_id"])
        assert [m["id"] for m in path][:2] == [m["id"] for m in session.get_history(leaf_id=a1)]
    starts = [e for e in store.events("c") if e["kind"] == "run.start"][1:]
    assert sorted(e["labels"]["variant"] for e in starts) == ["a", "b", "broken", "tools"]
    assert {e["at"] for e in starts} == {a1}
    assert [r.status for r in store.runs("c")].count("failed") == 1
    # each variant's run record carries where it started, its name and its settings (the failed one too)
    records = {r.run_id: r.meta for r in store.runs("c")[1:]}
    assert records == {e["run_id"]: {"at": a1, **e["labels"]} for e in starts}
    by_name = {meta["variant"]: meta["settings"] for meta in records.values()}
    assert by_name["b"] == labels["b"] and by_name["broken"]["model"] == "broken"
    view = store.sql_arrow("SELECT run_id, started_at_message, variant FROM runs WHERE session_id = 'c'").to_pylist()
    assert {r["run_id"]: (r["started_at_message"], r["variant"]) for r in view} == {
        store.runs("c")[0].run_id: (None, None),  # the first turn, of an empty session, no variant
        **{run_id: (a1, meta["variant"]) for run_id, meta in records.items()},
    }

    frame = comparison.to_pandas()
    assert list(frame.columns) == COMPARISON_COLUMNS and list(frame["variant"]) == ["a", "b", "tools", "broken"]
    assert frame.loc[3, "error"] == x["error"]


def test_dict_variants_take_model_options_on_a_litellm_model_and_bad_input_runs_nothing(new_store):
    store = new_store("sqlite", memory=True)
    session, a1 = _one_turn(store)
    base = sk.Agent("base", "Be helpful.", sk.LiteLLMModel("gpt-4o-mini", mock_response="Hello!"))
    comparison = asyncio.run(
        compare("Hi", session, base=base, variants={"warm": {}, "cold": {"temperature": 0, "api_key": "sk-x"}})
    )
    cold = comparison.row("cold")
    assert cold["text"] == "Hello!" and cold["model"] == "gpt-4o-mini" and cold["cost_usd"] is not None
    settings = session.get(comparison.results["cold"].messages[0]["id"])["metadata"]["labels"]["settings"]
    assert settings["temperature"] == 0 and settings["api_key"] == "***"
    assert (
        "temperature" not in session.get(comparison.results["warm"].messages[0]["id"])["metadata"]["labels"]["settings"]
    )

    runs = len(store.runs("c"))
    scripted = sk.Agent("s", "", ScriptedModel(["never"]))
    with pytest.raises(TypeError, match="'cold': model options \\(temperature\\) need a litellm model"):
        asyncio.run(compare("x", session, base=scripted, variants={"cold": {"temperature": 0}}))
    with pytest.raises(TypeError, match="pass base="):
        asyncio.run(compare("x", session, variants={"v": {"instructions": "x"}}))
    with pytest.raises(TypeError, match="must be an Agent or a dict"):
        asyncio.run(compare("x", session, variants={"v": "gpt-4o"}))
    with pytest.raises(MessageNotFound, match="nope"):
        asyncio.run(compare("x", session, at="nope", variants={"v": scripted}))
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(compare("x", session, concurrency=0, variants={"v": scripted}))
    assert len(store.runs("c")) == runs and len(session) == 6

    # an empty session: every variant starts a root conversation
    empty = store.session("empty")
    two = {"v": scripted, "w": sk.Agent("w", "", ScriptedModel(["w"]))}
    fresh = asyncio.run(compare("x", empty, variants=two))
    assert fresh.at is ROOT and sorted(text_of(m) for m in empty.roots()) == ["x", "x"]
    assert sorted(r["text"] for r in fresh.rows) == ["never", "w"]


def test_compare_needs_a_session_with_branches(tmp_path):
    line = sk.create_session("line", store=sk.FileSessionStore(tmp_path))
    with pytest.raises(UsageError, match="sessionkit store"):
        asyncio.run(compare("x", line, variants={"v": sk.Agent("v", "", ScriptedModel(["never"]))}))


def test_the_branch_tree_names_each_variant_on_its_branch(new_store):
    from sessionkit.widgets import BranchTree

    store = new_store("sqlite", memory=True)
    session, a1 = _one_turn(store, "tree")
    variants = {name: sk.Agent(name, "", ScriptedModel([f"reply {name}"])) for name in ("gpt-a", "cold")}
    asyncio.run(compare("Which?", session, variants=variants))
    html = BranchTree(session).snapshot_html()
    assert "[gpt-a] Which?" in html and "[cold] Which?" in html and "2 branches" in html
    assert html.count("[gpt-a]") == html.count("[cold]") == 1  # on the branch's first message only
    assert "] Q1" not in html and "] A1" not in html  # the first turn carries no variant
    # where each run started and its variant, read back with SQL over the stored run.start events
    rows = store.sql(
        "SELECT json_extract_string(e.data, '$.at') AS at, json_extract_string(e.data, '$.labels.variant') AS variant,"
        " r.status FROM events e JOIN runs r USING (run_id) WHERE e.kind = 'run.start' ORDER BY e.seq"
    )
    assert list(rows["at"])[1:] == [a1, a1] and sorted(rows["variant"][1:]) == ["cold", "gpt-a"]
    assert list(rows["status"]) == ["completed"] * 3


def test_the_compare_view_fills_as_variants_stream_and_snapshots_offline(new_store):
    from sessionkit.widgets import CompareView

    store = new_store("sqlite", memory=True)
    session, _ = _one_turn(store, "view")
    view = CompareView(interval=0)  # every event goes to the front end at once: counted below
    seen: list[list[tuple[str, str]]] = []
    view.observe(lambda ch: seen.append([(c["variant"], c["text"]) for c in ch["new"]]), names="columns")
    variants = {
        "long": sk.Agent("l", "", ScriptedModel(["one two three four"], name="m-long")),
        "tool": sk.Agent(
            "t", "", ScriptedModel([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, "2"]), tools=[add]
        ),
        "bad": sk.Agent("b", "", ScriptedModel([{"error": RuntimeError("down")}])),
    }
    comparison = asyncio.run(compare("Go", session, variants=variants, concurrency=1, on_event=view.on_event))
    by_name = {c["variant"]: c for c in view.columns}
    assert [c["variant"] for c in view.columns] == ["long", "tool", "bad"]
    partial = [dict(s)["long"] for s in seen if "long" in dict(s)]
    assert "one two " in partial and "one two three four" in partial  # the text grew before the run ended
    assert by_name["long"]["status"] == "completed" and by_name["long"]["model"] == "m-long"
    assert by_name["tool"]["tools"] == ["add"] and by_name["tool"]["text"] == "2"
    assert by_name["bad"]["status"] == "failed" and "down" in by_name["bad"]["error"]
    assert by_name["long"]["output_tokens"] == comparison.row("long")["output_tokens"]

    html = view.snapshot_html()
    assert 'data-sessionkit-snapshot="compare"' in html and "<script" not in html.lower()
    assert all(f'data-variant="{name}"' in html for name in variants) and "one two three four" in html
    shown = CompareView(comparison)
    assert [c["text"] for c in shown.columns] == [r["text"] or "" for r in comparison.rows]
    assert shown.batches == 1 and "CompareView(3 variants" in repr(shown)
    page = shown.to_html()
    assert "one two three four" in page and "sk-payload" in page
