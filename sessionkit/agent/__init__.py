"""Agents and runs: models through litellm, tools, live events, steering (docs/agents.md).

Importing this package does not import litellm; the first model call does.
"""

from ._loading import load_agent
from .agent import ROOT, Agent, RunResult
from .controller import RunController
from .events import EVENT_KINDS, MemoryRunLog, RunRecord
from .history import HistoryPolicy
from .models import ChatModel, LiteLLMModel, ModelReply, ReasoningDelta, TextDelta, ToolCall
from .sessions import ExternalSession, FileSessionStore, SessionStore, create_session
from .tools import Tool, as_tool

__all__ = [
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
]
