"""The PostgreSQL engine's search index: a GIN-indexed ``tsvector`` per message.

The stems come from :mod:`sessionkit.store.search`, exactly as on SQLite, and reach
PostgreSQL as ``tsvector``/``tsquery`` literals (see ``text.py``), so no user text ever
reaches ``to_tsquery``. Hits are ranked with ``ts_rank_cd`` (normalized by document
length) among the newest ``search_candidates`` matches. The index is built on the first
search and kept current by every write afterwards, by any process: each write
transaction checks the flag under a shared advisory lock that the builder takes
exclusively. :class:`TsvectorIndex` is ``PostgresEngine.index``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .... import messages as _msg
from ... import search as _search
from ..._index import Hit, SearchIndex
from .text import _tsquery, _tsvector

if TYPE_CHECKING:
    from .engine import PostgresEngine

__all__ = ["TsvectorIndex"]

_SEARCH = (
    "SELECT c.seq, m.session_id, m.id, m.role, c.score FROM ("
    "  SELECT s.seq, ts_rank_cd(s.body, %(q)s::tsquery, 1)::float8 AS score FROM ("
    "    SELECT seq, body FROM {search} WHERE body @@ %(q)s::tsquery /*session*/"
    "    ORDER BY seq DESC LIMIT %(cand)s) AS s"
    ") AS c JOIN {messages} m ON m.seq = c.seq"
    " ORDER BY c.score DESC, c.seq DESC LIMIT %(limit)s"
)

# The index's statements (psycopg placeholders; {search} and {messages} are the tables).
_STATEMENTS = {
    "all": _SEARCH.replace("/*session*/", ""),
    "session": _SEARCH.replace("/*session*/", "AND session_id = %(sid)s"),
    "count": "SELECT count(*) FROM {search}",
    "put": (
        "INSERT INTO {search} (seq, session_id, body) VALUES (%s, %s, %s::tsvector)"
        " ON CONFLICT (seq) DO UPDATE SET body = EXCLUDED.body"
    ),
    "remove": "DELETE FROM {search} WHERE seq = ANY(%s::bigint[])",
    "remove_session": "DELETE FROM {search} WHERE session_id = %s",
    "reset": "DELETE FROM {search}",
    "copy": "COPY {search} (seq, session_id, body) FROM STDIN",
}


class TsvectorIndex(SearchIndex):
    """The ``sessionkit_search`` table and the advisory lock that guards its flag."""

    engine: PostgresEngine

    def __init__(self, engine: PostgresEngine):
        super().__init__(engine)
        self.sql: dict[str, str] = {}

    def compile(self, tables: dict[str, str]) -> None:
        """Name the engine's tables in the statements (once the engine knows its schema)."""
        self.sql = {key: text.format(**tables) for key, text in _STATEMENTS.items()}

    def count(self) -> int:
        return self.engine.fetch_one(self.sql["count"])[0] if self.built() else 0

    def search(self, fts_query: str, terms: _search.Query, sid: str | None, limit: int) -> list[Hit]:
        # Rank only the newest `search_candidates` matches, so a query matching most of a
        # huge store costs about the same as one matching that many (see Store.search).
        query = _tsquery(terms)
        if not query:
            return []
        params = {"q": query, "cand": self.engine.search_candidates, "limit": limit, "sid": sid}
        rows = self.engine.fetch(self.sql["all" if sid is None else "session"], params)
        return [(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]

    def maintained(self) -> bool:
        """Read the flag once per transaction, under the shared lock the builder takes
        exclusively: a transaction that read "not built" ends before a build begins."""
        if self.known:
            return True
        eng = self.engine
        tx = eng._tx()
        if tx.index_checked is not None:
            return tx.index_checked
        if not tx.index_shared:
            eng.execute("SELECT pg_advisory_xact_lock_shared(%s::bigint)", (eng._k_index,))
            tx.index_shared = True
        on = eng.meta("index_built") == "1"
        if on:
            self.known = True
        tx.index_checked = on
        return on

    def added(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if index or self.maintained():
            self.engine.execute(self.sql["put"], (seq, sid, _tsvector(prep.text)))

    changed = added

    def removed(self, seqs: list[int]) -> None:
        self.engine.execute(self.sql["remove"], (list(seqs),))

    def session_removed(self, sid: str, seqs: list[int]) -> None:
        self.engine.execute(self.sql["remove_session"], (sid,))

    def lock_build(self) -> None:
        # Exclusive: waits for every write transaction that read the flag as "not built".
        self.engine.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (self.engine._k_index,))

    def begin_build(self) -> None:
        self.engine.execute(self.sql["reset"])

    def put_batch(self, rows: list[tuple[int, str, str]]) -> None:
        eng = self.engine
        conn = eng._tx().conn
        with eng.guard(), conn.cursor() as cur, cur.copy(self.sql["copy"]) as copy:
            for seq, sid, text in rows:
                copy.write_row((seq, sid, _tsvector(text)))

    def mark_built(self) -> None:
        self.engine._tx().index_checked = True
        self.known = True  # monotonic: once built, the index is never dropped
