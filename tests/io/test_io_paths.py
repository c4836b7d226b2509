"""Every importer, and ``detect_format``, given the wrong thing: a path that does not exist, a
folder where a file goes, an empty file, a damaged SQLite database, bytes that are not UTF-8,
JSON cut short. Each answers with the contract's error naming the file (and the line or row
where there is one): :class:`sessionkit.UsageError` for the path, :class:`MalformedInput` for
what is in it; never ``sqlite3``'s, ``json``'s or the codec's own error. What the store holds
afterwards is what the importer promises: nothing for a path it cannot read, and for a bad
record only the records before it (an OpenAI chat file, checked whole first: nothing).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

import sessionkit as sk

DATA = Path(__file__).resolve().parent.parent / "data"

#: format -> the importer's name (every format but inspect for what is in a file: its reader
#: takes seconds to import, so inspect logs get a test of their own; nor parquet, a folder of
#: Parquet files whose checks are in test_io_parquet.py)
FORMATS = {name: fn for name, fn in sk.io.FORMATS.items() if name not in ("inspect", "parquet")}
SQLITE = ("openai-agents", "langgraph", "adk")
TEXT = [name for name in FORMATS if name not in SQLITE]
FOLDERS = ("claude-code", "swe-agent")  # the formats whose path may be a folder


def _import(name: str, store, path):
    fn = getattr(sk.io, sk.io.FORMATS[name])
    if name == "openai":
        return fn(store.session("chat"), path)
    return fn(store, path)


# --------------------------------------------------------------------------- good inputs


def _text_records(name: str) -> list[str]:
    """Two good records of a text format, one JSON line each (a .traj file is one document)."""
    if name == "openai":
        recs = [{"role": "user", "content": "Where is my order?"}, {"role": "assistant", "content": "On its way."}]
    elif name == "oasst":
        recs = [
            {
                "message_tree_id": f"t{i}",
                "prompt": {"message_id": f"m{i}", "role": "prompter", "text": "hi", "replies": []},
            }
            for i in (1, 2)
        ]
    elif name == "hh":
        recs = [
            {"chosen": f"\n\nHuman: hi {i}\n\nAssistant: yes", "rejected": f"\n\nHuman: hi {i}\n\nAssistant: no"}
            for i in (1, 2)
        ]
    elif name == "jsonl":
        recs = [
            {
                "type": "message",
                "session_id": "s",
                "parent_id": parent,
                "message": {"id": mid, "role": "user", "parts": [{"type": "text", "text": "hi"}]},
            }
            for mid, parent in (("m1", None), ("m2", "m1"))
        ]
    elif name == "claude-code":
        recs = [
            {
                "type": "user",
                "timestamp": "2025-07-01T10:00:00.000Z",
                "parentUuid": parent,
                "sessionId": "s1",
                "uuid": uid,
                "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            }
            for uid, parent in (("u1", None), ("u2", "u1"))
        ]
    elif name == "otel":  # OTLP JSON lines, as the Collector's file exporter writes: a request each
        recs = [
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": f"{i:032x}",
                                        "spanId": f"{i:016x}",
                                        "name": "retrieve",
                                        "startTimeUnixNano": "1751364000000000000",
                                        "endTimeUnixNano": "1751364001000000000",
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
            for i in (1, 2)
        ]
    else:
        raise AssertionError(name)
    return [json.dumps(r) for r in recs]


def _write_text(name: str, folder: Path, second: bytes | None = None) -> Path:
    """A file of the format whose second record (line 2) is ``second`` when given."""
    if name == "swe-agent":
        path = folder / "run.traj"
        doc = json.dumps(
            {
                "history": [
                    {"role": "user", "content": "hi", "agent": "main"},
                    {"role": "assistant", "content": "@", "agent": "main"},
                ]
            },
            indent=1,
        )
        lines = doc.encode().split(b"\n")
        if second is not None:  # the assistant's content, on a line of its own
            k = next(i for i, line in enumerate(lines) if b'"@"' in line)
            lines[k] = second
        path.write_bytes(b"\n".join(lines))
        return path
    path = folder / f"{name}.jsonl"
    first, good = _text_records(name)
    path.write_bytes(first.encode() + b"\n" + (good.encode() if second is None else second) + b"\n")
    return path


def _second_line_of(name: str, path: Path) -> int:
    return (
        2
        if name != "swe-agent"
        else next(
            i for i, line in enumerate(path.read_bytes().split(b"\n"), 1) if b"\xff" in line or line.endswith(b'"cut')
        )
    )


def _make_db(name: str, path: Path) -> None:
    """A small database of the framework's tables (its real schema, read by the importer),
    with rows enough to fill several pages."""
    conn = sqlite3.connect(path)
    text = "words " * 40
    if name == "openai-agents":
        conn.executescript(
            "CREATE TABLE agent_sessions (session_id TEXT PRIMARY KEY, created_at TIMESTAMP, updated_at TIMESTAMP);"
            "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, "
            "message_data TEXT NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);"
            "CREATE INDEX idx_agent_messages_session_id ON agent_messages (session_id, id);"
        )
        conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            [(f"s{i % 3}", json.dumps({"role": "user", "content": f"{i} {text}"})) for i in range(60)],
        )
    elif name == "langgraph":
        conn.executescript(
            "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', "
            "checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB, "
            "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));"
        )
        rows = []
        for i in range(60):
            messages = [{"type": "human", "content": f"{k} {text}", "id": f"m{k}"} for k in range(i % 5 + 1)]
            state = {"ts": "2025-07-01T10:00:00+00:00", "channel_values": {"messages": messages}}
            rows.append((f"t{i % 3}", "", f"c{i:03d}", "json", json.dumps(state).encode()))
        conn.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
    elif name == "adk":
        conn.executescript(
            "CREATE TABLE sessions (app_name VARCHAR(128) NOT NULL, user_id VARCHAR(128) NOT NULL, "
            "id VARCHAR(128) NOT NULL, state TEXT, create_time DATETIME, update_time DATETIME, "
            "PRIMARY KEY (app_name, user_id, id));"
            "CREATE TABLE events (id VARCHAR(256) NOT NULL, app_name VARCHAR(128) NOT NULL, "
            "user_id VARCHAR(128) NOT NULL, session_id VARCHAR(128) NOT NULL, invocation_id VARCHAR(256), "
            "timestamp DATETIME, event_data TEXT, PRIMARY KEY (id, app_name, user_id, session_id));"
            "CREATE INDEX idx_events_session ON events (app_name, user_id, session_id, timestamp);"
        )
        conn.executemany(
            "INSERT INTO sessions VALUES ('app', 'u', ?, '{}', ?, ?)",
            [(f"s{i}", f"2025-07-01 10:00:0{i}", f"2025-07-01 10:00:0{i}") for i in range(3)],
        )
        conn.executemany(
            "INSERT INTO events VALUES (?, 'app', 'u', ?, 'inv', ?, ?)",
            [
                (
                    f"e{i}",
                    f"s{i % 3}",
                    1751364000 + i,
                    json.dumps(
                        {
                            "author": "user",
                            "timestamp": 1751364000 + i,
                            "content": {"role": "user", "parts": [{"text": f"{i} {text}"}]},
                        }
                    ),
                )
                for i in range(60)
            ],
        )
    conn.commit()
    conn.close()


@pytest.fixture(scope="module")
def good_dbs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("dbs")
    out = {}
    for name in SQLITE:
        out[name] = folder / f"{name}.db"
        _make_db(name, out[name])
    return out


# --------------------------------------------------------------------------- damage


def _writable_schema(path: Path, sql: str, params: tuple = ()) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def _damage(how: str, path: Path, table: str) -> None:
    if how == "schema-garbage":  # the table's CREATE text
        _writable_schema(path, "UPDATE sqlite_master SET sql = 'garbage (((' WHERE name = ?", (table,))
    elif how == "schema-cut":
        _writable_schema(
            path, "UPDATE sqlite_master SET sql = 'CREATE TABLE ' || name || ' (a, b' WHERE name = ?", (table,)
        )
    elif how == "schema-not-utf8":  # a name in the schema that is not UTF-8 text
        _writable_schema(path, "UPDATE sqlite_master SET name = CAST(X'fffe41' AS TEXT) WHERE name = ?", (table,))
    elif how == "index-root-0":  # a created index pointing at no page (found when a query uses it)
        _writable_schema(path, "UPDATE sqlite_master SET rootpage = 0 WHERE type = 'index' AND sql IS NOT NULL")
    elif how == "table-root-wrong":  # every table's rows read from an index's pages
        _writable_schema(
            path,
            "UPDATE sqlite_master SET rootpage = (SELECT MIN(rootpage) FROM sqlite_master "
            "WHERE type = 'index') WHERE type = 'table'",
        )
    elif how == "pages":  # every page but the first (the schema's) scrambled
        data = bytearray(path.read_bytes())
        size = int.from_bytes(data[16:18], "big")
        for i in range(size, len(data)):
            data[i] = (data[i] * 7 + 13) & 0xFF
        path.write_bytes(bytes(data))
    elif how == "header":
        data = bytearray(path.read_bytes())
        data[16:24] = b"\xff" * 8  # page size, versions, reserved space
        path.write_bytes(bytes(data))
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2 + 100])
    else:
        raise AssertionError(how)


DAMAGE = [
    "schema-garbage",
    "schema-cut",
    "schema-not-utf8",
    "index-root-0",
    "table-root-wrong",
    "pages",
    "header",
    "truncated",
]
_TABLE = {"openai-agents": "agent_messages", "langgraph": "checkpoints", "adk": "events"}


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", sk.io.FORMATS)
def test_a_missing_path_is_a_usage_error_naming_it(name, mem_store, tmp_path):
    path = tmp_path / "nowhere" / "missing.db"
    with pytest.raises(sk.UsageError, match=r"missing\.db' does not exist") as info:
        _import(name, mem_store, path)
    assert isinstance(info.value, FileNotFoundError)  # what open() raises for it, for code catching that
    with pytest.raises(sk.UsageError, match="does not exist"):
        sk.io.detect_format(path)
    assert mem_store.stats()["messages"] == 0


@pytest.mark.parametrize("name", sk.io.FORMATS)
def test_a_folder_where_a_file_goes_is_a_usage_error_saying_so(name, mem_store, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "notes.txt").write_text("nothing to import")
    if name == "parquet":  # a folder is read, for the files of an export: it has none
        with pytest.raises(sk.UsageError, match=r"logs' is not a folder holding a Parquet export"):
            _import(name, mem_store, folder)
    elif name in FOLDERS:  # a folder is read, for its files of the format: it has none
        pattern = ".jsonl" if name == "claude-code" else ".traj"
        with pytest.raises(sk.UsageError, match=rf"logs' is a folder without \{pattern} files"):
            _import(name, mem_store, folder)
    else:
        with pytest.raises(sk.UsageError, match=r"logs' is a folder, not a file") as info:
            _import(name, mem_store, folder)
        assert not isinstance(info.value, FileNotFoundError)
    with pytest.raises(sk.UsageError, match="logs' is a folder without"):
        sk.io.detect_format(folder)
    assert mem_store.stats()["messages"] == 0


@pytest.mark.parametrize("content", [b"", b"\n  \n\t\n", b"\xef\xbb\xbf\n"], ids=["empty", "blank", "bom"])
@pytest.mark.parametrize("name", FORMATS)
def test_an_empty_file(name, content, mem_store, tmp_path):
    path = tmp_path / ("empty.traj" if name == "swe-agent" else "empty.db")
    path.write_bytes(content)
    if name in SQLITE:
        problem = "not a SQLite database"
    elif name == "swe-agent":
        problem = "not valid JSON"
    else:
        problem = r"the file is empty \(nothing but white space\): no records to import"
    with pytest.raises(sk.io.MalformedInput, match=rf"^{re.escape(str(path))}(, line \d+)?: {problem}"):
        _import(name, mem_store, path)
    if name == "swe-agent":  # told by its suffix
        assert sk.io.detect_format(path) == "swe-agent"
    else:
        with pytest.raises(sk.io.MalformedInput, match=r"empty\.db: "):
            sk.io.detect_format(path)
    assert mem_store.stats()["messages"] == 0


def test_an_empty_log_in_a_folder_of_them_is_skipped(mem_store, tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "s1.jsonl").write_text(_text_records("claude-code")[0] + "\n")
    (session,) = sk.io.import_claude_code(mem_store, tmp_path)
    assert len(session) == 1


@pytest.mark.parametrize("name", SQLITE)
def test_the_undamaged_databases_import(name, good_dbs, mem_store):
    assert sk.io.detect_format(good_dbs[name]) == name
    sessions = _import(name, mem_store, good_dbs[name])
    assert len(sessions) == 3 and mem_store.stats()["messages"] > 0


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("name", SQLITE)
def test_a_damaged_sqlite_database_is_malformed_input_naming_the_file(name, how, good_dbs, tmp_path, new_store):
    path = tmp_path / f"{name}.db"
    shutil.copy(good_dbs[name], path)
    _damage(how, path, _TABLE[name])
    store = new_store("sqlite", memory=True)
    try:
        _import(name, store, path)
    except sk.io.MalformedInput as exc:
        assert str(exc).startswith(f"{path}"), exc
        assert store.stats()["messages"] <= 60  # at most the rows read before the damage
    else:  # the damage was in a part of the file the import never reads
        assert how == "index-root-0" and name != "adk"
    try:
        found = sk.io.detect_format(path)
    except sk.io.MalformedInput as exc:  # said as it is: damaged, not "of no known framework"
        assert str(exc).startswith(f"{path}: cannot read the SQLite database, it is damaged"), exc
    else:
        assert found == name and how in ("pages", "index-root-0", "table-root-wrong", "truncated")


@pytest.mark.parametrize("name", TEXT)
def test_bytes_that_are_not_utf8_name_the_file_and_line(name, tmp_path, mem_store):
    path = _write_text(name, tmp_path, second=b'"\xff\xfe not text"' if name == "swe-agent" else b"\xff\xfe{}")
    line = _second_line_of(name, path)
    with pytest.raises(sk.io.MalformedInput, match=rf"^{path}, line {line}: not UTF-8 text") as info:
        _import(name, mem_store, path)
    _check_stored(name, mem_store, info.value)


@pytest.mark.parametrize("name", TEXT)
def test_json_cut_short_names_the_file_and_line(name, tmp_path, mem_store):
    if name == "swe-agent":
        path = tmp_path / "run.traj"
        path.write_bytes(b'{"history": [\n {"role": "user", "content": "hi"},\n {"role": "assistant", "content": "cut')
        line = 3
    else:
        first, good = _text_records(name)
        path = _write_text(name, tmp_path, second=good[: len(good) // 2].encode())
        line = 2
    with pytest.raises(sk.io.MalformedInput, match=rf"^{path}, line {line}: ") as info:
        _import(name, mem_store, path)
    _check_stored(name, mem_store, info.value)


def _check_stored(name: str, store, exc: sk.io.MalformedInput) -> None:
    """What the store holds after a bad second record is what the importer promises."""
    stats = store.stats()
    if name in ("openai", "swe-agent", "otel"):  # checked whole before anything is written
        assert stats["messages"] == stats["runs"] == stats["events"] == 0
    elif name in ("oasst", "hh"):  # one tree, or pair, per line: the first is stored
        assert exc.imported == 1 and stats["sessions"] == 1
    elif name == "jsonl":
        assert exc.imported == 1 and stats["messages"] == 1
    else:  # claude-code: the messages read before the bad line
        assert stats["messages"] <= 1


def test_the_cli_says_a_folder_or_a_missing_path_in_one_line(tmp_path, capsys):
    from sessionkit.cli import main

    folder = tmp_path / "dir"
    folder.mkdir()
    target = tmp_path / "s.db"
    for argv, words in (
        (["import", str(target), str(folder), "--format", "langgraph"], f"'{folder}' is a folder, not a file"),
        (["import", str(target), str(folder), "--format", "openai"], f"'{folder}' is a folder, not a file"),
        (["import", str(target), str(folder)], f"'{folder}' is a folder without .jsonl session logs"),
        (["import", str(target), str(folder), "--format", "swe-agent"], f"'{folder}' is a folder without .traj"),
        (["import", str(target), str(tmp_path / "gone.db"), "--format", "adk"], "gone.db' does not exist"),
        (["import", str(target), str(tmp_path / "gone.db")], "gone.db' does not exist"),
    ):
        assert main(argv) == 1, argv
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("sessionkit: error: ") and words in err, (argv, err)
        assert err.count("\n") == 1
    assert not target.exists()  # nothing to import: no store made


@pytest.mark.slow  # imports inspect-ai's log reader (seconds)
def test_an_inspect_log_that_is_empty_cut_short_or_not_utf8(tmp_path, mem_store):
    for name, data in (
        ("empty.json", b""),
        ("cut.json", b'{"version": 2, "status": "succ'),
        ("bytes.json", b'{"version": 2, "status": "success", "eval": {"task": "\xff\xfe"}}'),
        ("empty.eval", b""),
        ("cut.eval", b"PK\x03\x04 cut short"),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(sk.io.MalformedInput, match=rf"^{path}: not an inspect-ai eval log"):
            sk.io.import_inspect(mem_store, path)
    assert mem_store.stats()["messages"] == 0
