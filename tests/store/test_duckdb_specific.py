"""What only the DuckDB engine has: its file lock, its own inverted index, its bulk path."""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from helpers import message, msg, text_part
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("duckdb")

import sessionkit as sk
from sessionkit import messages as _msg
from sessionkit.store import LATEST
from sessionkit.store.engines.duckdb import search as duckdb_search
from sessionkit.store.engines.duckdb import state as duckdb_state
from sessionkit.store.engines.duckdb.search import BM25_B, BM25_K1
from sessionkit.store.engines.duckdb.state import whole_content
from sessionkit.store.search import matches, parse_query

#: what the ``store`` fixture (tests/store/conftest.py) opens here: a DuckDB file
STORE_KIND = "duckdb"


def raw(store, sql, params=None):
    return store._engine.fetch(sql, params)


def index_rows(store, sid=None):
    """{message id: sorted stems} of the indexed messages, straight from the index."""
    where, params = "", []
    if sid is not None:
        where, params = "AND m.session_id = ?", [sid]
    rows = raw(
        store,
        f"""SELECT m.id, t.term FROM sessionkit_messages m
            LEFT JOIN sessionkit_terms t ON t.seq = m.seq
            WHERE m.index_len IS NOT NULL {where}""",
        params,
    )
    out: dict[str, list] = {}
    for mid, term in rows:
        out.setdefault(mid, [])
        if term is not None:
            out[mid].append(term)
    return {k: sorted(v) for k, v in out.items()}


# ---------------------------------------------------------------------------
# S5: a file held by another process


HOLDER = textwrap.dedent(
    """
    import sys
    import sessionkit as sk
    store = sk.open_store(sys.argv[1])
    store.session().append({"id": "held", "role": "user", "parts": []})
    print("ready", flush=True)
    sys.stdin.read()  # hold the file until the test closes our stdin
    store.close()
    """
)


@pytest.mark.slow  # a second process
def test_S5_file_held_by_another_process_raises_StoreLocked_naming_it(tmp_path):
    import duckdb

    path = str(tmp_path / "held.duckdb")
    marker = "secret-token-on-argv-7f3a"  # an argument that must not reach logs
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path, marker],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    attempts, sleeps = [], []
    connect, sleep = duckdb.connect, time.sleep
    try:
        assert proc.stdout.readline().strip() == "ready"
        # it fails at once, never waiting for the lock: one attempt to open the file, no pause
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(duckdb, "connect", lambda *a, **k: attempts.append(a) or connect(*a, **k))
            patch.setattr(time, "sleep", lambda seconds: sleeps.append(seconds) or sleep(seconds))
            with pytest.raises(sk.StoreLocked) as info:
                sk.open_store(path)
        assert (len(attempts), sleeps) == (1, []), (attempts, sleeps)
        assert proc.poll() is None  # refused while the other process still held the file
        text = str(info.value)
        assert f"PID {proc.pid}" in text
        assert os.path.basename(sys.executable) in text  # the holder's program ...
        assert marker not in text  # ... never its arguments
        assert path in text
        assert isinstance(info.value.__cause__, Exception)  # DuckDB's error kept as the cause
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    with sk.open_store(path) as again:  # released: opens normally and kept the data
        assert again.session().get("held") is not None


# ---------------------------------------------------------------------------
# the inverted index


def test_index_is_lazy_then_current_after_update_delete_clear(store):
    s, other = store.session("s"), store.session("o")
    s.append(msg("a", "Deploying the blue service"))
    s.append(msg("b", "the green service failed"))
    other.append(msg("x", "blue whales deploy nothing"))
    assert raw(store, "SELECT count(*) FROM sessionkit_terms")[0][0] == 0  # nothing before a search
    assert [h.id for h in s.search("deployments")] == ["a"]
    assert index_rows(store, "s") == {
        "a": ["blue", "deploy", "servic", "the"],
        "b": ["fail", "green", "servic", "the"],
    }
    s.append(msg("c", "purple service"), parent_id="a")
    s.import_message(msg("d", "imported purple"), parent_id="c")
    assert index_rows(store, "s")["c"] == ["purpl", "servic"]
    assert {h.id for h in s.search("purple")} == {"c", "d"}
    s.update(msg("a", "now orange"))
    assert index_rows(store, "s")["a"] == ["now", "orang"]
    assert s.search("blue") == []
    assert [h.id for h in store.search("blue")] == ["x"]
    s.delete("b")
    assert "b" not in index_rows(store, "s")
    s.delete("c", subtree=True)
    assert set(index_rows(store, "s")) == {"a"}
    s.clear()
    assert index_rows(store, "s") == {}
    assert index_rows(store, "o") == {"x": ["blue", "deploy", "noth", "whale"]}
    assert store.stats()["indexed_messages"] == 1
    store.delete_session("o")
    assert raw(store, "SELECT count(*) FROM sessionkit_terms")[0][0] == 0
    assert raw(store, "SELECT count(index_len) FROM sessionkit_messages")[0][0] == 0


