"""Messages: validation, canonical JSON, sizes, token estimates and payload hashing.

A message is a plain ``dict`` shaped like the AI SDK's UIMessage (docs/messages.md)::

    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}

Everything in this module is pure: no I/O, no database. The store calls
:func:`prepare` once per write and gets back everything it needs to store the
message (its JSON, size, token estimate and any payloads moved out of the row).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import marshal
import math
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any

from .errors import InvalidMessage, MessageTooLarge
from .parts import text_of as message_text  # the text of a message: its text parts joined by blank lines
from .parts import tool_names as _tool_names

__all__ = [
    "validate",
    "prepare",
    "restore",
    "estimate_tokens",
    "message_text",
    "now_iso",
    "to_iso",
    "Prepared",
    "BLOB_MIN_BYTES",
    "MAX_NESTING",
    "check_text",
    "dumps_valid",
]

#: A ``file`` part whose inline bytes reach this size is stored out of the row (docs/messages.md).
BLOB_MIN_BYTES = 4096

#: Key used inside a stored part to point at an out-of-row payload.
#:
#: Only the store writes this key. A caller's dict key that starts with it (at any
#: depth) is stored with the key prefixed once more (``_BLOB_KEY + key``) and the
#: prefix is taken off on read, so in stored JSON a key equal to ``_BLOB_KEY`` is
#: always the store's own pointer and every escaped key starts with ``_BLOB_KEY``
#: twice (see :func:`_escape_keys`). Stores written before keys were escaped read
#: back as they did: only keys starting with ``_BLOB_KEY`` twice read differently.
_BLOB_KEY = "__sessionkit_blob__"
_ESCAPED = _BLOB_KEY + _BLOB_KEY

#: Containers (objects and arrays) a message may nest, the message itself counting
#: as one: deeper messages are refused (docs/messages.md), since reading or copying them
#: would exhaust Python's recursion limit.
MAX_NESTING = 128
_CONTAINERS = (dict, list, tuple)  # what the JSON encoder writes as objects and arrays
_chain = chain.from_iterable

_WORD_RE = re.compile(r"\S+")


def now_iso() -> str:
    """The current time as ISO 8601 UTC with millisecond precision and a ``Z`` suffix."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


_ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def normalize_created(value: Any) -> str | None:
    """A message's ``createdAt`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``, or None when it is not a time."""
    if isinstance(value, str) and _ISO_MS.fullmatch(value):
        return value
    try:
        return to_iso(value)
    except (TypeError, ValueError):
        return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _is_time(text: str) -> bool:
    """Whether ``text`` reads as a time (``to_iso`` takes it; a month 13 does not)."""
    if type(text) is str and text.endswith("Z"):
        # to_iso's own parse, without its conversion and formatting: a time in UTC
        # converts to UTC without overflow (a tenth of the cost, on every append).
        try:
            datetime.fromisoformat(text[:-1] + "+00:00")
        except ValueError:
            return False
        return True
    try:
        to_iso(text)
    except (TypeError, ValueError):
        return False
    return True


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def to_iso(value: datetime | int | float | str) -> str:
    """Normalise a datetime, epoch milliseconds or ISO string to ``YYYY-MM-DDTHH:MM:SS.mmmZ``.

    A time outside what ``datetime`` holds (years 1 to 9999 in UTC) -> ``ValueError``,
    a type that is no time -> ``TypeError``; both name ``created_at``.
    """
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith("Z") else value
        try:
            value = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"created_at: not an ISO 8601 time: {value!r}") from exc
    elif isinstance(value, bool):
        raise TypeError("created_at: expected a datetime or epoch milliseconds, got bool")
    elif isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"created_at: not a finite number: {value!r}")
        ms = value
        try:  # exact for ints, and the same on every platform (no C time_t involved)
            value = _EPOCH + timedelta(milliseconds=ms)
        except OverflowError as exc:
            shown = repr(ms) if abs(ms) < 10**30 else "a number with more than 30 digits"
            raise ValueError(f"created_at: {shown} ms since 1970 is outside the years 1 to 9999") from exc
    elif not isinstance(value, datetime):
        raise TypeError(f"created_at: expected a datetime or epoch milliseconds, got {type(value).__name__}")
    try:
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"created_at: {value!r} is outside the years 1 to 9999 in UTC") from exc
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
        f"{value.second:02d}.{value.microsecond // 1000:03d}Z"
    )


