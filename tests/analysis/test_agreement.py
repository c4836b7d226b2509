"""``sk.analysis.agreement``: Cohen's kappa, raw agreement and the confusion table of two label sources."""

from __future__ import annotations

import math

import pytest

import sessionkit as sk

#: (a's tag, b's tag) of ten units, worked out by hand:
#:   (yes, yes) x5, (yes, no) x1, (no, no) x2, (no, yes) x2
#:   confusion (rows a, columns b):   yes  no
#:                             yes      5   1
#:                             no       2   2
#:   observed = (5 + 2) / 10 = 0.7
#:   a: yes 6/10, no 4/10; b: yes 7/10, no 3/10
#:   expected = 0.6 * 0.7 + 0.4 * 0.3 = 0.42 + 0.12 = 0.54
#:   kappa = (0.7 - 0.54) / (1 - 0.54) = 0.16 / 0.46 = 0.347826...
PAIRS = [("yes", "yes")] * 5 + [("yes", "no")] + [("no", "no")] * 2 + [("no", "yes")] * 2


def _labelled(store):
    s = store.session("s")
    for i, (human, judge) in enumerate(PAIRS):
        s.append({"id": f"m{i}", "role": "assistant", "parts": [{"type": "text", "text": f"reply {i}"}]})
        if i == 0:
            s.add_label(f"m{i}", "no", author="ana")  # replaced by her later label on the unit: the last counts
        s.add_label(f"m{i}", human, author="ana")
        s.add_label(f"m{i}", judge, source="llm", scorer="judge@1", rationale="because")
    s.append({"id": "extra", "role": "assistant", "parts": [{"type": "text", "text": "only ana"}]})
    s.add_label("extra", "yes", author="ana")  # a unit only one source labelled: left out
    s.add_label("m3", "yes", target="branch", source="llm", scorer="judge@1")  # another unit (the branch)
    return s


def test_kappa_agreement_and_confusion_match_the_hand_computed_example(store):
    _labelled(store)
    got = sk.analysis.agreement(store, a={"source": "human"}, b={"scorer": "judge@1"})
    assert got.n == 10
    assert got.observed == pytest.approx(0.7)
    assert got.expected == pytest.approx(0.54)
    assert got.kappa == pytest.approx(0.16 / 0.46)
    assert got.confusion.loc["yes", "yes"] == 5 and got.confusion.loc["yes", "no"] == 1
    assert got.confusion.loc["no", "yes"] == 2 and got.confusion.loc["no", "no"] == 2
    assert list(got.confusion.index) == list(got.confusion.columns) == ["no", "yes"]
    assert len(got.units) == 10 and set(got.units["target"]) == {"message"}
    same = sk.analysis.agreement(store, a={"author": "ana"}, b={"source": "llm", "scorer": "judge"})
    assert same.kappa == pytest.approx(got.kappa)


def test_kappa_on_ratings_and_the_degenerate_cases(store):
    s = store.session("r")
    # ratings of four units, by hand: a 1 2 3 3, b 1 2 2 3
    #   observed = 3/4; a: 1 .25, 2 .25, 3 .5; b: 1 .25, 2 .5, 3 .25
    #   expected = .25*.25 + .25*.5 + .5*.25 = .3125; kappa = (.75 - .3125) / (1 - .3125) = .636363...
    for i, (x, y) in enumerate([(1, 1), (2, 2), (3, 2), (3, 3)]):
        s.append({"id": f"r{i}", "role": "assistant", "parts": []})
        s.add_label(f"r{i}", "quality", rating=x, author="ana")
        s.add_label(f"r{i}", "quality", rating=y, author="bo")
    got = sk.analysis.agreement(store, a={"author": "ana"}, b={"author": "bo"}, tag_or_rating="rating")
    assert (got.n, got.observed, got.expected) == (4, pytest.approx(0.75), pytest.approx(0.3125))
    assert got.kappa == pytest.approx(0.4375 / 0.6875)
    assert got.confusion.loc[3.0, 2.0] == 1
    # both sources always said the same one thing: chance explains it, kappa is undefined
    one = sk.analysis.agreement(store, a={"author": "ana"}, b={"author": "bo"}, tag_or_rating="tag")
    assert one.observed == 1.0 and one.expected == 1.0 and math.isnan(one.kappa)
    with pytest.raises(ValueError, match="no unit carries a label of both"):
        sk.analysis.agreement(store, a={"author": "ana"}, b={"author": "cy"})
    with pytest.raises(ValueError, match="no label filter 'who'"):
        sk.analysis.agreement(store, a={"who": "ana"}, b={"author": "bo"})
    with pytest.raises(ValueError, match="a dict of store.labels filters"):
        sk.analysis.agreement(store, a="human", b={"author": "bo"})
    with pytest.raises(ValueError, match="'tag' or 'rating'"):
        sk.analysis.agreement(store, a={"author": "ana"}, b={"author": "bo"}, tag_or_rating="note")


def test_kappa_is_scikit_learns(store):
    metrics = pytest.importorskip("sklearn.metrics")
    _labelled(store)
    got = sk.analysis.agreement(store, a={"source": "human"}, b={"scorer": "judge@1"})
    assert got.kappa == pytest.approx(metrics.cohen_kappa_score(got.units["a"], got.units["b"]))
