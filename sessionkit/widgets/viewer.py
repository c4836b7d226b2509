"""The store viewer's data and page (docs/viewer.md): a whole store in one web page.

``sessionkit view STORE`` serves it (:mod:`sessionkit.server`, over HTTP on 127.0.0.1);
``sessionkit view STORE --bundle DIR`` writes it as a static site with :func:`write_bundle`.
Both run the same front end: ``static/viewer.js`` for the sessions table, the search and
the session page, which mounts the notebook views' own modules (``branch_tree``,
``transcript``, ``run_view``, joined by :mod:`._modules` as for the notebook) with a
stand-in model (``skLocalModel`` in ``common.js``): one code base for the notebook and the viewer.

Everything here reads through the store's public API: the sessions table is one
``store.sql_arrow`` query over the ``sessions``, ``runs`` and ``messages`` views, sorted,
filtered and paged in SQL (LIMIT/OFFSET), so a store of 100,000 sessions opens with one
page of rows; search is ``store.search`` (its ranking and snippets), and a bundle's search
answers the same from an index written with the store's tokenizer (:mod:`._bundle_search`,
``static/search.js``).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import html
import json
import math
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import SessionNotFound, UsageError
from ..messages import estimate_tokens
from . import _bundle_search, _modules
from ._payloads import (
    BundleSession,
    BundleTable,
    ColumnSpec,
    MessageView,
    PathPair,
    SearchHitView,
    SessionPageState,
    SessionsPage,
    SimilarSessions,
    TimelinePayload,
)
from ._queue import answer as queue_answer
from ._queue import queues_list
from ._source import labels_json, load_messages, message_view, path_entries, tree_data, tree_json
from ._timeline import session_timeline as _session_timeline

if TYPE_CHECKING:
    from ..store import Session, Store

__all__ = [
    "SORT_COLUMNS",
    "PAGE_SIZE",
    "ASSETS",
    "asset",
    "modules_script",
    "sessions_page",
    "parse_column",
    "read_columns",
    "check_columns",
    "search_hits",
    "session_state",
    "path_state",
    "message_views",
    "run_events",
    "session_timeline",
    "similar_sessions",
    "page_html",
    "write_bundle",
    "queue_answer",
    "queues_list",
    "overview",
]

STATIC = _modules.STATIC
#: The files the page loads besides its data: every one is served (or copied) as is.
ASSETS = ("common.js", "timeline.js", "search.js", "overview.js", "viewer.js", "sessionkit.css", "viewer.css")
#: The views the session page mounts, by the name of their module in ``static/``.
_VIEW_MODULES = ("branch_tree", "transcript", "run_view", "queue_view")
#: Rows of the sessions table per page, unless asked otherwise (at most 500).
PAGE_SIZE = 50
_MAX_PAGE = 500
_MAX_HITS = 1001  # (viewer.js shows up to 1000 and asks for one more, to know whether there are more)

#: What the sessions table sorts by: the column name the page uses -> its SQL expression.
SORT_COLUMNS = {
    "session_id": "session_id",
    "messages": "messages",
    "branches": "branches",
    "tokens": "tokens",
    "cost": "cost",
    "last_activity": "last_activity",
    "source": "source",
    "labels": "labels",
    "runs": "runs",
}

# The importers keep a message's original fields under a metadata key of their own
# (docs/importing.md): the first root message's key says where a session came from.
_SOURCES = ("swe_agent", "openai", "openai_agents", "oasst", "hh", "inspect", "langgraph", "claude_code", "adk")


def asset(name: str) -> str:
    """The text of one of :data:`ASSETS` (``ValueError`` for any other name)."""
    if name not in ASSETS:
        raise ValueError(f"no viewer asset {name!r}; the assets are {', '.join(ASSETS)}")
    return (STATIC / name).read_text(encoding="utf-8")


def modules_script() -> str:
    """A classic script setting ``window.SK_MODULES``: each view's ES module (``common.js``
    prepended, as the notebook gets it) as a string, imported from a Blob URL by the page.
    A string and not a file of its own because browsers refuse module files from file://."""
    mods = {name: _modules.view_module(name) for name in _VIEW_MODULES}
    return "window.SK_MODULES = " + _script_json(mods) + ";\n"


