"""The demo store's compaction summaries read as whole sentences."""

from __future__ import annotations

import sessionkit as sk
from sessionkit._demo import DEMO_SESSIONS, build_demo_store, demo_summarize


def test_stored_summaries_end_every_note_with_a_whole_sentence():
    store = build_demo_store(sk.open_store())
    summaries = [c.summary for sid in DEMO_SESSIONS for c in store.session(sid).compactions()]
    assert summaries
    for summary in summaries:
        notes = [line for line in summary.splitlines() if line.startswith("- ")]
        assert notes, summary
        for note in notes:
            assert "…" not in note, note
            assert note.rstrip()[-1] in ".!?)", note


def test_a_long_first_sentence_is_kept_whole():
    sentence = "We will " + " ".join(["replicate every table"] * 12) + " before cutover."
    prompt = f"Conversation excerpt:\nuser: how?\nassistant: {sentence} Then we test."
    assert demo_summarize(prompt).splitlines()[-1] == "- " + sentence
