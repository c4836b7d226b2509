"""Files are read a piece at a time: the results equal reading them whole.

The JSON document reader is run with chunks of a few characters, so every value, string,
escape, number and multi-byte character straddles a chunk boundary somewhere; the
recursion-free parser is compared with ``json.loads``; an OpenAI import returns a compact
sequence of results that reads its messages back on demand.
"""

from __future__ import annotations

import json
import sys

import pytest
from helpers import chat_tool_call

import sessionkit as sk
from sessionkit.io import _reading

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CHAT = [
    {"role": "system", "content": "You are terse. Ünïcödé: 日本語 ☕ \U0001f600"},
    {"role": "user", "content": 'Quote: "a\\b" \t tab, numbers 1.5e3 -0 12345678901234567890'},
    {"role": "assistant", "content": None, "tool_calls": [chat_tool_call("c1", "search", {"q": "x" * 300, "n": 3.25})]},
    {"role": "tool", "tool_call_id": "c1", "content": "[1, 2, 3]"},
    {"role": "assistant", "content": "Done.", "metadata_extra": [True, False, None, {}, [], 0.001]},
]


@pytest.fixture
def tiny_chunks(monkeypatch):
    """The document reader reads 3 characters at a time."""
    monkeypatch.setattr(_reading.TextStream, "CHUNK", 3)


@pytest.mark.parametrize(
    "shape", ["array", "array-pretty", "document", "document-messages-last", "jsonl", "one-message", "gzip-array"]
)
def test_every_file_shape_reads_as_the_list_does(shape, tiny_chunks, tmp_path):
    import gzip

    path = tmp_path / "chat.json"
    if shape == "array":
        path.write_text(json.dumps(CHAT, ensure_ascii=False), encoding="utf-8")
    elif shape == "array-pretty":
        path.write_text(json.dumps(CHAT, indent=4), encoding="utf-8")
    elif shape == "document":
        path.write_text(json.dumps({"messages": CHAT, "model": "gpt"}, indent=2, ensure_ascii=False), encoding="utf-8")
    elif shape == "document-messages-last":
        path.write_text(
            json.dumps({"model": "gpt", "tools": [{"x": [1, {"y": "z"}]}], "messages": CHAT}), encoding="utf-8"
        )
    elif shape == "jsonl":
        path.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in CHAT) + "\n", encoding="utf-8")
    elif shape == "one-message":
        path.write_text(json.dumps(CHAT[1], indent=2), encoding="utf-8")
    else:
        path.write_bytes(gzip.compress(json.dumps(CHAT, ensure_ascii=False).encode("utf-8")))
    expected = CHAT[1:2] if shape == "one-message" else CHAT
    with sk.open_store() as store:
        ref, got = store.session("ref"), store.session("file")
        sk.io.import_openai(ref, expected)
        sk.io.import_openai(got, path)
        assert [(m["id"], m["parts"], m.get("metadata")) for m in got.get_history()] == [
            (m["id"], m["parts"], m.get("metadata")) for m in ref.get_history()
        ]


@pytest.mark.parametrize(
    "text, where, words",
    [
        ('[{"role": "user", "content": "a"},\n {"role": "user", "content": "b"}\n', "line 3", "expecting ',' or ']'"),
        ('[{"role": "user", "content": "a"}] [1]', "line 1", "more data after the JSON array"),
        ('[{"role": "user", "content": "a"},\n NaN]', "line 2", "NaN is not a JSON value"),
        ('[{"role": "user", "content": "a"},\n {"role": "user", "content": 1e999}]', "line 2", "too large"),
        ('[{"role": "user",\n "content": "\\ud83d"}]', "line 1", "lone surrogate"),
        ('{"messages": [{"role": "user", "content": "a"}], "messages": []}', "line 1", "two 'messages' arrays"),
        ('{"model": "x"}', None, "expected a JSON array of chat messages"),
        ('[\n{"role": "user", "content": "caf\xe9"}]', "line 2", "not UTF-8"),
        ("[" + "[" * 5000 + "]" * 5000 + "]", "line 1", "nested too deep"),
        ('{"role": "user", "content": "a"}\n{"role": "user", "content": "b"\n', "line 2", "not valid JSON"),
    ],
)
def test_document_errors_name_the_line(text, where, words, tiny_chunks, tmp_path):
    path = tmp_path / "chat.json"
    path.write_bytes(text.encode("utf-8") if "\xe9" not in text else text.encode("latin-1"))
    with sk.open_store() as store:
        with pytest.raises(sk.io.MalformedInput) as info:
            sk.io.import_openai(store.session("s"), path)
        assert info.value.where == where or (where and info.value.where.startswith(where)), str(info.value)
        assert words in str(info.value)
        assert len(store.session("s")) == 0


def test_array_records_are_labelled_with_their_line(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text('[\n  {"role": "user", "content": "a"},\n  {"content": "no role"}\n]', encoding="utf-8")
    with sk.open_store() as store, pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_openai(store.session("s"), path)
    assert info.value.where == "record 1 (line 3)" and "no 'role'" in info.value.problem


# ---------------------------------------------------------------------------
# The parser without recursion


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(value=_json, indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans())
def test_parser_without_recursion_reads_what_json_reads(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert _reading._loads_deep(text) == json.loads(text)
    assert _reading._loads_deep(f" \n{text}\t ") == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[",
        "[1,]",
        '{"a" 1}',
        '{"a": 1,}',
        "[1 2]",
        "01",
        "-",
        "1.",
        "tru",
        '"\\x"',
        '"a',
        "[1]]",
        '{"a": [}',
        "nul",
        "{1: 2}",
        "[1] x",
    ],
)
def test_parser_without_recursion_refuses_what_json_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        _reading._loads_deep(text)


def test_parser_without_recursion_goes_deeper_than_json():
    # 20 times the recursion limit: beyond what any recursive parser (json's C one included) reads
    depth = 20 * max(1000, sys.getrecursionlimit())
    text = '{"a": ' * depth + '[1, 2.5, "x"]' + "}" * depth
    with pytest.raises(RecursionError):
        json.loads(text)
    value = _reading._loads_deep(text)
    for _ in range(depth):
        value = value["a"]
    assert value == [1, 2.5, "x"]
    for bad in ("NaN", "Infinity", "-Infinity", "1e400"):
        with pytest.raises(ValueError):
            _reading._loads_deep("[" * 3000 + bad + "]" * 3000)


# ---------------------------------------------------------------------------
# Results


def test_import_results_are_compact_and_read_back(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in CHAT) + "\n", encoding="utf-8")
    with sk.open_store() as store:
        session = store.session("s")
        results = sk.io.import_openai(session, path)
        history = session.get_history()
        assert len(results) == len(history) == 4
        assert [r.message["id"] for r in results] == [m["id"] for m in history] == results.ids
        assert [r.message for r in results] == history
        assert all(r.inserted for r in results) and isinstance(results[0], sk.store.AppendResult)
        assert results[-1].message == history[-1] and [r.message["id"] for r in results[1:3]] == results.ids[1:3]
        with pytest.raises(IndexError):
            results[4]
        again = sk.io.import_openai(session, path)
        assert not any(r.inserted for r in again) and again.ids == results.ids
        assert "4 messages, 0 inserted" in repr(again)
