"""SessionkitSaver: LangGraph's checkpointer conformance suite, a real StateGraph (a scripted
chat model and a tool node) whose mirrored conversation tree is compared with the thread's
message history at every checkpoint, forks included, and the saver's errors. Every engine
through the store matrix (``engine``; DuckDB and PostgreSQL are slow)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

import sessionkit as sk
from sessionkit.integrations.langgraph import REGISTRY_SESSION, SessionkitSaver

ROOT = Path(__file__).resolve().parents[2]


# -- LangGraph's conformance suite ---------------------------------------------------------------
#
# Run through its entry points (checkpointer_test registers a factory, validate runs every
# capability it detects). The base capabilities (put, put_writes, get_tuple, list,
# delete_thread) and the optional copy_thread must all pass. The optional delete_for_runs and
# prune are not implemented by SessionkitSaver (nor by LangGraph's own SQLite and in-memory
# savers): they remove single checkpoints of a thread that lives on, and the store's records
# are removed only with their session (docs/integrations/langgraph.md says so). The suite
# detects them as missing and runs none of their tests, which this test asserts too.


def test_conformance(engine, new_store):
    store = new_store(engine)

    @checkpointer_test(name=f"SessionkitSaver[{engine}]")
    async def saver():
        yield SessionkitSaver(store)

    report = asyncio.run(validate(saver))
    results = report.results
    failures = {cap: r.failures for cap, r in results.items() if r.passed is False}
    assert not failures, failures
    assert report.passed_all_base()
    for cap in [c.value for c in BASE_CAPABILITIES] + ["copy_thread"]:
        assert results[cap].detected and results[cap].passed and results[cap].tests_passed > 0, cap
    for cap in ("delete_for_runs", "prune"):
        assert results[cap].detected is False and results[cap].passed is None, cap
    assert sum(r.tests_passed for r in results.values()) >= 60


# -- a real graph: a scripted model, a tool node --------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _graph(saver, replies):
    model = GenericFakeChatModel(messages=iter(replies))

    def agent(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def _call(city: str, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": city}, "id": call_id}])


def _paths(session) -> dict[str, list[str]]:
    """Each leaf of the session's tree -> the ids from its root down to it."""
    tree = session.tree()
    parent = {n.id: n.parent_id for n in tree.nodes}
    leaves = set(parent) - {p for p in parent.values() if p is not None}
    out = {}
    for leaf in leaves:
        path, at = [], leaf
        while at is not None:
            path.append(at)
            at = parent[at]
        out[leaf] = path[::-1]
    return out


def _assert_mirrored(graph, session, config) -> int:
    """Every checkpoint's message list is a path of the tree from a root, with the same roles and
    text; the paths to the leaves are exactly the longest of those lists. Returns the leaves."""
    histories = [
        state.values.get("messages", []) for state in graph.get_state_history(config) if state.values is not None
    ]
    assert histories
    stored = session.get_many([n.id for n in session.tree().nodes])
    paths = _paths(session)
    as_ids = [[m.id for m in messages] for messages in histories]
    for messages, ids in zip(histories, as_ids):
        if not ids:
            continue
        assert any(path[: len(ids)] == ids for path in paths.values()), ids
        for m in messages:
            got = stored[m.id]
            role = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}[m.type]
            assert got["role"] == role
            if m.type == "tool":
                (part,) = got["parts"]
                assert (part["type"], part["toolCallId"], part["output"]) == (
                    f"tool-{m.name}",
                    m.tool_call_id,
                    m.content,
                )
                continue
            texts = [p["text"] for p in got["parts"] if p["type"] == "text"]
            assert texts == ([m.content] if m.content else [])
            calls = [(p["toolCallId"], p["input"]) for p in got["parts"] if p["type"].startswith("tool-")]
            assert calls == [(c["id"], c["args"]) for c in getattr(m, "tool_calls", [])]
    longest = {tuple(ids) for ids in as_ids if ids and not any(o[: len(ids)] == ids and o != ids for o in as_ids)}
    assert longest == {tuple(p) for p in paths.values()}
    return len(paths)


