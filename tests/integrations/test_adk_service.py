"""SessionkitSessionService: Google ADK's sessions, events and state in a sessionkit store.

An ADK Runner with a scripted model runs on it and a new process resumes the session; the
service's calls are checked on every engine and against ADK's own InMemorySessionService on
the same sequence of calls."""

import asyncio
import functools
import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

import sessionkit as sk

# No ``from __future__ import annotations``: ADK reads a tool's parameter types from its
# annotations, which must be the classes themselves.


@functools.cache
def _adk() -> SimpleNamespace:
    """ADK's classes, imported on first use (not at collection: importing ADK takes seconds)."""
    from google.adk.events import Event, EventActions
    from google.adk.sessions import InMemorySessionService
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    from sessionkit.integrations import adk

    return SimpleNamespace(
        Event=Event,
        EventActions=EventActions,
        InMemorySessionService=InMemorySessionService,
        GetSessionConfig=GetSessionConfig,
        types=types,
        service=adk,
    )


# The scripted model and the agent, written once for this process and for the process that
# resumes the session (it runs this text as its own module).
AGENT = textwrap.dedent(
    '''
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types


    class Scripted(BaseLlm):
        """Answers each request with the next scripted response; records what it was sent."""

        script: list = []
        seen: list = []

        async def generate_content_async(self, llm_request, stream=False):
            self.seen.append([p.text for c in llm_request.contents for p in c.parts if p.text])
            yield self.script.pop(0)


    def text(t):
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=t)]))


    def call(city):
        fc = types.FunctionCall(name="weather", args={"city": city}, id=f"fc-{city}")
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=fc)]))


    def weather(city: str, tool_context) -> dict:
        """The weather of a city; remembers the city for the user and counts the app's calls."""
        tool_context.state["user:last_city"] = city
        tool_context.state["app:calls"] = tool_context.state.get("app:calls", 0) + 1
        tool_context.state["temp:scratch"] = "never stored"
        return {"forecast": f"sunny in {city}"}


    def runner(service, script):
        model = Scripted(model="scripted", script=script)
        agent = LlmAgent(name="helper", model=model, tools=[weather], output_key="last_answer")
        return Runner(agent=agent, app_name="trips", session_service=service), model


    async def ask(runner, text):
        async for _ in runner.run_async(
            user_id="ana", session_id="s1", new_message=types.Content(role="user", parts=[types.Part(text=text)])
        ):
            pass
    '''
)

RESUME = textwrap.dedent(
    """
    import asyncio, json, sys
    import sessionkit as sk
    from sessionkit.integrations.adk import SessionkitSessionService
    from agent_script import ask, runner, text

    async def main():
        store = sk.open_store(sys.argv[1])
        service = SessionkitSessionService(store)
        run, model = runner(service, [text("you are welcome")])
        await ask(run, "thanks")
        session = await service.get_session(app_name="trips", user_id="ana", session_id="s1")
        print(json.dumps({"seen": model.seen, "n_events": len(session.events), "state": session.state}))
        store.close()

    asyncio.run(main())
    """
)


def _load_agent(folder):
    (folder / "agent_script.py").write_text(AGENT)
    sys.path.insert(0, str(folder))
    try:
        import agent_script  # (written by this test)

        return agent_script
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("agent_script", None)


