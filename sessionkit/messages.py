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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .errors import InvalidMessage, MessageTooLarge

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


def dumps(value: Any) -> str:
    """Canonical compact JSON; ``TypeError`` for anything JSON cannot encode (sets, NaN...)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # NaN / infinity / circular reference
        raise TypeError(f"message is not JSON-encodable: {exc}") from exc
    except TypeError as exc:
        raise TypeError(f"message is not JSON-encodable: {exc}") from exc


def message_text(message: dict) -> str:
    """The text of a message: its ``text`` parts joined by blank lines (what search indexes)."""
    out = []
    for part in message.get("parts") or ():
        if isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, str):
                out.append(text)
    return "\n\n".join(out)


def _countable_strings(message: dict):
    for part in message.get("parts") or ():
        if not isinstance(part, dict):
            continue
        ptype = part.get("type")
        if ptype in ("text", "reasoning"):
            text = part.get("text")
            if isinstance(text, str):
                yield text
        elif isinstance(ptype, str) and (ptype.startswith("tool-") or ptype == "dynamic-tool"):
            for key in ("input", "output"):
                if key in part and part[key] is not None:
                    value = part[key]
                    yield value if isinstance(value, str) else dumps(value)


def estimate_tokens(message: dict) -> int:
    """SPEC M6: ``ceil(max(chars / 4, words * 1.3)) + 4`` over text, reasoning and tool I/O."""
    chars = 0
    words = 0
    for text in _countable_strings(message):
        chars += len(text)
        words += len(text.split())
    return math.ceil(max(chars / 4, words * 1.3)) + 4


@dataclass
class Prepared:
    """A validated message ready for storage."""

    message: dict  # the message as it will read back (createdAt filled in)
    stored_json: str  # JSON kept in the row: payloads replaced by references
    blobs: dict[str, bytes] = field(default_factory=dict)  # sha256 hex -> bytes
    tokens: int = 0
    bytes: int = 0  # size of the whole message as JSON (what the caller wrote)
    text: str = ""


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
    shares nothing with it. ``created_at`` fills in a missing ``createdAt``.
    This runs on every append, so it avoids a second encode where it can.
    """
    validate(message)
    full_json = dumps(message)  # raises TypeError for non-JSON values before anything else
    msg = json.loads(full_json)  # a fresh deep copy with JSON semantics
    if strip_metadata_keys and isinstance(msg.get("metadata"), dict):
        meta = msg["metadata"]
        if any(k in meta for k in strip_metadata_keys):
            for key in strip_metadata_keys:
                meta.pop(key, None)
            full_json = dumps(msg)
    if msg.get("createdAt") is None:
        stamp = created_at or now_iso()
        if "createdAt" in msg:  # an explicit null
            msg["createdAt"] = stamp
            full_json = dumps(msg)
        else:
            msg["createdAt"] = stamp
            # append the key to the encoded object instead of encoding it all again
            full_json = full_json[:-1] + ("," if len(full_json) > 2 else "") + '"createdAt":"' + stamp + '"}'
    size = len(full_json.encode("utf-8"))
    if max_bytes is not None and size > max_bytes:
        raise MessageTooLarge(
            f"message {msg['id']!r} is {size} bytes, over max_message_bytes={max_bytes}"
        )
    blobs: dict[str, bytes] = {}
    stored_json = full_json
    if '"file"' in full_json:
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
    return Prepared(
        message=msg,
        stored_json=stored_json,
        blobs=blobs,
        tokens=estimate_tokens(msg),
        bytes=size,
        text=message_text(msg),
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
