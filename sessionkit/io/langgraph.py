"""LangGraph checkpoints (``langgraph-checkpoint-sqlite``) -> one session per thread.

A ``SqliteSaver`` database holds, per thread, a tree of checkpoints (each names its
parent; replaying or updating an older checkpoint forks the history), and each
checkpoint serialises the whole state again, the ``messages`` list included. The
import turns that into one conversation tree per thread:

* Each thread (root namespace ``""``; subgraphs' namespaces are left out) becomes the
  sessionkit session named by its ``thread_id``.
* Every checkpoint's message list is a path of the tree: a message is stored once, the
  first time it appears, under the message before it, and its LangChain message id is
  its id. Checkpoints that part ways (a fork) give the messages after the fork point
  sibling branches; a message that a later checkpoint holds with the same id but other
  content (an edit through ``update_state``) becomes a sibling too (``<id>~1``...).
* ``human`` -> ``user``, ``ai`` -> ``assistant``, ``system`` -> ``system``, ``chat``
  keeps its role; string content becomes a ``text`` part, content blocks become
  ``text``, ``reasoning`` or ``file`` parts (others are kept as given).
* An AI message's ``tool_calls`` become ``tool-<name>`` parts (``toolCallId``, the
  ``args`` as ``input``); the ``ToolMessage`` answering a call gives that part its
  ``output`` (``state: "output-error"`` with ``errorText`` when its status is
  ``error``) and is not kept as a message of its own. A tool message whose call is
  out of reach stays a ``tool`` message holding the part.
* ``metadata["langgraph"]`` keeps ``checkpoint`` (where the message first appears),
  and the message's ``name``, ``additional_kwargs``, ``response_metadata``,
  ``usage_metadata`` and ``invalid_tool_calls`` when set. A message's time is the
  time of the checkpoint where it first appears.

Checkpoints are decoded from msgpack with ``ormsgpack`` (installed with
``langgraph-checkpoint``) into plain data: no class named in the file is imported or
built. Memory stays bounded by one checkpoint plus the ids of one thread's messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..errors import MalformedInput, MissingDependency
from ..store import Session
from ._common import watching_roots
from ._frameworks import SessionWriter, columns, iso_time, open_sqlite, rows, scalar, table_names, tool_output
from ._progress import Progress, check_progress
from ._reading import as_path

__all__ = ["fingerprint", "import_langgraph", "langchain_to_message"]

_HOLD = 5000
_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "developer": "developer",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "SystemMessageChunk": "system",
}
#: msgpack extension codes of LangGraph's serializer that wrap an object as (module, name, data, ...).
_OBJECT_CODES = {0, 1, 2, 3, 4, 5}
_DELTA_SNAPSHOT = 7


def _decoder():
    try:
        import ormsgpack
    except ImportError as exc:
        raise MissingDependency(
            "reading LangGraph checkpoints needs ormsgpack (installed with langgraph-checkpoint): pip install ormsgpack"
        ) from exc

    def ext_hook(code: int, data: bytes) -> Any:
        value = ormsgpack.unpackb(data, ext_hook=ext_hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code in _OBJECT_CODES and isinstance(value, (list, tuple)) and len(value) >= 3:
            return {"__lc_class__": f"{value[0]}.{value[1]}", "__lc_data__": value[2]}
        if code == _DELTA_SNAPSHOT:
            return value
        return {"__lc_ext__": code}

    def decode(kind: str | None, blob: Any) -> Any:
        if kind == "msgpack":
            return ormsgpack.unpackb(blob, ext_hook=ext_hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if kind == "json":
            return json.loads(blob)
        if kind in ("null", None):
            return None
        raise ValueError(
            f"checkpoint serialised as {kind!r}, which this importer does not read"
            + (" (decrypt it with the saver's serializer first)" if "aes" in str(kind) else "")
        )

    return decode


def _fields(value: Any) -> dict | None:
    """A serialised LangChain message as its fields (``type``, ``content``, ``id``...)."""
    if isinstance(value, dict) and "__lc_data__" in value:
        value = value["__lc_data__"]
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return value
    if isinstance(value, dict) and value.get("lc") == 1 and isinstance(value.get("kwargs"), dict):
        kwargs = dict(value["kwargs"])  # the JSON (lc) serialisation
        kwargs.setdefault("type", str(value.get("id", ["", "message"])[-1]).replace("Message", "").lower() or "chat")
        return kwargs
    return None


def _content_parts(content: Any, source: str, where: str) -> list[dict]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MalformedInput(source, where, f"message content must be a string or a list, got {type(content).__name__}")
    parts: list[dict] = []
    for block in content:
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
            continue
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MalformedInput(source, where, "a content block must be a string or an object with a 'type'")
        kind = block["type"]
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind in ("thinking", "reasoning"):
            text = block.get("thinking") or block.get("reasoning") or block.get("text") or ""
            if not isinstance(text, str):
                text = json.dumps(text)
            parts.append({"type": "reasoning", "text": text})
        elif kind == "image_url":
            image = block.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "file", "mediaType": "image/*", "url": url} if isinstance(url, str) else dict(block))
        elif kind in ("tool_use", "tool_call", "function_call"):
            continue  # the same call is in the message's tool_calls
        else:
            parts.append(dict(block))
    return parts


def langchain_to_message(fields: dict, source: str = "<message>", where: str = "message") -> tuple[dict, str | None]:
    """One LangChain message's fields as a sessionkit message (without ``id``).

    Returns ``(message, tool_call_id)``; ``tool_call_id`` is set for a tool message,
    whose message is a ``tool`` message with one part holding its result.
    """
    kind = fields.get("type")
    if not isinstance(kind, str):
        raise MalformedInput(source, where, "a message needs a string 'type'")
    meta: dict[str, Any] = {}
    for key in ("name", "additional_kwargs", "response_metadata", "usage_metadata", "invalid_tool_calls", "artifact"):
        if fields.get(key) not in (None, {}, [], ""):
            meta[key] = fields[key]
    if kind in ("tool", "ToolMessageChunk", "function"):
        call_id = fields.get("tool_call_id") or (f"function-{fields.get('name')}" if kind == "function" else None)
        if not isinstance(call_id, str) or not call_id:
            raise MalformedInput(source, where, "tool message has no 'tool_call_id'")
        part: dict[str, Any] = {"type": f"tool-{fields.get('name') or 'unknown'}", "toolCallId": call_id}
        output = tool_output(fields.get("content"))
        if fields.get("status") == "error":
            part.update(state="output-error", errorText=output if isinstance(output, str) else json.dumps(output))
        else:
            part.update(state="output-available", output=output)
        message: dict[str, Any] = {"role": "tool", "parts": [part]}
        if meta:
            message["metadata"] = {"langgraph": meta}
        return message, call_id
    role = fields.get("role") if kind in ("chat", "ChatMessageChunk") else _ROLES.get(kind, kind)
    if not isinstance(role, str) or not role:
        raise MalformedInput(source, where, f"{kind} message has no role")
    parts = _content_parts(fields.get("content"), source, where)
    calls = fields.get("tool_calls") or []
    if not isinstance(calls, list):
        raise MalformedInput(source, where, "'tool_calls' must be a list")
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise MalformedInput(source, where, f"tool_calls[{k}] has no name")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise MalformedInput(source, where, f"tool_calls[{k}] ({call['name']}) has no id")
        parts.append(
            {
                "type": f"tool-{call['name']}",
                "toolCallId": call_id,
                "state": "input-available",
                "input": call.get("args", {}),
            }
        )
    message = {"role": role, "parts": parts}
    if meta:
        message["metadata"] = {"langgraph": meta}
    return message, None


def fingerprint(fields: dict) -> str:
    """A short hash of a message's fields (or any JSON value): equal content, equal fingerprint."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class _Thread:
    """The tree of one thread's messages, built from its checkpoints one at a time."""

    def __init__(self, writer: SessionWriter, source: str):
        self.writer = writer
        self.source = source
        # (parent, message id) -> (node, fingerprint); a folded tool result maps to its parent
        self.nodes: dict[tuple[str | None, str], tuple[str | None, str]] = {}
        self.variants: dict[str, int] = {}  # message id -> how many other nodes carry it
        self.held: list[list] = []
        self.waiting: dict[str, list] = {}  # call id -> held entry
        self.names: dict[str, str] = {}  # call id -> tool name

    def checkpoint(self, checkpoint_id: str, created: str | None, messages: list, where: str) -> None:
        tail: str | None = None
        path: set[str] = set()
        for i, value in enumerate(messages):
            fields = _fields(value)
            here = f"{where}, messages[{i}]"
            if fields is None:
                raise MalformedInput(self.source, here, "not a LangChain message")
            lc_id = fields.get("id")
            print_ = fingerprint(fields)
            if not isinstance(lc_id, str) or not lc_id:
                lc_id = "lg-" + hashlib.sha256(f"{tail}\x00{print_}".encode()).hexdigest()[:24]
            known = self.nodes.get((tail, lc_id))
            if known is not None and (known[1] == print_ or known[0] == tail):
                tail = known[0]  # stored already (a folded tool result keeps the tail where it is)
                if tail is not None:
                    path.add(tail)
                continue
            message, call_id = langchain_to_message(fields, self.source, here)
            if call_id is not None:
                entry = self.waiting.get(call_id)
                if entry is not None and entry[0]["id"] in path:
                    part = next(p for p in entry[0]["parts"] if p.get("toolCallId") == call_id)
                    result = message["parts"][0]
                    part["state"] = result["state"]
                    for key in ("output", "errorText"):
                        if key in result:
                            part[key] = result[key]
                    if message.get("metadata"):
                        entry[0].setdefault("metadata", {}).setdefault("langgraph", {}).setdefault("tool_messages", {})[
                            call_id
                        ] = {"id": lc_id, **message["metadata"]["langgraph"]}
                    del self.waiting[call_id]
                    self.nodes[(tail, lc_id)] = (tail, print_)
                    continue
                name = self.names.get(call_id)
                if name is not None and message["parts"][0]["type"] == "tool-unknown":
                    message["parts"][0]["type"] = f"tool-{name}"
            uses = self.variants.get(lc_id)
            if uses is None:  # the first time this id is stored
                self.variants[lc_id] = 0
                node = lc_id
            else:  # an edit of it, or the same id under another parent (a message removed before it)
                self.variants[lc_id] = uses + 1
                node = f"{lc_id}~{uses + 1}"
            meta = message.setdefault("metadata", {}).setdefault("langgraph", {})
            meta["checkpoint"] = checkpoint_id
            if node != lc_id:
                meta["id"] = lc_id
            entry = [{"id": node, **message}, tail, created, here]
            self.nodes[(tail, lc_id)] = (node, print_)
            self.held.append(entry)
            for part in message["parts"]:
                if part.get("state") == "input-available":
                    self.waiting[part["toolCallId"]] = entry
                    self.names[part["toolCallId"]] = part["type"][len("tool-") :]
            tail = node
            path.add(node)
        if len(self.held) >= _HOLD or not self.waiting:
            self.release()

    def release(self) -> None:
        for message, parent, created, where in self.held:
            self.writer.add(message, parent, created, where)
        self.held.clear()
        self.waiting.clear()

    def finish(self) -> None:
        self.release()
        self.writer.flush()


