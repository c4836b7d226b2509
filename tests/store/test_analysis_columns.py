"""The analysis columns stored with each message (docs/analysis.md), on every engine.

Every write path fills ``text``, ``n_parts``, ``tool_names`` and ``metadata`` from the
message as it reads back; a store written under schema version 5 gets them on opening
(migration 6), computed from the stored messages.
"""

from __future__ import annotations

import json

import pytest
from helpers import message, text_part
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sessionkit as sk
from sessionkit import messages as _msg
from sessionkit.parts import tool_names
from sessionkit.store._schema import SCHEMA_VERSION

# (text as the engine's statements read it: SQLite derives it from the JSON where it keeps none)
COLUMNS = "session_id, id, role, depth, tokens, bytes, created_at, {row_text}, n_parts, tool_names, metadata"


TOOL = {
    "type": "tool-search",
    "toolCallId": "c1",
    "state": "output-available",
    "input": {"q": "x"},
    "output": {"hits": 3},
}
DYN = {
    "type": "dynamic-tool",
    "toolName": "calc",
    "toolCallId": "c2",
    "state": "input-available",
    "input": {"expr": "1+1"},
}
PAYLOAD = "data:image/png;base64," + "QUJD" * 2048  # stored out of the row


def _write_everything(store):
    """Every write path: append, append_many, import_message, import_many, update, delete,
    clear, a long message (continuation rows) and a payload."""
    s = store.session("a")
    s.append(message("u1", text_part("hello"), text_part("world"), metadata={"k": [1, 2], "__sessionkit_blob__": 1}))
    s.append(message("a1", text_part("let me look"), TOOL, DYN, {"type": "reasoning", "text": "hm"}, role="assistant"))
    s.append_many([message("u2", text_part("more")), message("a2", text_part("answer " * 2000), role="assistant")])
    s.append(
        message("f1", text_part("a picture"), {"type": "file", "mediaType": "image/png", "url": PAYLOAD}),
        parent_id="u1",
    )
    s.import_message(
        message("i1", text_part("imported"), metadata={"src": "x"}), parent_id="a1", created_at=1_700_000_000_000
    )
    s.import_many(
        [
            (message("i2", text_part("bulk one"), TOOL, role="assistant"), "i1", None),
            (message("i3", role="system"), None, 1_700_000_000_001),
        ]
    )
    s.update(message("u2", text_part("changed"), DYN, metadata={"edited": True}))
    s.append(message("gone", text_part("to delete")), parent_id="i3")
    s.delete("gone")
    b = store.session("b")
    b.append(message("x", text_part("cleared")))
    b.clear()
    b.append(message("y", text_part("after clear"), role="assistant"))
    return s


def _stored(store) -> dict:
    rows = store._engine.fetch(store._engine.compile(f"SELECT {COLUMNS} FROM {{messages}}"))
    return {(r[0], r[1]): r[2:] for r in rows}


def _expected(store) -> dict:
    out = {}
    for info in store.list_sessions():
        s = store.session(info.id)
        for node in s.nodes():
            msg = s.get(node.id)
            names = tool_names(msg)
            meta = msg.get("metadata")
            out[(info.id, node.id)] = (
                msg["role"],
                node.depth,
                _msg.estimate_tokens(msg),
                node.bytes,
                msg["createdAt"],
                _msg.message_text(msg),
                len(msg["parts"]),
                names or None,
                meta,
            )
    return out


def _decoded(stored: dict) -> dict:
    return {
        k: (*v[:7], json.loads(v[7]) if v[7] else None, None if v[8] is None else json.loads(v[8]))
        for k, v in stored.items()
    }


def test_every_write_path_stores_the_analysis_columns(store_variant, new_store):
    store = new_store(store_variant, chunk_chars=4096)
    _write_everything(store)
    got = _decoded(_stored(store))
    assert got == _expected(store)
    assert set(got) == {("a", i) for i in ("u1", "a1", "u2", "a2", "f1", "i1", "i2", "i3")} | {("b", "y")}
    assert got[("a", "a1")][5:8] == ("let me look", 4, ["search", "calc"])
    assert got[("a", "u1")][8] == {"k": [1, 2], "__sessionkit_blob__": 1}
    kept = dict(store._engine.fetch(store._engine.compile("SELECT id, text FROM {messages} WHERE session_id = 'a'")))
    if store.settings.engine == "sqlite":
        # the column keeps only what the JSON functions cannot give: the message continued
        # in chunk rows (a2, longer than chunk_chars)
        assert {k for k, v in kept.items() if v is not None} == {"a2"}
    else:
        assert kept["a1"] == "let me look"


