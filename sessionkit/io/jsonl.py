"""sessionkit's own JSON-lines format: whole trees, compactions, labels, runs, run events
and vectors, with their metadata and write order.

One JSON object per line (a ``.gz`` path is written and read as gzip)::

    {"format": "sessionkit", "version": 5, "exported_at": "2025-01-01T00:00:00.000Z"}
    {"type": "message", "session_id": "s", "parent_id": null, "created_at": "...", "message": {...}}
    ...
    {"type": "compaction", "session_id": "s", "compaction": {"id", "from_id", "to_id", "summary",
     "created_at", "tokens_before", "tokens_after"}}
    {"type": "label", "session_id": "s", "label": {"id", "message_id", "tag", "target", "rating",
     "note", "author", "created_at", "source", "scorer", "rationale", "fingerprint"}}
    {"type": "run", "session_id": "s", "run": {"run_id", "status", "input", "error", "started_at",
     "ended_at", "usage", "meta"}}
    {"type": "event", "session_id": "s", "event": {"seq", "kind", "run_id", "ts", ...}}
    {"type": "embedding", "session_id": "s", "embedding": {"message_id", "model", "vector"}}
    {"type": "dataset", "dataset": {"name", "version", "level", "created_at", "query",
     "items": [{"session_id", "message_id", "history", "reference", "tags"}, ...]}}

Messages come in the store's write order (across sessions), each after its
parent; compactions follow, oldest first, then labels in the order they were
added, then each session's runs (as they began), its run events (by ``seq``) and
its message vectors, then (in an export of the whole store) one line per version of
each dataset, by name and version. Importing the file into a store recreates the same trees in
the same order (so the latest leaf of each session is the same), with the same
creation times, the same compactions (ids, times and token counts kept), the same
labels (ids, times and provenance kept), the same runs (ids, status, times, input, error,
usage and meta: costs, variants, replays), the same events (their seqs and
payloads) and the same vectors (model names kept, so ``store.similar`` answers as
before), and the same datasets (versions, times and items kept). Importing it again
adds nothing. Version 2 of the format added label
lines, version 3 run, event and embedding lines, version 4 the labels' provenance
(``source``, ``scorer``, ``rationale``, ``fingerprint``: docs/judging.md); files of
older versions import as before, their labels a person's (``source`` ``"human"``).
Version 5 added dataset lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, cast

from .. import messages as _msg
from ..errors import InvalidDataset, InvalidLabel, MalformedInput, MessageNotFound, MessageTooLarge
from ..store import Compaction, Session, Store
from ._common import Batches, RootWatch, SessionList, located, sessions_result, watching_roots, write_items
from ._progress import Progress, check_progress, wants_total
from ._reading import as_path, count_lines, iter_jsonl, open_write

__all__ = ["export_jsonl", "import_jsonl", "FORMAT_VERSION"]

FORMAT_VERSION = 5
_BATCH = 1000  # message lines per import_many call

#: What a merge warning of this importer suggests (a sessionkit export keeps its session ids).
_HINT = (
    "A sessionkit export keeps the session ids it was written with: import it into a store of its own "
    "to keep these conversations apart."
)

_BATCH_BYTES = 1 << 20  # ... or this much of the file


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

    Returns ``{"sessions", "messages", "compactions", "labels", "runs", "events",
    "embeddings", "datasets"}`` counts (the datasets, which belong to no session, are
    written by an export of the whole store only). ``progress`` as for the importers (messages written).
    """
    from ..analysis import StoreData

    store, sids = _scope(store_or_session, session_ids)
    path = as_path(path)
    data = StoreData(store, sids)
    total = sum(len(data.nodes(sid)) for sid in data.session_ids)
    n_messages = n_comps = n_labels = 0
    sessions = set()
    with (
        open_write(path) as out,
        Progress(progress, total=total, desc=f"exporting {path.name}", unit="messages") as bar,
    ):
        out.write(_msg.dumps({"format": "sessionkit", "version": FORMAT_VERSION, "exported_at": _msg.now_iso()}))
        out.write("\n")
        for node, sid, message in data.iter_messages():
            line = {
                "type": "message",
                "session_id": sid,
                "parent_id": node.parent_id,
                "created_at": node.created_at,
                "message": message,
            }
            out.write(_msg.dumps(line))
            out.write("\n")
            sessions.add(sid)
            n_messages += 1
            if n_messages % 1000 == 0:
                bar.update(1000)
        bar.update(n_messages % 1000)
        for sid in data.session_ids:
            for comp in data.compaction_list(sid):
                line = {
                    "type": "compaction",
                    "session_id": sid,
                    "compaction": {
                        "id": comp.id,
                        "from_id": comp.from_id,
                        "to_id": comp.to_id,
                        "summary": comp.summary,
                        "created_at": comp.created_at,
                        "tokens_before": comp.tokens_before,
                        "tokens_after": comp.tokens_after,
                    },
                }
                out.write(_msg.dumps(line))
                out.write("\n")
                n_comps += 1
        scope = None if sids is None else set(sids)
        for label in store.labels():  # in the order they were added, across sessions
            sid = label.session_id
            if scope is not None and sid not in scope:
                continue
            fields = {k: v for k, v in label.to_dict().items() if k != "session_id"}
            out.write(_msg.dumps({"type": "label", "session_id": sid, "label": fields}))
            out.write("\n")
            n_labels += 1
        side = {"runs": 0, "events": 0, "embeddings": 0}
        for kind in side:
            for batch in store.scan(kind, session_ids=sids, batch_size=1000):
                for sid, row in batch:
                    out.write(_msg.dumps(_side_line(kind, sid, row)))
                    out.write("\n")
                    sessions.add(sid)
                    side[kind] += 1
        n_datasets = 0
        if sids is None:
            for info in store.datasets():
                items = store.dataset_items(info.name, info.version)
                dataset = {k: v for k, v in info.to_dict().items() if k != "item_count"}
                dataset["items"] = [
                    {k: v for k, v in item.to_dict().items() if k not in ("name", "version", "n")} for item in items
                ]
                out.write(_msg.dumps({"type": "dataset", "dataset": dataset}))
                out.write("\n")
                n_datasets += 1
    side["datasets"] = n_datasets
    counts = {"sessions": len(sessions), "messages": n_messages, "compactions": n_comps, "labels": n_labels}
    return {**counts, **side}


