"""sessionkit's own JSON-lines format: whole trees, compactions, metadata and write order.

One JSON object per line (a ``.gz`` path is written and read as gzip)::

    {"format": "sessionkit", "version": 1, "exported_at": "2025-01-01T00:00:00.000Z"}
    {"type": "message", "session_id": "s", "parent_id": null, "created_at": "...", "message": {...}}
    ...
    {"type": "compaction", "session_id": "s", "compaction": {"id", "from_id", "to_id", "summary",
     "created_at", "tokens_before", "tokens_after"}}

Messages come in the store's write order (across sessions), each after its
parent; compactions follow, oldest first. Importing the file into a store
recreates the same trees in the same order (so the latest leaf of each session
is the same), with the same creation times and the same compactions (ids,
times and token counts kept). Importing it again adds nothing. Runs and run
events are not part of the format.
"""

from __future__ import annotations

from typing import Any, cast

from .. import messages as _msg
from ..errors import MessageNotFound, MessageTooLarge
from ..store import Compaction, Session, Store
from ._common import MalformedInput, Progress, WriteGroups, as_path, count_lines, iter_jsonl, open_write

__all__ = ["export_jsonl", "import_jsonl", "FORMAT_VERSION"]

FORMAT_VERSION = 1
_BATCH = 1000


def _scope(store_or_session, session_ids) -> tuple[Any, list[str] | None]:
    if isinstance(store_or_session, Session):
        if session_ids is not None:
            raise TypeError("session_ids applies to a store export, not to a session")
        return store_or_session.store, [store_or_session.session_id]
    if isinstance(store_or_session, Store):
        if isinstance(session_ids, str):
            session_ids = [session_ids]
        return store_or_session, None if session_ids is None else list(session_ids)
    raise TypeError(f"expected a sessionkit Store or Session, got {type(store_or_session).__name__}")


def export_jsonl(store_or_session, path: Any, *, session_ids=None, progress: Any = None) -> dict:
    """Write a store (every session, or those in ``session_ids``) or one session to
    ``path`` in sessionkit JSONL.

    Returns ``{"sessions", "messages", "compactions"}`` counts. ``progress`` as for
    the importers (messages written).
    """
    from ..analysis._tables import StoreData

    store, sids = _scope(store_or_session, session_ids)
    path = as_path(path)
    data = StoreData(store, sids)
    total = sum(len(data.nodes(sid)) for sid in data.session_ids)
    n_messages = n_comps = 0
    sessions = set()
    with open_write(path) as out, Progress(progress, total=total, desc=f"exporting {path.name}",
                                           unit="messages") as bar:
        out.write(_msg.dumps({"format": "sessionkit", "version": FORMAT_VERSION, "exported_at": _msg.now_iso()}))
        out.write("\n")
        for node, sid, message in data.iter_messages():
            line = {"type": "message", "session_id": sid, "parent_id": node.parent_id,
                    "created_at": node.created_at, "message": message}
            out.write(_msg.dumps(line))
            out.write("\n")
            sessions.add(sid)
            n_messages += 1
            if n_messages % 1000 == 0:
                bar.update(1000)
        bar.update(n_messages % 1000)
        for sid in data.session_ids:
            for comp in data.compaction_list(sid):
                line = {"type": "compaction", "session_id": sid, "compaction": {
                    "id": comp.id, "from_id": comp.from_id, "to_id": comp.to_id, "summary": comp.summary,
                    "created_at": comp.created_at, "tokens_before": comp.tokens_before,
                    "tokens_after": comp.tokens_after}}
                out.write(_msg.dumps(line))
                out.write("\n")
                n_comps += 1
    return {"sessions": len(sessions), "messages": n_messages, "compactions": n_comps}


def _check_message_line(obj: dict, source: str, where: str) -> tuple[str, dict, Any, Any]:
    sid = obj.get("session_id")
    if not isinstance(sid, str):
        raise MalformedInput(source, where, "message line has no 'session_id' string")
    message = obj.get("message")
    try:
        _msg.validate(message)
    except (TypeError, ValueError) as exc:
        raise MalformedInput(source, where, f"invalid message: {exc}") from None
    parent = obj.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        raise MalformedInput(source, where, "'parent_id' must be a string or null")
    created = obj.get("created_at")
    if created is not None:
        try:
            created = _msg.to_iso(created)
        except (TypeError, ValueError) as exc:
            raise MalformedInput(source, where, f"bad 'created_at': {exc}") from None
    return sid, cast(dict, message), parent, created  # validate() raised unless it is a dict