def _script_json(value: object) -> str:
    """JSON that is also a safe JavaScript literal inside any page: ``<``, ``>``, ``&`` and the
    two line separators JavaScript reads as line ends are escaped (as in to_html pages)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _script_data(value: object) -> str:
    """``value`` as a JavaScript expression for a bundle's data files: ``JSON.parse("...")``
    and not an object literal, because in a literal a key ``"__proto__"`` (a session or
    message id like any other) sets the object's prototype instead of storing a value."""
    return _script_text(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def _script_text(text: str) -> str:
    """:func:`_script_data` of a value given as its JSON text."""
    return f"JSON.parse({_script_json(text)})"


@runtime_checkable
class _Interval(Protocol):
    """DuckDB's INTERVAL as Arrow reads it (``pyarrow.MonthDayNano``)."""

    months: int
    days: int
    nanoseconds: int


def _plain(value: object) -> object:
    """A value of the table as JSON has it: a column from SQL may give any of DuckDB's types
    (``sum()`` of integers is a DECIMAL or a HUGEINT, ``max(created) - min(created)`` an
    INTERVAL, a UUID, bytes, an infinite DOUBLE, a LIST or STRUCT of those)."""
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, _Interval):  # an INTERVAL read through Arrow
        if value.months:  # a month has no fixed length in seconds: the interval as ISO 8601 says it
            return f"P{value.months}M{value.days}DT{value.nanoseconds / 1e9:g}S"
        return value.days * 86400 + value.nanoseconds / 1e9
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and not math.isfinite(value):  # NaN from an empty aggregate, or inf
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):  # a STRUCT or a MAP
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _has_labels(store: Store) -> bool:
    """Whether the store has a ``labels`` view with ``session_id`` and ``tag`` columns."""
    try:
        names = set(store.sql_arrow("SELECT * FROM labels LIMIT 0").column_names)
    except Exception:  # no such view: this store (or this version) has no labels
        return False
    return {"session_id", "tag"} <= names


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
#: Built-in columns from the labels (``rating``, ``tag_<tag>``): the tags counted, most used first.
_MAX_TAG_COLUMNS = 8


def parse_column(spec: str) -> tuple[str, str]:
    """``"NAME=SQL"`` (what ``--column`` takes) as ``(name, sql)``; ``UsageError`` for anything else."""
    if not isinstance(spec, str) or "=" not in spec:
        raise UsageError(f"a column is NAME=SQL, got {spec!r}")
    name, sql = spec.split("=", 1)
    name, sql = name.strip(), sql.strip()
    if not _NAME.fullmatch(name):
        raise UsageError(f"column name {name!r}: use letters, digits and _ (up to 40, not starting with a digit)")
    if not sql:
        raise UsageError(f"column {name!r} has no SQL after '='")
    return name, sql


def read_columns(path: str | Path) -> list[tuple[str, str]]:
    """The ``NAME=SQL`` lines of a file (``--columns FILE``); blank lines and ``#`` comments skipped.
    A line ending in ``\\`` goes on at the next one. ``UsageError`` names the line of a bad one."""
    return [(name, sql) for name, sql, _ in read_column_lines(path)]


