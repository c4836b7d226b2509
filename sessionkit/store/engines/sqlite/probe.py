"""Does a SQLite file already hold a sessionkit store? Read without writing (the file opened
read-only); a file that is not a database answers True, leaving the verdict to opening."""

from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import quote

__all__ = ["holds_store"]


def holds_store(location: str, options: dict[str, Any]) -> bool:
    """Whether the file ``location`` holds sessionkit's tables."""
    if os.path.getsize(location) == 0:
        return False
    try:
        db = sqlite3.connect(f"file:{quote(os.path.abspath(location))}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return True
    return any(name.startswith("sessionkit_") for (name,) in rows)
