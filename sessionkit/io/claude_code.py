"""Coding-agent session logs (Claude Code's ``~/.claude/projects/<project>/<session>.jsonl``)
-> one session per ``sessionId``, as the tree the log records.

Each line is one JSON record. Records with a ``uuid`` name their parent in
``parentUuid``: that link is kept, so a rewind or an edited prompt (two records under
one parent) becomes a branch, and sub-agent records (``isSidechain: true``, in the same
file or in ``<session>/subagents/agent-*.jsonl``) become their own roots in the session.

* ``user`` / ``assistant`` records keep their role; ``text`` blocks become ``text``
  parts, ``thinking`` ``reasoning`` parts, ``image`` blocks ``file`` parts.
* A ``tool_use`` block becomes a ``tool-<name>`` part (``toolCallId``, ``input``); the
  ``tool_result`` block answering it gives that part its ``output`` (``state:
  "output-error"`` with ``errorText`` when ``is_error``). A record holding only tool
  results is not kept as a message of its own: the records under it hang under its
  parent. A result whose call is not in the log stays a ``tool`` message.
* ``system`` records (hook output, errors, compaction boundaries) become ``system``
  messages; other records with a ``uuid`` become ``system`` messages holding a
  ``data-claude-code-<type>`` part.
* A ``compact_boundary`` record (whose ``logicalParentUuid`` links it to the
  conversation it compacts) becomes a sessionkit compaction from the root of that path to
  the summary record after the boundary (``isCompactSummary``), with ``preTokens`` as
  ``tokens_before``: reading the session shows the summary in place of what it replaced.
* ``summary`` records (titles of the conversation) become records of kind
  ``claude_code.summary`` of the session (``store.session_records.get(session_id, kind)``).
* ``metadata["claude_code"]`` keeps the record's other fields (``cwd``, ``gitBranch``,
  ``version``, ``requestId``, ``isSidechain`` when true, ``agentId``...) and the API
  message's ``model``, ``id``, ``stop_reason`` and ``usage``.

A record whose parent is not in the log is stored as a root (``metadata["claude_code"]
["missingParent"]`` names the parent). Records without ``uuid`` (file snapshots, queue
operations) are skipped. The file is read line by line; memory holds the ids seen and
the messages still waiting for a tool result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MalformedInput
from ..messages import estimate_tokens
from ..store import Compaction, Session
from ._common import RootWatch, watching_roots
from ._frameworks import HeldCalls, SessionWriter, iso_time, tool_output
from ._progress import Progress, check_progress, wants_total
from ._reading import as_path, check_file, check_folder, count_lines, iter_jsonl

__all__ = ["import_claude_code"]

#: Fields every record repeats, or that the message itself holds.
_STRUCTURAL = {
    "parentUuid",
    "uuid",
    "sessionId",
    "timestamp",
    "type",
    "message",
    "userType",
    "toolUseResult",
    "logicalParentUuid",
    "content",
}
_API_KEPT = ("model", "id", "stop_reason", "usage")


def _parts(content: Any, source: str, where: str) -> tuple[list[dict], list[dict]]:
    """``(parts, tool results)`` of a message's content."""
    if content is None:
        return [], []
    if isinstance(content, str):
        return [{"type": "text", "text": content}], []
    if not isinstance(content, list):
        raise MalformedInput(source, where, f"message content must be a string or a list, got {type(content).__name__}")
    parts: list[dict] = []
    results: list[dict] = []
    for i, block in enumerate(content):
        if isinstance(block, str):
            parts.append({"type": "text", "text": block})
            continue
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MalformedInput(source, where, f"content[{i}] must be an object with a string 'type'")
        kind = block["type"]
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text") or ""})
        elif kind in ("thinking", "redacted_thinking"):
            part: dict[str, Any] = {"type": "reasoning", "text": block.get("thinking") or ""}
            extra = {k: v for k, v in block.items() if k not in ("type", "thinking") and v is not None}
            if kind == "redacted_thinking":
                extra["redacted"] = True
            if extra:
                part["providerMetadata"] = {"anthropic": extra}
            parts.append(part)
        elif kind in ("tool_use", "server_tool_use"):
            name, call_id = block.get("name"), block.get("id")
            if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
                raise MalformedInput(source, where, f"content[{i}]: tool_use needs a 'name' and an 'id'")
            parts.append(
                {
                    "type": f"tool-{name}",
                    "toolCallId": call_id,
                    "state": "input-available",
                    "input": block.get("input") if block.get("input") is not None else {},
                }
            )
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise MalformedInput(source, where, f"content[{i}]: tool_result has no 'tool_use_id'")
            output = tool_output(block.get("content"))
            if block.get("is_error"):
                text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
                results.append({"toolCallId": call_id, "state": "output-error", "errorText": text})
            else:
                results.append({"toolCallId": call_id, "state": "output-available", "output": output})
        elif kind == "image":
            src: dict = block["source"] if isinstance(block.get("source"), dict) else {}
            file: dict[str, Any] = {"type": "file", "mediaType": src.get("media_type") or "image/*"}
            if src.get("type") == "url" and isinstance(src.get("url"), str):
                file["url"] = src["url"]
            elif src.get("data") is not None:
                file["data"] = src["data"]
            parts.append(file)
        else:
            parts.append(dict(block))
    return parts, results