def read_column_lines(path: str | Path) -> list[tuple[str, str, int]]:
    """:func:`read_columns` with the line each column starts at."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the columns file {file}: {exc}") from None
    out: list[tuple[str, str, int]] = []
    pending, first = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + "\n"
            continue
        try:
            out.append((*parse_column(pending + line), first))
        except UsageError as exc:
            raise UsageError(f"{file}, line {first}: {exc}") from None
        pending = ""
    if pending:
        raise UsageError(f"{file}, line {first}: the last line ends in \\ and nothing follows")
    return out


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _strip_sql(sql: str) -> str:
    return sql.strip().rstrip(";").strip()


def _value_column(store: Store, name: str, sql: str) -> str:
    """The name of the value column of a column's query, checked by running it with no rows."""
    try:
        names = store.sql_arrow(f"SELECT * FROM ({sql}\n) AS _c LIMIT 0").column_names
    except ValueError as exc:
        try:  # the query on its own: the sandbox's own words for what it refuses
            store.sql_arrow(sql)
        except ValueError as alone:
            raise UsageError(f"column {name!r}: {alone}") from None
        raise UsageError(f"column {name!r}: {exc} (a column's SQL is one SELECT)") from None
    others = [c for c in names if c != "session_id"]
    if "session_id" not in names or len(others) != 1:
        raise UsageError(
            f"column {name!r}: its query must return session_id and one value, "
            f"got the columns {', '.join(names) or '(none)'}"
        )
    return others[0]


def check_columns(store: Store, specs: Iterable[tuple[str, str]] = (), *, builtin: bool = True) -> list[ColumnSpec]:
    """The sessions table's extra columns: ``specs`` (``(name, sql)``, each a query over the
    ``store.sql`` views returning ``session_id`` and one value), each checked against the
    store now (``UsageError`` naming the column: the sandbox's message for a refused query,
    a wrong shape, a name taken), then the built-in ones the table lacks (with a ``labels``
    view: ``rating``, the mean rating, when a label has one, and ``tag_<tag>``, each tag's
    label count, for the most used tags). Each column is ``{"name", "label", "sql", "value"}``."""
    taken = set(SORT_COLUMNS) | {"unpriced", "total"}
    out: list[ColumnSpec] = []
    for name, sql in specs:
        name, sql = parse_column(f"{name}={sql}")
        if name in taken:
            raise UsageError(f"column {name!r}: the table already has a column of that name")
        sql = _strip_sql(sql)
        out.append({"name": name, "label": name, "sql": sql, "value": _value_column(store, name, sql)})
        taken.add(name)
    if builtin and _has_labels(store):
        extra = []
        if store.sql_arrow("SELECT count(rating) AS n FROM labels").to_pylist()[0]["n"]:
            extra.append(
                ("rating", "mean rating", "SELECT session_id, avg(rating) AS r FROM labels GROUP BY session_id")
            )
        tags = store.sql_arrow(
            "SELECT CAST(tag AS VARCHAR) AS tag FROM labels WHERE tag IS NOT NULL GROUP BY 1 "
            f"ORDER BY count(*) DESC, 1 LIMIT {_MAX_TAG_COLUMNS}"
        ).to_pylist()
        for row in tags:
            tag = row["tag"]
            key = "tag_" + re.sub(r"[^A-Za-z0-9_]", "_", tag)[:36]
            literal = "'" + tag.replace("'", "''") + "'"
            extra.append(
                (
                    key,
                    "#" + tag,
                    "SELECT session_id, count(*) AS n FROM labels "
                    f"WHERE CAST(tag AS VARCHAR) = {literal} GROUP BY session_id",
                )
            )
        for name, label, sql in extra:
            if name not in taken:
                out.append({"name": name, "label": label, "sql": sql, "value": _value_column(store, name, sql)})
                taken.add(name)
    return out


def _column_sql(col: ColumnSpec, only: bool) -> str:
    return (
        f"SELECT session_id, any_value({_ident(col['value'])}) AS v FROM ({col['sql']}\n) AS _c "
        f"WHERE session_id IS NOT NULL{_ONLY if only else ''} GROUP BY session_id"
    )


_RUNS = (
    "r AS (SELECT session_id, sum(cost_usd) AS cost, count(*) - count(cost_usd) AS unpriced "
    "FROM runs GROUP BY session_id)"
)
_BASE = (
    "SELECT s.session_id, s.message_count AS messages, s.branch_points AS branches, s.tokens, r.cost, "
    "coalesce(r.unpriced, 0) AS unpriced, s.run_count AS runs, s.updated_at AS last_activity"
)
_ONLY = " AND session_id IN (SELECT unnest($ids))"