def _surrogate(text: str) -> int | None:
    """Index of the first lone surrogate in ``text``, or None when it is valid Unicode."""
    if text.isascii():  # O(1): a flag of the string object
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def lone_surrogate_path(value: Any) -> str | None:
    """Where the first string or key holding a lone surrogate is in ``value`` (a JSON
    value of any depth), as a path such as ``parts[0].text`` or ``the key metadata["k"]``;
    None when every string is valid Unicode."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, steps = stack.pop()
        if isinstance(item, str):
            if _surrogate(item) is not None:
                return _path(steps)
        elif isinstance(item, dict):
            for key, child in item.items():
                if _surrogate(key) is not None:
                    return "the key " + _path(steps + (key,))
                stack.append((child, steps + (key,)))
        elif isinstance(item, list):
            stack.extend((child, steps + (i,)) for i, child in enumerate(item))
    return None


def check_text(value: str, name: str, error: type[Exception] = ValueError) -> str:
    """Return ``value``, or raise ``error`` naming ``name`` when it holds a lone surrogate.

    Every string the store writes or looks up must be valid Unicode (docs/messages.md): a
    lone surrogate cannot be encoded as UTF-8, which every engine stores.
    """
    at = _surrogate(value)
    if at is not None:
        raise error(f"{name} is not valid Unicode: a lone surrogate {value[at]!r} at index {at}")
    return value


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _path(steps: tuple) -> str:
    """A JSON-path-like location: ``parts[0].output.x``, ``metadata["a key"]``."""
    out = []
    for step in steps:
        if isinstance(step, int) and not isinstance(step, bool):
            out.append(f"[{step}]")
        elif isinstance(step, str) and _IDENT.fullmatch(step):
            out.append(("." if out else "") + step)
        else:  # ASCII escapes: the text of an error is printable whatever the key holds
            key = step if isinstance(step, str) else str(step)
            out.append("[" + json.dumps(key) + "]")
    return "".join(out) or "the value"


def _containers(value: Any):
    """``(key, child)`` of a dict or a list/tuple (what the JSON encoder treats as arrays)."""
    return value.items() if isinstance(value, dict) else enumerate(value)  # see _CONTAINERS


def _find_problem(
    message: Any, who: str | None = None, invalid: type[Exception] = InvalidMessage
) -> tuple[type[Exception], str] | None:
    """The first lone surrogate, circular reference or nesting deeper than MAX_NESTING.

    Returns ``(error type, text naming the field)``, None when there is none; a
    surrogate or too deep a nesting is ``invalid``, a cycle ``TypeError``. ``who``
    starts the text (by default the message's id). Only called once a cheap check
    has failed, so it may walk the whole value; it never recurses, so any depth
    is safe.
    """
    if who is None:
        mid = message.get("id") if isinstance(message, dict) else None
        who = f"message {mid!r}: " if isinstance(mid, str) else ""
    stack: list[tuple[Any, tuple, int]] = [(message, (), 1)]
    while stack:
        value, steps, depth = stack.pop()
        if isinstance(value, str):
            at = _surrogate(value)
            if at is not None:
                return invalid, (
                    f"{who}{_path(steps)} is not valid Unicode: a lone surrogate {value[at]!r} at index {at}"
                )
            continue
        if not isinstance(value, _CONTAINERS):
            continue
        if depth > MAX_NESTING:
            node: Any = message  # a container met again on its own path is a cycle
            for step in steps:
                if node is value:
                    return TypeError, f"{who}{_path(steps)} is not JSON-encodable: a circular reference"
                node = node[step]
            shown = _path(steps[:6]) + ("..." if len(steps) > 6 else "")
            return invalid, f"{who}{shown} is nested deeper than {MAX_NESTING} levels"
        children = []
        for key, child in _containers(value):
            if isinstance(key, str):
                at = _surrogate(key)
                if at is not None:
                    return invalid, (
                        f"{who}the key {_path(steps + (key,))} is not valid Unicode: "
                        f"a lone surrogate {key[at]!r} at index {at}"
                    )
            children.append((child, steps + (key,), depth + 1))
        stack.extend(reversed(children))  # depth first, in document order
    return None


def _part_string_chars(message: dict) -> int:
    """Characters in the string values of the message's parts (texts, payloads, tool results
    given as text): the JSON of those holds at least as many characters, none a bracket
    of the structure."""
    n = 0
    for part in message["parts"]:
        for value in part.values():
            if type(value) is str:
                n += len(value)
    return n


def _marshal_depth() -> int | None:
    """The deepest chain of objects ``marshal`` writes (2,000 in CPython), or None."""

    def chain(n: int) -> list:
        value: Any = 0
        for _ in range(n - 1):
            value = [value]
        return value

    def writes(n: int) -> bool:
        try:
            marshal.dumps(chain(n))
        except ValueError:
            return False
        return True

    if writes(2000) and not writes(2001):
        return 2000
    lo, hi = MAX_NESTING + 2, 1 << 16  # bisect between a depth it writes and one it refuses
    if not writes(lo) or writes(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if writes(mid) else (lo, mid)
    return lo


_marshal_limit: list = []  # [depth or None], found on first use
_wrappers = threading.local()


def _shallow(message: Any) -> bool:
    """True when the message surely nests at most MAX_NESTING deep; False when unsure.

    ``marshal`` writes in C and refuses objects nested deeper than a fixed depth:
    written inside a chain of lists that leaves MAX_NESTING levels of that depth,
    a message it accepts nests no deeper (one nesting exactly MAX_NESTING deep
    whose innermost container holds a value is refused: :func:`_too_deep` decides).
    Several times faster than walking the message in Python.
    """
    if not _marshal_limit:
        _marshal_limit.append(_marshal_depth())
    limit = _marshal_limit[0]
    if limit is None:
        return False
    ends = getattr(_wrappers, "ends", None)
    if ends is None:  # per thread: the innermost slot holds the message while it is written
        inner: list[Any] = [None]
        outer = inner
        for _ in range(limit - MAX_NESTING - 1):
            inner[0] = [None]
            inner = inner[0]
        ends = _wrappers.ends = (outer, inner)
    outer, inner = ends
    inner[0] = message
    try:
        marshal.dumps(outer)
    except ValueError:  # too deep, or a type marshal does not write (a dict subclass...)
        return False
    finally:
        inner[0] = None
    return True


def _too_deep(message: Any) -> bool:
    """Whether containers nest deeper than MAX_NESTING (a cycle does too): one pass, level
    by level, over the containers only; :func:`_find_problem` then names the place."""
    level = [message]
    depth = 1
    while level:
        if depth > MAX_NESTING:
            return True
        children = list(_chain([n.values() if isinstance(n, dict) else n for n in level]))
        level = [c for c in children if isinstance(c, _CONTAINERS)]
        depth += 1
    return False


def dumps_valid(value: Any, name: str) -> str:
    """:func:`dumps`, also refusing a lone surrogate anywhere with a ``ValueError``
    that names ``name`` and the place (for JSON the store keeps beside messages)."""
    text = dumps(value)
    if not text.isascii() and _surrogate(text) is not None:
        found = _find_problem(value, f"{name}: ", ValueError)
        raise (found[0](found[1]) if found else ValueError(f"{name} is not valid Unicode"))
    return text


def _require_unicode(encoded: str, message: dict) -> None:
    """Raise naming the field when ``encoded`` (the message as JSON) holds a lone surrogate."""
    if not encoded.isascii() and _surrogate(encoded) is not None:
        _raise_problem(message, InvalidMessage("message is not valid Unicode"))


def _raise_problem(message: dict, fallback: Exception | None = None) -> None:
    """Raise what :func:`_find_problem` finds (or ``fallback``, when it finds nothing)."""
    found = _find_problem(message)
    if found is not None:
        error, text = found
        raise error(text) from fallback
    if fallback is not None:
        raise fallback


def validate(message: Any) -> None:
    """Check the shape of a message (docs/messages.md); raise naming the first bad field.

    Not a dict -> ``TypeError``; missing/empty ``id``, missing ``role``, ``parts``
    not a list, a part without a string ``type`` -> :class:`InvalidMessage`.
    JSON encodability is checked by :func:`dumps`.
    """
    if not isinstance(message, dict):
        raise TypeError(f"message must be a dict, got {type(message).__name__}")
    mid = message.get("id")
    if "id" not in message:
        raise InvalidMessage("message field 'id' is missing")
    if not isinstance(mid, str):
        raise InvalidMessage(f"message field 'id' must be a string, got {type(mid).__name__}")
    if not mid:
        raise InvalidMessage("message field 'id' is empty")
    if not mid.isascii():
        check_text(mid, f"message {mid!r}: field 'id'", InvalidMessage)
    if "role" not in message:
        raise InvalidMessage(f"message {mid!r}: field 'role' is missing")
    role = message["role"]
    if not isinstance(role, str) or not role:
        raise InvalidMessage(f"message {mid!r}: field 'role' must be a non-empty string")
    if not role.isascii():
        check_text(role, f"message {mid!r}: field 'role'", InvalidMessage)
    if "parts" not in message:
        raise InvalidMessage(f"message {mid!r}: field 'parts' is missing")
    parts = message["parts"]
    if not isinstance(parts, list):
        raise InvalidMessage(f"message {mid!r}: field 'parts' must be a list, got {type(parts).__name__}")
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise InvalidMessage(f"message {mid!r}: parts[{i}] must be a dict")
        if not isinstance(part.get("type"), str):
            raise InvalidMessage(f"message {mid!r}: parts[{i}] field 'type' must be a string")
    meta = message.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidMessage(f"message {mid!r}: field 'metadata' must be a dict")
    created = message.get("createdAt")
    if created is not None and not isinstance(created, str):
        raise InvalidMessage(f"message {mid!r}: field 'createdAt' must be an ISO 8601 string")


_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_encode: Callable[[Any], str]
if json.encoder.c_make_encoder is not None:  # type: ignore[attr-defined]  # CPython's, not in the stubs
    # The C encoder, built once: json.dumps builds a JSONEncoder and a C encoder on every
    # call, and this runs for each append. Without a markers dict it skips the cycle
    # check, which a shared dict could not do safely; a cycle ends in RecursionError.
    _c_encoder = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def _encode_c(value: Any) -> str:
        return "".join(_c_encoder(value, 0))

    _encode = _encode_c
else:
    _encode = _encoder.encode
# The decoder's scanner, called directly on JSON that dumps() wrote (no surrounding
# whitespace to skip); json.loads would add three Python calls and two regex matches.
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__, not in the stubs


def dumps(value: Any) -> str:
    """Canonical compact JSON; ``TypeError`` for anything JSON cannot encode (sets, NaN...)."""
    try:
        return _encode(value)
    except (ValueError, RecursionError) as exc:  # NaN / infinity / a cycle or too deep
        raise TypeError(f"message is not JSON-encodable: {exc}") from exc
    except TypeError as exc:
        raise TypeError(f"message is not JSON-encodable: {exc}") from exc


def _is_tool(ptype: Any) -> bool:
    return isinstance(ptype, str) and (ptype.startswith("tool-") or ptype == "dynamic-tool")


def _countable_strings(message: dict, tool_json: dict | None = None):
    """Text, reasoning and tool I/O; ``tool_json`` may hold the I/O already encoded (see _encode_message)."""
    for i, part in enumerate(message.get("parts") or ()):
        if not isinstance(part, dict):
            continue
        ptype = part.get("type")
        if ptype in ("text", "reasoning"):
            text = part.get("text")
            if isinstance(text, str):
                yield text
        elif _is_tool(ptype):
            for key in ("input", "output"):
                if key in part and part[key] is not None:
                    value = part[key]
                    if isinstance(value, str):
                        yield value
                    else:
                        yield dumps(value) if tool_json is None else tool_json[i, key]


# dumps() of str keys, as the encoder writes them inside an object.
_encode_key = json.encoder.encode_basestring


def _encode_message(message: dict) -> tuple[str, dict]:
    """``dumps(message)``, and ``{(part index, key): JSON}`` for each tool input and output
    that is not a string (the token estimate counts their JSON).

    Tool results are often most of a message, so the objects around them are joined
    from pieces encoded once (in one join: the results are long): an object encodes as
    ``{`` + ``"key":value`` pairs joined by ``,`` + ``}``, the text the encoder writes
    for the whole message.
    """
    parts = message["parts"]
    tool_json = {}
    for i, part in enumerate(parts):
        if _is_tool(part.get("type")):
            for key in ("input", "output"):
                value = part.get(key)
                if value is not None and not isinstance(value, str):
                    tool_json[i, key] = dumps(value)
    if not tool_json or any(type(k) is not str for k in message):  # the encoder converts other keys
        return dumps(message), tool_json
    out: list[str] = []
    for k, v in message.items():
        out.append("," if out else "{")
        out.append(_encode_key(k))
        out.append(":")
        if k != "parts":
            out.append(dumps(v))
            continue
        for i, part in enumerate(parts):
            out.append("," if i else "[")
            if (i, "input") not in tool_json and (i, "output") not in tool_json:
                out.append(dumps(part))
                continue
            if any(type(pk) is not str for pk in part):
                return dumps(message), tool_json
            first = True
            for pk, pv in part.items():
                out.append("{" if first else ",")
                first = False
                out.append(_encode_key(pk))
                out.append(":")
                out.append(tool_json[i, pk] if (i, pk) in tool_json else dumps(pv))
            out.append("}")
        out.append("]" if parts else "[]")
    out.append("}")
    return "".join(out), tool_json


# ASCII whitespace (as str.split() sees it) -> b" ", every other byte -> b"x".
_WORD_BYTES = bytes(32 if chr(i).isspace() else 120 for i in range(256))


def _count_words(text: str) -> int:
    """``len(text.split())`` without building the list: ASCII text (the common case, and an
    O(1) check) is mapped to spaces and x's, where each word starts with " x" or at 0."""
    if text.isascii():
        marks = text.encode("ascii").translate(_WORD_BYTES)
        return marks.count(b" x") + (marks[:1] == b"x")
    return len(text.split())


