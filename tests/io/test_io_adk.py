"""Google ADK session databases written by ADK itself (a Runner with a scripted model,
function tools that ADK runs, a rewind), imported and compared event by event with what
``get_session`` reads back."""

import asyncio
import functools
import sqlite3
from types import SimpleNamespace

import pytest
from helpers import weather as forecast

import sessionkit as sk

# No ``from __future__ import annotations`` here: ADK reads the tool's parameter types from
# its annotations, which must be the classes themselves, imported where the tool is made.


@functools.cache
def _adk() -> SimpleNamespace:
    """ADK's classes and what this module builds from them, imported on first use (not at
    collection: importing ADK takes seconds)."""
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.events._rewind_events import _apply_rewinds  # ADK's own rule for the live events
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import DatabaseSessionService
    from google.adk.tools import ToolContext
    from google.genai import types

    class Scripted(BaseLlm):
        """A model that answers each request with the next scripted response."""

        script: list = []

        async def generate_content_async(self, llm_request, stream=False) -> AsyncGenerator[LlmResponse, None]:
            yield self.script.pop(0)

    def weather(city: str, tool_context: ToolContext) -> dict:
        """The weather of a city; remembers the last city asked."""
        tool_context.state["last_city"] = city
        return {"forecast": forecast(city)}

    def text(t):
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=t)]))

    def calls(*cities):
        return LlmResponse(
            content=types.Content(
                role="model",
                parts=[
                    types.Part(function_call=types.FunctionCall(name="weather", args={"city": c}, id=f"fc-{c}"))
                    for c in cities
                ],
            )
        )

    return SimpleNamespace(
        LlmAgent=LlmAgent,
        Runner=Runner,
        DatabaseSessionService=DatabaseSessionService,
        types=types,
        apply_rewinds=_apply_rewinds,
        Scripted=Scripted,
        weather=weather,
        text=text,
        calls=calls,
    )


async def _write(db):
    adk = _adk()
    types = adk.types
    model = adk.Scripted(
        model="scripted",
        script=[
            adk.calls("Oslo", "Rome"),
            adk.text("Oslo and Rome are sunny"),
            adk.text("you are welcome"),
            adk.text("second try"),
            adk.text("hello from another user"),
        ],
    )
    agent = adk.LlmAgent(name="helper", model=model, tools=[adk.weather], output_key="last_answer")
    service = adk.DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db}")
    runner = adk.Runner(agent=agent, app_name="app", session_service=service)

    async def ask(user, sid, text):
        async for _ in runner.run_async(
            user_id=user, session_id=sid, new_message=types.Content(role="user", parts=[types.Part(text=text)])
        ):
            pass

    await service.create_session(app_name="app", user_id="u1", session_id="s1", state={"mood": "calm"})
    await ask("u1", "s1", "weather in Oslo and Rome?")
    await ask("u1", "s1", "thanks")
    second = (await service.get_session(app_name="app", user_id="u1", session_id="s1")).events[-1].invocation_id
    await runner.rewind_async(user_id="u1", session_id="s1", rewind_before_invocation_id=second)
    await ask("u1", "s1", "thanks again")
    await service.create_session(app_name="app", user_id="u2", session_id="s1")
    await ask("u2", "s1", "hi")
    out = {
        key: await service.get_session(app_name="app", user_id=key[0], session_id=key[1])
        for key in (("u1", "s1"), ("u2", "s1"))
    }
    await service.close()
    return out


@pytest.fixture
def adk_db(tmp_path):
    db = tmp_path / "adk.db"
    return db, asyncio.run(_write(db))


def _event_facts(events):
    """What each event says, with function responses listed after the call they answer."""
    out = []
    for e in events:
        parts = e.content.parts if e.content else []
        texts = "".join(p.text for p in parts if p.text)
        calls = [(p.function_call.id, p.function_call.name, p.function_call.args) for p in parts if p.function_call]
        responses = [(p.function_response.id, p.function_response.response) for p in parts if p.function_response]
        if responses and not texts and not calls:
            out += [("result", *r) for r in responses]
            continue
        out.append(("user" if e.author == "user" else "assistant", texts, e.actions.state_delta or {}))
        out += [("call", *c) for c in calls]
    return out


def _message_facts(messages):
    out = []
    for m in messages:
        meta = m["metadata"]["adk"]
        texts = "".join(p["text"] for p in m["parts"] if p["type"] == "text")
        out.append((m["role"], texts, meta.get("actions", {}).get("state_delta", {})))
        tools = [p for p in m["parts"] if p["type"].startswith("tool-")]
        out += [("call", p["toolCallId"], p["type"][5:], p["input"]) for p in tools]
        out += [("result", p["toolCallId"], p["output"]) for p in tools if p["state"] == "output-available"]
    return out


