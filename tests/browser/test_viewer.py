"""``sessionkit view``: the store viewer, served by the real command on 127.0.0.1 and written as a
static bundle, worked in Chromium as a user does.

What the page must show is computed from the store with its own API (``len(session)``,
``store.search``, ``store.list_sessions``), never from what the viewer answered. Every request
the page makes is watched: nothing may leave 127.0.0.1 (served) or file:// (bundle), and the
adversarial texts of the widgets' tests run nothing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import quote

import nbhelpers
import pytest
from helpers import viewer_in_thread, wait_until
from servers import launcher

import sessionkit as sk
from sessionkit.parts import input_text, output_text
from sessionkit.store.search import parse_query, stem
from sessionkit.widgets.viewer import PAGE_SIZE, write_bundle

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: a server process and chromium

HERE = Path(__file__).resolve().parent
SWE = HERE.parent / "data" / "swe_agent" / "function_calling_simple.traj"
HOSTILE_ID = '<img src=x onerror="window.__pwned=1">'
HOSTILE = [
    "a <!-- b --> </script><script>window.__pwned=2</script> & c",
    '<img src=x onerror="window.__pwned=3"> javascript:window.__pwned=4',
    '"><svg onload="window.__pwned=5">',
]
CHATS = 57  # with the other sessions, more than one page of PAGE_SIZE rows


def _chat(store, k: int) -> None:
    """Session chat-NN with 1 + k % 9 messages, a line."""
    items = []
    for j in range(1 + k % 9):
        role = "user" if j % 2 == 0 else "assistant"
        items.append(
            (nbhelpers.text(f"m{j}", role, f"chat {k} turn {j} about trains"), f"m{j - 1}" if j else None, None)
        )
    store.session(f"chat-{k:02d}").import_many(items)


def listing(command: str) -> str:
    """Runs a command."""
    return "total 2\r\n" + "\n".join(HOSTILE)


def build_store(path: Path) -> None:
    with sk.open_store(path) as store:
        for k in range(CHATS):
            _chat(store, k)
        nbhelpers.demo_session(store)  # "trip": a compaction, a branch, a tool call
        nbhelpers.forked_session(store)  # "forked": markup in its texts
        sk.io.import_swe_agent(store, SWE)
        script = [
            {"text": "Listing.", "tool_calls": [{"name": "listing", "arguments": {"command": "ls"}, "id": "c1"}]},
            {"text": "Two files."},
        ]
        agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script), tools=[listing])
        agent.run_sync("list the files", session=store.session("run"))
        hostile = store.session(HOSTILE_ID)
        hostile.append(nbhelpers.text("h1", "user", HOSTILE[0]))
        hostile.append(
            {
                "id": "h2",
                "role": "assistant",
                "parts": [
                    {"type": "text", "text": HOSTILE[1] + " hostile"},
                    {
                        "type": "tool-x",
                        "toolCallId": "c",
                        "state": "output-available",
                        "input": {"q": HOSTILE[2]},
                        "output": HOSTILE[2],
                    },
                ],
            }
        )


def _env() -> dict:
    import os

    env = dict(os.environ)
    env.pop("SESSIONKIT_TOKEN", None)
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true", PYTHONUNBUFFERED="1")
    return env


def view_process(store: Path, *extra: str):
    return launcher(
        [sys.executable, "-m", "sessionkit", "view", str(store), "--port", "0", *extra],
        cwd=store.parent,
        env=_env(),
        pattern=r" at (http://127\.0\.0\.1:\d+/\S*)",
        timeout=120,
    )


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("viewer") / "viewer.db"
    build_store(path)
    return path


@pytest.fixture(scope="module")
def served(store_path):
    with view_process(store_path) as launched:
        yield launched.match.group(1)


class Watched:
    """A page and every URL it asked for."""

    def __init__(self, browser, *, offline: bool = False):
        self.context = browser.new_context(viewport={"width": 1300, "height": 900}, offline=offline)
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)
        self.urls: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.urls.append(r.url))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def foreign(self, allowed: str) -> list[str]:
        return [u for u in self.urls if not u.startswith((allowed, "blob:", "data:"))]

    def pwned(self):
        return self.page.evaluate("() => window.__pwned")

    def close(self) -> None:
        self.context.close()


def _table(page) -> list[str]:
    page.wait_for_selector(".skv-sessions[data-rows]:not([data-loading])")
    return page.eval_on_selector_all(".skv-table tbody tr", "rows => rows.map(r => r.dataset.session)")


def _sorted_ids(sizes: dict[str, int], *, desc: bool) -> list[str]:
    # ties in session order, as the page promises (ORDER BY <column>, session_id)
    return [sid for sid, _ in sorted(sizes.items(), key=lambda kv: (-kv[1] if desc else kv[1], kv[0]))]


def test_served_viewer_table_sort_filter_search_session_and_links(browser, served, store_path, screenshots):
    with sk.open_store(store_path) as store:
        sizes = {info.id: len(store.session(info.id)) for info in store.list_sessions()}
        hits = store.search("trains", limit=50)
        trip_leaf = store.session("trip").latest_leaf()["id"]
        run_turns = sum(1 for e in store.events("run") if e["kind"] == "turn.start")
    w = Watched(browser)
    page = w.page
    page.goto(served)
    rows = _table(page)
    assert len(rows) == PAGE_SIZE
    assert page.locator(".skv-sessions").get_attribute("data-total") == str(len(sizes))
    assert f"of {len(sizes)} sessions" in page.locator(".skv-status").inner_text()
    page.screenshot(path=str(screenshots / "viewer-sessions.png"))

    # sort by messages: most first, then fewest first
    page.locator("th[data-sort='messages'] button").click()
    page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.sort === 'messages desc'")
    assert _table(page) == _sorted_ids(sizes, desc=True)[:PAGE_SIZE]
    page.locator("th[data-sort='messages'] button").click()
    page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.sort === 'messages asc'")
    assert _table(page) == _sorted_ids(sizes, desc=False)[:PAGE_SIZE]
    # the next page holds the rest
    page.locator(".skv-next").click()
    page.wait_for_function(f"() => document.querySelector('.skv-sessions').dataset.rows === '{len(sizes) - PAGE_SIZE}'")
    assert _table(page) == _sorted_ids(sizes, desc=False)[PAGE_SIZE:]
    # filter
    page.locator(".skv-filter").fill("chat-1")
    want = sorted((s for s in sizes if "chat-1" in s), key=lambda s: (sizes[s], s))
    page.wait_for_function(f"() => document.querySelector('.skv-sessions').dataset.total === '{len(want)}'")
    assert _table(page) == want

    # search: store.search's hits, in its order; a hit opens its session at that message
    page.locator(".skv-search").fill("trains")
    page.locator(".skv-search").press("Enter")
    page.wait_for_selector(".skv-results[data-hits]")
    shown = page.eval_on_selector_all(".skv-hit", "els => els.map(e => [e.dataset.session, e.dataset.id])")
    assert shown == [[h.session_id, h.id] for h in hits]
    assert page.locator(".skv-hit mark").first.inner_text().lower().startswith("train")
    page.screenshot(path=str(screenshots / "viewer-search.png"))
    target = hits[3]
    page.locator(".skv-hit").nth(3).locator("a").first.click()  # its heading (the snippet is a link too)
    page.wait_for_selector(".skv-session[data-ready='1']")
    assert page.locator(".skv-session").get_attribute("data-selected") == target.id
    assert page.locator(".sk-tree-view").get_attribute("data-selected") == target.id
    page.wait_for_selector(f".sk-transcript-view .sk-msg.skv-target[data-id='{target.id}']")
    assert page.evaluate("() => location.hash") == f"#/s/{target.session_id}/m/{target.id}"

    # a deep link pasted into a new page: the tree's other branch, its path in the transcript
    fresh = browser.new_page()
    fresh.on("request", lambda r: w.urls.append(r.url))
    fresh.goto(served + "#/s/trip/m/a4")
    fresh.wait_for_selector(".skv-session[data-ready='1']")
    assert fresh.locator(".sk-tree-view").get_attribute("data-selected") == "a4"
    chat = fresh.locator(".sk-transcript-view")
    fresh.wait_for_function("() => document.querySelector('.sk-transcript-view').dataset.leaf === 'a4'")
    assert chat.locator(".sk-comp").count() == 1  # the compaction boundary on this path
    # the messages' texts arrive after the path (each as it scrolls into view): wait on the text
    fresh.wait_for_function(
        "() => document.querySelector('.sk-transcript-view').innerText.includes('Cervejaria Ramiro')"
    )
    # the session's own link opens at its latest leaf
    fresh.goto(served + "#/s/trip")
    fresh.wait_for_selector(".skv-session[data-ready='1']")
    assert fresh.locator(".sk-tree-view").get_attribute("data-selected") == trip_leaf
    fresh.screenshot(path=str(screenshots / "viewer-session.png"), full_page=True)
    fresh.close()

    # a session with runs: its RunView, the tool output as text
    page.goto(served + "#/s/run")
    page.wait_for_selector(".skv-session[data-ready='1'] .sk-run-view[data-status='completed']")
    assert page.locator(".sk-run-view .skr-turn").count() == run_turns
    out = page.locator(".sk-run-view .sk-tool pre").last
    assert out.text_content() == output_text(listing("ls"))

    # the hostile session: its id, texts and tool output are text; nothing runs
    page.goto(served + "#/s/" + HOSTILE_ID.replace('"', "%22"))
    page.wait_for_selector(".skv-session[data-ready='1'] .sk-transcript-view .sk-msg[data-id='h2']:not(.sk-loading)")
    chat_text = page.locator(".sk-transcript-view").inner_text()
    assert HOSTILE[1] in chat_text and HOSTILE[2] in chat_text
    assert HOSTILE_ID in page.locator(".skv-title").inner_text()
    page.goto(served + "#/search/hostile")
    page.wait_for_selector(".skv-results[data-hits]")
    assert int(page.locator(".skv-results").get_attribute("data-hits")) >= 1
    assert w.pwned() is None
    assert page.locator("#sk-app img, #sk-app svg, #sk-app script").count() == 0
    assert not w.errors, w.errors
    assert w.foreign(served) == [], w.foreign(served)
    w.close()


def test_served_viewer_opens_ten_thousand_sessions_with_one_page_of_rows(browser, tmp_path):
    path = tmp_path / "many.db"
    lines = [json.dumps({"format": "sessionkit", "version": 1})]
    for k in range(10_000):
        message = {"id": "m0", "role": "user", "parts": [{"type": "text", "text": f"question {k}"}]}
        lines.append(json.dumps({"type": "message", "session_id": f"s{k:05d}", "parent_id": None, "message": message}))
    (tmp_path / "many.jsonl").write_text("\n".join(lines) + "\n")
    with sk.open_store(path) as store:
        sk.io.import_jsonl(store, tmp_path / "many.jsonl")
        total = len(store.list_sessions())
    assert total == 10_000
    with view_process(path) as launched:
        url = launched.match.group(1)
        w = Watched(browser)
        answers = []
        w.page.on("response", lambda r: answers.append(r) if "/api/sessions" in r.url else None)
        w.page.goto(url)
        assert len(_table(w.page)) == PAGE_SIZE
        assert w.page.locator(".skv-sessions").get_attribute("data-total") == str(total)
        wait_until(lambda: answers, what="the sessions answer")
        body = answers[-1].json()
        assert len(body["rows"]) == PAGE_SIZE and body["total"] == total  # one page crossed the wire
        assert w.foreign(url) == [] and not w.errors
        w.close()


def test_bundle_opens_from_file_and_shows_the_table_a_session_and_search(browser, store_path, tmp_path, screenshots):
    chosen = ["trip", "forked", HOSTILE_ID, "function_calling_simple"]
    with sk.open_store(store_path) as store:
        folder = write_bundle(store, tmp_path / "bundle", session_ids=chosen)
        sizes = {sid: len(store.session(sid)) for sid in chosen}
        words = [h for h in store.search("Lisbon", limit=50) if h.session_id in chosen and h.id.startswith(("u", "a"))]
    assert words
    w = Watched(browser, offline=True)
    page = w.page
    page.goto((folder / "index.html").as_uri())
    rows = _table(page)
    assert sorted(rows) == sorted(chosen)
    page.locator("th[data-sort='messages'] button").click()
    page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.sort === 'messages desc'")
    assert _table(page) == _sorted_ids(sizes, desc=True)
    page.locator(".skv-table a[href='#/s/trip']").click()
    page.wait_for_selector(".skv-session[data-ready='1'] .sk-tree-view[data-layout='done']")
    chat = page.locator(".sk-transcript-view")
    chat.locator(".sk-comp").first.wait_for()
    page.get_by_text("Taberna da Rua das Flores").first.wait_for()
    page.screenshot(path=str(screenshots / "viewer-bundle-session.png"))
    page.goto((folder / "index.html").as_uri() + "#/s/function_calling_simple")
    tool = page.locator(".sk-tool", has=page.locator("summary b", has_text="find_file"))
    tool.locator("pre").last.wait_for()
    assert "\n" in tool.locator("pre").last.text_content() and "\\r\\n" not in tool.inner_text()
    page.goto((folder / "index.html").as_uri() + "#/search/Lisbon")
    page.wait_for_selector(".skv-results[data-hits]")
    found = page.eval_on_selector_all(".skv-hit", "els => els.map(e => e.dataset.session + '/' + e.dataset.id)")
    assert {f"{h.session_id}/{h.id}" for h in words} <= set(found)
    page.goto((folder / "index.html").as_uri() + "#/s/" + HOSTILE_ID.replace('"', "%22"))
    page.wait_for_selector(".skv-session[data-ready='1'] .sk-transcript-view .sk-msg[data-id='h2']:not(.sk-loading)")
    assert HOSTILE[0] in page.locator(".sk-transcript-view").inner_text()
    assert w.pwned() is None and page.locator("#sk-app img, #sk-app svg, #sk-app script").count() == 0
    assert w.foreign("file://") == [] and not w.errors, (w.foreign("file://"), w.errors)
    w.close()


# Queries of the demo store: stemmed words ("deployments" finds "deploying" and "deploy"),
# two words, a phrase, a word in nearly every message (its IDF at FTS5's floor), an id.
DEMO_QUERIES = ["deployments", "logical replication", '"logical replication"', "replicate", "the", "order_events"]


def _hits(page) -> list[tuple[str, str, float, str]]:
    page.wait_for_selector(".skv-results[data-hits]")
    return [
        (h["session"], h["id"], float(h["score"]), h["snippet"])
        for h in page.eval_on_selector_all(
            ".skv-hit",
            "els => els.map(e => ({...e.dataset, snippet: e.querySelector('.skv-snippet').innerHTML}))",
        )
    ]


def _marked(snippet: str) -> str:
    """A snippet with its [marks] as the page draws them."""
    import html

    return "".join(
        f"<mark>{html.escape(bit[1:-1], quote=False)}</mark>"
        if bit.startswith("[") and bit.endswith("]") and len(bit) > 2
        else html.escape(bit, quote=False)
        for bit in re.split(r"(\[[^[\]]*\])", snippet)
    )


def test_a_bundle_of_the_demo_store_opens_offline_from_file(browser, tmp_path):
    """What `sessionkit view demo.db --bundle DIR` writes for `make demo`'s store: every
    session in the table, each one's transcript, nothing fetched; its search answers as the
    served viewer does (/api/search: store.search's hits, scores and marked snippets)."""
    from sessionkit._demo import DEMO_SESSIONS, build_demo_store
    from sessionkit.widgets.viewer import search_hits

    with build_demo_store(str(tmp_path / "demo.db")) as store:
        folder = write_bundle(store, tmp_path / "demo-bundle")
        first = {sid: store.session(sid).get_history()[0] for sid in DEMO_SESSIONS}
        served = {q: search_hits(store, q, limit=51) for q in DEMO_QUERIES}
    assert all(served.values()) and len(served["the"]) > 20
    w = Watched(browser, offline=True)
    page = w.page
    page.goto((folder / "index.html").as_uri())
    assert sorted(_table(page)) == sorted(DEMO_SESSIONS)
    # the table shows before any of the search index is read
    assert not [u for u in w.urls if "/data/search/" in u]
    for q in DEMO_QUERIES:
        page.goto((folder / "index.html").as_uri() + "#/search/" + quote(q, safe=""))
        shown = _hits(page)
        want = served[q]
        assert [h[:2] for h in shown] == [(h["session_id"], h["id"]) for h in want], q
        assert [h[2] for h in shown] == pytest.approx([h["score"] for h in want], rel=1e-12, abs=1e-15), q
        assert [h[3] for h in shown] == [_marked(h["snippet"]) for h in want], q
        assert all("<mark>" in h[3] for h in shown), q
    loaded = {u.rsplit("/", 1)[-1] for u in w.urls if "/data/search/" in u}
    assert loaded == {"meta.js", "t0.js", "x0.js"}  # a store this small: one shard, one texts file
    # the page's stemmer and query parser are the store's: every word of the docs and a few
    # queries beyond ASCII read the same in the page as in sessionkit.store.search
    docs = Path(__file__).resolve().parents[2] / "docs"
    vocabulary = sorted(
        {m.group().casefold() for f in docs.rglob("*.md") for m in re.finditer(r"[^\W_]+", f.read_text("utf-8"))}
    )
    assert len(vocabulary) > 2000
    assert page.evaluate("words => words.map(skStem)", vocabulary) == [stem(x) for x in vocabulary]
    queries = [
        '"logical replication" deployments',
        "Straße ΣΑΣ naïve café",
        "order_lines 17.2°C",
        'an "unclosed phrase',
    ]
    parsed = [parse_query(q) for q in queries]
    want = [{"terms": list(p.terms), "phrases": [list(x) for x in p.phrases]} for p in parsed]
    assert page.evaluate("qs => qs.map(skParseQuery)", queries) == want
    for sid, message in first.items():
        page.goto((folder / "index.html").as_uri() + f"#/s/{sid}")
        page.wait_for_selector(f".skv-session[data-ready='1'] .sk-transcript-view .sk-msg[data-id='{message['id']}']")
    # a store without message vectors: the session's page says why it lists no similar conversations
    page.wait_for_selector(".skv-similar[data-ready='1']")
    assert "no message vectors" in page.locator(".skv-similar-none").inner_text()
    assert w.foreign("file://") == [] and not w.errors, (w.foreign("file://"), w.errors)
    w.close()


def test_token_guards_the_api_and_write_is_off_unless_asked(store_path, tmp_path):
    import urllib.error
    import urllib.request

    token = "t" * 24

    def status(url, *, method="GET", auth=None):
        request = urllib.request.Request(
            url, method=method, headers={"Authorization": f"Bearer {auth}"} if auth else {}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    copy = tmp_path / "copy.db"
    with sk.open_store(copy) as store:
        _chat(store, 1)
        _chat(store, 2)
    with view_process(copy, "--token", token) as launched:
        url = launched.match.group(1)
        base = url.split("?")[0]
        assert url.endswith(f"?token={token}")
        assert status(base) == 200  # the page holds no data
        assert status(base + "api/sessions") == 401
        assert status(base + "api/sessions", auth="x" * 24) == 401
        assert status(base + "api/sessions", auth=token) == 200
        assert status(base + "api/session?id=chat-01", method="DELETE", auth=token) == 405
    with view_process(copy, "--write") as launched:
        # --write without a token: a random one, printed in the URL only
        url = launched.match.group(1)
        base, _, query = url.partition("?token=")
        assert len(query) >= 16 and query != token
        assert status(base + "api/sessions") == 401
        assert status(base + "api/session?id=chat-01", method="DELETE") == 401
        assert status(base + "api/session?id=nope", method="DELETE", auth=query) == 404
        assert status(base + "api/session?id=chat-01", method="DELETE", auth=query) == 200
    with sk.open_store(copy) as store:
        assert [info.id for info in store.list_sessions()] == ["chat-02"]


def test_a_write_viewer_keeps_its_token_in_the_tab_and_deletes_from_the_page(browser, tmp_path):
    copy = tmp_path / "write.db"
    with sk.open_store(copy) as store:
        for k in range(3):
            _chat(store, k)
    with view_process(copy, "--write") as launched:
        url = launched.match.group(1)
        base = url.split("?")[0]
        w = Watched(browser)
        page = w.page
        page.goto(url)
        assert sorted(_table(page)) == ["chat-00", "chat-01", "chat-02"]
        # the token left the address bar; links and a reload keep working in this tab
        assert "token" not in page.url
        page.reload()
        assert len(_table(page)) == 3
        page.goto(base + "#/s/chat-01")
        page.wait_for_selector(".skv-session[data-ready='1']")
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator(".skv-delete").click()
        page.wait_for_function("() => location.hash === '#/'")
        wait_until(lambda: len(_table(page)) == 2, what="the table without chat-01")
        # another tab without the token reads nothing and says why
        other = browser.new_page()
        other.goto(base)
        other.wait_for_selector(".skv-error")
        assert "token" in other.locator(".skv-error").inner_text()
        other.close()
        assert not w.errors and w.foreign(base) == [], (w.errors, w.foreign(base))
        w.close()
    with sk.open_store(copy) as store:
        assert sorted(info.id for info in store.list_sessions()) == ["chat-00", "chat-02"]


def _letters(texts: list[str]) -> list[list[float]]:
    """A small embedder: each text's counts of the letters a to z."""
    return [[1.0 + text.lower().count(chr(97 + k)) for k in range(26)] for text in texts]


def _labelled_store(path: Path) -> dict[str, list[str]]:
    """The demo "trip" session with labels on three messages, two chats (one labelled); returns
    each session's tags as the store lists them."""
    with sk.open_store(path) as store:
        trip = nbhelpers.demo_session(store)
        _chat(store, 0)
        _chat(store, 1)
        trip.add_label("a4", "hallucination", rating=1, note="no such place", author="ana")
        trip.add_label("u3", "good-question")
        trip.add_label("a5", "resolved", target="branch", rating=5)
        store.session("chat-01").add_label("m0", "good-question")
        store.embed(_letters)  # vectors: the page lists similar conversations
        return {
            info.id: sorted({lab.tag for lab in store.labels(session_id=info.id)}) for info in store.list_sessions()
        }


def _check_labels(
    page, url: str, tags: dict[str, list[str]], trip_labels: dict[str, list[str]], similar: list[str]
) -> None:
    page.goto(url)
    _table(page)
    for sid, want in tags.items():
        shown = page.eval_on_selector_all(
            f".skv-table tr[data-session='{sid}'] td.skv-labels .sk-label-badge", "els => els.map(e => e.dataset.tag)"
        )
        assert shown == want, sid
    # filtering by a tag finds the sessions that carry it
    page.locator(".skv-filter").fill("hallucination")
    page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.total === '1'")
    assert _table(page) == ["trip"]
    page.locator(".skv-filter").fill("good-question")
    page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.total === '2'")
    assert sorted(_table(page)) == ["chat-01", "trip"]
    page.locator(".skv-filter").fill("")
    # the session: badges in the tree's rows and on the transcript's messages
    page.goto(url.split("#")[0] + "#/s/trip/m/a4")
    page.wait_for_selector(".skv-session[data-ready='1'] .sk-tree-view[data-layout='done']")
    page.wait_for_selector(".sk-transcript-view .sk-msg[data-id='a4']:not(.sk-loading)")
    for mid, want in trip_labels.items():
        row = page.eval_on_selector_all(
            f".sk-tree-view .sk-row[data-id='{mid}'] .sk-label-badge", "els => els.map(e => e.dataset.tag)"
        )
        assert row == want, mid
    on_path = {"u3": trip_labels["u3"], "a4": trip_labels["a4"]}
    for mid, want in on_path.items():
        msg = page.eval_on_selector_all(
            f".sk-transcript-view .sk-msg[data-id='{mid}'] .sk-label-badge", "els => els.map(e => e.dataset.tag)"
        )
        assert msg == want, mid
    badge = page.locator(".sk-transcript-view .sk-msg[data-id='a4'] .sk-label-badge").first
    assert badge.inner_text() == "hallucination ★1"
    assert "no such place" in badge.get_attribute("title") and "by ana" in badge.get_attribute("title")
    # read-only here: no "remove" on a badge, no "+ label"
    assert page.locator(".skv-session .sk-label-x, .skv-session .sk-label-add").count() == 0
    # similar conversations: store.similar(level="session")'s, in its order; a link opens one
    page.wait_for_selector(".skv-similar[data-ready='1']")
    shown = page.eval_on_selector_all(".skv-similar li", "els => els.map(e => e.dataset.session)")
    assert shown == similar
    page.locator(".skv-similar li a").first.click()
    page.wait_for_selector(f".skv-session[data-session='{similar[0]}'][data-ready='1']")


def test_labels_show_in_the_table_the_filter_and_as_badges_served_and_bundled(browser, tmp_path):
    path = tmp_path / "labelled.db"
    tags = _labelled_store(path)
    assert tags == {"trip": ["good-question", "hallucination", "resolved"], "chat-00": [], "chat-01": ["good-question"]}
    with sk.open_store(path) as store:
        trip_labels: dict[str, list[str]] = {}
        for lab in store.labels(session_id="trip"):
            trip_labels.setdefault(lab.message_id, []).append(lab.tag)
        folder = write_bundle(store, tmp_path / "bundle")
        similar = [h.session_id for h in store.similar(store.session("trip"), level="session", k=5)]
    assert sorted(similar) == ["chat-00", "chat-01"]
    with view_process(path) as launched:
        url = launched.match.group(1)
        w = Watched(browser)
        _check_labels(w.page, url, tags, trip_labels, similar)
        assert not w.errors and w.foreign(url) == [], (w.errors, w.foreign(url))
        w.close()
    w = Watched(browser, offline=True)
    _check_labels(w.page, (folder / "index.html").as_uri(), tags, trip_labels, similar)
    assert not w.errors and w.foreign("file://") == [], (w.errors, w.foreign("file://"))
    w.close()


JS_NAMES = ["constructor", "toString", "__proto__", "hasOwnProperty"]


def _check_js_names(page, url: str) -> None:
    page.goto(url)
    assert sorted(_table(page)) == sorted(["__proto__", "constructor", "chat-00"])
    for sid in ("__proto__", "constructor"):
        page.locator(f".skv-table tr[data-session='{sid}'] a").click()
        page.wait_for_selector(f".skv-session[data-session='{sid}'][data-ready='1'] .sk-tree-view[data-layout='done']")
        for mid in JS_NAMES:
            msg = page.locator(f".sk-transcript-view .sk-msg[data-id='{mid}']:not(.sk-loading)")
            msg.wait_for()
            assert f"{sid}: text of {mid}" in msg.inner_text()
        rows = page.eval_on_selector_all(".sk-tree-view .sk-row[data-id]", "els => els.map(e => e.dataset.id)")
        assert set(JS_NAMES) <= set(rows)
        tags = page.eval_on_selector_all(".sk-transcript-view .sk-label-badge", "els => els.map(e => e.dataset.tag)")
        assert tags == ["first", "proto-tag"]
        # a deep link to the message named __proto__
        page.goto(url.split("#")[0] + f"#/s/{sid}/m/__proto__")
        page.wait_for_selector(f".skv-session[data-session='{sid}'][data-ready='1']")
        assert page.locator(".sk-tree-view").get_attribute("data-selected") == "__proto__"
        page.goto(url)
        _table(page)
    # a link with a malformed escape: a message saying so, the way home still there
    page.goto(url.split("#")[0] + "#/s/%E0%A4%A")
    page.wait_for_selector(".skv-bad-link")
    assert "link" in page.locator(".skv-bad-link").inner_text().lower()
    page.locator(".skv-home").click()
    assert len(_table(page)) == 3


def test_ids_named_like_javascript_builtins_open_served_and_bundled(browser, tmp_path):
    path = tmp_path / "names.db"
    with sk.open_store(path) as store:
        for sid in ("__proto__", "constructor"):
            s = store.session(sid)
            s.append(nbhelpers.text("constructor", "user", f"{sid}: text of constructor"))
            s.append(nbhelpers.text("toString", "assistant", f"{sid}: text of toString"), parent_id="constructor")
            s.append(nbhelpers.text("valueOf", "user", f"{sid}: text of valueOf"), parent_id="toString")  # a branch
            s.append(nbhelpers.text("__proto__", "user", f"{sid}: text of __proto__"), parent_id="toString")
            last = nbhelpers.text("hasOwnProperty", "assistant", f"{sid}: text of hasOwnProperty")
            s.append(last, parent_id="__proto__")
            s.add_label("constructor", "first")
            s.add_label("__proto__", "proto-tag", rating=2)
        _chat(store, 0)
        folder = write_bundle(store, tmp_path / "bundle")
    with view_process(path) as launched:
        url = launched.match.group(1)
        w = Watched(browser)
        _check_js_names(w.page, url)
        assert not w.errors and w.foreign(url) == [], (w.errors, w.foreign(url))
        w.close()
    w = Watched(browser, offline=True)
    _check_js_names(w.page, (folder / "index.html").as_uri())
    assert not w.errors and w.foreign("file://") == [], (w.errors, w.foreign("file://"))
    w.close()


def _check_inputs(page, url: str) -> None:
    """The SWE-agent trajectory's edit and an agent run's tool call: arguments by name, as text."""
    traj = json.loads(SWE.read_text())
    args = {
        c["function"]["name"]: json.loads(c["function"]["arguments"])
        for e in traj["history"]
        for c in e.get("tool_calls") or ()
    }
    page.goto(url.split("#")[0] + "#/s/function_calling_simple")
    for name in ("edit", "bash", "find_file"):
        tool = page.locator(".sk-transcript-view .sk-tool", has=page.locator("summary b", has_text=name))
        tool.locator("pre").first.wait_for()
        assert tool.locator("pre").first.text_content() == input_text(args[name]), name
    edit = page.locator(".sk-transcript-view .sk-tool", has=page.locator("summary b", has_text="edit"))
    assert edit.locator("pre").first.inner_text().split("\n") == [
        f"search: {args['edit']['search']}",
        f"replace: {args['edit']['replace']}",
    ]
    assert '\\"' not in page.locator(".sk-transcript-view").inner_text()
    page.goto(url.split("#")[0] + "#/s/run")
    page.wait_for_selector(".skv-session[data-ready='1'] .sk-run-view[data-status='completed']")
    for view in (".sk-run-view", ".sk-transcript-view"):
        tool = page.locator(f"{view} .sk-tool", has=page.locator("summary b", has_text="listing"))
        tool.locator("pre").first.wait_for()
        assert tool.locator("pre").first.text_content() == "command: ls", view


def test_tool_inputs_read_as_arguments_served_and_bundled(browser, served, store_path, tmp_path):
    w = Watched(browser)
    _check_inputs(w.page, served)
    assert not w.errors and w.foreign(served) == [], (w.errors, w.foreign(served))
    w.close()
    with sk.open_store(store_path) as store:
        folder = write_bundle(store, tmp_path / "bundle", session_ids=["run", "function_calling_simple"])
    w = Watched(browser, offline=True)
    _check_inputs(w.page, (folder / "index.html").as_uri())
    assert not w.errors and w.foreign("file://") == [], (w.errors, w.foreign("file://"))
    w.close()


def test_search_pages_through_120_hits_and_a_snippet_opens_its_message(browser, tmp_path):
    path = tmp_path / "hits.db"
    with sk.open_store(path) as store:
        for k in range(4):  # 120 messages that say "needle", 30 a session
            store.session(f"hay-{k}").append_many(
                [
                    nbhelpers.text(f"m{j}", "user" if j % 2 == 0 else "assistant", f"needle number {j} in hay {k}")
                    for j in range(30)
                ]
            )
        total = len(store.search("needle", limit=1000))
        best = [(h.session_id, h.id) for h in store.search("needle", limit=50)]
    assert total == 120
    with view_process(path) as launched:
        url = launched.match.group(1)
        w = Watched(browser)
        page = w.page
        page.goto(url + "#/search/needle")
        for shown in (50, 100, 120):
            page.wait_for_selector(f".skv-results[data-hits='{shown}']")
            count = page.locator(".skv-hit-count").inner_text()
            more = shown < total
            assert count.startswith(f"{shown}+ hits" if more else f"{shown} hits"), count
            assert page.locator(".skv-hit").count() == shown
            assert page.locator(".skv-more-hits").count() == (1 if more else 0)
            if shown == 50:
                hits = page.eval_on_selector_all(".skv-hit", "els => els.map(e => [e.dataset.session, e.dataset.id])")
                assert [tuple(h) for h in hits] == best
            if more:
                page.locator(".skv-more-hits").click()
        served = _hits(page)
        hit = page.locator(".skv-hit").nth(117)
        sid, mid = hit.get_attribute("data-session"), hit.get_attribute("data-id")
        hit.locator(".skv-snippet-link").click()
        page.wait_for_selector(f".skv-session[data-session='{sid}']")
        wait_until(lambda: page.evaluate("() => location.hash").endswith(f"/m/{mid}"), what="the hit's message")
        assert w.foreign(url) == [] and not w.errors
        w.close()
    # the bundle of the same store pages the same way through the same hits, in the same order
    # (120 ties but for their length: the newest first), each with its snippet marked
    with sk.open_store(path) as store:
        folder = write_bundle(store, tmp_path / "bundle")
    w = Watched(browser, offline=True)
    page = w.page
    page.goto((folder / "index.html").as_uri() + "#/search/needle")
    for shown in (50, 100, 120):
        page.wait_for_selector(f".skv-results[data-hits='{shown}']")
        assert page.locator(".skv-more-hits").count() == (1 if shown < total else 0)
        if shown < total:
            page.locator(".skv-more-hits").click()
    assert _hits(page) == served
    assert page.locator(".skv-hit mark").count() == total
    assert w.foreign("file://") == [] and not w.errors, (w.foreign("file://"), w.errors)
    w.close()


# Every call of a session's runs, in the order the timeline draws them (each run in the order
# runs started, its calls in the order they started), with its duration as the events view
# gives it: a model call from its turn.start to its usage event, a tool call from its first
# tool.call to its first tool.result (as the tool_calls view's latency_s).
_CALLS_SQL = """
WITH e AS (SELECT * FROM events WHERE session_id = $sid AND run_id IS NOT NULL),
runs AS (SELECT run_id, min(ts) FILTER (WHERE kind = 'run.start') AS began FROM e GROUP BY run_id),
m AS (
    SELECT u.run_id, 'model' AS kind, u.ts AS stop,
           (SELECT max(s.seq) FROM e s WHERE s.run_id = u.run_id AND s.kind = 'turn.start' AND s.seq < u.seq) AS sseq
    FROM e u WHERE u.kind = 'usage'
),
calls AS (
    SELECT m.run_id, m.kind, s.ts AS start, m.stop, s.seq FROM m JOIN e s ON s.seq = m.sseq
    UNION ALL
    SELECT run_id, 'tool', min(ts) FILTER (WHERE kind = 'tool.call'), min(ts) FILTER (WHERE kind = 'tool.result'),
           min(seq) FILTER (WHERE kind = 'tool.call')
    FROM e WHERE kind IN ('tool.call', 'tool.result')
    GROUP BY run_id, json_extract_string(data, '$.tool_call_id')
)
SELECT c.kind, epoch(c.stop - c.start) AS duration_s
FROM calls c JOIN runs r USING (run_id) ORDER BY r.began, c.start, c.seq
"""


def broken(path: str) -> str:
    """Reads a file."""
    raise OSError(f"no such file: {path}")


@pytest.mark.parametrize("kind", ["sqlite", "duckdb", "postgresql"])
def test_the_timeline_shows_each_call_with_its_duration_and_opens_its_message(
    browser, kind, tmp_path, request, screenshots
):
    if kind == "postgresql":
        from store.pg_cluster import new_store_url

        request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
        target = new_store_url()
    else:
        target = str(tmp_path / ("timeline.db" if kind == "sqlite" else "timeline.duckdb"))
    script = [
        {
            "text": "Looking.",
            "tool_calls": [
                {"name": "listing", "arguments": {"command": "ls"}, "id": "c1"},
                {"name": "broken", "arguments": {"path": "x"}, "id": "c2"},
            ],
        },
        {"text": "Two files, one unreadable."},
    ]
    with sk.open_store(target) as store:
        agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script), tools=[listing, broken])
        agent.run_sync("list the files", session=store.session("run"))
        sk.Agent("t", "Be brief.", sk.testing.ScriptedModel([{"text": "Again."}])).run_sync(
            "once more", session=store.session("run")
        )
        want = [(r["kind"], r["duration_s"]) for r in store.sql_arrow(_CALLS_SQL, {"sid": "run"}).to_pylist()]
        failed = {e["tool_call_id"] for e in store.events("run") if e["kind"] == "tool.result" and e["error"]}
        replies = [
            m["id"]
            for m in store.session("run").get_history()
            if m["role"] == "assistant" and (m.get("metadata") or {}).get("usage")
        ]
    assert [k for k, _ in want] == ["model", "tool", "tool", "model", "model"] and failed == {"c2"}
    with launcher(
        [sys.executable, "-m", "sessionkit", "view", target, "--port", "0"],
        cwd=tmp_path,
        env=_env(),
        pattern=r" at (http://127\.0\.0\.1:\d+/\S*)",
        timeout=120,
    ) as launched:
        url = launched.match.group(1)
        w = Watched(browser)
        page = w.page
        page.goto(url + "#/s/run")
        page.wait_for_selector(".skv-session[data-ready='1'] .skv-timeline .sk-timeline[data-runs='2']")
        bars = page.eval_on_selector_all(
            ".skv-timeline .sk-timeline-bar",
            "els => els.map(e => [e.dataset.kind, Number(e.dataset.duration),"
            " e.classList.contains('sk-timeline-error'), e.dataset.message])",
        )
        assert [b[0] for b in bars] == [k for k, _ in want]
        assert [b[1] for b in bars] == pytest.approx([d for _, d in want], abs=1e-6)
        assert [b[2] for b in bars] == [False, False, True, False, False]  # the tool that raised
        # the model calls' bars name their replies, in order; a click opens the reply
        assert [b[3] for b in bars if b[0] == "model"] == replies
        page.locator(".skv-timeline").screenshot(path=str(screenshots / f"viewer-timeline-{kind}.png"))
        page.locator(".skv-timeline .sk-timeline-bar[data-kind='model']").nth(1).click()
        page.wait_for_selector(f".sk-transcript-view .sk-msg.skv-target[data-id='{replies[1]}']")
        assert page.locator(".skv-session").get_attribute("data-selected") == replies[1]
        tip = page.locator(".skv-timeline .sk-timeline-bar[data-kind='model']").first.get_attribute("title")
        assert " in / " in tip and " out" in tip
        assert w.foreign(url) == [] and not w.errors, (w.foreign(url), w.errors)
        w.close()


