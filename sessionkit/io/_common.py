"""Shared pieces of the readers and writers: file opening, JSON lines, progress, errors."""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import SessionKitError

__all__ = ["MalformedInput", "open_text", "iter_jsonl", "count_lines", "Progress", "as_path"]


class MalformedInput(SessionKitError, ValueError):
    """A file or record given to an importer does not have the expected shape.

    ``source`` names the file (or ``"<list>"`` for in-memory input) and ``where``
    the line (``"line 12"``) or record (``"record 3"``) at fault; both appear in
    the message.
    """

    def __init__(self, source: str, where: str | None, problem: str):
        self.source = source
        self.where = where
        self.problem = problem
        location = source if where is None else f"{source}, {where}"
        super().__init__(f"{location}: {problem}")


def as_path(value: Any) -> Path:
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    raise TypeError(f"expected a file path (str or pathlib.Path), got {type(value).__name__}")


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_text(path: Path):
    """Open a UTF-8 text file for reading; gzip is detected from the file's first bytes."""
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    if _is_gzip(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def open_write(path: Path):
    """Open a UTF-8 text file for writing; a ``.gz`` suffix writes gzip."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb"), encoding="utf-8", newline="\n")
    return open(path, "w", encoding="utf-8", newline="\n")


def count_lines(path: Path) -> int:
    """Non-blank lines of a (possibly gzipped) text file: the total a progress bar shows."""
    n = 0
    with open_text(path) as fh:
        for line in fh:
            if line.strip():
                n += 1
    return n


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` for every non-blank line; bad JSON names its line."""
    name = str(path)
    with open_text(path) as fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise MalformedInput(
                        name, f"line {lineno}", f"not valid JSON ({exc.msg} at column {exc.colno})"
                    ) from None
        except UnicodeDecodeError as exc:
            raise MalformedInput(name, f"line {lineno + 1}", f"not UTF-8 text ({exc.reason})") from None
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise MalformedInput(name, f"line {lineno + 1}", f"cannot read the file: {exc}") from exc


def load_json_or_jsonl(path: Path) -> tuple[str, list[tuple[str, Any]]]:
    """Read a JSON document or a JSON-lines file.

    Returns ``("json", [("record i", value), ...])`` when the file is one JSON array
    (``[("document", value)]`` for any other JSON value), or ``("jsonl", [("line n", value), ...])``.
    """
    name = str(path)
    with open_text(path) as fh:
        try:
            text = fh.read()
        except UnicodeDecodeError as exc:
            raise MalformedInput(name, None, f"not UTF-8 text ({exc.reason})") from None
    if not text.strip():
        return "json", []
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        first_ok = False
        if len(lines) > 1:
            try:
                json.loads(lines[0][1])
                first_ok = True
            except json.JSONDecodeError:
                pass
        if not first_ok:  # one JSON document with an error in it
            raise MalformedInput(
                name, f"line {exc.lineno}", f"not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        out = []
        for lineno, line in lines:  # JSON lines: one value per line
            try:
                out.append((f"line {lineno}", json.loads(line)))
            except json.JSONDecodeError as exc2:
                raise MalformedInput(
                    name, f"line {lineno}", f"not valid JSON ({exc2.msg} at column {exc2.colno})"
                ) from None
        return "jsonl", out
    if isinstance(value, list):
        return "json", [(f"record {i}", v) for i, v in enumerate(value)]
    return "json", [("document", value)]


# ---------------------------------------------------------------------------
# Progress


def _interactive() -> bool:
    """True in a terminal or a Jupyter kernel: where a progress bar helps and harms nothing."""
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    shell = sys.modules.get("IPython")
    if shell is not None:
        try:
            ip = shell.get_ipython()
        except Exception:
            return False
        return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"
    return False


class Progress:
    """Progress of a long import.

    ``progress`` is ``None`` (show it only for long inputs, ``auto_min`` records or
    more, and only when running in a terminal or a Jupyter kernel, so scripts, CI
    logs, tests and loops of small imports stay quiet), ``True`` (always show it),
    ``False`` (never), or a callable ``fn(done, total)`` called as records finish
    (``total`` may be ``None`` when unknown). Shown progress uses ``tqdm`` when it
    is installed, otherwise a one-line counter on stderr.
    """

    #: Inputs shorter than this show no progress unless asked for.
    AUTO_MIN = 1000

    def __init__(self, progress: Any, *, total: int | None, desc: str, unit: str, auto_min: int | None = None):
        self.done = 0
        self.total = total
        self._fn: Callable[[int, int | None], Any] | None = None
        self._bar = None
        self._plain = False
        self._desc = desc
        self._unit = unit
        self._last = 0.0
        if progress is None:
            floor = self.AUTO_MIN if auto_min is None else auto_min
            progress = (total is None or total >= floor) and _interactive()
        if callable(progress) and not isinstance(progress, bool):
            self._fn = progress
        elif progress is True:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self._plain = True
            else:
                self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", leave=True, file=sys.stderr)
        elif progress is not False:
            raise TypeError(f"progress must be None, True, False or a callable, got {type(progress).__name__}")

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._fn is not None:
            self._fn(self.done, self.total)
        elif self._bar is not None:
            self._bar.update(n)
        elif self._plain:
            now = time.monotonic()
            if now - self._last >= 0.2 or (self.total is not None and self.done >= self.total):
                self._last = now
                of = f"/{self.total}" if self.total is not None else ""
                sys.stderr.write(f"\r{self._desc}: {self.done}{of} {self._unit}")
                sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._plain:
            of = f"/{self.total}" if self.total is not None else ""
            sys.stderr.write(f"\r{self._desc}: {self.done}{of} {self._unit}\n")
            sys.stderr.flush()
            self._plain = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------
# Grouped transactions


class WriteGroups:
    """Run many small imports (one per tree or pair) inside fewer transactions.

    Each record's ``session.import_many`` joins the open ``store.transaction()``,
    and every ``size`` records the transaction commits. Fewer commits make bulk
    imports much faster, on file stores and on DuckDB above all. An error rolls
    back only the group in progress; records of earlier groups stay stored, and
    running the import again completes it (imports are idempotent).
    """

    def __init__(self, store, size: int = 200):
        self._store = store
        self._size = size
        self._count = 0
        self._cm = None

    def __enter__(self) -> WriteGroups:
        return self

    def begin(self) -> None:
        """Call before writing a record."""
        if self._cm is None:
            cm = self._store.transaction()
            cm.__enter__()
            self._cm = cm

    def done(self) -> None:
        """Call after a record was written."""
        self._count += 1
        if self._count % self._size == 0:
            self.commit()

    def commit(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(None, None, None)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(exc_type, exc, tb)
