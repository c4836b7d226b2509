"""Store and Session: what a store promises (docs/stores.md, docs/message-tree.md,
docs/compaction.md, docs/search.md), independent of any SQL dialect.

An engine (``sqlite.py``, ``duckdb.py``) supplies storage primitives through the
:class:`Engine` interface; everything users can observe (validation, idempotency,
latest leaf, compaction overlays, change events, mirrors) is decided here, once,
so every engine behaves the same.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import heapq
import itertools
import json
import logging
import threading
import uuid
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from .. import messages as _msg
from .. import parts as _parts
from ..errors import (
    MessageNotFound,
    SessionNotFound,
    StoreClosed,
    StoreCorrupt,
    UsageError,
)
from . import _conveniences
from .search import SearchHit, parse_query, snippet

log = logging.getLogger("sessionkit")

__all__ = [
    "LATEST",
    "Store",
    "Session",
    "AppendResult",
    "SessionInfo",
    "ChangeEvent",
    "Compaction",
    "CompactionResult",
    "CompactionContext",
    "RecentHistory",
    "RunRecord",
    "TreeNode",
    "Tree",
    "TreeCompaction",
    "PathView",
    "CompactionSpan",
    "Capabilities",
    "SCAN_KINDS",
    "Engine",
    "Node",
]


class _Latest:
    """Sentinel: attach to the session's latest leaf (docs/message-tree.md)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "sessionkit.LATEST"

    def __reduce__(self):
        return (_Latest, ())


LATEST = _Latest()


# ---------------------------------------------------------------------------
# Plain results


@dataclass(frozen=True)
class AppendResult:
    """What an append or import did: ``inserted`` is False when the id was already stored."""

    inserted: bool
    message: dict

    @classmethod
    def _stored(cls, prepared) -> AppendResult:
        """The result of storing ``prepared`` (a messages.Prepared): ``message`` is its copy,
        decoded on first read, so an append whose result goes unread never builds it."""
        result = object.__new__(cls)
        object.__setattr__(result, "inserted", True)
        object.__setattr__(result, "_prepared", prepared)
        return result

    def __getattr__(self, name):  # only for attributes not set: ``message`` of a _stored result
        prepared = self.__dict__.get("_prepared")
        if name != "message" or prepared is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        message = prepared.message
        object.__setattr__(self, "message", message)
        return message


@dataclass(frozen=True)
class SessionInfo:
    id: str
    message_count: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class ChangeEvent:
    """A write reported by :meth:`Store.subscribe` (docs/message-tree.md)."""

    type: str  # append | update | delete | clear | compact
    session_id: str
    message_ids: tuple[str, ...]
    message: dict | None = None


@dataclass(frozen=True)
class Compaction:
    """A stored summary replacing ``from_id`` .. ``to_id`` on read (docs/compaction.md)."""

    id: str
    from_id: str
    to_id: str
    summary: str
    created_at: str
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction function returns: replace ``from_id`` .. ``to_id`` by ``summary``."""

    from_id: str
    to_id: str
    summary: str


@dataclass(frozen=True)
class CompactionContext:
    session: Session
    leaf_id: str
    tokens: int
    previous: Compaction | None


@dataclass(frozen=True)
class RecentHistory:
    messages: list[dict]
    truncated: bool
    total_content_bytes: int


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    session_id: str
    status: str
    error: str | None
    started_at: str
    ended_at: str | None
    usage: dict | None
    input: str | None = None


@dataclass(frozen=True)
class TreeNode:
    """A message's place in its session's tree, without content (see :meth:`Session.nodes`)."""

    id: str
    parent_id: str | None
    depth: int
    role: str
    tokens: int
    bytes: int
    created_at: str
    seq: int


@dataclass(frozen=True)
class TreeCompaction:
    """A compaction placed in its session's tree (see :class:`Tree`).

    ``ids`` are the messages its range holds, from ``from_id`` down to ``to_id``;
    empty when ``from_id`` is not ``to_id`` or one of its ancestors in the session
    (a range that covers nothing). ``superseded`` is True when a newer compaction's
    range shares a message with this one.
    """

    compaction: Compaction
    ids: tuple[str, ...]
    superseded: bool

    @property
    def messages(self) -> int:
        """How many messages the range holds (0 when it covers nothing)."""
        return len(self.ids)


@dataclass(frozen=True)
class Tree:
    """A session's whole tree without message content: what views, plots and the CLI draw.

    ``nodes`` are every message's :class:`TreeNode` in write order (a parent always
    comes before its children), ``latest_id`` the latest leaf (docs/message-tree.md; None when
    the session is empty) and ``compactions`` every compaction, oldest first, placed
    in the tree. Get one with :meth:`Session.tree`, or build one from rows of
    :meth:`Store.scan` with :meth:`Tree.build`.
    """

    session_id: str
    nodes: tuple[TreeNode, ...]
    latest_id: str | None
    compactions: tuple[TreeCompaction, ...]
    _tree_index: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _tree_children: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = self._tree_index
        kids = self._tree_children
        for node in self.nodes:
            index[node.id] = node
            if node.parent_id is not None:
                kids.setdefault(node.parent_id, []).append(node)

    @classmethod
    def build(cls, session_id: str, nodes: Iterable[TreeNode], compactions: Iterable[Compaction]) -> Tree:
        """The tree of ``nodes`` (any order) and ``compactions`` (oldest first).

        This is where a compaction's place in the tree is computed: the messages
        from its ``to_id`` up to its ``from_id``, and whether a newer one overlaps it.
        """
        ordered = tuple(sorted(nodes, key=lambda n: n.seq))
        by_id = {n.id: n for n in ordered}
        comps = list(compactions)
        covered: list[tuple[str, ...]] = []
        for comp in comps:
            chain: list[str] = []
            node = by_id.get(comp.to_id)
            while node is not None:
                chain.append(node.id)
                if node.id == comp.from_id:
                    break
                node = by_id.get(node.parent_id) if node.parent_id is not None else None
            else:
                chain = []  # from_id is not on the way up from to_id: the range covers nothing
            chain.reverse()
            covered.append(tuple(chain))
        sets = [set(c) for c in covered]
        placed = tuple(
            TreeCompaction(comp, covered[k], any(sets[k] & sets[j] for j in range(k + 1, len(comps))))
            for k, comp in enumerate(comps)
        )
        return cls(session_id, ordered, ordered[-1].id if ordered else None, placed)

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._tree_index

    def node(self, message_id: str) -> TreeNode:
        """The node of ``message_id``; an unknown id -> ``MessageNotFound``."""
        node = self._tree_index.get(message_id)
        if node is None:
            raise MessageNotFound(f"message {message_id!r} is not in session {self.session_id!r}")
        return node

    def children(self, message_id: str) -> list[TreeNode]:
        """Direct children of a message, oldest first (``[]`` for a leaf)."""
        self.node(message_id)
        return list(self._tree_children.get(message_id, ()))

    def roots(self) -> list[TreeNode]:
        """Messages without a parent, oldest first."""
        return [n for n in self.nodes if n.parent_id is None]

    def path(self, leaf_id: str | None = None) -> list[TreeNode]:
        """Nodes from the root down to ``leaf_id`` (default: the latest leaf; ``[]`` when empty)."""
        if leaf_id is None:
            if self.latest_id is None:
                return []
            leaf_id = self.latest_id
        out = []
        node: TreeNode | None = self.node(leaf_id)
        while node is not None:
            out.append(node)
            node = self._tree_index.get(node.parent_id) if node.parent_id is not None else None
        out.reverse()
        return out

    def compacted_by(self) -> dict[str, str]:
        """For each message some compaction's range holds: the id of the newest such compaction."""
        out: dict[str, str] = {}
        for placed in self.compactions:  # oldest first: a newer one covering a message wins
            for mid in placed.ids:
                out[mid] = placed.compaction.id
        return out


@dataclass(frozen=True)
class CompactionSpan:
    """A compaction applied to a path: it replaces positions ``start`` .. ``end`` (both included)."""

    start: int
    end: int
    compaction: Compaction
    #: Tokens of the messages it replaces on this path (their stored estimates).
    tokens_full: int

    @property
    def messages(self) -> int:
        """How many messages of the path the summary replaces."""
        return self.end - self.start + 1

    @property
    def tokens_model(self) -> int:
        """Tokens of the summary as the model sees it (``compaction.tokens_after``)."""
        return self.compaction.tokens_after


