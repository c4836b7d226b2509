"""The SQLite engine's search index: FTS5, built on the first search and kept by triggers.

A store larger than ``search_window`` messages (131,072 by default; an ``open_store``
option) by a quarter also keeps a second FTS5 index of its newest messages, the search
window, brought up to date by each search: a search whose candidates all lie there is
ranked with the window's word statistics, so its cost stays bounded however large the
store grows (see _RECENT_TABLE). :class:`FTS5Index` is ``SQLiteEngine.index``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .... import messages as _msg
from ....errors import SessionKitError
from ... import search as _search
from ..._index import Hit, SearchIndex

if TYPE_CHECKING:
    from .engine import SQLiteEngine

__all__ = ["DEFAULT_SEARCH_WINDOW", "FTS5Index", "FTS_TABLE", "FTS_TRIGGERS", "index_json"]

#: Messages in the search window (see _RECENT_TABLE): a store larger than this by a
#: quarter keeps a second full-text index of its newest messages.
DEFAULT_SEARCH_WINDOW = 1 << 17

_MAX_SEQ = (1 << 63) - 1

#: A new search window is filled in this many steps, one a search (see _RECENT_TABLE).
_FILL_STEPS = 8


FTS_TABLE = """CREATE VIRTUAL TABLE IF NOT EXISTS sessionkit_fts USING fts5(
        body, tokenize = 'unicode61 remove_diacritics 0'
    )"""

FTS_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_insert AFTER INSERT ON sessionkit_messages
       WHEN new.chunks = 0 BEGIN
         INSERT INTO sessionkit_fts(rowid, body) VALUES (new.seq, sessionkit_index_text(new.content));
       END""",
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_delete AFTER DELETE ON sessionkit_messages BEGIN
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
       END""",
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_update AFTER UPDATE OF content ON sessionkit_messages BEGIN
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
         INSERT INTO sessionkit_fts(rowid, body)
           SELECT new.seq, sessionkit_index_text(new.content) WHERE new.chunks = 0;
       END""",
]

# The search window. FTS5's bm25() counts, for each query word, every indexed row that
# holds it, so ranking a common word costs time in proportion to the whole store even
# when only the newest matches are ranked. Once a store outgrows `search_window` by a
# quarter, a second FTS5 table holds exactly the main index's rows with seq in
# [recent_lo, recent_hi] (kept in sessionkit_meta). Each search first brings the window
# up to the newest row, dropping what falls behind its `search_window` messages, in one
# write transaction (FTS5Index.sync_window), so appends never pay for it. A new window is
# made empty just above the newest row and filled downwards by the searches after that,
# an eighth of it each (_FILL_STEPS), so no one search pays for copying all of it (the
# first search of a large store already pays for building the main index); until it
# spans `search_window` numbers, searches rank over the whole store, as without one.
# Once it does, a search whose candidates all lie in the window is ranked there and its
# word counts stay bounded however large the store grows. The triggers below replace
# FTS_TRIGGERS then: they keep rows inside the window's range in step (deletes,
# updates, and inserts that reuse a number inside it after the newest rows were
# deleted), copying the main table's row so the text is stemmed once. FTS5 rather than a
# hand-written index because it is SQLite's own and transactional with the rows it
# indexes.
_RECENT_TABLE = """CREATE VIRTUAL TABLE IF NOT EXISTS sessionkit_fts_recent USING fts5(
        body, tokenize = 'unicode61 remove_diacritics 0'
    )"""
_IN_WINDOW = """{seq} BETWEEN (SELECT CAST(value AS INTEGER) FROM sessionkit_meta WHERE key = 'recent_lo')
               AND (SELECT CAST(value AS INTEGER) FROM sessionkit_meta WHERE key = 'recent_hi')"""
_FTS_NAMES = ("sessionkit_fts_insert", "sessionkit_fts_delete", "sessionkit_fts_update")
_COPY_TO_RECENT = f"""INSERT INTO sessionkit_fts_recent(rowid, body)
           SELECT rowid, body FROM sessionkit_fts WHERE rowid = {{seq}} AND {_IN_WINDOW}"""
_DROP_FROM_RECENT = f"DELETE FROM sessionkit_fts_recent WHERE rowid = {{seq}} AND {_IN_WINDOW}"
_FTS_TRIGGERS_WINDOWED = [
    f"""CREATE TRIGGER IF NOT EXISTS sessionkit_fts_insert AFTER INSERT ON sessionkit_messages
       WHEN new.chunks = 0 BEGIN
         INSERT INTO sessionkit_fts(rowid, body) VALUES (new.seq, sessionkit_index_text(new.content));
         {_COPY_TO_RECENT.format(seq="new.seq")};
       END""",
    f"""CREATE TRIGGER IF NOT EXISTS sessionkit_fts_delete AFTER DELETE ON sessionkit_messages BEGIN
         {_DROP_FROM_RECENT.format(seq="old.seq")};
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
       END""",
    f"""CREATE TRIGGER IF NOT EXISTS sessionkit_fts_update AFTER UPDATE OF content ON sessionkit_messages BEGIN
         {_DROP_FROM_RECENT.format(seq="old.seq")};
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
         INSERT INTO sessionkit_fts(rowid, body)
           SELECT new.seq, sessionkit_index_text(new.content) WHERE new.chunks = 0;
         {_COPY_TO_RECENT.format(seq="new.seq")};
       END""",
]


