"""The Host and Origin checks (``HostGuard``) of the apps sessionkit serves, over real HTTP.

A server on 127.0.0.1 is reachable from any page the user's browser opens: with DNS rebinding
a page of ``attacker.example`` sends its requests with ``Host: attacker.example``; a form or a
``fetch`` of another site sends its ``Origin``. Both must be refused before the app reads or
changes anything; the server's own names keep working.
"""

from __future__ import annotations

import json

import httpx
import pytest
from live_server import AUTH, HANG, TOKEN, LiveServer, echo_agent, wait_idle
from websockets.sync.client import connect

from sessionkit.server import HostGuard, create_view_app

ATTACKER = {"Host": "attacker.example", "Origin": "http://attacker.example"}


def _chat(store, sid: str) -> None:
    store.session(sid).append({"id": "m0", "role": "user", "parts": [{"type": "text", "text": f"secret of {sid}"}]})


@pytest.fixture
def viewer(new_store):
    """``viewer(store, **create_view_app_options) -> LiveServer``."""
    started: list[LiveServer] = []

    def start(store, **options) -> LiveServer:
        live = LiveServer(create_view_app(store, **options)).start()
        started.append(live)
        return live

    yield start
    for live in started:
        live.stop()


def test_the_viewer_answers_its_own_names_only(viewer, new_store):
    store = new_store("sqlite", name="hosts")
    _chat(store, "s1")
    live = viewer(store)
    with httpx.Client(base_url=live.url, timeout=HANG) as c:
        for host in (f"127.0.0.1:{live.port}", f"localhost:{live.port}", "localhost", "LOCALHOST.:80", "[::1]"):
            answer = c.get("/api/sessions", headers={"Host": host})
            assert answer.status_code == 200, host
            assert [r["session_id"] for r in answer.json()["rows"]] == ["s1"]
        for host in ("attacker.example", f"attacker.example:{live.port}", "10.1.2.3", "127.0.0.1.attacker.example", ""):
            for path in ("/api/sessions", "/api/session?id=s1", "/", "/viewer.js"):
                answer = c.get(path, headers={"Host": host})
                assert answer.status_code == 403, (host, path)
                assert answer.json()["error"] == "host_not_allowed" and "secret" not in answer.text
        # HTTP/1.0 without any Host: refused too
        assert _raw(live.port, b"GET /api/sessions HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 403")


def _raw(port: int, request: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_write_from_another_site_deletes_nothing(viewer, new_store):
    store = new_store("sqlite", name="writes")
    for sid in ("s1", "s2", "s3"):
        _chat(store, sid)
    live = viewer(store, write=True)
    own = f"http://127.0.0.1:{live.port}"
    with httpx.Client(base_url=live.url, timeout=HANG) as c:
        # DNS rebinding: the attacker's name and origin
        answer = c.delete("/api/session", params={"id": "s1"}, headers=ATTACKER)
        assert (answer.status_code, answer.json()["error"]) == (403, "host_not_allowed")
        # a page of another site posting to the real address (the browser sends its Origin)
        for origin in ("http://attacker.example", f"http://attacker.example:{live.port}", "null", "file://"):
            answer = c.delete("/api/session", params={"id": "s1"}, headers={"Origin": origin})
            assert (answer.status_code, answer.json()["error"]) == (403, "origin_not_allowed"), origin
        assert sorted(i.id for i in store.list_sessions()) == ["s1", "s2", "s3"]
        # the page the server served, and a client that is no browser (no Origin), may delete
        assert c.delete("/api/session", params={"id": "s1"}, headers={"Origin": own}).status_code == 200
        assert c.delete("/api/session", params={"id": "s2"}).status_code == 200
        # reading from another site's page is the browser's same-origin business, not a change
        assert c.get("/api/sessions", headers={"Origin": "http://attacker.example"}).status_code == 200
    assert [i.id for i in store.list_sessions()] == ["s3"]


def test_allowed_hosts_name_a_reverse_proxy(viewer, new_store):
    store = new_store("sqlite", name="proxy")
    _chat(store, "s1")
    _chat(store, "s2")
    live = viewer(store, write=True, allowed_hosts=["viewer.example.org", ".corp.example"])
    with httpx.Client(base_url=live.url, timeout=HANG) as c:
        for host in ("viewer.example.org", "viewer.example.org:443", "corp.example", "a.b.corp.example"):
            assert c.get("/api/sessions", headers={"Host": host}).status_code == 200, host
        for host in ("example.org", "evilcorp.example", "viewer.example.org.attacker.example"):
            assert c.get("/api/sessions", headers={"Host": host}).status_code == 403, host
        proxied = {"Host": "viewer.example.org", "Origin": "https://viewer.example.org"}
        assert c.delete("/api/session", params={"id": "s1"}, headers=proxied).status_code == 200
        other = {"Host": "viewer.example.org", "Origin": "https://attacker.example"}
        assert c.delete("/api/session", params={"id": "s2"}, headers=other).status_code == 403
    assert [i.id for i in store.list_sessions()] == ["s2"]
    with pytest.raises(ValueError, match="allowed host"):
        HostGuard(None, allowed_hosts=[""])


def test_the_agent_server_checks_host_and_origin_too(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        assert c.post("/sessions", json={"sessionId": "a"}).status_code == 201
        answer = c.get("/sessions", headers={"Host": "attacker.example"})
        assert (answer.status_code, answer.json()["error"]) == (403, "host_not_allowed")
        assert c.get("/openapi.json", headers={"Host": "attacker.example"}).status_code == 403
        answer = c.delete("/sessions/a", headers={"Origin": "http://attacker.example"})
        assert (answer.status_code, answer.json()["error"]) == (403, "origin_not_allowed")
        answer = c.post("/sessions/a/messages", json={"text": "hi"}, headers={"Origin": "http://attacker.example"})
        assert answer.status_code == 403
        assert c.post("/sessions/a/messages", json={"text": "hi"}).status_code == 202
        wait_idle(c, "a")
    assert len(store.session("a")) == 2
    handshake = (
        "GET /sessions/a/ws HTTP/1.1\r\nHost: attacker.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Connection: close\r\n\r\n"
    )
    assert _raw(live.port, handshake.encode()).startswith(b"HTTP/1.1 403")
    with connect(f"{live.ws_url}/sessions/a/ws?lastEventId=0", additional_headers=AUTH, open_timeout=HANG) as ws:
        assert json.loads(ws.recv(timeout=HANG))["seq"] >= 1


def test_the_agent_server_behind_a_proxy(serve, new_store):
    store = new_store("sqlite", name="proxied")
    live = serve(echo_agent(), store, allowed_hosts=["agents.example.org"])
    with httpx.Client(base_url=live.url, timeout=HANG, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        assert c.get("/sessions", headers={"Host": "agents.example.org"}).status_code == 200
        assert c.get("/sessions", headers={"Host": "attacker.example"}).status_code == 403
