"""The ``sessionkit`` command, run as a real process against real SQLite files.

Expected values come from the library's API on the same file, never from what the
command printed before, so a test fails when the command and the store disagree.
Independent invocations run in parallel to keep the module fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import pytest
from helpers import msg

import sessionkit as sk

pytestmark = pytest.mark.xdist_group("test_cli")  # the commands of a module-scoped store run once, in one worker

_SCRIPT = Path(sys.executable).with_name("sessionkit")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "sessionkit"]
COMMANDS = ["info", "ls", "show", "search", "demo", "import", "export", "serve", "view", "lab"]


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SESSIONKIT_TOKEN"}
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra)
    return env


def run(*args: str, env: dict | None = None, prefix: list[str] | None = None, cwd=None):
    return subprocess.run(
        [*(prefix or COMMAND), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        env=env or _env(),
        cwd=cwd,
    )


def run_many(argvs: list[tuple[str, ...]], **kw) -> list[subprocess.CompletedProcess]:
    """Several invocations of the console script, each its own process, run side by side."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda a: run(*a, **kw), argvs))


# Runs sessionkit.cli.main once per argv inside one fresh interpreter and reports each
# call's status, stdout and stderr: the same code path as the console script, without
# paying interpreter start-up for every one of dozens of error cases and queries.
_BATCH = r"""
import contextlib, io, json, sys
from sessionkit.cli import main
results = []
for argv in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    results.append([status, out.getvalue(), err.getvalue()])
json.dump(results, sys.stdout)
"""


def run_batch(argvs: list[tuple[str, ...]]) -> list[subprocess.CompletedProcess]:
    proc = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps([list(a) for a in argvs]),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        env=_env(),
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [
        subprocess.CompletedProcess(list(argv), status, out, err)
        for argv, (status, out, err) in zip(argvs, json.loads(proc.stdout))
    ]


def assert_ok(result) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def assert_error(result, *fragments: str) -> str:
    """A failure: non-zero status, nothing on stdout, exactly one line on stderr."""
    assert result.returncode != 0, result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sessionkit: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def text(message: dict) -> str:
    return "\n\n".join(p["text"] for p in message["parts"] if p.get("type") == "text")


def headers(output: str) -> list[str]:
    """Message ids in the order the chat view prints them (``── role · id · ...``)."""
    return [line.split(" · ")[1] for line in output.splitlines() if line.startswith("── ")]


def all_ids(session) -> set[str]:
    """Every message id of a single-root session, walked through the API."""
    root = session.get_history(compacted=False)[0]["id"]
    seen, todo = set(), [root]
    while todo:
        mid = todo.pop()
        seen.add(mid)
        todo += [k["id"] for k in session.branches(mid)]
    assert len(seen) == len(session)
    return seen


# ---------------------------------------------------------------------------
# A store built through the API: branches, a compaction, a tool call, a file, three sessions

CSV = ("t,temp\n" + "".join(f"2025-01-01T{h:02d}:00Z,{10 + h / 10:.1f}\n" for h in range(24)) * 12).encode()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> str:
    import base64

    path = str(tmp_path_factory.mktemp("cli") / "chats.db")
    with sk.open_store(path) as store:
        chat = store.session("chat")
        chat.append(msg("u1", "How should we deploy the billing service?", "user"))
        chat.append(msg("a1", "Deploy it with a blue-green rollout behind the load balancer.", "assistant"))
        chat.append(
            msg("a1b", "Regenerated: ship it as a container on the managed platform.", "assistant"), parent_id="u1"
        )
        for i in range(2, 12):
            chat.append(msg(f"u{i}", f"Question {i} about the rollout plan and its monitoring, step {i}.", "user"))
            chat.append(
                msg(
                    f"a{i}",
                    f"Answer {i}: keep dashboards for latency and errors, "
                    f"then check item {i} of the deployment checklist.",
                    "assistant",
                )
            )
        chat.append(
            {
                "id": "tool1",
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool-get_status",
                        "toolCallId": "call_7",
                        "state": "output-available",
                        "input": {"service": "billing"},
                        "output": {"healthy": True, "version": "2.4.1"},
                    },
                    {"type": "text", "text": "The billing service is healthy on version 2.4.1."},
                ],
            }
        )
        chat.append(
            {
                "id": "file1",
                "role": "user",
                "parts": [
                    {"type": "text", "text": "Here are the latency readings."},
                    {
                        "type": "file",
                        "mediaType": "text/csv",
                        "filename": "latency.csv",
                        "url": "data:text/csv;base64," + base64.b64encode(CSV).decode(),
                    },
                ],
            }
        )
        chat.on_compaction(
            sk.create_compact_function(
                lambda prompt: "Summary: rollout questions 2 to 8 answered.", keep_recent_tokens=150, protect_head=3
            )
        )
        assert chat.compact() is not None

        other = store.session("ops")
        other.append(msg("o1", "Deploying on Fridays: yes or no?", "user"))
        other.append(msg("o2", "No deployments on Fridays unless it is a hotfix.", "assistant"))
        store.session("").append(msg("d1", "A note in the default session.", "user"))
    return path


