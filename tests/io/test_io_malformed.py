"""Bad input gives MalformedInput naming the file and the line, never a stray built-in error.

Every importer reads a file whose first record is good and whose second is broken in one
way (bytes that are not UTF-8, gzip cut short or damaged, NaN, numbers no float holds,
lone surrogate escapes, nesting 100,000 deep); the error names line 2, says how much was
stored, and what it says was stored is what the store holds. Also: OASST trees thousands
of replies deep import (no recursion), ``createdAt`` must be a time, and a failed import
completed by importing the corrected file again.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib

import pytest
from helpers import import_file

import sessionkit as sk

# A good record per importer, as one JSON line; "@" (a JSON string) is where a bad value goes.
GOOD = {
    "openai": [{"role": "user", "content": "Where is my order?"}, {"role": "assistant", "content": "@"}],
    "oasst": [
        {
            "message_tree_id": "t1",
            "prompt": {
                "message_id": "a",
                "role": "prompter",
                "text": "hi",
                "replies": [{"message_id": "b", "role": "assistant", "text": "hello", "replies": []}],
            },
        },
        {"message_tree_id": "t2", "prompt": {"message_id": "c", "role": "prompter", "text": "@", "replies": []}},
    ],
    "hh": [
        {"chosen": "\n\nHuman: hi\n\nAssistant: yes", "rejected": "\n\nHuman: hi\n\nAssistant: no"},
        {"chosen": "\n\nHuman: @\n\nAssistant: yes", "rejected": "\n\nHuman: @\n\nAssistant: no", "x": "@"},
    ],
    "jsonl": [
        {
            "type": "message",
            "session_id": "s",
            "parent_id": None,
            "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        },
        {
            "type": "message",
            "session_id": "s",
            "parent_id": "m1",
            "message": {"id": "m2", "role": "assistant", "parts": [{"type": "text", "text": "@"}]},
        },
    ],
}
IMPORTERS = list(GOOD)

# bad JSON values put where "@" was (the raw text replaces the quoted "@")
BAD_VALUES = {
    "nan": ("NaN", "NaN is not a JSON value"),
    "infinity": ("Infinity", "Infinity is not a JSON value"),
    "minus-infinity": ("-Infinity", "-Infinity is not a JSON value"),
    "float-overflow": ("1e400", "too large for a float"),
    "long-integer": ("1" * 5000, "too long"),
    "lone-surrogate": ('"ab\\ud800cd"', "lone surrogate"),
    "lone-low-surrogate": ('"\\udfff"', "lone surrogate"),
    "surrogate-key": ('{"\\udc00": 1}', "lone surrogate"),
    "deep-nesting": ("[" * 100_000 + "]" * 100_000, None),
}


def _stored(store, kind: str) -> int:
    """Records stored, counted as the importer counts them."""
    stats = store.stats()
    if kind in ("oasst", "hh"):
        return stats["sessions"]
    return stats["messages"]


def _lines(kind: str) -> list[str]:
    return [json.dumps(rec) for rec in GOOD[kind]]


def _write(path, lines: list[str], gz: bool = False) -> None:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)


def _check(info, path, kind: str, store, where: str = "line 2") -> None:
    exc = info.value
    assert type(exc) is sk.io.MalformedInput, repr(exc)
    assert exc.source == str(path) and exc.where.startswith(where), (exc.where, str(exc))
    assert str(exc).startswith(f"{path}, {where}")
    # OpenAI files are checked whole before anything is written; the others keep line 1
    expected = 0 if kind == "openai" else 1
    assert exc.imported == expected == _stored(store, kind)
    assert ("nothing was stored" in str(exc)) == (expected == 0)


@pytest.mark.parametrize("kind", IMPORTERS)
# a hundred thousand levels of nesting take most of a second per importer: the full suite only
@pytest.mark.parametrize(
    "bad", [pytest.param(b, marks=pytest.mark.slow) if b == "deep-nesting" else b for b in BAD_VALUES]
)
def test_bad_json_values_name_the_line(kind, bad, store, tmp_path):
    raw, words = BAD_VALUES[bad]
    lines = _lines(kind)
    lines[1] = lines[1].replace('"@"', raw)
    path = tmp_path / f"{kind}.jsonl"
    _write(path, lines)
    with pytest.raises(sk.io.MalformedInput) as info:
        import_file(kind, store, path)
    _check(info, path, kind, store)
    if words:
        assert words in info.value.problem


@pytest.mark.parametrize("kind", IMPORTERS)
def test_bytes_that_are_not_utf8_name_the_line(kind, store, tmp_path):
    lines = _lines(kind)
    path = tmp_path / f"{kind}.jsonl"
    data = (lines[0] + "\n" + lines[1] + "\n").encode("utf-8").replace(b"@", b"caf\xe9", 1)
    path.write_bytes(data)
    with pytest.raises(sk.io.MalformedInput) as info:
        import_file(kind, store, path)
    _check(info, path, kind, store)
    assert "not UTF-8" in info.value.problem and "0xe9" in info.value.problem


def _repeated_gzip(line: str) -> bytes:
    """``line`` repeated until the first half of its gzip holds some whole lines: copies compress
    to a few bytes each, so a line as small as these takes hundreds of them."""
    copies = 100
    while True:
        data = gzip.compress(("\n".join([line] * copies) + "\n").encode("utf-8"))
        if zlib.decompressobj(wbits=31).decompress(data[: len(data) // 2]).count(b"\n") >= 10:
            return data
        copies *= 2


@pytest.mark.parametrize("kind", IMPORTERS)
def test_gzip_cut_short_or_damaged(kind, store, tmp_path):
    # copies of line 1, so the cut falls after some whole lines (records already stored are
    # skipped by the import: idempotent)
    data = _repeated_gzip(_lines(kind)[0])
    cut = tmp_path / f"{kind}-cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(sk.io.MalformedInput) as info:
        import_file(kind, store, cut)
    assert info.value.source == str(cut) and info.value.where.startswith("line ")
    assert "cut short" in info.value.problem
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF
    bad = tmp_path / f"{kind}-damaged.jsonl.gz"
    bad.write_bytes(bytes(damaged))
    with pytest.raises(sk.io.MalformedInput) as info:
        import_file(kind, store, bad)
    assert "gzip" in info.value.problem or "not valid JSON" in info.value.problem or "UTF-8" in info.value.problem
    crc = bytearray(data)
    crc[-8] ^= 0xFF  # the checksum in the gzip trailer
    wrong = tmp_path / f"{kind}-crc.jsonl.gz"
    wrong.write_bytes(bytes(crc))
    with pytest.raises(sk.io.MalformedInput, match="gzip data is damaged"):
        import_file(kind, store, wrong)


@pytest.mark.parametrize("kind", IMPORTERS)
def test_a_damaged_gzip_file_stores_nothing(kind, store, tmp_path):
    # gzip checks its data only at the end (the CRC in the trailer): every record before
    # it reads back whole, but may be wrong, so none of them is stored
    lines = _lines(kind)
    data = bytearray(gzip.compress(("\n".join(lines) + "\n").encode("utf-8")))
    data[-8] ^= 0xFF
    wrong = tmp_path / f"{kind}-crc.jsonl.gz"
    wrong.write_bytes(bytes(data))
    with pytest.raises(sk.io.MalformedInput, match="gzip data is damaged") as info:
        import_file(kind, store, wrong)
    assert info.value.imported == 0 == _stored(store, kind)
    assert info.value.where.startswith("line ")
    assert "nothing was stored" in str(info.value)
    _write(wrong, lines, gz=True)  # the file mended: the import completes
    import_file(kind, store, wrong)
    assert _stored(store, kind) > 0


def test_gzip_errors_are_the_ones_reading_raises():
    """The cases above raise these from the gzip module: the importers must not let them out."""
    data = gzip.compress(b"x" * 100)
    with pytest.raises(EOFError):
        gzip.decompress(data[:-20])
    with pytest.raises((zlib.error, gzip.BadGzipFile)):
        gzip.decompress(data[:-8] + bytes(8))


# ---------------------------------------------------------------------------
# Deep trees


def _deep_tree(depth: int, tree_id: str = "deep") -> str:
    """One OASST tree line: a chain ``depth`` replies deep (JSON nested twice as deep)."""
    head = "".join(
        f'{{"message_id": "m{i}", "role": "{"prompter" if i % 2 == 0 else "assistant"}", '
        f'"text": "turn {i}", "replies": ['
        for i in range(depth)
    )
    leaf = f'{{"message_id": "m{depth}", "role": "assistant", "text": "last", "replies": []}}'
    return f'{{"message_tree_id": "{tree_id}", "prompt": {head}{leaf}{"]}" * depth}}}'


# 700 levels are beyond json's reach (two nestings a level) but not Python's recursion limit; the
# deep tree goes twice past that limit, so a tree walk that recursed would fail on it too.
@pytest.mark.parametrize("depth", [700, None], ids=["700", "twice-the-recursion-limit"])
def test_deep_oasst_trees_import_without_recursion(depth, store, tmp_path):
    depth = depth or 2 * max(1000, sys.getrecursionlimit())
    path = tmp_path / "deep.jsonl"
    path.write_text(_deep_tree(depth) + "\n", encoding="utf-8")
    with pytest.raises(RecursionError):  # what the json module does with it
        json.loads(path.read_text(encoding="utf-8"))
    (session,) = sk.io.import_oasst(store, path)
    assert len(session) == depth + 1 and session.path_length() == depth + 1
    history = session.get_history()
    assert [m["id"] for m in history[:3]] == ["m0", "m1", "m2"] and history[-1]["parts"][0]["text"] == "last"
    (again,) = sk.io.import_oasst(store, path)  # idempotent
    assert len(again) == depth + 1


def test_deep_tree_errors_name_the_place_briefly(store, tmp_path):
    line = _deep_tree(500).replace('"message_id": "m400", ', "")
    path = tmp_path / "deep.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_oasst(store, path)
    assert info.value.where.startswith("line 1 (prompt.replies[0].replies[0].replies[0]...")
    assert "(400 replies deep)" in info.value.where and len(info.value.where) < 200
    assert "no 'message_id'" in info.value.problem and len(store.session("oasst-deep")) == 0


def test_deep_json_in_a_tree_is_refused_by_the_store_and_named(store, tmp_path):
    tree = json.loads(_lines("oasst")[1])
    tree["prompt"]["labels"] = json.loads("[" * 300 + "]" * 300)
    path = tmp_path / "t.jsonl"
    _write(path, [_lines("oasst")[0], json.dumps(tree)])
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_oasst(store, path)
    assert info.value.where == "line 2" and "nested deeper than 128" in info.value.problem
    assert info.value.imported == 1 == store.stats()["sessions"]


@pytest.mark.slow
def test_json_module_recursion_limit_is_not_raised(tmp_path, store):
    """The importers never return RecursionError, even deep in a call stack."""
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(200)
        for kind in IMPORTERS:
            with pytest.raises(sk.io.MalformedInput):
                import_file(kind, store, path)
    finally:
        sys.setrecursionlimit(limit)


# ---------------------------------------------------------------------------
# Times


@pytest.mark.parametrize("stamp", ["yesterday", "", "2024-13-01T00:00:00Z", "12:00", "2024-01-01T25:00:00Z"])
def test_created_at_must_be_an_iso_time(stamp, store, tmp_path):
    lines = _lines("jsonl")
    bad = json.loads(lines[1])
    bad["message"]["createdAt"] = stamp
    path = tmp_path / "times.jsonl"
    _write(path, [lines[0], json.dumps(bad)])
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_jsonl(store, path)
    assert info.value.where == "line 2" and "'createdAt' is not an ISO 8601 time" in info.value.problem
    assert str(info.value).startswith(f"{path}, line 2: message 'm2': 'createdAt' is not an ISO 8601 time")
    assert store.session("s").get("m2") is None and info.value.imported == 1

    row = json.loads(lines[1])
    row["created_at"] = stamp
    _write(path, [lines[0], json.dumps(row)])
    with pytest.raises(sk.io.MalformedInput, match="line 2: bad 'created_at'"):
        sk.io.import_jsonl(store, path)

    tree = json.loads(_lines("oasst")[1])
    tree["prompt"]["created_date"] = stamp
    path = tmp_path / "trees.jsonl"
    _write(path, [_lines("oasst")[0], json.dumps(tree)])
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_oasst(store, path)
    assert info.value.where == "line 2 (prompt)" and "'created_date' is not an ISO 8601 time" in str(info.value)
    assert store.session("oasst-t2").get("c") is None


def test_valid_times_are_kept(store, tmp_path):
    lines = _lines("jsonl")
    rec = json.loads(lines[1])
    rec["message"]["createdAt"] = "2024-03-04T05:06:07.089Z"
    path = tmp_path / "times.jsonl"
    _write(path, [lines[0], json.dumps(rec)])
    sk.io.import_jsonl(store, path)
    assert store.session("s").get("m2")["createdAt"] == "2024-03-04T05:06:07.089Z"
    tree = json.loads(_lines("oasst")[0])
    tree["prompt"]["created_date"] = "2023-02-05T14:23:50.983374+01:00"
    path = tmp_path / "trees.jsonl"
    _write(path, [json.dumps(tree)])
    (session,) = sk.io.import_oasst(store, path)
    assert session.get("a")["createdAt"] == "2023-02-05T13:23:50.983Z"
    assert session.nodes()[0].created_at == "2023-02-05T13:23:50.983Z"


# ---------------------------------------------------------------------------
# A failed import: what it keeps, what it says, and completing it


def _hh_pair(i: int) -> dict:
    return {
        "chosen": f"\n\nHuman: question {i}\n\nAssistant: good {i}",
        "rejected": f"\n\nHuman: question {i}\n\nAssistant: bad {i}",
    }


def _tree(i: int) -> dict:
    return {
        "message_tree_id": f"t{i}",
        "prompt": {
            "message_id": f"p{i}",
            "role": "prompter",
            "text": f"q{i}",
            "replies": [{"message_id": f"r{i}", "role": "assistant", "text": f"a{i}", "replies": []}],
        },
    }


@pytest.mark.parametrize("kind", ["hh", "oasst"])
def test_a_failed_import_keeps_the_records_before_and_completes_when_run_again(kind, store, tmp_path):
    make = _hh_pair if kind == "hh" else _tree
    good = [json.dumps(make(i)) for i in range(450)]  # more than the 200 records of one transaction
    broken = list(good)
    broken[300] = broken[300][:-5]  # cut short
    path = tmp_path / f"{kind}.jsonl"
    _write(path, broken)
    with pytest.raises(sk.io.MalformedInput) as info:
        import_file(kind, store, path)
    unit = "pairs" if kind == "hh" else "trees"
    assert info.value.where == "line 301" and info.value.imported == 300
    assert f"the 300 {unit} before it are stored, through line 300" in str(info.value)
    assert store.stats()["sessions"] == 300
    assert all(len(s) == (3 if kind == "hh" else 2) for s in store.list_sessions() for s in [store.session(s.id)])
    _write(path, good)
    sessions = import_file(kind, store, path)
    assert len(sessions) == 450 == store.stats()["sessions"]
    assert store.stats()["messages"] == 450 * (3 if kind == "hh" else 2)


def test_a_tree_the_store_refuses_rolls_back_only_itself(store, tmp_path):
    """The store refusing tree 5 (nesting too deep) rolls back its transaction; trees 1-4, in
    the same transaction, are written again, so every tree before the bad one is stored."""
    trees = [_tree(i) for i in range(8)]
    trees[4]["prompt"]["replies"][0]["labels"] = json.loads("[" * 200 + "]" * 200)
    path = tmp_path / "trees.jsonl"
    _write(path, [json.dumps(t) for t in trees])
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_oasst(store, path)
    assert info.value.where == "line 5" and info.value.imported == 4
    assert sorted(s.id for s in store.list_sessions()) == [f"oasst-t{i}" for i in range(4)]
    assert all(len(store.session(f"oasst-t{i}")) == 2 for i in range(4))


def test_a_jsonl_line_in_the_middle_of_a_block(store, tmp_path):
    lines = [
        json.dumps(
            {
                "type": "message",
                "session_id": "s",
                "parent_id": None if i == 0 else f"m{i - 1}",
                "message": {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": str(i)}]},
            }
        )
        for i in range(2500)
    ]
    broken = list(lines)
    broken[1700] = broken[1700].replace('"parent_id": "m1699"', '"parent_id": "ghost"')
    path = tmp_path / "s.jsonl"
    _write(path, broken)
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_jsonl(store, path)
    assert info.value.where == "line 1701" and "parent 'ghost'" in info.value.problem
    assert info.value.imported == 1700 == len(store.session("s"))
    assert "the 1,700 lines before it are stored, through line 1700" in str(info.value)
    _write(path, lines)
    sk.io.import_jsonl(store, path)
    assert len(store.session("s")) == 2500 and store.session("s").path_length() == 2500


def test_openai_files_are_checked_whole_before_anything_is_written(store, tmp_path):
    chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(1200)]
    lines = [json.dumps(m) for m in chat]
    lines[1100] = '{"role": "assistant", "content": "x", "tool_calls": 7}'
    path = tmp_path / "chat.jsonl"
    _write(path, lines)
    session = store.session("chat")
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_openai(session, path)
    assert info.value.where == "line 1101" and info.value.imported == 0 and len(session) == 0
    assert "nothing was stored" in str(info.value)


def test_a_message_the_store_refuses_stops_an_openai_import_after_the_ones_before(new_store, tmp_path):
    store = new_store("sqlite", memory=True, max_message_bytes=2000)
    chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(1200)]
    chat[700]["content"] = "x" * 5000
    path = tmp_path / "chat.jsonl"
    _write(path, [json.dumps(m) for m in chat])
    session = store.session("chat")
    with pytest.raises(sk.MessageTooLarge) as info:
        sk.io.import_openai(session, path)
    text = str(info.value)
    assert text.startswith(f"{path}, line 701: ") and "max_message_bytes=2000" in text
    assert "the 700 messages before it are stored, through line 700" in text
    assert len(session) == 700 and session.path_length() == 700
    del chat[700]
    _write(path, [json.dumps(m) for m in chat])
    results = sk.io.import_openai(session, path)
    assert [r.inserted for r in results] == [False] * 700 + [True] * 499
    # the in-memory path reports records
    with pytest.raises(sk.MessageTooLarge, match=r"<list>, record 1: "):
        sk.io.import_openai(
            store.session("other"), [{"role": "user", "content": "a"}, {"role": "user", "content": "y" * 5000}]
        )
    assert len(store.session("other")) == 1


def test_importers_do_not_leave_errors_they_did_not_mean(store, tmp_path):
    """Argument errors are the contract's TypeError/FileNotFoundError, not MalformedInput."""
    with pytest.raises(TypeError):
        sk.io.import_hh(store, 42)
    with pytest.raises(TypeError, match="progress"):
        sk.io.import_jsonl(store, tmp_path / "x.jsonl", progress="yes")
    with pytest.raises(FileNotFoundError):
        sk.io.import_openai(store.session("x"), tmp_path / "missing.json")
    with pytest.raises(TypeError):
        sk.io.chat_to_messages({"role": "user"})
    path = tmp_path / "any.jsonl"
    path.write_text("{}\n", encoding="utf-8")
    for fn in (sk.io.import_hh, sk.io.import_oasst, sk.io.import_jsonl):  # a session where a store goes
        with pytest.raises(TypeError, match="expected a sessionkit Store, got Session"):
            fn(store.session("x"), path)
    with pytest.raises(TypeError, match=r"expected a sessionkit Session \(store.session\(id\)\), got Store"):
        sk.io.import_openai(store, path)
    assert store.stats()["messages"] == 0


def test_a_second_result_for_a_call_is_named_in_a_file(store, tmp_path):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chat = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
        {"role": "tool", "tool_call_id": "c9", "content": "3"},
    ]
    path = tmp_path / "chat.jsonl"
    _write(path, [json.dumps(m) for m in chat])
    with pytest.raises(
        sk.io.MalformedInput, match=r"line 4: tool message answers call 'c1', which already has a result"
    ):
        sk.io.import_openai(store.session("s"), path)
    del chat[3]
    _write(path, [json.dumps(m) for m in chat])
    with pytest.raises(sk.io.MalformedInput, match=r"line 4: .* 'c9', but no earlier assistant message made that call"):
        sk.io.import_openai(store.session("s"), path)
