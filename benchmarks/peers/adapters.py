"""One small adapter per store, all with the same methods.

Every adapter is driven through the same coroutine methods so that async peers (OpenAI
Agents SDK, Google ADK) are awaited inside one event loop, the way their users call them,
and sync stores pay only the cost of a coroutine call (well under a microsecond):

    open(folder)                    open or create the store in an empty folder
    append(conv, msg)               store one logical message with ONE call of the peer's API
    bulk_load(conv, msgs)           build a fixture fast (batched where the peer allows);
                                    never timed, used only to complete data sets
    read_all(conv) -> list          the whole conversation, as the peer's own records
    iter_all(conv) -> iterator      the same for the memory probe (streams where it can)
    read_recent(conv, n) -> list    the last n logical messages
    search(conv, q) -> list         text search in one conversation; NOT_SUPPORTED if none
    close()

`durability` tells what the adapter set; `notes` collects what a reader must know about
how the row was measured. Third-party imports happen inside `open` so that one failing
peer never stops the others.

Logical message -> peer records (one API call per logical message in every case):

- sessionkit, raw sqlite3, raw DuckDB: the message dict itself (one row).
- OpenAI Agents SDK: Responses input items; a tool turn is three items (assistant
  message, function_call, function_call_output) passed to one `add_items` call.
- LangChain / LangGraph: BaseMessages; a tool turn is an AIMessage with tool_calls plus a
  ToolMessage, passed to one `add_messages` call / one graph invocation.
- Google ADK: one Event whose Content has the text part, and for a tool turn also the
  function_call and function_response parts.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import workload

NOT_SUPPORTED = object()

# "normal" (WAL + synchronous=NORMAL, sessionkit's default) or "full" (fsync each commit).
SYNC = os.environ.get("PEERS_SYNC", "normal").upper()


def _sqlite_pragmas(conn: Any) -> None:
    """WAL plus the chosen synchronous level, on a DB-API connection."""
    cur = conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA synchronous={SYNC}")
    cur.close()


def _durability_sqlite(how: str) -> str:
    return f"WAL, synchronous={SYNC}: {how}"


class Peer:
    name = "?"
    key = "?"
    durability = "?"
    has_search = False
    search_kind = ""
    recent_kind = ""
    # fixtures are bulk-loaded in chunks of this many messages (None: all in one call)
    bulk_chunk: int | None = 5_000

    def __init__(self) -> None:
        self.notes: list[str] = []
        # logical messages -> number of native records, per conversation (for recent-n)
        self._records: dict[str, list[int]] = {}

    # -- bookkeeping ---------------------------------------------------------------
    def _remember(self, conv: str, records: int) -> None:
        self._records.setdefault(conv, []).append(records)

    def _records_in_last(self, conv: str, n: int) -> int:
        counts = self._records.get(conv, [])
        return sum(counts[-n:]) if counts else n

    # -- interface -------------------------------------------------------------------
    def open(self, folder: Path) -> None:
        raise NotImplementedError

    async def append(self, conv: str, msg: dict) -> None:
        raise NotImplementedError

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        for m in msgs:
            await self.append(conv, m)

    async def read_all(self, conv: str) -> list:
        raise NotImplementedError

    async def iter_all(self, conv: str) -> Iterable:
        return await self.read_all(conv)

    async def read_recent(self, conv: str, n: int) -> list:
        raise NotImplementedError

    async def search(self, conv: str, query: str) -> Any:
        return NOT_SUPPORTED

    async def prepare_search(self, conv: str) -> None:
        """Anything a first search needs (raw rows build their index here)."""

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        self.close()

    def versions(self) -> dict[str, str]:
        return {}


def _dist_versions(*names: str) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


def _sessionkit_checkout() -> str:
    """The folder holding the sessionkit package this process measures (run.py puts the
    benchmark's own checkout first on the children's path)."""
    import sessionkit

    return str(Path(sessionkit.__file__).resolve().parent.parent)


# ----------------------------------------------------------------------------------
# sessionkit (public API only: open_store, session, append, get_history, history,
# search, close)
# ----------------------------------------------------------------------------------
class SessionKit(Peer):
    name = "sessionkit (SQLite)"
    key = "sessionkit"
    suffix = "store.db"
    has_search = True
    search_kind = "session.search (stemmed full-text, bm25)"
    recent_kind = "recent_history(0, min_messages=20): exactly the last 20"

    def open(self, folder: Path) -> None:
        import sessionkit as sk

        opts = {"durability": "full"} if SYNC == "FULL" else {}
        self.store = sk.open_store(str(folder / self.suffix), **opts)

    durability = (
        'WAL, synchronous=FULL (open_store(durability="full"))'
        if SYNC == "FULL"
        else "WAL, synchronous=NORMAL (its default)"
    )

    async def append(self, conv: str, msg: dict) -> None:
        self.store.session(conv).append(msg)

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        # Fixtures only (never timed): the public batched importer, sk.io.import_jsonl,
        # writes the same chain as appends would, 1,000 messages per transaction.
        import tempfile

        try:
            from sessionkit.io import import_jsonl
        except ImportError:
            return await super().bulk_load(conv, msgs)
        leaf = self.store.session(conv).latest_leaf()
        parent = leaf["id"] if leaf else None
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "fixture.jsonl"
            with open(path, "w") as fh:
                fh.write(json.dumps({"format": "sessionkit", "version": 1}) + "\n")
                for m in msgs:
                    line = {
                        "type": "message",
                        "session_id": conv,
                        "parent_id": parent,
                        "created_at": m["createdAt"],
                        "message": m,
                    }
                    fh.write(json.dumps(line) + "\n")
                    parent = m["id"]
            import_jsonl(self.store, path)

    async def read_all(self, conv: str) -> list:
        return self.store.session(conv).get_history()

    async def iter_all(self, conv: str) -> Iterator:
        return self.store.session(conv).history()

    async def read_recent(self, conv: str, n: int) -> list:
        # The window API: the longest suffix within max_bytes, never fewer than
        # min_messages; with max_bytes=0 that is exactly the last n messages.
        return self.store.session(conv).recent_history(0, min_messages=n).messages

    async def search(self, conv: str, query: str) -> Any:
        return self.store.session(conv).search(query, limit=10)

    def close(self) -> None:
        self.store.close()

    def versions(self) -> dict[str, str]:
        return {**_dist_versions("sessionkit"), "imported from": _sessionkit_checkout()}


class SessionKitDuckDB(SessionKit):
    name = "sessionkit (DuckDB)"
    key = "sessionkit-duckdb"
    suffix = "store.duckdb"

    durability = "DuckDB WAL, fdatasync at each commit (no setting)"

    def versions(self) -> dict[str, str]:
        return {**_dist_versions("sessionkit", "duckdb"), "imported from": _sessionkit_checkout()}


# ----------------------------------------------------------------------------------
# Raw sqlite3: the physical limit. Minimal table, one INSERT per transaction.
# ----------------------------------------------------------------------------------
class RawSQLite(Peer):
    name = "raw sqlite3 (physical limit)"
    key = "sqlite3"
    durability = _durability_sqlite("PRAGMAs on the connection")
    has_search = True
    search_kind = "FTS5 (porter), bm25 top 10, index built after the load"
    recent_kind = "ORDER BY seq DESC LIMIT 20"

    def open(self, folder: Path) -> None:
        self.conn = sqlite3.connect(str(folder / "raw.db"), isolation_level=None)
        _sqlite_pragmas(self.conn)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS msgs (conv TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL)"
        )
        self.conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS msgs_conv_seq ON msgs(conv, seq)")
        self.seq: dict[str, int] = {}
        for conv, seq in self.conn.execute("SELECT conv, max(seq) FROM msgs GROUP BY conv"):
            self.seq[conv] = seq

    def _next(self, conv: str) -> int:
        s = self.seq.get(conv, -1) + 1
        self.seq[conv] = s
        return s

    async def append(self, conv: str, msg: dict) -> None:
        # autocommit connection: each INSERT is its own transaction
        self.conn.execute(
            "INSERT INTO msgs (conv, seq, data) VALUES (?, ?, ?)",
            (conv, self._next(conv), json.dumps(msg)),
        )

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany(
            "INSERT INTO msgs (conv, seq, data) VALUES (?, ?, ?)",
            [(conv, self._next(conv), json.dumps(m)) for m in msgs],
        )
        self.conn.execute("COMMIT")

    async def read_all(self, conv: str) -> list:
        rows = self.conn.execute("SELECT data FROM msgs WHERE conv = ? ORDER BY seq", (conv,))
        return [json.loads(d) for (d,) in rows]

    async def iter_all(self, conv: str) -> Iterator:
        rows = self.conn.execute("SELECT data FROM msgs WHERE conv = ? ORDER BY seq", (conv,))
        return (json.loads(d) for (d,) in rows)

    async def read_recent(self, conv: str, n: int) -> list:
        rows = self.conn.execute("SELECT data FROM msgs WHERE conv = ? ORDER BY seq DESC LIMIT ?", (conv, n)).fetchall()
        return [json.loads(d) for (d,) in reversed(rows)]

    async def prepare_search(self, conv: str) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS msgs_fts USING fts5(text, tokenize='porter unicode61')")
        rows = self.conn.execute("SELECT rowid, data FROM msgs").fetchall()
        self.conn.executemany(
            "INSERT INTO msgs_fts (rowid, text) VALUES (?, ?)",
            ((rowid, workload.text_of(json.loads(d))) for rowid, d in rows),
        )
        self.conn.execute("COMMIT")

    async def search(self, conv: str, query: str) -> Any:
        match = " AND ".join('"' + w.replace('"', '""') + '"' for w in query.split())
        rows = self.conn.execute(
            "SELECT m.data, snippet(msgs_fts, 0, '[', ']', '...', 12), bm25(msgs_fts) AS score"
            " FROM msgs_fts JOIN msgs m ON m.rowid = msgs_fts.rowid"
            " WHERE msgs_fts MATCH ? AND m.conv = ? ORDER BY score LIMIT 10",
            (match, conv),
        ).fetchall()
        return [(json.loads(d), snip, score) for d, snip, score in rows]

    def close(self) -> None:
        self.conn.close()

    def versions(self) -> dict[str, str]:
        return {"sqlite": sqlite3.sqlite_version}


# ----------------------------------------------------------------------------------
# Raw DuckDB: the other physical limit. Minimal table, one INSERT per transaction.
# ----------------------------------------------------------------------------------
class RawDuckDB(Peer):
    name = "raw DuckDB (physical limit)"
    key = "duckdb"
    durability = "DuckDB WAL, fdatasync at each commit (no setting)"
    has_search = True
    search_kind = (
        "ILIKE scan for every word over the stored JSON, tool output included, no ranking "
        "(the fts extension is not installable offline)"
    )
    recent_kind = "ORDER BY seq DESC LIMIT 20"

    def open(self, folder: Path) -> None:
        import duckdb

        self.conn = duckdb.connect(str(folder / "raw.duckdb"))
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS msgs (conv VARCHAR NOT NULL, seq INTEGER NOT NULL, data VARCHAR NOT NULL)"
        )
        self.seq = dict(self.conn.execute("SELECT conv, max(seq) FROM msgs GROUP BY conv").fetchall())

    def _next(self, conv: str) -> int:
        s = self.seq.get(conv, -1) + 1
        self.seq[conv] = s
        return s

    async def append(self, conv: str, msg: dict) -> None:
        self.conn.execute("INSERT INTO msgs VALUES (?, ?, ?)", (conv, self._next(conv), json.dumps(msg)))

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        self.conn.execute("BEGIN")
        for i in range(0, len(msgs), 2000):
            chunk = msgs[i : i + 2000]
            self.conn.executemany(
                "INSERT INTO msgs VALUES (?, ?, ?)",
                [(conv, self._next(conv), json.dumps(m)) for m in chunk],
            )
        self.conn.execute("COMMIT")

    def _rows(self, sql: str, params: tuple) -> Iterator[str]:
        cur = self.conn.execute(sql, params)
        while True:
            batch = cur.fetchmany(2048)
            if not batch:
                return
            for (d,) in batch:
                yield d

    async def read_all(self, conv: str) -> list:
        rows = self.conn.execute("SELECT data FROM msgs WHERE conv = ? ORDER BY seq", (conv,)).fetchall()
        return [json.loads(d) for (d,) in rows]

    async def iter_all(self, conv: str) -> Iterator:
        return (json.loads(d) for d in self._rows("SELECT data FROM msgs WHERE conv = ? ORDER BY seq", (conv,)))

    async def read_recent(self, conv: str, n: int) -> list:
        rows = self.conn.execute("SELECT data FROM msgs WHERE conv = ? ORDER BY seq DESC LIMIT ?", (conv, n)).fetchall()
        return [json.loads(d) for (d,) in reversed(rows)]

    async def search(self, conv: str, query: str) -> Any:
        words = query.split()
        where = " AND ".join("data ILIKE ?" for _ in words)
        rows = self.conn.execute(
            f"SELECT data FROM msgs WHERE conv = ? AND {where} ORDER BY seq LIMIT 10",
            (conv, *[f"%{w}%" for w in words]),
        ).fetchall()
        return [json.loads(d) for (d,) in rows]

    def close(self) -> None:
        self.conn.close()

    def versions(self) -> dict[str, str]:
        return _dist_versions("duckdb")


# ----------------------------------------------------------------------------------
# OpenAI Agents SDK: SQLiteSession and AdvancedSQLiteSession
# ----------------------------------------------------------------------------------
def _openai_items(msg: dict) -> list[dict]:
    text = workload.text_of(msg)
    if msg["role"] == "user":
        return [{"role": "user", "content": text}]
    items: list[dict] = [
        {
            "id": "msg_" + msg["id"],
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    ]
    tool = workload.tool_part(msg)
    if tool is not None:
        items.append(
            {
                "type": "function_call",
                "call_id": tool["toolCallId"],
                "name": tool["type"][len("tool-") :],
                "arguments": json.dumps(tool["input"]),
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": tool["toolCallId"],
                "output": json.dumps(tool["output"]),
            }
        )
    return items


class OpenAISQLite(Peer):
    name = "OpenAI Agents SQLiteSession"
    key = "openai-sqlite"
    durability = _durability_sqlite(
        "the SDK sets WAL; it has no option for synchronous (default FULL), so a "
        "subclass extends its private _configure_connection"
    )
    recent_kind = "get_items(limit=k)"
    _cls_name = "SQLiteSession"

    def _session_class(self):
        from agents import SQLiteSession

        class Session(SQLiteSession):
            # The SDK enables WAL on each connection it opens; this hook is where it does
            # so, and the only place to add the synchronous level (a private method).
            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                SQLiteSession._configure_connection(conn)
                conn.execute(f"PRAGMA synchronous={SYNC}")

        return Session

    def open(self, folder: Path) -> None:
        self.cls = self._session_class()
        self.db = str(folder / "agents.db")
        self.sessions: dict[str, Any] = {}

    def _make(self, conv: str):
        return self.cls(conv, self.db)

    def session(self, conv: str):
        s = self.sessions.get(conv)
        if s is None:
            s = self.sessions[conv] = self._make(conv)
        return s

    def release(self, conv: str) -> None:
        s = self.sessions.pop(conv, None)
        if s is not None:
            s.close()

    async def append(self, conv: str, msg: dict) -> None:
        items = _openai_items(msg)
        await self.session(conv).add_items(items)
        self._remember(conv, len(items))

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        s = self.session(conv)
        for i in range(0, len(msgs), 1000):
            items: list[dict] = []
            for m in msgs[i : i + 1000]:
                its = _openai_items(m)
                self._remember(conv, len(its))
                items.extend(its)
            await s.add_items(items)

    async def read_all(self, conv: str) -> list:
        return await self.session(conv).get_items()

    async def read_recent(self, conv: str, n: int) -> list:
        return await self.session(conv).get_items(limit=self._records_in_last(conv, n))

    def close(self) -> None:
        for conv in list(self.sessions):
            self.release(conv)

    def versions(self) -> dict[str, str]:
        return _dist_versions("openai-agents")


class OpenAIAdvanced(OpenAISQLite):
    name = "OpenAI Agents AdvancedSQLiteSession"
    key = "openai-advanced"
    has_search = True
    search_kind = "find_turns_by_content: LIKE substring over user turns only"

    def _session_class(self):
        from agents.extensions.memory import AdvancedSQLiteSession

        class Session(AdvancedSQLiteSession):
            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                AdvancedSQLiteSession._configure_connection(conn)
                conn.execute(f"PRAGMA synchronous={SYNC}")

        return Session

    def _make(self, conv: str):
        return self.cls(session_id=conv, db_path=self.db, create_tables=True)

    async def search(self, conv: str, query: str) -> Any:
        return await self.session(conv).find_turns_by_content(query)


# ----------------------------------------------------------------------------------
# LangChain: SQLChatMessageHistory (langchain-community) over a SQLAlchemy engine
# ----------------------------------------------------------------------------------
def _lc_messages(msg: dict) -> list:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    text = workload.text_of(msg)
    if msg["role"] == "user":
        return [HumanMessage(content=text, id=msg["id"])]
    tool = workload.tool_part(msg)
    if tool is None:
        return [AIMessage(content=text, id=msg["id"])]
    name = tool["type"][len("tool-") :]
    return [
        AIMessage(
            content=text,
            id=msg["id"],
            tool_calls=[{"name": name, "args": tool["input"], "id": tool["toolCallId"]}],
        ),
        ToolMessage(
            content=json.dumps(tool["output"]),
            tool_call_id=tool["toolCallId"],
            name=name,
            id=msg["id"] + "-result",
        ),
    ]


class LangChainSQL(Peer):
    name = "LangChain SQLChatMessageHistory"
    key = "langchain"
    durability = _durability_sqlite("connect event on the SQLAlchemy engine it is given")
    recent_kind = "no windowed read: .messages then the last k"

    def open(self, folder: Path) -> None:
        import warnings

        from sqlalchemy import create_engine, event

        warnings.filterwarnings("ignore", category=DeprecationWarning)
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        self.cls = SQLChatMessageHistory
        self.engine = create_engine(f"sqlite:///{folder / 'langchain.db'}")
        event.listen(self.engine, "connect", lambda c, r: _sqlite_pragmas(c))
        self.histories: dict[str, Any] = {}

    def session(self, conv: str):
        h = self.histories.get(conv)
        if h is None:
            h = self.histories[conv] = self.cls(session_id=conv, connection=self.engine)
        return h

    def release(self, conv: str) -> None:
        self.histories.pop(conv, None)

    async def append(self, conv: str, msg: dict) -> None:
        records = _lc_messages(msg)
        self.session(conv).add_messages(records)
        self._remember(conv, len(records))

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        h = self.session(conv)
        for i in range(0, len(msgs), 1000):
            records = []
            for m in msgs[i : i + 1000]:
                r = _lc_messages(m)
                self._remember(conv, len(r))
                records.extend(r)
            h.add_messages(records)

    async def read_all(self, conv: str) -> list:
        return self.session(conv).messages

    async def read_recent(self, conv: str, n: int) -> list:
        return self.session(conv).messages[-self._records_in_last(conv, n) :]

    def close(self) -> None:
        self.histories.clear()
        self.engine.dispose()

    def versions(self) -> dict[str, str]:
        return _dist_versions("langchain-community", "langchain-core", "sqlalchemy")


# ----------------------------------------------------------------------------------
# LangGraph: a minimal StateGraph over the add_messages reducer, SqliteSaver checkpoints
# ----------------------------------------------------------------------------------
class LangGraphSqlite(Peer):
    name = "LangGraph SqliteSaver"
    key = "langgraph"
    durability = _durability_sqlite(
        "SqliteSaver.setup() sets WAL; synchronous on the connection we pass it; "
        'graph durability "async", its default, saved before invoke returns'
    )
    recent_kind = "no windowed read: get_state() then the last k"

    def open(self, folder: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.conn = sqlite3.connect(str(folder / "langgraph.db"), check_same_thread=False)
        # SqliteSaver.setup() turns WAL on itself; the synchronous level is ours to set
        # on the connection we hand it.
        self.conn.execute(f"PRAGMA synchronous={SYNC}")
        saver = SqliteSaver(self.conn)

        def agent(state: MessagesState) -> dict:
            # The model call would be here; the user's message is already in state.
            return {}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        self.graph = builder.compile(checkpointer=saver)

    # one invocation per bulk load: every invocation re-serializes the whole state
    bulk_chunk = None

    def _cfg(self, conv: str) -> dict:
        return {"configurable": {"thread_id": conv}}

    async def append(self, conv: str, msg: dict) -> None:
        records = _lc_messages(msg)
        self.graph.invoke({"messages": records}, self._cfg(conv))
        self._remember(conv, len(records))

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        # One invocation with every message: the same final state, two checkpoints.
        records = []
        for m in msgs:
            r = _lc_messages(m)
            self._remember(conv, len(r))
            records.extend(r)
        self.graph.invoke({"messages": records}, self._cfg(conv))

    async def read_all(self, conv: str) -> list:
        return self.graph.get_state(self._cfg(conv)).values.get("messages", [])

    async def read_recent(self, conv: str, n: int) -> list:
        msgs = self.graph.get_state(self._cfg(conv)).values.get("messages", [])
        return msgs[-self._records_in_last(conv, n) :]

    def close(self) -> None:
        self.conn.close()

    def versions(self) -> dict[str, str]:
        return _dist_versions("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint")


# ----------------------------------------------------------------------------------
# Google ADK: DatabaseSessionService over sqlite+aiosqlite, append_event per message
# ----------------------------------------------------------------------------------
class GoogleADK(Peer):
    name = "Google ADK DatabaseSessionService"
    key = "adk"
    durability = _durability_sqlite(
        "connect event on the service's SQLAlchemy engine; ADK's own default is a "
        "rollback journal with synchronous=FULL"
    )
    recent_kind = "get_session(config=GetSessionConfig(num_recent_events=20))"
    APP, USER = "bench", "user"

    def open(self, folder: Path) -> None:
        import logging

        from sqlalchemy import event

        logging.getLogger("google_adk").setLevel(logging.ERROR)
        from google.adk.sessions import DatabaseSessionService

        self.svc = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{folder / 'adk.db'}")
        # ADK adds its own connect listener (foreign_keys=ON); ours adds WAL and synchronous.
        event.listen(self.svc.db_engine.sync_engine, "connect", lambda c, r: _sqlite_pragmas(c))
        self.sessions: dict[str, Any] = {}

    def _event(self, msg: dict, timestamp: float | None = None):
        from google.adk.events import Event
        from google.genai import types

        parts = [types.Part(text=workload.text_of(msg))]
        tool = workload.tool_part(msg)
        if tool is not None:
            name = tool["type"][len("tool-") :]
            parts.append(
                types.Part(function_call=types.FunctionCall(id=tool["toolCallId"], name=name, args=tool["input"]))
            )
            parts.append(
                types.Part(
                    function_response=types.FunctionResponse(id=tool["toolCallId"], name=name, response=tool["output"])
                )
            )
        role = "user" if msg["role"] == "user" else "model"
        kw = {} if timestamp is None else {"timestamp": timestamp}
        return Event(
            id=msg["id"],
            author="user" if role == "user" else "assistant",
            invocation_id="inv-" + msg["id"],
            content=types.Content(role=role, parts=parts),
            **kw,
        )

    async def session(self, conv: str):
        s = self.sessions.get(conv)
        if s is None:
            s = await self.svc.get_session(app_name=self.APP, user_id=self.USER, session_id=conv)
            if s is None:
                s = await self.svc.create_session(app_name=self.APP, user_id=self.USER, session_id=conv)
            self.sessions[conv] = s
        return s

    def release(self, conv: str) -> None:
        self.sessions.pop(conv, None)

    async def append(self, conv: str, msg: dict) -> None:
        s = await self.session(conv)
        await self.svc.append_event(s, self._event(msg))

    async def bulk_load(self, conv: str, msgs: list[dict]) -> None:
        # The service has no batch append. To build fixtures in reasonable time the rows
        # are written through ADK's own ORM model (StorageEvent.from_event, the same row
        # append_event writes) in one transaction. Never used for a timed figure.
        from google.adk.sessions.schemas.v1 import StorageEvent

        s = await self.session(conv)
        ts = max(time.time(), getattr(self, "_last_ts", 0.0))
        async with self.svc.database_session_factory() as db:
            for m in msgs:
                ts += 1e-5  # ADK orders events by timestamp: keep them strictly increasing
                db.add(StorageEvent.from_event(s, self._event(m, timestamp=ts)))
            await db.commit()
        self._last_ts = ts
        self.release(conv)

    async def read_all(self, conv: str) -> list:
        s = await self.svc.get_session(app_name=self.APP, user_id=self.USER, session_id=conv)
        return s.events

    async def read_recent(self, conv: str, n: int) -> list:
        from google.adk.sessions.base_session_service import GetSessionConfig

        s = await self.svc.get_session(
            app_name=self.APP,
            user_id=self.USER,
            session_id=conv,
            config=GetSessionConfig(num_recent_events=n),
        )
        return s.events

    async def aclose(self) -> None:
        self.sessions.clear()
        await self.svc.close()

    def versions(self) -> dict[str, str]:
        return _dist_versions("google-adk", "sqlalchemy", "aiosqlite")


PEERS: dict[str, type[Peer]] = {
    cls.key: cls
    for cls in (
        SessionKit,
        SessionKitDuckDB,
        RawSQLite,
        RawDuckDB,
        OpenAISQLite,
        OpenAIAdvanced,
        LangChainSQL,
        LangGraphSqlite,
        GoogleADK,
    )
}