@pytest.mark.parametrize("kind", ["sqlite", "duckdb", "postgresql"])
def test_a_column_from_sql_sorts_the_table_with_the_values_of_its_query(browser, kind, store_path, tmp_path, request):
    """A column of a --columns file sorts the served table, its cells are the query's values,
    and the filter matches them, on every engine (the module's store, copied into a DuckDB
    file or a PostgreSQL schema for those)."""
    if kind == "postgresql":
        from store.pg_cluster import new_store_url

        request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
        target = new_store_url()
        sk.io.copy_store(store_path, target)
    elif kind == "duckdb":
        target = str(tmp_path / "columns.duckdb")
        sk.io.copy_store(store_path, target)
    else:
        target = str(store_path)
    sql = (
        "SELECT session_id, count(*) FILTER (WHERE role = 'user') * 100 + max(depth) AS score FROM messages GROUP BY 1"
    )
    with sk.open_store(target) as store:
        want = {r["session_id"]: r["score"] for r in store.sql_arrow(sql).to_pylist()}
        runs = {info.id: len(store.runs(info.id)) for info in store.list_sessions()}
    columns = tmp_path / "columns.txt"
    columns.write_text(f"# the table's extra columns\nscore={sql}\n")
    with launcher(
        [sys.executable, "-m", "sessionkit", "view", target, "--port", "0", "--columns", str(columns)],
        cwd=tmp_path,
        env=_env(),
        pattern=r" at (http://127\.0\.0\.1:\d+/\S*)",
        timeout=120,
    ) as launched:
        url = launched.match.group(1)
        w = Watched(browser)
        page = w.page
        page.goto(url)
        _table(page)
        assert page.locator("th[data-sort='score']").inner_text().startswith("score")
        page.locator("th[data-sort='score'] button").click()
        page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.sort === 'score desc'")
        shown = page.eval_on_selector_all(
            ".skv-table tbody tr",
            "rows => rows.map(r => [r.dataset.session, r.querySelector(\"td[data-column='score']\").textContent])",
        )
        order = sorted(want, key=lambda s: (-want[s], s))[:PAGE_SIZE]
        assert [s for s, _ in shown] == order
        assert [v for _, v in shown] == [f"{want[s]:,}" for s in order]
        # the built-in runs column: each session's number of runs
        page.locator("th[data-sort='runs'] button").click()
        page.wait_for_function("() => document.querySelector('.skv-sessions').dataset.sort === 'runs desc'")
        cells = page.eval_on_selector_all(
            ".skv-table tbody tr",
            "rows => rows.map(r => [r.dataset.session, r.querySelector('td.skv-runs').textContent])",
        )
        assert cells[0] == ["run", str(runs["run"])] and all(v == str(runs[s]) for s, v in cells)
        # the filter matches a column's values too
        top = str(want[order[0]])
        page.locator(".skv-filter").fill(top)
        expect = {s for s in want if top in s or top in str(want[s])}
        page.wait_for_function(f"() => document.querySelector('.skv-sessions').dataset.total === '{len(expect)}'")
        assert set(_table(page)) == expect
        assert w.foreign(url) == [] and not w.errors, (w.foreign(url), w.errors)
        w.close()


