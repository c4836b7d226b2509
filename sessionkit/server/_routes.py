"""The route table: every route once, with what dispatch needs and what /openapi.json says.

Dispatch (:func:`match`) and the OpenAPI document (:mod:`._openapi`) are both built
from :data:`ROUTES`, so a route cannot exist in one and not the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import _schemas as S
from ._errors import Rejected

__all__ = ["ROUTES", "Route", "match"]


@dataclass(frozen=True)
class Route:
    """One method on one path template (``{sessionId}`` stands for one path segment)."""

    method: str
    path: str
    operation: str  # operationId, and the name of the server's handler
    summary: str
    responses: dict
    description: str | None = None
    body: dict | None = None  # request body schema
    body_required: bool = False
    parameters: tuple = ()
    public: bool = False  # no authentication (the document itself)
    websocket: bool = False  # the WebSocket route (a plain request gets 426)
    extra: dict = field(default_factory=dict)  # more OpenAPI fields of the operation

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(self.path.strip("/").split("/"))


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/openapi.json",
        "openapi",
        "This document (no token needed)",
        {"200": S.ok({"type": "object"}, "The OpenAPI document")},
        public=True,
    ),
    Route(
        "GET",
        "/sessions",
        "listSessions",
        "The caller's sessions, newest activity first",
        {"200": S.ok(S.SESSION_LIST, "The sessions"), "401": S.E401, "413": S.E413},
        description="Only the caller's own sessions (with a custom authenticator, each principal sees its own).",
    ),
    Route(
        "POST",
        "/sessions",
        "createSession",
        "Create a session (idempotent)",
        {
            "201": S.ok(S.CREATED, "Created"),
            "200": S.ok(S.CREATED, "It already existed"),
            "400": S.E400_BODY,
            "401": S.E401,
            "408": S.E408,
            "413": S.E413,
            "429": S.E429,
            "503": S.E503,
        },
        body=S.SESSION_ID_BODY,
    ),
    Route(
        "GET",
        "/sessions/{sessionId}",
        "getSession",
        "Runs, the active run, the queue length and the messages callers sent",
        {"200": S.ok(S.SESSION, "The session"), "400": S.E400_ID, "401": S.E401, "404": S.E404, "413": S.E413},
    ),
    Route(
        "DELETE",
        "/sessions/{sessionId}",
        "deleteSession",
        "Delete a session: cancels the active run, drops the queue, removes what is stored",
        {
            "202": S.ok(S.DELETED, "Deleted"),
            "400": S.E400_ID,
            "401": S.E401,
            "404": S.E404,
            "413": S.E413,
            "429": S.E429,
            "503": S.E503,
        },
        description="Run ids are never reused: a session created again under the same id numbers its runs "
        "after the deleted one's.",
    ),
    Route(
        "POST",
        "/sessions/{sessionId}/messages",
        "sendMessage",
        "Send a message: starts a run, or joins the active run when the session is busy",
        {
            "202": S.ok(
                S.ACCEPTED,
                "Accepted: the message will be in the conversation, or in a run recorded failed with its reason",
            ),
            "400": S.E400_BODY,
            "401": S.E401,
            "404": S.E404_MESSAGE,
            "408": S.E408,
            "409": S.error(
                "conversation_unrecoverable",
                description="The stored conversation changed behind the server's back since its last run",
            ),
            "413": S.E413,
            "429": S.E429,
            "503": S.E503,
        },
        body=S.MESSAGE_BODY,
        body_required=True,
    ),
    Route(
        "GET",
        "/sessions/{sessionId}/conversation",
        "getConversation",
        "The conversation: the latest path or a leaf's, compactions applied or not, a page at a time",
        {
            "200": S.ok(S.CONVERSATION, "A page of the path, oldest first"),
            "400": S.E400_QUERY,
            "401": S.E401,
            "404": S.E404_MESSAGE,
            "413": S.E413,
        },
        description=(
            "The user's messages and the agent's replies as stored, root first. Follow `nextCursor` for "
            "the next page: it stays on the first page's path even when new runs move the latest leaf."
        ),
        parameters=S.CONVERSATION_PARAMS,
    ),
    Route(
        "GET",
        "/sessions/{sessionId}/events",
        "streamEvents",
        "Server-Sent Events of every run: the retained window, then live",
        {
            "200": {
                "description": "An event stream",
                "content": {"text/event-stream": {"schema": {"type": "string"}, "x-event-data": S.EVENT}},
            },
            "400": S.E400_RESUME,
            "401": S.E401,
            "404": S.E404,
            "413": S.E413,
        },
        description=(
            "Each event is one SSE frame whose `id` is the event's `seq` and whose `data` is the event's JSON. "
            "The stream stays open across runs and server restarts (reconnect with `Last-Event-ID`). "
            "`Last-Event-ID: n` resumes after seq n, each frame exactly once; a seq older than the retained "
            "window first gets an `events_gap` frame, then the window. Comment lines keep idle streams alive."
        ),
        parameters=(S.LAST_EVENT_ID_HEADER, S.LAST_EVENT_ID_QUERY),
    ),
    Route(
        "GET",
        "/sessions/{sessionId}/ws",
        "websocket",
        "WebSocket: the same event frames; the client may send messages",
        {
            "101": {"description": "Switching to the WebSocket protocol"},
            "400": S.E400_RESUME,
            "401": S.E401,
            "404": S.E404,
            "413": S.E413,
            "426": S.error("upgrade_required", description="A plain HTTP request to the WebSocket route"),
        },
        description=(
            "Upgrade to a WebSocket. The server sends the same JSON frames as the event stream (the retained "
            "window or what follows `lastEventId`, then live). The client may send the body of "
            '`POST /sessions/{sessionId}/messages` and gets `{"runId", "queued"}`, or '
            '`{"error": ...}` (with `detail` for `invalid_body`) with the codes of that route.'
        ),
        parameters=(S.LAST_EVENT_ID_QUERY,),
        websocket=True,
    ),
)


def match(segments: list[str]) -> tuple[list[Route], dict[str, str]]:
    """The routes whose path fits ``segments`` (any method) and the path parameters."""
    found: list[Route] = []
    params: dict[str, str] = {}
    for route in ROUTES:
        template = route.segments
        if len(template) != len(segments):
            continue
        values = {}
        for part, value in zip(template, segments):
            if part.startswith("{") and part.endswith("}"):
                values[part[1:-1]] = value
            elif part != value:
                break
        else:
            found.append(route)
            params = values
    return found, params


def resolve(method: str, segments: list[str] | None) -> tuple[Route, dict[str, str]]:
    """The route for a request; :class:`Rejected` 404 (no such path) or 405 (another method)."""
    if not segments:
        raise Rejected(404, "not_found")
    routes, params = match(segments)
    if not routes:
        raise Rejected(404, "not_found")
    for route in routes:
        if route.method == method or (method == "HEAD" and route.method == "GET" and route.public):
            return route, params
    allowed = sorted({r.method for r in routes} | ({"HEAD"} if any(r.public for r in routes) else set()))
    raise Rejected(405, "method_not_allowed", allow=", ".join(allowed))