def test_the_conversation_mirrors_the_thread_with_a_fork(engine, new_store):
    store = new_store(engine)
    saver = SessionkitSaver(store)
    graph = _graph(
        saver,
        [
            _call("Paris", "call-1"),
            AIMessage("It is sunny in Paris."),
            AIMessage("Good night."),
            _call("Rome", "call-2"),
            AIMessage("Rome is sunny too."),
            AIMessage("Brr, Oslo."),
        ],
    )
    config = {"configurable": {"thread_id": "weather"}}
    graph.invoke({"messages": [SystemMessage("Be brief."), HumanMessage("Weather in Paris?")]}, config)
    graph.invoke({"messages": [HumanMessage("Thanks!")]}, config)
    session = store.session("weather")
    assert [m["role"] for m in session.get_history()] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert _assert_mirrored(graph, session, config) == 1

    # time travel: run again from the checkpoint after the first answer, with another question
    after_answer = next(s for s in graph.get_state_history(config) if s.next == () and len(s.values["messages"]) == 5)
    fork = graph.update_state(after_answer.config, {"messages": [HumanMessage("And Rome?")]}, as_node=START)
    graph.invoke(None, fork)
    assert _assert_mirrored(graph, session, config) == 2
    answer = after_answer.values["messages"][-1].id
    children = [n.id for n in session.tree().nodes if n.parent_id == answer]
    assert len(children) == 2  # "Thanks!" and "And Rome?" hang under the first answer

    # replaying an older checkpoint as it is (invoke(None, its config)) forks again
    before_tools = next(
        s for s in graph.get_state_history(config) if s.next == ("tools",) and len(s.values["messages"]) == 3
    )
    replay = graph.invoke(None, before_tools.config)
    assert [m.content for m in replay["messages"]][-1] == "Brr, Oslo."
    assert _assert_mirrored(graph, session, config) == 3
    call = before_tools.values["messages"][-1].id
    assert len([n for n in session.tree().nodes if n.parent_id == call]) == 2  # the tool ran again: a second result
    assert graph.get_state(config).values["messages"] == replay["messages"]


def test_an_edited_message_becomes_a_sibling(new_store):
    store = new_store("sqlite")
    graph = _graph(SessionkitSaver(store), [AIMessage("one"), AIMessage("two")])
    config = {"configurable": {"thread_id": "edit"}}
    graph.invoke({"messages": [HumanMessage("first", id="h1")]}, config)
    first = next(s for s in graph.get_state_history(config) if len(s.values.get("messages", [])) == 1)
    # the same message id with other content, from the checkpoint before the answer
    edited = graph.update_state(first.config, {"messages": [HumanMessage("first, edited", id="h1")]})
    graph.invoke(None, edited)
    session = store.session("edit")
    roots = [n for n in session.tree().nodes if n.parent_id is None]
    assert sorted(n.id for n in roots) == ["h1", "h1~1"]
    assert session.get("h1~1")["metadata"]["langgraph"]["id"] == "h1"
    assert session.get("h1~1")["parts"] == [{"type": "text", "text": "first, edited"}]
    assert _paths(session)[session.latest_leaf()["id"]][0] == "h1~1"


