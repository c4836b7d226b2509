"""OpenTelemetry traces in: the OTLP mapping, trace files, and ``sessionkit collect`` as a real process
fed by a real OpenTelemetry SDK pipeline (docs/integrations/opentelemetry.md)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from helpers import free_port, wait_until
from openinference.semconv.trace import (
    MessageAttributes,
    MessageContentAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolCallAttributes,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import sessionkit as sk
from sessionkit.cli import main
from sessionkit.integrations.otel import TraceReceiver

HANG = 60.0
CONV = "conv-oslo"

USER = {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}
CALL = {
    "role": "assistant",
    "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
}
RESULT = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny, 21 C"}]}
FINAL = {"role": "assistant", "parts": [{"type": "text", "content": "Sunny in Oslo, 21 C."}]}


def _provider(*processors) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    for p in processors:
        provider.add_span_processor(p)
    return provider


def agent_turn(provider: TracerProvider, *, conversation: str = CONV, extra_span: bool = False) -> None:
    """One agent turn in GenAI conventions: a model call asking for a tool, the tool, a second model call."""
    tracer = provider.get_tracer("weather-agent")
    with tracer.start_as_current_span(
        "invoke_agent weather",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"},
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.conversation.id": conversation,
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are terse."}]),
                "gen_ai.input.messages": json.dumps([USER]),
                "gen_ai.output.messages": json.dumps([{**CALL, "finish_reason": "tool_calls"}]),
                "gen_ai.response.finish_reasons": ["tool_calls"],
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.usage.output_tokens": 7,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": json.dumps({"city": "Oslo"}),
                "gen_ai.tool.call.result": "sunny, 21 C",
            },
        ):
            if extra_span:
                with tracer.start_as_current_span(
                    "cache lookup", attributes={"cache.hit": False, "db.system": "redis"}
                ):
                    pass
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.conversation.id": conversation,
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are terse."}]),
                "gen_ai.input.messages": json.dumps([USER, CALL, RESULT]),
                "gen_ai.output.messages": json.dumps([{**FINAL, "finish_reason": "stop"}]),
                "gen_ai.response.finish_reasons": ["stop"],
                "gen_ai.usage.input_tokens": 30,
                "gen_ai.usage.output_tokens": 9,
            },
        ):
            pass


def recorded(**options) -> list:
    """The finished SDK spans of one agent turn."""
    exporter = InMemorySpanExporter()
    agent_turn(_provider(SimpleSpanProcessor(exporter)), **options)
    return list(exporter.get_finished_spans())


def _hex_ids(value):
    """``json_format`` writes bytes as base64; OTLP/JSON wants trace and span ids as hex."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_json(spans) -> dict:
    return _hex_ids(json_format.MessageToDict(encode_spans(spans)))


def otlp_protobuf(spans) -> bytes:
    return encode_spans(spans).SerializeToString()


def _by(spans, name: str) -> list:
    return [s for s in spans if s.name == name]


def _secs(ns: int) -> float:
    return ns / 1e9


def _empty(store) -> bool:
    stats = store.stats()
    return stats["sessions"] == stats["messages"] == stats["runs"] == stats["events"] == 0


def shape(session) -> list[tuple]:
    """A session's tree as (id, parent_id, role) in write order."""
    return sorted((n.id, n.parent_id, n.role) for n in session.nodes())


# ---------------------------------------------------------------------------
# The mapping, through files


