"""Tables read from any store, as plain Python columns.

Nothing here imports pandas, pyarrow or DuckDB: :mod:`sessionkit.analysis` turns
the columns into DataFrames, Arrow tables (for DuckDB and Parquet) and plots.
A store-wide read of a SQLite or DuckDB store scans their shared ``sessionkit_*``
tables with a few paged queries; anything else (one session, other engines)
reads through the Engine interface (``nodes``, ``contents``, ``compactions``,
``runs``, ``events``, ``list_sessions``). Both give the same tables.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .. import messages as _msg
from ..store._core import Compaction, Node, RunRecord

__all__ = ["D1_COLUMNS", "StoreData", "tool_names", "TABLES"]

#: The columns of ``session.to_pandas()`` / ``store.messages_df()`` (SPEC D1), in order.
D1_COLUMNS = (
    "session_id",
    "id",
    "parent_id",
    "depth",
    "role",
    "text",
    "n_parts",
    "tool_names",
    "tokens",
    "bytes",
    "created_at",
    "n_children",
    "on_latest_path",
    "compacted_by",
)

#: Views of ``store.sql`` and files of ``export_parquet``.
TABLES = ("messages", "sessions", "compactions", "runs", "events")

_BATCH = 500


def tool_names(message: dict) -> list[str]:
    """Names of the tool parts of a message, one per call, in part order."""
    out = []
    for part in message.get("parts") or ():
        if not isinstance(part, dict):
            continue
        ptype = part.get("type")
        if isinstance(ptype, str):
            if ptype.startswith("tool-"):
                out.append(ptype[5:])
            elif ptype == "dynamic-tool" and isinstance(part.get("toolName"), str):
                out.append(part["toolName"])
    return out


_NODE_COLS = "seq, id, parent_id, depth, bytes, tokens, path_bytes, path_tokens, created_at, role"
_PAGE = 20_000


def _scanner(engine):
    """The engine's SQL helper when its tables follow the shared ``sessionkit_*`` layout, else None.

    The SQLite and DuckDB engines share that layout; reading it with a few paged
    queries is far cheaper than several queries per session (DuckDB spends about
    a millisecond on any statement). Engines without it use the Engine interface.
    """
    query = getattr(engine, "_q", None)
    if not callable(query) or getattr(engine, "kind", None) not in ("sqlite", "duckdb"):
        return None
    return query


class StoreData:
    """A read of a store (or some of its sessions) shaped as tables of Python lists.

    ``session_ids=None`` covers every session: those with messages, and those
    holding only runs, events or compactions. ``scan=False`` forces reads through
    the Engine interface (one session at a time) even where a store-wide scan is
    available; both give the same tables.
    """

    def __init__(self, store, session_ids=None, *, scan: bool = True):
        self.store = store
        self.engine = store._check()
        self._nodes: dict[str, list] = {}
        self._comps: dict[str, list] = {}
        self._facts: dict[str, tuple] = {}
        self._runs: dict[str, list] | None = None
        self._events: dict[str, list] | None = None
        self._scan = _scanner(self.engine) if (scan and session_ids is None) else None
        if self._scan is not None:
            try:
                self._load_scan()
            except Exception:  # a layout this reader does not know: fall back to the interface
                self._scan = None
                self._nodes, self._comps = {}, {}
                self._runs = self._events = None
        if self._scan is not None:
            return
        if session_ids is None:
            infos = self.engine.list_sessions()
            ids = [i.id for i in infos]
            extra = {sid for sid in self.store._sessions if sid not in set(ids)}
            self.session_ids = ids + sorted(sid for sid in extra if self.engine.session_exists(sid))
        else:
            if isinstance(session_ids, str):
                session_ids = [session_ids]
            ids = list(dict.fromkeys(session_ids))
            for sid in ids:
                if not isinstance(sid, str):
                    raise TypeError(f"session ids must be str, got {type(sid).__name__}")
            self.session_ids = ids

    def _load_scan(self) -> None:
        q = self._scan
        nodes: dict[str, list] = {}
        last = 0
        while True:  # paged by seq so memory per query stays bounded
            rows = q(f"SELECT session_id, {_NODE_COLS} FROM sessionkit_messages WHERE seq > ? "
                     f"ORDER BY seq LIMIT {_PAGE}", [last])
            for r in rows:
                nodes.setdefault(r[0], []).append(Node(*r[1:]))
            if len(rows) < _PAGE:
                break
            last = rows[-1][1]
        comps: dict[str, list] = {}
        for r in q("SELECT session_id, id, from_id, to_id, summary, created_at, tokens_before, tokens_after "
                   "FROM sessionkit_compactions ORDER BY seq"):
            comps.setdefault(r[0], []).append(Compaction(*r[1:]))
        runs: dict[str, list] = {}
        for r in q("SELECT run_id, session_id, status, error, started_at, ended_at, usage, input "
                   "FROM sessionkit_runs ORDER BY session_id, n"):
            usage = json.loads(r[6]) if r[6] else None
            runs.setdefault(r[1], []).append(RunRecord(r[0], r[1], r[2], r[3], r[4], r[5], usage, r[7]))
        events: dict[str, list] = {}
        for sid, data in q("SELECT session_id, data FROM sessionkit_events ORDER BY session_id, seq"):
            events.setdefault(sid, []).append(json.loads(data))
        # sessions with messages, newest activity first (as list_sessions orders them), then the rest
        with_messages = sorted(nodes, key=lambda sid: nodes[sid][-1].seq, reverse=True)
        rest = sorted((set(comps) | set(runs) | set(events)) - set(nodes))
        self.session_ids = with_messages + rest
        self._nodes = nodes
        self._comps = comps
        self._runs, self._events = runs, events

    def _contents(self, nodes: list) -> list[str]:
        """Stored JSON of ``nodes`` (from one session or several), in order."""
        if self._scan is None or len(nodes) < 2:
            return self.engine.contents([n.seq for n in nodes])
        lo, hi = nodes[0].seq, nodes[-1].seq
        found = {}
        long = []
        for seq, chunks, content in self._scan(
            "SELECT seq, chunks, content FROM sessionkit_messages WHERE seq >= ? AND seq <= ?", [lo, hi]
        ):
            if chunks:
                long.append(seq)
            else:
                found[seq] = content
        if long:
            found.update(zip(long, self.engine.contents(long)))
        return [found[n.seq] for n in nodes]

    # -- per session ------------------------------------------------------------
    def nodes(self, sid: str) -> list:
        if sid not in self._nodes:
            self._nodes[sid] = [] if self._scan is not None else self.engine.nodes(sid)
        return self._nodes[sid]

    def compaction_list(self, sid: str) -> list:
        if sid not in self._comps:
            self._comps[sid] = [] if self._scan is not None else [c for _, c in self.engine.compactions(sid)]
        return self._comps[sid]

    def run_list(self, sid: str) -> list:
        if self._runs is not None:
            return self._runs.get(sid, [])
        return self.engine.runs(sid)

    def event_list(self, sid: str) -> list:
        if self._events is not None:
            return self._events.get(sid, [])
        return self.engine.events(sid, None)

    def _tree_facts(self, sid: str):
        if sid not in self._facts:
            self._facts[sid] = self._compute_facts(sid)
        return self._facts[sid]

    def _compute_facts(self, sid: str):
        nodes = self.nodes(sid)
        by_id = {n.id: n for n in nodes}
        kids = Counter(n.parent_id for n in nodes if n.parent_id is not None)
        latest = max(nodes, key=lambda n: n.seq) if nodes else None  # the latest leaf (SPEC W4)
        on_path: set[str] = set()
        cur = latest
        while cur is not None:
            on_path.add(cur.id)
            cur = by_id.get(cur.parent_id) if cur.parent_id is not None else None
        compacted_by: dict[str, str] = {}
        ranges: dict[str, int | None] = {}
        for comp in self.compaction_list(sid):  # oldest first: a newer one covering a message wins
            span = _range(by_id, comp.from_id, comp.to_id)
            ranges[comp.id] = None if span is None else len(span)
            for mid in span or ():
                compacted_by[mid] = comp.id
        return by_id, kids, latest, on_path, compacted_by, ranges

    # -- tables -----------------------------------------------------------------
    def ordered_nodes(self) -> list[tuple[Any, str]]:
        """``(node, session_id)`` of every message in scope, in write order."""
        out = [(n, sid) for sid in self.session_ids for n in self.nodes(sid)]
        if len(self.session_ids) > 1:
            out.sort(key=lambda ns: ns[0].seq)
        return out

    def iter_contents(self):
        """``(node, session_id, stored JSON)`` in write order, read in bounded batches."""
        order = self.ordered_nodes()
        size = _PAGE if self._scan is not None else _BATCH
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            raws = self._contents([n for n, _ in chunk])
            for (n, sid), raw in zip(chunk, raws):
                yield n, sid, raw

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
        text_of = _msg.message_text
        for n, sid, raw in self.iter_contents():
            _, kids, _, on_path, compacted_by, _ = self._tree_facts(sid)
            msg = _msg.decode_stored(raw)  # caller keys as written (see messages._escape_keys)
            values = (
                sid, n.id, n.parent_id, n.depth, n.role, text_of(msg), len(msg.get("parts") or ()),
                tool_names(msg), n.tokens, n.bytes, n.created_at, kids.get(n.id, 0), n.id in on_path,
                compacted_by.get(n.id),
            )
            for col, value in zip(c, values):
                col.append(value)
            if seq_col is not None:
                seq_col.append(n.seq)
                meta = msg.get("metadata")
                meta_col.append(None if meta is None else _msg.dumps(meta))
            if msg_col is not None:
                msg_col.append(_msg.dumps(_msg.restore(raw, self.engine.blob)) if _msg._BLOB_KEY in raw else raw)
        return cols

    def sessions(self) -> dict[str, list]:
        names = ("session_id", "message_count", "roots", "leaves", "branch_points", "max_depth", "tokens",
                 "bytes", "latest_leaf", "created_at", "updated_at", "compaction_count", "run_count")
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            nodes = self.nodes(sid)
            runs = self.run_list(sid)
            if not nodes and not runs and not self.compaction_list(sid) and not self.event_list(sid):
                continue
            _, kids, latest, _, _, _ = self._tree_facts(sid)
            values = (
                sid,
                len(nodes),
                sum(1 for n in nodes if n.parent_id is None),
                sum(1 for n in nodes if n.id not in kids),
                sum(1 for v in kids.values() if v > 1),
                max((n.depth for n in nodes), default=None),
                sum(n.tokens for n in nodes),
                sum(n.bytes for n in nodes),
                None if latest is None else latest.id,
                min((n.created_at for n in nodes), default=None),
                max((n.created_at for n in nodes), default=None),
                len(self.compaction_list(sid)),
                len(runs),
            )
            for name, value in zip(names, values):
                cols[name].append(value)
        return cols

    def compactions(self) -> dict[str, list]:
        names = ("session_id", "id", "from_id", "to_id", "summary", "created_at", "tokens_before",
                 "tokens_after", "message_count")
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            comps = self.compaction_list(sid)
            if not comps:
                continue
            ranges = self._tree_facts(sid)[5]
            for c in comps:
                values = (sid, c.id, c.from_id, c.to_id, c.summary, c.created_at, c.tokens_before,
                          c.tokens_after, ranges.get(c.id))
                for name, value in zip(names, values):
                    cols[name].append(value)
        return cols

    def runs(self) -> dict[str, list]:
        names = ("session_id", "run_id", "status", "error", "input", "started_at", "ended_at",
                 "tokens_in", "tokens_out", "cache_read", "cache_write", "cost_usd", "model", "usage")
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            for r in self.run_list(sid):
                usage = r.usage if isinstance(r.usage, dict) else {}
                values = (
                    r.session_id, r.run_id, r.status, r.error, r.input, r.started_at, r.ended_at,
                    _int(usage.get("in")), _int(usage.get("out")), _int(usage.get("cache_read")),
                    _int(usage.get("cache_write")), _float(usage.get("cost_usd")),
                    usage.get("model") if isinstance(usage.get("model"), str) else None,
                    None if r.usage is None else _msg.dumps(r.usage),
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

    def table(self, name: str, **options) -> dict[str, list]:
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; tables are {', '.join(TABLES)}")
        return getattr(self, name)(**options)


def _range(by_id: dict, from_id: str, to_id: str) -> list[str] | None:
    """Ids from ``to_id`` up to ``from_id`` (both included), or None when not one path."""
    out = []
    cur = by_id.get(to_id)
    while cur is not None:
        out.append(cur.id)
        if cur.id == from_id:
            return out
        cur = by_id.get(cur.parent_id) if cur.parent_id is not None else None
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
