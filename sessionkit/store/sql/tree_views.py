"""The tree-aware views of ``store.sql``: ``paths``, ``turns`` and ``tool_calls``.

Each is DuckDB SQL over the same source tables as the other views (``{messages}``,
``{events}``: see :mod:`sessionkit.store.sql.views`), computed from the stored tree
in SQL, never by walking it in Python (their columns: docs/analysis.md):

* every leaf's path is one recursive walk up the parent links (``_tv_path``: a row
  per (leaf, message on its path), so the work is the sum of the leaves' depths), for
  ``paths`` and ``tool_calls``; ``turns`` reads no path (see ``_TURNS``);
* the *way down* from a message is the path from it to the newest leaf below it
  (the newest message of its subtree, by write order: a child is always written
  after its parent, so that message is a leaf); ``_tv_below`` names that leaf, and a
  window over each leaf's path gives every message the user message above it and
  the next user message below it on that path.

A view is defined on a connection only when a query names it (``_analysis._install``),
so a query that does not use these views pays nothing for them. ``turns`` and
``paths`` read the stored ``metadata`` (costs, run ids); ``tool_calls`` also parses the
stored message JSON (``content``) of the messages that hold tool parts: an analysis
cache reads those wide columns only for queries naming these views
(:func:`needs_columns`).
"""

from __future__ import annotations

from .. import _schema

__all__ = ["TREE_VIEWS", "TREE_VIEW_COLUMNS", "TREE_VIEW_ORDER", "tree_view_sql", "needs_columns"]

#: The views of this module.
TREE_VIEWS = ("paths", "turns", "tool_calls")

#: Their columns, in order, with their kind (as ``_analysis.VIEW_COLUMNS``).
TREE_VIEW_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "paths": (
        ("session_id", "text"),
        ("leaf_id", "text"),
        ("depth", "int"),
        ("message_count", "int"),
        ("tokens", "int"),
        ("cost_usd", "float"),
        ("is_latest", "bool"),
        ("regenerations", "int"),
        ("branch_points", "int"),
    ),
    "turns": (
        ("session_id", "text"),
        ("user_id", "text"),
        ("reply_id", "text"),
        ("message_count", "int"),
        ("tool_calls", "int"),
        ("tool_names", "texts"),
        ("tokens", "int"),
        ("cost_usd", "float"),
        ("run_id", "text"),
        ("latency_s", "float"),
        ("regenerated", "bool"),
    ),
    "tool_calls": (
        ("session_id", "text"),
        ("call_message_id", "text"),
        ("result_message_id", "text"),
        ("tool_call_id", "text"),
        ("tool_name", "text"),
        ("arguments", "text"),
        ("result", "text"),
        ("is_error", "bool"),
        ("latency_s", "float"),
        ("run_id", "text"),
        ("next_user_id", "text"),
    ),
}

#: The ORDER BY of each view in ``store.to_arrow``.
TREE_VIEW_ORDER = {
    "paths": "session_id, leaf_id",
    "turns": "session_id, user_id",
    "tool_calls": "session_id, call_message_id, tool_call_id",
}

_META_COST = (
    "CASE WHEN json_type(m.metadata, '$.usage.cost_usd') IN ('BIGINT', 'UBIGINT', 'DOUBLE')"
    " THEN CAST(json_extract(m.metadata, '$.usage.cost_usd') AS DOUBLE) END"
)
_META_RUN = (
    "CASE WHEN json_type(m.metadata, '$.run_id') = 'VARCHAR' THEN json_extract_string(m.metadata, '$.run_id') END"
)

# Every message with its parent's seq, its tool count and the facts read from its
# metadata; the number of children of each parent; each leaf's path (recursive, up);
# the newest leaf below each message; and, on each leaf's path, the user message at or
# above each row (``udepth``) and the first user message strictly below it (``next_user_id``).
_BASE = f"""
    _tv_m AS MATERIALIZED (
        SELECT m.seq, m.session_id, m.id, m.depth::BIGINT AS depth, m.role, m.tokens::BIGINT AS tokens,
               coalesce(from_json(m.tool_names, '["VARCHAR"]'), []::VARCHAR[]) AS tools,
               {_META_COST} AS cost_usd, {_META_RUN} AS run_id, p.seq AS pseq
        FROM {{messages}} m LEFT JOIN {{messages}} p ON p.session_id = m.session_id AND p.id = m.parent_id
    ),
    _tv_kids AS MATERIALIZED (
        SELECT pseq, count(*)::BIGINT AS n, max(seq) AS newest FROM _tv_m WHERE pseq IS NOT NULL GROUP BY pseq
    ),
    _tv_ev AS (
        SELECT run_id, json_extract_string(data, '$.kind') AS kind,
               json_extract_string(data, '$.tool_call_id') AS call_id,
               TRY_CAST(json_extract_string(data, '$.ts') AS TIMESTAMPTZ) AS ts
        FROM {{events}} WHERE run_id IS NOT NULL
    )"""

