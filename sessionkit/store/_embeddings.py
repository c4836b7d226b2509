"""Message embeddings: ``store.embed`` computes them, ``store.similar`` ranks by them.

One vector per (model, message) with text, in the ``embeddings`` table (schema version
8, ``_sql.EMBEDDINGS_TABLE``). :func:`embed` is incremental: it asks the embedder only
for messages that have no vector of that model yet (those appended or imported since
the last call), a batch at a time, and writes each batch in one transaction, so an
interrupted call keeps what it finished. Vectors are read through ``store.sql``'s
``embeddings`` view, so :func:`similar` is one DuckDB query
(``list_cosine_similarity``) over the same copy of the store every analysis query
reads (kept up to date by the change log entries written here).

The embedder is a callable ``texts -> vectors`` or the name of a litellm embedding
model (reached through the store's conveniences, lazily).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import parts as _parts
from ..errors import MessageNotFound, SessionNotFound
from . import _conveniences
from .search import SearchHit

__all__ = ["EMBEDDINGS_COLUMNS", "LEVELS", "SimilarSession", "embed", "similar", "embeddings_view_sql", "model_name"]

#: What ``similar`` ranks: messages (by their vectors) or sessions (by their messages' mean direction).
LEVELS = ("message", "session")


@dataclass(frozen=True)
class SimilarSession:
    """One hit of ``store.similar(..., level="session")`` (docs/analysis.md#find-similar):
    a session, the cosine similarity of its vector with the query's (at most 1), and how
    many message vectors its vector is the mean of."""

    session_id: str
    score: float
    messages: int


#: The columns of the ``embeddings`` view (see ``_analysis.VIEW_COLUMNS``).
EMBEDDINGS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("session_id", "text"),
    ("message_id", "text"),
    ("model", "text"),
    ("dim", "int"),
    ("vector", "floats"),
)

_TODO = (
    "SELECT m.seq, m.session_id, m.id, {m_text} FROM {messages} m"
    " WHERE m.seq > ? AND {m_text} <> ''"
    " AND NOT EXISTS (SELECT 1 FROM {embeddings} e WHERE e.model = ? AND e.seq = m.seq"
    " AND e.session_id = m.session_id AND e.message_id = m.id)"
    " ORDER BY m.seq LIMIT ?"
)
_COUNT = (
    "SELECT count(*) FROM {messages} m WHERE {m_text} <> ''"
    " AND NOT EXISTS (SELECT 1 FROM {embeddings} e WHERE e.model = ? AND e.seq = m.seq"
    " AND e.session_id = m.session_id AND e.message_id = m.id)"
)
_UPSERT = (
    "ON CONFLICT (model, seq) DO UPDATE SET session_id = excluded.session_id,"
    " message_id = excluded.message_id, dim = excluded.dim, vector = excluded.vector"
)


def model_name(embedder: Any) -> str:
    """The model name vectors of ``embedder`` are stored under: the litellm model's name,
    or a callable's ``model`` attribute, else its qualified name."""
    if isinstance(embedder, str):
        if not embedder.strip():
            raise ValueError("the embedding model name is empty")
        return embedder
    if not callable(embedder):
        raise TypeError(
            f"embedder must be a callable (list[str] -> list[list[float]]) or a litellm model name,"
            f" got {type(embedder).__name__}"
        )
    name = getattr(embedder, "model", None)
    if isinstance(name, str) and name:
        return name
    return getattr(embedder, "__qualname__", None) or type(embedder).__qualname__


def _embedder(embedder: Any, options: Any = None) -> Callable[[list[str]], Any]:
    if isinstance(embedder, str):
        return lambda texts: _conveniences.litellm_embed(embedder, texts, options)
    return embedder


def _vector_text(vector: Any, where: str) -> tuple[int, str]:
    """``(dim, JSON text)`` of one vector, each value rounded to float32 (7 significant digits).

    Refused (before anything is stored): what is not a sequence of numbers (a str, bytes or
    a mapping would be read as its characters or keys, bools as 0 and 1), an empty vector,
    a value that is NaN or infinite once rounded to float32, and a vector that is all zeros
    once rounded: its cosine similarity is NaN, which would rank ahead of every real match.
    """
    if isinstance(vector, (str, bytes, bytearray, dict)) or not isinstance(vector, Iterable):
        raise TypeError(f"{where}: a vector is a sequence of numbers, got {type(vector).__name__}")
    values = []
    for v in vector:
        if isinstance(v, (str, bytes)) or type(v).__name__ in ("bool", "bool_"):
            raise TypeError(f"{where}: a vector's values are numbers, got {type(v).__name__} {v!r}")
        try:
            values.append(float(v))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}: a vector is a sequence of numbers ({exc})") from None
    if not values:
        raise ValueError(f"{where}: the vector is empty")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{where}: the vector holds a NaN or an infinity")
    try:
        packed = struct.unpack(f"{len(values)}f", struct.pack(f"{len(values)}f", *values))
    except OverflowError:
        packed = (math.inf,)
    # (a value just past float32's largest rounds to infinity without an OverflowError:
    # checked on the rounded values)
    if not all(math.isfinite(v) for v in packed):
        raise ValueError(f"{where}: a value does not fit in a float32 (largest {_FLOAT32_MAX:.7g})")
    if not any(packed):
        raise ValueError(f"{where}: the vector is a zero vector (once rounded to float32): it has no direction")
    return len(values), "[" + ",".join(format(v, ".7g") for v in packed) + "]"