def _side_line(kind: str, sid: str, row: Any) -> dict:
    """The line of a run (a RunRecord), an event or a vector of session ``sid``."""
    if kind == "runs":
        run = {f: getattr(row, f) for f in ("run_id", "status", "input", "error", "started_at", "ended_at")}
        run.update(usage=row.usage, meta=row.meta)
        return {"type": "run", "session_id": sid, "run": run}
    if kind == "events":
        return {"type": "event", "session_id": sid, "event": row}
    return {"type": "embedding", "session_id": sid, "embedding": row}


def _check_message_line(obj: dict, source: str, where: str) -> tuple[str, dict, Any, Any]:
    sid = obj.get("session_id")
    if not isinstance(sid, str):
        raise MalformedInput(source, where, "message line has no 'session_id' string")
    message = obj.get("message")
    try:
        _msg.validate(message)
    except (TypeError, ValueError) as exc:
        raise MalformedInput(source, where, f"invalid message: {exc}") from None
    message = cast(dict, message)  # validate() raised unless it is a dict
    stamp = message.get("createdAt")
    if stamp is not None:
        try:
            _msg.to_iso(stamp)
        except ValueError:
            raise MalformedInput(
                source, where, f"message {message['id']!r}: 'createdAt' is not an ISO 8601 time: {stamp[:60]!r}"
            ) from None
    parent = obj.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        raise MalformedInput(source, where, "'parent_id' must be a string or null")
    created = obj.get("created_at")
    if created is not None:
        try:
            created = _msg.to_iso(created)
        except (TypeError, ValueError) as exc:
            raise MalformedInput(source, where, f"bad 'created_at': {exc}") from None
    return sid, message, parent, created


def _check_compaction_line(obj: dict, source: str, where: str) -> tuple[str, Compaction]:
    sid = obj.get("session_id")
    c = obj.get("compaction")
    if not isinstance(sid, str) or not isinstance(c, dict):
        raise MalformedInput(source, where, "compaction line needs 'session_id' and a 'compaction' object")
    try:
        comp = Compaction(
            id=_need(c, "id", str),
            from_id=_need(c, "from_id", str),
            to_id=_need(c, "to_id", str),
            summary=_need(c, "summary", str),
            created_at=_msg.to_iso(_need(c, "created_at", str)),
            tokens_before=_count(c, "tokens_before"),
            tokens_after=_count(c, "tokens_after"),
        )
    except (TypeError, ValueError) as exc:
        raise MalformedInput(source, where, f"invalid compaction: {exc}") from None
    return sid, comp


