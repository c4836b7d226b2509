"""create_session, the SessionStore protocol and FileSessionStore (docs/agents.md)."""

from __future__ import annotations

import json

import pytest

from sessionkit.agent import Agent, ExternalSession, FileSessionStore, SessionStore, create_session
from sessionkit.errors import ModelError, UsageError
from sessionkit.testing.scripted import ScriptedModel


def test_without_a_store_a_session_lives_in_memory_with_a_minted_id():
    a, b = create_session(), create_session()
    assert a.session_id and b.session_id and a.session_id != b.session_id
    named = create_session("chat-1")
    assert named.session_id == "chat-1" and named.get_history() == []
    agent = Agent("a", "", ScriptedModel(["hello"]))
    result = agent.run_sync("hi", session=named)
    assert named.snapshot() == result.messages
    snap = named.snapshot()
    snap[0]["parts"][0]["text"] = "changed"
    assert named.snapshot()[0]["parts"][0]["text"] == "hi"  # a deep copy


def test_with_a_sessionkit_store_it_is_the_stores_session(store):
    session = create_session("s", store=store)
    assert session is store.session("s")
    Agent("a", "", ScriptedModel(["ok"])).run_sync("hi", session=session)
    assert len(store.session("s")) == 2 and store.runs("s")[0].status == "completed"
    minted = create_session(store=store)
    assert minted.session_id and minted.session_id != "s"


class DictStore:
    """The smallest SessionStore: a dict of lists."""

    def __init__(self):
        self.data = {}
        self.saves = []

    def load(self, session_id):
        return list(self.data.get(session_id, []))

    def save(self, session_id, new_messages):
        self.saves.append([m["id"] for m in new_messages])
        self.data.setdefault(session_id, []).extend(new_messages)


def test_runs_load_from_and_save_to_any_session_store():
    backing = DictStore()
    assert isinstance(backing, SessionStore)
    session = create_session("u1", store=backing)
    assert isinstance(session, ExternalSession) and session.session_id == "u1"
    model = ScriptedModel(["Hi Ada!", "You are Ada.", {"error": RuntimeError("down")}])
    agent = Agent("a", "sys", model)

    first = agent.run_sync("I'm Ada", session=session)
    assert backing.saves == [[m["id"] for m in first.messages]]  # one save per run, the user's first
    second = agent.run_sync("Who am I?", session=session)
    assert model.calls[1][1:] == [
        {"role": "user", "content": "I'm Ada"},
        {"role": "assistant", "content": "Hi Ada!"},
        {"role": "user", "content": "Who am I?"},
    ]
    assert session.snapshot() == first.messages + second.messages

    with pytest.raises(ModelError):
        agent.run_sync("fail", session=session)
    assert len(backing.saves) == 2  # nothing saved for the failed run
    assert [r.status for r in session.runs()] == ["completed", "completed", "failed"]
    events = session.events()
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["kind"] == "run.end" and events[-1]["status"] == "failed"
    with pytest.raises(UsageError):
        agent.regenerate_sync(session, first.messages[0]["id"])


def test_file_session_store_keeps_one_jsonl_file_per_session(tmp_path):
    files = FileSessionStore(tmp_path / "sessions")
    session = create_session("chat/1 é", store=files)
    agent = Agent("a", "", ScriptedModel(["one", "two"]))
    first = agent.run_sync("hi", session=session)
    agent.run_sync("again", session=session)

    path = files.path("chat/1 é")
    assert path.parent == tmp_path / "sessions" and path.name == "chat%2F1%20%C3%A9.jsonl"
    lines = path.read_text("utf-8").splitlines()
    assert len(lines) == 4 and json.loads(lines[0]) == first.messages[0]
    # a fresh store object on the same folder reads the same conversation
    again = FileSessionStore(tmp_path / "sessions")
    assert again.load("chat/1 é") == session.snapshot()
    assert again.sessions() == ["chat/1 é"]
    assert again.load("unknown") == []


def test_file_names_never_collide_or_hide(tmp_path):
    files = FileSessionStore(tmp_path)
    names = {files.path(sid).name for sid in ["", "_", ".", "..", ".x", "a", "A", "%41"]}
    assert len(names) == 8
    assert not any(name.startswith(".") for name in names)
    files.save("", [{"id": "m", "role": "user", "parts": []}])
    files.save(".", [{"id": "n", "role": "user", "parts": []}])
    assert sorted(files.sessions()) == ["", "."]


def test_a_torn_last_line_is_skipped_and_the_next_save_starts_cleanly(tmp_path):
    files = FileSessionStore(tmp_path)
    files.save("s", [{"id": "m1", "role": "user", "parts": []}])
    with open(files.path("s"), "ab") as handle:
        handle.write(b'{"id": "m2", "role": "ass')  # a process died mid-write
    assert [m["id"] for m in files.load("s")] == ["m1"]
    files.save("s", [{"id": "m3", "role": "user", "parts": []}])
    assert [m["id"] for m in files.load("s")] == ["m1", "m3"]


def test_create_session_rejects_what_it_cannot_use():
    with pytest.raises(TypeError, match="load"):
        create_session(store=object())
    with pytest.raises(TypeError):
        create_session(42)


def test_every_kind_of_session_is_a_conversation(store):
    """The Conversation protocol (docs/architecture.md): a store's tree and a straight line both
    have it, their runs are recorded where run_log says, and only the tree can branch."""
    from sessionkit.agent.events import Conversation

    tree, line = store.session("t"), create_session("l", store=DictStore())
    assert isinstance(tree, Conversation) and isinstance(line, Conversation)
    assert not isinstance([], Conversation)
    assert (tree.can_branch, line.can_branch) == (True, False)
    assert tree.run_log is store.run_log and line.run_log is not store.run_log
    agent = Agent("a", "", ScriptedModel(["one", "two", "three"]))
    for session in (tree, line):
        result = agent.run_sync("hi", session=session)
        assert [r.run_id for r in session.run_log.runs(session.session_id)] == [result.run_id]
        assert session.get(result.messages[-1]["id"]) == session.latest_leaf()
    first = tree.get_history()[0]["id"]
    agent.run_sync("again", session=tree, at=first)  # a branch under the first message
    assert len(tree.branches(first)) == 2
    with pytest.raises(UsageError, match="straight line"):
        agent.run_sync("again", session=line, at=line.get_history()[0]["id"])
