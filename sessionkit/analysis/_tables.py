"""Tables read from any store, as plain Python columns.

Nothing here imports pandas, pyarrow or DuckDB: :mod:`sessionkit.analysis` turns
the columns into DataFrames, Arrow tables (for DuckDB and Parquet) and plots.
Everything is read through the store's public API: a store-wide read pages through
:meth:`Store.scan` (nodes, messages, compactions, runs, events); ``scan=False``
reads session by session through :class:`Session` instead. Both give the same
tables. What a compaction covers and which messages lie on the latest path come
from the store's tree read model (:class:`sessionkit.store.Tree`).
"""

from __future__ import annotations

import itertools
from typing import Any

from .. import messages as _msg
from ..errors import StoreClosed
from ..parts import text_of, tool_names
from ..store import VIEW_COLUMNS, Tree

__all__ = ["D1_COLUMNS", "StoreData", "tool_names", "TABLES"]

#: The columns of ``session.to_pandas()`` / ``store.messages_df()`` (docs/analysis.md), in order:
#: those of the ``messages`` view but its store-wide ``seq`` and ``metadata``.
D1_COLUMNS = tuple(c for c, _ in VIEW_COLUMNS["messages"] if c not in ("seq", "metadata"))

#: Views of ``store.sql`` read here too and files of ``export_parquet`` (the tree views,
#: ``paths``, ``turns`` and ``tool_calls``, are derived from these in SQL only; vectors
#: are not exported).
TABLES = ("messages", "sessions", "compactions", "runs", "events", "labels")

_BATCH = 500
_PAGE = 20_000


class _Facts:
    """What the D1 columns need to know about one session's tree."""

    __slots__ = ("tree", "kids", "on_path", "compacted_by", "sizes")

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.kids: dict[str, int] = {}
        for node in tree.nodes:
            if node.parent_id is not None:
                self.kids[node.parent_id] = self.kids.get(node.parent_id, 0) + 1
        self.on_path = {n.id for n in tree.path()}
        self.compacted_by = tree.compacted_by()
        self.sizes = {p.compaction.id: (p.messages or None) for p in tree.compactions}


