"""The sandbox of ``store.sql``: which queries may run.

reads the five views, its own CTEs, constants and a few table functions (``range``,
``generate_series``, ``unnest``), nothing else: no file, no table of the store or the
cache, no catalog function (``duckdb_tables()``...), no setting. DuckDB enforces the same
on the cache's connection (no file system access, no extension loaded, its configuration
locked); on a DuckDB store, whose own connection cannot be locked down, the parse tree
alone decides. ``files=True`` lets a query read local files too (CSV, Parquet, JSON...):
it runs on a DuckDB connection of its own that holds the views it names (read in one
snapshot) and nothing else of the store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .views import TREE_COLUMNS, VIEWS, duckdb_module

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "check_query",
    "CheckedQuery",
    "sandbox_refusal",
    "names_used",
    "uses_tree_columns",
    "TABLE_FUNCTIONS",
    "FILE_FUNCTIONS",
]


@dataclass(frozen=True)
class CheckedQuery:
    """One SELECT that stays in the sandbox (what :func:`check_query` answers): its text and
    the names it uses (:func:`names_used`), both from one parse of it."""

    text: str
    names: frozenset[str]


def check_query(con: duckdb.DuckDBPyConnection, query: str, *, files: bool = False) -> CheckedQuery:
    """Refuse anything but one SELECT that stays in the sandbox (``ValueError`` naming what
    was given or refused; see :func:`sandbox_refusal`); the query with the names it uses
    (see :func:`names_used`), read from the same parse tree."""
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
    tree = _parse_tree(con, query)
    refused = _refusal(tree, files)
    if refused:
        raise ValueError(f"store.sql: {refused}")
    assert isinstance(tree, dict)  # (a tree that is not one was refused above)
    return CheckedQuery(query, frozenset(_names(tree)))


def _parse_tree(con: duckdb.DuckDBPyConnection, query: str) -> dict[str, Any] | str:
    """DuckDB's own parse tree of ``query`` (``json_serialize_sql``), or why there is none."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchall()[0][0])
    except Exception as exc:  # (a SELECT the serializer cannot show cannot be checked)
        return str(exc)
    if not isinstance(tree, dict) or tree.get("error"):
        return str(tree.get("error_message", "")) if isinstance(tree, dict) else ""
    return tree


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


def sandbox_refusal(con: duckdb.DuckDBPyConnection, query: str, *, files: bool = False) -> str:
    """What ``query`` (one SELECT) reaches outside the sandbox, or ``""``.

    Read from DuckDB's own parse tree (``json_serialize_sql``), with CTE scoping: a name
    a query reads must be a view of :data:`VIEWS` or a CTE defined around it; a table
    function must be one of :data:`TABLE_FUNCTIONS` (and, with ``files``, of
    :data:`FILE_FUNCTIONS`, where a quoted file name also reads; ``query_table`` of views
    named as plain strings); no catalog or
    settings function, no DESCRIBE/SHOW/SUMMARIZE, no qualified name. Hand-written
    because DuckDB has no per-connection permission on its catalog; the cache's
    connection is also locked down by DuckDB's own settings (:func:`new_connection`)."""
    return _refusal(_parse_tree(con, query), files)


def _refusal(tree: dict[str, Any] | str, files: bool) -> str:
    """:func:`sandbox_refusal` of a parse tree (or of the reason there is none)."""
    if isinstance(tree, str):
        return f"this query cannot be checked, refused: {tree}"
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


def _sandbox_walk(node: Any, scope: frozenset[str], refused: list[str], files: bool) -> None:
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


def names_used(con: duckdb.DuckDBPyConnection, query: str) -> set[str]:
    """The column and function names ``query`` uses, from DuckDB's own parse tree (names
    in strings or comments do not count); ``"*"`` stands for everything: a star, a
    view named as a column (a whole row), or a query the parser cannot show; ``"@name"``
    is a table or view it reads (``"@*"``: any, for a query the parser cannot show). A call
    that advances a sequence (``nextval``, ``setval``) -> ``ValueError``: it would write
    the store."""
    tree = _parse_tree(con, query)
    if isinstance(tree, str):  # when in doubt, everything
        return {"*", "@*"}
    return _names(tree)


def _names(tree: dict[str, Any]) -> set[str]:
    """:func:`names_used` of a parse tree."""
    found: set[str] = set()
    _walk(tree, found)
    if found & _WRITING_FUNCTIONS:
        name = sorted(found & _WRITING_FUNCTIONS)[0]
        raise ValueError(f"store.sql runs read-only queries; {name}() advances a sequence of the store, refused")
    if found & set(VIEWS):
        found.add("*")
    return found


def uses_tree_columns(con: duckdb.DuckDBPyConnection, query: str) -> bool:
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