def _fold_order(facts):
    """Each result placed after the calls of its message, in call order (where sessionkit shows it)."""
    results = {f[1]: f for f in facts if f[0] == "result"}
    final, pending = [], []
    for f in facts:
        if f[0] == "result":
            continue
        if f[0] != "call" and pending:
            final += [results[c] for c in pending if c in results]
            pending = []
        final.append(f)
        if f[0] == "call":
            pending.append(f[1])
    final += [results[c] for c in pending if c in results]
    return final


@pytest.mark.slow
def test_live_path_matches_get_session(store, adk_db):
    db, sessions = adk_db
    imported = sk.io.import_adk(store, db)
    # the id s1 is used by two users: both sessions are named app/user/id
    assert [s.session_id for s in imported] == ["app/u1/s1", "app/u2/s1"]
    for (user, _), adk_session in sessions.items():
        session = store.session(f"app/{user}/s1")
        live = _adk().apply_rewinds(adk_session.events)
        history = [
            m
            for m in session.get_history(compacted=False)
            if "rewind_before_invocation_id" not in m["metadata"]["adk"].get("actions", {})
        ]
        assert _message_facts(history) == _fold_order(_event_facts(live)), user


@pytest.mark.slow
def test_rewind_branches_tool_results_and_state(store, adk_db):
    db, sessions = adk_db
    sk.io.import_adk(store, db)
    session = store.session("app/u1/s1")
    events = sessions[("u1", "s1")].events
    # every event is a message, except the function responses folded into their calls
    folded = [e for e in events if e.content and e.content.parts and all(p.function_response for p in e.content.parts)]
    assert len(session) == len(events) - len(folded)
    # the rewind forks the tree at the answer before the rewound invocation
    answer = next(
        m
        for m in session.get_history(compacted=False)
        if m["parts"] and m["parts"][0].get("text") == "Oslo and Rome are sunny"
    )
    children = session.branches(answer["id"])
    assert len(children) == 2
    assert children[0]["parts"][0]["text"] == "thanks"
    assert "rewind_before_invocation_id" in children[1]["metadata"]["adk"]["actions"]
    assert session.latest_leaf()["parts"][0]["text"] == "second try"
    # both calls answered, the tool's state change kept with its call
    call = next(m for m in session.get_history(compacted=False) if any(p["type"] == "tool-weather" for p in m["parts"]))
    assert [(p["toolCallId"], p["state"], p["output"]) for p in call["parts"]] == [
        ("fc-Oslo", "output-available", {"forecast": "sunny in Oslo"}),
        ("fc-Rome", "output-available", {"forecast": "sunny in Rome"}),
    ]
    deltas = [t["actions"]["state_delta"] for t in call["metadata"]["adk"]["tool_events"]]
    assert deltas == [e.actions.state_delta for e in folded]
    assert deltas[-1] == {"last_city": "Rome"}


def test_idempotent_filters_and_progress(adk_db):
    db, sessions = adk_db
    seen = []
    with sk.open_store() as store:
        sk.io.import_adk(store, db, progress=lambda done, total: seen.append((done, total)))
        first = len(store.session("app/u1/s1"))
        sk.io.import_adk(store, db)
        assert len(store.session("app/u1/s1")) == first
        assert [s.session_id for s in sk.io.import_adk(store, db, user_id="u2")] == ["s1"]
    n = sum(len(s.events) for s in sessions.values())
    assert seen[-1] == (n, n)


def test_malformed_events(adk_db, tmp_path):
    db, _ = adk_db
    conn = sqlite3.connect(db)
    eid = conn.execute("SELECT id FROM events WHERE user_id = 'u2' ORDER BY timestamp LIMIT 1").fetchone()[0]
    conn.execute("UPDATE events SET event_data = '{\"author\": 5}' WHERE id = ?", (eid,))
    conn.commit()
    conn.close()
    with sk.open_store() as store:
        no_author = rf"adk.db, session 's1', event {eid}: the event has no 'author'"
        with pytest.raises(sk.io.MalformedInput, match=no_author):
            sk.io.import_adk(store, db)
        assert len(store.session("app/u1/s1")) > 0
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE events (x)").connection.commit()
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match="not a Google ADK session database"):
            sk.io.import_adk(store, other)


def test_events_too_deep_or_not_utf8_name_the_event(adk_db):
    """event_data nested 100,000 deep, or a BLOB that is no UTF-8: MalformedInput naming the file
    and the event (never RecursionError or UnicodeDecodeError)."""
    db, _ = adk_db
    conn = sqlite3.connect(db)
    eid = conn.execute("SELECT id FROM events WHERE user_id = 'u2' ORDER BY timestamp LIMIT 1").fetchone()[0]
    for value, problem in (
        ("[" * 100_000 + "]" * 100_000, "event_data nests too deep to read"),
        (b'{"author": "\xff\xfe"}', "event_data is not UTF-8 text"),
    ):
        conn.execute("UPDATE events SET event_data = ? WHERE id = ?", (value, eid))
        conn.commit()
        with sk.open_store() as store:
            with pytest.raises(sk.io.MalformedInput, match=rf"adk.db, session 's1', event {eid}: {problem}"):
                sk.io.import_adk(store, db)
    conn.close()
