"""``sessionkit view``'s arguments and the viewer's data, without a browser.

Bad input is refused with one clear line before anything is bound or written; the sessions
table's query sorts, filters and pages as the store's own API counts. The page in Chromium
is tested in tests/browser/test_viewer.py.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from helpers import viewer_in_thread

import sessionkit as sk
from sessionkit.cli import main
from sessionkit.server import is_loopback
from sessionkit.widgets import viewer


def bundle_data(text: str):
    """The value a bundle's data file gives its page (``... JSON.parse("<JSON text>") ...``)."""
    start = text.index("JSON.parse(") + len("JSON.parse(")
    literal, _ = json.JSONDecoder().raw_decode(text, start)  # the JS string literal is a JSON string
    return json.loads(literal)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["view", *argv])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("view") / "chats.db"
    with sk.open_store(path) as store:
        for k in range(12):
            items = [
                (
                    {"id": f"m{j}", "role": "user", "parts": [{"type": "text", "text": f"note {k} {j}"}]},
                    f"m{j - 1}" if j else None,
                    None,
                )
                for j in range(1 + k % 4)
            ]
            store.session(f"s{k:02d}").import_many(items)
    return path


@pytest.fixture(autouse=True)
def no_token(monkeypatch):
    monkeypatch.delenv("SESSIONKIT_TOKEN", raising=False)


def test_a_missing_store_is_a_clear_error_and_creates_nothing(tmp_path):
    missing = tmp_path / "nope.db"
    status, out, err = run(str(missing))
    assert status != 0 and out == ""
    assert err.startswith("sessionkit: error:") and "nope.db" in err
    assert not missing.exists()
    status, _, err = run(str(missing), "--bundle", str(tmp_path / "site"))
    assert status != 0 and "nope.db" in err and not (tmp_path / "site").exists()


def test_another_host_needs_a_token_and_short_tokens_are_refused(store_path, monkeypatch):
    status, out, err = run(str(store_path), "--host", "0.0.0.0")
    assert status != 0 and out == ""
    assert "--host 0.0.0.0" in err and "token" in err
    status, _, err = run(str(store_path), "--host", "0.0.0.0", "--token", "short")
    assert status != 0 and "shorter than 16 characters" in err
    monkeypatch.setenv("SESSIONKIT_TOKEN", "tiny")
    status, _, err = run(str(store_path))
    assert status != 0 and "shorter than 16 characters" in err
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")


def test_bundle_options_are_checked(store_path, tmp_path):
    status, _, err = run(str(store_path), "--session", "s01")
    assert status != 0 and "--bundle" in err
    status, _, err = run(str(store_path), "--bundle", str(tmp_path / "b"), "--write")
    assert status != 0 and "--write" in err
    status, _, err = run(str(store_path), "--bundle", str(tmp_path / "b"), "--poll", "2")
    assert status != 0 and "--poll" in err and "does not follow the store" in err
    for bad in ("0", "61", "nan"):
        status, out, err = run(str(store_path), "--poll", bad)
        assert status != 0 and out == "" and "--poll" in err and "from 0.05 to 60 seconds" in err
    status, _, err = run(str(store_path), "--bundle", str(tmp_path / "b"), "--session", "s01", "--session", "zz")
    assert status != 0 and "'zz'" in err
    status, out, err = run(str(store_path), "--bundle", str(tmp_path / "b"), "--session", "s01", "--session", "s03")
    assert status == 0, err
    assert "index.html" in out
    table = (tmp_path / "b" / "data" / "sessions.js").read_text()
    rows = bundle_data(table)["rows"]
    assert sorted(r["session_id"] for r in rows) == ["s01", "s03"]
    assert len(list((tmp_path / "b" / "data").glob("s*.js"))) == 3  # sessions.js and one per session


def fast_tokens(store, sid: str) -> int:
    return int(store.session(sid).path(None).tokens_full)  # each session is one line of messages