# -- annotation queues (--write, docs/annotation.md) ------------------------------------------
# Two annotators work one queue at once on every engine: every unit ends labelled per_unit
# times, and the page's progress and agreement are what the store's own SQL counts. The
# viewer's app runs in this process (uvicorn on 127.0.0.1, in a thread) over the test's store;
# `sessionkit view --annotator`'s arguments are checked in tests/server/test_view_queues.py.

QUEUE_TOKEN = "owner-token-0123456789abcdef"
QUEUE_ANA = "ana-token-0123456789abcdef"
QUEUE_BO = "bo-token-0123456789abcdefgh"
QUEUE_UNITS = 3


def _queue_ready(page) -> dict:
    page.wait_for_selector(".skq[data-ready='1']:not([data-loading])")
    return page.evaluate(
        "() => { const r = document.querySelector('.skq'); const u = r.querySelector('.skq-unit');"
        " return {finished: r.dataset.finished === '1', n: u.dataset.n === undefined ? null : Number(u.dataset.n)}; }"
    )


def test_two_annotators_work_one_queue_at_once(engine, new_store, browser):
    from sessionkit.server import create_view_app

    store = new_store(engine)
    with store.transaction():
        for i in range(QUEUE_UNITS):
            s = store.session(f"s{i}")
            s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": f"what is {i} + {i}?"}]})
            s.append({"id": "r", "role": "assistant", "parts": [{"type": "text", "text": f"{2 * i}"}]})
    store.queue(
        "check",
        units=[(f"s{i}", "r") for i in range(QUEUE_UNITS)],
        rubric={"tags": ["right", "wrong"], "instructions": "Is the sum right?"},
        annotators=["ana", "bo"],
        per_unit=2,
    )
    app = create_view_app(store, token=QUEUE_TOKEN, write=True, annotators={"ana": QUEUE_ANA, "bo": QUEUE_BO})
    with viewer_in_thread(app) as base:
        people = {"ana": Watched(browser), "bo": Watched(browser)}
        # ana comes by the header's link and the list of queues, bo by the queue's own link
        people["ana"].page.goto(f"{base}?token={QUEUE_ANA}")
        people["ana"].page.click(".skv-queues-link")
        people["ana"].page.click(".skv-queue-list li[data-queue='check'] a")
        people["bo"].page.goto(f"{base}?token={QUEUE_BO}#/q/check")
        # both pages submit before either waits: their claims and submissions interleave
        working = dict(people)
        while working:
            shown = {who: _queue_ready(w.page) for who, w in working.items()}
            for who, now in shown.items():
                if now["finished"]:
                    del working[who]
                    continue
                page = working[who].page
                tag = "wrong" if who == "bo" and now["n"] % 2 else "right"
                page.click(f".skq-tag[data-tag='{tag}']")
                page.click(".skq-submit")
            for who, now in shown.items():
                if who in working:
                    working[who].page.wait_for_function(
                        "n => { const r = document.querySelector('.skq');"
                        " return !r.dataset.loading && (r.dataset.finished === '1'"
                        " || r.querySelector('.skq-unit').dataset.n !== String(n)); }",
                        arg=now["n"],
                    )
        page = people["ana"].page
        page.reload()
        _queue_ready(page)
        page.wait_for_selector(".skq-agreement")
        done = {
            row.get_attribute("data-annotator"): int(row.query_selector(".skq-done").inner_text())
            for row in page.query_selector_all(".skq-progress tr[data-annotator]")
        }
        pair = page.query_selector(".skq-agreement tr[data-pair='ana|bo']")
        shown_n = int(pair.query_selector(".skq-n").inner_text())
        shown_observed = float(pair.query_selector(".skq-observed").get_attribute("data-value"))
        for w in people.values():
            assert w.errors == [] and w.foreign(base) == []
            w.context.close()
    per_unit = store.sql(
        "SELECT session_id, count(*) AS n, count(DISTINCT author) AS people FROM labels"
        " WHERE source = 'human' GROUP BY 1"
    )
    assert len(per_unit) == QUEUE_UNITS and set(per_unit["n"]) == {2} and set(per_unit["people"]) == {2}
    by_author = store.sql("SELECT author, count(*) AS n FROM labels GROUP BY author")
    assert done == dict(zip(by_author["author"], map(int, by_author["n"])))
    same = store.sql(
        "SELECT count(*) AS n, avg(CASE WHEN a.tag = b.tag THEN 1.0 ELSE 0.0 END) AS observed FROM labels a"
        " JOIN labels b ON a.session_id = b.session_id AND a.message_id = b.message_id"
        " WHERE a.author = 'ana' AND b.author = 'bo'"
    )
    assert (shown_n, shown_observed) == (int(same["n"][0]), pytest.approx(float(same["observed"][0])))
    assert store.queue_progress("check").complete == QUEUE_UNITS


