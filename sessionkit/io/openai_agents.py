"""OpenAI Agents SDK session databases -> one session per agent session, branches kept.

Reads the SQLite file of ``agents.SQLiteSession`` (tables ``agent_sessions`` and
``agent_messages``: one row per Responses API input item, JSON in ``message_data``) and
of ``agents.extensions.memory.AdvancedSQLiteSession``, whose ``message_structure``
table orders each branch's items (``branch_id``, ``sequence_number``, turn numbers) and
shares the rows of the turns a branch was created from.

* Each agent session becomes the sessionkit session of the same id.
* Each item becomes one message whose id is the item's row id (``"17"``); a row that a
  second branch reaches by another path is stored again as ``"17@<branch>"``.
  Branches share the messages of the turns they were copied from and part where
  they differ: ``session.branches()`` shows the fork. Branches are written oldest
  activity first, so the latest leaf is the end of the most recently extended branch.
* ``{"role": ..., "content": ...}`` messages keep their role; text content becomes
  ``text`` parts, images and files ``file`` parts.
* ``function_call`` items (and the other ``*_call`` items: computer, shell, web
  search, MCP...) become an assistant message with one ``tool-<name>`` part
  (``toolCallId``, the parsed arguments as ``input``); the matching
  ``*_call_output`` item gives that part its ``output`` and ``state:
  "output-available"`` and is not kept as a message of its own (an output whose call
  is out of reach becomes a ``tool`` message holding the part).
* ``reasoning`` items become an assistant message with a ``reasoning`` part.
* Other items are kept whole in a ``data-openai-<type>`` part.
* ``AdvancedSQLiteSession``'s usage per turn (``turn_usage``: requests, tokens and their
  details, per branch) becomes the session's records of kind ``openai_agents.turn_usage``.
* ``metadata["openai_agents"]`` keeps the row (``row``), the branch and turn numbers,
  the row ids of outputs folded in (``outputs``) and the item's fields no part holds
  (``item``: its ``id``, ``status``...). ``created_at`` of the row is the message time.

Rows are read a page at a time and written in batches, so memory stays bounded by the
number of rows of one session (their ids) plus one batch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..errors import MalformedInput
from ..store import Session
from ._common import watching_roots
from ._frameworks import (
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

__all__ = ["import_openai_agents", "item_to_message"]

#: Messages held back while a tool call waits for its output, at most.
_HOLD = 5000

_CALL_KEYS = {"type", "id", "call_id", "name", "arguments", "status", "input", "action"}


def _text_parts(content: Any, source: str, where: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MalformedInput(source, where, f"'content' must be a string or a list, got {type(content).__name__}")
    parts: list[dict] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MalformedInput(source, where, f"content[{i}] must be an object with a string 'type'")
        kind = block["type"]
        if kind in ("input_text", "output_text", "text") and isinstance(block.get("text"), str):
            part: dict[str, Any] = {"type": "text", "text": block["text"]}
            extra = {k: v for k, v in block.items() if k not in ("type", "text") and v not in (None, [], {})}
            if extra:
                part["providerMetadata"] = {"openai": extra}
            parts.append(part)
        elif kind == "refusal":
            parts.append(
                {"type": "text", "text": block.get("refusal", ""), "providerMetadata": {"openai": {"refusal": True}}}
            )
        elif kind == "input_image":
            part = {"type": "file", "mediaType": "image/*"}
            if isinstance(block.get("image_url"), str):
                part["url"] = block["image_url"]
            extra = {k: v for k, v in block.items() if k not in ("type", "image_url") and v is not None}
            if extra:
                part["providerMetadata"] = {"openai": extra}
            parts.append(part)
        elif kind == "input_file":
            part = {"type": "file", "mediaType": "application/octet-stream"}
            if isinstance(block.get("file_url"), str):
                part["url"] = block["file_url"]
            elif isinstance(block.get("file_data"), str):
                part["url" if block["file_data"].startswith("data:") else "data"] = block["file_data"]
            if isinstance(block.get("filename"), str):
                part["filename"] = block["filename"]
            if block.get("file_id") is not None:
                part["providerMetadata"] = {"openai": {"file_id": block["file_id"]}}
            parts.append(part)
        else:
            parts.append(dict(block))
    return parts


def _arguments(raw: Any, source: str, where: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        return raw
    return load_json(raw, source, where, "tool call arguments", are=True)


def _tool_name(item: dict) -> str:
    kind = item["type"]
    name = item.get("name")
    if isinstance(name, str) and name:
        namespace = item.get("namespace") or item.get("server_label")
        return f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name
    return kind[: -len("_call")] if kind.endswith("_call") else kind


def item_to_message(item: Any, source: str = "<item>", where: str = "item") -> tuple[dict, str | None]:
    """One Responses API input item as a sessionkit message (without ``id``).

    Returns ``(message, call_id)``; ``call_id`` is set for an ``*_call_output`` item,
    whose message is a ``tool`` message with one part holding the output (an importer
    folds it into the call's part instead).
    """
    if not isinstance(item, dict):
        raise MalformedInput(source, where, f"an item must be a JSON object, got {type(item).__name__}")
    kind = item.get("type")
    if kind is not None and not isinstance(kind, str):
        raise MalformedInput(source, where, "'type' must be a string")
    extra: dict[str, Any]
    if kind in (None, "message") and "role" in item:
        role = item["role"]
        if not isinstance(role, str) or not role:
            raise MalformedInput(source, where, "message item has no 'role'")
        parts = _text_parts(item.get("content"), source, where)
        extra = {k: v for k, v in item.items() if k not in ("role", "content")}
        message: dict[str, Any] = {"role": role, "parts": parts}
    elif kind is None:
        raise MalformedInput(source, where, "an item needs a 'type' or a 'role'")
    elif kind == "reasoning":
        summary = item.get("summary") or []
        texts = [s.get("text", "") for s in summary if isinstance(s, dict)] if isinstance(summary, list) else []
        if not texts and isinstance(item.get("content"), list):
            texts = [c.get("text", "") for c in item["content"] if isinstance(c, dict)]
        message = {"role": "assistant", "parts": [{"type": "reasoning", "text": "\n\n".join(texts)}]}
        extra = {k: v for k, v in item.items() if k not in ("summary",)}
    elif kind.endswith("_call_output"):
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise MalformedInput(source, where, f"{kind} item has no 'call_id'")
        part = {
            "type": f"tool-{kind[: -len('_call_output')]}",
            "toolCallId": call_id,
            "state": "output-available",
            "output": tool_output(item.get("output")),
        }
        extra = {k: v for k, v in item.items() if k not in ("call_id", "output")}
        message = {"role": "tool", "parts": [part]}
        if extra:
            message["metadata"] = {"openai_agents": {"item": extra}}
        return message, call_id
    elif kind.endswith("_call"):
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise MalformedInput(source, where, f"{kind} item has no 'call_id'")
        if "arguments" in item:
            tool_input = _arguments(item.get("arguments"), source, where)
        else:
            tool_input = item.get("action", item.get("input", {}))
        part = {
            "type": f"tool-{_tool_name(item)}",
            "toolCallId": call_id,
            "state": "input-available",
            "input": tool_input,
        }
        if item.get("output") is not None:  # hosted tools (MCP, code interpreter) carry their result
            part["state"] = "output-available"
            part["output"] = item["output"]
        message = {"role": "assistant", "parts": [part]}
        extra = {
            k: v
            for k, v in item.items()
            if k not in ("call_id", "arguments", "output")
            and not (k == "name" or (k == "action" and "arguments" not in item))
        }
        if "arguments" not in item and "action" not in item:
            extra.pop("input", None)
    else:
        message = {"role": "assistant", "parts": [{"type": f"data-openai-{kind}", "data": item}]}
        extra = {}
    if extra:
        message["metadata"] = {"openai_agents": {"item": extra}}
    return message, None


class _Branch:
    """The conversion of one branch's rows: folds call outputs into their calls and holds
    messages back (at most ``_HOLD``) while a call waits for its output."""

    def __init__(self, writer: SessionWriter, placed: dict, names: dict, source: str, branch: str | None):
        self.writer = writer
        self.placed = placed  # row id -> (parent node id, node id); "=" parent marks an output folded in
        self.names = names  # call id -> tool name (the part type of a lone output)
        self.source = source
        self.branch = branch
        self.tail: str | None = None
        self.path: set[str] = set()  # the nodes this branch has passed through
        self.held: list[list] = []  # [message, parent, created, where]
        self.waiting: dict[str, list] = {}  # call id -> the held entry whose message holds that call

    def row(self, rowid: int, data: Any, created: Any, table: str, turn: Any = None, branch_turn: Any = None) -> None:
        where = f"{table} row {rowid}"
        if not isinstance(data, str):
            raise MalformedInput(self.source, where, "message_data is not text")
        item = load_json(data, self.source, where, "message_data")
        seen = self.placed.get(rowid)
        if seen is not None:
            parent, node = seen
            if parent == "=" and node in self.path:  # an output folded into a call on this path
                self.writer.count(1)
                return
            if parent == self.tail:  # a message this branch shares with an earlier one
                self.tail = node
                self.path.add(node)
                self.writer.count(1)
                return
        message, call_id = item_to_message(item, self.source, where)
        meta = message.setdefault("metadata", {}).setdefault("openai_agents", {})
        meta["row"] = rowid
        if self.branch is not None:
            meta["branch"] = self.branch
        if turn is not None:
            meta["turn"] = turn
        if branch_turn is not None and branch_turn != turn:
            meta["branch_turn"] = branch_turn
        created_at = iso_time(created, self.source, where)
        if call_id is not None:
            held = self.waiting.pop(call_id, None)
            if held is not None:
                for part in held[0]["parts"]:
                    if part.get("toolCallId") == call_id and part.get("state") == "input-available":
                        part["state"] = "output-available"
                        part["output"] = message["parts"][0]["output"]
                held[0]["metadata"]["openai_agents"].setdefault("outputs", []).append(rowid)
                item_extra = meta.get("item")
                if item_extra:
                    held[0]["metadata"]["openai_agents"].setdefault("output_items", {})[call_id] = item_extra
                self.placed[rowid] = ("=", held[0]["id"])
                self.writer.count(1)
                return
            name = self.names.get(call_id)
            if name is not None:
                message["parts"][0]["type"] = f"tool-{name}"
        node = str(rowid) if seen is None else f"{rowid}@{self.branch}"
        message = {"id": node, **message}
        if seen is None:
            self.placed[rowid] = (self.tail, node)
        entry = [message, self.tail, created_at, where]
        self.held.append(entry)
        self.tail = node
        self.path.add(node)
        for part in message["parts"]:
            if part.get("state") == "input-available" and isinstance(part.get("toolCallId"), str):
                self.waiting[part["toolCallId"]] = entry
                self.names[part["toolCallId"]] = part["type"][len("tool-") :]
        if len(self.held) >= _HOLD or not self.waiting:
            self.release()

    def release(self) -> None:
        for held_message, parent, created, where in self.held:
            self.writer.add(held_message, parent, created, where)
        self.held.clear()
        self.waiting.clear()

    def finish(self) -> None:
        self.release()
        self.writer.flush()


_USAGE = ("requests", "input_tokens", "output_tokens", "total_tokens")


def _turn_usage(store, conn: sqlite3.Connection, session, sid: str, source: str) -> None:
    """``AdvancedSQLiteSession``'s usage per branch and turn, as the session's records."""
    usage = []
    for row in rows(
        conn,
        "SELECT branch_id, user_turn_number, requests, input_tokens, output_tokens, total_tokens, "
        "input_tokens_details, output_tokens_details FROM turn_usage WHERE session_id = ? "
        "ORDER BY branch_id, user_turn_number",
        (sid,),
        source=source,
    ):
        entry: dict[str, Any] = {"branch": row[0], "turn": row[1], **dict(zip(_USAGE, row[2:6]))}
        for key, raw in (("input_tokens_details", row[6]), ("output_tokens_details", row[7])):
            if raw is not None:
                if not isinstance(raw, (str, bytes)):
                    raise MalformedInput(source, f"turn_usage of session {sid!r}", f"{key} is not JSON")
                entry[key] = load_json(raw, source, f"turn_usage of session {sid!r}", key)
        usage.append(entry)
    if usage:
        store.session_records.put(session.session_id, "openai_agents.turn_usage", list(enumerate(usage)))


def _check_tables(conn: sqlite3.Connection, source: str, messages_table: str) -> bool:
    names = table_names(conn, source)
    if messages_table not in names:
        raise MalformedInput(source, None, f"no table {messages_table!r}: not an OpenAI Agents SDK session database")
    missing = {"id", "session_id", "message_data", "created_at"} - columns(conn, messages_table, source)
    if missing:
        raise MalformedInput(source, None, f"table {messages_table!r} has no column {sorted(missing)[0]!r}")
    if "message_structure" not in names:
        return False
    return {"session_id", "message_id", "branch_id", "sequence_number"} <= columns(conn, "message_structure", source)


def import_openai_agents(
    store,
    path: Any,
    *,
    session_ids: list[str] | None = None,
    messages_table: str = "agent_messages",
    session_prefix: str = "",
    progress: Any = None,
) -> Sequence[Session]:
    """Import an OpenAI Agents SDK session database: one sessionkit session per agent session.

    ``path`` is the SQLite file of a ``SQLiteSession`` or ``AdvancedSQLiteSession``
    (``messages_table`` as given to the session). ``session_ids`` limits the import to those
    sessions; ``session_prefix`` is put before each session id (to keep sessions of several sources apart in one
    store). Returns the sessions, oldest first. Idempotent: ids are the source's row ids, so importing again
    adds only new items. ``progress`` as in :class:`sessionkit.io.Progress` (items read). Malformed data raises
    :class:`MalformedInput` naming the file and the row.
    """
    check_progress(progress)
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    path = as_path(path)
    source = str(path)
    if session_ids is not None and (isinstance(session_ids, str) or not all(isinstance(s, str) for s in session_ids)):
        raise TypeError("session_ids must be a list of session id strings")
    conn = open_sqlite(path, "an OpenAI Agents SDK session database")
    try:
        structured = _check_tables(conn, source, messages_table)
        tables = table_names(conn, source)
        ids = [
            sid
            for (sid, _) in rows(
                conn,
                f'SELECT session_id, MIN(id) FROM "{messages_table}" GROUP BY session_id ORDER BY MIN(id)',
                source=source,
            )
        ]
        if session_ids is not None:
            wanted = set(session_ids)
            ids = [sid for sid in ids if sid in wanted]
        total = None
        if progress is not False and session_ids is None:  # rows read: one per branch a row is on
            if structured:
                total = scalar(
                    conn,
                    f'SELECT (SELECT COUNT(*) FROM message_structure) + (SELECT COUNT(*) FROM "{messages_table}" '
                    "WHERE session_id NOT IN (SELECT session_id FROM message_structure))",
                    source=source,
                )
            else:
                total = scalar(conn, f'SELECT COUNT(*) FROM "{messages_table}"', source=source)
        sessions = []
        with (
            watching_roots(store, source) as watch,
            Progress(progress, total=total, desc=f"importing {path.name}", unit="items") as bar,
        ):
            for sid in ids:
                if not isinstance(sid, str) or not sid:
                    raise MalformedInput(
                        source, f"{messages_table} session {sid!r}", "session_id must be a non-empty string"
                    )
                session = store.session(session_prefix + sid)
                writer = SessionWriter(store, session, source, bar, watch=watch)
                placed: dict = {}
                names: dict = {}
                branches: list = []
                if structured:
                    branches = [
                        b
                        for (b, _) in rows(
                            conn,
                            "SELECT branch_id, MAX(sequence_number) FROM message_structure WHERE session_id = ? "
                            "GROUP BY branch_id ORDER BY MAX(sequence_number)",
                            (sid,),
                            source=source,
                        )
                    ]
                try:
                    if branches:
                        for branch in branches:
                            walk = _Branch(writer, placed, names, source, branch)
                            for rowid, data, created, turn, bturn in rows(
                                conn,
                                f"SELECT m.id, m.message_data, m.created_at, s.user_turn_number, "
                                f's.branch_turn_number FROM message_structure s JOIN "{messages_table}" m '
                                "ON m.id = s.message_id WHERE s.session_id = ? AND s.branch_id = ? "
                                "ORDER BY s.sequence_number",
                                (sid, branch),
                                source=source,
                            ):
                                walk.row(rowid, data, created, messages_table, turn, bturn)
                            walk.finish()
                    else:
                        walk = _Branch(writer, placed, names, source, None)
                        for rowid, data, created in rows(
                            conn,
                            f'SELECT id, message_data, created_at FROM "{messages_table}" '
                            "WHERE session_id = ? ORDER BY id",
                            (sid,),
                            source=source,
                        ):
                            walk.row(rowid, data, created, messages_table)
                        walk.finish()
                except MalformedInput:
                    # keep the messages before the bad row (those whose calls still wait for an
                    # output stay out: importing the corrected file stores them whole)
                    writer.flush()
                    raise
                if structured and "turn_usage" in tables:
                    _turn_usage(store, conn, session, sid, source)
                sessions.append(session)
        return sessions
    finally:
        conn.close()