# Every read-only invocation the tests below check, started together (each its own
# process running the console script) so the module stays fast; tests look results up.
READS = {
    "info --json": ("info", "{store}", "--json"),
    "info": ("info", "{store}"),
    "ls --json": ("ls", "{store}", "--json"),
    "ls": ("ls", "{store}"),
    "ls -m": ("ls", "{store}"),
    "show --json": ("show", "{store}", "chat", "--json"),
    "show": ("show", "{store}", "chat"),
    "show --full --json": ("show", "{store}", "chat", "--full", "--json"),
    "show --full": ("show", "{store}", "chat", "--full"),
    "show --leaf --json": ("show", "{store}", "chat", "--leaf", "a1", "--json"),
    "show --leaf": ("show", "{store}", "chat", "--leaf", "a1"),
    "show --tree": ("show", "{store}", "chat", "--tree"),
    "show --tree --json": ("show", "{store}", "chat", "--tree", "--json"),
    "search --json": ("search", "{store}", "deploying", "--json"),
    "search": ("search", "{store}", "deploying"),
    "search --session": ("search", "{store}", "deploying", "--session", "ops", "--json"),
    "search --limit": ("search", "{store}", "deploying", "--limit", "2", "--json"),
    "search no hits": ("search", "{store}", "zebra xylophone"),
    "search odd": ("search", "{store}", '"unbalanced AND ('),
}


@pytest.fixture(scope="module")
def cli(store_path) -> dict[str, subprocess.CompletedProcess]:
    with sk.open_store(store_path) as store:
        store.search("warm up")  # build the search index first, so stats() cannot change under info
    keys = list(READS)
    prefix = {"ls -m": [sys.executable, "-m", "sessionkit"]}
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = pool.map(
            lambda k: run(*(a.replace("{store}", store_path) for a in READS[k]), prefix=prefix.get(k)), keys
        )
        return dict(zip(keys, results))


# ---------------------------------------------------------------------------
# Help and entry points


def test_every_command_has_help():
    results = [run("--help"), *run_batch([(c, "--help") for c in COMMANDS])]
    for argv, result in zip([None, *COMMANDS], results):
        out = assert_ok(result)
        assert out.startswith("usage: sessionkit" + (f" {argv}" if argv else "")), out[:80]
    top = results[0].stdout
    for command in COMMANDS:
        assert command in top


def test_no_command_prints_help_and_fails():
    result = run()
    assert result.returncode != 0
    assert "usage: sessionkit" in result.stdout


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_python_dash_m_is_the_same_command(cli):
    assert assert_ok(cli["ls"]) == assert_ok(cli["ls -m"])
    assert (
        assert_ok(run("--version", prefix=[sys.executable, "-m", "sessionkit"])).strip()
        == f"sessionkit {sk.__version__}"
    )


# ---------------------------------------------------------------------------
# info and ls


@pytest.mark.slow
def test_info_reports_engine_schema_and_stats(store_path, cli):
    as_json, as_text = cli["info --json"], cli["info"]
    report = json.loads(assert_ok(as_json))
    with sk.open_store(store_path) as store:
        stats = store.stats()
        engine = store.settings.engine
    assert report["engine"] == engine == "sqlite"
    assert report["store"] == str(Path(store_path).resolve())
    assert isinstance(report["schema_version"], int) and report["schema_version"] >= 1
    for key, value in stats.items():
        if key != "bytes":  # the WAL file grows and shrinks as connections come and go
            assert report[key] == value, key
    assert report["bytes"] > 0

    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in assert_ok(as_text).splitlines())
    assert rows["engine"] == engine
    assert rows["schema"] == str(report["schema_version"])
    for key in ("sessions", "messages", "compactions"):
        assert rows[key] == f"{stats[key]:,}"
    assert rows["blobs"].startswith(f"{stats['blobs']:,} (")


def test_ls_lists_sessions_newest_activity_first(store_path, cli):
    as_json, as_text = cli["ls --json"], cli["ls"]
    with sk.open_store(store_path) as store:
        sessions = store.list_sessions()
    assert json.loads(assert_ok(as_json)) == [asdict(s) for s in sessions]

    lines = assert_ok(as_text).splitlines()
    assert lines[0].split() == ["SESSION", "MESSAGES", "CREATED", "(UTC)", "UPDATED", "(UTC)"]
    assert len(lines) == len(sessions) + 1
    for line, info in zip(lines[1:], sessions):
        cells = line.split()
        assert cells[0] == (info.id or '""')
        assert cells[1] == f"{info.message_count:,}"
        assert " ".join(cells[2:4]) == info.created_at[:19].replace("T", " ")
        assert " ".join(cells[4:6]) == info.updated_at[:19].replace("T", " ")


# ---------------------------------------------------------------------------
# show


def test_show_prints_the_path_the_model_sees(store_path, cli):
    as_json, as_text = cli["show --json"], cli["show"]
    with sk.open_store(store_path) as store:
        chat = store.session("chat")
        seen = chat.get_history()
        (comp,) = chat.compactions()
        raw = chat.get_history(compacted=False)
    assert json.loads(assert_ok(as_json)) == seen

    out = assert_ok(as_text)
    shown = [m for m in seen if not m["id"].startswith("compaction:")]
    assert headers(out) == [m["id"] for m in shown]
    for m in shown:
        assert text(m) in out
    # the summary stands where the range was, with its size and tokens; the range itself is gone
    summary_line = next(line for line in out.splitlines() if line.startswith("══ compaction "))
    ids = [m["id"] for m in raw]
    hidden = ids[ids.index(comp.from_id) : ids.index(comp.to_id) + 1]
    assert f"summary of {len(hidden)} messages ({comp.from_id} … {comp.to_id})" in summary_line
    assert f"{comp.tokens_before:,} → {comp.tokens_after:,} tokens" in summary_line
    assert comp.summary in out
    assert not set(hidden) & set(headers(out))
    assert out.index(comp.summary) < out.index(f"── {shown[-1]['role']} · {shown[-1]['id']}")
    assert f"the model sees {len(seen)}" in out and f"{len(raw)} messages" in out


