"""OpenTelemetry traces in: OTLP/HTTP payloads written into a store as they arrive.

>>> import sessionkit as sk
>>> from sessionkit.integrations.otel import TraceReceiver
>>> receiver = TraceReceiver(sk.open_store("traces.db"))
>>> answer = receiver.export(body, content_type="application/x-protobuf")
>>> answer.status, answer.content_type          # 200, an ExportTraceServiceResponse

:class:`TraceReceiver` is what ``sessionkit collect`` serves at ``POST /v1/traces``; a
program of its own can feed it payloads from any transport. What the spans become
(sessions, messages, runs and events) is :mod:`sessionkit.io.otel`'s mapping, the same
as ``sessionkit import`` of a trace file: docs/integrations/opentelemetry.md.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..errors import MalformedInput
from ..io.otel import Span, TraceWriter, WriteSummary, encode_response, encode_status, parse_request

__all__ = ["TraceReceiver", "Answer", "Span", "TraceWriter", "WriteSummary", "parse_request"]

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


@dataclass
class Answer:
    """An OTLP/HTTP answer: ``status`` (200, 400 or 415), its ``body`` and ``content_type``,
    and what was stored (``summary``, None when nothing was)."""

    status: int
    body: bytes
    content_type: str
    summary: WriteSummary | None = None
    error: str | None = None


class TraceReceiver:
    """Writes OTLP/HTTP trace payloads into ``store`` as they arrive.

    One :class:`sessionkit.io.otel.TraceWriter` serves every payload (it remembers which
    session each trace went to); payloads are written one at a time. ``session_prefix``
    is put before every session id; ``max_size`` bounds a payload once decompressed (bytes).
    """

    def __init__(self, store: Any, *, session_prefix: str = "", max_size: int | None = None):
        self.store = store
        self.max_size = max_size
        self.writer = TraceWriter(store, session_prefix=session_prefix, source="OTLP/HTTP")
        self._lock = threading.Lock()

    def export(self, body: bytes, *, content_type: str, encoding: str | None = None) -> Answer:
        """Decode and store one payload (``POST /v1/traces``).

        ``application/x-protobuf`` or ``application/json`` (OTLP/HTTP's two encodings),
        ``encoding`` a ``Content-Encoding`` (``gzip``). Another content type -> 415; a
        payload that is not OTLP trace data -> 400 with a ``google.rpc.Status`` saying why,
        and nothing is stored; spans that cannot be kept are left out and counted in the
        answer's partial success. A payload is stored in one transaction: whole, or (a
        message the store refuses: 400) not at all.
        """
        media = (content_type or "").split(";", 1)[0].strip().lower()
        json_body = media == _JSON
        answer_type = _JSON if json_body else _PROTOBUF
        if media not in (_PROTOBUF, _JSON, "application/protobuf"):
            reason = f"unsupported content type {content_type!r}: send {_PROTOBUF} or {_JSON}"
            return Answer(415, encode_status(reason, json_body=False), _PROTOBUF, error=reason)
        try:
            spans, problems = parse_request(
                body, content_type=media, encoding=encoding, source="the payload", max_size=self.max_size
            )
        except MalformedInput as exc:
            reason = str(exc)
            return Answer(400, encode_status(reason, json_body=json_body), answer_type, error=reason)
        try:
            with self._lock, self.store.transaction():  # the payload is stored whole or not at all
                summary = self.writer.write(spans)
        except MalformedInput as exc:  # a message the store refuses (too large, not valid)
            reason = str(exc)
            return Answer(400, encode_status(reason, json_body=json_body), answer_type, error=reason)
        message = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        return Answer(200, encode_response(len(problems), message, json_body=json_body), answer_type, summary)
