"""A stored message reads back as it was written, keys in their order, by every way a path is
read: run by run (SQLite's ``rows_between``), walked row by row (``walk_contents``: any
engine, and SQLite where a compaction lies on the path), from DuckDB's cache of its newest
rows and from its file past them. A row leaves out its ``createdAt`` where that is the
JSON's last key and the ``created_at`` column holds it, and a read adds it back as the
message's last key, not by rebuilding the JSON."""

from __future__ import annotations

import pytest

import sessionkit as sk


def _written() -> list[dict]:
    text = {"type": "text", "text": 'a "createdAt": in a text'}
    out = [
        {"createdAt": "2024-05-01T10:00:00.000Z", "id": "first", "role": "user", "parts": [text]},
        {"id": "m1", "role": "assistant", "parts": [text], "metadata": {"createdAt": "x", "b": 1}},
        {"id": "m2", "role": "user", "parts": [text], "createdAt": "2024-05-01T10:00:01.000Z"},
        {"id": "long", "role": "assistant", "parts": [{"type": "text", "text": "word " * 400}]},
    ]
    # more than twice the 256 newest rows DuckDB keeps in its cache: its reads go to the
    # file for the rest, in the lean read every engine has
    out += [{"id": f"n{i}", "role": "user" if i % 2 else "assistant", "parts": [text]} for i in range(600)]
    return out


@pytest.mark.parametrize("store", ["sqlite", "duckdb-file", "postgresql"], indirect=True)
def test_every_path_read_gives_each_message_with_its_keys_in_place(store):
    s = store.session("k")
    stored = [s.append(m).message for m in _written()]
    assert list(stored[0])[0] == "createdAt" and list(stored[2])[-1] == "createdAt"
    shape = [(m, list(m)) for m in stored]
    for read in (s.get_history(), s.get_history(compacted=False), list(s.history())):
        assert [(m, list(m)) for m in read] == shape
    s.on_compaction(lambda messages, ctx: sk.CompactionResult(from_id="m1", to_id="m2", summary="the two"))
    s.compact()
    rest = [(m, list(m)) for m in stored if m["id"] not in ("m1", "m2")]
    for read in (s.get_history(), store.session("k").get_history()):  # (a new object: no cache of its own)
        assert len(read) == len(stored) - 1
        assert [(m, list(m)) for m in read if m.get("id") in {m["id"] for m, _ in rest}] == rest