def estimate_tokens(message: dict, _tool_json: dict | None = None) -> int:
    """The token estimate (docs/messages.md): ``ceil(max(chars / 4, words * 1.3)) + 4`` over
    text, reasoning and tool I/O."""
    chars = 0
    words = 0
    for text in _countable_strings(message, _tool_json):
        chars += len(text)
        words += _count_words(text)
    return math.ceil(max(chars / 4, words * 1.3)) + 4


class Prepared:
    """A validated message ready for storage (made by :func:`prepare`).

    ``message``, the message as it will read back (createdAt filled in), is decoded
    from ``full_json`` when first read: an append whose result nobody reads never
    builds that copy.
    """

    __slots__ = (
        "full_json",
        "stored_json",
        "blobs",
        "tokens",
        "bytes",
        "text",
        "id",
        "role",
        "created_at",
        "n_parts",
        "tool_names",
        "metadata",
        "_message",
    )

    def __init__(
        self,
        *,
        full_json: str,
        stored_json: str,
        blobs: dict[str, bytes],
        tokens: int,
        bytes: int,
        text: str,
        id: str,
        role: str,
        created_at: str,
        message: dict | None = None,
        n_parts: int = 0,
        tool_names: str | None = None,
        metadata: str | None = None,
    ):
        self.full_json = full_json  # the message as it will read back, as JSON
        self.stored_json = stored_json  # JSON kept in the row: payloads replaced by references
        self.blobs = blobs  # sha256 hex -> bytes
        self.tokens = tokens
        self.bytes = bytes  # size of the whole message as JSON (what the caller wrote)
        self.text = text
        self.id = id
        self.role = role
        self.created_at = created_at  # the message's createdAt, as stored
        # The analysis columns stored with the row (docs/analysis.md): number of parts, the
        # tools its parts call (a JSON array, None when none) and its metadata as JSON.
        self.n_parts = n_parts
        self.tool_names = tool_names
        self.metadata = metadata
        self._message = message

    @property
    def message(self) -> dict:
        if self._message is None:
            self._message = _scan(self.full_json, 0)[0]  # a fresh deep copy with JSON semantics
        return self._message


