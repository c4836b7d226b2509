"""binder/ opens the notebooks on a hosted service with the package installed, and agrees
with pyproject.toml (its requirements are generated from it by binder/generate.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

from nbtools import BINDER, REPO


def _pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1)).lower()


def test_generated_files_are_up_to_date(binder_generate):
    for name, text in binder_generate.render(_pyproject()).items():
        current = (BINDER / name).read_text(encoding="utf-8")
        assert current == text, f"binder/{name} is out of date with pyproject.toml: run python binder/generate.py"


def test_check_mode_passes_from_the_command_line():
    proc = subprocess.run(
        [sys.executable, str(BINDER / "generate.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_requirements_cover_the_all_extra_and_the_notebook_server():
    project = _pyproject()["project"]
    lines = [
        line
        for line in (BINDER / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    names = {_name(line) for line in lines}
    wanted = set(map(_name, project["dependencies"]))
    # `all`, and `notebook` (what `sessionkit lab` installs: the tour notebooks' own needs)
    todo, seen = [*project["optional-dependencies"]["all"], *project["optional-dependencies"]["notebook"]], set()
    while todo:  # an extra may name other extras (sessionkit[...]), themselves naming others
        req = todo.pop()
        if _name(req) == "sessionkit":
            for extra in re.search(r"\[(.*)\]", req).group(1).split(","):
                if extra.strip() not in seen:
                    seen.add(extra.strip())
                    todo += project["optional-dependencies"][extra.strip()]
        else:
            wanted.add(_name(req))
    assert wanted <= names, f"missing from binder/requirements.txt: {sorted(wanted - names)}"
    assert {"jupyterlab", "ipykernel", "opentelemetry-sdk"} <= names
    assert "sessionkit" not in names  # installed from the checkout by postBuild
    for line in lines:
        assert not line.startswith(("-e", ".", "/", "git+")), f"local or VCS requirement: {line}"


def test_runtime_matches_requires_python():
    requires = _pyproject()["project"]["requires-python"]
    low = re.search(r">=\s*(\d+\.\d+)", requires).group(1)
    assert (BINDER / "runtime.txt").read_text().strip() == f"python-{low}"


def test_post_build_installs_the_checkout_and_prepares_the_demo():
    path = BINDER / "postBuild"
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert os.access(path, os.X_OK), "binder/postBuild must be executable"
    assert "set -euo pipefail" in text
    assert re.search(r"pip install .*--no-deps -e \.(\s|$)", text), "postBuild must install the checkout"
    assert "sessionkit._lab --prepare-only --notebooks notebooks" in text
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_expand_resolves_self_references(binder_generate):
    project = {
        "name": "demo-pkg",
        "dependencies": ["a>=1"],
        "optional-dependencies": {
            "x": ["b>=2", "c"],
            "y": ["demo_pkg[x]", "d[extra]>=3"],
            "all": ["Demo.Pkg[y,x]"],
        },
    }
    assert sorted(binder_generate.expand(project, ("all",))) == ["a>=1", "b>=2", "c", "d[extra]>=3"]
    doc = {"project": {**project, "requires-python": ">=3.12"}}
    files = binder_generate.render(doc)
    assert files["runtime.txt"] == "python-3.12\n"
    body = [line for line in files["requirements.txt"].splitlines() if not line.startswith("#")]
    assert body == sorted(body, key=_name)
    assert "jupyterlab>=4.1" in body and "a>=1" in body
