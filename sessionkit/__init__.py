"""sessionkit: conversation trees for AI agents, in SQLite, DuckDB or PostgreSQL, made for Jupyter.

>>> import sessionkit as sk
>>> store = sk.open_store("chats.db")
>>> s = store.session("demo")
>>> s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})

The store layer loads nothing heavy: agents (litellm), analysis (pandas, DuckDB),
widgets (ipywidgets) and the server (Starlette) load on first use, and so does
``sk.aio``, the async API for asyncio applications.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import (
    DatasetNotFound,
    GuardrailTripped,
    InvalidDataset,
    InvalidLabel,
    InvalidMessage,
    InvalidQueue,
    MaxStepsExceeded,
    MessageNotFound,
    MessageTooLarge,
    MissingDependency,
    ModelError,
    QueryMemoryExceeded,
    QueryTimeout,
    QueueNotFound,
    RunFailed,
    RunInterrupted,
    RunTimeout,
    SchemaVersionError,
    ScorerFailed,
    SessionKitError,
    SessionNotFound,
    StoreClosed,
    StoreCorrupt,
    StoreLocked,
    UsageError,
)
from .store import (
    LATEST,
    AppendResult,
    ChangeEvent,
    Compaction,
    CompactionContext,
    CompactionResult,
    DatasetInfo,
    DatasetItem,
    Label,
    QueueInfo,
    QueueProgress,
    QueueUnit,
    RecentHistory,
    Rubric,
    RunRecord,
    Score,
    SearchHit,
    Session,
    SessionInfo,
    Store,
    TreeNode,
    create_compact_function,
    open_store,
)

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself)
_LAZY = {
    "Agent": ("sessionkit.agent", "Agent"),
    "RunResult": ("sessionkit.agent", "RunResult"),
    "HistoryPolicy": ("sessionkit.agent", "HistoryPolicy"),
    "RunController": ("sessionkit.agent", "RunController"),
    "LiteLLMModel": ("sessionkit.agent", "LiteLLMModel"),
    "create_session": ("sessionkit.agent", "create_session"),
    "SessionStore": ("sessionkit.agent", "SessionStore"),
    "FileSessionStore": ("sessionkit.agent", "FileSessionStore"),
    "aio": ("sessionkit.aio", None),
    "testing": ("sessionkit.testing", None),
    "io": ("sessionkit.io", None),
    "plot": ("sessionkit.analysis.plot", None),
    "widgets": ("sessionkit.widgets", None),
    "server": ("sessionkit.server", None),
    "prototyping": ("sessionkit.prototyping", None),
    "scorers": ("sessionkit.scorers", None),
    "analysis": ("sessionkit.analysis", None),
    "capture": ("sessionkit.integrations.litellm", "capture"),
}

__all__ = [
    "__version__",
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
    "RecentHistory",
    "RunRecord",
    "Score",
    "SearchHit",
    "SessionInfo",
    "TreeNode",
    "create_compact_function",
    "SessionKitError",
    "InvalidMessage",
    "MessageNotFound",
    "SessionNotFound",
    "StoreClosed",
    "StoreLocked",
    "MessageTooLarge",
    "InvalidLabel",
    "InvalidDataset",
    "DatasetNotFound",
    "InvalidQueue",
    "QueueNotFound",
    "SchemaVersionError",
    "StoreCorrupt",
    "ScorerFailed",
    "UsageError",
    "MissingDependency",
    "RunFailed",
    "ModelError",
    "MaxStepsExceeded",
    "RunTimeout",
    "QueryTimeout",
    "QueryMemoryExceeded",
    "RunInterrupted",
    "GuardrailTripped",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'sessionkit' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
