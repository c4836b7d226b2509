"""A body that is JSON but not acceptable is 400 invalid_body with a detail, never 500;
strict Last-Event-ID; stalled clients are dropped.

All of it is decided by the HTTP layer before any store is reached (bodies are refused
before a message is recorded, timeouts close the connection), so these run on a SQLite
store only: on the other engines they would run the same server code again.
"""

from __future__ import annotations

import json
import socket

import pytest
from live_server import AUTH, HANG, TOKEN, echo_agent, wait_idle
from websockets.sync.client import connect

from sessionkit.server._serve import TimedH11Protocol

DEEP = 50_000


@pytest.fixture
def store(new_store):
    """The server's store: a SQLite file (what is checked here never reaches the engine)."""
    return new_store("sqlite", name="server")


BAD_BODIES = {
    "nested 65 deep": b'{"text": "x", "context": ' + b'{"a": ' * 64 + b"1" + b"}" * 64 + b"}",
    "nested 50,000 deep": b"[" * DEEP + b"]" * DEEP,
    "nested 50,000 deep, unclosed": b'{"text": ' + b"[" * DEEP,
    "lone surrogate in text": b'{"text": "hi \\ud800 there"}',
    "lone surrogate in author": b'{"text": "hi", "author": "\\udfff"}',
    "lone surrogate in a context key": b'{"text": "hi", "context": {"\\ud83d": 1}}',
    "NaN": b'{"text": "hi", "context": {"x": NaN}}',
    "Infinity": b'{"text": "hi", "context": {"x": -Infinity}}',
    "not UTF-8": b'{"text": "\xff\xfe"}',
    "a byte order mark": "\ufeff".encode() + b'{"text": "hi"}',
    "a huge integer": b'{"text": "hi", "context": {"n": ' + b"9" * 5000 + b"}}",
    "text a list": b'{"text": ["hi"]}',
    "mode a number": b'{"text": "hi", "mode": 1}',
    "context a string": b'{"text": "hi", "context": "{}"}',
    "context an array": b'{"text": "hi", "context": [1]}',
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_unacceptable_json_bodies_are_400_with_a_detail(serve, store, case):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "b"})
        r = c.post("/sessions/b/messages", content=BAD_BODIES[case], headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (case, r.text)
        body = r.json()
        assert body["error"] == "invalid_body" and isinstance(body["detail"], str) and body["detail"], body
        assert c.get("/sessions/b").json()["messages"] == []


def test_the_depth_limit_is_64_and_surrogate_pairs_are_fine(serve, store):
    live = serve(echo_agent(), store)
    deep_ok = '{"text": "x", "context": ' + '{"a": ' * 62 + "1" + "}" * 62 + "}"
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "b"})
        r = c.post("/sessions/b/messages", content=deep_ok, headers={"Content-Type": "application/json"})
        assert r.status_code == 202, r.text
        r = c.post(
            "/sessions/b/messages",
            content=b'{"text": "emoji \\ud83d\\ude00 pair"}',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 202
        r = c.post("/sessions", content=b'{"sessionId": ' + b"[" * DEEP, headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()["error"]) == (400, "invalid_body")
        wait_idle(c, "b")
    assert "emoji \U0001f600 pair" in [m["parts"][0]["text"] for m in store.session("b").get_history()]


def test_websocket_frames_that_cannot_be_handled_get_invalid_body_and_the_socket_stays(serve, store):
    live = serve(echo_agent(), store, max_body_bytes=500_000)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "w"})
    frames = ["[" * 100_000, '{"text": "\\ud800"}', '{"text": "x", "context": 3}', '{"text": NaN}']
    with connect(f"{live.ws_url}/sessions/w/ws", additional_headers=AUTH, open_timeout=HANG, max_size=2**22) as ws:
        for frame in frames:
            ws.send(frame)
            reply = json.loads(ws.recv(timeout=HANG))
            assert reply["error"] == "invalid_body" and reply["detail"], (frame[:20], reply)
        ws.send(json.dumps({"text": "still here", "context": {"k": "v"}}))
        assert json.loads(ws.recv(timeout=HANG)) == {"runId": "w.1", "queued": False}


