"""Shared pieces of the readers and writers: reading files line by line or value by value,
strict JSON, progress, errors and the grouped writes every importer makes.

Reading never trusts the file: bytes that are not UTF-8, gzip data that is damaged or
cut short, JSON that is not JSON (``NaN``, ``Infinity``, numbers no float holds, lone
surrogate escapes, nesting deeper than the parser goes) all become
:class:`MalformedInput` naming the file and the line.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import json
import math
import operator
import os
import re
import sqlite3
import sys
import time
import warnings
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from json.decoder import scanstring  # type: ignore[attr-defined]  # in CPython, not in typeshed
from pathlib import Path
from typing import Any

from ..errors import MessageTooLarge, SessionKitError, UsageError
from ..messages import MAX_NESTING

__all__ = [
    "MalformedInput",
    "as_path",
    "PathMissing",
    "PathIsFolder",
    "check_file",
    "check_folder",
    "open_binary",
    "iter_lines",
    "iter_jsonl",
    "EMPTY",
    "parse_json",
    "TextStream",
    "count_lines",
    "wants_total",
    "Progress",
    "Batches",
    "SessionList",
    "SessionMergeWarning",
    "RootWatch",
    "watching_roots",
    "write_items",
]


class MalformedInput(SessionKitError, ValueError):
    """A file or record given to an importer does not have the expected shape.

    ``source`` names the file (or ``"<list>"`` for in-memory input) and ``where``
    the line (``"line 12"``) or record (``"record 3"``) at fault; both appear in
    the message. ``imported`` is how many records (trees, pairs, lines or
    messages, as the importer counts them) the failed import had stored before
    it stopped (``None`` outside an import); the message says it too.
    """

    def __init__(self, source: str, where: str | None, problem: str, *, imported: int | None = None):
        self.source = source
        self.where = where
        self.problem = problem
        self.imported = imported
        self._progress = ""
        super().__init__(self._text())

    def _text(self) -> str:
        location = self.source if self.where is None else f"{self.source}, {self.where}"
        return f"{location}: {self.problem}{self._progress}"

    def __reduce__(self):
        return (_rebuild, (self.source, self.where, self.problem, self.imported, self._progress))

    def _set_progress(self, imported: int, note: str) -> None:
        self.imported = imported
        self._progress = f" ({note})"
        self.args = (self._text(),)


def _rebuild(source, where, problem, imported, progress) -> MalformedInput:
    exc = MalformedInput(source, where, problem, imported=imported)
    exc._progress = progress
    exc.args = (exc._text(),)
    return exc


def _plural(n: int, unit: str) -> str:
    return f"{n:,} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"


def as_path(value: Any) -> Path:
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    raise TypeError(f"expected a file path (str or pathlib.Path), got {type(value).__name__}")


class PathMissing(UsageError, FileNotFoundError):
    """The path given to an importer does not exist (or a folder holds none of the files it reads).

    A :class:`sessionkit.UsageError`; also a ``FileNotFoundError``, what ``open()`` raises for it.
    """


class PathIsFolder(UsageError, IsADirectoryError):
    """A folder was given where an importer reads a file.

    A :class:`sessionkit.UsageError`; also an ``IsADirectoryError``, what ``open()`` raises for it.
    """


def check_file(path: Path) -> None:
    """:class:`PathMissing` when nothing is at ``path``, :class:`PathIsFolder` for a folder,
    :class:`sessionkit.UsageError` for anything else that is not a regular file (a device, a pipe)."""
    shown = str(path)
    if path.is_dir():
        raise PathIsFolder(f"{shown!r} is a folder, not a file")
    if not path.exists():
        raise PathMissing(f"{shown!r} does not exist")
    if not path.is_file():
        raise UsageError(f"{shown!r} is not a regular file")


def check_folder(path: Path, files: list[Path], pattern: str) -> None:
    """:class:`PathMissing` for a folder holding no file matching ``pattern`` (``files``: those found)."""
    if not files:
        raise PathMissing(f"{str(path)!r} is a folder without {pattern} files")


# ---------------------------------------------------------------------------
# Files


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_binary(path: Path):
    """Open a file for reading bytes; gzip is detected from its first bytes."""
    check_file(path)
    if _is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def open_write(path: Path):
    """Open a UTF-8 text file for writing; a ``.gz`` suffix writes gzip."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb"), encoding="utf-8", newline="\n")
    return open(path, "w", encoding="utf-8", newline="\n")


