"""Find similar: ``store.similar`` against raw DuckDB ranking the same vectors, in one run.

N messages (100,000 by default: N/100 sessions of 100, the shared workload of
``benchmarks/peers/workload.py``) are imported into a SQLite store, then
``store.embed`` stores one 64-value vector per message with text (a hashed bag of words:
deterministic and offline, so the figure is the store's cost, not a model's). Timed:

- ``embed``: the whole first ``store.embed`` (messages per second), and a second call
  after 100 appends (it embeds those only);
- ``similar``: ``store.similar(text, k=10)`` (the first call of a store object on its
  own: it brings the analysis cache up to date; then the median of repeated calls);
- a raw build of the same index: the stored vectors read from the SQLite file with
  ``sqlite3`` and cast into an in-memory DuckDB table of ``FLOAT[64]``, the first call's
  ratio to it;
- the baseline: the same vectors, read from the store once, in an in-memory DuckDB table
  of ``FLOAT[64]``, ranked with the same ``list_cosine_similarity ... ORDER BY ... LIMIT
  10`` (median of repeated calls), its top hits checked equal to ``similar``'s.

    python benchmarks/similar_bench.py               # 100,000 messages
    python benchmarks/similar_bench.py --n 20000     # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE / "peers"))

from workload import message  # noqa: E402  (benchmarks/peers/workload.py)

import sessionkit as sk  # noqa: E402

DIM = 64
PER_SESSION = 100
QUERY = "the deployment failed while migrating the database"


class HashedWords:
    """Words hashed into DIM buckets (a stand-in for an embedding model)."""

    model = "hashed-words-64"

    def __call__(self, texts):
        out = []
        for text in texts:
            v = [0.0] * DIM
            for word in text.lower().split():
                v[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % DIM] += 1.0
            out.append(v)
        return out


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages (default 100,000)")
    parser.add_argument("--repeat", type=int, default=15, help="calls per median (default 15)")
    args = parser.parse_args()
    import duckdb
    import pyarrow as pa

    words = HashedWords()
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "similar.db")
        with sk.open_store(path) as store:
            for conv in range(args.n // PER_SESSION):
                items, parent = [], None
                for i in range(PER_SESSION):
                    m = message(conv, i)
                    items.append((m, parent, None))
                    parent = m["id"]
                store.session(f"s{conv}").import_many(items)
            start = time.perf_counter()
            embedded = store.embed(words, batch_size=2048, progress=False)
            embed_s = time.perf_counter() - start
            for i in range(100):
                store.session("extra").append(
                    {"id": f"x{i}", "role": "user", "parts": [{"type": "text", "text": f"more {i}"}]}
                )
            start = time.perf_counter()
            again = store.embed(words, progress=False)
            again_ms = (time.perf_counter() - start) * 1000
        with sk.open_store(path) as store:
            start = time.perf_counter()
            first = store.similar(QUERY, embedder=words, k=10)
            first_ms = (time.perf_counter() - start) * 1000
            warm_ms = median_ms(lambda: store.similar(QUERY, embedder=words, k=10), args.repeat)
            vectors = store.sql_arrow("SELECT session_id, message_id, vector FROM embeddings")
        # A raw build of the same index: the stored vectors read from the SQLite file, as
        # an Arrow table, into a DuckDB table of FLOAT[64] (what a first similar() builds).
        start = time.perf_counter()
        with contextlib.closing(sqlite3.connect(path)) as con:
            rows = con.execute("SELECT session_id, message_id, vector FROM sessionkit_embeddings").fetchall()
        built = duckdb.connect()
        built.register("src", pa.table({k: [r[i] for r in rows] for i, k in enumerate(("s", "m", "v"))}))
        built.execute(f"CREATE TABLE v AS SELECT s, m, v::FLOAT[{DIM}] AS vector FROM src")
        build_ms = (time.perf_counter() - start) * 1000
        built.close()
        raw = duckdb.connect()
        raw.register("src", vectors)
        raw.execute(
            f"CREATE TABLE v AS SELECT session_id, message_id, vector::FLOAT[{DIM}] AS vector FROM src"
        ).fetchall()
        q = words([QUERY])[0]
        sql = (
            f"SELECT session_id, message_id, array_cosine_similarity(vector, ?::FLOAT[{DIM}]) AS score FROM v"
            " ORDER BY score DESC NULLS LAST, session_id, message_id LIMIT 10"
        )
        top = raw.execute(sql, [q]).fetchall()
        raw_ms = median_ms(lambda: raw.execute(sql, [q]).fetchall(), args.repeat)
    same = [(h.session_id, h.id) for h in first] == [(r[0], r[1]) for r in top]
    print(f"messages: {args.n:,}; vectors: {embedded:,} of {DIM} values (hashed words)")
    print(f"embed, first call: {embed_s:.2f} s ({embedded / embed_s:,.0f} msg/s)")
    print(f"embed after 100 appends: {again} embedded in {again_ms:.1f} ms")
    print(f"similar, first call of a new store object: {first_ms:.1f} ms")
    print(f"raw build of the same index (the vectors read from the file into DuckDB): {build_ms:.1f} ms")
    print(f"ratio first similar / raw build: {first_ms / build_ms:.2f}x time")
    print(f"similar, warm (median of {args.repeat}): {warm_ms:.1f} ms")
    print(f"raw DuckDB over the same vectors (median of {args.repeat}): {raw_ms:.1f} ms")
    print(f"ratio similar / raw DuckDB: {warm_ms / raw_ms:.2f}x time; same top 10: {same}")


if __name__ == "__main__":
    main()