def check_conversation(store, spans) -> None:
    """The store holds the agent turn of ``spans``: its messages, tool call, run and durations."""
    session = store.session(CONV)
    history = session.get_history()
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "assistant"]
    assert history[1]["parts"] == [{"type": "text", "text": "Weather in Oslo?"}]
    call = history[2]["parts"][0]
    assert call["type"] == "tool-get_weather" and call["toolCallId"] == "call_1"
    assert call["input"] == {"city": "Oslo"}
    assert history[3]["parts"][0]["output"] == "sunny, 21 C"
    assert history[4]["parts"] == [{"type": "text", "text": "Sunny in Oslo, 21 C."}]
    assert history[4]["metadata"]["usage"]["in"] == 30 and history[4]["metadata"]["model"] == "gpt-4o"
    assert len(session) == 5  # the history the second call sent again is the same path

    root = _by(spans, "invoke_agent weather")[0]
    tool = _by(spans, "execute_tool get_weather")[0]
    chats = sorted(_by(spans, "chat gpt-4o"), key=lambda s: s.start_time)
    run_id = f"otel-{root.context.trace_id:032x}"
    (run,) = store.runs(CONV)
    assert run.run_id == run_id and run.status == "completed"
    assert run.usage["in"] == 42 and run.usage["out"] == 16
    runs = store.sql("SELECT run_id, epoch(ended_at - started_at) AS d FROM runs").to_dict("records")
    assert runs[0]["run_id"] == run_id
    assert runs[0]["d"] == pytest.approx(_secs(root.end_time - root.start_time), abs=1e-3)  # milliseconds kept
    (turn,) = store.sql("SELECT run_id, latency_s, tool_calls FROM turns").to_dict("records")
    assert turn["run_id"] == run_id and turn["tool_calls"] == 1
    assert turn["latency_s"] == pytest.approx(_secs(root.end_time - root.start_time), abs=2e-6)
    (tc,) = store.sql("SELECT tool_call_id, tool_name, result, latency_s FROM tool_calls").to_dict("records")
    assert tc["tool_call_id"] == "call_1" and tc["tool_name"] == "get_weather" and tc["result"] == "sunny, 21 C"
    assert tc["latency_s"] == pytest.approx(_secs(tool.end_time - tool.start_time), abs=2e-6)
    model = store.sql(
        "SELECT epoch(e.ts - s.ts) AS d FROM events s JOIN events e ON e.run_id = s.run_id"
        " AND json_extract_string(e.data, '$.span_id') = json_extract_string(s.data, '$.span_id')"
        " WHERE s.kind = 'turn.start' AND e.kind = 'turn.end' ORDER BY s.ts"
    )["d"].tolist()
    assert model == pytest.approx([_secs(c.end_time - c.start_time) for c in chats], abs=2e-6)
    events = store.events(CONV)  # in the order they arrived, each at its span's time
    kinds = [e["kind"] for e in events]
    times = [e["ts"] for e in events]
    assert [e["ts"] for e in events if e["kind"] == "run.start"] == [min(times)]
    assert [e["ts"] for e in events if e["kind"] == "run.end"] == [max(times)]
    assert kinds.count("turn.start") == 2 and kinds.count("usage") == 2
    assert kinds.count("tool.call") == 1 and kinds.count("tool.result") == 1


def test_json_file_imports_the_agent_turn(new_store, engine, tmp_path):
    spans = recorded()
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(otlp_json(spans)))
    assert sk.io.detect_format(path) == "otel"
    store = new_store(engine)
    sessions = sk.io.import_otel(store, path)
    assert [s.session_id for s in sessions] == [CONV]
    check_conversation(store, spans)
    before = (store.stats()["messages"], len(store.events(CONV)), len(store.runs(CONV)))
    sk.io.import_otel(store, path)  # idempotent: nothing twice
    assert (store.stats()["messages"], len(store.events(CONV)), len(store.runs(CONV))) == before


def follow_up(provider: TracerProvider, question: str) -> None:
    """A later agent turn of the conversation: one model call sending the whole history and ``question``."""
    asked = {"role": "user", "parts": [{"type": "text", "content": question}]}
    with provider.get_tracer("weather-agent").start_as_current_span(
        "chat gpt-4o",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.conversation.id": CONV,
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are terse."}]),
            "gen_ai.input.messages": json.dumps([USER, CALL, RESULT, FINAL, asked]),
            "gen_ai.output.messages": json.dumps([{**FINAL, "parts": [{"type": "text", "content": "Rain."}]}]),
        },
    ):
        pass


def test_each_trace_of_a_conversation_has_its_own_question_as_input(new_store, engine):
    exporter = InMemorySpanExporter()
    provider = _provider(SimpleSpanProcessor(exporter))
    agent_turn(provider)
    follow_up(provider, "And tomorrow?")
    spans = list(exporter.get_finished_spans())
    store = new_store(engine)
    TraceReceiver(store).export(otlp_protobuf(spans), content_type="application/x-protobuf")
    runs = sorted(store.runs(CONV), key=lambda r: r.started_at)
    assert [r.input for r in runs] == ["Weather in Oslo?", "And tomorrow?"]
    first = next(s for s in spans if s.name == "invoke_agent weather").context.trace_id
    assert runs[0].run_id == f"otel-{first:032x}" and len({r.run_id for r in runs}) == 2
    view = store.sql("SELECT run_id, input FROM runs").to_dict("records")
    assert sorted((r["run_id"], r["input"]) for r in view) == sorted((r.run_id, r.input) for r in runs)
    assert len(store.session(CONV)) == 7  # the second turn's history is the first turn's path