#: What reading gzip data that is damaged or cut short raises (``BadGzipFile`` is an OSError;
#: other OSErrors, a failing disk, are not the file's fault and pass through).
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def _gzip_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "the gzip data ends early (the file is cut short)"
    return f"the gzip data is damaged ({exc})"


def _utf8_problem(raw: bytes, exc: UnicodeDecodeError) -> str:
    column = len(raw[: exc.start].decode("utf-8", "replace")) + 1
    return f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}: {exc.reason})"


_JSON_BLANK = " \t\r\n"


def iter_lines(path: Path) -> Iterator[tuple[int, str, int]]:
    """``(line number, text, bytes)`` of every non-blank line, decoded from UTF-8.

    Reads one line at a time. A UTF-8 byte order mark at the start is skipped; bytes
    that are not UTF-8 and gzip data that is damaged or cut short raise
    :class:`MalformedInput` naming the line.
    """
    name = str(path)
    with open_binary(path) as fh:
        lineno = 0
        lines = iter(fh)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except _GZIP_ERRORS as exc:
                raise MalformedInput(name, f"line {lineno + 1}", _gzip_problem(exc)) from None
            lineno += 1
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise MalformedInput(name, f"line {lineno}", _utf8_problem(raw, exc)) from None
            if text.strip(_JSON_BLANK):
                yield lineno, text, len(raw)


def count_lines(path: Path) -> int:
    """Non-blank lines of a (possibly gzipped) file: the total a progress bar shows."""
    name = str(path)
    n = lineno = 0
    with open_binary(path) as fh:
        try:
            for raw in fh:
                lineno += 1
                if raw.strip():
                    n += 1
        except _GZIP_ERRORS as exc:
            raise MalformedInput(name, f"line {lineno + 1}", _gzip_problem(exc)) from None
    return n


# ---------------------------------------------------------------------------
# Strict JSON


class _NotANumber(ValueError):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def _reject_constant(name: str):
    raise _NotANumber(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotANumber(text)
    return value


#: ``NaN``/``Infinity`` refused, floats too large for a double (``1e400``) too; the float
#: hook costs a call per float, which chat data has few of (a test per line costs more).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)

#: An escape that may stand for a lone surrogate: only then is the value walked to find one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(value: Any) -> str | None:
    """The JSON path of the first string or key holding a lone surrogate, or None (any depth)."""
    from ..messages import lone_surrogate_path

    return lone_surrogate_path(value)


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:20] + "..." + text[-10:]


class _Syntax(ValueError):
    def __init__(self, msg: str, pos: int):
        super().__init__(msg)
        self.msg = msg
        self.pos = pos


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def _skip_ws(s: str, idx: int) -> int:
    """The index of the first character at or after ``idx`` that is not JSON white space."""
    m = _WS.match(s, idx)
    return idx if m is None else m.end()  # never None: the pattern matches the empty string


def _key(s: str, idx: int) -> tuple[str, int]:
    if s[idx : idx + 1] != '"':
        raise _Syntax("Expecting property name enclosed in double quotes", idx)
    key, idx = scanstring(s, idx + 1, True)
    idx = _skip_ws(s, idx)
    if s[idx : idx + 1] != ":":
        raise _Syntax("Expecting ':' delimiter", idx)
    return key, _skip_ws(s, idx + 1)