# Each leaf's path (the rows of every root-to-leaf path: paths and tool_calls read them).
_PATH_CTES = """,
    _tv_up(leaf, seq, pseq) AS (
        SELECT m.seq, m.seq, m.pseq FROM _tv_m m WHERE NOT EXISTS (SELECT 1 FROM _tv_kids k WHERE k.pseq = m.seq)
        UNION ALL
        SELECT u.leaf, m.seq, m.pseq FROM _tv_up u JOIN _tv_m m ON m.seq = u.pseq
    ),
    _tv_path AS MATERIALIZED (SELECT leaf, seq FROM _tv_up),
    _tv_below AS MATERIALIZED (SELECT seq, max(leaf) AS leaf FROM _tv_path GROUP BY seq),
    _tv_on AS MATERIALIZED (
        SELECT p.leaf, m.*,
               max(CASE WHEN m.role = 'user' THEN m.depth END)
                   OVER (PARTITION BY p.leaf ORDER BY m.depth ROWS UNBOUNDED PRECEDING) AS udepth,
               first_value(CASE WHEN m.role = 'user' THEN m.id END IGNORE NULLS)
                   OVER (PARTITION BY p.leaf ORDER BY m.depth ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)
                   AS next_user_id
        FROM _tv_path p JOIN _tv_m m ON m.seq = p.seq
    )"""

_PATHS = """
    SELECT l.session_id, l.id AS leaf_id, l.depth, count(*)::BIGINT AS message_count,
           sum(m.tokens)::BIGINT AS tokens, sum(m.cost_usd)::DOUBLE AS cost_usd,
           l.seq = s.top AS is_latest,
           count(*) FILTER (WHERE sib.n >= 2)::BIGINT AS regenerations,
           count(*) FILTER (WHERE k.n >= 2)::BIGINT AS branch_points
    FROM _tv_path p
    JOIN _tv_m m ON m.seq = p.seq
    JOIN _tv_m l ON l.seq = p.leaf
    JOIN (SELECT session_id, max(seq) AS top FROM _tv_m GROUP BY session_id) s ON s.session_id = l.session_id
    LEFT JOIN _tv_kids sib ON sib.pseq = m.pseq
    LEFT JOIN _tv_kids k ON k.pseq = m.seq
    GROUP BY l.session_id, l.id, l.depth, l.seq, s.top"""

