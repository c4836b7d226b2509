"""A folder given to ``sessionkit import`` or to the folder importers: a folder of mixed formats
(session logs beside trajectories) is refused naming its files, and a folder holding no
transcript is an error that creates no store, instead of "0 new messages" and an empty store."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sessionkit as sk

DATA = Path(__file__).resolve().parent.parent / "data"
LOG = DATA / "claude_code" / "sidechain_integrated.jsonl"
TRAJ = DATA / "swe_agent" / "function_calling_simple.traj"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sessionkit", *args], capture_output=True, text=True, encoding="utf-8", timeout=120
    )


@pytest.fixture
def mixed(tmp_path) -> Path:
    folder = tmp_path / "mixed"
    (folder / "deep").mkdir(parents=True)
    shutil.copy(LOG, folder / "session.jsonl")
    shutil.copy(TRAJ, folder / "deep" / "run.traj")
    return folder


def test_a_folder_of_mixed_formats_is_refused_naming_its_files(mixed, tmp_path):
    with pytest.raises(sk.io.MalformedInput, match=r"session\.jsonl.*run\.traj") as caught:
        sk.io.detect_format(mixed)
    assert "--format" in str(caught.value)
    store = tmp_path / "out.db"
    proc = _cli("import", str(store), str(mixed))
    assert proc.returncode == 1, proc.stdout
    assert "session.jsonl" in proc.stderr and "run.traj" in proc.stderr, proc.stderr
    assert not store.exists()
    # naming the format imports that format's files of the folder
    proc = _cli("import", str(store), str(mixed), "--format", "swe-agent")
    assert proc.returncode == 0, proc.stderr
    with sk.open_store(str(store)) as opened:
        assert [s.id for s in opened.list_sessions()] == ["run"]  # the .traj only, named after its file


@pytest.mark.parametrize("content", ["", '{"chosen": "a", "rejected": "b"}\n'], ids=["empty", "hh-pairs"])
@pytest.mark.parametrize("fmt", [None, "claude-code"], ids=["detected", "named"])
def test_a_folder_without_a_transcript_is_an_error_that_creates_no_store(tmp_path, content, fmt):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "notes.jsonl").write_text(content, encoding="utf-8")
    store = tmp_path / "out.db"
    proc = _cli("import", str(store), str(folder), *(["--format", fmt] if fmt else []))
    assert proc.returncode == 1, proc.stdout
    assert "notes.jsonl" in proc.stderr and "no Claude Code session" in proc.stderr, proc.stderr
    assert not store.exists(), sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(sk.io.MalformedInput, match="no Claude Code session"):
        sk.io.import_claude_code(sk.open_store(), folder)


def test_a_failed_import_into_an_existing_store_keeps_the_store(mixed, tmp_path):
    store = tmp_path / "kept.db"
    assert _cli("import", str(store), str(LOG)).returncode == 0
    with sk.open_store(str(store)) as opened:
        before = opened.stats()["messages"]
    assert _cli("import", str(store), str(mixed)).returncode == 1
    with sk.open_store(str(store)) as opened:
        assert opened.stats()["messages"] == before > 0
