"""Stores: :func:`open_store` picks the engine from the target and opens it.

``*.db``, ``*.sqlite``, ``*.sqlite3``, ``sqlite:///path``, ``:memory:`` -> SQLite
(the default); ``*.duckdb``, ``duckdb:///path``, ``duckdb:///:memory:`` -> DuckDB;
``postgresql://...`` -> PostgreSQL. Engines are imported only when used.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ._datasets import DatasetInfo, DatasetItem
from ._embeddings import SimilarSession
from ._facets import Coordination, SessionRecords, StoreRunLog, StoreSettings
from ._labels import Label
from ._queues import QueueInfo, QueueProgress, QueueUnit, Rubric
from ._scoring import LEVELS as SCORE_LEVELS
from ._scoring import Score, Unit, scorer, scorer_id
from ._session import Session
from ._store import Store
from ._values import (
    LATEST,
    SCAN_KINDS,
    AppendResult,
    Capabilities,
    ChangeEvent,
    Compaction,
    CompactionContext,
    CompactionResult,
    CompactionSpan,
    PathView,
    RecentHistory,
    RunRecord,
    SessionInfo,
    Tree,
    TreeCompaction,
    TreeNode,
)
from .compaction import create_compact_function
from .search import SearchHit
from .sql.views import VIEW_COLUMNS

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = [
    "open_store",
    "LATEST",
    "Store",
    "Session",
    "AppendResult",
    "ChangeEvent",
    "Compaction",
    "CompactionContext",
    "CompactionResult",
    "Label",
    "DatasetInfo",
    "DatasetItem",
    "Rubric",
    "QueueInfo",
    "QueueUnit",
    "QueueProgress",
    "Score",
    "Unit",
    "scorer",
    "scorer_id",
    "SCORE_LEVELS",
    "RecentHistory",
    "RunRecord",
    "SessionInfo",
    "TreeNode",
    "Tree",
    "TreeCompaction",
    "PathView",
    "CompactionSpan",
    "Capabilities",
    "StoreRunLog",
    "SessionRecords",
    "Coordination",
    "StoreSettings",
    "SCAN_KINDS",
    "VIEW_COLUMNS",
    "SearchHit",
    "SimilarSession",
    "create_compact_function",
]

_SQLITE_EXT = (".db", ".sqlite", ".sqlite3")
_DUCKDB_EXT = (".duckdb", ".ddb")


def _resolve(target: Any) -> tuple[str, str]:
    """``(engine, location)`` for a target path or URL; ValueError when it names no engine."""
    if isinstance(target, PurePath):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise TypeError(f"store target must be a str or a path, got {type(target).__name__}")
    if target == ":memory:":
        return "sqlite", ":memory:"
    lower = target.lower()
    if lower.startswith("sqlite:///"):
        return "sqlite", target[len("sqlite:///") :] or ":memory:"
    if lower.startswith("duckdb:///"):
        return "duckdb", target[len("duckdb:///") :] or ":memory:"
    if lower.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        return "postgresql", target
    if lower.endswith(_SQLITE_EXT):
        return "sqlite", target
    if lower.endswith(_DUCKDB_EXT):
        return "duckdb", target
    raise ValueError(
        f"cannot tell the engine for store target {target!r}: use a path ending in "
        ".db/.sqlite/.sqlite3 (SQLite) or .duckdb (DuckDB), ':memory:', or a "
        "sqlite:///, duckdb:/// or postgresql:// URL"
    )


def _require_existing(target: Any, options: dict[str, Any]) -> None:
    """ValueError unless ``target`` already holds a sessionkit store (``create=False``).

    Path checks come first, so a missing file is reported as such whatever its name. Then
    the engine's ``probe`` asks, without creating anything (opening a store creates its
    tables): SQLite and DuckDB open the file read-only, PostgreSQL looks the meta table up
    in the catalog. Where a probe cannot decide (not a database at all, no answer from the
    server, a file another process holds), it answers True and opening names the problem.
    """
    shown = os.fspath(target) if isinstance(target, PurePath) else target
    local = None  # the file a path target names (None: a server URL)
    if isinstance(shown, str):
        lower = shown.lower()
        if lower.startswith(("sqlite:///", "duckdb:///")):
            local = shown[len("sqlite:///") :] or ":memory:"
        elif "://" not in shown:
            local = shown
    if local is not None:
        if local == ":memory:":
            raise ValueError(
                f"{shown!r} is an in-memory store, empty in every new process: create=False opens only "
                "a store that exists already"
            )
        if os.path.isdir(local):
            raise ValueError(f"{shown!r} is a folder, not a store file")
        if not os.path.exists(local):
            raise ValueError(f"no store at {shown!r}: the file does not exist")
    engine, location = _resolve(target)
    if engine == "sqlite":
        from .engines.sqlite.probe import holds_store
    elif engine == "duckdb":
        from .engines.duckdb.probe import holds_store
    else:
        from .engines.postgresql.probe import holds_store
    if not holds_store(location, options):
        where = "schema" if engine == "postgresql" else "file"
        raise ValueError(f"{shown!r} is not a sessionkit store (the {where} has no sessionkit_ tables)")


def open_store(
    target: Any = ":memory:",
    *,
    max_message_bytes: int | None = None,
    reserved_metadata_keys: Any = (),
    durability: str = "normal",
    create: bool = True,
    sql_memory_limit: str | None = None,
    **engine_options: Any,
) -> Store:
    """Open (or create) a store.

    Options: ``max_message_bytes`` (larger appends raise ``MessageTooLarge``),
    ``reserved_metadata_keys`` (removed from client-sourced appends),
    ``durability`` (``"normal"``: WAL with synchronous=NORMAL; ``"full"``: fsync on
    every commit), ``create`` (``False``: open only a store that already exists; a
    target holding none -- a missing file, another program's database, an empty
    PostgreSQL schema, ``:memory:`` -- raises ``ValueError`` naming it, and nothing
    is created or changed), ``sql_memory_limit`` (the memory a ``store.sql`` query may
    use, a DuckDB size such as ``"1GB"``; more raises ``QueryMemoryExceeded``; on a DuckDB
    store, the database's own limit). Engine-specific options pass through.

    >>> store = open_store()            # in-memory SQLite
    >>> store = open_store("chats.db")  # a SQLite file
    >>> store = open_store("chats.db", create=False)  # only if it is already a store
    """
    if sql_memory_limit is not None:
        from .sql.query import memory_limit

        memory_limit(sql_memory_limit)  # (a bad value is refused before anything is opened)
    if not create:
        _require_existing(target, engine_options)
    engine, location = _resolve(target)
    if max_message_bytes is not None and (
        not isinstance(max_message_bytes, int) or isinstance(max_message_bytes, bool) or max_message_bytes < 1
    ):
        raise ValueError(f"max_message_bytes must be a positive int, got {max_message_bytes!r}")
    if sql_memory_limit is not None:
        engine_options["sql_memory_limit"] = sql_memory_limit
    if isinstance(reserved_metadata_keys, str):
        reserved_metadata_keys = [reserved_metadata_keys]
    eng: Engine
    if engine == "sqlite":
        from .engines.sqlite.engine import SQLiteEngine

        eng = SQLiteEngine(location, durability=durability, **engine_options)
    elif engine == "duckdb":
        from .engines.duckdb.engine import DuckDBEngine

        eng = DuckDBEngine(location, durability=durability, **engine_options)
    else:
        from .engines.postgresql.engine import PostgresEngine

        eng = PostgresEngine(location, durability=durability, **engine_options)
    return Store(eng, max_message_bytes=max_message_bytes, reserved_metadata_keys=reserved_metadata_keys)
