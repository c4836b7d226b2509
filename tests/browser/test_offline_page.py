"""Pages written by to_html() work in a browser with no kernel and no network."""

from __future__ import annotations

import json
from pathlib import Path

import nbhelpers
import pagechecks
import pytest

import sessionkit as sk
from sessionkit.parts import FOLD_LINES, input_text, output_text
from sessionkit.widgets._source import outline_rows, tree_data

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: starts chromium


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 800}, offline=True)
    pg = context.new_page()
    pg.set_default_timeout(pagechecks.HANG_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.errors = errors
    yield pg
    context.close()


def test_to_html_pages_are_interactive_offline(page, tmp_path, screenshots):
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    tree = sk.widgets.BranchTree(s)
    tree.to_html(tmp_path / "tree.html")
    page.goto((tmp_path / "tree.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    data = tree_data(s)
    rows = outline_rows(data)
    assert not any(r[0] == "node" and data.ids[r[1]] == "a2" for r in rows)  # a2 sits in the collapsed chain
    more = next(k for k, r in enumerate(rows) if r[0] == "more")
    scroller = page.locator(".sk-tree-scroll")
    scroller.click(position={"x": 150, "y": more * 22 + 11})  # expand the chain
    page.wait_for_function(
        f"() => document.querySelector('.sk-tree-view').dataset.rows === "
        f"String({len(outline_rows(data, expanded={data.index()['sys']}))})"
    )
    expanded = outline_rows(data, expanded={data.index()["sys"]})
    row = next(k for k, r in enumerate(expanded) if r[0] == "node" and data.ids[r[1]] == "a2")
    scroller.click(position={"x": 150, "y": row * 22 + 11})
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.selected === 'a2'")
    panel = page.locator(".sk-tree-panel")
    panel.get_by_text("Let me check the weather first.").wait_for()
    assert "rain_days" in panel.inner_text()
    page.screenshot(path=str(screenshots / "offline-tree.png"))

    sk.widgets.Transcript(s, "a4").to_html(tmp_path / "chat.html")
    page.goto((tmp_path / "chat.html").as_uri())
    view = page.locator(".sk-transcript-view")
    view.wait_for()
    page.wait_for_function(
        "n => document.querySelector('.sk-transcript-view').dataset.entries === n",
        arg=str(len(s.get_history(leaf_id="a4"))),
    )
    page.locator("button[data-mode='full']").click()
    page.wait_for_function("() => document.querySelector('.sk-transcript-view').dataset.mode === 'full'")
    assert view.get_attribute("data-entries") == str(len(s.get_history(leaf_id="a4", compacted=False)))
    page.get_by_text("Great. Where should we eat?").first.wait_for()

    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(nbhelpers.run_script()), tools=[nbhelpers.weather])
    result = agent.run_sync("Plan a day", session=store.session("r"))
    sk.widgets.RunView(result).to_html(tmp_path / "run.html")
    page.goto((tmp_path / "run.html").as_uri())
    page.wait_for_selector(".sk-run-view[data-status='completed']")
    assert page.locator(".skr-turn").count() == 2
    assert result.text in page.locator(".sk-run-view").inner_text()
    assert not page.errors, page.errors


def _click_row(page, data, rows, mid, *, shift=False):
    row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == mid)
    page.locator(".sk-tree-scroll").click(
        position={"x": 150, "y": row * 22 + 11}, modifiers=["Shift"] if shift else None
    )


def _diff_cells(page) -> dict[str, list[str]]:
    cells = page.eval_on_selector_all(".sk-diff tr", "rows => rows.map(r => [...r.children].map(c => c.textContent))")
    return {r[0]: r[1:] for r in cells if r and r[0]}


def test_offline_tree_recomputes_the_branch_diff_and_survives_html_comments(page, tmp_path, screenshots):
    from sessionkit.widgets._static import fmt_cost

    store = sk.open_store()
    s = nbhelpers.forked_session(store)
    tree = sk.widgets.BranchTree(s, collapse=False, selected_id="a1", compare_id="a2")
    tree.to_html(tmp_path / "forked.html")
    page.goto((tmp_path / "forked.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    assert not page.errors, page.errors  # the payload with <!-- and </script> parsed
    toolbar = page.locator(".sk-tree-view .sk-toolbar").inner_text()
    assert "1 branch point ·" in toolbar and "2 leaves" in toolbar and "0 compactions" in toolbar
    data = tree_data(s)
    rows = outline_rows(data, collapse=False)
    # the exported comparison first: a1 against a2 (which has no usage at all)
    cells = _diff_cells(page)
    assert cells["first message"][1].startswith("An imported answer <!-- with a comment")
    assert cells["usage in/out"] == ["100/10", "unknown"]
    # click a1, shift-click a4: the panel compares a1 and a4 now, as the kernel would
    _click_row(page, data, rows, "a1")
    _click_row(page, data, rows, "a4", shift=True)
    expected = tree.compare("a1", "a4")
    page.wait_for_function(
        "n => [...document.querySelectorAll('.sk-diff tr')].some(r => "
        "r.textContent.startsWith('messages') && r.children[2].textContent === n)",
        arg=str(expected["b"]["messages"]),
    )
    cells = _diff_cells(page)
    assert cells["messages"] == [str(expected["a"]["messages"]), str(expected["b"]["messages"])]
    assert cells["tool calls"] == [str(expected["a"]["tool_calls"]), str(expected["b"]["tool_calls"])]
    b = expected["b"]
    assert cells["cost"] == [
        fmt_cost(expected["a"]["cost_usd"]),
        fmt_cost(b["cost_known_usd"], unknown=b["cost_unknown"], total=b["cost_known"] + b["cost_unknown"]),
    ]
    assert cells["cost"][1] == "≥ $0.0001 (2 of 3 unknown)"
    assert cells["usage in/out"][1] == "≥ 200/20 (1 of 3 unknown)"
    page.screenshot(path=str(screenshots / "offline-tree-diff.png"))
    # another comparison: the panel follows again
    _click_row(page, data, rows, "a3", shift=True)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.sk-diff tr')]"
        ".some(r => r.textContent.startsWith('messages') && r.children[2].textContent === '3')"
    )
    assert _diff_cells(page)["cost"][1] == "unknown"
    assert not page.errors, page.errors


def test_offline_run_view_opens_at_the_start_and_pads_the_interruption(page, tmp_path, screenshots):
    store = sk.open_store()
    sk.widgets.RunView(nbhelpers.interrupted_runs(store), height=240).to_html(tmp_path / "runs.html")
    page.goto((tmp_path / "runs.html").as_uri())
    view = page.locator(".sk-run-view")
    view.wait_for()
    pagechecks.check_run_view_start_and_interruption(page, view)
    page.locator(".skr-run[data-run='cut'] > .sk-err").screenshot(
        path=str(screenshots / "offline-run-view-interrupted.png")
    )
    assert "7 runs" in page.locator(".sk-run-view .sk-toolbar").inner_text()
    assert not page.errors, page.errors


def test_tree_rows_are_text_in_the_page_and_follow_the_keyboard(page, tmp_path, screenshots):
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    tree = sk.widgets.BranchTree(s)
    tree.to_html(tmp_path / "tree.html")
    page.goto((tmp_path / "tree.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    data = tree_data(s)
    rows = outline_rows(data)
    pagechecks.check_rows_are_text_and_follow_the_keyboard(page, page.locator(".sk-tree-view"), s, data, rows)
    page.screenshot(path=str(screenshots / "offline-tree-dom-rows.png"))
    assert not page.errors, page.errors


def test_offline_ten_thousand_message_tree_scrolls_by_the_rows_in_view_and_is_found(page, tmp_path):
    store = sk.open_store()
    s = nbhelpers.big_session(store)
    sk.widgets.BranchTree(s, height=400).to_html(tmp_path / "big.html")
    page.goto((tmp_path / "big.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    data = tree_data(s)
    rows = outline_rows(data)
    view = page.locator(".sk-tree-view")
    pagechecks.check_big_tree_stays_bounded_and_is_found(page, view, s, data, rows)
    assert not page.errors, page.errors


DATA = Path(__file__).resolve().parent.parent / "data" / "swe_agent" / "function_calling_simple.traj"
HOSTILE = '<img src=x onerror="window.__pwned=1">\x1b[31m</pre><script>window.__pwned=2</script>'


def _find_file_output() -> str:
    traj = json.loads(DATA.read_text())
    ids = {c["id"] for e in traj["history"] for c in e.get("tool_calls") or () if c["function"]["name"] == "find_file"}
    entry = next(e for e in traj["history"] if e.get("role") == "tool" and set(e.get("tool_call_ids") or ()) & ids)
    content = entry["content"]
    return content if isinstance(content, str) else content[0]["text"]


def tool_lines(n: int) -> str:
    """A tool whose output is ``n`` coloured lines (CRLF) and, last, a hostile line."""
    return "\r\n".join([f"\x1b[32mline {k}\x1b[0m" for k in range(n - 1)] + [HOSTILE])


def test_offline_transcript_and_run_view_show_readable_folded_tool_output(page, tmp_path, screenshots):
    store = sk.open_store()
    (swe,) = sk.io.import_swe_agent(store, DATA)
    sk.widgets.Transcript(swe, height=2000).to_html(tmp_path / "swe.html")
    page.goto((tmp_path / "swe.html").as_uri())
    tool = page.locator(".sk-tool", has=page.locator("summary b", has_text="find_file"))
    tool.locator("pre").last.wait_for()
    expected = output_text(_find_file_output())
    assert "\n" in expected and "\r" not in expected
    assert tool.locator("pre").last.text_content() == expected
    first_line = expected.split("\n")[0]
    assert tool.locator("pre").last.inner_text().split("\n")[0] == first_line  # a real break, drawn
    assert "\\r\\n" not in page.locator(".sk-transcript-view").inner_text()
    tool.screenshot(path=str(screenshots / "offline-tool-output.png"))

    n = FOLD_LINES + 15

    def shell(command: str) -> str:
        """Runs a shell command."""
        return tool_lines(n)

    script = [
        {"text": "Listing.", "tool_calls": [{"name": "shell", "arguments": {"command": "seq"}, "id": "c1"}]},
        {"text": "Done."},
    ]
    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script), tools=[shell])
    result = agent.run_sync("list", session=store.session("run"))
    sk.widgets.RunView(result, height=2000).to_html(tmp_path / "run.html")
    sk.widgets.Transcript(store.session("run"), height=2000).to_html(tmp_path / "run-chat.html")
    full = output_text(tool_lines(n))
    for name, view in (("run.html", ".sk-run-view"), ("run-chat.html", ".sk-transcript-view")):
        page.goto((tmp_path / name).as_uri())
        fold = page.locator(f"{view} .sk-fold")
        fold.wait_for()
        assert fold.get_attribute("data-hidden-lines") == str(n - FOLD_LINES)
        pre = fold.locator("pre")
        assert pre.text_content() == "\n".join(full.split("\n")[:FOLD_LINES])
        assert "\x1b" not in pre.text_content() and "[32m" not in pre.text_content()
        button = fold.locator("button.sk-show-all")
        assert button.text_content() == f"show all ({n - FOLD_LINES} more lines)"
        button.click()
        page.wait_for_function("el => !el.querySelector('button')", arg=fold.element_handle())
        assert pre.text_content() == full
        assert HOSTILE.replace("\x1b[31m", "") in pre.text_content()  # shown as text
        assert page.evaluate("() => window.__pwned") is None and page.locator(f"{view} img").count() == 0
    assert not page.errors, page.errors


def test_a_scorers_badge_is_marked_apart_from_a_persons(page, tmp_path):
    store = sk.open_store()
    s = store.session("judged")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Is it raining?"}]})
    s.append({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Yes."}]})
    s.add_label("a1", "terse", author="ana")
    s.add_label("a1", "answers", rating=4, source="llm", scorer="judge@1", rationale="It answers.")
    sk.widgets.Transcript(s).to_html(tmp_path / "judged.html")
    page.goto((tmp_path / "judged.html").as_uri())
    judged = page.locator(".sk-msg[data-id='a1'] .sk-label-badge[data-tag='answers']")
    person = page.locator(".sk-msg[data-id='a1'] .sk-label-badge[data-tag='terse']")
    judged.wait_for()
    assert judged.inner_text().startswith("⚙ answers ★4") and person.inner_text().startswith("terse")
    assert "sk-label-judged" in judged.get_attribute("class") and "sk-label-judged" not in person.get_attribute("class")
    assert judged.get_attribute("data-source") == "llm" and person.get_attribute("data-source") == "human"
    assert "llm scorer judge@1 · It answers." in judged.get_attribute("title")
    assert judged.evaluate("e => getComputedStyle(e).borderTopStyle") == "dashed"
    assert person.evaluate("e => getComputedStyle(e).borderTopStyle") != "dashed"


JS_NAMES = ["constructor", "toString", "__proto__", "hasOwnProperty"]


def _js_named_session(store, sid: str = "__proto__") -> sk.Session:
    """A line of messages whose ids are the names every JavaScript object has, and a branch;
    labels on two of them (so the others must show none)."""
    s = store.session(sid)
    parent = None
    for k, mid in enumerate(JS_NAMES):
        s.append(nbhelpers.text(mid, "user" if k % 2 == 0 else "assistant", f"text of {mid}"), parent_id=parent)
        parent = mid
    s.append(nbhelpers.text("valueOf", "assistant", "text of valueOf"), parent_id="toString")
    s.add_label("constructor", "first")
    s.add_label("__proto__", "proto-tag", rating=2)
    return s


def test_ids_named_like_javascript_builtins_show_in_the_offline_pages(page, tmp_path):
    store = sk.open_store()
    s = _js_named_session(store)
    sk.widgets.Transcript(s, "hasOwnProperty").to_html(tmp_path / "chat.html")
    page.goto((tmp_path / "chat.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-transcript-view")
    for mid in JS_NAMES:
        msg = page.locator(f".sk-transcript-view .sk-msg[data-id='{mid}']:not(.sk-loading)")
        msg.wait_for()
        assert f"text of {mid}" in msg.inner_text()
    tags = page.eval_on_selector_all(".sk-transcript-view .sk-label-badge", "els => els.map(e => e.dataset.tag)")
    assert tags == ["first", "proto-tag"]

    sk.widgets.BranchTree(s, collapse=False).to_html(tmp_path / "tree.html")
    page.goto((tmp_path / "tree.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    rows = page.eval_on_selector_all(".sk-tree-view .sk-row[data-id]", "els => els.map(e => e.dataset.id)")
    assert sorted(rows) == sorted([*JS_NAMES, "valueOf"])
    tags = page.eval_on_selector_all(".sk-tree-view .sk-row .sk-label-badge", "els => els.map(e => e.dataset.tag)")
    assert sorted(tags) == ["first", "proto-tag"]
    for mid in ("__proto__", "toString"):  # the panel of each: its text and its labels
        page.locator(f".sk-tree-view .sk-row[data-id='{mid}']").click()
        page.wait_for_function(f"() => document.querySelector('.sk-tree-view').dataset.selected === '{mid}'")
        page.locator(".sk-tree-panel").get_by_text(f"text of {mid}").wait_for()
    assert page.locator(".sk-tree-panel .sk-label-badge").count() == 0  # toString has none
    assert not page.errors, page.errors


def test_offline_views_show_tool_inputs_as_arguments_with_real_line_breaks(page, tmp_path):
    """A coding agent's file text and shell command: each argument by name, its text with real
    line breaks and quotes, in the Transcript, the BranchTree's panel and the RunView."""
    file_text = 'def greet(name):\n    """Say hello."""\n    return f"hello {name}"\n'
    command = 'grep -n "def greet" src/*.py'

    def write_file(path: str, file_text: str) -> str:
        """Writes a file."""
        return "written"

    def bash(command: str) -> str:
        """Runs a command."""
        return "1:def greet(name):"

    script = [
        {
            "text": "",
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "src/greet.py", "file_text": file_text}, "id": "c1"},
                {"name": "bash", "arguments": {"command": command}, "id": "c2"},
            ],
        },
        {"text": "Done."},
    ]
    store = sk.open_store()
    agent = sk.Agent("coder", "Write code.", sk.testing.ScriptedModel(script), tools=[write_file, bash])
    result = agent.run_sync("add greet", session=store.session("coder"))
    expected = {
        "write_file": input_text({"path": "src/greet.py", "file_text": file_text}),
        "bash": input_text({"command": command}),
    }
    assert expected["write_file"].startswith("path: src/greet.py\nfile_text:\n  def greet(name):\n")
    assert expected["bash"] == f"command: {command}"
    session = store.session("coder")
    tool_msg = next(m for m in session.get_history() if "write_file" in sk.parts.tool_names(m))
    sk.widgets.Transcript(session, height=2000).to_html(tmp_path / "chat.html")
    sk.widgets.RunView(result, height=2000).to_html(tmp_path / "run.html")
    sk.widgets.BranchTree(session, selected_id=tool_msg["id"], collapse=False).to_html(tmp_path / "tree.html")
    for name, view in (
        ("chat.html", ".sk-transcript-view"),
        ("run.html", ".sk-run-view"),
        ("tree.html", ".sk-tree-panel"),
    ):
        page.goto((tmp_path / name).as_uri())
        for tool, text in expected.items():
            box = page.locator(f"{view} .sk-tool", has=page.locator("summary b", has_text=tool))
            box.locator("pre").first.wait_for()
            assert box.locator("pre").first.text_content() == text, (name, tool)
        shown = page.locator(view).inner_text()
        assert "\\n" not in shown and '\\"' not in shown, name
    assert not page.errors, page.errors


def test_a_run_views_timeline_opens_each_calls_turn_offline(page, tmp_path):
    store = sk.open_store()
    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(nbhelpers.run_script()), tools=[nbhelpers.weather])
    result = agent.run_sync("Plan a day", session=store.session("r"))
    view = sk.widgets.RunView(result)
    # what the events view of store.sql gives: each model call from its turn.start to its usage
    rows = store.sql_arrow(
        "SELECT epoch(u.ts - (SELECT max_by(s.ts, s.seq) FROM events s WHERE s.run_id = u.run_id"
        " AND s.kind = 'turn.start' AND s.seq < u.seq)) AS d FROM events u WHERE u.kind = 'usage' ORDER BY u.seq"
    ).to_pylist()
    tools = store.sql_arrow("SELECT tool_call_id, latency_s FROM tool_calls ORDER BY tool_call_id").to_pylist()
    view.to_html(tmp_path / "run.html")
    page.goto((tmp_path / "run.html").as_uri())
    page.wait_for_selector(".sk-run-view[data-status='completed'] .skr-timeline .sk-timeline-bar")
    bars = page.eval_on_selector_all(
        ".skr-timeline .sk-timeline-bar", "els => els.map(e => [e.dataset.kind, Number(e.dataset.duration)])"
    )
    assert [d for k, d in bars if k == "model"] == pytest.approx([r["d"] for r in rows], abs=1e-6)
    assert sorted(d for k, d in bars if k == "tool") == pytest.approx(sorted(r["latency_s"] for r in tools), abs=1e-6)
    # a click on the second model call's bar opens its turn and names its reply
    replies = [
        m["id"] for m in store.session("r").get_history() if m["role"] == "assistant" and m["metadata"].get("usage")
    ]
    page.locator(".skr-timeline .sk-timeline-bar[data-kind='model']").nth(1).click()
    page.wait_for_selector(".skr-turn.skr-picked[data-turn='2']")
    assert page.locator(".sk-run-view").get_attribute("data-selected") == replies[1]
    assert not page.errors, page.errors


def test_an_experiment_page_shows_each_variant_against_the_baseline_offline(page, tmp_path, screenshots):
    import asyncio
    import concurrent.futures

    from sessionkit.prototyping import experiment

    store = sk.open_store()
    nbhelpers.qa_dataset(store)
    run = experiment("qa", nbhelpers.experiment_variants(), [nbhelpers.reply_length], name="off", store=store)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # (playwright's loop runs in this thread)
        result = pool.submit(asyncio.run, run).result()
    view = sk.widgets.ExperimentView(result, viewer_url="http://127.0.0.1:8765/")
    view.to_html(tmp_path / "experiment.html")
    page.goto((tmp_path / "experiment.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-experiment-view[data-completed='6']")
    for r in result.rows:
        cell = page.locator(f'.sk-experiment-view tr[data-item="{r["item"]}"] td[data-variant="{r["variant"]}"]')
        assert cell.locator(".sk-exp-reply").inner_text() == r["reply"]
        base = result.row(r["item"], "base")["scores"]["length"]
        deltas = cell.locator(".sk-exp-delta")
        if r["variant"] == "base":
            assert deltas.count() == 0
        else:
            assert deltas.inner_text() == f" (+{r['scores']['length'] - base:g})"
        link = cell.locator("a.sk-exp-link").get_attribute("href")
        assert link == f"http://127.0.0.1:8765/#/s/{r['session_id']}/m/{r['reply_id']}"
    page.screenshot(path=str(screenshots / "offline-experiment.png"))
    # without JavaScript, the page's snapshot says the same
    snapshot = view.snapshot_html()
    assert all(r["reply"] in snapshot for r in result.rows)
    assert not page.errors, page.errors