def _b64_canonical(encoded: str) -> bytes | None:
    """Decode base64 only when re-encoding gives the same text back (so reads are exact)."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(raw).decode("ascii") != encoded:
        return None
    return raw


def _extract_blob(part: dict, blobs: dict[str, bytes]) -> dict:
    """Return the part to store: inline payloads of BLOB_MIN_BYTES or more become references."""
    url = part.get("url")
    if isinstance(url, str) and url.startswith("data:") and len(url) >= BLOB_MIN_BYTES:
        head, sep, body = url.partition(",")
        if sep and head.endswith(";base64"):
            raw = _b64_canonical(body)
            if raw is not None and len(raw) >= BLOB_MIN_BYTES:
                sha = hashlib.sha256(raw).hexdigest()
                blobs[sha] = raw
                stored = dict(part)
                stored["url"] = None
                stored[_BLOB_KEY] = {"sha256": sha, "field": "url", "prefix": head + ","}
                return stored
    data = part.get("data")
    if isinstance(data, str) and len(data) >= BLOB_MIN_BYTES:
        raw = _b64_canonical(data)
        if raw is not None and len(raw) >= BLOB_MIN_BYTES:
            sha = hashlib.sha256(raw).hexdigest()
            blobs[sha] = raw
            stored = dict(part)
            stored["data"] = None
            stored[_BLOB_KEY] = {"sha256": sha, "field": "data", "prefix": ""}
            return stored
    return part


def prepare(
    message: Any,
    *,
    created_at: str | None = None,
    strip_metadata_keys: tuple[str, ...] = (),
    max_bytes: int | None = None,
    set_created: str | None = None,
) -> Prepared:
    """Validate and encode a message for storage (docs/messages.md).

    The caller's dict is never mutated; the result holds a fresh copy that
    shares nothing with it (decoded from the JSON when first read). ``created_at``
    fills in a missing ``createdAt``; ``set_created`` replaces it (an import given
    its time), so the message and its row never disagree. This runs on every
    append, so it avoids a second encode where it can; the token estimate and
    text are read from the caller's dict, which holds what the JSON says.

    Checks beyond the shape, each a cheap test on the encoded JSON that walks the
    message (to name the field) only when it fails: every string valid Unicode,
    nesting at most :data:`MAX_NESTING` deep, and keys starting with the store's
    payload key escaped in the stored JSON (:func:`_escape_keys`).
    """
    validate(message)
    try:
        full_json, tool_json = _encode_message(message)  # TypeError for non-JSON values before anything else
    except TypeError as exc:
        if isinstance(exc.__cause__, RecursionError):  # too deep, or a cycle: name where
            _raise_problem(message, exc)
        raise
    msg = None  # the copy, built here only when it must change
    created = message.get("createdAt")
    if strip_metadata_keys and isinstance(message.get("metadata"), dict):
        if any(k in message["metadata"] for k in strip_metadata_keys):
            _require_unicode(full_json, message)  # what is dropped must be valid too
            msg = _scan(full_json, 0)[0]
            meta = msg["metadata"]
            for key in strip_metadata_keys:
                meta.pop(key, None)
            full_json = dumps(msg)
    if set_created is not None and created != set_created:
        if created is not None:  # the time it replaces must be valid too
            _require_unicode(full_json, message)
        created = None
        created_at = set_created
    if created is not None and not _is_time(created) and _is_unicode(created):
        # a createdAt that is kept must be a time ("yesterday" is refused, as the importers refuse
        # it); one that is not even valid Unicode is left to the encoding, which names that problem
        raise InvalidMessage(f"message {message['id']!r}: field 'createdAt' must be an ISO 8601 time, got {created!r}")
    if created is None:
        created = created_at or now_iso()
        if "createdAt" in message:  # an explicit null, or a time being replaced
            if msg is None:
                msg = _scan(full_json, 0)[0]
            msg["createdAt"] = created
            full_json = dumps(msg)
        else:
            if msg is not None:
                msg["createdAt"] = created
            # append the key to the encoded object instead of encoding it all again
            full_json = full_json[:-1] + ("," if len(full_json) > 2 else "") + '"createdAt":"' + created + '"}'
    if full_json.isascii():  # O(1), and ASCII holds no surrogate
        size = len(full_json)
    else:
        try:
            size = len(full_json.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate somewhere: name the field
            _raise_problem(msg if msg is not None else message, InvalidMessage(f"message is not valid Unicode: {exc}"))
    # Nesting deeper than MAX_NESTING takes more than 2 * MAX_NESTING brackets, outside the
    # strings: most long messages are long for their texts and payloads, and skip the count.
    if (
        size > 2 * MAX_NESTING
        and len(full_json) - _part_string_chars(message) > 2 * MAX_NESTING
        and full_json.count("[") + full_json.count("{") > MAX_NESTING
    ):
        value = msg if msg is not None else message
        if not _shallow(value) and _too_deep(value):
            _raise_problem(
                value, InvalidMessage(f"message {message['id']!r} is nested deeper than {MAX_NESTING} levels")
            )
    if max_bytes is not None and size > max_bytes:
        raise MessageTooLarge(f"message {message['id']!r} is {size} bytes, over max_message_bytes={max_bytes}")
    blobs: dict[str, bytes] = {}
    stored_json = full_json
    escape = _BLOB_KEY in full_json  # a caller's text or key holding the payload key
    if escape or '"file"' in full_json:
        if escape:  # a copy of its own, escaped: msg reads back as written
            stored = _scan(full_json, 0)[0]
            changed = _escape_keys(stored)
        else:  # parts that change are copied (_extract_blob), so msg is shared
            if msg is None:
                msg = _scan(full_json, 0)[0]
            stored = msg
            changed = False
        stored_parts = []
        for part in stored["parts"]:
            if part.get("type") == "file":
                new = _extract_blob(part, blobs)
                changed = changed or new is not part
                stored_parts.append(new)
            else:
                stored_parts.append(part)
        if changed:
            stored = dict(stored)
            stored["parts"] = stored_parts
            stored_json = dumps(stored)
    mid, role = message["id"], message["role"]
    if type(mid) is not str or type(role) is not str or type(created) is not str:
        msg = msg or _scan(full_json, 0)[0]
        mid, role, created = msg["id"], msg["role"], msg["createdAt"]  # plain strings, as they read back
    n_parts, tools, meta = analysis_fields(msg if msg is not None else message)
    return Prepared(
        full_json=full_json,
        stored_json=stored_json,
        blobs=blobs,
        tokens=estimate_tokens(message, tool_json),
        bytes=size,
        text=message_text(message),
        id=mid,
        role=role,
        created_at=created,
        message=msg,
        n_parts=n_parts,
        tool_names=tools,
        metadata=meta,
    )


def analysis_fields(message: dict) -> tuple[int, str | None, str | None]:
    """``(n_parts, tool names as a JSON array or None, metadata as JSON or None)`` of a
    message as it reads back: the analysis columns stored beside its text (docs/analysis.md)."""
    parts = message.get("parts")
    names = _tool_names(message)
    meta = message.get("metadata")
    return (
        len(parts) if isinstance(parts, list) else 0,
        dumps(names) if names else None,
        None if meta is None else dumps(meta),
    )


def _escape_keys(value: Any) -> bool:
    """Escape, in place, every dict key starting with the payload key; True when one was.

    ``key`` becomes ``_BLOB_KEY + key``. The mapping is one to one, and every key it
    makes starts with ``_BLOB_KEY`` twice while no other key does, so
    :func:`_unescape_keys` undoes it exactly; and since it never makes ``_BLOB_KEY``
    itself, a key equal to ``_BLOB_KEY`` in stored JSON is always a pointer the
    store wrote. ``value`` is decoded JSON (str keys) within MAX_NESTING.
    """
    return _rename_keys(value, _BLOB_KEY, lambda k: _BLOB_KEY + k)


def _unescape_keys(value: Any) -> None:
    """Undo :func:`_escape_keys` in place: keys starting with ``_BLOB_KEY`` twice lose one."""
    cut = len(_BLOB_KEY)
    _rename_keys(value, _ESCAPED, lambda k: k[cut:])


def _rename_keys(value: Any, prefix: str, rename) -> bool:
    """Rename, in place and without recursion, every dict key starting with ``prefix``
    to ``rename(key)`` (key order kept); True when one was."""
    changed = False
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            if any(k.startswith(prefix) for k in node):
                items = list(node.items())
                node.clear()
                node.update((rename(k) if k.startswith(prefix) else k, v) for k, v in items)
                changed = True
            children = node.values()
        else:
            children = node
        stack.extend(c for c in children if type(c) is dict or type(c) is list)
    return changed


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _pointer(part: Any) -> dict | None:
    """The payload pointer in a stored part, or None when the part holds none.

    Only what :func:`_extract_blob` writes counts: a ``file`` part whose ``url`` or
    ``data`` is null, beside a ``{"sha256", "field", "prefix"}`` object naming it.
    Anything else under the key (only stores written before keys were escaped can
    hold such a thing) is the caller's data.
    """
    if type(part) is not dict or part.get("type") != "file":
        return None
    ref = part.get(_BLOB_KEY)
    if type(ref) is not dict or len(ref) != 3:
        return None
    field, sha, prefix = ref.get("field"), ref.get("sha256"), ref.get("prefix")
    if field not in ("url", "data") or field not in part or part[field] is not None:
        return None
    if type(sha) is not str or not _SHA256.fullmatch(sha) or type(prefix) is not str:
        return None
    if field == "data" and prefix:
        return None
    if field == "url" and not (prefix.startswith("data:") and prefix.endswith(";base64,")):
        return None
    return ref


def blob_refs(stored_json: str) -> list[str]:
    """SHA-256 digests referenced by a stored message's JSON."""
    if _BLOB_KEY not in stored_json:
        return []
    parts = json.loads(stored_json).get("parts")
    refs = [_pointer(p) for p in parts] if type(parts) is list else []
    return [ref["sha256"] for ref in refs if ref is not None]


