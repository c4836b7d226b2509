"""The DuckDB engine's search index: its own inverted index, ranked with BM25 in SQL.

DuckDB's ``fts`` extension needs a download and does not update incrementally, so
``sessionkit_terms(term, seq, tf, pos)`` holds one row per stem per message with the
stem's token positions, and the message row's ``index_len`` column its word count (NULL
while it is not indexed). The index is built on the first search and kept current by
every write afterwards; a phrase matches when its stems sit at consecutive positions,
checked in the same SQL statement. A search ranks in one statement and reads its hits'
rows by seq in a second, both in one read-only transaction on a connection of its own,
outside the store's lock. :class:`TermsIndex` is ``DuckDBEngine.index``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .... import messages as _msg
from ....errors import SessionKitError, StoreClosed, missing
from ... import search as _search
from ..._index import Hit, SearchIndex

try:
    import duckdb
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing("duckdb", "duckdb", exc) from exc

if TYPE_CHECKING:
    from .engine import DuckDBEngine

__all__ = ["BM25_B", "BM25_K1", "TermsIndex"]

_T = TypeVar("_T")

#: BM25 parameters (the usual defaults, as in SQLite's FTS5).
BM25_K1 = 1.2
BM25_B = 0.75

# Rows per statement in bulk writes: large enough to amortise DuckDB's per-statement
# cost, small enough to keep the parameter lists' memory modest.
_BULK_ROWS = 10_000

# Up to this many messages, and this many characters of their indexed text, index rows
# are built in Python (see put_terms); past it, a message's postings (a Python list per
# stem, its positions in another) cost far more to build and hand over than to make in SQL.
_FEW_DOCS = 16
_FEW_CHARS = 64 * 1024


_TERMS_TABLE = """CREATE TABLE IF NOT EXISTS sessionkit_terms (
        term VARCHAR NOT NULL,
        seq BIGINT NOT NULL,
        tf INTEGER NOT NULL,
        pos INTEGER[] NOT NULL
    )"""


def _body(text: str) -> tuple[int, str]:
    """Word count and indexed form (stems joined by single spaces) of a message's text."""
    body = _search.index_text(text)
    return (body.count(" ") + 1 if body else 0), body