@dataclass(frozen=True)
class PathView:
    """One path of a session without message content (see :meth:`Session.path`).

    ``nodes`` run from the root to ``leaf_id`` (positions 0 ..), ``spans`` are the
    compactions that apply to this path when it is read (docs/compaction.md: whole range on
    the path, the newest of overlapping ones), in path order and never
    overlapping. ``tokens_full`` is the raw path's token estimate, ``tokens_model``
    the path's as the model sees it (each span replaced by its summary).
    """

    session_id: str
    leaf_id: str | None
    nodes: tuple[TreeNode, ...]
    spans: tuple[CompactionSpan, ...]
    tokens_full: int
    tokens_model: int

    def __len__(self) -> int:
        return len(self.nodes)

    def span_at(self, position: int) -> CompactionSpan | None:
        """The span replacing the message at ``position``, or None when it is read word for word."""
        for span in self.spans:
            if span.start <= position <= span.end:
                return span
        return None

    def model_view(self) -> list[TreeNode | CompactionSpan]:
        """The path as the model sees it: nodes read word for word, one span per summary."""
        out: list[TreeNode | CompactionSpan] = []
        pos = 0
        for span in self.spans:
            out.extend(self.nodes[pos : span.start])
            out.append(span)
            pos = span.end + 1
        out.extend(self.nodes[pos:])
        return out


#: What :meth:`Store.scan` reads: rows of ``(session_id, ...)`` per kind.
SCAN_KINDS = ("nodes", "messages", "compactions", "runs", "events")


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do beyond the primitives every engine has, declared by the engine.

    ``bulk_insert``: the engine inserts a batch of messages in a few statements
    (``Engine.w_insert_many``), used by :meth:`Session.import_many`.
    ``coordination``: several processes may serve one store at once; the store
    offers cross-process holds and signals (:meth:`Store.try_hold`,
    :meth:`Store.signal`...), which the HTTP server uses to share sessions.
    ``shared_feed``: :meth:`Store.subscribe` also reports the writes of other
    processes and machines (``Engine.publish`` / ``Engine.start_listener``).
    """

    bulk_insert: bool = False
    coordination: bool = False
    shared_feed: bool = False


class Node(NamedTuple):
    """A message's place in the tree, without its content."""

    seq: int
    id: str
    parent_id: str | None
    depth: int
    bytes: int
    tokens: int
    path_bytes: int
    path_tokens: int
    created_at: str
    role: str


# ---------------------------------------------------------------------------
# Engine interface


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

    # lifecycle -----------------------------------------------------------
    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def write(self) -> contextlib.AbstractContextManager:
        """One write transaction (commit on success, rollback on error); nested ones join it."""

    @abc.abstractmethod
    def snapshot(self) -> contextlib.AbstractContextManager:
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
        self, sid: str, start: Node | None, limit: int | None, content: bool, first: int | None = None
    ) -> Iterator[list[tuple[Node, str | None]]]:
        """The path from ``start`` (None: the session's latest row) towards the root, in
        pages of ``(node, stored JSON or None)``, leaf first."""

    def walk(self, sid: str, start: Node, limit: int, content: bool) -> list[tuple[Node, str | None]]:
        return [row for page in self.walk_pages(sid, start, limit, content) for row in page]

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
    def stats(self) -> dict: ...
    @abc.abstractmethod
    def index_built(self) -> bool: ...
    @abc.abstractmethod
    def search(self, fts_query, terms, sid: str | None, limit: int) -> list[tuple[int, str, str, str, float]]:
        """``(seq, session_id, id, role, score)`` best first."""

    @abc.abstractmethod
    def runs(self, sid: str) -> list[RunRecord]: ...
    @abc.abstractmethod
    def events(self, sid: str, after_seq: int | None) -> list[dict]: ...

    # writes (inside write()) -------------------------------------------------
    def w_index_on(self) -> bool:
        """Whether writes in this transaction must maintain the search index themselves."""
        return self.index_built()

    def append_simple(self, sid: str, prep, parent_id, created_at: str):
        """Optional fast path for one plain append (no payloads) in a single statement.

        Returns ``"inserted"``, ``"exists"`` or ``"no-parent"``; ``NotImplemented``
        when the engine has no fast path or the message needs the general one.
        ``parent_id`` is a str, None or LATEST.
        """
        return NotImplemented

    def append_chain(self, sid: str, preps: list, parent_id, stamps: list[str]):
        """Optional fast path for a chain of new plain messages (``append_many`` outside a
        transaction): each under the one before, the first under ``parent_id`` (a str,
        None or LATEST), all stored or none. Returns True when it stored them all;
        ``NotImplemented`` when the engine has no fast path or the chain needs the
        general one (an id already stored, payloads, an unknown parent...)."""
        return NotImplemented

    @abc.abstractmethod
    def w_insert(self, sid, prep, parent: Node | None, created_at: str, index: bool) -> Node | None:
        """Insert unless (sid, id) exists; return the new Node or None when it existed."""

    def w_insert_many(self, sid, rows, index) -> list[tuple[bool, int]]:
        """Insert ``rows`` of ``(prep, parent_id, created_at)`` in order (in a few
        statements where the engine declares ``capabilities.bulk_insert``).

        Same meaning as ``Session._insert_one`` for each row (parent_id: a str, None or
        LATEST; an unknown parent raises MessageNotFound unless the message itself
        exists). Returns ``(inserted, seq)`` per row, ``seq`` being the stored row's
        either way. :meth:`Session.import_many` uses it on engines that declare it.
        """
        raise NotImplementedError(f"the {self.kind} engine has no bulk insert")

    @abc.abstractmethod
    def w_update(self, sid, node: Node, prep, index: bool) -> None: ...
    @abc.abstractmethod
    def w_delete(self, sid, nodes: list[Node]) -> None: ...
    @abc.abstractmethod
    def w_descendants(self, sid, mids: list[str]) -> list[Node]: ...
    @abc.abstractmethod
    def w_clear(self, sid) -> None: ...
    @abc.abstractmethod
    def w_delete_session(self, sid) -> None: ...
    @abc.abstractmethod
    def w_add_compaction(self, sid, comp: Compaction) -> None: ...
    @abc.abstractmethod
    def w_build_index(self) -> None: ...
    @abc.abstractmethod
    def w_run_begin(self, sid, run_id, input, started_at) -> None: ...
    @abc.abstractmethod
    def w_run_end(self, run_id, status, error, usage, ended_at) -> None: ...
    @abc.abstractmethod
    def w_append_events(self, sid, events: list[dict]) -> list[dict]: ...

    @abc.abstractmethod
    def analysis_query(
        self, query: str, params: Any = None, session_ids: list[str] | None = None, files: bool = False
    ) -> Any:
        """A read-only DuckDB query over the analysis views (of ``session_ids``), as a ``pyarrow.Table``
        (``files``: it may read local files too)."""

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

    def scan_events(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, dict]]]:
        """``(session_id, event)`` of every run event of ``session_ids``, session by session, by seq."""
        ids = self.scan_session_ids() if session_ids is None else session_ids
        return _chunks(((sid, e) for sid in ids for e in self.events(sid, None)), batch_size)

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


# ---------------------------------------------------------------------------


_BATCH = 256
#: Above this many ids, Engine.nodes_by_id reads the session's nodes once instead of each id.
_MANY_IDS = 64
#: Messages whose content one read of a scan fetches at most.
_SCAN_READ = 1_000

#: The largest count handed to an engine (a row limit, a batch): any int a caller
#: passes is clamped to it, so no driver sees an int its SQL type cannot hold.
_MAX_COUNT = 2**31 - 1
_INT64 = (-(2**63), 2**63 - 1)


def _str_arg(value: Any, name: str) -> str:
    """``value`` when it is a str of valid Unicode; else TypeError or ValueError naming ``name``.

    Ids and names are checked here, before any engine sees them: a lone surrogate
    cannot be encoded for any driver (docs/messages.md, docs/errors.md).
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        value = str(value)
    if not value.isascii():  # O(1); only other strings can hold a surrogate
        _msg.check_text(value, name)
    return value


def _sql_text(value: str, name: str) -> None:
    """A query's text or parameter: a lone surrogate -> ValueError (DuckDB would raise a TypeError)."""
    if not value.isascii():
        _msg.check_text(value, name)


