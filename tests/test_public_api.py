"""The public surface is pinned, and importing the store loads nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sessionkit as sk

PINNED = {
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
    "QueryTimeout",
    "QueryMemoryExceeded",
    "MissingDependency",
    "RunFailed",
    "ModelError",
    "MaxStepsExceeded",
    "RunTimeout",
    "RunInterrupted",
    "GuardrailTripped",
    "Agent",
    "HistoryPolicy",
    "LiteLLMModel",
    "RunResult",
    "RunController",
    "create_session",
    "SessionStore",
    "FileSessionStore",
    "aio",
    "testing",
    "io",
    "plot",
    "widgets",
    "server",
    "prototyping",
    "scorers",
    "analysis",
    "capture",
}


def test_all_is_pinned():
    assert set(sk.__all__) == PINNED
    assert len(sk.__all__) == len(set(sk.__all__))


def test_error_tree():
    root = sk.SessionKitError
    for name in (
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
        "QueryTimeout",
        "QueryMemoryExceeded",
        "MissingDependency",
        "RunFailed",
        "ModelError",
        "MaxStepsExceeded",
        "RunTimeout",
        "RunInterrupted",
        "GuardrailTripped",
    ):
        assert issubclass(getattr(sk, name), root), name
    assert issubclass(sk.InvalidMessage, ValueError)
    assert issubclass(sk.InvalidLabel, ValueError)
    assert issubclass(sk.InvalidDataset, ValueError)
    assert issubclass(sk.DatasetNotFound, LookupError)
    assert issubclass(sk.InvalidQueue, ValueError)
    assert issubclass(sk.QueueNotFound, LookupError)
    assert issubclass(sk.MessageNotFound, LookupError)
    assert issubclass(sk.SessionNotFound, LookupError)
    assert issubclass(sk.MissingDependency, ImportError)
    for name in ("ModelError", "MaxStepsExceeded", "RunTimeout", "RunInterrupted", "GuardrailTripped"):
        assert issubclass(getattr(sk, name), sk.RunFailed)
    err = sk.ModelError("x", run_id="r1")
    assert err.run_id == "r1"
    tripped = sk.GuardrailTripped("blocked", run_id="r2", reason="card number", guardrail="no_cards")
    assert (tripped.run_id, tripped.reason, tripped.guardrail, str(tripped)) == (
        "r2",
        "card number",
        "no_cards",
        "blocked",
    )


HEAVY = [
    "pandas",
    "duckdb",
    "litellm",
    "ipywidgets",
    "starlette",
    "anywidget",
    "matplotlib",
    "numpy",
    "google.adk",
    "datasets",
]


def test_lite_llm_model_resolves_lazily_without_importing_litellm():
    code = (
        "import sys, json, sessionkit as sk\n"
        "m = sk.LiteLLMModel('gpt-4o-mini', temperature=0)\n"
        "from sessionkit.agent.models import LiteLLMModel\n"
        "print(json.dumps([sk.LiteLLMModel is LiteLLMModel, m.name, m.options, 'litellm' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [True, "gpt-4o-mini", {"temperature": 0}, False]


def test_import_loads_nothing_heavy():
    code = (
        "import sys, json, sessionkit, sessionkit.store, sessionkit.messages\n"
        "s = sessionkit.open_store(); x = s.session('a')\n"
        "x.append({'id': 'a', 'role': 'user', 'parts': [{'type': 'text', 'text': 'hi'}]})\n"
        "x.search('hi'); x.get_history()\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_latest_sentinel():
    assert repr(sk.LATEST) == "sessionkit.LATEST"
    import copy
    import pickle

    assert copy.deepcopy(sk.LATEST) is sk.LATEST
    assert pickle.loads(pickle.dumps(sk.LATEST)) is sk.LATEST


# The sub-packages' public names, pinned like the top level's: adding or removing one is a
# decision about the contract, made here on purpose.
SUBPACKAGES = {
    "sessionkit.store": {
        "Score",
        "Unit",
        "scorer",
        "scorer_id",
        "SCORE_LEVELS",
        "AppendResult",
        "Capabilities",
        "ChangeEvent",
        "Compaction",
        "CompactionContext",
        "CompactionResult",
        "CompactionSpan",
        "Coordination",
        "LATEST",
        "Label",
        "DatasetInfo",
        "DatasetItem",
        "Rubric",
        "QueueInfo",
        "QueueUnit",
        "QueueProgress",
        "PathView",
        "RecentHistory",
        "RunRecord",
        "SCAN_KINDS",
        "SearchHit",
        "Session",
        "SessionInfo",
        "SessionRecords",
        "SimilarSession",
        "Store",
        "StoreRunLog",
        "StoreSettings",
        "Tree",
        "TreeCompaction",
        "TreeNode",
        "VIEW_COLUMNS",
        "create_compact_function",
        "open_store",
    },
    "sessionkit.agent": {
        "ROOT",
        "Agent",
        "ChatModel",
        "EVENT_KINDS",
        "ExternalSession",
        "FileSessionStore",
        "HistoryPolicy",
        "LiteLLMModel",
        "MemoryRunLog",
        "ModelReply",
        "ReasoningDelta",
        "RunController",
        "RunRecord",
        "RunResult",
        "SessionStore",
        "TextDelta",
        "Tool",
        "ToolCall",
        "as_tool",
        "create_session",
        "load_agent",
    },
    "sessionkit.io": {
        "MalformedInput",
        "Progress",
        "SessionMergeWarning",
        "chat_to_messages",
        "export_jsonl",
        "export_parquet",
        "import_parquet",
        "copy_store",
        "import_hh",
        "import_jsonl",
        "import_oasst",
        "import_openai",
        "import_openai_agents",
        "import_langgraph",
        "import_adk",
        "import_claude_code",
        "import_swe_agent",
        "import_inspect",
        "import_otel",
        "to_hf_dataset",
        "detect_format",
        "FORMATS",
    },
    "sessionkit.analysis": {
        "Agreement",
        "agreement",
        "D1_COLUMNS",
        "TABLES",
        "StoreData",
        "arrow_table",
        "events_df",
        "messages_df",
        "rows_df",
        "runs_df",
        "sql",
        "to_pandas",
        "overview_data",
        "OVERVIEW_SQL",
    },
    "sessionkit.aio": {"AsyncSession", "AsyncStore", "open_store"},
    "sessionkit.analysis.plot": {
        "branch_fanout",
        "cost_per_run",
        "tokens_along_path",
        "tool_calls",
        "messages_over_time",
        "tokens_by_model",
        "cost_by_model",
        "latency",
        "tool_errors",
        "label_distribution",
        "rating_distribution",
        "overview",
    },
    "sessionkit.widgets": {
        "BranchTree",
        "CompareView",
        "ExperimentView",
        "QueueView",
        "RunView",
        "StoreBrowser",
        "Transcript",
        "snapshot",
        "widgets_available",
    },
    "sessionkit.prototyping": {
        "COMPARISON_COLUMNS",
        "EXPERIMENT_COLUMNS",
        "REPLAY_COLUMNS",
        "Comparison",
        "Experiment",
        "Replay",
        "compare",
        "experiment",
        "replay",
    },
    # serve: what `sessionkit serve` runs; serve_view: what `sessionkit view` runs
    "sessionkit.server": {
        "SessionServer",
        "create_app",
        "serve",
        "create_view_app",
        "serve_view",
        "is_loopback",
        "create_collect_app",
        "serve_collect",
        "HostGuard",
    },
    "sessionkit.widgets.viewer": {
        "SORT_COLUMNS",
        "PAGE_SIZE",
        "ASSETS",
        "asset",
        "modules_script",
        "sessions_page",
        "search_hits",
        "session_state",
        "path_state",
        "message_views",
        "run_events",
        "session_timeline",
        "similar_sessions",
        "parse_column",
        "read_columns",
        "check_columns",
        "page_html",
        "write_bundle",
        "queue_answer",
        "queues_list",
        "overview",
    },
    "sessionkit.testing": {"ScriptedModel", "conformance"},
    "sessionkit.scorers": {
        "LEVELS",
        "LLMJudge",
        "REFUSAL_PHRASES",
        "Score",
        "Unit",
        "empty_reply",
        "llm_judge",
        "refusal",
        "refusal_keywords",
        "regenerated",
        "scorer",
        "tool_error",
    },
    "sessionkit.parts": {
        "FOLD_LINES",
        "OVERLAY_PREFIX",
        "fold_lines",
        "output_text",
        "input_text",
        "is_tool_part",
        "one_line",
        "overlay_info",
        "overlay_message",
        "part_kinds",
        "preview",
        "text_of",
        "tool_name",
        "tool_names",
        "tool_parts",
    },
}


def test_subpackage_all_is_pinned():
    import importlib

    for name, pinned in SUBPACKAGES.items():
        module = importlib.import_module(name)
        assert set(module.__all__) == pinned, name
        assert len(module.__all__) == len(set(module.__all__)), name
        for attr in module.__all__:
            assert hasattr(module, attr), f"{name}.{attr} is listed but missing"


def test_store_settings_hold_the_engine_and_the_search_candidates():
    """``store.settings`` is where the engine's name and ``search_candidates`` live, on both stores."""
    for cls in (sk.Store, sk.aio.AsyncStore):
        assert not hasattr(cls, "engine") and not hasattr(cls, "search_candidates"), cls
    with sk.open_store(":memory:") as store:
        settings = store.settings
        assert isinstance(settings, sk.store.StoreSettings) and store.settings is settings
        assert settings.engine == "sqlite"
        settings.search_candidates = 5
        assert settings.search_candidates == 5
        assert "'sqlite'" in repr(settings) and "search_candidates=5" in repr(settings)
        with pytest.raises(ValueError, match="search_candidates must be an int >= 1, got 0"):
            settings.search_candidates = 0
        assert settings.search_candidates == 5
        with pytest.raises(AttributeError):
            settings.engine = "duckdb"  # type: ignore[misc]
