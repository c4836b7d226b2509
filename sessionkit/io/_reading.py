"""Reading the files an importer is given: line by line or value by value, as strict JSON.

Reading never trusts the file: bytes that are not UTF-8, gzip data that is damaged or
cut short, JSON that is not JSON (``NaN``, ``Infinity``, numbers no float holds, lone
surrogate escapes, nesting deeper than the parser goes) all become
:class:`~sessionkit.errors.MalformedInput` naming the file and the line.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import math
import os
import re
import zlib
from collections.abc import Iterator
from json.decoder import scanstring  # type: ignore[attr-defined]  # in CPython, not in typeshed
from pathlib import Path
from typing import Any

from ..errors import MalformedInput, UsageError
from ..messages import MAX_NESTING

__all__ = [
    "as_path",
    "PathMissing",
    "PathIsFolder",
    "check_file",
    "check_folder",
    "open_binary",
    "open_write",
    "iter_lines",
    "count_lines",
    "parse_json",
    "check_value",
    "iter_jsonl",
    "EMPTY",
    "TextStream",
]


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
    """Open a file for reading bytes; gzip is detected from its first bytes.

    gzip data is checked whole before the file is handed over (:func:`_check_gzip`).
    """
    check_file(path)
    if _is_gzip(path):
        _check_gzip(path)
        return gzip.open(path, "rb")
    return open(path, "rb")


def _check_gzip(path: Path) -> None:
    """Raise :class:`MalformedInput` (naming the line) when the gzip data of ``path`` is
    damaged or cut short.

    gzip checks its data only at the end of a stream (the CRC in its trailer), so bytes
    a damaged file yields before it may already be wrong: they are read once here, before
    any record is stored, so a damaged file stores nothing. Decompressing is far cheaper
    than importing, so the extra pass costs little next to the import itself.
    """
    lines = 0
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                lines += chunk.count(b"\n")
    except _GZIP_ERRORS as exc:
        raise MalformedInput(str(path), f"line {lines + 1}", _gzip_problem(exc), imported=0) from None


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


#: The longest line the line readers take, in bytes (256 MiB) unless the environment variable
#: ``SESSIONKIT_MAX_LINE_BYTES`` says otherwise: a longer line is :class:`MalformedInput`
#: naming it and the limit, rather than a read of the whole line into memory (a small gzip
#: file can hold a line of gigabytes).
MAX_LINE_BYTES = 256 << 20
_LINE_LIMIT_ENV = "SESSIONKIT_MAX_LINE_BYTES"
_CHUNK = 1 << 16
_NON_BLANK = re.compile(rb"[^ \t\r\n]")


def max_line_bytes() -> int:
    """The line limit in force: ``SESSIONKIT_MAX_LINE_BYTES`` when set, else :data:`MAX_LINE_BYTES`."""
    value = os.environ.get(_LINE_LIMIT_ENV)
    if value is None or not value.strip():
        return MAX_LINE_BYTES
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise UsageError(f"{_LINE_LIMIT_ENV} must be a positive number of bytes, got {value!r}")
    return limit


def _too_long(name: str, lineno: int, limit: int) -> MalformedInput:
    return MalformedInput(
        name,
        f"line {lineno}",
        f"the line is longer than {limit:,} bytes, the longest line read"
        f" (set {_LINE_LIMIT_ENV} to a larger number of bytes to read it)",
    )


def _raw_lines(fh, name: str, limit: int) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of every line of ``fh`` holding more than JSON white space.

    Hand-written rather than ``for line in fh``: that reads a line whole however long it is
    (a gzip file of a few hundred kilobytes can hold a line of gigabytes), and costs a
    Python step per line, which a file of millions of blank lines turns into minutes. Here
    the file is read in chunks of 64 KiB (a constant share of memory, whatever the file), a
    line longer than ``limit`` is refused as soon as it passes the limit, and runs of blank
    lines are counted in C (``bytes.count``).
    """
    lineno = 0  # the lines before the current one
    parts: list[bytes] = []  # the start of a line holding more than white space, cut by a chunk's end
    size = 0
    while True:
        try:
            data = fh.read(_CHUNK)
        except _GZIP_ERRORS as exc:
            raise MalformedInput(name, f"line {lineno + 1}", _gzip_problem(exc)) from None
        if not data:
            if parts:
                line = b"".join(parts)
                parts = []
                yield lineno + 1, line
            return
        pos = 0
        if parts:  # the current line goes on in this chunk
            end = data.find(b"\n")
            if end < 0:
                parts.append(data)
                size += len(data)
                if size > limit:
                    raise _too_long(name, lineno + 1, limit)
                continue
            size += end + 1
            if size > limit + 1:  # (the line break is not counted)
                raise _too_long(name, lineno + 1, limit)
            parts.append(data[: end + 1])
            line = b"".join(parts)
            parts, size, pos = [], 0, end + 1  # (the pieces let go before the line is handed out)
            lineno += 1
            yield lineno, line
            del line
        while True:
            found = _NON_BLANK.search(data, pos)
            if found is None:  # white space to the chunk's end: only its line breaks count
                lineno += data.count(b"\n", pos)
                break
            at = found.start()
            brk = data.rfind(b"\n", pos, at)
            start = pos if brk < 0 else brk + 1
            lineno += data.count(b"\n", pos, start)
            end = data.find(b"\n", at)
            if end < 0:  # the line goes on in the next chunk
                size = len(data) - start
                if size > limit:
                    raise _too_long(name, lineno + 1, limit)
                parts = [data[start:]]
                break
            if end - start > limit:
                raise _too_long(name, lineno + 1, limit)
            lineno += 1
            yield lineno, data[start : end + 1]
            pos = end + 1


def iter_lines(path: Path) -> Iterator[tuple[int, str, int]]:
    """``(line number, text, bytes)`` of every non-blank line, decoded from UTF-8.

    Reads a chunk at a time (:func:`_raw_lines`): a line longer than :func:`max_line_bytes`
    raises :class:`MalformedInput` naming it. A UTF-8 byte order mark at the start is
    skipped; bytes that are not UTF-8 and gzip data that is damaged or cut short raise
    :class:`MalformedInput` naming the line.
    """
    name = str(path)
    limit = max_line_bytes()
    with open_binary(path) as fh:
        for lineno, raw in _raw_lines(fh, name, limit):
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
    with open_binary(path) as fh:
        return sum(1 for _ in _raw_lines(fh, name, max_line_bytes()))


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