class StoreData:
    """A read of a store (or some of its sessions) shaped as tables of Python lists.

    ``session_ids=None`` covers every session: those with messages, and those
    holding only runs, events or compactions. ``scan=False`` reads one session at a
    time through the Session API even where a store-wide scan would do; both give
    the same tables.
    """

    def __init__(self, store, session_ids=None, *, scan: bool = True):
        if store.closed:
            raise StoreClosed("the store is closed")
        self.store = store
        if session_ids is not None:
            if isinstance(session_ids, str):
                session_ids = [session_ids]
            session_ids = list(dict.fromkeys(session_ids))
            for sid in session_ids:
                if not isinstance(sid, str):
                    raise TypeError(f"session ids must be str, got {type(sid).__name__}")
        self._given = session_ids
        #: The store-wide scan, or None when reading session by session.
        self._scan = store.scan if (scan and session_ids is None) else None
        self._ids: list[str] | None = session_ids
        self._nodes: dict[str, list] | None = None
        self._comps: dict[str, list] | None = None
        self._runs: dict[str, list] | None = None
        self._events: dict[str, list] | None = None
        self._facts: dict[str, _Facts] = {}

    # -- reading ------------------------------------------------------------------
    def _grouped(self, kind: str) -> dict[str, list]:
        """Rows of ``kind`` by session, from one scan of the scope."""
        out: dict[str, list] = {}
        if self._scan is None and self._given is None:
            for sid in self.session_ids:
                rows = self._per_session(kind, sid)
                if rows:
                    out[sid] = rows
            return out
        for batch in self.store.scan(kind, session_ids=self._given, batch_size=_PAGE):
            for sid, row in batch:
                out.setdefault(sid, []).append(row)
        return out

    def _per_session(self, kind: str, sid: str) -> list:
        if kind == "nodes":
            return self.store.session(sid).nodes()
        if kind == "compactions":
            return self.store.session(sid).compactions()
        if kind == "runs":
            return self.store.runs(sid)
        return self.store.events(sid)

    @property
    def session_ids(self) -> list[str]:
        """The sessions in scope: with messages (newest activity first), then the others by id."""
        if self._ids is None:
            if self._scan is None:  # session by session: the sessions with messages, then the rest
                listed = [info.id for info in self.store.list_sessions()]
                others: set[str] = set()
                for kind in ("compactions", "runs", "events"):
                    for batch in self.store.scan(kind):
                        others.update(sid for sid, _ in batch)
                self._ids = listed + sorted(others.difference(listed))
            else:
                nodes = self._all("nodes")
                with_messages = sorted(nodes, key=lambda sid: nodes[sid][-1].seq, reverse=True)
                rest = set(self._all("compactions")) | set(self._all("runs")) | set(self._all("events"))
                self._ids = with_messages + sorted(rest.difference(nodes))
        return self._ids

    def _all(self, kind: str) -> dict[str, list]:
        attr = {"nodes": "_nodes", "compactions": "_comps", "runs": "_runs", "events": "_events"}[kind]
        cached = getattr(self, attr)
        if cached is None:
            cached = self._grouped(kind)
            setattr(self, attr, cached)
        return cached

    def nodes(self, sid: str) -> list:
        """The session's :class:`~sessionkit.TreeNode` rows in write order."""
        return self._all("nodes").get(sid, [])

    def compaction_list(self, sid: str) -> list:
        return self._all("compactions").get(sid, [])

    def run_list(self, sid: str) -> list:
        return self._all("runs").get(sid, [])

    def event_list(self, sid: str) -> list:
        return self._all("events").get(sid, [])

    def facts(self, sid: str) -> _Facts:
        """The session's tree and what the D1 columns derive from it."""
        facts = self._facts.get(sid)
        if facts is None:
            facts = self._facts[sid] = _Facts(Tree.build(sid, self.nodes(sid), self.compaction_list(sid)))
        return facts

    def ordered_nodes(self) -> list[tuple[Any, str]]:
        """``(node, session_id)`` of every message in scope, in write order."""
        out = [(n, sid) for sid in self.session_ids for n in self.nodes(sid)]
        if len(self.session_ids) > 1:
            out.sort(key=lambda ns: ns[0].seq)
        return out

    def iter_messages(self):
        """``(node, session_id, message)`` of every message in scope, in write order, read in batches."""
        if self._scan is not None or self._given is not None:
            for batch in self.store.scan("messages", session_ids=self._given, batch_size=_PAGE):
                for sid, node, message in batch:
                    yield node, sid, message
            return
        order = self.ordered_nodes()
        for start in range(0, len(order), _BATCH):
            chunk = order[start : start + _BATCH]
            found: dict[tuple[str, str], dict] = {}
            for sid, group in itertools.groupby(sorted(chunk, key=lambda ns: ns[1]), key=lambda ns: ns[1]):
                got = self.store.session(sid).get_many([n.id for n, _ in group])
                found.update({(sid, k): v for k, v in got.items()})
            for node, sid in chunk:
                message = found.get((sid, node.id))
                if message is not None:  # deleted since the tree was read
                    yield node, sid, message

    # -- tables -----------------------------------------------------------------
    def messages(self, *, extra: bool = False, full_json: bool = False) -> dict[str, list]:
        """D1 columns in write order; ``extra`` adds ``seq`` and ``metadata`` (JSON text),
        ``full_json`` adds those and ``message`` (the whole message as JSON)."""
        names = list(D1_COLUMNS)
        if extra or full_json:
            names += ["seq", "metadata"]
        if full_json:
            names.append("message")
        cols: dict[str, list] = {name: [] for name in names}
        c = [cols[name] for name in D1_COLUMNS]
        seq_col, meta_col, msg_col = cols.get("seq"), cols.get("metadata"), cols.get("message")
        # One pass over the messages; the columns that depend on a session's whole tree
        # are filled after it, from the nodes that pass read (no second read of them).
        collect: dict[str, list] | None = {} if self._nodes is None else None
        where: list[tuple[str, str]] = []
        for n, sid, msg in self.iter_messages():
            if collect is not None:
                collect.setdefault(sid, []).append(n)
            values = (
                sid,
                n.id,
                n.parent_id,
                n.depth,
                n.role,
                text_of(msg),
                len(msg.get("parts") or ()),
                tool_names(msg),
                n.tokens,
                n.bytes,
                n.created_at,
                0,
                False,
                None,
            )
            for col, value in zip(c, values):
                col.append(value)
            where.append((sid, n.id))
            if seq_col is not None:
                seq_col.append(n.seq)
            if meta_col is not None:
                meta = msg.get("metadata")
                meta_col.append(None if meta is None else _msg.dumps(meta))
            if msg_col is not None:
                msg_col.append(_msg.dumps(msg))
        if collect is not None:
            self._nodes = collect
        kids, on_path, compacted_by = cols["n_children"], cols["on_latest_path"], cols["compacted_by"]
        for i, (sid, mid) in enumerate(where):
            facts = self.facts(sid)
            kids[i] = facts.kids.get(mid, 0)
            on_path[i] = mid in facts.on_path
            compacted_by[i] = facts.compacted_by.get(mid)
        return cols

    def sessions(self) -> dict[str, list]:
        names = (
            "session_id",
            "message_count",
            "roots",
            "leaves",
            "branch_points",
            "max_depth",
            "tokens",
            "bytes",
            "latest_leaf",
            "created_at",
            "updated_at",
            "compaction_count",
            "run_count",
        )
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            nodes = self.nodes(sid)
            runs = self.run_list(sid)
            if not nodes and not runs and not self.compaction_list(sid) and not self.event_list(sid):
                continue
            facts = self.facts(sid)
            kids, latest = facts.kids, facts.tree.latest_id
            values = (
                sid,
                len(nodes),
                sum(1 for n in nodes if n.parent_id is None),
                sum(1 for n in nodes if n.id not in kids),
                sum(1 for v in kids.values() if v > 1),
                max((n.depth for n in nodes), default=None),
                sum(n.tokens for n in nodes),
                sum(n.bytes for n in nodes),
                latest,
                min((n.created_at for n in nodes), default=None),
                max((n.created_at for n in nodes), default=None),
                len(self.compaction_list(sid)),
                len(runs),
            )
            for name, value in zip(names, values):
                cols[name].append(value)
        return cols

    def compactions(self) -> dict[str, list]:
        names = (
            "session_id",
            "id",
            "from_id",
            "to_id",
            "summary",
            "created_at",
            "tokens_before",
            "tokens_after",
            "message_count",
        )
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            comps = self.compaction_list(sid)
            if not comps:
                continue
            ranges = self.facts(sid).sizes
            for c in comps:
                values = (
                    sid,
                    c.id,
                    c.from_id,
                    c.to_id,
                    c.summary,
                    c.created_at,
                    c.tokens_before,
                    c.tokens_after,
                    ranges.get(c.id),
                )
                for name, value in zip(names, values):
                    cols[name].append(value)
        return cols

    def runs(self) -> dict[str, list]:
        names = (
            "session_id",
            "run_id",
            "status",
            "error",
            "input",
            "started_at",
            "ended_at",
            "tokens_in",
            "tokens_out",
            "cache_read",
            "cache_write",
            "cost_usd",
            "model",
            "usage",
            "started_at_message",
            "variant",
            "meta",
        )
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            for r in self.run_list(sid):
                usage = r.usage if isinstance(r.usage, dict) else {}
                meta = r.meta if isinstance(r.meta, dict) else {}
                values = (
                    r.session_id,
                    r.run_id,
                    r.status,
                    r.error,
                    r.input,
                    r.started_at,
                    r.ended_at,
                    _int(usage.get("in")),
                    _int(usage.get("out")),
                    _int(usage.get("cache_read")),
                    _int(usage.get("cache_write")),
                    _float(usage.get("cost_usd")),
                    usage.get("model") if isinstance(usage.get("model"), str) else None,
                    None if r.usage is None else _msg.dumps(r.usage),
                    meta.get("at") if isinstance(meta.get("at"), str) else None,
                    meta.get("variant") if isinstance(meta.get("variant"), str) else None,
                    None if r.meta is None else _msg.dumps(r.meta),
                )
                for name, value in zip(names, values):
                    cols[name].append(value)
        return cols

    def events(self) -> dict[str, list]:
        names = ("session_id", "seq", "run_id", "kind", "ts", "data")
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            for ev in self.event_list(sid):
                values = (sid, ev.get("seq"), ev.get("run_id"), ev.get("kind"), ev.get("ts"), _msg.dumps(ev))
                for name, value in zip(names, values):
                    cols[name].append(value)
        return cols

    def labels(self) -> dict[str, list]:
        """The ``labels`` view's columns (but ``seq``) from :meth:`Store.labels`, session by session."""
        names: tuple[str, ...] = ("session_id", "id", "message_id", "target", "tag", "rating", "note", "author")
        names += ("created_at", "source", "scorer", "rationale")
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            for label in self.store.labels(session_id=sid):
                for name in names:
                    cols[name].append(getattr(label, name))
        return cols

    def table(self, name: str, **options) -> dict[str, list]:
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; tables are {', '.join(TABLES)}")
        return getattr(self, name)(**options)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
