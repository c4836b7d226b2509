"""Messages: validation, canonical JSON, sizes, token estimates and payload hashing.

A message is a plain ``dict`` shaped like the AI SDK's UIMessage (SPEC M1)::

    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}

Everything in this module is pure: no I/O, no database. The store calls
:func:`prepare` once per write and gets back everything it needs to store the
message (its JSON, size, token estimate and any payloads moved out of the row).
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import math
import re
import time
from datetime import datetime, timezone
from typing import Any

from .errors import InvalidMessage, MessageTooLarge
from .parts import text_of as message_text  # the text of a message: its text parts joined by blank lines

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
]

#: A ``file`` part whose inline bytes reach this size is stored out of the row (SPEC M5).
BLOB_MIN_BYTES = 4096

#: Key used inside a stored part to point at an out-of-row payload.
_BLOB_KEY = "__sessionkit_blob__"

_WORD_RE = re.compile(r"\S+")


def now_iso() -> str:
    """The current time as ISO 8601 UTC with millisecond precision and a ``Z`` suffix."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % (int(now * 1000) % 1000)


_ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def normalize_created(value: Any) -> str | None:
    """A message's ``createdAt`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``, or None when it is not a time."""
    if isinstance(value, str) and _ISO_MS.fullmatch(value):
        return value
    try:
        return to_iso(value)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def to_iso(value: datetime | int | float | str) -> str:
    """Normalise a datetime, epoch milliseconds or ISO string to ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith("Z") else value
        try:
            value = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"created_at: not an ISO 8601 time: {value!r}") from exc
    elif isinstance(value, bool):
        raise TypeError("created_at: expected a datetime or epoch milliseconds, got bool")
    elif isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"created_at: not a finite number: {value!r}")
        value = datetime.fromtimestamp(value / 1000.0, tz=timezone.utc)
    elif not isinstance(value, datetime):
        raise TypeError(
            f"created_at: expected a datetime or epoch milliseconds, got {type(value).__name__}"
        )
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def validate(message: Any) -> None:
    """Check the shape of a message (SPEC M2); raise naming the first bad field.

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
    if "role" not in message:
        raise InvalidMessage(f"message {mid!r}: field 'role' is missing")
    if not isinstance(message["role"], str) or not message["role"]:
        raise InvalidMessage(f"message {mid!r}: field 'role' must be a non-empty string")
    if "parts" not in message:
        raise InvalidMessage(f"message {mid!r}: field 'parts' is missing")
    parts = message["parts"]
    if not isinstance(parts, list):
        raise InvalidMessage(
            f"message {mid!r}: field 'parts' must be a list, got {type(parts).__name__}"
        )
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
if json.encoder.c_make_encoder is not None:
    # The C encoder, built once: json.dumps builds a JSONEncoder and a C encoder on every
    # call, and this runs for each append. Without a markers dict it skips the cycle
    # check, which a shared dict could not do safely; a cycle ends in RecursionError.
    _c_encoder = json.encoder.c_make_encoder(
        None, _encoder.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def _encode(value: Any) -> str:
        return "".join(_c_encoder(value, 0))
else:
    _encode = _encoder.encode
# The decoder's scanner, called directly on JSON that dumps() wrote (no surrounding
# whitespace to skip); json.loads would add three Python calls and two regex matches.
_scan = json.JSONDecoder().scan_once


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
    out = []
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
    """SPEC M6: ``ceil(max(chars / 4, words * 1.3)) + 4`` over text, reasoning and tool I/O."""
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

    __slots__ = ("full_json", "stored_json", "blobs", "tokens", "bytes", "text", "id", "role", "created_at",
                 "_message")

    def __init__(self, *, full_json: str, stored_json: str, blobs: dict[str, bytes], tokens: int, bytes: int,
                 text: str, id: str, role: str, created_at: str, message: dict | None = None):
        self.full_json = full_json  # the message as it will read back, as JSON
        self.stored_json = stored_json  # JSON kept in the row: payloads replaced by references
        self.blobs = blobs  # sha256 hex -> bytes
        self.tokens = tokens
        self.bytes = bytes  # size of the whole message as JSON (what the caller wrote)
        self.text = text
        self.id = id
        self.role = role
        self.created_at = created_at  # the message's createdAt, as stored
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
) -> Prepared:
    """Validate and encode a message for storage (SPEC M2-M6).

    The caller's dict is never mutated; the result holds a fresh copy that
    shares nothing with it (decoded from the JSON when first read). ``created_at``
    fills in a missing ``createdAt``. This runs on every append, so it avoids a
    second encode where it can; the token estimate and text are read from the
    caller's dict, which holds what the JSON says.
    """
    validate(message)
    full_json, tool_json = _encode_message(message)  # TypeError for non-JSON values before anything else
    msg = None  # the copy, built here only when it must change
    created = message.get("createdAt")
    if strip_metadata_keys and isinstance(message.get("metadata"), dict):
        if any(k in message["metadata"] for k in strip_metadata_keys):
            msg = _scan(full_json, 0)[0]
            meta = msg["metadata"]
            for key in strip_metadata_keys:
                meta.pop(key, None)
            full_json = dumps(msg)
    if created is None:
        created = created_at or now_iso()
        if "createdAt" in message:  # an explicit null
            if msg is None:
                msg = _scan(full_json, 0)[0]
            msg["createdAt"] = created
            full_json = dumps(msg)
        else:
            if msg is not None:
                msg["createdAt"] = created
            # append the key to the encoded object instead of encoding it all again
            full_json = full_json[:-1] + ("," if len(full_json) > 2 else "") + '"createdAt":"' + created + '"}'
    size = len(full_json) if full_json.isascii() else len(full_json.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        raise MessageTooLarge(
            f"message {message['id']!r} is {size} bytes, over max_message_bytes={max_bytes}"
        )
    blobs: dict[str, bytes] = {}
    stored_json = full_json
    if '"file"' in full_json:
        if msg is None:
            msg = _scan(full_json, 0)[0]
        stored_parts = []
        changed = False
        for part in msg["parts"]:
            if part.get("type") == "file" and _BLOB_KEY not in part:
                new = _extract_blob(part, blobs)
                changed = changed or new is not part
                stored_parts.append(new)
            else:
                stored_parts.append(part)
        if changed:
            stored = dict(msg)
            stored["parts"] = stored_parts
            stored_json = dumps(stored)
    mid, role = message["id"], message["role"]
    if type(mid) is not str or type(role) is not str or type(created) is not str:
        msg = msg or _scan(full_json, 0)[0]
        mid, role, created = msg["id"], msg["role"], msg["createdAt"]  # plain strings, as they read back
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
    )


def blob_refs(stored_json: str) -> list[str]:
    """SHA-256 digests referenced by a stored message's JSON."""
    if _BLOB_KEY not in stored_json:
        return []
    msg = json.loads(stored_json)
    return [p[_BLOB_KEY]["sha256"] for p in msg.get("parts", ()) if _BLOB_KEY in p]


def restore(stored_json: str, fetch_blob) -> dict:
    """Rebuild a message from its stored JSON; ``fetch_blob(sha256) -> bytes`` supplies payloads."""
    msg = json.loads(stored_json)
    if _BLOB_KEY in stored_json:
        for part in msg.get("parts", ()):
            ref = part.pop(_BLOB_KEY, None)
            if ref is not None:
                encoded = base64.b64encode(fetch_blob(ref["sha256"])).decode("ascii")
                part[ref["field"]] = ref["prefix"] + encoded
    return msg


def deep_copy(message: dict) -> dict:
    """A fresh copy of a message (reads never share mutable state with the store)."""
    return copy.deepcopy(message)
