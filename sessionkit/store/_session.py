"""The Session: one conversation tree (appends, imports, reads, compaction, mirrors) over an engine."""

from __future__ import annotations

import logging
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

from .. import messages as _msg
from ..errors import (
    MessageNotFound,
    StoreCorrupt,
    UsageError,
)
from . import _conveniences, _labels
from ._args import _BATCH, _check_parent, _created_from, _parent_arg, _require_str, _str_arg
from ._engine import Engine
from ._overlay import _choose_ranges, _chunks, _model_tokens, _overlay, _PathAbove, _tree_node, _unwrap
from ._values import (
    LATEST,
    Appended,
    AppendResult,
    ChangeEvent,
    Compaction,
    CompactionContext,
    CompactionResult,
    CompactionSpan,
    Node,
    PathView,
    RecentHistory,
    Tree,
    TreeNode,
)
from .search import SearchHit

if TYPE_CHECKING:  # (annotations only: the modules import each other)
    import pandas as pd

    from ._facets import StoreRunLog
    from ._store import Store
    from ._values import _Latest

log = logging.getLogger("sessionkit")


class Session:
    """One conversation tree in a store. Get it with ``store.session(id)``."""

    def __init__(self, store: Store, session_id: str):
        self._store = store
        self.session_id = session_id
        self._compact_fn: Callable[..., Any] | None = None
        self._compact_after: int | None = None

    def __repr__(self) -> str:
        return f"<sessionkit.Session {self.session_id!r} in {self._store!r}>"

    def _repr_mimebundle_(
        self, include: object = None, exclude: object = None
    ) -> dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]:
        """Notebook display: a BranchTree widget when ipywidgets is installed, else static HTML."""
        return _conveniences.session_bundle(self)

    def _ipython_display_(self) -> None:
        """IPython display: the tree's snapshot, then the BranchTree widget that replaces it where it renders."""
        _conveniences.display_session(self)

    def _repr_html_(self) -> str:
        """A script-free HTML snapshot of the tree (nbconvert, GitHub)."""
        return _conveniences.session_html(self)

    @property
    def can_branch(self) -> bool:
        """True: a store session is a tree, a turn may hang under any of its messages."""
        return True

    @property
    def store(self) -> Store:
        return self._store

    @property
    def run_log(self) -> StoreRunLog:
        """Where this session's runs and events are recorded: its store's ``store.run_log``."""
        return self._store.run_log

    def _eng(self) -> Engine:
        return self._store._check()

    # -- writing ------------------------------------------------------------------
    def append(self, message: dict[str, Any], *, parent_id: Any = LATEST, source: str = "server") -> AppendResult:
        """Add a message (docs/message-tree.md). Idempotent on ``message["id"]``: the first write wins."""
        strip = self._strip_for(source)
        result = self._write([self._prepare(message, strip, None)], _parent_arg(parent_id), created_at=None)[0]
        if result.inserted:
            self._announce([result])
            self._maybe_compact()
        return result

    def append_many(
        self, messages: Iterable[dict[str, Any]], *, parent_id: Any = LATEST, source: str = "server"
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
        preps = [self._prepare(m, strip, None) for m in messages]  # validate all first
        results = self._write(preps, _parent_arg(parent_id), created_at=None)
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

    def import_message(
        self, message: dict[str, Any], *, parent_id: str | None = None, created_at: Any = None
    ) -> AppendResult:
        """Store a message as is (docs/message-tree.md): no change event, never triggers compaction.

        ``created_at`` (a datetime or epoch milliseconds) becomes the message's
        ``createdAt`` as well as its row's time, so the two never disagree.
        """
        parent_id = _parent_arg(parent_id)
        iso = _msg.to_iso(created_at) if created_at is not None else None
        prep = self._prepare(message, (), iso, set_created=iso)
        return self._write([prep], parent_id, created_at=iso, fast=False)[0]

    def import_many(self, items: Iterable[tuple[dict[str, Any], Any, Any]]) -> list[AppendResult]:
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
        return self._store._import_records(eng, [(self.session_id, _import_rows(self._store, items))])[0]

    def _prepare(
        self, message: Any, strip: tuple[str, ...], created_at: str | None, set_created: str | None = None
    ) -> _msg.Prepared:
        return _msg.prepare(
            message,
            created_at=created_at,
            strip_metadata_keys=strip,
            max_bytes=self._store.max_message_bytes,
            set_created=set_created,
        )

    def _write(
        self, preps: list[_msg.Prepared], parent_id: str | _Latest | None, *, created_at: str | None, fast: bool = True
    ) -> list[AppendResult]:
        """The one way a session writes messages: ``preps`` as a chain under ``parent_id``
        (each under the one before), row times ``created_at`` or each message's own.

        Outside a transaction the engine's fast append may store them in one go (not for
        imports, ``fast=False``: a fast append is an append, which an engine shared by
        several processes announces to the others); what it does not take (or a
        transaction joined) is one batch insert in a write transaction, which finds ids
        already stored and unknown parents.
        """
        if not preps:
            return []
        eng = self._eng()
        sid = self.session_id
        stamps = [created_at or _created_from(prep) for prep in preps]
        if fast and not self._store._in_transaction():  # a fast append commits on its own: not inside one
            if eng.append_fast(sid, preps, parent_id, stamps) is Appended.INSERTED:
                return [AppendResult._stored(prep) for prep in preps]  # prepare() made private copies
        rows = []
        parent = parent_id
        for prep, stamp in zip(preps, stamps):
            rows.append((prep, parent, stamp))
            parent = prep.id
        with eng.write():
            results = eng.w_insert_many(sid, rows, eng.index.maintained())
            old = [seq for inserted, seq in results if not inserted]
            stored: dict[int, dict[str, Any]] = {}
            for chunk in _chunks(old, _BATCH):
                stored.update(zip(chunk, self._load(chunk)))  # (in this write transaction: they are there)
        return [
            AppendResult._stored(prep) if inserted else AppendResult(False, stored[seq])
            for prep, (inserted, seq) in zip(preps, results)
        ]

    def update(self, message: dict[str, Any]) -> dict[str, Any]:
        """Replace the stored content of ``message["id"]`` (its place in the tree stays)."""
        eng = self._eng()
        _msg.validate(message)
        with eng.write():
            node = eng.node(self.session_id, message["id"])
            if node is None:
                raise MessageNotFound(f"message {message['id']!r} is not in session {self.session_id!r}")
            if message.get("createdAt") is None:  # keep the stored creation time, as written
                stored = cast("dict[str, Any]", self._read(node.seq))  # in this write transaction: it is there
                message = dict(message, createdAt=stored.get("createdAt", node.created_at))
            prep = self._prepare(message, (), node.created_at)
            eng.w_update(self.session_id, node, prep, eng.index.maintained())
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
    def _read(self, seq: int) -> dict[str, Any] | None:
        """The stored message of a row; None when it was deleted meanwhile."""
        return self._restore(seq, self._eng().contents([seq])[0])

    def _restore(self, seq: int, raw: str | None) -> dict[str, Any] | None:
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

    def get(self, id: str) -> dict[str, Any] | None:
        """The message with this id, or None."""
        eng = self._eng()
        with eng.snapshot():
            node = eng.node(self.session_id, _str_arg(id, "id"))
            return None if node is None else self._read(node.seq)

    def latest_leaf(self) -> dict[str, Any] | None:
        """The latest leaf (docs/message-tree.md), or None in an empty session."""
        eng = self._eng()
        with eng.snapshot():
            node = eng.latest(self.session_id)
            return None if node is None else self._read(node.seq)

    def branches(self, id: str) -> list[dict[str, Any]]:
        """Direct children of a message, oldest first."""
        eng = self._eng()
        id = _str_arg(id, "id")
        with eng.snapshot():
            if eng.node(self.session_id, id) is None:
                raise MessageNotFound(f"message {id!r} is not in session {self.session_id!r}")
            kids = eng.children(self.session_id, id)
            return self._load([k.seq for k in kids])

    def roots(self) -> list[dict[str, Any]]:
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

    def get_many(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
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
        out: dict[str, dict[str, Any]] = {}
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

    def path_slice(self, start: int, count: int, *, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """The raw messages at depths ``start`` .. ``start + count - 1`` of the path to ``leaf_id``
        (default: the latest leaf), root first; compaction ignored, as in ``compacted=False``.

        Reads as one state of the store: the nodes from the leaf up to depth ``start``
        without content, then the content of the slice only, so a page of a long path
        costs its own messages' content (``path_slice(0, n)`` is ``get_history(compacted=False)[:n]``).
        Past the leaf -> ``[]``; an unknown ``leaf_id`` -> ``MessageNotFound``.
        """
        for name, value in (("start", start), ("count", count)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        eng = self._eng()
        with eng.snapshot():
            leaf = self._leaf(leaf_id)
            if leaf is None or count == 0 or start > leaf.depth:
                return []
            span = leaf.depth - start + 1
            if span <= count:  # the slice ends at the leaf: one walk, content included
                rows = eng.walk(self.session_id, leaf, span, True)
                rows.reverse()
                return [m for m in (self._restore(n.seq, raw) for n, raw in rows) if m is not None]
            nodes = [n for n, _ in eng.walk(self.session_id, leaf, span, False)]
            nodes.reverse()
            return self._load([n.seq for n in nodes[:count]])

    def __len__(self) -> int:
        return self._eng().count(self.session_id)

    def _load(self, seqs: list[int]) -> list[dict[str, Any]]:
        """The messages of these rows, in order; rows deleted meanwhile are left out."""
        out = []
        for seq, raw in zip(seqs, self._eng().contents(seqs)):
            message = self._restore(seq, raw)
            if message is not None:
                out.append(message)
        return out

    def history(
        self, *, leaf_id: str | None = None, newest_first: bool = False, compacted: bool = True
    ) -> Iterator[dict[str, Any]]:
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
        eng = self._eng()
        comps = eng.compactions(self.session_id) if compacted else []
        if newest_first and not comps:
            return self._walk_up(leaf)
        if not comps:
            runs = eng.path_runs(self.session_id, leaf)
            if runs is not None:
                return self._walk_runs(runs)
        return self._walk_skeleton(leaf, comps, newest_first)

    def get_history(self, *, leaf_id: str | None = None, compacted: bool = True) -> list[dict[str, Any]]:
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
            read = None if comps else self._read_runs(eng, leaf)
            created: list[str | None] | None = None
            if read is None:
                seqs, ids, raws, created = eng.walk_contents(self.session_id, leaf, leaf.depth + 1)
                seqs.reverse()
                ids.reverse()
                raws.reverse()
                if created is not None:
                    created.reverse()
            else:
                seqs, raws, created = read
            # Read in one snapshot: every row of the path is there (no None). The messages
            # restored together; on a damaged payload, row by row as _restore says.
            try:
                messages = _msg.restore_many(raws, eng.blob, created)
            except StoreCorrupt:
                whens = created or [None] * len(raws)
                messages = cast(
                    "list[dict[str, Any]]",
                    [_with_created(self._restore(seq, raw), w) for seq, raw, w in zip(seqs, raws, whens)],
                )
        if not comps:
            return messages
        ends = {c.from_id for _, c in comps} | {c.to_id for _, c in comps}
        ranges = _choose_ranges(comps, {mid: i for i, mid in enumerate(ids) if mid in ends})
        out: list[Any] = []
        pos = 0
        for start, end, comp in ranges:
            out += messages[pos:start]
            out.append(_overlay(comp, end - start + 1))
            pos = end + 1
        out += messages[pos:]
        return out

    def snapshot(self) -> list[dict[str, Any]]:
        """A deep copy of the latest path, compaction applied."""
        return self.get_history()

    def _read_runs(self, eng: Engine, leaf: Node) -> tuple[list[int], list[str], list[str | None] | None] | None:
        """The seqs and stored JSON of the path to ``leaf``, root first, with the createdAt
        each JSON leaves out (as :meth:`Engine.rows_between` gives them), read run by run in
        a statement each (no id or parent read to follow the path); None where the engine
        tells no runs or a run is not what it said (then the path is walked row by row)."""
        runs = eng.path_runs(self.session_id, leaf)
        if runs is None or runs[0][2] != 0:
            return None
        seqs: list[int] = []
        raws: list[str] = []
        created: list[str | None] | None = None
        for lo, hi, depth, n in runs:
            run_seqs, depths, run_raws, run_created = eng.rows_between(self.session_id, lo, hi, n)
            if depths != list(range(depth, depth + n)):
                return None
            if run_created is not None:
                created = (created or [None] * len(seqs)) + run_created
            elif created is not None:
                created += [None] * len(run_seqs)
            seqs += run_seqs
            raws += run_raws
        return seqs, raws, created

    def _walk_runs(self, runs: list[tuple[int, int, int, int]]) -> Iterator[dict[str, Any]]:
        # history() root first where the engine tells the path's runs: each run read in
        # batches of consecutive rows, oldest first.
        eng = self._eng()
        for lo, hi, depth, n in runs:
            while n > 0:
                want = min(n, _BATCH)
                seqs, depths, raws, created = eng.rows_between(self.session_id, lo, hi, want)
                got = len(depths)
                if depths != list(range(depth, depth + got)):  # a row deleted meanwhile
                    got = next(i for i, d in enumerate(depths) if d != depth + i)
                try:
                    messages = _msg.restore_many(raws[:got], eng.blob, created)
                except StoreCorrupt:
                    messages = []
                    for seq, raw, when in zip(seqs[:got], raws, created or [None] * got):
                        message = _with_created(self._restore(seq, raw), when)
                        if message is None:
                            break
                        messages.append(message)
                    got = len(messages)
                yield from messages
                if got < want:
                    return  # deleted since the stream began: it ends here
                n -= got
                depth += got
                lo = seqs[got - 1] + 1

    def _walk_up(self, leaf: Node) -> Iterator[dict[str, Any]]:
        # Pages start small and grow: a caller taking the newest few reads little.
        for page in self._eng().walk_pages(self.session_id, leaf, None, True, first=16):
            for node, raw in page:
                message = self._restore(node.seq, raw)
                if message is None:
                    return  # deleted meanwhile: the path ends here
                yield message

    def _skeleton(
        self, leaf: Node, comps: list[tuple[int, Compaction]]
    ) -> tuple[array[int], array[int], list[tuple[int, int, Compaction]]]:
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

    def _walk_skeleton(
        self, leaf: Node, comps: list[tuple[int, Compaction]], newest_first: bool
    ) -> Iterator[dict[str, Any]]:
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
        if start is None:
            quick = self._newest_window(eng, max_bytes, min_messages)
            if quick is not None:
                return quick
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
        try:
            msgs = _msg.restore_many([cast(str, raw) for _, raw in chosen], eng.blob)
        except StoreCorrupt:  # a payload went with its row: row by row, as _restore says
            msgs = []
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

    def _newest_window(self, eng: Engine, max_bytes: int, min_messages: int) -> RecentHistory | None:
        """:meth:`recent_history` of the latest path read as the session's newest rows, in
        batches that grow (the first holds ``min_messages + 1``), with no object per row;
        None where the path leaves them (a branch, a row deleted meanwhile, a long
        message, an engine that reads otherwise): the general walk then."""
        size = min(min_messages + 1, 1 << 20)
        chosen: list[tuple[int, str, str | None, int, int, int, str]] = []
        total, below = 0, None
        want: str | None = None
        while True:
            rows = eng.newest_rows(self.session_id, size, below)
            if not rows:
                return None  # none (an empty session) or no more: the general walk says why
            for row in rows:
                mid, parent, nbytes = row[1], row[2], row[3]
                if chosen and mid != want:
                    return None  # the path leaves the session's newest rows (a branch)
                if len(chosen) >= min_messages and total + nbytes > max_bytes:
                    break
                chosen.append(row)
                total += nbytes
                want = parent
                if parent is None:
                    break
            else:
                below, size = rows[-1][0], min(size * 4, 4096)
                continue
            break
        chosen.reverse()
        try:
            msgs = _msg.restore_many([r[6] for r in chosen], eng.blob)
        except StoreCorrupt:
            return None  # a payload went with its row: the general walk, row by row
        return RecentHistory(msgs, chosen[0][4] > 0, chosen[-1][5])

    def _compacted_window(
        self, leaf: Node, comps: list[tuple[int, Compaction]], max_bytes: int, min_messages: int
    ) -> RecentHistory:
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
        messages: list[dict[str, Any]] = []
        for node, comp, count in entries:
            message = _overlay(comp, count) if comp is not None else self._restore(node.seq, contents.get(node.seq))
            if message is None:  # deleted meanwhile: the window ends below it
                messages.clear()
                continue
            messages.append(message)
        truncated = bool(entries) and entries[0][0].depth > 0
        return RecentHistory(messages, truncated, leaf.path_bytes)

    # -- compaction -----------------------------------------------------------------
    def on_compaction(self, fn: Callable[..., Any]) -> Session:
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

    def _compacted_tokens(self, leaf: Node, comps: list[tuple[int, Compaction]]) -> tuple[int, Compaction | None]:
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

    def _run_compaction(self, leaf: Node, tokens: int, previous: Compaction | None) -> Compaction | None:
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
    def to_pandas(self) -> pd.DataFrame:
        """This session's messages as a DataFrame with the columns of the ``messages`` view
        (docs/analysis.md), in write order."""
        return _conveniences.to_pandas(self)

    # -- labels (docs/labels.md) ---------------------------------------------------------
    def add_label(
        self,
        message_id: str,
        tag: str,
        *,
        rating: float | None = None,
        note: str | None = None,
        author: str | None = None,
        target: str = "message",
        source: str = "human",
        scorer: str | None = None,
        rationale: str | None = None,
    ) -> _labels.Label:
        """Put a label on a message (``target="message"``) or on the branch that ends at it
        (``target="branch"``); returns it with its new id. ``source`` says who made it
        (``"human"``, or ``"code"`` / ``"llm"`` with the ``scorer``'s ``"name@version"``),
        ``rationale`` why (docs/judging.md). ``InvalidLabel`` for a refused tag, rating,
        note, author or provenance and ``MessageNotFound`` for an unknown message: nothing
        is stored then."""
        return _labels.add(
            self,
            message_id,
            tag,
            rating=rating,
            note=note,
            author=author,
            target=target,
            source=source,
            scorer=scorer,
            rationale=rationale,
        )

    def remove_label(self, label_id: str) -> bool:
        """Remove a label of this session by id; whether there was one."""
        return _labels.remove(self._store, label_id, self.session_id)

    def labels(
        self,
        message_id: str | Iterable[str] | None = None,
        *,
        tag: str | Iterable[str] | None = None,
        author: str | None = None,
        min_rating: float | None = None,
        max_rating: float | None = None,
        target: str | None = None,
        source: str | None = None,
        scorer: str | None = None,
    ) -> list[_labels.Label]:
        """This session's labels (of ``message_id``, one id or several, when given) matching
        every filter given, in the order they were added (see :meth:`Store.labels`)."""
        return _labels.listing(
            self._store,
            session_id=self.session_id,
            message_id=message_id,
            tag=tag,
            author=author,
            min_rating=min_rating,
            max_rating=max_rating,
            target=target,
            source=source,
            scorer=scorer,
        )

    # -- search and feed ---------------------------------------------------------------
    def search(self, query: str, *, limit: int = 10, labels: str | Iterable[str] | None = None) -> list[SearchHit]:
        """Full-text search in this session only (docs/search.md)."""
        return self._store.search(query, session_id=self.session_id, limit=limit, labels=labels)

    def mirror(
        self,
        target: Any,
        *,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        intercept: Callable[[ChangeEvent], Any] | None = None,
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
            if ev.session_id != self.session_id or ev.type == "label":  # (no message changed)
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


def _import_rows(store: Store, items: Iterable[Any]) -> list[tuple[_msg.Prepared, str | _Latest | None, str]]:
    """``import_many`` items as the engine writes them: ``(prepared message, parent_id, row
    time)``, every message validated (raises the first invalid one's error)."""
    rows = []
    for item in items:
        try:
            message, parent_id, created_at = item
        except (TypeError, ValueError):
            raise TypeError("import_many takes (message, parent_id, created_at) items") from None
        _check_parent(parent_id)
        iso = _msg.to_iso(created_at) if created_at is not None else None
        prep = _msg.prepare(message, created_at=iso, max_bytes=store.max_message_bytes)
        rows.append((prep, _parent_arg(parent_id), iso or _created_from(prep)))
    return rows


def _with_created(message: dict[str, Any] | None, when: str | None) -> dict[str, Any] | None:
    """A message restored from JSON that left out its createdAt ``when`` (see
    :meth:`Engine.rows_between`; None: it did not), with it put back as its last key."""
    if message is not None and when is not None:
        message["createdAt"] = when
    return message