def test_show_full_prints_every_message_and_marks_the_compacted_range(store_path, cli):
    as_json, as_text = cli["show --full --json"], cli["show --full"]
    with sk.open_store(store_path) as store:
        chat = store.session("chat")
        raw = chat.get_history(compacted=False)
        (comp,) = chat.compactions()
    assert json.loads(assert_ok(as_json)) == raw

    out = assert_ok(as_text)
    ids = [m["id"] for m in raw]
    assert headers(out) == ids
    first, last = ids.index(comp.from_id), ids.index(comp.to_id)
    begin = out.index("══ compacted range begins")
    end = out.index("══ compacted range ends")
    assert f"instead of the next {last - first + 1} messages ({comp.from_id} … {comp.to_id})" in out
    # begins right before from_id's header, ends right after to_id's message and before the next one
    assert out.index(f" · {ids[first - 1]} · ") < begin < out.index(f" · {comp.from_id} · ")
    assert out.index(f" · {comp.to_id} · ") < end < out.index(f" · {ids[last + 1]} · ")


def test_show_leaf_follows_another_branch_and_names_the_siblings(store_path, cli):
    as_json, as_text = cli["show --leaf --json"], cli["show --leaf"]
    with sk.open_store(store_path) as store:
        chat = store.session("chat")
        path = chat.get_history(leaf_id="a1")
        siblings = [m["id"] for m in chat.branches("u1")]
    assert json.loads(assert_ok(as_json)) == path
    out = assert_ok(as_text)
    assert headers(out) == [m["id"] for m in path]
    a1_header = next(line for line in out.splitlines() if line.startswith("── assistant · a1 ·"))
    assert f"branch {siblings.index('a1') + 1} of {len(siblings)}" in a1_header
    assert "a1b" in a1_header


def test_show_renders_tool_calls_and_files(store_path, cli):
    out = assert_ok(cli["show --full"])
    with sk.open_store(store_path) as store:
        chat = store.session("chat")
        tool = chat.get("tool1")["parts"][0]
        file_part = chat.get("file1")["parts"][1]
    assert "tool get_status" in out and tool["toolCallId"] in out and tool["state"] in out
    shown = sk.parts.input_text(tool["input"]).split("\n")  # each argument by name
    assert ("    input:  " + shown[0] + "\n" if len(shown) == 1 else "    input:\n      " + shown[0] + "\n") in out
    indented = "\n".join("      " + line for line in json.dumps(tool["output"], indent=2).split("\n"))
    assert "    output:\n" + indented + "\n" in out  # a JSON value, indented
    assert f"file {file_part['mediaType']} {file_part['filename']}" in out
    assert f"{len(CSV) / 1024:.1f} KiB inline" in out
    assert file_part["url"][30:90] not in out  # the payload itself is never dumped in the chat view


def test_show_tree_marks_branches_the_path_and_compaction_ranges(store_path, cli):
    as_text, as_json = cli["show --tree"], cli["show --tree --json"]
    with sk.open_store(store_path) as store:
        chat = store.session("chat")
        ids = all_ids(chat)
        path = [m["id"] for m in chat.get_history(compacted=False)]
        children = {mid: [k["id"] for k in chat.branches(mid)] for mid in ids}
        messages = {mid: chat.get(mid) for mid in ids}
        (comp,) = chat.compactions()
    covered = path[path.index(comp.from_id) : path.index(comp.to_id) + 1]

    lines = assert_ok(as_text).splitlines()
    node_lines = {}
    for line in lines:
        match = re.match(r"^([* ]) [│├└─ ]*(\S+)  (user|assistant): ", line)
        if match:
            assert match.group(2) not in node_lines
            node_lines[match.group(2)] = line
    assert set(node_lines) == ids
    assert {mid for mid, line in node_lines.items() if line.startswith("* ")} == set(path)
    for mid, kids in children.items():
        assert (f"<{len(kids)} branches>" in node_lines[mid]) == (len(kids) > 1)
    for mid in ids:
        assert ("[c1]" in node_lines[mid]) == (mid in covered)
    assert any(line.strip().startswith("c1  " + comp.id[:8]) and "applied on the * path" in line for line in lines)

    tree = json.loads(assert_ok(as_json))
    assert tree["path"] == path and tree["leaf"] == path[-1]
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert set(nodes) == ids
    for mid, node in nodes.items():
        assert node["children"] == children[mid]
        assert node["message"] == messages[mid]
        assert node["on_path"] == (mid in path)
    assert [c["id"] for c in tree["compactions"]] == [comp.id]
    assert tree["compactions"][0]["messages"] == len(covered) and tree["compactions"][0]["applied"]


def test_show_tree_counts_messages_under_other_roots(tmp_path):
    path = str(tmp_path / "roots.db")
    with sk.open_store(path) as store:
        s = store.session("")
        s.append(msg("r1", "first root", "user"))
        s.append(msg("r1a", "first reply", "assistant"))
        s.append(msg("r2", "second root", "user"), parent_id=None)
        latest_path = [m["id"] for m in s.get_history()]
        others = len(s) - len(latest_path)
    latest, older = run_batch([("show", path, "", "--tree"), ("show", path, "", "--tree", "--leaf", "r1a")])
    assert f"({others} more messages sit under other roots" in assert_ok(latest)
    assert re.search(r"^\* r2  user: second root$", latest.stdout, re.M)
    assert re.search(r"^\* r1a  assistant: first reply$", assert_ok(older), re.M)