#: The build's one statement (FTS5Index.fill).
_FILL = "INSERT INTO sessionkit_fts(rowid, body) SELECT seq, sessionkit_stem_text({row_text}) FROM {messages}"

#: What stem_text raised last in this thread: SQLite reports any exception of a function
#: as an error of the statement, and FTS5Index.fill raises the exception itself instead
#: (a Ctrl-C during a build stays a KeyboardInterrupt).
_raised = threading.local()


def stem_text(text: str | None) -> str:
    """The indexed form of a message's text (NULL: no text)."""
    try:
        return _search.index_text(text or "")
    except BaseException as exc:
        _raised.exc = exc
        raise


def index_json(content: str) -> str:
    """The indexed form of a stored message: stemmed words of its text parts."""
    return _search.index_text(_msg.message_text(json.loads(content)))


#: The newest seq and the search window's range (as text; NULLs before there is one).
_WINDOW_STATE = (
    "SELECT (SELECT max(seq) FROM sessionkit_messages),"
    " (SELECT value FROM sessionkit_meta WHERE key = 'recent_lo'),"
    " (SELECT value FROM sessionkit_meta WHERE key = 'recent_hi')"
)


def _window_range(low: str | None, high: str | None) -> tuple[int | None, int | None]:
    return (None, None) if low is None or high is None else (int(low), int(high))


_SESSION_BOUNDS = (
    ", (SELECT min(seq) FROM sessionkit_messages WHERE session_id = ?1),"
    " (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?1),"
    " (SELECT min(session_id) FROM sessionkit_messages),"
    " (SELECT max(session_id) FROM sessionkit_messages)"
)
#: How many sessions' states FTS5Index._state keeps at most.
_STATES_KEPT = 64


def _read_state(db: sqlite3.Connection, sid: str | None) -> tuple[Any, ...]:
    if sid is None:
        return tuple(db.execute(_WINDOW_STATE).fetchone())
    return tuple(db.execute(_WINDOW_STATE + _SESSION_BOUNDS, (sid,)).fetchone())


def _rank_sql(table: str, in_session: bool) -> str:
    """FTS5Index._rank's statement over ``table``, for one session or all."""
    # A session's matches: the full-text index walks its matches newest first and
    # each is checked in the compact (session_id, seq) index, not in the table, whose
    # rows hold the content.
    where = (
        "AND EXISTS (SELECT 1 FROM sessionkit_messages s INDEXED BY sessionkit_messages_order"
        f" WHERE s.session_id = ? AND s.seq = {table}.rowid)"
        if in_session
        else ""
    )
    # The candidates are ranked and counted in one pass (the window function), and
    # only the best `limit` are joined to their messages.
    return f"""SELECT t.seq, m.session_id, m.id, m.role, t.score, t.n, m.chunks, m.content, m.created_at FROM (
                    SELECT seq, score, count(*) OVER () AS n FROM (
                        SELECT {table}.rowid AS seq, -bm25({table}) AS score FROM {table}
                        WHERE {table} MATCH ? AND {table}.rowid BETWEEN ? AND ? {where}
                        ORDER BY {table}.rowid DESC LIMIT ?
                    ) ORDER BY score DESC, seq DESC LIMIT ?
                ) AS t JOIN sessionkit_messages m ON m.seq = t.seq
                ORDER BY t.score DESC, t.seq DESC"""


_RANK_SQL = {
    (table, in_session): _rank_sql(table, in_session)
    for table in ("sessionkit_fts", "sessionkit_fts_recent")
    for in_session in (False, True)
}


