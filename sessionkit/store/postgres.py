"""PostgreSQL engine: psycopg 3, a connection pool, LISTEN/NOTIFY.

The engine for one store shared by many processes and machines. Tables and their
meaning follow ``sqlite.py`` (``sessionkit_`` prefix, a schema-version row,
continuation rows, payloads by SHA-256 with references, cumulative path columns,
compactions, runs and events, internal records). What PostgreSQL changes:

* **Where.** ``postgresql://user@host/db`` opens the tables in the connection's
  current schema (normally ``public``); ``schema="name"`` or ``?schema=name`` in the
  URL puts them in a schema of their own (created when missing). ``store.path`` is
  the URL without its password (give the password in ``~/.pgpass`` or
  ``PGPASSWORD`` to reopen a store from ``store.path``).
* **Opening.** Creating the tables and migrating them run in one transaction
  under ``pg_advisory_xact_lock``, so any number of processes may open a new or
  old store at once; a store written by a newer schema raises ``SchemaVersionError``.
* **Write order.** ``seq`` is an identity column: a store-wide sequence. Appends
  to one session are serialized by a per-session advisory lock held to the end
  of the transaction, taken before the latest leaf is read, so two writers never
  pick the same parent and a session's ``seq`` order is its commit order.
  Idempotency is ``INSERT ... ON CONFLICT (session_id, id) DO NOTHING``.
* **Fast append.** A plain append (no out-of-row payload, one row) is one
  statement: a call of the PL/pgSQL function ``sessionkit_append`` (installed with
  the tables), which takes the session's lock, reads the latest leaf or the given
  parent and inserts with ``ON CONFLICT (session_id, id) DO NOTHING``, all in one
  round trip and one transaction.
* **Search.** The stems come from :mod:`sessionkit.store.search`, exactly as on
  SQLite, and reach PostgreSQL as ``tsvector``/``tsquery`` literals (lexemes and
  positions, no text search parser or dictionary involved), so stemming and word
  splitting are identical on every engine and no user text ever reaches
  ``to_tsquery``. The index table has a GIN index; hits are ranked with
  ``ts_rank_cd`` (normalized by document length) among the newest
  ``search_candidates`` matches. It is built on the first search and kept current
  by every write afterwards, by any process: each write transaction checks the
  flag under a shared advisory lock that the builder takes exclusively.
  PostgreSQL limits apply to extremely long messages: positions stop at 16,383
  (a phrase further in is not found), at most 256 positions are kept per word,
  and at most about 1 MB of distinct words is indexed per message.
* **Change feed.** Every write also sends a ``NOTIFY`` (inside the append's own
  transaction on the fast path, after the commit otherwise), only while some
  process listens; ``store.subscribe`` starts a listener thread that reports the
  writes of *other* processes and machines (each engine tags its notifications
  with an origin id and skips its own). Notifications sent while the listener is
  reconnecting are lost; re-read the session to catch up.
* **Several servers.** For the HTTP server's worker processes the engine also
  offers store-wide *holds* (session-level advisory locks on one connection kept
  for them, so a process that dies gives its holds back), signals between
  processes on the same channel, and a signal after every run-event append, so a
  server process streams events that another one's run writes.
* **Durability.** ``durability="normal"`` keeps the server's
  ``synchronous_commit`` (``on`` unless a DBA changed it: a returned append is on
  the server's disk); ``"full"`` sets ``synchronous_commit = on`` on every
  connection whatever the server default.
* **Text.** PostgreSQL text cannot hold the NUL character: a session id,
  message id or role containing ``"\\x00"`` raises ``InvalidMessage``. (Message
  content is stored as JSON, where NUL is escaped, so it round-trips.)

Options: ``schema``, ``pool_size`` (connections per store, default 8),
``connect_timeout`` (seconds, default 10), ``chunk_chars`` (continuation row size).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import threading
import time
import urllib.parse
import uuid

from .. import messages as _msg
from ..errors import InvalidMessage, MessageNotFound, SchemaVersionError, SessionKitError, missing
from . import search as _search
from ._core import Capabilities, ChangeEvent, Compaction, Engine, Node, RunRecord, SessionInfo

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise missing("postgres", "psycopg (with psycopg-pool)", _exc) from _exc

log = logging.getLogger("sessionkit")

__all__ = ["PostgresEngine", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2

#: Stored JSON longer than this (characters) continues in sessionkit_chunks rows.
DEFAULT_CHUNK_CHARS = 1 << 20

#: A NOTIFY payload must stay under 8000 bytes; longer event documents go in pieces.
_NOTE_BYTES = 7800
#: Events whose message JSON is longer than this are sent without it; listeners read it back.
_NOTE_MESSAGE_CHARS = 64 * 1024
#: A listener that has not renewed its row for this long no longer makes writers notify.
_LISTENER_TTL = "5 minutes"
_HEARTBEAT_SECONDS = 60.0

#: Path reads first fetch this many rows in one query; longer paths stream from a server-side cursor.
_FIRST_BATCH = 2048
_UNLIMITED = 1 << 62

# tsvector limits (PostgreSQL's MAXSTRLEN, MAXSTRPOS, MAXENTRYPOS, MAXNUMPOS)
_MAX_LEXEME_BYTES = 2000
_MAX_LEXEMES_BYTES = 1_000_000
_MAX_POSITION = 16383
_MAX_POSITIONS = 256

_TABLES = (
    "meta", "messages", "chunks", "blobs", "blob_refs", "compactions", "search", "runs", "events", "records",
    "listeners",
)

_NODE = "seq, id, parent_id, depth, bytes, tokens, path_bytes, path_tokens, created_at, role"
_NODE_M = ", ".join("m." + c.strip() for c in _NODE.split(","))

_RECORDS_TABLE = """CREATE TABLE {records} (
        session_id text NOT NULL,
        kind text NOT NULL,
        n bigint NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (session_id, kind, n)
    )"""

_DDL = [
    "CREATE TABLE {meta} (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE {messages} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id text NOT NULL,
        id text NOT NULL,
        parent_id text,
        depth integer NOT NULL,
        role text NOT NULL,
        created_at text NOT NULL,
        bytes bigint NOT NULL,
        tokens bigint NOT NULL,
        path_bytes bigint NOT NULL,
        path_tokens bigint NOT NULL,
        chunks integer NOT NULL DEFAULT 0,
        content text NOT NULL,
        CONSTRAINT sessionkit_messages_key UNIQUE (session_id, id)
    )""",
    "CREATE INDEX sessionkit_messages_children ON {messages} (session_id, parent_id)",
    "CREATE INDEX sessionkit_messages_order ON {messages} (session_id, seq)",
    """CREATE TABLE {chunks} (
        seq bigint NOT NULL,
        n integer NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (seq, n)
    )""",
    """CREATE TABLE {blobs} (
        sha256 text PRIMARY KEY,
        size bigint NOT NULL,
        data bytea NOT NULL
    )""",
    """CREATE TABLE {blob_refs} (
        seq bigint NOT NULL,
        sha256 text NOT NULL,
        PRIMARY KEY (seq, sha256)
    )""",
    "CREATE INDEX sessionkit_blob_refs_sha ON {blob_refs} (sha256)",
    """CREATE TABLE {compactions} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id text NOT NULL,
        id text NOT NULL,
        from_id text NOT NULL,
        to_id text NOT NULL,
        summary text NOT NULL,
        created_at text NOT NULL,
        tokens_before bigint NOT NULL,
        tokens_after bigint NOT NULL
    )""",
    "CREATE INDEX sessionkit_compactions_session ON {compactions} (session_id, seq)",
    """CREATE TABLE {search} (
        seq bigint PRIMARY KEY,
        session_id text NOT NULL,
        body tsvector NOT NULL
    )""",
    "CREATE INDEX sessionkit_search_body ON {search} USING gin (body)",
    "CREATE INDEX sessionkit_search_session ON {search} (session_id, seq)",
    """CREATE TABLE {runs} (
        run_id text PRIMARY KEY,
        session_id text NOT NULL,
        status text NOT NULL,
        input text,
        error text,
        started_at text NOT NULL,
        ended_at text,
        usage text,
        n integer NOT NULL
    )""",
    "CREATE INDEX sessionkit_runs_session ON {runs} (session_id, n)",
    """CREATE TABLE {events} (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        run_id text,
        data text NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    _RECORDS_TABLE,
    """CREATE TABLE {listeners} (
        origin text PRIMARY KEY,
        seen_at timestamptz NOT NULL DEFAULT now()
    )""",
]

# Upgrades from an older schema version to the next one: {from_version: [statements]}.
# (The append function below is installed again after every creation or migration.)
_MIGRATIONS: dict[int, list[str]] = {
    1: [_RECORDS_TABLE],  # 2: internal records kept beside a session (the HTTP server's tables)
}

_LISTENING = "EXISTS (SELECT 1 FROM {listeners} WHERE seen_at > now() - interval '%s')" % _LISTENER_TTL

# The recent window: nodes and their stored JSON from a start (``{start}``: the latest
# leaf, or an id) towards the root, in one statement.
_WINDOW = (
    "WITH RECURSIVE up AS ("
    " {start}"
    " UNION ALL"
    " SELECT " + _NODE_M + ", m.chunks, m.content, up.n + 1 FROM up JOIN {{messages}} m"
    "   ON m.session_id = %(sid)s AND m.id = up.parent_id WHERE up.n < %(limit)s"
    ") SELECT " + _NODE + ", CASE WHEN chunks > 0 THEN content || coalesce("
    "  (SELECT string_agg(c.data, '' ORDER BY c.n) FROM {{chunks}} c WHERE c.seq = up.seq), '')"
    " ELSE content END FROM up ORDER BY n"
)

_SQL = {
    "node": "SELECT " + _NODE + " FROM {messages} WHERE session_id = %s AND id = %s",
    "latest": "SELECT " + _NODE + " FROM {messages} WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
    "children": "SELECT " + _NODE + " FROM {messages} WHERE session_id = %s AND parent_id = %s ORDER BY seq",
    "nodes": "SELECT " + _NODE + " FROM {messages} WHERE session_id = %s ORDER BY seq",
    "ancestors": (
        "WITH RECURSIVE up AS ("
        " SELECT " + _NODE + ", 1 AS n FROM {messages} WHERE seq = %(seq)s"
        " UNION ALL"
        " SELECT " + _NODE_M + ", up.n + 1 FROM up JOIN {messages} m"
        "   ON m.session_id = %(sid)s AND m.id = up.parent_id WHERE up.n < %(limit)s"
        ") SELECT " + _NODE + " FROM up ORDER BY n"
    ),
    "window_latest": _WINDOW.format(start=(
        "(SELECT " + _NODE + ", chunks, content, 1 AS n FROM {messages} WHERE session_id = %(sid)s"
        "   ORDER BY seq DESC LIMIT 1)")),
    "window_from": _WINDOW.format(start=(
        "SELECT " + _NODE + ", chunks, content, 1 AS n FROM {messages} WHERE session_id = %(sid)s AND id = %(id)s")),
    "skeleton": (
        "WITH RECURSIVE up AS ("
        " SELECT seq, id, parent_id, tokens, 1 AS n FROM {messages} WHERE seq = %(seq)s"
        " UNION ALL"
        " SELECT m.seq, m.id, m.parent_id, m.tokens, up.n + 1 FROM up JOIN {messages} m"
        "   ON m.session_id = %(sid)s AND m.id = up.parent_id WHERE up.n < %(limit)s"
        ") SELECT seq, id, tokens, parent_id FROM up ORDER BY n"
    ),
    "skeleton_from_id": (
        "WITH RECURSIVE up AS ("
        " SELECT seq, id, parent_id, tokens, 1 AS n FROM {messages} WHERE session_id = %(sid)s AND id = %(id)s"
        " UNION ALL"
        " SELECT m.seq, m.id, m.parent_id, m.tokens, up.n + 1 FROM up JOIN {messages} m"
        "   ON m.session_id = %(sid)s AND m.id = up.parent_id"
        ") SELECT seq, id, tokens, parent_id FROM up ORDER BY n"
    ),
    "contents": (
        "SELECT m.seq, CASE WHEN m.chunks > 0 THEN m.content || coalesce("
        "  (SELECT string_agg(c.data, '' ORDER BY c.n) FROM {chunks} c WHERE c.seq = m.seq), '')"
        " ELSE m.content END FROM {messages} m WHERE m.seq = ANY(%s::bigint[])"
    ),
    "blob": "SELECT data FROM {blobs} WHERE sha256 = %s",
    "count": "SELECT count(*) FROM {messages} WHERE session_id = %s",
    "list_sessions": (
        "SELECT session_id, count(*), min(created_at), max(created_at) FROM {messages}"
        " GROUP BY session_id ORDER BY max(seq) DESC"
    ),
    "session_exists": (
        "SELECT EXISTS (SELECT 1 FROM {messages} WHERE session_id = %(sid)s)"
        " OR EXISTS (SELECT 1 FROM {runs} WHERE session_id = %(sid)s)"
        " OR EXISTS (SELECT 1 FROM {events} WHERE session_id = %(sid)s)"
        " OR EXISTS (SELECT 1 FROM {compactions} WHERE session_id = %(sid)s)"
        " OR EXISTS (SELECT 1 FROM {records} WHERE session_id = %(sid)s)"
    ),
    "compactions": (
        "SELECT seq, id, from_id, to_id, summary, created_at, tokens_before, tokens_after"
        " FROM {compactions} WHERE session_id = %s ORDER BY seq"
    ),
    "stats": (
        "SELECT (SELECT count(DISTINCT session_id) FROM {messages}), (SELECT count(*) FROM {messages}),"
        " (SELECT count(*) FROM {compactions}), (SELECT count(*) FROM {blobs}),"
        " (SELECT coalesce(sum(size), 0) FROM {blobs}), (SELECT count(*) FROM {search}),"
        " (SELECT count(*) FROM {runs}), (SELECT count(*) FROM {events}),"
        " (SELECT value FROM {meta} WHERE key = 'index_built'),"
        " (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
        "   JOIN pg_namespace n ON n.oid = c.relnamespace"
        "   WHERE n.nspname = %s AND c.relkind = 'r' AND starts_with(c.relname, 'sessionkit_'))"
    ),
    "flag": "SELECT value FROM {meta} WHERE key = 'index_built'",
    "search": (
        "SELECT c.seq, m.session_id, m.id, m.role, c.score FROM ("
        "  SELECT s.seq, ts_rank_cd(s.body, %(q)s::tsquery, 1)::float8 AS score FROM ("
        "    SELECT seq, body FROM {search} WHERE body @@ %(q)s::tsquery /*session*/"
        "    ORDER BY seq DESC LIMIT %(cand)s) AS s"
        ") AS c JOIN {messages} m ON m.seq = c.seq"
        " ORDER BY c.score DESC, c.seq DESC LIMIT %(limit)s"
    ),
    "runs": (
        "SELECT run_id, session_id, status, error, started_at, ended_at, usage, input"
        " FROM {runs} WHERE session_id = %s ORDER BY n"
    ),
    "events": "SELECT data FROM {events} WHERE session_id = %s AND seq > %s ORDER BY seq",
    "records": "SELECT n, data FROM {records} WHERE session_id = %s AND kind = %s ORDER BY n",
    # writes
    "insert": (
        "INSERT INTO {messages} (session_id, id, parent_id, depth, role, created_at, bytes, tokens,"
        " path_bytes, path_tokens, chunks, content) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (session_id, id) DO NOTHING RETURNING seq"
    ),
    "insert_chunk": "INSERT INTO {chunks} (seq, n, data) VALUES (%s, %s, %s)",
    "delete_chunks": "DELETE FROM {chunks} WHERE seq = ANY(%s::bigint[])",
    "index_row": (
        "INSERT INTO {search} (seq, session_id, body) VALUES (%s, %s, %s::tsvector)"
        " ON CONFLICT (seq) DO UPDATE SET body = EXCLUDED.body"
    ),
    "unindex": "DELETE FROM {search} WHERE seq = ANY(%s::bigint[])",
    "blobs_present": "SELECT sha256 FROM {blobs} WHERE sha256 = ANY(%s::text[]) ORDER BY sha256 FOR KEY SHARE",
    "blob_put": (
        "INSERT INTO {blobs} (sha256, size, data) VALUES (%s, %s, %s)"
        " ON CONFLICT (sha256) DO UPDATE SET size = EXCLUDED.size"
    ),
    "blob_refs_put": (
        "INSERT INTO {blob_refs} (seq, sha256) SELECT %s, unnest(%s::text[]) ON CONFLICT DO NOTHING"
    ),
    "blob_refs_drop": (
        "WITH gone AS (DELETE FROM {blob_refs} WHERE seq = ANY(%s::bigint[]) RETURNING sha256)"
        " SELECT DISTINCT sha256 FROM gone ORDER BY 1"
    ),
    "blobs_lock": "SELECT sha256 FROM {blobs} WHERE sha256 = ANY(%s::text[]) ORDER BY sha256 FOR UPDATE",
    "blobs_gc": (
        "DELETE FROM {blobs} b WHERE b.sha256 = ANY(%s::text[])"
        " AND NOT EXISTS (SELECT 1 FROM {blob_refs} r WHERE r.sha256 = b.sha256)"
    ),
    "update": (
        "UPDATE {messages} SET role = %s, bytes = %s, tokens = %s, path_bytes = path_bytes + %s,"
        " path_tokens = path_tokens + %s, chunks = %s, content = %s WHERE seq = %s"
    ),
    "update_paths": (
        "WITH RECURSIVE down(id) AS ("
        " SELECT id FROM {messages} WHERE session_id = %(sid)s AND parent_id = %(id)s"
        " UNION ALL"
        " SELECT m.id FROM down JOIN {messages} m ON m.session_id = %(sid)s AND m.parent_id = down.id"
        ") UPDATE {messages} SET path_bytes = path_bytes + %(db)s, path_tokens = path_tokens + %(dt)s"
        " WHERE session_id = %(sid)s AND id IN (SELECT id FROM down)"
    ),
    "descendants": (
        "WITH RECURSIVE down(id) AS ("
        " SELECT unnest(%(ids)s::text[])"
        " UNION"
        " SELECT m.id FROM down JOIN {messages} m ON m.session_id = %(sid)s AND m.parent_id = down.id"
        ") SELECT " + _NODE + " FROM {messages} WHERE session_id = %(sid)s AND id IN (SELECT id FROM down)"
        " ORDER BY seq"
    ),
    "delete_messages": "DELETE FROM {messages} WHERE seq = ANY(%s::bigint[])",
    "delete_compactions_of": (
        "DELETE FROM {compactions} WHERE session_id = %(sid)s"
        " AND (from_id = ANY(%(ids)s::text[]) OR to_id = ANY(%(ids)s::text[]))"
    ),
    "session_seqs": "SELECT seq FROM {messages} WHERE session_id = %s",
    "clear_search": "DELETE FROM {search} WHERE session_id = %s",
    "clear_messages": "DELETE FROM {messages} WHERE session_id = %s",
    "clear_compactions": "DELETE FROM {compactions} WHERE session_id = %s",
    "clear_runs": "DELETE FROM {runs} WHERE session_id = %s",
    "clear_events": "DELETE FROM {events} WHERE session_id = %s",
    "clear_records": "DELETE FROM {records} WHERE session_id = %s",
    "record_put": (
        "INSERT INTO {records} (session_id, kind, n, data) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (session_id, kind, n) DO UPDATE SET data = EXCLUDED.data"
    ),
    "add_compaction": (
        "INSERT INTO {compactions} (session_id, id, from_id, to_id, summary, created_at, tokens_before,"
        " tokens_after) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    ),
    "index_reset": "DELETE FROM {search}",
    "index_source": (
        "SELECT m.seq, m.session_id, CASE WHEN m.chunks > 0 THEN m.content || coalesce("
        "  (SELECT string_agg(c.data, '' ORDER BY c.n) FROM {chunks} c WHERE c.seq = m.seq), '')"
        " ELSE m.content END FROM {messages} m ORDER BY m.seq"
    ),
    "index_copy": "COPY {search} (seq, session_id, body) FROM STDIN",
    "index_done": (
        "INSERT INTO {meta} (key, value) VALUES ('index_built', '1')"
        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
    ),
    "run_begin": (
        "INSERT INTO {runs} (run_id, session_id, status, input, started_at, n)"
        " SELECT %(run)s, %(sid)s, 'running', %(input)s, %(at)s, coalesce(max(n), 0) + 1"
        " FROM {runs} WHERE session_id = %(sid)s"
    ),
    "run_end": "UPDATE {runs} SET status = %s, error = %s, usage = %s, ended_at = %s WHERE run_id = %s",
    "events_next": "SELECT coalesce(max(seq), -1) + 1 FROM {events} WHERE session_id = %s",
    "event_put": "INSERT INTO {events} (session_id, seq, run_id, data) VALUES (%s, %s, %s, %s)",
    # change feed
    "notify": (
        "SELECT count(*) FROM (SELECT pg_notify(%(ch)s, x) FROM unnest(%(notes)s::text[]) AS u(x)"
        " WHERE " + _LISTENING + ") AS n"
    ),
    "listener_register": (
        "INSERT INTO {listeners} (origin) VALUES (%s) ON CONFLICT (origin) DO UPDATE SET seen_at = now()"
    ),
    "listener_expire": "DELETE FROM {listeners} WHERE seen_at < now() - interval '1 hour'",
    "listener_drop": "DELETE FROM {listeners} WHERE origin = %s",
}

# The fast append: one statement, a call of this function, for a plain append. Each
# statement inside a (volatile) PL/pgSQL function reads what committed before it
# started, so once the session's advisory lock is granted, the read of the latest
# leaf sees the previous holder's append: two writers never pick the same parent.
# Returns the new seq; NULL when nothing was written (the id exists, or the named
# parent does not); -1 when the search index was built meanwhile (call again with
# the index entry).
_APPEND_FUNCTION = """CREATE OR REPLACE FUNCTION {fn_append}(
        p_sid text, p_id text, p_kind text, p_parent_id text, p_role text, p_created text,
        p_bytes bigint, p_tokens bigint, p_content text, p_index tsvector,
        p_index_key bigint, p_session_key bigint, p_channel text, p_notes text[]
    ) RETURNS bigint LANGUAGE plpgsql AS $sessionkit$
    DECLARE
        new_seq bigint;
        built boolean;
        listening boolean;
        parent text;
        parent_depth integer;
        parent_bytes bigint;
        parent_tokens bigint;
    BEGIN
        IF p_index IS NULL THEN  -- a first search waits for this append, or this append sees its flag
            PERFORM pg_catalog.pg_advisory_xact_lock_shared(p_index_key),
                    pg_catalog.pg_advisory_xact_lock(p_session_key);
        ELSE
            PERFORM pg_catalog.pg_advisory_xact_lock(p_session_key);
        END IF;
        SELECT (SELECT value = '1' FROM {meta} WHERE key = 'index_built'), """ + _LISTENING + """
          INTO built, listening;
        IF built AND p_index IS NULL THEN
            RETURN -1;
        END IF;
        IF p_kind = 'latest' THEN
            SELECT id, depth, path_bytes, path_tokens INTO parent, parent_depth, parent_bytes, parent_tokens
              FROM {messages} WHERE session_id = p_sid ORDER BY seq DESC LIMIT 1;
        ELSIF p_kind = 'parent' THEN
            SELECT id, depth, path_bytes, path_tokens INTO parent, parent_depth, parent_bytes, parent_tokens
              FROM {messages} WHERE session_id = p_sid AND id = p_parent_id;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
        INSERT INTO {messages} (session_id, id, parent_id, depth, role, created_at, bytes, tokens,
                                path_bytes, path_tokens, chunks, content)
        VALUES (p_sid, p_id, parent, coalesce(parent_depth + 1, 0), p_role, p_created, p_bytes, p_tokens,
                coalesce(parent_bytes, 0) + p_bytes, coalesce(parent_tokens, 0) + p_tokens, 0, p_content)
        ON CONFLICT (session_id, id) DO NOTHING
        RETURNING seq INTO new_seq;
        IF new_seq IS NULL THEN  -- the id exists (or, for a named parent, see above)
            RETURN NULL;
        END IF;
        IF p_index IS NOT NULL THEN
            INSERT INTO {search} (seq, session_id, body) VALUES (new_seq, p_sid, p_index);
        END IF;
        IF listening THEN
            PERFORM pg_catalog.pg_notify(p_channel, note) FROM unnest(p_notes) AS note;
        END IF;
        RETURN new_seq;
    END
    $sessionkit$"""

_APPEND_CALL = (
    "SELECT {fn_append}(%(sid)s::text, %(id)s::text, %(kind)s::text, %(pid)s::text, %(role)s::text,"
    " %(created)s::text, %(bytes)s::bigint, %(tokens)s::bigint, %(content)s::text, %(index)s::tsvector,"
    " %(index_key)s::bigint, %(session_key)s::bigint, %(ch)s::text, %(notes)s::text[])"
)


# ---------------------------------------------------------------------------
# helpers


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _query_pairs(query: str) -> list[tuple[str, str]]:
    """``key=value`` pairs of a URL query, kept percent-encoded exactly as written (libpq decodes them)."""
    pairs = []
    for item in query.split("&"):
        if item:
            key, _, value = item.partition("=")
            pairs.append((key, value))
    return pairs


def _parse_url(url: str) -> tuple[str, str | None]:
    """``(conninfo, schema)``: the URL libpq gets (without ``schema=``) and that parameter."""
    parts = urllib.parse.urlsplit(url)
    schema = None
    rest = []
    for key, value in _query_pairs(parts.query):
        if urllib.parse.unquote(key) == "schema":
            schema = urllib.parse.unquote(value)
        else:
            rest.append(key + "=" + value)
    conninfo = urllib.parse.urlunsplit(("postgresql", parts.netloc, parts.path, "&".join(rest), ""))
    return conninfo, schema


def _shown_url(conninfo: str, schema: str | None) -> str:
    """The store's URL as shown and reopened: no password, the schema when one was chosen."""
    parts = urllib.parse.urlsplit(conninfo)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        netloc = userinfo.split(":", 1)[0] + "@" + hosts
    query = [k + "=" + v for k, v in _query_pairs(parts.query) if urllib.parse.unquote(k) != "password"]
    if schema is not None:
        query.append("schema=" + urllib.parse.quote(schema, safe=""))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "&".join(query), ""))