def _source_sql(only: bool) -> str:
    keys = ", ".join(f"'{k}'" for k in _SOURCES)
    return (
        f"SELECT session_id, min(list_filter(json_keys(metadata), lambda k: k IN ({keys}))[1]) AS source "
        f"FROM messages WHERE depth = 0 AND metadata IS NOT NULL{_ONLY if only else ''} GROUP BY session_id"
    )


def _labels_sql(only: bool) -> str:
    return (
        "SELECT session_id, string_agg(DISTINCT CAST(tag AS VARCHAR), ', ' ORDER BY CAST(tag AS VARCHAR)) "
        f"AS labels FROM labels WHERE tag IS NOT NULL{_ONLY if only else ''} GROUP BY session_id"
    )


def _full_sql(labels: bool, columns: Sequence[ColumnSpec] = ()) -> str:
    """Every column for every session, filtered: for a filter or a sort by source, labels or an
    extra column (whose values the filter matches too)."""
    extra = "".join(f", c{k} AS ({_column_sql(col, False)})" for k, col in enumerate(columns))
    picked = "".join(f", c{k}.v AS {_ident(col['name'])}" for k, col in enumerate(columns))
    joins = "".join(f" LEFT JOIN c{k} USING (session_id)" for k in range(len(columns)))
    matches = "".join(
        f"OR coalesce(CAST({_ident(col['name'])} AS VARCHAR), '') ILIKE $like ESCAPE '\\' " for col in columns
    )
    return (
        f"WITH {_RUNS}, src AS ({_source_sql(False)})"
        + (f", l AS ({_labels_sql(False)})" if labels else "")
        + extra
        + f", t AS ({_BASE}, coalesce(replace(src.source, '_', '-'), CASE WHEN s.run_count > 0 THEN 'agent' END) "
        "AS source, "
        + ("l.labels" if labels else "CAST(NULL AS VARCHAR) AS labels")
        + picked
        + " FROM sessions s LEFT JOIN r USING (session_id) LEFT JOIN src USING (session_id)"
        + (" LEFT JOIN l USING (session_id)" if labels else "")
        + joins
        + ") SELECT *, count(*) OVER () AS total FROM t WHERE session_id ILIKE $like ESCAPE '\\' "
        "OR coalesce(source, '') ILIKE $like ESCAPE '\\' OR coalesce(labels, '') ILIKE $like ESCAPE '\\' " + matches
    )


def _decorate(store: Store, rows: list[dict], labels: bool, columns: Sequence[ColumnSpec] = ()) -> None:
    """Fill in ``source``, ``labels`` and the extra columns for one page of rows, reading those
    sessions only."""
    ids = [r["session_id"] for r in rows]
    if not ids:
        return
    for col in columns:
        values = {r["session_id"]: r["v"] for r in store.sql_arrow(_column_sql(col, True), {"ids": ids}).to_pylist()}
        for row in rows:
            row[col["name"]] = values.get(row["session_id"])
    sources = {r["session_id"]: r["source"] for r in store.sql_arrow(_source_sql(True), {"ids": ids}).to_pylist()}
    named = {}
    if labels:
        named = {r["session_id"]: r["labels"] for r in store.sql_arrow(_labels_sql(True), {"ids": ids}).to_pylist()}
    for row in rows:
        source = sources.get(row["session_id"])
        row["source"] = source.replace("_", "-") if source else ("agent" if row["runs"] else None)
        row["labels"] = named.get(row["session_id"])