def test_index_survives_reopen_and_keeps_positions(tmp_path):
    path = tmp_path / "p.duckdb"
    with sk.open_store(path) as st:
        s = st.session()
        s.append(msg("a", "to be or not to be"))
        st.search("be")
    with sk.open_store(path) as st:
        assert st.stats()["indexed_messages"] == 1
        st.session().append(msg("b", "not to worry"))  # indexed on write: the flag was stored
        assert st.stats()["indexed_messages"] == 2
        rows = dict(
            raw(
                st,
                "SELECT term, pos FROM sessionkit_terms t JOIN sessionkit_messages m ON m.seq = t.seq WHERE m.id = 'a'",
            )
        )
        assert rows == {"to": [0, 4], "be": [1, 5], "or": [2], "not": [3]}
        assert [h.id for h in st.search('"not to be"')] == ["a"]
        assert sorted(h.id for h in st.search('"not to"')) == ["a", "b"]


def test_phrases_need_adjacent_stems_in_order(store):
    s = store.session()
    s.append(msg("fwd", "we deployed the new services yesterday"))
    s.append(msg("rev", "services new deployed"))
    s.append(msg("gap", "new shiny services"))
    s.append(msg("rep", "very very good"))
    assert [h.id for h in s.search('"new services"')] == ["fwd"]
    assert [h.id for h in s.search('"deploying the new service"')] == ["fwd"]
    assert [h.id for h in s.search('"services new"')] == ["rev"]
    assert {h.id for h in s.search("new services")} == {"fwd", "rev", "gap"}
    assert [h.id for h in s.search('"very very good"')] == ["rep"]
    assert s.search('"very good very"') == []
    assert [h.id for h in s.search('"new services" deployed')] == ["fwd"]


WORDS = "alpha beta gamma delta deploy deploying deployment service services run running ran".split()


def test_hits_equal_the_reference_semantics_on_random_texts(store):
    rng = random.Random(7)
    texts = {}
    s = store.session()
    for i in range(120):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))
        texts[f"m{i}"] = text
        s.append(message(f"m{i}", text_part(text)), parent_id=None)  # the text as drawn, even when empty
    queries = [
        "alpha",
        "deploying",
        "run service",
        '"alpha beta"',
        '"deploy service" gamma',
        '"running ran"',
        "delta delta",
        '"beta beta"',
    ]
    queries += [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.5
        else '"' + " ".join(rng.choice(WORDS) for _ in range(2)) + '"'
        for _ in range(30)
    ]
    for q in queries:
        parsed = parse_query(q)
        want = {mid for mid, text in texts.items() if matches(text, parsed)}
        got = {h.id for h in s.search(q, limit=1000)}
        assert got == want, q


@pytest.mark.parametrize("candidates", [1, 2, 5, 40])
def test_a_bounded_search_ranks_the_newest_matches_of_its_session(store, candidates):
    """With ``search_candidates`` below the matches, a search ranks the newest that many
    messages that hold every word and phrase, in the session asked (or the store): the
    newest matches are found slice by slice from the newest end, so the older messages
    of every other kind (a word missing, a phrase apart, another session) must not count."""
    rng = random.Random(candidates)
    words = ["alpha", "beta", "gamma", "delta"]
    sessions = {sid: store.session(sid) for sid in ("a", "b")}
    order: list[tuple[str, str, str]] = []  # (session, id, text), oldest first
    for i in range(90):
        sid = rng.choice(list(sessions))
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        sessions[sid].append(msg(f"m{i}", text))
        order.append((sid, f"m{i}", text))
    store.settings.search_candidates = candidates
    for q in ["alpha", "alpha beta", '"alpha beta"', '"beta gamma" delta', "delta gamma beta", '"gamma gamma"']:
        parsed = parse_query(q)
        for where in (None, "a", "b"):
            newest = [mid for sid, mid, text in order if where in (None, sid) and matches(text, parsed)]
            hits = store.search(q, session_id=where, limit=1000)
            assert {h.id for h in hits} == set(newest[-candidates:]), (q, where)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_bm25_scores_match_the_formula(store):
    docs = {
        "short": "kiwi mango",
        "long": "kiwi mango papaya melon grape lemon lime",
        "twice": "kiwi kiwi mango papaya",
        "none": "papaya melon",
        "rare": "durian kiwi",
    }
    s = store.session()
    for mid, text in docs.items():
        s.append(msg(mid, text), parent_id=None)
    lengths = {mid: len(text.split()) for mid, text in docs.items()}
    n, avgdl = len(docs), sum(lengths.values()) / len(docs)

    def expected(mid, terms):
        total = 0.0
        for term in terms:
            df = sum(term in docs[d].split() for d in docs)
            tf = docs[mid].split().count(term)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * lengths[mid] / avgdl))
        return total

    order = list(docs)
    hits = s.search("kiwi")
    assert [h.id for h in hits] == sorted(  # equal scores: the newer message first
        [d for d in docs if "kiwi" in docs[d]], key=lambda d: (-round(expected(d, ["kiwi"]), 9), -order.index(d))
    )
    for h in hits:
        assert h.score == pytest.approx(expected(h.id, ["kiwi"]))
    assert hits[0].id == "twice"  # more occurrences win
    assert [h.id for h in hits].index("short") < [h.id for h in hits].index("long")  # shorter wins
    # a rare word weighs more than a common one
    both = {h.id: h.score for h in s.search("durian kiwi")}
    assert list(both) == ["rare"]
    assert both["rare"] == pytest.approx(expected("rare", ["durian", "kiwi"]))
    assert expected("rare", ["durian"]) > expected("rare", ["kiwi"])