class FTS5Index(SearchIndex):
    """FTS5 tables kept by triggers (see FTS_TRIGGERS), with the search window."""

    engine: SQLiteEngine

    def __init__(self, engine: SQLiteEngine):
        super().__init__(engine)
        # What _state read, per session (None: the whole store), while the file is at _state_key.
        self._state_key: tuple[int, int] | None = None
        self._states: dict[str | None, tuple[Any, ...]] = {}

    def count(self) -> int:
        return self.engine.fetch_one("SELECT count(*) FROM sessionkit_fts")[0] if self.built() else 0

    def search(self, fts_query: str, terms: _search.Query, sid: str | None, limit: int) -> list[Hit]:
        return [hit for hit, _ in self.search_read(fts_query, terms, sid, limit)]

    def search_read(
        self, fts_query: str, terms: _search.Query, sid: str | None, limit: int
    ) -> list[tuple[Hit, str | None]]:
        # Rank only the newest `search_candidates` matches: FTS5 walks matches in rowid
        # order and stops there (see Store.search). When all of them lie in the search
        # window, they are ranked there, so bm25()'s word counts cover the window, not
        # the store (see _RECENT_TABLE).
        cand = self.engine.search_candidates
        with self.engine._lock:
            first, last = 0, _MAX_SEQ
            # The window's state and the session's bounds (_state); the window is brought
            # up to date first when it must be, as sync_window does.
            if sid is None:
                top, low_seq, high_seq = self._state(None)
            else:
                top, low_seq, high_seq, first, last, low, high = self._state(sid)
            lo, hi = _window_range(low_seq, high_seq)
            if self._due(top, lo, hi) and self.built():
                lo, hi = self.sync_window()
            if not self._filled(lo, hi):  # none yet, or still filling: rank over the whole store
                lo = hi = None
            if sid is not None:
                if first is None:
                    return []
                if low == high:
                    # The store holds this session alone: every match is the session's,
                    # and checking each one in the session index would only cost time.
                    sid = None
            # Rows above hi were written after this search began (it synced the window).
            if lo is not None and hi is not None and lo <= last and first <= hi:
                rows, n = self._rank(
                    "sessionkit_fts_recent", fts_query, sid, max(first, lo), min(last, hi), cand, limit
                )
                if first >= lo or n >= cand:
                    return rows
            return self._rank("sessionkit_fts", fts_query, sid, first, last, cand, limit)[0]

    def _state(self, sid: str | None) -> tuple[Any, ...]:
        """``_WINDOW_STATE``'s three values, and for a session its first and last seq and
        the store's least and greatest session id (one subquery for each end: SQLite seeks
        one end of an index for a lone min() or max(), but scans the whole session for both
        in one SELECT).

        Kept between searches while the file is as it was: ``PRAGMA data_version`` changes
        when another connection commits, the connection's ``total_changes`` when it writes
        (a rolled back write too), and together they cost half the statement. Read afresh
        inside a transaction, whose writes may yet be rolled back."""
        eng = self.engine
        with eng.guard(), eng.connection() as db:
            if db.in_transaction:
                return _read_state(db, sid)
            key = (db.execute("PRAGMA data_version").fetchone()[0], db.total_changes)
            if key != self._state_key:
                self._state_key, self._states = key, {}
            state = self._states.get(sid)
            if state is None:
                if len(self._states) >= _STATES_KEPT:
                    self._states.clear()
                state = self._states[sid] = _read_state(db, sid)
            return state

    def _rank(
        self, table: str, fts_query: str, sid: str | None, first: int, last: int, cand: int, limit: int
    ) -> tuple[list[tuple[Hit, str | None]], int]:
        """``(rows, n)``: the best ``limit`` of the newest ``cand`` matches in ``table``
        with seq in [first, last], as ``(seq, session_id, id, role, score)`` each with its
        stored JSON (read in the same statement; None for one continued in chunk rows), and
        how many matches were ranked (0 when there is no hit)."""
        params: list[Any] = [fts_query, first, last]
        if sid is not None:
            params.append(sid)
        params += [cand, limit]
        rows = self.engine.fetch(_RANK_SQL[table, sid is not None], params)
        whole = self.engine.whole_json
        return [(r[:5], None if r[6] else whole(r[7], r[8])) for r in rows], (rows[0][5] if rows else 0)

    # -- the search window --------------------------------------------------------------
    def sync_window(self) -> tuple[int | None, int | None]:
        """Bring the search window up to the newest row (see _RECENT_TABLE): create it,
        empty, once the store outgrows it; then copy the rows added since, drop those that
        fell behind, and fill it downwards by one step (an eighth of it) while it holds
        fewer than ``search_window`` numbers. A read when there is nothing to do; otherwise
        one write transaction. Returns the window's range as :meth:`window` does."""
        if not self.built():
            return None, None
        with self.engine._lock:
            top, lo, hi = self._window_work()
            if top is None:
                return lo, hi
            with self.engine.write():
                top, lo, hi = self._window_work()  # another process may have done it meanwhile
                if top is None:
                    return lo, hi
                w = self.engine.search_window
                if lo is not None and hi is not None and hi < top - w + 1:
                    # nothing in it would stay: start afresh
                    self.engine.execute("DROP TABLE sessionkit_fts_recent")
                    lo = None
                if lo is None or hi is None:
                    # Made empty just above the newest row: the searches after this one
                    # fill it, a step each, so no search pays for the whole of it.
                    self.engine.execute(_RECENT_TABLE)
                    self._install_triggers(_FTS_TRIGGERS_WINDOWED)
                    lo, hi = top + 1, top
                else:
                    if top > hi:
                        self._copy_to_window(hi + 1, top)
                        hi = top
                    target = hi - w + 1
                    if lo < target:
                        self.engine.execute("DELETE FROM sessionkit_fts_recent WHERE rowid < ?", (target,))
                        lo = target
                    elif lo > target:
                        step = max(target, lo - -(-w // _FILL_STEPS))
                        self._copy_to_window(step, lo - 1)
                        lo = step
                self.engine.execute(self.engine.sql["meta_put"], ("recent_lo", str(lo)))
                self.engine.execute(self.engine.sql["meta_put"], ("recent_hi", str(hi)))
                return lo, hi

    def _copy_to_window(self, first: int, last: int) -> None:
        """Copy the main index's rows with seq in [first, last] into the window."""
        self.engine.execute(
            "INSERT INTO sessionkit_fts_recent(rowid, body) "
            "SELECT rowid, body FROM sessionkit_fts WHERE rowid >= ? AND rowid <= ?",
            (first, last),
        )

    def _window_work(self) -> tuple[int | None, int | None, int | None]:
        """``(top, lo, hi)``: the newest seq and the window's range, with ``top`` None
        unless the window must be created, catch up or fill (one statement)."""
        top, low, high = self.engine.fetch_one(_WINDOW_STATE)
        lo, hi = _window_range(low, high)
        return (top if self._due(top, lo, hi) else None), lo, hi

    def _due(self, top: int | None, lo: int | None, hi: int | None = None) -> bool:
        """Whether the window must be created (the store outgrew it), catch up (rows
        above ``hi``) or fill (it spans fewer than ``search_window`` numbers), the newest
        seq being ``top``."""
        w = self.engine.search_window
        if top is None:
            return False
        if lo is None or hi is None:
            return top >= w + w // 4
        return top > hi or lo > hi - w + 1

    def _filled(self, lo: int | None, hi: int | None) -> bool:
        """Whether the window ``[lo, hi]`` exists and spans ``search_window`` numbers."""
        return lo is not None and hi is not None and hi - lo + 1 >= self.engine.search_window

    def window(self) -> tuple[int | None, int | None]:
        """``(recent_lo, recent_hi)``: the seq range the window holds, or Nones."""
        rows = dict(self.engine.fetch("SELECT key, value FROM sessionkit_meta WHERE key IN ('recent_lo', 'recent_hi')"))
        if "recent_lo" not in rows:
            return None, None
        return int(rows["recent_lo"]), int(rows["recent_hi"])

    def _install_triggers(self, triggers: Iterable[str]) -> None:
        for name in _FTS_NAMES:
            self.engine.execute(f"DROP TRIGGER IF EXISTS {name}")
        for stmt in triggers:
            self.engine.execute(stmt)

    # -- the search index (triggers keep it; see FTS_TRIGGERS) ------------------------
    def maintained(self) -> bool:
        return False  # triggers keep the index

    def _flag_in_tx(self) -> bool:
        return self.engine.meta("index_built") == "1"

    def begin_build(self) -> None:
        self.engine.execute("DELETE FROM sessionkit_fts")
        self.engine.execute("DROP TABLE IF EXISTS sessionkit_fts_recent")
        self.engine.execute("DELETE FROM sessionkit_meta WHERE key IN ('recent_lo', 'recent_hi')")

    def fill(self) -> None:
        # One statement: SQLite reads each message's text (Dialect.message_text) and hands
        # it to the stemmer (sessionkit_stem_text, registered by the engine) as it inserts,
        # with no Python row between them.
        _raised.exc = None
        try:
            self.engine.execute(self.engine.compile(_FILL))
        except SessionKitError:
            exc, _raised.exc = _raised.exc, None
            if exc is not None:
                raise exc from None
            raise

    def finish_build(self) -> None:
        self._install_triggers(FTS_TRIGGERS)  # (a window's triggers, if any, went with its table)

    def _index_long(self, seq: int, prep: _msg.Prepared) -> None:
        """The trigger skips rows whose JSON continues elsewhere: index them here."""
        self.engine.execute(
            "INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)", (seq, _search.index_text(prep.text))
        )
        if self.window()[0] is not None:
            self.engine.execute(_COPY_TO_RECENT.format(seq="?1"), (seq,))

    def added(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if nchunks and self._flag_in_tx():
            self._index_long(seq, prep)

    def changed(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if nchunks and self._flag_in_tx():  # the trigger dropped the old text
            self.engine.execute("DELETE FROM sessionkit_fts WHERE rowid = ?", (seq,))
            self._index_long(seq, prep)