def _sql_params(value: Any, name: str) -> None:
    """Every str of a query's parameters (in lists, tuples and dicts) is valid Unicode."""
    if isinstance(value, str):
        _sql_text(value, f"store.sql: {name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _sql_params(item, f"{name}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _sql_text(key, f"store.sql: a key of {name}")
            _sql_params(item, f"{name}[{key!r}]")


def _parent_arg(parent_id: Any) -> Any:
    """A ``parent_id`` as written: LATEST, None or a str of valid Unicode."""
    if parent_id is LATEST or parent_id is None:
        return parent_id
    if not isinstance(parent_id, str):
        raise TypeError("parent_id must be a str, None or sessionkit.LATEST")
    return _str_arg(parent_id, "parent_id")


def _count_arg(value: Any, name: str, minimum: int = 0) -> int:
    """A non-negative (or at least ``minimum``) int, clamped to :data:`_MAX_COUNT`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = "a non-negative int" if minimum == 0 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return min(int(value), _MAX_COUNT)


def _json_arg(value: Any, name: str) -> str:
    """``value`` as canonical JSON, refusing what no engine can store (TypeError / ValueError)."""
    return _msg.dumps_valid(value, name)


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

    # -- lifecycle ------------------------------------------------------------
    @property
    def engine(self) -> str:
        """The engine's name: ``"sqlite"``, ``"duckdb"`` or ``"postgresql"``."""
        return self._engine.kind

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

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<sessionkit.Store {self.engine} {self.path or ':memory:'} ({state})>"

    def _repr_mimebundle_(self, include=None, exclude=None):
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

    def stats(self) -> dict:
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
    def search(self, query: str, *, session_id: str | None = None, limit: int = 10) -> list[SearchHit]:
        """Full-text search over text parts (docs/search.md); any string is a valid query.

        Words match case-insensitively with English stemming; all words must occur;
        ``"double quotes"`` ask for a phrase. Hits come best first (BM25). The cost
        of ranking stays bounded however large the store grows: when a query
        matches more than ``store.search_candidates`` messages (2,000 by default),
        the best hits are chosen among the newest that many matches. On SQLite,
        when those all lie among the newest ``search_window`` messages, BM25's word
        statistics come from those messages rather than the whole store.
        """
        eng = self._check()
        limit = _count_arg(limit, "limit")
        if session_id is not None:
            session_id = _str_arg(session_id, "session_id")
        parsed = parse_query(query)
        if parsed.empty or limit == 0:
            return []
        if not eng.index_built():
            with eng.write():
                eng.w_build_index()
        rows = eng.search(parsed.fts5(), parsed, session_id, limit)
        if not rows:
            return []
        contents = eng.contents([r[0] for r in rows])
        hits = []
        for (seq, sid, mid, role, score), raw in zip(rows, contents):
            msg = self._restore(seq, raw)
            if msg is None:
                continue  # deleted since the index answered
            text = _parts.text_of(msg)
            hits.append(SearchHit(mid, sid, role, text, snippet(text, parsed), float(score)))
        return hits

    def _restore(self, seq: int, raw: str | None) -> dict | None:
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

    @property
    def search_candidates(self) -> int:
        """How many of the newest matches a search ranks at most (see :meth:`search`).

        Any positive int may be set; above 2**31 - 1 it counts as that.
        """
        return self._engine.search_candidates

    @search_candidates.setter
    def search_candidates(self, value: int) -> None:
        self._engine.search_candidates = _count_arg(value, "search_candidates", 1)

    # -- runs and events (docs/agents.md) -------------------------------------------
    def runs(self, session_id: str) -> list[RunRecord]:
        """Recorded agent runs of a session, oldest first."""
        eng = self._check()
        return eng.runs(_str_arg(session_id, "session_id"))

    def events(self, session_id: str, after_seq: int | None = None) -> list[dict]:
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

    def begin_run(self, session_id: str, run_id: str, input: str | None) -> None:
        """Record that run ``run_id`` of a session started (status ``"running"``) with ``input``.

        The agent calls this before a run's first event; :meth:`runs` lists the run
        from then on. Run ids are unique in a store.
        """
        eng = self._check()
        session_id = _str_arg(session_id, "session_id")
        run_id = _str_arg(run_id, "run_id")
        if input is not None:
            input = _str_arg(input, "input")
        with eng.write():
            eng.w_run_begin(session_id, run_id, input, _msg.now_iso())

    def end_run(self, run_id: str, *, status: str, error: str | None = None, usage: dict | None = None) -> None:
        """Record how run ``run_id`` ended: ``status`` (``"completed"``, ``"failed"``,
        ``"interrupted"``), the error text of a failure and the run's summed ``usage``."""
        eng = self._check()
        run_id = _str_arg(run_id, "run_id")
        status = _str_arg(status, "status")
        if error is not None:
            error = _str_arg(error, "error")
        if usage is not None:
            _json_arg(usage, "usage")
        with eng.write():
            eng.w_run_end(run_id, status, error, usage, _msg.now_iso())

    def reopen_run(self, run_id: str) -> None:
        """Record that run ``run_id`` runs again: status ``"running"``, its error, usage and end cleared.

        For a run started again under its own id after the process driving it
        stopped (the HTTP server retries the runs a crash cut short). Its start time
        and its events stay; the new attempt's events follow them. An unknown run id
        changes nothing.
        """
        eng = self._check()
        run_id = _str_arg(run_id, "run_id")
        with eng.write():
            eng.w_run_end(run_id, "running", None, None, None)

    def append_events(self, session_id: str, events: Iterable[dict]) -> list[dict]:
        """Store run events of a session (docs/agents.md) in one transaction; returns them as stored.

        Each event is a JSON object; the store sets ``session_id`` and the next ``seq``
        of the session (from 0, across all its runs), and adds ``v`` (1) and ``ts``
        (now) when missing. Events are kept until the session is deleted.
        """
        eng = self._check()
        session_id = _str_arg(session_id, "session_id")
        out = []
        for ev in events:
            if not isinstance(ev, dict):
                raise TypeError(f"an event must be a dict, got {type(ev).__name__}")
            ev = dict(ev)
            ev.setdefault("v", 1)
            ev.setdefault("ts", _msg.now_iso())
            ev["session_id"] = session_id
            _json_arg(ev, f"event {ev.get('kind')!r}")
            out.append(ev)
        with eng.write():
            stored = eng.w_append_events(session_id, out)
        return stored

    # -- records --------------------------------------------------------------------
    def records(self, session_id: str, kind: str) -> list[tuple[int, Any]]:
        """``(n, value)`` of a session's records of ``kind``, by ``n``.

        Records are small JSON values that a component built on the store keeps
        beside a session, numbered ``n`` within their ``kind`` (the HTTP server keeps
        its session table and the messages callers sent as ``server.*`` kinds). They
        belong to the session: :meth:`delete_session` removes them with it.
        """
        _require_str("session_id", session_id)
        _require_str("kind", kind)
        return [(n, json.loads(data)) for n, data in self._check().records(session_id, kind)]

    def put_records(self, session_id: str, kind: str, items: Iterable[tuple[int, Any]]) -> None:
        """Insert or replace records ``(n, value)`` of ``kind`` in one transaction (see :meth:`records`)."""
        _require_str("session_id", session_id)
        _require_str("kind", kind)
        rows = []
        for n, value in items:
            if not isinstance(n, int) or isinstance(n, bool):
                raise TypeError(f"record numbers are ints, got {type(n).__name__}")
            if not _INT64[0] <= n <= _INT64[1]:
                raise ValueError(f"record number {n} does not fit in 64 bits")
            rows.append((int(n), _json_arg(value, f"record {kind!r} {n}")))
        eng = self._check()
        with eng.write():
            eng.w_put_records(session_id, kind, rows)

    # -- several processes on one store (capabilities.coordination) ----------------
    def _coordinated(self, what: str) -> Engine:
        eng = self._check()
        if not eng.capabilities.coordination:
            raise UsageError(
                f"{what} needs a store that several processes may serve at once (PostgreSQL); "
                f"this {eng.kind} store is served by one process (store.capabilities.coordination is False)"
            )
        return eng

    def try_hold(self, name: str) -> bool:
        """Take the store-wide hold ``name`` unless some process (this one included) has it.

        Holds coordinate processes that share one store (the HTTP server's workers):
        True means this process now holds ``name`` until :meth:`release_hold` or
        until it ends (a process that dies gives its holds back). Holds are not
        re-entrant. Needs ``capabilities.coordination``, else ``UsageError``.
        """
        _require_str("name", name)
        return self._coordinated("store.try_hold").try_hold(name)

    def hold_taken(self, name: str) -> bool:
        """Whether any process holds ``name`` now (nothing is taken); see :meth:`try_hold`."""
        _require_str("name", name)
        return self._coordinated("store.hold_taken").hold_taken(name)

    def release_hold(self, name: str) -> None:
        """Give back the hold ``name`` taken with :meth:`try_hold` (nothing when not held or closed)."""
        _require_str("name", name)
        if self._closed:
            return
        self._coordinated("store.release_hold").release_hold(name)

    def signal(self, session_id: str, kind: str, data: Any = None) -> None:
        """Tell the other processes on this store ``(session_id, kind, data)``; ``data`` is JSON.

        Their :meth:`on_signal` handlers receive it; this process's do not. Best
        effort: a signal that cannot be sent is logged. Nothing when closed.
        """
        _require_str("session_id", session_id)
        _require_str("kind", kind)
        if self._closed:
            return
        self._coordinated("store.signal").signal(session_id, kind, data)

    def on_signal(self, handler: Callable[[str, str, Any], Any]) -> None:
        """Call ``handler(session_id, kind, data)`` from a listener thread for other processes' signals.

        Besides what :meth:`signal` sends, the store signals ``"events"`` (data: the
        last ``seq``) whenever another process appends run events to a session.
        Starts the change feed's listener too (see :meth:`subscribe`).
        """
        if not callable(handler):
            raise TypeError("handler must be callable")
        eng = self._coordinated("store.on_signal")
        eng.on_signal(handler)
        eng.start_listener(self._deliver)

    # -- reading everything ------------------------------------------------------------
    def scan(
        self, kind: str, *, session_ids: Iterable[str] | None = None, batch_size: int = 20_000
    ) -> Iterator[list[tuple]]:
        """Read every row of ``kind`` in the store (or of ``session_ids``), in batches.

        Yields lists of at most ``batch_size`` rows, each starting with its session id:

        - ``"nodes"``: ``(session_id, TreeNode)``, no content;
        - ``"messages"``: ``(session_id, TreeNode, message)``, payloads restored;
        - ``"compactions"``: ``(session_id, Compaction)``;
        - ``"runs"``: ``(session_id, RunRecord)``;
        - ``"events"``: ``(session_id, event)``.

        Nodes, messages and compactions come in store-wide write order (the order
        an export replays them in); runs and events session by session, each
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

    def _scan_ids(self, eng: Engine, session_ids) -> list[str] | None:
        if session_ids is not None:
            if isinstance(session_ids, str):
                session_ids = [session_ids]
            ids = list(dict.fromkeys(session_ids))
            for sid in ids:
                _require_str("session ids", sid)
            return ids
        return None  # every session: the engine lists them all (scan_session_ids)

    def _scan_chunks(self, eng: Engine, kind: str, ids, batch_size: int) -> Iterator[list[tuple]]:
        if kind == "compactions":
            yield from eng.scan_compactions(ids, batch_size)
        elif kind == "runs":
            yield from eng.scan_runs(ids, batch_size)
        elif kind == "events":
            yield from eng.scan_events(ids, batch_size)
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
    def messages_df(self, session_ids=None):
        """One row per message (a pandas DataFrame) with the columns of the ``messages`` view
        (docs/analysis.md); see sessionkit.analysis."""
        return _conveniences.messages_df(self, session_ids)

    def sql(self, query: str, params=None, *, files: bool = False):
        """Run DuckDB SQL over the views messages, sessions, compactions, runs, events (a DataFrame).

        The query reads those views and nothing else of the machine (see :meth:`sql_arrow`);
        ``files=True`` lets it read local files too."""
        return _conveniences.sql(self, query, params, files=files)

    def runs_df(self):
        """The ``runs`` view as a pandas DataFrame (one row per run); see sessionkit.analysis."""
        return _conveniences.runs_df(self)

    def events_df(self, session_ids=None):
        """The ``events`` view as a pandas DataFrame (of ``session_ids``, default all); see sessionkit.analysis."""
        return _conveniences.events_df(self, session_ids)

    def sql_arrow(self, query: str, params=None, *, session_ids: Iterable[str] | None = None, files: bool = False):
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
        :meth:`interrupt_sql` (``KeyboardInterrupt``); the store answers the next query
        as before."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if params is not None and not isinstance(params, (list, tuple, dict)):
            raise TypeError(f"params must be a list, tuple or dict, got {type(params).__name__}")
        if not isinstance(files, bool):
            raise TypeError(f"files must be a bool, got {type(files).__name__}")
        _sql_text(query, "store.sql: the query")
        _sql_params(params, "params")
        eng = self._check()
        ids = self._scan_ids(eng, session_ids)
        return eng.analysis_query(query, params, ids, files)

    def interrupt_sql(self) -> None:
        """Stop the analysis queries running now on this store in other threads (``sql``,
        ``sql_arrow``, ``to_arrow``, ``messages_df``...): each raises ``KeyboardInterrupt``,
        as after Ctrl-C. Returns at once; the store stays open and answers the next query.
        (``sk.aio`` calls it when the task awaiting a query is cancelled.)"""
        self._check().interrupt_analysis()

    def to_arrow(self, view: str):
        """One analysis view (``messages``, ``sessions``, ``compactions``, ``runs``, ``events``)
        as a ``pyarrow.Table``, in its natural order (messages in write order)."""
        from ._analysis import VIEW_ORDER

        if view not in VIEW_ORDER:
            raise ValueError(f"unknown view {view!r}; views are {', '.join(VIEW_ORDER)}")
        return self.sql_arrow(f"SELECT * FROM {view} ORDER BY {VIEW_ORDER[view]}")


# ---------------------------------------------------------------------------


class Session:
    """One conversation tree in a store. Get it with ``store.session(id)``."""

    def __init__(self, store: Store, session_id: str):
        self._store = store
        self.session_id = session_id
        self._compact_fn: Callable | None = None
        self._compact_after: int | None = None

    def __repr__(self) -> str:
        return f"<sessionkit.Session {self.session_id!r} in {self._store!r}>"

    def _repr_mimebundle_(self, include=None, exclude=None):
        """Notebook display: a BranchTree widget when ipywidgets is installed, else static HTML."""
        return _conveniences.session_bundle(self)

    def _ipython_display_(self) -> None:
        """IPython display: the tree's snapshot, then the BranchTree widget that replaces it where it renders."""
        _conveniences.display_session(self)

    def _repr_html_(self) -> str:
        """A script-free HTML snapshot of the tree (nbconvert, GitHub)."""
        return _conveniences.session_html(self)

    @property
    def store(self) -> Store:
        return self._store

    def _eng(self) -> Engine:
        return self._store._check()

    # -- writing ------------------------------------------------------------------
    def append(self, message: dict, *, parent_id: Any = LATEST, source: str = "server") -> AppendResult:
        """Add a message (docs/message-tree.md). Idempotent on ``message["id"]``: the first write wins."""
        strip = self._strip_for(source)
        parent_id = _parent_arg(parent_id)
        prep = self._prepare(message, strip, None)
        store = self._store
        if store._in_transaction():  # the one-statement fast path commits on its own: not here
            status = NotImplemented
        else:
            status = self._eng().append_simple(self.session_id, prep, parent_id, _created_from(prep))
        stored = None
        if status == "exists":  # read outside the fast path's statement: it may be gone again
            node = self._eng().node(self.session_id, prep.message["id"])
            stored = None if node is None else self._read(node.seq)
        if status == "inserted":
            result = AppendResult._stored(prep)
        elif stored is not None:
            result = AppendResult(False, stored)
        elif status == "no-parent":
            raise MessageNotFound(f"parent message {parent_id!r} is not in session {self.session_id!r}")
        else:
            result = self._write_prepared([prep], parent_id, created_at=None)[0]
        if result.inserted:
            self._announce([result])
            self._maybe_compact()
        return result

    def append_many(
        self, messages: Iterable[dict], *, parent_id: Any = LATEST, source: str = "server"
    ) -> list[AppendResult]:
        """Append a chain of messages in one transaction (docs/message-tree.md).

        The first message goes under ``parent_id`` (as :meth:`append`: ``LATEST``,
        ``None`` for a new root, or a message id), each next one under the one
        before. Every message is validated before anything is written: one invalid
        message raises its error and nothing is stored. An id already stored keeps
        its place (``inserted=False``, the stored message) and the next message
        attaches under it, so a retried chain completes without duplicates.
        ``source="client"`` strips the reserved metadata keys (docs/message-tree.md). One change
        event per inserted message, after the commit; the compaction threshold
        (docs/compaction.md) is checked once, after the whole chain.
        """
        strip = self._strip_for(source)
        if isinstance(messages, dict):
            raise TypeError("append_many takes a list of messages; use append() for one")
        results = self._write_chain(list(messages), parent_id, strip=strip, created_at=None)
        inserted = [r for r in results if r.inserted]
        if inserted:
            self._announce(inserted)
            self._maybe_compact()
        return results

    def _strip_for(self, source: str) -> tuple[str, ...]:
        if source not in ("server", "client"):
            raise ValueError(f"source must be 'server' or 'client', got {source!r}")
        return self._store.reserved_metadata_keys if source == "client" else ()

    def _announce(self, inserted: list[AppendResult]) -> None:
        """One ``append`` change event per inserted message (none built when nobody listens)."""
        store = self._store
        if not store._wants_events():
            return
        for r in inserted:
            store._emit(ChangeEvent("append", self.session_id, (r.message["id"],), r.message))

    def import_message(self, message: dict, *, parent_id: str | None = None, created_at: Any = None) -> AppendResult:
        """Store a message as is (docs/message-tree.md): no change event, never triggers compaction.

        ``created_at`` (a datetime or epoch milliseconds) becomes the message's
        ``createdAt`` as well as its row's time, so the two never disagree.
        """
        parent_id = _parent_arg(parent_id)
        iso = _msg.to_iso(created_at) if created_at is not None else None
        prep = self._prepare(message, (), iso, set_created=iso)
        return self._write_prepared([prep], parent_id, created_at=iso)[0]

    def import_many(self, items: Iterable[tuple[dict, Any, Any]]) -> list[AppendResult]:
        """Import many messages in one transaction: each item is ``(message, parent_id, created_at)``.

        Each item means what :meth:`import_message` does with those arguments (the
        message stored as is under ``parent_id`` -- an id, ``None`` for a root or
        ``LATEST`` --, with ``created_at`` or its own ``createdAt``); a parent may be
        a message earlier in ``items``. Idempotent: an id already stored is left as
        it is (``inserted=False``). Every message is validated first and an unknown
        parent fails the whole call, so it stores all of them or nothing. No change
        events, no compaction. Engines that declare ``capabilities.bulk_insert``
        insert the batch in a few statements, the others one statement per message
        (importers call this per tree or file batch).
        """
        eng = self._eng()
        preps = []
        for item in items:
            try:
                message, parent_id, created_at = item
            except (TypeError, ValueError):
                raise TypeError("import_many takes (message, parent_id, created_at) items") from None
            _check_parent(parent_id)
            iso = _msg.to_iso(created_at) if created_at is not None else None
            preps.append((self._prepare(message, (), iso), _parent_arg(parent_id), iso))
        out = []
        with eng.write():
            index = eng.w_index_on()
            rows = [(prep, parent_id, iso or _created_from(prep)) for prep, parent_id, iso in preps]
            results = eng.w_insert_many(self.session_id, rows, index)
            old = [seq for inserted, seq in results if not inserted]
            stored: dict[int, dict] = {}
            for chunk in _chunks(old, _BATCH):
                stored.update(zip(chunk, self._load(chunk)))
        for (prep, _, _), (inserted, seq) in zip(rows, results):
            out.append(AppendResult._stored(prep) if inserted else AppendResult(False, stored[seq]))
        return out

    def _prepare(self, message, strip, created_at, set_created=None):
        return _msg.prepare(
            message,
            created_at=created_at,
            strip_metadata_keys=strip,
            max_bytes=self._store.max_message_bytes,
            set_created=set_created,
        )

    def _write_chain(self, messages, parent_id, *, strip, created_at) -> list[AppendResult]:
        parent_id = _parent_arg(parent_id)
        preps = [self._prepare(m, strip, created_at) for m in messages]  # validate all first
        return self._write_prepared(preps, parent_id, created_at=created_at)

    def _write_prepared(self, preps, parent_id, *, created_at) -> list[AppendResult]:
        eng = self._eng()
        if len(preps) > 1 and not self._store._in_transaction():
            stamps = [created_at or _created_from(prep) for prep in preps]
            if eng.append_chain(self.session_id, preps, parent_id, stamps) is True:
                return [AppendResult._stored(prep) for prep in preps]
        if len(preps) > 1 and eng.capabilities.bulk_insert:
            return self._write_batch(eng, preps, parent_id, created_at=created_at)
        out: list[AppendResult] = []
        with eng.write():
            index = eng.w_index_on()
            parent = parent_id
            for prep in preps:
                res = self._insert_one(eng, prep, parent, created_at, index)
                out.append(res)
                parent = res.message["id"]
        return out

    def _write_batch(self, eng: Engine, preps, parent_id, *, created_at) -> list[AppendResult]:
        """A chain written as one batch (``capabilities.bulk_insert``): the same results as
        inserting each message in turn under the one before, in a few statements."""
        items = []
        parent = parent_id
        for prep in preps:
            items.append((prep, parent, created_at or _created_from(prep)))
            parent = prep.id
        with eng.write():
            results = eng.w_insert_many(self.session_id, items, eng.w_index_on())
            old = [seq for inserted, seq in results if not inserted]
            stored: dict[int, dict] = {}
            for chunk in _chunks(old, _BATCH):
                stored.update(zip(chunk, self._load(chunk)))
        return [
            AppendResult._stored(prep) if inserted else AppendResult(False, stored[seq])
            for prep, (inserted, seq) in zip(preps, results)
        ]

    def _insert_one(self, eng: Engine, prep, parent_id, created_at, index) -> AppendResult:
        sid = self.session_id
        mid = prep.message["id"]
        if parent_id is LATEST:
            parent = eng.latest(sid)
        elif parent_id is None:
            parent = None
        else:
            parent = eng.node(sid, parent_id)
            if parent is None:
                existing = eng.node(sid, mid)
                if existing is not None:  # read in this write transaction: it is there
                    return AppendResult(False, cast(dict, self._read(existing.seq)))
                raise MessageNotFound(f"parent message {parent_id!r} is not in session {sid!r}")
        stamp = created_at or _created_from(prep)
        node = eng.w_insert(sid, prep, parent, stamp, index)
        if node is None:  # (sid, mid) exists: found in this write transaction
            existing = cast(Node, eng.node(sid, mid))
            return AppendResult(False, cast(dict, self._read(existing.seq)))
        return AppendResult._stored(prep)  # prepare() made a private copy

    def update(self, message: dict) -> dict:
        """Replace the stored content of ``message["id"]`` (its place in the tree stays)."""
        eng = self._eng()
        _msg.validate(message)
        with eng.write():
            node = eng.node(self.session_id, message["id"])
            if node is None:
                raise MessageNotFound(f"message {message['id']!r} is not in session {self.session_id!r}")
            if message.get("createdAt") is None:  # keep the stored creation time, as written
                stored = cast(dict, self._read(node.seq))  # in this write transaction: it is there
                message = dict(message, createdAt=stored.get("createdAt", node.created_at))
            prep = self._prepare(message, (), node.created_at)
            eng.w_update(self.session_id, node, prep, eng.w_index_on())
        stored = prep.message
        self._store._emit(ChangeEvent("update", self.session_id, (stored["id"],), stored))
        return stored

    def delete(self, ids: str | Iterable[str], *, subtree: bool = False) -> list[str]:
        """Delete messages (docs/message-tree.md); returns the ids removed."""
        if isinstance(ids, str):
            ids = [ids]
        ids = list(dict.fromkeys(_str_arg(i, "message id") for i in ids))
        eng = self._eng()
        sid = self.session_id
        with eng.write():
            nodes = []
            for mid in ids:
                node = eng.node(sid, mid)
                if node is None:
                    raise MessageNotFound(f"message {mid!r} is not in session {sid!r}")
                nodes.append(node)
            wanted = set(ids)
            desc = eng.w_descendants(sid, ids)
            extra = [n for n in desc if n.id not in wanted]
            if extra and not subtree:
                raise ValueError(
                    f"message {extra[0].parent_id!r} has children not being deleted "
                    f"(e.g. {extra[0].id!r}); pass subtree=True to delete them too"
                )
            nodes += extra
            eng.w_delete(sid, nodes)
        removed = tuple(n.id for n in nodes)
        self._store._emit(ChangeEvent("delete", sid, removed))
        return list(removed)

    def clear(self) -> None:
        """Remove this session's messages, compactions and index entries (runs stay)."""
        eng = self._eng()
        with eng.write():
            eng.w_clear(self.session_id)
        self._store._emit(ChangeEvent("clear", self.session_id, ()))

    # -- reading ------------------------------------------------------------------
    def _read(self, seq: int) -> dict | None:
        """The stored message of a row; None when it was deleted meanwhile."""
        return self._restore(seq, self._eng().contents([seq])[0])

    def _restore(self, seq: int, raw: str | None) -> dict | None:
        return self._store._restore(seq, raw)

    def _leaf(self, leaf_id: str | None) -> Node | None:
        eng = self._eng()
        if leaf_id is None:
            return eng.latest(self.session_id)
        leaf_id = _str_arg(leaf_id, "leaf_id")
        node = eng.node(self.session_id, leaf_id)
        if node is None:
            raise MessageNotFound(f"message {leaf_id!r} is not in session {self.session_id!r}")
        return node

    def get(self, id: str) -> dict | None:
        """The message with this id, or None."""
        eng = self._eng()
        with eng.snapshot():
            node = eng.node(self.session_id, _str_arg(id, "id"))
            return None if node is None else self._read(node.seq)

    def latest_leaf(self) -> dict | None:
        """The latest leaf (docs/message-tree.md), or None in an empty session."""
        eng = self._eng()
        with eng.snapshot():
            node = eng.latest(self.session_id)
            return None if node is None else self._read(node.seq)

    def branches(self, id: str) -> list[dict]:
        """Direct children of a message, oldest first."""
        eng = self._eng()
        id = _str_arg(id, "id")
        with eng.snapshot():
            if eng.node(self.session_id, id) is None:
                raise MessageNotFound(f"message {id!r} is not in session {self.session_id!r}")
            kids = eng.children(self.session_id, id)
            return self._load([k.seq for k in kids])

    def roots(self) -> list[dict]:
        """Messages without a parent (each starts a tree of its own), oldest first."""
        eng = self._eng()
        with eng.snapshot():
            return self._load([n.seq for n in eng.nodes(self.session_id) if n.parent_id is None])

    def nodes(self) -> list[TreeNode]:
        """The whole tree without message content, in write order: cheap even for large sessions.

        Each :class:`TreeNode` has ``id``, ``parent_id``, ``depth``, ``role``, ``tokens``,
        ``bytes``, ``created_at`` and ``seq`` (the store-wide write order).
        """
        return [
            TreeNode(n.id, n.parent_id, n.depth, n.role, n.tokens, n.bytes, n.created_at, n.seq)
            for n in self._eng().nodes(self.session_id)
        ]

    def get_many(self, ids: Iterable[str]) -> dict[str, dict]:
        """The stored messages of ``ids`` as ``{id: message}``, in the order asked; unknown ids are left out.

        One batched read (a few queries however many ids), for views that show a
        page of messages at a time.
        """
        if isinstance(ids, str):
            ids = [ids]
        wanted = list(dict.fromkeys(ids))
        for mid in wanted:
            _require_str("message ids", mid)
        eng = self._eng()
        found = {n.id: n.seq for n in eng.nodes_by_id(self.session_id, wanted)}
        order = [mid for mid in wanted if mid in found]
        out: dict[str, dict] = {}
        for chunk in _chunks(order, _BATCH):
            out.update(zip(chunk, self._load([found[mid] for mid in chunk])))
        return out

    def tree(self) -> Tree:
        """The whole tree without message content: nodes, latest leaf and compactions placed in it.

        Reads two cheap queries however large the session (no message body); see
        :class:`Tree`. Views, plots and the command line draw from it.
        """
        eng = self._eng()
        nodes = [_tree_node(n) for n in eng.nodes(self.session_id)]
        return Tree.build(self.session_id, nodes, [c for _, c in eng.compactions(self.session_id)])

    def path(self, leaf_id: str | None = None) -> PathView:
        """The path from the root to ``leaf_id`` (default: the latest leaf) without content.

        Gives its nodes and the compactions that apply to it when it is read, as
        spans of positions, with token totals in full and as the model sees it (see
        :class:`PathView`). An unknown ``leaf_id`` -> ``MessageNotFound``.
        """
        leaf = self._leaf(leaf_id)
        if leaf is None:
            return PathView(self.session_id, None, (), (), 0, 0)
        eng = self._eng()
        nodes = [_tree_node(n) for n in reversed(eng.ancestors(self.session_id, leaf.seq, None))]
        tokens = [n.tokens for n in nodes]
        comps = eng.compactions(self.session_id)
        ranges = _choose_ranges(comps, {n.id: i for i, n in enumerate(nodes)}) if comps else []
        spans = tuple(CompactionSpan(a, b, comp, sum(tokens[a : b + 1])) for a, b, comp in ranges)
        return PathView(self.session_id, leaf.id, tuple(nodes), spans, sum(tokens), _model_tokens(tokens, ranges))

    def path_length(self, leaf_id: str | None = None) -> int:
        """Raw messages on the path to ``leaf_id`` (compaction ignored)."""
        node = self._leaf(leaf_id)
        return 0 if node is None else node.depth + 1

    def __len__(self) -> int:
        return self._eng().count(self.session_id)

    def _load(self, seqs: list[int]) -> list[dict]:
        """The messages of these rows, in order; rows deleted meanwhile are left out."""
        out = []
        for seq, raw in zip(seqs, self._eng().contents(seqs)):
            message = self._restore(seq, raw)
            if message is not None:
                out.append(message)
        return out

    def history(
        self, *, leaf_id: str | None = None, newest_first: bool = False, compacted: bool = True
    ) -> Iterator[dict]:
        """Yield the path from the root to the leaf (default: the latest leaf), streaming.

        Content is fetched in bounded batches; no transaction stays open between
        yields. With ``newest_first=True`` it walks from the leaf up, and stopping
        early reads no older rows. A message deleted (by another thread or process)
        while the stream is read ends the stream before it; :meth:`get_history` reads
        the whole path as one state of the store.
        """
        leaf = self._leaf(leaf_id)  # raises now, not at the first next()
        if leaf is None:
            return iter(())
        comps = self._eng().compactions(self.session_id) if compacted else []
        if newest_first and not comps:
            return self._walk_up(leaf)
        return self._walk_skeleton(leaf, comps, newest_first)

    def get_history(self, *, leaf_id: str | None = None, compacted: bool = True) -> list[dict]:
        """The path from the root to the leaf as a list (docs/message-tree.md), read as one state of the store.

        The path is read newest first in range scans of its runs, content included,
        then put in order; compaction overlays replace their ranges.
        """
        eng = self._eng()
        with eng.snapshot():
            leaf = self._leaf(leaf_id)
            if leaf is None:
                return []
            comps = eng.compactions(self.session_id) if compacted else []
            rows = eng.walk(self.session_id, leaf, leaf.depth + 1, True)
            rows.reverse()
            # Read in one snapshot: every row of the path is there (no None).
            messages = cast("list[dict]", [self._restore(node.seq, raw) for node, raw in rows])
        if not comps:
            return messages
        ends = {c.from_id for _, c in comps} | {c.to_id for _, c in comps}
        ranges = _choose_ranges(comps, {node.id: i for i, (node, _) in enumerate(rows) if node.id in ends})
        out: list = []
        pos = 0
        for start, end, comp in ranges:
            out += messages[pos:start]
            out.append(_overlay(comp, end - start + 1))
            pos = end + 1
        out += messages[pos:]
        return out

    def snapshot(self) -> list[dict]:
        """A deep copy of the latest path, compaction applied."""
        return self.get_history()

    def _walk_up(self, leaf: Node) -> Iterator[dict]:
        # Pages start small and grow: a caller taking the newest few reads little.
        for page in self._eng().walk_pages(self.session_id, leaf, None, True, first=16):
            for node, raw in page:
                message = self._restore(node.seq, raw)
                if message is None:
                    return  # deleted meanwhile: the path ends here
                yield message

    def _skeleton(self, leaf: Node, comps: list[tuple[int, Compaction]]):
        """Seqs root->leaf, and the compactions that apply to this path as position ranges."""
        eng = self._eng()
        ends = {c.from_id for _, c in comps} | {c.to_id for _, c in comps}
        seqs = array("q")
        tokens = array("q")
        found: dict[str, int] = {}
        for i, (seq, mid, tok) in enumerate(eng.path_skeleton(self.session_id, leaf.seq)):
            seqs.append(seq)
            tokens.append(tok)
            if mid in ends:
                found[mid] = i
        n = len(seqs)
        seqs.reverse()
        tokens.reverse()
        ranges = _choose_ranges(comps, {k: n - 1 - v for k, v in found.items()})
        return seqs, tokens, ranges

    def _walk_skeleton(self, leaf: Node, comps, newest_first: bool) -> Iterator[dict]:
        seqs, tokens, ranges = self._skeleton(leaf, comps)
        # Segments in path order: ("raw", start, end) or ("comp", compaction, start, end)
        segments: list[tuple[str, int, int, Any]] = []
        pos = 0
        for start, end, comp in ranges:
            if start > pos:
                segments.append(("raw", pos, start - 1, None))
            segments.append(("comp", start, end, comp))
            pos = end + 1
        if pos < len(seqs):
            segments.append(("raw", pos, len(seqs) - 1, None))
        if newest_first:
            segments.reverse()
        for kind, start, end, comp in segments:
            if kind == "comp":
                yield _overlay(comp, end - start + 1)
                continue
            idx = range(end, start - 1, -1) if newest_first else range(start, end + 1)
            for chunk in _chunks(idx, _BATCH):
                batch = [seqs[i] for i in chunk]
                for seq, raw in zip(batch, self._eng().contents(batch)):
                    message = self._restore(seq, raw)
                    if message is None:
                        return  # deleted since the stream began: it ends here
                    yield message

    def recent_history(
        self, max_bytes: int, *, min_messages: int = 1, leaf_id: str | None = None, compacted: bool = True
    ) -> RecentHistory:
        """The longest suffix of the path within ``max_bytes`` (docs/message-tree.md); cost grows with the window.

        The path is the one :meth:`get_history` returns: with ``compacted=True`` (the
        default) a compaction's summary stands for its range and counts with its own
        stored size, so an app that starts from this window and then mirrors the
        session sees one shape. ``compacted=False`` windows the raw path. The leaf
        and at least ``min_messages`` entries are always included; ``truncated`` is
        True when the window does not start at the root; ``total_content_bytes`` is
        the stored size of the whole raw path.
        """
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        if not isinstance(min_messages, int) or isinstance(min_messages, bool) or min_messages < 1:
            raise ValueError(f"min_messages must be an int >= 1, got {min_messages!r}")
        eng = self._eng()
        if leaf_id is not None:
            leaf_id = _str_arg(leaf_id, "leaf_id")
        start = None if leaf_id is None else self._leaf(leaf_id)  # None: the session's latest row
        if compacted and eng.has_compactions(self.session_id):
            with eng.snapshot():
                leaf = start if start is not None else eng.latest(self.session_id)
                if leaf is None:
                    return RecentHistory([], False, 0)
                return self._compacted_window(leaf, eng.compactions(self.session_id), max_bytes, min_messages)
        chosen: list[tuple[Node, str | None]] = []
        total = 0
        # The first page holds one more than needed: is the next message in the window too?
        for page in eng.walk_pages(self.session_id, start, None, True, first=min(min_messages + 1, 1 << 20)):
            done = False
            for node, raw in page:
                if len(chosen) >= min_messages and total + node.bytes > max_bytes:
                    done = True
                    break
                chosen.append((node, raw))
                total += node.bytes
            if done:
                break
        if not chosen:
            return RecentHistory([], False, 0)
        chosen.reverse()
        msgs: list[dict] = []
        for node, raw in chosen:
            message = self._restore(node.seq, raw)
            if message is None:  # deleted meanwhile: the window ends below it
                msgs.clear()
                continue
            msgs.append(message)
        if not msgs:
            return RecentHistory([], False, 0)
        first = chosen[len(chosen) - len(msgs)][0]
        return RecentHistory(msgs, first.depth > 0, chosen[-1][0].path_bytes)

    def _compacted_window(self, leaf: Node, comps, max_bytes: int, min_messages: int) -> RecentHistory:
        """:meth:`recent_history` where compactions apply: walks up from the leaf reading
        nodes only, as far as the window and the compactions that touch it need."""
        above = _PathAbove(self._eng(), self.session_id, leaf, comps)
        entries: list[tuple[Node, Compaction | None, int]] = []  # (node, or the compaction from it down, size)
        total = 0
        depth = leaf.depth
        while depth >= 0:
            comp = above.span_at(depth)
            if comp is not None:
                first = above.ends[comp.from_id]
                count = depth - first.depth + 1
                size = len(_msg.dumps(_overlay(comp, count)).encode("utf-8"))
                item: tuple[Node, Compaction | None, int] = (first, comp, count)
                below = first.depth - 1
            else:
                node = above.at(depth)
                if node is None:  # deleted meanwhile (outside a snapshot)
                    break
                size, item, below = node.bytes, (node, None, 1), depth - 1
            if len(entries) >= min_messages and total + size > max_bytes:
                break
            entries.append(item)
            total += size
            depth = below
        entries.reverse()
        raw = [node.seq for node, comp, _ in entries if comp is None]
        contents = dict(zip(raw, self._eng().contents(raw)))
        messages: list[dict] = []
        for node, comp, count in entries:
            message = _overlay(comp, count) if comp is not None else self._restore(node.seq, contents.get(node.seq))
            if message is None:  # deleted meanwhile: the window ends below it
                messages.clear()
                continue
            messages.append(message)
        truncated = bool(entries) and entries[0][0].depth > 0
        return RecentHistory(messages, truncated, leaf.path_bytes)

    # -- compaction -----------------------------------------------------------------
    def on_compaction(self, fn: Callable) -> Session:
        """Register ``fn(messages, ctx) -> CompactionResult | None`` (docs/compaction.md)."""
        if not callable(fn):
            raise TypeError("on_compaction needs a callable")
        self._compact_fn = fn
        self._store._keep_session(self)
        return self

    def compact_after(self, tokens: int | None) -> Session:
        """Run the compaction function after appends once the path is above ``tokens``."""
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0):
            raise ValueError(f"tokens must be a non-negative int or None, got {tokens!r}")
        self._compact_after = tokens
        self._store._keep_session(self)
        return self

    def compactions(self) -> list[Compaction]:
        """Every compaction of this session, oldest first."""
        return [c for _, c in self._eng().compactions(self.session_id)]

    def context_tokens(self, leaf_id: str | None = None) -> int:
        """Token estimate of the path as the model sees it (compaction applied); reads no content."""
        leaf = self._leaf(leaf_id)
        if leaf is None:
            return 0
        comps = self._eng().compactions(self.session_id)
        if not comps:
            return leaf.path_tokens
        return self._compacted_tokens(leaf, comps)[0]

    def _compacted_tokens(self, leaf, comps):
        seqs, tokens, ranges = self._skeleton(leaf, comps)
        previous = ranges[-1][2] if ranges else None  # the latest range along the path
        return _model_tokens(tokens, ranges), previous

    def _maybe_compact(self) -> None:
        if self._compact_fn is None or self._compact_after is None:
            return
        try:
            leaf = self._eng().latest(self.session_id)
            if leaf is None:
                return
            comps = self._eng().compactions(self.session_id)
            if comps:
                tokens, previous = self._compacted_tokens(leaf, comps)
            else:
                tokens, previous = leaf.path_tokens, None
            if tokens > self._compact_after:
                self._run_compaction(leaf, tokens, previous)
        except Exception:
            log.exception("sessionkit: compaction of session %r failed; conversation unchanged", self.session_id)

    def compact(self, *, leaf_id: str | None = None) -> Compaction | None:
        """Run the registered compaction function now (docs/compaction.md)."""
        if self._compact_fn is None:
            raise UsageError("no compaction function: call session.on_compaction(fn) first")
        leaf = self._leaf(leaf_id)
        if leaf is None:
            return None
        comps = self._eng().compactions(self.session_id)
        tokens, previous = self._compacted_tokens(leaf, comps) if comps else (leaf.path_tokens, None)
        return self._run_compaction(leaf, tokens, previous)

    def _run_compaction(self, leaf: Node, tokens: int, previous) -> Compaction | None:
        messages = self.get_history(leaf_id=leaf.id)
        ctx = CompactionContext(self, leaf.id, tokens, previous)
        result = self._compact_fn(messages, ctx)  # type: ignore[misc]  # both callers checked it is set
        if result is None:
            return None
        if not isinstance(result, CompactionResult):
            raise TypeError(f"a compaction function must return CompactionResult or None, got {type(result).__name__}")
        return self._store_compaction(leaf, result)

    def _store_compaction(self, leaf: Node, result: CompactionResult) -> Compaction:
        eng = self._eng()
        comps = {c.id: c for _, c in eng.compactions(self.session_id)}
        from_id = _unwrap(result.from_id, comps, "from_id")
        to_id = _unwrap(result.to_id, comps, "to_id")
        _str_arg(result.summary, "CompactionResult.summary")
        path = list(eng.path_skeleton(self.session_id, leaf.seq))
        path.reverse()
        pos = {mid: i for i, (_, mid, _) in enumerate(path)}
        if from_id not in pos or to_id not in pos:
            missing = from_id if from_id not in pos else to_id
            raise ValueError(f"compaction range: {missing!r} is not on the path to {leaf.id!r}")
        a, b = pos[from_id], pos[to_id]
        if a > b:
            raise ValueError(f"compaction range: {from_id!r} comes after {to_id!r} on the path")
        before = sum(t for _, _, t in path[a : b + 1])
        comp_id = uuid.uuid4().hex[:16]
        created = _msg.now_iso()
        probe = _overlay(Compaction(comp_id, from_id, to_id, result.summary, created, before, 0), b - a + 1)
        comp = Compaction(comp_id, from_id, to_id, result.summary, created, before, _msg.estimate_tokens(probe))
        with eng.write():
            eng.w_add_compaction(self.session_id, comp)
        self._store._emit(ChangeEvent("compact", self.session_id, (from_id, to_id), _overlay(comp, b - a + 1)))
        return comp

    def import_compaction(self, compaction: Compaction) -> bool:
        """Store a compaction exactly as given (id, time, token counts), as an import does.

        Used to restore an exported session. No change event, no compaction function
        runs. Returns False when this session already holds a compaction with that id
        (imports are idempotent); an endpoint missing from the session ->
        ``MessageNotFound``, nothing stored.
        """
        if not isinstance(compaction, Compaction):
            raise TypeError(f"import_compaction takes a sessionkit Compaction, got {type(compaction).__name__}")
        comp = compaction
        eng = self._eng()
        for name in ("id", "from_id", "to_id", "summary", "created_at"):
            _str_arg(getattr(comp, name), f"compaction {name}")
        with eng.write():
            if any(c.id == comp.id for _, c in eng.compactions(self.session_id)):
                return False
            for mid in (comp.from_id, comp.to_id):
                if eng.node(self.session_id, mid) is None:
                    raise MessageNotFound(
                        f"compaction {comp.id!r}: message {mid!r} is not in session {self.session_id!r}"
                    )
            eng.w_add_compaction(self.session_id, comp)
        return True

    # -- analysis (pandas loads on first use) ------------------------------------------
    def to_pandas(self):
        """This session's messages as a DataFrame with the columns of the ``messages`` view
        (docs/analysis.md), in write order."""
        return _conveniences.to_pandas(self)

    # -- search and feed ---------------------------------------------------------------
    def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
        """Full-text search in this session only (docs/search.md)."""
        return self._store.search(query, session_id=self.session_id, limit=limit)

    def mirror(
        self, target, *, transform: Callable | None = None, intercept: Callable | None = None
    ) -> Callable[[], None]:
        """Keep ``target`` equal to ``[transform(m) for m in get_history()]`` (docs/message-tree.md)."""
        tf = transform or (lambda m: m)
        if isinstance(target, list):
            get, put = (lambda: target), (lambda v: target.__setitem__(slice(None), v))
        elif hasattr(target, "get") and hasattr(target, "set"):
            get, put = target.get, target.set
        else:
            raise TypeError("mirror target must be a list or have get() and set(list)")
        state = {"last": None}

        def full() -> None:
            hist = self.get_history()
            state["last"] = hist[-1]["id"] if hist else None
            put([tf(m) for m in hist])

        def on_event(ev: ChangeEvent) -> None:
            if ev.session_id != self.session_id:
                return
            if intercept is not None and intercept(ev):
                state["last"] = None  # the caller changed the target: resync fully next time
                return
            if ev.type == "append" and ev.message is not None and state["last"] is not None:
                node = self._eng().node(self.session_id, ev.message["id"])
                if node is not None and node.parent_id == state["last"]:
                    current = list(get())
                    current.append(tf(_msg.deep_copy(ev.message)))  # never the dict append returned
                    put(current)
                    state["last"] = node.id
                    return
            full()

        full()
        return self._store.subscribe(on_event)


