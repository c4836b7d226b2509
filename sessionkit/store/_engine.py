"""The engine contract: the storage primitives an engine (``engines/sqlite``, ``engines/duckdb``,
``engines/postgresql``) supplies to :class:`~sessionkit.store.Store` and :class:`~sessionkit.store.Session`."""

from __future__ import annotations

import abc
import contextlib
import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from ._args import _MANY_IDS
from ._overlay import _chunks
from ._values import Appended, Capabilities, ChangeEvent, Compaction, Node, RunRecord, SessionInfo, _Latest

if TYPE_CHECKING:
    from ..messages import Prepared
    from ._index import SearchIndex
    from ._labels import LabelFilter


class Engine(abc.ABC):
    """Storage primitives an engine provides. All ``session_id``/``id`` values are strings.

    Methods named ``w_*`` run inside :meth:`write` (one transaction, exclusive);
    the others are reads and may run at any time. Implementations hold their own
    lock so a Store can be shared by threads. Every engine is a
    :class:`sessionkit.store._sql.SQLEngine`, which implements the abstract methods
    once for all of them; what an engine can do beyond these is declared in
    :attr:`capabilities`, never probed.
    """

    kind = "abstract"
    path: str | None = None
    #: What this engine can do beyond the primitives below (see :class:`Capabilities`).
    capabilities: Capabilities = Capabilities()
    #: A search ranks at most this many of the newest matching messages (bounded cost).
    search_candidates: int = 2_000
    #: The full-text index of message text: it answers searches, is built on the first
    #: one and kept current by the writes (see :class:`~sessionkit.store._index.SearchIndex`).
    index: SearchIndex

    # lifecycle -----------------------------------------------------------
    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def write(self) -> contextlib.AbstractContextManager[Any]:
        """One write transaction (commit on success, rollback on error); nested ones join it."""

    @abc.abstractmethod
    def snapshot(self) -> contextlib.AbstractContextManager[Any]:
        """Reads inside see one state of the store."""

    # reads ---------------------------------------------------------------
    @abc.abstractmethod
    def node(self, sid: str, mid: str) -> Node | None: ...
    @abc.abstractmethod
    def latest(self, sid: str) -> Node | None: ...
    @abc.abstractmethod
    def children(self, sid: str, mid: str) -> list[Node]: ...
    @abc.abstractmethod
    def ancestors(self, sid: str, seq: int, limit: int | None) -> list[Node]:
        """Nodes from ``seq`` (included) towards the root, at most ``limit``."""

    @abc.abstractmethod
    def walk_pages(
        self, sid: str, start: Node | None, limit: int | None, content: bool, *, first: int | None = None
    ) -> Iterator[list[tuple[Node, str | None]]]:
        """The path from ``start`` (None: the session's latest row) towards the root, in
        pages of ``(node, stored JSON or None)``, leaf first."""

    def walk(self, sid: str, start: Node, limit: int, content: bool) -> list[tuple[Node, str | None]]:
        return [row for page in self.walk_pages(sid, start, limit, content) for row in page]

    def newest_rows(
        self, sid: str, n: int, below: int | None = None
    ) -> list[tuple[int, str, str | None, int, int, int, str]] | None:
        """The session's ``n`` newest rows (with a seq below ``below``) as ``(seq, id,
        parent_id, bytes, depth, path_bytes, stored JSON)``, newest first, in one read (a
        window of a path that grew by appends lies in them); None where the engine reads
        them otherwise."""
        return None

    def walk_contents(
        self, sid: str, start: Node, limit: int
    ) -> tuple[list[int], list[str], list[str], list[str | None] | None]:
        """The seqs, ids and stored JSON of the path from ``start`` towards the root, at
        most ``limit`` rows, leaf first: :meth:`walk` with only what a path's messages need;
        with the ``createdAt`` each JSON leaves out, as :meth:`rows_between` gives them."""
        rows = self.walk(sid, start, limit, True)
        return [n.seq for n, _ in rows], [n.id for n, _ in rows], [cast(str, raw) for _, raw in rows], None

    def path_runs(self, sid: str, start: Node) -> list[tuple[int, int, int, int]] | None:
        """The path from the root to ``start`` as runs ``(first seq, last seq, first depth,
        rows)``, root first, where every row of the session from the first seq to the last
        is on the path, each one deeper than the row before (:meth:`rows_between` reads
        them); None where the engine cannot tell the runs without reading each row. A row
        deleted meanwhile ends the path there: the runs start below it, and a run's rows
        may be fewer than it says (the reader stops at the first that is not there)."""
        return None

    def rows_between(
        self, sid: str, lo: int, hi: int, limit: int
    ) -> tuple[list[int], list[int], list[str], list[str | None] | None]:
        """The seqs, depths and stored JSON of the session's rows from seq ``lo`` to ``hi``
        (both included), at most ``limit``, in write order (a run of :meth:`path_runs`),
        and for each JSON the ``createdAt`` it leaves out (None: it is whole; the list
        None: all are), which ``messages.restore_many`` adds back as the last key."""
        raise NotImplementedError

    @abc.abstractmethod
    def path_skeleton(self, sid: str, seq: int) -> Iterable[tuple[int, str, int]]:
        """``(seq, id, tokens)`` from the message ``seq`` up to the root."""

    @abc.abstractmethod
    def contents(self, seqs: list[int]) -> list[str | None]:
        """Stored JSON for each seq, in the given order (continuation rows joined); None
        for a row deleted meanwhile."""

    @abc.abstractmethod
    def blob(self, sha: str) -> bytes: ...
    @abc.abstractmethod
    def count(self, sid: str) -> int: ...
    @abc.abstractmethod
    def nodes(self, sid: str) -> list[Node]: ...
    @abc.abstractmethod
    def list_sessions(self) -> list[SessionInfo]: ...
    @abc.abstractmethod
    def session_exists(self, sid: str) -> bool: ...
    @abc.abstractmethod
    def compactions(self, sid: str) -> list[tuple[int, Compaction]]: ...
    @abc.abstractmethod
    def has_compactions(self, sid: str) -> bool: ...
    @abc.abstractmethod
    def stats(self) -> dict[str, Any]: ...
    @abc.abstractmethod
    def change_marker(self) -> str:
        """Text that changes with every committed write (see ``Store.change_marker``)."""

    @abc.abstractmethod
    def runs(self, sid: str) -> list[RunRecord]: ...
    @abc.abstractmethod
    def events(self, sid: str, after_seq: int | None) -> list[dict[str, Any]]: ...

    # writes (inside write()) -------------------------------------------------
    def append_fast(
        self, sid: str, preps: list[Prepared], parent_id: str | _Latest | None, stamps: list[str]
    ) -> Appended:
        """The engine's optional fast append, outside a transaction: ``preps`` as a chain
        (each under the one before, the first under ``parent_id``: a str, None or LATEST),
        ``stamps`` their row times, all stored or none.

        ``Appended.INSERTED`` when it stored them all. Anything else (``EXISTS``,
        ``NO_PARENT``, ``UNSUPPORTED``: no fast path, payloads, an id already stored, an
        unknown parent...) leaves the write to :meth:`w_insert_many`, which decides it.
        """
        return Appended.UNSUPPORTED

    @abc.abstractmethod
    def w_insert_many(
        self, sid: str, rows: Sequence[tuple[Prepared, str | _Latest | None, str]], index: bool
    ) -> list[tuple[bool, int]]:
        """Insert ``rows`` of ``(prep, parent_id, created_at)`` in order: the one general
        write of messages (in a few statements where the engine declares
        ``capabilities.bulk_insert``).

        Each row means what inserting it alone would (parent_id: a str, None or LATEST;
        an id already stored, or earlier in ``rows``, is left as it is; an unknown parent
        raises MessageNotFound unless the message itself exists). Returns
        ``(inserted, seq)`` per row, ``seq`` being the stored row's either way.
        """

    def w_import_records(
        self, records: Sequence[tuple[str, Sequence[tuple[Prepared, str | _Latest | None, str]]]], index: bool
    ) -> list[list[tuple[bool, int]]]:
        """:meth:`w_insert_many` for each ``(sid, rows)`` record in turn, as one batch:
        ``Store.import_many`` (the importers' grouped writes) uses it. An engine may write
        every record's rows together, in a few statements for the lot; any error leaves
        the caller to roll back the transaction (nothing of the batch is kept)."""
        return [self.w_insert_many(sid, rows, index) for sid, rows in records]

    def sessions_holding(self, sids: Sequence[str]) -> set[str]:
        """Those of ``sids`` that hold at least one message."""
        return {sid for sid in sids if self.count(sid)}

    @abc.abstractmethod
    def w_update(self, sid: str, node: Node, prep: Prepared, index: bool) -> None: ...
    @abc.abstractmethod
    def w_delete(self, sid: str, nodes: list[Node]) -> None: ...
    @abc.abstractmethod
    def w_descendants(self, sid: str, mids: list[str]) -> list[Node]: ...
    @abc.abstractmethod
    def w_clear(self, sid: str) -> None: ...
    @abc.abstractmethod
    def w_delete_session(self, sid: str) -> None: ...
    @abc.abstractmethod
    def w_add_compaction(self, sid: str, comp: Compaction) -> None: ...
    @abc.abstractmethod
    def w_run_begin(
        self, sid: str, run_id: str, input: str | None, started_at: str, meta: str | None = None
    ) -> None: ...
    @abc.abstractmethod
    def w_run_end(
        self, run_id: str, status: str, error: str | None, usage: dict[str, Any] | None, ended_at: str | None
    ) -> None: ...
    @abc.abstractmethod
    def w_append_events(self, sid: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def analysis_query(
        self,
        query: str,
        params: Any = None,
        session_ids: list[str] | None = None,
        files: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """A read-only DuckDB query over the analysis views (of ``session_ids``), as a ``pyarrow.Table``
        (``files``: it may read local files too; ``timeout``: seconds, then ``QueryTimeout``)."""

    @abc.abstractmethod
    def interrupt_analysis(self) -> None:
        """Stop the analysis queries running now (each raises ``KeyboardInterrupt``)."""

    # internal records --------------------------------------------------------
    # Small JSON documents that components built on the store (the HTTP server)
    # keep beside a session: ``(session_id, kind, n) -> data``. They belong to the
    # session: ``session_exists`` counts them and ``w_delete_session`` removes them.
    @abc.abstractmethod
    def records(self, sid: str, kind: str) -> list[tuple[int, str]]:
        """``(n, data)`` of the session's records of ``kind``, by ``n``."""

    @abc.abstractmethod
    def w_put_records(self, sid: str, kind: str, items: list[tuple[int, str]]) -> None:
        """Insert or replace each record ``(sid, kind, n)`` with ``data``."""

    # labels (docs/labels.md) ------------------------------------------------------
    # ``Label`` rows of ``sessionkit_labels``; a message's labels go with it
    # (``w_delete``, ``w_clear``). SQLEngine has them from ``_labels.LabelSQL``.
    @abc.abstractmethod
    def w_add_labels(self, labels: list[Any]) -> list[Any]:
        """Insert the labels whose id is not stored yet; returns those inserted."""

    @abc.abstractmethod
    def w_remove_label(self, label_id: str, session_id: str | None) -> tuple[str, str] | None:
        """Delete a label (of ``session_id`` when given); ``(session_id, message_id)`` or None."""

    @abc.abstractmethod
    def labels(self, filters: LabelFilter) -> list[Any]:
        """The labels matching every filter that is not None (``_labels.query``), in the order they were added."""

    # reading many ----------------------------------------------------------------
    def nodes_by_id(self, sid: str, mids: list[str]) -> list[Node]:
        """The nodes of those of ``mids`` stored in the session (unknown ids left out), in no order.

        Default: one :meth:`node` lookup per id for a few ids, else one read of the
        session's nodes; engines may answer in one query.
        """
        if len(mids) > _MANY_IDS:
            wanted = set(mids)
            return [n for n in self.nodes(sid) if n.id in wanted]
        out = []
        for mid in mids:
            node = self.node(sid, mid)
            if node is not None:
                out.append(node)
        return out

    # store-wide scans (Store.scan) -------------------------------------------------
    # Each yields batches of at most ``batch_size`` rows and keeps no transaction open
    # across yields. Nodes and compactions come in store-wide write order (seq); runs
    # and events session by session (in ``session_ids`` order), each session's in its
    # order. ``session_ids=None`` means every session (:meth:`scan_session_ids`). The
    # defaults read each session through the primitives above and merge them, so their
    # memory grows with the rows read; an engine with a store-wide index should page
    # through it instead (one query per batch, e.g. ``WHERE seq > last ORDER BY seq``).
    def scan_session_ids(self) -> list[str]:
        """Every session holding anything, those with messages first (newest activity first).

        Default: the sessions holding messages (:meth:`list_sessions`). An engine that
        can also list sessions holding only runs, events, compactions or records
        overrides this.
        """
        return [info.id for info in self.list_sessions()]

    def scan_nodes(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, Node]]]:
        """``(session_id, Node)`` of every message of ``session_ids``, in write order."""
        ids = self.scan_session_ids() if session_ids is None else session_ids
        rows = heapq.merge(*([(n.seq, sid, n) for n in self.nodes(sid)] for sid in ids), key=lambda r: r[0])
        return _chunks(((sid, n) for _, sid, n in rows), batch_size)

    def scan_compactions(
        self, session_ids: list[str] | None, batch_size: int
    ) -> Iterator[list[tuple[str, Compaction]]]:
        """``(session_id, Compaction)`` of every compaction of ``session_ids``, in write order."""
        ids = self.scan_session_ids() if session_ids is None else session_ids
        rows = heapq.merge(*([(seq, sid, c) for seq, c in self.compactions(sid)] for sid in ids), key=lambda r: r[0])
        return _chunks(((sid, c) for _, sid, c in rows), batch_size)

    def scan_runs(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, RunRecord]]]:
        """``(session_id, RunRecord)`` of every run of ``session_ids``, session by session, oldest first."""
        ids = self.scan_session_ids() if session_ids is None else session_ids
        return _chunks(((sid, r) for sid in ids for r in self.runs(sid)), batch_size)

    def scan_events(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """``(session_id, event)`` of every run event of ``session_ids``, session by session, by seq."""
        ids = self.scan_session_ids() if session_ids is None else session_ids
        return _chunks(((sid, e) for sid in ids for e in self.events(sid, None)), batch_size)

    # facts as they are (Store.import_runs / import_events / import_embeddings) ------
    # Each writes rows already checked by the store, keeping their ids, times and seqs;
    # a row already stored is skipped, so importing twice adds nothing.
    @abc.abstractmethod
    def w_import_runs(self, runs: list[RunRecord]) -> list[RunRecord]:
        """Insert the runs whose id is not stored yet (each numbered after its session's
        last run); a run id stored in another session -> ``ValueError``. Returns those inserted."""

    @abc.abstractmethod
    def w_import_events(self, sid: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Insert the events (each with its ``seq``) whose seq the session has no event at;
        a seq holding another event -> ``ValueError``. Returns those inserted."""

    @abc.abstractmethod
    def w_import_embeddings(self, rows: list[tuple[str, str, str, int, str]]) -> int:
        """``(session_id, message_id, model, dim, vector JSON)`` rows: insert those whose message
        has no vector of that model yet (a missing message -> ``MessageNotFound``); how many."""

    @abc.abstractmethod
    def scan_embeddings(
        self, session_ids: list[str] | None, batch_size: int
    ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """``(session_id, {"message_id", "model", "vector"})`` of every vector of ``session_ids``,
        session by session, each session's in message write order then by model."""

    # several processes (capabilities.shared_feed / capabilities.coordination) ------
    def publish(self, event: ChangeEvent) -> None:
        """Tell listening processes about a committed write of this process (``shared_feed``)."""
        raise NotImplementedError(f"the {self.kind} engine has no shared change feed")

    def start_listener(self, callback: Callable[[ChangeEvent], Any]) -> None:
        """Report other processes' writes to ``callback`` from a thread; idempotent (``shared_feed``)."""
        raise NotImplementedError(f"the {self.kind} engine has no shared change feed")

    def try_hold(self, name: str) -> bool:
        """Take the store-wide hold ``name`` unless any process has it (``coordination``)."""
        raise NotImplementedError(f"the {self.kind} engine has no cross-process holds")

    def hold_taken(self, name: str) -> bool:
        """Whether any process holds ``name`` now, without taking it (``coordination``)."""
        raise NotImplementedError(f"the {self.kind} engine has no cross-process holds")

    def release_hold(self, name: str) -> None:
        """Give back a hold taken with :meth:`try_hold` (``coordination``)."""
        raise NotImplementedError(f"the {self.kind} engine has no cross-process holds")

    def signal(self, sid: str, kind: str, data: Any = None) -> None:
        """Tell other processes' signal handlers ``(sid, kind, data)`` (``coordination``)."""
        raise NotImplementedError(f"the {self.kind} engine has no cross-process signals")

    def on_signal(self, handler: Callable[[str, str, Any], Any]) -> None:
        """Call ``handler(sid, kind, data)`` for other processes' signals (``coordination``)."""
        raise NotImplementedError(f"the {self.kind} engine has no cross-process signals")
