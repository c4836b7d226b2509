"""Authentication first (401), tokens, custom authenticators and per-principal namespaces (H4)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
from live_server import AUTH, HANG, TOKEN, async_user_of, echo_agent, user_of, wait_idle
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import sessionkit as sk
from sessionkit.server import create_app

ROUTES = [
    ("POST", "/sessions", {"sessionId": "s"}),
    ("GET", "/sessions/s", None),
    ("DELETE", "/sessions/s", None),
    ("POST", "/sessions/s/messages", {"text": "hi"}),
    ("GET", "/sessions/s/events", None),
    ("GET", "/sessions/s/ws", None),
    ("GET", "/sessions/bad%20id", None),  # 401 comes before 400
    ("GET", "/sessions/never", None),  # ... and before 404
    ("GET", "/elsewhere", None),
    ("PATCH", "/sessions/s", None),
]

REFUSED = {
    "no header": {},
    "wrong token": {"Authorization": "Bearer " + "x" * len(TOKEN)},
    "token one character short": {"Authorization": "Bearer " + TOKEN[:-1]},
    "token with one more character": {"Authorization": "Bearer " + TOKEN + "0"},
    "token as a prefix": {"Authorization": "Bearer " + TOKEN[:16]},
    "bearer without a token": {"Authorization": "Bearer"},
    "another scheme": {"Authorization": "Basic " + TOKEN},
    "no scheme": {"Authorization": TOKEN},
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_every_route_refuses_a_missing_or_wrong_token_with_401(serve, store, case):
    live = serve(echo_agent(), store)
    with live.client() as ok:
        ok.post("/sessions", json={"sessionId": "s"})
    with live.client(headers=REFUSED[case]) as c:
        for method, path, body in ROUTES:
            r = c.request(method, path, json=body)
            assert (r.status_code, r.json()) == (401, {"error": "unauthorized"}), (case, method, path)
            assert r.headers["www-authenticate"] == "Bearer"
        # a body far over the limit is still a 401 when the token is wrong
        r = c.post("/sessions/s/messages", content=b"x" * 2_000_000)
        assert r.status_code == 401
    with pytest.raises(InvalidStatus) as info:
        connect(f"{live.ws_url}/sessions/s/ws", additional_headers=REFUSED[case], open_timeout=HANG)
    assert info.value.response.status_code == 401
    assert json.loads(info.value.response.body) == {"error": "unauthorized"}
    with live.client() as ok:  # nothing happened
        assert ok.get("/sessions/s").json()["messages"] == []


def test_the_right_token_in_any_scheme_case_is_accepted(serve, store):
    live = serve(echo_agent(), store)
    for scheme in ("Bearer", "bearer", "BEARER"):
        r = httpx.post(f"{live.url}/sessions", json={"sessionId": "s"}, headers={"Authorization": f"{scheme} {TOKEN}"})
        assert r.status_code in (200, 201)


def test_tokens_with_spaces_or_beyond_ascii_work(serve, store):
    for token in ("two words and more than 16", "jeton-à-clé-0123456789"):
        live = serve(echo_agent(), sk.open_store(), token=token)
        good = {"Authorization": f"Bearer {token}".encode()}
        assert httpx.post(f"{live.url}/sessions", json={"sessionId": "s"}, headers=good).status_code == 201
        bad = {"Authorization": f"Bearer {token[:-1]}x".encode()}
        assert httpx.get(f"{live.url}/sessions/s", headers=bad).status_code == 401


def test_tokens_are_compared_in_constant_time(serve, store, monkeypatch):
    import hmac

    from sessionkit.server import _app

    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(_app.hmac, "compare_digest", spy)
    live = serve(echo_agent(), store)
    for header in (AUTH, {"Authorization": "Bearer short"}, {"Authorization": "Bearer " + TOKEN * 3}):
        httpx.get(f"{live.url}/sessions/x", headers=header)
    # every comparison saw two digests of equal length, whatever length was sent
    assert len(calls) == 3 and all(a == b == 32 for a, b in calls)


def test_creation_refuses_short_tokens_and_missing_auth(store):
    agent = echo_agent()
    with pytest.raises(ValueError, match="16"):
        create_app(agent, store, token="fifteen-chars!!")
    with pytest.raises(ValueError):
        create_app(agent, store)
    with pytest.raises(TypeError):
        create_app(agent, store, token=b"0123456789abcdefgh")
    with pytest.raises(ValueError):
        create_app(agent, store, token=" 0123456789abcdefgh")
    with pytest.raises(TypeError):
        create_app(agent, store, authenticate="not callable")
    for name in ("max_body_bytes", "max_concurrent_runs", "max_queued", "events_window"):
        with pytest.raises(ValueError):
            create_app(agent, store, token=TOKEN, **{name: 0})
        with pytest.raises(TypeError):
            create_app(agent, store, token=TOKEN, **{name: "10"})
    with pytest.raises(TypeError):
        create_app(agent, "chats.db", token=TOKEN)
    with pytest.raises(TypeError, match="a sessionkit Agent, got object"):
        create_app(object(), store, token=TOKEN)
    with pytest.raises(TypeError, match="a sessionkit Agent, got SimpleNamespace"):
        create_app(SimpleNamespace(run="not callable"), store, token=TOKEN)
    # the failed attempts left no lease behind
    app = create_app(agent, store, token=TOKEN)
    app.state.sessionkit.close()


@pytest.mark.parametrize("authenticate", [user_of, async_user_of], ids=["sync", "async"])
def test_principals_have_their_own_namespaces_and_others_sessions_are_404(serve, store, sse, authenticate):
    live = serve(echo_agent(), store, authenticate=authenticate)
    alice = live.client(headers={"X-User": "alice@example.org"})
    bob = live.client(headers={"X-User": "bob/../evil"})
    assert alice.post("/sessions", json={"sessionId": "chat"}).status_code == 201
    assert bob.post("/sessions", json={"sessionId": "chat"}).status_code == 201  # the same id, another session
    assert alice.post("/sessions", json={"sessionId": "only-alice"}).status_code == 201
    assert alice.post("/sessions/chat/messages", json={"text": "hello"}).json() == {"runId": "chat.1", "queued": False}
    a_state = wait_idle(alice, "chat")
    assert [m["text"] for m in a_state["messages"]] == ["hello"]
    assert bob.get("/sessions/chat").json()["messages"] == []
    for method, path, body in [
        ("GET", "/sessions/only-alice", None),
        ("DELETE", "/sessions/only-alice", None),
        ("POST", "/sessions/only-alice/messages", {"text": "x"}),
        ("GET", "/sessions/only-alice/events", None),
    ]:
        r = bob.request(method, path, json=body)
        assert (r.status_code, r.json()) == (404, {"error": "session_not_found"}), (method, path)
    with pytest.raises(InvalidStatus) as info:
        connect(
            f"{live.ws_url}/sessions/only-alice/ws", additional_headers={"X-User": "bob/../evil"}, open_timeout=HANG
        )
    assert info.value.response.status_code == 404
    assert alice.get("/sessions/only-alice").status_code == 200  # bob's attempts changed nothing
    # no principal in any answer, and none in the events
    reader = sse(f"{live.url}/sessions/chat/events", {"X-User": "alice@example.org"})
    frames = reader.wait(lambda fs: any(d.get("kind") == "run.end" for _, d in fs))
    reader.close()
    assert {d["session_id"] for _, d in frames} == {"chat"} and {d["run_id"] for _, d in frames} == {"chat.1"}
    for text in (alice.get("/sessions/chat").text, json.dumps([d for _, d in frames])):
        assert "alice" not in text and "example.org" not in text
    # refused: no header, None, raising
    assert httpx.get(f"{live.url}/sessions/chat").status_code == 401
    assert httpx.get(f"{live.url}/sessions/chat", headers={"X-User": "boom"}).status_code == 401
    # the stored sessions are namespaced and distinct
    stored = {s.id for s in store.list_sessions()}
    assert len(stored) == 1 and next(iter(stored)).endswith("/chat") and "chat" not in stored
    alice.close()
    bob.close()


VICTIM = "alice@example.org"


def _adversaries(victim: str) -> list[str]:
    """Principal ids built from what the victim's sessions are stored under."""
    import hashlib
    from urllib.parse import quote

    digest = hashlib.sha256(victim.encode()).hexdigest()
    return [
        digest[:16],
        digest,
        digest[:16].upper(),
        f"{digest[:16]}/",
        quote(victim, safe=""),
        f"{digest[:16]}/secret",
        "",
        victim.upper(),
    ]


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", pytest.param("postgresql", marks=pytest.mark.slow)])
@pytest.mark.slow
def test_no_principal_id_reaches_another_principals_sessions(serve, new_store, engine):
    """Whatever a principal id looks like (the victim's hash, its stored key's prefix, the victim
    escaped or in other case), it names a namespace of its own: the victim's session answers 404
    to every route, a message lands in the adversary's own session, and DELETE removes nothing."""
    store = new_store(engine, name="server")
    live = serve(echo_agent(), store, authenticate=user_of)
    with live.client(headers={"X-User": VICTIM}) as alice:
        assert alice.post("/sessions", json={"sessionId": "secret"}).status_code == 201
        assert alice.post("/sessions/secret/messages", json={"text": "alice's words"}).status_code == 202
        wait_idle(alice, "secret")
        before = alice.get("/sessions/secret").json()
    stored_before = {s.id for s in store.list_sessions()}
    for adversary in _adversaries(VICTIM):
        if not adversary.strip():  # an empty principal is refused before any lookup
            assert httpx.get(f"{live.url}/sessions/secret", headers={"X-User": adversary}).status_code == 401
            continue
        with live.client(headers={"X-User": adversary}) as mallory:
            for method, path, body in [
                ("GET", "/sessions/secret", None),
                ("DELETE", "/sessions/secret", None),
                ("GET", "/sessions/secret/events", None),
            ]:
                r = mallory.request(method, path, json=body)
                assert (r.status_code, r.json()) == (404, {"error": "session_not_found"}), (adversary, method)
            # creating the same id makes the adversary's own session, empty
            assert mallory.post("/sessions", json={"sessionId": "secret"}).status_code == 201, adversary
            assert mallory.get("/sessions/secret").json()["messages"] == [], adversary
            assert mallory.post("/sessions/secret/messages", json={"text": "mallory"}).status_code == 202
            wait_idle(mallory, "secret")
            assert mallory.delete("/sessions/secret").status_code == 202, adversary  # its own, deleted
    with live.client(headers={"X-User": VICTIM}) as alice:
        after = alice.get("/sessions/secret").json()
    assert after["messages"] == before["messages"] and [m["text"] for m in after["messages"]] == ["alice's words"]
    history = store.session(next(s for s in stored_before if s.endswith("/secret"))).get_history()
    assert "mallory" not in json.dumps(history)


def test_token_and_authenticate_together(serve, store):
    live = serve(echo_agent(), store, token=TOKEN, authenticate=user_of)
    with live.client() as admin:
        assert admin.post("/sessions", json={"sessionId": "chat"}).status_code == 201
    with live.client(headers={"X-User": "carol"}) as carol:
        assert carol.get("/sessions/chat").status_code == 404  # the token's namespace is its own
        assert carol.post("/sessions", json={"sessionId": "chat"}).status_code == 201
    assert httpx.get(f"{live.url}/sessions/chat").status_code == 401


def test_a_non_string_principal_is_refused(serve, store):
    live = serve(echo_agent(), store, authenticate=lambda request: {"id": "x"})
    assert httpx.get(f"{live.url}/sessions/x").status_code == 401
    live2 = serve(echo_agent(), sk.open_store(), authenticate=lambda request: 42)
    r = httpx.post(f"{live2.url}/sessions", json={"sessionId": "x"})
    assert r.status_code == 201
