"""Labels in BranchTree and Transcript: badges, snapshots, edits from the front end, other views kept current."""

from __future__ import annotations

import re

from viewtools import front

import sessionkit as sk


def test_badges_show_in_the_synced_state_and_both_snapshots(trip):
    on_msg = trip.add_label("a2", "<odd & tag>", rating=2.5, note='says "ok"', author="ana")
    on_branch = trip.add_label("a5", "keeper", target="branch")
    tree = sk.widgets.BranchTree(trip, live=False)
    chat = sk.widgets.Transcript(trip, mode="full", live=False)  # the latest path passes a2 and a5
    shown = {mid: [x["id"] for x in items] for mid, items in tree._labels.items()}
    assert shown == {"a2": [on_msg.id], "a5": [on_branch.id]} and chat._labels == tree._labels
    assert tree._labels["a2"][0] == {
        "id": on_msg.id,
        "tag": "<odd & tag>",
        "rating": 2.5,
        "target": "message",
        "note": 'says "ok"',
        "author": "ana",
        "source": "human",
        "scorer": None,
        "rationale": None,
    }
    html = chat.snapshot_html()
    assert "&lt;odd &amp; tag&gt; ★2.5" in html and "<odd & tag>" not in html
    assert "⎇ keeper" in html and 'title="says &quot;ok&quot; · by ana"' in html
    html = sk.widgets.BranchTree(trip, collapse=False, live=False).snapshot_html()
    assert "&lt;odd &amp; tag&gt; ★2.5" in html and "⎇ keeper" in html
    offline = tree.to_html()
    assert '"_labels"' in offline and "keeper" in offline


def test_a_scorers_label_looks_different_from_a_persons(trip):
    trip.add_label("a2", "fine", author="ana")
    trip.add_label("a2", "tool-error", source="code", scorer="tool_error@1", rationale="the call failed")
    html = sk.widgets.Transcript(trip, mode="full", live=False).snapshot_html()
    classes = {tag: cls.split() for cls, tag in re.findall(r'<span class="([^"]*)"[^>]* data-tag="([^"]*)"', html)}
    assert "sk-label-judged" in classes["tool-error"] and "sk-label-judged" not in classes["fine"]
    assert "⚙ tool-error" in html and "code scorer tool_error@1 · the call failed" in html


def test_a_label_added_in_one_view_reaches_the_store_and_every_other_view(trip, record, manual_timers):
    tree = sk.widgets.BranchTree(trip, author="ana")
    other_tree = sk.widgets.BranchTree(trip)
    chat = sk.widgets.Transcript(trip)
    sent = record(tree)
    tree_before = other_tree._tree
    front(tree, {"type": "add-label", "id": "a4b", "tag": "good", "rating": 4, "target": "message", "req": 7})
    (stored,) = trip.labels()
    assert (stored.message_id, stored.tag, stored.rating, stored.author) == ("a4b", "good", 4.0, "ana")
    assert sent.of("label-added") == [{"type": "label-added", "req": 7, "label": stored.id}]
    assert [x["id"] for x in tree._labels["a4b"]] == [stored.id]  # at once in the view that made it
    assert chat._labels == {} and other_tree._labels == {}  # the others: at their next refresh
    assert manual_timers.fire() == 3  # every view of the session, the one that made it too
    assert chat._labels == tree._labels == other_tree._labels
    assert other_tree._tree is tree_before  # a label event reads the labels, not the tree again
    front(chat, {"type": "remove-label", "label": stored.id, "req": 8})
    assert trip.labels() == [] and chat._labels == {}
    assert manual_timers.fire() == 3
    assert tree._labels == other_tree._labels == {}


def test_a_refused_label_answers_the_front_end_with_the_error_and_stores_nothing(trip, record):
    tree = sk.widgets.BranchTree(trip, live=False)
    sent = record(tree)
    front(tree, {"type": "add-label", "id": "a2", "tag": "", "req": 3})
    front(tree, {"type": "add-label", "id": "nope", "tag": "x", "req": 4})
    errors = sent.of("error")
    assert [e["req"] for e in errors] == [3, 4]
    assert errors[0]["error"].startswith("InvalidLabel: ") and "empty" in errors[0]["error"]
    assert errors[1]["error"].startswith("MessageNotFound: ")
    assert trip.labels() == [] and tree._labels == {}


def _dejavu_sans_coverage() -> set[int] | None:
    """The code points DejaVu Sans (Debian's default sans-serif font) draws, from `fc-query`."""
    import shutil
    import subprocess
    from pathlib import Path

    font = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    if not font.exists() or shutil.which("fc-query") is None:
        return None
    ranges = subprocess.run(
        ["fc-query", "--format=%{charset}", str(font)], check=True, capture_output=True, text=True
    ).stdout.split()
    covered: set[int] = set()
    for item in ranges:
        low, _, high = item.partition("-")
        covered.update(range(int(low, 16), int(high or low, 16) + 1))
    return covered


# What DejaVu Sans draws among the non-ASCII characters the views use, checked once with
# `fc-query` on DejaVuSans.ttf; used where the font is not installed.
_DEJAVU_FALLBACK = {ord(c) for c in "–—…←→≥⋯─│┆┊└├═▍▤▲▼○●★✕°·×éïü⎇"}


def test_static_files_and_snapshots_use_only_glyphs_the_default_fonts_draw(trip):
    from pathlib import Path

    trip.add_label("a5", "keeper", target="branch")
    trip.add_label("a2", "odd", rating=2)
    covered = _dejavu_sans_coverage() or _DEJAVU_FALLBACK | set(range(0x20, 0x7F))
    static = Path(sk.widgets.__file__).parent / "static"
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(static.iterdir()) if p.is_file()}
    texts["tree snapshot"] = sk.widgets.BranchTree(trip, collapse=False, live=False).snapshot_html()
    texts["transcript snapshot"] = sk.widgets.Transcript(trip, mode="full", live=False).snapshot_html()
    missing = {
        name: sorted({c for c in text if ord(c) > 0x7F and ord(c) not in covered}) for name, text in texts.items()
    }
    assert len(texts) > 5 and {name: chars for name, chars in missing.items() if chars} == {}