#: float32's largest finite value.
_FLOAT32_MAX = struct.unpack("f", bytes.fromhex("ffff7f7f"))[0]


def _stored_dim(eng: Any, model: str) -> int | None:
    """The length of the vectors stored for ``model`` (None when it has none)."""
    with eng.snapshot():
        rows = eng.fetch(eng.compile("SELECT dim FROM {embeddings} WHERE model = ? LIMIT 1"), (model,))
    return int(rows[0][0]) if rows else None


def _dim_error(model: str, stored: int, n: int, what: str) -> ValueError:
    return ValueError(
        f"the store holds vectors of {stored} values for the model {model!r}; {what} has {n}:"
        " a model's vectors keep one length (name the new vectors after another model)"
    )


def embed(eng: Any, embedder: Any, *, batch_size: int, progress: Any, options: Any = None) -> int:
    """Embed the messages with text that have no vector of this model yet; how many were embedded."""
    model = model_name(embedder)
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict (for litellm.embedding), got {type(options).__name__}")
    call = _embedder(embedder, options)
    if progress is not None and progress is not False and progress is not True and not callable(progress):
        raise TypeError("progress must be None, True, False or a callable fn(done, total)")
    # (no vector outlives its message: deletes and updates drop them, _sql.py)
    with eng.snapshot():
        total = eng.fetch(eng.compile(_COUNT), (model,))[0][0]
    bar = _conveniences.progress(progress, total=total, desc="embed", unit="msg")
    done, last = 0, 0
    stored = dim = _stored_dim(eng, model)
    try:
        while True:
            with eng.snapshot():
                rows = eng.fetch(eng.compile(_TODO), (last, model, batch_size))
            if not rows:
                break
            last = rows[-1][0]
            texts = [r[3] for r in rows]
            vectors = call(texts)
            vectors = list(vectors) if vectors is not None else []
            if len(vectors) != len(texts):
                raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
            out = []
            for (seq, sid, mid, _), vector in zip(rows, vectors):
                n, text = _vector_text(vector, f"the vector of message {mid!r} of session {sid!r}")
                if dim is None:
                    dim = n
                elif n != dim and stored is not None:
                    raise _dim_error(model, stored, n, f"the vector of message {mid!r} of session {sid!r}")
                elif n != dim:
                    raise ValueError(f"the embedder returned vectors of {dim} and {n} values")
                out.append((model, seq, sid, mid, n, text))
            with eng.write():
                eng.insert_rows("embeddings", out, _UPSERT)
                for sid in sorted({r[2] for r in out}):
                    eng.log_change(sid, "embeddings")
            done += len(out)
            bar.update(len(out))
    finally:
        bar.close()
    return done


