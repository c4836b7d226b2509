"""store.embed and store.similar on every engine, with a deterministic embedder (hashed
bag of words): incremental embedding, ranking equal to a cosine computed here in Python,
the embeddings view, deletes, bad input, litellm's embedding path and the async twins."""

from __future__ import annotations

import asyncio
import hashlib
import math
import sqlite3

import pytest
from helpers import msg

import sessionkit as sk
from sessionkit.store._schema import MIGRATIONS, SCHEMA_VERSION

#: The version that added the embeddings table (its step of the ledger).
EMBEDDINGS = next(m.version for m in MIGRATIONS if m.note.startswith("embeddings"))

DIM = 24


class HashedWords:
    """A bag of words hashed into DIM buckets; counts the texts it was given."""

    model = "hashed-words"

    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, texts):
        self.seen += texts
        out = []
        for text in texts:
            v = [0.0] * DIM
            for word in text.lower().split():
                v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
            out.append(v)
        return out


def _cosine(a, b):
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b)) / (na * nb) if na and nb else None


TEXTS = [
    "the cat sat on the mat",
    "dogs bark at the mailman",
    "a cat and a dog on a mat",
    "deploying the service to production",
    "the deployment failed in production",
    "cats like warm mats",
]


def _fill(store, sid="s", texts=TEXTS):
    s = store.session(sid)
    for i, text in enumerate(texts):
        s.append(msg(f"{sid}{i}", text, "user" if i % 2 == 0 else "assistant"))


def test_embed_is_incremental_and_reports_progress(store):
    _fill(store)
    store.session("s").append({"id": "empty", "role": "assistant", "parts": []})  # no text: no vector
    words = HashedWords()
    seen = []
    assert store.embed(words, batch_size=4, progress=lambda done, total: seen.append((done, total))) == len(TEXTS)
    assert seen == [(4, len(TEXTS)), (len(TEXTS), len(TEXTS))]
    assert sorted(words.seen) == sorted(TEXTS)
    _fill(store, "t", ["a new cat", "another mat"])
    words.seen.clear()
    assert store.embed(words) == 2
    assert sorted(words.seen) == ["a new cat", "another mat"]  # only the new ones
    assert store.embed(words) == 0
    store.session("s").update(msg("s1", "words changed", "assistant"))  # its vector goes with its text
    words.seen.clear()
    assert store.embed(words) == 1 and words.seen == ["words changed"]
    view = store.sql_arrow("SELECT session_id, message_id, model, dim, vector FROM embeddings").to_pylist()
    assert len(view) == len(TEXTS) + 2
    assert {(r["model"], r["dim"]) for r in view} == {("hashed-words", DIM)}
    by_id = {r["message_id"]: r["vector"] for r in view}
    assert by_id["s0"] == pytest.approx(HashedWords()([TEXTS[0]])[0])
    assert by_id["s1"] == pytest.approx(HashedWords()(["words changed"])[0])


def test_similar_ranks_as_the_cosine_computed_in_python(store):
    _fill(store)
    _fill(store, "o", ["cat on a mat again", "nothing alike here"])
    words = HashedWords()
    store.embed(words)
    query = "a cat on the mat"
    q = HashedWords()([query])[0]
    stored = {(sid, f"{sid}{i}"): t for sid, ts in (("s", TEXTS), ("o", TEXTS[:0])) for i, t in enumerate(ts)}
    stored[("o", "o0")], stored[("o", "o1")] = "cat on a mat again", "nothing alike here"
    want = sorted(
        ((_cosine(q, HashedWords()([t])[0]) or 0.0, key) for key, t in stored.items()),
        key=lambda x: (-x[0], x[1]),
    )
    hits = store.similar(query, k=4, embedder=words)
    assert all(isinstance(h, sk.SearchHit) for h in hits)
    assert [(h.session_id, h.id) for h in hits] == [key for _, key in want[:4]]
    assert [h.score for h in hits] == pytest.approx([score for score, _ in want[:4]], abs=1e-5)
    assert hits[0].content == stored[(hits[0].session_id, hits[0].id)]
    only_o = store.similar(query, k=10, embedder=words, session_ids=["o"])
    assert {h.session_id for h in only_o} == {"o"} and len(only_o) == 2
    # by a stored message: its own vector, itself left out; one model stored, so none named
    near = store.similar(("s", "s0"), k=3)
    assert ("s", "s0") not in [(h.session_id, h.id) for h in near]
    s0 = HashedWords()([TEXTS[0]])[0]
    assert near[0].score == pytest.approx(
        max(_cosine(s0, HashedWords()([t])[0]) or 0.0 for key, t in stored.items() if key != ("s", "s0")), abs=1e-5
    )
    assert store.similar(query, k=0, embedder=words) == []