def _downgrade_to_5(store) -> None:
    """Make ``store`` a schema version 5 store: no analysis columns, no change log."""
    eng = store._engine
    with eng.write():
        if store.settings.engine == "duckdb":  # DuckDB alters no table an index depends on
            eng.execute("DROP INDEX sessionkit_messages_msg_key")
            # a version 5 row holds its JSON whole (later rows may keep their text once)
            whole = eng.dialect.message_content.format(t="sessionkit_messages")
            eng.execute(f"UPDATE sessionkit_messages SET content = {whole}")
        for col in ("text", "n_parts", "tool_names", "metadata"):
            eng.execute(eng.compile(f"ALTER TABLE {{messages}} DROP COLUMN {col}"))
        if store.settings.engine == "duckdb":
            eng.execute("CREATE UNIQUE INDEX sessionkit_messages_msg_key ON sessionkit_messages (msg_key)")
        if store.settings.engine != "duckdb":
            eng.execute(eng.compile("DROP TABLE {changes}"))
        else:  # version 7's table (moved into the messages table by the write above)
            eng.execute("DROP TABLE sessionkit_journal")
        eng.execute(eng.compile("DELETE FROM {migrations} WHERE version >= 6"))
        eng.execute(eng.sql["meta_put"], ("schema_version", "5"))


@pytest.mark.parametrize(
    "variant",
    [
        "sqlite-file",
        pytest.param("duckdb-file", marks=pytest.mark.slow),
        pytest.param("postgresql", marks=pytest.mark.slow),
    ],
)
def test_a_version_5_store_is_upgraded_and_its_columns_filled(variant, new_store):
    store = new_store(variant, chunk_chars=4096)
    _write_everything(store)
    expected = _expected(store)
    _downgrade_to_5(store)
    target = store.path  # (a PostgreSQL store's URL names its schema)
    store.close()
    with sk.open_store(target, chunk_chars=4096) as again:
        assert again.stats()["schema_version"] == SCHEMA_VERSION
        assert _decoded(_stored(again)) == expected
        ledger = [row[0] for row in again._engine.ledger()]
        assert [v for v in ledger if 5 <= v <= 7] == [5, 6, 7] and ledger[-1] == SCHEMA_VERSION
        s = again.session("a")
        s.append(message("new", text_part("after the upgrade"), TOOL, role="assistant"))
        assert _decoded(_stored(again))[("a", "new")][5:8] == ("after the upgrade", 2, ["search"])


_TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_PARTS = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, _TEXTS),
        st.builds(lambda v: {"type": "text", "text": v}, st.one_of(st.integers(), st.none(), st.lists(_TEXTS))),
        st.builds(lambda t, k: {"type": k, "text": t}, _TEXTS, st.sampled_from(["reasoning", "Text", "text "])),
        st.builds(lambda t: {"type": "text"}, _TEXTS),
    ),
    max_size=5,
)


_SHARED: dict = {}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_PARTS, min_size=1, max_size=4), chunk_chars=st.sampled_from([64, 1 << 20]))
@example(batch=[[{"type": "text", "text": "a\x00b"}, {"type": "text", "text": "c"}]], chunk_chars=1 << 20)
def test_sqlite_reads_from_the_json_the_text_every_message_would_keep(batch, chunk_chars, new_store):
    """SQLite keeps no ``text`` where its JSON functions give it: what they give (escapes,
    NUL, any Unicode, text parts among others and non-string texts) is ``text_of``. (One
    store per size of chunk, a session per example.)"""
    if _SHARED.get("owner") is not new_store:  # (the stores of this test's fixture only)
        _SHARED.clear()
        _SHARED["owner"] = new_store
    _SHARED["n"] = sid = _SHARED.get("n", 0) + 1
    written = [message(f"m{i}", *parts) for i, parts in enumerate(batch)]
    expected = {m["id"]: _msg.message_text(m) for m in written}
    if chunk_chars not in _SHARED:
        _SHARED[chunk_chars] = new_store("sqlite-memory", chunk_chars=chunk_chars)  # (64: most continue in chunks)
    store = _SHARED[chunk_chars]
    store.session(str(sid)).append_many(written)
    eng = store._engine
    assert (
        dict(eng.fetch(eng.compile("SELECT id, {row_text} FROM {messages} WHERE session_id = ?"), (str(sid),)))
        == expected
    )