def test_show_prints_each_messages_labels_and_its_branchs(tmp_path):
    path = str(tmp_path / "labelled.db")
    with sk.open_store(path) as store:
        s = store.session("s")
        s.append(msg("u1", "hello there", "user"))
        s.append(msg("a1", "hi", "assistant"))
        s.append(msg("u2", "again", "user"))
        s.add_label("a1", "good", rating=0.75, note="kind\nand \x1b[31mshort", author="ana")
        s.add_label("a1", "regenerated", target="branch", rating=-1.0)
        s.add_label("u1", "polite", source="llm", scorer="judge@2", rationale="says hello")
    chat, last, tree, tree_json = run_batch(
        [
            ("show", path, "s"),
            ("show", path, "s", "--last", "1"),
            ("show", path, "s", "--tree"),
            ("show", path, "s", "--tree", "--json"),
        ]
    )
    out = assert_ok(chat)
    under = {mid: block for mid, block in re.findall(r"^── \w+ · (\S+) · [^\n]*\n(.*?)\n\n", out, re.M | re.S)}
    assert under["u1"] == "hello there\n  label polite  (llm: judge@2)\n    rationale: says hello"
    assert under["a1"] == (
        "hi\n  label good  (rating 0.75 · by ana)\n    note: kind\n      and short\n"
        "  label regenerated  (on the branch ending here · rating -1)"
    )
    assert under["u2"] == "again"
    assert "label" not in assert_ok(last)  # the newest entry only: u2, unlabelled
    assert re.search(r"^\* a1  assistant: hi  labels: good, regenerated \(branch\)$", assert_ok(tree), re.M)
    nodes = {n["id"]: n for n in json.loads(assert_ok(tree_json))["nodes"]}
    assert [x["tag"] for x in nodes["a1"]["labels"]] == ["good", "regenerated"]
    assert nodes["u1"]["labels"][0]["scorer"] == "judge@2" and nodes["u2"]["labels"] == []


# ---------------------------------------------------------------------------
# search


def test_search_prints_hits_and_snippets_best_first(store_path, cli):
    query = "deploying"
    as_json, as_text = cli["search --json"], cli["search"]
    one_session, limited = cli["search --session"], cli["search --limit"]
    with sk.open_store(store_path) as store:
        hits = store.search(query)
        ops_hits = store.session("ops").search(query)
        top2 = store.search(query, limit=2)
    assert len(hits) >= 3 and {h.session_id for h in hits} == {"chat", "ops"}
    assert json.loads(assert_ok(as_json)) == [asdict(h) for h in hits]
    assert json.loads(assert_ok(one_session)) == [asdict(h) for h in ops_hits]
    assert [h["id"] for h in json.loads(assert_ok(limited))] == [h.id for h in top2]

    out = assert_ok(as_text)
    assert out.startswith(f"{len(hits)} hits for 'deploying'")
    positions = [out.index(f"{h.session_id} / {h.id} · {h.role}") for h in hits]
    assert positions == sorted(positions)
    for h in hits:
        assert " ".join(h.snippet.split()) in out
        assert "[" in h.snippet


ODD_QUERIES = [
    '"',
    "AND OR NOT",
    "(((",
    "*",
    "",
    "NEAR(a b)",
    '"unclosed phrase',
    "col:val",
    "-",
    "🙂",
    "'; DROP TABLE x; --",
    '"deploy',
    "deploy*",
    "^deploy",
    "rollout AND",
]


def test_search_accepts_any_query_string(store_path, cli):
    results = run_batch([("search", store_path, q, "--json") for q in ODD_QUERIES])
    with sk.open_store(store_path) as store:
        expected = [store.search(q) for q in ODD_QUERIES]
    for query, result, hits in zip(ODD_QUERIES, results, expected):
        assert json.loads(assert_ok(result)) == [asdict(h) for h in hits], query
    assert assert_ok(cli["search odd"]).startswith("no matches for ")


def test_search_without_hits_says_so(cli):
    out = assert_ok(cli["search no hits"])
    assert out.strip() == "no matches for 'zebra xylophone'"


# ---------------------------------------------------------------------------
# errors


