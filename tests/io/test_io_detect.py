"""`sessionkit import STORE FILE` with the agent frameworks' stores and logs: the format is
told from the file when --format is left out, and importing again adds nothing."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest

import sessionkit as sk
from sessionkit.cli import main

DATA = Path(__file__).resolve().parent.parent / "data"


def _agents_db(path):
    from agents import SQLiteSession

    async def write():
        s = SQLiteSession("conv-a", str(path))
        await s.add_items(
            [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "clock", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "noon"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "It is noon."}]},
            ]
        )
        s.close()

    asyncio.run(write())


def _langgraph_db(path):
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    g = StateGraph(MessagesState)
    g.add_node("model", lambda state: {"messages": [AIMessage("hello")]})
    g.add_edge(START, "model")
    conn = sqlite3.connect(path, check_same_thread=False)
    g.compile(checkpointer=SqliteSaver(conn)).invoke(
        {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "thread-l"}}
    )
    conn.close()


def _adk_db(path):
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    async def write():
        service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
        session = await service.create_session(app_name="app", user_id="u", session_id="adk-s")
        for author, text in (("user", "hi"), ("helper", "hello")):
            await service.append_event(
                session,
                Event(
                    author=author,
                    invocation_id="inv-1",
                    content=types.Content(role="user" if author == "user" else "model", parts=[types.Part(text=text)]),
                ),
            )
        await service.close()

    asyncio.run(write())


@pytest.fixture
def sources(tmp_path):
    paths = {
        "openai-agents": tmp_path / "agents.db",
        "langgraph": tmp_path / "graph.db",
        "adk": tmp_path / "adk.db",
        "claude-code": DATA / "claude_code" / "dag_compact_after_rewind.jsonl",
        "oasst": DATA / "en_100_tree.jsonl",
        "hh": DATA / "hh-rlhf-harmless-base-test.jsonl.gz",
        "swe-agent": DATA / "swe_agent" / "function_calling_simple.traj",
    }
    _agents_db(paths["openai-agents"])
    _langgraph_db(paths["langgraph"])
    _adk_db(paths["adk"])
    return paths


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_formats_are_detected(sources, tmp_path):
    for name, path in sources.items():
        assert sk.io.detect_format(path) == name
    log = tmp_path / "run.json"
    log.write_text('{\n  "version": 2,\n  "status": "success",\n  "eval": {}\n}')
    assert sk.io.detect_format(log) == "inspect"
    assert sk.io.detect_format(DATA / "swe_agent") == "swe-agent"
    assert sk.io.detect_format(DATA / "claude_code") == "claude-code"


def test_cli_imports_each_store_without_format(sources, tmp_path):
    target = str(tmp_path / "all.db")
    for name in ("openai-agents", "langgraph", "adk", "claude-code", "swe-agent"):
        status, out, err = _cli("import", target, str(sources[name]))
        assert status == 0, err
        assert f"({name})" in out
        added = int(re.search(r": ([\d,]+) new message", out).group(1).replace(",", ""))
        assert added > 0
        status, again, _ = _cli("import", target, str(sources[name]), "--format", name)
        assert status == 0 and ": 0 new messages, 0 new sessions" in again
    with sk.open_store(target) as store:
        assert {s.id for s in store.list_sessions()} == {"conv-a", "thread-l", "adk-s", "s1", "function_calling_simple"}
        tool = store.session("conv-a").get_history()[1]["parts"][0]
        assert (tool["type"], tool["output"]) == ("tool-clock", "noon")


def test_cli_says_when_it_cannot_tell(tmp_path):
    unknown = tmp_path / "notes.json"
    unknown.write_text(json.dumps({"hello": "world"}))
    empty_db = tmp_path / "empty.db"
    sqlite3.connect(empty_db).execute("CREATE TABLE t (x)").connection.commit()
    for path, words in ((unknown, "cannot tell the format"), (empty_db, "no known framework")):
        status, out, err = _cli("import", str(tmp_path / "s.db"), str(path))
        assert status != 0 and words in err and out == ""
    status, _, err = _cli("import", str(tmp_path / "s.db"), str(tmp_path / "missing.jsonl"))
    assert status != 0 and "missing.jsonl" in err


def test_session_prefix_keeps_sources_apart(sources, tmp_path):
    with sk.open_store(str(tmp_path / "p.db")) as store:
        for name in ("openai-agents", "langgraph", "adk", "claude-code", "swe-agent"):
            importer = getattr(sk.io, sk.io.FORMATS[name])
            plain = importer(store, sources[name])
            prefixed = importer(store, sources[name], session_prefix=f"{name}/")
            assert [s.session_id for s in prefixed] == [f"{name}/{s.session_id}" for s in plain]
            assert [len(s) for s in prefixed] == [len(s) for s in plain]
            with pytest.raises(TypeError, match="session_prefix"):
                importer(store, sources[name], session_prefix=1)
