"""What overview_bench.py and view_bench.py share: a SQLite store built from a sessionkit JSONL
file (the way a user's import fills one), and a timer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path

import sessionkit as sk


def build_store(path: Path, messages: Iterable[tuple[str, str | None, dict]]) -> sk.Store:
    """The store at ``path`` holding ``messages`` (``(session_id, parent_id, message)``, in file
    order), imported from a JSONL file written beside it and removed after; returns it open."""
    jsonl = path.with_suffix(".jsonl")
    with jsonl.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"format": "sessionkit", "version": 1}) + "\n")
        for sid, parent, message in messages:
            f.write(json.dumps({"type": "message", "session_id": sid, "parent_id": parent, "message": message}) + "\n")
    store = sk.open_store(path)
    try:
        sk.io.import_jsonl(store, jsonl)
    except BaseException:
        store.close()
        raise
    jsonl.unlink()
    return store


def timed(fn) -> float:
    """Seconds ``fn()`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
