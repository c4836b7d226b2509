"""The store's value types: what its methods take and return (results, events, compactions,
runs, the tree read model and its views of a path), and the engines' row tuple ``Node``."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import (
    MessageNotFound,
)

if TYPE_CHECKING:  # (annotations only: the modules import each other)
    from ..messages import Prepared
    from ._session import Session


class _Latest:
    """Sentinel: attach to the session's latest leaf (docs/message-tree.md)."""

    _instance = None

    def __new__(cls) -> _Latest:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "sessionkit.LATEST"

    def __reduce__(self) -> tuple[type[_Latest], tuple[()]]:
        return (_Latest, ())


LATEST = _Latest()


@dataclass(frozen=True)
class AppendResult:
    """What an append or import did: ``inserted`` is False when the id was already stored."""

    inserted: bool
    message: dict[str, Any]

    @classmethod
    def _stored(cls, prepared: Prepared) -> AppendResult:
        """The result of storing ``prepared`` (a messages.Prepared): ``message`` is its copy,
        decoded on first read, so an append whose result goes unread never builds it."""
        result = object.__new__(cls)
        object.__setattr__(result, "inserted", True)
        object.__setattr__(result, "_prepared", prepared)
        return result

    def __getattr__(self, name: str) -> dict[str, Any]:  # only for attributes not set: ``message`` of a _stored result
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

    type: str  # append | update | delete | clear | compact | label
    session_id: str
    message_ids: tuple[str, ...]
    message: dict[str, Any] | None = None


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
    messages: list[dict[str, Any]]
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
    usage: dict[str, Any] | None
    input: str | None = None
    #: What the run was, as :meth:`StoreRunLog.begin` recorded it (a JSON object; docs/agents.md):
    #: ``at``, the message its turn hangs under, and for a variant or a replay its labels.
    meta: dict[str, Any] | None = None


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
    _tree_index: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _tree_children: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

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
SCAN_KINDS = ("nodes", "messages", "compactions", "runs", "events", "embeddings")


class Appended(enum.Enum):
    """What an engine's fast append did (``Engine.append_fast``)."""

    #: Stored (a chain: every message of it).
    INSERTED = "inserted"
    #: A message with that id is stored already: nothing was written.
    EXISTS = "exists"
    #: The parent named is not in the session: nothing was written.
    NO_PARENT = "no-parent"
    #: No fast path for this write here: the general one writes it.
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do beyond the primitives every engine has, declared by the engine.

    ``bulk_insert``: the engine inserts a batch of messages in a few statements
    (``Engine.w_insert_many``), used by :meth:`Session.import_many`.
    ``coordination``: several processes may serve one store at once; the store
    offers cross-process holds and signals (``store.coordination``, else ``None``),
    which the HTTP server uses to share sessions.
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
