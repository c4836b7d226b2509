"""The PostgreSQL engine's text helpers: its URLs, and search text as ``tsvector``/``tsquery`` literals.

The URL a store opens is split into what libpq gets and the ``schema=`` parameter
(:func:`_parse_url`), and shown without its password (:func:`_shown_url`). Search
text reaches PostgreSQL as literals built from the stems of
:mod:`sessionkit.store.search` (:func:`_tsvector`, :func:`_tsquery`), within
PostgreSQL's limits on lexeme size, positions and total size; NOTIFY payloads are
cut on UTF-8 character boundaries (:func:`_split_utf8`). Pure functions, no
connection: ``postgres.PostgresEngine`` uses them.
"""

from __future__ import annotations

import hashlib
import urllib.parse

from ... import search as _search

# tsvector limits (PostgreSQL's MAXSTRLEN, MAXSTRPOS, MAXENTRYPOS, MAXNUMPOS)
_MAX_LEXEME_BYTES = 2000
_MAX_LEXEMES_BYTES = (1 << 20) - 1  # MAXSTRPOS
_MAX_POSITION = 16383
_MAX_POSITIONS = 256


def _query_pairs(query: str) -> list[tuple[str, str]]:
    """``key=value`` pairs of a URL query, kept percent-encoded exactly as written (libpq decodes them)."""
    pairs = []
    for item in query.split("&"):
        if item:
            key, _, value = item.partition("=")
            pairs.append((key, value))
    return pairs


def _parse_url(url: str) -> tuple[str, str | None]:
    """``(conninfo, schema)``: the URL libpq gets (without ``schema=``) and that parameter."""
    parts = urllib.parse.urlsplit(url)
    schema = None
    rest = []
    for key, value in _query_pairs(parts.query):
        if urllib.parse.unquote(key) == "schema":
            schema = urllib.parse.unquote(value)
        else:
            rest.append(key + "=" + value)
    conninfo = urllib.parse.urlunsplit(("postgresql", parts.netloc, parts.path, "&".join(rest), ""))
    return conninfo, schema


def _shown_url(conninfo: str, schema: str | None) -> str:
    """The store's URL as shown and reopened: no password, the schema when one was chosen."""
    parts = urllib.parse.urlsplit(conninfo)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        netloc = userinfo.split(":", 1)[0] + "@" + hosts
    query = [k + "=" + v for k, v in _query_pairs(parts.query) if urllib.parse.unquote(k) != "password"]
    if schema is not None:
        query.append("schema=" + urllib.parse.quote(schema, safe=""))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "&".join(query), ""))


def _lexeme(stem: str) -> str:
    """A stem as a tsvector lexeme: stems too long for PostgreSQL become a digest (same for queries)."""
    if len(stem) * 4 > _MAX_LEXEME_BYTES and len(stem.encode("utf-8")) > _MAX_LEXEME_BYTES:
        return "#" + hashlib.sha256(stem.encode("utf-8")).hexdigest()  # '#' never occurs in a stem
    return stem


def _quote_lexeme(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsvector(text: str) -> str:
    """The ``tsvector`` literal of a text: its stems with their positions (no parser involved)."""
    positions: dict[str, list[int]] = {}
    for i, stem in enumerate(_search.index_text(text).split(), 1):
        pos = i if i < _MAX_POSITION else _MAX_POSITION
        lex = _lexeme(stem)
        seen = positions.get(lex)
        if seen is None:
            positions[lex] = [pos]
        elif len(seen) < _MAX_POSITIONS and seen[-1] != pos:
            seen.append(pos)
    out = []
    budget = _MAX_LEXEMES_BYTES
    for lex, at in positions.items():
        size = len(lex) if lex.isascii() else len(lex.encode("utf-8"))
        # What PostgreSQL counts against its limit: the lexeme padded to an even length,
        # and its positions (two bytes each, plus a two-byte count).
        cost = size + (size & 1) + 2 + 2 * len(at)
        if cost > budget:
            break  # the words that fit are indexed; the message is stored whole either way
        budget -= cost
        out.append(_quote_lexeme(lex) + ":" + ",".join(map(str, at)))
    return " ".join(out)


def _tsquery(query: _search.Query) -> str:
    """A ``tsquery`` literal built from the parsed stems only: every term, every phrase."""
    items = [_quote_lexeme(_lexeme(t)) for t in query.terms]
    for phrase in query.phrases:
        items.append("(" + " <-> ".join(_quote_lexeme(_lexeme(w)) for w in phrase) + ")")
    return " & ".join(items)


def _split_utf8(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` UTF-8 bytes, never inside a character."""
    if len(text) * 4 <= limit or len(text.encode("utf-8")) <= limit:
        return [text]
    out = []
    i = 0
    while i < len(text):
        piece = text[i : i + limit]
        raw = piece.encode("utf-8")
        if len(raw) > limit:
            piece = raw[:limit].decode("utf-8", "ignore")
        out.append(piece)
        i += len(piece)
    return out
