"""Transcript analysis: DataFrames, DuckDB SQL over any store, plots (``sessionkit.analysis.plot``).

Needs the ``analysis`` extra (``pip install 'sessionkit[analysis]'``: pandas,
pyarrow, DuckDB, matplotlib); each is imported on first use, and a missing one
raises :class:`sessionkit.MissingDependency` naming the extra.

``session.to_pandas()`` and ``store.messages_df(session_ids=None)`` give one row
per message, in write order, with the columns of the ``messages`` view (docs/analysis.md):

============== ==================================================================
session_id     the session
id, parent_id  the message and its parent (missing for a root)
depth          0 for a root, parent's depth + 1 otherwise
role           the message's role
text           its text parts joined by blank lines (what search indexes)
n_parts        number of parts
tool_names     list of tool names, one per tool part (``tool-<name>``, ``dynamic-tool``)
tokens, bytes  the token estimate and JSON size stored with the message (docs/messages.md)
created_at     creation time (UTC timestamps)
n_children     number of direct children (2 or more: a branch point)
on_latest_path whether it lies on the path from the root to the latest leaf
compacted_by   id of the newest compaction whose range holds it, else missing
============== ==================================================================

``store.sql(query)`` runs one read-only DuckDB SELECT over these views of the
store (``store.sql_arrow`` gives the result as a ``pyarrow.Table``, and
``store.to_arrow(view)`` a whole view):

* ``messages``: the D1 columns plus ``seq`` (store-wide write order) and
  ``metadata`` (JSON text; use ``json_extract``);
* ``sessions``: ``session_id, message_count, roots, leaves, branch_points,
  max_depth, tokens, bytes, latest_leaf, created_at, updated_at,
  compaction_count, run_count``;
* ``compactions``: ``session_id, id, from_id, to_id, summary, created_at,
  tokens_before, tokens_after, message_count``;
* ``runs``: ``session_id, run_id, status, error, input, started_at, ended_at,
  tokens_in, tokens_out, cache_read, cache_write, cost_usd, model, usage`` (JSON),
  ``run_number`` (``store.runs_df()``);
* ``events``: ``session_id, seq, run_id, kind, ts, data`` (the event as JSON;
  ``store.events_df(session_ids=None)``).

Analysis runs where the data is (docs/analysis.md): every engine stores ``text``,
``n_parts``, ``tool_names`` and ``metadata`` with each message when it is written,
and the tree columns are computed in SQL, so no query decodes a message. On a
DuckDB store the views are defined over the store's own tables and a query reads
one snapshot of them; on SQLite and PostgreSQL they are defined over a DuckDB
cache of those columns (for a SQLite file, a file beside it, ``x.db-analysis.duckdb``,
kept between processes; in memory for PostgreSQL), filled by the first query and brought up to date
before each later one from the rows written since and the store's change log
(see ``sessionkit/store/sql/views.py``). The tree columns cost a pass over the
messages, so a query that names none of them (and no ``*``) skips it. Anything
but a single SELECT raises ``ValueError``: a query never writes the store.

A query is a sandbox: it reads the views, its own CTEs and the table functions
``range``, ``generate_series`` and ``unnest``, and nothing else -- no file, no
environment, no table of the store or of its cache, no ``duckdb_*()`` catalog
function, no setting; what it reaches beyond raises ``ValueError`` naming it.
``store.sql(query, files=True)`` lets a query join local files (``read_csv``,
``read_parquet``, ``'data.csv'``...) with the views: the views it names are then read
in one snapshot into a DuckDB connection of its own. The HTTP server has no SQL
route, so no client reaches either. A running query stops when the store closes
(``StoreClosed``; ``close()`` returns once it has), on Ctrl-C, on
``store.interrupt_sql()`` and when the ``sk.aio`` task awaiting it is cancelled
(``KeyboardInterrupt``, or ``CancelledError`` in the task); the store answers the
next query as before.

>>> store.sql("SELECT role, count(*) AS n FROM messages GROUP BY role ORDER BY n DESC")
"""

from __future__ import annotations

from typing import Any

from ..errors import missing
from ..store import VIEW_COLUMNS
from ._agreement import Agreement, agreement
from ._overview import OVERVIEW_SQL, overview_data
from ._tables import D1_COLUMNS, TABLES, StoreData

__all__ = [
    "agreement",
    "Agreement",
    "to_pandas",
    "messages_df",
    "runs_df",
    "events_df",
    "rows_df",
    "sql",
    "arrow_table",
    "D1_COLUMNS",
    "TABLES",
    "StoreData",
    "overview_data",
    "OVERVIEW_SQL",
]


def _pandas():
    try:
        import pandas
    except ImportError as exc:
        raise missing("analysis", "pandas", exc) from exc
    return pandas


