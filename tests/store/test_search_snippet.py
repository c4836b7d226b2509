"""Search snippets as a reader sees them: whole words, whole phrases, no half-cut word or mark."""

from __future__ import annotations

import re

import pytest

from sessionkit.store.search import parse_query, snippet

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