@pytest.mark.slow  # a second interpreter importing ADK: about 20 s on a busy machine
def test_runner_session_resumes_in_a_new_process(tmp_path):
    adk = _adk()
    agent = _load_agent(tmp_path)
    path = tmp_path / "agents.db"

    async def two_turns():
        store = sk.open_store(path)
        service = adk.service.SessionkitSessionService(store)
        await service.create_session(app_name="trips", user_id="ana", session_id="s1", state={"mood": "calm"})
        run, _ = agent.runner(service, [agent.call("Oslo"), agent.text("Oslo is sunny"), agent.text("Rome too")])
        await agent.ask(run, "weather in Oslo?")
        await agent.ask(run, "and Rome?")
        session = await service.get_session(app_name="trips", user_id="ana", session_id="s1")
        store.close()
        return session

    before = asyncio.run(two_turns())
    assert [e.author for e in before.events] == ["user", "helper", "helper", "helper", "user", "helper"]
    assert before.state == {
        "mood": "calm",
        "last_answer": "Rome too",
        "user:last_city": "Oslo",
        "app:calls": 1,
    }

    (tmp_path / "resume.py").write_text(RESUME)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "resume.py"), str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.strip().splitlines()[-1])
    # the new process's model was sent both earlier turns, then the third question
    assert child["seen"] == [["weather in Oslo?", "Oslo is sunny", "and Rome?", "Rome too", "thanks"]]
    assert child["n_events"] == len(before.events) + 2
    assert child["state"] == {**before.state, "last_answer": "you are welcome"}

    store = sk.open_store(path)
    try:
        service = adk.service.SessionkitSessionService(store)
        after = asyncio.run(service.get_session(app_name="trips", user_id="ana", session_id="s1"))
        assert after.events[: len(before.events)] == before.events
        history = store.session(adk.service.store_session_id("trips", "ana", "s1")).get_history()
        assert [m["role"] for m in history] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert history[1]["parts"][0]["type"] == "tool-weather"
        assert history[2]["parts"][0]["output"] == {"forecast": "sunny in Oslo"}
        assert [m["id"] for m in history] == [e.id for e in after.events]
    finally:
        store.close()


# -- the same calls on the service and on ADK's InMemorySessionService ------------------------


def _event(author, text=None, delta=None, *, invocation="inv-1", at=None, event_id=None):
    adk = _adk()
    content = (
        None
        if text is None
        else adk.types.Content(role="user" if author == "user" else "model", parts=[adk.types.Part(text=text)])
    )
    fields = {
        "author": author,
        "invocation_id": invocation,
        "content": content,
        "actions": adk.EventActions(state_delta=dict(delta or {})),
    }
    if at is not None:
        fields["timestamp"] = at
    if event_id is not None:
        fields["id"] = event_id
    return adk.Event(**fields)


async def _script(service):
    """A sequence of calls; returns what each answered, as plain values to compare."""
    adk = _adk()
    out = []

    def seen(session):
        if session is None:
            return None
        return {"id": session.id, "user": session.user_id, "state": session.state, "events": session.events}

    a = await service.create_session(
        app_name="app",
        user_id="u1",
        session_id="s1",
        state={"app:theme": "dark", "user:lang": "nb", "topic": "trips", "temp:draft": 1},
    )
    out.append(seen(a))
    b = await service.create_session(app_name="app", user_id="u2", session_id="s2", state={"user:lang": "en"})
    out.append(seen(b))
    await service.create_session(app_name="other", user_id="u1", session_id="s1", state={"app:theme": "light"})
    base = 1_800_000_000.0
    steps = [
        _event("user", "hello", {"temp:x": 1, "count": 1}, at=base + 1, event_id="e1"),
        _event("helper", "hi", {"app:theme": "blue", "user:lang": "de", "count": 2}, at=base + 2, event_id="e2"),
        _event("helper", None, {"topic": {"nested": [1, 2]}}, at=base + 3, event_id="e3"),
        _event("user", "bye", None, invocation="inv-2", at=base + 4, event_id="e4"),
    ]
    for ev in steps:
        await service.append_event(a, ev)
    await service.append_event(b, _event("user", "other user", {"user:lang": "fr"}, at=base + 5, event_id="f1"))
    out.append(seen(a))
    for config in (
        None,
        adk.GetSessionConfig(num_recent_events=2),
        adk.GetSessionConfig(num_recent_events=0),
        adk.GetSessionConfig(after_timestamp=base + 3),
        adk.GetSessionConfig(num_recent_events=3, after_timestamp=base + 3),
    ):
        out.append(seen(await service.get_session(app_name="app", user_id="u1", session_id="s1", config=config)))
    out.append(seen(await service.get_session(app_name="app", user_id="u1", session_id="nope")))
    out.append(seen(await service.get_session(app_name="other", user_id="u1", session_id="s1")))
    for user in ("u1", "u2", None, "nobody"):
        listed = await service.list_sessions(app_name="app", user_id=user)
        out.append(
            sorted((s.user_id, s.id, json.dumps(s.state, sort_keys=True), len(s.events)) for s in listed.sessions)
        )
    out.append(await service.get_user_state(app_name="app", user_id="u1"))
    await service.delete_session(app_name="app", user_id="u2", session_id="s2")
    await service.delete_session(app_name="app", user_id="u2", session_id="never-was")
    out.append(seen(await service.get_session(app_name="app", user_id="u2", session_id="s2")))
    out.append(sorted(s.id for s in (await service.list_sessions(app_name="app")).sessions))
    return out


