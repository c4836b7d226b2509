"""Importing the agent frameworks' stores and logs: rate and peak memory, measured.

For each source, N messages (100,000 by default: 1,000 conversations of 100) are written
with the framework's own code, then imported into a fresh SQLite store by the
``sessionkit.io`` importer, in a child process of its own. Printed per source: the
framework's records read (tool results fold into their calls, so 100 records make 75
messages), the messages stored, the rate, and the peak memory growth of the import (the child's peak
resident size during the import minus its size before it).

* openai-agents: ``SQLiteSession.add_items`` (user, function call, its output, answer);
* langgraph: ``SqliteSaver.put`` of a checkpoint every 10 messages, each holding the whole
  message list so far (as LangGraph writes them), tool calls answered by tool messages;
* adk: sessions made by ``DatabaseSessionService``, events stored through ADK's own
  ``StorageEvent.from_event`` in bulk (``append_event`` one at a time would take minutes);
* claude-code: JSONL records linked by ``uuid``/``parentUuid``, tool use and results.

    python benchmarks/frameworks_bench.py              # 100,000 messages per source
    python benchmarks/frameworks_bench.py --n 20000    # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PER = 100  # messages per conversation


def build_openai_agents(path: Path, n: int) -> int:
    from agents import SQLiteSession

    async def write():
        for c in range(n // PER):
            s = SQLiteSession(f"conv-{c}", str(path))
            items = []
            for t in range(PER // 4):
                call = f"call-{c}-{t}"
                items += [
                    {"role": "user", "content": f"question {t} of conversation {c}"},
                    {"type": "function_call", "call_id": call, "name": "lookup", "arguments": json.dumps({"q": t})},
                    {"type": "function_call_output", "call_id": call, "output": f"result {t}"},
                    {"role": "assistant", "content": [{"type": "output_text", "text": f"answer {t}"}]},
                ]
            await s.add_items(items)
            s.close()

    asyncio.run(write())
    return (n // PER) * (PER // 4) * 3  # the outputs fold into their calls


def build_langgraph(path: Path, n: int) -> int:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    kept = 0
    for c in range(n // PER):
        config = {"configurable": {"thread_id": f"thread-{c}", "checkpoint_ns": ""}}
        messages: list = []
        for t in range(PER // 4):
            call = f"call-{c}-{t}"
            messages += [
                HumanMessage(f"question {t}", id=f"h-{c}-{t}"),
                AIMessage("", id=f"a-{c}-{t}", tool_calls=[{"name": "lookup", "args": {"q": t}, "id": call}]),
                ToolMessage(f"result {t}", tool_call_id=call, name="lookup", id=f"t-{c}-{t}"),
                AIMessage(f"answer {t}", id=f"b-{c}-{t}"),
            ]
            kept += 3
            if len(messages) % 10 == 0 or t == PER // 4 - 1:
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"messages": list(messages)}
                config = saver.put(config, checkpoint, {"source": "loop", "step": len(messages)}, {})
    conn.close()
    return kept


def build_adk(path: Path, n: int) -> int:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.schemas.v1 import StorageEvent
    from google.genai import types
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session as OrmSession

    async def sessions():
        service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
        out = [
            await service.create_session(app_name="bench", user_id="u", session_id=f"s-{c}") for c in range(n // PER)
        ]
        await service.close()
        return out

    made = asyncio.run(sessions())
    engine = create_engine(f"sqlite:///{path}")
    start = time.time()
    with OrmSession(engine) as orm:
        for c, session in enumerate(made):
            rows = []
            for t in range(PER // 4):
                call = f"fc-{c}-{t}"
                parts = [
                    ("user", types.Part(text=f"question {t}")),
                    ("bot", types.Part(function_call=types.FunctionCall(name="lookup", args={"q": t}, id=call))),
                    (
                        "bot",
                        types.Part(
                            function_response=types.FunctionResponse(name="lookup", id=call, response={"result": t})
                        ),
                    ),
                    ("bot", types.Part(text=f"answer {t}")),
                ]
                for k, (author, part) in enumerate(parts):
                    moment = start + c + t * 0.01 + k * 0.001
                    event = Event(
                        author=author,
                        invocation_id=f"inv-{c}-{t}",
                        timestamp=moment,
                        content=types.Content(role="user" if author == "user" else "model", parts=[part]),
                    )
                    rows.append(StorageEvent.from_event(session, event))
            orm.add_all(rows)
            orm.commit()
    engine.dispose()
    return (n // PER) * (PER // 4) * 3


def build_claude_code(path: Path, n: int) -> int:
    with open(path, "w", encoding="utf-8") as fh:
        for c in range(n // PER):
            parent = None
            for t in range(PER // 4):
                call = f"toolu-{c}-{t}"
                for kind, content in (
                    ("user", f"question {t}"),
                    (
                        "assistant",
                        [{"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"echo {t}"}}],
                    ),
                    ("user", [{"type": "tool_result", "tool_use_id": call, "content": f"{t}"}]),
                    ("assistant", [{"type": "text", "text": f"answer {t}"}]),
                ):
                    uid = str(uuid.uuid4())
                    fh.write(
                        json.dumps(
                            {
                                "parentUuid": parent,
                                "isSidechain": False,
                                "sessionId": f"s-{c}",
                                "type": kind,
                                "uuid": uid,
                                "timestamp": "2026-01-01T00:00:00.000Z",
                                "message": {"role": kind, "content": content},
                            }
                        )
                        + "\n"
                    )
                    parent = uid
    return (n // PER) * (PER // 4) * 3


BUILDERS = {
    "openai-agents": (build_openai_agents, "agents.db", "import_openai_agents"),
    "langgraph": (build_langgraph, "checkpoints.db", "import_langgraph"),
    "adk": (build_adk, "adk.db", "import_adk"),
    "claude-code": (build_claude_code, "session.jsonl", "import_claude_code"),
}

# Runs in a fresh interpreter: the import alone, its time and the peak memory it adds: the
# highest resident size during the import (VmHWM, reset just before it; ru_maxrss would carry
# the parent's size across fork) minus the resident size before it.
_CHILD = r"""
import json, sys, time
import sessionkit as sk


