"""OpenTelemetry traces (OTLP) -> sessions, runs and run events (docs/integrations/opentelemetry.md).

The input is what an OTLP exporter sends: an ``ExportTraceServiceRequest``
(``resourceSpans`` > ``scopeSpans`` > ``spans``), as protobuf or in the OTLP/HTTP JSON
encoding (camelCase fields, hex trace and span ids; base64 ids as ``json_format`` writes
them are read too), or a file of JSON lines of such objects (the OTel collector's file
exporter). :func:`parse_request` decodes one payload into :class:`Span` values, checked
whole; :class:`TraceWriter` writes spans into a store; :func:`import_otel` is the file
importer.

What a span becomes:

* a trace is a session: its ``gen_ai.conversation.id`` or ``session.id`` attribute (on any
  of its spans) when there is one, else the trace id;
* a model call (``gen_ai.operation.name`` ``chat``/``text_completion``/``generate_content``,
  or ``openinference.span.kind`` ``LLM``) gives messages: the system instructions, the input
  messages and the output messages (``gen_ai.system_instructions``, ``gen_ai.input.messages``
  and ``gen_ai.output.messages`` as JSON; the older ``gen_ai.*.message`` / ``gen_ai.choice``
  span events; OpenInference's ``llm.input_messages.N.message.*`` and
  ``llm.output_messages.N.message.*``). Each message's id hashes its parent's id and its
  own content, so the history every model call sends again is one path, not a copy;
  a tool call is a ``tool-<name>`` part of the assistant message, its result a ``tool``
  message whose part carries the ``output``;
* the trace is a run (``otel-<trace id>``) recorded with the root span's start and end;
  each span adds run events with the span's own times: a model call ``turn.start``,
  ``usage`` and ``turn.end``; a tool execution (``execute_tool``, OpenInference ``TOOL``)
  ``tool.call`` and ``tool.result``; the root span ``run.start`` and ``run.end``; every other
  span an ``otel.span`` event holding its name, kind, times, status and attributes.

Every event names its ``span_id``: a span already stored is not stored again, so spans
may arrive in any order and over several payloads, and importing a file again adds
nothing.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import messages as _msg
from ..errors import MalformedInput
from ..store import Session
from ._common import watching_roots
from ._frameworks import SessionWriter
from ._progress import Progress, check_progress
from ._reading import EMPTY, TextStream, as_path, check_file, iter_jsonl, open_binary

__all__ = [
    "Span",
    "TraceWriter",
    "WriteSummary",
    "parse_request",
    "encode_response",
    "encode_status",
    "import_otel",
    "is_otlp_protobuf",
]

#: the ``gen_ai.operation.name`` values of a model call
_MODEL_OPERATIONS = {"chat", "text_completion", "generate_content", "completion"}
#: the attributes naming a conversation, first found wins
_CONVERSATION_KEYS = ("gen_ai.conversation.id", "session.id")
#: the span event names of the older GenAI event conventions, and the role each gives
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _proto() -> Any:
    """The OTLP trace service messages (``opentelemetry-proto``), imported here only."""
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError as exc:
        raise ImportError(
            "reading OpenTelemetry traces needs opentelemetry-proto; install it with: pip install 'sessionkit[otel]'"
        ) from exc
    return trace_service_pb2, json_format


# ---------------------------------------------------------------------------
# Decoding


@dataclass
class Span:
    """One span, decoded: ids as lowercase hex, times in nanoseconds since 1970,
    attributes as plain Python values (``bytes`` as base64 text)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status: str  # "unset", "ok" or "error"
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


def _any_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    if which == "double_value":
        x = v.double_value
        return x if x == x and x not in (float("inf"), float("-inf")) else str(x)  # NaN: no store keeps it
    return getattr(v, which)


