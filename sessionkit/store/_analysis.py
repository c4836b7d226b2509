"""Analysis where the data is: the views of ``store.sql`` as DuckDB SQL over the store's tables.

The views (``messages``, ``sessions``, ``compactions``, ``runs``, ``events``, the tree
views of :mod:`._tree_views` and ``embeddings`` of :mod:`._embeddings`;
their columns in :mod:`sessionkit.analysis`) are written once, in :func:`view_sql`, as
DuckDB SQL over tables named like the store's own (``sessionkit_messages``...) that hold
at least the analysis columns every engine stores with each message (``_sql.TABLES``).
Nothing decodes a message: ``text``, ``n_parts``, ``tool_names`` and ``metadata`` were
stored when the message was written, and the columns that depend on the tree
(``n_children``, ``on_latest_path``, ``compacted_by``) are computed here, in SQL:

* a session's rows in write order fall into *runs*: a row whose parent is the row just
  before it in its session continues the run, any other row starts one (a conversation
  growing under its newest message is one run). Walking up from a row inside its run
  passes every earlier row of the run, so a path is a few runs, not a row per step;
* the latest path is followed from each session's newest row (its latest leaf,
  docs/message-tree.md) from run to run (a recursive query whose steps are the branch points on the
  path, not its length), and a compaction's range likewise from its ``to_id`` up to its
  ``from_id`` (it covers nothing when ``from_id`` is not on the way up, as in
  :meth:`sessionkit.store.Tree.build`); the newest compaction holding a row wins;
* ``n_children``: 1 when the next row of the session continues the run, plus the runs
  that start under the row.

Two ways to have those tables, decided by the engine:

* **DuckDB store**: the views are defined, as temporary views of a second connection
  to the same database, over the store's own tables. A query runs in a read
  transaction on that connection (one consistent snapshot, never blocking the
  store's writers) and is rolled back: nothing is copied, nothing can be written.
* **SQLite and PostgreSQL stores**: :class:`Cache`, a DuckDB database beside the store
  holding the analysis columns of its messages, compactions, runs and events: a file
  beside a SQLite file (``x.db-analysis.duckdb``, kept from one store object and
  process to the next), in memory for PostgreSQL (and for a SQLite file whose cache
  file another process holds). It is filled once, then brought up to date before each
  query from what changed: rows above the last write sequence it saw (appends and
  imports), and the store's change log (``sessionkit_changes``: updates, deletes,
  clears, compactions, runs, events), read in the same snapshot as the rows. A query
  after N new messages reads N rows from the store, not the whole store. A cache file
  saves, in the same DuckDB transaction as its rows, the state that says what they are
  and what identifies it in the store; a file that does not match the store beside it
  (damaged, of another layout, another store's, a store restored from an older copy)
  is made again. Rows travel as Arrow batches, never as a Python object per value: from
  a SQLite file through the ADBC SQLite driver (read ahead by a thread while DuckDB
  writes), from PostgreSQL as the CSV of one ``COPY ... TO STDOUT`` parsed by pyarrow.

Only a single SELECT (or ``WITH ... SELECT``) is run; anything else raises
``ValueError`` before it reaches DuckDB. A query is a sandbox (:func:`check_query`): it
reads the views, its own CTEs, constants and a few table functions (``range``,
``generate_series``, ``unnest``), nothing else: no file, no table of the store or the
cache, no catalog function (``duckdb_tables()``...), no setting. DuckDB enforces the same
on the cache's connection (no file system access, no extension loaded, its configuration
locked); on a DuckDB store, whose own connection cannot be locked down, the parse tree
alone decides. ``files=True`` lets a query read local files too (CSV, Parquet, JSON...):
it runs on a DuckDB connection of its own that holds the views it names (read in one
snapshot) and nothing else of the store.

A running query can be stopped (:class:`Runs`): closing the store stops it with
``StoreClosed``; Ctrl-C in the main thread, ``store.interrupt_sql()`` or a cancelled
``sk.aio`` task with ``KeyboardInterrupt`` (DuckDB's ``interrupt()``); the connection
and the cache stay as they were. DuckDB, pyarrow (and pandas, above) come from the
``analysis`` extra and are imported on first use.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import StoreClosed, missing
from ._embeddings import EMBEDDINGS_COLUMNS, embeddings_view_sql
from ._tree_views import TREE_VIEW_COLUMNS, TREE_VIEW_ORDER, TREE_VIEWS, needs_columns, tree_view_sql

__all__ = [
    "VIEWS",
    "VIEW_COLUMNS",
    "view_sql",
    "Cache",
    "run_query",
    "uses_tree_columns",
    "duckdb_module",
    "check_query",
    "Runs",
]

#: The views of ``store.sql`` (and ``store.to_arrow``).
VIEWS = ("messages", "sessions", "compactions", "runs", "events", *TREE_VIEWS, "embeddings")

#: The columns of each view, in order, with their kind (``text``, ``int``, ``bool``,
#: ``float``, ``time``: a UTC timestamp, ``texts``: a list of text). The one list of
#: them: the views' SQL below gives exactly these (tests/analysis check it), and
#: :mod:`sessionkit.analysis` types its Arrow tables and DataFrames from it.
VIEW_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "messages": (
        ("session_id", "text"),
        ("id", "text"),
        ("parent_id", "text"),
        ("depth", "int"),
        ("role", "text"),
        ("text", "text"),
        ("n_parts", "int"),
        ("tool_names", "texts"),
        ("tokens", "int"),
        ("bytes", "int"),
        ("created_at", "time"),
        ("n_children", "int"),
        ("on_latest_path", "bool"),
        ("compacted_by", "text"),
        ("seq", "int"),
        ("metadata", "text"),
    ),
    "sessions": (
        ("session_id", "text"),
        ("message_count", "int"),
        ("roots", "int"),
        ("leaves", "int"),
        ("branch_points", "int"),
        ("max_depth", "int"),
        ("tokens", "int"),
        ("bytes", "int"),
        ("latest_leaf", "text"),
        ("created_at", "time"),
        ("updated_at", "time"),
        ("compaction_count", "int"),
        ("run_count", "int"),
    ),
    "compactions": (
        ("session_id", "text"),
        ("id", "text"),
        ("from_id", "text"),
        ("to_id", "text"),
        ("summary", "text"),
        ("created_at", "time"),
        ("tokens_before", "int"),
        ("tokens_after", "int"),
        ("message_count", "int"),
    ),
    "runs": (
        ("session_id", "text"),
        ("run_id", "text"),
        ("status", "text"),
        ("error", "text"),
        ("input", "text"),
        ("started_at", "time"),
        ("ended_at", "time"),
        ("tokens_in", "int"),
        ("tokens_out", "int"),
        ("cache_read", "int"),
        ("cache_write", "int"),
        ("cost_usd", "float"),
        ("model", "text"),
        ("usage", "text"),
        ("run_number", "int"),
    ),
    "events": (
        ("session_id", "text"),
        ("seq", "int"),
        ("run_id", "text"),
        ("kind", "text"),
        ("ts", "time"),
        ("data", "text"),
    ),
    **TREE_VIEW_COLUMNS,
    "embeddings": EMBEDDINGS_COLUMNS,
}

#: Columns of the ``messages`` view computed from the whole tree (the rest are stored).
TREE_COLUMNS = ("n_children", "on_latest_path", "compacted_by")

#: The stored columns the views read, per table (a cache keeps exactly these).
SOURCE_COLUMNS = {
    "messages": (
        "seq",
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
        "metadata",
        "content",
    ),
    "compactions": (
        "seq",
        "session_id",
        "id",
        "from_id",
        "to_id",
        "summary",
        "created_at",
        "tokens_before",
        "tokens_after",
    ),
    "runs": ("run_id", "session_id", "status", "input", "error", "started_at", "ended_at", "usage", "n"),
    "events": ("session_id", "seq", "run_id", "data"),
    "embeddings": ("model", "seq", "session_id", "message_id", "dim", "vector"),
}

_TYPES = {
    "messages": (
        "BIGINT",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
        "BIGINT",
        "VARCHAR",
        "VARCHAR",
        "BIGINT",
        "VARCHAR",
        "BIGINT",
        "BIGINT",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
    ),
    "compactions": ("BIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BIGINT", "BIGINT"),
    "runs": ("VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BIGINT"),
    "events": ("VARCHAR", "BIGINT", "VARCHAR", "VARCHAR"),
    # (the vector's JSON text is cast to FLOAT[] once, as it is copied)
    "embeddings": ("VARCHAR", "BIGINT", "VARCHAR", "VARCHAR", "BIGINT", "FLOAT[]"),
}


def duckdb_module():
    try:
        import duckdb
    except ImportError as exc:
        raise missing("analysis", "duckdb", exc) from exc
    return duckdb


def _pyarrow():
    try:
        import pyarrow
    except ImportError as exc:
        raise missing("analysis", "pyarrow", exc) from exc
    return pyarrow


def _pyarrow_csv():
    try:
        import pyarrow.csv
    except ImportError as exc:
        raise missing("analysis", "pyarrow", exc) from exc
    return pyarrow.csv


# ---------------------------------------------------------------------------
# The views, as DuckDB SQL over tables named {messages}, {compactions}, {runs}, {events}

# The tree of every session: each row's run (``run``: the seq of the row that starts it),
# the place its run's first row hangs from (``pseq``, ``prun``), and n_children.
_TREE = """
    _sk_rows AS MATERIALIZED (
        SELECT seq, session_id, id, parent_id,
               parent_id IS NOT NULL AND parent_id IS NOT DISTINCT FROM lag(id) OVER w AS follows,
               coalesce(lead(parent_id) OVER w IS NOT DISTINCT FROM id, false) AS next_follows
        FROM {messages} WINDOW w AS (PARTITION BY session_id ORDER BY seq)
    ),
    _sk_runs AS MATERIALIZED (
        SELECT seq, session_id, id, parent_id, follows, next_follows,
               max(CASE WHEN follows THEN NULL ELSE seq END)
                   OVER (PARTITION BY session_id ORDER BY seq ROWS UNBOUNDED PRECEDING) AS run
        FROM _sk_rows
    ),
    _sk_heads AS MATERIALIZED (
        SELECT h.seq AS run, p.seq AS pseq, p.run AS prun
        FROM (SELECT seq, session_id, parent_id FROM _sk_runs WHERE NOT follows) h
        LEFT JOIN _sk_runs p ON p.session_id = h.session_id AND p.id = h.parent_id
    ),
    _sk_up(run, upto) AS (
        SELECT run, seq FROM _sk_runs WHERE seq IN (SELECT max(seq) FROM {messages} GROUP BY session_id)
        UNION ALL
        SELECT h.prun, h.pseq FROM _sk_up JOIN _sk_heads h ON h.run = _sk_up.run WHERE h.pseq IS NOT NULL
    ),
    _sk_comp AS (
        SELECT c.seq AS cseq, c.id AS cid, t.run AS run, t.seq AS upto, f.seq AS from_seq, f.run AS from_run
        FROM {compactions} c
        JOIN _sk_runs t ON t.session_id = c.session_id AND t.id = c.to_id
        JOIN _sk_runs f ON f.session_id = c.session_id AND f.id = c.from_id
    ),
    _sk_cover(cseq, cid, run, upto, from_seq, from_run, done) AS (
        SELECT cseq, cid, run, upto, from_seq, from_run, run = from_run AND from_seq <= upto FROM _sk_comp
        UNION ALL
        SELECT c.cseq, c.cid, h.prun, h.pseq, c.from_seq, c.from_run, h.prun = c.from_run AND c.from_seq <= h.pseq
        FROM _sk_cover c JOIN _sk_heads h ON h.run = c.run
        WHERE NOT c.done AND h.pseq IS NOT NULL
    ),
    _sk_covered AS MATERIALIZED (
        SELECT r.seq, c.cseq, c.cid
        FROM _sk_cover c JOIN _sk_runs r ON r.run = c.run AND r.seq <= c.upto AND (NOT c.done OR r.seq >= c.from_seq)
        WHERE c.cseq IN (SELECT cseq FROM _sk_cover WHERE done)
    ),
    _sk_tree AS (
        SELECT r.seq,
               (r.next_follows::BIGINT + coalesce(k.n, 0))::BIGINT AS n_children,
               p.seq IS NOT NULL AS on_latest_path,
               cb.compacted_by
        FROM _sk_runs r
        LEFT JOIN (SELECT pseq, count(*) AS n FROM _sk_heads WHERE pseq IS NOT NULL GROUP BY pseq) k ON k.pseq = r.seq
        LEFT JOIN (SELECT r2.seq FROM _sk_up u JOIN _sk_runs r2 ON r2.run = u.run AND r2.seq <= u.upto) p
               ON p.seq = r.seq
        LEFT JOIN (SELECT seq, arg_max(cid, cseq) AS compacted_by FROM _sk_covered GROUP BY seq) cb ON cb.seq = r.seq
    )"""

_TS = "TRY_CAST({col} AS TIMESTAMPTZ)"

# The stored columns of the messages view (no tree).
_MESSAGE_COLUMNS = (
    """m.session_id, m.id, m.parent_id, m.depth::BIGINT AS depth, m.role,
           coalesce(m.text, '') AS text, coalesce(m.n_parts, 0)::BIGINT AS n_parts,
           coalesce(from_json(m.tool_names, '["VARCHAR"]'), []::VARCHAR[]) AS tool_names,
           m.tokens::BIGINT AS tokens, m.bytes::BIGINT AS bytes, """
    + _TS.format(col="m.created_at")
    + " AS created_at"
)


def _int(path: str) -> str:
    """A JSON number of ``usage`` as BIGINT (truncated), NULL for anything else (bools included)."""
    return (
        f"CASE json_type(usage, '{path}') WHEN 'BIGINT' THEN CAST(json_extract(usage, '{path}') AS BIGINT)"
        f" WHEN 'UBIGINT' THEN TRY_CAST(json_extract(usage, '{path}') AS BIGINT)"
        f" WHEN 'DOUBLE' THEN CAST(trunc(CAST(json_extract(usage, '{path}') AS DOUBLE)) AS BIGINT) END"
    )


def view_sql(tables: dict[str, str], *, tree: bool = True) -> dict[str, str]:
    """The SELECT of each view over ``tables`` (view name -> table as SQL text).

    ``tree=False`` gives a ``messages`` view without the tree columns' work, for
    queries that name none of them (the same rows and stored columns)."""
    t = {
        "messages": tables["messages"],
        "compactions": tables["compactions"],
        "runs": tables["runs"],
        "events": tables["events"],
        "embeddings": tables["embeddings"],
    }
    tree_cte = _TREE.format(**t)
    cols = _MESSAGE_COLUMNS
    if tree:
        messages = (
            f"WITH RECURSIVE {tree_cte}\n    SELECT {cols}, tr.n_children, tr.on_latest_path,"
            f" tr.compacted_by, m.seq, m.metadata\n"
            f"    FROM {t['messages']} m JOIN _sk_tree tr ON tr.seq = m.seq"
        )
    else:
        messages = (
            f"SELECT {cols}, NULL::BIGINT AS n_children, NULL::BOOLEAN AS on_latest_path,"
            f" NULL::VARCHAR AS compacted_by, m.seq, m.metadata FROM {t['messages']} m"
        )
    compactions = f"""WITH RECURSIVE {tree_cte}
    SELECT c.session_id, c.id, c.from_id, c.to_id, c.summary, {_TS.format(col="c.created_at")} AS created_at,
           c.tokens_before::BIGINT AS tokens_before, c.tokens_after::BIGINT AS tokens_after,
           n.n AS message_count
    FROM {t["compactions"]} c
    LEFT JOIN (SELECT cseq, count(*)::BIGINT AS n FROM _sk_covered GROUP BY cseq) n ON n.cseq = c.seq"""
    sessions = f"""WITH per AS (
        SELECT session_id, count(*)::BIGINT AS message_count,
               count(*) FILTER (WHERE parent_id IS NULL)::BIGINT AS roots,
               max(depth)::BIGINT AS max_depth, sum(tokens)::BIGINT AS tokens, sum(bytes)::BIGINT AS bytes,
               arg_max(id, seq) AS latest_leaf, min({_TS.format(col="created_at")}) AS created_at,
               max({_TS.format(col="created_at")}) AS updated_at
        FROM {t["messages"]} GROUP BY session_id
    ), parents AS (
        SELECT session_id, count(*)::BIGINT AS parents, count(*) FILTER (WHERE n > 1)::BIGINT AS branch_points
        FROM (SELECT session_id, parent_id, count(*) AS n FROM {t["messages"]} WHERE parent_id IS NOT NULL
              GROUP BY ALL) GROUP BY session_id
    ), comps AS (
        SELECT session_id, count(*)::BIGINT AS n FROM {t["compactions"]} GROUP BY session_id
    ), rs AS (
        SELECT session_id, count(*)::BIGINT AS n FROM {t["runs"]} GROUP BY session_id
    ), ids AS (
        SELECT session_id FROM per UNION SELECT session_id FROM comps UNION SELECT session_id FROM rs
        UNION SELECT DISTINCT session_id FROM {t["events"]}
    )
    SELECT ids.session_id, coalesce(per.message_count, 0)::BIGINT AS message_count,
           coalesce(per.roots, 0)::BIGINT AS roots,
           (coalesce(per.message_count, 0) - coalesce(parents.parents, 0))::BIGINT AS leaves,
           coalesce(parents.branch_points, 0)::BIGINT AS branch_points, per.max_depth,
           coalesce(per.tokens, 0)::BIGINT AS tokens, coalesce(per.bytes, 0)::BIGINT AS bytes, per.latest_leaf,
           per.created_at, per.updated_at, coalesce(comps.n, 0)::BIGINT AS compaction_count,
           coalesce(rs.n, 0)::BIGINT AS run_count
    FROM ids LEFT JOIN per USING (session_id) LEFT JOIN parents USING (session_id)
    LEFT JOIN comps USING (session_id) LEFT JOIN rs USING (session_id)"""
    runs = f"""SELECT session_id, run_id, status, error, input, {_TS.format(col="started_at")} AS started_at,
           {_TS.format(col="ended_at")} AS ended_at, {_int("$.in")} AS tokens_in, {_int("$.out")} AS tokens_out,
           {_int("$.cache_read")} AS cache_read, {_int("$.cache_write")} AS cache_write,
           CASE WHEN json_type(usage, '$.cost_usd') IN ('BIGINT', 'UBIGINT', 'DOUBLE')
                THEN CAST(json_extract(usage, '$.cost_usd') AS DOUBLE) END AS cost_usd,
           CASE WHEN json_type(usage, '$.model') = 'VARCHAR' THEN json_extract_string(usage, '$.model') END AS model,
           usage, n::BIGINT AS run_number
    FROM {t["runs"]}"""
    events = f"""SELECT session_id, seq::BIGINT AS seq, run_id,
           CASE WHEN json_type(data, '$.kind') = 'VARCHAR' THEN json_extract_string(data, '$.kind') END AS kind,
           TRY_CAST(json_extract_string(data, '$.ts') AS TIMESTAMPTZ) AS ts, data
    FROM {t["events"]}"""
    views = {"messages": messages, "sessions": sessions, "compactions": compactions, "runs": runs, "events": events}
    return {**views, **tree_view_sql(t), "embeddings": embeddings_view_sql(t)}


#: The ORDER BY that gives each view's rows in the order ``to_arrow`` returns them.
VIEW_ORDER = {
    "messages": "seq",
    "sessions": "session_id",
    "compactions": "session_id, created_at, id",
    "runs": "session_id, run_number",
    "events": "session_id, seq",
    **TREE_VIEW_ORDER,
    "embeddings": "session_id, message_id, model",
}


# ---------------------------------------------------------------------------
# Queries: one SELECT, read-only


def check_query(con, query: str, *, files: bool = False) -> None:
    """Refuse anything but one SELECT that stays in the sandbox (``ValueError`` naming what
    was given or refused; see :func:`sandbox_refusal`)."""
    duckdb = duckdb_module()
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"store.sql: the query is not valid Unicode: a lone surrogate {query[exc.start]!r} at index {exc.start}"
        ) from None
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise ValueError(f"store.sql: {exc}") from exc
    if len(statements) != 1:
        raise ValueError(f"store.sql runs one SELECT statement; got {len(statements)} statements")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = str(kind).rsplit(".", 1)[-1]
        raise ValueError(
            f"store.sql runs read-only queries (a SELECT); this is a {name} statement, refused: "
            "the store is written through its API only"
        )
    refused = sandbox_refusal(con, query, files=files)
    if refused:
        raise ValueError(f"store.sql: {refused}")


#: Table functions a query may call (they read nothing but their arguments).
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})

#: Table functions that read local files, allowed with ``files=True``.
FILE_FUNCTIONS = frozenset(
    {
        "read_csv",
        "read_csv_auto",
        "sniff_csv",
        "read_parquet",
        "parquet_scan",
        "parquet_metadata",
        "parquet_schema",
        "read_json",
        "read_json_auto",
        "read_json_objects",
        "read_json_objects_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "read_ndjson_objects",
        "read_text",
        "read_blob",
        "glob",
    }
)

#: Scalar functions a query may not call: they read the session's settings, the catalog
#: (DuckDB's macros over ``duckdb_views()``...) or the environment, run SQL text, or
#: advance a sequence. (Any ``duckdb_*`` or ``pragma_*`` function is refused too.)
_REFUSED_FUNCTIONS = frozenset(
    {
        "current_setting",
        "getenv",
        "getvariable",
        "nextval",
        "setval",
        "currval",
        "json_execute_serialized_sql",
        "query",
        "pg_get_viewdef",
        "pg_get_constraintdef",
        "get_block_size",
    }
)

_QUERY_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})

_TABLE_FUNCTIONS_TEXT = ", ".join(f"{name}()" for name in sorted(TABLE_FUNCTIONS))

_FILES_HINT = " (a query reads local files only when asked: store.sql(query, files=True))"


def sandbox_refusal(con, query: str, *, files: bool = False) -> str:
    """What ``query`` (one SELECT) reaches outside the sandbox, or ``""``.

    Read from DuckDB's own parse tree (``json_serialize_sql``), with CTE scoping: a name
    a query reads must be a view of :data:`VIEWS` or a CTE defined around it; a table
    function must be one of :data:`TABLE_FUNCTIONS` (and, with ``files``, of
    :data:`FILE_FUNCTIONS`, where a quoted file name also reads; ``query_table`` of views
    named as plain strings); no catalog or
    settings function, no DESCRIBE/SHOW/SUMMARIZE, no qualified name. Hand-written
    because DuckDB has no per-connection permission on its catalog; the cache's
    connection is also locked down by DuckDB's own settings (:func:`new_connection`)."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchall()[0][0])
    except Exception as exc:  # (a SELECT the serializer cannot show cannot be checked)
        return f"this query cannot be checked, refused: {exc}"
    if not isinstance(tree, dict) or tree.get("error"):
        detail = tree.get("error_message", "") if isinstance(tree, dict) else ""
        return f"this query cannot be checked, refused: {detail}"
    refused: list[str] = []
    _sandbox_walk(tree, frozenset(), refused, files)
    return refused[0] if refused else ""


