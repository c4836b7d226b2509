"""OpenAI chat format -> sessionkit messages.

A chat is a list of ``{"role", "content", ...}`` messages as the Chat Completions
API takes them. The conversion keeps what a reader of the conversation needs:

* ``system`` / ``developer`` / ``user`` / ``assistant`` messages stay messages with
  the same role; string content becomes a ``text`` part; list content maps
  ``text`` -> ``text``, ``image_url`` / ``input_audio`` / ``file`` -> ``file`` parts,
  anything else is kept as given.
* each assistant ``tool_calls`` entry becomes a ``tool-<name>`` part with
  ``toolCallId`` and the parsed ``input``; the ``tool`` message answering it gives
  that part its ``output`` and ``state: "output-available"``. Tool messages are not
  kept as messages. A call id used twice pairs each result with the nearest earlier
  call that still waits for one. The legacy ``function_call`` / ``function`` pair is
  handled the same way.
* ``reasoning_content`` (or a string ``reasoning``) becomes a ``reasoning`` part;
  other keys of a chat message (``name``, ``refusal``, ...) go to
  ``metadata["openai"]``.

Message ids are derived from the content: each id hashes its parent's id and
the source message (with the results that were folded into it), so importing
the same chat again adds nothing, and importing a longer version of a chat adds
only what is new.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
from typing import Any

from ._common import MalformedInput, Progress, as_path, load_json_or_jsonl

__all__ = ["import_openai", "chat_to_messages"]

_BATCH = 500
_KNOWN = {"role", "content", "tool_calls", "tool_call_id", "function_call", "reasoning_content"}


def _tool_output(content: Any) -> Any:
    """A tool message's content as output: a string stays; a list of text parts is joined."""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    return content


def _media_type_of_url(url: str, default: str) -> str:
    if url.startswith("data:"):
        head = url[5:].split(",", 1)[0]
        media = head.split(";", 1)[0]
        return media or default
    guessed, _ = mimetypes.guess_type(url.split("?", 1)[0])
    return guessed or default


