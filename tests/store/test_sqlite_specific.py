"""What only the SQLite engine has: its upgrade from older files, the children index that
holds branches only, and the append that checks the latest row it wrote before."""

from __future__ import annotations

import base64
import gc
import sqlite3

import pytest
from helpers import msg

import sessionkit as sk
from sessionkit.store.engines.sqlite import engine as sq


def rows(store, sql, params=()):
    return store._engine.fetch(sql, params)


# ---------------------------------------------------------------------------
# Upgrading a file written under schema version 2 (or 1)

V2_MESSAGES = """CREATE TABLE IF NOT EXISTS sessionkit_messages (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        id TEXT NOT NULL,
        parent_id TEXT,
        depth INTEGER NOT NULL,
        role TEXT NOT NULL,
        created_at TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        path_bytes INTEGER NOT NULL,
        path_tokens INTEGER NOT NULL,
        chunks INTEGER NOT NULL DEFAULT 0,
        content TEXT NOT NULL
    )"""

V2_RECORDS = """CREATE TABLE IF NOT EXISTS sessionkit_records (
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        n INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, kind, n)
    ) WITHOUT ROWID"""

V2_SCHEMA = [  # the layout written under schema version 2 (version 1: the same without records)
    """CREATE TABLE IF NOT EXISTS sessionkit_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    V2_MESSAGES,
    "CREATE UNIQUE INDEX IF NOT EXISTS sessionkit_messages_key ON sessionkit_messages(session_id, id)",
    "CREATE INDEX IF NOT EXISTS sessionkit_messages_children ON sessionkit_messages(session_id, parent_id)",
    "CREATE INDEX IF NOT EXISTS sessionkit_messages_order ON sessionkit_messages(session_id, seq)",
    """CREATE TABLE IF NOT EXISTS sessionkit_chunks (
        seq INTEGER NOT NULL,
        n INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (seq, n)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS sessionkit_blobs (
        sha256 TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        data BLOB NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_blob_refs (
        seq INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        PRIMARY KEY (seq, sha256)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS sessionkit_blob_refs_sha ON sessionkit_blob_refs(sha256)",
    """CREATE TABLE IF NOT EXISTS sessionkit_compactions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        id TEXT NOT NULL,
        from_id TEXT NOT NULL,
        to_id TEXT NOT NULL,
        summary TEXT NOT NULL,
        created_at TEXT NOT NULL,
        tokens_before INTEGER NOT NULL,
        tokens_after INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS sessionkit_compactions_session ON sessionkit_compactions(session_id)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS sessionkit_fts USING fts5(
        body, tokenize = 'unicode61 remove_diacritics 0'
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_runs (
        run_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT,
        error TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        usage TEXT,
        n INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS sessionkit_runs_session ON sessionkit_runs(session_id, n)",
    """CREATE TABLE IF NOT EXISTS sessionkit_events (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        run_id TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID""",
    V2_RECORDS,
]

V2_FTS_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_insert AFTER INSERT ON sessionkit_messages
       WHEN new.chunks = 0 BEGIN
         INSERT INTO sessionkit_fts(rowid, body) VALUES (new.seq, sessionkit_index_text(new.content));
       END""",
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_delete AFTER DELETE ON sessionkit_messages BEGIN
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
       END""",
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_update AFTER UPDATE OF content ON sessionkit_messages BEGIN
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
         INSERT INTO sessionkit_fts(rowid, body)
           SELECT new.seq, sessionkit_index_text(new.content) WHERE new.chunks = 0;
       END""",
]

V2_RUN_COLUMNS = "run_id, session_id, status, input, error, started_at, ended_at, usage, n"

V2_MESSAGE_COLUMNS = (
    "seq, session_id, id, parent_id, depth, role, created_at, bytes, tokens, path_bytes, path_tokens, chunks, content"
)

PAYLOAD = "data:image/png;base64," + base64.b64encode(bytes(range(256)) * 24).decode()


def fill(store, *, records: bool) -> None:
    """Branches, roots, interleaved sessions, split rows, payloads, an update, a delete,
    a compaction, the search index (built halfway), runs, events and records."""
    a, b = store.session("a"), store.session("b")
    a.append(msg("a1", "old kiwi orchard"))
    b.append(msg("b1", "deploy the kiwi service"))
    a.append(msg("a2", "deployment notes " * 30, "assistant"))  # longer than a row: continuation rows
    a.append(
        {
            "id": "a3",
            "role": "user",
            "parts": [
                {"type": "text", "text": "a picture"},
                {"type": "file", "mediaType": "image/png", "url": PAYLOAD},
            ],
        }
    )
    b.append(msg("b2", "second in b", "assistant"))
    a.append(msg("a4", "plain answer", "assistant"))
    a.append(msg("a3b", "another question, a branch"), parent_id="a2")
    a.append(msg("a4b", "answer on the branch", "assistant"))
    store.search("kiwi")  # from here on the triggers keep the index
    a.append(msg("r2", "a second root"), parent_id=None)
    a.append(msg("r2a", "under the second root", "assistant"))
    a.append(msg("a5", "back on the first path, kiwi again"), parent_id="a4")
    b.append(
        {
            "id": "b3",
            "role": "user",
            "parts": [{"type": "file", "mediaType": "image/png", "data": PAYLOAD.partition(",")[2]}],
        }
    )  # the same payload: stored once
    a.append(msg("a6", "to be deleted", "assistant"))
    a.delete("a6")
    a.append(msg("a6", "kiwi long reply " * 40, "assistant"))  # split rows while the index is on
    a.update(msg("a2", "deployment notes, shorter now", "assistant"))
    a.import_message(msg("a7", "imported under a6"), parent_id="a6", created_at=1_700_000_000_000)
    a.on_compaction(lambda messages, ctx: sk.CompactionResult("a1", "a4", "summary of the start"))
    assert a.compact(leaf_id="a5") is not None
    store.run_log.begin("a", "run-1", "hello")
    store.run_log.end("run-1", status="done", error=None, usage={"input_tokens": 3})
    store.run_log.append_events("a", [{"kind": "run.start", "run_id": "run-1"}, {"kind": "run.end", "run_id": "run-1"}])
    store.run_log.append_events("c", [{"kind": "note"}])  # a session with events only
    if records:
        store.session_records.put("a", "sent", [(1, {"text": "hi"}), (2, ["x", 1])])
        store.session_records.put("d", "table", [(0, "only records")])


def observe(store) -> dict:
    """Everything a reader can see in the store."""
    out = {
        "stats": {k: v for k, v in store.stats().items() if k not in ("bytes", "schema_version")},
        "sessions": store.list_sessions(),
    }
    for q in ("kiwi", "deploy", '"old kiwi"', "root OR branch"):
        out["search", q] = [
            (h.id, h.session_id, h.role, h.content, h.snippet, round(h.score, 9)) for h in store.search(q, limit=50)
        ]
    for sid in ("a", "b", "c", "d"):
        s = store.session(sid)
        nodes = s.nodes()
        ids = [n.id for n in nodes]
        leaves = [n.id for n in nodes if not any(m.parent_id == n.id for m in nodes)]
        out[sid] = {
            "nodes": nodes,
            "len": len(s),
            "latest": s.latest_leaf(),
            "history": s.get_history(),
            "raw history": {leaf: s.get_history(leaf_id=leaf, compacted=False) for leaf in leaves},
            "newest first": list(s.history(newest_first=True)),
            "branches": {mid: s.branches(mid) for mid in ids},
            "roots": s.roots(),
            "recent": s.recent_history(600, min_messages=2),
            "context tokens": s.context_tokens(),
            "compactions": s.compactions(),
            "search": [(h.id, round(h.score, 9)) for h in s.search("kiwi")],
            "runs": store.runs(sid),
            "events": store.events(sid),
            "records": [store.session_records.get(sid, kind) for kind in ("sent", "table")],
        }
    return out


def table_rows(path: str) -> dict:
    """Every row of every sessionkit table (messages without ``branch``), read with plain sqlite3."""
    con = sqlite3.connect(path)
    out = {}
    for (table,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'sessionkit_%' "
        "AND name NOT LIKE 'sessionkit_fts%' AND name != 'sessionkit_meta'"
    ):
        columns = V2_MESSAGE_COLUMNS if table == "sessionkit_messages" else "*"
        out[table] = sorted(con.execute(f"SELECT {columns} FROM {table}").fetchall(), key=repr)
    out["sessionkit_fts"] = con.execute("SELECT rowid, body FROM sessionkit_fts ORDER BY rowid").fetchall()
    con.close()
    return out


def write_old_file(source: str, target: str, version: int) -> None:
    """``target`` in the layout of schema ``version``, holding ``source``'s rows."""
    con = sqlite3.connect(target, isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    for stmt in V2_SCHEMA:
        if version >= 2 or stmt is not V2_RECORDS:
            con.execute(stmt)
    con.execute("ATTACH DATABASE ? AS src", (source,))
    con.execute("BEGIN")
    con.execute(
        f"INSERT INTO sessionkit_messages ({V2_MESSAGE_COLUMNS}) "
        f"SELECT {V2_MESSAGE_COLUMNS} FROM src.sessionkit_messages ORDER BY seq"
    )
    tables = [
        "sessionkit_chunks",
        "sessionkit_blobs",
        "sessionkit_blob_refs",
        "sessionkit_compactions",
        "sessionkit_runs",
        "sessionkit_events",
    ] + (["sessionkit_records"] if version >= 2 else [])
    for table in tables:
        columns = V2_RUN_COLUMNS if table == "sessionkit_runs" else "*"  # (runs gained meta later)
        con.execute(f"INSERT INTO {table} SELECT {columns} FROM src.{table}")
    con.execute("INSERT INTO sessionkit_fts(rowid, body) SELECT rowid, body FROM src.sessionkit_fts")
    for stmt in V2_FTS_TRIGGERS:
        con.execute(stmt)
    con.execute("INSERT INTO sessionkit_meta VALUES ('schema_version', ?), ('index_built', '1')", (str(version),))
    con.execute("COMMIT")
    con.execute("DETACH DATABASE src")
    con.close()


@pytest.mark.parametrize("version", [2, 1])
def test_an_old_file_is_upgraded_and_reads_back_the_same(tmp_path, version):
    source = str(tmp_path / "source.db")
    with sk.open_store(source, chunk_chars=256) as st:
        fill(st, records=version >= 2)
        before = observe(st)
    old = str(tmp_path / f"v{version}.db")
    write_old_file(source, old, version)
    stored = table_rows(old)
    assert stored["sessionkit_chunks"] and stored["sessionkit_blob_refs"] and stored["sessionkit_fts"]

    with sk.open_store(old, chunk_chars=256) as st:
        assert st.stats()["schema_version"] == sq.SCHEMA_VERSION
        after = table_rows(old)
        ledger = sorted(after.pop("sessionkit_migrations"))  # (table_rows sorts by repr)
        assert after.pop("sessionkit_changes") == []
        assert after.pop("sessionkit_labels") == []  # (version 9's table, empty)
        assert after.pop("sessionkit_embeddings") == []  # (version 10's table, empty)
        assert after.pop("sessionkit_datasets") == []  # (version 13's tables, empty)
        assert after.pop("sessionkit_dataset_items") == []
        for table in ("queues", "queue_units", "queue_claims"):  # (version 14's tables, empty)
            assert after.pop(f"sessionkit_{table}") == []
        assert all(row[9] is None for row in after["sessionkit_runs"])  # (version 11's runs.meta, added last)
        after["sessionkit_runs"] = [row[:9] for row in after["sessionkit_runs"]]
        assert after == {**stored, "sessionkit_records": stored.get("sessionkit_records", [])}
        # the ledger records the migration that created it (earlier ones ran before it existed)
        assert [row[0] for row in ledger] == list(range(5, sq.SCHEMA_VERSION + 1))
        assert ledger[0][1] == "the schema ledger (sessionkit_migrations)"
        assert observe(st) == before
        con = st._engine._db
        columns = [r[1] for r in con.execute("PRAGMA table_info(sessionkit_messages)")]
        # branch is read without touching long content
        assert columns.index("branch") == columns.index("content") - 1
        indexes = {
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'sessionkit_messages' AND sql IS NOT NULL"
            )
        }
        assert indexes == {
            "sessionkit_messages_key",
            "sessionkit_messages_order",
            "sessionkit_messages_branches",
            "sessionkit_messages_starts",
        }
        triggers = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert triggers == {"sessionkit_fts_insert", "sessionkit_fts_delete", "sessionkit_fts_update"}
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        con.execute("INSERT INTO sessionkit_fts(sessionkit_fts) VALUES ('integrity-check')")
        # every row that does not directly follow its parent in its session is a branch
        expected = {}
        for sid in ("a", "b"):
            previous = None
            for seq, mid, parent in con.execute(
                "SELECT seq, id, parent_id FROM sessionkit_messages WHERE session_id = ? ORDER BY seq", (sid,)
            ):
                expected[seq] = int(parent is not None and parent != previous)
                previous = mid
        assert dict(con.execute("SELECT seq, branch FROM sessionkit_messages")) == expected
        assert sum(expected.values()) == 2  # a3b and a5
        # the upgraded file goes on: appends, branches, search, deletes
        a = st.session("a")
        a.append(msg("n1", "kiwi after the upgrade"))
        a.append(msg("n2", "a branch after the upgrade"), parent_id="a1")
        assert [m["id"] for m in a.branches("a1")] == ["a2", "n2"]
        assert [m["id"] for m in a.branches("a7")] == ["n1"]
        assert {h.id for h in a.search("kiwi")} >= {"a1", "a5", "a6", "n1"}
        assert a.delete("a3b", subtree=True) == ["a3b", "a4b"]
        assert [m["id"] for m in a.branches("a2")] == ["a3"]
    with sk.open_store(old) as st:  # opens as it is now, nothing left to upgrade
        assert st.stats()["schema_version"] == sq.SCHEMA_VERSION
        assert st.session("a").latest_leaf()["id"] == "n2"


# ---------------------------------------------------------------------------
# The children index holds branches only


def branch_flags(store, sid):
    return dict(rows(store, "SELECT id, branch FROM sessionkit_messages WHERE session_id = ? ORDER BY seq", (sid,)))


def test_only_branches_enter_the_children_index(tmp_path):
    with sk.open_store(tmp_path / "b.db") as st:
        s, other = st.session("s"), st.session("o")
        s.append(msg("m1", "one"))
        other.append(msg("o1", "in between, another session"))
        s.append(msg("m2", "two"))
        s.append(msg("m3", "three"))
        s.append(msg("m2b", "a second child of m1"), parent_id="m1")
        s.append(msg("m3b", "under m2b"))
        s.append(msg("m4", "under m3, no longer the latest"), parent_id="m3")
        s.append(msg("r", "a root"), parent_id=None)
        s.import_message(msg("i", "imported under the latest"), parent_id="r")
        s.import_message(msg("j", "imported under m1"), parent_id="m1")
        assert branch_flags(st, "s") == {"m1": 0, "m2": 0, "m3": 0, "m2b": 1, "m3b": 0, "m4": 1, "r": 0, "i": 0, "j": 1}
        assert [m["id"] for m in s.branches("m1")] == ["m2", "m2b", "j"]
        assert [m["id"] for m in s.branches("m3")] == ["m4"]
        assert [m["id"] for m in s.branches("m2b")] == ["m3b"]
        assert s.branches("m4") == [] and s.branches("j") == []
        # m2 follows m1 directly; once it goes, m1's next row is m2b, a branch found by the index
        with pytest.raises(ValueError):
            s.delete("m2")
        assert s.delete("m2", subtree=True) == ["m2", "m3", "m4"]
        assert [m["id"] for m in s.branches("m1")] == ["m2b", "j"]
        s.append(msg("k", "under m1 again"), parent_id="m1")
        assert [m["id"] for m in s.branches("m1")] == ["m2b", "j", "k"]
        # an update changes path sizes below it, along both kinds of children
        s.update(msg("m1", "one, now much longer than it was"))
        for leaf in ("m3b", "j", "k"):
            path = s.get_history(leaf_id=leaf)
            assert s.recent_history(10**6, leaf_id=leaf).total_content_bytes == sum(
                len(sk.messages.dumps(m).encode()) for m in path
            )
        assert s.delete(["m1"], subtree=True) == ["m1", "m2b", "m3b", "j", "k"]
        assert [n.id for n in s.nodes()] == ["r", "i"]


def test_children_descendants_and_appends_are_found_through_indexes():
    # without table statistics, as a store runs
    with sk.open_store() as st:
        con = st._engine._db
        append = ("s", "x", "user", "2024-01-01T00:00:00.000Z", 1, 1, "{}", "", 0, None, None)
        for query, params, indexes in [
            (st._engine.sql["children"], ("s", "x"), ["branches", "order"]),
            (st._engine.sql["descendants"], ('["x"]', "s"), ["branches", "order"]),
            (sq._APPEND_AFTER, append + (1, "y", 0, 1, 1), ["order"]),
            (sq._APPEND_LATEST, append, ["order"]),
            (sq._APPEND_UNDER, append + ("y",), ["key", "order"]),
        ]:
            plan = [r[3] for r in con.execute("EXPLAIN QUERY PLAN " + query, params)]
            assert not [p for p in plan if p.startswith("SCAN") and "sessionkit_messages" in p], plan
            for name in indexes:
                assert any(f"sessionkit_messages_{name}" in p for p in plan), (name, plan)


# ---------------------------------------------------------------------------
# The append that checks the latest row it wrote before


@pytest.mark.parametrize("returning", [True, False], ids=["RETURNING", "no RETURNING (SQLite < 3.35)"])
def test_appends_stay_right_when_another_connection_moves_the_latest_row(tmp_path, monkeypatch, returning):
    monkeypatch.setattr(sq, "_RETURNING", returning and sq._RETURNING)
    path = str(tmp_path / "two.db")
    with sk.open_store(path) as one, sk.open_store(path) as two:
        a, b = one.session("s"), two.session("s")
        for i in range(12):  # each connection's remembered latest row goes stale in turn
            (a if (i // 3) % 2 == 0 else b).append(msg(f"m{i}", "text " * (i % 4 + 1)))
        b.append(msg("m12", "b remembers m12"))
        a.update(msg("m4", "a much longer text than before " * 3))  # m12 stays the latest, its path grows
        b.append(msg("m13", "under m12, whose path size is not what b wrote"))
        a.delete("m13")
        a.append(msg("y", "takes the place of m13: same seq, depth and parent"))
        b.append(msg("m14", "b remembers m13, which is gone"))
        a.append(msg("x", "a branch"), parent_id="m3")
        b.append(msg("m15", "under the branch now"))
        assert [m["id"] for m in a.get_history()] == ["m0", "m1", "m2", "m3", "x", "m15"]
        assert [m["id"] for m in a.get_history(leaf_id="m14")] == [f"m{i}" for i in range(13)] + ["y", "m14"]
        for node in a.nodes():
            path = a.get_history(leaf_id=node.id, compacted=False)
            assert node.depth == len(path) - 1
            assert a.recent_history(10**6, leaf_id=node.id).total_content_bytes == sum(
                len(sk.messages.dumps(m).encode()) for m in path
            )
            assert a.context_tokens(leaf_id=node.id) == sum(sk.messages.estimate_tokens(m) for m in path)


# ---------------------------------------------------------------------------
# driver errors are mapped by SQLite's result code, not by the words of the message


def _sqlite_error(kind, text: str, code: int | None):
    exc = kind(text)
    if code is not None:
        exc.sqlite_errorcode = code
    return exc


@pytest.mark.parametrize(
    "kind, text, code, expected",
    [
        (sqlite3.OperationalError, "database is locked", 5, sk.StoreLocked),
        (sqlite3.OperationalError, "database table is locked", 6, sk.StoreLocked),
        (sqlite3.OperationalError, "whatever the words", 5 | (3 << 8), sk.StoreLocked),  # SQLITE_BUSY_TIMEOUT
        (sqlite3.DatabaseError, "file is not a database", 26, sk.StoreCorrupt),
        (sqlite3.DatabaseError, "database disk image is malformed", 11, sk.StoreCorrupt),
        (sqlite3.OperationalError, "no such table: sessionkit_messages", 1, sk.StoreCorrupt),
        # the words alone decide nothing
        (sqlite3.IntegrityError, "a value that says locked and corrupt", 19, sk.SessionKitError),
        (sqlite3.ProgrammingError, "busy and malformed, but not from SQLite", None, sk.SessionKitError),
    ],
)
def test_driver_errors_are_mapped_by_result_code(tmp_path, kind, text, code, expected):
    with sk.open_store(str(tmp_path / "codes.db")) as store:
        mapped = store._engine.translate(_sqlite_error(kind, text, code))
    assert type(mapped) is expected
    assert text in str(mapped)


def test_a_row_leaves_out_the_created_at_its_column_holds_and_reads_back_whole(tmp_path):
    """A message's createdAt is its JSON's last key and the row's created_at column: the row
    keeps it once (a space after its JSON marks that), and every read puts it back in its
    place; any other message is kept as it is."""
    path = str(tmp_path / "s.db")
    text = {"type": "text", "text": 'a "createdAt": in a text, and \\"createdAt\\":'}
    written = {
        "plain": {"id": "plain", "role": "user", "parts": [text]},
        "stamped": {"id": "stamped", "role": "user", "parts": [text], "createdAt": "2024-05-01T10:00:00.000Z"},
        "first": {"createdAt": "2024-05-01T10:00:00.000Z", "id": "first", "role": "user", "parts": [text]},
        "nested": {"id": "nested", "role": "user", "parts": [text], "metadata": {"createdAt": "x"}},
        "tool": {
            "id": "tool",
            "role": "assistant",
            "parts": [{"type": "tool-t", "toolCallId": "c", "state": "input-available", "input": {"createdAt": 1}}],
        },
        "long": {"id": "long", "role": "assistant", "parts": [{"type": "text", "text": "word " * 400}]},
    }
    with sk.open_store(path, chunk_chars=1024) as st:
        s = st.session("s")
        for m in written.values():
            s.append(m)
        s.import_message({"id": "imported", "role": "user", "parts": [text]}, created_at=1_700_000_000_000)
        s.update({"id": "stamped", "role": "user", "parts": [text, text], "createdAt": "2024-05-01T10:00:00.000Z"})
        expected = {m["id"]: m for m in s.get_history()}
    con = sqlite3.connect(path)
    kept = dict(con.execute("SELECT id, content FROM sessionkit_messages WHERE chunks = 0"))
    con.close()
    shortened = {mid for mid, raw in kept.items() if raw.endswith(" ")}
    assert shortened == {"plain", "stamped", "nested", "tool", "imported"}  # (first: createdAt is not last)
    assert "long" not in kept  # (it continues in chunk rows: kept whole)
    assert {mid for mid, raw in kept.items() if '"createdAt":"20' not in raw} == shortened
    assert kept["plain"].endswith("}]} ") and kept["first"].startswith('{"createdAt":')
    with sk.open_store(path, chunk_chars=1024) as st:
        s = st.session("s")
        for mid, m in expected.items():
            assert list(m) == list(written.get(mid, m)) + (
                ["createdAt"] if "createdAt" not in written.get(mid, m) else []
            )
            assert s.get(mid) == m and list(s.get(mid)) == list(m)
        assert s.get_history() == list(expected.values())
        for read in (s.get_history(), list(s.history())):  # (each key in its place, too)
            assert [list(m) for m in read] == [list(m) for m in expected.values()]
        assert s.recent_history(0, min_messages=3).messages == list(expected.values())[-3:]
        assert {h.id for h in st.search("createdAt")} == {"plain", "stamped", "first", "nested", "imported"}
        assert expected["imported"]["createdAt"] == "2023-11-14T22:13:20.000Z"


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_index_build_raises_what_interrupted_it_and_builds_later(tmp_path, monkeypatch, raised):
    """The first search builds the index in one statement whose rows SQLite hands to the
    stemmer; what the stemmer raised midway (Ctrl-C) reaches the caller as itself, not as
    a store error, nothing of the build is kept, and the next search builds it."""
    from sessionkit.store import search as search_module

    with sk.open_store(str(tmp_path / "s.db")) as st:
        st.session("s").append_many([msg(f"m{i}", f"deploy number {i}") for i in range(50)])
        real, calls = search_module.index_text, []

        def stemming(text):
            calls.append(text)
            if len(calls) == 20:
                raise raised("midway")
            return real(text)

        monkeypatch.setattr(search_module, "index_text", stemming)
        with pytest.raises(raised, match="midway"):
            st.search("deploy")
        monkeypatch.setattr(search_module, "index_text", real)
        assert st._engine.meta("index_built") != "1"
        assert len(st.search("deploy", limit=100)) == 50


def _containers(value) -> int:
    """The objects the collector tracks in a decoded message: its dicts and lists."""
    if isinstance(value, dict):
        return 1 + sum(_containers(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_containers(v) for v in value)
    return 0


def test_a_path_read_keeps_no_tuple_per_row_alive(tmp_path):
    """get_history and history read a path's rows a few hundred at a time into a list per
    column: the collector's young generation fills with the messages read and little else,
    so a process holding many objects pays no extra full collections for a long read. Had
    the read held one tuple per row to the end (fetchall), its first generation would run
    about rows / 700 times more."""
    n = 6000
    with sk.open_store(tmp_path / "s.db") as st:
        s = st.session("s")
        s.import_many([(msg(f"m{i}", f"words of message {i}"), f"m{i - 1}" if i else None, None) for i in range(n)])
        s.get_history()
        passes = []

        def counted(phase, info):
            if phase == "start" and info["generation"] == 0:
                passes.append(1)

        for read in (s.get_history, lambda: list(s.history())):
            gc.collect()
            gc.callbacks.append(counted)
            try:
                passes.clear()
                got = read()
                ran = len(passes)
            finally:
                gc.callbacks.remove(counted)
            threshold = gc.get_threshold()[0]
            assert len(got) == n
            # young passes the messages themselves cause, and a few more for the read's own lists
            assert ran <= sum(_containers(m) for m in got) / threshold + 4, (ran, threshold)