def _decode(stored_json: str) -> Any:
    """JSON the store wrote (by :func:`dumps`: no surrounding whitespace), decoded by the
    scanner directly: ``json.loads`` adds two regex matches and three calls per message,
    a fifth of the cost of reading a path. Anything else goes through ``json.loads``."""
    try:
        value, end = _scan(stored_json, 0)
    except (StopIteration, ValueError):
        return json.loads(stored_json)
    return value if end == len(stored_json) else json.loads(stored_json)


def decode_stored(stored_json: str) -> dict:
    """A stored message's JSON decoded with its keys as the caller wrote them; payload
    pointers stay in place (for readers that need no payload, such as analysis)."""
    msg = _decode(stored_json)
    if _ESCAPED in stored_json:
        _unescape_keys(msg)
    return msg


def restore(stored_json: str, fetch_blob) -> dict:
    """Rebuild a message from its stored JSON; ``fetch_blob(sha256) -> bytes`` supplies payloads."""
    msg = _decode(stored_json)
    if _BLOB_KEY in stored_json:
        parts = msg.get("parts")
        for part in parts if type(parts) is list else ():
            ref = _pointer(part)
            if ref is not None:
                del part[_BLOB_KEY]
                encoded = base64.b64encode(fetch_blob(ref["sha256"])).decode("ascii")
                part[ref["field"]] = ref["prefix"] + encoded
        if _ESCAPED in stored_json:  # after the pointers: an escaped key never is one
            _unescape_keys(msg)
    return msg