def test_search_scopes_to_the_session_but_ranks_store_wide(store):
    a, b = store.session("a"), store.session("b")
    a.append(msg("a1", "shared word here"))
    b.append(msg("b1", "shared word there"))
    assert [h.id for h in a.search("shared")] == ["a1"]
    assert {(h.session_id, h.id) for h in store.search("shared")} == {("a", "a1"), ("b", "b1")}


# ---------------------------------------------------------------------------
# write order, bulk writes, files


def test_write_sequence_is_never_reused(store):
    s = store.session()
    s.append(msg("a", "one"))
    first = store._engine.node("", "a").seq
    s.delete("a")
    with pytest.raises(sk.MessageNotFound):
        s.append(msg("x", "orphan"), parent_id="missing")
    s.append(msg("b", "two"))
    assert store._engine.node("", "b").seq > first
    assert s.latest_leaf()["id"] == "b"


def _bulk(store, sid, items):
    eng = store._engine
    preps = [(_msg.prepare(m, created_at=None), parent, None) for m, parent in items]
    with eng.write():
        return eng.w_insert_many(
            sid,
            [(p, parent, _msg.normalize_created(p.message.get("createdAt"))) for p, parent, _ in preps],
            eng.index.built(),
        )


def test_bulk_insert_matches_one_by_one(tmp_path):
    payload = "data:image/png;base64," + "QUJD" * 2000
    items = [
        (msg("r", "root text"), None),
        (msg("a", "first child"), "r"),
        (msg("b", "second child"), "r"),
        (msg("c", "after latest"), LATEST),
        ({"id": "f", "role": "user", "parts": [{"type": "file", "mediaType": "image/png", "url": payload}]}, "a"),
        (msg("big", "x" * 5000), "f"),
        (msg("a", "duplicate id: ignored"), "r"),
    ]
    with (
        sk.open_store(tmp_path / "one.duckdb", chunk_chars=1000) as one,
        sk.open_store(tmp_path / "bulk.duckdb", chunk_chars=1000) as bulk,
    ):
        one.search("warm")  # index on in both, so the bulk path writes index rows too
        bulk.search("warm")
        s1 = one.session("s")
        for m, parent in items:
            if parent is LATEST:
                s1.import_message(m, parent_id=LATEST)
            else:
                s1.import_message(m, parent_id=parent)
        result = _bulk(bulk, "s", items)
        assert [ins for ins, _ in result] == [True] * 6 + [False]
        assert result[-1][1] == result[1][1]  # the duplicate points at the stored row
        s2 = bulk.session("s")

        def strip(ms):
            return [{k: v for k, v in m.items() if k != "createdAt"} for m in ms]

        for leaf in ("b", "c", "big"):
            assert strip(s2.get_history(leaf_id=leaf)) == strip(s1.get_history(leaf_id=leaf))
        assert s2.latest_leaf()["id"] == "big"
        n1 = [n._replace(seq=0, created_at="") for n in one._engine.nodes("s")]
        n2 = [n._replace(seq=0, created_at="") for n in bulk._engine.nodes("s")]
        assert n1 == n2  # depth and path totals too
        for key in ("messages", "blobs", "blob_bytes", "indexed_messages"):
            assert bulk.stats()[key] == one.stats()[key]
        assert [h.id for h in s2.search("child")] == [h.id for h in s1.search("child")]
        assert raw(bulk, "SELECT count(*) FROM sessionkit_chunks")[0][0] > 0
        again = _bulk(bulk, "s", items)  # idempotent: nothing new
        assert [ins for ins, _ in again] == [False] * 7
        assert bulk.stats()["messages"] == 6


def test_bulk_insert_unknown_parent_stores_nothing(store):
    before = store.stats()["messages"]
    with pytest.raises(sk.MessageNotFound):
        _bulk(store, "s", [(msg("a", "x"), None), (msg("b", "y"), "nope")])
    assert store.stats()["messages"] == before
    assert store.session("s").latest_leaf() is None
    # an unknown parent is fine when the message itself is already stored
    store.session("s").append(msg("a", "x"))
    assert _bulk(store, "s", [(msg("a", "x"), "nope")])[0][0] is False


def test_two_stores_on_one_file_in_one_process_share_it(tmp_path):
    path = tmp_path / "shared.duckdb"
    with sk.open_store(path) as one, sk.open_store(path) as two:
        one.session().append(msg("a", "from one"))
        two.session().append(msg("b", "from two"))  # attaches to a: the latest leaf
        assert [m["id"] for m in one.session().get_history()] == ["a", "b"]
        assert one.session().latest_leaf()["id"] == "b"


def test_a_new_file_takes_small_blocks_and_an_old_file_keeps_its_own(tmp_path):
    import duckdb

    def block_size(con):
        return con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0]

    new = tmp_path / "it's new.duckdb"  # a quote in the name: ATTACH takes it as a literal
    with sk.open_store(new) as st:
        st.session().append(msg("a", "hello"))
        mine = duckdb.connect(str(new))  # the user's own connection in the same process
        assert block_size(mine) == 64 * 1024
        assert mine.execute("SELECT value FROM sessionkit_meta WHERE key = 'schema_version'").fetchall()
        mine.close()
    old = tmp_path / "old.duckdb"
    with duckdb.connect() as con:  # made as DuckDB makes a file by default
        con.execute(f"ATTACH '{old}' AS old (BLOCK_SIZE {256 * 1024})")
    with sk.open_store(old) as st:
        st.session().append(msg("a", "hello"))
        assert [m["id"] for m in st.session().get_history()] == ["a"]
    with duckdb.connect(str(old)) as con:
        assert block_size(con) == 256 * 1024


