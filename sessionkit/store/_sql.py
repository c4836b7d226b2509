"""The storage layer every engine shares: one DB-API engine base driven by per-dialect SQL.

Each fact lives here once: the tables and their columns (:data:`TABLES`), the one
schema ledger every engine follows (:data:`MIGRATIONS`), row mapping, continuation
rows of long messages, payload references and their collection, path totals,
delete and clear cascades, compactions, runs, events and records. An engine
(``engines/sqlite``, ``engines/duckdb``, ``engines/postgresql``) is a subclass that supplies what
truly differs: its connection and transaction model, locking, its search index,
its fast append path and its driver's errors.

Statements are written once, with ``?`` parameters and ``{name}`` fields:
``{messages}`` and the other table names (quoted and, on PostgreSQL, qualified by
the store's schema), ``{node}`` (the columns of a :class:`Node`), and the list
fragments ``{in_seqs}``, ``{in_ids}``, ``{in_shas}`` (membership in one list
parameter: ``IN (SELECT value FROM json_each(?))`` on SQLite,
``IN (SELECT unnest(?::BIGINT[]))`` on DuckDB, ``= ANY(?::bigint[])`` on
PostgreSQL; pass the values through :meth:`SQLEngine.listed`). A
:class:`Dialect` compiles them once per engine (PostgreSQL's ``%s`` placeholders
included), and an engine overrides a statement by name only where its SQL must
differ.

The tables, the ledger and the dialects are data, in :mod:`._schema` (their names are
importable from here too).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from .. import messages as _msg
from ..errors import MessageNotFound, StoreClosed, StoreCorrupt
from ._schema import (
    SCHEMA_VERSION,
    TEXT_AT,
    prepared_getter,
)
from ._sql_base import SQLBase
from ._values import LATEST, Compaction, Node, RunRecord, SessionInfo, _Latest

if TYPE_CHECKING:
    from .sql.cache import AnalysisSource

__all__ = ["SQLEngine", "LocalEngine"]


def _run_record(row: tuple[Any, ...], meta: str | None) -> RunRecord:
    """A run record from ``run_id, session_id, status, error, started_at, ended_at, usage, input`` and its meta."""
    usage = json.loads(row[6]) if row[6] else None
    return RunRecord(row[0], row[1], row[2], row[3], row[4], row[5], usage, row[7], json.loads(meta) if meta else None)


#: The statements of the imports of facts as they are (``w_import_*``, ``scan_embeddings``).
_FACT_STATEMENTS = {
    "import_run": (
        "INSERT INTO {runs} (run_id, session_id, status, input, error, started_at, ended_at, usage, meta, n)"
        " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, coalesce(max(n), 0) + 1 FROM {runs} WHERE session_id = ?"
    ),
    "events_at": "SELECT seq, data FROM {events} WHERE session_id = ? AND seq {in_seqs}",
    "vectors_at": "SELECT model, seq FROM {embeddings} WHERE seq {in_seqs}",
    "vector_sessions": "SELECT DISTINCT session_id FROM {embeddings} ORDER BY 1",
    "vectors_of": "SELECT message_id, model, vector FROM {embeddings} WHERE session_id = ? ORDER BY seq, model",
}


# ---------------------------------------------------------------------------
# The engine base


class SQLEngine(SQLBase):
    """An engine over a DB-API driver: the shared half of every engine.

    Subclasses set :attr:`dialect` and :attr:`driver_errors` and implement the
    connection model (:meth:`connection`, :meth:`write`, :meth:`snapshot`), the
    driver's error mapping (:meth:`translate`), the catalog probe
    (:meth:`table_exists`), its search index (:attr:`INDEX`, a :class:`SearchIndex`)
    and, where they have one, a fast append (:meth:`append_fast`).
    """

    #: Rows a path read takes in one statement at most.
    PAGE = 256
    #: Whether writes in place are recorded in ``sessionkit_changes`` (for analysis caches).
    CHANGE_LOG = True
    #: Whether paths are read as range scans of their runs (see :meth:`walk`); engines
    #: without an index on ``(session_id, seq)`` follow parents one key at a time.

    # -- reads ---------------------------------------------------------------------
    def node(self, sid: str, mid: str) -> Node | None:
        self.before_read(sid)
        row = self.fetch_one(self.sql["node"], (sid, mid))
        return None if row is None else Node(*row)

    def nodes_by_id(self, sid: str, mids: Iterable[str]) -> list[Node]:
        mids = list(mids)
        if not mids:
            return []
        self.before_read(sid)
        return [Node(*r) for r in self.fetch(self.sql["nodes_by_id"], (sid, self.listed(mids)))]

    def latest(self, sid: str) -> Node | None:
        self.before_read(sid)
        row = self.fetch_one(self.sql["latest"], (sid,))
        return None if row is None else Node(*row)

    def children(self, sid: str, mid: str) -> list[Node]:
        self.before_read(sid)
        return [Node(*r) for r in self.fetch(self.sql["children"], (sid, mid))]

    def nodes(self, sid: str) -> list[Node]:
        self.before_read(sid)
        return [Node(*r) for r in self.fetch(self.sql["nodes"], (sid,))]

    def walk(self, sid: str, start: Node, limit: int, content: bool) -> list[tuple[Node, str | None]]:
        """``(node, stored JSON or None)`` from ``start`` (included) towards the root,
        at most ``limit`` rows, leaf first (see :meth:`walk_pages`)."""
        out: list[tuple[Node, str | None]] = []
        for page in self.walk_pages(sid, start, limit, content):
            out += page
        return out

    def walk_pages(
        self,
        sid: str,
        start: Node | None,
        limit: int | None,
        content: bool,
        *,
        first: int | None = None,
        largest: int | None = None,
    ) -> Iterator[list[tuple[Node, str | None]]]:
        """The path from ``start`` towards the root in pages of ``(node, stored JSON or
        None)``, leaf first, at most ``limit`` rows in all; the first page holds at most
        ``first`` rows, later ones grow (a caller that stops early reads no older rows)
        up to ``largest`` rows (default :attr:`PAGE`).

        Conversations grow by appending under the newest message, so a path is
        mostly runs of consecutive rows of its session: each run is read with range
        scans in write order, and only where a run breaks (a branch) is the next
        parent found by its key. A row deleted meanwhile ends the path there.
        """
        remaining = _UNLIMITED if limit is None else limit
        if remaining <= 0:
            return
        self.before_read(sid)
        cap = largest or self.PAGE
        size = min(first or cap, cap) if content else 4 * cap
        # Without a start, the session's newest row: its latest leaf (nothing is newer).
        want: str | None | _Any = _ANY if start is None else start.id
        seq = _MAX_SEQ if start is None else start.seq
        name = "scan_down_content" if content else "scan_down"
        while want is not None and remaining > 0:
            n = min(remaining, size)
            rows = self.fetch(self.sql[name], (sid, seq, n))
            page = []
            for r in rows:
                if r[1] != want and want is not _ANY:
                    break
                node = Node(*r[:10])
                page.append((node, self._joined(r) if content else None))
                want = node.parent_id
                if want is None:
                    break
            if page:
                if content:
                    self._join_chunks(page)
                remaining -= len(page)
                yield page
            if want is None or want is _ANY or remaining <= 0:
                return  # the root, an empty session, or enough
            size = min(size * 4, cap if content else 16 * cap)
            if len(page) == n and rows[-1][1] == page[-1][0].id:
                seq = page[-1][0].seq - 1  # the run goes on past this page
                continue
            parent = self.node(sid, cast(str, want))  # a branch point: the parent is elsewhere
            if parent is None:
                return  # deleted meanwhile: the path ends here
            seq = parent.seq

    def newest_rows(
        self, sid: str, n: int, below: int | None = None
    ) -> list[tuple[int, str, str | None, int, int, int, str]] | None:
        self.before_read(sid)
        rows = self.fetch(self.sql["newest_lean"], (sid, _MAX_SEQ if below is None else below, n))
        if any(r[6] for r in rows):
            return None  # a row continues in chunk rows: the engine's pages join them
        whole = self.whole_json
        return [(r[0], r[1], r[2], r[3], r[4], r[5], whole(r[7], r[8])) for r in rows]

    def walk_contents(
        self, sid: str, start: Node, limit: int
    ) -> tuple[list[int], list[str], list[str], list[str | None] | None]:
        """As :meth:`walk_pages` reads a path, for a caller that keeps all of it and needs
        no :class:`Node`: each run of consecutive rows in one statement of six columns
        (a whole path is one statement where it never branches), taken a few hundred rows
        at a time into a list per column (no object per row for the garbage collector to
        count), with the createdAt each JSON leaves out as :meth:`rows_between` gives it. A
        row deleted meanwhile ends the path there."""
        self.before_read(sid)
        seqs: list[int] = []
        ids: list[str] = []
        chunks: list[int] = []
        raws: list[str] = []
        stamps: list[str] = []
        want: str | None = start.id
        seq, remaining = start.seq, limit
        while want is not None and remaining > 0:
            seq_col, id_col, parent_col, chunk_col, raw_col, stamp_col = self.fetch_columns(
                self.sql["scan_down_lean"], (sid, seq, remaining), 6
            )
            n = 0
            for mid, parent in zip(id_col, parent_col):
                if mid != want:
                    break
                want = parent
                n += 1
                if want is None:
                    break
            seqs += seq_col[:n]
            ids += id_col[:n]
            chunks += chunk_col[:n]
            raws += raw_col[:n]
            stamps += stamp_col[:n]
            remaining -= n
            if want is None or remaining <= 0 or n in (0, len(seq_col)):
                break  # the root, enough, or the row wanted is gone (deleted meanwhile)
            parent_node = self.node(sid, want)  # a branch point: the parent is elsewhere
            if parent_node is None:
                break  # deleted meanwhile: the path ends here
            seq = parent_node.seq
        contents, created = self._as_read(seqs, chunks, raws, stamps)
        return seqs, ids, contents, created

    def rows_between(
        self, sid: str, lo: int, hi: int, limit: int
    ) -> tuple[list[int], list[int], list[str], list[str | None] | None]:
        seqs, depths, chunks, raws, stamps = self.fetch_columns(self.sql["rows_between"], (sid, lo, hi, limit), 5)
        contents, created = self._as_read(seqs, chunks, raws, stamps)
        return seqs, depths, contents, created

    def _as_read(
        self, seqs: list[int], chunks: list[int], raws: list[str], stamps: list[str]
    ) -> tuple[list[str], list[str | None] | None]:
        """Rows' stored JSON (``raws``, each row's ``created_at`` in ``stamps``) as a path
        read hands them to ``messages.restore_many``: continued in their chunk rows where
        ``chunks`` says so, and, where the engine leaves createdAt out of a row (see
        row_json), as stored with the createdAt to add after decoding: putting it back in
        the text would copy each string only for the decoder to read it. A row continued
        in chunk rows is never shortened."""
        whole = self.whole_json
        created: list[str | None] | None = None
        out: list[Any]
        if whole is with_created_at:
            out = raws
            created = [c if not n and raw[-1] == " " else None for raw, c, n in zip(raws, stamps, chunks)]
        else:
            out = [whole(raw, c) if not n else raw for raw, c, n in zip(raws, stamps, chunks)]
        if any(chunks):
            out = [raw if not n else _Pending(q, raw) for q, n, raw in zip(seqs, chunks, out)]
            self._fill_pending(seqs, out)
        return out, created

    def _fill_pending(self, seqs: list[int], raws: list[Any]) -> None:
        """Each :class:`_Pending` in ``raws`` (the row ``seqs[i]``) joined with its chunk rows."""
        waiting = [i for i, c in enumerate(raws) if isinstance(c, _Pending)]
        rest = self._chunk_rows([seqs[i] for i in waiting])
        for i in waiting:
            raws[i] = raws[i].head + "".join(rest.get(seqs[i], ()))

    def _joined(self, row: Sequence[Any]) -> Any:
        # (…node, chunks, content): content continues in chunk rows when chunks > 0; then
        # a _Pending that _join_chunks replaces with the joined text
        return self.whole_json(row[11], row[8]) if not row[10] else _Pending(row[0], row[11])

    def row_json(self, prep: _msg.Prepared, created_at: str) -> str:
        """The JSON a row of ``prep`` keeps (before its continuation rows are split off),
        its ``created_at`` column being ``created_at``: the stored JSON here; an engine
        that leaves out what the row's columns hold overrides it and :meth:`whole_json`."""
        return prep.stored_json

    @staticmethod
    def whole_json(raw: str, created_at: str) -> str:
        """A row's stored JSON as :meth:`row_json` gave it, whole again (a row that
        continues in chunk rows is never shortened): the same JSON here."""
        return raw

    def _join_chunks(self, out: list[Any]) -> None:
        pending = [i for i, (_, c) in enumerate(out) if isinstance(c, _Pending)]
        if not pending:
            return
        rest = self._chunk_rows([out[i][1].seq for i in pending])
        for i in pending:
            node, p = out[i]
            out[i] = (node, p.head + "".join(rest.get(p.seq, ())))

    def _chunk_rows(self, seqs: list[int]) -> dict[int, list[str]]:
        rest: dict[int, list[str]] = {}
        for part in _split(seqs, 1000):
            for seq, data in self.fetch(self.sql["chunks_of"], (self.listed(part),)):
                rest.setdefault(seq, []).append(data)
        return rest

    def ancestors(self, sid: str, seq: int, limit: int | None) -> list[Node]:
        """Nodes from ``seq`` (included) towards the root, at most ``limit``."""
        if limit is not None and limit <= 0:
            return []
        row = self.fetch_one(self.sql["node_at"], (seq,))
        if row is None:
            return []
        return [n for n, _ in self.walk(sid, Node(*row), _UNLIMITED if limit is None else limit, False)]

    def path_skeleton(self, sid: str, seq: int) -> Iterator[tuple[int, str, int]]:
        """``(seq, id, tokens)`` from the row ``seq`` up to the root, streamed in pages."""
        row = self.fetch_one(self.sql["node_at"], (seq,))
        if row is None:
            return
        for page in self.walk_pages(sid, Node(*row), None, False):
            for n, _ in page:
                yield n.seq, n.id, n.tokens

    def contents(self, seqs: list[int]) -> list[str | None]:
        """Stored JSON for each seq, in the given order; None for a row deleted meanwhile."""
        if not seqs:
            return []
        found: dict[int, str] = {}
        long: list[tuple[int, str]] = []
        for part in _split(list(seqs), 1000):
            for seq, chunks, content, created in self.fetch(self.sql["contents"], (self.listed(part),)):
                if chunks:
                    long.append((seq, content))
                else:
                    found[seq] = self.whole_json(content, created)
        if long:
            rest = self._chunk_rows([s for s, _ in long])
            for seq, head in long:
                found[seq] = head + "".join(rest.get(seq, ()))
        return [found.get(s) for s in seqs]

    def blob(self, sha: str) -> bytes:
        row = self.fetch_one(self.sql["blob"], (sha,))
        if row is None:
            raise StoreCorrupt(f"store {self.path or ':memory:'}: payload {sha} is missing")
        return bytes(row[0])

    def count(self, sid: str) -> int:
        self.before_read(sid)
        return self.fetch_one(self.sql["count"], (sid,))[0]

    def list_sessions(self) -> list[SessionInfo]:
        return [SessionInfo(*r) for r in self.fetch(self.sql["list_sessions"])]

    def sessions_holding(self, sids: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for part in _split(list(sids), 1000):
            out.update(r[0] for r in self.fetch(self.sql["sessions_holding"], (self.listed(part),)))
        return out

    def session_exists(self, sid: str) -> bool:
        return bool(self.fetch_one(self.sql["session_exists"], (sid,) * 5)[0])

    def compactions(self, sid: str) -> list[tuple[int, Compaction]]:
        self.before_read(sid)
        return [(r[0], Compaction(*r[1:])) for r in self.fetch(self.sql["compactions"], (sid,))]

    def has_compactions(self, sid: str) -> bool:
        return self.fetch_one(self.sql["has_compactions"], (sid,)) is not None

    def stats(self) -> dict[str, Any]:
        sessions, messages, compactions, blobs, blob_bytes, runs, events = self.fetch_one(self.sql["counts"])
        return {
            "engine": self.kind,
            "schema_version": SCHEMA_VERSION,
            "sessions": sessions,
            "messages": messages,
            "compactions": compactions,
            "blobs": blobs,
            "blob_bytes": int(blob_bytes),
            "indexed_messages": self.index.count(),
            "runs": runs,
            "events": events,
            "bytes": self.size_bytes(),
        }

    def size_bytes(self) -> int:
        return 0

    def runs(self, sid: str) -> list[RunRecord]:
        return [_run_record(r[:8], r[8]) for r in self.fetch(self.sql["runs"], (sid,))]

    def events(self, sid: str, after_seq: int | None) -> list[dict[str, Any]]:
        rows = self.fetch(self.sql["events"], (sid, -1 if after_seq is None else int(after_seq)))
        return [json.loads(r[0]) for r in rows]

    def records(self, sid: str, kind: str) -> list[tuple[int, str]]:
        return [(r[0], r[1]) for r in self.fetch(self.sql["records"], (sid, kind))]

    # -- store-wide scans (Store.scan): one query a page ------------------------------
    def scan_session_ids(self) -> list[str]:
        listed = [r[0] for r in self.fetch(self.sql["scan_sessions"])]
        seen = set(listed)
        return listed + [r[0] for r in self.fetch(self.sql["scan_side_sessions"]) if r[0] not in seen]

    def scan_nodes(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, Node]]]:
        if session_ids is not None:  # some sessions: each through its own index range
            yield from super().scan_nodes(session_ids, batch_size)
            return
        for rows in self._pages_by_seq("scan_nodes", batch_size):
            yield [(r[0], Node(*r[1:])) for r in rows]

    def scan_compactions(
        self, session_ids: list[str] | None, batch_size: int
    ) -> Iterator[list[tuple[str, Compaction]]]:
        if session_ids is not None:
            yield from super().scan_compactions(session_ids, batch_size)
            return
        for rows in self._pages_by_seq("scan_compactions", batch_size):
            yield [(r[0], Compaction(*r[2:])) for r in rows]

    def scan_runs(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, RunRecord]]]:
        if session_ids is not None:
            yield from super().scan_runs(session_ids, batch_size)
            return
        for page in self._keyset("scan_runs", batch_size, key=lambda r: (r[1], r[8])):
            yield [(r[1], _run_record(r[:8], r[9])) for r in page]

    def scan_events(self, session_ids: list[str] | None, batch_size: int) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        if session_ids is not None:
            yield from super().scan_events(session_ids, batch_size)
            return
        for page in self._keyset("scan_events", batch_size, key=lambda r: (r[0], r[1])):
            yield [(r[0], json.loads(r[2])) for r in page]

    def _pages_by_seq(self, name: str, batch_size: int) -> Iterator[list[Any]]:
        """Pages of a statement ordered by ``seq`` (its rows' second column), each after the last."""
        last = 0
        while True:
            rows = self.fetch(self.sql[name], (last, batch_size))
            if not rows:
                return
            last = rows[-1][1]
            yield rows

    def _keyset(self, name: str, batch_size: int, key: Callable[[Any], tuple[str, int]]) -> Iterator[list[Any]]:
        """Pages of a statement ordered by ``(session_id, number)``, each after the last."""
        sid, n = "", -(1 << 62)
        while True:
            rows = self.fetch(self.sql[name], (sid, sid, n, batch_size))
            if not rows:
                return
            sid, n = key(rows[-1])
            yield rows

    # -- writes: messages ----------------------------------------------------------
    def split(self, content: str) -> tuple[str, list[str]]:
        """A stored JSON's head (kept in the row) and its continuation rows."""
        head, rest = content[: self._chunk], content[self._chunk :]
        return head, [rest[i : i + self._chunk] for i in range(0, len(rest), self._chunk)]

    @staticmethod
    def placed(prep: _msg.Prepared, parent: Node | None, created_at: str, seq: int = -1) -> Node:
        """The Node a message gets under ``parent``: depth and the path's running totals."""
        if parent is None:
            return Node(seq, prep.id, None, 0, prep.bytes, prep.tokens, prep.bytes, prep.tokens, created_at, prep.role)
        return Node(
            seq,
            prep.id,
            parent.id,
            parent.depth + 1,
            prep.bytes,
            prep.tokens,
            parent.path_bytes + prep.bytes,
            parent.path_tokens + prep.tokens,
            created_at,
            prep.role,
        )

    def message_values(self, sid: str, node: Node, head: str, nchunks: int, prep: _msg.Prepared) -> tuple[Any, ...]:
        """The values of :data:`INSERT_COLUMNS` (``STATEMENTS["insert"]``)."""
        return (
            sid,
            node.id,
            node.parent_id,
            node.depth,
            node.role,
            node.created_at,
            node.bytes,
            node.tokens,
            node.path_bytes,
            node.path_tokens,
            nchunks,
            *self.prepared_values(prep),
            head,
        )

    def prepared_values(self, prep: _msg.Prepared) -> tuple[Any, ...]:
        """The values of :data:`PREPARED_COLUMNS` for ``prep`` (``text`` as :meth:`stored_text` gives it)."""
        values = prepared_getter(prep)
        stored = self.kept_text(prep)
        return values if stored is values[TEXT_AT] else (*values[:TEXT_AT], stored, *values[TEXT_AT + 1 :])

    #: Whether statements read a message's text from its JSON where the ``text`` column is
    #: NULL (``Dialect.message_text``), so rows keep it only where the JSON cannot give it.
    TEXT_FROM_JSON = False

    def kept_text(self, prep: _msg.Prepared) -> str | None:
        """What a new row of ``prep`` keeps in the ``text`` column: :meth:`stored_text`, or
        with :attr:`TEXT_FROM_JSON` None unless the row's JSON continues in chunk rows or the
        text holds NUL (which the JSON functions end the text at, on SQLite)."""
        text = prep.text
        if self.TEXT_FROM_JSON and len(prep.stored_json) <= self._chunk and "\x00" not in text:
            return None
        return self.stored_text(text)

    def stored_text(self, text: str | None) -> str | None:
        """The analysis ``text`` column's value for a message's text (an engine whose text
        type cannot hold a character replaces it; the message itself keeps it)."""
        return text

    def insert_one(
        self, sid: str, prep: _msg.Prepared, parent: Node | None, created_at: str, index: bool
    ) -> Node | None:
        """Insert one planned message row (its parent found) unless (sid, id) is stored:
        the new Node, or None when it was (:meth:`insert_planned` writes a batch with it)."""
        node = self.placed(prep, parent, created_at)
        head, chunks = self.split(self.row_json(prep, node.created_at))
        seq = self.insert_row(sid, prep, node, parent, head, len(chunks), index)
        if seq is None:
            return None
        node = node._replace(seq=seq)
        self.put_chunks(seq, chunks)
        if prep.blobs:
            self.put_blobs(seq, prep.blobs)
        self.index.added(sid, seq, prep, len(chunks), index)
        return node

    def insert_row(
        self, sid: str, prep: _msg.Prepared, node: Node, parent: Node | None, head: str, nchunks: int, index: bool
    ) -> int | None:
        """Insert a message row unless its id is stored; the new seq, or None."""
        row = self.fetch_one(self.sql["insert"], self.message_values(sid, node, head, nchunks, prep))
        return None if row is None else row[0]

    def w_insert_many(
        self, sid: str, items: Sequence[tuple[_msg.Prepared, str | _Latest | None, str]], index: bool
    ) -> list[tuple[bool, int]]:
        """Insert ``(prep, parent_id, created_at)`` in order (``parent_id``: an id, None
        or LATEST), as a caller doing each lookup and insert in turn would; returns
        ``(inserted, seq)`` per item. An id already stored (or earlier in the batch)
        is left alone; an unknown parent raises MessageNotFound unless the message
        itself exists."""
        if not items:
            return []
        wanted = {prep.id for prep, _, _ in items}
        wanted.update(p for _, p, _ in items if isinstance(p, str))
        known = {n.id: n for n in self.nodes_by_id(sid, sorted(wanted))}
        latest: Node | None = None
        latest_read = False
        plan: list[tuple[Any, ...]] = []  # (prep, node, parent) of the rows to insert, in order
        result: list[tuple[bool, str]] = []
        for prep, parent_id, created_at in items:
            mid = prep.id
            if parent_id is LATEST:
                if not latest_read:
                    latest, latest_read = self.latest(sid), True
                parent = latest
            elif parent_id is None:
                parent = None
            else:
                parent = known.get(cast(str, parent_id))  # (LATEST and None handled above)
                if parent is None:
                    if mid in known:
                        result.append((False, mid))
                        continue
                    raise MessageNotFound(f"parent message {parent_id!r} is not in session {sid!r}")
            if mid in known:
                result.append((False, mid))
                continue
            node = self.placed(prep, parent, created_at)
            known[mid] = node
            latest, latest_read = node, True
            plan.append((prep, node, parent))
            result.append((True, mid))
        if plan:
            for node, inserted in self.insert_planned(sid, plan, index):
                known[node.id] = node
                if not inserted:  # written meanwhile by another process: stored, not by this call
                    result = [(False, mid) if mid == node.id else (ins, mid) for ins, mid in result]
        return [(ins, known[mid].seq) for ins, mid in result]

    def insert_planned(
        self, sid: str, plan: list[tuple[_msg.Prepared, Node, Node | None]], index: bool
    ) -> list[tuple[Node, bool]]:
        """Write planned rows ``(prep, node, parent)`` (parents resolved); each row's stored
        Node and whether this call inserted it (False: another process wrote its id first)."""
        out = []
        by_id: dict[str, Node] = {}
        for prep, node, parent in plan:
            if parent is not None and parent.id in by_id:
                parent = by_id[parent.id]
            stored = self.insert_one(sid, prep, parent, node.created_at, index)
            inserted = stored is not None
            if stored is None:  # written meanwhile by another process
                stored = cast(Node, self.node(sid, prep.id))  # (read in this write transaction: it is there)
            by_id[prep.id] = stored
            out.append((stored, inserted))
        return out

    def put_chunks(self, seq: int, chunks: list[str]) -> None:
        self.insert_rows("chunks", [(seq, i, data) for i, data in enumerate(chunks)])

    def put_blobs(self, seq: int, blobs: dict[str, bytes]) -> None:
        """Store payloads once each by SHA-256 and this row's references to them.

        Existing payload rows are locked (where several writers exist) so that a
        concurrent collection cannot remove them under this reference."""
        shas = sorted(blobs)
        present = {r[0] for r in self.fetch(self.sql["blobs_present"], (self.listed(shas),))}
        self.insert_rows(
            "blobs",
            [(s, len(blobs[s]), blobs[s]) for s in shas if s not in present],
            "ON CONFLICT (sha256) DO UPDATE SET size = excluded.size",
        )
        self.insert_rows("blob_refs", [(seq, s) for s in shas], "ON CONFLICT DO NOTHING")

    def gc_blobs(self, seqs: list[int]) -> None:
        """Drop the references of ``seqs`` and every payload no longer referenced."""
        for part in _split(list(seqs), 1000):
            shas = [r[0] for r in self.fetch(self.sql["blob_refs_of"], (self.listed(part),))]
            if not shas:
                continue
            self.execute(self.sql["blob_refs_drop"], (self.listed(part),))
            self.fetch(self.sql["blobs_lock"], (self.listed(shas),))
            self.execute(self.sql["blobs_gc"], (self.listed(shas),))

    def w_update(self, sid: str, node: Node, prep: _msg.Prepared, index: bool) -> None:
        self.lock_session(sid)
        head, chunks = self.split(self.row_json(prep, node.created_at))  # (the update keeps created_at)
        d_bytes, d_tokens = prep.bytes - node.bytes, prep.tokens - node.tokens
        self.execute(
            self.sql["update"],
            (
                prep.role,
                prep.bytes,
                prep.tokens,
                d_bytes,
                d_tokens,
                len(chunks),
                *self.prepared_values(prep),
                head,
                node.seq,
            ),
        )
        self.log_change(sid, "update", node.seq)
        self.execute(self.sql["delete_embeddings_of"], (self.listed([node.seq]),))  # its text changed
        self.update_extras(sid, node, prep, index)
        self.execute(self.sql["delete_chunks"], (self.listed([node.seq]),))
        self.put_chunks(node.seq, chunks)
        self.gc_blobs([node.seq])
        if prep.blobs:
            self.put_blobs(node.seq, prep.blobs)
        if d_bytes or d_tokens:
            below = [n.seq for n in self.w_descendants(sid, [node.id]) if n.seq != node.seq]
            for part in _split(below, 1000):
                self.execute(self.sql["shift_paths"], (d_bytes, d_tokens, self.listed(part)))
        self.index.changed(sid, node.seq, prep, len(chunks), index)

    def w_descendants(self, sid: str, mids: Iterable[str]) -> list[Node]:
        self.before_read(sid)
        rows = self.fetch(self.sql["descendants"], (self.listed(list(mids)), sid, sid))
        return [Node(*r) for r in rows]

    def w_delete(self, sid: str, nodes: list[Node]) -> None:
        self.lock_session(sid)
        self.forget(sid)
        seqs = [n.seq for n in nodes]
        ids = [n.id for n in nodes]
        self.gc_blobs(seqs)
        self.index.removed(seqs)
        for part in _split(seqs, 1000):
            self.execute(self.sql["delete_chunks"], (self.listed(part),))
            self.execute(self.sql["delete_messages"], (self.listed(part),))
            self.execute(self.sql["delete_embeddings_of"], (self.listed(part),))
        for part in _split(ids, 1000):
            self.execute(self.sql["delete_compactions_of"], (sid, self.listed(part), self.listed(part)))
            self.execute(self.sql["delete_labels_of"], (sid, self.listed(part)))
        self.log_change(sid, "delete", min(seqs) if seqs else None)

    def w_clear(self, sid: str) -> None:
        self.lock_session(sid)
        self.forget(sid)
        seqs = [r[0] for r in self.fetch(self.sql["session_seqs"], (sid,))]
        self.gc_blobs(seqs)
        self.index.session_removed(sid, seqs)
        for part in _split(seqs, 1000):
            self.execute(self.sql["delete_chunks"], (self.listed(part),))
        self.execute(self.sql["clear_messages"], (sid,))
        self.execute(self.sql["clear_embeddings"], (sid,))
        self.execute(self.sql["clear_compactions"], (sid,))
        self.execute(self.sql["clear_labels"], (sid,))
        self.log_change(sid, "delete", min(seqs) if seqs else None)

    def w_delete_session(self, sid: str) -> None:
        self.w_clear(sid)
        self.lock_events(sid)
        for name in ("clear_runs", "clear_events", "clear_records"):
            self.execute(self.sql[name], (sid,))
        self.log_change(sid, "runs")
        self.log_change(sid, "events")

    def w_add_compaction(self, sid: str, comp: Compaction) -> None:
        self.lock_session(sid)
        self.execute(
            self.sql["add_compaction"],
            (
                sid,
                comp.id,
                comp.from_id,
                comp.to_id,
                comp.summary,
                comp.created_at,
                comp.tokens_before,
                comp.tokens_after,
            ),
        )
        self.log_change(sid, "compactions")

    # -- analysis (store.sql): DuckDB SQL over a cache of the analysis columns ----------
    def analysis_source(self) -> AnalysisSource:
        """Where the analysis cache reads this store's rows from (see ``sql/cache.py``): an
        engine whose rows travel another way, or whose cache is a file, supplies its own."""
        from .sql.cache import AnalysisSource

        return AnalysisSource(self)

    def analysis_query(
        self,
        query: str,
        params: Any = None,
        session_ids: list[str] | None = None,
        files: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Run a read-only DuckDB query over the analysis views; a ``pyarrow.Table``.

        The shared engine keeps a cache of the analysis columns beside the store, filled
        from the engine's :meth:`analysis_source` and refreshed from the change log before
        each query (``sql.cache.Cache``)."""
        from .sql import cache as _cache

        with self._analysis_runs.run(timeout) as run:  # (StoreClosed once the store closes)
            cache = self._analysis
            if cache is None:
                with self._analysis_setup:
                    run.raise_if_stopped()
                    cache = self._analysis
                    if cache is None:
                        cache = self._analysis = _cache.Cache(self.analysis_source())
            return cache.query(query, params, session_ids, run=run, files=files)

    def interrupt_analysis(self) -> None:
        self._analysis_runs.interrupt()

    def close_analysis(self) -> None:
        """Stop the analysis queries running (they raise ``StoreClosed``), then close the cache."""
        self._analysis_runs.close()
        with self._analysis_setup:
            cache, self._analysis = self._analysis, None
        if cache is not None:
            cache.close()

    # -- writes: runs, events, records ----------------------------------------------
    def w_run_begin(self, sid: str, run_id: str, input: str | None, started_at: str, meta: str | None = None) -> None:
        self.lock_events(sid)
        self.execute(self.sql["run_begin"], (run_id, sid, input, started_at, meta, sid))
        self.log_change(sid, "runs")

    def w_run_end(
        self, run_id: str, status: str, error: str | None, usage: dict[str, Any] | None, ended_at: str | None
    ) -> None:
        self.execute(
            self.sql["run_end"], (status, error, None if usage is None else _msg.dumps(usage), ended_at, run_id)
        )
        if self.CHANGE_LOG:
            row = self.fetch_one(self.sql["run_session"], (run_id,))
            if row is not None:
                self.log_change(row[0], "runs")

    def w_append_events(self, sid: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.lock_events(sid)
        start = self.fetch_one(self.sql["events_next"], (sid,))[0]
        for i, ev in enumerate(events):
            ev["seq"] = start + i
        self.insert_rows("events", [(sid, ev["seq"], ev.get("run_id"), _msg.dumps(ev)) for ev in events])
        if events:
            self.log_change(sid, "events", start)
        return events

    def table_columns(self, table: str) -> set[str]:
        """The columns the stored table ``table`` (a name of ``TABLES``) has (a migration's probe)."""
        with self.guard(), self.connection() as conn:
            cur = conn.execute(self.compile("SELECT * FROM {" + table + "} LIMIT 0"))
            return {d[0] for d in cur.description}

    def change_marker(self) -> str:
        """Text that changes with every committed write (see :meth:`Store.change_marker`):
        the newest write sequence of the messages (appends, imports) and the newest entry
        of the change log (updates, deletes, clears, compactions, runs, events, labels),
        two lookups at the end of a primary key."""
        row = self.fetch_one(self.compile(_MARKER_SQL))
        return f"{row[0]}.{row[1]}"

    def log_change(self, sid: str, kind: str, seq: int | None = None) -> None:
        """Record a change in place for analysis caches (see ``TABLES["changes"]``)."""
        if self.CHANGE_LOG:
            self.execute(self.sql["log_change"], (sid, kind, seq))

    def update_analysis_columns(self, values: list[Any]) -> None:
        """``(text, n_parts, tool_names, metadata, seq)`` rows (the version 6 migration)."""
        self.execute_many(self.sql["fill_analysis"], [(self.stored_text(v[0]), *v[1:]) for v in values])

    def w_put_records(self, sid: str, kind: str, items: list[tuple[int, str]]) -> None:
        latest = dict(items)  # the last value for a number wins
        self.insert_rows(
            "records",
            [(sid, kind, n, data) for n, data in latest.items()],
            "ON CONFLICT (session_id, kind, n) DO UPDATE SET data = excluded.data",
        )

    # -- writes and reads of facts as they are (imports, exports, copies) ---------------
    def w_import_runs(self, runs: list[RunRecord]) -> list[RunRecord]:
        added = []
        for run in runs:
            row = self.fetch_one(self.sql["run_session"], (run.run_id,))
            if row is not None:
                if row[0] != run.session_id:
                    raise ValueError(f"run {run.run_id!r} is stored in session {row[0]!r}, not {run.session_id!r}")
                continue
            self.lock_events(run.session_id)
            usage = None if run.usage is None else _msg.dumps(run.usage)
            meta = None if run.meta is None else _msg.dumps(run.meta)
            self.execute(
                self._fact_sql("import_run"),
                (run.run_id, run.session_id, run.status, run.input, run.error, run.started_at)
                + (run.ended_at, usage, meta, run.session_id),
            )
            self.log_change(run.session_id, "runs")
            added.append(run)
        return added

    def w_import_events(self, sid: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.lock_events(sid)
        stored: dict[int, dict[str, Any]] = {}
        for part in _split([ev["seq"] for ev in events], 1000):
            for seq, data in self.fetch(self._fact_sql("events_at"), (sid, self.listed(part))):
                stored[seq] = json.loads(data)
        added = []
        for ev in events:
            held = stored.get(ev["seq"])
            if held is None:
                stored[ev["seq"]] = ev
                added.append(ev)
            elif held != ev:
                raise ValueError(f"session {sid!r} holds another event at seq {ev['seq']}")
        self.insert_rows("events", [(sid, ev["seq"], ev.get("run_id"), _msg.dumps(ev)) for ev in added])
        if added:
            self.log_change(sid, "events", min(ev["seq"] for ev in added))
        return added

    def w_import_embeddings(self, rows: list[tuple[str, str, str, int, str]]) -> int:
        by_session: dict[str, list[tuple[str, str, str, int, str]]] = {}
        for given in rows:
            by_session.setdefault(given[0], []).append(given)
        out: list[tuple[str, int, str, str, int, str]] = []  # rows of the table: model, seq, sid, mid, dim, vector
        for sid, items in by_session.items():
            self.lock_session(sid)
            seqs = {n.id: n.seq for n in self.nodes_by_id(sid, list({r[1] for r in items}))}
            for _, mid, model, dim, vector in items:
                if mid not in seqs:
                    raise MessageNotFound(f"a {model!r} vector names message {mid!r}, which is not in session {sid!r}")
                out.append((model, seqs[mid], sid, mid, dim, vector))
        held: set[tuple[str, int]] = set()
        for part in _split(sorted({r[1] for r in out}), 1000):
            held.update((m, seq) for m, seq in self.fetch(self._fact_sql("vectors_at"), (self.listed(part),)))
        fresh = []
        for row in out:
            if (row[0], row[1]) not in held:
                held.add((row[0], row[1]))
                fresh.append(row)
        self.insert_rows("embeddings", fresh)
        for sid in sorted({r[2] for r in fresh}):
            self.log_change(sid, "embeddings")
        return len(fresh)

    def scan_embeddings(
        self, session_ids: list[str] | None, batch_size: int
    ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        if session_ids is None:
            session_ids = [r[0] for r in self.fetch(self._fact_sql("vector_sessions"))]
        page: list[tuple[str, dict[str, Any]]] = []
        for sid in session_ids:
            for mid, model, vector in self.fetch(self._fact_sql("vectors_of"), (sid,)):
                page.append((sid, {"message_id": mid, "model": model, "vector": json.loads(vector)}))
                if len(page) >= batch_size:
                    yield page
                    page = []
        if page:
            yield page

    def _fact_sql(self, name: str) -> str:
        key = ("facts", name)  # compiled once, kept beside the engine's compiled inserts
        sql = self._inserts.get(key)
        if sql is None:
            sql = self._inserts[key] = self.compile(_FACT_STATEMENTS[name])
        return sql

    def update_extras(self, sid: str, node: Node, prep: _msg.Prepared, index: bool) -> None:
        """Engine columns to change with an update (beyond the shared ones)."""

    # -- locking and caches (engines with several writers or caches) ------------------
    def before_read(self, sid: str) -> None:
        """Called before a read of one session: inside a write transaction, engines with
        several writers make it wait for the session's other writers first."""

    def lock_session(self, sid: str) -> None:
        """Serialize this session's writers until the transaction ends."""

    def lock_events(self, sid: str) -> None:
        """Serialize this session's run and event writers until the transaction ends."""

    def forget(self, sid: str) -> None:
        """Drop what is cached of a session (its rows are about to change)."""


def without_created_at(raw: str, created_at: str) -> str:
    """A stored JSON without its last key createdAt, where that key ends it with the value
    ``created_at`` (plain ASCII, nothing to escape), a space after its closing brace instead
    (JSON the store writes never ends with one): the row's ``created_at`` column holds the
    value, and reads put it back (:func:`with_created_at`, the engines' ``whole_json``).
    Any other JSON as it is."""
    if (
        raw.endswith(',"createdAt":"' + created_at + '"}')
        and created_at.isascii()
        and created_at.isprintable()
        and '"' not in created_at
        and "\\" not in created_at
    ):
        return raw[: -len(created_at) - 16] + "} "
    return raw


def with_created_at(raw: str, created_at: str) -> str:
    """A row's JSON as :func:`without_created_at` gave it, whole again (``created_at``: the
    row's column). A row continued in chunk rows is never shortened, so only a whole row's
    JSON comes here."""
    return f'{raw[:-2]},"createdAt":"{created_at}"}}' if raw[-1] == " " else raw  # (one string built)


class LocalEngine(SQLEngine):
    """The connection model of an embedded database (SQLite, DuckDB): one connection per
    store, shared by threads under a re-entrant lock; :meth:`write` transactions nest
    (an inner one joins the outer)."""

    #: The statement that starts a write transaction.
    BEGIN = "BEGIN"

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._lock: Any = threading.RLock()
        self._db: Any = None
        self._depth = 0
        self._writer: int | None = None  # the thread inside the write transaction
        self._closed = False

    def in_write(self) -> bool:
        return self._depth > 0 and self._writer == threading.get_ident()

    def row_json(self, prep: _msg.Prepared, created_at: str) -> str:
        # A message's createdAt is its JSON's last key (the store adds it there) and the
        # row's created_at column holds it too: the row leaves it out of the JSON (about
        # 40 bytes) when the JSON ends with it, plain ASCII, and fits in the row; a space
        # after the closing brace (JSON the store writes never ends with one) marks such
        # a row, so whole_json tells it by its last character. A row continued in chunk
        # rows keeps its JSON whole.
        raw = prep.stored_json
        if len(raw) > self._chunk:
            return raw
        return without_created_at(self.leave_out(raw, prep), created_at)

    def leave_out(self, raw: str, prep: _msg.Prepared) -> str:
        """``raw`` (a whole row's JSON) less what else of it the row's columns hold: nothing
        here (see DuckDBEngine)."""
        return raw

    whole_json = staticmethod(with_created_at)

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        return _Held(self)

    @contextlib.contextmanager
    def write(self) -> Iterator[LocalEngine]:
        with self._lock:
            if self._closed:
                raise StoreClosed("the store is closed")
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            self.execute(self.BEGIN)
            self._depth = 1
            self._writer = threading.get_ident()
            self.began()
            try:
                yield self
                self.before_commit()
                self._depth = 0
                self._writer = None
                self.execute("COMMIT")
            except BaseException:
                self._depth = 0
                self._writer = None
                self.rolled_back()
                with contextlib.suppress(*self.driver_errors):
                    self._db.execute("ROLLBACK")
                raise
            self.committed()

    def began(self) -> None:
        """A write transaction started (drop what it may change in caches)."""

    def before_commit(self) -> None:
        """The write transaction is about to commit: raise to roll it back instead."""

    def rolled_back(self) -> None:
        """A write transaction was rolled back (cached state may describe uncommitted rows)."""

    def committed(self) -> None:
        """A write transaction committed."""


#: The change marker's two lookups (see :meth:`SQLEngine.change_marker`).
_MARKER_SQL = "SELECT (SELECT coalesce(max(seq), 0) FROM {messages}), (SELECT coalesce(max(n), 0) FROM {changes})"


class _Held(contextlib.AbstractContextManager[Any]):
    """:meth:`LocalEngine.connection`: the store's lock held and its connection given,
    written out as a class for the same reason as ``_sql_base._Guard``."""

    __slots__ = ("engine",)

    def __init__(self, engine: LocalEngine):
        self.engine = engine

    def __enter__(self) -> Any:
        engine = self.engine
        engine._lock.acquire()
        if engine._closed:
            engine._lock.release()
            raise StoreClosed("the store is closed")
        return engine._db

    def __exit__(self, *exc: Any) -> None:
        self.engine._lock.release()


class _Pending:
    """The head of a stored JSON whose rest is in continuation rows (read in one batch)."""

    __slots__ = ("seq", "head")

    def __init__(self, seq: int, head: str):
        self.seq = seq
        self.head = head


_UNLIMITED = 1 << 62
_MAX_SEQ = (1 << 63) - 1


class _Any:
    """The first row of a walk without a start: whichever is the session's newest."""


_ANY = _Any()


def _split(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
