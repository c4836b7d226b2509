"""Search text processing shared by every engine: tokenizing, stemming, query parsing.

One tokenizer and one stemmer for all engines, in Python, so a query means the
same thing on SQLite, DuckDB and PostgreSQL. Words are Unicode letter/digit runs,
case-folded and reduced with the Snowball English stemmer. SQLite's built-in
``porter`` tokenizer is not used: it stems "deploying" to "deploi" but
"deployments" to "deploy", so the two never match.

:func:`parse_query` never raises: any user string becomes a (possibly empty)
list of terms and phrases.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["tokenize", "stem", "index_text", "parse_query", "Query", "snippet", "SearchHit"]

# Letters and digits only: underscores and punctuation separate words. This matches
# FTS5's unicode61 tokenizer, which indexes the stemmed text we hand it.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

try:  # the C implementation when present, the pure-Python one otherwise
    import Stemmer as _pystemmer

    _stemmer = _pystemmer.Stemmer("english")
    _stem_word = _stemmer.stemWord
except ImportError:  # pragma: no cover - depends on the environment
    import snowballstemmer

    _stemmer = snowballstemmer.stemmer("english")
    _stem_word = _stemmer.stemWord


@dataclass(frozen=True)
class SearchHit:
    """One search result (SPEC Q1); ``score`` is higher for better matches."""

    id: str
    session_id: str
    role: str
    content: str
    snippet: str
    score: float


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Case-fold and stem one word."""
    return _stem_word(word.casefold())


def tokenize(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, stemmed)`` for each word of ``text``."""
    return [(m.start(), m.end(), stem(m.group())) for m in _WORD.finditer(text)]


def index_text(text: str) -> str:
    """The stemmed tokens of ``text`` joined by spaces: what the full-text index stores."""
    return " ".join(stem(m.group()) for m in _WORD.finditer(text))


@dataclass(frozen=True)
class Query:
    """A parsed query: single terms and phrases (each a tuple of stems); all must match."""

    terms: tuple[str, ...]
    phrases: tuple[tuple[str, ...], ...]

    @property
    def empty(self) -> bool:
        return not self.terms and not self.phrases

    @property
    def all_stems(self) -> set[str]:
        out = set(self.terms)
        for phrase in self.phrases:
            out.update(phrase)
        return out

    def fts5(self) -> str:
        """An FTS5 MATCH expression: every item quoted, so no operator can leak in."""
        items = [f'"{t}"' for t in self.terms]
        items += ['"' + " ".join(p) + '"' for p in self.phrases]
        return " ".join(items)


def parse_query(query: object) -> Query:
    """Split a user string into terms and ``"quoted phrases"``; never raises.

    An unbalanced quote opens a phrase that runs to the end. Repeated terms are
    dropped (FTS engines slow down sharply on a query that repeats a word).
    A phrase of one word is a term.
    """
    if not isinstance(query, str):
        query = "" if query is None else str(query)
    terms: list[str] = []
    phrases: list[tuple[str, ...]] = []
    for i, chunk in enumerate(query.split('"')):
        words = tuple(stem(m.group()) for m in _WORD.finditer(chunk))
        if not words:
            continue
        if i % 2 == 1 and len(words) > 1:
            if words not in phrases:
                phrases.append(words)
        else:
            for w in words:
                if w not in terms:
                    terms.append(w)
    return Query(tuple(terms), tuple(phrases))


def snippet(text: str, query: Query, *, width: int = 160, mark=("[", "]")) -> str:
    """A window of ``text`` around the first match with the matched words marked."""
    stems = query.all_stems
    tokens = tokenize(text)
    hits = [(s, e) for s, e, st in tokens if st in stems]
    if not hits:
        return text[:width] + ("…" if len(text) > width else "")
    first = hits[0][0]
    start = max(0, first - width // 3)
    if start > 0:  # begin at a word boundary
        space = text.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and first - space < width else start
    end = min(len(text), start + width)
    out = []
    pos = start
    for s, e in hits:
        if s < start or e > end:
            continue
        out.append(text[pos:s])
        out.append(mark[0] + text[s:e] + mark[1])
        pos = e
    out.append(text[pos:end])
    body = "".join(out)
    return ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")


def matches(text: str, query: Query) -> bool:
    """Reference semantics of a query against one text (used by tests and simple engines)."""
    if query.empty:
        return False
    stems = [st for _, _, st in tokenize(text)]
    have = set(stems)
    if any(t not in have for t in query.terms):
        return False
    for phrase in query.phrases:
        n = len(phrase)
        if not any(tuple(stems[i : i + n]) == phrase for i in range(len(stems) - n + 1)):
            return False
    return True
