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

import contextlib
import functools
import itertools
import re
from dataclasses import dataclass

__all__ = ["tokenize", "stem", "index_text", "parse_query", "Query", "snippet", "SearchHit"]

# Letters and digits only: underscores and punctuation separate words. This matches
# FTS5's unicode61 tokenizer, which indexes the stemmed text we hand it.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: ``bytes.translate`` table giving, for ASCII text, what ``_WORD`` and case folding give:
#: digits and lower-case letters kept, upper-case letters lowered, every other byte a space.
_ASCII_WORDS = bytes(
    c if chr(c).isdigit() or chr(c).islower() else c + 32 if chr(c).isupper() else 32 for c in range(128)
) + bytes(range(128, 256))

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
    """One search result (docs/search.md); ``score`` is higher for better matches."""

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


#: index_text's table of folded word -> stem: a dict read by ``map`` in C, about two thirds of
#: the cost of calling the cached function per word; emptied past _STEMS_MAX words.
_STEMS: dict[str, str] = {}
_STEMS_MAX = 500_000


def tokenize(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, stemmed)`` for each word of ``text``."""
    return [(m.start(), m.end(), stem(m.group())) for m in _WORD.finditer(text)]


def index_text(text: str) -> str:
    """The stemmed tokens of ``text`` joined by spaces: what the full-text index stores.

    The same as :func:`stem` of each word, in a few C calls for the whole text (an index
    build runs this on every message): the words are case-folded together (a word holds
    no space, nor does a case-folded one, so splitting again gives each word's own
    folding), then stemmed through a table of folded words.
    """
    words = _folded_words(text)
    try:  # (a build calls this for every message: the table read by map, joined at once)
        return " ".join(map(_STEMS.__getitem__, words))
    except KeyError:
        return " ".join(_stems_of(words))


def _folded_words(text: str) -> list[str]:
    """The words of ``text`` (``_WORD``'s, in order), case-folded."""
    if text.isascii():
        return _ascii_folded(text).split()
    return " ".join(_WORD.findall(text)).casefold().split()


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
#: A non-ASCII letter or digit (a character ``_WORD`` takes that is not ASCII).
_NON_ASCII_WORD_CHAR = re.compile(r"[^\W_\x00-\x7f]")


def _ascii_view(text: str) -> str | None:
    """``text`` with each non-ASCII character a space, where none is part of a word (a
    curly quote, a dash, an ellipsis, a no-break space, an emoji); None where a word holds
    a non-ASCII letter or digit. Its words are ``text``'s (``_WORD``'s) at the same places,
    one character for one. Both steps run in C, and a text of another script stops at its
    first letter."""
    if _NON_ASCII_WORD_CHAR.search(text):
        return None
    return _NON_ASCII.sub(" ", text)


def _ascii_folded(text: str) -> str:
    """An ASCII text with letters and digits kept, upper case lowered and every other
    character a space, in one byte-table lookup per character (about three times faster
    than the pattern): its words at their own places."""
    return text.encode("ascii").translate(_ASCII_WORDS).decode("ascii")


def _stems_of(words: list[str]) -> list[str]:
    """The stem of each folded word, from the table of stems (filled as needed)."""
    stems = _STEMS
    try:
        return list(map(stems.__getitem__, words))
    except KeyError:  # words not seen yet: stem them once each, then read the table again
        pass
    if len(stems) > _STEMS_MAX:
        stems.clear()
    for word in set(words).difference(stems):
        stems[word] = _stem_word(word)
    try:
        return [stems[w] for w in words]
    except KeyError:  # (another thread cleared the table meanwhile)
        return list(map(_stem_word, words))


def _stem_cached(word: str) -> str:
    """The stem of one folded word, from the table of stems (filled as needed)."""
    stemmed = _STEMS.get(word)
    if stemmed is None:
        if len(_STEMS) > _STEMS_MAX:
            _STEMS.clear()
        stemmed = _STEMS[word] = _stem_word(word)
    return stemmed


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


# A "word" as a reader sees it, for marking and cutting snippets: letters, digits and
# underscores (``order_lines`` is one word), unlike the index's words.
_READ_WORD = re.compile(r"\w+", re.UNICODE)


def _matched_spans(text: str, query: Query) -> list[tuple[int, int]]:
    """Character spans of ``text`` the query matched: each matching term, each whole phrase.

    A phrase's words are marked only where the phrase itself occurs, never one by one
    (``"logical replication"`` does not mark ``Replicate``). Each span is widened to the
    whole words it touches (``order_lines`` stays one word) and overlapping spans merge.

    The words are stemmed as :func:`index_text` stems them (a few C calls for the whole
    text: its k-th stem is that of the k-th word of ``_WORD``), and only the matched words
    are then found in the text, so a long text with one match costs little Python. A text
    whose only non-ASCII characters stand between words (curly quotes, dashes) is read as
    its ASCII view (:func:`_ascii_view`), and then only the words that could match are
    stemmed (:func:`_query_spans`).
    """
    view = text if text.isascii() else _ascii_view(text)
    folded = _ascii_folded(view) if view is not None else None
    if folded is not None and all(query.terms) and all(all(phrase) for phrase in query.phrases):
        return _widened(text, _query_spans(folded, query))
    words = folded.split() if folded is not None else _folded_words(text)
    stems = _stems_of(words)
    wanted: list[tuple[int, int]] = []  # (first word, last word) of each match
    for term in query.terms:
        k = -1
        with contextlib.suppress(ValueError):
            while True:
                k = stems.index(term, k + 1)
                wanted.append((k, k))
    for phrase in query.phrases:
        n, head, k = len(phrase), phrase[0], -1
        with contextlib.suppress(ValueError):
            while True:
                k = stems.index(head, k + 1)
                if tuple(stems[k : k + n]) == phrase:
                    wanted.append((k, k + n - 1))
    if not wanted:
        return []
    needed = sorted({k for pair in wanted for k in pair})
    places = _word_places(text, words, needed, folded)
    return _widened(text, [(places[first][0], places[last][1]) for first, last in wanted])


def _widened(text: str, found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans ``found`` (of matched words), each widened to the whole words (letters,
    digits and underscores) at both ends, in order, overlapping ones merged."""
    if not found:
        return []
    spans = []
    for s, e in found:
        while s > 0 and _inword(text, s - 1):
            s -= 1
        while e < len(text) and _inword(text, e):
            e += 1
        spans.append((s, e))
    spans.sort()
    merged = [spans[0]]
    for s, e in spans[1:]:
        ps, pe = merged[-1]
        if s <= pe:
            merged[-1] = (ps, max(pe, e))
        else:
            merged.append((s, e))
    return merged


@functools.lru_cache(maxsize=256)
def _words_starting(firsts: str) -> re.Pattern[str]:
    """The words of a folded ASCII text (runs of lower-case letters and digits) that start
    with one of the characters ``firsts``."""
    return re.compile(r"(?<![a-z0-9])[" + re.escape(firsts) + r"][a-z0-9]*")


def _query_spans(folded: str, query: Query) -> list[tuple[int, int]]:
    """The spans of ``folded`` (an ASCII text as :func:`_ascii_folded` gives it) that
    ``query`` matches, none of its stems empty: each word whose stem is a term, and each
    run of consecutive words whose stems are a phrase's.

    The English stemmer changes only a word's ending: a stem starts with its word's first
    character (tests/store/test_search_snippet.py checks it over every word of the data
    files and of generated endings). So only the words starting with the first character
    of a term or of a phrase's first stem are stemmed, found by one pattern in C (and for
    a phrase, the words after one whose stem begins it): most of a text's words are never
    looked up, where :func:`_matched_spans` otherwise stems every word of the text.
    """
    terms = set(query.terms)
    heads = {phrase[0] for phrase in query.phrases}
    firsts = "".join(sorted({t[0] for t in terms} | {h[0] for h in heads}))
    found = []
    for m in _words_starting(firsts).finditer(folded):
        stemmed = _stem_cached(m.group())
        if stemmed in terms:
            found.append(m.span())
        if stemmed in heads:
            for phrase in query.phrases:
                if phrase[0] != stemmed:
                    continue
                end = m.end()
                for want in phrase[1:]:
                    after = _FOLDED_WORD.search(folded, end)
                    if after is None or _stem_cached(after.group()) != want:
                        break
                    end = after.end()
                else:
                    found.append((m.start(), end))
    return found


_FOLDED_WORD = re.compile(r"[a-z0-9]+")


def _word_places(text: str, words: list[str], needed: list[int], folded: str | None) -> dict[int, tuple[int, int]]:
    """The span in ``text`` of each word numbered in ``needed`` (ascending; ``words`` are
    its folded words). An ASCII text's folded form (``folded``, from :func:`_ascii_folded`
    of the text or of its :func:`_ascii_view`; None for any other text) has its words at
    their own places, every other character a space: the k-th word is an occurrence of
    itself between spaces there, found by ``str.find`` (its rank among equal words: a
    count of the words before it), all in C. Any other text: one pass of the pattern, each skip in C."""
    places: dict[int, tuple[int, int]] = {}
    if folded is not None:
        padded = " " + folded + " "
        for word in {words[k] for k in needed}:
            # each occurrence of the word, in the list and in the text, in order: the j-th
            # of one is the j-th of the other (linear in the text, however many there are)
            probe, at, k = " " + word + " ", -1, -1
            with contextlib.suppress(ValueError):
                while True:
                    k = words.index(word, k + 1)
                    at = padded.find(probe, at + 1)
                    places[k] = (at, at + len(word))  # (padded's leading space: at is the word's start)
        return places
    found = _WORD.finditer(text)
    at = 0
    for k in needed:
        m = next(itertools.islice(found, k - at, None))
        places[k] = m.span()
        at = k + 1
    return places


def _inword(text: str, i: int) -> bool:
    return text[i].isalnum() or text[i] == "_"


def _word_start(text: str, pos: int) -> int:
    """``pos`` moved back to the start of the word it falls in."""
    while 0 < pos < len(text) and _inword(text, pos - 1) and _inword(text, pos):
        pos -= 1
    return pos


def _word_end(text: str, pos: int) -> int:
    """``pos`` moved back so that ``text[:pos]`` does not end inside a word."""
    if pos >= len(text):
        return len(text)
    while 0 < pos and _inword(text, pos - 1) and _inword(text, pos):
        pos -= 1
    return pos


def snippet(text: str, query: Query, *, width: int = 160, mark: tuple[str, str] = ("[", "]")) -> str:
    """A window of ``text`` around the first match, matched words marked with ``mark``.

    The window starts and ends on word boundaries (a word is never cut in half; ``…``
    says text was left out), marks whole words (``[order_lines]``, not
    ``[order]_[lines]``) and marks a quoted phrase only where the whole phrase occurs.
    A mark is never cut by the window: a match that does not fit is left unmarked
    outside it.
    """
    spans = _matched_spans(text, query)
    if not spans:
        if len(text) <= width:
            return text
        end = _word_end(text, width) or width
        return text[:end].rstrip() + "…"
    first = spans[0][0]
    start = _word_start(text, max(0, first - width // 3))
    end = max(start + width, spans[0][1])
    if end < len(text):
        end = _word_end(text, end)
        if end <= spans[0][1]:
            end = spans[0][1]
    else:
        end = len(text)
    out = []
    pos = start
    for s, e in spans:
        if s < start or e > end:
            continue
        out.append(text[pos:s])
        out.append(mark[0] + text[s:e] + mark[1])
        pos = e
    out.append(text[pos:end])
    body = "".join(out)
    if start > 0:
        body = "…" + body.lstrip()
    if end < len(text):
        body = body.rstrip() + "…"
    return body


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