def _loads_deep(s: str) -> Any:
    """``json.loads(s)`` without recursion, for documents nested deeper than ``json`` goes
    (an OASST tree thousands of replies deep). Same values, same strictness as
    :data:`_DECODER`; errors are :class:`_Syntax`, JSONDecodeError or :class:`_NotANumber`."""
    stack: list[list] = []  # [container, key or None for a list]
    idx = _skip_ws(s, 0)
    while True:
        ch = s[idx : idx + 1]
        if ch == '"':
            value, idx = scanstring(s, idx + 1, True)
        elif ch == "{":
            idx = _skip_ws(s, idx + 1)
            if s[idx : idx + 1] == "}":
                value, idx = {}, idx + 1
            else:
                key, idx = _key(s, idx)
                stack.append([{}, key])
                continue
        elif ch == "[":
            idx = _skip_ws(s, idx + 1)
            if s[idx : idx + 1] == "]":
                value, idx = [], idx + 1
            else:
                stack.append([[], None])
                continue
        else:
            m = _NUMBER.match(s, idx)
            if m is not None:
                integer, frac, exp = m.groups()
                value = _finite_float(m.group()) if frac or exp else int(integer)
                idx = m.end()
            else:
                for word, literal in _LITERALS:
                    if s.startswith(word, idx):
                        value, idx = literal, idx + len(word)
                        break
                else:
                    for word in ("NaN", "Infinity", "-Infinity"):
                        if s.startswith(word, idx):
                            raise _NotANumber(word)
                    raise _Syntax("Expecting value", idx)
        while True:  # put the value in its container; close the containers that end here
            if not stack:
                end = _skip_ws(s, idx)
                if end != len(s):
                    raise _Syntax("Extra data", end)
                return value
            top = stack[-1]
            container = top[0]
            if top[1] is None:
                container.append(value)
            else:
                container[top[1]] = value
            idx = _skip_ws(s, idx)
            ch = s[idx : idx + 1]
            if ch == ",":
                idx = _skip_ws(s, idx + 1)
                if top[1] is not None:
                    top[1], idx = _key(s, idx)
                break
            if ch == ("]" if top[1] is None else "}"):
                stack.pop()
                value, idx = container, idx + 1
                continue
            raise _Syntax("Expecting ',' delimiter", idx)


_TOO_DEEP = object()


def _too_deep(source: str, where: str | None) -> MalformedInput:
    return MalformedInput(source, where, f"nested too deep for a message (at most {MAX_NESTING} levels)")


def _not_a_number(source: str, where: str | None, exc: _NotANumber) -> MalformedInput:
    text = exc.text
    if text in ("NaN", "Infinity", "-Infinity"):
        problem = f"{text} is not a JSON value (JSON numbers are finite)"
    else:
        problem = f"the number {_shown(text)} is too large for a float"
    return MalformedInput(source, where, problem)


def check_value(value: Any, text: str, source: str, where: str | None) -> Any:
    """Checks after parsing ``text``: a lone surrogate anywhere -> MalformedInput."""
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None:
        found = _lone_surrogate(value)
        if found is not None:
            raise MalformedInput(source, where, f"{found} is not valid Unicode (a lone surrogate escape)")
    return value


def parse_json(text: str, source: str, where: str | None, *, deep: bool = False) -> Any:
    """One JSON value, strictly: anything ``json`` accepts that no store can keep is refused.

    Refused with :class:`MalformedInput` naming ``where``: text that is not JSON, ``NaN``
    and ``Infinity``, numbers too large for a float or with more digits than Python
    converts, lone surrogate escapes, and nesting deeper than the ``json`` module goes
    (unless ``deep``: an OASST tree nests two levels per reply and may go thousands of
    levels deep; it is then parsed without recursion).
    """
    try:
        try:
            value = _DECODER.decode(text)
        except RecursionError:
            if not deep:
                value = _TOO_DEEP
            else:
                value = _loads_deep(text)
    except _NotANumber as exc:
        raise _not_a_number(source, where, exc) from None
    except (json.JSONDecodeError, _Syntax) as exc:
        col = exc.pos - (text.rfind("\n", 0, exc.pos) + 1) + 1
        raise MalformedInput(source, where, f"not valid JSON ({exc.msg} at column {col})") from None
    except ValueError as exc:  # int(): more digits than sys.get_int_max_str_digits()
        raise MalformedInput(source, where, f"a number in it is too long ({exc})") from None
    if value is _TOO_DEEP:
        raise _too_deep(source, where)
    return check_value(value, text, source, where)


