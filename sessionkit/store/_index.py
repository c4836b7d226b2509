"""The search index contract: one object per engine (``engine.index``) that answers
searches and keeps the full-text index of message text current.

The index is built on a store's first search (:meth:`SearchIndex.build`, one loop for
every engine, the engine indexing each batch) and, once built, never dropped: every
write afterwards keeps it current through the hooks below, which the engine's writes
call. Each engine keeps its index its own way:

* SQLite: an FTS5 table kept by triggers, with a second one for the newest messages
  (``engines/sqlite/search.py``: ``FTS5Index``);
* DuckDB: an inverted index of stems with their positions, ranked with BM25 in Python
  (``engines/duckdb/search.py``: ``TermsIndex``);
* PostgreSQL: a GIN-indexed ``tsvector`` per message (``engines/postgresql/search.py``: ``TsvectorIndex``).

Hits are ``(seq, session_id, id, role, score)`` rows, best first; the store restores
their messages (see :meth:`sessionkit.store.Store.search`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import messages as _msg

if TYPE_CHECKING:
    from ._sql_base import SQLBase
    from .search import Query

__all__ = ["Hit", "SearchIndex"]

#: ``(seq, session_id, id, role, score)``: one search hit.
Hit = tuple[int, str, str, str, float]

# Messages read per batch while the index is built: bounded memory on any store.
_BUILD_BATCH = 2000


class SearchIndex:
    """One engine's full-text index. ``engine`` is the engine that owns it.

    Reads (:meth:`built`, :meth:`search`, :meth:`count`) may run at any time; the
    other methods run inside the engine's write transaction.
    """

    def __init__(self, engine: SQLBase):
        self.engine = engine
        #: Whether the index is known to be built (monotonic: it is never dropped).
        self.known = False

    # -- what the store and its sessions ask --------------------------------------------
    def built(self) -> bool:
        """Whether the index exists (cached once true)."""
        if not self.known:
            self.known = self.engine.meta("index_built") == "1"
        return self.known

    def maintained(self) -> bool:
        """Inside a write: whether this transaction's writes must index their rows
        themselves (False where the database keeps the index, e.g. by triggers)."""
        return self.built()

    def search(self, fts_query: str, terms: Query, sid: str | None, limit: int) -> list[Hit]:
        """The best ``limit`` of the newest ``engine.search_candidates`` matches of the
        parsed query ``terms`` (``fts_query`` is its FTS5 form), in one session or all."""
        raise NotImplementedError

    def search_read(self, fts_query: str, terms: Query, sid: str | None, limit: int) -> list[tuple[Hit, str | None]]:
        """:meth:`search`, each hit with its stored JSON where the index read it in the same
        statement (None: the caller reads it, as ``engine.contents`` gives it)."""
        return [(hit, None) for hit in self.search(fts_query, terms, sid, limit)]

    def count(self) -> int:
        """How many messages the index holds (0 before it is built)."""
        raise NotImplementedError

    def build(self) -> None:
        """Index every stored message (inside a write; another process may have built it)."""
        eng = self.engine
        self.lock_build()
        if eng.meta("index_built") == "1":  # built meanwhile (another process, another store)
            self.mark_built()
            return
        self.begin_build()
        self.fill()
        self.finish_build()
        eng.execute(eng.sql["meta_put"], ("index_built", "1"))
        self.mark_built()

    def fill(self) -> None:
        """Index every stored message into the empty index (the build's work): batches of
        ``index_source`` rows handed to :meth:`put_batch`."""
        eng = self.engine
        last = 0
        while True:
            rows = eng.fetch(eng.sql["index_source"], (last, _BUILD_BATCH))
            if not rows:
                break
            last = rows[-1][0]
            # the analysis column holds each message's text (a long one's whole text too), as
            # message_text() gives it (PostgreSQL: a NUL as U+FFFD, which is no word either)
            self.put_batch([(seq, sid, text or "") for seq, sid, text in rows])

    # -- what the engine's writes call (``index``: what :meth:`maintained` said) -----------
    def added(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        """Index a row just inserted (its JSON continues in ``nchunks`` rows)."""

    def changed(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        """Re-index a row just updated."""

    def removed(self, seqs: list[int]) -> None:
        """Drop the entries of rows about to be deleted."""

    def session_removed(self, sid: str, seqs: list[int]) -> None:
        """Drop the entries of a session's rows (``seqs``) about to be deleted."""
        self.removed(seqs)

    # -- the build's steps ------------------------------------------------------------------
    def lock_build(self) -> None:
        """Keep other writers out while the index is built (engines with several writers)."""

    def begin_build(self) -> None:
        """Prepare an empty index before its first batch."""

    def put_batch(self, rows: list[tuple[int, str, str]]) -> None:
        """Index ``(seq, session_id, text)`` rows (the build)."""
        raise NotImplementedError

    def finish_build(self) -> None:
        """After the last batch (e.g. install the index's triggers)."""

    def mark_built(self) -> None:
        self.known = True