def sessions_page(
    store: Store,
    *,
    offset: int = 0,
    limit: int = PAGE_SIZE,
    sort: str = "last_activity",
    desc: bool = True,
    filter: str = "",
    columns: list[ColumnSpec] | None = None,
) -> SessionsPage:
    """One page of the sessions table: ``{"rows", "total", "offset", "limit", "sort", "desc",
    "labels", "columns"}``. Each row has ``session_id, messages, branches, tokens, cost,
    unpriced, runs, last_activity, source, labels`` and a value per extra column (``columns``,
    from :func:`check_columns`; ``"columns"`` lists their ``name`` and ``label``); ``total``
    counts the rows the filter keeps. ``filter`` keeps the sessions whose id, source, labels
    or an extra column's value contain it (case-insensitive).

    Without a filter, sorted by a column of the ``sessions`` view, the page is one top-N query
    over that view (as cheap as counting it) and source and labels are read for the page's
    sessions only; a filter or a sort by source or labels reads them for every session."""
    columns = list(columns or ())
    named = {col["name"] for col in columns}
    if sort not in SORT_COLUMNS and sort not in named:
        raise ValueError(f"cannot sort by {sort!r}; the columns are {', '.join([*SORT_COLUMNS, *named])}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset must be a whole number of 0 or more, got {offset!r}")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= _MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {_MAX_PAGE}, got {limit!r}")
    labels = _has_labels(store)
    order = f"{SORT_COLUMNS.get(sort) or _ident(sort)} {'DESC' if desc else 'ASC'} NULLS LAST, session_id"
    page = f"ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}"
    filt = str(filter or "")
    full = bool(filt) or sort in ("source", "labels") or sort in named
    if full:
        like = "%" + filt.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query, params = _full_sql(labels, columns) + page, {"like": like}
        count = f"SELECT count(*) AS n FROM ({_full_sql(labels, columns)})"
    else:
        query = f"WITH {_RUNS} {_BASE}, count(*) OVER () AS total FROM sessions s LEFT JOIN r USING (session_id) {page}"
        params, count = None, "SELECT count(*) AS n FROM sessions"
    rows = store.sql_arrow(query, params).to_pylist()
    if rows:
        total = rows[0]["total"]
    else:  # a page past the end holds no row to say how many there are
        total = store.sql_arrow(count, params).to_pylist()[0]["n"]
    for row in rows:
        del row["total"]
    if not full:
        _decorate(store, rows, labels, columns)
    return {
        "rows": [{k: _plain(v) for k, v in row.items()} for row in rows],
        "total": int(total),
        "offset": offset,
        "limit": limit,
        "sort": sort,
        "desc": desc,
        "labels": labels,
        "columns": [{"name": col["name"], "label": col["label"]} for col in columns],
    }


def search_hits(store: Store, query: str, *, limit: int = 50) -> list[SearchHitView]:
    """``store.search`` over the whole store, best first: ``{session_id, id, role, snippet, score}``."""
    limit = max(1, min(int(limit), _MAX_HITS))
    return [
        {"session_id": h.session_id, "id": h.id, "role": h.role, "snippet": h.snippet, "score": h.score}
        for h in store.search(str(query), limit=limit)
    ]


def _session(store: Store, session_id: str) -> Session:
    """The session of that id, if the store holds anything of it: messages, runs, or run
    events alone (a run log written without messages: the ``sessions`` view lists it, and
    its page shows an empty transcript beside its runs). ``SessionNotFound`` otherwise."""
    session = store.session(session_id)
    if len(session) == 0 and not store.runs(session_id) and not store.events(session_id):
        raise SessionNotFound(f"no session {session_id!r} in this store")
    return session


def session_state(store: Store, session_id: str) -> SessionPageState:
    """What the session page opens with: the BranchTree's tree (arrays, no text), the latest
    leaf, the session's runs (``run_id``, ``status``) and its labels by message id (as the
    notebook views get them: ``id, tag, rating, target, note, author``; badges in the tree
    and the transcript). ``SessionNotFound`` for no session."""
    session = _session(store, session_id)
    tree = tree_json(tree_data(session))
    return {
        "session_id": session_id,
        "tree": tree,
        "latest": tree["ids"][tree["latest"]] if tree["n"] and tree["latest"] is not None else None,
        "runs": [{"run_id": r.run_id, "status": r.status} for r in store.runs(session_id)],
        "labels": labels_json(session),
    }