def _query_vector(store: Any, query: Any, model: str, embedder: Any) -> list[float]:
    """The vector to rank by: a text's (through ``embedder``) or a stored message's
    (``(session_id, message_id)``)."""
    if isinstance(query, tuple):
        if len(query) != 2 or not all(isinstance(x, str) for x in query):
            raise TypeError("a message is named by a (session_id, message_id) tuple of two str")
        sid, mid = query
        rows = store.sql_arrow(
            "SELECT vector FROM embeddings WHERE session_id = $s AND message_id = $m AND model = $model",
            {"s": sid, "m": mid, "model": model},
        ).to_pylist()
        if not rows:
            if store.session(sid).get(mid) is None:
                raise MessageNotFound(f"session {sid!r} has no message {mid!r}")
            raise ValueError(f"message {mid!r} of session {sid!r} has no {model!r} vector: run store.embed first")
        return rows[0]["vector"]
    if not isinstance(query, str):
        raise TypeError(f"similar() takes a text or a (session_id, message_id) tuple, got {type(query).__name__}")
    if embedder is None:
        raise ValueError("similar(text) needs the embedder that made the vectors (embedder=...)")
    vectors = list(_embedder(embedder)([query]))
    if len(vectors) != 1:
        raise ValueError(f"the embedder returned {len(vectors)} vectors for 1 text")
    return json.loads(_vector_text(vectors[0], "the query's vector")[1])


