"""Google ADK session databases -> one session per ADK session.

Reads the SQLite file of ``DatabaseSessionService`` (schema v1: the event as JSON in
``events.event_data``) and of ``SqliteSessionService`` (the same columns). Each ADK
session becomes the sessionkit session of its id (``app/user/id`` when the file holds
one id under several apps or users), its events, in time order as ``get_session``
returns them, one message each, under the event's own id:

* the ``user`` author -> ``user``, every agent -> ``assistant``; ``text`` parts ->
  ``text`` (``thought`` ones -> ``reasoning``), ``inline_data`` / ``file_data`` ->
  ``file`` parts, code execution parts -> ``data-adk-<kind>`` parts;
* a ``function_call`` -> a ``tool-<name>`` part (``toolCallId``, ``args`` as ``input``);
  the event holding its ``function_response`` gives that part its ``output`` and
  ``state: "output-available"``, and is not kept as a message of its own (its state
  delta and other actions go to the call's ``metadata["adk"]["tool_events"]``);
* ``metadata["adk"]`` keeps ``author``, ``invocation_id``, the event's non-empty
  ``actions`` (``state_delta``, ``artifact_delta``, ``transfer_to_agent``,
  ``escalate``...) and its other fields (``branch``, ``usage_metadata``,
  ``finish_reason``...);
* a rewind (an event whose ``actions.rewind_before_invocation_id`` names an earlier
  invocation) starts a branch: it and the events after it hang under the message
  before that invocation, so the rewound events stay in the tree as the other branch.

The event's ``timestamp`` is the message time. Rows are read a page at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import MalformedInput
from ..store import Session
from ._common import watching_roots
from ._frameworks import (
    HeldCalls,
    SessionWriter,
    columns,
    iso_time,
    load_json,
    open_sqlite,
    rows,
    scalar,
    table_names,
    tool_output,
)
from ._progress import Progress, check_progress
from ._reading import as_path

__all__ = ["import_adk", "adk_event_to_message", "adk_event_as_message", "adk_response_part"]

_EVENT_OWN = {"content", "id", "timestamp", "invocation_id", "author", "actions"}


def _nonempty(value: Any) -> bool:
    return value not in (None, {}, [], "", False)


def _parts(content: Any, source: str, where: str) -> tuple[list[dict], list[dict]]:
    """``(parts, function responses)`` of an event's content."""
    if content is None:
        return [], []
    if not isinstance(content, dict):
        raise MalformedInput(source, where, "the event's 'content' is not an object")
    raw = content.get("parts") or []
    if not isinstance(raw, list):
        raise MalformedInput(source, where, "content 'parts' is not a list")
    parts: list[dict] = []
    responses: list[dict] = []
    for i, part in enumerate(raw):
        if not isinstance(part, dict):
            raise MalformedInput(source, where, f"content parts[{i}] is not an object")
        if isinstance(part.get("text"), str):
            parts.append({"type": "reasoning" if part.get("thought") else "text", "text": part["text"]})
        elif isinstance(part.get("function_call"), dict):
            call = part["function_call"]
            name = call.get("name")
            if not isinstance(name, str) or not name:
                raise MalformedInput(source, where, f"content parts[{i}]: function_call has no name")
            call_id = call.get("id") or f"{name}-{i}"
            parts.append(
                {
                    "type": f"tool-{name}",
                    "toolCallId": call_id,
                    "state": "input-available",
                    "input": call.get("args") or {},
                }
            )
        elif isinstance(part.get("function_response"), dict):
            response = part["function_response"]
            name = response.get("name")
            if not isinstance(name, str) or not name:
                raise MalformedInput(source, where, f"content parts[{i}]: function_response has no name")
            responses.append({"name": name, "id": response.get("id") or name, "response": response.get("response")})
        elif isinstance(part.get("inline_data"), dict):
            blob = part["inline_data"]
            file: dict[str, Any] = {"type": "file", "mediaType": blob.get("mime_type") or "application/octet-stream"}
            if blob.get("data") is not None:
                file["data"] = blob["data"]
            if blob.get("display_name"):
                file["filename"] = blob["display_name"]
            parts.append(file)
        elif isinstance(part.get("file_data"), dict):
            ref = part["file_data"]
            file = {"type": "file", "mediaType": ref.get("mime_type") or "application/octet-stream"}
            if ref.get("file_uri"):
                file["url"] = ref["file_uri"]
            if ref.get("display_name"):
                file["filename"] = ref["display_name"]
            parts.append(file)
        else:
            kinds = [k for k, v in part.items() if v is not None and k not in ("thought", "thought_signature")]
            kind = kinds[0] if kinds else "part"
            parts.append({"type": f"data-adk-{kind}", "data": part})
    return parts, responses


