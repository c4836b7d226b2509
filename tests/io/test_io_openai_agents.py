"""OpenAI Agents SDK session databases, written by the SDK itself (a Runner driven by a
scripted model, function tools run by the SDK), imported and read back item by item
against the SDK's own ``get_items``."""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from types import SimpleNamespace

import pytest
from helpers import weather

import sessionkit as sk

_USAGE: dict = {}  # branch -> the SDK's own get_turn_usage(), filled by _write_advanced


@functools.cache
def _sdk() -> SimpleNamespace:
    """The SDK's classes and what this module builds from them, imported on first use (not at
    collection: importing the SDK and openai takes seconds)."""
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.extensions.memory import AdvancedSQLiteSession
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseReasoningItem,
    )
    from openai.types.responses.response_reasoning_item import Summary

    set_tracing_disabled(True)

    class Scripted(Model):
        """A model that answers each request with the next of its scripted outputs."""

        def __init__(self, outputs):
            self.outputs = list(outputs)

        async def get_response(self, *args, **kwargs):
            n = len(self.outputs)
            usage = Usage(requests=1, input_tokens=10 * n, output_tokens=n, total_tokens=11 * n)
            return ModelResponse(output=self.outputs.pop(0), usage=usage, response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    def say(n, text):
        return ResponseOutputMessage(
            id=f"msg_{n}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )

    def call(n, city):
        return ResponseFunctionToolCall(
            id=f"fc_{n}",
            type="function_call",
            call_id=f"call_{n}",
            name="weather",
            arguments=json.dumps({"city": city}),
            status="completed",
        )

    def reasoning(rid, text):
        return ResponseReasoningItem(id=rid, type="reasoning", summary=[Summary(type="summary_text", text=text)])

    tool = function_tool(weather)

    def agent(outputs):
        return Agent(name="helper", instructions="be brief", model=Scripted(outputs), tools=[tool])

    return SimpleNamespace(
        Runner=Runner,
        SQLiteSession=SQLiteSession,
        AdvancedSQLiteSession=AdvancedSQLiteSession,
        say=say,
        call=call,
        reasoning=reasoning,
        agent=agent,
    )


async def _write_advanced(db):
    """Two turns on main (parallel tool calls, reasoning), then a branch 'alt' from turn 2."""
    sdk = _sdk()
    s = sdk.AdvancedSQLiteSession(session_id="conv-1", db_path=db, create_tables=True)
    try:
        agent = sdk.agent(
            [
                [sdk.reasoning("rs_1", "look up"), sdk.call(1, "Oslo"), sdk.call(2, "Rome")],
                [sdk.say(3, "Oslo and Rome are sunny")],
                [sdk.say(4, "you are welcome")],
                [sdk.say(5, "glad to help")],
                [sdk.call(6, "Paris")],
                [sdk.say(7, "Paris is sunny too")],
            ]
        )
        for question in ("weather in Oslo and Rome?", "thanks"):
            await s.store_run_usage(await sdk.Runner.run(agent, question, session=s))
        await s.create_branch_from_turn(2, "alt")
        for question in ("thanks a lot", "and Paris?"):
            await s.store_run_usage(await sdk.Runner.run(agent, question, session=s))
        branches = [b["branch_id"] for b in await s.list_branches()]
        _USAGE.update({b: await s.get_turn_usage(branch_id=b) for b in branches})
        return {b: await s.get_items(branch_id=b) for b in branches}
    finally:
        s.close()


async def _write_plain(db, session_id, questions):
    sdk = _sdk()
    s = sdk.SQLiteSession(session_id, db)
    try:
        outputs = []
        for n, _ in enumerate(questions):
            outputs += [[sdk.call(100 + n, f"city{n}")], [sdk.say(200 + n, f"answer {n}")]]
        agent = sdk.agent(outputs)
        for q in questions:
            await sdk.Runner.run(agent, q, session=s)
        return await s.get_items()
    finally:
        s.close()


@pytest.fixture
def advanced_db(tmp_path):
    db = tmp_path / "agents.db"
    return db, asyncio.run(_write_advanced(str(db)))


@pytest.fixture
def plain_db(tmp_path):
    db = tmp_path / "plain.db"
    first = asyncio.run(_write_plain(str(db), "alpha", ["q1", "q2"]))
    second = asyncio.run(_write_plain(str(db), "beta", ["q3"]))
    return db, {"alpha": first, "beta": second}


# -- what an item and a message say, read independently on each side -----------------


def _item_facts(item):
    kind = item.get("type")
    if kind in (None, "message"):
        content = item["content"]
        text = content if isinstance(content, str) else "".join(c["text"] for c in content)
        return {"role": item["role"], "text": text}
    if kind == "function_call":
        return {"call": item["call_id"], "name": item["name"], "args": json.loads(item["arguments"])}
    if kind == "function_call_output":
        return {"output_of": item["call_id"], "output": item["output"]}
    if kind == "reasoning":
        return {"reasoning": " ".join(s["text"] for s in item["summary"])}
    raise AssertionError(f"item type {kind} not in this test's script")


def _message_facts(message):
    """[(row, facts)] for a message and the outputs folded into it."""
    meta = message["metadata"]["openai_agents"]
    out = []
    texts = [p["text"] for p in message["parts"] if p["type"] == "text"]
    if texts or not message["parts"]:
        out.append((meta["row"], {"role": message["role"], "text": "".join(texts)}))
    for part in message["parts"]:
        if part["type"] == "reasoning":
            out.append((meta["row"], {"reasoning": part["text"]}))
        elif part["type"].startswith("tool-"):
            out.append((meta["row"], {"call": part["toolCallId"], "name": part["type"][5:], "args": part["input"]}))
    outputs = iter(meta.get("outputs", []))
    for part in message["parts"]:
        if part["type"].startswith("tool-") and part.get("state") == "output-available":
            out.append((next(outputs), {"output_of": part["toolCallId"], "output": part["output"]}))
    return out


def _as_items(history):
    facts = [f for m in history for f in _message_facts(m)]
    return [f for _, f in sorted(facts, key=lambda rf: rf[0])]


# -- tests -------------------------------------------------------------------------------


def test_branches_read_back_item_by_item(store, advanced_db):
    db, by_branch = advanced_db
    assert set(by_branch) == {"main", "alt"}
    sessions = sk.io.import_openai_agents(store, db)
    assert [s.session_id for s in sessions] == ["conv-1"]
    session = store.session("conv-1")
    leaves = {}
    tree = {m["id"]: m for m in _all_messages(session)}
    for mid, m in tree.items():
        if not session.branches(mid):
            leaves[m["metadata"]["openai_agents"]["branch"]] = mid
    assert set(leaves) == {"main", "alt"}
    for branch, items in by_branch.items():
        history = session.get_history(leaf_id=leaves[branch], compacted=False)
        assert _as_items(history) == [_item_facts(i) for i in items], branch
        # the messages keep the items' order (outputs aside, which fold into their calls)
        plain = [_item_facts(i) for i in items if i.get("type") != "function_call_output"]
        in_order = [f for m in history for _, f in _message_facts(m) if "output_of" not in f]
        assert in_order == plain
    # the branches share the first turn and part at the second user message
    fork = [mid for mid in tree if len(session.branches(mid)) == 2]
    assert len(fork) == 1
    assert [c["parts"][0]["text"] for c in session.branches(fork[0])] == ["thanks", "thanks a lot"]
    # the latest leaf is the end of the branch extended last
    assert session.latest_leaf()["id"] == leaves["alt"]
    # every call got its output
    parts = [p for m in tree.values() for p in m["parts"] if p["type"].startswith("tool-")]
    assert len(parts) == 3 and all(p["state"] == "output-available" for p in parts)
    assert {p["output"] for p in parts} == {"sunny in Oslo", "sunny in Rome", "sunny in Paris"}
    assert all(m["role"] != "tool" for m in tree.values())
    # the usage of every turn, per branch, as the SDK reads it back
    records = [r for _, r in store.session_records.get("conv-1", "openai_agents.turn_usage")]
    for branch, turns in _USAGE.items():
        mine = [r for r in records if r["branch"] == branch]
        assert turns and mine
        assert [r["turn"] for r in mine] == [t["user_turn_number"] for t in turns]
        for r, t in zip(mine, turns):
            assert {k: r[k] for k in ("requests", "input_tokens", "output_tokens", "total_tokens")} == {
                k: t[k] for k in ("requests", "input_tokens", "output_tokens", "total_tokens")
            }
    assert sum(r["total_tokens"] for r in records) > 0


def _all_messages(session):
    seen, stack = [], [m for m in session.get_history(compacted=False)[:1]]
    while stack:
        m = stack.pop()
        seen.append(m)
        stack.extend(session.branches(m["id"]))
    return seen


@pytest.mark.slow
def test_plain_sessions_and_idempotence(store, plain_db):
    db, by_session = plain_db
    sessions = sk.io.import_openai_agents(store, db)
    assert [s.session_id for s in sessions] == ["alpha", "beta"]
    for sid, items in by_session.items():
        history = store.session(sid).get_history(compacted=False)
        assert _as_items(history) == [_item_facts(i) for i in items]
        assert history[0]["createdAt"]
    counts = {sid: len(store.session(sid)) for sid in by_session}
    again = sk.io.import_openai_agents(store, db)
    assert {s.session_id: len(s) for s in again} == counts
    # a later turn written by the SDK adds only its own items
    asyncio.run(_write_plain(str(db), "alpha", ["q9"]))
    sk.io.import_openai_agents(store, db, session_ids=["alpha"])
    fresh = asyncio.run(_sdk().SQLiteSession("alpha", str(db)).get_items())
    assert _as_items(store.session("alpha").get_history(compacted=False)) == [_item_facts(i) for i in fresh]
    assert len(store.session("beta")) == counts["beta"]


def test_progress_counts_every_row(plain_db):
    db, by_session = plain_db
    seen = []
    with sk.open_store() as store:
        sk.io.import_openai_agents(store, db, progress=lambda done, total: seen.append((done, total)))
    total = sum(len(items) for items in by_session.values())
    assert seen[-1] == (total, total)


def test_not_an_agents_database(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("hello")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match="notes.db: not a SQLite database"):
            sk.io.import_openai_agents(store, text)
        with pytest.raises(sk.io.MalformedInput, match="no table 'agent_messages'"):
            sk.io.import_openai_agents(store, other)
        with pytest.raises(FileNotFoundError):
            sk.io.import_openai_agents(store, tmp_path / "missing.db")


def test_bad_rows_name_the_row(plain_db):
    db, _ = plain_db
    conn = sqlite3.connect(db)
    bad = conn.execute("SELECT MAX(id) FROM agent_messages WHERE session_id = 'alpha'").fetchone()[0]
    conn.execute('UPDATE agent_messages SET message_data = \'{"type": "function_call"\' WHERE id = ?', (bad,))
    conn.commit()
    conn.close()
    with sk.open_store() as store:
        not_json = rf"plain.db, agent_messages row {bad}: message_data is not JSON"
        with pytest.raises(sk.io.MalformedInput, match=not_json):
            sk.io.import_openai_agents(store, db)
        # the rows before it are stored, so fixing the row and importing again completes the import
        assert len(store.session("alpha")) > 0
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE agent_messages SET message_data = ? WHERE id = ?",
        (json.dumps({"type": "function_call", "call_id": "c9", "name": "weather", "arguments": "{oops"}), bad),
    )
    conn.commit()
    conn.close()
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match=rf"agent_messages row {bad}: tool call arguments are not JSON"):
            sk.io.import_openai_agents(store, db)


def test_rows_too_deep_or_not_utf8_name_the_row(plain_db):
    """JSON nested 100,000 deep, or a BLOB, in a message_data: MalformedInput naming the file and
    the row (never RecursionError or UnicodeDecodeError)."""
    db, _ = plain_db
    conn = sqlite3.connect(db)
    bad = conn.execute("SELECT MAX(id) FROM agent_messages WHERE session_id = 'alpha'").fetchone()[0]
    for value, problem in (
        ("[" * 100_000 + "]" * 100_000, "message_data nests too deep to read"),
        (b'{"type": "\xff\xfe"}', "message_data is not text"),
    ):
        conn.execute("UPDATE agent_messages SET message_data = ? WHERE id = ?", (value, bad))
        conn.commit()
        with sk.open_store() as store:
            with pytest.raises(sk.io.MalformedInput, match=rf"plain.db, agent_messages row {bad}: {problem}"):
                sk.io.import_openai_agents(store, db)
    conn.close()
