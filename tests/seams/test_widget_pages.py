"""The notebook widgets' offline pages (``to_html()``) of every session of the every-fact store
(seams/facts.py): every message's id and text, the labels as badges (a branch's ⎇, a
scorer's ⚙) and every run; expected values come from the library's reads."""

from __future__ import annotations

import html

import pytest

import sessionkit as sk


def _e(text: str) -> str:
    return html.escape(text, quote=False)


def _leaves(session) -> list[str]:
    nodes = session.nodes()
    parents = {n.parent_id for n in nodes}
    return [n.id for n in nodes if n.id not in parents]


@pytest.fixture(scope="module")
def facts(every_fact_store):
    return every_fact_store("sqlite")


def test_branch_tree_page_shows_every_message_and_label(facts):
    store, notes = facts
    for sid in notes["sessions"]:
        session = store.session(sid)
        if not session.nodes():
            continue
        page = sk.widgets.BranchTree(session, collapse=False, live=False).to_html()
        for node in session.nodes():
            assert f'"{node.id}"' in page or f"{_e(node.id)}" in page, (sid, node.id)
        for label in store.labels(session_id=sid):
            badge = ("⚙ " if label.source != "human" else "⎇ " if label.target == "branch" else "") + label.tag
            assert _e(badge) in page, (sid, label)


def test_transcript_pages_show_every_message_text_and_label(facts):
    store, notes = facts
    for sid in notes["sessions"]:
        session = store.session(sid)
        labels = store.labels(session_id=sid)
        for leaf in _leaves(session):
            page = sk.widgets.Transcript(session, leaf, mode="full", live=False).to_html()
            path = session.get_history(leaf_id=leaf, compacted=False)
            for message in path:
                for part in message["parts"]:
                    if part["type"] == "text" and len(part["text"]) > 100_000:
                        # a page holds the head of a very long text and says how much is left out
                        assert _e(part["text"][:1000]) in page and "more characters)" in page, (sid, message["id"])
                    elif part["type"] == "text":
                        assert _e(part["text"]) in page, (sid, leaf, message["id"])
            on_path = {m["id"] for m in path}
            for label in labels:
                if label.message_id in on_path and label.target == "message":
                    badge = ("⚙ " if label.source != "human" else "") + label.tag
                    assert _e(badge) in page, (sid, leaf, label)


def test_run_view_pages_show_every_run(facts):
    store, notes = facts
    for sid in notes["sessions"]:
        runs = store.runs(sid)
        if not runs:
            continue
        page = sk.widgets.RunView(store.session(sid)).to_html()
        for run in runs:
            assert f'data-run="{_e(run.run_id)}"' in page, (sid, run.run_id)
            if run.input is not None:
                assert _e(run.input) in page, (sid, run.run_id)