def test_deleted_messages_leave_the_view_and_the_hits(store):
    _fill(store)
    words = HashedWords()
    store.embed(words)
    store.session("s").delete("s5")  # the leaf
    assert "s5" not in store.sql("SELECT message_id FROM embeddings")["message_id"].tolist()
    assert "s5" not in [h.id for h in store.similar("cats like warm mats", k=10, embedder=words)]
    store.delete_session("s")
    assert store.sql("SELECT count(*) AS n FROM embeddings")["n"][0] == 0
    _fill(store, "s", ["brand new words"])  # the same ids again: embedded afresh, not the old vectors
    assert store.embed(words) == 1
    assert store.sql_arrow("SELECT message_id FROM embeddings").column("message_id").to_pylist() == ["s0"]


def test_bad_input_raises_and_keeps_what_is_stored(store):
    _fill(store)
    words = HashedWords()
    assert store.embed(words, batch_size=3) == len(TEXTS)
    _fill(store, "t", ["one more", "and another"])
    with pytest.raises(ValueError, match=r"returned 1 vectors for \d+ texts"):
        store.embed(lambda texts: [[1.0]])
    with pytest.raises(ValueError, match="NaN"):
        store.embed(lambda texts: [[math.nan, 1.0] for _ in texts])
    with pytest.raises(ValueError, match="vectors of 2 and 3 values"):
        store.embed(lambda texts: [[1.0] * (2 + i) for i, _ in enumerate(texts)])
    with pytest.raises(TypeError, match="embedder must be a callable"):
        store.embed(42)
    with pytest.raises(ValueError, match="batch_size"):
        store.embed(words, batch_size=0)
    with pytest.raises(TypeError, match="progress"):
        store.embed(words, progress="yes")
    assert store.sql("SELECT count(*) AS n FROM embeddings")["n"][0] == len(TEXTS)  # nothing lost
    store.embed(lambda texts: [[1.0, 0.0] for _ in texts])  # a second model (named after the function)
    with pytest.raises(ValueError, match="the models"):
        store.similar(("s", "s0"))
    with pytest.raises(sk.MessageNotFound):
        store.similar(("s", "nope"), model="hashed-words")
    with pytest.raises(ValueError, match="embedder"):
        store.similar("text", model="hashed-words")
    with pytest.raises(TypeError):
        store.similar(3, embedder=words)
    assert len(store.similar("cat", embedder=words, k=2)) == 2