# -- the overview (#/overview): every chart's marks are what SQL over the views counts ----------
# Each figure is computed here with its own query over the views (not the viewer's), and read
# from the page's marks (data-key, data-series, data-value): served on every engine, and from a
# bundle opened from file:// on SQLite.

_OVERVIEW_READ = (
    "() => Object.fromEntries([...document.querySelectorAll('.skv-chart')].map(c => [c.dataset.chart,"
    " [...c.querySelectorAll('.skv-mark')].map(m => [m.dataset.key, m.dataset.series, m.dataset.value,"
    " !!m.querySelector('title') && m.querySelector('title').textContent.length > 0])]))"
)


def _overview_store(store) -> None:
    for k, day in enumerate(["2026-05-01", "2026-05-01", "2026-05-03"]):
        s = store.session(f"o{k}")
        s.append(nbhelpers.text("u", "user", f"question {k}", createdAt=f"{day}T08:00:00.000Z"))
        s.append(nbhelpers.text("a", "assistant", f"answer {k}", createdAt=f"{day}T08:00:02.000Z"))
    s.add_label("a", "helpful", rating=4, author="ana")
    store.session("o0").add_label("a", "helpful", rating=2.5, author="bo")
    store.session("o1").add_label("a", "terse", source="code", scorer="length@1")
    script = [
        {
            "text": "Looking.",
            "tool_calls": [
                {"name": "listing", "arguments": {"command": "ls"}, "id": "c1"},
                {"name": "broken", "arguments": {"path": "x"}, "id": "c2"},
            ],
        },
        {"text": "One unreadable."},
    ]
    sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script), tools=[listing, broken]).run_sync(
        "list the files", session=store.session("run")
    )