def _count(obj: dict, key: str) -> int:
    value = _need(obj, key, int)
    if not 0 <= value < 2**63:
        raise ValueError(f"field {key!r} must be a count from 0 to 2**63 - 1, got {value}")
    return value


def _need(obj: dict, key: str, kind: type):
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {key!r} must be a {kind.__name__}")
    return value


def _write_block(session, items: list, source: str, lines: list[str], watch: RootWatch) -> None:
    try:
        write_items(session, items, watch)
    except MessageTooLarge as exc:
        raise located(exc, source, lines[0] if len(lines) == 1 else f"{lines[0]} to {lines[-1]}") from None


def _salvage_block(
    batches: Batches, session, items: list, source: str, lines: list[str], watch: RootWatch, exc: BaseException
):
    """After a block of message lines failed: store the lines before the bad one, and name it."""
    max_bytes = session.store.max_message_bytes
    ids: set[str] = set()
    for j, (message, parent, _) in enumerate(items):
        try:
            _msg.prepare(message, max_bytes=max_bytes)
        except MessageTooLarge as bad:
            culprit: BaseException = located(bad, source, lines[j])
        except (ValueError, TypeError) as bad:
            culprit = MalformedInput(source, lines[j], f"invalid message: {bad}")
        else:
            if parent is None or parent in ids or session.get(parent) is not None:
                ids.add(message["id"])
                continue
            culprit = MalformedInput(
                source,
                lines[j],
                f"message {message['id']!r}: parent {parent!r} is neither "
                f"earlier in the file nor in session {session.session_id!r}",
            )
        if j:
            write_items(session, items[:j], watch)
            batches.add(j, lines[j - 1])
        return culprit
    return None