class Fixed:
    """An embedder giving each text the vector of VECTORS (the query's for any other text)."""

    def __init__(self, vectors, model="fixed", query=(1.0, 0.0)):
        self.vectors, self.model, self.query = vectors, model, query

    def __call__(self, texts):
        return [self.vectors.get(t, self.query) for t in texts]


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ([0.0, 0.0], ValueError, "zero vector"),
        ([1e-46, 1e-46], ValueError, "zero vector"),  # zero once rounded to float32
        ([3.4028236e38, 1.0], ValueError, "float32"),  # rounds to infinity in float32
        ([1e39, 1.0], ValueError, "float32"),
        ("1234", TypeError, "got str"),
        (b"12", TypeError, "got bytes"),
        ({"a": 1.0, "b": 2.0}, TypeError, "got dict"),
        ([True, False], TypeError, "bool"),
        (["1", "2"], TypeError, "str"),
    ],
    ids=["zero", "underflow", "rounds-to-inf", "overflow", "str", "bytes", "dict", "bools", "str-values"],
)
def test_a_vector_that_cannot_rank_is_refused_before_anything_is_stored(store, bad, error, match):
    """Each of these used to be stored (a zero or infinite vector's score is NaN, which ranked
    first; a str or a dict was read as its characters or keys)."""
    _fill(store, "s", ["good match", "the bad one"])
    with pytest.raises(error, match=match):
        store.embed(Fixed({"good match": [0.99, 0.1], "the bad one": bad}))
    assert store.sql("SELECT count(*) AS n FROM embeddings")["n"][0] == 0
    fixed = Fixed({"good match": [0.99, 0.1], "the bad one": [0.0, 1.0]})
    assert store.embed(fixed) == 2
    assert [h.id for h in store.similar("query", embedder=fixed)] == ["s0", "s1"]
    with pytest.raises(error, match=match):  # nor is it taken as a query
        store.similar("query", embedder=Fixed({}, query=bad))


def test_a_model_s_vectors_keep_one_length(store):
    """A model whose vectors changed length would rank only those of the query's length."""
    _fill(store, "s", ["one", "two"])
    assert store.embed(Fixed({"one": [1.0, 0.0], "two": [0.0, 1.0]})) == 2
    _fill(store, "t", ["three"])
    with pytest.raises(ValueError, match=r"2 values for the model 'fixed'.* has 3"):
        store.embed(Fixed({"three": [1.0, 0.0, 0.0]}))
    assert store.sql("SELECT count(*) AS n FROM embeddings")["n"][0] == 2
    with pytest.raises(ValueError, match=r"2 values for the model 'fixed'.* has 3"):
        store.similar("query", embedder=Fixed({}, query=(1.0, 0.0, 0.0)))
    assert store.embed(Fixed({}, model="another", query=(1.0, 0.0, 0.0))) == 3  # another model may


def test_a_litellm_model_name_embeds_through_litellm():
    """(Once, on SQLite: the path through litellm is the same on every engine.)"""
    pytest.importorskip("litellm")
    store = sk.open_store()
    _fill(store, "s", TEXTS[:2])
    # (litellm's mock answers one vector per call: one text per call)
    mock = {"mock_response": [0.5, 0.25, 0.125]}
    assert store.embed("text-embedding-3-small", batch_size=1, options=mock) == 2
    rows = store.sql_arrow("SELECT model, vector FROM embeddings ORDER BY message_id").to_pylist()
    assert rows == [{"model": "text-embedding-3-small", "vector": [0.5, 0.25, 0.125]}] * 2


def test_the_async_twins(tmp_path):
    words = HashedWords()
    path = str(tmp_path / "a.db")
    with sk.open_store(path) as st:
        _fill(st)

    async def main():
        astore = sk.aio.open_store(path)
        try:
            n = await astore.embed(words)
            hits = await astore.similar("cat mat", embedder=words, k=2)
        finally:
            await astore.close()
        return n, hits

    n, hits = asyncio.run(main())
    assert n == len(TEXTS)
    with sk.open_store(path) as st:
        again = st.similar("cat mat", embedder=words, k=2)
    assert [(h.session_id, h.id) for h in hits] == [(h.session_id, h.id) for h in again]