def _overview_want(store) -> dict[str, dict[tuple[str, str], float | None]]:
    """Each chart's figures, {(key, series): value}, from SQL written here."""

    def q(sql: str) -> list[dict]:
        return store.sql_arrow(sql).to_pylist()

    day = "strftime({}, '%Y-%m-%d')"
    want: dict[str, dict] = {}
    want["sessions_by_day"] = {
        (r["d"], "sessions"): r["n"]
        for r in q(
            f"SELECT {day.format('t')} AS d, count(*) AS n FROM"
            " (SELECT min(created_at) AS t FROM messages GROUP BY session_id) GROUP BY d"
        )
    }
    want["messages_by_day"] = {
        (r["d"], "messages"): r["n"]
        for r in q(f"SELECT {day.format('created_at')} AS d, count(*) AS n FROM messages GROUP BY d")
    }
    models = q(
        "SELECT coalesce(model, '') AS m, sum(tokens_in) AS i, sum(tokens_out) AS o, sum(cost_usd) AS c"
        " FROM runs GROUP BY m"
    )
    want["tokens_by_model"] = {(r["m"], s): r[k] for r in models for s, k in (("tokens_in", "i"), ("tokens_out", "o"))}
    want["cost_by_model"] = {(r["m"], "cost_usd"): r["c"] for r in models}
    want["latency"] = {
        (r["w"], s): r[s]
        for r in q(
            "SELECT 'turn' AS w, median(latency_s) AS p50, quantile_cont(latency_s, 0.95) AS p95 FROM turns"
            " UNION ALL SELECT 'tool', median(latency_s), quantile_cont(latency_s, 0.95) FROM tool_calls"
        )
        for s in ("p50", "p95")
        if r["p50"] is not None
    }
    want["tool_errors"] = {
        (r["t"], "error_rate"): r["e"]
        for r in q("SELECT tool_name AS t, avg(is_error::INT) AS e FROM tool_calls GROUP BY t")
    }
    want["tags"] = {
        (r["tag"], r["source"]): r["n"] for r in q("SELECT tag, source, count(*) AS n FROM labels GROUP BY ALL")
    }
    want["ratings"] = {
        (f"{r['rating']:g}", "labels"): r["n"]
        for r in q("SELECT rating, count(*) AS n FROM labels WHERE rating IS NOT NULL GROUP BY rating")
    }
    return want


