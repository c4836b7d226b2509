"""Lines read in bounded memory: a line longer than the limit (a small gzip file can hold a
line of gigabytes) is MalformedInput naming the line and the limit, which the environment
variable SESSIONKIT_MAX_LINE_BYTES raises; blank lines, millions of them, cost a count each,
and the lines after them keep their numbers."""

from __future__ import annotations

import gzip
import json

import pytest

import sessionkit as sk
from sessionkit.io import _reading

LIMIT = 1 << 20


def _pair(text: str) -> bytes:
    return (
        json.dumps(
            {"chosen": f"\n\nHuman: {text}\n\nAssistant: yes", "rejected": "\n\nHuman: x\n\nAssistant: no"}
        ).encode()
        + b"\n"
    )


def _gz(path, *chunks: bytes):
    with gzip.open(path, "wb") as fh:
        for chunk in chunks:
            fh.write(chunk)
    return path


@pytest.mark.parametrize("suffix", [b"\n", b""], ids=["ended", "last-line"])
def test_a_line_past_the_limit_is_refused_naming_it_and_the_limit(tmp_path, monkeypatch, suffix):
    monkeypatch.setenv("SESSIONKIT_MAX_LINE_BYTES", str(LIMIT))
    long_line = _pair("a" * (3 * LIMIT)).rstrip(b"\n") + suffix
    after = [_pair("after")] if suffix else []  # else the long line ends the file
    path = _gz(tmp_path / "long.jsonl.gz", _pair("first"), b"\n\n", long_line, *after)
    store = sk.open_store()
    with pytest.raises(sk.io.MalformedInput, match=r"line 4: the line is longer than 1,048,576 bytes") as caught:
        sk.io.import_hh(store, path, progress=False)
    assert "SESSIONKIT_MAX_LINE_BYTES" in str(caught.value)
    assert caught.value.imported == 1  # the line before it is stored
    with pytest.raises(sk.io.MalformedInput, match=r"line 4: the line is longer"):
        _reading.count_lines(path)  # (the progress bar's count reads the same way)
    monkeypatch.setenv("SESSIONKIT_MAX_LINE_BYTES", str(4 * LIMIT))  # raised: the line is read
    assert len(sk.io.import_hh(store, path, progress=False)) == 3 - (suffix == b"")


def test_a_line_just_at_the_limit_is_read(tmp_path, monkeypatch):
    line = _pair("b" * 1000)
    monkeypatch.setenv("SESSIONKIT_MAX_LINE_BYTES", str(len(line) - 1))  # the line break is not counted
    path = _gz(tmp_path / "edge.jsonl.gz", line)
    assert len(sk.io.import_hh(sk.open_store(), path, progress=False)) == 1
    monkeypatch.setenv("SESSIONKIT_MAX_LINE_BYTES", str(len(line) - 2))
    with pytest.raises(sk.io.MalformedInput, match="line 1: the line is longer than"):
        sk.io.import_hh(sk.open_store(), path, progress=False)


def test_a_bad_limit_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SESSIONKIT_MAX_LINE_BYTES", "lots")
    with pytest.raises(sk.UsageError, match="SESSIONKIT_MAX_LINE_BYTES"):
        sk.io.import_hh(sk.open_store(), _gz(tmp_path / "x.jsonl.gz", _pair("x")), progress=False)


def test_millions_of_blank_lines_are_counted_and_skipped(tmp_path):
    blank = 3_000_000
    path = _gz(tmp_path / "blank.jsonl.gz", _pair("one"), b"\n" * blank, b"  \t\r\n" * 1000, _pair("two"), b"{oops\n")
    assert _reading.count_lines(path) == 3
    store = sk.open_store()
    with pytest.raises(sk.io.MalformedInput, match=rf"line {blank + 1000 + 3}\b") as caught:
        sk.io.import_hh(store, path, progress=False)
    assert caught.value.imported == 2
    assert [n for n, _, _ in _reading.iter_lines(path)] == [1, blank + 1000 + 2, blank + 1000 + 3]