def _output(response: Any) -> Any:
    """A function response as an output: ``{"result": x}`` (ADK's wrapping of plain values) -> x."""
    if isinstance(response, dict) and set(response) == {"result"}:
        return tool_output(response["result"])
    return response


def adk_response_part(response: dict) -> dict:
    """A function response (``{"name", "id", "response"}`` as :func:`adk_event_to_message` lists them)
    as the tool part it completes: ``tool-<name>`` with ``state: "output-available"`` and its output."""
    return {
        "type": f"tool-{response['name']}",
        "toolCallId": response["id"],
        "state": "output-available",
        "output": _output(response["response"]),
    }


def adk_event_as_message(event: dict, source: str = "<event>", where: str = "event") -> dict:
    """One ADK event as one message (without ``id``), its function responses included.

    :func:`adk_event_to_message`'s mapping, with each function response as a
    :func:`adk_response_part` after the event's own parts; a message of responses only has the
    role ``tool``. The importer folds a response into its call's part instead when it holds the
    call; a session service (``sessionkit.integrations.adk``) keeps every event as a message.
    """
    message, responses = adk_event_to_message(event, source, where)
    answers = [adk_response_part(r) for r in responses]
    message["parts"] += answers
    if answers and len(answers) == len(message["parts"]):
        message["role"] = "tool"
    return message


def adk_event_to_message(event: dict, source: str = "<event>", where: str = "event") -> tuple[dict, list[dict]]:
    """One ADK event (as ``Event.model_dump(mode="json")`` gives it) as a sessionkit message
    (without ``id``), and its function responses ``[{"name", "id", "response"}]``."""
    if not isinstance(event, dict):
        raise MalformedInput(source, where, "an event must be a JSON object")
    author = event.get("author")
    if not isinstance(author, str) or not author:
        raise MalformedInput(source, where, "the event has no 'author'")
    parts, responses = _parts(event.get("content"), source, where)
    role = "user" if author == "user" else "assistant"
    meta: dict[str, Any] = {"author": author}
    if event.get("invocation_id"):
        meta["invocation_id"] = event["invocation_id"]
    actions = event.get("actions")
    if isinstance(actions, dict):
        kept = {k: v for k, v in actions.items() if _nonempty(v)}
        if kept:
            meta["actions"] = kept
    for key, value in event.items():
        if key not in _EVENT_OWN and _nonempty(value) and not (key == "node_info" and value == {"path": ""}):
            meta[key] = value
    return {"role": role, "parts": parts, "metadata": {"adk": meta}}, responses


class _Session:
    def __init__(self, writer: SessionWriter, source: str):
        self.held = HeldCalls(writer)
        self.source = source
        self.tail: str | None = None
        self.before: dict[str, str | None] = {}  # invocation id -> the message before its first event

    def event(self, event_id: str, created: str | None, event: dict, where: str) -> None:
        message, responses = adk_event_to_message(event, self.source, where)
        meta = message["metadata"]["adk"]
        invocation = meta.get("invocation_id")
        rewind = meta.get("actions", {}).get("rewind_before_invocation_id")
        if isinstance(rewind, str) and rewind in self.before:
            self.held.release()
            self.tail = self.before[rewind]
        if isinstance(invocation, str) and invocation not in self.before:
            self.before[invocation] = self.tail
        left = []
        noted: set[int] = set()  # the call messages this event's actions are noted in
        for response in responses:
            call_id = response["id"]
            waiting = self.held.waiting(call_id)
            if waiting is None:
                left.append(adk_response_part(response))
                continue
            result = {"state": "output-available", "output": _output(response["response"])}
            tool_event = {"id": event_id, **{k: v for k, v in meta.items() if k not in ("invocation_id",)}}
            if id(waiting) not in noted:
                noted.add(id(waiting))
                waiting["metadata"]["adk"].setdefault("tool_events", []).append(tool_event)
            self.held.answer(call_id, result)
        if responses and not left and not message["parts"]:
            return  # every response went into its call
        message["parts"] += left
        if left and len(left) == len(message["parts"]):
            message["role"] = "tool"
        self.held.add({"id": event_id, **message}, self.tail, created, where)
        self.tail = event_id


