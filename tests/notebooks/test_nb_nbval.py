"""Every notebook runs top to bottom offline and reproduces its committed outputs (nbval).

One nbval run covers all notebooks, in a subprocess, on a fresh copy of ``notebooks/`` (no
``demo.db`` or other leftovers, exactly what a new clone has)::

    python -m pytest --nbval <copy> --nbval-sanitize-with <copy>/sanitize.cfg --nbval-current-env

nbval executes each cell in a kernel of this Python and compares its text and HTML outputs
with the saved ones after the masks of ``sanitize.cfg`` (ids, times, ports, temporary
paths...). Running it in a subprocess keeps its plugin and kernels out of this test session
and lets one run serve every notebook; each notebook then gets its own test result.

The same run also checks one deliberately altered copy of notebook 1: the comparison must
catch the altered output, or the masks hide too much.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from nbtools import NOTEBOOKS, need, numbered_notebooks

# slow: runs every notebook in a kernel (a minute); one xdist group, so that one worker runs nbval once
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.xdist_group("nbval")]

TAMPERED = "tampered-01-quickstart.ipynb"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _tamper(source: Path, dest: Path) -> int:
    """Copy notebook 1 with one saved output changed; returns the index of that code cell."""
    import nbformat

    nb = nbformat.read(str(source), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for index, cell in enumerate(code):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and "inserted: False" in out.get("text", ""):
                out["text"] = out["text"].replace("inserted: False", "inserted: True")
                nbformat.write(nb, str(dest))
                return index
    raise AssertionError("notebook 1 no longer prints 'inserted: False'; pick another output to alter")


@pytest.fixture(scope="module")
def nbval_run(run_all, jupyter_env, tmp_path_factory):
    """Run nbval over a fresh copy of every notebook; returns per-notebook cell results."""
    need("nbval")
    need("ipykernel")
    base = tmp_path_factory.mktemp("nbval")
    work = run_all.fresh_copy(base / "notebooks")
    altered_cell = _tamper(work / "01-quickstart.ipynb", work / TAMPERED)
    (base / "pytest.ini").write_text("[pytest]\n")
    env = run_all.kernel_env(base / "jupyter")
    report = base / "nbval.xml"
    names = [p.name for p in numbered_notebooks()] + [TAMPERED]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(base / "pytest.ini"),
        "--rootdir",
        str(base),
        "-p",
        "no:cacheprovider",
        "-q",
        "--color=no",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        str(work / "sanitize.cfg"),
        "--nbval-cell-timeout=300",
        # A bound, not a wait: a kernel starts in seconds, but on a machine busy with the
        # rest of the suite (browsers, PostgreSQL) it once took over nbval's default 60 s.
        "--nbval-kernel-startup-timeout=300",
        f"--junitxml={report}",
        *[str(work / n) for n in names],
    ]
    proc = subprocess.run(command, cwd=base, env=env, capture_output=True, text=True, timeout=840)
    if not report.exists():
        raise AssertionError(
            f"nbval did not run (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        )
    results: dict[str, list[tuple[str, str, str]]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")  # e.g. "notebooks.01-quickstart.ipynb"
        notebook = next((n for n in sorted(names, key=len, reverse=True) if classname.endswith(n)), classname)
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = tag
                message = ANSI.sub("", (node.get("message") or "") + "\n" + (node.text or ""))
        results.setdefault(notebook, []).append((case.get("name", ""), outcome, message))
    return {"results": results, "altered_cell": altered_cell, "stdout": proc.stdout}


def _code_cells(path: Path) -> int:
    import nbformat

    return sum(1 for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code")


@pytest.mark.parametrize("name", [p.name for p in numbered_notebooks()])
def test_notebook_reproduces_its_outputs(nbval_run, name):
    cells = nbval_run["results"].get(name)
    assert cells, f"nbval reported nothing for {name}:\n{nbval_run['stdout'][-3000:]}"
    bad = [(cell, outcome, message) for cell, outcome, message in cells if outcome != "passed"]
    details = "\n\n".join(f"{cell}: {outcome}\n{message[-2500:]}" for cell, outcome, message in bad[:3])
    assert not bad, (
        f"{name}: {len(bad)} of {len(cells)} cells differ from the saved outputs or failed "
        f"(if the change is intended: python notebooks/run_all.py {name[:2]})\n{details}"
    )
    assert len(cells) == _code_cells(NOTEBOOKS / name), f"{name}: nbval checked {len(cells)} cells"


def test_nbval_catches_an_altered_output(nbval_run):
    cells = nbval_run["results"].get(TAMPERED)
    assert cells, "the altered notebook was not checked"
    failed = [int(cell.split()[-1]) for cell, outcome, _ in cells if outcome == "failure"]
    assert failed == [nbval_run["altered_cell"]], f"expected only cell {nbval_run['altered_cell']} to fail: {cells}"


def test_sanitize_masks_what_changes_and_nothing_else(run_all):
    rules = run_all.sanitize_rules(NOTEBOOKS / "sanitize.cfg")

    def mask(text: str) -> str:
        for pattern, replace in rules:
            text = pattern.sub(replace, text)
        return text

    varying = {
        "createdAt 2026-11-30T03:51:13.846Z": "createdAt TIMESTAMP",
        "at 2025-03-03 09:00:00+00:00": "at TIMESTAMP",
        "['u1', 'msg_c61ebb7ff67c4f1cbda6bc6d']": "['u1', 'msg_ID']",
        'data-id="oa_01a24dfd4cded0604445508f"': 'data-id="oa_ID"',  # an Agents SDK session's item
        "compaction:e93c798f73f04cbf": "compaction:ID",
        'data-compaction="e93c798f73f04cbf"': 'data-compaction="HEXID"',
        "oasst-be09f381-fa12-464b-82c5-3724eb3a2a81": "oasst-UUID",
        "<object at 0x7f3a2c1d9e50>": "<object at 0xADDRESS>",
        "serving on http://127.0.0.1:57333": "serving on http://127.0.0.1:PORT",
        "wrote /tmp/sessionkit-notebooks-x1/out.db": "wrote TEMP_PATH",
        "(6.8 s)": "(DURATION)",
    }
    for raw, expected in varying.items():
        assert mask(raw) == expected, raw
    stable = [
        "replies to u1:  ['a1', 'a1b']",
        "5 of 24 messages fit in 1,000 bytes; truncated: True",
        "Tomorrow Lisbon will be sunny with a high of 23 °C.",
        "run-3  completed  in= 1317 out=  70 cost=$0.000240",
        "202 {'runId': 'weather.1', 'queued': True}",
        "messages  2 ..  8 of the path: 180 tokens -> a 56-token summary",
        "update_reservation_flights     104        42          0.40",
    ]
    for text in stable:
        assert mask(text) == text, text
