"""The DuckDB engine's search index: its own inverted index, ranked with BM25.

DuckDB's ``fts`` extension needs a download and does not update incrementally, so
``sessionkit_terms(term, seq, tf, pos)`` holds one row per stem per message with the
stem's token positions, and the message row's ``index_len`` column its word count (NULL
while it is not indexed). The index is built on the first search and kept current by
every write afterwards; a phrase matches when its stems sit at consecutive positions.
A search reads its stems' postings in one statement, ranks them here with the messages'
lengths (kept in memory between writes), and reads its hits' rows by seq in a second
statement, both in one read-only transaction on a connection of its own, outside the
store's lock. :class:`TermsIndex` is ``DuckDBEngine.index``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .... import messages as _msg
from ....errors import SessionKitError, StoreClosed, missing
from ... import search as _search
from ..._index import Hit, SearchIndex
from .state import whole_content

try:
    import duckdb
    import numpy as np
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing("duckdb", exc.name or "duckdb", exc) from exc

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


#: ``fetch(sql, params, numpy)``: a statement's rows, or its columns as numpy arrays.
_Fetch = Callable[[str, list[Any], bool], Any]
#: ``lengths()``: the indexed lengths of the snapshot being read.
_LengthsOf = Callable[[], "_Lengths"]

# Sessions whose indexed messages a _Lengths keeps (a session-filtered search reads its
# session's seqs once per version of the file); past it, they are read anew.
_SESSIONS_KEPT = 64


class _Lengths:
    """Each indexed message's word count (``index_len``), by seq, as of one version of
    the file, and the store-wide figures BM25 takes from them.

    Read by a search in its snapshot and kept in the file's state (``FileState.lengths``)
    for the next: a search then reads only its stems' postings and its hits' rows.
    Reading it whole costs about a search's worth at 100,000 messages (two numeric
    columns, 12 bytes a message in memory). After writes that only added messages, the
    next search reads just the new messages' lengths (:meth:`extended`): a new message's
    seq is above every stored one. A write that changes or removes indexed messages
    marks the file (``FileState.reshaped``), and the next search reads them all again.
    """

    __slots__ = ("avgdl", "lens", "n", "seqs", "sessions", "version")

    def __init__(self, version: int | None, seqs: Any, lens: Any, sessions: dict[str, Any] | None = None):
        self.version = version
        order = np.argsort(seqs, kind="stable")  # (mostly in order already)
        self.seqs = seqs[order]
        self.lens = lens[order]
        self.n = float(len(self.seqs))
        self.avgdl = max(float(self.lens.sum(dtype=np.float64)) / self.n if len(self.lens) else 0.0, 1.0)
        self.sessions: dict[str, Any] = sessions or {}

    @classmethod
    def read(cls, fetch: _Fetch, version: int | None = None) -> _Lengths:
        got = fetch("SELECT seq, index_len FROM sessionkit_messages WHERE index_len IS NOT NULL", [], True)
        return cls(version, got["seq"], got["index_len"])

    def extended(self, fetch: _Fetch, version: int) -> _Lengths:
        """These lengths with the messages added since (those past the newest seq held)."""
        top = int(self.seqs[-1]) if len(self.seqs) else -1
        got = fetch(
            "SELECT seq, index_len, session_id FROM sessionkit_messages WHERE seq > ? AND index_len IS NOT NULL",
            [top],
            True,
        )
        seqs, sids = got["seq"], got["session_id"]
        sessions = {}
        for sid, held in list(self.sessions.items()):
            mine = seqs[sids == sid]
            sessions[sid] = np.concatenate([held, np.sort(mine)]) if len(mine) else held
        return _Lengths(
            version, np.concatenate([self.seqs, seqs]), np.concatenate([self.lens, got["index_len"]]), sessions
        )

    def session(self, sid: str, fetch: _Fetch) -> Any:
        """The seqs of ``sid``'s indexed messages, in order."""
        seqs = self.sessions.get(sid)
        if seqs is None:
            got = fetch(
                "SELECT seq FROM sessionkit_messages WHERE session_id = ? AND index_len IS NOT NULL", [sid], True
            )
            seqs = np.sort(got["seq"])
            if len(self.sessions) >= _SESSIONS_KEPT:
                self.sessions = {}  # (one assignment: searches in other threads may read it)
            self.sessions[sid] = seqs
        return seqs

    def held(self, seqs: Any) -> Any:
        """Those of ``seqs`` (in order) that are indexed messages."""
        return seqs[_members(seqs, self.seqs)]

    def scores(self, cand: Any, postings: Sequence[tuple[Any, Any]]) -> Any:
        """BM25 of the messages ``cand`` (held seqs, in order) for the stems whose
        ``(seqs, tfs)`` postings are given (each stem in every one of ``cand``)."""
        dl = self.lens[np.searchsorted(self.seqs, cand)].astype(np.float64)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / self.avgdl)
        score = np.zeros(len(cand))
        for seqs, tfs in postings:
            df = float(len(seqs))
            idf = np.log(1 + (self.n - df + 0.5) / (df + 0.5))
            tf = tfs[np.searchsorted(seqs, cand)].astype(np.float64)
            score += idf * tf * (BM25_K1 + 1) / (tf + norm)
        return score


