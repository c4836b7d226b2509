"""The OpenAPI 3.1 document served at ``GET /openapi.json``."""

from __future__ import annotations

import copy

__all__ = ["openapi_document"]

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,125}$"


def _error(*codes: str, description: str) -> dict:
    schema: dict = {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string", "enum": list(codes)} if codes else {"type": "string"}},
    }
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_E400_ID = _error("session_id_invalid", description="The session id does not match " + _ID_PATTERN)
_E401 = _error(
    "unauthorized",
    description="No valid `Authorization: Bearer <token>` (or the custom authenticator refused the request)",
)
_E404 = _error(
    "session_not_found",
    "not_found",
    description="The session was never created, was deleted, or belongs to another principal",
)
_E405 = _error("method_not_allowed", description="The path does not take this method")
_E413 = _error("body_too_large", description="The request body is larger than the server's `max_body_bytes`")


def _ok(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_SESSION_ID_PARAM = {
    "name": "sessionId",
    "in": "path",
    "required": True,
    "description": "The session id (unique within the caller's namespace).",
    "schema": {"type": "string", "pattern": _ID_PATTERN},
}

_RESUME_PARAMS = [
    {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "description": "Resume after this event `seq` (what an EventSource sends when it reconnects).",
        "schema": {"type": "string", "pattern": r"^(-1|[0-9]{1,18})$"},
    },
    {
        "name": "lastEventId",
        "in": "query",
        "required": False,
        "description": "Like the `Last-Event-ID` header, for clients that cannot set headers (the header wins).",
        "schema": {"type": "string", "pattern": r"^(-1|[0-9]{1,18})$"},
    },
]

_E400_RESUME = _error(
    "session_id_invalid",
    "last_event_id_invalid",
    description="A malformed session id or Last-Event-ID",
)

_EVENT_SCHEMA = {
    "type": "object",
    "description": (
        "A run event (SPEC A4): `v`, `seq` (from 0 within the session, across runs), `ts`, `session_id`, "
        "`run_id` (`<sessionId>.<n>`), `kind` (`run.start`, `turn.start`, `delta.text`, `delta.reasoning`, "
        "`tool.call`, `tool.result`, `usage`, `turn.end`, `run.end`) and the kind's fields. A reader that "
        "resumes before the retained window first gets `{\"error\": \"events_gap\", \"requestedSeq\", "
        "\"earliestSeq\"}` (no event id), then the window; `requestedSeq` is the first seq it asked for."
    ),
    "required": ["seq", "kind", "run_id", "session_id"],
    "properties": {
        "v": {"type": "integer"},
        "seq": {"type": "integer", "minimum": 0},
        "ts": {"type": "string"},
        "session_id": {"type": "string"},
        "run_id": {"type": "string"},
        "kind": {"type": "string"},
    },
}

_MESSAGE_BODY = {
    "type": "object",
    "required": ["text"],
    "properties": {
        "text": {"type": "string", "minLength": 1, "description": "What the user says."},
        "author": {
            "type": ["string", "null"],
            "description": "Who wrote it; kept in the user message's metadata (`metadata.author`).",
        },
        "mode": {
            "type": "string",
            "enum": ["followUp", "steer"],
            "default": "followUp",
            "description": (
                "For a busy session: `steer` messages go ahead of `followUp` ones at the active run's "
                "next turn boundary."
            ),
        },
    },
}

_ACCEPTED = {
    "type": "object",
    "required": ["runId", "queued"],
    "properties": {
        "runId": {"type": "string", "description": "`<sessionId>.<n>`: n counts the session's runs from 1."},
        "queued": {
            "type": "boolean",
            "description": "True when the session was busy: the message joins the active run (same runId).",
        },
    },
}

_RUN = {
    "type": "object",
    "required": ["runId", "status", "input", "startedAt"],
    "properties": {
        "runId": {"type": "string"},
        "status": {"type": "string", "enum": ["running", "completed", "failed", "interrupted"]},
        "input": {"type": ["string", "null"]},
        "startedAt": {"type": ["string", "null"]},
        "endedAt": {"type": ["string", "null"]},
    },
}

_SENT = {
    "type": "object",
    "required": ["runId", "text", "mode", "queued", "at"],
    "properties": {
        "runId": {"type": "string"},
        "text": {"type": "string"},
        "mode": {"type": "string", "enum": ["followUp", "steer"]},
        "queued": {"type": "boolean"},
        "at": {"type": "string"},
        "author": {"type": "string"},
    },
}

_SESSION = {
    "type": "object",
    "required": ["sessionId", "runs", "active", "queued", "messages"],
    "properties": {
        "sessionId": {"type": "string"},
        "runs": {"type": "array", "items": _RUN},
        "active": {"type": ["string", "null"], "description": "The active run id, or null."},
        "queued": {"type": "integer", "minimum": 0, "description": "Messages waiting for a turn boundary."},
        "messages": {"type": "array", "items": _SENT, "description": "What callers sent, oldest first."},
    },
}

_SESSION_ID_BODY = {
    "type": "object",
    "properties": {
        "sessionId": {
            "type": "string",
            "pattern": _ID_PATTERN,
            "description": "The id to create; a random one is chosen when it is missing.",
        }
    },
}

_DOCUMENT = {
    "openapi": "3.1.0",
    "info": {
        "title": "sessionkit server",
        "version": "1",
        "description": (
            "Sessions owned by the server: send messages, follow their runs live (Server-Sent Events or a "
            "WebSocket), resume by event seq. Every operation but this document needs "
            "`Authorization: Bearer <token>` (or the server's custom authenticator); a refused request "
            "gets 401 before anything else is checked. With a custom authenticator each principal has "
            "its own namespace of session ids."
        ),
    },
    "security": [{"bearerAuth": []}],
    "components": {
        "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
    },
    "paths": {
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document (no token needed)",
                "security": [],
                "responses": {"200": _ok({"type": "object"}, "The OpenAPI document")},
            }
        },
        "/sessions": {
            "post": {
                "operationId": "createSession",
                "summary": "Create a session (idempotent)",
                "requestBody": {"required": False, "content": {"application/json": {"schema": _SESSION_ID_BODY}}},
                "responses": {
                    "201": _ok(_SESSION_ID_BODY | {"required": ["sessionId"]}, "Created"),
                    "200": _ok(_SESSION_ID_BODY | {"required": ["sessionId"]}, "It already existed"),
                    "400": _error("session_id_invalid", "invalid_body", description="A malformed id or body"),
                    "401": _E401,
                    "413": _E413,
                },
            }
        },
        "/sessions/{sessionId}": {
            "parameters": [_SESSION_ID_PARAM],
            "get": {
                "operationId": "getSession",
                "summary": "Runs, the active run, the queue length and the messages callers sent",
                "responses": {
                    "200": _ok(_SESSION, "The session"),
                    "400": _E400_ID,
                    "401": _E401,
                    "404": _E404,
                    "413": _E413,
                },
            },
            "delete": {
                "operationId": "deleteSession",
                "summary": "Delete a session: cancels the active run, drops the queue, removes what is stored",
                "responses": {
                    "202": _ok(
                        {
                            "type": "object",
                            "required": ["sessionId", "status"],
                            "properties": {"sessionId": {"type": "string"}, "status": {"const": "deleted"}},
                        },
                        "Deleted",
                    ),
                    "400": _E400_ID,
                    "401": _E401,
                    "404": _E404,
                    "413": _E413,
                },
            },
        },
        "/sessions/{sessionId}/messages": {
            "parameters": [_SESSION_ID_PARAM],
            "post": {
                "operationId": "sendMessage",
                "summary": "Send a message: starts a run, or joins the active run when the session is busy",
                "requestBody": {"required": True, "content": {"application/json": {"schema": _MESSAGE_BODY}}},
                "responses": {
                    "202": _ok(_ACCEPTED, "Accepted"),
                    "400": _error("session_id_invalid", "invalid_body", description="A malformed id or body"),
                    "401": _E401,
                    "404": _E404,
                    "409": _error(
                        "conversation_unrecoverable",
                        description="The stored conversation changed behind the server's back since its last run",
                    ),
                    "413": _E413,
                    "429": _error(
                        "too_busy",
                        description="Too many concurrent runs, or the session's queue is full",
                    ),
                    "503": _error("server_stopping", description="The server is shutting down"),
                },
            },
        },
        "/sessions/{sessionId}/events": {
            "parameters": [_SESSION_ID_PARAM],
            "get": {
                "operationId": "streamEvents",
                "summary": "Server-Sent Events of every run: the retained window, then live",
                "description": (
                    "Each event is one SSE frame whose `id` is the event's `seq` and whose `data` is the "
                    "event's JSON. The stream stays open across runs. `Last-Event-ID: n` resumes after seq "
                    "n, each frame exactly once; a seq older than the retained window first gets an "
                    "`events_gap` frame, then the window. Comment lines keep idle streams alive."
                ),
                "parameters": _RESUME_PARAMS,
                "responses": {
                    "200": {
                        "description": "An event stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"},
                                                          "x-event-data": _EVENT_SCHEMA}},
                    },
                    "400": _E400_RESUME,
                    "401": _E401,
                    "404": _E404,
                    "413": _E413,
                },
            },
        },
        "/sessions/{sessionId}/ws": {
            "parameters": [_SESSION_ID_PARAM],
            "get": {
                "operationId": "websocket",
                "summary": "WebSocket: the same event frames; the client may send messages",
                "description": (
                    "Upgrade to a WebSocket. The server sends the same JSON frames as the event stream "
                    "(the retained window or what follows `lastEventId`, then live). The client may send "
                    "`{\"text\", \"mode\"?, \"author\"?}` and gets `{\"runId\", \"queued\"}`, or "
                    "`{\"error\": ...}` with the codes of `POST /sessions/{sessionId}/messages`."
                ),
                "parameters": _RESUME_PARAMS[1:],
                "responses": {
                    "101": {"description": "Switching to the WebSocket protocol"},
                    "400": _E400_RESUME,
                    "401": _E401,
                    "404": _E404,
                    "413": _E413,
                    "426": _error("upgrade_required", description="A plain HTTP request to the WebSocket route"),
                },
            },
        },
    },
}


def openapi_document() -> dict:
    """A fresh copy of the document."""
    return copy.deepcopy(_DOCUMENT)
