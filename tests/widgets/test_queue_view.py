"""QueueView (docs/annotation.md): the notebook's annotation queue answers queue_view.js's
requests from the store, as the served viewer does."""

from __future__ import annotations

import pytest
from viewtools import front

import sessionkit as sk
from sessionkit.widgets import QueueView


def test_a_queue_worked_in_the_notebook(store, record):
    s = store.session("s")
    s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": "2 + 2?"}]})
    s.append({"id": "r", "role": "assistant", "parts": [{"type": "text", "text": "5"}]})
    store.queue("check", units=[("s", "r")], rubric={"tags": ["right", "wrong"]}, annotators=["ana", "bo"])
    with pytest.raises(sk.QueueNotFound):
        QueueView(store, "none")
    view = QueueView(store, "check", annotator="ana")
    sent = record(view)
    front(view, {"type": "next", "req": 1})
    (unit,) = sent.of("unit")
    assert unit["req"] == 1 and unit["unit"]["n"] == 0
    assert [(m["role"], m["text"]) for m in unit["unit"]["messages"]] == [("user", "2 + 2?"), ("assistant", "5")]
    front(view, {"type": "submit", "req": 2, "n": 0, "tag": "maybe"})
    (error,) = sent.of("error")
    assert error["req"] == 2 and "not one of the rubric's tags" in error["error"]
    front(view, {"type": "submit", "req": 3, "n": 0, "tag": "wrong", "annotator": "bo"})  # the view's annotator counts
    (done,) = sent.of("submitted")
    assert done["label"]["author"] == "ana" and store.labels(author="ana")[0].tag == "wrong"
    front(view, {"type": "state", "req": 4})
    (state,) = sent.of("state")
    assert state["progress"]["done"] == {"ana": 1, "bo": 0} and state["progress"]["complete"] == 1
    assert "1 of 1 units complete" in view.snapshot_html()
    with pytest.raises(sk.UsageError, match="no offline page"):
        view.to_html()