def test_foreign_and_empty_files(tmp_path):
    import sqlite3

    lite = tmp_path / "lite.duckdb"
    con = sqlite3.connect(lite)
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="SQLite"):
        sk.open_store(lite)
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database at all" * 10)
    with pytest.raises(ValueError, match="not a DuckDB database"):
        sk.open_store(junk)
    empty = tmp_path / "empty.duckdb"
    empty.write_bytes(b"")
    with sk.open_store(empty) as st:  # an empty file holds nothing: a new store
        st.session().append(msg("a", "hello"))
    with pytest.raises(ValueError, match="does not exist"):
        sk.open_store(tmp_path / "no" / "such.duckdb")


WRITER = textwrap.dedent(
    """
    import sys
    import sessionkit as sk
    store = sk.open_store(sys.argv[1], durability=sys.argv[2])
    s = store.session()
    i = 0
    while True:
        s.append({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "x" * (i % 50)}]})
        print(f"m{i}", flush=True)
        i += 1
    """
)


@pytest.mark.kill
@pytest.mark.slow  # a writer process killed mid-run
@pytest.mark.parametrize("durability", ["normal", "full"])
def test_S5_killed_writer_loses_no_returned_append(tmp_path, durability):
    path = str(tmp_path / "kill.duckdb")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, durability], stdout=subprocess.PIPE, text=True)
    acked = []
    try:
        while len(acked) < 40:
            line = proc.stdout.readline()
            assert line, "the writer died early"
            acked.append(line.strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        acked += [line.strip() for line in proc.stdout.read().splitlines()]
    with sk.open_store(path) as st:
        s = st.session()
        stored = [m["id"] for m in s.get_history()]
        assert stored[: len(acked)] == acked
        assert len(stored) <= len(acked) + 1  # at most the append in flight, whole
        for m in s.get_history():
            assert m["role"] == "user"


def test_internal_records_belong_to_their_session(store):
    store.session_records.put("s", "queue", [(1, {"a": 1}), (2, "two")])
    store.session_records.put("s", "queue", [(2, ["replaced"]), (3, None)])
    store.session_records.put("t", "queue", [(1, "other session")])
    assert store.session_records.get("s", "queue") == [(1, {"a": 1}), (2, ["replaced"]), (3, None)]
    assert store.session_records.get("s", "other-kind") == []
    assert store.session("s").store is store and store._engine.session_exists("s")
    store.delete_session("s")
    assert store.session_records.get("s", "queue") == []
    assert store.session_records.get("t", "queue") == [(1, "other session")]


def test_a_walk_reads_nodes_and_content_in_one_statement(tmp_path):
    with sk.open_store(tmp_path / "w.duckdb", chunk_chars=50) as st:
        s = st.session()
        for i in range(6):
            s.append(msg(f"m{i}", f"message {i} " + "long " * (30 if i == 3 else 0)))
        s.append(msg("side", "a branch"), parent_id="m2")
        eng = st._engine
        latest = [row for page in eng.walk_pages("", None, 3, True) for row in page]
        assert [n.id for n, _ in latest] == ["side", "m2", "m1"]
        rows = eng.walk("", eng.node("", "m5"), 10, True)
        assert [n.id for n, _ in rows] == ["m5", "m4", "m3", "m2", "m1", "m0"]
        assert [_msg.restore(raw, eng.blob) for _, raw in rows] == [s.get(n.id) for n, _ in rows]
        assert list(eng.walk_pages("empty", None, 5, True)) == []
        recent = s.recent_history(10_000, leaf_id="m5")
        assert [m["id"] for m in recent.messages] == ["m0", "m1", "m2", "m3", "m4", "m5"]


def test_the_engine_reads_a_few_ordered_rows_in_one_scan_and_leaves_other_connections_alone(tmp_path):
    """The engine's connection turns DuckDB's late materialization off (a read of a few
    rows in order scanned the table twice); a cursor of it (store.sql opens one) keeps
    DuckDB's default, and the reads give the same rows."""
    import duckdb

    with sk.open_store(tmp_path / "l.duckdb") as st:
        s = st.session("a")
        s.append_many([msg(f"m{i}", f"message {i}") for i in range(30)])
        st.session("b").append_many([msg(f"b{i}", f"other {i}") for i in range(30)])
        own = st._engine._db
        setting = "SELECT current_setting('late_materialization_max_rows')"
        try:
            default = own.cursor().execute(setting).fetchone()[0]
        except duckdb.Error:
            default = None  # a DuckDB before 1.3 has no late materialization: nothing to turn off
        if default is not None:
            assert default > 0 and own.execute(setting).fetchone()[0] == 0
            plan = "\n".join(
                r[1] for r in own.execute("EXPLAIN " + st._engine.sql["scan_down_lean"], ("a", 10**9, 20)).fetchall()
            )
            assert "SEMI" not in plan.upper()  # one scan: no join of the rows back by row id
        assert [m["id"] for m in s.get_history()] == [f"m{i}" for i in range(30)]
        assert [m["id"] for m in s.recent_history(0, min_messages=5).messages] == [f"m{i}" for i in range(25, 30)]


V1_SCHEMA = [  # the first layout written under schema version 1
    "CREATE TABLE sessionkit_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    "CREATE SEQUENCE sessionkit_seq START 1",
    """CREATE TABLE sessionkit_messages (seq BIGINT NOT NULL DEFAULT nextval('sessionkit_seq'),
        msg_key VARCHAR NOT NULL UNIQUE, session_id VARCHAR NOT NULL, id VARCHAR NOT NULL, parent_id VARCHAR,
        depth INTEGER NOT NULL, role VARCHAR NOT NULL, created_at VARCHAR NOT NULL, bytes BIGINT NOT NULL,
        tokens BIGINT NOT NULL, path_bytes BIGINT NOT NULL, path_tokens BIGINT NOT NULL,
        chunks INTEGER NOT NULL DEFAULT 0, content VARCHAR NOT NULL)""",
    "CREATE TABLE sessionkit_chunks (seq BIGINT NOT NULL, n INTEGER NOT NULL, data VARCHAR NOT NULL, PRIMARY KEY (seq, n))",  # noqa: E501
    "CREATE TABLE sessionkit_blobs (sha256 VARCHAR PRIMARY KEY, size BIGINT NOT NULL, data BLOB NOT NULL)",
    "CREATE TABLE sessionkit_blob_refs (seq BIGINT NOT NULL, sha256 VARCHAR NOT NULL, PRIMARY KEY (seq, sha256))",
    "CREATE SEQUENCE sessionkit_compaction_seq START 1",
    """CREATE TABLE sessionkit_compactions (seq BIGINT NOT NULL DEFAULT nextval('sessionkit_compaction_seq'),
        session_id VARCHAR NOT NULL, id VARCHAR NOT NULL, from_id VARCHAR NOT NULL, to_id VARCHAR NOT NULL,
        summary VARCHAR NOT NULL, created_at VARCHAR NOT NULL, tokens_before BIGINT NOT NULL,
        tokens_after BIGINT NOT NULL)""",
    "CREATE TABLE sessionkit_docs (seq BIGINT NOT NULL, session_id VARCHAR NOT NULL, length INTEGER NOT NULL)",
    "CREATE TABLE sessionkit_terms (term VARCHAR NOT NULL, seq BIGINT NOT NULL, tf INTEGER NOT NULL, pos INTEGER[] NOT NULL)",  # noqa: E501
    """CREATE TABLE sessionkit_runs (run_id VARCHAR PRIMARY KEY, session_id VARCHAR NOT NULL,
        status VARCHAR NOT NULL, input VARCHAR, error VARCHAR, started_at VARCHAR NOT NULL, ended_at VARCHAR,
        usage VARCHAR, n INTEGER NOT NULL)""",
    """CREATE TABLE sessionkit_events (session_id VARCHAR NOT NULL, seq BIGINT NOT NULL, run_id VARCHAR,
        data VARCHAR NOT NULL, PRIMARY KEY (session_id, seq))""",
    "INSERT INTO sessionkit_meta VALUES ('schema_version', '1'), ('index_built', '1')",
    """INSERT INTO sessionkit_messages (msg_key, session_id, id, parent_id, depth, role, created_at, bytes,
        tokens, path_bytes, path_tokens, content) VALUES ('0:a', '', 'a', NULL, 0, 'user',
        '2026-01-01T00:00:00.000Z', 10, 5, 10, 5,
        '{"id":"a","role":"user","parts":[{"type":"text","text":"old kiwi"}],"createdAt":"2026-01-01T00:00:00.000Z"}')""",  # noqa: E501
    "INSERT INTO sessionkit_docs VALUES (1, '', 2)",
    "INSERT INTO sessionkit_terms VALUES ('old', 1, 1, [0]), ('kiwi', 1, 1, [1])",
]


def test_schema_1_file_is_upgraded_and_reindexed(tmp_path):
    import duckdb

    path = str(tmp_path / "v1.duckdb")
    con = duckdb.connect(path)
    for stmt in V1_SCHEMA:
        con.execute(stmt)
    con.close()
    with sk.open_store(path) as st:
        assert st.stats()["schema_version"] >= 2
        assert st.stats()["indexed_messages"] == 0  # rebuilt on the next search
        s = st.session()
        s.append(msg("b", "new kiwi"))
        assert {h.id for h in s.search("kiwi")} == {"a", "b"}
        st.session_records.put("", "k", [(1, "x")])
        assert [m["id"] for m in s.get_history()] == ["a", "b"]


@pytest.mark.slow  # a second process
def test_cached_state_is_dropped_when_another_process_wrote_the_file(tmp_path):
    path = str(tmp_path / "handoff.duckdb")
    first = sk.open_store(path)
    first.session().append(msg("a", "here"))
    first.close()  # the engine object lives on; its cached tail must not outlive the file lock
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sessionkit as sk\n"
            "with sk.open_store(sys.argv[1]) as st:\n"
            "    st.session().append({'id': 'b', 'role': 'user', 'parts': []})\n"
            "    st.search('warm')\n",
            path,
        ],
        check=True,
        timeout=60,
    )
    with sk.open_store(path) as again:
        s = again.session()
        assert s.latest_leaf()["id"] == "b"
        s.append(msg("c", "there"))
        assert [m["id"] for m in s.get_history()] == ["a", "b", "c"]
        assert [h.id for h in s.search("there")] == ["c"]  # the other process built the index


