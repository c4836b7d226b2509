"""The schema every engine shares, as data: the tables and their columns (:data:`TABLES`),
what is derived from them (the columns a prepared message gives, those the analysis views
read, those the shared insert writes), the one schema ledger every engine follows
(:data:`MIGRATIONS`, whose last step is :data:`SCHEMA_VERSION`), and what differs in SQL
text between the engines (:data:`DIALECTS`).

Adding a per-message column takes two steps, both here: a :class:`Column` in
``TABLES["messages"]`` (``prepared=True`` when a prepared message gives its value: every
statement that writes a message row then writes it), and a :class:`Migration` that adds it
to stored files (``_add_columns``). See docs/architecture.md.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from ._labels import LABEL_COLUMNS

if TYPE_CHECKING:
    from ._sql import SQLEngine

__all__ = [
    "SCHEMA_VERSION",
    "Column",
    "Index",
    "Table",
    "TABLES",
    "Migration",
    "MIGRATIONS",
    "Dialect",
    "DIALECTS",
    "NODE_COLUMNS",
    "PREPARED_COLUMNS",
    "INSERT_COLUMNS",
    "SOURCE_COLUMNS",
    "SOURCE_TYPES",
    "DUCKDB_JOURNAL_TABLE",
    "DEFAULT_CHUNK_CHARS",
    "prepared_getter",
]

#: DuckDB: single appends written as one JSON row each, moved into the messages table in
#: batches (see :mod:`sessionkit.store.engines.duckdb.engine`).
DUCKDB_JOURNAL_TABLE = "CREATE TABLE IF NOT EXISTS sessionkit_journal (row VARCHAR NOT NULL)"

#: Stored JSON longer than this (characters) continues in ``sessionkit_chunks`` rows.
DEFAULT_CHUNK_CHARS = 1 << 20

#: The columns of a :class:`Node`, in its field order.
NODE_COLUMNS = ("seq", "id", "parent_id", "depth", "bytes", "tokens", "path_bytes", "path_tokens", "created_at", "role")

_ALL = ("sqlite", "duckdb", "postgresql")


# ---------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class Column:
    """A column: logical ``type`` (``text``, ``int``, ``bigint``, ``blob``, or ``seq``,
    the store-wide write sequence each dialect makes its own way), and the engines
    that keep it (``only``)."""

    name: str
    type: str
    null: bool = False
    default: str | None = None
    only: tuple[str, ...] = _ALL
    #: A message column whose value a prepared message gives (the attribute of
    #: :class:`~sessionkit.messages.Prepared` of the same name): every statement that
    #: writes a message row writes these from this declaration (:data:`PREPARED_COLUMNS`).
    prepared: bool = False
    #: Read by the analysis views (a cache beside the store copies these; :data:`SOURCE_COLUMNS`).
    analysis: bool = True
    #: Its DuckDB type in the analysis copy, when not the one ``type`` gives (a cast on copying).
    analysis_type: str | None = None


@dataclass(frozen=True)
class Index:
    name: str
    columns: str
    unique: bool = False
    where: str | None = None
    only: tuple[str, ...] = _ALL


@dataclass(frozen=True)
class Table:
    name: str  # without the sessionkit_ prefix
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()
    indexes: tuple[Index, ...] = ()
    only: tuple[str, ...] = _ALL
    #: Rows stored in primary key order (SQLite: WITHOUT ROWID), for small keyed rows.
    clustered: bool = False

    def column_names(self, dialect: str) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if dialect in c.only)


_SQLITE_PG = ("sqlite", "postgresql")

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table("meta", (Column("key", "text"), Column("value", "text")), key=("key",)),
        Table(
            "messages",
            (
                Column("seq", "seq"),
                # DuckDB answers point lookups from an index only for a one-column equality: the
                # session id, length-prefixed, followed by the message id.
                Column("msg_key", "text", only=("duckdb",), analysis=False),
                Column("session_id", "text"),
                Column("id", "text"),
                Column("parent_id", "text", null=True),
                Column("depth", "int"),
                Column("role", "text"),
                Column("created_at", "text"),
                Column("bytes", "bigint"),
                Column("tokens", "bigint"),
                Column("path_bytes", "bigint", analysis=False),
                Column("path_tokens", "bigint", analysis=False),
                Column("chunks", "int", default="0", analysis=False),
                # SQLite: 0 when the row followed its session's latest row as it was written,
                # so it needs no entry in the children index (see engines/sqlite/engine.py). Before content,
                # so reading it never reads a long row's overflow pages.
                Column("branch", "int", default="1", only=("sqlite",), analysis=False),
                # The analysis columns (docs/analysis.md), written with the row so that no query decodes
                # messages: the text parts joined by blank lines, the number of parts, the tools
                # the parts call (a JSON array; NULL when none) and the metadata as JSON.
                # SQLite keeps ``text`` only where its JSON functions cannot give it (a row whose
                # JSON continues in chunks, a text holding NUL), NULL elsewhere (schema version
                # 16): statements read it as Dialect.message_text says, never the column itself.
                # DuckDB keeps it the other way (version 18): where the row's JSON holds the
                # text once as the value of a "text" key ending its object (a message of one
                # text part), the JSON leaves that value out ('"text":}'); statements read
                # ``content`` as Dialect.message_content says, which puts it back.
                Column("text", "text", null=True, prepared=True),
                Column("n_parts", "int", default="0", prepared=True),
                Column("tool_names", "text", null=True, prepared=True),
                Column("metadata", "text", null=True, prepared=True),
                # (read by the analysis copy only for the views that parse it: tool_calls, turns)
                Column("content", "text"),
                # DuckDB: the message's word count in its search index (NULL: not indexed).
                Column("index_len", "int", null=True, only=("duckdb",), analysis=False),
            ),
            key=("seq",),
            indexes=(
                Index("sessionkit_messages_key", "session_id, id", unique=True, only=_SQLITE_PG),
                Index("sessionkit_messages_msg_key", "msg_key", unique=True, only=("duckdb",)),
                Index("sessionkit_messages_order", "session_id, seq", only=_SQLITE_PG),
                Index("sessionkit_messages_branches", "session_id, parent_id", where="branch = 1", only=("sqlite",)),
                # SQLite: where each run of a path begins (a branch or a root; a row that follows
                # its parent has no entry), so a path is read in a range scan per run.
                Index(
                    "sessionkit_messages_starts",
                    "session_id, seq",
                    where="branch = 1 OR parent_id IS NULL",
                    only=("sqlite",),
                ),
                Index("sessionkit_messages_children", "session_id, parent_id", only=("postgresql",)),
            ),
        ),
        Table(
            "chunks",
            (Column("seq", "bigint"), Column("n", "int"), Column("data", "text")),
            key=("seq", "n"),
            clustered=True,
        ),
        Table("blobs", (Column("sha256", "text"), Column("size", "bigint"), Column("data", "blob")), key=("sha256",)),
        Table(
            "blob_refs",
            (Column("seq", "bigint"), Column("sha256", "text")),
            key=("seq", "sha256"),
            clustered=True,
            indexes=(Index("sessionkit_blob_refs_sha", "sha256", only=_SQLITE_PG),),
        ),
        Table(
            "compactions",
            (
                Column("seq", "seq"),
                Column("session_id", "text"),
                Column("id", "text"),
                Column("from_id", "text"),
                Column("to_id", "text"),
                Column("summary", "text"),
                Column("created_at", "text"),
                Column("tokens_before", "bigint"),
                Column("tokens_after", "bigint"),
            ),
            key=("seq",),
            indexes=(Index("sessionkit_compactions_session", "session_id, seq", only=_SQLITE_PG),),
        ),
        Table(
            "runs",
            (
                Column("run_id", "text"),
                Column("session_id", "text"),
                Column("status", "text"),
                Column("input", "text", null=True),
                Column("error", "text", null=True),
                Column("started_at", "text"),
                Column("ended_at", "text", null=True),
                Column("usage", "text", null=True),
                Column("n", "int"),
                # What the run was (a JSON object: where it started, its variant and settings...).
                Column("meta", "text", null=True),
            ),
            key=("run_id",),
            indexes=(Index("sessionkit_runs_session", "session_id, n", only=_SQLITE_PG),),
        ),
        Table(
            "events",
            (
                Column("session_id", "text"),
                Column("seq", "bigint"),
                Column("run_id", "text", null=True),
                Column("data", "text"),
            ),
            key=("session_id", "seq"),
            clustered=True,
        ),
        Table(
            "records",
            (
                Column("session_id", "text"),
                Column("kind", "text"),
                Column("n", "bigint"),
                Column("data", "text"),
            ),
            key=("session_id", "kind", "n"),
            clustered=True,
        ),
        # What changed in place (updates, deletes, compactions, runs, events), in write order:
        # an analysis cache beside the store replays it instead of reading the store again
        # (appends need no entry: they are the rows above the cache's last seq). DuckDB
        # queries its own tables and keeps none.
        Table(
            "changes",
            (
                Column("n", "seq"),
                Column("session_id", "text"),
                Column("kind", "text"),
                Column("seq", "bigint", null=True),
            ),
            key=("n",),
            only=_SQLITE_PG,
        ),
        # Labels a reader puts on a message or on the branch ending at it (docs/labels.md):
        # they go with the message (Session.delete, clear, Store.delete_session).
        Table(
            "labels",
            (
                Column("seq", "seq"),
                Column("id", "text"),
                Column("session_id", "text"),
                Column("message_id", "text"),
                Column("target", "text"),
                Column("tag", "text"),
                Column("rating", "real", null=True),
                Column("note", "text", null=True),
                Column("author", "text", null=True),
                Column("created_at", "text"),
                # Provenance (schema version 12, docs/judging.md): who made the label (human,
                # code, llm), the scorer's name@version, its rationale, and the fingerprint
                # of the unit it scored (store.score compares it to tell a changed unit).
                Column("source", "text", default="'human'"),
                Column("scorer", "text", null=True),
                Column("rationale", "text", null=True),
                Column("fingerprint", "text", null=True, analysis=False),
            ),
            key=("seq",),
            indexes=(
                Index("sessionkit_labels_id", "id", unique=True, only=_SQLITE_PG),
                Index("sessionkit_labels_message", "session_id, message_id", only=_SQLITE_PG),
                Index("sessionkit_labels_tag", "tag", only=_SQLITE_PG),
                Index("sessionkit_labels_scorer", "scorer", only=_SQLITE_PG),
            ),
        ),
        # One vector per (embedding model, message) (store.embed / store.similar, docs/analysis.md).
        # ``seq``, ``session_id`` and ``message_id`` name the message (all three: SQLite may give
        # a deleted row's seq to a new one, so a row whose message is gone never attaches to
        # another). The vector is stored as the JSON text of its float32 values (7 significant
        # digits): text travels unchanged through every engine's analysis copy (SQLite via ADBC,
        # PostgreSQL via COPY CSV, DuckDB) and DuckDB casts it to FLOAT[] directly, where a
        # BLOB would need decoding per engine.
        Table(
            "embeddings",
            (
                Column("model", "text"),
                Column("seq", "bigint"),
                Column("session_id", "text"),
                Column("message_id", "text"),
                Column("dim", "int"),
                Column("vector", "text", analysis_type="FLOAT[]"),
            ),
            key=("model", "seq"),
            indexes=(Index("sessionkit_embeddings_session", "session_id", only=_SQLITE_PG),),
        ),
        # Datasets (schema version 13, docs/judging.md): a set of turns or paths frozen under a
        # name and version, each item with the history the model saw, the reply given and the
        # unit's label tags, as JSON written when it was frozen (later edits of the session do
        # not reach it; deleting the session leaves it).
        Table(
            "datasets",
            (
                Column("name", "text"),
                Column("version", "int"),
                Column("level", "text"),
                Column("created_at", "text"),
                Column("query", "text", null=True),
                Column("item_count", "bigint"),
            ),
            key=("name", "version"),
        ),
        Table(
            "dataset_items",
            (
                Column("name", "text"),
                Column("version", "int"),
                Column("n", "int"),
                Column("session_id", "text"),
                Column("message_id", "text"),
                Column("history", "text"),
                Column("reference", "text", null=True),
                Column("tags", "text"),
            ),
            key=("name", "version", "n"),
            clustered=True,
        ),
        # Annotation queues (schema version 14, docs/annotation.md): turns, paths or sessions
        # handed to people to label with a rubric; each unit taken by an annotator is a claim
        # (a lease until expires_at) and becomes a submission (the label's id) when labelled.
        Table(
            "queues",
            (
                Column("name", "text"),
                Column("level", "text"),
                Column("rubric", "text"),
                Column("annotators", "text", null=True),
                Column("per_unit", "int"),
                Column("lease_seconds", "real"),
                Column("created_at", "text"),
                Column("source", "text", null=True),
                Column("unit_count", "bigint"),
            ),
            key=("name",),
        ),
        Table(
            "queue_units",
            (
                Column("name", "text"),
                Column("n", "int"),
                Column("session_id", "text"),
                Column("message_id", "text"),
            ),
            key=("name", "n"),
            clustered=True,
        ),
        Table(
            "queue_claims",
            (
                Column("name", "text"),
                Column("n", "int"),
                Column("annotator", "text"),
                Column("claimed_at", "text"),
                Column("expires_at", "text"),
                Column("label_id", "text", null=True),
                Column("done_at", "text", null=True),
            ),
            key=("name", "n", "annotator"),
            clustered=True,
        ),
        # The schema ledger: one row per migration applied to this store.
        Table(
            "migrations",
            (Column("version", "int"), Column("note", "text"), Column("applied_at", "text")),
            key=("version",),
            clustered=True,
        ),
    )
}


# The labels' statements (_labels.LabelSQL) name the table's columns: the same as declared.
if set(LABEL_COLUMNS) != set(TABLES["labels"].column_names("sqlite")) - {"seq"}:
    raise AssertionError("_labels.LABEL_COLUMNS differs from TABLES['labels']")

#: The message columns a prepared message gives, in the order every statement that writes
#: a message row lists them (from the declaration above).
PREPARED_COLUMNS: tuple[str, ...] = tuple(c.name for c in TABLES["messages"].columns if c.prepared)
#: ``prepared_getter(prep)``: the values of :data:`PREPARED_COLUMNS`, in order; ``TEXT_AT``: where ``text`` is.
prepared_getter = operator.attrgetter(*PREPARED_COLUMNS)
TEXT_AT = PREPARED_COLUMNS.index("text")

#: The stored columns the analysis views read, per table (a cache beside the store keeps
#: exactly these), and their DuckDB types: from the declaration above.
SOURCE_COLUMNS: dict[str, tuple[str, ...]] = {
    t: tuple(c.name for c in TABLES[t].columns if c.analysis)
    for t in ("messages", "compactions", "runs", "events", "labels", "embeddings", "datasets", "dataset_items")
}
_DUCKDB_TYPES = {"text": "VARCHAR", "int": "BIGINT", "bigint": "BIGINT", "seq": "BIGINT", "real": "DOUBLE"}
SOURCE_TYPES: dict[str, tuple[str, ...]] = {
    t: tuple(c.analysis_type or _DUCKDB_TYPES[c.type] for c in TABLES[t].columns if c.analysis) for t in SOURCE_COLUMNS
}

#: The columns of a message row the shared insert writes, in order (the engine's own
#: columns, DuckDB's ``msg_key`` and SQLite's ``branch``, are written by its own statements).
INSERT_COLUMNS: tuple[str, ...] = (
    "session_id",
    "id",
    "parent_id",
    "depth",
    "role",
    "created_at",
    "bytes",
    "tokens",
    "path_bytes",
    "path_tokens",
    "chunks",
    *PREPARED_COLUMNS,
    "content",
)


# ---------------------------------------------------------------------------
# Migrations


@dataclass(frozen=True)
class Migration:
    """One step of the schema ledger. ``steps`` maps a dialect (or ``"*"`` for every
    dialect) to statements (templates, see the module notes) or functions called
    with the engine, run in order inside the transaction that opens the store."""

    version: int
    note: str
    steps: dict[str, tuple[str | Callable[[SQLEngine], None], ...]] = field(default_factory=dict)

    def steps_for(self, dialect: str) -> tuple[Any, ...]:
        return self.steps.get("*", ()) + self.steps.get(dialect, ())


def _create_table(name: str) -> Callable[[SQLEngine], None]:
    return lambda engine: engine.create_table(TABLES[name])


def _sqlite_branch_column(engine: SQLEngine) -> None:
    engine.upgrade_to_3()


def _add_columns(table: str, names: tuple[str, ...]) -> Callable[[SQLEngine], None]:
    """A migration step adding the columns ``names`` of ``TABLES[table]`` as declared there
    (type, nullability, default: the one declaration), those a store lacks."""

    def step(engine: SQLEngine) -> None:
        declared = {c.name: c for c in TABLES[table].columns}
        have = engine.table_columns(table)
        todo = [declared[n] for n in names if n not in have and engine.dialect.name in declared[n].only]
        # DuckDB adds no NOT NULL column to a table an index depends on: its indexes go
        # for the while and are made again after
        indexes = [
            i
            for i in TABLES[table].indexes
            if engine.dialect.name == "duckdb" and "duckdb" in i.only and any(not c.null for c in todo)
        ]
        for index in indexes:
            engine.execute(f"DROP INDEX IF EXISTS {engine.quote(index.name)}")
        for col in todo:
            engine.execute(f"ALTER TABLE {engine.table(table)} ADD COLUMN {engine.dialect.column_sql(col, table)}")
        for index in indexes:
            engine.execute(engine.index_sql(index, TABLES[table]))

    return step


def _make_index_again(table: str, name: str) -> Callable[[SQLEngine], None]:
    """A migration step making the index ``name`` of ``TABLES[table]`` again, as declared."""

    def step(engine: SQLEngine) -> None:
        index = next(i for i in TABLES[table].indexes if i.name == name)
        engine.execute(f"DROP INDEX IF EXISTS {engine.quote(name)}")
        engine.execute(engine.index_sql(index, TABLES[table]))

    return step


def _give_store_id(engine: SQLEngine) -> None:
    """Who this store is (see :meth:`SQLEngine.create_or_migrate`), for a store made before
    stores had an id."""
    if engine.fetch_one(engine.sql["meta_get"], ("store_id",)) is None:
        engine.execute(engine.sql["meta_put"], ("store_id", uuid.uuid4().hex))


def _fill_analysis_columns(engine: SQLEngine) -> None:
    """Version 6: compute the analysis columns of every stored message (a batch at a time)."""
    last = 0
    while True:
        rows = engine.fetch(engine.sql["fill_source"], (last, 2000))
        if not rows:
            return
        last = rows[-1][0]
        long = [seq for seq, chunks, _ in rows if chunks]
        full = dict(zip(long, engine.contents(long))) if long else {}
        values = []
        for seq, _, content in rows:
            message = _msg.restore(full.get(seq) or content, engine.blob)
            values.append((_msg.message_text(message), *_msg.analysis_fields(message), seq))
        engine.update_analysis_columns(values)


#: Every engine follows this one ledger: a store at version v has had every migration
#: up to v applied (version 1 is the first table layout). Files written before the
#: ledger carry the same numbers: versions 3 and 4 changed SQLite files only, so a
#: DuckDB or PostgreSQL file at version 2 is at the ledger's version 4.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        2,
        "records: small JSON documents kept beside a session",
        {
            "*": (_create_table("records"),),
            # DuckDB: word counts moved into the message row; the index is rebuilt by the next search.
            "duckdb": (
                "ALTER TABLE {messages} ADD COLUMN IF NOT EXISTS index_len INTEGER",
                "DROP TABLE IF EXISTS sessionkit_docs",
                "DELETE FROM sessionkit_terms",
                "UPDATE {messages} SET index_len = NULL",
                "UPDATE {meta} SET value = '0' WHERE key = 'index_built'",
            ),
        },
    ),
    Migration(
        3, "SQLite: rows that follow their parent stay out of the children index", {"sqlite": (_sqlite_branch_column,)}
    ),
    Migration(4, "SQLite: the search window, created when a store outgrows it"),
    Migration(5, "the schema ledger (sessionkit_migrations)", {"*": (_create_table("migrations"),)}),
    Migration(
        6,
        "analysis columns stored with each message (text, n_parts, tool_names, metadata) and the change log",
        {
            "*": (
                _add_columns("messages", ("text", "n_parts", "tool_names", "metadata")),
                _create_table("changes"),
                _fill_analysis_columns,
            ),
            # the fast append function takes the new columns (a new signature: drop the old one)
            "postgresql": (
                "DROP FUNCTION IF EXISTS {fn_append}(text, text, text, text, text, text, bigint, bigint, text,"
                " tsvector, bigint, bigint, text, text[])",
            ),
        },
    ),
    Migration(7, "DuckDB: the append journal (sessionkit_journal)", {"duckdb": (DUCKDB_JOURNAL_TABLE,)}),
    Migration(
        8,
        "a store id for stores made before stores had one; SQLite: the compactions index as declared,"
        " by (session_id, seq) (files first written at version 1 or 2 had it by session_id only)",
        {"*": (_give_store_id,), "sqlite": (_make_index_again("compactions", "sessionkit_compactions_session"),)},
    ),
    Migration(9, "labels on messages and branches (sessionkit_labels)", {"*": (_create_table("labels"),)}),
    Migration(10, "embeddings: one vector per model and message", {"*": (_create_table("embeddings"),)}),
    Migration(
        11, "runs: what a run was (meta: where it started, its variant)", {"*": (_add_columns("runs", ("meta",)),)}
    ),
    Migration(
        12,
        "labels: where a label came from (source, scorer, rationale) and the fingerprint of the unit a scorer labelled",
        {
            "*": (_add_columns("labels", ("source", "scorer", "rationale", "fingerprint")),),
            "sqlite": (_make_index_again("labels", "sessionkit_labels_scorer"),),
            "postgresql": (_make_index_again("labels", "sessionkit_labels_scorer"),),
        },
    ),
    Migration(
        13,
        "datasets: turns or paths frozen under a name and version (sessionkit_datasets, sessionkit_dataset_items)",
        {"*": (_create_table("datasets"), _create_table("dataset_items"))},
    ),
    Migration(
        14,
        "annotation queues: units handed to people to label with a rubric"
        " (sessionkit_queues, sessionkit_queue_units, sessionkit_queue_claims)",
        {"*": (_create_table("queues"), _create_table("queue_units"), _create_table("queue_claims"))},
    ),
    # No table changes: the HTTP server keeps its records in sessionkit_records, and stamps
    # their layout itself (sessionkit/server/_records.py); a store at this version or later
    # was opened by a sessionkit whose server checks that layout before it writes.
    Migration(
        15,
        "the HTTP server's records (server.* kinds, docs/server.md): layout 1, its version kept"
        " as the record server.layout under the reserved key ~sessionkit/layout",
    ),
    # No table changes: rows written from version 16 on leave SQLite's text column NULL
    # where the JSON gives the text (rows written before keep theirs; both read the same).
    Migration(
        16,
        "SQLite: a message's analysis text is read from its JSON and kept in the text column only"
        " where the JSON cannot give it (a message continued in chunks, a text holding NUL); a row's"
        " JSON leaves out its last key createdAt, which the created_at column holds (a space ends it)",
    ),
    Migration(
        17,
        "SQLite: the index of where each run of a path begins (sessionkit_messages_starts: the rows"
        " that branch and the roots), so a path is read one range of rows per run",
        {"sqlite": (_make_index_again("messages", "sessionkit_messages_starts"),)},
    ),
    # No table changes: rows written from version 18 on may keep their text once on DuckDB
    # (rows written before keep their JSON whole; both read the same).
    Migration(
        18,
        "DuckDB: a message's JSON leaves out its text where the text column holds it (the value of"
        ' a "text" key ending its object, found once) and its last key createdAt where the created_at'
        " column holds it (a space ends it); every read puts them back",
    ),
)

#: The schema version every engine writes: the ledger's last step (the one place it is kept).
SCHEMA_VERSION = MIGRATIONS[-1].version


# ---------------------------------------------------------------------------
# Dialects


@dataclass(frozen=True)
class Dialect:
    """What differs in SQL text between engines, as plain data (no behaviour)."""

    name: str
    types: dict[str, str]
    #: Column definition of a table's write sequence (``seq``), by table.
    seq_columns: dict[str, str]
    #: The rows of one list parameter, for ints and for strings (a SELECT).
    ints_rows: str
    texts_rows: str
    #: Membership in one list parameter (default: IN the rows above).
    in_ints: str = ""
    in_texts: str = ""
    #: Row locks taken when payload rows are shared or collected (several writers).
    lock_share: str = ""
    lock_update: str = ""
    #: Tables whose primary key is their storage order (SQLite: WITHOUT ROWID).
    clustered_suffix: str = ""
    #: DB-API placeholder: "?" (qmark) or "%s" (format).
    placeholder: str = "?"
    #: Statements run before each table is created (DuckDB: its sequences).
    before_table: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: A message row's analysis text (``{t}``: the table or its alias): the ``text``
    #: column, or on SQLite what its JSON gives where the column is NULL (see TABLES).
    message_text: str = "{t}.text"
    #: A message row's stored JSON (``{t}`` as above) as ``whole_json`` takes it: the
    #: ``content`` column, or on DuckDB that column with the text put back where the row
    #: left it out (see TABLES).
    message_content: str = "{t}.content"

    def __post_init__(self) -> None:
        if not self.in_ints:
            object.__setattr__(self, "in_ints", f"IN ({self.ints_rows})")
        if not self.in_texts:
            object.__setattr__(self, "in_texts", f"IN ({self.texts_rows})")

    def column_sql(self, col: Column, table: str) -> str:
        if col.type == "seq":
            return self.seq_columns[table]
        sql = f"{col.name} {self.types[col.type]}"
        if not col.null:
            sql += " NOT NULL"
        if col.default is not None:
            sql += f" DEFAULT {col.default}"
        return sql

    def table_sql(self, table: Table, qualified: str) -> str:
        cols = [self.column_sql(c, table.name) for c in table.columns if self.name in c.only]
        if table.key and not any(c.type == "seq" for c in table.columns):  # else the seq column decides
            cols.append(f"PRIMARY KEY ({', '.join(table.key)})")
        suffix = self.clustered_suffix if table.clustered else ""
        return f"CREATE TABLE IF NOT EXISTS {qualified} (\n    " + ",\n    ".join(cols) + f"\n){suffix}"

    def compile(self, template: str, fields: dict[str, str]) -> str:
        sql = template.format(**fields)
        if self.placeholder != "?":
            sql = sql.replace("%", "%%").replace("?", self.placeholder)
        return sql


#: DuckDB: a message row's JSON with its text in place. A row whose JSON holds its text
#: column's value once, as the value of a "text" key ending its object, keeps the JSON without
#: that value ('"text":}', which no JSON holds) and the text in its column; the statement that
#: reads the row puts it back. (The row's createdAt, left out as on SQLite where a space ends
#: the JSON, is put back by the engine's whole_json, in Python, as SQLite's is: JSON ending in
#: a space is valid JSON, so the views that parse it need not.)
_DUCKDB_CONTENT = (
    "(CASE WHEN contains({t}.content, '\"text\":}}') THEN replace({t}.content, '\"text\":}}',"
    " '\"text\":' || to_json({t}.text)::VARCHAR || '}}') ELSE {t}.content END)"
)


#: The dialects, as data: what differs in SQL text between the engines.
DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect(
            name="sqlite",
            types={"text": "TEXT", "int": "INTEGER", "bigint": "INTEGER", "blob": "BLOB", "real": "REAL"},
            seq_columns={
                "messages": "seq INTEGER PRIMARY KEY",
                "compactions": "seq INTEGER PRIMARY KEY AUTOINCREMENT",
                "labels": "seq INTEGER PRIMARY KEY AUTOINCREMENT",
                "changes": "n INTEGER PRIMARY KEY AUTOINCREMENT",
            },
            ints_rows="SELECT value FROM json_each(?)",
            texts_rows="SELECT value FROM json_each(?)",
            clustered_suffix=" WITHOUT ROWID",
            # The text parts of the row's JSON joined by blank lines (parts.text_of), read by
            # SQLite's JSON functions, unless the row keeps its text (TABLES["messages"]). A
            # message of one part (most) is read by path, a third faster than json_each.
            # json_extract rather than ->> (SQLite 3.38) for older libraries.
            message_text=(
                "(CASE WHEN {t}.text IS NOT NULL THEN {t}.text"
                " WHEN {t}.n_parts = 1 THEN (CASE WHEN json_extract({t}.content, '$.parts[0].type') = 'text'"
                " AND json_type({t}.content, '$.parts[0].text') = 'text'"
                " THEN json_extract({t}.content, '$.parts[0].text') ELSE '' END)"
                " ELSE (SELECT coalesce(group_concat(json_extract(j.value, '$.text'), char(10, 10)), '')"
                " FROM json_each({t}.content, '$.parts') AS j WHERE json_extract(j.value, '$.type') = 'text'"
                " AND json_type(j.value, '$.text') = 'text') END)"
            ),
        ),
        Dialect(
            name="duckdb",
            # The row's JSON with its text in place: see _DUCKDB_CONTENT.
            message_content=_DUCKDB_CONTENT,
            types={"text": "VARCHAR", "int": "INTEGER", "bigint": "BIGINT", "blob": "BLOB", "real": "DOUBLE"},
            seq_columns={
                "messages": "seq BIGINT NOT NULL DEFAULT nextval('sessionkit_seq')",
                "compactions": "seq BIGINT NOT NULL DEFAULT nextval('sessionkit_compaction_seq')",
                "labels": "seq BIGINT NOT NULL DEFAULT nextval('sessionkit_label_seq')",
            },
            ints_rows="SELECT unnest(?::BIGINT[])",
            texts_rows="SELECT unnest(?::VARCHAR[])",
            before_table={
                "messages": ("CREATE SEQUENCE IF NOT EXISTS sessionkit_seq START 1",),
                "compactions": ("CREATE SEQUENCE IF NOT EXISTS sessionkit_compaction_seq START 1",),
                "labels": ("CREATE SEQUENCE IF NOT EXISTS sessionkit_label_seq START 1",),
            },
        ),
        Dialect(
            name="postgresql",
            types={"text": "text", "int": "integer", "bigint": "bigint", "blob": "bytea", "real": "double precision"},
            seq_columns={
                "messages": "seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                "compactions": "seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                "labels": "seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                "changes": "n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
            },
            ints_rows="SELECT unnest(?::bigint[])",
            texts_rows="SELECT unnest(?::text[])",
            in_ints="= ANY(?::bigint[])",
            in_texts="= ANY(?::text[])",
            lock_share=" FOR KEY SHARE",
            lock_update=" FOR UPDATE",
            placeholder="%s",
        ),
    )
}