def test_sessions_page_sorts_filters_and_pages_as_the_store_counts(store_path):
    with sk.open_store(store_path) as store:
        sizes = {info.id: len(store.session(info.id)) for info in store.list_sessions()}
        page = viewer.sessions_page(store, sort="messages", desc=True, limit=5)
        order = sorted(sizes, key=lambda s: (-sizes[s], s))
        assert [r["session_id"] for r in page["rows"]] == order[:5]
        assert [r["messages"] for r in page["rows"]] == [sizes[s] for s in order[:5]]
        assert page["total"] == len(sizes)
        rest = viewer.sessions_page(store, sort="messages", desc=True, limit=5, offset=10)
        assert [r["session_id"] for r in rest["rows"]] == order[10:15]
        past = viewer.sessions_page(store, offset=100)
        assert past["rows"] == [] and past["total"] == len(sizes)
        only = viewer.sessions_page(store, filter="S0", sort="session_id", desc=False)
        assert [r["session_id"] for r in only["rows"]] == sorted(s for s in sizes if "s0" in s)
        for literal in ("_", "%", "s0_"):  # LIKE's wildcards are plain characters in a filter
            assert viewer.sessions_page(store, filter=literal)["total"] == 0, literal
        # a sort by source reads every session's source: the same rows, in that order
        by_source = viewer.sessions_page(store, sort="source", desc=False, limit=500)["rows"]
        assert sorted(r["session_id"] for r in by_source) == sorted(sizes)
        # the one-page query and the every-session query (a filter every id matches) agree, row for row
        fast = viewer.sessions_page(store, sort="tokens", limit=500)["rows"]
        full = viewer.sessions_page(store, sort="tokens", limit=500, filter="s")["rows"]
        assert fast == full
        assert [r["session_id"] for r in fast] == sorted(sizes, key=lambda s: (-fast_tokens(store, s), s))
        for bad in ({"sort": "text"}, {"limit": 0}, {"limit": 10_000}, {"offset": -1}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                viewer.sessions_page(store, **bad)
        with pytest.raises(sk.SessionNotFound, match="nope"):
            viewer.session_state(store, "nope")


def test_the_viewer_reads_every_engine(new_store, engine):
    """The table, search and a session page on SQLite, DuckDB and PostgreSQL, as the store counts."""
    store = new_store(engine)
    for k in range(3):
        s = store.session(f"e{k}")
        s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": f"deploy number {k}"}]})
        for j in range(k):
            s.append({"id": f"a{j}", "role": "assistant", "parts": [{"type": "text", "text": "ok"}]}, parent_id="u")
    page = viewer.sessions_page(store, sort="branches", desc=True)
    assert [(r["session_id"], r["messages"], r["branches"]) for r in page["rows"]] == [
        ("e2", 3, 1),
        ("e0", 1, 0),
        ("e1", 2, 0),
    ]
    hits = viewer.search_hits(store, "deploy")
    assert sorted((h["session_id"], h["id"]) for h in hits) == sorted(
        (h.session_id, h.id) for h in store.search("deploy", limit=50)
    )
    state = viewer.session_state(store, "e2")
    assert sorted(state["tree"]["ids"]) == ["a0", "a1", "u"] and state["latest"] == "a1"
    paths = viewer.path_state(store, "e2", "a0")
    assert [e["id"] for e in paths["full"]["entries"]] == ["u", "a0"]
    views = viewer.message_views(store, "e2", ["u", "zz"])
    assert list(views) == ["u"] and views["u"]["parts"][0]["text"] == "deploy number 2"


def test_a_bundle_never_overwrites_a_folder_it_did_not_write(store_path, tmp_path):
    """A folder with files of its own is refused, and nothing in it changes; a folder of an
    earlier bundle is replaced with --force only, and only the files that bundle wrote go."""
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "thesis.txt").write_text("years of work")
    (mine / "index.html").write_text("<p>my home page</p>")
    for extra in ((), ("--force",)):
        status, out, err = run(str(store_path), "--bundle", str(mine), *extra)
        assert status == 1 and out == ""
        assert err.startswith("sessionkit: error:") and "not a sessionkit bundle" in err, err
        assert (mine / "data" / "thesis.txt").read_text() == "years of work"
        assert (mine / "index.html").read_text() == "<p>my home page</p>"
        assert sorted(p.name for p in mine.rglob("*")) == ["data", "index.html", "thesis.txt"]

    site = tmp_path / "site"
    site.mkdir()  # an empty folder is fine
    status, _, err = run(str(store_path), "--bundle", str(site), "--session", "s01", "--session", "s02")
    assert status == 0, err
    written = {p.relative_to(site) for p in site.rglob("*")}
    (site / "data" / "notes.txt").write_text("kept")  # the user's own file beside the bundle's
    (site / "README").write_text("kept too")
    status, out, err = run(str(store_path), "--bundle", str(site), "--session", "s03")
    assert status == 1 and out == "" and "--force" in err, err
    assert {p.relative_to(site) for p in site.rglob("*")} == written | {Path("data/notes.txt"), Path("README")}
    status, _, err = run(str(store_path), "--bundle", str(site), "--session", "s03", "--force")
    assert status == 0, err
    assert (site / "data" / "notes.txt").read_text() == "kept" and (site / "README").read_text() == "kept too"
    table = (site / "data" / "sessions.js").read_text()
    rows = bundle_data(table)["rows"]
    assert [r["session_id"] for r in rows] == ["s03"]
    assert sorted(p.name for p in (site / "data").glob("s*.js")) == ["s0.js", "sessions.js"]  # s1.js is gone

    with sk.open_store(store_path) as store, pytest.raises(sk.UsageError, match="not a sessionkit bundle"):
        viewer.write_bundle(store, mine, force=True)