@pytest.mark.slow
def test_protobuf_and_json_lines_give_the_same_tree(new_store, tmp_path):
    spans = recorded()
    pb = tmp_path / "traces.pb"
    pb.write_bytes(otlp_protobuf(spans))
    lines = tmp_path / "traces.jsonl"  # as the collector's file exporter writes: a request per line
    lines.write_text("\n".join(json.dumps(otlp_json([s])) for s in spans) + "\n")
    gz = tmp_path / "traces.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(otlp_json(spans)).encode()))
    stores = []
    for path in (pb, lines, gz):
        assert sk.io.detect_format(path) == "otel"
        store = new_store("sqlite")
        sk.io.import_otel(store, path)
        check_conversation(store, spans)
        stores.append(store)
    assert shape(stores[0].session(CONV)) == shape(stores[1].session(CONV)) == shape(stores[2].session(CONV))


def _request_starting(second: int) -> bytes:
    """A protobuf request of one span whose bytes start with 0x0a and then ``second``: its
    first resource's length, which then reads as JSON white space or a bracket."""
    for pad in range(200):
        request = ExportTraceServiceRequest()
        span = request.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id, span.span_id = bytes(range(1, 17)), bytes(range(1, 9))
        if pad:  # no name and no times: the least a span holds, 32 bytes with its resource's
            span.name = "r" * pad
            start = 1_751_364_000_000_000_000  # fixed64 of bytes below 0x80: the request is UTF-8 text
            span.start_time_unix_nano, span.end_time_unix_nano = start, start + (1 << 24)
        data = request.SerializeToString()
        if data[1] == second:
            return data
    raise AssertionError(second)


@pytest.mark.parametrize("second", b" [{")  # a length of 9, 10 or 13 holds no span
def test_protobuf_whose_first_bytes_read_as_json_is_protobuf(second, new_store, tmp_path):
    path = tmp_path / "trace.pb"
    data = _request_starting(second)
    data.decode("utf-8")  # it even reads as text
    path.write_bytes(data)
    assert sk.io.detect_format(path) == "otel"
    store = new_store("sqlite")
    (session,) = sk.io.import_otel(store, path)
    (run,) = store.runs(session.session_id)
    assert run.run_id == "otel-" + bytes(range(1, 17)).hex()
    assert [e["kind"] for e in store.events(session.session_id)] == ["run.start", "otel.span", "run.end"]


def test_json_lines_after_a_blank_line_and_an_array_of_requests_import(new_store, tmp_path):
    spans = recorded()
    lines = tmp_path / "traces.jsonl"
    lines.write_text("\n\n" + "\n".join(json.dumps(otlp_json([s])) for s in spans) + "\n")
    array = tmp_path / "traces.json"
    array.write_text("\ufeff[\n" + ",\n".join(json.dumps(otlp_json([s])) for s in spans) + "\n]\n")
    for path in (lines, array):
        store = new_store("sqlite")
        sk.io.import_otel(store, path)
        check_conversation(store, spans)


@pytest.mark.parametrize(
    "name, data, where, problem",
    [
        ("cut.json", "[\n{one}\n{two}", "line 3", "not valid JSON"),
        ("more.json", "[\n{one}\n]\n[]", "line 4", "more data after the array"),
        ("comma.json", "[\n{one}\n{two}\n]", "line 3", "expecting ',' or ']'"),
        ("nan.jsonl", '{one}\n{"resourceSpans": [], "x": NaN}\n', "line 2", "NaN is not a JSON value"),
        ("bytes.jsonl.gz", "{one}\n\n{two}\n\udcff\n", "line 4", "not UTF-8 text"),
        ("surrogate.json", '{"resourceSpans": [], "x": "\\ud800"}', "line 1", "not valid Unicode"),
        ("record.json", '[{one}, {"spans": []}]', "record 1 (line 1)", "not OTLP trace data"),
    ],
)
def test_a_bad_trace_file_names_the_line_and_stores_nothing(name, data, where, problem, new_store, tmp_path):
    one, two = (json.dumps(otlp_json([s])) for s in recorded()[:2])
    raw = data.replace("{one}", one).replace("{two}", two).encode("utf-8", "surrogateescape")
    path = tmp_path / name
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    store = new_store("sqlite")
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_otel(store, path)
    assert str(info.value).startswith(f"{path}, {where}: ") and problem in str(info.value), info.value
    assert _empty(store)