class _Log:
    """The records of one session, turned into messages as they come."""

    def __init__(self, store, session, source: str, watch: RootWatch):
        self.store = store
        self.session = session
        self.source = source
        self.writer = SessionWriter(store, session, source, watch=watch)
        self.held = HeldCalls(self.writer)
        self.node: dict[str, str | None] = {}  # record uuid -> the message it is (or hangs under)
        self.parent: dict[str, str | None] = {}  # message id -> parent message id
        self.boundaries: list[dict] = []  # compaction boundaries waiting for their summary
        self.compactions: list[Compaction] = []
        self.summaries: list[dict] = []

    def record(self, rec: dict, where: str) -> None:
        uuid = rec.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            raise MalformedInput(self.source, where, "record has no 'uuid'")
        if uuid in self.node:
            return  # a record written twice (resumed sessions repeat lines)
        kind = rec.get("type")
        link = rec.get("parentUuid")
        if link is None and rec.get("subtype") == "compact_boundary":
            link = rec.get("logicalParentUuid")
        meta: dict[str, Any] = {}
        parent: str | None = None
        if link is not None:
            if not isinstance(link, str):
                raise MalformedInput(self.source, where, "'parentUuid' must be a string or null")
            if link in self.node:
                parent = self.node[link]
            else:
                meta["missingParent"] = link
        created = iso_time(rec.get("timestamp"), self.source, where)
        for key, value in rec.items():
            if key not in _STRUCTURAL and value is not None and not (key == "isSidechain" and value is False):
                meta[key] = value
        results: list[dict] = []
        if kind in ("user", "assistant"):
            api = rec.get("message")
            if not isinstance(api, dict):
                raise MalformedInput(self.source, where, f"{kind} record has no 'message' object")
            role = api.get("role") or kind
            if not isinstance(role, str):
                raise MalformedInput(self.source, where, "message 'role' must be a string")
            parts, results = _parts(api.get("content"), self.source, where)
            for key in _API_KEPT:
                if api.get(key) is not None:
                    meta["messageId" if key == "id" else key] = api[key]
        elif kind == "system":
            content = rec.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else []
            role = "system"
        else:
            if not isinstance(kind, str) or not kind:
                raise MalformedInput(self.source, where, "record has no 'type'")
            role = "system"
            parts = [
                {"type": f"data-claude-code-{kind}", "data": {k: v for k, v in rec.items() if k in ("data", "content")}}
            ]
        left = []
        for result in results:
            call = self.held.waiting(result["toolCallId"])
            if call is None:
                name = self.held.names.get(result["toolCallId"], "unknown")
                left.append({"type": f"tool-{name}", **result})
            else:
                self.held.answer(result["toolCallId"], result)
        if results and not left and not parts:
            self.node[uuid] = parent  # records under this one hang under its parent
            return
        parts += left
        message: dict[str, Any] = {
            "id": uuid,
            "role": "tool" if left and len(left) == len(parts) else role,
            "parts": parts,
        }
        if meta:
            message["metadata"] = {"claude_code": meta}
        self.node[uuid] = uuid
        self.parent[uuid] = parent
        self.held.add(message, parent, created, where)
        if rec.get("subtype") == "compact_boundary":
            self.boundaries.append(
                {
                    "uuid": uuid,
                    "created": created,
                    "content": rec.get("content"),
                    "pre": (rec.get("compactMetadata") or {}).get("preTokens"),
                }
            )
        elif rec.get("isCompactSummary") and self.boundaries and self.boundaries[-1]["uuid"] == parent:
            self._compaction(self.boundaries.pop(), uuid, message)

    def _compaction(self, boundary: dict, to_id: str, summary_message: dict | None) -> None:
        root = boundary["uuid"]
        while self.parent.get(root) is not None:
            root = self.parent[root]
        text = (
            "".join(p.get("text", "") for p in summary_message["parts"] if p.get("type") == "text")
            if summary_message is not None
            else (boundary["content"] or "")
        )
        pre = boundary["pre"]
        self.compactions.append(
            Compaction(
                id=f"claude-code-{boundary['uuid']}",
                from_id=root,
                to_id=to_id,
                summary=text,
                created_at=boundary["created"] or "1970-01-01T00:00:00+00:00",
                tokens_before=pre if isinstance(pre, int) and not isinstance(pre, bool) else 0,
                tokens_after=estimate_tokens(
                    {"id": "summary", "role": "user", "parts": [{"type": "text", "text": text}]}
                ),
            )
        )

    def finish(self) -> None:
        self.held.finish()
        for boundary in self.boundaries:  # a boundary with no summary after it: it is its own summary
            if boundary["content"]:
                self._compaction(boundary, boundary["uuid"], None)
        self.boundaries.clear()
        for compaction in self.compactions:
            self.session.import_compaction(compaction)
        if self.summaries:
            known = {
                json.dumps(v, sort_keys=True)
                for _, v in self.store.session_records.get(self.session.session_id, "claude_code.summary")
            }
            new = [s for s in self.summaries if json.dumps(s, sort_keys=True) not in known]
            start = len(known)
            self.store.session_records.put(
                self.session.session_id, "claude_code.summary", [(start + i, s) for i, s in enumerate(new)]
            )


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        check_folder(path, found, ".jsonl")
        # a session's file before its sub-agents' files
        return sorted(found, key=lambda p: ("subagents" in p.parts, str(p)))
    check_file(path)
    return [path]