# turns reads no path: work in proportion to the tree, not to the sum of its leaves' depths.
# * _tv_climb walks up from every leaf and stops where a sibling is newer than the leaf (that
#   sibling's subtree holds a newer message, so the leaf is not the newest below the parent);
#   the newest leaf below a message is never stopped, so it is the largest leaf reaching it
#   (_tv_down). A conversation regenerated at every message climbs once per message.
# * _tv_ua walks down from the roots once: each message with the user message nearest above it.
# * A turn's stretch: the messages below its user message, before the next user message, on
#   the way down (the same newest leaf below them as below the user message).
_TURNS = """,
    _tv_climb(leaf, seq, pseq) AS (
        SELECT m.seq, m.seq, m.pseq FROM _tv_m m WHERE NOT EXISTS (SELECT 1 FROM _tv_kids k WHERE k.pseq = m.seq)
        UNION ALL
        SELECT c.leaf, p.seq, p.pseq FROM _tv_climb c JOIN _tv_kids k ON k.pseq = c.pseq AND k.newest <= c.leaf
        JOIN _tv_m p ON p.seq = c.pseq
    ),
    _tv_down AS MATERIALIZED (SELECT seq, max(leaf) AS leaf FROM _tv_climb GROUP BY seq),
    _tv_ua(seq, role, ua) AS (
        SELECT m.seq, m.role, NULL::BIGINT FROM _tv_m m WHERE m.pseq IS NULL
        UNION ALL
        SELECT c.seq, c.role, CASE WHEN a.role = 'user' THEN a.seq ELSE a.ua END
        FROM _tv_ua a JOIN _tv_m c ON c.pseq = a.seq
    ),
    _tv_stretch AS (
        SELECT u.seq AS useq, o.id, o.role, o.depth, o.tools, o.tokens, o.cost_usd
        FROM _tv_m u JOIN _tv_down du ON du.seq = u.seq
        JOIN _tv_ua a ON a.ua = u.seq AND a.role <> 'user'
        JOIN _tv_down d ON d.seq = a.seq AND d.leaf = du.leaf
        JOIN _tv_m o ON o.seq = a.seq
        WHERE u.role = 'user'
    ),
    _tv_agg AS (
        SELECT useq, count(*)::BIGINT AS n, arg_max(id, depth) FILTER (WHERE role = 'assistant') AS reply_id,
               sum(len(tools)) FILTER (WHERE role <> 'tool')::BIGINT AS tool_calls,
               flatten(list(tools ORDER BY depth) FILTER (WHERE role <> 'tool')) AS tool_names,
               sum(tokens)::BIGINT AS tokens, sum(cost_usd)::DOUBLE AS cost_usd
        FROM _tv_stretch GROUP BY useq
    ),
    _tv_lat AS (
        SELECT run_id, epoch(max(ts) FILTER (WHERE kind = 'run.end') - min(ts) FILTER (WHERE kind = 'run.start'))
                   ::DOUBLE AS latency_s
        FROM _tv_ev GROUP BY run_id
    )
    SELECT u.session_id, u.id AS user_id, a.reply_id, coalesce(a.n, 0)::BIGINT AS message_count,
           coalesce(a.tool_calls, 0)::BIGINT AS tool_calls, coalesce(a.tool_names, []::VARCHAR[]) AS tool_names,
           (u.tokens + coalesce(a.tokens, 0))::BIGINT AS tokens, a.cost_usd, u.run_id, lat.latency_s,
           coalesce(k.n, 0) >= 2 AS regenerated
    FROM _tv_m u
    LEFT JOIN _tv_agg a ON a.useq = u.seq
    LEFT JOIN _tv_kids k ON k.pseq = u.seq
    LEFT JOIN _tv_lat lat ON lat.run_id = u.run_id
    WHERE u.role = 'user'"""

