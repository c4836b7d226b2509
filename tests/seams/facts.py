"""A store holding every kind of fact sessionkit keeps, and the check that two stores answer
every public read alike.

:func:`build_every_fact_store` fills a store (any engine) with: branches (a regenerated
reply, a second root), a compaction, labels on a message and on a branch, agent runs with
their events (a completed run calling a tool, a failed run, the runs of a ``compare``
variant and of a ``replay``, whose ``meta`` say so), message vectors of a deterministic
embedder, tool calls with string and JSON inputs and outputs, a message over 1 MiB,
the ids ``constructor`` and ``__proto__``, texts with control characters (no NUL) and
emoji, and a session holding only run events. Everything runs offline (the scripted
model). :func:`assert_same_reads` checks that another store answers every public read of
it exactly as the first does: what a surface that moves a store (exports, imports,
copies) must keep.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import sessionkit as sk

#: Text with control characters (tab, escape, bell, DEL, C1) but no NUL, and emoji.
ODD_TEXT = "tab\there\x01\x1b[31m\x07\x7f\x85 line\r\nnext 😀👍🏽 家族👨‍👩‍👧"
#: The views of ``store.sql``.
VIEWS = (
    "messages",
    "sessions",
    "compactions",
    "runs",
    "events",
    "labels",
    "paths",
    "turns",
    "tool_calls",
    "embeddings",
)
#: Columns numbering rows in store-wide write order: two stores may number the same facts
#: differently (an engine reserves numbers in blocks, a copy writes session by session).
_STORE_WIDE = {"messages": ("seq",), "labels": ("seq",)}


def letters(texts: list[str]) -> list[list[float]]:
    """A deterministic embedder: counts of a, e, i, o, u, of every other character, and the length."""
    out = []
    for t in texts:
        vowels = [float(t.count(c)) for c in "aeiou"]
        out.append([*vowels, float(len(t) - sum(vowels)) / 3.0, float(len(t)) + 0.1])
    return out


def _text(mid: str, role: str, text: str, **extra: Any) -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}], **extra}


def _tool_turn(session: sk.Session) -> None:
    """A tool call with a JSON input and output, and one with string input and output."""
    session.append(_text("t-user", "user", "Add 2 and 3, then echo it."))
    session.append(
        {
            "id": "t-call",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "Calling the tools."},
                {
                    "type": "tool-add",
                    "toolCallId": "call-json",
                    "state": "output-available",
                    "input": {"a": 2, "b": [3, {"deep": None}]},
                    "output": {"sum": 5, "ok": True},
                },
                {
                    "type": "tool-echo",
                    "toolCallId": "call-str",
                    "state": "output-available",
                    "input": "raw text input \x01 😀",
                    "output": "raw text output\n\ttabbed",
                },
                {
                    "type": "tool-fetch",
                    "toolCallId": "call-err",
                    "state": "output-error",
                    "input": {"url": "http://127.0.0.1:9/none"},
                    "errorText": "connection refused",
                },
            ],
            "metadata": {"usage": {"in": 12, "out": 5, "cost_usd": 0.0021}, "model": "scripted"},
        }
    )


def _otel_trace(path) -> None:
    """A small OTLP JSON file: one agent span with a model call asking for a tool, the
    tool, and a second model call (GenAI conventions). Written by hand (the SDK is not
    needed to describe three spans)."""
    import json

    def attrs(**values: Any) -> list[dict]:
        out = []
        for key, value in values.items():
            key = key.replace("__", ".")
            if isinstance(value, int):
                out.append({"key": key, "value": {"intValue": str(value)}})
            elif isinstance(value, list):
                out.append({"key": key, "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}}})
            else:
                out.append({"key": key, "value": {"stringValue": value}})
        return out

    trace = "5b8efff798038103d269b633813fc60c"
    user = {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}
    call = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
    }
    result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny, 21 C"}]}
    final = {"role": "assistant", "parts": [{"type": "text", "content": "Sunny in Oslo, 21 C."}]}
    start = 1_700_000_000_000_000_000

    def span(sid: str, parent: str, name: str, offset: int, **values: Any) -> dict:
        return {
            "traceId": trace,
            "spanId": sid,
            **({"parentSpanId": parent} if parent else {}),
            "name": name,
            "kind": 1,
            "startTimeUnixNano": str(start + offset * 1_000_000),
            "endTimeUnixNano": str(start + (offset + 1) * 1_000_000),
            "attributes": attrs(**values),
            "status": {},
        }

    chat = {
        "gen_ai__operation__name": "chat",
        "gen_ai__request__model": "gpt-4o",
        "gen_ai__conversation__id": "otel-oslo",
    }
    spans = [
        span(
            "a000000000000001",
            "",
            "invoke_agent weather",
            0,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="weather",
        ),
        span(
            "a000000000000002",
            "a000000000000001",
            "chat gpt-4o",
            1,
            **chat,
            gen_ai__input__messages=json.dumps([user]),
            gen_ai__output__messages=json.dumps([{**call, "finish_reason": "tool_calls"}]),
            gen_ai__usage__input_tokens=12,
            gen_ai__usage__output_tokens=7,
        ),
        span(
            "a000000000000003",
            "a000000000000001",
            "execute_tool get_weather",
            2,
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__name="get_weather",
            gen_ai__tool__call__id="call_1",
            gen_ai__tool__call__arguments=json.dumps({"city": "Oslo"}),
            gen_ai__tool__call__result="sunny, 21 C",
        ),
        span(
            "a000000000000004",
            "a000000000000001",
            "chat gpt-4o",
            3,
            **chat,
            gen_ai__input__messages=json.dumps([user, call, result]),
            gen_ai__output__messages=json.dumps([{**final, "finish_reason": "stop"}]),
            gen_ai__usage__input_tokens=30,
            gen_ai__usage__output_tokens=9,
        ),
    ]
    resource = {"attributes": attrs(service__name="weather-agent")}
    path.write_text(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}))


def _captured(store: sk.Store) -> None:
    """Two litellm completions (offline, ``mock_response``) recorded by ``sk.capture``."""
    import litellm

    question = {"role": "user", "content": "Where is Oslo?"}
    with sk.capture(store, session="captured") as cap:
        first = litellm.completion(model="gpt-4o-mini", messages=[question], mock_response="In Norway.")
        litellm.completion(
            model="gpt-4o-mini",
            messages=[question, first.choices[0].message, {"role": "user", "content": "And Bergen?"}],
            mock_response="Also in Norway.",
        )
    assert cap.errors == []


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def build_every_fact_store(store: sk.Store) -> dict:
    """Fill ``store`` with every kind of fact (see the module docstring); returns notes:
    ``sessions`` (the ids written), ``embedder``, and ``queries`` (texts to rank by)."""
    from sessionkit.prototyping import compare, replay
    from sessionkit.testing import ScriptedModel

    # a tree with branches, a compaction, labels of both targets, odd ids and text
    tree = store.session("tree")
    tree.append(_text("r1", "user", "Deploying v2 failed with a timeout."))
    tree.append(_text("a1", "assistant", "Check the deployment logs first."))
    tree.append(_text("a1b", "assistant", "Roll back to v1, then look again."), parent_id="r1")  # regenerated
    tree.append(_text("u2", "user", ODD_TEXT), parent_id="a1")
    tree.append(_text("constructor", "assistant", "An id of Object.prototype.", metadata={"tag": "x"}))
    tree.append(_text("__proto__", "user", "Another prototype id 🎉"))
    tree.append(_text("r2", "user", "A second root conversation."), parent_id=None)
    tree.on_compaction(lambda messages, ctx: sk.CompactionResult("r1", "u2", "The user's deploy timed out."))
    tree.compact(leaf_id="__proto__")
    tree.add_label("a1", "good", rating=0.75, note="clear " + ODD_TEXT, author="reviewer")
    tree.add_label("a1b", "regenerated", target="branch", rating=-1.0)
    tree.add_label("constructor", "odd-id", author="__proto__")

    # a session whose id is __proto__, with tool calls and a message over 1 MiB
    proto = store.session("__proto__")
    _tool_turn(proto)
    big = _text("big", "assistant", ("A long answer. " * 80_000) + "The end.")
    big["parts"].append(
        {
            "type": "tool-count",
            "toolCallId": "call-big",
            "state": "output-available",
            "input": {"of": "big"},
            "output": 80_000,
        }
    )
    proto.append(big)
    proto.add_label("big", "long", target="branch")

    # agent runs: a completed one calling a tool, a failed one, a variant and a replay
    agent_session = store.session("agent")
    model = ScriptedModel(
        [
            {
                "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}],
                "usage": {"in": 20, "out": 6, "cache_read": 4, "cost_usd": 0.0012},
            },
            {"text": "It is 5. " + ODD_TEXT, "usage": {"in": 9, "out": 4, "cost_usd": 0.0031}},
        ],
        name="scripted-a",
    )
    sk.Agent("helper", "Be helpful.", model, tools=[add]).run_sync("What is 2 + 3?", session=agent_session)
    broken = sk.Agent("broken", "", ScriptedModel([{"error": RuntimeError("provider down")}], name="broken"))
    try:
        broken.run_sync("Will this fail?", session=agent_session)
    except sk.errors.RunFailed:
        pass
    asyncio.run(
        compare(
            "And times 4?",
            agent_session,
            base=sk.Agent("base", "Be helpful.", ScriptedModel([])),
            variants={
                "terse": {"model": ScriptedModel(["20."], name="terse-model"), "instructions": "Be terse."},
                "wordy": sk.Agent("wordy", "Explain.", ScriptedModel(["Five times four is twenty."], name="w")),
            },
        )
    )
    asyncio.run(replay(sk.Agent("again", "Be brief.", ScriptedModel(["Five.", "Twenty."] * 3)), agent_session))

    # run events without any message
    store.run_log.append_events("events-only", [{"kind": "note", "data": {"n": 1}}, {"kind": "note", "data": ODD_TEXT}])

    # labels of a code scorer, a run imported from an OpenTelemetry trace, a litellm capture
    store.score(sk.scorers.tool_error, level="message", progress=False)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        _otel_trace(trace)
        otel_sessions = sk.io.import_otel(store, trace)
    assert [s.session_id for s in otel_sessions] == ["otel-oslo"], otel_sessions
    _captured(store)

    store.embed(letters)
    return {
        "sessions": ["tree", "__proto__", "agent", "events-only", "otel-oslo", "captured"],
        "embedder": letters,
        "queries": ["deploy timeout", "prototype", ODD_TEXT, "It is 5"],
    }


# ---------------------------------------------------------------------------
# Every public read, compared


def _ranked(rows: list[dict], column: str) -> list[dict]:
    """``rows`` with ``column`` (a store-wide number) replaced by its rank within each session."""
    by_session: dict[Any, list[int]] = {}
    for row in rows:
        by_session.setdefault(row["session_id"], []).append(row[column])
    ranks = {sid: {v: i for i, v in enumerate(sorted(vals))} for sid, vals in by_session.items()}
    return [{**row, column: ranks[row["session_id"]][row[column]]} for row in rows]


def _view_rows(store: sk.Store, view: str) -> list[dict]:
    table = store.sql_arrow(f"SELECT * FROM {view}")
    rows = table.to_pylist()
    for column in _STORE_WIDE.get(view, ()):
        rows = _ranked(rows, column)
    return sorted(rows, key=repr)


def _nodes(session: sk.Session) -> list:
    nodes = session.nodes()
    order = {n.seq: i for i, n in enumerate(sorted(nodes, key=lambda n: n.seq))}
    return sorted((n.id, n.parent_id, n.depth, n.role, n.tokens, n.bytes, n.created_at, order[n.seq]) for n in nodes)


def assert_same_reads(src: sk.Store, dst: sk.Store, notes: dict) -> None:
    """``dst`` answers every public read of ``src`` (built by :func:`build_every_fact_store`) alike."""
    assert [(i.id, i.message_count) for i in dst.list_sessions()] == [
        (i.id, i.message_count) for i in src.list_sessions()
    ]
    for sid in notes["sessions"]:
        a, b = src.session(sid), dst.session(sid)
        assert _nodes(b) == _nodes(a), sid
        assert b.latest_leaf() == a.latest_leaf(), sid
        parents = {n.parent_id for n in a.nodes()}
        for leaf in [n.id for n in a.nodes() if n.id not in parents]:
            assert b.get_history(leaf_id=leaf) == a.get_history(leaf_id=leaf), (sid, leaf)
            assert b.get_history(leaf_id=leaf, compacted=False) == a.get_history(leaf_id=leaf, compacted=False)
        assert b.compactions() == a.compactions(), sid
        assert dst.labels(session_id=sid) == src.labels(session_id=sid), sid
        assert dst.runs(sid) == src.runs(sid), sid
        assert dst.events(sid) == src.events(sid), sid
    assert dst.labels() == src.labels()
    for query in notes["queries"]:
        hits = src.similar(query, embedder=notes["embedder"], k=5)
        assert hits, query
        assert dst.similar(query, embedder=notes["embedder"], k=5) == hits, query
    assert dst.similar(("tree", "a1"), k=3) == src.similar(("tree", "a1"), k=3)
    for view in VIEWS:
        expected = _view_rows(src, view)
        got = _view_rows(dst, view)
        assert len(got) == len(expected), view
        assert got == expected, view


def assert_every_fact_present(store: sk.Store) -> None:
    """The builder wrote what it says (so a comparison is never of two empty stores)."""
    counts = {v: store.sql(f"SELECT count(*) AS n FROM {v}")["n"][0] for v in VIEWS}
    assert all(counts[v] > 0 for v in VIEWS), counts
    runs = store.runs("agent")
    assert {r.status for r in runs} >= {"completed", "failed"}
    assert any((r.meta or {}).get("variant") == "terse" for r in runs), [r.meta for r in runs]
    assert any((r.meta or {}).get("replay") == "again" for r in runs), [r.meta for r in runs]
    assert any((r.usage or {}).get("cost_usd") for r in runs), [r.usage for r in runs]
    labels = store.labels()
    assert {label.target for label in labels} == {"message", "branch"}
    assert len(store.session("__proto__").get("big")["parts"][0]["text"]) > 1 << 20
    assert {label.source for label in labels} >= {"human", "code"}, [label.source for label in labels]
    assert any(label.scorer and label.scorer.startswith("tool_error") for label in labels)
    assert store.runs("otel-oslo") and store.events("otel-oslo")
    assert len(store.runs("captured")) == 2