#: What an importer says of a file holding nothing but white space.
EMPTY = "the file is empty (nothing but white space): no records to import"


def iter_jsonl(path: Path, *, deep: bool = False, empty_ok: bool = False) -> Iterator[tuple[int, Any, int]]:
    """``(line number, parsed value, bytes)`` for every non-blank line (see :func:`parse_json`);
    a file without one -> :class:`MalformedInput` (unless ``empty_ok``)."""
    name = str(path)
    empty = True
    for lineno, text, nbytes in iter_lines(path):
        empty = False
        yield lineno, parse_json(text, name, f"line {lineno}", deep=deep), nbytes
    if empty and not empty_ok:
        raise MalformedInput(name, None, EMPTY)


class TextStream:
    """The decoded text of a file, read a chunk at a time, to parse one large JSON document
    value by value (the records of a JSON array) in bounded memory.

    ``value()`` parses the next value at the read position; the buffer only ever holds
    the value being parsed and what follows it in the current chunk.
    """

    CHUNK = 1 << 16
    #: A value that ends this close to the end of the buffer may go on in the next chunk
    #: (a number, a literal cut short): read on before trusting it.
    MARGIN = 16

    def __init__(self, fh, source: str):
        self._fh = fh
        self.source = source
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._line = 1  # line number at self._mark
        self._mark = 0
        self._start = True

    def line_at(self, i: int) -> int:
        if i >= self._mark:
            self._line += self.buf.count("\n", self._mark, i)
            self._mark = i
            return self._line
        return self._line - self.buf.count("\n", i, self._mark)

    def column_at(self, i: int) -> int:
        return i - (self.buf.rfind("\n", 0, i) + 1) + 1

    def where(self, i: int | None = None) -> str:
        return f"line {self.line_at(self.pos if i is None else i)}"

    def _fill(self, want: int = 0) -> bool:
        """Read more text; False at the end of the file."""
        if self.eof:
            return False
        if self.pos:  # drop what was consumed
            self.line_at(self.pos)
            self.buf = self.buf[self.pos :]
            self._mark -= self.pos
            self.pos = 0
        try:
            data = self._fh.read(max(want, self.CHUNK))
        except _GZIP_ERRORS as exc:
            raise MalformedInput(self.source, self.where(len(self.buf)), _gzip_problem(exc)) from None
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:  # exc.object: the bytes held back from the last read, then data
            raw, at = exc.object, exc.start
            line_start = raw.rfind(b"\n", 0, at) + 1
            line = self.line_at(len(self.buf)) + raw.count(b"\n", 0, at)
            shifted = UnicodeDecodeError(
                exc.encoding, raw[line_start:], at - line_start, at - line_start + 1, exc.reason
            )
            raise MalformedInput(self.source, f"line {line}", _utf8_problem(raw[line_start:], shifted)) from None
        if not data:
            self.eof = True
        if self._start and text:
            self._start = False
            if text.startswith("\ufeff"):
                text = text[1:]
        self.buf += text
        return True

    def peek(self) -> str:
        """The next character that is not white space ('' at the end); does not consume it."""
        while True:
            self.pos = _skip_ws(self.buf, self.pos)
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, chars: str, what: str) -> str:
        ch = self.peek()
        if ch == "" or ch not in chars:
            found = "the end of the file" if ch == "" else repr(ch)
            column = self.column_at(self.pos)
            raise MalformedInput(
                self.source, self.where(), f"not valid JSON (expecting {what} at column {column}, found {found})"
            )
        self.pos += 1
        return ch

    def value(self) -> tuple[Any, int]:
        """The next JSON value and the line it starts on; strict as :func:`parse_json`."""
        self.peek()
        start_line = self.line_at(self.pos)
        while True:
            buf, start = self.buf, self.pos
            try:
                value, end = _DECODER.raw_decode(buf, start)
            except _NotANumber as exc:
                raise _not_a_number(self.source, f"line {start_line}", exc) from None
            except json.JSONDecodeError as exc:
                if not self.eof and (exc.pos + self.MARGIN >= len(buf) or exc.msg.startswith("Unterminated string")):
                    self._fill(len(self.buf) - self.pos)  # the value may go on: read as much again
                    continue
                raise MalformedInput(
                    self.source, self.where(exc.pos), f"not valid JSON ({exc.msg} at column {self.column_at(exc.pos)})"
                ) from None
            except RecursionError:
                raise _too_deep(self.source, f"line {start_line}") from None
            except ValueError as exc:
                raise MalformedInput(self.source, f"line {start_line}", f"a number in it is too long ({exc})") from None
            if end + self.MARGIN >= len(buf) and not self.eof:
                self._fill(len(self.buf) - self.pos)
                continue
            self.pos = end
            if "\\u" in buf[start:end]:
                value = check_value(value, buf[start:end], self.source, f"line {start_line}")
            return value, start_line


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