@pytest.mark.parametrize("value", ["1_0", "+5", "-1", " 5", "５", "0x5", "1e3", "9" * 19])
def test_last_event_id_is_ascii_digits_only(serve, store, value):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "m"})
        r = c.get("/sessions/m/events", params={"lastEventId": value})
        assert (r.status_code, r.json()) == (400, {"error": "last_event_id_invalid"}), value
        if value.isascii() and value == value.strip():
            r = c.get("/sessions/m/events", headers={"Last-Event-ID": value})
            assert (r.status_code, r.json()) == (400, {"error": "last_event_id_invalid"}), value


def _read_to_close(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the client never does)."""
    received = b""
    while chunk := s.recv(65536):
        received += chunk
    return received


@pytest.mark.slow
def test_a_body_that_never_ends_gets_408(serve, store):
    # (an idle connection is closed after 0.5 s too, so the read below ends soon after the answer)
    live = serve(echo_agent(), store, body_timeout=0.5, uvicorn_config={"timeout_keep_alive": 0.5})
    assert live.app.state.sessionkit.body_timeout == 0.5  # the time the 408 below waited, not the default
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "s"})
    with socket.create_connection(("127.0.0.1", live.port), timeout=HANG) as s:
        # 9 of the 100 bytes announced, and no more: the server gives up on the body
        s.sendall(
            (
                f"POST /sessions/s/messages HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            ).encode()
            + b'{"text": '
        )
        answer = _read_to_close(s).decode()
    assert answer.startswith("HTTP/1.1 408") and "request_timeout" in answer
    with live.client() as c:
        assert c.get("/sessions/s").json()["messages"] == []  # the cut message was not taken


def _watched_protocol(timed_out: list) -> type:
    """sessionkit's protocol, noting ``(client port, time allowed)`` of each connection its
    request timer closes: what closed a connection is then known, not guessed from a clock."""

    class Watched(TimedH11Protocol):
        def _request_timed_out(self) -> None:
            timed_out.append((self.client[1], self._request_timeout))
            super()._request_timed_out()

    return Watched


def _dropped(port: int, payload: bytes, timed_out: list) -> bytes:
    """Send ``payload`` (a request that never completes), read until the server closes the
    connection, and check that the request timer closed it, with the time configured."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as s:
        if payload:
            s.sendall(payload)
        received = _read_to_close(s)
        assert (s.getsockname()[1], 0.5) in timed_out, (payload, timed_out)
    return received


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_stalled_connections_are_dropped_by_sessionkit_serves_protocol(serve, store, monkeypatch):
    monkeypatch.setenv("SESSIONKIT_SERVE_TIMEOUT_REQUEST", "0.5")
    timed_out: list[tuple[int, float]] = []
    live = serve(echo_agent(), store, uvicorn_config={"http": _watched_protocol(timed_out), "timeout_keep_alive": 1})
    # nothing at all, half a request line, headers that never end: closed by the timer, without an answer
    for payload in (b"", b"GET /sessions HT", b"GET /sessions HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1"):
        assert _dropped(live.port, payload, timed_out) == b"", payload
    # a complete request is answered, then the idle keep-alive connection is closed by the server
    with socket.create_connection(("127.0.0.1", live.port), timeout=HANG) as s:
        s.sendall(f"GET /sessions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        answer = _read_to_close(s)
    assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1") == 1
    # an event stream is not a stalled request: it stays open past the timeout. A connection
    # opened after the stream's, stalled, is dropped first; the stream's own timer (had it one)
    # would have run out before that one. Then the stream still delivers the next run's events.
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "open"})
        with socket.create_connection(("127.0.0.1", live.port), timeout=HANG) as s:
            s.sendall(
                f"GET /sessions/open/events HTTP/1.1\r\nHost: [::1]\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
            )
            head = s.recv(65536)
            assert head.startswith(b"HTTP/1.1 200")
            assert _dropped(live.port, b"GET /sessions HT", timed_out) == b""
            assert c.post("/sessions/open/messages", json={"text": "still there?"}).status_code == 202
            received = head
            while b'"run.end"' not in received:
                chunk = s.recv(65536)
                assert chunk, f"the server closed the event stream: {received!r}"
                received += chunk
            assert s.getsockname()[1] not in [port for port, _ in timed_out]
    assert b'"run_id":"open.1"' in received.replace(b" ", b"")