def _overview_check(page, want) -> dict:
    page.wait_for_selector(".skv-overview[data-ready='1']")
    shown = page.evaluate(_OVERVIEW_READ)
    assert set(shown) == set(want)
    for chart, marks in shown.items():
        assert all(titled for *_, titled in marks), chart  # each mark says its figure to a reader
        got = {(k, s): (None if v == "" else float(v)) for k, s, v, _ in marks}
        if chart == "tags":  # a tag a source gave none of shows a 0 bar
            got = {key: v for key, v in got.items() if v != 0}
        assert set(got) == set(want[chart]), chart
        for key, value in want[chart].items():
            assert got[key] == (None if value is None else pytest.approx(value)), (chart, key)
    assert page.locator(".skv-chart svg > title").count() == len(want)
    totals = {
        e.get_attribute("data-total"): int(e.get_attribute("data-value")) for e in page.query_selector_all(".skv-total")
    }
    return totals


@pytest.mark.parametrize("kind", ["sqlite", "duckdb", "postgresql"])
def test_the_overview_charts_are_what_sql_counts_served_and_bundled(browser, new_store, kind, request, tmp_path):
    from sessionkit.server import create_view_app

    if kind == "postgresql":
        request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
    store = new_store(kind)
    _overview_store(store)
    want = _overview_want(store)
    # what the figures must hold: three days, one run's two tools (one failing), two sources of labels
    assert len(want["messages_by_day"]) == 3 and want["tool_errors"] == {
        ("broken", "error_rate"): 1.0,
        ("listing", "error_rate"): 0.0,
    }
    assert set(want["latency"]) == {("turn", "p50"), ("turn", "p95"), ("tool", "p50"), ("tool", "p95")}
    counts = store.sql_arrow(
        "SELECT (SELECT count(*) FROM sessions) AS sessions, (SELECT count(*) FROM messages) AS messages,"
        " (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM tool_calls) AS tool_calls,"
        " (SELECT count(*) FROM labels) AS labels"
    ).to_pylist()[0]
    with viewer_in_thread(create_view_app(store)) as base:
        w = Watched(browser)
        w.page.goto(base)
        w.page.click(".skv-overview-link")  # the header's link
        assert _overview_check(w.page, want) == counts
        assert w.foreign(base) == [] and not w.errors, (w.foreign(base), w.errors)
        w.close()
    if kind != "sqlite":
        return
    folder = write_bundle(store, tmp_path / "bundle")
    w = Watched(browser, offline=True)
    url = (folder / "index.html").as_uri()
    w.page.goto(url + "#/overview")
    assert _overview_check(w.page, want) == counts
    assert w.foreign("file://") == [] and not w.errors, (w.foreign("file://"), w.errors)
    w.close()


