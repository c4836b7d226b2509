"""What the full-text index stores of a text: each word stemmed as a query stems it.

``index_text`` folds and stems a whole text in a few calls (an index build runs it on every
message); it must give exactly what stemming each word alone gives, or a query would miss
words the index holds under another form.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionkit.store.search import index_text, parse_query, stem

_WORD = re.compile(r"[^\W_]+")


def _word_by_word(text: str) -> str:
    return " ".join(stem(w) for w in _WORD.findall(text))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80) | st.text(st.characters(max_codepoint=127), max_size=80))
def test_index_text_stems_each_word_as_stem_does(text):
    # (ASCII texts take a path of their own)
    assert index_text(text) == _word_by_word(text)


def test_words_whose_folding_changes_their_length_or_final_letter():
    # İ folds to i and a combining dot, ß to ss, a ligature to two letters, a final sigma to σ
    text = "İstanbul Straße ﬁles ΣΊΣΥΦΟΣ ǅemal DEPLOYMENTS deploying order_lines 3rd"
    assert index_text(text) == _word_by_word(text)
    assert index_text(text).split()[5:7] == ["deploy", "deploy"]
    assert parse_query("deploying").terms == (index_text("DEPLOYMENTS"),)


def test_an_ascii_text_splits_where_the_pattern_does():
    text = "Deploy_FAILED at 3:04pm; retry-in 5s (x2) OK\tdone\n"
    assert index_text(text) == _word_by_word(text) == "deploy fail at 3 04pm retri in 5s x2 ok done"


def test_a_text_without_words_indexes_nothing():
    assert index_text("") == index_text("  _-- !? ") == ""


def test_a_full_table_of_stems_is_emptied_and_filled_again(monkeypatch):
    from sessionkit.store import search

    monkeypatch.setattr(search, "_STEMS", {})
    monkeypatch.setattr(search, "_STEMS_MAX", 3)
    texts = ["deploying the database migrations", "Kubernetes clusters failing", "deploying again, failing again"]
    for text in texts * 2:
        assert index_text(text) == _word_by_word(text)
    assert len(search._STEMS) <= 3 + max(len(set(t.lower().split())) for t in texts)
