"""The main job's launcher (``python -m sessionkit._lab``) and the notebook runner's cleaning,
without a browser: what they prepare, the command they build, how they fail."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sessionkit as sk
from sessionkit import _lab


def test_prepare_builds_the_demo_store_and_private_settings(fresh_notebooks):
    assert not (fresh_notebooks / "demo.db").exists()
    ready = _lab.prepare(fresh_notebooks)
    assert ready["demo_built"] is True
    with sk.open_store(ready["demo"]) as store:
        assert {i.id for i in store.list_sessions()} == {"deploy-help", "db-migration", "weather-agent"}
        assert store.stats()["compactions"] >= 1
    overrides = json.loads(ready["overrides"].read_text())
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification["checkForUpdates"] is False and notification["fetchNews"] == "false"
    assert ready["settings_dir"].parent == fresh_notebooks / ".lab"
    spec = json.loads((ready["jupyter_path"] / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    assert not list(fresh_notebooks.glob(".building-*")), "the partial store was left behind"


def test_prepare_keeps_an_existing_demo_store(fresh_notebooks):
    first = _lab.prepare(fresh_notebooks)
    with sk.open_store(first["demo"]) as store:
        store.session("mine").append({"id": "x", "role": "user", "parts": [{"type": "text", "text": "keep me"}]})
    again = _lab.prepare(fresh_notebooks)
    assert again["demo_built"] is False
    with sk.open_store(again["demo"]) as store:
        assert store.session("mine").get("x") is not None


def test_overrides_merge_into_an_existing_settings_file(tmp_path):
    (tmp_path / "overrides.json").write_text(
        json.dumps(
            {
                "@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
                "@jupyterlab/apputils-extension:notification": {"doNotDisturbMode": True, "checkForUpdates": True},
            }
        )
    )
    path = _lab.write_overrides(tmp_path)
    data = json.loads(path.read_text())
    assert data["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert data["@jupyterlab/apputils-extension:notification"] == {
        "doNotDisturbMode": True,
        "checkForUpdates": False,
        "fetchNews": "false",
    }


@pytest.mark.parametrize("as_root", [True, False])
def test_lab_command(tmp_path, as_root):
    command = _lab.lab_command(tmp_path, port=8899, token="t" * 24, settings_dir=tmp_path / "s", as_root=as_root)
    assert command[:4] == [sys.executable, "-m", "jupyter", "lab"]
    joined = " ".join(command)
    for part in (
        "--no-browser",
        "--ip 127.0.0.1",
        "--port 8899",
        f"--ServerApp.root_dir={tmp_path}",
        f"--IdentityProvider.token={'t' * 24}",
        f"--LabApp.app_settings_dir={tmp_path / 's'}",
        "--LabApp.news_url=None",
        "jupyterlab.NeverCheckForUpdate",
    ):
        assert part in joined, part
    assert ("--allow-root" in command) is as_root


@pytest.mark.slow  # builds the demo store in a subprocess
def test_prepare_only_prints_the_command(fresh_notebooks):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sessionkit._lab",
            "--notebooks",
            str(fresh_notebooks),
            "--prepare-only",
            "--port",
            "8899",
            "--token",
            "x" * 32,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "demo store built" in proc.stdout
    assert "--port 8899" in proc.stdout and f"--IdentityProvider.token={'x' * 32}" in proc.stdout
    assert (fresh_notebooks / "demo.db").exists()


def test_missing_notebooks_folder_is_one_clear_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sessionkit._lab", "--notebooks", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1


def test_find_notebooks_prefers_the_working_folder(fresh_notebooks, monkeypatch):
    monkeypatch.chdir(fresh_notebooks.parent)
    assert _lab.find_notebooks() == fresh_notebooks.resolve()


def test_free_port_skips_a_busy_one():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert _lab.free_port(port, tries=3) != port


def test_run_all_clean_strips_widget_state_and_views(run_all):
    nbformat = pytest.importorskip("nbformat")
    view = "application/vnd.jupyter.widget-view+json"
    cell = nbformat.v4.new_code_cell(
        "tree",
        execution_count=1,
        outputs=[
            nbformat.v4.new_output(
                "execute_result",
                execution_count=1,
                data={
                    "text/plain": "BranchTree('s', 3 messages)",
                    "text/html": '<div data-sessionkit-snapshot="tree"></div>',
                    view: {"model_id": "abc", "version_major": 2, "version_minor": 1},
                },
            ),
            nbformat.v4.new_output("display_data", data={view: {"model_id": "def"}}),
        ],
    )
    cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"abc": {}}}}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.9", "mimetype": "text/x-python"}
    run_all.clean(nb)
    assert "widgets" not in nb.metadata
    assert nb.metadata["language_info"] == {"name": "python"}
    assert "execution" not in cell.metadata
    assert len(cell.outputs) == 1  # the output that only held a widget view is gone
    assert set(cell.outputs[0]["data"]) == {"text/plain", "text/html"}
    nbformat.validate(nb)


def test_options_serve_a_subcommand_too(fresh_notebooks, capsys):
    # how a `sessionkit lab` subcommand would reuse the launcher
    import argparse

    parser = argparse.ArgumentParser(prog="sessionkit")
    sub = parser.add_subparsers(dest="command")
    _lab.add_arguments(sub.add_parser("lab"))
    args = parser.parse_args(["lab", "--notebooks", str(fresh_notebooks), "--prepare-only", "--port", "8901"])
    assert _lab.run(args) == 0
    assert "--port 8901" in capsys.readouterr().out
    assert (fresh_notebooks / "demo.db").exists()