# ---------------------------------------------------------------------------
# helpers


def _check_parent(parent_id: Any) -> None:
    _parent_arg(parent_id)


def _require_str(what: str, value: Any) -> None:
    _str_arg(value, what)


def _tree_node(n: Node) -> TreeNode:
    return TreeNode(n.id, n.parent_id, n.depth, n.role, n.tokens, n.bytes, n.created_at, n.seq)


def _created_from(prep) -> str:
    """The creation time to store for a prepared message (its createdAt, else now)."""
    return _msg.normalize_created(prep.created_at) or _msg.now_iso()


def _unwrap(mid: str, comps: dict[str, Compaction], which: str) -> str:
    if not isinstance(mid, str) or not mid:
        raise ValueError(f"CompactionResult.{which} must be a message id")
    if mid.startswith(_parts.OVERLAY_PREFIX):
        comp = comps.get(mid[len(_parts.OVERLAY_PREFIX) :])
        if comp is not None:
            return comp.from_id if which == "from_id" else comp.to_id
    return mid


def _choose_ranges(comps: list[tuple[int, Compaction]], pos: dict[str, int]):
    """Compactions applying to a path: whole range on it; among overlapping ones the newest wins.

    ``pos`` maps message ids to their positions on the path (root = 0); the result is
    ``(start, end, compaction)`` in path order. This is the one place that decides
    what a compaction covers on a path: reads, thresholds and :meth:`Session.path`
    all come here.
    """
    chosen: list[tuple[int, int, Compaction]] = []
    for _, comp in sorted(comps, key=lambda sc: sc[0], reverse=True):
        a, b = pos.get(comp.from_id), pos.get(comp.to_id)
        if a is None or b is None or a > b:
            continue
        if any(not (b < s or a > e) for s, e, _ in chosen):
            continue
        chosen.append((a, b, comp))
    chosen.sort(key=lambda r: r[0])
    return chosen