# -- live: the page follows the store ------------------------------------------------------------

# What the other writer does, to ``store``: a message in the open session, and a new session.
_WRITES = """
store.session("talk").append({"id": "q2", "role": "user", "parts": [{"type": "text", "text": "and then?"}]})
store.session("fresh").append({"id": "f1", "role": "user", "parts": [{"type": "text", "text": "a new one"}]})
"""
_WRITER = "import sys\nimport sessionkit as sk\nwith sk.open_store(sys.argv[1]) as store:\n" + "".join(
    f"    {line}\n" for line in _WRITES.strip().splitlines()
)


@pytest.mark.parametrize("kind", ["sqlite", "duckdb", "postgresql"])
def test_a_message_and_a_session_written_elsewhere_appear_without_a_reload(browser, kind, tmp_path, request):
    import subprocess

    from sessionkit.server import create_view_app

    if kind == "postgresql":
        from store.pg_cluster import new_store_url

        request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
        target = new_store_url()
    else:
        target = str(tmp_path / ("live.db" if kind == "sqlite" else "live.duckdb"))
    with sk.open_store(target) as store:
        talk = store.session("talk")
        talk.append(nbhelpers.text("q1", "user", "what next?"))
        talk.append(nbhelpers.text("a1", "assistant", "we will see"))
        with viewer_in_thread(create_view_app(store, poll=0.1)) as base:
            table, chat = Watched(browser), Watched(browser)
            table.page.goto(base)
            assert "fresh" not in _table(table.page)
            chat.page.goto(base + "#/s/talk")
            chat.page.wait_for_selector(".skv-session[data-ready='1'][data-selected='a1']")
            for w in (table, chat):
                w.page.wait_for_selector("#sk-app[data-live='1']")
                w.page.evaluate("() => { window.__loaded = 'once'; }")  # a reload would lose it
            if kind == "duckdb":
                # One process holds a DuckDB file: no other process may open it while the viewer
                # does, so the writer is another store object of this process (the page still
                # learns of it only from the store's change marker).
                with sk.open_store(target) as writer:
                    exec(_WRITES, {"store": writer})
            else:
                subprocess.run([sys.executable, "-c", _WRITER, target], env=_env(), check=True, timeout=120)
            latest = store.session("talk").latest_leaf()["id"]
            chat.page.wait_for_selector(f".skv-chat .sk-msg[data-id='{latest}']")
            chat.page.wait_for_selector(f".skv-session[data-selected='{latest}']")
            table.page.wait_for_selector(".skv-table tbody tr[data-session='fresh']")
            assert sorted(_table(table.page)) == sorted(info.id for info in store.list_sessions())
            for w in (table, chat):
                assert w.page.evaluate("() => window.__loaded") == "once"
                assert w.errors == [] and w.foreign(base) == []
                w.close()
