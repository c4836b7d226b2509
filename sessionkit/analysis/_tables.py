"""Tables built from any store through the engine interface, as plain Python columns.

Nothing here imports pandas, pyarrow or DuckDB: :mod:`sessionkit.analysis` turns
the columns into DataFrames, Arrow tables (for DuckDB and Parquet) and plots.
Every engine provides the reads used here (``nodes``, ``contents``,
``compactions``, ``runs``, ``events``, ``list_sessions``), so the tables look
the same whatever engine holds the store.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .. import messages as _msg

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


def _run_only_session_ids(engine) -> set[str]:
    """Sessions holding runs, events or compactions but no message (SQL engines sharing the schema)."""
    query = getattr(engine, "_q", None)
    if not callable(query):
        return set()
    ids: set[str] = set()
    for table in ("sessionkit_runs", "sessionkit_events", "sessionkit_compactions"):
        try:
            ids.update(r[0] for r in query(f'SELECT DISTINCT session_id FROM "{table}"'))
        except Exception:  # an engine with another layout: its message sessions still count
            continue
    return ids


class StoreData:
    """A read of a store (or some of its sessions) shaped as tables of Python lists.

    ``session_ids=None`` covers every session (those with messages, and those
    with only runs or events where the engine can list them).
    """

    def __init__(self, store, session_ids=None):
        self.store = store
        self.engine = store._check()
        if session_ids is None:
            infos = self.engine.list_sessions()
            self.infos = {i.id: i for i in infos}
            known = [i.id for i in infos]
            extra = _run_only_session_ids(self.engine) - set(known)
            self.session_ids = known + sorted(extra)
        else:
            if isinstance(session_ids, str):
                session_ids = [session_ids]
            ids = list(dict.fromkeys(session_ids))
            for sid in ids:
                if not isinstance(sid, str):
                    raise TypeError(f"session ids must be str, got {type(sid).__name__}")
            wanted = set(ids)
            self.infos = {i.id: i for i in self.engine.list_sessions() if i.id in wanted}
            self.session_ids = ids
        self._nodes: dict[str, list] = {}
        self._comps: dict[str, list] = {}
        self._facts: dict[str, tuple] = {}

    # -- per session ------------------------------------------------------------
    def nodes(self, sid: str) -> list:
        if sid not in self._nodes:
            self._nodes[sid] = self.engine.nodes(sid)
        return self._nodes[sid]

    def compaction_list(self, sid: str) -> list:
        if sid not in self._comps:
            self._comps[sid] = [c for _, c in self.engine.compactions(sid)]
        return self._comps[sid]

    def _tree_facts(self, sid: str):
        if sid not in self._facts:
            self._facts[sid] = self._compute_facts(sid)
        return self._facts[sid]

    def _compute_facts(self, sid: str):
        nodes = self.nodes(sid)
        by_id = {n.id: n for n in nodes}
        kids = Counter(n.parent_id for n in nodes if n.parent_id is not None)
        latest = self.engine.latest(sid) if nodes else None
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
    def messages(self, *, extra: bool = False, full_json: bool = False) -> dict[str, list]:
        """D1 columns in write order; ``extra`` adds ``seq`` and ``metadata`` (JSON text),
        ``full_json`` adds ``message`` (the whole message as JSON)."""
        rows: list[tuple] = []
        for sid in self.session_ids:
            nodes = self.nodes(sid)
            if not nodes:
                continue
            _, kids, _, on_path, compacted_by, _ = self._tree_facts(sid)
            for start in range(0, len(nodes), _BATCH):
                chunk = nodes[start : start + _BATCH]
                raws = self.engine.contents([n.seq for n in chunk])
                for n, raw in zip(chunk, raws):
                    msg = json.loads(raw)
                    meta = msg.get("metadata")
                    whole = None
                    if full_json:
                        whole = _msg.dumps(_msg.restore(raw, self.engine.blob)) if _msg._BLOB_KEY in raw else raw
                    row = (
                        sid,
                        n.id,
                        n.parent_id,
                        n.depth,
                        n.role,
                        _msg.message_text(msg),
                        len(msg.get("parts") or ()),
                        tool_names(msg),
                        n.tokens,
                        n.bytes,
                        n.created_at,
                        kids.get(n.id, 0),
                        n.id in on_path,
                        compacted_by.get(n.id),
                        n.seq,
                        None if meta is None else _msg.dumps(meta),
                        whole,
                    )
                    rows.append(row)
        if len(self.session_ids) > 1:
            rows.sort(key=lambda r: r[14])
        names = list(D1_COLUMNS)
        if extra or full_json:
            names += ["seq", "metadata"]
        if full_json:
            names.append("message")
        cols = {name: [] for name in names}
        for i, name in enumerate(names):
            cols[name] = [r[i] for r in rows]
        return cols

    def sessions(self) -> dict[str, list]:
        names = ("session_id", "message_count", "roots", "leaves", "branch_points", "max_depth", "tokens",
                 "bytes", "latest_leaf", "created_at", "updated_at", "compaction_count", "run_count")
        cols: dict[str, list] = {n: [] for n in names}
        for sid in self.session_ids:
            nodes = self.nodes(sid)
            info = self.infos.get(sid)
            if not nodes and info is None and not self.compaction_list(sid) and not self.engine.runs(sid) \
                    and not self.engine.events(sid, None):
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
                None if info is None else info.created_at,
                None if info is None else info.updated_at,
                len(self.compaction_list(sid)),
                len(self.engine.runs(sid)),
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
            for r in self.engine.runs(sid):
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
            for ev in self.engine.events(sid, None):
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
