"""The Store: sessions, transactions, change events, search, scans, runs and analysis, over an engine."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from .. import parts as _parts
from ..errors import (
    SessionNotFound,
    StoreClosed,
    StoreCorrupt,
)
from . import _conveniences, _datasets, _labels, _queues
from ._args import _BATCH, _INT64, _SCAN_READ, _count_arg, _require_str, _sql_params, _sql_text, _str_arg
from ._engine import Engine
from ._facets import Coordination, SessionRecords, StoreRunLog, StoreSettings
from ._overlay import _chunks, _tree_node
from ._session import Session, _import_rows
from ._values import SCAN_KINDS, AppendResult, Capabilities, ChangeEvent, RunRecord, SessionInfo
from .search import SearchHit, parse_query, snippet

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

log = logging.getLogger("sessionkit")


class Store:
    """A conversation store. Open one with :func:`sessionkit.open_store`.

    Thread-safe; a context manager; ``close()`` is idempotent.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        max_message_bytes: int | None = None,
        reserved_metadata_keys: Iterable[str] = (),
    ):
        self._engine = engine
        self._closed = False
        # Session handles: the same object for an id while anything holds it, and no more (a
        # store that saw a million sessions does not keep a million handles). A handle given a
        # compaction function or threshold is kept for the store's lifetime, so its settings
        # hold for every later store.session(id).
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._configured: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()
        self._subscribers: list[Callable[[ChangeEvent], Any]] = []
        # Per thread: the change events of the open store.transaction(), else None.
        self._tx_local = threading.local()
        self.max_message_bytes = max_message_bytes
        self.reserved_metadata_keys = tuple(reserved_metadata_keys)
        self._run_log = StoreRunLog(self)
        self._session_records = SessionRecords(self)
        self._coordination = Coordination(self) if engine.capabilities.coordination else None
        self._settings = StoreSettings(self)

    # -- lifecycle ------------------------------------------------------------
    @property
    def run_log(self) -> StoreRunLog:
        """Where this store records agent runs and their events (see :class:`StoreRunLog`)."""
        return self._run_log

    @property
    def session_records(self) -> SessionRecords:
        """The small JSON values components keep beside a session (see :class:`SessionRecords`)."""
        return self._session_records

    @property
    def coordination(self) -> Coordination | None:
        """Holds and signals between processes sharing this store (see :class:`Coordination`).

        ``None`` where the engine is served by one process (SQLite, DuckDB):
        ``store.capabilities.coordination`` is False there.
        """
        return self._coordination

    @property
    def settings(self) -> StoreSettings:
        """The engine's name and how a search ranks (``store.settings.engine``,
        ``store.settings.search_candidates``; see :class:`StoreSettings`)."""
        return self._settings

    @property
    def path(self) -> str | None:
        return self._engine.path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def capabilities(self) -> Capabilities:
        """What this store's engine can do beyond the common API (see :class:`Capabilities`).

        ``store.capabilities.coordination`` tells whether several server processes may
        share the store; ``shared_feed`` whether :meth:`subscribe` reports other
        processes' writes; ``bulk_insert`` whether imports insert in batches.
        """
        return self._engine.capabilities

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.close()

    def __enter__(self) -> Store:
        self._check()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<sessionkit.Store {self._engine.kind} {self.path or ':memory:'} ({state})>"

    def _repr_mimebundle_(
        self, include: object = None, exclude: object = None
    ) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """Notebook display: a session browser widget when ipywidgets is installed, else a table."""
        return _conveniences.store_bundle(self)

    def _ipython_display_(self) -> None:
        """IPython display: the sessions table, then the browser widget that replaces it where it renders."""
        _conveniences.display_store(self)

    def _repr_html_(self) -> str:
        """A script-free HTML table of the sessions (nbconvert, GitHub)."""
        return _conveniences.store_html(self)

    def _check(self) -> Engine:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self._engine

    # -- sessions -------------------------------------------------------------
    def session(self, session_id: str = "") -> Session:
        """The handle of a session (the same object for the same id).

        A handle is kept while it is in use or configured (``on_compaction``,
        ``compact_after``); the store holds no other handles, so asking for many
        sessions costs no memory once they are dropped.
        """
        self._check()
        session_id = _str_arg(session_id, "session_id")
        with self._sessions_lock:
            handle = self._sessions.get(session_id)
            if handle is None:
                handle = self._sessions[session_id] = Session(self, session_id)
            return handle

    def _keep_session(self, handle: Session) -> None:
        """Hold ``handle`` for the store's lifetime: it carries settings (its compaction)."""
        with self._sessions_lock:
            self._configured[handle.session_id] = handle

    def import_many(
        self, records: Iterable[tuple[str, Iterable[tuple[dict[str, Any], Any, Any]]]]
    ) -> list[list[AppendResult]]:
        """Import the messages of many sessions at once: each record is ``(session_id, items)``.

        The same as ``store.session(session_id).import_many(items)`` for each record in
        turn (a record may use parents written by an earlier one, of its session), all in
        one transaction: every message of every record is validated first, and any error
        (an invalid message, an unknown parent) stores nothing of the call. Engines that
        declare ``capabilities.bulk_insert`` write the whole call in a few statements,
        whatever the number of sessions. Returns each record's results, in order. The
        importers write their groups of records (pairs, trees) through it.
        """
        eng = self._check()
        prepared = []
        for record in records:
            try:
                session_id, items = record
            except (TypeError, ValueError):
                raise TypeError("store.import_many takes (session_id, items) records") from None
            prepared.append((_str_arg(session_id, "session_id"), _import_rows(self, items)))
        return self._import_records(eng, prepared)

    def _import_records(
        self, eng: Engine, records: list[tuple[str, list[tuple[_msg.Prepared, Any, str]]]]
    ) -> list[list[AppendResult]]:
        """Write prepared import records (see :meth:`import_many`); their results."""
        if not records:
            return []
        with eng.write():
            results = eng.w_import_records(records, eng.index.maintained())
            old = [seq for per in results for inserted, seq in per if not inserted]
            stored: dict[int, dict[str, Any]] = {}
            for chunk in _chunks(old, _BATCH):
                for seq, raw in zip(chunk, eng.contents(chunk)):
                    message = self._restore(seq, raw)
                    if message is not None:
                        stored[seq] = message
        return [
            [
                AppendResult._stored(prep) if inserted else AppendResult(False, stored[seq])
                for (prep, _, _), (inserted, seq) in zip(rows, per)
            ]
            for (_, rows), per in zip(records, results)
        ]

    def sessions_holding(self, session_ids: Iterable[str]) -> set[str]:
        """Which of ``session_ids`` hold at least one message (in a few statements for all)."""
        eng = self._check()
        ids = list(dict.fromkeys(_str_arg(sid, "session_id") for sid in session_ids))
        return eng.sessions_holding(ids) if ids else set()

    def list_sessions(self) -> list[SessionInfo]:
        """Every session holding at least one message, newest activity first."""
        return self._check().list_sessions()

    def delete_session(self, session_id: str) -> None:
        """Remove everything of a session: messages, compactions, index entries, runs, events, records."""
        eng = self._check()
        session_id = _str_arg(session_id, "session_id")
        if not eng.session_exists(session_id):
            raise SessionNotFound(f"no session {session_id!r} in this store")
        with eng.write():
            eng.w_delete_session(session_id)
        self._emit(ChangeEvent("clear", session_id, ()))

    def stats(self) -> dict[str, Any]:
        """Counts and sizes: ``sessions``, ``messages``, ``compactions``, ``blobs``, ``blob_bytes``,
        ``indexed_messages``, ``bytes``, ``runs``, ``events``, and ``schema_version`` (the
        version of the store's tables: opening a store upgrades older tables to it)."""
        return self._check().stats()

    # -- transactions ---------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Store]:
        """Group writes into one transaction: all of them are stored, or none.

        Every write of this thread inside the ``with`` block (appends, imports,
        updates, deletes, runs, events, records) joins it, and so does a nested
        ``store.transaction()``. Many small writes commit much faster this way.
        Change events of the writes are delivered once the transaction commits,
        and dropped if it rolls back (an exception leaves the block). Other
        threads' writes wait until it ends; keep it short.

        >>> with store.transaction():
        ...     for m in messages:
        ...         session.append(m)
        """
        eng = self._check()
        local = self._tx_local
        outer = getattr(local, "events", None) is None
        if outer:
            local.events = []
        try:
            with eng.write():
                yield self
        except BaseException:
            if outer:
                local.events = None
            raise
        if outer:
            events, local.events = local.events, None
            for event in events:
                self._emit(event)

    def _in_transaction(self) -> bool:
        return getattr(self._tx_local, "events", None) is not None

    # -- change feed ----------------------------------------------------------
    def subscribe(self, callback: Callable[[ChangeEvent], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` after every write in this process; returns ``unsubscribe``.

        On an engine shared by several processes (``capabilities.shared_feed``:
        PostgreSQL), the callback also receives the writes of other processes and
        machines, from a listener thread.
        """
        if not callable(callback):
            raise TypeError("callback must be callable")
        self._subscribers.append(callback)
        if self._engine.capabilities.shared_feed and not self._closed:
            self._engine.start_listener(self._deliver)  # idempotent: one listener per store

        def unsubscribe() -> None:
            try:
                self._subscribers.remove(callback)
            except ValueError:
                pass

        return unsubscribe

    def change_marker(self) -> str:
        """A short text that changes whenever something is written to the store: compare
        two markers to know whether anything changed between them (a poll, where
        :meth:`subscribe` cannot see other processes' writes).

        Any process's writes on SQLite and PostgreSQL (the newest message sequence and
        the newest entry of the store's change log: two primary-key lookups); on DuckDB,
        which no other process can write while this one holds the file, the newest
        message sequence and the commits of this process. Only equality means anything:
        the text has no order, and differs from one store (or engine) to another.
        """
        return self._check().change_marker()

    def _wants_events(self) -> bool:
        """Whether anyone receives change events (else a writer need not build them)."""
        return bool(self._subscribers) or self._engine.capabilities.shared_feed

    def _emit(self, event: ChangeEvent) -> None:
        queued = getattr(self._tx_local, "events", None)
        if queued is not None:  # inside store.transaction(): delivered after the commit
            queued.append(event)
            return
        if self._engine.capabilities.shared_feed:  # tell other processes (PostgreSQL LISTEN/NOTIFY)
            try:
                self._engine.publish(event)
            except Exception:
                log.exception("sessionkit: could not publish a change event")
        self._deliver(event)

    def _deliver(self, event: ChangeEvent) -> None:
        subscribers = list(self._subscribers)
        if subscribers and event.message is not None:
            # Subscribers get their own copy: the writer's caller holds the dict that
            # append() returned, and neither side may see the other's edits.
            event = dataclasses.replace(event, message=_msg.deep_copy(event.message))
        for cb in subscribers:
            try:
                cb(event)
            except Exception:  # a subscriber never breaks a write
                log.exception("sessionkit: change subscriber %r raised", cb)

    # -- search ---------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 10,
        labels: str | Iterable[str] | None = None,
    ) -> list[SearchHit]:
        """Full-text search over text parts (docs/search.md); any string is a valid query.

        Words match case-insensitively with English stemming; all words must occur;
        ``"double quotes"`` ask for a phrase. Hits come best first (BM25). The cost
        of ranking stays bounded however large the store grows: when a query
        matches more than ``store.settings.search_candidates`` messages (2,000 by default),
        the best hits are chosen among the newest that many matches. On SQLite,
        when those all lie among the newest ``search_window`` messages, BM25's word
        statistics come from those messages rather than the whole store.

        ``labels`` (a tag or several) keeps only hits in a message carrying a label of
        one of those tags, or on a branch labelled so (docs/labels.md); they are chosen
        among the same ranked matches.
        """
        eng = self._check()
        limit = _count_arg(limit, "limit")
        if session_id is not None:
            session_id = _str_arg(session_id, "session_id")
        allowed = None if labels is None else _labels.labelled_messages(self, labels, session_id)
        parsed = parse_query(query)
        if parsed.empty or limit == 0 or allowed == set():
            return []
        if not eng.index.built():
            with eng.write():
                eng.index.build()
        if allowed is None:
            found = eng.index.search_read(parsed.fts5(), parsed, session_id, limit)
        else:
            found = eng.index.search_read(parsed.fts5(), parsed, session_id, max(limit, eng.search_candidates))
            found = [(r, raw) for r, raw in found if (r[1], r[2]) in allowed][:limit]
        if not found:
            return []
        unread = [r[0] for r, raw in found if raw is None]  # (what the index did not read with the hit)
        read = dict(zip(unread, eng.contents(unread))) if unread else {}
        hits = []
        for (seq, sid, mid, role, score), raw in found:
            if raw is None:
                raw = read.get(seq)
            msg = self._restore(seq, raw)
            if msg is None:
                continue  # deleted since the index answered
            text = _parts.text_of(msg)
            hits.append(SearchHit(mid, sid, role, text, snippet(text, parsed), float(score)))
        return hits

    # -- embeddings (docs/analysis.md#find-similar) ---------------------------------
    def embed(
        self, embedder: Any, *, batch_size: int = 256, progress: Any = None, options: dict[str, Any] | None = None
    ) -> int:
        """Store one vector per message with text that has none of this model yet (so a
        second call embeds only the messages added since); returns how many it embedded.

        ``embedder`` is a callable ``list[str] -> list[list[float]]`` (its ``model``
        attribute, or else its name, names its vectors) or a litellm embedding model
        name (``options`` go to ``litellm.embedding``). Texts go to it ``batch_size`` at
        a time, each batch stored in one transaction. ``progress`` as for imports
        (``None``, ``True``, ``False`` or ``fn(done, total)``)."""
        from . import _embeddings

        batch_size = _count_arg(batch_size, "batch_size", 1)
        return _embeddings.embed(self._check(), embedder, batch_size=batch_size, progress=progress, options=options)

    def similar(
        self,
        query: Any,
        *,
        k: int = 10,
        session_ids: Iterable[str] | None = None,
        embedder: Any = None,
        model: str | None = None,
        level: str = "message",
    ) -> list[Any]:
        """The ``k`` messages most similar to ``query`` by cosine similarity of their vectors,
        best first, as :class:`SearchHit` (``score``: the similarity, at most 1).

        ``query`` is a text (embedded with ``embedder``, the one given to :meth:`embed`) or
        a stored message as ``(session_id, message_id)`` (its own vector; it is left out of
        the hits). ``model`` picks the vectors when the store holds several models'.
        ``session_ids`` limits the hits to those sessions.

        ``level="session"`` ranks sessions instead, as :class:`SimilarSession`: a session's
        vector is the normalized mean of its messages' unit vectors (docs/analysis.md), and
        ``query`` may also be a stored session (``store.session(id)``: its own vector; it
        is left out of the hits)."""
        from . import _embeddings

        self._check()
        k = _count_arg(k, "k")
        if k == 0:
            return []
        return _embeddings.similar(
            self, query, k=k, session_ids=session_ids, embedder=embedder, model=model, level=level
        )

    def _restore(self, seq: int, raw: str | None) -> dict[str, Any] | None:
        """A message from its stored JSON (payloads put back); None for a row deleted
        meanwhile, including one whose payload went with it before it was read."""
        if raw is None:
            return None
        eng = self._engine
        try:
            return _msg.restore(raw, eng.blob)
        except StoreCorrupt:
            if eng.contents([seq])[0] is None:
                return None
            raise

    # -- labels (docs/labels.md) ------------------------------------------------------
    def add_label(self, session_id: str, message_id: str, tag: str, **fields: Any) -> _labels.Label:
        """``store.session(session_id).add_label(message_id, tag, ...)`` (see :meth:`Session.add_label`)."""
        return self.session(session_id).add_label(message_id, tag, **fields)

    def remove_label(self, label_id: str) -> bool:
        """Remove a label by id, whatever its session; whether there was one."""
        return _labels.remove(self, label_id)

    def labels(
        self,
        *,
        session_id: str | None = None,
        message_id: str | Iterable[str] | None = None,
        tag: str | Iterable[str] | None = None,
        author: str | None = None,
        min_rating: float | None = None,
        max_rating: float | None = None,
        target: str | None = None,
        source: str | None = None,
        scorer: str | None = None,
    ) -> list[_labels.Label]:
        """The labels of the store matching every filter given, in the order they were added.

        ``tag``: one tag or several (any of them); ``min_rating`` / ``max_rating``: a
        rating in that range (labels without a rating are left out then); ``target``:
        ``"message"`` or ``"branch"``; ``source``: ``"human"``, ``"code"`` or ``"llm"``;
        ``scorer``: ``"name@version"`` (that version) or ``"name"`` (any version).
        ``message_id`` needs ``session_id`` to mean one message (ids are unique per session).
        """
        return _labels.listing(
            self,
            session_id=session_id,
            message_id=message_id,
            tag=tag,
            author=author,
            min_rating=min_rating,
            max_rating=max_rating,
            target=target,
            source=source,
            scorer=scorer,
        )

    def score(
        self,
        scorer: Any,
        *,
        sessions: str | Iterable[str] | None = None,
        where: str | None = None,
        level: str = "turn",
        concurrency: int = 4,
        progress: Any = True,
    ) -> dict[str, int]:
        """Run ``scorer`` over the messages, turns, paths or sessions of the store
        (``level``: ``"message"``, ``"turn"``, ``"path"``, ``"session"``) and keep each
        answer as a label with its provenance (docs/judging.md).

        ``scorer`` is a callable taking one unit (``sk.scorers.Unit``) and answering a
        tag, an ``sk.Score`` or None (no label); its ``name`` and ``version`` (the
        ``sk.scorers.scorer`` decorator) name its labels ``"name@version"``.
        ``sessions`` (an id or several) and ``where`` (a SQL condition over the
        level's view: ``messages``, ``turns``, ``paths``, ``sessions``) pick the units.
        A unit this scorer and version labelled already, unchanged since, is not asked
        again; a changed one is, and its old label of the scorer replaced. Up to
        ``concurrency`` units are asked at once (threads); the answers are stored as
        they arrive, in batches (a second apart at most). ``progress`` as for imports.
        Returns counts: ``units`` (picked), ``skipped`` (scored already), ``scored``
        (asked), ``labelled`` (labels made), ``replaced`` (old labels of changed units
        removed). An error of the scorer
        stops the run once the units being asked are done (their answers are kept) and
        is raised, with a note naming the unit.
        """
        from . import _scoring

        return _scoring.score(
            self, scorer, sessions=sessions, where=where, level=level, concurrency=concurrency, progress=progress
        )

    def import_labels(self, labels: Iterable[_labels.Label | dict[str, Any]]) -> int:
        """Store labels as they are (their ids and times kept), in one transaction: a label
        whose id is stored already is skipped, so importing twice adds nothing. Each
        label's message must be stored. Returns how many were added."""
        return _labels.import_labels(self, labels)

    # -- datasets (docs/judging.md) ---------------------------------------------------
    def dataset(
        self,
        name: str,
        *,
        query: str | None = None,
        units: Iterable[Any] | None = None,
        level: str = "turn",
        version: int | None = None,
    ) -> _datasets.DatasetInfo:
        """Freeze turns or paths of the store as a dataset named ``name`` (docs/judging.md).

        The items are chosen by ``query``, DuckDB SQL over the views of :meth:`sql` answering
        the columns ``session_id`` and ``message_id`` (``"SELECT session_id, reply_id AS
        message_id FROM turns WHERE ..."``), or by ``units``: ``(session_id, message_id)``
        pairs or ``sk.scorers.Unit`` objects. Each item keeps the history the model saw
        before the message (compactions applied), the message itself when it is a reply
        (the reference) and the tags of its labels, as they are now: later edits of the
        session leave the dataset as it is. ``level`` is ``"turn"`` or ``"path"``;
        ``version`` defaults to one more than the name's latest. Returns the new version's
        :class:`DatasetInfo`; refused input raises :class:`~sessionkit.errors.InvalidDataset`
        and stores nothing.
        """
        return _datasets.freeze(self, name, query=query, units=units, level=level, version=version)

    def datasets(self) -> list[_datasets.DatasetInfo]:
        """Every version of every dataset (name, version, level, created_at, query, item_count)."""
        return _datasets.listing(self)

    def dataset_items(self, name: str, version: int | None = None) -> list[_datasets.DatasetItem]:
        """The items of a dataset's version (the latest when None), in the order frozen;
        :class:`~sessionkit.errors.DatasetNotFound` for an unknown name or version."""
        return _datasets.items(self, name, version)

    def delete_dataset(self, name: str, version: int | None = None) -> int:
        """Delete one version of a dataset, or all of them when ``version`` is None; how many
        versions went (:class:`~sessionkit.errors.DatasetNotFound` when there is none)."""
        return _datasets.delete(self, name, version)

    def import_datasets(self, datasets: Iterable[Any]) -> int:
        """Store datasets as they are (versions, times and items kept), in one transaction:
        each a dict as the JSONL export writes it, or ``(DatasetInfo, [DatasetItem])``. A
        version stored already is skipped. Returns how many versions were added."""
        return _datasets.import_datasets(
            self, [_datasets.from_dict(d) if isinstance(d, dict) else tuple(d) for d in datasets]
        )

    # -- annotation queues (docs/annotation.md) ---------------------------------------------
    def queue(
        self,
        name: str,
        *,
        units: Iterable[Any] | None = None,
        query: str | None = None,
        dataset: str | tuple[str, int] | None = None,
        level: str = "turn",
        rubric: _queues.Rubric | dict[str, Any] | list[str] | None = None,
        annotators: Iterable[str] | None = None,
        per_unit: int = 1,
        lease_seconds: float = _queues.DEFAULT_LEASE,
    ) -> _queues.QueueInfo:
        """Define an annotation queue named ``name`` (docs/annotation.md).

        Its units are turns, paths or sessions (``level``), chosen by ``units``
        (``(session_id, message_id)`` pairs, ``sk.scorers.Unit`` objects, or session ids for
        ``level="session"``: their latest leaf), by ``query`` (DuckDB SQL over the views of
        :meth:`sql` answering ``session_id`` and ``message_id``) or by ``dataset`` (a name,
        or ``(name, version)``: its items and level). ``rubric`` says what an annotator
        answers: ``{"tags": [...], "rating": (low, high) or None, "instructions": "..."}``
        (or an ``sk.Rubric``, or a list of tags). ``annotators`` names who may label (None:
        anyone); each unit needs ``per_unit`` labels from different annotators; a claim holds
        its unit ``lease_seconds``. Refused input raises
        :class:`~sessionkit.errors.InvalidQueue` and stores nothing.
        """
        return _queues.create(
            self,
            name,
            units=units,
            query=query,
            dataset=dataset,
            level=level,
            rubric=rubric,
            annotators=annotators,
            per_unit=per_unit,
            lease_seconds=lease_seconds,
        )

    def queues(self) -> list[_queues.QueueInfo]:
        """Every annotation queue, by name."""
        return _queues.listing(self)

    def queue_info(self, name: str) -> _queues.QueueInfo:
        """One annotation queue (:class:`~sessionkit.errors.QueueNotFound` when there is none)."""
        return _queues.get(self, name)

    def queue_units(self, name: str) -> list[tuple[int, str, str]]:
        """``(n, session_id, message_id)`` of each unit of a queue, in order."""
        return _queues.units(self, name)

    def next_unit(self, name: str, annotator: str, *, lease_seconds: float | None = None) -> _queues.QueueUnit | None:
        """The unit ``annotator`` labels next in queue ``name``, claimed for the queue's lease
        (or ``lease_seconds``): the claim this annotator holds still, else the first unit
        that lacks labels, that this annotator has not labelled and that others do not hold
        as many times as it lacks labels. None when nothing is left for this annotator."""
        return _queues.next_unit(self, name, annotator, lease_seconds)

    def submit_label(
        self,
        name: str,
        annotator: str,
        n: int,
        tag: str,
        *,
        rating: float | None = None,
        note: str | None = None,
    ) -> _labels.Label:
        """Label unit ``n`` of queue ``name`` as ``annotator``: ``tag`` one of the rubric's,
        ``rating`` on its scale (required when it has one). The label (author
        ``annotator``, source ``"human"``) and the claim's end are stored in one
        transaction; returns the label. A unit gets one label per annotator and never more
        than the queue's ``per_unit``: :class:`~sessionkit.errors.InvalidQueue` otherwise."""
        return _queues.submit(self, name, annotator, n, tag, rating=rating, note=note)

    def release_unit(self, name: str, annotator: str, n: int) -> bool:
        """Give back ``annotator``'s claim on unit ``n`` without labelling it; whether there was one."""
        return _queues.release(self, name, annotator, n)

    def queue_progress(self, name: str) -> _queues.QueueProgress:
        """How far queue ``name`` is: units complete, submissions in all and by annotator, claims held."""
        return _queues.progress(self, name)

    def queue_labels(self, name: str) -> list[_labels.Label]:
        """The labels submitted through queue ``name`` (those still stored), in the order submitted."""
        return _queues.labels(self, name)

    def export_queue(self, name: str) -> dict[str, Any]:
        """A queue as one JSON object: its definition, its units (``[session_id, message_id]``)
        and its submissions (``n``, ``annotator``, ``label_id``, ``done_at``); claims still
        running are left out. :meth:`import_queues` stores it again."""
        return _queues.export(self, name)

    def import_queues(self, queues: Iterable[dict[str, Any]]) -> int:
        """Store queues as :meth:`export_queue` gives them (times and submissions kept), in one
        transaction; a queue whose name is stored already is skipped. Returns how many were added."""
        return _queues.import_queues(self, queues)

    def delete_queue(self, name: str) -> bool:
        """Delete a queue, its units and claims (the labels made through it stay); whether it was there."""
        return _queues.delete(self, name)

    # -- facts as they are: imports, exports and copies (docs/importing.md) -----------
    def import_runs(self, runs: Iterable[RunRecord | dict[str, Any]]) -> int:
        """Store run records as they are, in one transaction; returns how many were added.

        Each run is a :class:`RunRecord` (as :meth:`runs` gives them) or a dict of its
        fields (``run_id``, ``session_id``, ``status``, ``started_at``; ``ended_at``,
        ``error``, ``input``, ``usage``, ``meta`` optional): its id, status, times,
        input, error, usage and meta are kept, and it is numbered after the runs its
        session holds (so runs imported in order keep their order). A run whose id is
        stored already is skipped, so importing twice adds nothing; one stored under
        another session -> ``ValueError``. Every run is checked before anything is
        written: a field of the wrong type -> ``TypeError``, a time that is not ISO 8601,
        an unknown field -> ``ValueError``, each naming the run."""
        from . import _facts

        return _facts.import_runs(self, runs)

    def import_events(self, events: Iterable[dict[str, Any]]) -> int:
        """Store run events as they are, in one transaction; returns how many were added.

        Each event is a JSON object as :meth:`events` gives them: its ``session_id`` and
        ``seq`` (an int from 0) say where it goes, the rest (``kind``, ``ts``,
        ``run_id``...) is kept unchanged. An event whose session holds the same event at
        that seq is skipped, so importing twice adds nothing; a seq holding another event
        -> ``ValueError``. Every event is checked before anything is written (not a dict,
        no session id or seq, not JSON -> ``TypeError``/``ValueError`` naming it)."""
        from . import _facts

        return _facts.import_events(self, events)

    def import_embeddings(self, vectors: Iterable[dict[str, Any]]) -> int:
        """Store message vectors as they are (see :meth:`embed`), in one transaction;
        returns how many were added.

        Each is a dict ``{"session_id", "message_id", "model", "vector"}`` (a row of the
        ``embeddings`` view, or of ``store.scan("embeddings")`` with its session id);
        the vector is kept as :meth:`embed` keeps one (float32 values). A message that
        holds a vector of that model already is skipped, so importing twice adds nothing.
        The message must be stored (else :class:`MessageNotFound`); a vector that is
        empty, holds a NaN, or differs in length from another of its model in the call
        -> ``ValueError``, checked before anything is written."""
        from . import _facts

        return _facts.import_embeddings(self, vectors)

    # -- runs and events (docs/agents.md) -------------------------------------------
    def runs(self, session_id: str) -> list[RunRecord]:
        """Recorded agent runs of a session, oldest first."""
        eng = self._check()
        return eng.runs(_str_arg(session_id, "session_id"))

    def events(self, session_id: str, after_seq: int | None = None) -> list[dict[str, Any]]:
        """Stored run events of a session in ``seq`` order, after ``after_seq`` when given."""
        eng = self._check()
        session_id = _str_arg(session_id, "session_id")
        if after_seq is not None:
            if not isinstance(after_seq, int) or isinstance(after_seq, bool):
                raise TypeError(f"after_seq must be an int or None, got {type(after_seq).__name__}")
            if after_seq >= _INT64[1]:
                return []  # no seq is that large
            after_seq = max(int(after_seq), -1)  # seqs start at 0
        return eng.events(session_id, after_seq)

    # -- reading everything ------------------------------------------------------------
    def scan(
        self, kind: str, *, session_ids: Iterable[str] | None = None, batch_size: int = 20_000
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Read every row of ``kind`` in the store (or of ``session_ids``), in batches.

        Yields lists of at most ``batch_size`` rows, each starting with its session id:

        - ``"nodes"``: ``(session_id, TreeNode)``, no content;
        - ``"messages"``: ``(session_id, TreeNode, message)``, payloads restored;
        - ``"compactions"``: ``(session_id, Compaction)``;
        - ``"runs"``: ``(session_id, RunRecord)``;
        - ``"events"``: ``(session_id, event)``;
        - ``"embeddings"``: ``(session_id, {"message_id", "model", "vector"})``, the
          vectors :meth:`embed` stored (each session's in message write order).

        Nodes, messages and compactions come in store-wide write order (the order
        an export replays them in); runs, events and vectors session by session, each
        session's in its order (runs as they began, events by ``seq``).
        ``session_ids=None`` covers every session, including those holding only
        runs, events or compactions. Content is read one batch at a time, so the
        batch bounds the memory messages take; the node rows an engine merges to
        give write order may be held for the whole scan. No transaction stays open
        while the caller holds a batch: a scan racing writes sees each row as it
        was when its batch was read. Analysis and export read a whole store so.

        >>> for batch in store.scan("messages", batch_size=1_000):
        ...     for session_id, node, message in batch:
        ...         ...
        """
        if kind not in SCAN_KINDS:
            raise ValueError(f"unknown scan kind {kind!r}; kinds are {', '.join(SCAN_KINDS)}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        eng = self._check()
        ids = self._scan_ids(eng, session_ids)
        return self._scan_chunks(eng, kind, ids, batch_size)

    def _scan_ids(self, eng: Engine, session_ids: Iterable[str] | None) -> list[str] | None:
        if session_ids is not None:
            if isinstance(session_ids, str):
                session_ids = [session_ids]
            ids = list(dict.fromkeys(session_ids))
            for sid in ids:
                _require_str("session ids", sid)
            return ids
        return None  # every session: the engine lists them all (scan_session_ids)

    def _scan_chunks(
        self, eng: Engine, kind: str, ids: list[str] | None, batch_size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        if kind == "compactions":
            yield from eng.scan_compactions(ids, batch_size)
        elif kind == "runs":
            yield from eng.scan_runs(ids, batch_size)
        elif kind == "events":
            yield from eng.scan_events(ids, batch_size)
        elif kind == "embeddings":
            yield from eng.scan_embeddings(ids, batch_size)
        else:
            for batch in eng.scan_nodes(ids, batch_size):
                self._check()
                if kind == "nodes":
                    yield [(sid, _tree_node(n)) for sid, n in batch]
                    continue
                rows = []
                for chunk in _chunks(batch, _SCAN_READ):
                    raws = eng.contents([n.seq for _, n in chunk])
                    for (sid, n), raw in zip(chunk, raws):
                        message = self._restore(n.seq, raw)
                        if message is not None:  # (None: deleted since its batch was read)
                            rows.append((sid, _tree_node(n), message))
                yield rows

    # -- analysis (pandas and DuckDB load on first use) ----------------------------
    def messages_df(self, session_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """One row per message (a pandas DataFrame) with the columns of the ``messages`` view
        (docs/analysis.md); see sessionkit.analysis."""
        return _conveniences.messages_df(self, session_ids)

    def sql(
        self,
        query: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        files: bool = False,
        timeout: float | None = None,
    ) -> pd.DataFrame:
        """Run DuckDB SQL over the views messages, sessions, compactions, runs, events, labels (a DataFrame).

        The query reads those views and nothing else of the machine (see :meth:`sql_arrow`);
        ``files=True`` lets it read local files too; ``timeout`` (seconds) stops it with
        ``QueryTimeout``."""
        return _conveniences.sql(self, query, params, files=files, timeout=timeout)

    def runs_df(self) -> pd.DataFrame:
        """The ``runs`` view as a pandas DataFrame (one row per run); see sessionkit.analysis."""
        return _conveniences.runs_df(self)

    def events_df(self, session_ids: Iterable[str] | None = None) -> pd.DataFrame:
        """The ``events`` view as a pandas DataFrame (of ``session_ids``, default all); see sessionkit.analysis."""
        return _conveniences.events_df(self, session_ids)

    def sql_arrow(
        self,
        query: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        session_ids: Iterable[str] | None = None,
        files: bool = False,
        timeout: float | None = None,
    ) -> pa.Table:
        """Run one read-only DuckDB SELECT over the analysis views; the result as a ``pyarrow.Table``.

        On a DuckDB store the views are defined over the store's own tables; on SQLite
        and PostgreSQL over a DuckDB cache of the analysis columns beside the store (for
        a SQLite file, the file ``<path>-analysis.duckdb``; in memory for PostgreSQL),
        brought up to date from the store's change log before each query (see
        ``sessionkit.analysis``). ``params`` binds ``?`` or ``$name`` placeholders.
        ``session_ids`` makes every view hold only those sessions for this query (their
        tree columns computed for them alone, so a query about one session costs that
        session). Inside :meth:`transaction` the query sees the transaction's own writes;
        the cache keeps none of them unless the transaction commits. Needs the ``analysis``
        extra.

        A query is a sandbox: it reads the views, its own CTEs and the table functions
        ``range``, ``generate_series`` and ``unnest``; anything else -- a file
        (``read_csv``, ``glob``, ``'x.parquet'``), a table of the store or its cache, a
        catalog or settings function (``duckdb_tables()``, ``current_setting``), DESCRIBE
        or SHOW, a statement other than one SELECT (ATTACH, COPY, INSTALL, SET...), a
        lone surrogate in the query or its parameters -- raises ``ValueError`` naming what
        was refused. ``files=True`` lets the query read local files (CSV, Parquet,
        JSON, text) besides the views: it then runs on a DuckDB connection of its own
        holding the views it names, read whole in one snapshot.

        A running query stops when the store is closed (it raises ``StoreClosed``, and
        ``close()`` returns once it has stopped), on Ctrl-C in the main thread and on
        :meth:`interrupt_sql` (``KeyboardInterrupt``), and once ``timeout`` seconds (a
        positive number; default None, no limit) have passed since the call
        (``sessionkit.errors.QueryTimeout``, naming the timeout); the store answers the
        next query as before. A query that needs more memory than the store's
        ``sql_memory_limit`` (see :func:`sessionkit.open_store`) raises
        ``sessionkit.errors.QueryMemoryExceeded``, and the store answers the next one."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if params is not None and not isinstance(params, (list, tuple, dict)):
            raise TypeError(f"params must be a list, tuple or dict, got {type(params).__name__}")
        if not isinstance(files, bool):
            raise TypeError(f"files must be a bool, got {type(files).__name__}")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
            if not math.isfinite(timeout) or timeout <= 0:
                raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        _sql_text(query, "store.sql: the query")
        _sql_params(params, "params")
        eng = self._check()
        ids = self._scan_ids(eng, session_ids)
        return eng.analysis_query(query, params, ids, files, None if timeout is None else float(timeout))

    def interrupt_sql(self) -> None:
        """Stop the analysis queries running now on this store in other threads (``sql``,
        ``sql_arrow``, ``to_arrow``, ``messages_df``...): each raises ``KeyboardInterrupt``,
        as after Ctrl-C. Returns at once; the store stays open and answers the next query.
        (``sk.aio`` calls it when the task awaiting a query is cancelled.)"""
        self._check().interrupt_analysis()

    def to_arrow(self, view: str) -> pa.Table:
        """One analysis view (``messages``, ``sessions``, ``compactions``, ``runs``, ``events``)
        as a ``pyarrow.Table``, in its natural order (messages in write order)."""
        from .sql.views import VIEW_ORDER

        if view not in VIEW_ORDER:
            raise ValueError(f"unknown view {view!r}; views are {', '.join(VIEW_ORDER)}")
        return self.sql_arrow(f"SELECT * FROM {view} ORDER BY {VIEW_ORDER[view]}")
