"""``sessionkit show``, run as a real process on the every-fact store (seams/facts.py), shows
every message on each path: its text, each tool call's input (``name: value``) and output or
error, and the compaction boundaries; expected values come from the library's reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

_SCRIPT = Path(sys.executable).with_name("sessionkit")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "sessionkit"]


def _show(*args: str) -> str:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [*COMMAND, "show", *args], capture_output=True, text=True, encoding="utf-8", timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _leaves(session) -> list[str]:
    nodes = session.nodes()
    parents = {n.parent_id for n in nodes}
    return [n.id for n in nodes if n.id not in parents]


@pytest.fixture(scope="module")
def shown(every_fact_store):
    """``show --full --all-output`` of every path of every session: ``{(session, leaf): stdout}``."""
    store, notes = every_fact_store("sqlite")
    argvs = [(sid, leaf) for sid in notes["sessions"] for leaf in _leaves(store.session(sid))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outs = pool.map(lambda a: _show(str(store.path), a[0], "--leaf", a[1], "--full", "--all-output"), argvs)
        return store, notes, dict(zip(argvs, outs))


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_show_prints_every_message_and_tool_call(shown):
    store, notes, outputs = shown
    seen_tools = set()
    for (sid, leaf), out in outputs.items():
        session = store.session(sid)
        for message in session.get_history(leaf_id=leaf, compacted=False):
            assert f" {message['id']} " in out, (sid, leaf, message["id"])
            for part in message["parts"]:
                if part["type"] == "text":
                    # (the output is read with universal newlines)
                    assert part["text"].replace("\r\n", "\n") in out, (sid, message["id"])
                elif part["type"].startswith("tool-"):
                    seen_tools.add(part["toolCallId"])
                    name = part["type"].removeprefix("tool-")
                    assert f"tool {name}  ({part['state']}, {part['toolCallId']})" in out, (sid, part)
                    given = part["input"]
                    if isinstance(given, dict):
                        for key, value in given.items():
                            if not isinstance(value, (dict, list)):
                                shown_value = value if isinstance(value, str) else json.dumps(value)
                                assert f"{key}: {shown_value}" in out, (sid, part["toolCallId"], key)
                            else:
                                assert f"{key}:\n" in out, (sid, part["toolCallId"], key)
                    else:
                        assert f"input:  {given}" in out, (sid, part["toolCallId"])
                    if part["state"] == "output-error":
                        assert f"error:  {part['errorText']}" in out
                    elif "output" in part:
                        output = part["output"]
                        text = output if isinstance(output, str) else json.dumps(output, indent=2)
                        for line in text.splitlines():
                            assert line.strip() in out, (sid, part["toolCallId"], line)
    assert {"call-json", "call-str", "call-err", "call-big", "call_1"} <= seen_tools


@pytest.mark.slow
def test_show_marks_the_compaction_boundaries(shown):
    store, _, outputs = shown
    (compaction,) = store.session("tree").compactions()
    out = outputs[("tree", "__proto__")]
    begins = out.index(f"compacted range begins · compaction {compaction.id[:8]}")
    ends = out.index(f"compacted range ends · compaction {compaction.id[:8]}")
    assert begins < out.index(f" {compaction.from_id} ") < out.index(f" {compaction.to_id} ") < ends
    assert f"({compaction.from_id} … {compaction.to_id})" in out
    # as the model sees it: the summary instead of the range
    seen = _show(str(store.path), "tree", "--leaf", "__proto__")
    assert compaction.summary in seen and " u2 " not in seen


def test_show_prints_the_labels(shown):
    store, _, outputs = shown
    for label in store.labels():
        outs = [out for (sid, _), out in outputs.items() if sid == label.session_id and f" {label.message_id} " in out]
        assert outs, label
        assert all(label.tag in out for out in outs), label