def test_spans_over_several_payloads_in_any_order_make_the_same_tree(new_store):
    spans = recorded(extra_span=True)
    whole = new_store("sqlite")
    TraceReceiver(whole).export(otlp_protobuf(spans), content_type="application/x-protobuf")
    split = new_store("sqlite")
    receiver = TraceReceiver(split)
    children_first = sorted(spans, key=lambda s: s.parent is None)  # the root last
    for span in reversed(children_first[:-1]):  # the second model call before the first, the tool's child first
        answer = receiver.export(json.dumps(otlp_json([span])).encode(), content_type="application/json")
        assert answer.status == 200, answer.body
        assert split.runs(CONV) == []  # no root yet: the run is not recorded
    receiver.export(otlp_protobuf(children_first[-1:]), content_type="application/x-protobuf")
    assert shape(split.session(CONV)) == shape(whole.session(CONV))
    check_conversation(split, spans)
    key = [(e["kind"], e["span_id"], e["ts"]) for e in whole.events(CONV)]
    assert sorted(key) == sorted((e["kind"], e["span_id"], e["ts"]) for e in split.events(CONV))
    # the same payloads again add nothing
    before = (split.stats()["messages"], len(split.events(CONV)))
    receiver.export(otlp_protobuf(spans), content_type="application/x-protobuf")
    assert (split.stats()["messages"], len(split.events(CONV))) == before


def test_unknown_spans_are_kept_as_events(new_store):
    spans = recorded(extra_span=True)
    store = new_store("sqlite")
    TraceReceiver(store).export(otlp_protobuf(spans), content_type="application/x-protobuf")
    found = [e for e in store.events(CONV) if e["kind"] == "otel.span"]
    names = sorted(e["name"] for e in found)
    assert names == ["cache lookup", "invoke_agent weather"]
    cache = next(e for e in found if e["name"] == "cache lookup")
    span = _by(spans, "cache lookup")[0]
    assert cache["attributes"] == {"cache.hit": False, "db.system": "redis"}
    assert cache["parent_span_id"] == f"{span.parent.span_id:016x}"
    assert cache["duration_s"] == pytest.approx(_secs(span.end_time - span.start_time))
    assert {e["run_id"] for e in found} == {store.runs(CONV)[0].run_id}


def test_a_failed_root_span_records_a_failed_run(new_store):
    exporter = InMemorySpanExporter()
    tracer = _provider(SimpleSpanProcessor(exporter)).get_tracer("t")
    with tracer.start_as_current_span("invoke_agent", attributes={"session.id": "s-failed"}) as span:
        span.set_status(Status(StatusCode.ERROR, "model unreachable"))
    store = new_store("sqlite")
    TraceReceiver(store).export(otlp_protobuf(exporter.get_finished_spans()), content_type="application/x-protobuf")
    (run,) = store.runs("s-failed")
    assert run.status == "failed" and run.error == "model unreachable"
    assert [e["kind"] for e in store.events("s-failed")] == ["run.start", "otel.span", "run.end"]


def _oi_message(prefix: str, i: int, role: str, *, text=None, contents=None, calls=(), answers=None) -> dict:
    """One OpenInference message, flattened under ``prefix.i`` with the convention's own names."""
    base = f"{prefix}.{i}."
    out = {base + MessageAttributes.MESSAGE_ROLE: role}
    if text is not None:
        out[base + MessageAttributes.MESSAGE_CONTENT] = text
    for j, item in enumerate(contents or ()):
        head = f"{base}{MessageAttributes.MESSAGE_CONTENTS}.{j}."
        out[head + MessageContentAttributes.MESSAGE_CONTENT_TYPE] = "text"
        out[head + MessageContentAttributes.MESSAGE_CONTENT_TEXT] = item
    for j, (call_id, name, arguments) in enumerate(calls):
        head = f"{base}{MessageAttributes.MESSAGE_TOOL_CALLS}.{j}."
        out[head + ToolCallAttributes.TOOL_CALL_ID] = call_id
        out[head + ToolCallAttributes.TOOL_CALL_FUNCTION_NAME] = name
        out[head + ToolCallAttributes.TOOL_CALL_FUNCTION_ARGUMENTS_JSON] = arguments
    if answers is not None:
        out[base + MessageAttributes.MESSAGE_TOOL_CALL_ID] = answers
    return out