def _session_ids(keys: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """ADK session ids as sessionkit ids: the id alone unless it is used under several apps or users."""
    count: dict[str, int] = {}
    for _, _, sid in keys:
        count[sid] = count.get(sid, 0) + 1
    return {(app, user, sid): sid if count[sid] == 1 else f"{app}/{user}/{sid}" for app, user, sid in keys}


def import_adk(
    store,
    path: Any,
    *,
    app_name: str | None = None,
    user_id: str | None = None,
    session_ids: list[str] | None = None,
    session_prefix: str = "",
    progress: Any = None,
) -> Sequence[Session]:
    """Import a Google ADK session database (``DatabaseSessionService`` on SQLite, or ``SqliteSessionService``): one
    sessionkit session per ADK session.

    ``app_name``, ``user_id`` and ``session_ids`` limit the import; ``session_prefix`` is put before each
    session id (to keep sessions of several sources apart in one store). Returns the sessions, oldest first.
    Idempotent (message ids are the event ids). ``progress`` as in :class:`sessionkit.io.Progress` (events
    read). Malformed data raises :class:`MalformedInput` naming the file, the session and the event.
    """
    check_progress(progress)
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    path = as_path(path)
    source = str(path)
    if session_ids is not None and (isinstance(session_ids, str) or not all(isinstance(s, str) for s in session_ids)):
        raise TypeError("session_ids must be a list of session id strings")
    conn = open_sqlite(path, "a Google ADK session database")
    try:
        names = table_names(conn, source)
        if "events" not in names or "sessions" not in names:
            raise MalformedInput(source, None, "no tables 'sessions' and 'events': not a Google ADK session database")
        if "event_data" not in columns(conn, "events", source):
            raise MalformedInput(
                source,
                None,
                "events have no 'event_data' column: an ADK schema older than v1 "
                "(upgrade it with ADK's migration first)",
            )
        where_sql, params = [], []
        for column, value in (("app_name", app_name), ("user_id", user_id)):
            if value is not None:
                if not isinstance(value, str):
                    raise TypeError(f"{column} must be a string")
                where_sql.append(f"{column} = ?")
                params.append(value)
        clause = (" WHERE " + " AND ".join(where_sql)) if where_sql else ""
        keys = [
            (a, u, s)
            for (a, u, s, _) in rows(
                conn,
                f"SELECT app_name, user_id, id, create_time FROM sessions{clause} ORDER BY create_time, id",
                tuple(params),
                source=source,
            )
        ]
        for app, user, sid in keys:
            if not (isinstance(app, str) and isinstance(user, str) and isinstance(sid, str) and sid):
                raise MalformedInput(
                    source, f"session {sid!r}", "app_name, user_id and id must be strings (the id not empty)"
                )
        ids = _session_ids(keys)
        if session_ids is not None:
            wanted = set(session_ids)
            keys = [k for k in keys if k[2] in wanted or ids[k] in wanted]
        total = None
        if progress is not False and session_ids is None:
            total = scalar(conn, f"SELECT COUNT(*) FROM events{clause}", tuple(params), source=source)
        sessions = []
        with (
            watching_roots(store, source) as watch,
            Progress(progress, total=total, desc=f"importing {path.name}", unit="events") as bar,
        ):
            for app, user, sid in keys:
                session = store.session(session_prefix + ids[(app, user, sid)])
                writer = SessionWriter(store, session, source, watch=watch)
                walk = _Session(writer, source)
                try:
                    for event_id, stamp, data in rows(
                        conn,
                        "SELECT id, timestamp, event_data FROM events WHERE app_name = ? AND user_id = ? "
                        "AND session_id = ? ORDER BY timestamp, rowid",
                        (app, user, sid),
                        source=source,
                    ):
                        where = f"session {sid!r}, event {event_id}"
                        event = load_json(data, source, where, "event_data") if isinstance(data, (str, bytes)) else data
                        moment = event.get("timestamp", stamp) if isinstance(event, dict) else stamp
                        walk.event(event_id, iso_time(moment, source, where), event, where)
                        bar.update()
                    walk.held.finish()
                except MalformedInput:
                    writer.flush()
                    raise
                if len(session):
                    sessions.append(session)
        return sessions
    finally:
        conn.close()