def wants_total(progress: Any) -> bool:
    """Whether ``progress`` may show or report a total (else no pass over the file counts it)."""
    if progress is False:
        return False
    if progress is None:
        return _interactive()
    return True


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


def check_progress(progress: Any) -> None:
    """``TypeError`` for a ``progress`` value no importer takes, before any work."""
    if progress is None or isinstance(progress, bool) or callable(progress):
        return
    raise TypeError(f"progress must be None, True, False or a callable, got {type(progress).__name__}")


# ---------------------------------------------------------------------------
# Grouped writes


class Batches:
    """The writes of one import: records grouped into transactions, and how far they got.

    Each record (a tree, a pair, a block of JSONL lines, a batch of chat messages) is
    written by one call of :meth:`write`, inside the open ``store.transaction()``;
    every ``group`` records, or ``max_bytes`` of source text, the transaction
    commits. Fewer commits make bulk imports much faster, on file stores and on
    DuckDB above all.

    When an import fails, what it stored is whole and is exactly the records before
    the one at fault:

    * a problem found before a record is written (its text, its shape): the records
      written so far commit, nothing of that record is written;
    * the store refusing a record (or failing while writing it): the transaction is
      rolled back, the earlier records of its group are written again and commit,
      and ``salvage`` may store the part of a splittable record (a block of JSONL
      lines, a batch of chat messages) that precedes the bad item and name that item.

    The error then says how many records are stored (:attr:`MalformedInput.imported`,
    or a note on other errors); importing the corrected file again completes the
    import, since imports are idempotent.
    """

    def __init__(self, store, *, source: str, unit: str, group: int = 200, max_bytes: int = 32 << 20):
        self._store = store
        self._source = source
        self._unit = unit
        self._group = group
        self._max_bytes = max_bytes
        self._cm = None
        self._pending: list[tuple[str, Callable[[], Any], int]] = []  # (where, write, records)
        self._bytes = 0
        self.stored = 0  # records committed
        self.last: str | None = None  # where the last committed record was

    def __enter__(self) -> Batches:
        return self

    def _open(self) -> None:
        cm = self._store.transaction()
        cm.__enter__()
        self._cm = cm

    def _close(self, exc: BaseException | None) -> None:
        cm, self._cm = self._cm, None
        if cm is None:
            return
        if exc is None:
            cm.__exit__(None, None, None)
        else:
            cm.__exit__(type(exc), exc, exc.__traceback__)

    def write(
        self,
        where: str,
        fn: Callable[[], Any],
        *,
        nbytes: int = 0,
        records: int = 1,
        salvage: Callable[[BaseException], BaseException | None] | None = None,
    ) -> None:
        """Run ``fn`` (the writes of one record, found at ``where``) in the open transaction.

        ``records``: how many records ``fn`` stores (a block of lines counts each).
        ``salvage(error)``, called after a failure once the earlier records are safe,
        stores the good part of this record itself (reporting it with :meth:`add`)
        and returns the error to raise in place of ``error`` (or None to keep it).
        """
        if self._cm is None:
            self._open()
        try:
            fn()
        except Exception as exc:
            self._close(exc)
            self._rewrite()
            if salvage is not None:
                try:
                    replacement = salvage(exc)
                except Exception:
                    replacement = None
                if replacement is not None:
                    raise replacement from exc
            raise
        except BaseException as exc:  # KeyboardInterrupt: give up the group, quickly
            self._pending.clear()
            self._close(exc)
            raise
        self._pending.append((where, fn, records))
        self._bytes += nbytes
        if len(self._pending) >= self._group or self._bytes >= self._max_bytes:
            self.commit()

    def add(self, records: int, where: str) -> None:
        """Count ``records`` stored by a caller's own committed write (see ``salvage``)."""
        if records:
            self.stored += records
            self.last = where

    def _rewrite(self) -> None:
        """After a rollback: write the group's earlier records again, and commit them."""
        pending, self._pending = self._pending, []
        self._bytes = 0
        if not pending:
            return
        try:
            with self._store.transaction():
                for _, fn, _ in pending:
                    fn()
        except Exception:
            return
        self.stored += sum(n for _, _, n in pending)
        self.last = pending[-1][0]

    def commit(self) -> None:
        pending, self._pending = self._pending, []
        self._bytes = 0
        self._close(None)
        if pending:
            self.stored += sum(n for _, _, n in pending)
            self.last = pending[-1][0]

    def progress_note(self) -> str:
        if not self.stored:
            return "nothing was stored"
        return (
            f"the {_plural(self.stored, self._unit)} before it are stored, through {self.last}; "
            f"importing the corrected file again adds the rest"
        )

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.commit()
            return
        if self._cm is not None:  # a problem found between writes: what was written is whole
            try:
                self.commit()
            except BaseException:
                self._pending.clear()
                self._cm = None
        note = self.progress_note()
        if isinstance(exc, MalformedInput):
            exc._set_progress(self.stored, note)
        elif isinstance(exc, MessageTooLarge) and getattr(exc, "_sessionkit_io", False):
            exc.args = (f"{exc.args[0]} ({note})",)
        elif isinstance(exc, BaseException):
            exc.add_note(f"importing {self._source}: {note}")


