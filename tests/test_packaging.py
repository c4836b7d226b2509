"""What people install: the package list, the extras, and what `make demo` and `make test` install."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
TEST_TOOLS = ("pytest", "playwright", "schemathesis", "hypothesis", "nbval", "ruff", "mypy", "import-linter")


def _closure(extra: str) -> set[str]:
    """Every requirement an extra brings, its sessionkit[...] references followed."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    todo, seen, reqs = [extra], set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            match = re.match(r"sessionkit\[([^\]]+)\]", req)
            if match:
                todo += [e.strip() for e in match.group(1).split(",")]
            else:
                reqs.add(re.split(r"[<>=\[;! ]", req, maxsplit=1)[0].lower())
    return reqs


def test_every_package_is_listed():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "sessionkit").rglob("__init__.py")}
    assert listed == on_disk | {"sessionkit._notebooks"}
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["sessionkit._notebooks"] == "notebooks"
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["sessionkit._notebooks"]
    shipped = {p.name for pattern in patterns for p in (REPO / "notebooks").glob(pattern)}
    assert {p.name for p in (REPO / "notebooks").glob("[0-9][0-9]-*.ipynb")} <= shipped
    assert "demo.db" not in shipped


def test_the_notebook_extra_has_what_the_tour_needs_and_no_test_tools():
    notebook = _closure("notebook")
    assert {"jupyterlab", "ipykernel", "anywidget", "ipywidgets", "matplotlib", "litellm"} <= notebook
    assert not notebook & set(TEST_TOOLS), notebook & set(TEST_TOOLS)
    assert _closure("lab") == notebook
    dev = _closure("dev")
    assert notebook <= dev and set(TEST_TOOLS) <= dev
    assert {"notebook", "marimo"} <= dev  # Jupyter Notebook 7 and marimo, for the browser tests


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_the_notebook_extra_and_make_test_the_dev_extra(tmp_path):
    def dry(*targets: str) -> str:
        proc = subprocess.run(
            ["make", "-n", *targets, f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    demo = dry("demo")
    assert "'.[notebook]'" in demo and "'.[dev]'" not in demo
    assert "sessionkit._lab" in demo
    test = dry("test")
    assert "'.[dev]'" in test and "'.[notebook]'" not in test
    assert "'.[dev]'" in dry("setup") and "'.[notebook]'" in dry("setup", "EXTRAS=notebook")
