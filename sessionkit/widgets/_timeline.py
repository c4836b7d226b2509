"""A run's timeline: its model calls and tool calls on a time axis (docs/viewer.md, docs/widgets.md).

Computed from the stored run events (``store.events(session_id)``, docs/agents.md) the way the
``turns`` and ``tool_calls`` views of ``store.sql`` derive their latencies, so the bars and the
SQL agree:

* a **model call** runs from its ``turn.start`` to the ``usage`` event that closes it (one per
  model call); a model call that never reported usage ends at the next event that closes it
  (``turn.end``, the next ``turn.start``, ``run.end``) and is marked with the run's error;
* a **tool call** runs from the first ``tool.call`` to the first ``tool.result`` of its
  ``tool_call_id`` in the run (as ``tool_calls.latency_s``); no result leaves it open.

Runs imported from OpenTelemetry (``sk.io.import_otel``) pair a model span's ``turn.start`` and
``usage`` by ``span_id``; captured calls (``sk.capture``) have the same kinds. Plain Python over
dicts: the viewer's payload, the RunView widget and its offline snapshot all call :func:`timeline`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import TypedDict, cast

from ..agent.events import Conversation
from ..errors import MissingDependency
from ..store import Session
from ._payloads import TimelineCall, TimelinePayload, TimelineRun

__all__ = ["timeline", "produced_messages", "session_timeline"]


def _ts(value: object) -> _dt.datetime | None:
    if isinstance(value, _dt.datetime):
        ts = value
    elif isinstance(value, str) and value:
        try:
            ts = _dt.datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=_dt.UTC)


def _num(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return value


def _seconds(start: _dt.datetime | None, end: _dt.datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def _error_text(value: object) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


class Produced(TypedDict):
    """Which message each call produced (:func:`produced_messages`)."""

    model: dict[str, list[str]]
    tool: dict[tuple[str, str], str]


def produced_messages(messages: Iterable[dict]) -> Produced:
    """Which stored message each call produced, from the run's messages in write order:
    ``{"model": {run_id: [message ids of its model calls' replies, in order]},
    "tool": {(run_id, tool_call_id): message id of the tool result (or of the call)}}``.
    A model call's reply is an assistant message whose ``metadata`` names the run and carries
    ``usage`` (what the agent, the capture and the importers store)."""
    model: dict[str, list[str]] = {}
    tool: dict[tuple[str, str], str] = {}
    for m in messages:
        meta = m.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        run = meta.get("run_id")
        if not isinstance(run, str):
            continue
        if m.get("role") == "assistant" and isinstance(meta.get("usage"), Mapping):
            model.setdefault(run, []).append(str(m.get("id")))
        for part in m.get("parts") or ():
            if not isinstance(part, Mapping) or not isinstance(part.get("toolCallId"), str):
                continue
            kind = str(part.get("type") or "")
            if not (kind.startswith("tool-") or kind == "dynamic-tool"):
                continue
            key = (run, part["toolCallId"])
            done = part.get("state") in ("output-available", "output-error")
            # the result's message wins over the call's (a tool message after the call)
            if done or key not in tool:
                tool[key] = str(m.get("id"))
    return {"model": model, "tool": tool}


def timeline(events: Iterable[dict], produced: Produced | None = None) -> TimelinePayload:
    """The timeline of every run in ``events`` (a session's events, any order):
    ``{"runs": [...]}``, runs in the order they started. Each run is ``{"run_id", "start",
    "end", "duration_s", "status", "error", "calls"}`` and each call ``{"kind": "model" |
    "tool", "index", "name", "turn", "start", "end", "offset_s", "duration_s", "error",
    "message_id"}`` (``offset_s`` from the run's start; times ISO 8601; ``duration_s`` is
    ``None`` for a call that never ended). A model call also has ``tokens_in``,
    ``tokens_out``, ``cost_usd`` and ``model``; a tool call ``tool_call_id``. Calls are in
    the order they started. ``produced`` (from :func:`produced_messages`) names the message
    each call produced; without it ``message_id`` is ``None``."""
    ordered = sorted(
        (e for e in events if isinstance(e, Mapping) and isinstance(e.get("run_id"), str)),
        key=lambda e: int(e["seq"]) if isinstance(e.get("seq"), int) else 0,
    )
    runs: dict[str, dict] = {}
    open_model: dict[str, list[dict]] = {}
    tools: dict[tuple[str, str], dict] = {}
    model_n: dict[str, int] = {}
    replies = produced["model"] if produced else {}
    results = produced["tool"] if produced else {}

    def close_model(run_id: str, call: dict, ts: _dt.datetime | None, error: str | None = None) -> None:
        call["_end"] = ts
        if error and not call["error"]:
            call["error"] = error
        open_model[run_id].remove(call)

    for e in ordered:
        run_id = e["run_id"]
        kind = e.get("kind")
        ts = _ts(e.get("ts"))
        run = runs.get(run_id)
        if run is None:
            run = runs[run_id] = {
                "run_id": run_id,
                "_start": None,
                "_end": None,
                "_first": ts,
                "status": None,
                "error": None,
                "calls": [],
            }
            open_model[run_id] = []
        if kind == "run.start" and run["_start"] is None:
            run["_start"] = ts
        elif kind == "turn.start":
            for call in list(open_model[run_id]):
                if call["_span"] is None:  # a model call that never reported usage
                    close_model(run_id, call, ts)
            k = model_n.get(run_id, 0)
            model_n[run_id] = k + 1
            ids = replies.get(run_id) or []
            call = {
                "kind": "model",
                "name": e.get("model") if isinstance(e.get("model"), str) else None,
                "turn": e.get("turn") if isinstance(e.get("turn"), int) else k + 1,
                "_start": ts,
                "_end": None,
                "_span": e.get("span_id") if isinstance(e.get("span_id"), str) else None,
                "error": None,
                "tokens_in": None,
                "tokens_out": None,
                "cost_usd": None,
                "model": None,
                "message_id": ids[k] if k < len(ids) else None,
            }
            run["calls"].append(call)
            open_model[run_id].append(call)
        elif kind == "usage":
            pending = open_model[run_id]
            span = e.get("span_id")
            match = [c for c in pending if span is not None and c["_span"] == span] or pending[-1:]
            if match:
                call = match[0]
                call["tokens_in"] = _num(e.get("in"))
                call["tokens_out"] = _num(e.get("out"))
                call["cost_usd"] = _num(e.get("cost_usd"))
                if isinstance(e.get("model"), str):
                    call["model"] = e["model"]
                    call["name"] = call["name"] or e["model"]
                close_model(run_id, call, ts)
        elif kind == "turn.end":
            span = e.get("span_id")
            for call in list(open_model[run_id]):
                if span is None or call["_span"] == span:
                    close_model(run_id, call, ts, "stopped: error" if e.get("stop_reason") == "error" else None)
        elif kind == "tool.call" and isinstance(e.get("tool_call_id"), str):
            key = (run_id, e["tool_call_id"])
            if key not in tools:
                call = {
                    "kind": "tool",
                    "name": e.get("name") if isinstance(e.get("name"), str) else None,
                    "turn": None,
                    "tool_call_id": e["tool_call_id"],
                    "_start": ts,
                    "_end": None,
                    "error": None,
                    "message_id": results.get(key),
                }
                tools[key] = call
                run["calls"].append(call)
        elif kind == "tool.result" and isinstance(e.get("tool_call_id"), str):
            done = tools.get((run_id, e["tool_call_id"]))
            if done is not None and done["_end"] is None:
                done["_end"] = ts
                done["error"] = _error_text(e.get("error"))
        elif kind == "run.end":
            run["_end"] = ts
            run["status"] = e.get("status") if isinstance(e.get("status"), str) else None
            run["error"] = _error_text(e.get("error"))
            for call in list(open_model[run_id]):
                close_model(run_id, call, ts, run["error"] or "the run ended before the model answered")
        if ts is not None and (run["_first"] is None or ts < run["_first"]):
            run["_first"] = ts

    started: list[tuple[_dt.datetime | None, TimelineRun]] = []
    for run in runs.values():
        start = run["_start"] or run["_first"]
        calls: list[TimelineCall] = []
        for call in run["calls"]:
            call.pop("_span", None)
            c_start, c_end = call.pop("_start"), call.pop("_end")
            # a model call's or a tool call's fields (built above), with its times
            timed = {
                **call,
                "start": c_start.isoformat() if c_start else None,
                "end": c_end.isoformat() if c_end else None,
                "offset_s": _seconds(start, c_start),
                "duration_s": _seconds(c_start, c_end),
            }
            calls.append(cast(TimelineCall, timed))
        calls.sort(key=lambda c: (c["offset_s"] is None, c["offset_s"] or 0.0))
        for k, call_k in enumerate(calls):
            call_k["index"] = k
        end = run["_end"]
        started.append(
            (
                start,
                {
                    "run_id": run["run_id"],
                    "start": start.isoformat() if start else None,
                    "end": end.isoformat() if end else None,
                    "duration_s": _seconds(start, end),
                    "status": run["status"],
                    "error": run["error"],
                    "calls": calls,
                },
            )
        )
    epoch = _dt.datetime.min.replace(tzinfo=_dt.UTC)
    started.sort(key=lambda pair: (pair[0] is None, pair[0] or epoch))
    return {"runs": [r for _, r in started]}


def session_timeline(session: Conversation, events: Iterable[dict] | None = None) -> TimelinePayload:
    """:func:`timeline` of a session's runs with the message each call produced. ``session``: a
    store's session (its run messages read by one ``store.sql_arrow`` query and one
    ``get_many``), or any session with ``get_history()``; ``events``: default, the session's
    stored events."""
    if events is None:
        events = session.run_log.events(session.session_id)
    events = list(events)
    if not events:
        return {"runs": []}
    produced = None
    if isinstance(session, Session):  # a store's session: its run messages in one query
        store = session.store
        try:
            ids = [
                r["id"]
                for r in store.sql_arrow(
                    "SELECT id FROM messages WHERE session_id = $sid AND json_type(metadata, '$.run_id') = 'VARCHAR' "
                    "ORDER BY seq",
                    {"sid": session.session_id},
                ).to_pylist()
            ]
        except MissingDependency:  # no analysis extra (duckdb): the latest path's messages below
            pass
        else:
            msgs = session.get_many(ids) if ids else {}
            produced = produced_messages(msgs[i] for i in ids if i in msgs)
    if produced is None:
        produced = produced_messages(session.get_history())
    return timeline(events, produced)
