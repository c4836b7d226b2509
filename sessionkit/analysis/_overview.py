"""The store's overview in figures, from SQL over the analysis views (docs/analysis.md).

:func:`overview_data` is the one computation behind the viewer's ``#/overview`` page
(``GET /api/overview``, and the bundle's data) and the ``sk.plot`` overview plots: each
figure is one ``store.sql_arrow`` query over ``sessions``, ``messages``, ``runs``,
``turns``, ``tool_calls`` and ``labels``, so what the page draws is what a query says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["OVERVIEW_SQL", "overview_data"]

#: Each figure of the overview and the query that computes it (rows as plain dicts).
OVERVIEW_SQL: dict[str, str] = {
    # sessions by the day of their first message; messages by the day they were written
    "sessions_by_day": (
        "SELECT strftime(created_at, '%Y-%m-%d') AS day, count(*) AS sessions FROM sessions"
        " WHERE created_at IS NOT NULL GROUP BY day ORDER BY day"
    ),
    "messages_by_day": (
        "SELECT strftime(created_at, '%Y-%m-%d') AS day, count(*) AS messages FROM messages"
        " WHERE created_at IS NOT NULL GROUP BY day ORDER BY day"
    ),
    # tokens and cost of the agent runs by model (cost: NULL when no run of the model is priced)
    "models": (
        "SELECT model, count(*) AS runs, coalesce(sum(tokens_in), 0)::BIGINT AS tokens_in,"
        " coalesce(sum(tokens_out), 0)::BIGINT AS tokens_out, sum(cost_usd)::DOUBLE AS cost_usd,"
        " count(*) FILTER (WHERE cost_usd IS NULL) AS unpriced"
        " FROM runs GROUP BY model ORDER BY runs DESC, model NULLS LAST"
    ),
    # p50 and p95 of a turn's latency (its run, from start to end)
    "latency": (
        "SELECT 'turn' AS what, count(latency_s) AS n, quantile_cont(latency_s, 0.5) AS p50,"
        " quantile_cont(latency_s, 0.95) AS p95 FROM turns"
    ),
    # per tool: its calls, those answered (a result), the errors among them, their rate, and the
    # p50 and p95 of its latency; then the same over every call (all_tools = 1), which gives the
    # tool calls' latency and their total (the view is computed once for both)
    "tools": (
        "SELECT tool_name, count(*) AS calls, count(is_error) AS answered,"
        " count(*) FILTER (WHERE is_error) AS errors,"
        " CASE WHEN count(is_error) > 0 THEN (count(*) FILTER (WHERE is_error)) / count(is_error) END AS error_rate,"
        " count(latency_s) AS timed, quantile_cont(latency_s, 0.5) AS p50, quantile_cont(latency_s, 0.95) AS p95,"
        " grouping(tool_name) AS all_tools"
        " FROM tool_calls GROUP BY GROUPING SETS ((tool_name), ()) ORDER BY all_tools, calls DESC, tool_name"
    ),
    # labels by tag and by who made them (human, code, llm); ratings by value
    "tags": (
        "SELECT tag, source, count(*) AS labels FROM labels GROUP BY tag, source ORDER BY labels DESC, tag, source"
    ),
    "ratings": (
        "SELECT rating, count(*) AS labels FROM labels WHERE rating IS NOT NULL GROUP BY rating ORDER BY rating"
    ),
    "totals": (
        "SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM messages) AS messages,"
        " (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM labels) AS labels"
    ),
}


def overview_data(store: Any, session_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """The overview's figures of ``store`` (or of ``session_ids`` alone), each the rows of its
    query in :data:`OVERVIEW_SQL` as plain dicts (``totals``: one dict), but for the tools
    query's row over every call, which gives ``latency`` its ``tool`` row and ``totals`` its
    ``tool_calls``. JSON-ready: times are days as ``YYYY-MM-DD`` text, numbers are ints or
    floats, unknown ones ``None``."""
    ids = None if session_ids is None else list(dict.fromkeys(session_ids))
    out: dict[str, Any] = {}
    for name, query in OVERVIEW_SQL.items():
        rows = store.sql_arrow(query, session_ids=ids).to_pylist()
        out[name] = rows[0] if name == "totals" else rows
    every = [r for r in out["tools"] if r.pop("all_tools")]
    out["tools"] = [r for r in out["tools"] if r not in every]
    (total,) = every  # GROUPING SETS' () row: there is one, with no call too
    out["latency"].append({"what": "tool", "n": total["timed"], "p50": total["p50"], "p95": total["p95"]})
    out["totals"]["tool_calls"] = total["calls"]
    return out