def path_state(store: Store, session_id: str, leaf_id: str | None = None) -> PathPair:
    """The path to ``leaf_id`` (default: the latest leaf) as the Transcript gets it, in both
    modes: ``{"model": ..., "full": ...}`` (compaction applied, and every message marked)."""
    session = _session(store, session_id)
    return {
        "model": path_entries(session, leaf_id, compacted=True),
        "full": path_entries(session, leaf_id, compacted=False),
    }


def message_views(store: Store, session_id: str, ids: Iterable[str]) -> dict[str, MessageView]:
    """The messages ``ids`` condensed for display, as the notebook views get them (tool
    output as readable text, long texts cut); unknown ids are left out."""
    wanted = [i for i in ids if isinstance(i, str)][:_MAX_PAGE]
    msgs = load_messages(store.session(session_id), wanted)
    return {k: message_view(m, tokens=estimate_tokens(m)) for k, m in msgs.items()}


def run_events(store: Store, session_id: str) -> list[dict]:
    """The session's stored run events, oldest first: what a RunView replays."""
    return store.events(session_id)


def session_timeline(store: Store, session_id: str, events: list[dict] | None = None) -> TimelinePayload:
    """The timeline of the session's runs (:func:`sessionkit.widgets._timeline.timeline`): each
    run's model and tool calls with their times, tokens, cost and errors, and the message each
    produced. ``SessionNotFound`` for no session."""
    session = _session(store, session_id)
    return _session_timeline(session, store.events(session_id) if events is None else events)


#: Similar conversations a session's page lists.
SIMILAR = 5


def similar_sessions(
    store: Store, session_id: str, *, k: int = SIMILAR, session_ids: list[str] | None = None
) -> SimilarSessions:
    """The ``k`` sessions most like ``session_id`` (``store.similar(..., level="session")``,
    docs/analysis.md#find-similar) by the vectors of the model with the most of them:
    ``{"model", "sessions": [{"session_id", "score", "messages"}], "note"}``, ``note`` saying
    why the list is empty (no vectors in the store, none for this session). ``session_ids``:
    only those sessions (a bundle's). ``SessionNotFound`` for no session."""
    _session(store, session_id)
    models = store.sql_arrow(
        "SELECT model, count(*) AS n FROM embeddings GROUP BY model ORDER BY n DESC, model LIMIT 1"
    ).to_pylist()
    if not models:
        note = "No similar conversations: this store has no message vectors (store.embed makes them)."
        return {"model": None, "sessions": [], "note": note}
    model = models[0]["model"]
    try:
        hits = store.similar(store.session(session_id), level="session", k=k, model=model, session_ids=session_ids)
    except (ValueError, SessionNotFound):  # this session has no vector of the model (yet)
        note = f"No similar conversations: this session has no {model} vectors (store.embed makes them)."
        return {"model": model, "sessions": [], "note": note}
    return {
        "model": model,
        "sessions": [{"session_id": h.session_id, "score": h.score, "messages": h.messages} for h in hits],
        "note": None if hits else f"No other session has {model} vectors.",
    }


# -- the overview page (#/overview) ---------------------------------------------------------