def located(exc: MessageTooLarge, source: str, where: str) -> MessageTooLarge:
    """``exc`` again, its message naming the file and the record."""
    new = MessageTooLarge(f"{source}, {where}: {exc}")
    new._sessionkit_io = True  # type: ignore[attr-defined]
    return new


# ---------------------------------------------------------------------------
# The sessions an import wrote to


class _SeenIds:
    """An exact set of strings that stays small in memory: a Python set up to
    ``spill`` entries, then a table in a private temporary SQLite file.

    An import of a million one-session lines must not keep a million ids in memory
    (a set of them takes about 110 MB); SQLite's B-tree on disk keeps only its page
    cache (a few MB) and answers in microseconds, next to the milliseconds a record
    takes to store. sqlite3 is in the standard library.
    """

    def __init__(self, spill: int = 50_000):
        self._set: set[str] | None = set()
        self._spill = spill
        self._db: sqlite3.Connection | None = None

    def add(self, key: str) -> bool:
        """Add ``key``; True when it was not there yet."""
        if self._set is not None:
            if key in self._set:
                return False
            self._set.add(key)
            if len(self._set) > self._spill:
                self._to_disk()
            return True
        assert self._db is not None
        return self._db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (key,)).rowcount == 1

    def _to_disk(self) -> None:
        db = sqlite3.connect("", isolation_level=None)  # "": a private file, deleted on close
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE seen (k TEXT PRIMARY KEY) WITHOUT ROWID")
        db.execute("BEGIN")  # one transaction for the whole import: no commit per id
        db.executemany("INSERT INTO seen VALUES (?)", ((k,) for k in self._set or ()))
        self._db, self._set = db, None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._set = None