def test_checkpoints_outlive_the_process_and_the_saver(engine, new_store, tmp_path):
    store = new_store(engine)
    graph = _graph(SessionkitSaver(store), [AIMessage("hello back")])
    config = {"configurable": {"thread_id": "kept"}}
    graph.invoke({"messages": [HumanMessage("hello")]}, config)
    newest = SessionkitSaver(store).get_tuple(config)
    assert newest is not None
    target = store.path
    count = len(list(graph.get_state_history(config)))
    store.close()
    script = (
        "import sessionkit as sk, sys\n"
        "from sessionkit.integrations.langgraph import SessionkitSaver\n"
        "with sk.open_store(sys.argv[1]) as store:\n"
        "    saver = SessionkitSaver(store)\n"
        "    found = saver.get_tuple({'configurable': {'thread_id': 'kept'}})\n"
        "    print(found.config['configurable']['checkpoint_id'])\n"
        "    print('|'.join(m.content for m in found.checkpoint['channel_values']['messages']))\n"
        "    print(len(list(saver.list({'configurable': {'thread_id': 'kept'}}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, target], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    checkpoint_id, contents = proc.stdout.split("\n")[:2]
    assert checkpoint_id == newest.config["configurable"]["checkpoint_id"]
    assert contents == "hello|hello back"
    assert int(proc.stdout.split("\n")[2]) == count


def test_delete_thread_removes_checkpoints_and_the_conversation(new_store):
    store = new_store("sqlite")
    saver = SessionkitSaver(store)
    graph = _graph(saver, [AIMessage("a"), AIMessage("b")])
    for thread in ("gone", "stays"):
        graph.invoke({"messages": [HumanMessage(f"hi {thread}")]}, {"configurable": {"thread_id": thread}})
    saver.delete_thread("gone")
    assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is None
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"stays"}
    assert [s.id for s in store.list_sessions()] == ["stays"]
    assert len(store.session("stays").get_history()) == 2
    saver.delete_thread("never there")  # nothing to do
    asyncio.run(saver.adelete_thread("stays"))
    assert list(saver.list(None)) == [] and store.list_sessions() == []


def test_messages_deleted_elsewhere_are_mirrored_again(new_store):
    store = new_store("sqlite")
    graph = _graph(SessionkitSaver(store), [AIMessage("one"), AIMessage("two")])
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("hi", id="h1")]}, config)
    session = store.session("t")
    answer = session.latest_leaf()["id"]
    session.delete(answer)  # by hand, behind the saver's back
    graph.invoke({"messages": [HumanMessage("again", id="h2")]}, config)
    ids = [m["id"] for m in session.get_history()]
    assert ids == [m.id for m in graph.get_state(config).values["messages"]]
    assert ids[1] == answer and len(ids) == 4


def test_copy_thread_copies_the_checkpoints_and_the_tree(new_store):
    store = new_store("sqlite")
    saver = SessionkitSaver(store)
    graph = _graph(saver, [_call("Lima", "c1"), AIMessage("Mild."), AIMessage("Bye."), AIMessage("Other.")])
    source, target = {"configurable": {"thread_id": "src"}}, {"configurable": {"thread_id": "dst"}}
    graph.invoke({"messages": [HumanMessage("Lima?")]}, source)
    graph.invoke({"messages": [HumanMessage("Thanks")]}, source)
    saver.copy_thread("src", "dst")
    shape = [(n.id, n.parent_id) for n in store.session("src").tree().nodes]
    assert [(n.id, n.parent_id) for n in store.session("dst").tree().nodes] == shape
    assert [t.checkpoint["id"] for t in saver.list(target)] == [t.checkpoint["id"] for t in saver.list(source)]
    assert graph.get_state(target).values == graph.get_state(source).values
    graph.invoke({"messages": [HumanMessage("More?")]}, target)  # the copy goes on alone
    assert [(n.id, n.parent_id) for n in store.session("src").tree().nodes] == shape
    assert len(store.session("dst").tree().nodes) == len(shape) + 2
    assert _assert_mirrored(graph, store.session("dst"), target) == 1
    with pytest.raises(sk.UsageError, match="another id"):
        saver.copy_thread("src", "src")