def test_openinference_spans(new_store):
    """OpenInference's flattened attributes (named by openinference-semantic-conventions): LLM and
    TOOL spans, session.id, token counts and costs."""
    exporter = InMemorySpanExporter()
    tracer = _provider(SimpleSpanProcessor(exporter)).get_tracer("openinference")
    common = {SpanAttributes.SESSION_ID: "oi-1"}
    inp, outp = SpanAttributes.LLM_INPUT_MESSAGES, SpanAttributes.LLM_OUTPUT_MESSAGES
    call = [("call_9", "get_weather", '{"city": "Oslo"}')]
    llm = {
        **common,
        SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.LLM.value,
        SpanAttributes.LLM_MODEL_NAME: "gpt-4o-mini",
    }
    first = {
        **llm,
        **_oi_message(inp, 0, "user", text="Weather in Oslo?"),
        **_oi_message(outp, 0, "assistant", calls=call),
        SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 11,
        SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 4,
        SpanAttributes.LLM_COST_TOTAL: 0.002,
    }
    second = {
        **llm,
        **_oi_message(inp, 0, "user", text="Weather in Oslo?"),
        **_oi_message(inp, 1, "assistant", calls=call),
        **_oi_message(inp, 2, "tool", text="sunny", answers="call_9"),
        **_oi_message(outp, 0, "assistant", contents=["Sunny."]),
        SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 25,
        SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 2,
        SpanAttributes.LLM_COST_TOTAL: 0.003,
    }
    tool_attrs = {
        **common,
        SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.TOOL.value,
        SpanAttributes.TOOL_NAME: "get_weather",
        ToolCallAttributes.TOOL_CALL_ID: "call_9",
        SpanAttributes.INPUT_VALUE: '{"city": "Oslo"}',
        SpanAttributes.OUTPUT_VALUE: "sunny",
    }
    agent = {**common, SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.AGENT.value}
    with tracer.start_as_current_span("agent", attributes=agent):
        with tracer.start_as_current_span("ChatCompletion", attributes=first):
            pass
        with tracer.start_as_current_span("get_weather", attributes=tool_attrs):
            pass
        with tracer.start_as_current_span("ChatCompletion", attributes=second):
            pass
    spans = exporter.get_finished_spans()
    store = new_store("sqlite")
    answer = TraceReceiver(store).export(otlp_protobuf(spans), content_type="application/x-protobuf")
    assert answer.status == 200
    history = store.session("oi-1").get_history()
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["parts"][0] == {
        "type": "tool-get_weather",
        "toolCallId": "call_9",
        "state": "input-available",
        "input": {"city": "Oslo"},
    }
    assert history[2]["parts"][0]["output"] == "sunny"
    assert history[3]["parts"] == [{"type": "text", "text": "Sunny."}]
    (run,) = store.runs("oi-1")
    assert run.usage["in"] == 36 and run.usage["cost_usd"] == pytest.approx(0.005)
    (turn,) = store.sql("SELECT cost_usd FROM turns").to_dict("records")
    assert turn["cost_usd"] == pytest.approx(0.005)
    tool = _by(spans, "get_weather")[0]
    (tc,) = store.sql("SELECT tool_name, result, latency_s FROM tool_calls").to_dict("records")
    assert tc["tool_name"] == "get_weather" and tc["result"] == "sunny"
    assert tc["latency_s"] == pytest.approx(_secs(tool.end_time - tool.start_time), abs=2e-6)
    assert [e["name"] for e in store.events("oi-1") if e["kind"] == "otel.span"] == ["agent"]


