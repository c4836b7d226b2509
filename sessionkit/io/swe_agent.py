"""SWE-agent trajectories (``.traj``) -> one session per trajectory.

A ``.traj`` file is one JSON document: ``history`` (the chat the model saw: ``system``,
``user``, ``assistant`` and, with function calling, ``tool`` messages; each with
``agent``, ``message_type``, ``thought``, ``action``...), ``trajectory`` (the
steps: action, observation, state) and ``info`` (``exit_status``, ``submission``,
``model_stats`` with cost, tokens and API calls).

* The history becomes one chain, read as an OpenAI chat (:func:`sessionkit.io.chat_to_messages`):
  an assistant's ``tool_calls`` become ``tool-<name>`` parts and the ``tool`` message
  answering each (SWE-agent names it in ``tool_call_ids``) gives the part its ``output``.
  A message's SWE-agent fields are kept in ``metadata["swe_agent"]``.
* ``info`` (the model's usage in ``model_stats`` included) is kept as the session's
  record of kind ``swe_agent.info`` (``store.session_records.get(session_id, "swe_agent.info")``) and
  in the last message's ``metadata["swe_agent"]["info"]``.
* The session id is the file name without ``.traj`` (SWE-agent names the file after
  the task instance). Message ids hash the content, so importing again adds nothing.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MalformedInput
from ..store import Session
from ._common import watching_roots
from ._frameworks import SessionWriter
from ._progress import Progress, check_progress
from ._reading import as_path, check_file, check_folder
from .openai import chat_to_messages

__all__ = ["import_swe_agent"]


def _read(path: Path) -> dict:
    source = str(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        problem = f"not UTF-8 text (byte 0x{raw[exc.start]:02x}: {exc.reason})"
        raise MalformedInput(source, f"line {line}", problem) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg} at column {exc.colno})"
        raise MalformedInput(source, f"line {exc.lineno}", problem) from None
    except RecursionError:
        raise MalformedInput(source, None, "the trajectory nests too deep to read") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
        raise MalformedInput(source, None, "not a SWE-agent trajectory (no 'history' list)")
    return doc


def _listish(value: Any) -> Any:
    """SWE-agent writes some lists as their Python repr (``"['call_1']"``): read them back."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    return value


def _chat(history: list, source: str) -> tuple[list[dict], list[dict]]:
    """The history as chat messages, and each one's SWE-agent fields."""
    chat, extras = [], []
    for i, item in enumerate(history):
        if not isinstance(item, dict):
            raise MalformedInput(source, f"history[{i}]", "a history entry must be an object")
        msg = {k: item[k] for k in ("role", "content", "name") if k in item}
        calls = _listish(item.get("tool_calls"))
        if calls:
            msg["tool_calls"] = calls
        ids = _listish(item.get("tool_call_ids"))
        if item.get("role") == "tool":
            if isinstance(ids, list) and ids:
                msg["tool_call_id"] = ids[0]
            elif "tool_call_id" in item:
                msg["tool_call_id"] = item["tool_call_id"]
        chat.append(msg)
        extras.append(
            {
                k: v
                for k, v in item.items()
                if k not in ("role", "content", "tool_calls", "tool_call_ids", "tool_call_id")
            }
        )
    return chat, extras


def import_swe_agent(store, path: Any, *, session_prefix: str = "", progress: Any = None) -> Sequence[Session]:
    """Import SWE-agent trajectories: ``path`` is a ``.traj`` file or a folder of them (a
    run's output folder); one session per file, named after the file (``session_prefix``
    put before it). Returns the sessions. Idempotent. ``progress`` as in
    :class:`sessionkit.io.Progress` (files read). Malformed input raises
    :class:`MalformedInput` naming the file and the history entry.
    """
    check_progress(progress)
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    path = as_path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.traj") if p.is_file())
        check_folder(path, files, ".traj")
    else:
        check_file(path)
        files = [path]
    sessions = []
    returned: set[str] = set()
    with (
        watching_roots(store, str(path)) as watch,
        Progress(progress, total=len(files), desc=f"importing {path.name}", unit="trajectories") as bar,
    ):
        for file in files:
            source = str(file)
            doc = _read(file)
            chat, extras = _chat(doc["history"], source)
            labels = [f"history[{i}]" for i in range(len(chat))]
            converted = chat_to_messages(chat, source=source, labels=labels)
            # chat_to_messages keeps a message's unknown keys in metadata["openai"]; the
            # SWE-agent fields go to metadata["swe_agent"] (tool messages fold into their calls,
            # so messages are matched to history entries by their role order)
            kept = [e for e, m in zip(extras, chat) if m.get("role") != "tool"]
            kept_labels = [w for w, m in zip(labels, chat) if m.get("role") != "tool"]
            info = doc.get("info") if isinstance(doc.get("info"), dict) else None
            if info is not None and isinstance(info.get("model_stats"), str):
                info = {**info, "model_stats": _listish(info["model_stats"])}
            session = store.session(session_prefix + file.name.removesuffix(".traj"))
            writer = SessionWriter(store, session, source, watch=watch)
            for k, (message, parent) in enumerate(converted):
                meta = message.setdefault("metadata", {})
                meta.pop("openai", None)
                extra = kept[k] if k < len(kept) else {}
                if info is not None and k == len(converted) - 1:
                    extra = {**extra, "info": info}
                if extra:
                    meta["swe_agent"] = extra
                if not meta:
                    del message["metadata"]
                writer.add(message, parent, None, kept_labels[k] if k < len(kept_labels) else "history")
            writer.flush()
            if info is not None:
                store.session_records.put(session.session_id, "swe_agent.info", [(0, info)])
            if len(session) and session.session_id not in returned:  # a file name may recur in a folder
                returned.add(session.session_id)
                sessions.append(session)
            bar.update()
    return sessions
