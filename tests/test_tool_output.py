"""Tool output reads as text everywhere: real line breaks, indented JSON, folded, no ANSI codes.

The SWE-agent trajectory of tests/data/swe_agent is imported with sessionkit's importer; its
``find_file`` output holds a ``\\r\\n`` that must show as a line break in ``sessionkit show``
and in the static snapshots (the web views are checked in tests/browser/test_tool_output_views.py).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

import sessionkit as sk
from sessionkit.cli import main
from sessionkit.parts import FOLD_LINES, fold_lines, input_text, output_text
from sessionkit.widgets._source import message_view
from sessionkit.widgets._static import transcript_html

DATA = Path(__file__).resolve().parent / "data" / "swe_agent" / "function_calling_simple.traj"
LONG_LINES = FOLD_LINES + 12


def swe_output(name: str) -> str:
    """The raw output of the trajectory's first call of tool ``name``, read from the file itself."""
    traj = json.loads(DATA.read_text())
    calls = {}
    for entry in traj["history"]:
        for call in entry.get("tool_calls") or ():
            calls[call["id"]] = call["function"]["name"]
        if entry.get("role") == "tool" and calls.get((entry.get("tool_call_ids") or [None])[0]) == name:
            content = entry["content"]
            return content if isinstance(content, str) else content[0]["text"]
    raise AssertionError(f"no {name} output in {DATA}")


def long_session(store) -> tuple[sk.Session, list[str]]:
    """A tool whose output is LONG_LINES coloured lines, and one with a JSON value."""
    lines = [f"\x1b[32mline {k}\x1b[0m" for k in range(LONG_LINES)]
    s = store.session("long")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "run it"}]})
    s.append(
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-bash",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"cmd": "seq"},
                    "output": "\r\n".join(lines),
                },
                {
                    "type": "tool-stats",
                    "toolCallId": "c2",
                    "state": "output-available",
                    "input": {},
                    "output": {"rows": 3, "names": ["a", "b"]},
                },
            ],
        }
    )
    return s, [f"line {k}" for k in range(LONG_LINES)]


def show(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", *argv]) == 0
    return out.getvalue()


def test_output_text_strings_json_and_ansi():
    assert output_text("a\r\nb\rc\nd") == "a\nb\nc\nd"
    assert output_text("\x1b[1;31mred\x1b[0m \x1b]0;title\x07plain") == "red plain"
    value = {"k": [1, "é"]}
    assert output_text(value) == json.dumps(value, ensure_ascii=False, indent=2)
    assert output_text('say "hi"') == 'say "hi"'  # a string is never JSON-quoted
    assert fold_lines("x", 3) == ("x", 0)
    text = "\n".join(map(str, range(10)))
    assert fold_lines(text, 4) == ("0\n1\n2\n3", 6)
    assert fold_lines(text, 9) == (text, 0)  # hiding one line saves nothing


@pytest.fixture(scope="module")
def swe_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("swe") / "swe.db"
    with sk.open_store(path) as store:
        (session,) = sk.io.import_swe_agent(store, DATA)
        long_session(store)
        yield path, session.session_id


def test_show_prints_swe_agent_tool_output_with_real_line_breaks(swe_store):
    path, sid = swe_store
    raw = swe_output("find_file")
    assert "\r\n" in raw  # the trajectory's own CRLF
    first, second = raw.split("\r\n")[0], raw.split("\r\n")[1].split("\n")[0]
    printed = show(str(path), sid)
    assert f"    output:\n      {first}\n      {second}\n" in printed
    assert "\\r\\n" not in printed and "\\n" not in printed and '\\"' not in printed


def test_show_folds_long_output_and_all_output_shows_every_line(swe_store):
    path, _ = swe_store
    s_lines = long_session(sk.open_store())[1]
    folded = show(str(path), "long")
    hidden = LONG_LINES - FOLD_LINES
    assert f"… {hidden} more lines (--all-output shows them)" in folded
    assert f"      {s_lines[FOLD_LINES - 1]}\n" in folded and f"      {s_lines[FOLD_LINES]}\n" not in folded
    assert "\x1b" not in folded
    assert '      "rows": 3,' in folded  # a JSON value, indented
    full = show(str(path), "long", "--all-output")
    assert all(f"      {line}\n" in full for line in s_lines)
    assert "more lines" not in full


def test_views_and_snapshots_carry_text_not_json_escapes(swe_store):
    path, sid = swe_store
    with sk.open_store(path) as store:
        s = store.session(sid)
        message = next(m for m in s.get_history() if "find_file" in sk.parts.tool_names(m))
        (tool,) = [p for p in message_view(message)["parts"] if p["type"] == "tool"]
        assert tool["output"] == output_text(swe_output("find_file"))
        html = transcript_html(s)
        assert "Found 1 matches for &quot;missing_colon.py&quot; in /SWE-agent__test-repo:\n/SWE" in html
        assert "\\r\\n" not in html
        long_html = transcript_html(store.session("long"))
        assert f"show all ({LONG_LINES - FOLD_LINES} more lines)" in long_html
        assert "\x1b" not in long_html


#: What a coding agent sends its tools: a file's text, a shell command with quotes.
FILE_TEXT = 'def greet(name):\n    """Say hello."""\n    return f"hello {name}"\n'
COMMAND = "grep -n \"def greet\" src/*.py && echo 'done'"


def coder_session(store) -> sk.Session:
    s = store.session("coder")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "add greet"}]})
    s.append(
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-str_replace_editor",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"command": "create", "path": "/repo/src/greet.py", "file_text": FILE_TEXT},
                    "output": "File created successfully at: /repo/src/greet.py",
                },
                {
                    "type": "tool-bash",
                    "toolCallId": "c2",
                    "state": "output-available",
                    "input": {"command": COMMAND, "timeout": 30, "background": False},
                    "output": "1:def greet(name):\ndone",
                },
            ],
        }
    )
    return s


