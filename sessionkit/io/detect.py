"""Which importer reads a file: :func:`detect_format` looks at its first bytes only.

SQLite databases are told apart by their tables (``agent_messages``: the OpenAI Agents
SDK; ``checkpoints``: LangGraph; ``sessions`` and ``events``: Google ADK); a folder or
a JSON-lines file of records linked by ``uuid``/``parentUuid`` is a coding-agent log;
a ``.traj`` file (or a folder of them) a SWE-agent trajectory; an ``.eval`` archive (or a
JSON document opening with ``"version"``) an inspect-ai eval log;
other JSON and JSON lines are told by the keys of their first record (OpenAssistant trees, HH pairs,
sessionkit exports, OpenAI chat messages, OTLP trace data); a binary file that parses whole as an OTLP
protobuf ``ExportTraceServiceRequest`` is OpenTelemetry traces.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from .._formats import FORMATS  # format name -> the sessionkit.io function that imports it
from ..errors import MalformedInput
from ._frameworks import open_sqlite, table_names
from ._reading import PathMissing, as_path, check_file
from .parquet import is_parquet_export

__all__ = ["detect_format", "FORMATS"]


_PEEK = 1 << 16
#: how an inspect-ai log written as JSON starts
_INSPECT_JSON = re.compile(r'\A\s*\{\s*"version"\s*:')


def _sqlite_format(path: Path) -> str | None:
    """The framework whose tables the database holds, or None; a damaged file -> :class:`MalformedInput`."""
    conn = open_sqlite(path, "the database of an agent framework")
    try:
        names = table_names(conn, str(path))
    finally:
        conn.close()
    if "agent_messages" in names:
        return "openai-agents"
    if "checkpoints" in names:
        return "langgraph"
    if {"sessions", "events"} <= names:
        return "adk"
    return None


def _first_record(path: Path) -> Any:
    """The first JSON value of the file's first non-blank line (gzip read through), or None."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener: Any = gzip.open if head == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read(_PEEK)
    except (OSError, EOFError):
        return None
    text = data.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    line = text.split("\n", 1)[0]
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        pass
    if text.startswith("["):  # a JSON array: its first element, when it is short enough to see
        try:
            value, _ = json.JSONDecoder().raw_decode(text[1:].lstrip())
            return [value]
        except json.JSONDecodeError:
            return None
    return None


def _record_format(rec: Any) -> str | None:
    if isinstance(rec, list):
        first = rec[0] if rec else None
        return "openai" if isinstance(first, dict) and "role" in first else None
    if not isinstance(rec, dict):
        return None
    if "uuid" in rec or "parentUuid" in rec or rec.get("type") in ("summary", "file-history-snapshot"):
        return "claude-code"
    if "message_tree_id" in rec:
        return "oasst"
    if "chosen" in rec and "rejected" in rec:
        return "hh"
    if "resourceSpans" in rec or "resource_spans" in rec:  # OTLP trace data (JSON)
        return "otel"
    if rec.get("type") in ("message", "compaction") and "session_id" in rec:
        return "jsonl"
    if rec.get("format") == "sessionkit":  # the header line of a sessionkit export
        return "jsonl"
    if "role" in rec or isinstance(rec.get("messages"), list):
        return "openai"
    return None


def _names(path: Path, files: list[Path], most: int = 5) -> str:
    shown = ", ".join(str(f.relative_to(path)) for f in files[:most])
    return shown + (f" and {len(files) - most} more" if len(files) > most else "")


def _folder_format(path: Path) -> str:
    """A folder's format: coding-agent session logs (``.jsonl`` files whose first record is
    one) or SWE-agent trajectories (``.traj``). A folder holding both is refused naming them
    (one import reads one format: name it with ``--format`` / call its importer), and so is
    a folder whose ``.jsonl`` files hold no session log."""
    jsonl = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
    logs = [p for p in jsonl if _record_format(_first_record(p)) == "claude-code"]
    trajs = sorted(p for p in path.rglob("*.traj") if p.is_file())
    if logs and trajs:
        raise MalformedInput(
            str(path),
            None,
            f"a folder of two formats: Claude Code session logs ({_names(path, logs)}) and SWE-agent"
            f" trajectories ({_names(path, trajs)}); one import reads one format: name it with"
            " --format claude-code or --format swe-agent (import_claude_code / import_swe_agent)",
        )
    if logs:
        return "claude-code"
    if trajs:
        return "swe-agent"
    if jsonl:
        raise MalformedInput(
            str(path), None, f"a folder with no Claude Code session records in its .jsonl files ({_names(path, jsonl)})"
        )
    raise PathMissing(f"{str(path)!r} is a folder without .jsonl session logs, .traj trajectories or a Parquet export")


def detect_format(path: Any) -> str:
    """The format name (a key of :data:`FORMATS`) of the file or folder at ``path``.

    A file no importer recognises, or a damaged SQLite database -> :class:`MalformedInput`
    saying so (call the importer of its format then), and so is a folder holding both
    session logs and trajectories (naming them) or ``.jsonl`` files without a session log;
    a missing path, or a folder without
    session logs or trajectories -> :class:`sessionkit.UsageError` (also a ``FileNotFoundError``).
    """
    path = as_path(path)
    if path.is_dir():
        if is_parquet_export(path):
            return "parquet"
        return _folder_format(path)
    check_file(path)
    with open(path, "rb") as fh:
        magic = fh.read(64)
    if magic[:16] == b"SQLite format 3\x00":
        found = _sqlite_format(path)
        if found is None:
            raise MalformedInput(
                str(path),
                None,
                "a SQLite database of no known framework (no agent_messages, "
                "checkpoints, or sessions and events tables)",
            )
        return found
    if path.suffix == ".traj":
        return "swe-agent"
    if path.suffix == ".eval" and magic.startswith(b"PK"):
        return "inspect"
    if path.suffix == ".json" and _INSPECT_JSON.match(magic.decode("latin-1")):
        return "inspect"
    found = _record_format(_first_record(path))
    if found is None and magic[:1] == b"\x0a":
        from .otel import is_otlp_protobuf  # a serialized ExportTraceServiceRequest

        try:
            found = "otel" if is_otlp_protobuf(path) else None
        except ImportError:  # opentelemetry-proto is not installed: not a format this install reads
            found = None
    if found is None:
        raise MalformedInput(str(path), None, "cannot tell the format from the first record")
    return found