def _attrs(kvs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def _json_ids(value: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping reads bytes as
    base64. Hex ids (32 characters for a trace, 16 for a span) are turned into base64 so
    that ``json_format`` reads them; base64 ids (24 and 12 characters) are kept."""
    if isinstance(value, list):
        return [_json_ids(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if key in ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id") and isinstance(v, str):
            if len(v) in (32, 16) and all(c in "0123456789abcdefABCDEF" for c in v):
                v = base64.b64encode(bytes.fromhex(v)).decode("ascii")
            out[key] = v
        else:
            out[key] = _json_ids(v)
    return out


def _decode_body(data: bytes, encoding: str | None, source: str, limit: int | None = None) -> bytes:
    """The body decompressed (``limit``: at most that many bytes, else :class:`MalformedInput`)."""
    if not encoding or encoding == "identity":
        return data
    if encoding in ("gzip", "x-gzip", "deflate"):
        # gzip: a gzip header (wbits 16+); deflate: a zlib stream (wbits 15)
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS)
        try:
            out = inflate.decompress(data, limit + 1) if limit is not None else inflate.decompress(data)
        except zlib.error as exc:
            raise MalformedInput(source, None, f"the {encoding} body is damaged ({exc})") from None
        if limit is not None and len(out) > limit:
            raise MalformedInput(source, None, f"the body is larger than {limit} bytes once decompressed")
        if not inflate.eof:
            raise MalformedInput(source, None, f"the {encoding} body is cut short")
        return out
    raise MalformedInput(source, None, f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)")


def _request_from_json(doc: Any, source: str, where: str | None) -> Any:
    service, json_format = _proto()
    if not isinstance(doc, dict) or not ("resourceSpans" in doc or "resource_spans" in doc):
        raise MalformedInput(source, where, "not OTLP trace data (no resourceSpans)")
    request = service.ExportTraceServiceRequest()
    try:
        json_format.ParseDict(_json_ids(doc), request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise MalformedInput(source, where, f"not OTLP trace data ({' '.join(str(exc).split())})") from None
    return request


def _request_from_protobuf(data: bytes, source: str) -> Any:
    service, _ = _proto()
    request = service.ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError, and RecursionError on deep nesting
        raise MalformedInput(
            source, None, f"not an OTLP protobuf ExportTraceServiceRequest ({exc or 'cannot decode'})"
        ) from None
    return request


def parse_request(
    data: bytes,
    *,
    content_type: str = "application/x-protobuf",
    encoding: str | None = None,
    source: str = "OTLP",
    max_size: int | None = None,
) -> tuple[list[Span], list[str]]:
    """Decode one OTLP/HTTP trace payload: ``(spans, problems)``.

    ``content_type`` is ``application/x-protobuf`` or ``application/json``; ``encoding``
    a ``Content-Encoding`` (``gzip``, ``deflate``; ``max_size`` bounds the decompressed
    bytes). A payload that is not OTLP trace data raises :class:`MalformedInput`; a span
    that cannot be kept (ids of the wrong length) is left out and named in ``problems`` (OTLP's partial success).
    """
    data = _decode_body(data, encoding, source, max_size)
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json":
        try:
            doc = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise MalformedInput(source, None, f"not UTF-8 text ({exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise MalformedInput(source, None, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except RecursionError:
            raise MalformedInput(source, None, "the JSON nests too deep") from None
        request = _request_from_json(doc, source, None)
    elif media in ("application/x-protobuf", "application/protobuf"):
        if not data:
            return [], []
        request = _request_from_protobuf(data, source)
    else:
        raise MalformedInput(source, None, f"unsupported content type {content_type!r}")
    return spans_of(request)


def spans_of(request: Any) -> tuple[list[Span], list[str]]:
    """The spans of a decoded ``ExportTraceServiceRequest`` (or ``TracesData``), and the problems
    of those left out."""
    spans: list[Span] = []
    problems: list[str] = []
    for rs in request.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                bad = None
                if len(s.trace_id) != 16 or not any(s.trace_id):
                    bad = "trace id"
                elif len(s.span_id) != 8 or not any(s.span_id):
                    bad = "span id"
                elif len(s.parent_span_id) not in (0, 8):
                    bad = "parent span id"
                if bad is not None:
                    problems.append(f"span {s.name!r}: invalid {bad}")
                    continue
                parent = s.parent_span_id.hex() if any(s.parent_span_id) else ""
                spans.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=parent,
                        name=s.name,
                        kind=_SPAN_KINDS.get(s.kind, str(s.kind)),
                        start_ns=s.start_time_unix_nano,
                        end_ns=max(s.end_time_unix_nano, s.start_time_unix_nano),
                        attributes=_attrs(s.attributes),
                        events=[(e.name, e.time_unix_nano, _attrs(e.attributes)) for e in s.events],
                        status={0: "unset", 1: "ok", 2: "error"}.get(s.status.code, "unset"),
                        status_message=s.status.message,
                        resource=resource,
                        scope=ss.scope.name,
                    )
                )
    return spans, problems


def encode_response(rejected: int, message: str, *, json_body: bool) -> bytes:
    """An ``ExportTraceServiceResponse``: partial success when ``rejected`` spans were left out."""
    service, json_format = _proto()
    response = service.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if json_body:
        return json.dumps(json_format.MessageToDict(response)).encode("utf-8")
    return response.SerializeToString()


def encode_status(message: str, *, json_body: bool) -> bytes:
    """A ``google.rpc.Status`` (code 3, INVALID_ARGUMENT) saying why a payload was refused:
    the body OTLP/HTTP gives a 4xx answer."""
    _, json_format = _proto()
    try:
        from google.rpc import status_pb2
    except ImportError as exc:
        raise ImportError(
            "answering OTLP needs googleapis-common-protos; install it with: pip install 'sessionkit[otel]'"
        ) from exc
    status = status_pb2.Status(code=3, message=message)
    if json_body:
        return json.dumps(json_format.MessageToDict(status)).encode("utf-8")
    return status.SerializeToString()


def is_otlp_protobuf(path: Path) -> bool:
    """Whether the file is a serialized ``ExportTraceServiceRequest`` holding spans."""
    data = path.read_bytes()
    if not data or data[0] != 0x0A:  # field 1 (resource_spans), length-delimited
        return False
    try:
        spans, _ = spans_of(_request_from_protobuf(data, str(path)))
    except (MalformedInput, ImportError):
        return False
    return bool(spans)


# ---------------------------------------------------------------------------
# Mapping


def _iso_ns(ns: int) -> str:
    """A time in ns as ISO 8601 UTC with microseconds (what the analysis views read)."""
    seconds, rest = divmod(int(ns), 1_000_000_000)
    ms = _msg.to_iso(seconds * 1000)[:-5]  # "YYYY-MM-DDTHH:MM:SS"
    return f"{ms}.{rest // 1000:06d}Z"


def _ms(ns: int) -> str:
    return _msg.to_iso(int(ns) // 1_000_000)


def _loads(value: Any) -> Any:
    """A JSON attribute's value (kept as given when it is not JSON)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _message_id(parent: str | None, record: Any) -> str:
    h = hashlib.sha256()
    h.update((parent or "").encode("utf-8", "surrogatepass"))
    h.update(b"\x00")
    h.update(_canonical(record).encode("utf-8", "surrogatepass"))
    return "otel-" + h.hexdigest()[:24]


def _operation(span: Span) -> str:
    """``model``, ``tool`` or ``other``."""
    a = span.attributes
    op = a.get("gen_ai.operation.name")
    kind = str(a.get("openinference.span.kind") or "").upper()
    if op in _MODEL_OPERATIONS or kind == "LLM":
        return "model"
    if op == "execute_tool" or kind == "TOOL":
        return "tool"
    return "other"


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _canonical(value)


# Messages are first normalised to GenAI's shape, ``{"role", "parts": [{"type": "text",
# "content"}, {"type": "tool_call", "id", "name", "arguments"}, {"type": "tool_call_response",
# "id", "response"}, ...]}``, from whichever convention the span follows; that shape (role
# and parts only) is what a message's id hashes, so the same message read from two model
# calls, or from the two conventions, is the same message.


def _genai_part(part: Any) -> dict:
    if not isinstance(part, dict):
        return {"type": "text", "content": _text(part)}
    kind = part.get("type")
    if kind == "tool_call":
        return {
            "type": "tool_call",
            "id": part.get("id"),
            "name": part.get("name"),
            "arguments": _loads(part.get("arguments")) if part.get("arguments") is not None else {},
        }
    if kind == "tool_call_response":
        return {"type": "tool_call_response", "id": part.get("id"), "response": part.get("response")}
    return dict(part)


def _genai_messages(value: Any) -> list[dict]:
    value = _loads(value)
    if not isinstance(value, list):
        return []
    out = []
    for m in value:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            continue
        parts = m.get("parts")
        if not isinstance(parts, list):
            content = m.get("content")
            parts = [] if content is None else [{"type": "text", "content": _text(content)}]
        entry = {"role": m["role"], "parts": [_genai_part(p) for p in parts]}
        if m.get("finish_reason") is not None:
            entry["finish_reason"] = m["finish_reason"]
        out.append(entry)
    return out


def _chat_message(role: str, body: dict) -> dict:
    """A chat-completions style message (``content``, ``tool_calls``, ``tool_call_id``) in GenAI's shape."""
    parts: list[dict] = []
    content = body.get("content")
    call_id = body.get("id") if role == "tool" else None
    if role == "tool":
        call_id = body.get("tool_call_id") or call_id
        parts.append({"type": "tool_call_response", "id": call_id, "response": _loads(content)})
        return {"role": "tool", "parts": parts}
    if isinstance(content, list):
        for c in content:
            if isinstance(c, dict) and c.get("type") == "text":
                parts.append({"type": "text", "content": c.get("text", "")})
            elif c is not None:
                parts.append(c if isinstance(c, dict) else {"type": "text", "content": _text(c)})
    elif content is not None and content != "":
        parts.append({"type": "text", "content": _text(content)})
    calls = _loads(body.get("tool_calls"))
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        fn: dict = function if isinstance(function, dict) else call
        args = fn.get("arguments")
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": fn.get("name"),
                "arguments": _loads(args) if args is not None else {},
            }
        )
    return {"role": role, "parts": parts}


def _event_messages(span: Span) -> tuple[list[dict], list[dict]]:
    """The older GenAI span events: ``gen_ai.<role>.message`` (input) and ``gen_ai.choice`` (output)."""
    inputs, outputs = [], []
    for name, _, attrs in span.events:
        body = attrs
        if "gen_ai.event.content" in attrs:
            loaded = _loads(attrs["gen_ai.event.content"])
            body = loaded if isinstance(loaded, dict) else {"content": loaded}
        if name in _EVENT_ROLES:
            inputs.append(_chat_message(str(body.get("role") or _EVENT_ROLES[name]), body))
        elif name == "gen_ai.choice":
            message = _loads(body.get("message"))
            if not isinstance(message, dict):
                message = {k: v for k, v in body.items() if k in ("content", "tool_calls", "role")}
            entry = _chat_message(str(message.get("role") or "assistant"), message)
            if body.get("finish_reason") is not None:
                entry["finish_reason"] = body["finish_reason"]
            outputs.append(entry)
    return inputs, outputs


def _indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's flattened lists: ``prefix.N.rest`` -> a list of ``{rest: value}`` by N."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix + "."):
            continue
        index, _, rest = key[len(prefix) + 1 :].partition(".")
        if index.isdigit() and rest:
            found.setdefault(int(index), {})[rest] = value
    return [found[i] for i in sorted(found)]


def _oi_messages(attrs: dict[str, Any], prefix: str) -> list[dict]:
    out = []
    for flat in _indexed(attrs, prefix):
        role = flat.get("message.role")
        if not isinstance(role, str):
            continue
        body: dict[str, Any] = {}
        contents = _indexed(flat, "message.contents")
        if contents:
            body["content"] = [
                {"type": "text", "text": c.get("message_content.text", "")}
                if c.get("message_content.type", "text") == "text"
                else {
                    "type": "uri",
                    "modality": "image",
                    "uri": c.get("message_content.image.image.url"),
                }
                for c in contents
            ]
        elif "message.content" in flat:
            body["content"] = flat["message.content"]
        calls = _indexed(flat, "message.tool_calls")
        if calls:
            body["tool_calls"] = [
                {
                    "id": c.get("tool_call.id"),
                    "function": {
                        "name": c.get("tool_call.function.name"),
                        "arguments": c.get("tool_call.function.arguments"),
                    },
                }
                for c in calls
            ]
        if "message.tool_call_id" in flat:
            body["tool_call_id"] = flat["message.tool_call_id"]
        out.append(_chat_message(role, body))
    return out


def _conversation(span: Span) -> tuple[list[dict], list[dict]]:
    """A model call's ``(input messages, output messages)`` in GenAI's shape."""
    a = dict(span.attributes)
    for name, _, attrs in span.events:  # the messages may come as an event's attributes instead
        if name == "gen_ai.client.inference.operation.details":
            a = {**attrs, **a}
    inputs: list[dict] = []
    system = _loads(a.get("gen_ai.system_instructions"))
    if isinstance(system, list) and system:
        inputs.append({"role": "system", "parts": [_genai_part(p) for p in system]})
    elif isinstance(system, str) and system:
        inputs.append({"role": "system", "parts": [{"type": "text", "content": system}]})
    if "gen_ai.input.messages" in a or "gen_ai.output.messages" in a:
        return inputs + _genai_messages(a.get("gen_ai.input.messages")), _genai_messages(
            a.get("gen_ai.output.messages")
        )
    if any(k.startswith(("llm.input_messages.", "llm.output_messages.")) for k in a):
        return inputs + _oi_messages(a, "llm.input_messages"), _oi_messages(a, "llm.output_messages")
    ev_in, ev_out = _event_messages(span)
    return inputs + ev_in, ev_out


def _usage(span: Span) -> dict[str, Any]:
    a = span.attributes
    tokens_in = _int(a.get("gen_ai.usage.input_tokens", a.get("gen_ai.usage.prompt_tokens")))
    tokens_out = _int(a.get("gen_ai.usage.output_tokens", a.get("gen_ai.usage.completion_tokens")))
    if tokens_in is None:
        tokens_in = _int(a.get("llm.token_count.prompt"))
    if tokens_out is None:
        tokens_out = _int(a.get("llm.token_count.completion"))
    cache_read = _int(a.get("gen_ai.usage.cache_read.input_tokens", a.get("llm.token_count.prompt_details.cache_read")))
    cache_write = _int(
        a.get("gen_ai.usage.cache_creation.input_tokens", a.get("llm.token_count.prompt_details.cache_write"))
    )
    cost = a.get("llm.cost.total")
    return {
        "in": tokens_in or 0,
        "out": tokens_out or 0,
        "cache_read": cache_read or 0,
        "cache_write": cache_write or 0,
        "cost_usd": float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
        "model": _model(span),
    }


def _model(span: Span) -> str | None:
    a = span.attributes
    for key in ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name"):
        if isinstance(a.get(key), str) and a[key]:
            return a[key]
    return None


def _ui_parts(entry: dict, names: dict[str, str], inputs: dict[str, Any]) -> list[dict]:
    """A normalised message's parts as UIMessage parts (``names``/``inputs``: each call id's tool)."""
    parts = []
    for p in entry["parts"]:
        kind = p.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": _text(p.get("content", ""))})
        elif kind == "reasoning":
            parts.append({"type": "reasoning", "text": _text(p.get("content", ""))})
        elif kind == "tool_call":
            name = p.get("name") if isinstance(p.get("name"), str) and p.get("name") else "unknown"
            call_id = str(p.get("id") or "")
            parts.append(
                {"type": f"tool-{name}", "toolCallId": call_id, "state": "input-available", "input": p["arguments"]}
            )
        elif kind == "tool_call_response":
            call_id = str(p.get("id") or "")
            name = names.get(call_id, "unknown")
            part: dict[str, Any] = {"type": f"tool-{name}", "toolCallId": call_id, "state": "output-available"}
            if call_id in inputs:
                part["input"] = inputs[call_id]
            part["output"] = p.get("response")
            parts.append(part)
        elif kind in ("uri", "blob", "file"):
            media = p.get("mime_type") or (f"{p['modality']}/*" if isinstance(p.get("modality"), str) else None)
            out: dict[str, Any] = {"type": "file", "mediaType": media or "application/octet-stream"}
            if p.get("uri") is not None:
                out["url"] = p["uri"]
            if p.get("content") is not None:
                out["data"] = p["content"]
            if p.get("file_id") is not None:
                out["providerMetadata"] = {"otel": {"file_id": p["file_id"]}}
            parts.append(out)
        else:
            parts.append({"type": "data-otel", "data": p})
    return parts


@dataclass
class WriteSummary:
    """What :meth:`TraceWriter.write` stored."""

    sessions: list[str] = field(default_factory=list)
    spans: int = 0  # spans written (those stored before are not counted)
    messages: int = 0  # new messages
    runs: int = 0  # runs recorded


class TraceWriter:
    """Writes spans into ``store``: one session per conversation, one run per trace.

    Keep one writer for a stream of payloads (the collector does): it remembers which
    session each trace went to, so later spans of a trace that name no conversation
    follow the earlier ones. ``session_prefix`` is put before every session id.
    """

    #: how many traces' sessions are remembered
    REMEMBER = 10_000

    def __init__(self, store: Any, *, session_prefix: str = "", source: str = "OTLP"):
        if not isinstance(session_prefix, str):
            raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
        self.store = store
        self.prefix = session_prefix
        self.source = source
        self._sessions: dict[str, str] = {}

    def _session_of(self, trace_id: str, spans: list[Span]) -> str:
        known = self._sessions.get(trace_id)
        if known is not None:
            return known
        found = None
        for span in spans:
            for key in _CONVERSATION_KEYS:
                value = span.attributes.get(key)
                if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                    found = str(value)
                    break
            if found is not None:
                break
        sid = self.prefix + (found or trace_id)
        if len(self._sessions) >= self.REMEMBER:
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[trace_id] = sid
        return sid

    def write(self, spans: list[Span], *, complete: bool = False, watch: Any = None) -> WriteSummary:
        """Write ``spans`` (of any traces). ``complete``: these are all the spans there are (a
        file), so a trace whose root span is missing gets its run from its top spans."""
        summary = WriteSummary()
        traces: dict[str, list[Span]] = {}
        for span in spans:
            traces.setdefault(span.trace_id, []).append(span)
        for trace_id, group in traces.items():
            group.sort(key=lambda s: (s.start_ns, s.end_ns, s.span_id))
            sid = self._session_of(trace_id, group)
            self._write_trace(sid, trace_id, group, complete, watch, summary)
            if sid not in summary.sessions:
                summary.sessions.append(sid)
        return summary

    def _messages(self, session: Any, run_id: str, group: list[Span], watch: Any) -> int:
        """The model calls' messages, each call's input and output one path under the one before."""
        names: dict[str, str] = {}
        inputs: dict[str, Any] = {}
        for span in group:  # tool executions name the calls the messages answer
            if _operation(span) == "tool":
                call_id = _tool_call_id(span)
                name = _tool_name(span)
                if name:
                    names.setdefault(call_id, name)
        writer = SessionWriter(self.store, session, self.source, watch=watch)
        seen: set[str] = set()
        for span in group:
            if _operation(span) != "model":
                continue
            given, produced = _conversation(span)
            for entry in given + produced:
                for p in entry["parts"]:
                    if p.get("type") == "tool_call" and p.get("id"):
                        if isinstance(p.get("name"), str) and p["name"]:
                            names[str(p["id"])] = p["name"]
                        inputs[str(p["id"])] = p.get("arguments")
            parent: str | None = None
            where = f"span {span.span_id} ({span.name})"
            for entry in given:
                parent = self._add(writer, seen, entry, parent, span, run_id, names, inputs, where, output=False)
            for entry in produced:  # several choices are siblings
                self._add(writer, seen, entry, parent, span, run_id, names, inputs, where, output=True)
        writer.flush()
        return writer.written

    def _add(
        self,
        writer: SessionWriter,
        seen: set[str],
        entry: dict,
        parent: str | None,
        span: Span,
        run_id: str,
        names: dict[str, str],
        inputs: dict[str, Any],
        where: str,
        *,
        output: bool,
    ) -> str:
        record = {"role": entry["role"], "parts": entry["parts"]}
        mid = _message_id(parent, record)
        if mid in seen:
            return mid
        seen.add(mid)
        meta: dict[str, Any] = {"run_id": run_id, "otel": {"trace_id": span.trace_id, "span_id": span.span_id}}
        if output:
            usage = _usage(span)
            meta["model"] = usage["model"]
            meta["usage"] = usage
            if entry.get("finish_reason") is not None:
                meta["otel"]["finish_reason"] = entry["finish_reason"]
        message = {"id": mid, "role": entry["role"], "parts": _ui_parts(entry, names, inputs), "metadata": meta}
        writer.add(message, parent, _ms(span.end_ns if output else span.start_ns), where)
        return mid

    def _write_trace(
        self, sid: str, trace_id: str, group: list[Span], complete: bool, watch: Any, summary: WriteSummary
    ) -> None:
        store = self.store
        session = store.session(sid)
        run_id = f"otel-{self.prefix}{trace_id}"
        summary.messages += self._messages(session, run_id, group, watch)
        stored = [e for e in store.events(sid) if e.get("run_id") == run_id]
        done = {e.get("span_id") for e in stored}
        new = [s for s in group if s.span_id not in done]
        ids = {s.span_id for s in group} | {e.get("span_id") for e in stored}
        roots = [s for s in group if not s.parent_span_id]
        if not roots and complete and not any(e.get("kind") == "run.start" for e in stored):
            roots = [s for s in group if s.parent_span_id not in ids][:1]
        root_ids = {s.span_id for s in roots}
        events: list[dict] = []
        first_input = _run_input(group) if root_ids else None
        for span in new:
            events += _span_events(span, run_id, span.span_id in root_ids, first_input)
        events.sort(key=lambda e: (e["ts"], _ORDER.get(e["kind"], 1)))
        usage = _sum_usage([e for e in stored + events if e.get("kind") == "usage"])
        begin = None
        for root in roots:
            if root.span_id in done or any(r.run_id == run_id for r in store.runs(sid)):
                continue
            begin = root
            break
        _record(store, sid, run_id, events, begin, usage, group)
        summary.spans += len(new)
        summary.runs += begin is not None


_ORDER = {
    "run.start": 0,
    "turn.start": 1,
    "tool.call": 1,
    "otel.span": 1,
    "usage": 2,
    "tool.result": 2,
    "turn.end": 3,
    "run.end": 4,
}


def _tool_call_id(span: Span) -> str:
    a = span.attributes
    for key in ("gen_ai.tool.call.id", "tool_call.id", "tool.id"):
        if isinstance(a.get(key), str) and a[key]:
            return a[key]
    return span.span_id


def _tool_name(span: Span) -> str | None:
    a = span.attributes
    for key in ("gen_ai.tool.name", "tool.name"):
        if isinstance(a.get(key), str) and a[key]:
            return a[key]
    return None


def _user_text(entry: dict) -> str | None:
    texts = [_text(p.get("content", "")) for p in entry["parts"] if p.get("type") == "text"]
    return "\n\n".join(texts) if texts else None


def _run_input(group: list[Span]) -> str | None:
    """The question the trace answered: the last user message its first model call sent (a later
    turn of a conversation sends the earlier ones again); from the next call when it sent none."""
    for span in group:
        if _operation(span) != "model":
            continue
        given, _ = _conversation(span)
        for entry in reversed(given):
            if entry["role"] == "user":
                text = _user_text(entry)
                if text is not None:
                    return text
    return None


def _span_events(span: Span, run_id: str, root: bool, run_input: str | None = None) -> list[dict]:
    start, end = _iso_ns(span.start_ns), _iso_ns(span.end_ns)
    base = {"run_id": run_id, "span_id": span.span_id}
    error = (span.status_message or "error") if span.status == "error" else None
    out: list[dict] = []
    op = _operation(span)
    if root:
        out.append({**base, "kind": "run.start", "ts": start, "at": None, "input": run_input, "name": span.name})
    if op == "model":
        out.append({**base, "kind": "turn.start", "ts": start, "name": span.name, "model": _model(span)})
        out.append({**base, "kind": "usage", "ts": end, **_usage(span)})
        reasons = span.attributes.get("gen_ai.response.finish_reasons")
        reason = reasons[0] if isinstance(reasons, list) and reasons else ("error" if error else None)
        out.append({**base, "kind": "turn.end", "ts": end, "stop_reason": reason})
    elif op == "tool":
        a = span.attributes
        call_id = _tool_call_id(span)
        args = a.get("gen_ai.tool.call.arguments", a.get("input.value"))
        result = a.get("gen_ai.tool.call.result", a.get("output.value"))
        name = _tool_name(span) or span.name
        out.append(
            {**base, "kind": "tool.call", "ts": start, "tool_call_id": call_id, "name": name, "input": _loads(args)}
        )
        out.append(
            {
                **base,
                "kind": "tool.result",
                "ts": end,
                "tool_call_id": call_id,
                "output": _loads(result),
                "error": error,
            }
        )
    else:
        out.append(
            {
                **base,
                "kind": "otel.span",
                "ts": start,
                "name": span.name,
                "span_kind": span.kind,
                "parent_span_id": span.parent_span_id or None,
                "start": start,
                "end": end,
                "duration_s": (span.end_ns - span.start_ns) / 1e9,
                "status": span.status,
                "status_message": span.status_message or None,
                "attributes": span.attributes,
                "events": [{"name": n, "ts": _iso_ns(t), "attributes": at} for n, t, at in span.events],
                "scope": span.scope or None,
            }
        )
    if root:
        out.append({**base, "kind": "run.end", "ts": end, "status": "failed" if error else "completed", "error": error})
    return out


def _sum_usage(events: list[dict]) -> dict[str, Any]:
    """The run's usage: the model calls' summed; its cost only when every call's is known."""
    total: dict[str, Any] = {"in": 0, "out": 0, "cache_read": 0, "cache_write": 0, "cost_usd": None, "model": None}
    costs = [e.get("cost_usd") for e in events]
    for e in events:
        for k in ("in", "out", "cache_read", "cache_write"):
            total[k] += _int(e.get(k)) or 0
        if total["model"] is None and isinstance(e.get("model"), str):
            total["model"] = e["model"]
    if costs and all(isinstance(c, (int, float)) for c in costs):
        total["cost_usd"] = sum(costs)
    return total


def _record(
    store: Any, sid: str, run_id: str, events: list[dict], root: Span | None, usage: dict, group: list[Span]
) -> None:
    """The run's store calls, all here: its record (from the root span) and its events."""
    with store.transaction():
        if root is not None:
            store.run_log.begin(
                sid,
                run_id,
                _run_input(group),
                meta={"otel": {"trace_id": root.trace_id, "span_id": root.span_id, "name": root.name}},
                started_at=_ms(root.start_ns),
            )
        if events:
            store.run_log.append_events(sid, events)
        if root is not None:
            error = (root.status_message or "error") if root.status == "error" else None
            store.run_log.end(
                run_id,
                status="failed" if error else "completed",
                error=error,
                usage=usage,
                ended_at=_ms(root.end_ns),
            )


# ---------------------------------------------------------------------------
# Files


#: JSON white space: what may come before a JSON file's first ``{`` or ``[``
_BLANK = b" \t\r\n"


def _sniff(path: Path) -> tuple[bytes, bytes]:
    """The file's first two bytes and its first byte after a UTF-8 byte order mark and white
    space (gzip read through); ``b""`` for the latter when the file holds nothing but those."""
    with open_binary(path) as fh:
        chunk = fh.read(1 << 16)
        head = chunk[:2]
        if chunk.startswith(codecs.BOM_UTF8):
            chunk = chunk[3:]
        while chunk:
            rest = chunk.lstrip(_BLANK)
            if rest:
                return head, rest[:1]
            chunk = fh.read(1 << 16)
    return head, b""


def _read_all(path: Path) -> bytes:
    with open_binary(path) as fh:
        return fh.read()


def _protobuf_with_spans(data: bytes, source: str) -> Any:
    """The request ``data`` holds when it decodes as protobuf and has spans, else None."""
    try:
        request = _request_from_protobuf(data, source)
    except MalformedInput:
        return None
    spans, _ = spans_of(request)
    return request if spans else None


def _json_requests(path: Path) -> Iterator[tuple[str | None, Any]]:
    """The requests of a JSON file: one document, a JSON array of them, or JSON lines."""
    source = str(path)
    with open_binary(path) as fh:
        ts = TextStream(fh, source)
        if ts.peek() == "{":
            doc, _ = ts.value()
            if ts.peek() == "":
                yield None, _request_from_json(doc, source, None)
                return
        else:  # a JSON array
            ts.expect("[", "'['")
            i = 0
            while ts.peek() != "]":
                if i:
                    ts.expect(",", "',' or ']'")
                value, line = ts.value()
                where = f"record {i} (line {line})"
                yield where, _request_from_json(value, source, where)
                i += 1
            ts.pos += 1
            if ts.peek() != "":
                column = ts.column_at(ts.pos)
                raise MalformedInput(
                    source, ts.where(), f"not valid JSON (more data after the array, at column {column})"
                )
            return
    # more than one value: JSON lines, as the Collector's file exporter writes, a request a line
    for lineno, value, _ in iter_jsonl(path):
        where = f"line {lineno}"
        yield where, _request_from_json(value, source, where)


def _file_requests(path: Path) -> Iterator[tuple[str | None, Any]]:
    """The ExportTraceServiceRequests of a file: one protobuf message, or JSON (:func:`_json_requests`).

    A file of nothing but white space is empty, whatever it might decode as. JSON is read by
    the shared readers (:mod:`._reading`), which name the line of bytes that are not UTF-8
    and of JSON that is not JSON; a file that does not start like JSON is protobuf.
    """
    source = str(path)
    head, first = _sniff(path)
    if not first:
        raise MalformedInput(source, None, EMPTY)
    if first not in (b"{", b"["):
        yield None, _request_from_protobuf(_read_all(path), source)
        return
    if head[:1] == b"\n" and head[1:2] in (b"\t", b"\n", b"\r", b" ", b"[", b"{"):
        # A protobuf request starts with 0x0a (field 1, length-delimited) and its first
        # resource's length: a length of 9, 10, 13, 32, 91 or 123 reads as JSON white space
        # and a bracket. Such a file is protobuf when it decodes as a request holding spans.
        request = _protobuf_with_spans(_read_all(path), source)
        if request is not None:
            yield None, request
            return
    yield from _json_requests(path)


def import_otel(store: Any, path: Any, *, session_prefix: str = "", progress: Any = None) -> Sequence[Session]:
    """Import OpenTelemetry traces from a file: OTLP JSON (one document, or JSON lines as the
    collector's file exporter writes), or a serialized protobuf ``ExportTraceServiceRequest``;
    gzip read through. One session per conversation (or trace), one run per trace, with
    events from the spans (docs/integrations/opentelemetry.md). Returns the sessions written.
    Idempotent. The whole file is read and checked before anything is stored: malformed input
    raises :class:`MalformedInput` naming the file (and the line) and stores nothing.
    """
    check_progress(progress)
    path = as_path(path)
    check_file(path)
    source = str(path)
    spans: list[Span] = []
    problems: list[str] = []
    for _, request in _file_requests(path):
        got, bad = spans_of(request)
        spans += got
        problems += bad
    if problems:
        raise MalformedInput(source, None, f"{len(problems)} span(s) cannot be read: {'; '.join(problems[:3])}")
    writer = TraceWriter(store, session_prefix=session_prefix, source=source)
    with (
        watching_roots(store, source) as watch,
        Progress(progress, total=len(spans), desc=f"importing {path.name}", unit="spans") as bar,
    ):
        with store.transaction():  # the file is stored whole or not at all
            summary = writer.write(spans, complete=True, watch=watch)
        bar.update(len(spans))
    return [store.session(sid) for sid in summary.sessions if len(store.session(sid)) or store.runs(sid)]
