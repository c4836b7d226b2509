"""A bundle's search index (docs/viewer.md#search): written in Python, read by ``static/search.js``.

The served viewer searches with ``store.search``; a bundle opened from file:// has no store,
so :func:`write_index` writes what the page needs to answer the same queries the same way:

* the words of every message's text, tokenized and stemmed by the store's own
  :func:`sessionkit.store.search.tokenize` (Snowball English; ``search.js`` stems a query
  with the same algorithm), each with its position and where it stands in the text;
* the counts BM25 needs as SQLite's FTS5 ``bm25()`` computes them (the demo store's
  engine): every message's length in words, the number of messages, their total length.

The index is sharded so that a page loads only what a query needs: ``meta.js`` (the
messages' ids and lengths, read on the first search, never before the table shows), one
``t<N>.js`` per shard of the words (a word's shard is a hash of its stem, the same in
``search.js``) and the texts in ``x<N>.js`` files of at most about ``TEXT_FILE`` characters,
a long text cut into pieces, so a snippet loads the piece around its match and not a whole
long message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from ..store.search import tokenize

__all__ = ["PIECE", "TEXT_FILE", "SHARD_BYTES", "shard_of", "write_index"]

#: Characters of a text piece: a snippet loads the pieces around its match.
PIECE = 1 << 15
#: A texts file holds pieces up to about this many characters (a piece is never split).
TEXT_FILE = 1 << 18
#: A shard of the words is about this size at most (a single word's postings excepted).
SHARD_BYTES = 1 << 18
_MAX_SHARDS = 4096


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def shard_of(stem: str, shards: int) -> int:
    """The shard of a stem: FNV-1a (32 bits) of its UTF-8 bytes, modulo ``shards`` (a power
    of two). Hand-written because ``search.js`` computes the same in the page."""
    h = 0x811C9DC5
    for byte in stem.encode("utf-8"):
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % shards


def write_index(
    folder: Path, messages: Iterable[dict[str, object]], script: Callable[[str], str], *, candidates: int
) -> list[str]:
    """Write the index of ``messages`` into ``folder`` (created); returns the files it wrote,
    relative to ``folder``. ``messages`` are every message of the bundle's sessions in the
    store's order (``seq``: ties rank the newest first, as ``store.search`` does), each as
    ``{"session_id", "id", "role", "text"}``; ``script(json_text)`` turns a value's JSON text
    into the JavaScript expression the data files carry; ``candidates``: how many of the newest
    matches a query ranks (the store's ``settings.search_candidates``)."""
    folder.mkdir(parents=True, exist_ok=True)
    docs: list[list[object]] = []
    postings: dict[str, list[str]] = {}
    rows = 0
    total = 0
    pieces: list[str] = []
    for m in messages:
        rows += 1
        text = str(m["text"] or "")
        tokens = tokenize(text)
        if not tokens:
            continue
        total += len(tokens)
        doc = len(docs)
        docs.append([m["session_id"], m["id"], m["role"], len(tokens), len(pieces), len(text)])
        pieces.extend(text[k : k + PIECE] for k in range(0, len(text), PIECE))
        by_stem: dict[str, list[int]] = {}
        last: dict[str, tuple[int, int]] = {}
        for pos, (start, end, stem) in enumerate(tokens):
            prev_pos, prev_start = last.get(stem, (0, 0))
            by_stem.setdefault(stem, []).extend((pos - prev_pos, start - prev_start, end - start))
            last[stem] = (pos, start)
        for stem, occ in by_stem.items():
            # a document, how many times the word occurs in it, then each occurrence as
            # (position, start in the text, length), the first two as differences
            postings.setdefault(stem, []).append(f"{doc},{len(occ) // 3},{','.join(map(str, occ))}")
    size = sum(len(s) + sum(len(p) + 1 for p in ps) for s, ps in postings.items())
    shards = 1
    while shards < _MAX_SHARDS and size / shards > SHARD_BYTES:
        shards *= 2
    grouped: list[list[str]] = [[] for _ in range(shards)]
    for stem, ps in postings.items():
        grouped[shard_of(stem, shards)].append(f"[{json.dumps(stem, ensure_ascii=False)},[{','.join(ps)}]]")
    written = []
    for k, items in enumerate(grouped):
        # the postings are written as JSON text directly (numbers, and the stems as JSON strings)
        (folder / f"t{k}.js").write_text(
            f"skBundleSearchData({json.dumps(f't{k}')}, {script('[' + ','.join(items) + ']')});\n", encoding="utf-8"
        )
        written.append(f"t{k}.js")
    files: list[int] = []  # the first piece of each texts file
    batch: list[str] = []
    chars = 0

    def flush() -> None:
        name = f"x{len(files) - 1}"
        (folder / f"{name}.js").write_text(
            f"skBundleSearchData({json.dumps(name)}, {script(_json(batch))});\n", encoding="utf-8"
        )
        written.append(f"{name}.js")

    for k, piece in enumerate(pieces):
        if not files or chars + len(piece) > TEXT_FILE:
            if files:
                flush()
            files.append(k)
            batch, chars = [], 0
        batch.append(piece)
        chars += len(piece)
    if files:
        flush()
    meta = {
        "rows": rows,
        "candidates": candidates,
        "tokens": total,
        "shards": shards,
        "piece": PIECE,
        "docs": docs,
        "files": files,
    }
    (folder / "meta.js").write_text(f'skBundleSearchData("meta", {script(_json(meta))});\n', encoding="utf-8")
    written.append("meta.js")
    return written
