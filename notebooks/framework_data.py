"""Write the framework stores that notebook 8 imports: ``python notebooks/framework_data.py``.

The same three airline-support tasks of the tau-bench sample (``data/gpt-4o-airline.json.gz``),
one recorded trial per framework, each written by the framework itself through its own API:

- ``data/agents-sdk-airline.db``: OpenAI Agents SDK ``SQLiteSession.add_items`` (trial 0);
- ``data/langgraph-airline.db``: a LangGraph graph on a ``SqliteSaver`` whose model and tool
  nodes replay the recording (trial 1; its system prompt kept in the model node, not the
  state), then a fork from the checkpoint before the
  customer's last message, answered by what trial 2's customer said there;
- ``data/adk-airline.db``: Google ADK ``DatabaseSessionService.append_event`` (trial 2);
- ``data/inspect-airline.eval``: an inspect-ai eval whose solver replays the recording
  (trial 3) and whose scorer reports tau-bench's reward.

The files are committed, so the notebook itself needs none of these frameworks (reading
LangGraph checkpoints needs ``ormsgpack`` and inspect-ai logs ``inspect-ai``: the
``frameworks`` extra). Re-running this script rewrites them (with new timestamps); it needs
``pip install -e '.[dev]'``.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
import os
import sqlite3
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
TASKS = (1, 6, 11)  # short trajectories with tool calls; task 6 and 11 succeeded in trial 0


def trajectories() -> dict[tuple[int, int], dict]:
    with gzip.open(DATA / "gpt-4o-airline.json.gz", "rt", encoding="utf-8") as fh:
        return {(r["task_id"], r["trial"]): r for r in json.load(fh)}


def _text(m: dict) -> str:
    return m.get("content") or ""


# -- OpenAI Agents SDK ------------------------------------------------------------------------


def _agents_items(traj: list[dict]) -> list[dict]:
    """A chat trajectory as Responses API input items, the SDK's session format."""
    items: list[dict] = []
    for m in traj:
        if m["role"] in ("system", "user"):
            items.append({"role": m["role"], "content": _text(m)})
        elif m["role"] == "assistant":
            if _text(m):
                items.append({"role": "assistant", "content": _text(m)})
            for call in m.get("tool_calls") or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        elif m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": _text(m)})
    return items


async def write_agents_sdk(path: Path, records: dict) -> None:
    from agents import SQLiteSession

    for task in TASKS:
        session = SQLiteSession(f"airline-{task}", str(path))
        try:
            await session.add_items(_agents_items(records[task, 0]["traj"]))
        finally:
            session.close()


# -- LangGraph ----------------------------------------------------------------------------------


def _lc_messages(traj: list[dict], task: int, trial: int) -> list:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out = []
    for i, m in enumerate(traj):
        mid = f"t{task}-{trial}-{i}"
        if m["role"] == "system":
            out.append(SystemMessage(_text(m), id=mid))
        elif m["role"] == "user":
            out.append(HumanMessage(_text(m), id=mid))
        elif m["role"] == "assistant":
            calls = [
                {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]), "id": c["id"]}
                for c in m.get("tool_calls") or []
            ]
            out.append(AIMessage(_text(m), tool_calls=calls, id=mid))
        else:
            out.append(ToolMessage(_text(m), tool_call_id=m["tool_call_id"], name=m.get("name"), id=mid))
    return out


def write_langgraph(path: Path, records: dict) -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    script: list = []

    def model(state):  # the recorded reply (none when the recording ends on the customer's words)
        return {"messages": [script.pop(0)] if script else []}

    def tools(state):  # the recorded results of the calls just made
        n = len(state["messages"][-1].tool_calls)
        return {"messages": [script.pop(0) for _ in range(n)]}

    def route(state):
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    def after_tools(state):  # a recording may end on a tool's result
        return "model" if script else END

    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route)
    g.add_conditional_edges("tools", after_tools)
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        app = g.compile(checkpointer=SqliteSaver(conn))
        for task in TASKS:
            config = {"configurable": {"thread_id": f"airline-{task}"}}
            # the system prompt lives in the model node, as LangGraph apps usually keep it, not in
            # the state (every checkpoint would store its 10 KB again)
            messages = _lc_messages(records[task, 1]["traj"][1:], task, 1)
            turns: list[list] = []  # each user turn: the system prompt and/or the customer's words first
            for m in messages:
                if m.type in ("system", "human") and (not turns or turns[-1][-1].type not in ("system", "human")):
                    turns.append([])
                turns[-1].append(m)
            for turn in turns:
                lead = [m for m in turn if m.type in ("system", "human")]
                script[:] = turn[len(lead) :]
                app.invoke({"messages": lead}, config)
            # a fork: back to the checkpoint before the customer's last message, where trial 2's
            # customer said something else (the graph's model answers with trial 2's reply)
            other = _lc_messages(records[task, 2]["traj"][1:], task, 2)
            humans = [i for i, m in enumerate(messages) if m.type == "human"]
            before = next(
                s
                for s in app.get_state_history(config)
                if len(s.values.get("messages", [])) == humans[-1] and not s.next
            )
            said = [
                i
                for i, m in enumerate(other[:-1])
                if m.type == "human" and other[i + 1].type == "ai" and other[i + 1].content
            ]
            alt = next((i for i in said if i >= humans[-1]), said[-1])
            script[:] = [other[alt + 1].model_copy(update={"tool_calls": []})]
            app.invoke({"messages": [HumanMessage(other[alt].content, id=other[alt].id)]}, before.config)
    finally:
        conn.close()