def _members(seqs: Any, among: Any) -> Any:
    """Which of ``seqs`` are in ``among`` (in order), as a mask."""
    if not len(among):
        return np.zeros(len(seqs), dtype=bool)
    at = np.minimum(np.searchsorted(among, seqs), len(among) - 1)
    return among[at] == seqs


def _newest(matched: Any, count: int, kept: Callable[[Any], Any]) -> Any:
    """The newest ``count`` of ``matched`` (seqs in order) that ``kept`` keeps (it
    filters a slice of them), in order. Slices are taken from the newest end, each
    twice the last, so the work is bounded by ``count`` rather than the matches."""
    parts = []
    end, step, need = len(matched), count, count
    while end > 0 and need > 0:
        part = kept(matched[max(end - step, 0) : end])
        parts.append(part)
        need -= len(part)
        end -= step
        step *= 2
    got = np.concatenate(parts[::-1]) if parts else matched[:0]
    return got[-count:] if count else got[:0]


def _phrased(fetch: _Fetch, phrases: Sequence[Sequence[str]], matched: Any) -> Any:
    """Those of ``matched`` (seqs holding every stem, in order) that hold every phrase:
    each phrase's stems at consecutive positions. A phrase starts where each of its
    words' positions, less the word's offset in the phrase, meet."""
    words = list(dict.fromkeys(w for phrase in phrases for w in phrase))
    where: dict[tuple[str, int], list[int]] = {}
    for term, seq, pos in fetch(
        """SELECT term, seq, pos FROM sessionkit_terms
           WHERE term IN (SELECT unnest(?::VARCHAR[])) AND seq IN (SELECT unnest(?::BIGINT[]))""",
        [words, matched.tolist()],
        False,
    ):
        where[term, seq] = pos
    keep = []
    for seq in matched.tolist():
        for phrase in phrases:
            starts = set(where.get((phrase[0], seq), ()))
            for off, word in enumerate(phrase[1:], 1):
                starts.intersection_update(p - off for p in where.get((word, seq), ()))
                if not starts:
                    break
            if not starts:
                break
        else:
            keep.append(seq)
    return np.array(keep, dtype=matched.dtype)


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
        Each hit comes with its stored JSON (None for a message continued in chunk rows:
        the caller reads it).

        Every stem must occur in a hit; each phrase must occur as consecutive stems.
        Scores use the store-wide document count and average length, like FTS5, and only
        the newest ``search_candidates`` matches are ranked, like the SQLite engine.

        The statements are plain reads: the postings of the query's stems, the positions
        of a phrase's stems in the documents that hold every stem, the hits' rows. The
        ranking is done here, with each indexed message's length (see :class:`_Lengths`).
        Ranked in one SQL statement instead, DuckDB spent about half of each search
        planning it (a profile: binding and optimizer, about 5 ms of 13 at 10,000
        messages), whatever its form.

        The statements run on a connection of their own in one read-only transaction,
        outside the store's lock: they read one committed snapshot, and writers in other
        threads go on meanwhile. Inside this thread's own write transaction they run on
        that transaction's connection, so they see the transaction's writes.
        """
        query = terms
        stems: list[str] = list(dict.fromkeys([*query.terms, *(w for p in query.phrases for w in p)]))
        if not stems or limit <= 0:
            return []
        # One statement for every stem's postings: each stem's part finds its rows by the
        # index's term order (block statistics), and a UNION ALL of equalities plans
        # faster than one IN over the list.
        postings_sql = " UNION ALL ".join(
            f"SELECT {k}::INTEGER AS k, seq, tf FROM sessionkit_terms WHERE term = ?" for k in range(len(stems))
        )
        # (The row's JSON is made whole here, not in the statement: a third of its time.)
        rows_sql = """SELECT seq, session_id, id, role, chunks, content, text, created_at
            FROM sessionkit_messages WHERE seq IN (SELECT unnest(?::BIGINT[]))"""
        candidates = int(self.engine.search_candidates)

        def read(fetch: _Fetch, lengths: _LengthsOf) -> list[tuple[Hit, str | None]]:
            got = fetch(postings_sql, stems, True)
            ks, seqs, tfs = got["k"], got["seq"], got["tf"]
            postings = []
            for k in range(len(stems)):
                mine = ks == k
                order = np.argsort(seqs[mine], kind="stable")  # (mostly in order already)
                postings.append((seqs[mine][order], tfs[mine][order]))
            # The rarest stem's messages are the ones to look at; the others' postings
            # and the filters below are asked only of the newest of them (see _newest).
            rarest = min(postings, key=lambda p: len(p[0]))[0]
            if not rarest.size:
                return []
            table = lengths()
            session = None if sid is None else table.session(sid, fetch)

            def kept(part: Any) -> Any:
                for other, _ in postings:
                    if other is not rarest:
                        part = part[_members(part, other)]
                part = table.held(part)
                if session is not None:
                    part = part[_members(part, session)]
                if query.phrases and part.size:
                    part = _phrased(fetch, query.phrases, part)
                return part

            cand = _newest(rarest, candidates, kept)
            if not cand.size:
                return []
            score = table.scores(cand, postings)
            top = np.lexsort((cand, score))[::-1][:limit]  # score, then seq, both descending
            ranked = [(int(cand[i]), float(score[i])) for i in top]
            rows = {r[0]: r for r in fetch(rows_sql, [[seq for seq, _ in ranked]], False)}
            return [
                ((seq, r[1], r[2], r[3], score), None if r[4] else whole_content(r[5], r[6], r[7]))
                for seq, score in ranked
                for r in (rows[seq],)
            ]

        return self._read_apart(read)

    def _read_apart(self, read: Callable[[_Fetch, _LengthsOf], _T]) -> _T:
        """``read(fetch, lengths)``, its statements run on a connection of its own in one
        read-only transaction (one snapshot), without the store's lock (inside this
        thread's write transaction: on its connection, under the lock).

        ``fetch(sql, params, numpy)`` gives a statement's rows (as columns of numpy
        arrays when ``numpy``); ``lengths()`` the :class:`_Lengths` of that snapshot.
        """
        eng = self.engine
        shared = eng._shared
        with eng._lock:
            if eng._closed:
                raise StoreClosed("the store is closed")
            if shared.writer == threading.get_ident():

                def fetch_held(sql: str, params: list[Any], numpy: bool) -> Any:
                    with eng.guard(), eng.connection() as conn:
                        result = conn.execute(sql, params)
                        return result.fetchnumpy() if numpy else result.fetchall()

                return read(fetch_held, lambda: _Lengths.read(fetch_held))
            eng.merge_journal()
            with eng.guard():
                cursor = eng._db.cursor()
            eng._cursors.add(cursor)
            version = shared.version  # (no write is under way: each holds the lock)

        def fetch(sql: str, params: list[Any], numpy: bool) -> Any:
            result = cursor.execute(sql, params)
            return result.fetchnumpy() if numpy else result.fetchall()

        def lengths() -> _Lengths:
            # Called once the snapshot's first statement ran. The lengths kept in memory
            # describe this snapshot when no write began since the lock was let go (the
            # file's version unchanged) and they were read at this version; otherwise
            # they are read again in this snapshot, and kept when no write began meanwhile.
            table = shared.lengths
            if shared.version == version:
                if table is not None and table.version == version:
                    return table
                if table is not None and table.version is not None and shared.reshaped <= table.version:
                    table = table.extended(fetch, version)  # (only messages added since)
                else:
                    table = _Lengths.read(fetch, version)
                if shared.version == version:
                    shared.lengths = table
                return table
            return _Lengths.read(fetch)

        try:
            with eng.guard():
                cursor.execute("BEGIN TRANSACTION READ ONLY")
                return read(fetch, lengths)
        except SessionKitError as exc:
            if eng._closed:  # interrupted by close()
                raise StoreClosed("the store was closed during the search") from exc
            raise
        finally:
            with eng._lock:
                eng._cursors.discard(cursor)
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

    def reshaped(self) -> None:
        """Indexed messages change or go in this write: the lengths a search keeps are read
        whole again afterwards, not only extended (see _Lengths)."""
        self.engine._shared.reshaped = self.engine._shared.version

    def changed(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        self.reshaped()
        if index:
            self.removed([seq])
            self.added(sid, seq, prep, nchunks, index)

    def removed(self, seqs: list[int]) -> None:
        self.reshaped()
        for start in range(0, len(seqs), _BULK_ROWS):
            self.engine.execute(
                "DELETE FROM sessionkit_terms WHERE seq IN (SELECT unnest(?::BIGINT[]))",
                (list(seqs[start : start + _BULK_ROWS]),),
            )

    def session_removed(self, sid: str, seqs: list[int]) -> None:
        self.reshaped()
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
        self.reshaped()
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