def test_errors_are_one_line_and_exit_non_zero(store_path, tmp_path):
    missing = tmp_path / "missing.db"
    foreign = tmp_path / "other.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    cases = [
        (("info", str(missing)), ("no store at", "missing.db")),
        (("ls", str(missing)), ("no store at",)),
        (("show", str(missing), "chat"), ("no store at",)),
        (("search", str(missing), "x"), ("no store at",)),
        (("show", store_path, "nope"), ("no session 'nope'", "chat", "ops")),
        (("search", store_path, "x", "--session", "nope"), ("no session 'nope'",)),
        (("show", store_path, "chat", "--leaf", "zz"), ("'zz'",)),
        (("info", str(foreign)), ("not a sessionkit store",)),
        (("info", str(junk)), ("not a SQLite database",)),
        (("info", str(tmp_path)), ("is a folder",)),
        (("info", str(tmp_path / "notes.txt")), ("no store at",)),
        (("info", ":memory:"), ("in-memory",)),
        (("search", store_path, "x", "--limit", "0"), ("--limit", "'0' must be 1 or more")),
        (("search", store_path, "x", "--limit", "ten"), ("--limit", "'ten' is not a whole number")),
        (("lab", store_path, "--port", "70000"), ("--port", "'70000' is not a port number (0-65535)")),
        (("serve", "--store", store_path, "--timeout-request", "-1"), ("must be a positive number of seconds",)),
        (("serve", "--store", store_path, "--timeout-request", "soon"), ("'soon' is not a number of seconds",)),
        (("frobnicate",), ("invalid choice",)),
        (("show", store_path), ("SESSION",)),
        (
            ("import", str(tmp_path / "new.db"), str(tmp_path / "nothing.json"), "--format", "openai"),
            ("nothing.json' does not exist",),
        ),
        (("import", str(tmp_path / "new.db"), str(junk), "--format", "hh", "--session", "s"), ("--session",)),
        (("import", str(tmp_path / "new.db"), str(junk)), ("--format",)),
        (("export", str(missing), str(tmp_path / "out.jsonl")), ("no store at",)),
        (
            ("serve", "--store", str(tmp_path / "s.db"), "--agent", "app:agent", "--token", "x" * 20),
            ("unrecognized arguments",),
        ),
        (("serve", "--store", str(tmp_path / "s.db"), "--agent", "no-colon"), ("module:attribute",)),
        (("serve", "--store", str(tmp_path / "s.db"), "--agent", "app:agent"), ("SESSIONKIT_TOKEN",)),
        (("demo", "--store", store_path), ("already exists",)),
        (("import", str(foreign), str(junk), "--format", "hh"), ("not a sessionkit store",)),
        (("show", store_path, "chat", "--tree", "--last", "2"), ("--last", "--tree")),
        (("show", store_path, "chat", "--last", "0"), ("--last",)),
    ]
    results = run_batch([argv for argv, _ in cases])
    for (_, fragments), result in zip(cases, results):
        assert_error(result, *fragments)
    # the same through the console script: status, stdout and stderr of a real process
    for (_, fragments), result in zip(cases[:8:3], run_many([argv for argv, _ in cases[:8:3]])):
        assert_error(result, *fragments)
    assert_error(
        run("serve", "--store", str(tmp_path / "s.db"), "--agent", "app:agent", env=_env(SESSIONKIT_TOKEN="short")),
        "16 characters",
    )
    # read commands and failed imports never create a store; other databases are left alone
    assert not missing.exists() and not (tmp_path / "new.db").exists() and not (tmp_path / "s.db").exists()
    db = sqlite3.connect(foreign)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["notes"]
    db.close()


_WITHOUT = "import sys; sys.modules[{mod!r}] = None; from sessionkit.cli import main; sys.exit(main(sys.argv[1:]))"


def test_import_export_serve_name_a_missing_module(store_path, tmp_path):
    data = tmp_path / "chat.json"
    data.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    no_io = [sys.executable, "-c", _WITHOUT.format(mod="sessionkit.io")]
    no_server = [sys.executable, "-c", _WITHOUT.format(mod="sessionkit.server")]
    assert_error(run("import", str(tmp_path / "a.db"), str(data), "--format", "openai", prefix=no_io), "sessionkit.io")
    assert_error(run("export", store_path, str(tmp_path / "a.jsonl"), prefix=no_io), "sessionkit.io")
    assert_error(
        run(
            "serve",
            "--store",
            str(tmp_path / "a.db"),
            "--agent",
            "app:agent",
            prefix=no_server,
            env=_env(SESSIONKIT_TOKEN="t" * 24),
        ),
        "sessionkit.server",
    )
    assert not (tmp_path / "a.db").exists()