def test_same_answers_as_adk_in_memory_service(new_store, engine):
    adk = _adk()
    store = new_store(engine)
    ours = asyncio.run(_script(adk.service.SessionkitSessionService(store)))
    theirs = asyncio.run(_script(adk.InMemorySessionService()))
    assert len(ours) == len(theirs)
    for i, (mine, reference) in enumerate(zip(ours, theirs)):
        assert mine == reference, f"answer {i} differs"
    # the sessions are sessionkit sessions: the events as messages, the deleted one gone
    assert {s.id for s in store.list_sessions()} == {"adk:app:u1:s1"}
    assert [m["id"] for m in store.session("adk:app:u1:s1").get_history()] == ["e1", "e2", "e3", "e4"]


def test_state_scopes_and_crud_on_every_engine(new_store, engine):
    adk = _adk()
    store = new_store(engine)
    service = adk.service.SessionkitSessionService(store)

    async def go():
        s1 = await service.create_session(app_name="app", user_id="u1", state={"app:a": 1, "user:u": "x", "k": True})
        s2 = await service.create_session(app_name="app", user_id="u1", session_id="  padded  ")
        assert s2.id == "padded" and len(s1.id) == 36  # stripped; a uuid4 when none is given
        assert s2.state == {"app:a": 1, "user:u": "x"}  # the app's and the user's state, not s1's own
        await service.append_event(s1, _event("user", "hi", {"app:a": 2, "user:u": "y", "k": False, "temp:t": 0}))
        got = await service.get_session(app_name="app", user_id="u1", session_id="padded")
        assert got.state == {"app:a": 2, "user:u": "y"}
        assert "temp:t" not in (await service.get_session(app_name="app", user_id="u1", session_id=s1.id)).state
        assert s1.state["temp:t"] == 0  # the in-memory session keeps it for the invocation
        other = await service.create_session(app_name="app", user_id="u2", session_id="padded")
        assert other.state == {"app:a": 2}
        listed = await service.list_sessions(app_name="app")
        assert [(s.user_id, s.id) for s in listed.sessions][-1] == ("u2", "padded")
        assert len(listed.sessions) == 3 and all(s.events == [] for s in listed.sessions)
        await service.delete_session(app_name="app", user_id="u1", session_id=s1.id)
        assert await service.get_session(app_name="app", user_id="u1", session_id=s1.id) is None
        assert len((await service.list_sessions(app_name="app", user_id="u1")).sessions) == 1
        assert await service.get_user_state(app_name="app", user_id="u1") == {"u": "y"}
        # a deleted id can be created again, empty
        again = await service.create_session(app_name="app", user_id="u1", session_id=s1.id)
        assert again.events == [] and "k" not in again.state

    asyncio.run(go())