def similar(
    store: Any,
    query: Any,
    *,
    k: int,
    session_ids: Iterable[str] | None,
    embedder: Any,
    model: str | None,
    level: str = "message",
) -> list[Any]:
    """The ``k`` messages (or sessions, ``level="session"``) nearest to ``query`` by cosine
    similarity, best first."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(map(repr, LEVELS))}, got {level!r}")
    if model is None:
        if embedder is None:
            names = store.sql_arrow("SELECT DISTINCT model FROM embeddings ORDER BY model").column("model").to_pylist()
            if len(names) != 1:
                raise ValueError(
                    "similar() needs embedder= (or model=): the store holds vectors of "
                    + (f"the models {names}" if names else "no model yet (run store.embed first)")
                )
            model = names[0]
        else:
            model = model_name(embedder)
    if level == "session":
        return _similar_sessions(store, query, k=k, session_ids=session_ids, embedder=embedder, model=model)
    vector = _query_vector(store, query, model, embedder)
    dims = store.sql_arrow("SELECT DISTINCT dim FROM embeddings WHERE model = $model", {"model": model})
    dims = dims.column("dim").to_pylist()
    if dims and len(vector) not in dims:
        raise _dim_error(model, dims[0], len(vector), "the query's vector")
    params: dict[str, Any] = {"q": vector, "model": model, "k": k, "dim": len(vector)}
    where = ""
    if session_ids is not None:
        if isinstance(session_ids, str):
            session_ids = [session_ids]
        params["ids"] = [str(s) for s in session_ids]
        where = " AND list_contains($ids::VARCHAR[], e.session_id)"
    if isinstance(query, tuple):  # the message itself is not its own neighbour
        params["self_s"], params["self_m"] = query
        where += " AND NOT (e.session_id = $self_s AND e.message_id = $self_m)"
    # ranked over the vectors alone; the k best messages are then read by id (a join with
    # the messages view would read every message's row for k of them)
    rows = store.sql_arrow(
        "SELECT e.session_id, e.message_id, list_cosine_similarity(e.vector, $q::FLOAT[]) AS score"
        f" FROM embeddings e WHERE e.model = $model AND e.dim = $dim{where}"
        " ORDER BY score DESC NULLS LAST, e.session_id, e.message_id LIMIT $k",
        params,
    ).to_pylist()
    wanted: dict[str, list[str]] = {}
    for r in rows:
        wanted.setdefault(r["session_id"], []).append(r["message_id"])
    found = {sid: store.session(sid).get_many(ids) for sid, ids in wanted.items()}
    hits = []
    for r in rows:
        message = found[r["session_id"]].get(r["message_id"])
        if message is None:  # deleted since the ranking
            continue
        text = _parts.text_of(message)
        hits.append(
            SearchHit(r["message_id"], r["session_id"], message["role"], text, _snippet(text), float(r["score"] or 0.0))
        )
    return hits


# A session's vector: the mean of its messages' unit vectors (every message with a vector of the
# model, on every branch), whose direction is that of the normalized mean; the cosine does
# not depend on its length. In DOUBLE, one row per (session, component).
_SESSION_VECTORS = """
WITH u AS (
    SELECT session_id, CAST(vector AS DOUBLE[]) AS vector FROM embeddings WHERE model = $model
), c AS (
    SELECT session_id, unnest(vector) / sqrt(list_inner_product(vector, vector)) AS v,
           unnest(range(1, len(vector) + 1)) AS i
    FROM u
), m AS (
    SELECT session_id, i, avg(v) AS v, count(*) AS n FROM c GROUP BY session_id, i
), s AS (
    SELECT session_id, list(v ORDER BY i) AS vector, any_value(n) AS messages FROM m GROUP BY session_id
)"""


def _similar_sessions(
    store: Any, query: Any, *, k: int, session_ids: Iterable[str] | None, embedder: Any, model: str
) -> list[SimilarSession]:
    """The ``k`` sessions whose vectors are nearest to ``query``'s, best first: ``query`` is a
    text, a stored message (its vector) or a stored session (its vector; left out of the hits)."""
    params: dict[str, Any] = {"model": model, "k": k}
    where = ""
    if session_ids is not None:
        if isinstance(session_ids, str):
            session_ids = [session_ids]
        params["ids"] = [str(s) for s in session_ids]
        where = " AND list_contains($ids::VARCHAR[], s.session_id)"
    own = getattr(query, "session_id", None)
    if not isinstance(query, (str, tuple)) and isinstance(own, str):
        # a stored session: its own vector, itself left out
        params["self"] = own
        have = store.sql_arrow(
            "SELECT count(*) AS n FROM embeddings WHERE session_id = $self AND model = $model",
            {"self": own, "model": model},
        ).to_pylist()[0]["n"]
        if not have:
            if not store._check().session_exists(own):
                raise SessionNotFound(f"no session {own!r} in this store")
            raise ValueError(f"session {own!r} has no {model!r} vectors: run store.embed first")
        target = "(SELECT vector FROM s WHERE session_id = $self)"
        where += " AND s.session_id <> $self"
    else:
        vector = _query_vector(store, query, model, embedder)
        dims = store.sql_arrow("SELECT DISTINCT dim FROM embeddings WHERE model = $model", {"model": model})
        dims = dims.column("dim").to_pylist()
        if dims and len(vector) not in dims:
            raise _dim_error(model, dims[0], len(vector), "the query's vector")
        params["q"] = [float(x) for x in vector]
        target = "$q::DOUBLE[]"
    rows = store.sql_arrow(
        _SESSION_VECTORS + f" SELECT s.session_id, list_cosine_similarity(s.vector, {target}) AS score, s.messages"
        f" FROM s WHERE true{where} ORDER BY score DESC NULLS LAST, s.session_id LIMIT $k",
        params,
    ).to_pylist()
    return [SimilarSession(r["session_id"], float(r["score"] or 0.0), int(r["messages"])) for r in rows]


def _snippet(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def embeddings_view_sql(tables: dict[str, str]) -> str:
    """The ``embeddings`` view over ``tables``. (A message's vector goes with it when it is
    deleted or its text updated: the store's cascades, ``_sql.py``.)"""
    return f"""SELECT e.session_id, e.message_id, e.model, e.dim::BIGINT AS dim,
           CAST(e.vector AS FLOAT[]) AS vector
    FROM {tables["embeddings"]} e"""
