"""Analysis where the data is: the views of ``store.sql`` as DuckDB SQL over the store's tables.

The views (``messages``, ``sessions``, ``compactions``, ``runs``, ``events``, ``labels``, the
tree views of :mod:`.tree_views`, ``embeddings`` of :mod:`.._embeddings` and ``datasets``,
``dataset_items`` of :mod:`.._datasets`;
their columns in :mod:`sessionkit.analysis`) are written once, in :func:`view_sql`, as
DuckDB SQL over tables named like the store's own (``sessionkit_messages``...) that hold
at least the analysis columns every engine stores with each message (``_schema.TABLES``).
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

Where those tables are is the engine's business: on a DuckDB store they are the store's own
tables, read through a second connection (nothing copied); on SQLite and PostgreSQL they are
the tables of :class:`~sessionkit.store.sql.cache.Cache`, a DuckDB copy of the analysis columns
brought up to date before each query. A query is checked by :mod:`.sandbox` and run (and
stopped) by :mod:`.query`. DuckDB, pyarrow (and pandas, above) come from the ``analysis``
extra and are imported on first use.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...errors import missing
from .. import _schema
from .._datasets import DATASET_VIEW_COLUMNS, dataset_view_sql
from .._embeddings import EMBEDDINGS_COLUMNS, embeddings_view_sql
from .._labels import LABEL_VIEW_COLUMNS, label_view_sql
from .tree_views import TREE_VIEW_COLUMNS, TREE_VIEW_ORDER, TREE_VIEWS, tree_view_sql

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "VIEWS",
    "VIEW_COLUMNS",
    "VIEW_ORDER",
    "TREE_COLUMNS",
    "SOURCE_COLUMNS",
    "SOURCE_TYPES",
    "view_sql",
    "install_views",
    "scoped",
    "do",
    "duckdb_module",
    "pyarrow_module",
    "pyarrow_csv_module",
]

#: The views of ``store.sql`` (and ``store.to_arrow``).
VIEWS = (
    "messages",
    "sessions",
    "compactions",
    "runs",
    "events",
    "labels",
    *TREE_VIEWS,
    "embeddings",
    "datasets",
    "dataset_items",
    "experiments",
)

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
        ("started_at_message", "text"),
        ("variant", "text"),
        ("meta", "text"),
    ),
    "events": (
        ("session_id", "text"),
        ("seq", "int"),
        ("run_id", "text"),
        ("kind", "text"),
        ("ts", "time"),
        ("data", "text"),
    ),
    "labels": LABEL_VIEW_COLUMNS,
    **TREE_VIEW_COLUMNS,
    "embeddings": EMBEDDINGS_COLUMNS,
    **DATASET_VIEW_COLUMNS,
    "experiments": (
        ("experiment", "text"),
        ("dataset", "text"),
        ("version", "int"),
        ("item", "int"),
        ("variant", "text"),
        ("session_id", "text"),
        ("item_message_id", "text"),
        ("run_id", "text"),
        ("status", "text"),
        ("error", "text"),
        ("reply_id", "text"),
        ("reply", "text"),
        ("tokens_in", "int"),
        ("tokens_out", "int"),
        ("cost_usd", "float"),
        ("latency_s", "float"),
        ("model", "text"),
        ("started_at", "time"),
        ("settings", "text"),
        ("scorer", "text"),
        ("tag", "text"),
        ("rating", "float"),
    ),
}

#: Columns of the ``messages`` view computed from the whole tree (the rest are stored).
TREE_COLUMNS = ("n_children", "on_latest_path", "compacted_by")

#: The stored columns the views read, per table (a cache keeps exactly these), and their
#: DuckDB types: from the store's table declaration (``_schema.TABLES``, the columns marked
#: ``analysis``).
SOURCE_COLUMNS = _schema.SOURCE_COLUMNS
SOURCE_TYPES = _schema.SOURCE_TYPES


def duckdb_module() -> ModuleType:
    try:
        import duckdb
    except ImportError as exc:
        raise missing("analysis", "duckdb", exc) from exc
    return duckdb


def pyarrow_module() -> ModuleType:
    try:
        import pyarrow
    except ImportError as exc:
        raise missing("analysis", "pyarrow", exc) from exc
    return pyarrow


def pyarrow_csv_module() -> ModuleType:
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
        **({"chunks": tables["chunks"]} if "chunks" in tables else {}),
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
           usage, n::BIGINT AS run_number,
           CASE WHEN json_type(meta, '$.at') = 'VARCHAR' THEN json_extract_string(meta, '$.at') END
               AS started_at_message,
           CASE WHEN json_type(meta, '$.variant') = 'VARCHAR' THEN json_extract_string(meta, '$.variant') END
               AS variant,
           meta
    FROM {t["runs"]}"""
    events = f"""SELECT session_id, seq::BIGINT AS seq, run_id,
           CASE WHEN json_type(data, '$.kind') = 'VARCHAR' THEN json_extract_string(data, '$.kind') END AS kind,
           TRY_CAST(json_extract_string(data, '$.ts') AS TIMESTAMPTZ) AS ts, data
    FROM {t["events"]}"""
    return {
        "messages": messages,
        "sessions": sessions,
        "compactions": compactions,
        "runs": runs,
        "events": events,
        "labels": label_view_sql(tables["labels"]),
        **tree_view_sql(t),
        "embeddings": embeddings_view_sql(t),
        **dataset_view_sql(tables),
        "experiments": _experiments_sql(tables, runs),
    }


