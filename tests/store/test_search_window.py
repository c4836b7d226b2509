"""The SQLite engine's search window: a second full-text index of the newest messages
that each search brings up to date and ranks in when all of a query's candidates lie there.

Its rows must always be exactly the indexed rows with seq in [recent_lo, recent_hi],
whatever writes happen (appends, imports, long messages kept in continuation rows,
updates, deletes, clears); a new window is made empty by a search and filled by the next
ones, a bounded step each, and once full it reaches the newest row after each search and
holds the newest ``search_window`` numbers; and scores must be BM25 with the window's
statistics when a search is ranked in a full window and with the whole store's otherwise.
The scores are checked against BM25 computed here in Python from the indexed words, with
FTS5's constants.
"""

from __future__ import annotations

import math
import random
import sqlite3

import pytest
from helpers import msg

import sessionkit as sk
from sessionkit.store.engines.sqlite import engine as sq
from sessionkit.store.engines.sqlite import search as fts
from sessionkit.store.search import parse_query

WORDS = "alpha beta gamma delta refund error kiwi mango lemon plum".split()


def sentence(rng: random.Random, n: int = 6) -> str:
    # a skewed draw, so some words are common and others rare
    return " ".join(WORDS[min(int(rng.expovariate(0.45)), len(WORDS) - 1)] for _ in range(n))


def window_lo(store) -> int | None:
    return store._engine.index.window()[0]


def top_seq(store) -> int:
    return store._engine._db.execute("SELECT max(seq) FROM sessionkit_messages").fetchone()[0]