class _PathAbove:
    """The path above a leaf, read lazily (nodes only, a page at a time), and which
    compactions apply to it where: the rule of :func:`_choose_ranges` (a compaction's
    whole range on the path; among overlapping ones the newest wins), decided only
    for the compactions near the depths asked about."""

    def __init__(self, eng: Engine, sid: str, leaf: Node, comps: list[tuple[int, Compaction]]):
        self.leaf = leaf
        ids = {c.from_id for _, c in comps} | {c.to_id for _, c in comps}
        self.ends = {n.id: n for n in eng.nodes_by_id(sid, sorted(ids))}
        # candidates: both ends stored, the range above the leaf and the right way up
        self.comps = []
        for seq, c in comps:
            a, b = self.ends.get(c.from_id), self.ends.get(c.to_id)
            if a is not None and b is not None and a.depth <= b.depth <= leaf.depth:
                self.comps.append((seq, c, a.depth, b.depth))
        self._nodes: list[Node] = []  # leaf first
        self._pages = (n for page in eng.walk_pages(sid, leaf, None, False) for n, _ in page)
        self._chosen: dict[str, bool] = {}

    def at(self, depth: int) -> Node | None:
        """The path's node at ``depth`` (None when the path ends before it)."""
        want = self.leaf.depth - depth
        while len(self._nodes) <= want:
            node = next(self._pages, None)
            if node is None:
                return None
            self._nodes.append(node)
        return self._nodes[want]

    def _on_path(self, c: Compaction, lo: int, hi: int) -> bool:
        top, bottom = self.at(lo), self.at(hi)
        return top is not None and bottom is not None and top.id == c.from_id and bottom.id == c.to_id

    def _applies(self, seq: int, c: Compaction, lo: int, hi: int) -> bool:
        done = self._chosen.get(c.id)
        if done is None:
            done = self._on_path(c, lo, hi) and not any(
                s > seq and not (top > hi or bottom < lo) and self._applies(s, o, top, bottom)
                for s, o, top, bottom in self.comps
            )
            self._chosen[c.id] = done
        return done

    def span_at(self, depth: int) -> Compaction | None:
        """The compaction whose summary stands for the message at ``depth``, if any."""
        for seq, c, lo, hi in self.comps:
            if lo <= depth <= hi and self._applies(seq, c, lo, hi):
                return c
        return None


def _model_tokens(tokens, ranges) -> int:
    """Tokens of a path as the model sees it: each applied range counts as its summary."""
    total = sum(tokens)
    for start, end, comp in ranges:
        total -= sum(tokens[start : end + 1])
        total += comp.tokens_after
    return total


def _overlay(comp: Compaction, count: int) -> dict:
    """The message a compaction shows as on read (docs/compaction.md)."""
    return _parts.overlay_message(
        id=comp.id,
        from_id=comp.from_id,
        to_id=comp.to_id,
        summary=comp.summary,
        created_at=comp.created_at,
        messages=count,
        tokens_before=comp.tokens_before,
    )


def _chunks(seq, size):
    it = iter(seq)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        yield chunk