def overview(store: Store, session_ids: list[str] | None = None) -> dict:
    """The overview page's figures (:func:`sessionkit.analysis.overview_data`: each the rows of
    one SQL query over the store's views), of ``session_ids`` alone when given (a bundle's)."""
    from ..analysis import overview_data

    return overview_data(store, session_ids)


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{csp}<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{prefix}sessionkit.css">
<link rel="stylesheet" href="{prefix}viewer.css">
</head><body>
<div id="sk-app" class="sk-app" data-mode="{mode}" data-config="{config}">
<noscript>The sessionkit viewer needs JavaScript.</noscript></div>
{scripts}
</body></html>
"""


def page_html(
    *, mode: str, title: str, prefix: str = "", scripts: Iterable[str] = (), config: dict | None = None
) -> str:
    """The viewer's page. ``mode`` is ``"served"`` (data from ``/api``) or ``"bundle"`` (data
    from the bundle's script files); ``prefix`` is where the assets are; ``scripts`` are the
    data scripts to load before ``viewer.js``. The page itself holds no data but ``config``."""
    if mode not in ("served", "bundle"):
        raise ValueError(f"mode must be 'served' or 'bundle', got {mode!r}")
    tags = [f'<script src="{html.escape(src, quote=True)}"></script>' for src in scripts]
    # (search.js: a bundle's search; the served page asks its server)
    own = ("common.js", "timeline.js", *(("search.js",) if mode == "bundle" else ()), "overview.js", "viewer.js")
    tags += [f'<script src="{prefix}{name}"></script>' for name in own]
    # Scripts from the page's own files and the views' Blob modules only: no inline script,
    # so no markup could ever run one; nothing from another host.
    csp = (
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'self' blob:; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'\">\n"
    )
    return _PAGE.format(
        csp=csp,
        title=html.escape(title),
        prefix=prefix,
        mode=mode,
        config=html.escape(json.dumps({"mode": mode, "title": title, **(config or {})}), quote=True),
        scripts="\n".join(tags),
    )


#: The file a bundle writes first in its folder: the files it wrote, one per line. It marks the
#: folder as a bundle (one ``force=True`` may replace) and names the only files a replacement removes.
MARKER = ".sessionkit-bundle"
_MARKER_HEAD = "sessionkit viewer bundle: the files below were written by `sessionkit view --bundle`"


def _earlier_bundle(out: Path, force: bool) -> list[Path]:
    """The files of an earlier bundle in ``out`` to remove before writing (``[]`` for a new or
    empty folder). ``UsageError`` for a folder holding anything else, or a bundle without ``force``."""
    if not out.exists():
        return []
    if not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder")
    if not any(out.iterdir()):
        return []
    marker = out / MARKER
    lines = marker.read_text(encoding="utf-8").splitlines() if marker.is_file() else []
    if not lines or lines[0] != _MARKER_HEAD:
        raise UsageError(
            f"{out} is not empty and not a sessionkit bundle (no {MARKER} file): choose a new or empty folder"
        )
    if not force:
        raise UsageError(
            f"{out} holds an earlier bundle: replace it with --force (force=True), or choose another folder"
        )
    root = out.resolve()
    files = []
    for line in lines[1:]:
        path = (out / line).resolve()
        # only plain files under the folder, as the marker names them: a line of another
        # program's (or an edited marker) never removes anything outside it
        if line and path.is_relative_to(root) and path.is_file() and not path.is_symlink():
            files.append(path)
    return files


def write_bundle(
    store: Store,
    folder: str | Path,
    *,
    session_ids: Iterable[str] | None = None,
    force: bool = False,
    columns: Iterable[tuple[str, str]] = (),
) -> Path:
    """Write the viewer as a static site in ``folder``: a new or empty folder, or with
    ``force=True`` the folder of an earlier bundle (its files replaced; files the bundle did
    not write are kept). Any other folder with files in it is refused (``UsageError``), and
    so is an earlier bundle without ``force``. The bundle writes ``.sessionkit-bundle``
    (the files it wrote), ``index.html``, the assets, and the data as script files that set globals (a browser
    refuses ``fetch`` of JSON from file://): ``data/sessions.js`` (the table,
    and the overview's figures), ``data/search/`` (the search index, :mod:`._bundle_search`: the page searches as
    ``store.search`` does, loading only the files a query needs) and one ``data/s<N>.js``
    per session (its tree, latest path, messages and run events). ``session_ids``: only those sessions
    (``SessionNotFound`` for one the store does not hold); default: every session.
    ``columns``: the table's extra ``(name, sql)`` columns (:func:`check_columns`, checked
    before anything is written). Opens from file:// with no server and no network. Returns the folder."""
    out = Path(folder)
    stale = _earlier_bundle(out, force)
    extra = check_columns(store, columns)
    wanted = None if session_ids is None else list(dict.fromkeys(session_ids))
    rows = sessions_page(store, limit=_MAX_PAGE, offset=0, columns=extra)["rows"]
    total = sessions_page(store, limit=1)["total"]
    offset = _MAX_PAGE
    while offset < total:
        rows += sessions_page(store, limit=_MAX_PAGE, offset=offset, columns=extra)["rows"]
        offset += _MAX_PAGE
    if wanted is not None:
        known = {r["session_id"] for r in rows}
        missing = [s for s in wanted if s not in known]
        if missing:
            raise SessionNotFound(f"no session {missing[0]!r} in this store")
        keep = set(wanted)
        rows = [r for r in rows if r["session_id"] in keep]
    for path in stale:
        path.unlink()
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    written = [f"data/s{k}.js" for k in range(len(rows))] + ["data/sessions.js"]
    written += [*ASSETS, "modules.js", "index.html"]
    # the marker first: a bundle cut short is still one --force may replace (the search
    # index's files, known once written, are added to it after)
    (out / MARKER).write_text("\n".join([_MARKER_HEAD, *written]) + "\n", encoding="utf-8")
    files: dict[str, str] = {}
    bundled = [str(r["session_id"]) for r in rows]
    for k, sid in enumerate(bundled):
        name = f"s{k}.js"
        files[sid] = f"data/{name}"
        state = session_state(store, sid)
        session = store.session(sid)
        msgs = load_messages(session, state["tree"]["ids"])
        events = run_events(store, sid)
        payload: BundleSession = {
            **state,
            "paths": path_state(store, sid) if len(session) else None,
            "messages": {mid: message_view(m, tokens=estimate_tokens(m)) for mid, m in msgs.items()},
            "events": events,
            "timeline": session_timeline(store, sid, events),
            "similar": similar_sessions(store, sid, session_ids=bundled),
        }
        (data / name).write_text(f"skBundleSession({_script_json(sid)}, {_script_data(payload)});\n", encoding="utf-8")
    table: BundleTable = {
        "rows": rows,
        "files": files,
        "labels": _has_labels(store),
        "columns": [{"name": col["name"], "label": col["label"]} for col in extra],
        "overview": overview(store, None if wanted is None else bundled),
    }
    (data / "sessions.js").write_text(
        f"window.SK_BUNDLE = {_script_data(table)};\n",
        encoding="utf-8",
    )
    searched = _bundle_search.write_index(
        data / "search", _bundle_texts(store, list(files)), _script_text, candidates=store.settings.search_candidates
    )
    for name in ASSETS:
        (out / name).write_text(asset(name), encoding="utf-8")
    (out / "modules.js").write_text(modules_script(), encoding="utf-8")
    title = f"sessionkit viewer · {len(rows):,} sessions"
    scripts = ["modules.js", "data/sessions.js"]
    (out / "index.html").write_text(page_html(mode="bundle", title=title, scripts=scripts), encoding="utf-8")
    with (out / MARKER).open("a", encoding="utf-8") as marker:
        marker.write("".join(f"data/search/{name}\n" for name in searched))
    return out


def _bundle_texts(store: Store, session_ids: list[str]) -> Iterator[dict[str, object]]:
    """The messages of ``session_ids`` in the store's order (``seq``), read a batch at a time:
    what the bundle's search index holds (``text``: the text parts, as ``store.search`` reads them)."""
    last = -1
    while session_ids:
        batch = store.sql_arrow(
            "SELECT session_id, id, role, text, seq FROM messages WHERE seq > $last "
            "AND session_id IN (SELECT unnest($ids)) ORDER BY seq LIMIT 2000",
            {"last": last, "ids": session_ids},
        ).to_pylist()
        if not batch:
            return
        yield from batch
        last = batch[-1]["seq"]