def test_ids_cannot_collide_and_a_rewind_is_a_branch(new_store):
    adk = _adk()
    store = new_store("sqlite")
    service = adk.service.SessionkitSessionService(store)
    key = adk.service.store_session_id
    assert key("a:b", "c", "d") != key("a", "b:c", "d") != key("a", "b", "c:d")
    assert key("a%3Ab", "c", "d") != key("a:b", "c", "d")

    async def go():
        one = await service.create_session(app_name="a:b", user_id="c", session_id="d")
        two = await service.create_session(app_name="a", user_id="b:c", session_id="d")
        await service.append_event(one, _event("user", "first", {"x": 1}, event_id="e1"))
        assert (await service.get_session(app_name="a", user_id="b:c", session_id="d")).events == []
        assert two.state == {}
        s = await service.create_session(app_name="app", user_id="u", session_id="r")
        for i, inv in enumerate(["i1", "i1", "i2", "i2"]):
            await service.append_event(
                s, _event("user" if i % 2 == 0 else "helper", f"m{i}", invocation=inv, event_id=f"m{i}")
            )
        rewind = _event("user", None, invocation="i3", event_id="rw")
        rewind.actions.rewind_before_invocation_id = "i2"
        await service.append_event(s, rewind)
        await service.append_event(s, _event("user", "again", invocation="i4", event_id="m4"))
        got = await service.get_session(app_name="app", user_id="u", session_id="r")
        return [e.id for e in got.events]

    assert asyncio.run(go()) == ["m0", "m1", "m2", "m3", "rw", "m4"]  # every event, in append order
    conversation = store.session(key("app", "u", "r"))
    assert [m["id"] for m in conversation.get_history()] == ["m0", "m1", "rw", "m4"]
    assert [m["id"] for m in conversation.branches("m1")] == ["m2", "rw"]  # the rewound invocation is the other branch


def test_bad_input_gets_clear_errors_and_nothing_is_lost(new_store):
    adk = _adk()
    svc_mod = adk.service
    store = new_store("sqlite")
    service = svc_mod.SessionkitSessionService(store)
    with pytest.raises(TypeError, match="sessionkit Store"):
        svc_mod.SessionkitSessionService("agents.db")

    async def go():
        with pytest.raises(TypeError, match="app_name must be a str"):
            await service.create_session(app_name=3, user_id="u")
        with pytest.raises(ValueError, match="user_id must not be empty"):
            await service.create_session(app_name="app", user_id="")
        with pytest.raises(TypeError, match=r"state\['when'\] is not a JSON value"):
            await service.create_session(app_name="app", user_id="u", state={"when": object()})
        with pytest.raises(TypeError, match="state must be a dict"):
            await service.create_session(app_name="app", user_id="u", state=[1])
        s = await service.create_session(app_name="app", user_id="u", session_id="s", state={"k": 1})
        with pytest.raises(svc_mod.SessionExists, match="already exists") as exists:
            await service.create_session(app_name="app", user_id="u", session_id="s", state={"k": 2})
        assert isinstance(exists.value, sk.SessionKitError)
        with pytest.raises(TypeError, match="GetSessionConfig"):
            await service.get_session(app_name="app", user_id="u", session_id="s", config={"num_recent_events": 1})
        ghost = s.model_copy(update={"id": "ghost"})
        with pytest.raises(svc_mod.AdkSessionNotFound, match="ghost") as missing:
            await service.append_event(ghost, _event("user", "hi"))
        assert isinstance(missing.value, sk.SessionNotFound) and isinstance(missing.value, ValueError)
        with pytest.raises(TypeError, match="must be a google.adk Event"):
            await service.append_event(s, {"author": "user"})
        first = _event("user", "hi", {"k": 5}, event_id="e1")
        await service.append_event(s, first)
        await service.append_event(s, first)  # a retried append: stored and applied once
        assert len(s.events) == 1
        with pytest.raises(sk.UsageError, match="'e1' is already used by another event"):
            await service.append_event(s, _event("user", "other text", event_id="e1"))
        stale = (await service.get_session(app_name="app", user_id="u", session_id="s")).model_copy(deep=True)
        await service.append_event(s, _event("helper", "newer", event_id="e2", at=s.last_update_time + 1))
        with pytest.raises(svc_mod.StaleSession, match="read it again"):
            await service.append_event(stale, _event("helper", "late", event_id="e3", at=s.last_update_time + 2))
        with pytest.raises(TypeError, match="is not a JSON value"):
            await service.append_event(s, _event("helper", "bad", {"v": object()}, event_id="e4"))
        return await service.get_session(app_name="app", user_id="u", session_id="s")

    kept = asyncio.run(go())
    assert [e.id for e in kept.events] == ["e1", "e2"]
    assert kept.state == {"k": 5}