#: Messages decoded together by :func:`restore_many`: the joined copy of a group stays small
#: (a long string is an allocation of its own from the system each time, which costs more
#: than the calls the joining spares).
_DECODE_GROUP = 32


def restore_many(stored: list[str], fetch_blob, created: list[str | None] | None = None) -> list[dict]:
    """:func:`restore` of each stored JSON, in order. Where no message of a group holds a
    payload pointer, the group is decoded as one JSON array in one call of the scanner:
    per message that spares a call, the checks around it and the lookups of a payload
    pointer. A group that does not decode to exactly its messages, each an object, is
    restored one by one (which raises as :func:`restore` does).

    ``created[i]``, where given and not None, is the ``createdAt`` that the JSON
    ``stored[i]`` leaves out, its last key: it is added to the decoded message (a key
    set on a dict goes last, so the message is the one the whole JSON gives, without
    building that JSON: a copy of each string the read would make only to decode it)."""
    out: list[dict] = []
    for i in range(0, len(stored), _DECODE_GROUP):
        group = stored[i : i + _DECODE_GROUP]
        joined = "[" + ",".join(group) + "]"
        value: Any = None
        if _BLOB_KEY not in joined:
            try:
                value, end = _scan(joined, 0)
            except (StopIteration, ValueError):
                value = None
            else:
                if end != len(joined) or len(value) != len(group) or not all(type(m) is dict for m in value):
                    value = None
        if value is None:
            value = [restore(raw, fetch_blob) for raw in group]
        if created is not None:
            for message, when in zip(value, created[i : i + _DECODE_GROUP]):
                if when is not None:
                    message["createdAt"] = when
        out += value
    return out


def deep_copy(message: dict) -> dict:
    """A fresh copy of a message (reads never share mutable state with the store).

    Through JSON, in C: a message holds JSON values only, and this takes no Python
    stack per level of nesting, as ``copy.deepcopy`` would.
    """
    return _scan(_encode(message), 0)[0]