#: Up to this many sessions an import returns a plain ``list`` of handles (docs/importing.md:
#: ``list[Session]``, about 280 bytes a session); past it, the packed :class:`SessionList`,
#: so that an import of a million sessions stays in bounded memory.
LIST_UP_TO = 10_000


def sessions_result(sessions: SessionList) -> list | SessionList:
    """What an import of many sessions returns: a ``list`` of its sessions, or past
    :data:`LIST_UP_TO` of them the :class:`SessionList` itself."""
    return list(sessions) if len(sessions) <= LIST_UP_TO else sessions


class SessionList(Sequence):
    """The sessions an import wrote to, in order: a sequence of :class:`sessionkit.Session`.

    Used as a list (``len``, indexing, slicing, iteration, unpacking, ``==`` with a
    list of sessions). It holds the session ids packed, about 8 bytes plus the id's
    length each, and gives each handle (``store.session(id)``) when asked for, so an
    import of a million sessions does not keep a million handles in memory.
    """

    def __init__(self, store, *, spill: int = 50_000):
        self._store = store
        self._data = bytearray()  # the ids' UTF-8 bytes, one after the other
        self._ends = array("q")  # where each id ends in _data
        self._seen: _SeenIds | None = _SeenIds(spill)  # while ids are added: those added so far

    def append_new(self, session_id: str) -> bool:
        """Add ``session_id`` unless it is there already; True when added."""
        if self._seen is None:
            raise RuntimeError("the list is finished")
        if not self._seen.add(session_id):
            return False
        self._data += session_id.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._data))
        return True

    @property
    def store(self):
        """The store the sessions are in."""
        return self._store

    def finish(self) -> SessionList:
        """No more ids: let go of what finding duplicates needed."""
        if self._seen is not None:
            self._seen.close()
            self._seen = None
        return self

    def __enter__(self) -> SessionList:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def ordered(self, keys: array) -> SessionList:
        """A new, finished list of these sessions sorted by ``keys`` (one per session; stable)."""
        out = SessionList(self._store).finish()
        for i in sorted(range(len(self)), key=keys.__getitem__):
            out._data += self._raw(i)
            out._ends.append(len(out._data))
        return out

    def _raw(self, i: int) -> bytes:
        return bytes(self._data[self._ends[i - 1] if i else 0 : self._ends[i]])

    def _id(self, i: int) -> str:
        return self._raw(i).decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"session indices must be integers or slices, not {type(i).__name__}") from None
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("session index out of range")
        return self._store.session(self._id(i))

    def __iter__(self) -> Iterator:
        for i in range(len(self)):
            yield self._store.session(self._id(i))

    @property
    def ids(self) -> list[str]:
        """The session ids, in order."""
        return [self._id(i) for i in range(len(self))]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SessionList):
            return self.store is other.store and self.ids == other.ids
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a is b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable while the import runs, as a list

    def __repr__(self) -> str:
        n = len(self)
        shown = ", ".join(repr(self._id(i)) for i in range(min(n, 3))) + (", ..." if n > 3 else "")
        return f"<SessionList: {n} session{'' if n == 1 else 's'} [{shown}]>"


# ---------------------------------------------------------------------------
# Imports that add a conversation to a session that already holds one


class SessionMergeWarning(UserWarning):
    """An import added new root messages to sessions that already held messages.

    Each such session now holds several separate conversations (trees), usually because
    two sources use the same conversation ids (``airline-1`` in two frameworks' stores).
    ``sessions`` lists the first few such session ids, ``count`` says how many there are
    and ``source`` names the file. Import with ``session_prefix=`` (``sessionkit import
    --session-prefix``) to keep the sources apart. Importing the same file again adds no
    root and does not warn.
    """

    def __init__(self, message: str, *, source: str = "", sessions: tuple[str, ...] = (), count: int = 0):
        super().__init__(message)
        self.source = source
        self.sessions = sessions
        self.count = count


