"""inspect-ai eval logs (``.eval`` or ``.json``) -> one session per sample and epoch.

The log is read with inspect-ai's own reader (``inspect_ai.log``), one sample at a time
(``.eval`` files are zip archives whose members may be zstd-compressed, which only
inspect-ai's reader opens). Each sample's ``messages`` become one chain:

* ``system`` / ``user`` / ``assistant`` messages keep their role and their id; text
  content becomes ``text`` parts, ``reasoning`` content ``reasoning`` parts, images
  ``file`` parts (other content is kept as given);
* an assistant's ``tool_calls`` become ``tool-<function>`` parts (``toolCallId``, the
  ``arguments`` as ``input``); the ``tool`` message answering a call gives its part the
  ``output`` (``state: "output-error"`` with ``errorText`` when the tool failed) and is
  not kept as a message of its own;
* ``metadata["inspect"]`` keeps a message's ``source``, ``model`` and ``metadata``; the
  last message also holds the sample's ``scores``, ``model_usage``, ``target`` and
  ``error``, which are kept too as the session's record of kind ``inspect.sample``.

The session id is ``<eval id>/<sample id>/<epoch>``: unique per run, and naming the
sample. Importing the same log again adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MalformedInput, MissingDependency
from ..store import Session
from ._common import watching_roots
from ._frameworks import HeldCalls, SessionWriter, tool_output
from ._progress import Progress, check_progress
from ._reading import as_path, check_file

__all__ = ["import_inspect"]


def _reader():
    try:
        from inspect_ai.log import read_eval_log, read_eval_log_samples
    except ImportError as exc:
        raise MissingDependency("reading inspect-ai eval logs needs inspect-ai: pip install inspect-ai") from exc
    return read_eval_log, read_eval_log_samples


def _parts(content: Any, source: str, where: str) -> list[dict]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MalformedInput(source, where, f"message content must be a string or a list, got {type(content).__name__}")
    parts: list[dict] = []
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MalformedInput(source, where, "a content block must be an object with a 'type'")
        kind = block["type"]
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "reasoning":
            parts.append({"type": "reasoning", "text": block.get("reasoning") or block.get("summary") or ""})
        elif kind == "image" and isinstance(block.get("image"), str):
            parts.append({"type": "file", "mediaType": "image/*", "url": block["image"]})
        else:
            parts.append({"type": f"data-inspect-{kind}", "data": block})
    return parts


def _sample_messages(sample: dict, writer: SessionWriter, source: str, where: str) -> dict | None:
    """Write a sample's messages; returns the last message written (for the sample's facts)."""
    held = HeldCalls(writer)
    parent: str | None = None
    last: dict | None = None
    for i, msg in enumerate(sample.get("messages") or []):
        here = f"{where}, messages[{i}]"
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise MalformedInput(source, here, "a message needs a 'role'")
        role = msg["role"]
        if role == "tool":
            call_id = msg.get("tool_call_id")
            error = msg.get("error")
            output = tool_output(msg.get("content"))
            result: dict[str, Any]
            if error:
                text = error.get("message") if isinstance(error, dict) else str(error)
                result = {"state": "output-error", "errorText": text or json.dumps(output, ensure_ascii=False)}
            else:
                result = {"state": "output-available", "output": output}
            if isinstance(call_id, str) and held.waiting(call_id) is not None:
                held.answer(call_id, result)
                continue
            parts = [
                {"type": f"tool-{msg.get('function') or 'unknown'}", "toolCallId": call_id or f"call-{i}", **result}
            ]
        else:
            parts = _parts(msg.get("content"), source, here)
            for k, call in enumerate(msg.get("tool_calls") or []):
                if not isinstance(call, dict) or not isinstance(call.get("function"), str):
                    raise MalformedInput(source, here, f"tool_calls[{k}] has no function name")
                parts.append(
                    {
                        "type": f"tool-{call['function']}",
                        "toolCallId": call.get("id") or f"call-{i}-{k}",
                        "state": "input-available",
                        "input": call.get("arguments") or {},
                    }
                )
        mid = msg.get("id") or f"{where}-{i}"
        meta = {k: msg[k] for k in ("source", "model", "metadata") if msg.get(k) not in (None, {}, "")}
        message: dict[str, Any] = {"id": mid, "role": role, "parts": parts}
        if meta:
            message["metadata"] = {"inspect": meta}
        held.add(message, parent, None, here)
        parent = mid
        last = message
    if last is not None:
        facts = {k: sample[k] for k in ("target", "scores", "model_usage", "error") if sample.get(k) not in (None, {})}
        if facts:
            last.setdefault("metadata", {}).setdefault("inspect", {}).update(facts)
    held.finish()
    return last


def import_inspect(store, path: Any, *, session_prefix: str = "", progress: Any = None) -> Sequence[Session]:
    """Import an inspect-ai eval log (``.eval`` or ``.json``): one session per sample and epoch.

    Returns the sessions in the log's order. Idempotent (message ids are inspect's). ``progress``
    as in :class:`sessionkit.io.Progress` (samples read). Malformed data raises
    :class:`MalformedInput` naming the file, the sample and the message; a file inspect-ai
    cannot read raises it too.
    """
    check_progress(progress)
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    path = as_path(path)
    check_file(path)
    source = str(path)
    read_eval_log, read_eval_log_samples = _reader()
    try:
        header = read_eval_log(str(path), header_only=True)
    except Exception as exc:  # inspect-ai raises many kinds; all mean the file is not a log it reads
        raise MalformedInput(source, None, f"not an inspect-ai eval log ({type(exc).__name__}: {exc})") from None
    eval_id = header.eval.eval_id
    info = {"task": header.eval.task, "model": header.eval.model, "eval_id": eval_id, "run_id": header.eval.run_id}
    total = header.results.total_samples if header.results is not None else None
    sessions = []
    with (
        watching_roots(store, source) as watch,
        Progress(progress, total=total, desc=f"importing {Path(source).name}", unit="samples") as bar,
    ):
        samples = read_eval_log_samples(str(path), all_samples_required=False)
        while True:
            try:
                sample_obj = next(samples)
            except StopIteration:
                break
            except Exception as exc:  # a damaged sample inside the archive
                raise MalformedInput(source, None, f"cannot read a sample ({type(exc).__name__}: {exc})") from None
            sample = sample_obj.model_dump(mode="json", exclude_none=True)
            where = f"sample {sample.get('id')!r} epoch {sample.get('epoch')}"
            session = store.session(f"{session_prefix}{eval_id}/{sample.get('id')}/{sample.get('epoch')}")
            writer = SessionWriter(store, session, source, watch=watch)
            try:
                _sample_messages(sample, writer, source, where)
            except MalformedInput:
                writer.flush()
                raise
            facts = {
                **info,
                "sample_id": sample.get("id"),
                "epoch": sample.get("epoch"),
                **{k: sample[k] for k in ("target", "scores", "model_usage", "error") if k in sample},
            }
            store.session_records.put(session.session_id, "inspect.sample", [(0, facts)])
            if len(session):
                sessions.append(session)
            bar.update()
    return sessions