class TermsIndex(SearchIndex):
    """The inverted index of ``sessionkit_terms`` (see the module notes)."""

    engine: DuckDBEngine

    def __init__(self, engine: DuckDBEngine):
        super().__init__(engine)
        #: ``(prepared message, _body of it)`` of the message being written (see body_of).
        self.memo: tuple[Any, ...] | None = None

    def forget_body(self) -> None:
        """Drop the memo once its write is over (the text may be large)."""
        self.memo = None

    def count(self) -> int:
        return self.engine.fetch_one("SELECT count(index_len) FROM sessionkit_messages")[0]

    def built(self) -> bool:
        """The flag is the file's (held by its FileState, shared by the stores open on it)."""
        eng = self.engine
        with eng._lock:
            if eng._shared.index_on is None:
                eng._shared.index_on = eng.meta("index_built") == "1"
            return eng._shared.index_on

    def search(self, fts_query: str, terms: _search.Query, sid: str | None, limit: int) -> list[Hit]:
        return [hit for hit, _ in self.search_read(fts_query, terms, sid, limit)]

    def search_read(
        self, fts_query: str, terms: _search.Query, sid: str | None, limit: int
    ) -> list[tuple[Hit, str | None]]:
        """BM25 over the inverted index; ``terms`` is the parsed query (search.Query).
        Each hit comes with its stored JSON, read by the same statement (None for a
        message continued in chunk rows: the caller reads it).

        Every stem must occur in a hit; each phrase must occur as consecutive stems.
        Scores use the store-wide document count and average length, like FTS5.

        A phrase is checked by joining its words' offsets in the phrase with their
        positions in each document that holds every stem: a position minus its word's
        offset is where the phrase would start, and a start that every word of the
        phrase gives is a match. That costs the phrase's words' occurrences in those
        documents, linear in the phrase's length.

        The query runs on a connection of its own, outside the store's lock: it reads
        one committed snapshot, and writers in other threads go on meanwhile. Inside
        this thread's own write transaction it runs on that transaction's connection,
        so it sees the transaction's writes.
        """
        query = terms
        stems: list[str] = list(dict.fromkeys([*query.terms, *(w for p in query.phrases for w in p)]))
        if not stems or limit <= 0:
            return []
        params: list[Any] = [stems]
        where_sid = ""
        if sid is not None:
            where_sid = "WHERE m.session_id = ?"
            params.append(sid)
        params.append(len(stems))
        phrase_ctes = ""
        phrase_cond = ""
        if query.phrases:
            numbers, words, offsets, lengths = [], [], [], []
            for n, phrase in enumerate(query.phrases):
                for off, word in enumerate(phrase):
                    numbers.append(n)
                    words.append(word)
                    offsets.append(off)
                    lengths.append(len(phrase))
            params += [numbers, words, offsets, lengths, len(query.phrases)]
            phrase_ctes = """, words AS (
                SELECT unnest(?::INTEGER[]) AS phrase, unnest(?::VARCHAR[]) AS term,
                       unnest(?::INTEGER[]) AS off, unnest(?::INTEGER[]) AS plen
            ), starts AS (
                SELECT w.phrase, w.plen, h.seq, unnest(h.pos) - w.off AS start
                FROM words w JOIN hits h ON h.term = w.term
                WHERE h.seq IN (SELECT seq FROM matching)
            ), phrased AS (
                SELECT seq FROM (
                    SELECT DISTINCT phrase, seq FROM starts GROUP BY phrase, seq, start, plen HAVING count(*) = plen
                ) GROUP BY seq HAVING count(*) = ?
            )"""
            phrase_cond = "WHERE seq IN (SELECT seq FROM phrased)"
        params += [int(self.engine.search_candidates), int(limit)]
        content = self.engine.dialect.message_content.format(t="m")  # (the row's JSON whole)
        sql = f"""
            WITH hits AS (
                SELECT term, seq, tf, pos FROM sessionkit_terms
                WHERE term IN (SELECT unnest(?::VARCHAR[]))
            ), df AS (
                SELECT term, count(*)::DOUBLE AS n FROM hits GROUP BY term
            ), corpus AS (
                SELECT count(index_len)::DOUBLE AS n, greatest(coalesce(avg(index_len), 0), 1)::DOUBLE AS avgdl
                FROM sessionkit_messages
            ), per_doc AS (
                SELECT h.seq, count(*) AS matched,
                       sum(ln(1 + (c.n - df.n + 0.5) / (df.n + 0.5))
                           * h.tf * ({BM25_K1} + 1)
                           / (h.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * m.index_len / c.avgdl))) AS score
                FROM hits h
                JOIN df ON df.term = h.term
                JOIN sessionkit_messages m ON m.seq = h.seq
                CROSS JOIN corpus c
                {where_sid}
                GROUP BY h.seq
            ), matching AS (
                SELECT seq, score FROM per_doc WHERE matched = ?
            ){phrase_ctes}, cand AS (  -- rank only the newest search_candidates matches, like the SQLite engine
                SELECT seq, score FROM matching {phrase_cond}
                ORDER BY seq DESC LIMIT ?
            )
            SELECT seq, score FROM cand ORDER BY score DESC, seq DESC LIMIT ?"""
        # The hits' rows are read by seq in a second statement of the same snapshot:
        # joined to the ranking instead, DuckDB reads every row's content before the join
        # keeps ten (5 MB a search at 10,000 messages; about a quarter of the time at
        # 100,000). One snapshot holds both, so every ranked seq has its row.
        rows_sql = f"""SELECT m.seq, m.session_id, m.id, m.role, m.chunks, {content}, m.created_at
            FROM sessionkit_messages m WHERE m.seq IN (SELECT unnest(?::BIGINT[]))"""

        def read(fetch: Callable[[str, list[Any]], list[Any]]) -> list[tuple[Hit, str | None]]:
            ranked = fetch(sql, params)
            if not ranked:
                return []
            rows = {r[0]: r for r in fetch(rows_sql, [[seq for seq, _ in ranked]])}
            whole = self.engine.whole_json
            return [
                ((seq, r[1], r[2], r[3], score), None if r[4] else whole(r[5], r[6]))
                for seq, score in ranked
                for r in (rows[seq],)
            ]

        return self._read_apart(read)

    def _read_apart(self, read: Callable[[Callable[[str, list[Any]], list[Any]]], _T]) -> _T:
        """``read(fetch)``, its statements run on a connection of its own in one
        read-only transaction (one snapshot), without the store's lock (inside this
        thread's write transaction: on its connection, under the lock)."""
        with self.engine._lock:
            if self.engine._closed:
                raise StoreClosed("the store is closed")
            if self.engine._shared.writer == threading.get_ident():
                return read(self.engine.fetch)
            self.engine.merge_journal()
            with self.engine.guard():
                cursor = self.engine._db.cursor()
            self.engine._cursors.add(cursor)

        def fetch(sql: str, params: list[Any]) -> list[Any]:
            return cursor.execute(sql, params).fetchall()

        try:
            with self.engine.guard():
                cursor.execute("BEGIN TRANSACTION READ ONLY")
                return read(fetch)
        except SessionKitError as exc:
            if self.engine._closed:  # interrupted by close()
                raise StoreClosed("the store was closed during the search") from exc
            raise
        finally:
            with self.engine._lock:
                self.engine._cursors.discard(cursor)
            with contextlib.suppress(duckdb.Error):
                cursor.close()

    def body_of(self, prep: _msg.Prepared) -> tuple[int, str]:
        """``_body`` of a message being written, computed once per write: an append asks
        for it up to three times (whether to index, the row's word count, the postings),
        and stemming a message of megabytes takes seconds. Callers hold the store's lock."""
        memo = self.memo
        if memo is not None and memo[0] is prep:
            return memo[1]
        body = _body(prep.text)
        self.memo = (prep, body)
        return body

    # -- the search index ------------------------------------------------------------------
    def added(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if index:
            body = self.body_of(prep)[1]
            if body:
                self.put_terms([seq], [body])

    def changed(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if index:
            self.removed([seq])
            self.added(sid, seq, prep, nchunks, index)

    def removed(self, seqs: list[int]) -> None:
        for start in range(0, len(seqs), _BULK_ROWS):
            self.engine.execute(
                "DELETE FROM sessionkit_terms WHERE seq IN (SELECT unnest(?::BIGINT[]))",
                (list(seqs[start : start + _BULK_ROWS]),),
            )

    def session_removed(self, sid: str, seqs: list[int]) -> None:
        self.engine.execute(
            "DELETE FROM sessionkit_terms WHERE seq IN (SELECT seq FROM sessionkit_messages WHERE session_id = ?)",
            (sid,),
        )

    def put_terms(self, seqs: list[int], bodies: list[str], table: str = "sessionkit_terms") -> None:
        """Index ``bodies`` (stems joined by spaces) of the messages ``seqs``."""
        if len(seqs) <= _FEW_DOCS and sum(map(len, bodies)) <= _FEW_CHARS:
            # A few messages: postings built here make a simpler statement, which DuckDB
            # plans about twice as fast as the grouping one below.
            terms: list[str] = []
            doc_seqs: list[int] = []
            tfs: list[int] = []
            positions: list[list[int]] = []
            for seq, body in zip(seqs, bodies):
                where: dict[str, list[int]] = {}
                for i, word in enumerate(body.split()):
                    where.setdefault(word, []).append(i)
                terms += where
                doc_seqs += [seq] * len(where)
                tfs += [len(p) for p in where.values()]
                positions += where.values()
            if terms:
                self.engine.execute(
                    f"""INSERT INTO "{table}" SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]),
                        unnest(?::INTEGER[]), unnest(?::INTEGER[][])""",
                    [terms, doc_seqs, tfs, positions],
                )
            return
        # Many messages: one string per message, split and grouped in SQL, is far
        # cheaper than handing DuckDB a Python list per stem.
        for start in range(0, len(seqs), _BULK_ROWS):
            self.engine.execute(
                f"""INSERT INTO "{table}"
                    SELECT term, seq, count(*), list(pos ORDER BY pos) FROM (
                        SELECT seq, unnest(words) AS term, unnest(range(len(words)))::INTEGER AS pos
                        FROM (SELECT unnest(?::BIGINT[]) AS seq, string_split(unnest(?::VARCHAR[]), ' ') AS words)
                        WHERE words <> ['']
                    ) GROUP BY term, seq""",
                [seqs[start : start + _BULK_ROWS], bodies[start : start + _BULK_ROWS]],
            )

    def mark_built(self) -> None:
        self.engine._shared.index_on = True

    def begin_build(self) -> None:
        # Postings go to a staging table batch by batch, then into the index sorted by
        # term: DuckDB's per-block min/max statistics then let a search skip almost
        # every block that holds none of its stems.
        self.engine.execute("DELETE FROM sessionkit_terms")
        self.engine.execute(
            "CREATE OR REPLACE TEMP TABLE sessionkit_terms_staging AS SELECT * FROM sessionkit_terms LIMIT 0"
        )
        self.engine.execute("CREATE OR REPLACE TEMP TABLE sessionkit_lengths_staging (seq BIGINT, len INTEGER)")

    def put_batch(self, rows: list[tuple[int, str, str]]) -> None:
        seqs, bodies, lengths = [], [], []
        for seq, _, text in rows:
            length, body = _body(text)
            seqs.append(seq)
            bodies.append(body)
            lengths.append(length)
        self.put_terms(seqs, bodies, "sessionkit_terms_staging")
        self.engine.execute(
            "INSERT INTO sessionkit_lengths_staging SELECT unnest(?::BIGINT[]), unnest(?::INTEGER[])", [seqs, lengths]
        )

    def finish_build(self) -> None:
        self.engine.execute("INSERT INTO sessionkit_terms SELECT * FROM sessionkit_terms_staging ORDER BY term, seq")
        self.engine.execute(
            """UPDATE sessionkit_messages SET index_len = l.len FROM sessionkit_lengths_staging AS l
               WHERE sessionkit_messages.seq = l.seq"""
        )
        self.engine.execute("DROP TABLE sessionkit_terms_staging")
        self.engine.execute("DROP TABLE sessionkit_lengths_staging")
