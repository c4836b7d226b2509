"""LangGraph checkpoints written by LangGraph itself (a graph with a scripted model node and
the prebuilt ToolNode, on a SqliteSaver), imported and compared checkpoint by checkpoint
with what ``get_state_history`` reads back: forks, edits and tool calls included."""

from __future__ import annotations

import functools
import sqlite3
from types import SimpleNamespace

import pytest
from helpers import weather

import sessionkit as sk


@functools.cache
def _lg() -> SimpleNamespace:
    """LangGraph's classes, imported on first use (not at collection: importing LangGraph and
    LangChain takes seconds)."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    return SimpleNamespace(
        AIMessage=AIMessage,
        HumanMessage=HumanMessage,
        SqliteSaver=SqliteSaver,
        START=START,
        MessagesState=MessagesState,
        StateGraph=StateGraph,
        ToolNode=ToolNode,
        tools_condition=tools_condition,
        weather=tool(weather),
    )


def _graph(saver, script):
    lg = _lg()

    def model(state):
        return {"messages": [script.pop(0)]}

    g = lg.StateGraph(lg.MessagesState)
    g.add_node("model", model)
    g.add_node("tools", lg.ToolNode([lg.weather], handle_tool_errors=True))
    g.add_edge(lg.START, "model")
    g.add_conditional_edges("model", lg.tools_condition)
    g.add_edge("tools", "model")
    return g.compile(checkpointer=saver)


def _call(n, *cities):
    return _lg().AIMessage(
        content="",
        tool_calls=[{"name": "weather", "args": {"city": c}, "id": f"c{n}{i}"} for i, c in enumerate(cities)],
    )


@pytest.fixture
def checkpoints(tmp_path):
    """Thread t1: parallel tool calls, a failing call, then a fork from the checkpoint
    before the second question and an edit of the last answer; thread t2: one exchange."""
    lg = _lg()
    AIMessage, HumanMessage = lg.AIMessage, lg.HumanMessage
    db = tmp_path / "graph.db"
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = lg.SqliteSaver(conn)
    script = [
        _call(1, "Oslo", "Rome"),
        AIMessage("Oslo and Rome are sunny"),
        _call(2, "Atlantis"),
        AIMessage("Atlantis is not a city"),
        AIMessage("forked answer"),
        AIMessage("hello"),
    ]
    app = _graph(saver, script)
    t1 = {"configurable": {"thread_id": "t1"}}
    app.invoke({"messages": [HumanMessage("weather in Oslo and Rome?")]}, t1)
    app.invoke({"messages": [HumanMessage("and Atlantis?")]}, t1)
    before = next(s for s in app.get_state_history(t1) if len(s.values["messages"]) == 5 and not s.next)
    app.invoke({"messages": [HumanMessage("something else")]}, before.config)
    last = app.get_state(t1).values["messages"][-1]
    app.update_state(t1, {"messages": [AIMessage("edited answer", id=last.id)]})
    app.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t2"}})
    history = {t: list(app.get_state_history({"configurable": {"thread_id": t}})) for t in ("t1", "t2")}
    conn.close()
    return db, history


def _lc_facts(messages):
    out = []
    for m in messages:
        if m.type == "tool":
            out.append(("result", m.tool_call_id, m.content, m.status))
        else:
            out.append(({"human": "user", "ai": "assistant"}[m.type], m.content or ""))
            out += [("call", c["id"], c["name"], c["args"]) for c in getattr(m, "tool_calls", [])]
    return out


def _sk_facts(history):
    out = []
    for m in history:
        out.append((m["role"], "".join(p["text"] for p in m["parts"] if p["type"] == "text")))
        tools = [p for p in m["parts"] if p["type"].startswith("tool-")]
        out += [("call", p["toolCallId"], p["type"][5:], p["input"]) for p in tools]
        for p in tools:
            if p["state"] == "output-available":
                out.append(("result", p["toolCallId"], p["output"], "success"))
            elif p["state"] == "output-error":
                out.append(("result", p["toolCallId"], p["errorText"], "error"))
    return out


def _nodes(session):
    roots = [session.get_history(compacted=False)[0]]
    seen, stack = [], list(roots)
    while stack:
        m = stack.pop()
        seen.append(m)
        stack.extend(session.branches(m["id"]))
    return seen


def test_every_checkpoint_is_a_path(store, checkpoints):
    db, history = checkpoints
    sessions = sk.io.import_langgraph(store, db)
    assert [s.session_id for s in sessions] == ["t1", "t2"]
    for thread, states in history.items():
        session = store.session(thread)
        nodes = _nodes(session)
        assert len(nodes) == len(session)
        for state in states:
            messages = state.values.get("messages", [])
            if not messages:
                continue
            expected = _lc_facts(messages)
            last = next(m for m in reversed(messages) if m.type != "tool")
            candidates = [n for n in nodes if n["metadata"]["langgraph"].get("id", n["id"]) == last.id]
            paths = [_sk_facts(session.get_history(leaf_id=n["id"], compacted=False)) for n in candidates]
            # a checkpoint taken before its tool calls ran ends with calls the stored tree already answers
            matches = [
                p for p in paths if p[: len(expected)] == expected and all(f[0] == "result" for f in p[len(expected) :])
            ]
            assert matches, (thread, state.config["configurable"]["checkpoint_id"])


def test_forks_edits_and_tool_results(store, checkpoints):
    db, history = checkpoints
    sk.io.import_langgraph(store, db)
    session = store.session("t1")
    nodes = _nodes(session)
    forks = {
        n["parts"][0]["text"]: [c["parts"][0]["text"] for c in session.branches(n["id"])]
        for n in nodes
        if len(session.branches(n["id"])) > 1
    }
    assert forks.get("Oslo and Rome are sunny") == ["and Atlantis?", "something else"]
    assert forks.get("something else") == ["forked answer", "edited answer"]
    # the latest checkpoint is the edited answer, and it is the latest leaf
    assert session.latest_leaf()["parts"][0]["text"] == "edited answer"
    tools = [p for n in nodes for p in n["parts"] if p["type"].startswith("tool-")]
    assert {(p["toolCallId"], p["state"]) for p in tools} == {
        ("c10", "output-available"),
        ("c11", "output-available"),
        ("c20", "output-error"),
    }
    assert all(n["role"] != "tool" for n in nodes)
    # every LangChain message appears once however many checkpoints repeat it
    lc_ids = {m.id for s in history["t1"] for m in s.values.get("messages", []) if m.type != "tool"}
    assert len(nodes) == len(lc_ids) + 1  # + the edited answer, stored beside the original


def test_idempotent_and_progress(checkpoints):
    db, history = checkpoints
    seen = []
    with sk.open_store() as store:
        sk.io.import_langgraph(store, db, progress=lambda done, total: seen.append((done, total)))
        sizes = [len(s) for s in (store.session("t1"), store.session("t2"))]
        sk.io.import_langgraph(store, db)
        assert [len(s) for s in (store.session("t1"), store.session("t2"))] == sizes
        assert [s.session_id for s in sk.io.import_langgraph(store, db, thread_ids=["t2"])] == ["t2"]
    n = sum(len(states) for states in history.values())
    assert seen[-1] == (n, n)


def test_malformed_checkpoints(tmp_path, checkpoints):
    db, _ = checkpoints
    conn = sqlite3.connect(db)
    cid = conn.execute("SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = 't2'").fetchone()[0]
    conn.execute("UPDATE checkpoints SET checkpoint = x'c1c1c1' WHERE checkpoint_id = ?", (cid,))
    conn.commit()
    conn.close()
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match=rf"graph.db, thread 't2', checkpoint {cid}: cannot decode"):
            sk.io.import_langgraph(store, db)
        assert len(store.session("t1")) > 0  # the threads before it are stored
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match="no table 'checkpoints'"):
            sk.io.import_langgraph(store, other)
