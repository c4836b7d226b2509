"""Restart safety (H1, H5): sessions, messages, runs and events survive a server restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import httpx
import pytest
from helpers import wait_until
from live_server import AUTH, HANG, TOKEN, Gate, echo, echo_agent, seqs, wait_idle, wait_serving

import sessionkit as sk
from sessionkit.testing import ScriptedModel


@pytest.mark.kill
def test_stop_mid_conversation_then_the_next_server_finishes_the_run(tmp_path, serve, sse):
    path = tmp_path / "chats.db"
    first_store = sk.open_store(path)
    gate = Gate()
    model = ScriptedModel([echo(), {"text": "let me check", "tool_calls": [{"name": "hold", "arguments": {}}]}])
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), first_store)
    with live.client() as c:
        assert c.post("/sessions", json={"sessionId": "chat"}).status_code == 201
        assert c.post("/sessions", json={"sessionId": "quiet"}).status_code == 201  # never gets a message
        reader = sse(f"{live.url}/sessions/chat/events")
        c.post("/sessions/chat/messages", json={"text": "one", "author": "ada"})
        reader.wait_runs_ended(1)
        assert c.post("/sessions/chat/messages", json={"text": "two"}).json() == {"runId": "chat.2", "queued": False}
        assert gate.entered.wait(HANG)
        assert c.post("/sessions/chat/messages", json={"text": "three"}).json() == {"runId": "chat.2", "queued": True}
        reader.wait(lambda fs: any(d.get("kind") == "tool.call" for _, d in fs))
    live.stop()  # mid-run: the run is interrupted, and left for the next server to run again
    assert reader.ended.wait(HANG)
    seen = list(reader.frames)
    first_store.close()

    store = sk.open_store(path)
    live = serve(echo_agent(), store)
    with live.client() as c:
        assert c.get("/sessions/quiet").json()["runs"] == []  # created sessions survive, even empty ones
        # the reader resumes where it stopped: run 2 started again, then run 3 live
        resumed = sse(f"{live.url}/sessions/chat/events", {**AUTH, "Last-Event-ID": str(seen[-1][0])})
        state = wait_idle(c, "chat")
        assert [(r["runId"], r["status"], r["attempts"], r["agentId"]) for r in state["runs"]] == [
            ("chat.1", "completed", 1, "a"),
            ("chat.2", "completed", 2, "echo"),
        ]
        assert [(m["runId"], m["text"], m["queued"]) for m in state["messages"]] == [
            ("chat.1", "one", False),
            ("chat.2", "two", False),
            ("chat.2", "three", True),
        ]
        assert state["messages"][0]["author"] == "ada"
        assert c.post("/sessions/chat/messages", json={"text": "four"}).json() == {"runId": "chat.3", "queued": False}
        frames = resumed.wait(lambda fs: any(d.get("kind") == "run.end" and d["run_id"] == "chat.3" for _, d in fs))
        wait_idle(c, "chat")
    ends = [(d["run_id"], d["status"]) for _, d in seen + frames if d.get("kind") == "run.end"]
    assert ends == [
        ("chat.1", "completed"),
        ("chat.2", "interrupted"),
        ("chat.2", "completed"),
        ("chat.3", "completed"),
    ]
    combined = [i for i, _ in seen] + [i for i, _ in frames]
    assert combined == seqs(store.events("chat")) == list(range(len(combined)))  # each once, seq continuing
    texts = [m["parts"][0]["text"] for m in store.session("chat").get_history()]
    assert texts == ["one", "echo: one", "two", "echo: two", "three", "echo: three", "four", "echo: four"]


CRASHING_SERVER = textwrap.dedent(
    """
    import asyncio, socket, sys
    import uvicorn
    import sessionkit as sk
    from sessionkit.server import create_app
    from sessionkit.testing import ScriptedModel

    async def hold() -> str:
        '''Never returns.'''
        await asyncio.sleep(3600)
        return "late"

    store = sk.open_store(sys.argv[1])
    agent = sk.Agent("a", "", ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}]), tools=[hold])
    app = create_app(agent, store, token=sys.argv[2])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    """
)


def start_crashing_server(tmp_path, path):
    script = tmp_path / "crashing_server.py"
    script.write_text(CRASHING_SERVER)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true")
    proc = subprocess.Popen([sys.executable, str(script), str(path), TOKEN], stdout=subprocess.PIPE, env=env)
    port = int(proc.stdout.readline())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_serving(url, proc)
    except BaseException:
        proc.kill()
        raise
    return proc, url


@pytest.mark.kill
@pytest.mark.slow
def test_a_killed_server_leaves_no_lease_and_its_run_starts_again_on_restart(tmp_path, serve, sse):
    path = tmp_path / "crash.db"
    proc, url = start_crashing_server(tmp_path, path)
    try:
        with httpx.Client(base_url=url, headers=AUTH, timeout=HANG) as c:
            c.post("/sessions", json={"sessionId": "chat"})
            assert c.post("/sessions/chat/messages", json={"text": "doomed"}).json()["runId"] == "chat.1"
            with sk.open_store(path) as peek:
                wait_until(
                    lambda: "tool.call" in [e["kind"] for e in peek.events("chat")],
                    what="the run to reach its tool call",
                )
        proc.send_signal(signal.SIGKILL)
        proc.wait(HANG)
    finally:
        proc.kill()
        proc.wait(HANG)
    store = sk.open_store(path)
    live = serve(echo_agent(), store)  # the kernel dropped the dead server's lease
    with live.client() as c:
        reader = sse(f"{live.url}/sessions/chat/events")
        state = wait_idle(c, "chat")  # the new server ran the accepted message again, without being asked
        assert [(r["runId"], r["status"], r["attempts"]) for r in state["runs"]] == [("chat.1", "completed", 2)]
        frames = reader.wait(lambda fs: sum(d.get("kind") == "run.end" for _, d in fs) >= 2)
        ends = [d for _, d in frames if d.get("kind") == "run.end"]
        assert [(e["run_id"], e["status"], e["error_type"]) for e in ends] == [
            ("chat.1", "interrupted", "ServerStopped"),
            ("chat.1", "completed", None),
        ]
        assert c.post("/sessions/chat/messages", json={"text": "again"}).json() == {"runId": "chat.2", "queued": False}
        reader.wait_runs_ended(3)
        assert seqs(reader.events()) == list(range(len(reader.events())))
    assert [m["parts"][0]["text"] for m in store.session("chat").get_history()] == [
        "doomed",
        "echo: doomed",
        "again",
        "echo: again",
    ]
    store.close()


def _killed_after_saving(store, run_id: str, writer_run_id: str) -> None:
    """A run begun on the session by another program writing to the store (no record of the
    server's for it), stopped after saving its messages, before recording its end."""
    store.run_log.begin("chat", run_id, "two")
    store.run_log.append_events("chat", [{"run_id": run_id, "kind": "run.start", "input": "two"}])
    store.session("chat").append_many(
        [
            {
                "id": "u2",
                "role": "user",
                "parts": [{"type": "text", "text": "two"}],
                "metadata": {"run_id": writer_run_id},
            },
            {
                "id": "a2",
                "role": "assistant",
                "parts": [{"type": "text", "text": "done"}],
                "metadata": {"run_id": writer_run_id},
            },
        ]
    )


@pytest.mark.parametrize("writer", ["the run itself", "someone else"])
def test_a_run_killed_after_saving_its_messages_is_completed_not_409(tmp_path, serve, writer):
    path = tmp_path / "saved.db"
    store = sk.open_store(path)
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "chat"})
        c.post("/sessions/chat/messages", json={"text": "one"})
        wait_idle(c, "chat")
    live.stop()
    _killed_after_saving(store, "chat.2", "chat.2" if writer == "the run itself" else "elsewhere")
    live = serve(echo_agent(), store)
    with live.client() as c:
        runs = c.get("/sessions/chat").json()["runs"]
        r = c.post("/sessions/chat/messages", json={"text": "three"})
        if writer == "the run itself":
            assert [(x["runId"], x["status"]) for x in runs] == [("chat.1", "completed"), ("chat.2", "completed")]
            assert r.status_code == 202 and r.json()["runId"] == "chat.3"
            wait_idle(c, "chat")
        else:
            assert [(x["runId"], x["status"]) for x in runs] == [("chat.1", "completed"), ("chat.2", "interrupted")]
            assert (r.status_code, r.json()) == (409, {"error": "conversation_unrecoverable"})


def test_idle_sessions_are_forgotten_and_reload_from_the_store(serve, store):
    live = serve(echo_agent(), store)
    manager = live.app.state.sessionkit.sessions
    manager.keep_idle = 2
    with live.client() as c:
        for i in range(5):
            c.post("/sessions", json={"sessionId": f"s{i}"})
            c.post(f"/sessions/s{i}/messages", json={"text": f"first {i}"})
            wait_idle(c, f"s{i}")
        assert len(manager.states) <= 3
        for i in range(5):  # each continues where it was, read back from the store
            assert c.post(f"/sessions/s{i}/messages", json={"text": f"second {i}"}).json() == {
                "runId": f"s{i}.2",
                "queued": False,
            }
            state = wait_idle(c, f"s{i}")
            assert [m["runId"] for m in state["messages"]] == [f"s{i}.1", f"s{i}.2"]
        assert len(manager.states) <= 3