# ---------------------------------------------------------------------------
# Phrase search: linear in the phrase, and off the store's lock


def _phrase_store(tmp_path, n_messages=300, seed=3):
    """A store of many messages over a small vocabulary (every stem everywhere), one of
    which holds a long text; returns (store, that text's words)."""
    rng = random.Random(seed)
    vocab = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    st = sk.open_store(tmp_path / "phrase.duckdb")
    s = st.session("s")
    s.import_many(
        [(msg(f"m{i}", " ".join(rng.choice(vocab) for _ in range(60))), LATEST, None) for i in range(n_messages)]
    )
    words = [rng.choice(vocab) for _ in range(2000)]
    s.append(msg("long", " ".join(words)))
    return st, words


def test_long_phrases_match_exactly(tmp_path):
    st, words = _phrase_store(tmp_path)
    try:
        texts = {m["id"]: m["parts"][0]["text"] for m in st.session("s").get_history(compacted=False)}
        for n in (2, 50, 1600):
            phrase = " ".join(words[100 : 100 + n])
            hits = [h.id for h in st.search(f'"{phrase}"', limit=1000)]
            parsed = parse_query(f'"{phrase}"')
            expected = [mid for mid, text in texts.items() if matches(text, parsed)]
            assert sorted(hits) == sorted(expected)
            assert "long" in hits
        # the same words out of order are not the phrase
        shuffled = words[100:400]
        random.Random(1).shuffle(shuffled)
        assert "long" not in [h.id for h in st.search('"' + " ".join(shuffled) + '"')]
    finally:
        st.close()


