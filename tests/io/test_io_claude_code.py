"""Coding-agent session logs (Claude Code JSONL): real excerpts from public repositories
(tests/data/SOURCES.md) and synthetic edge cases, compared record by record with the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import content_text

import sessionkit as sk

DATA = Path(__file__).resolve().parent.parent / "data" / "claude_code"


def _records(*paths):
    out = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def _check_against_log(session, records):
    """Every record with a uuid is its message (same role, text, parent), or, holding only
    tool results, lives on in the parts of the calls it answers."""
    ids = {r["uuid"] for r in records if "uuid" in r}
    folded = {}
    calls = {}
    for m in _every(session):
        for p in m["parts"]:
            if p["type"].startswith("tool-") and m["role"] != "tool":
                calls[p["toolCallId"]] = p
    for r in records:
        if "uuid" not in r:
            continue
        content = (r.get("message") or {}).get("content")
        results = (
            [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if isinstance(content, list)
            else []
        )
        message = session.get(r["uuid"])
        if results and len(results) == len(content) and all(b["tool_use_id"] in calls for b in results):
            assert message is None, r["uuid"]
            folded[r["uuid"]] = r.get("parentUuid")
            for b in results:
                part = calls[b["tool_use_id"]]
                if b.get("is_error"):
                    assert part["state"] == "output-error"
                else:
                    assert part["state"] == "output-available"
                    assert part["output"] == content_text(b["content"])
            continue
        assert message is not None, r["uuid"]
        if r["type"] in ("user", "assistant"):
            role = "tool" if results and len(results) == len(content) else r["message"]["role"]
            assert message["role"] == role
            assert "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text") == content_text(
                r["message"]["content"]
            )
            uses = (
                [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
                if isinstance(content, list)
                else []
            )
            stored = [
                (p["toolCallId"], p["type"][5:], p["input"])
                for p in message["parts"]
                if p["type"].startswith("tool-") and "input" in p
            ]
            assert stored == [(b["id"], b["name"], b["input"]) for b in uses]
        else:
            assert message["role"] == "system"
        parent = r.get("parentUuid") or r.get("logicalParentUuid")
        while parent in folded:
            parent = folded[parent]
        stored_parent = _parent_of(session, r["uuid"])
        assert stored_parent == (parent if parent in ids else None), r["uuid"]


def _every(session):
    return [session.get(mid) for mid in session.to_pandas()["id"]]


def _parent_of(session, mid):
    row = session.to_pandas().set_index("id").loc[mid]
    return None if row["parent_id"] is None or row["parent_id"] != row["parent_id"] else row["parent_id"]


def test_rewind_and_compaction(store):
    path = DATA / "dag_compact_after_rewind.jsonl"
    (session,) = sk.io.import_claude_code(store, path)
    records = _records(path)
    assert session.session_id == "s1" and len(session) == len(records)
    _check_against_log(session, records)
    # the rewind: two prompts under the first answer
    assert [m["id"] for m in session.branches("a1")] == ["b1u", "b2u"]
    # the compaction boundary: read, the summary stands for everything up to it
    (compaction,) = session.compactions()
    summary = next(r for r in records if r.get("isCompactSummary"))
    boundary = next(r for r in records if r.get("subtype") == "compact_boundary")
    assert (compaction.from_id, compaction.to_id) == ("u1", summary["uuid"])
    assert compaction.tokens_before == boundary["compactMetadata"]["preTokens"]
    history = session.get_history()
    assert history[0]["parts"][0]["text"] == content_text(summary["message"]["content"])
    assert [m["id"] for m in history[1:]] == ["p1u", "p1a"]
    assert [m["id"] for m in session.get_history(compacted=False)] == [
        "u1",
        "a1",
        "b2u",
        "b2a",
        "b2u2",
        "b2a2",
        "cb",
        "cs",
        "p1u",
        "p1a",
    ]
    # idempotent
    sk.io.import_claude_code(store, path)
    assert len(session) == len(records) and len(session.compactions()) == 1


def test_sidechains_and_missing_parents(store):
    path = DATA / "sidechain_integrated.jsonl"
    (session,) = sk.io.import_claude_code(store, path)
    records = _records(path)
    _check_against_log(session, records)
    task = session.get("83a7cabd-3642-45d6-ba73-9b9f843b9ab1")
    assert task["parts"][0]["type"] == "tool-Task" and task["parts"][0]["state"] == "output-available"
    assert task["metadata"]["claude_code"]["missingParent"] == "8ae40e91-fa63-40a9-969d-70c0c1d6175e"
    assert task["metadata"]["claude_code"]["usage"]["output_tokens"] == 365
    side = session.get("b674eedd-0d9d-49e7-8116-1f092cd750ed")
    assert side["metadata"]["claude_code"]["isSidechain"] is True
    # a result whose call is not in the log stays a message of its own
    lone = session.get("4899826e-499f-4f24-ae6e-f2ac31cddfd4")
    assert lone["role"] == "tool" and lone["parts"][0]["toolCallId"] == "toolu_011V1hetiJ3pC79EoLTY53Ni"


def _line(uuid, parent, kind, content, *, sid="sess", ts=0, **extra):
    rec = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/w",
        "sessionId": sid,
        "version": "2.1.0",
        "type": kind,
        "uuid": uuid,
        "timestamp": f"2026-01-01T00:00:{ts:02d}.000Z",
    }
    if kind in ("user", "assistant"):
        rec["message"] = {"role": kind, "content": content}
        if kind == "assistant":
            rec["message"].update(id=f"msg_{uuid}", model="claude-x", usage={"input_tokens": 3, "output_tokens": 2})
    else:
        rec["content"] = content
    rec.update(extra)
    return json.dumps(rec)


@pytest.fixture
def project(tmp_path):
    """A project folder: a session with streamed blocks, parallel tool calls (one failing),
    thinking, an image, an edited prompt, a summary line; and a sub-agent's log."""
    folder = tmp_path / "-w"
    (folder / "sess" / "subagents").mkdir(parents=True)
    lines = [
        json.dumps({"type": "summary", "summary": "Fixing the build", "leafUuid": "a4"}),
        json.dumps({"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}}),
        _line("u1", None, "user", "fix the build", ts=1),
        _line("a1", "u1", "assistant", [{"type": "thinking", "thinking": "look first", "signature": "sig"}], ts=2),
        _line(
            "a2",
            "a1",
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}],
            ts=3,
        ),
        _line(
            "a3", "a2", "assistant", [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "x"}}], ts=4
        ),
        _line("r1", "a3", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], ts=5),
        _line("h1", "r1", "system", "PostToolUse hook ran", ts=6, level="info", toolUseID="t1"),
        _line(
            "r2",
            "h1",
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "no such file"}],
                }
            ],
            ts=7,
        ),
        _line("a4", "r2", "assistant", [{"type": "text", "text": "Built."}], ts=8),
        _line(
            "u2",
            "a4",
            "user",
            [
                {"type": "text", "text": "look at this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
            ts=9,
        ),
        _line("u2b", "a4", "user", "actually, run the tests", ts=10),
        _line("a5", "u2b", "assistant", [{"type": "text", "text": "Tests pass."}], ts=11),
    ]
    (folder / "sess.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sub = [
        _line("s1", None, "user", "find the config", ts=3, isSidechain=True, agentId="ag1"),
        _line(
            "s2", "s1", "assistant", [{"type": "text", "text": "It is in x."}], ts=4, isSidechain=True, agentId="ag1"
        ),
    ]
    (folder / "sess" / "subagents" / "agent-ag1.jsonl").write_text("\n".join(sub) + "\n", encoding="utf-8")
    return folder


def test_project_folder(store, project):
    seen = []
    (session,) = sk.io.import_claude_code(store, project, progress=lambda d, t: seen.append((d, t)))
    records = _records(project / "sess.jsonl", project / "sess" / "subagents" / "agent-ag1.jsonl")
    _check_against_log(session, records)
    assert seen[-1] == (len(records), len(records))
    assert len(session) == 11  # 13 records with a uuid, two of them only tool results
    calls = {p["toolCallId"]: p for m in (session.get("a2"), session.get("a3")) for p in m["parts"]}
    assert calls["t1"]["output"] == "ok"
    assert (calls["t2"]["state"], calls["t2"]["errorText"]) == ("output-error", "no such file")
    assert session.get("a1")["parts"] == [
        {"type": "reasoning", "text": "look first", "providerMetadata": {"anthropic": {"signature": "sig"}}}
    ]
    assert session.get("u2")["parts"][1] == {"type": "file", "mediaType": "image/png", "data": "iVBORw0KGgo="}
    assert [m["id"] for m in session.branches("a4")] == ["u2", "u2b"]
    assert session.latest_leaf()["id"] == "s2"  # the sub-agent's log is read after the session's
    assert [m["id"] for m in session.get_history(leaf_id="a5")] == ["u1", "a1", "a2", "a3", "h1", "a4", "u2b", "a5"]
    assert store.session_records.get("sess", "claude_code.summary") == [
        (0, {"summary": "Fixing the build", "leafUuid": "a4"})
    ]
    before = len(session)
    sk.io.import_claude_code(store, project)
    assert len(session) == before
    assert len(store.session_records.get("sess", "claude_code.summary")) == 1


def test_bad_lines_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(_line("u1", None, "user", "hi") + "\n" + '{"uuid": "u2", "type": "user"}\n', encoding="utf-8")
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match=r"bad.jsonl, line 2: user record has no 'message' object"):
            sk.io.import_claude_code(store, path)
        assert store.session("sess").get("u1") is not None  # the lines before it are stored
    path.write_text(_line("u1", None, "user", "hi") + "\n{oops\n", encoding="utf-8")
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput, match=r"bad.jsonl, line 2: not valid JSON"):
            sk.io.import_claude_code(store, path)
        with pytest.raises(FileNotFoundError):
            sk.io.import_claude_code(store, tmp_path / "none.jsonl")
