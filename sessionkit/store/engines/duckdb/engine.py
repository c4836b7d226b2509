"""DuckDB engine: the shared engine (:mod:`sessionkit.store._sql`) on a DuckDB file.

What DuckDB changes:

* **Write sequence.** ``seq`` comes from the DuckDB SEQUENCE ``sessionkit_seq``;
  a sequence value is never handed out twice, even after a rollback or a delete.
* **Keys.** Each message row carries ``msg_key`` -- the session id
  length-prefixed and followed by the message id -- under a UNIQUE index.
  DuckDB answers point lookups from an index only for a single-column equality,
  so this one column gives both the idempotency guard and fast ``node()`` lookups.
  An insert writes the row only when the key is absent, in one statement; the
  UNIQUE index stays as the final guard. Without an index on ``(session_id, seq)``
  a path is read as on the other engines, runs of consecutive rows at a time, in
  larger pages (each is a scan of the session's rows).
* **Search.** DuckDB's ``fts`` extension needs a download and does not update
  incrementally, so this engine keeps its own inverted index, ranked with BM25 in
  SQL (see ``search.py``).
* **Locking.** A DuckDB file admits one process. Opening a file another process
  holds raises :class:`~sessionkit.errors.StoreLocked` naming that process (its
  PID and program) at once (DuckDB does not wait for the lock). Within one
  process, every store on the same file shares one lock, so their transactions
  never conflict; a file reached through two names (a hard link, a bind mount) is
  opened through the first (see ``_files``), so it is one database here too.
* **Durability.** DuckDB writes each commit to its write-ahead log and
  ``fdatasync``\\ s it before the commit returns. Single appends go to the journal
  file (below) with one ``write`` each: like SQLite's WAL at ``synchronous=NORMAL``,
  an append that returned survives a killed process. ``durability="full"`` fsyncs
  each journal line before the append returns, sets DuckDB's ``fsync_mode`` to
  ``FULL`` (``F_FULLFSYNC`` on macOS, where a plain fsync may stay in the drive's
  cache) and fsyncs the folder holding the database after each commit, so a freshly
  created database, WAL or journal file is recorded in its directory too.
* **Speed.** DuckDB spends about a millisecond planning and running any
  statement, however small, so the engine keeps statements per operation low.
  One method, ``_way``, chooses how new rows are written, once per single append
  (``append_fast``: one message or a chain); ``insert_row`` is the insert of
  the transaction way:

  - *the journal*: outside a transaction, a plain append or a chain of new ids is
    one JSON line of ``<file>.journal`` beside the database (a store in memory: rows
    of the ``sessionkit_journal`` table), with no DuckDB statement; its parent comes
    from the cached session tail, its seq from a block reserved from the sequence,
    the duplicate-id check from the session's ids held in memory;
  - *an indexed insert*: a single append to a session too large for an id set
    (``_KEY_BUDGET``), one autocommitted INSERT whose UNIQUE key index tells a
    stored id;
  - *a transaction*: inside one (joined), or opened for a message whose text goes
    into the search index: an INSERT that checks the key; a chain that cannot be a
    journal line takes the batched insert (``w_import_records``), a few statements
    whatever its length, as imports do (an import of many sessions: a few for all).

  Rows of many messages (imports, continuation rows, payloads, events, records)
  are written a whole batch per statement, passing column lists as parameters and
  unnesting them in SQL.
* **The append journal and the caches** (``state.py``, whose invariant ties
  the journal file, the caches and the database together). Only this process
  writes the file, so each session's newest row, the newest rows of its latest path
  (with their content: a recent window needs no statement), whether it has
  compactions, its ids and the set of stored sessions are kept in memory in step
  with every write; a rollback drops them all. Every statement but the journal's
  own first moves the journal into the messages table in one transaction
  (``merge_journal``) and then empties the file, as does an append that brings it
  to ``_JOURNAL_ROWS`` rows, closing the store (the empty file is removed), and the
  first statement after a process was killed with rows in it (a line it left half
  written was never acknowledged and is cut off; a journal of another database is
  renamed ``.orphan`` and left alone); so every read sees every append.
* **Long reads.** A search runs on a connection of its own, outside the store's
  lock, so appends from other threads go on while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from .... import messages as _msg
from ....errors import InvalidMessage, MessageNotFound, SessionKitError, StoreClosed, StoreCorrupt, StoreLocked, missing
from ... import _files
from ..._schema import DIALECTS, DUCKDB_JOURNAL_TABLE, INSERT_COLUMNS, MIGRATIONS, SCHEMA_VERSION, TABLES
from ..._sql import LocalEngine
from ..._values import Appended, Capabilities, Compaction, Node, _Latest
from .search import _BULK_ROWS, _TERMS_TABLE, TermsIndex, _body
from .state import _LOG_HEADER, _LOG_SUFFIX, TEXT_GAP, FileState, _Paths, sync_folder, text_value

try:
    import duckdb
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing("duckdb", "duckdb", exc) from exc

__all__ = ["DuckDBEngine", "SCHEMA_VERSION"]

# Tables whose rows are large (continuation rows, payloads): fewer per statement.
_LARGE_ROWS = {"chunks": 64, "blobs": 64}

# A message row as this engine writes it (a single insert, a journal line, the batched
# insert): its seq and key, the shared columns (_schema.INSERT_COLUMNS, from the table's
# declaration) and the search index's word count, in the table's column order.
_MESSAGE_ROW = ("seq", "msg_key", *INSERT_COLUMNS, "index_len")
if _MESSAGE_ROW != TABLES["messages"].column_names("duckdb"):
    raise AssertionError(f"DuckDB's message row {_MESSAGE_ROW} is not the declared table's column order")
_INSERT_MESSAGE = f"INSERT INTO sessionkit_messages ({', '.join(_MESSAGE_ROW)})"

# Rows of a whole-path read (get_history) taken in one statement at most.
_WHOLE_PATH = 1 << 20

# Write sequence numbers a single append reserves at a time (see DuckDBEngine._next_seq):
# each reservation is a committed statement (several milliseconds), so one per journal's
# worth of appends.
_SEQ_BLOCK = 4096

# The schema version that added sessionkit_journal (its step of the ledger).
_JOURNAL_VERSION = next(m.version for m in MIGRATIONS if DUCKDB_JOURNAL_TABLE in m.steps.get("duckdb", ()))


def _move_journal_sql(source: str) -> str:
    """The statement that copies journal rows (``source``: ``row`` and its order ``n``)
    into the messages table.

    Each row is the JSON array of a messages row's values in :data:`TABLES` order (what
    ``insert_row`` writes), parsed once per row in SQL: about five times faster than
    decoding the rows in Python and passing them back as column lists. A key twice in
    the journal keeps its first row, and a key already stored keeps the stored row
    (neither happens while the id sets hold, see ``FileState.keys_of``; a journal file moved
    again after a failure to empty it meets its own rows).
    """
    cols = [c for c in TABLES["messages"].columns if "duckdb" in c.only]
    paths = ", ".join(f"'$[{i}]'" for i in range(len(cols)))
    values = ", ".join(f"v[{i + 1}]::{_UNNEST_TYPES[c.type]}" for i, c in enumerate(cols))
    return (
        f"INSERT INTO sessionkit_messages ({', '.join(c.name for c in cols)}) SELECT {values} FROM ("
        f"SELECT json_extract_string(row, [{paths}]) AS v, n FROM ({source})) "
        "QUALIFY row_number() OVER (PARTITION BY v[2] ORDER BY n) = 1 ON CONFLICT DO NOTHING"
    )


#: Control characters that DuckDB's ``to_json`` writes otherwise than the store's encoder
#: (``\u001F``, not ``\u001f``): a text holding one keeps its JSON whole (see row_json).
_UNLIKE_TO_JSON = re.compile("[\x00-\x07\x0b\x0e-\x1f]")
# "... Conflicting lock is held in /usr/bin/python3 (PID 1234) by user alice ..."
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<exe>.*?) \(PID (?P<pid>\d+)\)(?: by user (?P<user>\S+))?")

# DuckDB's file header carries this magic at bytes 8..12.
_MAGIC = b"DUCK"

# The block size of a new store file: a quarter of DuckDB's default of 256 KiB. The file
# grows by whole blocks and every table or index holding a row has blocks of its own, so
# an empty store is 5 blocks (the meta and migrations tables and their keys) and most of
# the tables a store fills now and then (labels, runs, chunks) hold a few rows: at 256 KiB
# that fixed part was about a fifth of a 10,000-message file. A file keeps the block size
# it was made with; files made with the default open as before.
_BLOCK_SIZE = 64 * 1024

_UNNEST_TYPES = {
    "text": "VARCHAR",
    "int": "INTEGER",
    "bigint": "BIGINT",
    "blob": "BLOB",
    "seq": "BIGINT",
    "real": "DOUBLE",
}

# Rows of the sessionkit_journal table (left by a process of an earlier version, or
# written by a store in memory), and rows of the journal file passed as a list.
_MOVE_JOURNAL = _move_journal_sql("SELECT row, rowid AS n FROM sessionkit_journal")
# Each line of the file is a JSON array of rows, written by one append or one chain.
_MOVE_JOURNAL_FILE = _move_journal_sql(
    "SELECT unnest(rs) AS row, i * 4294967296 + generate_subscripts(rs, 1) AS n FROM ("
    "SELECT json_extract(line, '$[*]') AS rs, i FROM ("
    "SELECT unnest(l) AS line, generate_subscripts(l, 1) AS i FROM (SELECT ?::VARCHAR[] AS l)))"
)


def _key(sid: str, mid: str) -> str:
    """The single-column key of a message: unambiguous thanks to the length prefix."""
    return f"{len(sid)}:{sid}{mid}"


# The state of each file open in this process, shared by every engine on it.
_SHARED: weakref.WeakValueDictionary[str, FileState] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _shared_for(path: str | None, where: str) -> FileState:
    if path is None:
        return FileState(where)
    with _SHARED_LOCK:
        shared = _SHARED.get(path)
        if shared is None:
            shared = _SHARED[path] = FileState(where)
        return shared


def _describe_holder(text: str) -> str:
    """Who holds a DuckDB file, from DuckDB's lock error: its PID and program (never its
    arguments, which may carry secrets), and its user."""
    m = _LOCK_HOLDER.search(text)
    if m is None:
        return "another process"
    pid = m.group("pid")
    program = os.path.basename(m.group("exe")) or m.group("exe")
    with contextlib.suppress(OSError):  # Linux names what the process runs as (e.g. "sessionkit")
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            comm = fh.read().strip()
        if comm and comm != program:
            program = f"{program}, {comm}"
    who = f"PID {pid} ({program}"
    if m.group("user"):
        who += f", user {m.group('user')}"
    return who + ")"


#: Rows of a session's latest path read with its newest row when that row is not yet known
#: (DuckDBEngine.latest).
_LATEST_PAGE = 64


class DuckDBEngine(LocalEngine):
    """Storage primitives on DuckDB. Open through ``open_store("x.duckdb")``.

    Options: ``durability`` (``"normal"`` or ``"full"``, see the module notes),
    ``chunk_chars`` (stored JSON longer than this continues in extra rows),
    ``threads`` and ``memory_limit`` (DuckDB settings, e.g. ``"2GB"``; ``sql_memory_limit``,
    the option of every engine, sets the same limit: the database's, which bounds the
    store's own work as well as ``store.sql``).
    """

    kind = "duckdb"
    dialect = DIALECTS["duckdb"]
    driver_errors = (duckdb.Error,)
    capabilities = Capabilities(bulk_insert=True)
    # Rows of a path are read a page per statement, each a scan of the session's rows
    # (DuckDB keeps no index on (session_id, seq), only zone maps): pages grow larger
    # than on SQLite so that a long path takes a few statements.
    PAGE = 4096
    CHANGE_LOG = False  # analysis queries read this store's own tables (see analysis_query)
    EXTRA_SCHEMA = (_TERMS_TABLE, DUCKDB_JOURNAL_TABLE)
    SCRIPTS = True
    INDEX = TermsIndex
    index: TermsIndex
    BEGIN = "BEGIN TRANSACTION"
    STATEMENTS = {
        "node": "SELECT {node} FROM {messages} WHERE msg_key = ?",
        "nodes_by_id": "SELECT {node} FROM {messages} WHERE msg_key IN (SELECT unnest(?::VARCHAR[]))",
        "nodes_by_key": "SELECT msg_key, {node} FROM {messages} WHERE msg_key IN (SELECT unnest(?::VARCHAR[]))",
        # max(seq) first, then the row: cheaper on DuckDB than ORDER BY seq DESC LIMIT 1
        "latest": (
            "SELECT {node} FROM {messages} WHERE session_id = ? AND seq ="
            " (SELECT max(seq) FROM {messages} WHERE session_id = ?)"
        ),
        "walk_up_key": "SELECT {node} FROM {messages} WHERE msg_key = ?",
    }

    def __init__(
        self, location: str, *, threads: int | None = None, memory_limit: str | None = None, **options: Any
    ) -> None:
        super().__init__(**options)
        if (
            memory_limit is not None
            and self.sql_memory_limit is not None
            and str(memory_limit).strip() != self.sql_memory_limit
        ):
            raise ValueError(
                f"memory_limit={memory_limit!r} disagrees with sql_memory_limit={self.sql_memory_limit!r}:"
                " on a DuckDB store both set the database's one limit; give one"
            )
        if memory_limit is None:
            memory_limit = self.sql_memory_limit
        else:
            self.sql_memory_limit = str(memory_limit)
        self.path = None if location in ("", ":memory:") else str(Path(location).resolve())
        self._full = self.durability == "full"
        self._views: dict[str, Any] = {}  # which analysis views the analysis connection has
        self._aborted: str | None = None  # why the write transaction can only roll back (_note_aborted)
        self._cursors: set[Any] = set()  # connections of long reads running outside the lock (see TermsIndex.search)
        # The thread whose statements leave the journal as it is, while it reads a session
        # with no row there (see latest).
        self._unmoved: int | None = None
        # The name this process opens the file by (see _files): one file reached through
        # two names (a hard link, a bind mount) is one database, one FileState, one journal.
        self._held: _files.Claim | None = None
        self._file: str | None = None
        if self.path is None:
            self._db = self._connect(location)
        else:
            self._check_path(location)
            with _files.claim(self.path) as held:
                self._db = self._connect(held.name)
            self._held, self._file = held, held.name
        self._shared = _shared_for(self._file, self.path or ":memory:")
        self._lock = self._shared.lock
        with self._lock:
            first = self._shared.users == 0
            if first:
                # No engine had the file open here, so another process may have written
                # it since: nothing cached from before still holds.
                self._shared.forget()
            self._shared.users += 1
        try:
            # A long index build must not draw DuckDB's progress bar into a notebook.
            self.execute("SET enable_progress_bar = false")
            # The engine's reads of a session ask for its rows in order, a few at a time
            # (ORDER BY seq ... LIMIT n): below 50 rows DuckDB's late materialization
            # scans the table twice for them (the order's column, then the rows by row
            # id), which took about 1.7 ms against 1.0 for one scan (a 20-message
            # conversation among 20,000 messages). Off for this connection only: the
            # store's SQL (store.sql, the views) runs on connections of its own.
            with contextlib.suppress(duckdb.Error):  # (a DuckDB without the setting)
                self._db.execute("SET late_materialization_max_rows = 0")
            # Applied as settings, not connect() config: a different config would stop
            # other code in this process from opening the same file with plain connect().
            if self._full:
                with contextlib.suppress(duckdb.CatalogException):  # older DuckDB lacks the setting
                    self._db.execute("SET fsync_mode = 'FULL'")  # F_FULLFSYNC on macOS
            if threads is not None:
                self.execute(f"SET threads = {int(threads)}")
            if memory_limit is not None:
                self.execute("SET memory_limit = ?", [str(memory_limit)])
            version = self.schema_version()
            if version is not None and version > SCHEMA_VERSION:
                raise self.too_new(version)
            if first:
                # Appends a killed process left in the journal: the next statement moves
                # them (before a migration, which then never meets an older row layout).
                with self._lock:
                    journal = version is not None and version >= _JOURNAL_VERSION
                    self._shared.opened(
                        self._direct("SELECT count(*) FROM sessionkit_journal")[0][0] if journal else 0,
                        self._file,
                        lambda header: journal and header == _LOG_HEADER + self._journal_id(),
                    )
            if version != SCHEMA_VERSION:
                with self.write():
                    self.create_or_migrate()
        except BaseException:
            self.close()
            raise

    # -- opening --------------------------------------------------------------------
    def _check_path(self, location: str) -> None:
        assert self.path is not None
        path = Path(self.path)
        if not path.parent.is_dir():
            raise ValueError(f"cannot open store {location!r}: folder {str(path.parent)!r} does not exist")
        if path.is_dir():
            raise ValueError(f"cannot open store {location!r}: it is a folder")
        if path.exists():
            self._check_header(path)

    def _connect(self, name: str) -> duckdb.DuckDBPyConnection:
        if self.path is None:
            with self.guard():
                return duckdb.connect(":memory:")
        try:
            if not os.path.exists(name):
                self._make_file(name)
            return duckdb.connect(name)
        except duckdb.IOException as exc:
            text = str(exc)
            if "not a valid DuckDB database" in text:
                raise ValueError(f"{self.path} is not a DuckDB database: {text}") from exc
            raise self.translate(exc) from exc
        except duckdb.Error as exc:
            raise self.translate(exc) from exc

    @staticmethod
    def _make_file(name: str) -> None:
        """Make an empty database file of :data:`_BLOCK_SIZE` blocks.

        Made by ATTACH from a connection of its own, not by ``connect()`` with the
        ``default_block_size`` setting: a file open in this process with a configuration
        of its own refuses every plain ``duckdb.connect()`` of it (DuckDB's
        "different configuration" error), and a user's own connection to the store's file
        must keep working. Called inside ``_files.claim``, whose lock makes a new file one
        at a time in this process; another process making the same file at the same moment
        holds its lock, and this ATTACH fails as the connect would have (``StoreLocked``).
        """
        quoted = name.replace("'", "''")  # ATTACH takes no parameter for its path
        with duckdb.connect(":memory:") as con:
            con.execute(f"ATTACH '{quoted}' AS made (BLOCK_SIZE {_BLOCK_SIZE})")
            con.execute("DETACH made")

    def _check_header(self, path: Path) -> None:
        """Refuse foreign files before DuckDB sees them.

        DuckDB recognises a SQLite file and tries to install its sqlite extension,
        which needs the network; a clear error is better. An empty file (as left by
        ``tempfile.NamedTemporaryFile(suffix=".duckdb")``) holds nothing and is
        replaced by a new database.
        """
        try:
            with open(path, "rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise ValueError(f"cannot read store file {str(path)!r}: {exc}") from exc
        if not head:
            os.remove(path)
            return
        if head[8:12] != _MAGIC:
            kind = "a SQLite database" if head.startswith(b"SQLite format 3") else "not a DuckDB database"
            raise ValueError(f"{path} is {kind}: open it with a .db/.sqlite path, or pick another file")

    def translate(self, exc: BaseException) -> BaseException:
        text = str(exc)
        where = self.path or ":memory:"
        if "Conflicting lock" in text or "Could not set lock" in text:
            return StoreLocked(
                f"DuckDB store {where} is held by {_describe_holder(text)}; a DuckDB file admits one process "
                "at a time: close it there, or use SQLite or PostgreSQL to share a store between processes"
            )
        if isinstance(exc, duckdb.InvalidInputException) and "encode" in text:
            return InvalidMessage(f"a value cannot be stored as UTF-8 text: {text}")
        if (
            isinstance(exc, (duckdb.SerializationException, duckdb.FatalException))
            or "checksum" in text.lower()
            or "corrupt" in text.lower()
        ):
            return StoreCorrupt(f"DuckDB store {where} is damaged: {text}")
        return SessionKitError(f"DuckDB store {where}: {text}")

    def table_exists(self, name: str) -> bool:
        return bool(
            self.fetch_one(
                """SELECT count(*) FROM duckdb_tables()
               WHERE database_name = current_database() AND schema_name = 'main' AND table_name = ?""",
                (name,),
            )[0]
        )

    def close(self) -> None:
        # An analysis query running in another thread is stopped first (it raises
        # StoreClosed): DuckDB refuses to close a database a statement still runs on.
        self._analysis_runs.close()
        # (Inside this thread's write transaction the analysis setup may be waiting for it.)
        setup = self._analysis_setup.acquire(blocking=self._shared.writer != threading.get_ident())
        try:
            self._close()
        finally:
            if setup:
                self._analysis_setup.release()

    def _close(self) -> None:
        with self._lock:
            if not self._closed:
                # Left in the journal when this fails: the next opening moves them.
                with contextlib.suppress(SessionKitError):
                    self.merge_journal()
                self._closed = True
                self._shared.users -= 1
                if not self._shared.users:
                    self._shared.close_file()
                for cursor in list(self._cursors):  # a search running meanwhile stops with an error
                    with contextlib.suppress(duckdb.Error):
                        cursor.interrupt()
                con, self._analysis = self._analysis, None
                if con is not None:
                    with contextlib.suppress(duckdb.Error):
                        con.close()
                self._db.close()
        _files.release(self._held)  # outside the lock: _files' own lock is taken before it on opening

    # -- analysis: queries on this database's own tables --------------------------------
    def analysis_query(
        self,
        query: str,
        params: Any = None,
        session_ids: list[str] | None = None,
        files: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """A read-only query over views defined on this store's own tables (see
        ``_analysis``): on a second connection to the database, in a transaction of its
        own (one snapshot; the store's writers go on) that is rolled back. That connection
        shares the store's database, whose configuration cannot be locked down: the
        query's parse tree keeps it to the views (``sql.sandbox.check_query``), and
        ``files=True`` runs it on a connection of its own."""
        from ...sql import query as _query
        from ...sql import views as _analysis

        tables = {name: self.quote("sessionkit_" + name) for name in (*_analysis.SOURCE_COLUMNS, "chunks")}
        if self.in_write():
            # From inside this thread's write transaction: on the transaction's connection,
            # so the query sees the transaction's writes, which then commit or roll back
            # with it (the views are made in the transaction too).
            with self._analysis_runs.run(timeout) as run, self._lock:
                try:
                    return _query.run_query(
                        self._db,
                        tables,
                        query,
                        params,
                        {},
                        session_ids=session_ids,
                        run=run,
                        files=files,
                        in_transaction=True,
                        memory=self.sql_memory_limit,
                    )
                except BaseException as exc:
                    self._note_aborted(exc)
                    raise
        with self._analysis_runs.run(timeout) as run, self._analysis_setup:  # (StoreClosed once the store closes)
            run.raise_if_stopped()
            self.merge_journal()
            con = self._analysis
            if con is None:
                with self._lock:
                    if self._closed:
                        raise StoreClosed("the store is closed")
                    con = self._analysis = _query.new_connection(self._db)
            return _query.run_query(
                con,
                tables,
                query,
                params,
                self._views,
                session_ids=session_ids,
                run=run,
                files=files,
                memory=self.sql_memory_limit,
            )

    # -- connection model --------------------------------------------------------------
    @contextlib.contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with super().connection() as db:
            if self._shared.pending and self._unmoved != threading.get_ident():
                self.merge_journal()
            yield db

    def _direct(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of a statement that needs no journal row moved first (the journal's own
        writes, the sequence)."""
        with self.guard(), super().connection() as db:
            return db.execute(sql, params).fetchall()

    def began(self) -> None:
        self._shared.writer = threading.get_ident()
        self._shared.version += 1
        self._aborted = None

    def _note_aborted(self, exc: BaseException) -> None:
        """A query failed inside the write transaction: DuckDB has no savepoint, and a failed
        statement aborts the whole transaction, whose COMMIT would then be a silent rollback.
        Remember it, so that the transaction ends in an error instead (``before_commit``)."""
        try:
            self._db.execute("SELECT 1").fetchall()
        except duckdb.Error:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self._aborted = first

    def before_commit(self) -> None:
        reason, self._aborted = self._aborted, None
        if reason is not None:
            raise SessionKitError(
                f"DuckDB store {self.path or ':memory:'}: a store.sql query failed inside this transaction "
                f"({reason}); on DuckDB a failed statement aborts the whole transaction, so "
                "nothing of it was stored (run the query outside the transaction, or end the "
                "transaction when it fails)"
            )

    def rolled_back(self) -> None:
        self._shared.writer = None
        self._aborted = None
        self._shared.forget()
        self._shared.version += 1

    def committed(self) -> None:
        self._shared.writer = None
        self._shared.commits += 1
        self._shared.version += 1
        if self._full and self._file is not None:
            sync_folder(self._file)

    def change_marker(self) -> str:
        """The newest write sequence of the messages (a read moves the journal's appends in
        first) and the commits of this process on the file: this engine logs no changes in
        place (``CHANGE_LOG``), and no other process can write the file while this one
        holds it, so this process's count sees every update, delete, run and label."""
        with self._lock:
            top = self.fetch_one(self.compile("SELECT coalesce(max(seq), 0) FROM {messages}"))[0]
            return f"{top}.{self._shared.commits}"

    def snapshot(self) -> contextlib.AbstractContextManager[Any]:
        # One process holds the file and every engine on it shares this lock: holding it
        # keeps every other writer out while a read takes several statements.
        return self._lock

    def listed(self, values: Iterable[Any]) -> Any:
        return list(values)

    def insert_rows(self, table: str, rows: Sequence[Sequence[Any]], conflict: str = "") -> None:
        """Whole rows, a batch per statement: one list parameter per column, unnested."""
        if not rows:
            return
        self._insert_unnested(table, [c for c in TABLES[table].columns if "duckdb" in c.only], rows, conflict)

    def insert_columns(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows of some columns (the others take their defaults), unnested as :meth:`insert_rows`:
        DuckDB runs an ``executemany`` a row at a time, milliseconds each."""
        if not rows:
            return
        by_name = {c.name: c for c in TABLES[table].columns}
        self._insert_unnested(table, [by_name[name] for name in columns], rows, "")

    def _insert_unnested(self, table: str, cols: list[Any], rows: Sequence[Sequence[Any]], conflict: str) -> None:
        sql = (
            f"INSERT INTO {self.table(table)} ({', '.join(c.name for c in cols)}) SELECT "
            + ", ".join(f"unnest(?::{_UNNEST_TYPES[c.type]}[])" for c in cols)
            + f" {conflict}"
        )
        step = _LARGE_ROWS.get(table, _BULK_ROWS)
        for start in range(0, len(rows), step):
            part = rows[start : start + step]
            self.execute(sql, [list(column) for column in zip(*part)])

    # -- reads ------------------------------------------------------------------
    def node(self, sid: str, mid: str) -> Node | None:
        row = self.fetch_one(self.sql["node"], (_key(sid, mid),))
        return None if row is None else Node(*row)

    def nodes_by_id(self, sid: str, mids: Iterable[str]) -> list[Node]:
        mids = list(mids)
        if not mids:
            return []
        return [Node(*r) for r in self.fetch(self.sql["nodes_by_id"], ([_key(sid, m) for m in mids],))]

    def latest(self, sid: str) -> Node | None:
        with self._lock:
            tail = self._shared.tails.get(sid)
            if tail is not None:
                return tail
            shared = self._shared
            if shared.writer is None:
                # Outside a write: the newest row and the rows of its path below it in one
                # statement (walk_pages keeps them in FileState.paths), so the read that
                # usually follows (get_history, recent_history, the next append's) runs
                # none; a statement costs about the same for one row as for a page. A
                # session with no row in the journal reads the same without moving the
                # journal first (a write transaction: most of a first append into a
                # session after another session's append), as keys_of reads its ids.
                apart = bool(shared.pending) and shared.journal_sids is not None and sid not in shared.journal_sids
                if apart:
                    self._unmoved = threading.get_ident()
                try:
                    page = next(self.walk_pages(sid, None, _LATEST_PAGE, True, first=_LATEST_PAGE), [])
                finally:
                    if apart:
                        self._unmoved = None
                if not page:
                    return None
                node = shared.tails[sid] = page[0][0]
                return node
            row = self.fetch_one(self.sql["latest"], (sid, sid))
            if row is None:
                return None
            node = self._shared.tails[sid] = Node(*row)
            return node

    def has_compactions(self, sid: str) -> bool:
        with self._lock:
            known = self._known_compacted(sid)
            if known is None:
                known = self._shared.compacted[sid] = super().has_compactions(sid)
            return known

    def compactions(self, sid: str) -> list[tuple[int, Compaction]]:
        # Every read of a path asks for its session's compactions: a statement of its own
        # (about 0.4 ms, a sixth of reading a 20-message conversation) where the file has
        # none, or the session is known to have none. Under the lock no write is under way.
        with self._lock:
            if self._known_compacted(sid) is False:
                return []
            found = super().compactions(sid)
            self._shared.compacted[sid] = bool(found)
            return found

    def _known_compacted(self, sid: str) -> bool | None:
        """Whether ``sid`` has compactions, if known without reading them (state C3): the
        file's flag is read once, and set again by the next compaction written."""
        shared = self._shared
        if shared.any_compacted is None:
            shared.any_compacted = self.fetch_one("SELECT 1 FROM sessionkit_compactions LIMIT 1") is not None
        return False if not shared.any_compacted else shared.compacted.get(sid)

    def walk(self, sid: str, start: Node, limit: int, content: bool) -> list[tuple[Node, str | None]]:
        # The caller keeps every row: read the path in as few statements as it has runs
        # (each page is a scan of the session's rows, with no (session_id, seq) index).
        out = []
        largest = limit if content and limit <= _WHOLE_PATH else None
        for rows in self.walk_pages(sid, start, limit, content, largest=largest):
            out += rows
        return out

    def walk_contents(
        self, sid: str, start: Node, limit: int
    ) -> tuple[list[int], list[str], list[str], list[str | None] | None]:
        """As on every engine; a read of a session's latest path takes its newest rows
        from the cache of this process's own writes and reads (``FileState.paths``), as
        :meth:`walk_pages` does, reads on from the database above them, and keeps what it
        read there: reading back a conversation this process is writing (an agent's
        history before each call) then runs no statement, and leaves single appends in
        the journal."""
        with self._lock:
            shared = self._shared
            run = shared.paths.get(sid)
            cached = run is not None and (start.seq, start.id) == (run[0][0].seq, run[0][0].id)
            if not cached and shared.tails.get(sid) != start:
                return super().walk_contents(sid, start, limit)  # not the latest path
            rows: list[tuple[Node, str | None]] = list(run[:limit]) if run is not None and cached else []
            more: tuple[list[int], list[str], list[str], list[str | None] | None] = ([], [], [], None)
            if len(rows) < limit and (not rows or rows[-1][0].parent_id is not None):
                # from the newest row not yet cached: the last cached one again, then on
                top = rows.pop()[0] if rows else start
                need = limit - len(rows)
                if need > _Paths.ROWS:
                    # a path longer than the cache keeps: the rest in the lean read of
                    # every engine (one statement a run, no Node a row)
                    more = super().walk_contents(sid, top, need)
                else:
                    for page in LocalEngine.walk_pages(self, sid, top, need, True, first=need, largest=need):
                        rows += page
                    shared.paths.put(sid, cast("list[tuple[Node, str]]", rows))  # (the newest rows, with content)
            return (
                [n.seq for n, _ in rows] + more[0],
                [n.id for n, _ in rows] + more[1],
                cast("list[str]", [raw for _, raw in rows]) + more[2],
                None if more[3] is None else [*(None for _ in rows), *more[3]],  # (the cache keeps whole JSON)
            )

    def newest_rows(
        self, sid: str, n: int, below: int | None = None
    ) -> list[tuple[int, str, str | None, int, int, int, str]] | None:
        return None  # (walk_pages: the newest rows may be in this process's cache of paths)

    def walk_pages(
        self, sid: str, start: Node | None, limit: int | None, content: bool, **sizes: int | None
    ) -> Iterator[list[tuple[Node, str | None]]]:
        """As on every engine (``sizes``: its ``first`` and ``largest``); the newest rows
        of a session's latest path come from the cache of this process's own writes and
        reads (``FileState.paths``) when they are there, and a read that starts at the
        newest row fills it."""
        if not content or (limit is not None and limit <= 0):
            yield from super().walk_pages(sid, start, limit, content, **sizes)
            return
        rest = None
        with self._lock:
            run = self._shared.paths.get(sid)
            if run is not None and (start is None or (start.seq, start.id) == (run[0][0].seq, run[0][0].id)):
                rows: list[tuple[Node, str | None]] = list(run if limit is None else run[:limit])
            else:
                rest = super().walk_pages(sid, start, limit, content, **sizes)
                rows = next(rest, [])
                if not rows:
                    return
                newest = start is None
                if not newest:
                    latest = self.latest(sid)
                    newest = (
                        latest is not None and start is not None and (latest.seq, latest.id) == (start.seq, start.id)
                    )
                if newest:  # (read with content: every row has its JSON)
                    self._shared.paths.put(sid, cast("list[tuple[Node, str]]", rows))
        yield rows
        if rest is not None:
            yield from rest
            return
        last = rows[-1][0]
        remaining = None if limit is None else limit - len(rows)
        if last.parent_id is None or remaining == 0:
            return
        parent = self.node(sid, last.parent_id)
        if parent is not None:  # else deleted meanwhile: the path ends here
            yield from super().walk_pages(sid, parent, remaining, content, **sizes)

    def size_bytes(self) -> int:
        size = 0
        if self._file is not None:
            for name in (self._file, self._file + ".wal", self._file + _LOG_SUFFIX):
                with contextlib.suppress(OSError):
                    size += os.path.getsize(name)
        return size

    # -- writes: the one choice of how new rows are written --------------------------------
    def _way(self, sid: str, preps: list[Any], chain: bool = False) -> str:
        """How new plain messages of ``sid`` are written: the one place the append paths
        are chosen (``append_fast`` asks it, once per call).

        - ``"journal"``: outside a transaction, one line of the journal file (a row of
          the journal table for a store in memory), no DuckDB statement; the session's id
          set in memory tells a stored id (see :mod:`.state`).
        - ``"indexed"``: a single message of a session too large for an id set, outside
          a transaction: an autocommitted INSERT whose UNIQUE key index tells a stored id.
        - ``"transaction"``: inside a write transaction (joined, or opened for a message
          whose text goes into the search index): an INSERT that checks the key; a chain
          that cannot be one journal line takes the batched insert (``w_import_records``).
        - ``"general"``: payloads or continuation rows: the shared engine's path.
        """
        if any(p.blobs or len(p.stored_json) > self._chunk for p in preps):
            return "general"
        if self._depth or self._shared.writer is not None:
            return "transaction"
        ids = [p.id for p in preps]
        if chain:
            if self._file is None or self.index.built() or len(set(ids)) != len(ids):
                return "transaction"
        elif self.index.built() and self.index.body_of(preps[0])[0]:
            return "transaction"
        keys = self._keys(sid)
        if keys is None:
            return "transaction" if chain else "indexed"
        return "journal" if not chain or keys.isdisjoint(ids) else "transaction"

    def _keys(self, sid: str) -> set[str] | None:
        """The ids stored in ``sid`` while held in memory (None: too many to hold)."""
        return self._shared.keys_of(sid, self._direct, self.merge_journal)

    def _parent(self, sid: str, parent_id: str | _Latest | None) -> tuple[Node | None, bool]:
        """The parent of an append outside a transaction (``parent_id``: an id, None or
        LATEST) and whether it was found. A new session's first message needs no read."""
        if parent_id is None:
            return None, True
        if isinstance(parent_id, str):
            parent = self.node(sid, parent_id)
            return parent, parent is not None
        if sid not in self._shared.tails and self._shared.writer is None and self._keys(sid) == set():
            return None, True  # known without reading (or moving) anything else
        return self.latest(sid), True

    def append_fast(
        self, sid: str, preps: list[_msg.Prepared], parent_id: str | _Latest | None, stamps: list[str]
    ) -> Appended:
        """DuckDB's fast append: a chain as one journal line (:meth:`_append_chain`), one
        message in as few statements as DuckDB allows (see ``_way``)."""
        if len(preps) != 1:
            return self._append_chain(sid, preps, parent_id, stamps)
        prep, created_at = preps[0], stamps[0]
        with self._lock:
            way = self._way(sid, [prep])
            if way == "general":
                return Appended.UNSUPPORTED
            parent, found = self._parent(sid, parent_id)
            if not found:
                return Appended.EXISTS if self.node(sid, prep.id) is not None else Appended.NO_PARENT
            if way == "transaction":
                with self.write():
                    node = self.insert_one(sid, prep, parent, created_at, self.index.built())
                return Appended.EXISTS if node is None else Appended.INSERTED
            # (a plain message: no continuation rows, no payloads, no index rows to write)
            node = self.placed(prep, parent, created_at)
            try:
                seq = self._put_row(way, sid, prep, node, self.row_json(prep, created_at), 0, self.index.built())
            except BaseException:
                self._shared.forget()
                raise
            finally:
                self.index.forget_body()
            if seq is not None and self._full and self._file is not None:
                sync_folder(self._file)
            return Appended.EXISTS if seq is None else Appended.INSERTED

    def _append_chain(
        self, sid: str, preps: list[_msg.Prepared], parent_id: str | _Latest | None, stamps: list[str]
    ) -> Appended:
        """A chain of new plain messages outside a transaction as one journal line: a
        line is written whole or (a process killed inside the write) cut off whole, so
        the chain is stored entirely or not at all, with no DuckDB statement. Any other
        chain (see ``_way``), or a parent not found, takes the batched insert."""
        with self._lock:
            if self._closed:
                raise StoreClosed("the store is closed")
            if self._way(sid, preps, chain=True) != "journal":
                return Appended.UNSUPPORTED
            parent, found = self._parent(sid, parent_id)
            if not found:
                return Appended.UNSUPPORTED
            rows, nodes = [], []
            for prep, stamp in zip(preps, stamps):
                node = self.placed(prep, parent, stamp)._replace(seq=self._next_seq())
                rows.append(
                    (
                        node.seq,
                        _key(sid, node.id),
                        *self.message_values(sid, node, self.row_json(prep, stamp), 0, prep),
                        None,
                    )
                )
                nodes.append(node)
                parent = node
            self._journal(sid, rows)
            for prep, node in zip(preps, nodes):
                self._shared.appended(sid, node, prep.stored_json)
            self._shared.after_chain(sid)
            if self._shared.full_now():
                self.merge_journal()
            return Appended.INSERTED

    def _journal(self, sid: str, rows: list[tuple[Any, ...]]) -> None:
        """Write ``rows`` (messages rows of one append or one chain) to the journal: one
        line of the file (see ``FileState.write_line``), or rows of the journal table for
        a store in memory."""
        shared = self._shared
        if self._file is None:
            for values in rows:
                self._direct("INSERT INTO sessionkit_journal VALUES (?)", (json.dumps(values, ensure_ascii=False),))
                shared.journaled(sid, 1, table=True)
            return
        with self.guard():  # a lone surrogate: InvalidMessage, as a statement would say
            shared.write_line(json.dumps(rows, ensure_ascii=False), self._full, self._journal_id)
        shared.journaled(sid, len(rows))

    def insert_one(
        self, sid: str, prep: _msg.Prepared, parent: Node | None, created_at: str, index: bool
    ) -> Node | None:
        try:
            return super().insert_one(sid, prep, parent, created_at, index)
        finally:
            self.index.forget_body()  # (the text may be large: not kept past its write)

    def leave_out(self, raw: str, prep: _msg.Prepared) -> str:
        # The text once: a message whose JSON holds its analysis text (its one text part,
        # most messages) once, as the value of a "text" key ending its object, keeps the
        # JSON without that value; the text column holds it. Every read puts it back
        # (Dialect.message_content, in the statement), as whole_json puts createdAt back.
        text = prep.text
        if text and not _UNLIKE_TO_JSON.search(text):
            value = text_value(text)
            at = raw.find(value)
            if at >= 0 and raw.find(value, at + 1) < 0:
                return raw[:at] + TEXT_GAP + raw[at + len(value) :]
        return raw

    def w_update(self, sid: str, node: Node, prep: _msg.Prepared, index: bool) -> None:
        try:
            return super().w_update(sid, node, prep, index)
        finally:
            self.index.forget_body()

    def update_extras(self, sid: str, node: Node, prep: _msg.Prepared, index: bool) -> None:
        self.execute(
            "UPDATE sessionkit_messages SET index_len = ? WHERE seq = ?",
            (self.index.body_of(prep)[0] if index else None, node.seq),
        )

    def insert_row(
        self, sid: str, prep: _msg.Prepared, node: Node, parent: Node | None, head: str, nchunks: int, index: bool
    ) -> int | None:
        # (reached inside a write transaction: append_fast writes the other ways itself)
        return self._put_row("transaction", sid, prep, node, head, nchunks, index)

    def _put_row(
        self, way: str, sid: str, prep: _msg.Prepared, node: Node, head: str, nchunks: int, index: bool
    ) -> int | None:
        """Write one message row the ``way`` chosen (see ``_way``); its seq, or None when
        its id is stored already."""
        key = _key(sid, node.id)
        length = self.index.body_of(prep)[0] if index else None
        # The seq comes from a block this process reserved from the sequence (see
        # _next_seq): a RETURNING clause and the column's nextval() default made the
        # statement about a fifth slower.
        seq = self._next_seq()
        values = (seq, key, *self.message_values(sid, node, head, nchunks, prep), length)
        if way == "journal":
            # A single append outside a transaction: one JSON row into the journal. The
            # id set in memory tells a stored id.
            if node.id in cast("set[str]", self._keys(sid)):
                return None
            self._journal(sid, [values])
        elif way == "indexed":
            # Its own transaction: a plain insert, and the UNIQUE index on the key tells
            # a stored id (the failed statement leaves nothing behind). About a fifth
            # faster than checking the key in the statement.
            self._shared.version += 1  # (a write of its own: see FileState.version)
            try:
                with self.guard():
                    try:
                        with self.connection() as conn:
                            conn.execute(_INSERT_MESSAGE + " VALUES (" + ", ".join("?" * len(values)) + ")", values)
                    except duckdb.ConstraintException as exc:
                        if "Duplicate key" in str(exc):
                            return None
                        raise
            finally:
                self._shared.version += 1
        else:
            # Inside a transaction a failed statement would abort it: one statement that
            # inserts only when the key is absent (on DuckDB 2.0 about twice as fast as
            # ON CONFLICT DO NOTHING, with the same effect under the write lock). Its
            # result is the number of rows inserted.
            row = self.fetch_one(
                _INSERT_MESSAGE
                + " SELECT "
                + ", ".join("?" * len(values))
                + " WHERE NOT EXISTS (SELECT 1 FROM sessionkit_messages WHERE msg_key = ?)",
                (*values, key),
            )
            if not row or not row[0]:
                return None
        self._shared.appended(sid, node._replace(seq=seq), prep.stored_json)  # (a rollback drops it all)
        if self._shared.full_now():
            self.merge_journal()
        return seq

    def merge_journal(self) -> None:
        """Move the journal's rows into the messages table, in one transaction.

        Every statement but the journal's own runs after this (``connection``), so what
        a read sees includes every append. Appends that a killed process left in the
        journal are moved by the first statement of the next opening.
        """
        shared = self._shared
        with self._lock:
            if not shared.pending or shared.merging or shared.writer is not None or self._closed:
                return
            shared.merging = True
            try:
                with self.write():
                    if shared.table_rows:
                        self.execute(_MOVE_JOURNAL)
                        self.execute("DELETE FROM sessionkit_journal")
                    if shared.log_rows:
                        self.execute(_MOVE_JOURNAL_FILE, [shared.lines()])
                shared.merged(self._full)
            finally:
                shared.merging = False

    def _journal_id(self) -> str:
        """This database's journal id (``sessionkit_meta``), made on first use."""
        rows = self._direct("SELECT value FROM sessionkit_meta WHERE key = 'journal_id'")
        if rows:
            return rows[0][0]
        new = uuid.uuid4().hex
        self._direct("INSERT INTO sessionkit_meta (key, value) VALUES ('journal_id', ?)", (new,))
        return new

    def _next_seq(self) -> int:
        """The next write sequence number for a single append.

        Numbers are reserved from the ``sessionkit_seq`` sequence a block at a time (one
        statement per block), so a number is never handed out twice; numbers left in a
        block when the store closes are skipped, as after a rollback. The block is
        dropped whenever anything else draws from the sequence (bulk inserts) or a
        rollback may have undone its reservation, so a new row's seq is always above
        every stored one.
        """
        with self._lock:
            block = self._shared.seqs
            if not block:
                block.extend(
                    sorted(r[0] for r in self._direct("SELECT nextval('sessionkit_seq') FROM range(?)", (_SEQ_BLOCK,)))
                )
            return block.popleft()

    def w_insert_many(
        self, sid: str, items: Sequence[tuple[_msg.Prepared, str | _Latest | None, str]], index: bool
    ) -> list[tuple[bool, int]]:
        return self.w_import_records([(sid, items)], index)[0]

    def w_import_records(
        self, records: Sequence[tuple[str, Sequence[tuple[_msg.Prepared, str | _Latest | None, str]]]], index: bool
    ) -> list[list[tuple[bool, int]]]:
        """Every record's rows in a few statements for the whole batch, whatever the number
        of sessions (DuckDB spends about a millisecond on any statement, a few more on an
        insert, so statements per record made an import of many small sessions slow).

        One read finds the stored rows the batch names (its ids and parents), only in
        sessions that may hold messages (``FileState.stored_sessions``: none for a new
        session); then each record is planned in turn in memory, as inserting its rows one
        by one would place them; the seqs come from the block reserved for appends
        (``_next_seq``, in write order); and one insert per table writes the new rows. An
        unknown parent raises before anything is written.
        """
        with self._lock:
            stored = self._shared.stored_sessions(self._direct)
            keys = []
            for sid, rows in records:
                if sid in stored:
                    for prep, parent_id, _ in rows:
                        keys.append(_key(sid, prep.id))
                        if isinstance(parent_id, str):
                            keys.append(_key(sid, parent_id))
            known = self._nodes_by_key(keys)
            latest: dict[str, Node | None] = {}
            plan: list[tuple[str, str, _msg.Prepared, Node]] = []  # (sid, key, prep, node) of new rows
            results: list[list[tuple[bool, str]]] = []
            for sid, rows in records:
                result: list[tuple[bool, str]] = []
                for prep, parent_id, created_at in rows:
                    key = _key(sid, prep.id)
                    if parent_id is None:
                        parent = None
                    elif isinstance(parent_id, str):
                        parent = known.get(_key(sid, parent_id))
                        if parent is None:
                            if key in known:
                                result.append((False, key))
                                continue
                            raise MessageNotFound(f"parent message {parent_id!r} is not in session {sid!r}")
                    else:  # LATEST: the session's newest row, planned in this batch or stored
                        if sid not in latest:
                            latest[sid] = self.latest(sid) if sid in stored else None
                        parent = latest[sid]
                    if key in known:
                        result.append((False, key))
                        continue
                    node = known[key] = latest[sid] = self.placed(prep, parent, created_at)
                    plan.append((sid, key, prep, node))
                    result.append((True, key))
                results.append(result)
            if plan:
                for _, key, node in self._write_planned(plan, index):
                    known[key] = node
            return [[(inserted, known[key].seq) for inserted, key in result] for result in results]

    def sessions_holding(self, sids: Sequence[str]) -> set[str]:
        # Sessions this process knows hold nothing need no statement (FileState.sids).
        with self._lock:
            stored = self._shared.stored_sessions(self._direct)
            maybe = [sid for sid in sids if sid in stored]
            return super().sessions_holding(maybe) if maybe else set()

    def _nodes_by_key(self, keys: list[str]) -> dict[str, Node]:
        """The stored nodes of these message keys, by key (one statement per 10,000 keys)."""
        out: dict[str, Node] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 10_000):
            for row in self.fetch(self.sql["nodes_by_key"], (unique[start : start + 10_000],)):
                out[row[0]] = Node(*row[1:])
        return out

    def _write_planned(
        self, plan: list[tuple[str, str, _msg.Prepared, Node]], index: bool
    ) -> list[tuple[str, str, Node]]:
        """Write planned rows ``(sid, key, prep, node)`` in a few statements; each row's
        ``(sid, key, node)`` with its seq."""
        rows, chunk_rows, t_seqs, t_bodies, out = [], [], [], [], []
        newest: dict[str, Node] = {}
        for sid, key, prep, node in plan:
            node = node._replace(seq=self._next_seq())
            head, chunks = self.split(self.row_json(prep, node.created_at))
            chunk_rows += [(node.seq, i, data) for i, data in enumerate(chunks)]
            length = None
            if index:
                length, body = _body(prep.text)
                if body:
                    t_seqs.append(node.seq)
                    t_bodies.append(body)
            rows.append((node.seq, key, *self.message_values(sid, node, head, len(chunks), prep), length))
            newest[sid] = node
            out.append((sid, key, node))
        self.insert_rows("messages", rows)
        self.index.put_terms(t_seqs, t_bodies)
        self.insert_rows("chunks", chunk_rows)
        for (_, _, prep, _), (_, _, node) in zip(plan, out):
            if prep.blobs:
                self.put_blobs(node.seq, prep.blobs)
        for sid, node in newest.items():
            self._shared.imported(sid, node)
        return out

    def update_analysis_columns(self, values: list[Any]) -> None:
        # (version 6's fill, of rows that hold their JSON whole: a row written since version
        # 18 may hold its text in this column alone, which must then keep its value)
        for start in range(0, len(values), _BULK_ROWS):
            part = values[start : start + _BULK_ROWS]
            self.execute(
                """UPDATE sessionkit_messages SET text = v.text, n_parts = v.n_parts, tool_names = v.tool_names,
                       metadata = v.metadata
                   FROM (SELECT unnest(?::VARCHAR[]) AS text, unnest(?::INTEGER[]) AS n_parts,
                                unnest(?::VARCHAR[]) AS tool_names, unnest(?::VARCHAR[]) AS metadata,
                                unnest(?::BIGINT[]) AS seq) AS v
                   WHERE sessionkit_messages.seq = v.seq""",
                [list(c) for c in zip(*part)],
            )

    def forget(self, sid: str) -> None:
        self._shared.forget_session(sid)

    def lock_session(self, sid: str) -> None:
        self._shared.forget_session(sid)  # an update or delete changes what the tail holds

    def w_add_compaction(self, sid: str, comp: Compaction) -> None:
        super().w_add_compaction(sid, comp)
        self._shared.compacted[sid] = True
        self._shared.any_compacted = True
