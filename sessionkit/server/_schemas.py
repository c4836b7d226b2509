"""JSON schemas of the server's bodies and answers (used by the route table and /openapi.json)."""

from __future__ import annotations

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,125}$"
SEQ_PATTERN = r"^[0-9]{1,18}$"


def error(*codes: str, description: str, detail: bool = False) -> dict:
    """A response whose body is ``{"error": <one of codes>}`` (and ``detail`` for invalid bodies)."""
    properties: dict = {"error": {"type": "string", "enum": list(codes)} if codes else {"type": "string"}}
    if detail:
        properties["detail"] = {"type": "string", "description": "What is wrong with the body."}
    schema: dict = {"type": "object", "required": ["error"], "properties": properties}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def ok(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


E400_ID = error("session_id_invalid", description="The session id does not match " + ID_PATTERN)
E400_BODY = error(
    "session_id_invalid",
    "invalid_body",
    detail=True,
    description="A malformed id, or a body that is not an acceptable JSON object (not JSON, nested "
    "deeper than 64, a lone surrogate, a wrong type)",
)
E400_RESUME = error(
    "session_id_invalid",
    "last_event_id_invalid",
    description="A malformed session id, or a Last-Event-ID that is not ASCII digits",
)
E401 = error(
    "unauthorized",
    description="No valid `Authorization: Bearer <token>` (or the custom authenticator refused the request)",
)
E404 = error(
    "session_not_found",
    "not_found",
    description="The session was never created, was deleted, or belongs to another principal",
)
E408 = error("request_timeout", description="The request body did not arrive in time")
E413 = error("body_too_large", description="The request body is larger than the server's `max_body_bytes`")
E429 = error("too_busy", description="Too many concurrent runs, or the session's queue is full")
E503 = error(
    "server_stopping",
    "store_closed",
    "store_unavailable",
    description="The server is stopping, or its store cannot be written now",
)

E404_MESSAGE = error(
    "session_not_found",
    "not_found",
    "message_not_found",
    description="The session was never created, was deleted, or belongs to another principal; or it has no "
    "message with the id the request names",
)
E400_QUERY = error(
    "session_id_invalid",
    "invalid_query",
    detail=True,
    description="A malformed session id, or a query parameter out of range (`limit`), of the wrong form "
    "(`compacted`), or a cursor this server did not give",
)

CONVERSATION_PARAMS = (
    {
        "name": "leaf",
        "in": "query",
        "required": False,
        "description": "The message whose path to read (default: the latest leaf).",
        "schema": {"type": "string"},
    },
    {
        "name": "compacted",
        "in": "query",
        "required": False,
        "description": "`true` (default): compaction summaries replace the ranges they cover, as the model "
        "sees the path; `false`: every stored message.",
        "schema": {"type": "string", "enum": ["true", "false"]},
    },
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": "Messages per page, 1 to 1000 (default 100).",
        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    {
        "name": "cursor",
        "in": "query",
        "required": False,
        "description": "`nextCursor` of the page before; it keeps the pages on that page's path.",
        "schema": {"type": "string"},
    },
)

CONVERSATION = {
    "type": "object",
    "required": ["sessionId", "leaf", "compacted", "total", "messages", "nextCursor"],
    "properties": {
        "sessionId": {"type": "string"},
        "leaf": {"type": ["string", "null"], "description": "The path's leaf (null: an empty conversation)."},
        "compacted": {"type": "boolean"},
        "total": {"type": "integer", "minimum": 0, "description": "Messages on the path, as read."},
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "role", "parts"],
                "description": "A stored message (docs/messages.md): the user's and the agent's replies.",
            },
        },
        "nextCursor": {"type": ["string", "null"], "description": "The next page's cursor; null on the last."},
    },
}

SESSION_ID_PARAM = {
    "name": "sessionId",
    "in": "path",
    "required": True,
    "description": "The session id (unique within the caller's namespace).",
    "schema": {"type": "string", "pattern": ID_PATTERN},
}

LAST_EVENT_ID_HEADER = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "description": "Resume after this event `seq` (what an EventSource sends when it reconnects). ASCII digits.",
    "schema": {"type": "string", "pattern": SEQ_PATTERN},
}

LAST_EVENT_ID_QUERY = {
    "name": "lastEventId",
    "in": "query",
    "required": False,
    "description": "Like the `Last-Event-ID` header, for clients that cannot set headers (the header wins).",
    "schema": {"type": "string", "pattern": SEQ_PATTERN},
}