# sessionkit.server replaced by a recorder: checks what `serve` hands it.
_FAKE_SERVE = r"""
import json, sys, types
calls = {}
server = types.ModuleType("sessionkit.server")
def serve(agent, store, **options):
    calls["serve"] = {"agent": agent, "store": store, **options}
server.serve = serve
sys.modules["sessionkit.server"] = server
from sessionkit.cli import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, **calls}))
"""


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_serve_hands_agent_store_token_and_timeouts_to_the_server(tmp_path):
    (tmp_path / "myagents.py").write_text(
        "import sessionkit as sk\nsupport = sk.Agent('support', 'Be brief.', sk.testing.ScriptedModel([]))\n"
    )
    (tmp_path / "broken.py").write_text("raise RuntimeError('no model configured')\n")
    token = "s3cret-token-0123456789"
    store = tmp_path / "served.db"
    fake = [sys.executable, "-c", _FAKE_SERVE]
    env = _env(SESSIONKIT_TOKEN=token)
    result = run(
        "serve",
        "--store",
        str(store),
        "--agent",
        "myagents:support",
        "--host",
        "0.0.0.0",
        "--port",
        "8123",
        "--allow-host",
        "agents.example.org",
        "--allow-host",
        ".corp.example",
        prefix=fake,
        env=env,
        cwd=tmp_path,
    )
    report = json.loads(assert_ok(result))
    assert report == {
        "status": 0,
        "serve": {
            "agent": "myagents:support",
            "store": str(store),
            "token": token,
            "host": "0.0.0.0",
            "port": 8123,
            "workers": 1,
            "timeout_keep_alive": 5.0,
            "timeout_request": 30.0,
            "timeout_graceful_shutdown": 10.0,
            "limit_concurrency": 1000,
            "allowed_hosts": ["agents.example.org", ".corp.example"],
        },
    }
    assert token not in result.stderr
    timed = run(
        "serve",
        "--store",
        str(store),
        "--agent",
        "myagents:support",
        "--timeout-keep-alive",
        "2",
        "--timeout-request",
        "7.5",
        "--timeout-graceful-shutdown",
        "3",
        "--limit-concurrency",
        "0",
        prefix=fake,
        env=env,
        cwd=tmp_path,
    )
    options = json.loads(assert_ok(timed))["serve"]
    assert (
        options["timeout_keep_alive"],
        options["timeout_request"],
        options["timeout_graceful_shutdown"],
        options["limit_concurrency"],
    ) == (2.0, 7.5, 3.0, None)
    for bad in (["--timeout-request", "0"], ["--timeout-keep-alive", "soon"], ["--limit-concurrency", "-1"]):
        refused = run(
            "serve", "--store", str(store), "--agent", "myagents:support", *bad, prefix=fake, env=env, cwd=tmp_path
        )
        assert json.loads(refused.stdout)["status"] != 0 and "serve" not in json.loads(refused.stdout)
        assert len(refused.stderr.splitlines()) == 1 and bad[0] in refused.stderr
    missing_attr = run("serve", "--store", str(store), "--agent", "myagents:nobody", prefix=fake, env=env, cwd=tmp_path)
    assert missing_attr.stderr == "sessionkit: error: --agent: module 'myagents' has no attribute 'nobody'\n"
    assert json.loads(missing_attr.stdout) == {"status": 1}
    failing = run("serve", "--store", str(store), "--agent", "broken:agent", prefix=fake, env=env, cwd=tmp_path)
    assert failing.stderr.splitlines() == [
        "sessionkit: error: --agent: importing 'broken' failed: RuntimeError: no model configured"
    ]
    assert json.loads(failing.stdout) == {"status": 1}
    assert_error(run("serve", "--store", str(store), "--agent", "a:b", "--port", "70000"), "--port")


def test_serve_explains_an_agent_name_that_is_not_an_agent(tmp_path):
    """Naming the factory function, a class or any other object is a user mistake, said plainly."""
    (tmp_path / "myagents.py").write_text(
        "import sessionkit as sk\n"
        "def make_agent():\n    return sk.Agent('support', 'Be brief.', sk.testing.ScriptedModel([]))\n"
        "class Helper:\n    pass\n"
        "name = 'the support agent'\n"
    )
    env = _env(SESSIONKIT_TOKEN="s3cret-token-0123456789")
    fake = [sys.executable, "-c", _FAKE_SERVE]
    cases = [
        ("myagents:make_agent", ("names a function, not an agent", "--agent myagents:support")),
        ("myagents:Helper", ("names a class, not an agent",)),
        ("myagents:name", ("is a str, not a sessionkit Agent",)),
    ]
    for spec, fragments in cases:
        result = run("serve", "--store", str(tmp_path / "s.db"), "--agent", spec, prefix=fake, env=env, cwd=tmp_path)
        line = result.stderr.strip()
        assert line.startswith("sessionkit: error: --agent " + spec), line
        assert "unexpected" not in line and "TypeError" not in line and "Traceback" not in result.stderr
        for fragment in fragments:
            assert fragment in line, (fragment, line)
        assert json.loads(result.stdout) == {"status": 1}  # create_app was never called


def _io_has(*names: str) -> bool:
    if importlib.util.find_spec("sessionkit.io") is None:
        return False
    io = importlib.import_module("sessionkit.io")
    return all(callable(getattr(io, n, None)) for n in names)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.skipif(not _io_has("export_jsonl", "import_jsonl"), reason="sessionkit.io has no JSONL functions")
def test_export_then_import_jsonl_keeps_every_tree(store_path, tmp_path):
    dump = tmp_path / "dump.jsonl"
    copy = tmp_path / "copy.db"
    out = assert_ok(run("export", store_path, str(dump)))
    with sk.open_store(store_path) as store:
        stats = store.stats()
        sessions = store.list_sessions()
        expected = {s.id: store.session(s.id).get_history(compacted=False) for s in sessions}
        chat_ids = all_ids(store.session("chat"))
    assert f"{stats['sessions']:,} sessions ({stats['messages']:,} messages)" in out
    first, again = (
        assert_ok(run("import", str(copy), str(dump), "--format", "jsonl")),
        assert_ok(run("import", str(copy), str(dump), "--format", "jsonl")),
    )
    assert f"{stats['messages']:,} new messages, {stats['sessions']:,} new sessions" in first
    assert "0 new messages, 0 new sessions" in again
    with sk.open_store(str(copy)) as restored:
        assert [(s.id, s.message_count) for s in restored.list_sessions()] == [
            (s.id, s.message_count) for s in sessions
        ]
        for sid, history in expected.items():
            assert restored.session(sid).get_history(compacted=False) == history
        assert all_ids(restored.session("chat")) == chat_ids

    one = tmp_path / "ops.jsonl"
    out = assert_ok(run("export", store_path, str(one), "--session", "ops"))
    assert "session ops (2 messages)" in out
    assert_error(run("export", store_path, str(one), "--session", "nope"), "no session 'nope'")