@pytest.mark.slow
def test_labels_reach_the_table_the_filter_the_session_and_the_bundle(new_store, engine, tmp_path):
    """A session's labels: its tags in the table's labels column (found by the filter), by
    message in the session's payload (the views' badges), and in a bundle's files."""
    store = new_store(engine)
    for sid in ("plain", "marked", "other"):
        s = store.session(sid)
        s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": f"question of {sid}"}]})
        s.append({"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "answer"}]}, parent_id="u")
    marked = store.session("marked")
    bad = marked.add_label("a", "hallucination", rating=1, note="made up", author="ana")
    good = marked.add_label("u", "clear-question")
    branch = marked.add_label("a", "resolved", target="branch", rating=5)
    store.session("other").add_label("u", "clear-question")
    wanted = {lab.message_id: [] for lab in store.labels(session_id="marked")}
    for lab in store.labels(session_id="marked"):
        wanted[lab.message_id].append(lab.id)

    page = viewer.sessions_page(store, sort="session_id", desc=False)
    assert page["labels"] is True
    shown = {r["session_id"]: r["labels"] for r in page["rows"]}
    assert shown == {"marked": "clear-question, hallucination, resolved", "other": "clear-question", "plain": None}
    # the filter finds a tag; the sort by labels reads them too
    found = viewer.sessions_page(store, filter="HALLUCINATION")
    assert [r["session_id"] for r in found["rows"]] == ["marked"] and found["total"] == 1
    assert viewer.sessions_page(store, filter="clear-q")["total"] == 2
    by_labels = viewer.sessions_page(store, sort="labels", desc=False)["rows"]
    assert [r["session_id"] for r in by_labels] == ["other", "marked", "plain"]

    state = viewer.session_state(store, "marked")
    assert {mid: [lab["id"] for lab in labs] for mid, labs in state["labels"].items()} == wanted
    first = state["labels"]["a"][0]
    assert first == {
        "id": bad.id,
        "tag": "hallucination",
        "rating": 1.0,
        "target": "message",
        "note": "made up",
        "author": "ana",
        "source": "human",
        "scorer": None,
        "rationale": None,
    }
    assert [lab["target"] for lab in state["labels"]["a"]] == ["message", "branch"]
    assert state["labels"]["u"][0]["id"] == good.id and branch.id in wanted["a"]
    assert viewer.session_state(store, "plain")["labels"] == {}

    folder = viewer.write_bundle(store, tmp_path / "b")
    table = bundle_data((folder / "data" / "sessions.js").read_text())
    assert table["labels"] is True
    assert {r["session_id"]: r["labels"] for r in table["rows"]} == shown
    name = table["files"]["marked"]
    text = (folder / name).read_text()
    payload = bundle_data(text)
    assert payload["labels"] == state["labels"]


@pytest.mark.parametrize(
    ("column", "problem"),
    [
        ("n=DELETE FROM messages", "this is a DELETE statement, refused"),
        ("n=SELECT * FROM read_csv('/etc/passwd')", "the table function read_csv() is refused"),
        ("n=SELECT session_id FROM messages", "must return session_id and one value, got the columns session_id"),
        ("n=SELECT id, depth FROM messages", "must return session_id and one value"),
        ("n=SELECT session_id, nope FROM messages", 'column "nope" not found'),
        ("n=", "has no SQL"),
        ("no equals sign", "NAME=SQL"),
        ("9lives=SELECT session_id, 1 FROM sessions", "column name '9lives'"),
        ("tokens=SELECT session_id, 1 FROM sessions", "already has a column of that name"),
    ],
)
def test_a_bad_column_is_refused_before_the_viewer_starts(store_path, tmp_path, column, problem):
    status, out, err = run(str(store_path), "--port", "0", "--column", column)
    assert status != 0 and out == "", (out, err)
    assert err.startswith("sessionkit: error:") and problem in err, err
    status, out, err = run(str(store_path), "--bundle", str(tmp_path / "b"), "--column", column)
    assert status != 0 and problem in err and not (tmp_path / "b").exists(), err


def test_a_bundle_s_column_past_the_sql_memory_limit_stops_the_command(store_path, tmp_path):
    hungry = "n=SELECT session_id, (SELECT length(string_agg(range::VARCHAR, ',')) FROM range(30000000)) FROM sessions"
    bundle = tmp_path / "b"
    status, out, err = run(str(store_path), "--bundle", str(bundle), "--sql-memory-limit", "64MB", "--column", hungry)
    assert status != 0 and out == "", (out, err)
    assert "needed more memory than the store's memory limit of 64MB" in err, err
    assert not (bundle / "index.html").exists()
    status, out, err = run(str(store_path), "--port", "0", "--sql-memory-limit", "lots")
    assert status != 0 and "sql_memory_limit must be a size with a unit" in err, err


def test_a_columns_file_names_the_line_of_a_bad_column(store_path, tmp_path):
    good = tmp_path / "good.txt"
    good.write_text(
        "# columns of the sessions table\n\nusers=SELECT session_id, count(*) AS n \\\n"
        "  FROM messages WHERE role = 'user' GROUP BY 1\n"
    )
    bad = tmp_path / "bad.txt"
    bad.write_text("users=SELECT session_id, count(*) FROM messages GROUP BY 1\n# fine so far\nbroken=DROP TABLE x\n")
    status, out, err = run(str(store_path), "--bundle", str(tmp_path / "b"), "--columns", str(good))
    assert status == 0, err
    data = bundle_data((tmp_path / "b" / "data" / "sessions.js").read_text())
    with sk.open_store(store_path) as store:
        want = {
            r["session_id"]: r["n"]
            for r in store.sql_arrow(
                "SELECT session_id, count(*) AS n FROM messages WHERE role = 'user' GROUP BY 1"
            ).to_pylist()
        }
    assert {r["session_id"]: r["users"] for r in data["rows"]} == want
    assert data["columns"] == [{"name": "users", "label": "users"}]
    status, _, err = run(str(store_path), "--port", "0", "--columns", str(bad))
    assert status != 0 and "bad.txt" in err and "DROP" in err, err
    status, _, err = run(str(store_path), "--port", "0", "--columns", str(tmp_path / "missing.txt"))
    assert status != 0 and "missing.txt" in err


def test_extra_columns_sort_filter_and_page_in_sql(store_path):
    sql = "SELECT session_id, max(depth) * 10 + length(session_id) AS score FROM messages GROUP BY 1"
    with sk.open_store(store_path) as store:
        cols = viewer.check_columns(store, [("score", sql)])
        want = {r["session_id"]: r["score"] for r in store.sql_arrow(sql).to_pylist()}
        order = sorted(want, key=lambda s: (-want[s], s))
        page = viewer.sessions_page(store, sort="score", desc=True, limit=5, columns=cols)
        assert [(r["session_id"], r["score"]) for r in page["rows"]] == [(s, want[s]) for s in order[:5]]
        assert page["columns"][0] == {"name": "score", "label": "score"}
        later = viewer.sessions_page(store, sort="score", desc=True, limit=5, offset=5, columns=cols)
        assert [r["session_id"] for r in later["rows"]] == order[5:10]
        # sorted by another column, a page reads the values of its own sessions
        plain = viewer.sessions_page(store, sort="session_id", desc=False, limit=4, columns=cols)
        assert [r["score"] for r in plain["rows"]] == [want[r["session_id"]] for r in plain["rows"]]
        value = str(want[order[0]])
        hits = viewer.sessions_page(store, filter=value, limit=500, columns=cols)["rows"]
        assert {r["session_id"] for r in hits} == {s for s in want if value in s or value in str(want[s])}
        with pytest.raises(ValueError, match="cannot sort by 'nope'"):
            viewer.sessions_page(store, sort="nope", columns=cols)


def test_columns_of_every_sql_type_are_json_in_the_page(store_path):
    """A column from SQL may give any of DuckDB's types: ``sum()`` of integers (a DECIMAL or a
    HUGEINT), an INTERVAL, a fraction, an infinite DOUBLE, bytes, a UUID, a LIST; the page's
    rows are strict JSON (no NaN or Infinity) holding each value as a number, text or list."""
    specs = [
        ("summed", "SELECT session_id, sum(length(session_id)) FROM messages GROUP BY 1"),
        ("half", "SELECT session_id, sum(depth)::DECIMAL(10, 2) / 2 FROM messages GROUP BY 1"),
        ("span", "SELECT session_id, INTERVAL 90 SECOND * count(*) FROM messages GROUP BY 1"),
        ("inf", "SELECT session_id, 'inf'::DOUBLE FROM messages GROUP BY 1"),
        ("raw", "SELECT session_id, '\\xAB'::BLOB FROM messages GROUP BY 1"),
        ("uid", "SELECT session_id, '00000000-0000-0000-0000-000000000001'::UUID FROM messages GROUP BY 1"),
        ("ids", "SELECT session_id, list(id ORDER BY id) FROM messages GROUP BY 1"),
    ]
    with sk.open_store(store_path) as store:
        cols = viewer.check_columns(store, specs)
        want = {
            r["session_id"]: r
            for r in store.sql_arrow(
                "SELECT session_id, sum(length(session_id)) AS total, sum(depth) / 2 AS half, count(*) AS n, "
                "list(id ORDER BY id) AS ids FROM messages GROUP BY 1"
            ).to_pylist()
        }
        for sort in ("summed", "session_id"):
            page = viewer.sessions_page(store, sort=sort, limit=50, columns=cols)
            rows = json.loads(json.dumps(page["rows"], allow_nan=False))
            assert len(rows) == len(want)
            for row in rows:
                w = want[row["session_id"]]
                assert row["summed"] == int(w["total"]) and isinstance(row["summed"], int)
                assert row["half"] == pytest.approx(float(w["half"]))
                assert row["span"] == 90.0 * w["n"]
                assert row["inf"] is None and row["raw"] == "ab"
                assert row["uid"] == "00000000-0000-0000-0000-000000000001" and row["ids"] == w["ids"]


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_a_session_of_run_events_alone_opens_and_is_bundled(tmp_path):
    """A session holding run events and nothing else (no message, no run) is listed, opens
    with an empty tree and its events, and goes into a bundle of the whole store."""
    with sk.open_store(tmp_path / "log.db") as store:
        store.session("chat").append({"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        store.run_log.append_events("log", [{"kind": "note", "data": {"n": 1}}, {"kind": "note", "data": "two"}])
        events = store.events("log")
        assert len(events) == 2 and store.runs("log") == []
        assert {r["session_id"] for r in viewer.sessions_page(store)["rows"]} == {"chat", "log"}
        state = viewer.session_state(store, "log")
        assert (state["tree"]["n"], state["latest"], state["runs"], state["labels"]) == (0, None, [], {})
        assert viewer.run_events(store, "log") == events
        assert viewer.session_timeline(store, "log")["runs"] == []
        for read in (viewer.session_state, viewer.session_timeline, viewer.path_state):
            with pytest.raises(sk.errors.SessionNotFound, match="no session 'none'"):
                read(store, "none")
        folder = viewer.write_bundle(store, tmp_path / "bundle")
        table = bundle_data((folder / "data" / "sessions.js").read_text(encoding="utf-8"))
        assert sorted(table["files"]) == ["chat", "log"]
        payload = bundle_data((folder / table["files"]["log"]).read_text(encoding="utf-8"))
        assert payload["events"] == events and payload["tree"]["n"] == 0 and payload["paths"] is None
        alone = viewer.write_bundle(store, tmp_path / "alone", session_ids=["log"])
        assert list(bundle_data((alone / "data" / "sessions.js").read_text(encoding="utf-8"))["files"]) == ["log"]


@pytest.mark.slow
def test_a_bundle_of_long_messages_loads_only_what_a_query_needs(tmp_path, monkeypatch):
    """15 sessions of one long message each (docs/viewer.md#search): what the page reads
    before the table shows holds none of their text; the search index is sharded by word
    and its texts cut into pieces and files, so a query of one word reads its shard and the
    files around its hits, a small share of the bundle; a replacement with --force removes
    every file of the earlier index. (The sizes of a shard, a piece and a texts file are
    lowered here, so that small texts make many of each.)"""
    from sessionkit.store.search import tokenize
    from sessionkit.widgets import _bundle_search

    monkeypatch.setattr(_bundle_search, "SHARD_BYTES", 1024)
    monkeypatch.setattr(_bundle_search, "PIECE", 250)
    monkeypatch.setattr(_bundle_search, "TEXT_FILE", 1250)
    words = ["deploy", "replication", "gunicorn", "cutover", "tables", "migrating", "sensor", "forecast"]
    path = tmp_path / "long.db"
    texts = {}
    with sk.open_store(path) as store:
        for k in range(15):
            # 1,000 words each (about 12 KB), 4,000 distinct in all
            text = " ".join(f"{words[j % len(words)]}{(j * 7 + k) % 500}" for j in range(1_000))
            texts[f"long-{k:02d}"] = text
            store.session(f"long-{k:02d}").append(
                {"id": "m", "role": "user", "parts": [{"type": "text", "text": text}]}
            )
        folder = viewer.write_bundle(store, tmp_path / "bundle")
    html = (folder / "index.html").read_text()
    assert "data/search" not in html and "data/s0.js" not in html  # read when asked for, never before
    table = (folder / "data" / "sessions.js").stat().st_size
    assert table < 15 * 1000  # one row per session, none of its text
    search = folder / "data" / "search"
    meta = bundle_data((search / "meta.js").read_text())
    assert meta["rows"] == 15 and meta["tokens"] == sum(len(tokenize(t)) for t in texts.values())
    assert (search / "meta.js").stat().st_size < 3000  # the messages' ids and lengths
    shards = sorted(search.glob("t*.js"))
    assert len(shards) == meta["shards"] >= 64
    index = sum(p.stat().st_size for p in shards)
    # a word's postings are in its shard alone
    stem = tokenize("deploy7")[0][2]
    shard = search / f"t{_bundle_search.shard_of(stem, meta['shards'])}.js"
    assert stem in [entry[0] for entry in bundle_data(shard.read_text())]
    assert sum(stem in [e[0] for e in bundle_data(p.read_text())] for p in shards) == 1
    assert shard.stat().st_size < index / 16
    # the texts, cut into pieces in files of a few pieces each, are the messages' texts
    files = sorted(search.glob("x*.js"))
    assert len(files) == len(meta["files"]) > 15 * 5
    pieces = [x for k in range(len(files)) for x in bundle_data((search / f"x{k}.js").read_text())]
    assert max(len(x) for x in pieces) == 250
    for sid, _, _, _, first_piece, length in meta["docs"]:
        n = -(-length // meta["piece"])
        assert "".join(pieces[first_piece : first_piece + n]) == texts[sid]

    with sk.open_store(path) as store:
        viewer.write_bundle(store, folder, session_ids=["long-00"], force=True)
    meta = bundle_data((search / "meta.js").read_text())
    assert len(list(search.glob("t*.js"))) == meta["shards"] < len(shards)
    assert len(list(search.glob("x*.js"))) == len(meta["files"]) < len(files)


# -- /api/changes: the page's live feed, over a real server on 127.0.0.1 -----------------------

LIVE_TOKEN = "live-feed-token-0123456789"


def _events(response):
    """The server-sent events of a streamed response, each ``{"event", "id", "data"}`` (comments skipped)."""
    event: dict = {}
    for line in response.iter_lines():
        if line == "":
            if "event" in event:
                yield event
            event = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            event[field] = value[1:] if value.startswith(" ") else value


def _note(mid: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": f"note {mid}"}]}


def test_the_changes_stream_tells_of_another_connections_writes_and_of_what_a_reconnect_missed(tmp_path):
    import httpx

    from sessionkit.server import create_view_app

    path = tmp_path / "live.db"
    with sk.open_store(path) as store, sk.open_store(path) as other:  # other: a connection of its own
        store.session("a").append(_note("a1"))
        with pytest.raises(ValueError, match="poll"):
            create_view_app(store, poll=0)
        app = create_view_app(store, token=LIVE_TOKEN, poll=0.05)
        auth = {"Authorization": f"Bearer {LIVE_TOKEN}"}
        with viewer_in_thread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            assert client.get("api/changes").status_code == 401
            with client.stream("GET", "api/changes", headers=auth) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                events = _events(response)
                ready = next(events)
                assert (ready["event"], json.loads(ready["data"]), ready["id"]) == (
                    "ready",
                    {"missed": False},
                    store.change_marker(),
                )
                other.session("b").append(_note("b1"))  # seen by the poll: no event of this store object
                change = next(events)
                assert change["event"] == "change" and change["id"] == store.change_marker() != ready["id"]
            # a page reconnecting with the last marker it saw hears at once whether it missed a write
            other.session("b").append(_note("b2"))
            for last, missed in ((change["id"], True), (store.change_marker(), False)):
                with client.stream("GET", "api/changes", headers={**auth, "Last-Event-ID": last}) as response:
                    assert json.loads(next(_events(response))["data"]) == {"missed": missed}
            # the server stopping ends an open stream (the page then reconnects to the next server)
            with client.stream("GET", "api/changes", headers=auth) as response:
                events = _events(response)
                assert next(events)["event"] == "ready"
                app.state.stopping.set()
                assert list(events) == []