@pytest.mark.slow  # a search thread and many appends
def test_appends_go_on_while_a_long_phrase_search_runs(tmp_path):
    """Appends in another thread start and complete while one search statement is still
    running: the search holds no lock that writers wait for."""
    # A 1,600-word phrase over 300 messages of a ten-word vocabulary: one search statement
    # takes about a hundred times as long as an append.
    st, words = _phrase_store(tmp_path)
    phrase = '"' + " ".join(words[200:1800]) + '"'
    assert [h.id for h in st.search(phrase)] == ["long"]  # builds the index first
    state = {"search": 0}  # odd while the engine's search statement runs; +2 per call
    eng = st._engine
    engine_search = eng.index.search_read  # (what Store.search calls)

    def observed(*args):
        state["search"] += 1
        try:
            return engine_search(*args)
        finally:
            state["search"] += 1

    eng.index.search_read = observed
    done = threading.Event()
    contained: list[int] = []  # the search call each fully overlapped append fell within
    errors: list[BaseException] = []

    def searcher():
        try:
            while not done.is_set():
                hits = st.search(phrase)
                assert [h.id for h in hits][:1] == ["long"]
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=searcher)
    t.start()
    s = st.session("w")
    # Append until three appends fell inside one search call, however many that takes on
    # this machine; were writers held up by the search, none ever would, and the hang guard
    # (far above the second or so this takes) ends the loop.
    hang_guard = time.monotonic() + 300
    try:
        i = 0
        while not (len(contained) >= 3 and contained[-3] == contained[-1]):
            assert not errors and time.monotonic() < hang_guard, (errors, contained)
            before = state["search"]
            s.append(msg(f"w{i}", "a write during a search"))
            after = state["search"]
            if before == after and before % 2 == 1:
                contained.append(before)
            i += 1
    finally:
        done.set()
        t.join()
    assert not errors, errors
    st.close()


def test_a_search_inside_a_transaction_sees_its_writes(store):
    s = store.session("s")
    s.append(msg("a", "first words here"))
    store.search("first")  # the index exists
    with store.transaction():
        s.append(msg("b", "zebra crossing at night"))
        assert [h.id for h in store.search('"zebra crossing"')] == ["b"]
    assert [h.id for h in store.search('"zebra crossing"')] == ["b"]


def test_a_search_reads_its_hits_in_the_snapshot_it_ranked_in(store):
    """The ranking and the hits' rows are two statements: a delete committed between them
    must not take a ranked hit's row away (one read-only transaction holds both)."""
    s = store.session("s")
    s.append(msg("a", "kiwi one"))
    s.append(msg("b", "kiwi two"))
    assert {h.id for h in store.search("kiwi")} == {"a", "b"}  # the index exists
    count = "SELECT count(*) FROM sessionkit_messages WHERE id = 'b'"

    def read(fetch, lengths):
        before = fetch(count, [], False)
        deleting = threading.Thread(target=s.delete, args=("b",))  # committed before the second read
        deleting.start()
        deleting.join()
        return before, fetch(count, [], False)

    assert store._engine.index._read_apart(read) == ([(1,)], [(1,)])
    assert [h.id for h in store.search("kiwi")] == ["a"]  # the delete was committed


def _scores(store, sid=None):
    """The hits of "kiwi" with their scores, store-wide or in ``sid``."""
    hits = store.search("kiwi", limit=1000) if sid is None else store.session(sid).search("kiwi", limit=1000)
    return [(h.session_id, h.id, h.score) for h in hits]


