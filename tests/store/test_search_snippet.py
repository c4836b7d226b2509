"""Search snippets as a reader sees them: whole words, whole phrases, no half-cut word or mark."""

from __future__ import annotations

import gzip
import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionkit.store.search import _WORD, _matched_spans, parse_query, snippet, stem

TEXT = (
    "At 180 GB a plain dump and restore would take hours. Keep the old server running read-only for a "
    "week as the rollback path. Replicate order_events in its own publication; logical replication "
    "cannot copy tables without a primary key, so order_lines gets one first. The rest follows."
)


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text))


def _marks(snip: str) -> list[str]:
    return re.findall(r"\[([^\]]*)\]", snip)


@pytest.mark.parametrize("width", [20, 37, 60, 80, 111, 160])
@pytest.mark.parametrize("query", ["server", "order", '"logical replication"', "primary key", "rest", "nothing"])
def test_snippet_never_cuts_a_word(query, width):
    snip = snippet(TEXT, parse_query(query), width=width)
    plain = snip.replace("[", "").replace("]", "")
    for piece in plain.split("…"):
        for word in re.findall(r"\w+", piece):
            assert word in _words(TEXT), (word, snip)
    assert snip.count("[") == snip.count("]")
    for marked in _marks(snip):
        assert marked in TEXT


def test_a_phrase_marks_the_phrase_only():
    snip = snippet(TEXT, parse_query('"logical replication"'), width=200)
    assert _marks(snip) == ["logical replication"]
    assert "[Replicate]" not in snip


def test_identifiers_are_marked_whole():
    snip = snippet(TEXT, parse_query("order lines"), width=400)
    assert "[order_events]" in snip and "[order_lines]" in snip
    assert "]_[" not in snip


def test_the_window_starts_and_ends_on_word_boundaries():
    snip = snippet(TEXT, parse_query("rollback"), width=60)
    assert snip.startswith("…") and snip.endswith("…")
    first = snip[1:].split()[0]
    last = snip[:-1].split()[-1]
    assert first.strip(".,;") in _words(TEXT) and last.strip(".,;[]") in _words(TEXT)
    assert "[rollback]" in snip


def test_short_text_is_returned_whole():
    assert snippet("Deploy it", parse_query("deploying")) == "[Deploy] it"
    assert snippet("no hit here", parse_query("zebra")) == "no hit here"


def _spans_word_by_word(text: str, query) -> list[tuple[int, int]]:
    """What a match marks, found the plain way: every word stemmed where it stands (the
    definition _matched_spans follows in a few C calls), widened to whole \\w words."""
    tokens = [(m.start(), m.end(), stem(m.group())) for m in _WORD.finditer(text)]
    stems = [st for _, _, st in tokens]
    spans = [(s, e) for s, e, st in tokens if st in set(query.terms)]
    for phrase in query.phrases:
        n = len(phrase)
        spans += [
            (tokens[k][0], tokens[k + n - 1][1]) for k in range(len(stems) - n + 1) if tuple(stems[k : k + n]) == phrase
        ]
    widened = []
    for s, e in spans:
        while s > 0 and re.match(r"\w", text[s - 1]):
            s -= 1
        while e < len(text) and re.match(r"\w", text[e]):
            e += 1
        widened.append((s, e))
    merged: list[tuple[int, int]] = []
    for s, e in sorted(widened):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


_VOCAB = ["Order", "orders", "order_lines", "ordered", "lines", "Line", "ÉTÉ", "été", "straße", "STRASSE", "x1", "1x"]


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from(_VOCAB), min_size=0, max_size=30),
    seps=st.lists(st.sampled_from([" ", "  ", ", ", "_", "-", ". ", "\n", "'"]), min_size=30, max_size=30),
    query=st.sampled_from(["order", "line", '"order lines"', "été strasse", '"lines order"', "x1 ordered", "nothing"]),
)
def test_matched_spans_are_those_of_stemming_each_word_where_it_stands(words, seps, query):
    text = "".join(w + s for w, s in zip(words, seps))
    parsed = parse_query(query)
    assert _matched_spans(text, parsed) == _spans_word_by_word(text, parsed)


# ASCII words whose stems stand far from the word (dying -> die, skies -> sky), start with y
# or a digit, or fold to another case, between separators of which some are not ASCII (a
# curly quote, a dash, an emoji): every text of them is read as ASCII by _matched_spans.
_ASCII_VOCAB = [
    "Order", "orders", "order_lines", "ordered", "lines", "Line", "dying", "die", "dies", "lying", "lie",
    "skies", "sky", "yes", "Yelling", "yell", "y", "ies", "ing", "news", "x1", "1x", "2024", "generalizations",
    "general", "Relational", "relate", "tying", "tie", "don't", "it's",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    words=st.lists(st.sampled_from(_ASCII_VOCAB), min_size=0, max_size=30),
    seps=st.lists(
        st.sampled_from(
            [
                " ",
                "  ",
                ", ",
                "_",
                "-",
                ". ",
                "\n",
                "'",
                "\t",
                "\u2019",
                " \u2014 ",
                "\u201c",
                "\u2026",
                "\xa0",
                "\U0001f642",
            ]
        ),
        min_size=30,
        max_size=30,
    ),
    query=st.sampled_from(
        ["order", "line", "die", "dying lie", "sky", "yes yell", "y", "ing news", "x1 2024", "general relate", "tie t"]
        + ['"order lines"', '"lines order"', '"dying lie"', '"sky sky"', 'order "die yes"', '"x1 2024" general']
    ),
)
def test_a_text_of_ascii_words_marks_what_stemming_each_word_marks(words, seps, query):
    text = "".join(w + s for w, s in zip(words, seps))
    parsed = parse_query(query)
    assert _matched_spans(text, parsed) == _spans_word_by_word(text, parsed)


def _data_words() -> set[str]:
    data = Path(__file__).resolve().parent.parent / "data"
    text = (data / "en_100_tree.jsonl").read_text(errors="replace")
    for name in ("gpt-4o-airline.json.gz", "hh-rlhf-harmless-base-test.jsonl.gz"):
        text += gzip.open(data / name, "rt", errors="replace").read()
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_a_stem_starts_with_its_words_first_character():
    """What _matched_spans' term path rests on (it stems only the words that start with a
    query term's first character): over every word of the data files, each with common
    English endings added, and every word of one to three letters."""
    words = _data_words()
    assert len(words) > 20_000
    endings = ["s", "es", "ies", "ied", "ing", "ying", "ed", "ly", "ness", "ational", "ization", "ement", "y"]
    words |= {w + e for w in list(words) for e in endings}
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    words |= {"".join(t) for n in (1, 2, 3) for t in itertools.product(letters, repeat=n)}
    wrong = sorted(w for w in words if stem(w)[:1] != w[:1])
    assert wrong == []


def test_a_text_is_read_as_ascii_exactly_when_no_word_holds_a_non_ascii_character():
    """_ascii_view's test for a non-ASCII letter or digit is str.isalnum's (what _WORD takes),
    over every code point past ASCII."""
    from sessionkit.store.search import _ascii_view

    for code in range(0x80, 0x110000):
        c = chr(code)
        view = _ascii_view("a" + c + "b")
        assert (view is None) == c.isalnum(), hex(code)
        assert view is None or view == "a b"