@pytest.mark.skipif(not _io_has("import_openai"), reason="sessionkit.io has no import_openai")
def test_import_openai_chat_into_a_named_session(tmp_path):
    chat = tmp_path / "support-chat.json"
    chat.write_text(
        json.dumps(
            [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Status of order 42?"},
                {"role": "assistant", "content": "Shipped yesterday."},
            ]
        )
    )
    target = tmp_path / "imported.db"
    out_named = assert_ok(run("import", str(target), str(chat), "--format", "openai", "--session", "s1"))
    out_default = assert_ok(run("import", str(target), str(chat), "--format", "openai"))
    with sk.open_store(str(target)) as store:
        named, default = store.session("s1"), store.session("support-chat")
        assert len(named) == len(default) > 0
        assert [m["role"] for m in named.get_history()] == ["system", "user", "assistant"]
        count = len(named)
    assert f"{count} new messages, 1 new session " in out_named
    assert "session support-chat" in out_default


@pytest.mark.skipif(not _io_has("import_hh", "import_jsonl"), reason="sessionkit.io has no importers")
def test_import_of_a_broken_file_says_where_and_how_far_it_got(tmp_path):
    import gzip

    pairs = [
        json.dumps({"chosen": f"\n\nHuman: q{i}\n\nAssistant: yes", "rejected": f"\n\nHuman: q{i}\n\nAssistant: no"})
        for i in range(3)
    ]
    broken = tmp_path / "pairs.jsonl"
    broken.write_text(pairs[0] + "\n" + pairs[1] + "\n" + pairs[2][:-9] + "\n", encoding="utf-8")
    cut = tmp_path / "pairs.jsonl.gz"
    cut.write_bytes(gzip.compress(("\n".join(pairs * 300) + "\n").encode("utf-8"))[:-40])
    nan = tmp_path / "export.jsonl"
    nan.write_text(
        '{"type": "message", "session_id": "s", "parent_id": null, "message": '
        '{"id": "m", "role": "user", "parts": [], "metadata": {"score": NaN}}}\n',
        encoding="utf-8",
    )
    target, other = tmp_path / "store.db", tmp_path / "other.db"
    first, second, third = run_batch(
        [
            ("import", str(target), str(broken), "--format", "hh"),
            ("import", str(other), str(cut), "--format", "hh"),
            ("import", str(other), str(nan), "--format", "jsonl"),
        ]
    )
    assert_error(
        first,
        f"{broken}, line 3: not valid JSON",
        "the 2 pairs before it are stored, through line 2",
        "importing the corrected file again adds the rest",
    )
    assert_error(second, f"{cut}, line ", "the gzip data ends early (the file is cut short)")
    assert_error(third, f"{nan}, line 1: NaN is not a JSON value", "nothing was stored")
    with sk.open_store(str(target)) as store:
        assert store.stats()["sessions"] == 2
    broken.write_text("\n".join(pairs) + "\n", encoding="utf-8")
    assert "3 new messages, 1 new session " in assert_ok(run("import", str(target), str(broken), "--format", "hh"))


# ---------------------------------------------------------------------------
# demo


def _has_branch(session) -> bool:
    return any(len(session.branches(mid)) > 1 for mid in all_ids(session))


def test_demo_builds_a_store_with_branches_compaction_blobs_and_search(tmp_path):
    path = tmp_path / "demo.db"
    out = assert_ok(run("demo", "--store", str(path)))
    with sk.open_store(str(path)) as store:
        stats = store.stats()
        sessions = store.list_sessions()
        assert len(sessions) >= 3
        assert any(_has_branch(store.session(s.id)) for s in sessions)
        compacted = [s.id for s in sessions if store.session(s.id).compactions()]
        assert compacted
        session = store.session(compacted[0])
        assert len(session.get_history()) < len(session.get_history(compacted=False))
        assert stats["compactions"] >= 1 and stats["blobs"] >= 1 and stats["blob_bytes"] >= 4096
        tools = [
            p
            for s in sessions
            for m in store.session(s.id).get_history(compacted=False)
            for p in m["parts"]
            if p["type"].startswith("tool-")
        ]
        assert tools and all("input" in p and "output" in p for p in tools)
        hits = store.search("deploying", limit=5)
        assert hits
        listing = [s.id for s in sessions]

    assert str(path) in out.splitlines()[1]
    for hit in hits:
        assert f"{hit.session_id} / {hit.id} · {hit.role}" in out
        assert " ".join(hit.snippet.split()) in out
    for sid in listing:
        assert sid in out
    assert "══ compaction " in out and "<2 branches>" in out and "tool get_forecast" in out
    for key in ("sessions", "messages", "compactions"):
        assert re.search(rf"^   {key} +{stats[key]:,}$", out, re.M), key
    assert "Explore further:" in out and f"sessionkit show {path}" in out


