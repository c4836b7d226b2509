"""The committed notebooks were run top to bottom, are clean to commit, and link up.

A notebook saved without running (or with a cell skipped, or run out of order) has code
cells without an ``execution_count``; nbval would then silently skip comparing them. These
checks fail instead, and say to run ``python notebooks/run_all.py``.
"""

from __future__ import annotations

import json
import re

import pytest
from nbtools import EXPECTED, NOTEBOOKS, all_notebooks, need, numbered_notebooks

WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")
#: Paths that would tie an output to one machine (the notebooks run in a temporary copy).
MACHINE_PATHS = re.compile(r"(/tmp/|/work/|/home/|/root/|/var/folders/|[A-Z]:\\\\Users\\\\)")
RERUN = "run `python notebooks/run_all.py` and commit the result"


@pytest.fixture(scope="module")
def nbformat():
    """nbformat, imported by the tests that read or build notebooks (its import takes seconds:
    it compiles the grammars of its JSON schema's formats)."""
    return pytest.importorskip("nbformat")


def problems(nb) -> list[str]:
    """What is wrong with a notebook as committed (empty: nothing)."""
    found = []
    if "widgets" in nb.metadata:
        found.append("metadata.widgets holds widget state")
    if nb.metadata.get("kernelspec", {}).get("name") != "python3":
        found.append("the kernelspec is not python3")
    counts = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"code cell {index} ({cell.source.strip().splitlines()[0][:40] if cell.source.strip() else 'empty'!r})"
        if not cell.source.strip():
            found.append(f"{where} is empty")
            continue
        if cell.execution_count is None:
            found.append(f"{where} was not run")
        else:
            counts.append(cell.execution_count)
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                found.append(f"{where} ended in {out.get('ename')}: {out.get('evalue')}")
            if kind == "stream" and out.get("name") == "stderr":
                found.append(f"{where} wrote to stderr: {out.get('text', '')[:120]!r}")
            data = out.get("data") or {}
            for mime in WIDGET_MIMES:
                if mime in data:
                    found.append(f"{where} saved a widget output ({mime}): its static snapshot is what must be kept")
            text = json.dumps(data) + (out.get("text") or "")
            match = MACHINE_PATHS.search(text)
            if match:
                found.append(f"{where} shows a machine path ({match.group(0)}...)")
    if counts and counts != list(range(1, len(counts) + 1)):
        found.append(f"cells were not run once, top to bottom, in a fresh kernel: execution counts {counts}")
    return found


def test_the_tour_is_complete():
    names = [p.stem for p in numbered_notebooks()]
    missing = [name for name in EXPECTED if name not in names]
    assert not missing, f"missing notebooks: {missing}"
    numbers = [name.split("-", 1)[0] for name in names]
    assert len(numbers) == len(set(numbers)), f"two notebooks share a number: {names}"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_notebook_was_run_and_is_clean(nbformat, path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    found = problems(nb)
    assert not found, f"{path.name}: " + "; ".join(found) + f" ({RERUN})"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_notebook_opens_with_a_title_and_explains_itself(nbformat, path):
    nb = nbformat.read(str(path), as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), f"{path.name} has no title cell"
    number = path.stem.split("-", 1)[0]
    if number.isdigit():
        assert first.source.startswith(f"# {int(number)} "), f"{path.name}: the title should start with its number"
    markdown = sum(1 for c in nb.cells if c.cell_type == "markdown")
    code = sum(1 for c in nb.cells if c.cell_type == "code")
    assert markdown >= code / 2, f"{path.name}: {markdown} markdown cells for {code} code cells"
    outputs = sum(1 for c in nb.cells if c.cell_type == "code" and c.get("outputs"))
    assert outputs >= 0.7 * code, f"{path.name}: only {outputs} of {code} code cells show anything"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_links_between_notebooks_resolve(nbformat, path):
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for target in re.findall(r"\]\(([^)#\s]+\.(?:ipynb|md))\)", cell.source):
            assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


def test_data_files_carry_their_sources():
    sources = (NOTEBOOKS / "data" / "SOURCES.md").read_text(encoding="utf-8")
    files = [p for p in (NOTEBOOKS / "data").iterdir() if p.name != "SOURCES.md"]
    assert files
    for path in files:
        assert f"`{path.name}`" in sources, f"data/{path.name} is not described in data/SOURCES.md"
    total = sum(p.stat().st_size for p in files)
    assert total < 3_000_000, f"notebooks/data holds {total:,} bytes; keep the samples small"


# -- the checks themselves can fail -------------------------------------------------------


def _notebook(nbformat, *cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = list(cells)
    return nb


def test_problems_reports_an_unrun_notebook(nbformat):
    nb = _notebook(nbformat, nbformat.v4.new_markdown_cell("# 9 · x"), nbformat.v4.new_code_cell("1 + 1"))
    assert any("was not run" in p for p in problems(nb))


def test_problems_reports_out_of_order_runs_and_widget_state(nbformat):
    a = nbformat.v4.new_code_cell("x = 1", execution_count=2)
    b = nbformat.v4.new_code_cell(
        "x",
        execution_count=1,
        outputs=[
            nbformat.v4.new_output(
                "execute_result", data={"text/plain": "1", WIDGET_MIMES[0]: {"model_id": "abc"}}, execution_count=1
            )
        ],
    )
    nb = _notebook(nbformat, a, b)
    nb.metadata["widgets"] = {WIDGET_MIMES[1]: {"state": {}}}
    found = " | ".join(problems(nb))
    assert "execution counts [2, 1]" in found
    assert "metadata.widgets" in found
    assert "saved a widget output" in found


def test_problems_reports_errors_stderr_and_machine_paths(nbformat):
    cell = nbformat.v4.new_code_cell(
        "boom",
        execution_count=1,
        outputs=[
            nbformat.v4.new_output("stream", name="stderr", text="DeprecationWarning: old\n"),
            nbformat.v4.new_output("stream", name="stdout", text="saved to /tmp/abc/x.db\n"),
            nbformat.v4.new_output("error", ename="KeyError", evalue="'x'", traceback=[]),
        ],
    )
    found = " | ".join(problems(_notebook(nbformat, cell)))
    assert "KeyError" in found and "stderr" in found and "machine path" in found


def test_problems_accepts_a_clean_run(nbformat):
    cell = nbformat.v4.new_code_cell(
        "print(1)", execution_count=1, outputs=[nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    )
    assert problems(_notebook(nbformat, nbformat.v4.new_markdown_cell("# 9 · x"), cell)) == []


def test_need_is_importable():  # keeps the helper honest for the other modules
    assert need("json") is json