def status_kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("this benchmark reads /proc/self/status (Linux)")


fn, source, target = sys.argv[1:4]
importer = getattr(sk.io, fn)
store = sk.open_store(target)
import gc; gc.collect()
before = status_kb("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:  # resets the peak (VmHWM) to the size now
    fh.write("5")
start = time.perf_counter()
importer(store, source, progress=False)
seconds = time.perf_counter() - start
peak = status_kb("VmHWM")  # the highest resident size since the reset: during the import
messages = store.stats()["messages"]
store.close()
print(json.dumps({"seconds": seconds, "growth_kb": peak - before, "messages": messages}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages per source (default 100,000)")
    parser.add_argument("--only", choices=sorted(BUILDERS), action="append", help="measure only these sources")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    print(
        f"{'source':<15}{'records':>9}{'messages':>10}{'build s':>9}{'import s':>10}{'records/s':>11}"
        f"{'peak growth MB':>16}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or BUILDERS:
            build, filename, fn = BUILDERS[name]
            source = Path(tmp) / filename
            start = time.perf_counter()
            expected = build(source, args.n)
            built = time.perf_counter() - start
            target = Path(tmp) / f"{name}.sessionkit.db"
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, fn, str(source), str(target)],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{name}: the import failed:\n{proc.stderr}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if result["messages"] != expected:
                raise SystemExit(f"{name}: {result['messages']} messages stored, {expected} expected")
            records = (args.n // PER) * PER  # the framework's own records: items, messages, events, lines
            print(
                f"{name:<15}{records:>9,}{result['messages']:>10,}{built:>9.1f}{result['seconds']:>10.1f}"
                f"{records / result['seconds']:>11,.0f}{result['growth_kb'] / 1024:>16.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