def _lexeme(stem: str) -> str:
    """A stem as a tsvector lexeme: stems too long for PostgreSQL become a digest (same for queries)."""
    if len(stem) * 4 > _MAX_LEXEME_BYTES and len(stem.encode("utf-8")) > _MAX_LEXEME_BYTES:
        return "#" + hashlib.sha256(stem.encode("utf-8")).hexdigest()  # '#' never occurs in a stem
    return stem


def _quote_lexeme(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsvector(text: str) -> str:
    """The ``tsvector`` literal of a text: its stems with their positions (no parser involved)."""
    positions: dict[str, list[int]] = {}
    for i, stem in enumerate(_search.index_text(text).split(), 1):
        pos = i if i < _MAX_POSITION else _MAX_POSITION
        lex = _lexeme(stem)
        seen = positions.get(lex)
        if seen is None:
            positions[lex] = [pos]
        elif len(seen) < _MAX_POSITIONS and seen[-1] != pos:
            seen.append(pos)
    out = []
    budget = _MAX_LEXEMES_BYTES
    for lex, pos in positions.items():
        size = len(lex) if lex.isascii() else len(lex.encode("utf-8"))
        if size > budget:
            break
        budget -= size
        out.append(_quote_lexeme(lex) + ":" + ",".join(map(str, pos)))
    return " ".join(out)


def _tsquery(query: _search.Query) -> str:
    """A ``tsquery`` literal built from the parsed stems only: every term, every phrase."""
    items = [_quote_lexeme(_lexeme(t)) for t in query.terms]
    for phrase in query.phrases:
        items.append("(" + " <-> ".join(_quote_lexeme(_lexeme(w)) for w in phrase) + ")")
    return " & ".join(items)


def _split_utf8(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` UTF-8 bytes, never inside a character."""
    if len(text) * 4 <= limit or len(text.encode("utf-8")) <= limit:
        return [text]
    out = []
    i = 0
    while i < len(text):
        piece = text[i : i + limit]
        raw = piece.encode("utf-8")
        if len(raw) > limit:
            piece = raw[:limit].decode("utf-8", "ignore")
        out.append(piece)
        i += len(piece)
    return out


def _convert(exc: Exception, where: str) -> Exception:
    """A driver error as a sessionkit error (the caller raises it ``from`` the original)."""
    text = str(exc).strip()
    if isinstance(exc, psycopg.DataError) and "NUL" in text:
        return InvalidMessage(
            "PostgreSQL cannot store the NUL character (\\x00) in a session id, message id, role "
            f"or other text column: {text}"
        )
    if isinstance(exc, psycopg.OperationalError):
        return SessionKitError(f"PostgreSQL store {where}: {text}")
    return SessionKitError(f"PostgreSQL store {where}: {type(exc).__name__}: {text}")


def _guarded(fn):
    """Convert driver errors raised by an engine method at the boundary."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except psycopg.Error as exc:
            raise _convert(exc, self.path) from exc

    return wrapper


def _guarded_gen(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            yield from fn(self, *args, **kwargs)
        except psycopg.Error as exc:
            raise _convert(exc, self.path) from exc

    return wrapper


def _quiet_rollback(conn) -> None:
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a broken connection: the pool discards it


class _Tx:
    """The write transaction of one thread: its connection and the locks it holds."""

    __slots__ = ("conn", "depth", "locked", "events_locked", "index_shared", "index_checked")

    def __init__(self, conn):
        self.conn = conn
        self.depth = 1
        self.locked: set[str] = set()
        self.events_locked: set[str] = set()
        self.index_shared = False
        self.index_checked: bool | None = None


# ---------------------------------------------------------------------------


class PostgresEngine(Engine):
    """Storage primitives on PostgreSQL (see the module docstring)."""

    kind = "postgresql"
    capabilities = Capabilities(coordination=True, shared_feed=True)

    def __init__(
        self,
        url: str,
        *,
        durability: str = "normal",
        schema: str | None = None,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
    ):
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got {durability!r}")
        conninfo, url_schema = _parse_url(url)
        if schema is not None and url_schema is not None and schema != url_schema:
            raise ValueError(f"schema={schema!r} disagrees with the URL's schema={url_schema!r}")
        if schema is None:
            schema = url_schema
        if schema is not None and (not isinstance(schema, str) or not schema or "\x00" in schema
                                   or len(schema.encode("utf-8")) > 63):
            raise ValueError(f"schema must be a non-empty name of at most 63 bytes, got {schema!r}")
        shown = _shown_url(conninfo, schema)
        self._chunk = int(chunk_chars)
        if self._chunk < 1:
            raise ValueError("chunk_chars must be positive")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ValueError(f"pool_size must be a positive int, got {pool_size!r}")
        self.path = shown
        self._conninfo = conninfo
        self._durability = durability
        self._connect_timeout = float(connect_timeout)
        self._tls = threading.local()
        self._origin = uuid.uuid4().hex
        self._note_keys = itertools.count()
        self._cursor_names = itertools.count()
        self._index_on = False
        self._closed = False
        self._listener: _Listener | None = None
        self._listener_lock = threading.Lock()
        self._signal_handlers: list = []
        self._holds: set[str] = set()
        self._holds_conn = None
        self._holds_lock = threading.Lock()
        self.schema = self._setup(schema)
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._connect_timeout))},
            configure=self._configure,
            name=f"sessionkit-{self._origin[:8]}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=self._connect_timeout)
        except psycopg.Error as exc:
            self._pool.close()
            raise SessionKitError(f"cannot connect to PostgreSQL store {self.path}: {exc}") from exc

    # -- setup ----------------------------------------------------------------
    def _configure(self, conn) -> None:
        if self._durability == "full":
            conn.execute("SET synchronous_commit = on")

    def _setup(self, schema: str | None) -> str:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True,
                                   connect_timeout=max(1, int(self._connect_timeout)))
        except psycopg.Error as exc:
            raise SessionKitError(f"cannot connect to PostgreSQL store {self.path}: {exc}") from exc
        try:
            with conn:
                if schema is None:
                    schema = conn.execute("SELECT current_schema()").fetchone()[0]
                    if schema is None:
                        raise ValueError(
                            f"PostgreSQL store {self.path}: the connection's search_path names no existing "
                            "schema; pass schema=... (or ?schema=... in the URL)"
                        )
                self._prepare_sql(schema)
                version = self._read_version(conn)
                if version is not None and version > SCHEMA_VERSION:
                    raise self._too_new(version)
                if version != SCHEMA_VERSION:
                    # One process creates or migrates; the others wait for the lock, then find
                    # the work done. The lock is taken before the transaction begins, so the
                    # transaction reads the catalogs as the previous holder left them.
                    key = self._key("schema")
                    conn.execute("SELECT pg_advisory_lock(%s::bigint)", (key,))
                    try:
                        with conn.transaction():
                            self._create_or_migrate(conn, schema)
                    finally:
                        conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (key,))
        except psycopg.Error as exc:
            raise _convert(exc, self.path) from exc
        return schema

    def _create_or_migrate(self, conn, schema: str) -> None:
        version = self._read_version(conn)
        if version is None:
            if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None:
                conn.execute("CREATE SCHEMA " + _quote_ident(schema))
            # DDL takes no parameters: one round trip for the whole schema
            conn.execute(";\n".join(stmt.format(**self._t) for stmt in _DDL))
            conn.execute(
                "INSERT INTO {meta} (key, value) VALUES ('schema_version', %s), ('index_built', '0')".format(**self._t),
                (str(SCHEMA_VERSION),),
            )
        elif version > SCHEMA_VERSION:
            raise self._too_new(version)
        elif version < SCHEMA_VERSION:
            for v in range(version, SCHEMA_VERSION):
                for stmt in _MIGRATIONS.get(v, []):
                    conn.execute(stmt.format(**self._t))
            conn.execute("UPDATE {meta} SET value = %s WHERE key = 'schema_version'".format(**self._t),
                         (str(SCHEMA_VERSION),))
        else:
            return
        conn.execute(_APPEND_FUNCTION.format(**self._t))

    def _too_new(self, version: int) -> SchemaVersionError:
        return SchemaVersionError(
            f"store {self.path} has schema version {version}; this sessionkit reads up to "
            f"{SCHEMA_VERSION}: upgrade sessionkit"
        )

    def _prepare_sql(self, schema: str) -> None:
        self.schema = schema
        qs = _quote_ident(schema)
        self._t = {name: f"{qs}.{_quote_ident('sessionkit_' + name)}" for name in _TABLES}
        self._t["fn_append"] = f"{qs}.{_quote_ident('sessionkit_append')}"
        if "$sessionkit$" in schema:
            raise ValueError(f"schema name {schema!r} may not contain '$sessionkit$'")
        sql = {key: text.format(**self._t) for key, text in _SQL.items()}
        self._search_sql = {
            False: _SQL["search"].replace("/*session*/", "").format(**self._t),
            True: _SQL["search"].replace("/*session*/", "AND session_id = %(sid)s").format(**self._t),
        }
        self._s = sql
        self._append_call = _APPEND_CALL.format(**self._t)
        name = "sessionkit:" + schema
        if len(name.encode("utf-8")) > 63:
            name = "sessionkit:" + hashlib.blake2b(schema.encode("utf-8"), digest_size=16).hexdigest()
        self._channel = name
        self._k_index = self._key("index")

    def _read_version(self, conn) -> int | None:
        if conn.execute("SELECT to_regclass(%s)", (self._t["meta"],)).fetchone()[0] is None:
            return None
        row = conn.execute("SELECT value FROM {meta} WHERE key = 'schema_version'".format(**self._t)).fetchone()
        if row is None:
            raise SessionKitError(f"store {self.path}: sessionkit_meta has no schema_version row")
        return int(row[0])

    def _key(self, kind: str, value: str = "") -> int:
        """A 64-bit advisory lock key for ``kind``/``value`` in this store's schema."""
        raw = f"sessionkit\x00{kind}\x00{self.schema}\x00{value}".encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        listener = self._listener
        if listener is not None:
            listener.stop()
        with self._holds_lock:
            if self._holds_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._holds_conn.close()  # gives back every hold
                self._holds_conn = None
            self._holds.clear()
        self._pool.close()

    def _cur_tx(self) -> _Tx | None:
        return getattr(self._tls, "tx", None)

    def _tx(self) -> _Tx:
        tx = self._cur_tx()
        if tx is None:
            raise RuntimeError("a w_* method was called outside engine.write()")
        return tx

    @contextlib.contextmanager
    def write(self):
        tx = self._cur_tx()
        if tx is not None:
            tx.depth += 1
            try:
                yield self
            finally:
                tx.depth -= 1
            return
        try:
            conn = self._pool.getconn()
        except psycopg.Error as exc:
            raise _convert(exc, self.path) from exc
        self._tls.tx = _Tx(conn)
        try:
            try:
                conn.execute("BEGIN")
                yield self
            except psycopg.Error as exc:
                self._tls.tx = None
                _quiet_rollback(conn)
                raise _convert(exc, self.path) from exc
            except BaseException:
                self._tls.tx = None
                _quiet_rollback(conn)
                raise
            self._tls.tx = None
            try:
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                _quiet_rollback(conn)
                raise _convert(exc, self.path) from exc
        finally:
            self._tls.tx = None
            self._pool.putconn(conn)

    def _lock_session(self, tx: _Tx, sid: str) -> None:
        """Serialize this session's writers until the transaction ends.

        The shared index lock always comes first (it is taken with the session lock),
        so a transaction never waits for it while holding a session lock.
        """
        if sid in tx.locked:
            return
        key = self._key("session", sid)
        if self._index_on or tx.index_shared:
            tx.conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (key,))
        else:
            tx.conn.execute("SELECT pg_advisory_xact_lock_shared(%s::bigint), pg_advisory_xact_lock(%s::bigint)",
                            (self._k_index, key))
            tx.index_shared = True
        tx.locked.add(sid)

    def _lock_events(self, tx: _Tx, sid: str) -> None:
        if sid not in tx.events_locked:
            tx.conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (self._key("events", sid),))
            tx.events_locked.add(sid)

    @contextlib.contextmanager
    def _conn(self, sid: str | None = None):
        """The thread's transaction connection (locking ``sid``), or one from the pool."""
        tx = self._cur_tx()
        if tx is not None:
            if sid is not None:
                self._lock_session(tx, sid)
            yield tx.conn
            return
        with self._pool.connection() as conn:
            yield conn

    def _q(self, sql: str, params=None, sid: str | None = None) -> list:
        with self._conn(sid) as conn:
            return conn.execute(sql, params).fetchall()

    def _one(self, sql: str, params=None, sid: str | None = None):
        with self._conn(sid) as conn:
            return conn.execute(sql, params).fetchone()

    # -- reads ------------------------------------------------------------------
    @_guarded
    def node(self, sid, mid):
        row = self._one(self._s["node"], (sid, mid), sid)
        return None if row is None else Node(*row)

    @_guarded
    def latest(self, sid):
        row = self._one(self._s["latest"], (sid,), sid)
        return None if row is None else Node(*row)

    @_guarded
    def children(self, sid, mid):
        return [Node(*r) for r in self._q(self._s["children"], (sid, mid), sid)]

    @_guarded
    def nodes(self, sid):
        return [Node(*r) for r in self._q(self._s["nodes"], (sid,), sid)]

    @_guarded
    def ancestors(self, sid, seq, limit):
        rows = self._q(self._s["ancestors"], {"seq": seq, "sid": sid, "limit": _UNLIMITED if limit is None else limit},
                       sid)
        return [Node(*r) for r in rows]

    @_guarded
    def window(self, sid, start_id, limit):
        if start_id is None:
            rows = self._q(self._s["window_latest"], {"sid": sid, "limit": limit}, sid)
        else:
            rows = self._q(self._s["window_from"], {"sid": sid, "id": start_id, "limit": limit}, sid)
        return [(Node(*r[:10]), r[10]) for r in rows]

    @_guarded_gen
    def path_skeleton(self, sid, seq):
        rows = self._q(self._s["skeleton"], {"seq": seq, "sid": sid, "limit": _FIRST_BATCH}, sid)
        for r in rows:
            yield r[0], r[1], r[2]
        if len(rows) < _FIRST_BATCH or rows[-1][3] is None:
            return
        # A long path: stream the rest from a server-side cursor, in bounded batches.
        params = {"sid": sid, "id": rows[-1][3]}
        del rows
        with self._conn(sid) as conn:
            block = contextlib.nullcontext() if self._cur_tx() is not None else conn.transaction()
            with block, conn.cursor(name=f"sessionkit_path_{next(self._cursor_names)}") as cur:
                cur.itersize = 10_000
                cur.execute(self._s["skeleton_from_id"], params)
                for r in cur:
                    yield r[0], r[1], r[2]

    @_guarded
    def contents(self, seqs):
        if not seqs:
            return []
        found = dict(self._q(self._s["contents"], (list(seqs),)))
        try:
            return [found[s] for s in seqs]
        except KeyError:
            raise MessageNotFound("a message was deleted while it was being read") from None

    @_guarded
    def blob(self, sha):
        row = self._one(self._s["blob"], (sha,))
        if row is None:
            raise SessionKitError(f"payload {sha} is missing from the store")
        return bytes(row[0])

    @_guarded
    def count(self, sid):
        return self._one(self._s["count"], (sid,), sid)[0]

    @_guarded
    def list_sessions(self):
        return [SessionInfo(*r) for r in self._q(self._s["list_sessions"])]

    @_guarded
    def session_exists(self, sid):
        return bool(self._one(self._s["session_exists"], {"sid": sid})[0])

    @_guarded
    def compactions(self, sid):
        return [(r[0], Compaction(*r[1:])) for r in self._q(self._s["compactions"], (sid,), sid)]

    @_guarded
    def stats(self):
        (sessions, messages, compactions, blobs, blob_bytes, indexed, runs, events, flag,
         size) = self._one(self._s["stats"], (self.schema,))
        if flag == "1":
            self._index_on = True
        return {
            "engine": self.kind,
            "schema_version": SCHEMA_VERSION,
            "sessions": sessions,
            "messages": messages,
            "compactions": compactions,
            "blobs": blobs,
            "blob_bytes": int(blob_bytes),
            "indexed_messages": indexed if flag == "1" else 0,
            "runs": runs,
            "events": events,
            "bytes": int(size),
        }

    @_guarded
    def index_built(self):
        if not self._index_on:
            row = self._one(self._s["flag"])
            self._index_on = row is not None and row[0] == "1"
        return self._index_on

    @_guarded
    def search(self, fts_query, terms, sid, limit):
        # Rank only the newest `search_candidates` matches, so a query matching most of a
        # huge store costs about the same as one matching that many (see Store.search).
        query = _tsquery(terms)
        if not query:
            return []
        params = {"q": query, "cand": self.search_candidates, "limit": limit, "sid": sid}
        rows = self._q(self._search_sql[sid is not None], params)
        return [(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]

    @_guarded
    def runs(self, sid):
        rows = self._q(self._s["runs"], (sid,))
        return [RunRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else None, r[7])
                for r in rows]

    @_guarded
    def events(self, sid, after_seq):
        rows = self._q(self._s["events"], (sid, -1 if after_seq is None else after_seq))
        return [json.loads(r[0]) for r in rows]

    @_guarded
    def records(self, sid, kind):
        return [(r[0], r[1]) for r in self._q(self._s["records"], (sid, kind))]

    # -- writes -------------------------------------------------------------------
    @_guarded
    def w_put_records(self, sid, kind, items):
        rows = [(sid, kind, n, data) for n, data in items]
        if rows:
            with self._tx().conn.cursor() as cur:
                cur.executemany(self._s["record_put"], rows)

    @_guarded
    def w_index_on(self):
        if self._index_on:
            return True
        tx = self._tx()
        if tx.index_checked is not None:
            return tx.index_checked
        if not tx.index_shared:
            tx.conn.execute("SELECT pg_advisory_xact_lock_shared(%s::bigint)", (self._k_index,))
            tx.index_shared = True
        row = tx.conn.execute(self._s["flag"]).fetchone()
        on = row is not None and row[0] == "1"
        if on:
            self._index_on = True
        tx.index_checked = on
        return on

    def _split(self, content: str) -> tuple[str, list[str]]:
        head, rest = content[: self._chunk], content[self._chunk :]
        return head, [rest[i : i + self._chunk] for i in range(0, len(rest), self._chunk)]

    @_guarded
    def w_insert(self, sid, prep, parent, created_at, index):
        tx = self._tx()
        self._lock_session(tx, sid)
        index = index or self.w_index_on()
        conn = tx.conn
        head, chunks = self._split(prep.stored_json)
        if parent is None:
            depth, pb, pt, pid = 0, prep.bytes, prep.tokens, None
        else:
            depth = parent.depth + 1
            pb = parent.path_bytes + prep.bytes
            pt = parent.path_tokens + prep.tokens
            pid = parent.id
        msg = prep.message
        row = conn.execute(
            self._s["insert"],
            (sid, msg["id"], pid, depth, msg["role"], created_at, prep.bytes, prep.tokens, pb, pt, len(chunks), head),
        ).fetchone()
        if row is None:
            return None
        seq = row[0]
        if chunks:
            with conn.cursor() as cur:
                cur.executemany(self._s["insert_chunk"], [(seq, i, data) for i, data in enumerate(chunks)])
        if prep.blobs:
            self._put_blobs(conn, seq, prep.blobs)
        if index:
            conn.execute(self._s["index_row"], (seq, sid, _tsvector(prep.text)))
        return Node(seq, msg["id"], pid, depth, prep.bytes, prep.tokens, pb, pt, created_at, msg["role"])

    def _put_blobs(self, conn, seq, blobs) -> None:
        shas = sorted(blobs)
        # Lock each payload row this message will reference (an existing one in KEY SHARE,
        # a new or racing one by the upsert), so a concurrent delete cannot collect it.
        present = {r[0] for r in conn.execute(self._s["blobs_present"], (shas,))}
        new = [(sha, len(blobs[sha]), blobs[sha]) for sha in shas if sha not in present]
        if new:
            with conn.cursor() as cur:
                cur.executemany(self._s["blob_put"], new)
        conn.execute(self._s["blob_refs_put"], (seq, shas))

    def _gc_blobs(self, conn, seqs) -> None:
        """Drop the references of ``seqs`` and every payload no longer referenced."""
        if not seqs:
            return
        shas = [r[0] for r in conn.execute(self._s["blob_refs_drop"], (list(seqs),))]
        if not shas:
            return
        conn.execute(self._s["blobs_lock"], (shas,)).fetchall()
        conn.execute(self._s["blobs_gc"], (shas,))

    @_guarded
    def w_update(self, sid, node, prep, index):
        tx = self._tx()
        self._lock_session(tx, sid)
        index = index or self.w_index_on()
        conn = tx.conn
        head, chunks = self._split(prep.stored_json)
        db_ = prep.bytes - node.bytes
        dt = prep.tokens - node.tokens
        conn.execute(self._s["update"], (prep.message["role"], prep.bytes, prep.tokens, db_, dt, len(chunks), head,
                                         node.seq))
        conn.execute(self._s["delete_chunks"], ([node.seq],))
        if chunks:
            with conn.cursor() as cur:
                cur.executemany(self._s["insert_chunk"], [(node.seq, i, data) for i, data in enumerate(chunks)])
        self._gc_blobs(conn, [node.seq])
        if prep.blobs:
            self._put_blobs(conn, node.seq, prep.blobs)
        if db_ or dt:
            conn.execute(self._s["update_paths"], {"sid": sid, "id": node.id, "db": db_, "dt": dt})
        if index:
            conn.execute(self._s["index_row"], (node.seq, sid, _tsvector(prep.text)))

    @_guarded
    def w_descendants(self, sid, mids):
        rows = self._q(self._s["descendants"], {"ids": list(mids), "sid": sid}, sid)
        return [Node(*r) for r in rows]

    @_guarded
    def w_delete(self, sid, nodes):
        tx = self._tx()
        self._lock_session(tx, sid)
        conn = tx.conn
        seqs = [n.seq for n in nodes]
        ids = [n.id for n in nodes]
        self._gc_blobs(conn, seqs)
        conn.execute(self._s["delete_chunks"], (seqs,))
        conn.execute(self._s["unindex"], (seqs,))
        conn.execute(self._s["delete_messages"], (seqs,))
        conn.execute(self._s["delete_compactions_of"], {"sid": sid, "ids": ids})

    @_guarded
    def w_clear(self, sid):
        tx = self._tx()
        self._lock_session(tx, sid)
        conn = tx.conn
        seqs = [r[0] for r in conn.execute(self._s["session_seqs"], (sid,))]
        self._gc_blobs(conn, seqs)
        conn.execute(self._s["delete_chunks"], (seqs,))
        conn.execute(self._s["clear_search"], (sid,))
        conn.execute(self._s["clear_messages"], (sid,))
        conn.execute(self._s["clear_compactions"], (sid,))

    @_guarded
    def w_delete_session(self, sid):
        self.w_clear(sid)
        tx = self._tx()
        self._lock_events(tx, sid)
        tx.conn.execute(self._s["clear_runs"], (sid,))
        tx.conn.execute(self._s["clear_events"], (sid,))
        tx.conn.execute(self._s["clear_records"], (sid,))

    @_guarded
    def w_add_compaction(self, sid, comp):
        tx = self._tx()
        self._lock_session(tx, sid)
        tx.conn.execute(self._s["add_compaction"], (sid, comp.id, comp.from_id, comp.to_id, comp.summary,
                                                    comp.created_at, comp.tokens_before, comp.tokens_after))

    @_guarded
    def w_build_index(self):
        tx = self._tx()
        conn = tx.conn
        # Exclusive: waits for every write transaction that read the flag as "not built".
        conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (self._k_index,))
        row = conn.execute(self._s["flag"]).fetchone()
        if row is not None and row[0] == "1":
            self._index_on = True
            return
        conn.execute(self._s["index_reset"])
        with conn.cursor(name=f"sessionkit_index_{next(self._cursor_names)}") as source:
            source.execute(self._s["index_source"])
            while True:
                batch = source.fetchmany(1000)
                if not batch:
                    break
                with conn.cursor() as cur, cur.copy(self._s["index_copy"]) as copy:
                    for seq, sid, content in batch:
                        copy.write_row((seq, sid, _tsvector(_msg.message_text(json.loads(content)))))
        conn.execute(self._s["index_done"])
        tx.index_checked = True
        self._index_on = True  # monotonic: once built, the index is never dropped

    @_guarded
    def append_simple(self, sid, prep, parent_id, created_at):
        if prep.blobs or len(prep.stored_json) > self._chunk or self._cur_tx() is not None:
            return NotImplemented
        msg = prep.message
        kind = "root" if parent_id is None else ("parent" if isinstance(parent_id, str) else "latest")
        params = {
            "sid": sid, "id": msg["id"], "kind": kind, "pid": parent_id if kind == "parent" else None,
            "role": msg["role"], "created": created_at, "bytes": prep.bytes, "tokens": prep.tokens,
            "content": prep.stored_json, "index": None, "index_key": self._k_index,
            "session_key": self._key("session", sid), "ch": self._channel,
            "notes": self._notes(self._append_doc(sid, msg["id"], prep.stored_json)),
        }
        seq = None
        for _ in range(2):
            if self._index_on:
                params["index"] = _tsvector(prep.text)
            with self._pool.connection() as conn:  # one statement: its own transaction
                seq = conn.execute(self._append_call, params).fetchone()[0]
            if seq != -1:
                break
            self._index_on = True  # another process built the search index meanwhile
        if seq is not None and seq > 0:
            self._tls.published = (sid, msg["id"])
            return "inserted"
        if self.node(sid, msg["id"]) is not None:
            return "exists"
        return "no-parent" if kind == "parent" else NotImplemented

    @_guarded
    def w_run_begin(self, sid, run_id, input, started_at):
        tx = self._tx()
        self._lock_events(tx, sid)
        tx.conn.execute(self._s["run_begin"], {"run": run_id, "sid": sid, "input": input, "at": started_at})

    @_guarded
    def w_run_end(self, run_id, status, error, usage, ended_at):
        self._tx().conn.execute(self._s["run_end"],
                                (status, error, None if usage is None else _msg.dumps(usage), ended_at, run_id))

    @_guarded
    def w_append_events(self, sid, events):
        tx = self._tx()
        self._lock_events(tx, sid)
        conn = tx.conn
        start = conn.execute(self._s["events_next"], (sid,)).fetchone()[0]
        out = []
        for i, ev in enumerate(events):
            ev["seq"] = start + i
            out.append(ev)
        with conn.cursor() as cur:
            cur.executemany(self._s["event_put"], [(sid, ev["seq"], ev.get("run_id"), _msg.dumps(ev)) for ev in out])
        if out:  # other processes' servers stream this session's events too (delivered at commit)
            conn.execute(self._s["notify"], {"ch": self._channel,
                                             "notes": self._notes(self._signal_doc(sid, "events", out[-1]["seq"]))})
        return out

    # -- what several server processes on one store share ----------------------------
    #: Several processes may serve this store at once (the HTTP server coordinates them).
    shared = True

    def try_hold(self, name: str) -> bool:
        """Take the store-wide hold ``name`` unless any process (this one too) has it.

        Holds are PostgreSQL session-level advisory locks on one connection kept for
        them, so a process that dies (or loses that connection) gives its holds back.
        """
        with self._holds_lock:
            if name in self._holds:
                return False  # not re-entrant: a hold excludes this process's other tasks too
            if self._closed:
                raise SessionKitError(f"store {self.path} is closed")
            try:
                conn = self._holds_conn
                if conn is None or conn.closed:
                    self._holds.clear()  # a new connection holds nothing yet
                    conn = self._holds_conn = psycopg.connect(
                        self._conninfo, autocommit=True, connect_timeout=max(1, int(self._connect_timeout)))
                got = conn.execute("SELECT pg_try_advisory_lock(%s::bigint)", (self._key("hold", name),)).fetchone()[0]
            except psycopg.Error as exc:
                self._drop_holds_conn()
                raise _convert(exc, self.path) from exc
            if got:
                self._holds.add(name)
            return bool(got)

    def hold_taken(self, name: str) -> bool:
        """Whether any process holds ``name`` now (read from ``pg_locks``, nothing taken)."""
        key = self._key("hold", name) & 0xFFFFFFFFFFFFFFFF
        row = self._one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1)",
            (key >> 32, key & 0xFFFFFFFF))
        return bool(row[0])

    def release_hold(self, name: str) -> None:
        """Give back a hold taken with :meth:`try_hold` (nothing when not held)."""
        with self._holds_lock:
            if name not in self._holds:
                return
            self._holds.discard(name)
            conn = self._holds_conn
            if conn is None or conn.closed:
                return
            try:
                conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (self._key("hold", name),))
            except psycopg.Error as exc:  # the connection is gone, and its holds with it
                log.warning("sessionkit: could not give back hold %r on %s: %s", name, self.path, exc)
                self._drop_holds_conn()

    def _drop_holds_conn(self) -> None:
        conn, self._holds_conn = self._holds_conn, None
        self._holds.clear()
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    @staticmethod
    def _signal_doc(sid: str, kind: str, data) -> str:
        return json.dumps({"t": "signal", "s": sid, "k": kind, "d": data})

    def signal(self, sid: str, kind: str, data=None) -> None:
        """Tell other processes' ``on_signal`` handlers ``(sid, kind, data)`` (not this process's)."""
        if self._closed:
            return
        params = {"ch": self._channel, "notes": self._notes(self._signal_doc(sid, kind, data))}
        try:
            with self._pool.connection() as conn:
                conn.execute(self._s["notify"], params)
        except psycopg.Error as exc:
            log.warning("sessionkit: could not signal %s for session %r to other processes: %s", kind, sid, exc)

    def on_signal(self, handler) -> None:
        """Call ``handler(sid, kind, data)`` (from the listener thread) for other processes' signals."""
        self._signal_handlers.append(handler)

    # -- change feed across processes ---------------------------------------------------
    def _notes(self, doc: str) -> list[str]:
        """NOTIFY payloads for one event document: ``origin|key|index|count|piece``."""
        key = next(self._note_keys)
        pieces = _split_utf8(doc, _NOTE_BYTES - 80)
        n = len(pieces)
        return [f"{self._origin}|{key}|{i}|{n}|{piece}" for i, piece in enumerate(pieces)]

    @staticmethod
    def _append_doc(sid: str, mid: str, stored_json: str) -> str:
        head = '{"t":"append","s":' + json.dumps(sid) + ',"i":[' + json.dumps(mid) + "]"
        if len(stored_json) > _NOTE_MESSAGE_CHARS:
            return head + ',"f":1,"m":null}'
        return head + ',"m":' + stored_json + "}"

    @staticmethod
    def _event_doc(event: ChangeEvent) -> str:
        doc: dict = {"t": event.type, "s": event.session_id, "i": list(event.message_ids)}
        message = event.message
        body = "null" if message is None else _msg.dumps(message)
        if len(body) > _NOTE_MESSAGE_CHARS:
            doc["f"] = 1  # too long to send: the listener reads it back
            body = "null" if event.type != "compact" else _msg.dumps(dict(message, parts=[]))
        return json.dumps(doc)[:-1] + ',"m":' + body + "}"

    def publish(self, event: ChangeEvent) -> None:
        """Tell listening processes about a write of this process (called after it committed)."""
        mark = getattr(self._tls, "published", None)
        if mark is not None:
            self._tls.published = None
            if event.type == "append" and event.message_ids and mark == (event.session_id, event.message_ids[0]):
                return  # the fast append sent it inside its own transaction
        if self._closed:
            return
        params = {"ch": self._channel, "notes": self._notes(self._event_doc(event))}
        try:
            tx = self._cur_tx()
            if tx is not None:
                tx.conn.execute(self._s["notify"], params)
                return
            with self._pool.connection() as conn:
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        # a lost notification costs less than waiting for a disk flush
                        conn.execute("SET LOCAL synchronous_commit = off")
                        conn.execute(self._s["notify"], params)
                        conn.execute("COMMIT")
                except BaseException:
                    _quiet_rollback(conn)
                    raise
        except psycopg.Error as exc:
            log.warning("sessionkit: could not notify other processes of a %s in session %r: %s",
                        event.type, event.session_id, exc)

    def start_listener(self, callback) -> None:
        """Report writes made by other processes to ``callback(ChangeEvent)`` (from a thread).

        Returns once the listener is connected (or after ``connect_timeout``, with a
        warning; it keeps trying in the background). Idempotent.
        """
        with self._listener_lock:
            if self._listener is not None or self._closed:
                return
            self._listener = listener = _Listener(self, callback)
            listener.start()
        if not listener.ready.wait(self._connect_timeout):
            log.warning("sessionkit: the change feed of %s is not connected yet; still trying", self.path)

    def _event_from(self, data: dict) -> ChangeEvent:
        kind, sid, ids, message = data["t"], data["s"], tuple(data["i"]), data.get("m")
        if data.get("f"):
            try:
                if kind in ("append", "update") and ids:
                    node = self.node(sid, ids[0])
                    message = None if node is None else _msg.restore(self.contents([node.seq])[0], self.blob)
                elif kind == "compact" and isinstance(message, dict):
                    cid = message["metadata"]["compaction"]["id"]
                    summary = next((c.summary for _, c in self.compactions(sid) if c.id == cid), "")
                    message["parts"] = [{"type": "text", "text": summary}]
            except (SessionKitError, LookupError, KeyError, TypeError):
                message = None
        return ChangeEvent(kind, sid, ids, message)


class _Listener(threading.Thread):
    """LISTENs on the store's channel and hands other processes' events to a callback."""

    def __init__(self, engine: PostgresEngine, callback):
        super().__init__(name=f"sessionkit-listener-{engine._origin[:8]}", daemon=True)
        self.engine = engine
        self.callback = callback
        self.ready = threading.Event()
        self._halt = threading.Event()
        self._partial: dict[tuple[str, str], list[str]] = {}

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)

    def run(self) -> None:
        eng = self.engine
        delay = 0.2
        while not self._halt.is_set():
            try:
                with psycopg.connect(eng._conninfo, autocommit=True,
                                     connect_timeout=max(1, int(eng._connect_timeout))) as conn:
                    conn.execute("LISTEN " + _quote_ident(eng._channel))
                    conn.execute(eng._s["listener_register"], (eng._origin,))
                    conn.execute(eng._s["listener_expire"])
                    self._partial.clear()
                    self.ready.set()
                    delay = 0.2
                    beat = time.monotonic()
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=0.2):
                            self._handle(note.payload)
                        if time.monotonic() - beat > _HEARTBEAT_SECONDS:
                            conn.execute(eng._s["listener_register"], (eng._origin,))
                            beat = time.monotonic()
                    conn.execute(eng._s["listener_drop"], (eng._origin,))
            except psycopg.Error as exc:
                if self._halt.is_set():
                    return
                log.warning("sessionkit: change feed of %s lost its connection (%s); reconnecting", eng.path, exc)
                self._halt.wait(delay)
                delay = min(delay * 2, 10.0)

    def _handle(self, payload: str) -> None:
        try:
            origin, key, index, count, piece = payload.split("|", 4)
            if origin == self.engine._origin:
                return  # this store's own write: already reported in this process
            count = int(count)
            if count == 1:
                doc = piece
            else:
                parts = self._partial.setdefault((origin, key), [])
                if int(index) != len(parts):  # a piece went missing: drop the event
                    self._partial.pop((origin, key), None)
                    return
                parts.append(piece)
                if len(parts) < count:
                    return
                doc = "".join(self._partial.pop((origin, key)))
            data = json.loads(doc)
            if data.get("t") == "signal":
                for handler in list(self.engine._signal_handlers):
                    try:
                        handler(data["s"], data["k"], data.get("d"))
                    except Exception:
                        log.exception("sessionkit: signal handler raised")
                return
            event = self.engine._event_from(data)
        except (ValueError, KeyError, TypeError):
            log.debug("sessionkit: ignored a notification that is not a sessionkit event: %.80r", payload)
            return
        try:
            self.callback(event)
        except Exception:  # a subscriber never stops the feed
            log.exception("sessionkit: change subscriber raised")
