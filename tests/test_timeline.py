"""A run's timeline (sessionkit.widgets._timeline, docs/viewer.md): its model and tool calls,
their durations equal to what ``store.sql`` derives from the ``events`` view, for an agent's run on
every engine, a run imported from OpenTelemetry spans and a call captured from litellm."""

from __future__ import annotations

import json

import pytest

import sessionkit as sk
from sessionkit.widgets import viewer

# Each model call: from the turn.start before its usage event (same run) to the usage event.
MODEL_SQL = """
SELECT u.run_id, u.seq,
       epoch(u.ts - (SELECT max_by(s.ts, s.seq) FROM events s WHERE s.session_id = u.session_id
                     AND s.run_id = u.run_id AND s.kind = 'turn.start' AND s.seq < u.seq)) AS duration_s,
       CAST(json_extract(u.data, '$.in') AS BIGINT) AS tokens_in,
       CAST(json_extract(u.data, '$.out') AS BIGINT) AS tokens_out
FROM events u WHERE u.session_id = $sid AND u.kind = 'usage' ORDER BY u.seq
"""
TOOL_SQL = "SELECT run_id, tool_call_id, latency_s FROM tool_calls WHERE session_id = $sid"


def listing(command: str) -> str:
    """Lists files."""
    return "a.txt b.txt"


def broken(path: str) -> str:
    """Reads a file."""
    raise OSError(f"no such file: {path}")


def agent_session(store, sid: str = "run"):
    script = [
        {
            "text": "Looking.",
            "tool_calls": [
                {"name": "listing", "arguments": {"command": "ls"}, "id": "c1"},
                {"name": "broken", "arguments": {"path": "x"}, "id": "c2"},
            ],
        },
        {"text": "Two files, one unreadable."},
    ]
    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script), tools=[listing, broken])
    agent.run_sync("list the files", session=store.session(sid))
    agent2 = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel([{"text": "Again."}]))
    agent2.run_sync("once more", session=store.session(sid))


def check_against_sql(store, sid: str) -> dict:
    tl = viewer.session_timeline(store, sid)
    calls = [c for run in tl["runs"] for c in run["calls"]]
    model = [c for c in calls if c["kind"] == "model"]
    rows = store.sql_arrow(MODEL_SQL, {"sid": sid}).to_pylist()
    assert len(model) == len(rows) and rows
    by_run: dict[str, list] = {}
    for r in rows:
        by_run.setdefault(r["run_id"], []).append(r)
    for run in tl["runs"]:
        mine = [c for c in run["calls"] if c["kind"] == "model"]
        theirs = by_run.get(run["run_id"], [])
        assert [c["duration_s"] for c in mine] == pytest.approx([r["duration_s"] for r in theirs], abs=1e-6)
        assert [c["tokens_in"] for c in mine] == [r["tokens_in"] for r in theirs]
        assert [c["tokens_out"] for c in mine] == [r["tokens_out"] for r in theirs]
        offsets = [c["offset_s"] for c in run["calls"]]
        assert offsets == sorted(offsets)  # in the order they started
    tools = {
        (r["run_id"], r["tool_call_id"]): r["latency_s"] for r in store.sql_arrow(TOOL_SQL, {"sid": sid}).to_pylist()
    }
    mine_tools = {
        (run["run_id"], c["tool_call_id"]): c["duration_s"]
        for run in tl["runs"]
        for c in run["calls"]
        if c["kind"] == "tool"
    }
    assert set(mine_tools) == {k for k, v in tools.items() if v is not None}
    for key, value in mine_tools.items():
        assert value == pytest.approx(tools[key], abs=1e-6)
    return tl


def test_an_agent_run_on_every_engine(new_store, engine):
    store = new_store(engine)
    agent_session(store)
    tl = check_against_sql(store, "run")
    runs = store.runs("run")
    assert [r["run_id"] for r in tl["runs"]] == [r.run_id for r in runs]
    first = tl["runs"][0]["calls"]
    assert [(c["kind"], c["name"]) for c in first] == [
        ("model", first[0]["name"]),
        ("tool", "listing"),
        ("tool", "broken"),
        ("model", first[3]["name"]),
    ]
    # errors marked: the tool that raised, not the one that answered
    assert first[1]["error"] is None and "no such file" in first[2]["error"]
    # each bar names the message it produced, and that message is the one the store holds
    session = store.session("run")
    for call in first:
        assert call["message_id"] is not None
        message = session.get(call["message_id"])
        assert message["metadata"]["run_id"] == tl["runs"][0]["run_id"]
        if call["kind"] == "tool":
            assert any(p.get("toolCallId") == call["tool_call_id"] for p in message["parts"])
        else:
            assert message["role"] == "assistant" and message["metadata"]["usage"]["out"] == call["tokens_out"]