def test_messages_as_span_events(new_store):
    """The older GenAI conventions: the messages as gen_ai.*.message and gen_ai.choice span events."""
    exporter = InMemorySpanExporter()
    tracer = _provider(SimpleSpanProcessor(exporter)).get_tracer("t")
    with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}) as span:
        span.add_event("gen_ai.system.message", {"content": "Be brief."})
        span.add_event("gen_ai.user.message", {"content": "Hi there"})
        span.add_event(
            "gen_ai.choice",
            {"index": 0, "finish_reason": "stop", "message": json.dumps({"role": "assistant", "content": "Hello."})},
        )
    spans = exporter.get_finished_spans()
    store = new_store("sqlite")
    TraceReceiver(store).export(otlp_protobuf(spans), content_type="application/x-protobuf")
    trace = f"{spans[0].context.trace_id:032x}"
    history = store.session(trace).get_history()  # no conversation id: the trace is the session
    assert [(m["role"], m["parts"][0]["text"]) for m in history] == [
        ("system", "Be brief."),
        ("user", "Hi there"),
        ("assistant", "Hello."),
    ]
    assert history[2]["metadata"]["otel"]["finish_reason"] == "stop"


def test_messages_as_attributes_of_an_operation_details_event(new_store):
    exporter = InMemorySpanExporter()
    tracer = _provider(SimpleSpanProcessor(exporter)).get_tracer("t")
    with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat", "session.id": "d"}) as span:
        span.add_event(
            "gen_ai.client.inference.operation.details",
            {"gen_ai.input.messages": json.dumps([USER]), "gen_ai.output.messages": json.dumps([FINAL])},
        )
    store = new_store("sqlite")
    TraceReceiver(store).export(otlp_protobuf(exporter.get_finished_spans()), content_type="application/x-protobuf")
    assert [m["parts"][0]["text"] for m in store.session("d").get_history()] == [
        "Weather in Oslo?",
        "Sunny in Oslo, 21 C.",
    ]


@pytest.mark.parametrize(
    ("body", "content_type", "encoding", "status", "reason"),
    [
        (b'{"hello": "world"}', "application/json", None, 400, "no resourceSpans"),
        (b"not json", "application/json", None, 400, "not valid JSON"),
        (b"\x0a\xff\xff\xff\x0f", "application/x-protobuf", None, 400, "not an OTLP protobuf"),
        (b"\x1f\x8b\x08\x00", "application/x-protobuf", "gzip", 400, "cut short"),
        (b"hello", "text/plain", None, 415, "unsupported content type"),
    ],
)
def test_bad_payloads_store_nothing(new_store, body, content_type, encoding, status, reason):
    store = new_store("sqlite")
    answer = TraceReceiver(store).export(body, content_type=content_type, encoding=encoding)
    assert answer.status == status and reason in answer.error
    assert _empty(store)