def _experiments_sql(tables: dict[str, str], runs: str) -> str:
    """The ``experiments`` view: the latest run of each (experiment, item, variant) of
    ``sk.prototyping.experiment`` (a run whose ``meta`` names an experiment), its reply (the
    last assistant message carrying its run id), the dataset item it asked again, and a
    row per scorer label on the reply (one row with NULL scorer when there is none)."""
    messages, labels = tables["messages"], label_view_sql(tables["labels"])

    def text(key: str) -> str:
        return f"CASE WHEN json_type(r.meta, '$.{key}') = 'VARCHAR' THEN json_extract_string(r.meta, '$.{key}') END"

    def number(key: str) -> str:
        return (
            f"CASE WHEN json_type(r.meta, '$.{key}') IN ('BIGINT', 'UBIGINT')"
            f" THEN json_extract(r.meta, '$.{key}')::BIGINT END"
        )

    return f"""WITH e AS (
        SELECT * FROM (
            SELECT {text("experiment")} AS experiment, {text("dataset")} AS dataset, {number("version")} AS version,
                   {number("item")} AS item, r.*, CAST(json_extract(r.meta, '$.settings') AS VARCHAR) AS settings
            FROM ({runs}) r WHERE json_type(r.meta, '$.experiment') = 'VARCHAR'
        ) x
        QUALIFY row_number() OVER (PARTITION BY x.experiment, x.dataset, x.version, x.item, x.variant
                                   ORDER BY x.started_at DESC, x.run_number DESC) = 1
    ), replies AS (
        SELECT session_id, json_extract_string(metadata, '$.run_id') AS run_id,
               arg_max(id, seq) AS reply_id, arg_max(coalesce(text, ''), seq) AS reply
        FROM {messages}
        WHERE role = 'assistant' AND json_extract_string(metadata, '$.run_id') IN (SELECT run_id FROM e)
        GROUP BY ALL
    )
    SELECT e.experiment, e.dataset, e.version, e.item, e.variant, e.session_id, d.message_id AS item_message_id,
           e.run_id, e.status, e.error, p.reply_id, p.reply, e.tokens_in, e.tokens_out, e.cost_usd,
           (epoch(e.ended_at) - epoch(e.started_at))::DOUBLE AS latency_s, e.model, e.started_at, e.settings,
           l.scorer, l.tag, l.rating
    FROM e LEFT JOIN replies p ON p.session_id = e.session_id AND p.run_id = e.run_id
    LEFT JOIN {tables["dataset_items"]} d ON d.name = e.dataset AND d.version = e.version AND d.n = e.item
    LEFT JOIN ({labels}) l ON l.session_id = e.session_id AND l.message_id = p.reply_id AND l.scorer IS NOT NULL"""


#: The ORDER BY that gives each view's rows in the order ``to_arrow`` returns them.
VIEW_ORDER = {
    "messages": "seq",
    "sessions": "session_id",
    "compactions": "session_id, created_at, id",
    "runs": "session_id, run_number",
    "events": "session_id, seq",
    "labels": "seq",
    **TREE_VIEW_ORDER,
    "embeddings": "session_id, message_id, model",
    "datasets": "name, version",
    "dataset_items": "name, version, n",
    "experiments": "experiment, item, variant, scorer",
}


def do(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> None:
    """Run a statement whose result is not needed, to its end (DuckDB 2 wants every
    result consumed before the connection's next statement)."""
    (con.execute(sql) if params is None else con.execute(sql, params)).fetchall()


def install_views(con: duckdb.DuckDBPyConnection, tables: dict[str, str], tree: bool) -> None:
    for name, select in view_sql(tables, tree=tree).items():
        do(con, f"CREATE OR REPLACE TEMP VIEW {name} AS {select}")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scoped(tables: dict[str, str], session_ids: list[str]) -> dict[str, str]:
    """``tables`` restricted to some sessions (the views over them hold only those)."""
    listed = ", ".join(_literal(s) for s in session_ids) or "NULL"
    return {
        # (chunk rows have no session: read through their message's seq; a dataset is no session's)
        name: table
        if name in ("chunks", "datasets", "dataset_items")
        else f"(SELECT * FROM {table} WHERE session_id IN ({listed}))"
        for name, table in tables.items()
    }