def fill(store) -> int:
    """Search until the window spans ``search_window`` numbers: a new one is made empty by a
    search and filled by the next ones, each reaching at most an eighth of it further down,
    its rows exact after each. Returns how many searches it took."""
    w = store._engine.search_window
    step = -(-w // fts._FILL_STEPS)
    before = store._engine.index.window()[0]
    for searches in range(1, fts._FILL_STEPS + 2):
        store.search("kiwi")
        lo, hi = store._engine.index.window()
        assert lo is not None, "the store has no search window"
        assert_window_exact(store, synced=False)
        if before is not None:
            assert lo >= before - step
        if hi - lo + 1 >= w:
            return searches
        before = lo
    raise AssertionError(f"the window still spans {hi - lo + 1} of {w} numbers")


def assert_window_exact(store, *, synced: bool = True) -> int:
    """The window holds exactly the indexed rows in [recent_lo, recent_hi]; both indexes are
    sound; once searches have run (``synced``) it reaches the newest row and spans
    ``search_window`` numbers."""
    if synced:
        fill(store)
    db = store._engine._db
    lo, hi = store._engine.index.window()
    assert lo is not None, "the store has no search window"
    inside = db.execute("SELECT rowid, body FROM sessionkit_fts_recent ORDER BY rowid").fetchall()
    expected = db.execute(
        "SELECT rowid, body FROM sessionkit_fts WHERE rowid BETWEEN ? AND ? ORDER BY rowid", (lo, hi)
    ).fetchall()
    assert inside == expected
    if synced:
        top = top_seq(store)
        assert top is None or hi >= top
        assert hi - lo + 1 == store._engine.search_window
    for table in ("sessionkit_fts", "sessionkit_fts_recent"):
        db.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
    # and the main index holds every message's words
    texts = {}
    for seq, content, chunks in db.execute("SELECT seq, content, chunks FROM sessionkit_messages"):
        if chunks:
            content += "".join(
                r[0] for r in db.execute("SELECT data FROM sessionkit_chunks WHERE seq = ? ORDER BY n", (seq,))
            )
        texts[seq] = fts.index_json(content)
    assert dict(db.execute("SELECT rowid, body FROM sessionkit_fts")) == texts
    return lo


def reference_bm25(bodies: dict[int, str], terms: list[str]) -> dict[int, float]:
    """BM25 as FTS5's bm25() computes it (k1 = 1.2, b = 0.75, a word in at least half the
    rows weighs 1e-6), over the rows ``bodies``, for the rows holding every term."""
    k1, b = 1.2, 0.75
    tokens = {seq: body.split() for seq, body in bodies.items()}
    n_rows = len(tokens)
    avgdl = sum(len(t) for t in tokens.values()) / n_rows
    idf = {}
    for term in terms:
        holding = sum(1 for t in tokens.values() if term in t)
        value = math.log((n_rows - holding + 0.5) / (holding + 0.5))
        idf[term] = value if value > 0 else 1e-6
    out = {}
    for seq, toks in tokens.items():
        if all(term in toks for term in terms):
            score = 0.0
            for term in terms:
                f = toks.count(term)
                score += idf[term] * (f * (k1 + 1)) / (f + k1 * (1 - b + b * len(toks) / avgdl))
            out[seq] = score
    return out


def grow(store, sid: str, n: int, rng: random.Random, start: int = 0) -> None:
    s = store.session(sid)
    for i in range(start, start + n):
        s.append(msg(f"{sid}{i}", sentence(rng)))


def test_a_small_store_has_no_window(tmp_path):
    with sk.open_store(tmp_path / "s.db", search_window=100) as st:
        grow(st, "a", 120, random.Random(1))
        assert st.search("alpha")
        assert window_lo(st) is None
        names = {r[0] for r in st._engine._db.execute("SELECT name FROM sqlite_master")}
        assert "sessionkit_fts_recent" not in names


def check(store) -> int:
    """Exact before a search (the triggers' work) and after one (the catch-up)."""
    assert_window_exact(store, synced=False)
    return assert_window_exact(store)


def test_the_window_is_created_trimmed_and_kept_exact_through_every_write(tmp_path):
    rng = random.Random(7)
    with sk.open_store(tmp_path / "s.db", search_window=40, chunk_chars=120) as st:
        grow(st, "a", 30, rng)
        assert st.search("alpha")  # builds the index; the store is still small
        assert window_lo(st) is None
        grow(st, "a", 30, rng, start=30)
        assert window_lo(st) is None  # appends leave the window to the next search
        first = assert_window_exact(st)  # past 1.25 x 40: that search creates it
        grow(st, "b", 200, rng)
        lo, hi = st._engine.index.window()
        assert (lo, hi) == (first, first + 39)  # behind until a search
        assert check(st) == top_seq(st) - 39
        a, b = st.session("a"), st.session("b")
        # a long message kept in continuation rows, indexed by the engine itself
        b.append(msg("long", "kiwi " + "lemon " * 60))
        check(st)
        b.update(msg("long", "mango " + "plum " * 70))
        check(st)
        b.update(msg("long", "short again"))
        check(st)
        b.update(msg("b199", "papaya in the window"))
        check(st)
        assert [h.id for h in st.search("papaya")] == ["b199"]
        a.update(msg("a3", "papaya before the window"))  # a row older than the window
        check(st)
        assert {h.id for h in st.search("papaya")} == {"b199", "a3"}
        b.append(msg("tail", "kiwi tail"))
        check(st)
        b.delete("b190", subtree=True)  # the newest rows, all in the window
        a.delete("a4", subtree=True)  # rows before it and in it
        check(st)
        # numbers of deleted rows come back, inside the window's range: the insert
        # trigger puts them in it
        hi = st._engine.index.window()[1]
        b.append(msg("again", "kiwi again"))
        b.append(msg("long again", "kiwi " + "plum " * 60))
        assert top_seq(st) <= hi
        assert_window_exact(st, synced=False)
        assert {"again", "long again"} <= {h.id for h in st.search("kiwi", limit=1000)}
        a.import_many([(msg(f"imp{i}", sentence(rng)), f"imp{i - 1}" if i else None, None) for i in range(80)])
        check(st)
        b.append(msg("fork", "kiwi fork"), parent_id="b150")
        assert {h.id for h in st.search("papaya")} == {"a3"}
        check(st)
        b.clear()
        lo = check(st)
        st.delete_session("a")
        assert check(st) == lo
        assert st.search("papaya") == []
        grow(st, "c", 100, rng)  # rows come back after everything was deleted
        check(st)
        grow(st, "c", 300, rng, start=100)  # far past the window: it starts afresh
        assert st._engine.index.window()[1] < top_seq(st) - 40
        check(st)
        assert st.stats()["indexed_messages"] == st.stats()["messages"]


def test_scores_come_from_the_window_when_all_candidates_lie_in_it(tmp_path):
    rng = random.Random(3)
    with sk.open_store(tmp_path / "s.db", search_window=60) as st:
        grow(st, "a", 300, rng)
        st.search("warmup")
        grow(st, "a", 20, rng, start=300)
        lo = assert_window_exact(st)
        db = st._engine._db
        window = dict(db.execute("SELECT rowid, body FROM sessionkit_fts WHERE rowid >= ?", (lo,)))
        everything = dict(db.execute("SELECT rowid, body FROM sessionkit_fts"))
        seq_of = dict(db.execute("SELECT id, seq FROM sessionkit_messages"))
        checked = {"window": 0, "store": 0}
        for query in ["alpha", "beta", "refund", "kiwi", "alpha beta", "mango lemon", "plum"]:
            terms = sorted(parse_query(query).all_stems)
            in_window = reference_bm25(window, terms)
            for cand in (5, 10_000):
                st.settings.search_candidates = cand
                hits = st.search(query, limit=cand)
                newest = sorted(reference_bm25(everything, terms), reverse=True)[:cand]
                assert sorted((seq_of[h.id] for h in hits), reverse=True) == newest
                if len(newest) == cand and min(newest) >= lo:  # all candidates in the window
                    expected, checked["window"] = in_window, checked["window"] + 1
                else:
                    expected, checked["store"] = reference_bm25(everything, terms), checked["store"] + 1
                for h in hits:
                    assert h.score == pytest.approx(expected[seq_of[h.id]], rel=1e-9, abs=1e-12)
                assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert checked["window"] >= 5 and checked["store"] >= 5


def test_a_session_in_the_window_is_ranked_there(tmp_path):
    rng = random.Random(5)
    with sk.open_store(tmp_path / "s.db", search_window=50) as st:
        grow(st, "old", 200, rng)
        st.search("warmup")
        grow(st, "new", 30, rng)
        lo = assert_window_exact(st)
        db = st._engine._db
        first = db.execute("SELECT min(seq) FROM sessionkit_messages WHERE session_id = 'new'").fetchone()[0]
        assert first >= lo
        window = dict(db.execute("SELECT rowid, body FROM sessionkit_fts WHERE rowid >= ?", (lo,)))
        everything = dict(db.execute("SELECT rowid, body FROM sessionkit_fts"))
        seq_of = dict(db.execute("SELECT seq, id FROM sessionkit_messages WHERE session_id = 'new'"))
        seq_of = {v: k for k, v in seq_of.items()}
        for query in ["alpha", "refund", "alpha gamma"]:
            terms = sorted(parse_query(query).all_stems)
            hits = st.session("new").search(query, limit=100)
            expected = {s: v for s, v in reference_bm25(window, terms).items() if s >= first}
            assert {seq_of[h.id] for h in hits} == set(expected)
            assert hits, query
            for h in hits:
                assert h.session_id == "new"
                assert h.score == pytest.approx(expected[seq_of[h.id]], rel=1e-9, abs=1e-12)
            # a session reaching back before the window is ranked over the whole store
            old_hits = st.session("old").search(query, limit=1000)
            old_expected = reference_bm25(everything, terms)
            assert old_hits
            for h in old_hits:
                seq = db.execute(
                    "SELECT seq FROM sessionkit_messages WHERE session_id = 'old' AND id = ?", (h.id,)
                ).fetchone()[0]
                assert h.score == pytest.approx(old_expected[seq], rel=1e-9, abs=1e-12)


def test_other_connections_see_and_keep_the_window(tmp_path):
    path = tmp_path / "s.db"
    rng = random.Random(11)
    with sk.open_store(path, search_window=30) as one, sk.open_store(path, search_window=30) as two:
        grow(one, "a", 20, rng)
        assert one.search("alpha")
        grow(two, "b", 60, rng)  # the second connection creates and trims the window
        lo = assert_window_exact(one)
        grow(one, "a", 60, rng, start=20)
        assert assert_window_exact(two) > lo
        assert {h.id for h in two.search("kiwi", limit=1000)} == {h.id for h in one.search("kiwi", limit=1000)}


def test_a_version_3_file_is_upgraded(tmp_path):
    # Version 4 adds no table to a version 3 file: the window is created when the store
    # outgrows it. A version 3 file is therefore this layout with version 3 recorded.
    path = str(tmp_path / "v3.db")
    rng = random.Random(2)
    with sk.open_store(path) as st:
        grow(st, "a", 80, rng)
        st.search("alpha")
    con = sqlite3.connect(path)
    con.execute("UPDATE sessionkit_meta SET value = '3' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with sk.open_store(path, search_window=40) as st:
        assert st.stats()["schema_version"] == sq.SCHEMA_VERSION
        assert window_lo(st) is None
        grow(st, "a", 10, rng, start=80)  # the next look after the window creates it
        assert_window_exact(st)
        before = {h.id for h in st.search("kiwi", limit=1000)}
        assert before == {m["id"] for m in st.session("a").get_history() if "kiwi" in m["parts"][0]["text"]}


def test_a_bad_window_size_is_refused(tmp_path):
    for bad in (0, -5, 2.5, "10", True):
        with pytest.raises(ValueError, match="search_window"):
            sk.open_store(tmp_path / "s.db", search_window=bad)


def test_an_index_built_on_a_large_store_fills_its_window_over_the_next_searches(tmp_path):
    rng = random.Random(4)
    w = 25
    with sk.open_store(tmp_path / "s.db", search_window=w) as st:
        st.session("a").import_many(
            [(msg(f"m{i}", sentence(rng, rng.randint(3, 9))), f"m{i - 1}" if i else None, None) for i in range(100)]
        )
        assert window_lo(st) is None  # no index yet, so no window either
        db = st._engine._db
        everything = None
        seq_of = dict(db.execute("SELECT id, seq FROM sessionkit_messages"))
        top = top_seq(st)
        st.settings.search_candidates = 3
        steps = 0
        while True:
            hits = st.search("error", limit=3)
            lo, hi = st._engine.index.window()
            assert_window_exact(st, synced=False)
            everything = everything or dict(db.execute("SELECT rowid, body FROM sessionkit_fts"))
            if steps == 0:  # the search that built the index made the window, empty
                assert (lo, hi) == (top + 1, top)
            newest = sorted(reference_bm25(everything, ["error"]), reverse=True)[:3]
            assert min(newest) >= top - w + 1  # the candidates lie in a full window
            full = hi - lo + 1 >= w
            ranked_over = dict(db.execute("SELECT rowid, body FROM sessionkit_fts WHERE rowid >= ?", (lo,)))
            expected = reference_bm25(ranked_over if full else everything, ["error"])
            assert sorted(seq_of[h.id] for h in hits) == sorted(newest)
            for h in hits:
                assert h.score == pytest.approx(expected[seq_of[h.id]], rel=1e-9, abs=1e-12)
            if full:
                break
            steps += 1
            assert steps <= fts._FILL_STEPS
        # each search after the first filled a step of ceil(25 / 8) = 4 numbers: 7 steps
        assert steps == 7
        assert (lo, hi) == (top - w + 1, top)
        # the window's statistics differ from the store's here, so the last check above
        # could tell the two apart
        assert reference_bm25(ranked_over, ["error"]) != {
            k: v for k, v in reference_bm25(everything, ["error"]).items() if k >= lo
        }