def test_the_lengths_a_search_keeps_never_outlive_a_write(store, monkeypatch):
    """A search keeps each indexed message's length in memory between searches, and after
    appends only reads the new messages'. After every kind of write (an append outside
    and inside a transaction, a rolled-back transaction, an update, a delete, a session
    deleted, a message without text, which a session too large for its id set appends in
    a statement of its own, a batch import), a search gives exactly what it gives with
    nothing kept."""
    monkeypatch.setattr(duckdb_state, "_KEY_BUDGET", 2)  # (a session of two messages: too large)
    shared = store._engine._shared
    reads = {"whole": 0, "extended": 0}
    whole, extended = duckdb_search._Lengths.read.__func__, duckdb_search._Lengths.extended

    def read_whole(cls, *args):
        reads["whole"] += 1
        return whole(cls, *args)

    def read_extended(self, *args):
        reads["extended"] += 1
        return extended(self, *args)

    monkeypatch.setattr(duckdb_search._Lengths, "read", classmethod(read_whole))
    monkeypatch.setattr(duckdb_search._Lengths, "extended", read_extended)
    rng = random.Random(7)
    words = ["kiwi", "mango", "papaya", "melon", "lime"]

    def text():
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) + " kiwi"

    sessions = {sid: store.session(sid) for sid in ("a", "b")}
    ids = {sid: [] for sid in sessions}
    n = 0

    def new_id(sid):
        nonlocal n
        n += 1
        ids[sid].append(f"m{n}")
        return f"m{n}"

    for sid, s in sessions.items():
        s.append(msg(new_id(sid), text()))
    assert _scores(store)  # (the index is built)
    kept_versions = set()
    for step in range(40):
        sid = rng.choice(list(sessions))
        s, op = sessions[sid], step % 8
        if op == 0:
            s.append(msg(new_id(sid), text()))
        elif op == 1:
            with store.transaction():
                s.append(msg(new_id(sid), text()))
                s.append(msg(new_id(sid), text()))
        elif op == 2:
            with pytest.raises(RuntimeError), store.transaction():
                s.append(msg(f"gone{step}", text()))
                raise RuntimeError("rolled back")
        elif op == 3 and ids[sid]:
            s.update(msg(rng.choice(ids[sid]), text()))
        elif op == 4 and len(ids[sid]) > 1:
            s.delete(rng.choice(ids[sid][1:]), subtree=True)
            ids[sid] = [m["id"] for m in s.get_history()]
        elif op == 5:
            s.append(message(new_id(sid)))  # no text: indexed with length 0
        elif op == 6:
            s.import_many([(msg(new_id(sid), text()), LATEST, None) for _ in range(3)])
        elif op == 7 and step % 16 == 15:
            store.delete_session("b")
            sessions["b"], ids["b"] = store.session("b"), []
        for where in (None, "a", "b"):
            kept = _scores(store, where)
            assert shared.lengths is not None
            kept_versions.add(shared.lengths.version)
            shared.lengths = None
            assert kept == _scores(store, where), (step, op, where)
    assert len(kept_versions) > 20  # the lengths were read again after the writes, and kept
    assert reads["extended"] > 5 and reads["whole"] > 5  # after appends only: the new ones


def test_a_search_reads_the_lengths_of_its_own_snapshot(store):
    """Lengths kept from before a write are not used by a search whose snapshot came
    after the write, and lengths read while a write began are not kept."""
    s = store.session("s")
    s.append(msg("a", "kiwi one"))
    s.append(msg("b", "kiwi two three"))
    assert len(store.search("kiwi")) == 2
    shared = store._engine._shared
    index = store._engine.index
    kept = shared.lengths
    assert kept is not None and kept.n == 2

    def read(fetch, lengths):
        fetch("SELECT count(*) FROM sessionkit_messages", [], False)  # (the snapshot is taken)
        writing = threading.Thread(target=s.append, args=(msg("c", "kiwi four"),))
        writing.start()
        writing.join()
        return lengths()

    seen = index._read_apart(read)
    assert seen is not kept and seen.n == 2  # this snapshot's: without the new message
    assert shared.lengths is not seen  # not kept: a write ended after the snapshot began
    assert [h.id for h in store.search("kiwi")][0] == "c"
    assert shared.lengths.n == 3