def import_langgraph(
    store,
    path: Any,
    *,
    thread_ids: list[str] | None = None,
    channel: str = "messages",
    session_prefix: str = "",
    progress: Any = None,
) -> Sequence[Session]:
    """Import a LangGraph ``SqliteSaver`` database: one sessionkit session per thread.

    ``channel`` is the state key holding the messages (``"messages"`` for ``MessagesState``); ``thread_ids``
    limits the import to those threads; ``session_prefix`` is put before each session id (to keep sessions of
    several sources apart in one store). Returns the sessions, oldest thread first. Idempotent (ids are the
    LangChain message ids). ``progress`` as in :class:`sessionkit.io.Progress` (checkpoints read). Malformed
    data raises :class:`MalformedInput` naming the file, the checkpoint and the message.
    """
    check_progress(progress)
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    path = as_path(path)
    source = str(path)
    if thread_ids is not None and (isinstance(thread_ids, str) or not all(isinstance(t, str) for t in thread_ids)):
        raise TypeError("thread_ids must be a list of thread id strings")
    if not isinstance(channel, str) or not channel:
        raise TypeError("channel must be a non-empty string")
    conn = open_sqlite(path, "a LangGraph checkpoint database")
    try:
        names = table_names(conn, source)
        if "checkpoints" not in names:
            raise MalformedInput(source, None, "no table 'checkpoints': not a LangGraph SqliteSaver database")
        have = columns(conn, "checkpoints", source)
        for column in ("thread_id", "checkpoint_ns", "checkpoint_id", "type", "checkpoint"):
            if column not in have:
                raise MalformedInput(source, None, f"table 'checkpoints' has no column {column!r}")
        decode = _decoder()
        threads = [
            t
            for (t, _) in rows(
                conn,
                "SELECT thread_id, MIN(checkpoint_id) FROM checkpoints "
                "WHERE checkpoint_ns = '' GROUP BY thread_id ORDER BY 2",
                source=source,
            )
        ]
        if thread_ids is not None:
            wanted = set(thread_ids)
            threads = [t for t in threads if t in wanted]
        total = None
        if progress is not False and thread_ids is None:
            total = scalar(conn, "SELECT COUNT(*) FROM checkpoints WHERE checkpoint_ns = ''", source=source)
        sessions = []
        with (
            watching_roots(store, source) as watch,
            Progress(progress, total=total, desc=f"importing {path.name}", unit="checkpoints") as bar,
        ):
            for thread in threads:
                if not isinstance(thread, str) or not thread:
                    raise MalformedInput(source, f"thread {thread!r}", "thread_id must be a non-empty string")
                session = store.session(session_prefix + thread)
                writer = SessionWriter(store, session, source, watch=watch)
                walk = _Thread(writer, source)
                try:
                    for checkpoint_id, kind, blob in rows(
                        conn,
                        "SELECT checkpoint_id, type, checkpoint FROM checkpoints "
                        "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id",
                        (thread,),
                        source=source,
                        size=50,
                    ):
                        where = f"thread {thread!r}, checkpoint {checkpoint_id}"
                        try:
                            state = decode(kind, blob)
                        except MalformedInput:
                            raise
                        except Exception as exc:  # any failure to decode is the file's
                            raise MalformedInput(source, where, f"cannot decode the checkpoint: {exc}") from None
                        if not isinstance(state, dict):
                            raise MalformedInput(source, where, "the checkpoint is not a mapping")
                        values = state.get("channel_values") or {}
                        messages = values.get(channel, []) if isinstance(values, dict) else None
                        if not isinstance(messages, list):
                            raise MalformedInput(source, where, f"channel {channel!r} is not a list of messages")
                        created = iso_time(state.get("ts"), source, where) if state.get("ts") else None
                        walk.checkpoint(checkpoint_id, created, messages, where)
                        bar.update()
                    walk.finish()
                except MalformedInput:
                    writer.flush()
                    raise
                if len(session):
                    sessions.append(session)
        return sessions
    finally:
        conn.close()