def test_the_bundle_carries_the_timeline(new_store, tmp_path):
    store = new_store("sqlite")
    agent_session(store)
    viewer.write_bundle(store, tmp_path / "b")
    text = next(p for p in (tmp_path / "b" / "data").glob("s*.js")).read_text()
    start = text.index("JSON.parse(") + len("JSON.parse(")
    literal, _ = json.JSONDecoder().raw_decode(text, start)
    assert json.loads(literal)["timeline"] == viewer.session_timeline(store, "run")


def test_a_failed_model_call_is_marked():
    events = [
        {"seq": 0, "run_id": "r", "kind": "run.start", "ts": "2026-01-01T00:00:00+00:00"},
        {"seq": 1, "run_id": "r", "kind": "turn.start", "turn": 1, "ts": "2026-01-01T00:00:01+00:00"},
        {
            "seq": 2,
            "run_id": "r",
            "kind": "run.end",
            "status": "failed",
            "error": "rate limited",
            "ts": "2026-01-01T00:00:03.5+00:00",
        },
    ]
    from sessionkit.widgets._timeline import timeline

    (run,) = timeline(events)["runs"]
    assert run["status"] == "failed" and run["duration_s"] == 3.5
    (call,) = run["calls"]
    assert call["kind"] == "model" and call["duration_s"] == 2.5 and call["offset_s"] == 1.0
    assert call["error"] == "rate limited" and call["tokens_in"] is None


def test_an_opentelemetry_trace(new_store, tmp_path):
    otel = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = otel.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    user = {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]}
    call = {"role": "assistant", "parts": [{"type": "tool_call", "id": "k1", "name": "weather", "arguments": {}}]}
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span(
            "chat m",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.conversation.id": "otel-1",
                "gen_ai.input.messages": json.dumps([user]),
                "gen_ai.output.messages": json.dumps([{**call, "finish_reason": "tool_calls"}]),
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.usage.output_tokens": 7,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "weather",
                "gen_ai.tool.call.id": "k1",
            },
        ):
            pass
    import base64

    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    def hex_ids(value):  # json_format writes ids as base64; OTLP/JSON has them as hex
        if isinstance(value, dict):
            return {
                k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hex_ids(v)
                for k, v in value.items()
            }
        return [hex_ids(v) for v in value] if isinstance(value, list) else value

    path = tmp_path / "trace.json"
    path.write_text(json.dumps(hex_ids(json_format.MessageToDict(encode_spans(exporter.get_finished_spans())))))
    store = new_store("sqlite")
    sessions = sk.io.import_otel(store, path)
    sid = sessions[0].session_id
    tl = check_against_sql(store, sid)
    kinds = [(c["kind"], c["name"], c["tokens_in"] if c["kind"] == "model" else None) for c in tl["runs"][0]["calls"]]
    assert kinds == [("model", "m", 12), ("tool", "weather", None)]


def test_a_captured_litellm_call(new_store, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm's bundled prices: nothing fetched
    litellm = pytest.importorskip("litellm")
    store = new_store("sqlite")
    with sk.capture(store, session="cap") as cap:
        litellm.completion(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Where is Oslo?"}], mock_response="In Norway."
        )
        assert cap.wait(30)
    assert cap.errors == []
    tl = check_against_sql(store, "cap")
    (run,) = tl["runs"]
    (call,) = run["calls"]
    usage = next(e for e in store.events("cap") if e["kind"] == "usage")
    assert call["kind"] == "model" and call["tokens_out"] == usage["out"] and call["cost_usd"] == usage["cost_usd"]
    reply = store.session("cap").get(call["message_id"])
    assert reply["role"] == "assistant" and "In Norway." in json.dumps(reply["parts"])


def test_a_run_view_draws_the_timeline_of_its_finished_runs(new_store):
    pytest.importorskip("anywidget")
    store = new_store("sqlite")
    agent_session(store)
    session = store.session("run")
    whole = viewer.session_timeline(store, "run")
    assert sk.widgets.RunView(session)._timeline == whole
    one = sk.widgets.RunView(session, run_id=whole["runs"][1]["run_id"])
    assert one._timeline == {"runs": [whole["runs"][1]]}
    # events alone: the same bars, without the messages they produced
    events = store.events("run")
    bare = sk.widgets.RunView(events)._timeline
    assert [[c["duration_s"] for c in r["calls"]] for r in bare["runs"]] == [
        [c["duration_s"] for c in r["calls"]] for r in whole["runs"]
    ]
    assert {c["message_id"] for r in bare["runs"] for c in r["calls"]} == {None}
    # a run still going has no bars yet: it is drawn below as it streams
    unfinished = [e for e in events if not (e["kind"] == "run.end" and e["run_id"] == whole["runs"][1]["run_id"])]
    assert [r["run_id"] for r in sk.widgets.RunView(unfinished)._timeline["runs"]] == [whole["runs"][0]["run_id"]]