def test_input_text_shows_each_argument_with_real_line_breaks():
    # short scalars inline; a text of several lines under its name, indented, with real breaks
    shown = input_text({"command": "create", "path": "/repo/src/greet.py", "file_text": FILE_TEXT})
    assert shown == (
        "command: create\n"
        "path: /repo/src/greet.py\n"
        "file_text:\n"
        '  def greet(name):\n      """Say hello."""\n      return f"hello {name}"'
    )  # the text's own last line break is not shown
    assert input_text({"command": COMMAND, "timeout": 30, "background": False, "env": None}) == (
        f"command: {COMMAND}\ntimeout: 30\nbackground: false\nenv: null"
    )
    # a list or an object argument: indented JSON under its name; an empty string says so
    assert input_text({"view_range": [1, 20], "q": ""}) == 'view_range:\n  [\n    1,\n    20\n  ]\nq: ""'
    # a long one-line value goes under its name too; ANSI codes and CRLF are cleaned as in output
    long = "x" * 100
    assert input_text({"text": long}) == f"text:\n  {long}"
    assert input_text({"log": "a\r\n\x1b[31mb\x1b[0m"}) == "log:\n  a\n  b"
    # arguments kept as a JSON text (a model's raw tool call) read the same as the object
    raw = json.dumps({"command": "create", "file_text": FILE_TEXT})
    assert input_text(raw) == input_text({"command": "create", "file_text": FILE_TEXT})
    # anything else as output_text shows it
    assert input_text({}) == "{}"
    assert input_text("ls -la\r\n") == "ls -la\n"
    assert input_text([1, "a"]) == output_text([1, "a"])
    assert input_text(None) == "null" and input_text("{not json") == "{not json"


@pytest.fixture(scope="module")
def coder_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("coder") / "coder.db"
    with sk.open_store(path) as store:
        coder_session(store)
        (session,) = sk.io.import_swe_agent(store, DATA)
        yield path, session.session_id


def test_show_prints_tool_inputs_as_arguments_with_real_line_breaks(coder_store):
    path, sid = coder_store
    printed = show(str(path), "coder")
    assert (
        "    input:\n"
        "      command: create\n"
        "      path: /repo/src/greet.py\n"
        "      file_text:\n"
        "        def greet(name):\n"
        '            """Say hello."""\n'
        '            return f"hello {name}"\n'
    ) in printed
    assert f"      command: {COMMAND}\n      timeout: 30\n" in printed
    assert "\\n" not in printed and '\\"' not in printed
    # the SWE-agent trajectory's edit: both of its arguments, whole and unquoted
    traj = show(str(path), sid)
    assert "      search: def division(a: float, b: float) -> float\n" in traj
    assert "      replace: def division(a: float, b: float) -> float:\n" in traj


def test_views_and_snapshots_carry_tool_inputs_as_text(coder_store):
    path, _ = coder_store
    with sk.open_store(path) as store:
        s = store.session("coder")
        message = s.get_history()[-1]
        tools = [p for p in message_view(message)["parts"] if p["type"] == "tool"]
        raw = [p["input"] for p in message["parts"]]
        assert [t["input"] for t in tools] == [input_text(r) for r in raw]
        html = transcript_html(s)
        assert "file_text:\n  def greet(name):\n      &quot;&quot;&quot;Say hello.&quot;&quot;&quot;" in html
        assert "\\n" not in html and "\\&quot;" not in html


def test_the_run_view_snapshot_shows_tool_inputs_as_text():
    def write_file(path: str, file_text: str) -> str:
        """Writes a file."""
        return "written"

    script = [
        {"text": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "a.py", "file_text": FILE_TEXT}}]},
        {"text": "Done."},
    ]
    store = sk.open_store()
    agent = sk.Agent("coder", "Write code.", sk.testing.ScriptedModel(script), tools=[write_file])
    agent.run_sync("write it", session=store.session("run"))
    view = sk.widgets.RunView(store.session("run"))
    html = view.snapshot_html()
    assert "path: a.py\nfile_text:\n  def greet(name):\n      &quot;&quot;&quot;Say hello." in html
    assert "\\n" not in html