def _string_constant(node: Any) -> str:
    """The text of a string constant of a parse tree; ``""`` for anything else."""
    if isinstance(node, dict) and node.get("class") == "CONSTANT":
        literal = node.get("literal") or {}
        if literal.get("kind") == "STRING" and isinstance(literal.get("text"), str):
            return literal["text"]
    return ""


def _lower(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


def _sandbox_walk(node: Any, scope: frozenset, refused: list[str], files: bool) -> None:
    """Checks every table reference and function of a parse tree (``scope``: the CTE names
    visible where ``node`` is); the first refusal is appended to ``refused``."""
    if refused:
        return
    if isinstance(node, list):
        for value in node:
            _sandbox_walk(value, scope, refused, files)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    cls = node.get("class")
    if cls is None and kind in _QUERY_NODES:
        inner = scope
        if kind == "RECURSIVE_CTE_NODE" and _lower(node.get("cte_name")):
            inner = inner | {_lower(node.get("cte_name"))}
        # a CTE sees those defined before it (and itself when recursive); the query, all
        for entry in (node.get("cte_map") or {}).get("map") or ():
            name = _lower(entry.get("key")) if isinstance(entry, dict) else ""
            body = entry.get("value") if isinstance(entry, dict) else entry
            recursive = isinstance(body, dict) and (body.get("query_node") or {}).get("type") == "RECURSIVE_CTE_NODE"
            _sandbox_walk(body, inner | {name} if recursive else inner, refused, files)
            inner = inner | {name}
        for key, value in node.items():
            if key != "cte_map":
                _sandbox_walk(value, inner, refused, files)
        return
    if cls is None and isinstance(kind, str):
        if kind == "BASE_TABLE":
            table = node.get("table_name")
            label = table if isinstance(table, str) else "?"
            if node.get("schema_name") or node.get("catalog_name"):
                qualified = ".".join(x for x in (node.get("catalog_name"), node.get("schema_name"), label) if x)
                refused.append(
                    f"{qualified!r}: a query reads the views {', '.join(VIEWS)} by their plain names"
                    " (no schema or catalog), refused"
                )
                return
            if _lower(table) not in scope and _lower(table) not in VIEWS and not files:
                refused.append(
                    f"{label!r} is not one of the views {', '.join(VIEWS)} (nor a CTE of the query):"
                    f" a query reads only those, refused{_FILES_HINT}"
                )
                return
        elif kind == "TABLE_FUNCTION":
            function = node.get("function") or {}
            name = _lower(function.get("function_name"))
            if function.get("schema") or function.get("catalog"):
                name = "?"
            allowed = TABLE_FUNCTIONS | FILE_FUNCTIONS if files else TABLE_FUNCTIONS
            if name == "query_table":  # allowed on the views named as plain strings
                names = [
                    _string_constant(a.get("expression") if isinstance(a, dict) else None)
                    for a in function.get("arguments") or ()
                ]
                if names and all(n.lower() in VIEWS for n in names):
                    return
                refused.append("query_table() reads the views only, named as plain strings, refused")
                return
            if name not in allowed:
                hint = _FILES_HINT if name in FILE_FUNCTIONS else ""
                refused.append(
                    f"the table function {function.get('function_name')}() is refused: a query reads the"
                    f" views and the table functions {_TABLE_FUNCTIONS_TEXT} only{hint}"
                )
                return
        elif (
            node.get("table_name") is not None or "SHOW" in kind or kind.startswith(("BOUND_", "DELIM", "COLUMN_DATA"))
        ):
            refused.append("DESCRIBE, SHOW and SUMMARIZE read the catalog, refused: a query reads the views only")
            return
        elif kind in ("STATEMENT_NODE", "INVALID"):
            refused.append("this query cannot be checked, refused")
            return
    if cls == "FUNCTION":
        name = _lower(node.get("function_name"))
        if (
            name in _REFUSED_FUNCTIONS
            or name.startswith(("duckdb_", "pragma_"))
            or node.get("catalog")
            or node.get("schema")
        ):
            refused.append(
                f"the function {node.get('function_name')}() reads the database's catalog, settings"
                " or environment, refused: a query reads the views only"
            )
            return
    for value in node.values():
        _sandbox_walk(value, scope, refused, files)


def names_used(con, query: str) -> set[str]:
    """The column and function names ``query`` uses, from DuckDB's own parse tree (names
    in strings or comments do not count); ``"*"`` stands for everything: a star, a
    view named as a column (a whole row), or a query the parser cannot show; ``"@name"``
    is a table or view it reads (``"@*"``: any, for a query the parser cannot show). A call
    that advances a sequence (``nextval``, ``setval``) -> ``ValueError``: it would write
    the store."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchall()[0][0])
    except Exception:  # when in doubt, everything
        return {"*", "@*"}
    if not isinstance(tree, dict) or tree.get("error"):
        return {"*", "@*"}
    found: set[str] = set()
    _walk(tree, found)
    if found & _WRITING_FUNCTIONS:
        name = sorted(found & _WRITING_FUNCTIONS)[0]
        raise ValueError(f"store.sql runs read-only queries; {name}() advances a sequence of the store, refused")
    if found & set(VIEWS):
        found.add("*")
    return found


def uses_tree_columns(con, query: str) -> bool:
    """Whether ``query`` may read a tree column of ``messages`` (``*`` counts)."""
    found = names_used(con, query)
    return "*" in found or bool(found & set(TREE_COLUMNS))


_WRITING_FUNCTIONS = {"nextval", "setval"}


def _walk(node: Any, found: set[str]) -> None:
    """Column names, ``*`` and function names used anywhere in a parse tree."""
    if isinstance(node, dict):
        cls = node.get("class")
        if cls == "STAR":
            found.add("*")
        elif cls == "COLUMN_REF":
            found.update(n for n in node.get("column_names") or () if isinstance(n, str))
        elif cls == "FUNCTION" and isinstance(node.get("function_name"), str):
            found.add(node["function_name"].lower())
        if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
            found.add("@" + node["table_name"].lower())  # a table (or view) it reads
        for value in node.values():
            _walk(value, found)
    elif isinstance(node, list):
        for value in node:
            _walk(value, found)


def _do(con, sql: str, params: Any = None) -> None:
    """Run a statement whose result is not needed, to its end (DuckDB 2 wants every
    result consumed before the connection's next statement)."""
    (con.execute(sql) if params is None else con.execute(sql, params)).fetchall()


def install_views(con, tables: dict[str, str], tree: bool) -> None:
    for name, select in view_sql(tables, tree=tree).items():
        _do(con, f"CREATE OR REPLACE TEMP VIEW {name} AS {select}")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scoped(tables: dict[str, str], session_ids: list[str]) -> dict[str, str]:
    """``tables`` restricted to some sessions (the views over them hold only those)."""
    listed = ", ".join(_literal(s) for s in session_ids) or "NULL"
    return {name: f"(SELECT * FROM {table} WHERE session_id IN ({listed}))" for name, table in tables.items()}


def run_query(
    con,
    tables: dict[str, str],
    query: str,
    params: Any,
    state: dict,
    names: set[str] | None = None,
    session_ids: list[str] | None = None,
    *,
    run: _Run | None = None,
    files: bool = False,
    in_transaction: bool = False,
) -> Any:
    """Run one checked SELECT on ``con`` (views over ``tables``) in a transaction that is
    rolled back; returns a ``pyarrow.Table``. ``state`` remembers which views are installed
    on ``con`` (only those a query names are made: defining the ones over the tree costs
    tens of milliseconds each); ``names`` are those the query uses, when already known;
    ``session_ids`` restricts the views to those sessions for this query (the tree
    columns are then computed for them only). ``run`` is the query's entry in the store's
    :class:`Runs` (it can be stopped through it); ``files`` lets the query read local files
    (on a connection of its own, see :func:`_with_files`). ``in_transaction``: ``con`` is
    inside a transaction that is not the query's (a DuckDB store's write transaction, or a
    cache refreshed with a transaction's writes): the query runs in it, and whatever it
    makes there goes with that transaction."""
    duckdb = duckdb_module()
    _pyarrow()
    check_query(con, query, files=files)
    if names is None:
        names = names_used(con, query)
    tree = "*" in names or bool(names & set(TREE_COLUMNS))
    wanted = set(VIEWS) if "@*" in names else {v for v in VIEWS if "@" + v in names}
    with contextlib.nullcontext(run) if run is not None else Runs().run() as run:
        run.use(con)
        try:
            if files:
                return _with_files(
                    con, tables, query, params, state, names, wanted, session_ids, run, in_transaction=in_transaction
                )
            if in_transaction:
                try:
                    _install(con, tables, state, tree, set(VIEWS), session_ids)
                    return _fetch(con, query, params, run)
                finally:
                    run.finish()
            _install(con, tables, state, tree, wanted, session_ids)
            _do(con, "BEGIN TRANSACTION")
            try:
                try:
                    return _fetch(con, query, params, run)
                except duckdb.CatalogException:
                    if state.get("views") == set(VIEWS) or run.reason:
                        raise
                    # a view reached in a way the parse tree does not show: every view, once more
                    _do(con, "ROLLBACK")
                    _install(con, tables, state, tree, set(VIEWS), session_ids)
                    _do(con, "BEGIN TRANSACTION")
                    return _fetch(con, query, params, run)
            finally:
                run.finish()  # no interrupt reaches the connection from here on
                _rollback(con)
        except duckdb.Error as exc:
            run.raise_if_stopped(exc)
            raise ValueError(f"store.sql: {exc}") from exc


def _rollback(con) -> None:
    duckdb = duckdb_module()
    for _ in range(2):  # (a second time: an interrupt that reached the first one)
        try:
            _do(con, "ROLLBACK")
            return
        except duckdb.Error as exc:
            if "no transaction" in str(exc).lower():
                return


def _fetch(con, query: str, params: Any, run: _Run) -> Any:
    """The query's result as a ``pyarrow.Table``; ``run`` stops it.

    In the main thread the query runs on a thread of its own while this one waits: DuckDB
    does not stop on Ctrl-C by itself (its Python client holds the signal back until the
    query ends), so the wait is where KeyboardInterrupt lands, and it stops DuckDB."""
    if threading.current_thread() is not threading.main_thread():
        return _fetch_now(con, query, params, run)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = _fetch_now(con, query, params, run)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            box["error"] = exc
        finally:
            done.set()

    # An Event, not Thread.join (a join that KeyboardInterrupt breaks may report the thread
    # ended while it still runs), waited on in slices: a signal that lands just before the
    # wait blocks leaves its handler pending until the wait wakes up.
    thread = threading.Thread(target=work, name="sessionkit-sql", daemon=True)
    try:
        thread.start()
        while not done.wait(0.05):
            pass
    except KeyboardInterrupt:
        run.stop(_INTERRUPTED)
        while thread.ident is not None and not done.is_set():
            try:
                run.poke()
                done.wait(0.02)
            except KeyboardInterrupt:  # (pressed again: the query is stopping already)
                continue
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def _fetch_now(con, query: str, params: Any, run: _Run) -> Any:
    run.executing()
    rel = con.sql(query) if params is None else con.sql(query, params=params)
    if rel is None:  # (a SELECT always has a result; kept for the type checker)
        raise ValueError("store.sql: the query returned no result")
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # (DuckDB < 1.4)
    result = fetch()
    run.raise_if_stopped()
    return result


def _with_files(
    con,
    tables: dict[str, str],
    query: str,
    params: Any,
    state: dict,
    names: set[str],
    wanted: set[str],
    session_ids: list[str] | None,
    run: _Run,
    *,
    in_transaction: bool = False,
) -> Any:
    """A query that may read local files: the views it names are read from ``con`` in one
    snapshot (as Arrow tables) into a new in-memory DuckDB connection that may read files
    and holds nothing else of the store (so the connection of the store or its cache is
    never opened up); the query runs there. ``in_transaction``: ``con`` is inside a
    transaction already (see :func:`run_query`), whose state the views are read in."""
    duckdb = duckdb_module()
    if "query_table" in names:  # (a view it names as a string: the parse tree does not say which)
        wanted = set(VIEWS)
    _install(con, tables, state, True, wanted, session_ids)
    held = {}
    if not in_transaction:
        _do(con, "BEGIN TRANSACTION")  # one snapshot for every view read
    try:
        for view in sorted(wanted):
            held[view] = _fetch(con, f"SELECT * FROM {view}", None, run)
    finally:
        if not in_transaction:
            _rollback(con)
    files_con = duckdb.connect(":memory:", config=_CONFIG)
    try:
        _do(files_con, "SET TimeZone = 'UTC'")
        _do(files_con, "SET lock_configuration = true")
        for view, table in held.items():
            files_con.register(view, table)
        run.use(files_con)
        _do(files_con, "BEGIN TRANSACTION")
        return _fetch(files_con, query, params, run)
    finally:
        run.finish()
        with contextlib.suppress(duckdb.Error):
            files_con.close()


_INTERRUPTED = "interrupted"
_CLOSED = "closed"


class _Run:
    """One query of :class:`Runs`: the connection it runs on (None until its DuckDB work
    begins: nothing of a cache's refresh is ever interrupted) and why it was asked to stop."""

    def __init__(self) -> None:
        self.con: Any = None
        self.reason: str | None = None
        self.running = False  # DuckDB is executing the query (see Runs.executing)
        self.finished = False
        self.lock = threading.Lock()
        self.done = threading.Event()

    def use(self, con) -> None:
        """The query's DuckDB work runs on ``con`` from now on (unless it was stopped)."""
        with self.lock:
            self.raise_if_stopped()
            self.con = con

    def executing(self) -> None:
        self.raise_if_stopped()
        self.running = True

    def stop(self, reason: str) -> None:
        with self.lock:
            if self.reason is None:
                self.reason = reason
        self.poke()

    def poke(self) -> None:
        """DuckDB's interrupt, while the query is not finished (never the next one's)."""
        with self.lock:
            if not self.finished and self.con is not None:
                with contextlib.suppress(Exception):
                    self.con.interrupt()

    def finish(self) -> None:
        with self.lock:
            self.finished = True
            self.running = False

    def raise_if_stopped(self, cause: BaseException | None = None) -> None:
        if self.reason == _CLOSED:
            raise StoreClosed("the store was closed while the query ran") from cause
        if self.reason == _INTERRUPTED:
            raise KeyboardInterrupt("store.sql: the query was interrupted") from cause


class Runs:
    """The analysis queries running on one store (each from the start of its call, a
    cache's refresh included), so that they can be stopped.

    :meth:`close` (the store closes) stops every query running and refuses new ones
    (``StoreClosed``); :meth:`interrupt` stops those running now (``KeyboardInterrupt``).
    A query stops before its next DuckDB statement, or within one: DuckDB's ``interrupt()``
    of its connection, repeated until the query ends, since an interrupt that reaches
    DuckDB just before a statement starts is lost (DuckDB clears it as a statement begins)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[_Run] = set()
        self.closed = False

    @contextlib.contextmanager
    def run(self) -> Iterator[_Run]:
        run = _Run()
        with self._lock:
            if self.closed:
                raise StoreClosed("the store is closed")
            self._running.add(run)
        try:
            yield run
        finally:
            run.finish()
            with self._lock:
                self._running.discard(run)
            run.done.set()

    def executing(self) -> int:
        """How many queries DuckDB is executing now (past their setup)."""
        with self._lock:
            return sum(1 for run in self._running if run.running)

    def interrupt(self) -> None:
        """Stop the queries running now (each raises ``KeyboardInterrupt``); returns at once."""
        with self._lock:
            runs = list(self._running)
        for run in runs:
            run.stop(_INTERRUPTED)
        if runs:
            threading.Thread(target=_until_done, args=(runs,), name="sessionkit-sql-interrupt", daemon=True).start()

    def close(self) -> None:
        """Refuse new queries and stop those running (``StoreClosed``); returns once those
        whose DuckDB work had begun have ended (the others stop before theirs begins)."""
        with self._lock:
            self.closed = True
            runs = list(self._running)
        for run in runs:
            run.stop(_CLOSED)
        _until_done([run for run in runs if run.con is not None])


def _until_done(runs: list[_Run]) -> None:
    for run in runs:
        while not run.done.wait(0.02):
            run.poke()


def _install(
    con, tables: dict[str, str], state: dict, tree: bool, wanted: set[str], session_ids: list[str] | None
) -> None:
    """Define the views ``wanted`` on ``con`` (store-wide ones stay for the next query)."""
    if session_ids is not None:
        selects = view_sql(scoped(tables, session_ids), tree=tree)
        # the next query puts the store-wide views back (forgotten first: a query stopped
        # while these are made leaves no scoped view taken for a store-wide one)
        state.clear()
        state["views"] = set()
        for name in sorted(wanted):
            _do(con, f"CREATE OR REPLACE TEMP VIEW {name} AS {selects[name]}")
        return
    have: set[str] = state.setdefault("views", set())
    if have and state.get("tree") != tree and "messages" in have:
        have.discard("messages")  # only messages differs between the two
    todo = wanted - have
    if not todo:
        state["tree"] = tree if "messages" in have else state.get("tree")
        return
    selects = view_sql(tables, tree=tree)
    for name in sorted(todo):
        _do(con, f"CREATE OR REPLACE TEMP VIEW {name} AS {selects[name]}")
    have |= todo
    if "messages" in todo:
        state["tree"] = tree


#: The configuration of the analysis connections this module opens: no extension is
#: installed or loaded behind a query's back, no Python variable is read as a table.
_CONFIG = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "python_enable_replacements": False,
}


def new_connection(source=None, path: str | None = None):
    """A DuckDB connection for analysis: a cursor of ``source`` (a DuckDB store's own
    connection), the database file ``path`` or an in-memory database; times in UTC.

    A database of its own (a cache) is locked down: no file system access (its own file
    aside), no extension loaded, and its configuration locked, so that no query can change
    that (the settings hold for every connection to the database in this process)."""
    duckdb = duckdb_module()
    if source is not None:
        con = source.cursor()
        _do(con, "SET TimeZone = 'UTC'")
        _do(con, "SET enable_progress_bar = false")
        return con
    con = duckdb.connect(path or ":memory:", config=_CONFIG)
    if not con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
        _do(con, "SET GLOBAL TimeZone = 'UTC'")
        _do(con, "SET enable_progress_bar = false")
        _do(con, "SET enable_external_access = false")
        _do(con, "SET lock_configuration = true")
    return con


# ---------------------------------------------------------------------------
# The cache beside a SQLite or PostgreSQL store


class _EngineReader:
    """Reads for a refresh through the store's own connection (inside its snapshot)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.engine = cache.engine

    def fetch(self, sql: str, params: tuple = ()) -> list:
        return self.engine.fetch(sql, params)

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        """Copy ``cols`` (default: those the cache holds) of the rows of ``name`` matching
        ``where`` into the cache table (or ``target``); how many rows."""
        cols = cols or self.cache.columns(name)
        listed = ", ".join(cols)
        if not paged:
            rows = self.fetch(self.engine.compile(f"SELECT {listed} FROM {{{name}}} {where}"), params)
            self.cache.put(name, rows, cols, target)
            return len(rows)
        # pages by seq (``where`` ends with "seq > ?", the last parameter; seq comes first):
        # the Python rows held at once stay within a page
        sql = self.engine.compile(f"SELECT {listed} FROM {{{name}}} {where} ORDER BY seq LIMIT ?")
        last, total = params[-1], 0
        while True:
            rows = self.fetch(sql, (*params[:-1], last, _PAGE))
            if not rows:
                return total
            self.cache.put(name, rows, cols, target)
            total += len(rows)
            last = rows[-1][0]


class _CopyReader(_EngineReader):
    """Reads for a refresh of a PostgreSQL store: a table's rows come as CSV from one
    ``COPY ... TO STDOUT`` (``PostgresEngine.copy_csv``) in the refresh's snapshot, parsed
    into Arrow batches by pyarrow's CSV reader (no Python object per value) and written
    into the cache by DuckDB. Reads whose parameters are not whole numbers (lists of
    sessions or rows) go through the store's rows as on any engine."""

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        if any(type(p) is not int for p in params) or where.count("?") != len(params):
            return super().load(name, where, params, paged=paged, cols=cols, target=target)
        cols = cols or self.cache.columns(name)
        for value in params:  # COPY binds no parameters: whole numbers are written in
            where = where.replace("?", str(value), 1)
        sql = self.engine.compile(f"SELECT {', '.join(cols)} FROM {{{name}}} {where}")
        block = self._block_size(name, cols, where)
        # closed here even when DuckDB stops early: the COPY ends before the snapshot does
        with contextlib.closing(self.engine.copy_csv(sql)) as chunks:
            return self._load_csv(name, cols, target, chunks, block)

    def _block_size(self, name: str, cols: tuple[str, ...], where: str) -> int:
        """A CSV block of pyarrow's reader that holds the widest row read: a row may not
        straddle two blocks, and a message's text can be any size. From the texts' sizes
        as stored (PostgreSQL knows a text's size without reading it), doubled for the
        quotes CSV doubles, plus room for the other columns."""
        types = dict(zip(SOURCE_COLUMNS[name], _TYPES[name]))
        wide = [c for c in cols if types[c] in ("VARCHAR", "FLOAT[]")]
        if not wide:
            return _BLOCK
        size = " + ".join(f"coalesce(octet_length({c}), 0)" for c in wide)
        row = self.fetch(self.engine.compile(f"SELECT coalesce(max({size}), 0) FROM {{{name}}} {where}"))
        widest = int(row[0][0] or 0) if row else 0
        return min(max(_BLOCK, 2 * widest + (1 << 20)), (1 << 31) - 1)

    def _load_csv(
        self, name: str, cols: tuple[str, ...], target: str | None, chunks: Iterator[bytes], block: int = 0
    ) -> int:
        first = next(chunks, b"")
        if not first:
            return 0
        pa, csv = _pyarrow(), _pyarrow_csv()
        types = dict(zip(SOURCE_COLUMNS[name], _TYPES[name]))
        reader = csv.open_csv(
            _ChunkFile(first, chunks),
            read_options=csv.ReadOptions(column_names=list(cols), block_size=block or _BLOCK),
            # PostgreSQL's CSV: NULL is an empty field, an empty text is "" (kept), and
            # quoted fields may hold line breaks
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types={c: _ARROW[types[c]](pa) for c in cols},
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        return self.cache.insert_arrow(target or self.cache.TABLES[name], cols, reader)


#: pyarrow's CSV block when every row is narrower than a quarter of it.
_BLOCK = 4 << 20


class _ChunkFile(io.RawIOBase):
    """A readable file over an iterator of byte chunks (what pyarrow's CSV reader reads).
    COPY hands out a chunk per row: a read gathers chunks up to the size asked for."""

    def __init__(self, first: bytes, rest: Iterator[bytes]) -> None:
        super().__init__()
        self._held = first
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        parts, have = [self._held], len(self._held)
        while size < 0 or have < size:
            chunk = next(self._rest, None)
            if chunk is None:
                break
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        if 0 <= size < len(data):
            data, self._held = data[:size], data[size:]
        else:
            self._held = b""
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class _AdbcReader(_EngineReader):
    """Reads for a refresh of a SQLite file through the ADBC SQLite driver, when it is
    installed: rows arrive as Arrow batches (no Python object per value), about four
    times faster than ``sqlite3`` rows. One read transaction: one state of the file."""

    def __init__(self, cache: Cache, cursor) -> None:
        super().__init__(cache)
        self.cur = cursor

    def fetch(self, sql: str, params: tuple = ()) -> list:
        self.cur.execute(sql, params or None)
        return [tuple(r) for r in self.cur.fetchall()]

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        cols = cols or self.cache.columns(name)
        types = dict(zip(SOURCE_COLUMNS[name], _TYPES[name]))
        # The driver types each column from its first rows: a first row with a value of the
        # right type in every column (and a marker -1 filtered out below) fixes them.
        head = ", ".join(("-1" if types[c] == "BIGINT" else "''") + f" AS {c}" for c in cols)
        marker = _MARKER[name]
        sql = self.engine.compile(f"SELECT {head} UNION ALL SELECT {', '.join(cols)} FROM {{{name}}} {where}")
        self.cur.execute(sql, params or None)
        with _read_ahead(self.cur.fetch_record_batch()) as reader:
            return self.cache.insert_arrow(target or self.cache.TABLES[name], cols, reader, f"WHERE {marker} <> -1")


@contextlib.contextmanager
def _read_ahead(reader, depth: int = 4):
    """``reader`` (Arrow record batches from the SQLite driver) read by a thread of its
    own, up to ``depth`` batches ahead: the driver steps SQLite (without the GIL) while
    DuckDB writes the batches before, so a first load costs about the longer of the two
    instead of their sum. An error of the driver reaches the reader's consumer; a
    consumer that stops early stops the thread. (Arrow has no read-ahead reader of its
    own for a stream, so this is written here.)"""
    pa = _pyarrow()
    batches: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def hand_over(item: Any) -> bool:
        """Queue ``item`` unless the consumer stopped (then False)."""
        while not stop.is_set():
            try:
                batches.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        item: Any = end
        try:
            for batch in reader:
                if not hand_over(batch):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            item = exc
        hand_over(item)

    def consume():
        while True:
            item = batches.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    thread = threading.Thread(target=produce, name="sessionkit-cache-read", daemon=True)
    thread.start()
    try:
        yield pa.RecordBatchReader.from_batches(reader.schema, consume())
    finally:
        stop.set()
        thread.join()


#: Wide message columns a cache reads only once a query names them.
LAZY_COLUMNS = ("text", "metadata", "content")

#: The column of each table whose -1 marks _AdbcReader's typing row.
_MARKER = {"messages": "seq", "compactions": "seq", "runs": "n", "events": "seq", "embeddings": "seq"}


#: The cache file of a SQLite store ``x.db`` is ``x.db-analysis.duckdb``, beside it.
CACHE_SUFFIX = "-analysis.duckdb"

#: The layout of a cache file (its tables and state); a file of another layout is made again.
CACHE_FORMAT = "3"

_file_locks: dict[str, threading.RLock] = {}
_file_locks_guard = threading.Lock()


def _file_lock(path: str) -> threading.RLock:
    """One lock per cache file in this process: store objects on the same file share its
    database (DuckDB opens a file once per process) and refresh it one at a time."""
    with _file_locks_guard:
        return _file_locks.setdefault(path, threading.RLock())


def _remove_file(path: str) -> None:
    for name in (path, path + ".wal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)


def _adbc_sqlite():
    try:
        import adbc_driver_sqlite.dbapi as adbc  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    return adbc


class Cache:
    """The analysis columns of a SQLite or PostgreSQL store in a DuckDB database (a file
    beside a SQLite file, else in memory), brought up to date before each query (see
    the module notes).

    ``engine`` is the store's :class:`~sessionkit.store._sql.SQLEngine`; the cache reads it
    through :meth:`SQLEngine.fetch` inside :meth:`SQLEngine.snapshot` (or, for a SQLite
    file with the ADBC driver installed, in one read transaction of its own), so the
    rows and the change log it reads describe one state of the store. ``ordered`` says
    that rows and log entries become visible in write-sequence order (one writer at a
    time, as on SQLite); where they may not (PostgreSQL: concurrent transactions commit
    in any order), each refresh also compares the counts it holds with the store's and
    reads everything again when a late commit slipped below what it had seen.
    """

    TABLES = {name: "sessionkit_" + name for name in SOURCE_COLUMNS}

    #: What a refresh keeps between queries (and, in a cache file, between processes).
    STATE = ("hi", "last_n", "log_count", "loaded", "lazy", "store_id", "store_schema", "hi_key", "log_key")

    def __init__(self, engine, *, ordered: bool) -> None:
        self.engine = engine
        self.ordered = ordered
        self.hi = 0  # the highest message seq held
        self.last_n = 0  # the last change log entry applied
        self.log_count = 0  # entries up to last_n (PostgreSQL: a late entry changes it)
        self.loaded = False
        #: The wide message columns held (read only once a query names them, or ``*``).
        self.lazy: dict[str, bool] = {c: False for c in LAZY_COLUMNS}
        #: The store the rows describe (its ``store_id``, written when it was created):
        #: checked on every refresh, so a store made again in the same place (a notebook
        #: that deletes its store and builds it anew) is never answered from the old one's rows.
        self.store_id = ""
        # what a cache file's rows describe: the store's schema, the row at seq ``hi``
        # and the change log entry ``last_n`` (checked against the store it is beside)
        self.store_schema = ""
        self.hi_key = ""
        self.log_key = ""
        self.views: dict = {}
        self.reads = 0  # message rows read from the store (what refreshes cost)
        self.checked = False  # a file's state was checked against the store by this object
        #: What the store's snapshot saw at the last refresh (see ``_refresh``), or None.
        self.seen: str | None = None
        self._adbc: Any = None
        #: The cache file beside a SQLite file store (None: in memory).
        self.file: str | None = None
        self.con: Any = None
        self.lock: Any = None
        # The name the store's file is open by in this process (one file reached through
        # two names, a hard link or a bind mount, is opened through one: see _files), so
        # that its store objects share one cache file under one name.
        name = getattr(engine, "_file", None) or engine.path
        if engine.kind == "sqlite" and name:
            self.file = name + CACHE_SUFFIX
            self.lock = _file_lock(self.file)
            with self.lock:
                self.con = self._open_file()
        if self.con is None:
            self.file = None
            self.lock = threading.RLock()
            self.con = new_connection()
            self._create_tables()
        adbc = _adbc_sqlite() if engine.kind == "sqlite" and engine.path else None
        if adbc is not None:
            with contextlib.suppress(Exception):  # the driver cannot open it: read through the store
                uri = "file:" + name + "?mode=ro"
                self._adbc = adbc.connect(uri, autocommit=True)

    def _create_tables(self) -> None:
        for name, cols in SOURCE_COLUMNS.items():
            types = _TYPES[name]
            _do(
                self.con,
                f"CREATE TABLE IF NOT EXISTS {self.TABLES[name]} ("
                + ", ".join(f"{c} {ty}" for c, ty in zip(cols, types))
                + ")",
            )
        _do(self.con, "CREATE TABLE IF NOT EXISTS sessionkit_cache_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")

    # -- the cache file ---------------------------------------------------------------
    def _open_file(self):
        """A connection to the cache file, created or made again as needed; None when it
        cannot be had (another process holds it, the folder is read-only...): the cache
        then lives in memory for this store object."""
        duckdb = duckdb_module()
        assert self.file is not None
        for attempt in range(2):
            try:
                con = new_connection(path=self.file)
            except duckdb.Error as exc:
                if "lock" in str(exc).lower() or attempt:  # held by another process, or unusable
                    return None
                _remove_file(self.file)  # not a DuckDB file (damaged): made again
                continue
            try:
                self.con = con
                self._create_tables()
                if self._meta().get("format") != CACHE_FORMAT:  # new, or of another layout
                    self._drop_tables()
                    self._create_tables()
                    _do(con, "INSERT INTO sessionkit_cache_meta VALUES ('format', ?)", [CACHE_FORMAT])
                return con
            except duckdb.Error:
                self.con = None
                with contextlib.suppress(duckdb.Error):
                    con.close()
                if attempt:
                    return None
                _remove_file(self.file)
        return None

    def _drop_tables(self) -> None:
        for table in (*self.TABLES.values(), "sessionkit_cache_meta"):
            _do(self.con, f"DROP TABLE IF EXISTS {table}")

    def _meta(self) -> dict[str, str]:
        return dict(self.con.execute("SELECT key, value FROM sessionkit_cache_meta").fetchall())

    def _state(self) -> dict[str, Any]:
        return {k: (dict(self.lazy) if k == "lazy" else getattr(self, k)) for k in self.STATE}

    def _set_state(self, state: dict[str, Any]) -> None:
        for k in self.STATE:
            v = state[k]
            setattr(self, k, dict(v) if k == "lazy" else v)

    def _load_state(self) -> None:
        """The state the cache file holds (another store object or process may have moved it)."""
        saved = self._meta().get("state")
        self._set_state(_EMPTY if saved is None else json.loads(saved))

    def _save_state(self) -> None:
        _do(self.con, "INSERT OR REPLACE INTO sessionkit_cache_meta VALUES ('state', ?)", [json.dumps(self._state())])

    def _fingerprints(self, rd) -> tuple[str, str]:
        """What identifies the rows held: the row at ``hi`` and the log entry ``last_n``."""
        eng = self.engine
        row = rd.fetch(eng.compile("SELECT session_id, id FROM {messages} WHERE seq = ?"), (self.hi,))
        entry = rd.fetch(eng.compile("SELECT session_id, kind, seq FROM {changes} WHERE n = ?"), (self.last_n,))
        return (json.dumps(list(row[0])) if row else ""), (json.dumps(list(entry[0])) if entry else "")

    def _store_id(self, rd) -> str:
        row = rd.fetch(self.engine.compile("SELECT value FROM {meta} WHERE key = 'store_id'"))
        return str(row[0][0]) if row else ""

    def _schema(self, rd) -> str:
        row = rd.fetch(self.engine.compile("SELECT value FROM {meta} WHERE key = 'schema_version'"))
        return str(row[0][0]) if row else ""

    def _check_file(self, rd) -> bool:
        """Whether the state read from the file describes the store it is beside (same
        schema, its log entry and newest row still there): else it is read again."""
        if self._schema(rd) != self.store_schema:
            return False
        hi_key, log_key = self._fingerprints(rd)
        if log_key != self.log_key:
            return False
        if hi_key != self.hi_key:  # the row at hi went: only a delete logged since explains it
            deletes = rd.fetch(
                self.engine.compile("SELECT count(*) FROM {changes} WHERE n > ? AND kind = 'delete'"), (self.last_n,)
            )
            return bool(deletes[0][0])
        return True

    def _count_matches(self, rd) -> bool:
        held = self.con.execute("SELECT count(*) FROM sessionkit_messages").fetchall()[0][0]
        return rd.fetch(self.engine.compile("SELECT count(*) FROM {messages}"))[0][0] == held

    def close(self) -> None:
        with self.lock:
            self.con.close()
            if self._adbc is not None:
                with contextlib.suppress(Exception):
                    self._adbc.close()
                self._adbc = None

    # -- reading the store ----------------------------------------------------------
    @contextlib.contextmanager
    def _reading(self, through_store: bool = False):
        """A reader whose reads all see one state of the store, with the cache's lock held.

        The store's snapshot is taken before the lock: a thread inside a write transaction
        of a SQLite store holds the store's lock and then asks for the cache's, so a thread
        holding the cache's lock must never wait for the store's. ``through_store``: read
        through the store's own connection (inside a write transaction: its own writes)."""
        if self._adbc is None or through_store:
            with self.engine.snapshot(), self.lock:
                yield _CopyReader(self) if hasattr(self.engine, "copy_csv") else _EngineReader(self)
            return
        with self.lock:
            with self._adbc_reading() as rd:
                yield rd

    @contextlib.contextmanager
    def _adbc_reading(self):
        cur = self._adbc.cursor()
        try:
            cur.execute("BEGIN")  # a read transaction: one state of the file until COMMIT
            try:
                yield _AdbcReader(self, cur)
            finally:
                with contextlib.suppress(Exception):
                    cur.execute("COMMIT")
        finally:
            with contextlib.suppress(Exception):
                cur.close()

    def columns(self, name: str) -> tuple[str, ...]:
        """The columns of ``name`` the cache holds now (lazy ones once they were asked for)."""
        if name != "messages":
            return SOURCE_COLUMNS[name]
        return tuple(c for c in SOURCE_COLUMNS[name] if self.lazy.get(c, True))

    def put(self, name: str, rows: list, cols: tuple[str, ...], target: str | None = None) -> None:
        """Python rows of ``name`` (``cols``) into the cache table (or ``target``), through Arrow."""
        if not rows:
            return
        pa = _pyarrow()
        types = dict(zip(SOURCE_COLUMNS[name], _TYPES[name]))
        arrays = [pa.array(list(values), type=_ARROW[types[c]](pa)) for values, c in zip(zip(*rows), cols)]
        self.insert_arrow(target or self.TABLES[name], cols, pa.Table.from_arrays(arrays, names=list(cols)))

    def insert_arrow(self, table: str, cols: tuple[str, ...], source, where: str = "") -> int:
        """Rows of ``source`` (an Arrow table or record batch reader of ``cols``, those
        matching ``where``) into ``table``; how many."""
        con = self.con
        con.register("sessionkit_batch", source)
        try:  # DuckDB's INSERT answers with the number of rows it wrote
            return con.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM sessionkit_batch {where}"
            ).fetchall()[0][0]
        finally:
            con.unregister("sessionkit_batch")

    def _fill(self, rd, column: str) -> None:
        """Read a lazy column of every message held (same snapshot as the refresh)."""
        types = dict(zip(SOURCE_COLUMNS["messages"], _TYPES["messages"]))
        _do(self.con, f"CREATE OR REPLACE TEMP TABLE sessionkit_fill (seq BIGINT, {column} {types[column]})")
        try:
            rd.load("messages", "WHERE seq > ?", (0,), paged=True, cols=("seq", column), target="sessionkit_fill")
            _do(
                self.con,
                f"UPDATE sessionkit_messages SET {column} = f.{column} FROM sessionkit_fill f"
                " WHERE sessionkit_messages.seq = f.seq",
            )
        finally:
            _do(self.con, "DROP TABLE sessionkit_fill")
        self.lazy[column] = True

    def refresh(self, need: Iterable[str] = ()) -> None:
        """Bring the cache up to the store's current (committed) state, with the lazy
        columns ``need``.

        One DuckDB transaction: the rows held and the state saying what they are change
        together or not at all (a process killed mid-way leaves a cache file as it was).
        A cache file that fails (damaged since it was opened) is made again from the store."""
        duckdb = duckdb_module()
        wanted = sorted(need)
        with self._reading() as rd:
            try:
                self._refresh_once(rd, wanted)
            except duckdb.Error:
                if self.file is None:
                    raise
                self._rebuild_file()
                self._refresh_once(rd, wanted)

    def _rebuild_file(self) -> None:
        duckdb = duckdb_module()
        with contextlib.suppress(duckdb.Error):
            self.con.close()
        assert self.file is not None
        _remove_file(self.file)
        self.views = {}
        self.checked = False
        self._set_state(_EMPTY)
        self.con = self._open_file()
        if self.con is None:  # (it cannot be made: in memory from now on)
            self.file = None
            self.con = new_connection()
            self._create_tables()

    def _refresh_once(self, rd, need: list[str], keep: bool = True) -> None:
        """One refresh through ``rd``, in a DuckDB transaction that commits (``keep``) or is
        left open for the caller to run a query in and roll back (``keep=False``: what is
        read may be rolled back in the store, so the cache must not keep it)."""
        before, seen = self._state(), self.seen
        _do(self.con, "BEGIN TRANSACTION")
        try:
            if self.file is not None:
                self._load_state()
                if not self.checked and self.loaded and not self._check_file(rd):
                    self._reset()
            if not keep:
                self.seen = None  # the store's snapshot text does not show this thread's writes
            self._refresh(rd)
            if self.file is not None and not self.checked and not self._count_matches(rd):
                self._reset()  # rows held that the checks above could not tell apart
                self._load_all(rd)
            for column in need:
                if not self.lazy.get(column, True):
                    self._fill(rd, column)
            if not keep:
                return
            if self.file is not None:
                self.store_schema = self._schema(rd)
                self.hi_key, self.log_key = self._fingerprints(rd)
                self._save_state()
            _do(self.con, "COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                _do(self.con, "ROLLBACK")
            self._set_state(before)
            self.seen = seen
            raise
        self.checked = True

    def _refresh(self, rd) -> None:
        # Where the store can say what its snapshot sees (PostgreSQL), a refresh that sees
        # what the last one saw has nothing to read: no checks, no counts.
        state = self.engine.visible_state()
        if self.loaded and state is not None and state == self.seen:
            return
        self.seen = None  # until this refresh is through
        store_id = self._store_id(rd)
        if self.loaded and store_id != self.store_id:  # another store in the same place
            self._reset()
        self.store_id = store_id
        self._refresh_rows(rd)
        self.seen = state

    def _refresh_rows(self, rd) -> None:
        eng = self.engine
        if not self.loaded:
            self._load_all(rd)
            return
        log = rd.fetch(
            eng.compile("SELECT n, session_id, kind, seq FROM {changes} WHERE n > ? ORDER BY n"), (self.last_n,)
        )
        if not self.ordered:
            seen = rd.fetch(eng.compile("SELECT count(*) FROM {changes} WHERE n <= ?"), (self.last_n,))[0][0]
            if seen != self.log_count:  # an entry committed late, below what was read: start afresh
                self._reset()
                self._load_all(rd)
                return
        top = rd.fetch(eng.compile("SELECT coalesce(max(seq), 0) FROM {messages}"))[0][0]
        if not log and top == self.hi and self.ordered:
            return
        self._apply(rd, log, top)
        if not self.ordered:
            count = rd.fetch(eng.compile("SELECT count(*) FROM {messages}"))[0][0]
            held = self.con.execute("SELECT count(*) FROM sessionkit_messages").fetchall()[0][0]
            if count != held:  # a message committed late, below the highest seq held
                self._reset()
                self._load_all(rd)

    def _reset(self) -> None:
        for table in self.TABLES.values():
            _do(self.con, f"DELETE FROM {table}")
        self.loaded = False

    def _load_all(self, rd) -> None:
        eng = self.engine
        row = rd.fetch(eng.compile("SELECT coalesce(max(n), 0), count(*) FROM {changes}"))[0]
        self.last_n, self.log_count = row[0], row[1]
        self.reads += rd.load("messages", "WHERE seq > ?", (0,), paged=True)
        self.hi = self.con.execute("SELECT coalesce(max(seq), 0) FROM sessionkit_messages").fetchall()[0][0]
        for name in ("compactions", "runs", "events", "embeddings"):
            rd.load(name)
        self.loaded = True

    def _apply(self, rd, log: list, top: int) -> None:
        eng = self.engine
        gone: set[str] = set()  # sessions whose messages are read again
        updated: set[int] = set()
        side: dict[str, set[str]] = {"compactions": set(), "runs": set(), "events": set(), "embeddings": set()}
        low = None
        for _, sid, kind, seq in log:
            if kind == "delete":
                gone.add(sid)
                side["compactions"].add(sid)
                side["embeddings"].add(sid)
                if seq is not None:
                    low = seq if low is None else min(low, seq)
            elif kind == "update":
                updated.add(seq)
                side["embeddings"].add(sid)
            elif kind in side:
                side[kind].add(sid)
        hi = self.hi if low is None else min(self.hi, low - 1)
        con = self.con
        gone_ids = sorted(gone)
        if gone:
            _do(con, "DELETE FROM sessionkit_messages WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [gone_ids])
        if updated:
            _do(con, "DELETE FROM sessionkit_messages WHERE seq IN (SELECT unnest(?::BIGINT[]))", [sorted(updated)])
        _do(con, "DELETE FROM sessionkit_messages WHERE seq > ?", [hi])
        # rows above hi (appends and imports), then the sessions read again, then updated
        # rows: disjoint reads, so nothing is copied twice
        self.reads += rd.load("messages", "WHERE seq > ?", (hi,), paged=True)
        for start in range(0, len(gone_ids), 1000):
            part = gone_ids[start : start + 1000]
            self.reads += rd.load("messages", "WHERE session_id {in_ids} AND seq <= ?", (eng.listed(part), hi))
        wanted = [s for s in sorted(updated) if s <= hi]
        for start in range(0, len(wanted), 1000):
            seqs = wanted[start : start + 1000]
            self.reads += rd.load(
                "messages",
                "WHERE seq {in_seqs} AND NOT (session_id {in_ids})",
                (eng.listed(seqs), eng.listed(gone_ids)),
            )
        for name, sids in side.items():
            if not sids:
                continue
            sids_sorted = sorted(sids)
            _do(
                con, f"DELETE FROM {self.TABLES[name]} WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [sids_sorted]
            )
            for start in range(0, len(sids_sorted), 1000):
                chunk = sids_sorted[start : start + 1000]
                rd.load(name, "WHERE session_id {in_ids}", (eng.listed(chunk),))
        self.hi = max(top, hi)
        if log:
            self.last_n = log[-1][0]
            self.log_count += len(log)

    # -- queries ------------------------------------------------------------------------
    def query(
        self,
        query: str,
        params: Any = None,
        session_ids: list[str] | None = None,
        *,
        run: _Run | None = None,
        files: bool = False,
    ):
        with self.lock:
            if run is not None:  # (stopped, or the store closed, while this waited for the cache)
                run.raise_if_stopped()
            check_query(self.con, query, files=files)
            names = names_used(self.con, query)
            if files:  # (the views it names are read whole)
                names = names | {"*"}
        # (``content`` only for the views that parse it, never for a star)
        need = {c for c in LAZY_COLUMNS if c != "content" and (c in names or "*" in names)} | needs_columns(names)
        if self.engine.in_write():
            return self._query_in_write(query, params, names, need, session_ids, run=run, files=files)
        self.refresh(need)
        with self.lock:
            return run_query(self.con, self.TABLES, query, params, self.views, names, session_ids, run=run, files=files)

    def _query_in_write(
        self,
        query: str,
        params: Any,
        names: set[str],
        need: set[str],
        session_ids: list[str] | None,
        *,
        run: _Run | None,
        files: bool,
    ):
        """A query from inside a write transaction of the store: it sees the transaction's
        own writes, and the cache keeps none of them (the transaction may still roll
        back). The refresh and the query share one DuckDB transaction, rolled back."""
        tree = "*" in names or bool(names & set(TREE_COLUMNS))
        with self._reading(through_store=True) as rd:
            before, seen, checked = self._state(), self.seen, self.checked
            # views first: they are made outside the transaction that is rolled back
            _install(self.con, self.TABLES, self.views, tree, set(VIEWS), session_ids)
            try:
                self._refresh_once(rd, sorted(need), keep=False)
                return run_query(
                    self.con,
                    self.TABLES,
                    query,
                    params,
                    self.views,
                    names,
                    session_ids,
                    run=run,
                    files=files,
                    in_transaction=True,
                )
            finally:
                _rollback(self.con)
                self._set_state(before)
                self.seen, self.checked = seen, checked


#: The state of an empty cache.
_EMPTY: dict[str, Any] = {
    "hi": 0,
    "last_n": 0,
    "log_count": 0,
    "loaded": False,
    "lazy": {c: False for c in LAZY_COLUMNS},
    "store_id": "",
    "store_schema": "",
    "hi_key": "",
    "log_key": "",
}

#: Message rows a refresh holds as Python rows at once (without ADBC).
_PAGE = 20_000

_ARROW = {
    "BIGINT": lambda pa: pa.int64(),
    "VARCHAR": lambda pa: pa.string(),
    "FLOAT[]": lambda pa: pa.string(),
}