def test_searches_in_threads_beside_a_writer_see_a_moment_of_the_store(store):
    """Searches in two threads while a third appends, updates and deletes: each search's
    hits are those of one moment between its start and its end (every message appended
    before it began, none appended after it ended), and once the writer is done a search
    gives what it gives with nothing kept."""
    s = store.session("s")
    s.append(msg("m0", "kiwi start"))
    assert len(store.search("kiwi")) == 1
    appended = [1]  # messages with the word committed so far (updates and deletes keep the count)
    done = threading.Event()
    errors: list[BaseException] = []

    def write():
        try:
            for i in range(1, 120):
                s.append(msg(f"m{i}", "kiwi " + "word " * (i % 7)))
                appended[0] += 1
                if i % 10 == 0:
                    s.update(msg(f"m{i - 5}", "kiwi changed " + "longer " * (i % 5)))
                if i % 25 == 0:
                    s.append(msg(f"gone{i}", "kiwi gone"))
                    s.delete(f"gone{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def search():
        try:
            while not done.is_set():
                before = appended[0]
                hits = store.search("kiwi", limit=1000)
                after = appended[0]
                ids = {h.id for h in hits}
                kept = ids - {h for h in ids if h.startswith("gone")}
                assert before <= len(kept) <= after, (before, len(kept), after)
                assert all("kiwi" in h.content for h in hits)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    kept = _scores(store)
    store._engine._shared.lengths = None
    assert kept == _scores(store) and len(kept) == 120


def test_a_query_failing_inside_a_transaction_ends_it_in_an_error_not_a_silent_rollback(tmp_path):
    """DuckDB has no savepoint: a store.sql query that fails inside a write transaction aborts
    the whole transaction, whose COMMIT would drop its writes without a word. The transaction
    ends in SessionKitError naming the query's error instead, nothing of it is stored (in this
    process and after reopening), and a query that succeeds inside a transaction commits."""
    path = tmp_path / "tx.duckdb"
    store = sk.open_store(path)
    s = store.session("a")
    s.append(msg("m0", "kept"))
    with pytest.raises(sk.errors.SessionKitError, match="failed inside this transaction .*Conversion Error"):
        with store.transaction():
            s.append(msg("m1", "in the transaction"))
            with pytest.raises(ValueError, match="Conversion Error"):
                store.sql("SELECT 'a'::INT")
    assert [m["id"] for m in s.get_history()] == ["m0"]
    with store.transaction():
        s.append(msg("m2", "after"))
        assert store.sql_arrow("SELECT count(*) AS n FROM messages").to_pylist() == [{"n": 2}]
    store.close()
    with sk.open_store(path) as again:
        assert [m["id"] for m in again.session("a").get_history()] == ["m0", "m2"]


# -- a message's text kept once (schema version 18) ------------------------------------
_texts = st.text(alphabet=st.sampled_from('ab "\\\n\t\r\x01\x1f\x7f\u00e9\u4e2d\U0001f600}{:,'), max_size=24)
_parts = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": _texts}),
        st.fixed_dictionaries({"text": _texts, "type": st.just("text")}),  # the text key first
        st.fixed_dictionaries({"type": st.just("reasoning"), "text": _texts}),
        st.fixed_dictionaries(
            {
                "type": st.just("tool-lookup"),
                "toolCallId": st.just("c1"),
                "state": st.just("output-available"),
                "input": st.fixed_dictionaries({"text": _texts}),
                "output": st.fixed_dictionaries({"text": _texts}),
            }
        ),
    ),
    max_size=3,
)
_extra = st.one_of(st.just({}), st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"text": _texts})}))


_TOOL_PART = {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available", "input": {"text": "q"}}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(items=[([text_part("hello"), dict(_TOOL_PART, output={"text": "r"})], {})], way="append")
@example(
    items=[([text_part("same"), dict(_TOOL_PART, output={"text": "same"})], {"metadata": {"text": "x"}})], way="chain"
)
@given(
    st.lists(st.tuples(_parts, _extra), min_size=1, max_size=4),
    st.sampled_from(["append", "chain", "import", "update"]),
)
def test_a_message_keeps_its_text_once_and_reads_back_whole(store, items, way):
    """A row whose JSON holds its text column's value once, ending an object as the value of
    "text", keeps the JSON without it, and every row leaves out its createdAt (the
    created_at column's); every read gives the message whole, in Python and in the
    tool_calls view."""
    sid = f"t{uuid.uuid4().hex}"
    s = store.session(sid)
    written = [message(f"m{i}", *parts, **extra) for i, (parts, extra) in enumerate(items)]
    if way == "append":
        stored = [s.append(m).message for m in written]
    elif way == "chain":
        stored = [r.message for r in s.append_many(written)]
    elif way == "import":
        stored = [r.message for r in s.import_many([(m, LATEST, None) for m in written])]
    else:
        s.append_many([message(f"m{i}", text_part("before")) for i in range(len(written))])
        stored = [s.update(m) for m in written]
    assert s.get_history() == stored
    assert [s.get(m["id"]) for m in stored] == stored
    rows = raw(
        store, "SELECT id, content, text, created_at FROM sessionkit_messages WHERE session_id = ? ORDER BY seq", [sid]
    )
    for (mid, content, text, created_at), m in zip(rows, stored):
        whole = _msg.prepare(m).stored_json
        value = '"text":' + json.encoder.encode_basestring(text) + "}"
        once = bool(text) and whole.count(value) == 1 and not re.search("[\x00-\x07\x0b\x0e-\x1f]", text)
        kept = whole.replace(value, '"text":}') if once else whole
        tail = ',"createdAt":"' + created_at + '"}'
        assert kept.endswith(tail)  # (the store puts createdAt last, plain ASCII)
        assert content == kept[: -len(tail)] + "} ", mid
        assert whole_content(content, text, created_at) == whole
    calls = store.sql("SELECT call_message_id, arguments FROM tool_calls WHERE session_id = ?", [sid])
    got = sorted((mid, json.loads(args)["text"]) for mid, args in calls.itertuples(index=False))
    expected = sorted((m["id"], p["input"]["text"]) for m in stored for p in m["parts"] if p["type"] == "tool-lookup")
    assert got == expected