def _pyarrow():
    try:
        import pyarrow
    except ImportError as exc:
        raise missing("analysis", "pyarrow", exc) from exc
    return pyarrow


_D1_SELECT = ", ".join(D1_COLUMNS)


def _session_ids(session_ids) -> list[str] | None:
    if session_ids is None:
        return None
    if isinstance(session_ids, str):
        session_ids = [session_ids]
    ids = list(dict.fromkeys(session_ids))
    for sid in ids:
        if not isinstance(sid, str):
            raise TypeError(f"session ids must be str, got {type(sid).__name__}")
    return ids


def _df(table):
    """A pandas DataFrame from an Arrow table (pandas needed)."""
    _pandas()
    return table.to_pandas()


def messages_df(store, session_ids=None):
    """One row per message of ``store`` (or of ``session_ids``) in write order, with the columns
    of the ``messages`` view (docs/analysis.md)."""
    _pandas()
    ids = _session_ids(session_ids)
    if ids is None:
        return _df(store.sql_arrow(f"SELECT {_D1_SELECT} FROM messages ORDER BY seq"))
    return _df(store.sql_arrow(f"SELECT {_D1_SELECT} FROM messages ORDER BY seq", session_ids=ids))


def rows_df(rows: list[dict], columns: list[str]):
    """A DataFrame of plain rows (dicts) with these columns, in this order (the tables of
    :mod:`sessionkit.prototyping`: comparisons and replays)."""
    return _pandas().DataFrame([{c: row.get(c) for c in columns} for row in rows], columns=list(columns))


def to_pandas(session):
    """One row per message of ``session`` in write order, with the columns of the ``messages``
    view (docs/analysis.md)."""
    return messages_df(session.store, [session.session_id])


def runs_df(store):
    """The ``runs`` view (one row per run, by session then start order) as a DataFrame."""
    _pandas()
    return _df(store.to_arrow("runs"))


def events_df(store, session_ids=None):
    """The ``events`` view (of ``session_ids``, default all) by session then ``seq``, as a DataFrame."""
    _pandas()
    ids = _session_ids(session_ids)
    if ids is None:
        return _df(store.to_arrow("events"))
    return _df(store.sql_arrow("SELECT * FROM events ORDER BY session_id, seq", session_ids=ids))


#: Columns of a view a read through the Python API does not give (the run's number in its session).
_NOT_READ = {"runs": ("run_number",), "labels": ("seq",)}


def _schema(pa, name: str, options: dict):
    """The Arrow schema of a table read through the Python API: the view's columns
    (``VIEW_COLUMNS``, the one list of them), the messages' ``seq`` and ``metadata`` only
    with ``extra`` or ``full_json`` (which adds ``message``, the JSON of each)."""
    kinds = {
        "text": pa.string(),
        "int": pa.int64(),
        "bool": pa.bool_(),
        "float": pa.float64(),
        "time": pa.timestamp("ms", tz="UTC"),
        "texts": pa.list_(pa.string()),
        "floats": pa.list_(pa.float32()),
    }
    columns = [c for c in VIEW_COLUMNS[name] if c[0] not in _NOT_READ.get(name, ())]
    if name == "messages":
        if not (options.get("extra") or options.get("full_json")):
            columns = [c for c in columns if c[0] in D1_COLUMNS]
        if options.get("full_json"):
            columns.append(("message", "text"))
    return pa.schema([(col, kinds[kind]) for col, kind in columns])


def arrow_table(data: StoreData, name: str, **options):
    """One table of a :class:`StoreData` read as a ``pyarrow.Table`` with a fixed schema."""
    pa = _pyarrow()
    cols = data.table(name, **options)
    schema = _schema(pa, name, options)
    arrays = []
    for field in schema:
        values = cols[field.name]
        if pa.types.is_timestamp(field.type):
            # times are ISO 8601 with milliseconds, or microseconds (spans of OpenTelemetry
            # traces): read at microseconds, then cut to the column's milliseconds
            micro = pa.timestamp("us", tz=field.type.tz)
            arrays.append(pa.array(values, type=pa.string()).cast(micro).cast(field.type, safe=False))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def sql(store, query: str, params: Any = None, *, files: bool = False, timeout: float | None = None):
    """Run DuckDB SQL over the ``messages``, ``sessions``, ``compactions``, ``runs`` and
    ``events`` views of ``store`` and return a pandas DataFrame.

    ``params`` (a list or dict) binds ``?`` / ``$name`` placeholders. An SQL error,
    a statement other than one SELECT, or a query reaching beyond the views (a file,
    a table of the store, a catalog function...) raises ``ValueError`` naming it;
    ``files=True`` lets the query read local files too (see the module notes);
    ``timeout`` (seconds) stops it with ``sessionkit.errors.QueryTimeout``.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    _pandas()
    return _df(store.sql_arrow(query, params, files=files, timeout=timeout))