def test_a_sqlite_file_from_before_embeddings_gains_the_embeddings_table(tmp_path):
    path = str(tmp_path / "before.db")
    with sk.open_store(path) as st:
        _fill(st)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE sessionkit_embeddings")
    con.execute("ALTER TABLE sessionkit_runs DROP COLUMN meta")  # (version 11, after the embeddings)
    con.execute("DELETE FROM sessionkit_migrations WHERE version >= ?", (EMBEDDINGS,))
    con.execute("UPDATE sessionkit_meta SET value = ? WHERE key = 'schema_version'", (str(EMBEDDINGS - 1),))
    con.commit()
    con.close()
    with sk.open_store(path) as st:
        assert st.stats()["schema_version"] == SCHEMA_VERSION > EMBEDDINGS
        assert st.embed(HashedWords()) == len(TEXTS)
    with sk.open_store(path) as st:  # kept
        assert st.embed(HashedWords()) == 0
        assert len(st.similar(("s", "s1"), k=2)) == 2


def test_similar_sessions_rank_by_the_normalized_mean_of_their_messages(store):
    """level="session": a session's vector is the normalized mean of its messages' unit
    vectors (docs/analysis.md#find-similar); the ranking is the cosine of that with the
    query's, computed here with numpy from the stored vectors."""
    import numpy as np

    _fill(store, "pets", ["the cat sat on the mat", "dogs bark at the mailman", "cats like warm mats"])
    _fill(store, "ops", ["deploying the service to production", "the deployment failed in production"])
    _fill(store, "mixed", ["a cat and a dog on a mat", "the service failed", "cat food deployment"])
    _fill(store, "one", ["warm mats for a cat"])
    store.session("ops").append({"id": "tool", "role": "tool", "parts": []})  # no text: no vector
    words = HashedWords()
    store.embed(words)
    rows = store.sql_arrow("SELECT session_id, message_id, vector FROM embeddings").to_pylist()
    by_session: dict[str, list] = {}
    for r in rows:
        by_session.setdefault(r["session_id"], []).append(np.array(r["vector"], dtype=np.float64))
    ops0 = next(np.array(r["vector"], dtype=np.float64) for r in rows if r["message_id"] == "ops0")

    def session_vector(sid):
        units = [v / np.linalg.norm(v) for v in by_session[sid]]
        mean = np.mean(units, axis=0)
        return mean / np.linalg.norm(mean)

    def ranked(q, exclude=None, only=None):
        q = np.asarray(q, dtype=np.float64)
        scores = {
            sid: float(session_vector(sid) @ q / np.linalg.norm(q))
            for sid in by_session
            if sid != exclude and (only is None or sid in only)
        }
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))

    def check(hits, want):
        assert all(isinstance(h, sk.store.SimilarSession) for h in hits)
        assert [h.session_id for h in hits] == [sid for sid, _ in want]
        assert [h.score for h in hits] == pytest.approx([score for _, score in want], abs=1e-6)
        assert [h.messages for h in hits] == [len(by_session[sid]) for sid, _ in want]

    query = "a cat on the mat"
    check(store.similar(query, level="session", embedder=words), ranked(words([query])[0]))
    check(store.similar(query, level="session", embedder=words, k=2), ranked(words([query])[0])[:2])
    check(
        store.similar(query, level="session", embedder=words, session_ids=["ops", "one"]),
        ranked(words([query])[0], only={"ops", "one"}),
    )
    # by a stored session: its own vector, itself left out
    check(store.similar(store.session("mixed"), level="session"), ranked(session_vector("mixed"), exclude="mixed"))
    # by a stored message: its vector
    check(store.similar(("ops", "ops0"), level="session"), ranked(ops0))
    with pytest.raises(ValueError, match="level must be one of 'message', 'session'"):
        store.similar(query, level="conversation", embedder=words)
    with pytest.raises(sk.SessionNotFound):
        store.similar(store.session("nobody"), level="session")
    store.session("quiet").append({"id": "q", "role": "tool", "parts": []})
    with pytest.raises(ValueError, match="no 'hashed-words' vectors"):
        store.similar(store.session("quiet"), level="session")