def _check_compaction_line(obj: dict, source: str, where: str) -> tuple[str, Compaction]:
    sid = obj.get("session_id")
    c = obj.get("compaction")
    if not isinstance(sid, str) or not isinstance(c, dict):
        raise MalformedInput(source, where, "compaction line needs 'session_id' and a 'compaction' object")
    try:
        comp = Compaction(
            id=_need(c, "id", str), from_id=_need(c, "from_id", str), to_id=_need(c, "to_id", str),
            summary=_need(c, "summary", str), created_at=_msg.to_iso(_need(c, "created_at", str)),
            tokens_before=_need(c, "tokens_before", int), tokens_after=_need(c, "tokens_after", int),
        )
    except (TypeError, ValueError) as exc:
        raise MalformedInput(source, where, f"invalid compaction: {exc}") from None
    return sid, comp


def _need(obj: dict, key: str, kind: type):
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {key!r} must be a {kind.__name__}")
    return value


def import_jsonl(store, path: Any, *, progress: Any = None) -> list:
    """Import a sessionkit JSONL file into ``store``; returns the sessions it holds, in file order.

    Idempotent: messages already stored (same session and id) and compactions
    already present (same id) are skipped. Consecutive messages of one session
    are written in batches of up to 1,000 (about 20 batches per transaction), in
    file order, so write order survives; an error keeps the transactions before it.
    Malformed lines raise :class:`MalformedInput` naming the line.
    """
    if not isinstance(store, Store):
        raise TypeError(f"expected a sessionkit Store, got {type(store).__name__}")
    path = as_path(path)
    source = str(path)
    sessions: dict[str, Session] = {}
    seen: dict[str, set[str]] = {}  # ids met so far in the file, per session
    batch: list[tuple[dict, Any, Any]] = []
    batch_lines: list[str] = []
    batch_sid: str | None = None
    total = count_lines(path)

    def flush() -> None:
        nonlocal batch, batch_lines
        if not batch or batch_sid is None:  # batch_sid is set before the first message is batched
            return
        session = sessions[batch_sid]
        groups.begin()
        try:
            session.import_many(batch)
        except MessageTooLarge:
            raise
        except (ValueError, TypeError, LookupError) as exc:
            span = batch_lines[0] if len(batch_lines) == 1 else f"{batch_lines[0]} to {batch_lines[-1]}"
            raise MalformedInput(source, span, f"cannot import into session {batch_sid!r}: {exc}") from exc
        groups.done()
        batch, batch_lines = [], []

    with Progress(progress, total=total, desc=f"importing {path.name}", unit="lines") as bar, \
            WriteGroups(store, size=20) as groups:
        for lineno, obj in iter_jsonl(path):
            where = f"line {lineno}"
            if not isinstance(obj, dict):
                raise MalformedInput(source, where, "expected a JSON object")
            kind = obj.get("type")
            if kind is None and obj.get("format") == "sessionkit":
                version = obj.get("version")
                if not isinstance(version, int) or version > FORMAT_VERSION:
                    raise MalformedInput(
                        source, where, f"format version {version!r} is newer than this sessionkit reads "
                        f"({FORMAT_VERSION}): upgrade sessionkit")
            elif kind == "message":
                sid, message, parent, created = _check_message_line(obj, source, where)
                ids = seen.setdefault(sid, set())
                if parent is not None and parent not in ids and store.session(sid).get(parent) is None:
                    raise MalformedInput(source, where, f"message {message['id']!r}: parent {parent!r} is "
                                         f"neither earlier in the file nor in session {sid!r}")
                if sid != batch_sid or len(batch) >= _BATCH:
                    flush()
                    batch_sid = sid
                sessions.setdefault(sid, store.session(sid))
                batch.append((message, parent, created))
                batch_lines.append(where)
                ids.add(message["id"])
            elif kind == "compaction":
                flush()
                sid, comp = _check_compaction_line(obj, source, where)
                session = sessions.setdefault(sid, store.session(sid))
                try:
                    session.import_compaction(comp)
                except MessageNotFound as exc:
                    raise MalformedInput(source, where, str(exc)) from None
            else:
                raise MalformedInput(source, where, f"unknown line type {kind!r} (expected 'message' or 'compaction')")
            bar.update()
        flush()
    return list(sessions.values())