EVENT = {
    "type": "object",
    "description": (
        "A run event (docs/agents.md): `v`, `seq` (from 0 within the session, across runs), `ts`, `session_id`, "
        "`run_id` (`<sessionId>.<n>`), `kind` (`run.start`, `turn.start`, `delta.text`, `delta.reasoning`, "
        "`tool.call`, `tool.result`, `usage`, `turn.end`, `run.end`) and the kind's fields. A reader that "
        'resumes before the retained window first gets `{"error": "events_gap", "requestedSeq", '
        '"earliestSeq"}` (no event id), then the window; `requestedSeq` is the first seq it asked for. '
        "A run that a stopped server left unfinished gets a `run.end` with status `interrupted` and "
        "`error_type` `ServerStopped`, then starts again under the same `run_id` (a new `run.start`)."
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

MESSAGE_BODY = {
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
        "at": {
            "type": ["string", "null"],
            "minLength": 1,
            "description": (
                "A message id of the conversation to run from instead of its latest message: the new turn "
                "becomes a branch under it (a regeneration, or a what-if). Such a message opens a run of "
                "its own (after the active one when the session is busy); an id the session does not have "
                "is 404 `message_not_found`, nothing recorded."
            ),
        },
        "context": {
            "type": ["object", "null"],
            "description": (
                "A JSON object shown to the model beside this message (docs/agents.md) and given to tools that ask "
                "for it; never stored nor returned. A message with a context opens a run of its own (after the "
                "active one when the session is busy). A run started again after a server stopped runs "
                "without it."
            ),
        },
    },
}

ACCEPTED = {
    "type": "object",
    "required": ["runId", "queued"],
    "properties": {
        "runId": {"type": "string", "description": "`<sessionId>.<n>`: n counts the session's runs from 1."},
        "queued": {
            "type": "boolean",
            "description": "True when the session was busy: the message joins the active run (same runId) "
            "or waits for the next one.",
        },
    },
}

RUN = {
    "type": "object",
    "required": ["runId", "status", "input", "startedAt", "agentId", "attempts"],
    "properties": {
        "runId": {"type": "string"},
        "status": {"type": "string", "enum": ["running", "completed", "failed", "interrupted"]},
        "input": {"type": ["string", "null"]},
        "startedAt": {"type": ["string", "null"]},
        "endedAt": {"type": ["string", "null"]},
        "agentId": {"type": "string", "description": "The name of the agent that runs it."},
        "attempts": {
            "type": "integer",
            "minimum": 1,
            "description": "How often it started: a run a stopped server left unfinished starts again "
            "(at most 3 times, then it is recorded failed).",
        },
    },
}

SENT = {
    "type": "object",
    "required": ["runId", "text", "mode", "queued", "at"],
    "properties": {
        "runId": {"type": "string"},
        "text": {"type": "string"},
        "mode": {"type": "string", "enum": ["followUp", "steer"]},
        "queued": {"type": "boolean"},
        "at": {"type": "string"},
        "author": {"type": "string"},
        "node": {"type": "string", "description": "The message it ran from (the body's `at`), when it named one."},
    },
}

ACTIVE = (
    "The active run id, or null when no run of the session is `running`. A run whose "
    "server process died stays active until another process takes the session over (within "
    "seconds), which records it `interrupted` and starts it again under the same id."
)

SESSION = {
    "type": "object",
    "required": ["sessionId", "runs", "active", "queued", "messages"],
    "properties": {
        "sessionId": {"type": "string"},
        "runs": {"type": "array", "items": RUN},
        "active": {"type": ["string", "null"], "description": ACTIVE},
        "queued": {"type": "integer", "minimum": 0, "description": "Messages waiting for a run."},
        "messages": {"type": "array", "items": SENT, "description": "What callers sent, oldest first."},
    },
}

SESSION_SUMMARY = {
    "type": "object",
    "required": ["sessionId", "runs", "active", "queued", "updatedAt"],
    "properties": {
        "sessionId": {"type": "string"},
        "runs": {"type": "integer", "minimum": 0, "description": "How many runs the session has had."},
        "active": {"type": ["string", "null"], "description": ACTIVE},
        "queued": {"type": "integer", "minimum": 0, "description": "Messages waiting for a run."},
        "updatedAt": {"type": "string", "description": "When the last message was sent (or the session created)."},
    },
}

SESSION_LIST = {
    "type": "object",
    "required": ["sessions"],
    "properties": {
        "sessions": {
            "type": "array",
            "items": SESSION_SUMMARY,
            "description": "The caller's sessions, newest activity first.",
        }
    },
}

SESSION_ID_BODY = {
    "type": "object",
    "properties": {
        "sessionId": {
            "type": "string",
            "pattern": ID_PATTERN,
            "description": "The id to create; a random one is chosen when it is missing.",
        }
    },
}

CREATED = dict(SESSION_ID_BODY, required=["sessionId"])

DELETED = {
    "type": "object",
    "required": ["sessionId", "status"],
    "properties": {"sessionId": {"type": "string"}, "status": {"const": "deleted"}},
}