def _content_parts(content: Any, where: str, source: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MalformedInput(source, where, f"'content' must be a string, a list or null, got {type(content).__name__}")
    parts = []
    for i, item in enumerate(content):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise MalformedInput(source, where, f"content[{i}] must be an object with a string 'type'")
        kind = item["type"]
        if kind == "text":
            parts.append({"type": "text", "text": item.get("text", "")})
        elif kind == "image_url":
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise MalformedInput(source, where, f"content[{i}] (image_url) has no url")
            part: dict[str, Any] = {"type": "file", "mediaType": _media_type_of_url(url, "image/*"), "url": url}
            if isinstance(image, dict) and "detail" in image:
                part["providerMetadata"] = {"openai": {"detail": image["detail"]}}
            parts.append(part)
        elif kind == "input_audio":
            audio = item.get("input_audio") or {}
            fmt = audio.get("format", "wav") if isinstance(audio, dict) else "wav"
            data = audio.get("data") if isinstance(audio, dict) else None
            parts.append({"type": "file", "mediaType": f"audio/{fmt}", "data": data})
        elif kind == "file":
            f = item.get("file") or {}
            part = {"type": "file", "mediaType": "application/octet-stream"}
            if isinstance(f, dict):
                data = f.get("file_data")
                if isinstance(data, str) and data.startswith("data:"):
                    part["mediaType"] = _media_type_of_url(data, part["mediaType"])
                    part["url"] = data
                elif data is not None:
                    part["data"] = data
                if f.get("filename") is not None:
                    part["filename"] = f["filename"]
                if f.get("file_id") is not None:
                    part["providerMetadata"] = {"openai": {"file_id": f["file_id"]}}
            parts.append(part)
        else:
            parts.append(dict(item))
    return parts


def _parse_arguments(raw: Any, where: str, source: str, call: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        return raw  # already parsed (some logs store a dict)
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedInput(
            source, where, f"tool call {call!r} has arguments that are not JSON ({exc.msg} at column {exc.colno})"
        ) from None


def canonical(value: Any) -> str:
    """Key-order independent JSON, for hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _message_id(parent: str | None, source_message: Any) -> str:
    h = hashlib.sha256()
    h.update((parent or "").encode("utf-8"))
    h.update(b"\x00")
    h.update(canonical(source_message).encode("utf-8"))
    return "oai-" + h.hexdigest()[:24]


def chat_to_messages(
    chat: list, *, parent_id: str | None = None, source: str = "<list>", labels: list[str] | None = None
) -> list[tuple[dict, str | None]]:
    """Convert a chat to ``[(message, parent_id), ...]`` without storing anything.

    The messages form one chain starting under ``parent_id``. ``labels`` name each
    record in error messages (default ``"record i"``).
    """
    if not isinstance(chat, list):
        raise TypeError(f"a chat must be a list of messages, got {type(chat).__name__}")
    labels = labels or [f"record {i}" for i in range(len(chat))]
    kept: list[dict] = []  # sessionkit messages, in order
    absorbed: list[list[Any]] = []  # the source records folded into each kept message
    waiting: dict[str, list[dict]] = {}  # call id -> tool parts still waiting for a result, oldest first
    answered: dict[str, dict] = {}  # call id -> the last part that got a result
    functions: list[dict] = []  # legacy function_call parts waiting for a result
    for i, rec in enumerate(chat):
        where = labels[i]
        if not isinstance(rec, dict):
            raise MalformedInput(source, where, f"a chat message must be an object, got {type(rec).__name__}")
        role = rec.get("role")
        if not isinstance(role, str) or not role:
            raise MalformedInput(source, where, "chat message has no 'role'")
        if role in ("tool", "function"):
            if role == "tool":
                call_id = rec.get("tool_call_id")
                if not isinstance(call_id, str) or not call_id:
                    raise MalformedInput(source, where, "tool message has no 'tool_call_id'")
                queue = waiting.get(call_id)
                if not queue:
                    if call_id in answered:
                        raise MalformedInput(
                            source, where, f"tool message answers call {call_id!r}, which already has a result"
                        )
                    raise MalformedInput(
                        source, where,
                        f"tool message answers call {call_id!r}, but no earlier assistant message made that call",
                    )
                part = queue.pop()  # the nearest earlier call with this id
                answered[call_id] = part
            else:
                name = rec.get("name")
                match = [p for p in functions if p["type"] == f"tool-{name}"]
                if not match:
                    raise MalformedInput(
                        source, where, f"function message {name!r} answers no earlier function_call"
                    )
                part = match[-1]
                functions.remove(part)
            part["state"] = "output-available"
            part["output"] = _tool_output(rec.get("content"))
            absorbed[part["_owner"]].append(rec)
            continue
        parts: list[dict] = []
        reasoning = rec.get("reasoning_content")
        if reasoning is None and isinstance(rec.get("reasoning"), str):
            reasoning = rec["reasoning"]
        if isinstance(reasoning, str) and reasoning:
            parts.append({"type": "reasoning", "text": reasoning})
        calls = rec.get("tool_calls") or []
        content = rec.get("content")
        if not (calls and content == ""):
            parts += _content_parts(content, where, source)
        if not isinstance(calls, list):
            raise MalformedInput(source, where, "'tool_calls' must be a list")
        owner = len(kept)
        for k, call in enumerate(calls):
            if not isinstance(call, dict):
                raise MalformedInput(source, where, f"tool_calls[{k}] must be an object")
            function = call.get("function")
            fn = function if isinstance(function, dict) else call
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                raise MalformedInput(source, where, f"tool_calls[{k}] has no function name")
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                raise MalformedInput(source, where, f"tool_calls[{k}] ({name}) has no 'id'")
            part = {
                "type": f"tool-{name}",
                "toolCallId": call_id,
                "state": "input-available",
                "input": _parse_arguments(fn.get("arguments"), where, source, call_id),
                "_owner": owner,
            }
            parts.append(part)
            waiting.setdefault(call_id, []).append(part)
        legacy = rec.get("function_call")
        if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
            part = {
                "type": f"tool-{legacy['name']}",
                "toolCallId": f"function_call-{i}",
                "state": "input-available",
                "input": _parse_arguments(legacy.get("arguments"), where, source, legacy["name"]),
                "_owner": owner,
            }
            parts.append(part)
            functions.append(part)
        message: dict = {"role": role, "parts": parts}
        extra = {k: v for k, v in rec.items() if k not in _KNOWN and not (k == "reasoning" and isinstance(v, str))}
        if extra:
            message["metadata"] = {"openai": extra}
        kept.append(message)
        absorbed.append([rec])
    out = []
    parent = parent_id
    for message, recs in zip(kept, absorbed):
        for part in message["parts"]:
            part.pop("_owner", None)
        mid = _message_id(parent, recs)
        out.append(({"id": mid, **message}, parent))
        parent = mid
    return out


def _read_chat(source_arg: Any) -> tuple[list, list[str], str]:
    if isinstance(source_arg, list):
        return source_arg, [f"record {i}" for i in range(len(source_arg))], "<list>"
    if isinstance(source_arg, tuple):
        return list(source_arg), [f"record {i}" for i in range(len(source_arg))], "<list>"
    path = as_path(source_arg)
    name = str(path)
    kind, items = load_json_or_jsonl(path)
    if kind == "json" and len(items) == 1 and items[0][0] == "document":
        doc = items[0][1]
        if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
            msgs = doc["messages"]
            return msgs, [f"messages[{i}]" for i in range(len(msgs))], name
        if isinstance(doc, dict) and "role" in doc:
            return [doc], ["line 1"], name
        raise MalformedInput(
            name, None, "expected a JSON array of chat messages, a JSONL file, or {\"messages\": [...]}"
        )
    return [v for _, v in items], [w for w, _ in items], name


def import_openai(session, source: Any, *, parent_id: str | None = None, progress: Any = None) -> list:
    """Import an OpenAI-format chat into ``session``; returns one ``AppendResult`` per message kept.

    ``source`` is a list of chat messages, or a path to a JSON array, a JSON-lines
    file (one chat message per line, gzip allowed) or a ``{"messages": [...]}``
    document. The chat becomes one chain under ``parent_id`` (default: a new root).
    Idempotent: ids derive from the content, so importing the same chat twice adds
    nothing. Writes go in batches, one transaction each; ``progress`` as in
    :class:`sessionkit.io.Progress` (messages written). Malformed input raises
    :class:`MalformedInput` naming the record or line.
    """
    if parent_id is not None and not isinstance(parent_id, str):
        raise TypeError("parent_id must be a message id (str) or None")
    chat, labels, name = _read_chat(source)
    converted = chat_to_messages(chat, parent_id=parent_id, source=name, labels=labels)
    if parent_id is not None and session.get(parent_id) is None:
        from ..errors import MessageNotFound

        raise MessageNotFound(f"parent message {parent_id!r} is not in session {session.session_id!r}")
    results = []
    with Progress(progress, total=len(converted), desc=f"importing {name}", unit="messages") as bar:
        for start in range(0, len(converted), _BATCH):
            chunk = converted[start : start + _BATCH]
            results += session.import_many([(m, p, None) for m, p in chunk])
            bar.update(len(chunk))
    return results