_TOOL_CALLS = """,
    _tv_parts AS MATERIALIZED (
        SELECT seq, unnest(parts) AS part, unnest(range(len(parts))) AS idx
        FROM (SELECT seq, from_json(json_extract(content, '$.parts'), '["JSON"]') AS parts
              FROM ({whole}) WHERE json_valid(content))
    ),
    _tv_tp AS MATERIALIZED (
        SELECT m.seq, m.session_id, m.id, m.role, m.run_id, x.idx,
               json_extract_string(x.part, '$.toolCallId') AS call_id,
               CASE WHEN json_extract_string(x.part, '$.type') LIKE 'tool-%'
                    THEN substr(json_extract_string(x.part, '$.type'), 6)
                    WHEN json_type(x.part, '$.toolName') = 'VARCHAR'
                    THEN json_extract_string(x.part, '$.toolName') END AS name,
               json_extract_string(x.part, '$.state') AS state,
               CAST(json_extract(x.part, '$.input') AS VARCHAR) AS arguments,
               CASE WHEN json_type(x.part, '$.output') = 'VARCHAR' THEN json_extract_string(x.part, '$.output')
                    ELSE CAST(json_extract(x.part, '$.output') AS VARCHAR) END AS output,
               CASE WHEN json_type(x.part, '$.errorText') = 'VARCHAR'
                    THEN json_extract_string(x.part, '$.errorText') END AS error_text
        FROM _tv_parts x JOIN _tv_m m ON m.seq = x.seq
        WHERE (json_extract_string(x.part, '$.type') LIKE 'tool-%'
               OR json_extract_string(x.part, '$.type') = 'dynamic-tool')
          AND json_type(x.part, '$.toolCallId') = 'VARCHAR'
    ),
    _tv_calls AS MATERIALIZED (
        SELECT * FROM _tv_tp WHERE role <> 'tool'
    ),
    _tv_later AS (
        SELECT c.seq, c.idx, min(struct_pack(seq := r.seq, idx := r.idx)) AS first
        FROM _tv_calls c
        JOIN _tv_tp r ON r.session_id = c.session_id AND r.call_id = c.call_id AND r.seq > c.seq
             AND r.state IN ('output-available', 'output-error')
        JOIN _tv_below b ON b.seq = r.seq
        JOIN _tv_path p ON p.leaf = b.leaf AND p.seq = c.seq
        WHERE c.state IS DISTINCT FROM 'output-available' AND c.state IS DISTINCT FROM 'output-error'
        GROUP BY c.seq, c.idx
    ),
    _tv_where AS (
        SELECT c.*,
               CASE WHEN c.state IN ('output-available', 'output-error') THEN c.seq ELSE l.first.seq END AS rseq,
               CASE WHEN c.state IN ('output-available', 'output-error') THEN c.idx ELSE l.first.idx END AS ridx
        FROM _tv_calls c LEFT JOIN _tv_later l ON l.seq = c.seq AND l.idx = c.idx
    ),
    _tv_pair AS (
        SELECT c.*, r.id AS rid, r.state AS rstate, r.output AS routput, r.error_text AS rerror
        FROM _tv_where c LEFT JOIN _tv_tp r ON r.seq = c.rseq AND r.idx = c.ridx
    ),
    _tv_tlat AS (
        SELECT run_id, call_id,
               epoch(min(ts) FILTER (WHERE kind = 'tool.result') - min(ts) FILTER (WHERE kind = 'tool.call'))
                   ::DOUBLE AS latency_s
        FROM _tv_ev WHERE call_id IS NOT NULL GROUP BY run_id, call_id
    )
    SELECT c.session_id, c.id AS call_message_id, c.rid AS result_message_id, c.call_id AS tool_call_id,
           c.name AS tool_name, c.arguments,
           CASE WHEN c.rstate = 'output-error' THEN c.rerror ELSE c.routput END AS result,
           CASE WHEN c.rstate IS NULL THEN NULL
                WHEN c.rstate = 'output-error' THEN true
                ELSE coalesce(regexp_matches(c.routput, '^\\s*(Error|ERROR|error)\\s*:'), false) END AS is_error,
           lat.latency_s, c.run_id, o.next_user_id
    FROM _tv_pair c
    LEFT JOIN _tv_tlat lat ON lat.run_id = c.run_id AND lat.call_id = c.call_id
    LEFT JOIN _tv_below b ON b.seq = c.rseq
    LEFT JOIN _tv_on o ON o.leaf = b.leaf AND o.seq = c.rseq"""


def tree_view_sql(tables: dict[str, str]) -> dict[str, str]:
    """The SELECT of each tree view over ``tables`` (``messages`` and ``events`` as SQL text)."""
    base = _BASE.format(messages=tables["messages"], events=tables["events"])
    head = f"WITH RECURSIVE {base}"
    return {
        "paths": head + _PATH_CTES + _PATHS,
        "turns": head + _TURNS,
        "tool_calls": head + _PATH_CTES + _TOOL_CALLS.format(whole=_whole_content(tables)),
    }


def _whole_content(tables: dict[str, str]) -> str:
    """The messages with tool parts, each with its whole stored JSON as ``content``. Over a
    store's own tables (``tables`` has ``chunks``), a message larger than a row holds
    continues in its chunk rows, joined here; an analysis copy holds ``content`` whole."""
    if "chunks" not in tables:
        return f"SELECT seq, content FROM {tables['messages']} WHERE tool_names IS NOT NULL"
    # (a DuckDB store's own tables: a row may have left its text out of its JSON)
    whole = _schema.DIALECTS["duckdb"].message_content.format(t="m")
    return (
        "SELECT m.seq, CASE WHEN m.chunks > 0 THEN m.content || coalesce((SELECT string_agg(k.data, '' ORDER BY k.n)"
        f" FROM {tables['chunks']} k WHERE k.seq = m.seq), '') ELSE {whole} END AS content"
        f" FROM {tables['messages']} m WHERE m.tool_names IS NOT NULL"
    )


def needs_columns(names: set[str]) -> set[str]:
    """The wide (lazily cached) message columns a query reading ``names`` needs for these
    views (``"@view"``: a view it reads; ``"@*"``: any)."""
    if "@*" in names or "@tool_calls" in names:
        return {"metadata", "content"}
    if "@experiments" in names:  # (an experiment's reply: its text, found by its run id)
        return {"metadata", "text"}
    if "@turns" in names or "@paths" in names:
        return {"metadata"}
    return set()