def _write_compaction(session, comp: Compaction, source: str, where: str) -> None:
    try:
        session.import_compaction(comp)
    except MessageNotFound as exc:
        raise MalformedInput(source, where, str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise MalformedInput(source, where, f"invalid compaction: {exc}") from None


def _check_label_line(obj: dict, source: str, where: str) -> tuple[str, dict]:
    sid, label = obj.get("session_id"), obj.get("label")
    if not isinstance(sid, str) or not isinstance(label, dict):
        raise MalformedInput(source, where, "label line needs 'session_id' and a 'label' object")
    return sid, dict(label, session_id=sid)


def _write_label(store, label: dict, source: str, where: str) -> None:
    try:
        store.import_labels([label])
    except MessageNotFound as exc:
        raise MalformedInput(source, where, str(exc)) from None
    except InvalidLabel as exc:
        raise MalformedInput(source, where, f"invalid label: {exc}") from None


#: A line type of version 3 -> (its object's key, the store's import method).
_SIDE = {
    "run": ("run", "import_runs"),
    "event": ("event", "import_events"),
    "embedding": ("embedding", "import_embeddings"),
}


def _check_side_line(kind: str, obj: dict, source: str, where: str) -> tuple[str, dict]:
    key = _SIDE[kind][0]
    sid, item = obj.get("session_id"), obj.get(key)
    if not isinstance(sid, str) or not isinstance(item, dict):
        raise MalformedInput(source, where, f"{kind} line needs 'session_id' and a {key!r} object")
    return sid, dict(item, session_id=sid)


def _write_side(store, kind: str, item: dict, source: str, where: str) -> None:
    try:
        getattr(store, _SIDE[kind][1])([item])
    except MessageNotFound as exc:
        raise MalformedInput(source, where, str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise MalformedInput(source, where, f"invalid {kind}: {exc}") from None


def _write_dataset(store, obj: dict, source: str, where: str) -> None:
    dataset = obj.get("dataset")
    if not isinstance(dataset, dict):
        raise MalformedInput(source, where, "dataset line needs a 'dataset' object")
    try:
        store.import_datasets([dataset])
    except (InvalidDataset, TypeError) as exc:
        raise MalformedInput(source, where, f"invalid dataset: {exc}") from None


def _nothing() -> None:
    pass


def import_jsonl(store, path: Any, *, progress: Any = None) -> Sequence[Session]:
    """Import a sessionkit JSONL file into ``store``; returns the sessions it holds, in file order.

    The sessions come as a ``list``; past 10,000 of them as a
    :class:`~sessionkit.io.SessionList` (read like a list, ids packed), so memory stays bounded.

    Idempotent: messages already stored (same session and id), compactions, labels
    and runs already present (same id), events already at their seq and vectors a
    message holds already (same model) are skipped. The file is read a line at a time;
    consecutive messages of one session are written in blocks of up to 1,000
    lines, about 20 blocks per transaction, in file order, so write order survives.
    Malformed lines raise :class:`MalformedInput` naming the line; every line before
    it is stored (the error says how many) and nothing after, so importing the
    corrected file again completes the import.
    """
    if not isinstance(store, Store):
        raise TypeError(f"expected a sessionkit Store, got {type(store).__name__}")
    check_progress(progress)
    path = as_path(path)
    source = str(path)
    batch: list[tuple[dict, Any, Any]] = []
    batch_lines: list[str] = []
    batch_sid: str | None = None
    batch_bytes = 0
    total = count_lines(path) if wants_total(progress) else None

    def flush() -> None:
        nonlocal batch, batch_lines, batch_bytes
        if not batch or batch_sid is None:  # batch_sid is set before the first message is batched
            return
        session, items, lines, nbytes = store.session(batch_sid), batch, batch_lines, batch_bytes
        batch, batch_lines, batch_bytes = [], [], 0
        batches.write_import(
            lines[-1],
            session,
            items,
            partial(_write_block, session, items, source, lines, watch),
            watch=watch,
            nbytes=nbytes,
            records=len(items),
            salvage=partial(_salvage_block, batches, session, items, source, lines, watch),
        )

    with (
        watching_roots(store, source, _HINT) as watch,
        SessionList(store) as sessions,
        Progress(progress, total=total, desc=f"importing {path.name}", unit="lines") as bar,
        Batches(store, source=source, unit="lines", group=20, max_bytes=8 << 20) as batches,
    ):
        try:
            for lineno, obj, nbytes in iter_jsonl(path):
                where = f"line {lineno}"
                if not isinstance(obj, dict):
                    raise MalformedInput(source, where, "expected a JSON object")
                kind = obj.get("type")
                if kind is not None and not isinstance(kind, str):
                    raise MalformedInput(source, where, f"the record's type is a {type(kind).__name__}, not a string")
                if kind is None and obj.get("format") == "sessionkit":
                    version = obj.get("version")
                    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
                        raise MalformedInput(
                            source,
                            where,
                            f"format version {version!r} is newer than this sessionkit reads "
                            f"({FORMAT_VERSION}): upgrade sessionkit",
                        )
                    flush()
                    batches.write(where, _nothing)  # nothing to store, but a line done
                elif kind == "message":
                    sid, message, parent, created = _check_message_line(obj, source, where)
                    if sid != batch_sid or len(batch) >= _BATCH or batch_bytes >= _BATCH_BYTES:
                        flush()
                        batch_sid = sid
                        sessions.append_new(sid)
                    batch.append((message, parent, created))
                    batch_lines.append(where)
                    batch_bytes += nbytes
                elif kind == "compaction":
                    flush()
                    sid, comp = _check_compaction_line(obj, source, where)
                    sessions.append_new(sid)
                    batches.write(
                        where, partial(_write_compaction, store.session(sid), comp, source, where), nbytes=nbytes
                    )
                elif kind == "label":
                    flush()
                    sid, label = _check_label_line(obj, source, where)
                    batches.write(where, partial(_write_label, store, label, source, where), nbytes=nbytes)
                elif kind == "dataset":
                    flush()
                    batches.write(where, partial(_write_dataset, store, obj, source, where), nbytes=nbytes)
                elif kind in _SIDE:
                    flush()
                    sid, item = _check_side_line(kind, obj, source, where)
                    sessions.append_new(sid)
                    batches.write(where, partial(_write_side, store, kind, item, source, where), nbytes=nbytes)
                else:
                    raise MalformedInput(
                        source,
                        where,
                        f"unknown line type {kind!r} (expected 'message', 'compaction', 'label', 'run', "
                        "'event', 'embedding' or 'dataset')",
                    )
                bar.update()
        except MalformedInput:
            flush()  # the lines before the problem are stored too
            raise
        flush()
    return sessions_result(sessions)