def test_an_interrupt_is_kept_and_resumed(new_store):
    store = new_store("sqlite")
    path = store.path

    def ask(state: MessagesState):
        answer = interrupt("May I answer?")
        return {"messages": [AIMessage(f"You said {answer}.")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    config = {"configurable": {"thread_id": "hitl"}}
    builder.compile(checkpointer=SessionkitSaver(store)).invoke({"messages": [HumanMessage("Hi")]}, config)
    store.close()
    with sk.open_store(path) as again:  # the pause outlives the store's first opening
        graph = builder.compile(checkpointer=SessionkitSaver(again))
        (task,) = graph.get_state(config).tasks
        assert [i.value for i in task.interrupts] == ["May I answer?"]
        out = graph.invoke(Command(resume="yes"), config)
        assert out["messages"][-1].content == "You said yes."
        assert [m["role"] for m in again.session("hitl").get_history()] == ["user", "assistant"]


def test_an_async_graph_run(new_store):
    store = new_store("sqlite")
    graph = _graph(SessionkitSaver(store), [_call("Oslo", "c1"), AIMessage("Cold.")])
    config = {"configurable": {"thread_id": "async"}}

    async def run():
        await graph.ainvoke({"messages": [HumanMessage("Oslo?")]}, config)
        return [t async for t in graph.checkpointer.alist(config, limit=2)]

    newest = asyncio.run(run())
    assert len(newest) == 2 and newest[0].checkpoint["id"] > newest[1].checkpoint["id"]
    assert [m["role"] for m in store.session("async").get_history()] == ["user", "assistant", "tool", "assistant"]


# -- bad input --------------------------------------------------------------------------------------


def test_bad_configs_and_a_closed_store(new_store):
    store = new_store("sqlite")
    saver = SessionkitSaver(store)
    for config in (
        {},
        {"configurable": {}},
        {"configurable": {"thread_id": None}},
        None,
        {"configurable": {"thread_id": ""}},
    ):
        with pytest.raises(sk.UsageError, match="thread_id"):
            saver.get_tuple(config)
    with pytest.raises(sk.UsageError, match="thread_id"):
        list(saver.list({"configurable": {"checkpoint_ns": ""}}))
    with pytest.raises(sk.UsageError, match=re.escape(REGISTRY_SESSION)):
        saver.delete_thread(REGISTRY_SESSION)
    with pytest.raises(sk.UsageError, match="checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("ch", 1)], "task")
    with pytest.raises(TypeError, match="sessionkit Store"):
        SessionkitSaver("chats.db")
    graph = _graph(saver, [AIMessage("x")])
    with pytest.raises(ValueError, match="thread_id"):  # LangGraph's own check, before the saver
        graph.invoke({"messages": [HumanMessage("no thread")]})
    store.close()
    with pytest.raises(sk.StoreClosed, match="closed"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    with pytest.raises(sk.StoreClosed):
        graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}})


class _Plain(TypedDict):
    messages: list


def test_a_channel_of_other_values_is_refused_with_a_way_out(new_store):
    store = new_store("sqlite")
    builder = StateGraph(_Plain)
    builder.add_node("n", lambda state: {"messages": ["not a message"]})
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    config = {"configurable": {"thread_id": "plain"}}
    with pytest.raises(sk.UsageError, match="messages_channel=None"):
        builder.compile(checkpointer=SessionkitSaver(store)).invoke({"messages": []}, config)
    graph = builder.compile(checkpointer=SessionkitSaver(store, messages_channel=None))
    assert graph.invoke({"messages": []}, config) == {"messages": ["not a message"]}
    assert store.list_sessions() == []


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_import_sessionkit_loads_no_langgraph_and_a_missing_one_names_the_extra():
    proc = _python(
        "import sys, sessionkit as sk, sessionkit.integrations\n"
        "print(sorted(m for m in sys.modules if m.startswith(('langgraph', 'langchain'))))\n"
        "sys.modules['langgraph'] = sys.modules['langchain_core'] = None  # as if not installed\n"
        "try:\n"
        "    import sessionkit.integrations.langgraph\n"
        "except sk.MissingDependency as exc:\n"
        "    print(exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    loaded, error = proc.stdout.splitlines()
    assert loaded == "[]"
    assert "pip install 'sessionkit[langgraph]'" in error


# -- the docs page's example ----------------------------------------------------------------------


def test_the_docs_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    page = (ROOT / "docs" / "integrations" / "langgraph.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    assert blocks
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/integrations/langgraph.md", "exec"), namespace)
    with sk.open_store(tmp_path / "graph.db") as store:  # what the example left, read again
        tree = store.session("chat-1").tree()
        assert len(tree.nodes) == 8
        assert len({n.parent_id for n in tree.nodes}) == 7  # one message has two children: the fork
        assert SessionkitSaver(store).get_tuple({"configurable": {"thread_id": "chat-1"}}) is not None
