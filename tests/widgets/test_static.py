"""Static snapshots, MIME bundles, to_html pages, and how sessions and stores display."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from sessionkit.widgets import BranchTree, RunView, StoreBrowser, Transcript, snapshot

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
EVENTS = [
    {"kind": "run.start", "run_id": "r1", "input": "hi <b>there</b>", "seq": 0},
    {"kind": "turn.start", "run_id": "r1", "turn": 1, "seq": 1},
    {"kind": "delta.text", "run_id": "r1", "text": "Hel", "seq": 2},
    {"kind": "delta.text", "run_id": "r1", "text": "lo", "seq": 3},
    {"kind": "tool.call", "run_id": "r1", "tool_call_id": "c1", "name": "lookup", "input": {"q": "x"}, "seq": 4},
    {"kind": "tool.result", "run_id": "r1", "tool_call_id": "c1", "output": {"answer": 42}, "error": None, "seq": 5},
    {
        "kind": "usage",
        "run_id": "r1",
        "in": 30,
        "out": 4,
        "cache_read": 0,
        "cache_write": 0,
        "cost_usd": 0.25,
        "model": "m",
        "seq": 6,
    },
    {"kind": "turn.end", "run_id": "r1", "stop_reason": "stop", "seq": 7},
    {"kind": "run.end", "run_id": "r1", "status": "completed", "error": None, "seq": 8},
]


def assert_script_free(html: str) -> None:
    assert "<script" not in html.lower()
    assert not re.search(r"\son[a-z]+\s*=", html, re.I), "event handler attribute"
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html, re.I), "external resource"


def test_snapshots_are_script_free_and_show_the_content(trip):
    tree = BranchTree(trip, selected_id="a4")
    html = tree.snapshot_html()
    assert_script_free(html)
    assert 'data-sessionkit-snapshot="tree"' in html
    assert "Great. Where should we eat?" in html and "2 branches" in html
    assert trip.compactions()[0].summary in html
    assert "└ " in html  # the tree reads without styles too
    chat = Transcript(trip, "a4", mode="full")
    html = chat.snapshot_html()
    assert_script_free(html)
    assert "hidden by compaction" in html and "&quot;rain_days&quot;: 4" in html
    view = RunView(EVENTS)
    html = view.snapshot_html()
    assert_script_free(html)
    assert "Hello" in html and "hi &lt;b&gt;there&lt;/b&gt;" in html and "$0.2500" in html and "lookup" in html


def test_mime_bundles_carry_widget_snapshot_and_text(trip, store):
    for widget in (BranchTree(trip), Transcript(trip), RunView(EVENTS), StoreBrowser(store)):
        data, _meta = widget._repr_mimebundle_()
        assert WIDGET_MIME in data and data[WIDGET_MIME]["model_id"] == widget.model_id
        assert data["text/html"].startswith('<div class="sk-snap')
        assert data["text/plain"]
        assert_script_free(data["text/html"])
    data, _ = trip._repr_mimebundle_()
    assert WIDGET_MIME in data and 'data-sessionkit-snapshot="tree"' in data["text/html"]
    data, _ = store._repr_mimebundle_()
    assert WIDGET_MIME in data and "trip" in data["text/html"]
    assert 'data-sessionkit-snapshot="tree"' in trip._repr_html_()
    assert 'data-sessionkit-snapshot="store"' in store._repr_html_()
    assert snapshot(store) == store._repr_html_()


def test_to_html_writes_a_self_contained_page(trip, tmp_path):
    for widget, name in ((BranchTree(trip), "tree"), (Transcript(trip), "transcript"), (RunView(EVENTS), "run")):
        path = widget.to_html(tmp_path / f"{name}.html")
        html = path.read_text(encoding="utf-8")
        assert html.startswith("<!DOCTYPE html>")
        assert f'data-sessionkit-snapshot="{name}"' in html  # readable without JavaScript
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html, re.I)
        payload = re.search(r'<script type="application/json" id="sk-payload">(.*?)</script>', html, re.S).group(1)
        data = json.loads(payload)
        assert "export default" in data["esm"]
        assert "</script" not in payload
    state = json.loads(
        re.search(r'id="sk-payload">(.*?)</script>', (tmp_path / "tree.html").read_text(), re.S).group(1)
    )["state"]
    assert set(state["_offline"]["messages"]) == {m["id"] for m in trip.get_history(compacted=False)} | {"a4"}
    assert isinstance(BranchTree(trip).to_html(), str)


def test_display_without_ipywidgets_is_a_plain_table():
    code = (
        "import sys; sys.modules['ipywidgets'] = None; sys.modules['anywidget'] = None\n"
        "import json, sessionkit as sk\n"
        "store = sk.open_store(); s = store.session('a')\n"
        "s.append({'id': 'a', 'role': 'user', 'parts': [{'type': 'text', 'text': 'hello there'}]})\n"
        "b = s._repr_mimebundle_(); t = store._repr_mimebundle_()\n"
        "try:\n    sk.widgets.BranchTree\nexcept ImportError as e:\n    err = type(e).__name__ + ': ' + str(e)\n"
        "print(json.dumps([sorted(b), sorted(t), 'hello there' in b['text/html'], '<table' in t['text/html'], err]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    b, t, has_text, has_table, err = json.loads(out.stdout)
    assert b == t == ["text/html", "text/plain"]
    assert has_text and has_table
    assert err.startswith("MissingDependency") and "sessionkit[widgets]" in err


def test_reprs_of_a_session_do_not_load_ipywidgets_for_html():
    code = (
        "import sys, sessionkit as sk\n"
        "s = sk.open_store().session('a')\n"
        "s.append({'id': 'a', 'role': 'user', 'parts': [{'type': 'text', 'text': 'hi'}]})\n"
        "html = s._repr_html_() + s.store._repr_html_()\n"
        "print('ipywidgets' in sys.modules, 'anywidget' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