def test_demo_without_a_path_writes_to_a_new_temporary_folder():
    out = assert_ok(run("demo"))
    path = Path(out.splitlines()[1].strip())
    try:
        assert path.is_file() and path.name == "demo.db"
        with sk.open_store(str(path)) as store:
            assert store.stats()["messages"] > 0
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def test_build_demo_store_is_idempotent(tmp_path):
    from sessionkit._demo import build_demo_store

    with build_demo_store(tmp_path / "twice.db") as store:
        before = store.stats()
        build_demo_store(store)
        after = store.stats()
    assert {k: after[k] for k in ("sessions", "messages", "compactions", "blobs")} == {
        k: before[k] for k in ("sessions", "messages", "compactions", "blobs")
    }


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_show_last_prints_only_the_newest_entries(tmp_path):
    path = str(tmp_path / "long.db")
    with sk.open_store(path) as store:
        s = store.session("long")
        s.import_many(
            [
                (
                    msg(f"m{i}", f"message number {i}", "user" if i % 2 == 0 else "assistant"),
                    f"m{i - 1}" if i else None,
                    None,
                )
                for i in range(2_000)
            ]
        )
        path_ids = [m["id"] for m in s.get_history()]
        tokens = s.context_tokens()
    out = assert_ok(run("show", path, "long", "--last", "5"))
    assert headers(out) == path_ids[-5:]
    assert "message number 1994" not in out and "message number 1995" in out
    assert f"the path holds {len(path_ids):,} messages" in out
    assert f"5 entries shown of a path of {len(path_ids):,} messages; the model sees ~{tokens:,} tokens" in out
    assert len(out.splitlines()) < 30  # not one line per message of the whole path
    as_json = json.loads(assert_ok(run("show", path, "long", "--last", "3", "--json")))
    assert [m["id"] for m in as_json] == path_ids[-3:]
    # more than the path holds: the whole path, and no note about earlier entries
    whole = assert_ok(run("show", path, "long", "--last", "5000"))
    assert headers(whole) == path_ids and "earlier entries not shown" not in whole


def test_show_last_on_a_compacted_branch_names_the_branch(store_path):
    with sk.open_store(store_path) as store:
        chat = store.session("chat")
        seen = chat.get_history()
        raw = chat.get_history(compacted=False)
    out = assert_ok(run("show", store_path, "chat", "--last", "2"))
    assert headers(out) == [m["id"] for m in seen[-2:]]
    full = assert_ok(run("show", store_path, "chat", "--last", "3", "--full"))
    assert headers(full) == [m["id"] for m in raw[-3:]]


def test_info_reports_the_write_ahead_log_apart_from_the_size(tmp_path):
    path = tmp_path / "wal.db"
    store = sk.open_store(str(path))
    s = store.session("s")
    for i in range(300):
        s.append(msg(f"m{i}", "x" * 2_000, "user"))
    wal = path.with_name("wal.db-wal")
    assert wal.exists() and wal.stat().st_size > 0  # the store is open: its WAL holds recent writes
    report = json.loads(assert_ok(run("info", str(path), "--json")))
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in assert_ok(run("info", str(path))).splitlines())
    on_disk = path.stat().st_size
    store.close()
    assert report["file_bytes"] == on_disk  # the database file alone
    assert report["wal_bytes"] > 0
    assert rows["size"] == _size_text(report["file_bytes"])
    assert rows["wal"].startswith(_size_text(report["wal_bytes"]) + " write-ahead log")


def _size_text(n: int) -> str:
    from sessionkit.cli._common import _size

    return _size(n)


def test_import_refuses_another_programs_database(tmp_path):
    foreign = tmp_path / "app.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    data = tmp_path / "chat.json"
    data.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    line = assert_error(run("import", str(foreign), str(data), "--format", "openai"), "not a sessionkit store")
    assert "app.db" in line
    db = sqlite3.connect(foreign)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["notes"]
    db.close()
    # an existing store, and a new file, still import
    fresh = tmp_path / "new.db"
    assert_ok(run("import", str(fresh), str(data), "--format", "openai"))
    assert_ok(run("import", str(fresh), str(data), "--format", "openai", "--session", "again"))
    with sk.open_store(str(fresh)) as store:
        assert sorted(i.id for i in store.list_sessions()) == ["again", "chat"]


def test_import_tells_a_sessionkit_export_from_its_header(store_path, tmp_path):
    dump = tmp_path / "dump.jsonl"
    assert_ok(run("export", store_path, str(dump), "--session", "ops"))
    assert dump.read_text(encoding="utf-8").startswith('{"format":"sessionkit"')
    out = assert_ok(run("import", str(tmp_path / "copy.db"), str(dump)))
    assert "(jsonl)" in out and "2 new messages, 1 new session" in out


def test_an_unknown_file_names_the_format_option_once(tmp_path):
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"what": "no importer reads this"}\n', encoding="utf-8")
    line = assert_error(run("import", str(tmp_path / "s.db"), str(odd)), "cannot tell the format", "--format")
    assert line.count("give") == 0 and line.count("--format") == 1, line


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_session_prefix_keeps_two_sources_apart(tmp_path):
    trees = str(Path(__file__).parent / "data" / "en_100_tree.jsonl")
    target = str(tmp_path / "both.db")
    assert_ok(run("import", target, trees, "--format", "oasst", "--session-prefix", "a/"))
    assert_ok(run("import", target, trees, "--format", "oasst", "--session-prefix", "b/"))
    with sk.open_store(target) as store:
        ids = [s.id for s in store.list_sessions()]
        counts = {s.id: s.message_count for s in store.list_sessions()}
    a = sorted(i for i in ids if i.startswith("a/"))
    b = sorted(i for i in ids if i.startswith("b/"))
    assert a and len(a) == len(b) == len(ids) // 2  # every session twice, apart, none merged
    assert [counts[i] for i in a] == [counts["b/" + i[2:]] for i in a]
    for fmt, why in (("jsonl", "keeps the session ids"), ("openai", "--session")):
        assert_error(
            run("import", target, trees, "--format", fmt, "--session-prefix", "c/"),
            "--session-prefix does not apply",
            why,
        )
