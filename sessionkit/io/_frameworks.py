"""Shared pieces of the importers that read agent frameworks' own stores and logs.

* :func:`open_sqlite` opens a framework's SQLite database read only, and says plainly
  when the file is no SQLite database; :func:`table_names`, :func:`columns`, :func:`scalar`
  and :func:`rows` read it, a damaged file (broken pages, garbage in its schema, text that
  is not UTF-8) raising :class:`MalformedInput` naming the file, never ``sqlite3``'s errors;
* :func:`iso_time` turns the times those stores keep (``CURRENT_TIMESTAMP`` text,
  epoch seconds, ISO strings) into the ISO time a message carries;
* :class:`SessionWriter` writes the converted messages of one conversation in batches,
  each batch one ``session.import_many`` inside a ``store.transaction()``, and turns a
  store's refusal of a message into :class:`MalformedInput` naming the file and the record.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import MalformedInput, MessageTooLarge
from ..messages import to_iso
from ._common import RootWatch, write_items
from ._reading import check_file

__all__ = [
    "open_sqlite",
    "table_names",
    "columns",
    "scalar",
    "rows",
    "sqlite_problem",
    "iso_time",
    "load_json",
    "SessionWriter",
    "HeldCalls",
    "tool_output",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"

#: Messages per ``import_many`` call (and per transaction).
BATCH = 500


def sqlite_problem(exc: BaseException) -> str:
    """What reading a damaged SQLite file raised, as the problem a :class:`MalformedInput` names."""
    if isinstance(exc, UnicodeDecodeError):
        return f"cannot read the SQLite database, it is damaged (text that is not UTF-8: {exc.reason})"
    return f"cannot read the SQLite database, it is damaged ({exc})"


#: What reading a damaged SQLite file raises: sqlite3's errors, and the text of a value or of
#: the schema that is not UTF-8 (sqlite3 decodes text as it fetches it).
_READ_ERRORS = (sqlite3.Error, UnicodeDecodeError)


def open_sqlite(path: Path, what: str) -> sqlite3.Connection:
    """``path`` opened read only; a file that is no SQLite database, or a damaged one -> :class:`MalformedInput`;
    a missing path or a folder -> :class:`sessionkit.UsageError`."""
    check_file(path)
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head != _SQLITE_MAGIC:
        raise MalformedInput(str(path), None, f"not a SQLite database (expected {what})")
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, check_same_thread=False)
    except _READ_ERRORS as exc:
        raise MalformedInput(str(path), None, sqlite_problem(exc)) from None
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except _READ_ERRORS as exc:
        conn.close()
        raise MalformedInput(str(path), None, sqlite_problem(exc)) from None
    return conn


def table_names(conn: sqlite3.Connection, source: str) -> set[str]:
    """The names of the database's tables and views."""
    return {
        name for (name,) in rows(conn, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')", source=source)
    }


def columns(conn: sqlite3.Connection, table: str, source: str) -> set[str]:
    """The column names of ``table``."""
    return {row[1] for row in rows(conn, "SELECT * FROM pragma_table_info(?)", (table,), source=source)}


def scalar(conn: sqlite3.Connection, sql: str, params: tuple = (), *, source: str) -> Any:
    """The first column of the first row of ``sql`` (None without a row)."""
    for row in rows(conn, sql, params, source=source, size=1):
        return row[0]
    return None


def rows(conn: sqlite3.Connection, sql: str, params: tuple = (), *, source: str, size: int = BATCH) -> Iterator[tuple]:
    """The rows of ``sql``, fetched ``size`` at a time (memory stays bounded by one page); a damaged
    file -> :class:`MalformedInput` naming ``source``."""
    try:
        cursor = conn.execute(sql, params)
        while True:
            page = cursor.fetchmany(size)
            if not page:
                return
            yield from page
    except _READ_ERRORS as exc:
        raise MalformedInput(source, None, sqlite_problem(exc)) from None


def load_json(raw: str | bytes, source: str, where: str | None, what: str, *, are: bool = False) -> Any:
    """``raw`` decoded as JSON; text that is not JSON, not UTF-8, or nests deeper than Python can
    decode -> :class:`MalformedInput` naming ``source``, ``where`` and ``what`` (the field; ``are``
    for a plural name)."""
    verb = "are" if are else "is"
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedInput(source, where, f"{what} {verb} not JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise MalformedInput(source, where, f"{what} {verb} not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise MalformedInput(source, where, f"{what} nest{'' if are else 's'} too deep to read") from None


def iso_time(value: Any, source: str, where: str) -> str | None:
    """A stored time as the ISO time a message carries (``YYYY-MM-DDTHH:MM:SS.mmmZ``); None stays None.

    Strings are ISO 8601 or SQLite's ``CURRENT_TIMESTAMP`` text (UTC without a zone);
    numbers are seconds since 1970 (what ADK and the coding agents' logs keep).
    """
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, (int, float)):
            moment = datetime.fromtimestamp(value, UTC)
        elif isinstance(value, str):
            text = value.strip()
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        elif isinstance(value, datetime):
            moment = value
        else:
            raise TypeError
    except (TypeError, ValueError, OverflowError, OSError):
        raise MalformedInput(source, where, f"not a time: {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return to_iso(moment)
    except (TypeError, ValueError):
        raise MalformedInput(source, where, f"not a time: {value!r}") from None


def tool_output(content: Any) -> Any:
    """A tool result as a part's ``output``: a string stays; a list of text blocks is joined."""
    kinds = ("text", "input_text", "output_text")
    if (
        isinstance(content, list)
        and content
        and all(isinstance(p, dict) and p.get("type") in kinds and isinstance(p.get("text"), str) for p in content)
    ):
        return "".join(p["text"] for p in content)
    return content


class SessionWriter:
    """The writes of one conversation: ``(message, parent_id, created_at, where)`` items,
    stored ``BATCH`` at a time, each batch in one transaction.

    ``where`` names the record a message came from, for the error when the store refuses
    it. Batches written before an error stay stored; importing again completes the
    import (the messages' ids come from the source, so nothing is stored twice).
    ``progress`` (a :class:`Progress`) advances by ``count`` of each item as it is stored.
    """

    def __init__(self, store, session, source: str, progress=None, watch: RootWatch | None = None):
        self._store = store
        self._session = session
        self._watch = watch
        self.source = source
        self._progress = progress
        self._items: list[tuple[dict, str | None, str | None]] = []
        self._wheres: list[str] = []
        self._counts = 0
        self.written = 0

    def add(self, message: dict, parent_id: str | None, created_at: str | None, where: str, count: int = 1) -> None:
        self._items.append((message, parent_id, created_at))
        self._wheres.append(where)
        self._counts += count
        if len(self._items) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._items:
            return
        items, wheres, counts = self._items, self._wheres, self._counts
        self._items, self._wheres, self._counts = [], [], 0
        try:
            with self._store.transaction():
                write_items(self._session, items, self._watch)
        except (MessageTooLarge, ValueError, TypeError, LookupError) as exc:
            where = self._culprit(items, wheres, exc)
            raise MalformedInput(
                self.source, where, f"cannot import into session {self._session.session_id!r}: {exc}"
            ) from exc
        self.written += len(items)
        if self._progress is not None and counts:
            self._progress.update(counts)

    def count(self, n: int) -> None:
        """Records read that add no message of their own (shared with a branch, folded in)."""
        if self._progress is not None and n:
            self._progress.update(n)

    @staticmethod
    def _culprit(items: list, wheres: list[str], exc: Exception) -> str:
        """The record whose message the error names (else the batch's first record)."""
        text = str(exc)
        for (message, _, _), where in zip(items, wheres):
            mid = message.get("id") if isinstance(message, dict) else None
            if isinstance(mid, str) and repr(mid) in text:
                return where
        return wheres[0] if len(wheres) == 1 else f"{wheres[0]} .. {wheres[-1]}"


class HeldCalls:
    """Messages held back while one of their tool calls waits for its result.

    Frameworks store a tool's result as a record of its own after the call; sessionkit
    keeps it in the call's part. :meth:`add` holds a message (and the ones after it)
    until every call it makes is answered through :meth:`answer`, or until ``limit``
    messages are held (then they are written, and a later result becomes a ``tool``
    message of its own: the importer's fallback).
    """

    def __init__(self, writer: SessionWriter, limit: int = 5000):
        self.writer = writer
        self.limit = limit
        self._held: list[list] = []  # [message, parent, created, where]
        self._waiting: dict[str, list] = {}  # call id -> held entry
        self.names: dict[str, str] = {}  # call id -> tool name, for results whose call is gone

    def add(self, message: dict, parent: str | None, created: str | None, where: str) -> None:
        entry = [message, parent, created, where]
        self._held.append(entry)
        for part in message.get("parts", ()):
            call_id = part.get("toolCallId")
            if isinstance(call_id, str) and isinstance(part.get("type"), str) and part["type"].startswith("tool-"):
                self.names[call_id] = part["type"][len("tool-") :]
                if part.get("state") == "input-available":
                    self._waiting[call_id] = entry
        if len(self._held) >= self.limit or not self._waiting:
            self.release()

    def waiting(self, call_id: str) -> dict | None:
        """The held message whose call ``call_id`` waits for a result, or None."""
        entry = self._waiting.get(call_id)
        return None if entry is None else entry[0]

    def answer(self, call_id: str, result: dict) -> dict:
        """Give the waiting call ``call_id`` its result part's state, ``output``/``errorText``."""
        entry = self._waiting.pop(call_id)
        for part in entry[0]["parts"]:
            if part.get("toolCallId") == call_id and part.get("state") == "input-available":
                part["state"] = result["state"]
                for key in ("output", "errorText"):
                    if key in result:
                        part[key] = result[key]
                break
        if not self._waiting:
            self.release()
        return entry[0]

    def release(self) -> None:
        for message, parent, created, where in self._held:
            self.writer.add(message, parent, created, where)
        self._held.clear()
        self._waiting.clear()

    def finish(self) -> None:
        self.release()
        self.writer.flush()
