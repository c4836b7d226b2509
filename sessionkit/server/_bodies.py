"""What the server accepts from a client (JSON bodies and frames, ids, resume points), and
the shapes of the bodies it answers with (``_schemas`` describes them to clients).

Everything a client sends is checked here before it reaches a session, and a value
that is JSON but cannot be handled is refused with ``400 {"error": "invalid_body",
"detail"}`` (docs/server.md), never a server error:

* nesting deeper than :data:`MAX_DEPTH` (checked on the text, before parsing, so a
  body nested 100,000 deep costs one scan and no recursion);
* text that is not UTF-8, or a ``\\uD800``-style escape that leaves a lone
  surrogate in a string or key (no store or provider can keep it);
* ``NaN`` and ``Infinity`` (not JSON), and values of the wrong type.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn, TypeAlias, TypedDict, TypeGuard

from ._errors import Rejected
from ._state import FOLLOW_UP, MODES

__all__ = [
    "JSON",
    "MAX_DEPTH",
    "Accepted",
    "ConversationPage",
    "ConversationQuery",
    "Message",
    "RunView",
    "SentMessage",
    "SessionList",
    "SessionSummary",
    "SessionView",
    "check_session_id",
    "conversation_cursor",
    "parse_conversation_query",
    "parse_json",
    "parse_message",
    "resume_after",
]

#: A JSON value, as a body, a frame or a stored record holds it.
JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None

#: ``GET /sessions/{id}/conversation``: messages per page by default, and at most.
PAGE_DEFAULT = 100
PAGE_MAX = 1000

#: How deeply a body may nest arrays and objects.
MAX_DEPTH = 64

#: docs/server.md: what a session id may look like.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,125}\Z")

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_DIGITS = re.compile(r"[0-9]{1,18}\Z")


# ---------------------------------------------------------------------------
# answers (their JSON schemas are in _schemas)


class Accepted(TypedDict):
    """``202`` to a message: the run it belongs to, and whether it waits (``_schemas.ACCEPTED``)."""

    runId: str
    queued: bool


class RunView(TypedDict):
    """A run in ``GET /sessions/{id}`` (``_schemas.RUN``)."""

    runId: str
    status: str
    input: str | None
    startedAt: str | None
    endedAt: str | None
    agentId: str
    attempts: int


class _SentMessage(TypedDict):
    runId: str
    text: str
    mode: str
    queued: bool
    at: str


class SentMessage(_SentMessage, total=False):
    """A message a caller sent, in ``GET /sessions/{id}`` (``_schemas.SENT``)."""

    author: str
    node: str


class SessionView(TypedDict):
    """``GET /sessions/{id}`` (``_schemas.SESSION``)."""

    sessionId: str
    runs: list[RunView]
    active: str | None
    queued: int
    messages: list[SentMessage]


class SessionSummary(TypedDict):
    """A session in ``GET /sessions`` (``_schemas.SESSION_SUMMARY``)."""

    sessionId: str
    runs: int
    active: str | None
    queued: int
    updatedAt: str


class SessionList(TypedDict):
    """``GET /sessions`` (``_schemas.SESSION_LIST``)."""

    sessions: list[SessionSummary]


class ConversationPage(TypedDict):
    """``GET /sessions/{id}/conversation`` (``_schemas.CONVERSATION``)."""

    sessionId: str
    leaf: str | None
    compacted: bool
    total: int
    messages: list[dict]
    nextCursor: str | None


# ---------------------------------------------------------------------------
# what clients send


def invalid(detail: str) -> Rejected:
    return Rejected(400, "invalid_body", detail=detail)


def _reject_constant(name: str) -> NoReturn:
    raise invalid(f"{name} is not a JSON value")


def _check_depth(text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise invalid(f"the JSON nests deeper than {MAX_DEPTH} levels")
        elif token in "]}":
            depth -= 1


def _check_strings(value: JSON) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, dict):
            for k, v in item.items():
                k.encode("utf-8")
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)


def parse_json(raw: bytes | bytearray | str, *, what: str = "body") -> JSON:
    """Parse a request body or WebSocket frame strictly (see the module docstring)."""
    if isinstance(raw, (bytes, bytearray)):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise invalid(f"the {what} is not UTF-8") from None
    else:
        text = raw
    if text.startswith("\ufeff"):
        raise invalid(f"the {what} starts with a byte order mark")
    _check_depth(text)
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except Rejected:
        raise
    except RecursionError:
        raise invalid(f"the JSON nests deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise invalid(f"the {what} is not JSON") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            _check_strings(value)
        except UnicodeEncodeError:
            raise invalid(f"the {what} holds a lone surrogate (\\uD800-\\uDFFF escape) in a string") from None
    return value


@dataclass(frozen=True)
class Message:
    """A message body: ``{text, mode?, author?, context?, at?}``."""

    text: str
    mode: str
    author: str | None
    context: dict | None
    at: str | None = None  # the message of the conversation to run from (its turn branches there)


def parse_message(body: object) -> Message:
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object with 'text'")
    text = body.get("text")
    if not isinstance(text, str) or not text:
        raise invalid("'text' must be a non-empty string")
    mode = body.get("mode")
    if mode is None:
        mode = FOLLOW_UP
    if mode not in MODES:
        raise invalid("'mode' must be 'followUp' or 'steer'")
    author = body.get("author")
    if author is not None and not isinstance(author, str):
        raise invalid("'author' must be a string")
    context = body.get("context")
    if context is not None and not isinstance(context, dict):
        raise invalid("'context' must be a JSON object")
    at = body.get("at")
    if at is not None and (not isinstance(at, str) or not at):
        raise invalid("'at' must be a message id (a non-empty string)")
    return Message(text, mode, author, context, at)


@dataclass(frozen=True)
class ConversationQuery:
    """``GET /sessions/{id}/conversation``: which path (``leaf``; None: the latest), whether
    compactions apply, and the page (``offset`` from the cursor, ``limit``).

    ``anchors``: messages further down the path the cursor's page was read from, as
    ``(depth, id)`` pairs by depth, so that a later page is read upwards from the first
    anchor at or below its end instead of from the leaf (see ``conversation_cursor``).
    """

    leaf: str | None
    compacted: bool
    limit: int
    offset: int
    anchors: tuple[tuple[int, str], ...] = ()


def _bad_query(detail: str) -> Rejected:
    return Rejected(400, "invalid_query", detail=detail)


#: How long a cursor's list of anchors may grow (characters of its JSON): a cursor stays a
#: short query parameter whatever the message ids are.
_ANCHORS_MAX_CHARS = 2048


def conversation_cursor(leaf: str, compacted: bool, offset: int, anchors: Iterable[tuple[int, str]] = ()) -> str:
    """The opaque cursor of the next page: the path it pages (its leaf, compacted or not), where,
    and anchors on the path below (as many as fit in :data:`_ANCHORS_MAX_CHARS`).

    A cursor is base64 of ``[leaf, compacted, offset]`` or, with anchors,
    ``[leaf, compacted, offset, [[depth, id], ...]]``; both are read back.
    """
    kept: list[JSON] = []
    size = 2
    for depth, mid in anchors:
        size += len(json.dumps([depth, mid], ensure_ascii=True)) + 1
        if size > _ANCHORS_MAX_CHARS:
            break
        kept.append([depth, mid])
    value: list[JSON] = [leaf, compacted, offset]
    if kept:
        value.append(kept)
    raw = json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


#: The largest offset a cursor may hold: no path is longer, and the page's end (offset +
#: limit) stays an index Python slices to (at most ``sys.maxsize``).
_MAX_OFFSET = 2**53


def _read_cursor(cursor: str) -> tuple[str, bool, int, tuple[tuple[int, str], ...]]:
    forged = _bad_query("'cursor' is not a cursor this server gave")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw.decode("ascii"))
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        # RecursionError: JSON nested deeper than the parser goes (a forged cursor)
        raise forged from None
    if not isinstance(value, list) or len(value) not in (3, 4):
        raise forged
    leaf, compacted, offset = value[:3]
    if not (isinstance(leaf, str) and leaf and isinstance(compacted, bool)):
        raise forged
    if not _whole(offset) or not 0 <= offset <= _MAX_OFFSET:
        raise forged
    anchors: list[tuple[int, str]] = []
    if len(value) == 4:
        if not isinstance(value[3], list):
            raise forged
        for item in value[3]:
            if not (isinstance(item, list) and len(item) == 2 and _whole(item[0]) and isinstance(item[1], str)):
                raise forged
            if not offset <= item[0] <= _MAX_OFFSET or not item[1] or (anchors and item[0] <= anchors[-1][0]):
                raise forged
            anchors.append((item[0], item[1]))
    return leaf, compacted, offset, tuple(anchors)


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_conversation_query(query: Mapping[str, str]) -> ConversationQuery:
    """``?leaf=&compacted=true|false&limit=&cursor=``; 400 ``invalid_query`` naming the bad one.

    A cursor pins the path of the first page (its leaf, compacted or not), so the pages of
    one listing stay on one path while the conversation grows; ``leaf`` or ``compacted``
    given beside it must agree with it.
    """
    leaf = query.get("leaf") or None
    compacted_text = query.get("compacted")
    if compacted_text not in (None, "", "true", "false"):
        raise _bad_query("'compacted' must be 'true' or 'false'")
    compacted = compacted_text != "false"
    limit_text = query.get("limit")
    limit = PAGE_DEFAULT
    if limit_text not in (None, ""):
        if not _DIGITS.match(limit_text) or not 1 <= int(limit_text) <= PAGE_MAX:
            raise _bad_query(f"'limit' must be a whole number from 1 to {PAGE_MAX}")
        limit = int(limit_text)
    offset = 0
    anchors: tuple[tuple[int, str], ...] = ()
    cursor = query.get("cursor")
    if cursor:
        pinned_leaf, pinned_compacted, offset, anchors = _read_cursor(cursor)
        if leaf is not None and leaf != pinned_leaf:
            raise _bad_query("'leaf' differs from the path the cursor pages")
        if compacted_text in ("true", "false") and compacted != pinned_compacted:
            raise _bad_query("'compacted' differs from the cursor's")
        leaf, compacted = pinned_leaf, pinned_compacted
    return ConversationQuery(leaf, compacted, limit, offset, anchors)


def check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise Rejected(400, "session_id_invalid")
    return session_id


def resume_after(headers: Mapping[str, str], query: Mapping[str, str], *, header: bool = True) -> int | None:
    """``Last-Event-ID`` (or ``?lastEventId=``): resume after this seq; None for the whole window.

    ASCII digits only (at most 18): ``1_0``, ``+5``, ``-1`` or a fullwidth digit are
    400 ``last_event_id_invalid``, never read the way Python's ``int()`` would.
    """
    value = headers.get("last-event-id") if header else None
    if value is None or value == "":
        value = query.get("lastEventId")
    if value is None or value == "":
        return None
    if not _DIGITS.match(value):
        raise Rejected(400, "last_event_id_invalid")
    return int(value)