# -- Google ADK ---------------------------------------------------------------------------------


async def write_adk(path: Path, records: dict) -> None:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
    for task in TASKS:
        traj = records[task, 2]["traj"]
        session = await service.create_session(
            app_name="airline",
            user_id=f"customer-{task}",
            session_id=f"airline-{task}",
            state={"instructions": _text(traj[0])[:60] + "..."},
        )
        invocation = ""
        for i, m in enumerate(traj[1:], 1):
            if m["role"] == "user":
                invocation = f"inv-{task}-{i}"
                content = types.Content(role="user", parts=[types.Part(text=_text(m))])
                author = "user"
            elif m["role"] == "assistant":
                parts = [types.Part(text=_text(m))] if _text(m) else []
                parts += [
                    types.Part(
                        function_call=types.FunctionCall(
                            name=c["function"]["name"], args=json.loads(c["function"]["arguments"]), id=c["id"]
                        )
                    )
                    for c in m.get("tool_calls") or []
                ]
                content = types.Content(role="model", parts=parts)
                author = "airline_agent"
            else:
                content = types.Content(
                    role="user",
                    parts=[
                        types.Part(
                            function_response=types.FunctionResponse(
                                name=m.get("name") or "tool", id=m["tool_call_id"], response={"result": _text(m)}
                            )
                        )
                    ],
                )
                author = "airline_agent"
            await service.append_event(
                session, Event(author=author, invocation_id=invocation, content=content, id=f"ev-{task}-{i}")
            )


# -- inspect-ai ---------------------------------------------------------------------------------


def write_inspect(folder: Path, records: dict) -> Path:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ModelOutput,
    )
    from inspect_ai.scorer import Score, Target, mean, scorer
    from inspect_ai.solver import TaskState, solver
    from inspect_ai.tool import ToolCall

    def chat(traj: list[dict]) -> list:
        out = []
        for m in traj:
            if m["role"] == "system":
                out.append(ChatMessageSystem(content=_text(m)))
            elif m["role"] == "user":
                out.append(ChatMessageUser(content=_text(m)))
            elif m["role"] == "assistant":
                calls = [
                    ToolCall(
                        id=c["id"], function=c["function"]["name"], arguments=json.loads(c["function"]["arguments"])
                    )
                    for c in m.get("tool_calls") or []
                ] or None
                out.append(ChatMessageAssistant(content=_text(m), tool_calls=calls, model="gpt-4o"))
            else:
                out.append(ChatMessageTool(content=_text(m), tool_call_id=m["tool_call_id"], function=m.get("name")))
        return out

    @solver
    def replay():
        async def solve(state: TaskState, generate):
            rec = records[int(state.sample_id), 3]
            state.messages = chat(rec["traj"])
            state.output = ModelOutput.from_content(model="gpt-4o", content=_text(rec["traj"][-1]))
            state.metadata["reward"] = rec["reward"]
            return state

        return solve

    @scorer(metrics=[mean()])
    def reward():
        async def score(state: TaskState, target: Target):
            return Score(value=state.metadata["reward"], explanation="tau-bench's recorded reward")

        return score

    dataset = [Sample(id=task, input=_text(records[task, 3]["traj"][1]), target="") for task in TASKS]
    tokenizers = Path(importlib.util.find_spec("litellm").origin).parent / "litellm_core_utils" / "tokenizers"
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tokenizers))  # no download: litellm ships o200k_base
    (log,) = eval(
        Task(name="airline", dataset=dataset, solver=replay(), scorer=reward()),
        model="mockllm/model",
        log_dir=str(folder),
        display="none",
    )
    if log.status != "success":
        raise SystemExit(f"the inspect eval failed: {log.error}")
    return Path(log.location)


def main() -> None:
    records = trajectories()
    for name in ("agents-sdk-airline.db", "langgraph-airline.db", "adk-airline.db", "inspect-airline.eval"):
        (DATA / name).unlink(missing_ok=True)
    asyncio.run(write_agents_sdk(DATA / "agents-sdk-airline.db", records))
    write_langgraph(DATA / "langgraph-airline.db", records)
    asyncio.run(write_adk(DATA / "adk-airline.db", records))
    with tempfile.TemporaryDirectory() as tmp:
        Path(write_inspect(Path(tmp), records)).replace(DATA / "inspect-airline.eval")
    for name in ("agents-sdk-airline.db", "langgraph-airline.db", "adk-airline.db"):
        # one self-contained file each (no -wal beside it), readable from a read-only folder
        conn = sqlite3.connect(DATA / name)
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("VACUUM")
        conn.close()
    for name in sorted(p.name for p in DATA.glob("*-airline.[de]*")):
        print(f"{name}: {(DATA / name).stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
