"""An import that adds a new conversation (a root message) to a session that already held
messages warns with ``sk.io.SessionMergeWarning``, naming the sessions (the first few and how
many) and suggesting ``session_prefix``; ``sessionkit import`` prints it on stderr. Importing
the same file again (idempotent: no new root) does not warn, nor does an import under a prefix.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path

import pytest

import sessionkit as sk
from sessionkit.cli import main


def _agents_db(path: Path, conversations: dict[str, list[str]]) -> Path:
    """An OpenAI Agents SDK ``SQLiteSession`` database (its tables as the SDK creates them)."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE agent_sessions (session_id TEXT PRIMARY KEY, created_at TIMESTAMP, updated_at TIMESTAMP);"
        "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, "
        "message_data TEXT NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);"
    )
    for sid, texts in conversations.items():
        conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [
                (sid, json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": t}))
                for i, t in enumerate(texts)
            ],
        )
    conn.commit()
    conn.close()
    return path


def _langgraph_db(path: Path, threads: dict[str, list[str]]) -> Path:
    """A LangGraph ``SqliteSaver`` database, one checkpoint per thread (JSON-serialised)."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', "
        "checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, "
        "metadata BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))"
    )
    for thread, texts in threads.items():
        messages = [
            {"type": "human" if i % 2 == 0 else "ai", "content": t, "id": f"{thread}-lc-{i}"}
            for i, t in enumerate(texts)
        ]
        state = {"ts": "2025-07-01T10:00:00+00:00", "channel_values": {"messages": messages}}
        conn.execute(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint) "
            "VALUES (?, '', 'c1', 'json', ?)",
            (thread, json.dumps(state).encode()),
        )
    conn.commit()
    conn.close()
    return path


def _merges(caught) -> list:
    return [w for w in caught if issubclass(w.category, sk.io.SessionMergeWarning)]


def test_a_second_source_with_the_same_ids_warns_and_a_reimport_does_not(store, tmp_path):
    agents = _agents_db(
        tmp_path / "agents.db", {"airline-1": ["Where is my bag?", "In Oslo."], "airline-2": ["Seat?", "12A."]}
    )
    graph = _langgraph_db(tmp_path / "graph.db", {"airline-1": ["Rebook me", "Done."], "hotel-9": ["Room?", "Yes."]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sk.io.import_openai_agents(store, agents)
        sk.io.import_openai_agents(store, agents)  # again: nothing new
        assert _merges(caught) == []
        sk.io.import_langgraph(store, graph)  # line of the call the warning names
        line = __import__("inspect").currentframe().f_lineno - 1
    (w,) = _merges(caught)
    assert issubclass(w.category, UserWarning)
    assert w.filename == __file__ and w.lineno == line  # points at the caller, not into sessionkit
    text = str(w.message)
    assert f"importing {graph}" in text and "1 session that already held messages: 'airline-1';" in text
    assert "session_prefix=" in text and "--session-prefix" in text
    assert (w.message.sessions, w.message.count, w.message.source) == (("airline-1",), 1, str(graph))
    assert len(store.session("airline-1").roots()) == 2  # what it warned about
    # importing the same file again adds no root: no warning; nor under a prefix of its own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sk.io.import_langgraph(store, graph)
        sk.io.import_langgraph(store, graph, session_prefix="langgraph/")
        sk.io.import_openai_agents(store, agents)
    assert _merges(caught) == []
    assert len(store.session("langgraph/airline-1").roots()) == 1


def test_the_warning_names_the_first_few_sessions_and_counts_them(mem_store, tmp_path):
    ids = [f"c{i}" for i in range(8)]
    sk.io.import_openai_agents(mem_store, _agents_db(tmp_path / "a.db", {i: ["hi", "hello"] for i in ids}))
    with pytest.warns(sk.io.SessionMergeWarning) as record:
        sk.io.import_langgraph(mem_store, _langgraph_db(tmp_path / "g.db", {i: ["yo", "hey"] for i in ids + ["new"]}))
    (w,) = record
    listed = "'c0', 'c1', 'c2', 'c3', 'c4' and 3 more"
    assert f"to 8 sessions that already held messages: {listed}; each now" in str(w.message)
    assert (w.message.sessions, w.message.count) == (("c0", "c1", "c2", "c3", "c4"), 8)


def test_every_importer_family_warns(mem_store, tmp_path):
    """Chat files (one session named by the caller), tree files and a sessionkit export."""
    chat = tmp_path / "chat.jsonl"
    chat.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"role": "user", "content": "something else"}) + "\n")
    sk.io.import_openai(mem_store.session("s"), chat)
    with pytest.warns(sk.io.SessionMergeWarning, match="'s'.*a session of its own .*--session\\)"):
        sk.io.import_openai(mem_store.session("s"), other)
    with pytest.warns(sk.io.SessionMergeWarning, match=r"importing <list> .*'s'"):
        sk.io.import_openai(mem_store.session("s"), [{"role": "user", "content": "a third"}])
    tree = {"message_tree_id": "t1", "prompt": {"message_id": "a", "role": "prompter", "text": "hi", "replies": []}}
    trees = tmp_path / "trees.jsonl"
    trees.write_text(json.dumps(tree) + "\n")
    sk.io.import_oasst(mem_store, trees)
    tree["prompt"]["message_id"] = "b"
    trees.write_text(json.dumps(tree) + "\n")
    with pytest.warns(sk.io.SessionMergeWarning, match="'oasst-t1'"):
        sk.io.import_oasst(mem_store, trees)
    # a sessionkit export of another store holding session "s" with a conversation of its own
    with sk.open_store() as elsewhere:
        elsewhere.session("s").append({"id": "x", "role": "user", "parts": [{"type": "text", "text": "x"}]})
        sk.io.export_jsonl(elsewhere, tmp_path / "export.jsonl")
    with pytest.warns(sk.io.SessionMergeWarning, match="'s'.*a store of its own"):
        sk.io.import_jsonl(mem_store, tmp_path / "export.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every one of them again: nothing new, no warning
        sk.io.import_openai(mem_store.session("s"), chat)
        sk.io.import_openai(mem_store.session("s"), other)
        sk.io.import_oasst(mem_store, trees)
        sk.io.import_jsonl(mem_store, tmp_path / "export.jsonl")
        sk.io.import_openai(mem_store.session("s"), chat, parent_id="x")  # under a message: no new root
    assert len(mem_store.session("s").roots()) == 4


def test_as_an_error_it_comes_once_the_import_is_stored(mem_store, tmp_path):
    sk.io.import_openai_agents(mem_store, _agents_db(tmp_path / "a.db", {"airline-1": ["hi", "hello"]}))
    graph = _langgraph_db(tmp_path / "g.db", {"airline-1": ["yo", "hey"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", sk.io.SessionMergeWarning)
        with pytest.raises(sk.io.SessionMergeWarning):
            sk.io.import_langgraph(mem_store, graph)
    assert len(mem_store.session("airline-1")) == 4


def test_the_cli_prints_the_warning_on_stderr(tmp_path, capsys):
    target = str(tmp_path / "all.db")
    agents = _agents_db(tmp_path / "agents.db", {"airline-1": ["Where is my bag?", "In Oslo."]})
    graph = _langgraph_db(tmp_path / "graph.db", {"airline-1": ["Rebook me", "Done."]})
    assert main(["import", target, str(agents)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["import", target, str(graph)]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("sessionkit: warning: importing ") and err.count("\n") == 1
    assert "'airline-1'" in err and "--session-prefix" in err
    assert "2 new messages, 0 new sessions" in out
    for argv in (
        ["import", target, str(graph)],
        ["import", target, str(graph), "--session-prefix", "lg/"],
        ["import", target, str(agents), "--format", "openai-agents"],
    ):
        assert main(argv) == 0
        assert capsys.readouterr().err == "", argv
    with sk.open_store(target) as store:
        assert {s.id for s in store.list_sessions()} == {"airline-1", "lg/airline-1"}