def import_claude_code(store, path: Any, *, session_prefix: str = "", progress: Any = None) -> Sequence[Session]:
    """Import coding-agent session logs (Claude Code JSONL): one sessionkit session per ``sessionId``.

    ``path`` is a session's ``.jsonl`` file or a folder of them (a project folder of ``~/.claude/projects``;
    sub-agent logs under ``<session>/subagents/`` join their session); ``session_prefix`` is put before each
    session id (to keep sessions of several sources apart in one store). Returns the sessions in the order first
    met. Idempotent (message ids are the records' ``uuid``). ``progress`` as in :class:`sessionkit.io.Progress`
    (lines read). Malformed input raises :class:`MalformedInput` naming the file and the line.
    """
    check_progress(progress)
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    files = _files(as_path(path))
    total = sum(count_lines(f) for f in files) if wants_total(progress) else None
    logs: dict[str, _Log] = {}
    current: _Log | None = None  # the session of the last record read
    with (
        watching_roots(store, str(path)) as watch,
        Progress(progress, total=total, desc=f"importing {as_path(path).name}", unit="lines") as bar,
    ):
        for file in files:
            source = str(file)
            pending_summaries: list[dict] = []
            sessions_here: list[str] = []
            try:
                for lineno, rec, _ in iter_jsonl(file, empty_ok=file != as_path(path)):  # a folder's may be
                    where = f"line {lineno}"
                    if not isinstance(rec, dict):
                        raise MalformedInput(source, where, "expected a JSON object (a log record)")
                    if rec.get("type") == "summary":
                        if not isinstance(rec.get("summary"), str):
                            raise MalformedInput(source, where, "summary record has no 'summary' text")
                        pending_summaries.append({"summary": rec["summary"], "leafUuid": rec.get("leafUuid")})
                    elif "uuid" in rec:
                        sid = rec.get("sessionId") or file.stem
                        if not isinstance(sid, str):
                            raise MalformedInput(source, where, "'sessionId' must be a string")
                        log = logs.get(sid)
                        if log is None:
                            log = logs[sid] = _Log(store, store.session(session_prefix + sid), source, watch)
                        if current is not None and current is not log:
                            current.writer.flush()  # another session's records: write what this one has
                        current = log
                        if sid not in sessions_here:
                            sessions_here.append(sid)
                        log.source = source
                        log.writer.source = source
                        log.record(rec, where)
                    bar.update()
            except MalformedInput:
                for sid in sessions_here:
                    logs[sid].writer.flush()
                raise
            target = sessions_here[0] if sessions_here else file.stem
            if pending_summaries:
                if target not in logs:
                    logs[target] = _Log(store, store.session(session_prefix + target), source, watch)
                logs[target].summaries += pending_summaries
        for log in logs.values():
            log.finish()
    if not logs and as_path(path).is_dir():  # a folder of other JSON lines: no transcript at all
        names = ", ".join(str(f.relative_to(as_path(path))) for f in files[:5])
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        raise MalformedInput(
            str(path), None, f"a folder with no Claude Code session records in its .jsonl files ({names}{more})"
        )
    return [log.session for log in logs.values() if len(log.session)]