def _outside_package_level() -> int:
    """The ``stacklevel`` that makes a warning point at the first caller outside sessionkit."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(1)  # the caller of warnings.warn is frame 1 of the warning
    level = 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(package) or frame.f_code.co_filename == contextlib.__file__
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


class RootWatch:
    """The sessions one import adds a new root message to while they already held messages.

    :func:`write_items` asks it, before the first write to a session, whether the session
    holds messages (one count per session an import writes to), and after each write which
    roots were inserted (an idempotent import inserts none). :meth:`warn` then issues one
    :class:`SessionMergeWarning` naming the first few sessions.
    """

    SHOWN = 5

    def __init__(self, store, source: str, hint: str):
        self.store = store
        self.source = source
        self.hint = hint
        self._touched: _SeenIds | None = _SeenIds()  # sessions written to so far (spills to disk)
        self._held: set[str] = set()  # of those, the ones that held messages before this import
        self._found: dict[str, str] = {}  # session -> a root this import added to it (the first SHOWN)
        self.count = 0

    def before(self, session) -> None:
        if self._touched is not None and self._touched.add(session.session_id) and len(session):
            self._held.add(session.session_id)

    def after(self, session, items: Sequence, results: Sequence) -> None:
        sid = session.session_id
        if sid not in self._held:
            return
        for (message, parent, _), result in zip(items, results):
            if parent is None and result.inserted:
                self._held.discard(sid)  # each session counted once
                self.count += 1
                if len(self._found) < self.SHOWN:
                    self._found[sid] = message["id"]
                return

    def warn(self) -> None:
        """One :class:`SessionMergeWarning` when the import added roots to sessions that held messages."""
        if self._touched is not None:
            self._touched.close()
            self._touched = None
        # a root written in a transaction that was rolled back (the record at fault) is not stored
        shown = []
        for sid, root in self._found.items():
            try:
                stored = self.store.session(sid).get(root) is not None
            except SessionKitError:  # the store closed meanwhile: say what was written
                stored = True
            if stored:
                shown.append(sid)
            else:
                self.count -= 1
        self._found = {}
        if self.count <= 0:
            return
        listed = ", ".join(repr(sid) for sid in shown)
        more = self.count - len(shown)
        if more > 0:
            listed += f" and {more:,} more"
        n = _plural(self.count, "sessions")
        verb = "it" if self.count == 1 else "each"
        message = (
            f"importing {self.source} added new conversations (root messages) to {n} that already held "
            f"messages: {listed}; {verb} now holds several separate conversations. {self.hint}"
        )
        warnings.warn(
            SessionMergeWarning(message, source=self.source, sessions=tuple(shown), count=self.count),
            stacklevel=_outside_package_level(),
        )


def write_items(session, items: list, watch: RootWatch | None):
    """``session.import_many(items)``, telling ``watch`` which new roots it added to a session
    that already held messages."""
    if watch is None:
        return session.import_many(items)
    watch.before(session)
    results = session.import_many(items)
    watch.after(session, items, results)
    return results


#: What a :class:`SessionMergeWarning` suggests, for the importers that take ``session_prefix``.
PREFIX_HINT = (
    "Import with session_prefix= (sessionkit import --session-prefix) to keep the sessions of different sources apart."
)


@contextlib.contextmanager
def watching_roots(store, source: str, hint: str = PREFIX_HINT) -> Iterator[RootWatch]:
    """A :class:`RootWatch` for one import; its warning is issued when the import ends, also when
    it fails (the roots written before the failure stay)."""
    watch = RootWatch(store, source, hint)
    try:
        yield watch
    except BaseException as exc:
        try:
            watch.warn()
        except Exception as turned:  # warnings filtered into errors: the import's own error goes first
            exc.add_note(str(turned))
        raise
    watch.warn()
