"""Limits (H5): body size (413), concurrent runs and queue length (429)."""

from __future__ import annotations

import json
import socket

from live_server import HANG, TOKEN, Gate, echo, echo_agent, wait_idle

import sessionkit as sk
from sessionkit.testing import ScriptedModel


def test_bodies_over_the_limit_get_413_by_length_or_by_stream(serve, store):
    live = serve(echo_agent(), store, max_body_bytes=1_000)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "b"})
        big = {"text": "x" * 2_000}
        r = c.post("/sessions/b/messages", json=big)  # Content-Length says it all
        assert (r.status_code, r.json()) == (413, {"error": "body_too_large"})
        r = c.post("/sessions", json={"sessionId": "c", "pad": "y" * 2_000})
        assert r.status_code == 413

        def chunks():  # no Content-Length: the server counts while it reads
            for _ in range(20):
                yield b" " * 100
            yield json.dumps({"text": "late"}).encode()

        r = c.post("/sessions/b/messages", content=chunks(), headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()) == (413, {"error": "body_too_large"})
        ok = c.post("/sessions/b/messages", json={"text": "x" * 900})
        assert ok.status_code == 202
        wait_idle(c, "b")
        assert [m["text"][:1] for m in c.get("/sessions/b").json()["messages"]] == ["x"]


def test_one_large_chunk_without_content_length_gets_413(serve, store):
    live = serve(echo_agent(), store, max_body_bytes=1_000)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "b"})
    with socket.create_connection(("127.0.0.1", live.port), timeout=HANG) as s:
        body = json.dumps({"text": "z" * 5_000}).encode()
        head = (
            f"POST /sessions/b/messages HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        s.sendall(head.encode() + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        answer = s.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 413") and "body_too_large" in answer


def test_more_concurrent_runs_than_allowed_get_429(serve, store):
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 10)
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store, max_concurrent_runs=1)
    with live.client() as c:
        for sid in ("a", "b"):
            c.post("/sessions", json={"sessionId": sid})
        assert c.post("/sessions/a/messages", json={"text": "busy"}).json() == {"runId": "a.1", "queued": False}
        assert gate.entered.wait(HANG)
        r = c.post("/sessions/b/messages", json={"text": "wants a run"})
        assert (r.status_code, r.json()) == (429, {"error": "too_busy"})
        # joining the active run needs no new run
        assert c.post("/sessions/a/messages", json={"text": "more"}).json() == {"runId": "a.1", "queued": True}
        gate.opened.set()
        wait_idle(c, "a")
        assert c.post("/sessions/b/messages", json={"text": "now"}).json() == {"runId": "b.1", "queued": False}
        state = wait_idle(c, "b")
    assert [m["text"] for m in state["messages"]] == ["now"]  # the refused message was not recorded


def test_a_full_queue_gets_429(serve, store):
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 10)
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store, max_queued=2)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "q"})
        c.post("/sessions/q/messages", json={"text": "start"})
        assert gate.entered.wait(HANG)
        assert c.post("/sessions/q/messages", json={"text": "1"}).status_code == 202
        assert c.post("/sessions/q/messages", json={"text": "2", "mode": "steer"}).status_code == 202
        r = c.post("/sessions/q/messages", json={"text": "3"})
        assert (r.status_code, r.json()) == (429, {"error": "too_busy"})
        assert c.get("/sessions/q").json()["queued"] == 2
        gate.opened.set()
        state = wait_idle(c, "q")
    assert [m["text"] for m in state["messages"]] == ["start", "1", "2"]
    users = [m["parts"][0]["text"] for m in store.session("q").get_history() if m["role"] == "user"]
    assert users == ["start", "2", "1"]
