"""Copy everything of one store into another, between any two engines.

:func:`copy_store` reads the source a session at a time through the store's public reads
(``scan``, ``labels``, ``runs``) and writes through its imports (``import_many``,
``import_compaction``, ``import_labels``, ``import_runs``, ``import_events``,
``import_embeddings``), so it works from and to SQLite, DuckDB and PostgreSQL alike,
and memory stays bounded by a batch of messages, events or vectors, never by the store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import StoreCorrupt, UsageError
from ..store import Store, open_store
from ._progress import Progress, check_progress

__all__ = ["copy_store"]

#: Messages (and events, vectors) read and written per batch.
_BATCH = 256


def _opened(store: Any, role: str, *, must_exist: bool) -> tuple[Store, bool]:
    """``(store, whether this call opened it)`` for a Store or a path or URL."""
    if isinstance(store, Store):
        if store.closed:
            raise UsageError(f"the {role} store is closed")
        return store, False
    if not isinstance(store, (str, os.PathLike)):
        raise TypeError(f"the {role} is a sessionkit Store, a path or a PostgreSQL URL, got {type(store).__name__}")
    return open_store(os.fspath(store), create=not must_exist), True


def _same(src: Store, dst: Store) -> bool:
    if src is dst:
        return True
    if src.path is None or dst.path is None or src.settings.engine != dst.settings.engine:
        return False
    if src.settings.engine == "postgresql":
        return src.path == dst.path
    try:
        return Path(src.path).resolve() == Path(dst.path).resolve()
    except OSError:
        return False


def _holds_anything(store: Store) -> bool:
    stats = store.stats()
    return bool(stats["sessions"] or stats["runs"] or stats["events"])


def copy_store(src: Any, dst: Any, *, merge: bool = False, progress: Any = None) -> dict:
    """Copy every session of ``src`` into ``dst``: messages (trees, write order within each
    session, creation times, payloads), compactions, labels, runs, run events and vectors,
    and the datasets (every version, as frozen) and annotation queues (with their submissions).

    ``src`` and ``dst`` are :class:`~sessionkit.Store` objects or what
    :func:`sessionkit.open_store` opens (a path, ``:memory:``, a PostgreSQL URL; such a
    store is closed again when the copy ends; the source must exist, see ``create=False``
    there). The engines
    may differ. Sessions are copied one after another, oldest activity first (so
    ``list_sessions`` lists them in the same order), each in batches of 256 messages,
    events or vectors, so memory stays bounded whatever the store's size.

    A ``dst`` that already holds sessions (or runs, or events) is refused with
    :class:`~sessionkit.UsageError` unless ``merge=True``: then what ``dst`` holds is
    kept and what it lacks is added (messages by session and id, compactions, labels and
    runs by id, events by seq, vectors by message and model, dataset versions by name and
    version, queues by name), so an interrupted copy
    completes when run again with ``merge=True``. Copying a store into itself is a
    ``UsageError``. ``progress`` as for the importers (messages copied). A source whose
    file is damaged raises :class:`~sessionkit.StoreCorrupt` at the first session it cannot
    read, naming it; the sessions copied before it stay in ``dst``.

    Returns the counts added: ``{"sessions", "messages", "compactions", "labels", "runs",
    "events", "embeddings", "datasets", "queues"}`` (datasets: versions).
    """
    if not isinstance(merge, bool):
        raise TypeError(f"merge must be a bool, got {type(merge).__name__}")
    check_progress(progress)
    source, close_src = _opened(src, "source", must_exist=True)
    try:
        target, close_dst = _opened(dst, "destination", must_exist=False)
        try:
            return _copy(source, target, merge=merge, progress=progress)
        finally:
            if close_dst:
                target.close()
    finally:
        if close_src:
            source.close()


def _copy(src: Store, dst: Store, *, merge: bool, progress: Any) -> dict:
    if _same(src, dst):
        raise UsageError("the source and the destination are the same store")
    if not merge and _holds_anything(dst):
        where = dst.path or ":memory:"
        raise UsageError(
            f"the destination {where} already holds sessions: copy into an empty store, "
            "or merge into this one (merge=True, sessionkit copy --merge)"
        )
    infos = list(reversed(src.list_sessions()))  # oldest activity first
    counts = dict.fromkeys(
        ("sessions", "messages", "compactions", "labels", "runs", "events", "embeddings", "datasets", "queues"), 0
    )
    copied: set[str] = set()
    with Progress(
        progress, total=sum(i.message_count for i in infos), desc="copying", unit="messages", auto_min=1000
    ) as bar:
        for info in infos:
            _copy_damaged_named(src, dst, info.id, counts, bar, len(copied))
            copied.add(info.id)
        # sessions holding only runs or events (no message): found by reading those once more
        for kind in ("runs", "events"):
            rest: list[str] = []
            for batch in src.scan(kind, batch_size=_BATCH):
                for sid, _ in batch:
                    if sid not in copied and (not rest or rest[-1] != sid):
                        rest.append(sid)
            for sid in rest:
                if sid not in copied:
                    _copy_damaged_named(src, dst, sid, counts, bar, len(copied))
                    copied.add(sid)
        # labels last, in the order they were added across sessions (their messages are all copied)
        labels = src.labels()
        for start in range(0, len(labels), _BATCH):
            counts["labels"] += dst.import_labels(labels[start : start + _BATCH])
        for dataset in src.datasets():  # a version at a time (its items are frozen together)
            items = src.dataset_items(dataset.name, dataset.version)
            counts["datasets"] += dst.import_datasets([(dataset, items)])
        for queue in src.queues():  # with its submissions (their labels are copied above)
            counts["queues"] += dst.import_queues([src.export_queue(queue.name)])
    return counts


def _copy_damaged_named(src: Store, dst: Store, sid: str, counts: dict, bar: Progress, before: int) -> None:
    """:func:`_copy_session`; a damaged source names the session it could not read, and how far the copy got."""
    try:
        _copy_session(src, dst, sid, counts, bar)
    except StoreCorrupt as exc:
        raise StoreCorrupt(
            f"{exc} (while copying session {sid!r}: the {before} sessions before it are copied, "
            "and what of it could be read)"
        ) from exc


def _copy_session(src: Store, dst: Store, sid: str, counts: dict, bar: Progress) -> None:
    target = dst.session(sid)
    added = False
    for batch in src.scan("messages", session_ids=[sid], batch_size=_BATCH):
        results = target.import_many([(message, node.parent_id, node.created_at) for _, node, message in batch])
        n = sum(1 for r in results if r.inserted)
        counts["messages"] += n
        added = added or n > 0
        bar.update(len(batch))
    for batch in src.scan("compactions", session_ids=[sid], batch_size=_BATCH):
        counts["compactions"] += sum(target.import_compaction(comp) for _, comp in batch)
    runs = src.runs(sid)
    if runs:
        n = dst.import_runs(runs)
        counts["runs"] += n
        added = added or n > 0
    for batch in src.scan("events", session_ids=[sid], batch_size=_BATCH):
        n = dst.import_events([ev for _, ev in batch])
        counts["events"] += n
        added = added or n > 0
    for batch in src.scan("embeddings", session_ids=[sid], batch_size=_BATCH):
        counts["embeddings"] += dst.import_embeddings([dict(row, session_id=s) for s, row in batch])
    if added:
        counts["sessions"] += 1