def test_a_truncated_protobuf_stores_nothing(new_store):
    data = otlp_protobuf(recorded())
    store = new_store("sqlite")
    answer = TraceReceiver(store).export(data[: len(data) // 2], content_type="application/x-protobuf")
    assert answer.status == 400 and "not an OTLP protobuf" in answer.error
    assert _empty(store)


def test_spans_with_bad_ids_are_a_partial_success(new_store):
    doc = otlp_json(recorded())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append(
        {"traceId": "abcd", "spanId": "0102030405060708", "name": "broken", "startTimeUnixNano": "1"}
    )
    store = new_store("sqlite")
    answer = TraceReceiver(store).export(json.dumps(doc).encode(), content_type="application/json")
    assert answer.status == 200
    body = json.loads(answer.body)
    assert body["partialSuccess"]["rejectedSpans"] == "1" and "broken" in body["partialSuccess"]["errorMessage"]
    assert len(store.session(CONV)) == 5


# ---------------------------------------------------------------------------
# sessionkit collect, a real process fed by the OpenTelemetry SDK's OTLP/HTTP exporter


class Collector:
    """A ``sessionkit collect`` process on a free port of 127.0.0.1."""

    def __init__(self, target: str, folder: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self.log = folder / f"collect-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sessionkit", "collect", target, "--port", str(self.port), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(self._ready, timeout=HANG, what=f"sessionkit collect on port {self.port}")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"sessionkit collect exited: {self.log.read_text(errors='replace')}")
        return "collecting OTLP traces" in self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(HANG)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(HANG)


@pytest.fixture
def store_target(engine, tmp_path, request):
    if engine == "postgresql":
        return request.getfixturevalue("pg_store_url")()
    return str(tmp_path / ("traces.db" if engine == "sqlite" else "traces.duckdb"))


@pytest.mark.slow
def test_collect_receives_an_sdk_pipeline(store_target, engine, tmp_path):
    collector = Collector(store_target, tmp_path)
    try:
        memory = InMemorySpanExporter()
        exporter = OTLPSpanExporter(endpoint=collector.url, timeout=HANG)
        provider = _provider(SimpleSpanProcessor(memory), BatchSpanProcessor(exporter))
        agent_turn(provider)
        assert provider.force_flush(int(HANG * 1000))
        spans = memory.get_finished_spans()
        if engine != "duckdb":  # a DuckDB file has one process at a time: read it once the collector stops
            with sk.open_store(store_target) as store:
                wait_until(lambda: store.runs(CONV), timeout=HANG, what="the run of the trace")
                check_conversation(store, spans)
        provider.shutdown()
    finally:
        collector.stop()
    with sk.open_store(store_target) as store:
        check_conversation(store, spans)


def test_collect_refuses_bad_payloads_foreign_hosts_and_wrong_tokens(tmp_path):
    token = "t" * 20
    target = str(tmp_path / "refuse.db")
    collector = Collector(target, tmp_path, "--token", token)
    try:
        good = otlp_protobuf(recorded())
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(timeout=HANG, headers=auth) as client:
            proto = {"Content-Type": "application/x-protobuf"}
            r = client.post(collector.url, content=good, headers={**proto, "Authorization": "Bearer " + "x" * 20})
            assert r.status_code == 401
            r = client.post(collector.url, content=good[:-7], headers=proto)
            assert r.status_code == 400 and b"not an OTLP protobuf" in r.content
            r = client.post(collector.url, json={"resourceSpans": "nope"})
            assert r.status_code == 400 and "not OTLP trace data" in r.json()["message"]
            r = client.post(collector.url, content=good, headers={"Content-Type": "text/plain"})
            assert r.status_code == 415
            r = client.post(
                collector.url, content=good, headers={**proto, "Host": f"attacker.example:{collector.port}"}
            )
            assert r.status_code == 403 and r.json()["error"] == "host_not_allowed"
            with sk.open_store(target) as store:
                assert _empty(store)
            r = client.post(
                collector.url,
                content=gzip.compress(good),
                headers={**proto, "Content-Encoding": "gzip", "Host": f"localhost:{collector.port}"},
            )
            assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
            with sk.open_store(target) as store:
                assert len(store.session(CONV)) == 5  # the answer comes once the payload is stored
            r = client.post(collector.url, json=otlp_json(recorded(conversation="second")))
            assert r.status_code == 200 and r.json() == {}
            with sk.open_store(target) as store:
                assert len(store.session("second")) == 5
    finally:
        collector.stop()


# ---------------------------------------------------------------------------
# The command line


def test_cli_import_detects_trace_files(tmp_path, capsys):
    spans = recorded()
    pb = tmp_path / "spans.pb"
    pb.write_bytes(otlp_protobuf(spans))
    target = str(tmp_path / "cli.db")
    assert main(["import", target, str(pb)]) == 0
    assert "(otel)" in capsys.readouterr().out
    lines = tmp_path / "spans.jsonl"
    lines.write_text("\n".join(json.dumps(otlp_json([s])) for s in spans))
    assert main(["import", target, str(lines), "--session-prefix", "b-"]) == 0
    with sk.open_store(target) as store:
        assert len(store.session(CONV)) == 5 and len(store.session("b-" + CONV)) == 5
        assert shape(store.session(CONV)) == shape(store.session("b-" + CONV))


def test_cli_import_names_a_damaged_trace_file(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5}]}]}]}')
    assert main(["import", str(tmp_path / "x.db"), str(path)]) == 1
    assert "not OTLP trace data" in capsys.readouterr().err


def test_cli_collect_off_loopback_needs_a_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SESSIONKIT_TOKEN", raising=False)
    assert main(["collect", str(tmp_path / "c.db"), "--host", "0.0.0.0"]) == 1
    assert "token" in capsys.readouterr().err
