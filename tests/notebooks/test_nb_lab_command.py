"""``sessionkit lab [STORE]``: the tour notebooks copied to a folder of the user's choosing and
served by JupyterLab, from the installed command (no checkout needed to find them)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from helpers import free_port
from nbtools import EXPECTED, REPO, need
from servers import launcher

import sessionkit as sk

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: starts JupyterLab


def _get(url: str):
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def test_lab_copies_the_tour_and_serves_it_with_the_store(tmp_path, jupyter_env):
    need("jupyterlab")
    need("ipykernel")
    store_path = tmp_path / "mine.db"
    with sk.open_store(str(store_path)) as store:
        store.session("support").append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    dest = tmp_path / "my tour"
    dest.mkdir()
    (dest / "01-quickstart.ipynb").write_text("{}")  # the reader's own edits are kept
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "sessionkit",
        "lab",
        str(store_path),
        "--dir",
        str(dest),
        "--port",
        str(port),
        "--no-browser",
        "--timeout",
        "150",
    ]
    with launcher(
        argv,
        cwd=tmp_path,
        env=jupyter_env(tmp_path / "jupyter"),
        pattern=r"(http://127\.0\.0\.1:(\d+)/lab/tree/(\S+)\?token=(\S+))",
    ) as job:
        url = job.match
        seen = job.seen
        assert int(url.group(2)) == port
        assert url.group(3) == "your-store.ipynb"  # the store's notebook opens first
        token = url.group(4)
        printed = "".join(seen)
        data_files = len(list((REPO / "notebooks" / "data").glob("*")))
        assert f"{len(EXPECTED) - 1 + data_files} files copied" in printed and "1 file already there kept" in printed
        # JupyterLab serves the copied folder: every tour notebook, the data, the store's notebook
        listing = _get(f"http://127.0.0.1:{port}/api/contents?token={token}")
        names = {item["name"] for item in listing["content"]}
        assert {f"{stem}.ipynb" for stem in EXPECTED} <= names
        assert {"data", "your-store.ipynb", "demo.db"} <= names
        opened = _get(f"http://127.0.0.1:{port}/api/contents/your-store.ipynb?token={token}")
        source = "".join("".join(c["source"]) for c in opened["content"]["cells"])
        assert repr(str(store_path)) in source and "create=False" in source
        second = _get(f"http://127.0.0.1:{port}/api/contents/02-regeneration-and-branches.ipynb?token={token}")
        assert second["content"]["cells"][0]["source"].startswith("# 2 ")
        assert (dest / "01-quickstart.ipynb").read_text() == "{}"
        assert (dest / "data" / "SOURCES.md").read_text() == (REPO / "notebooks" / "data" / "SOURCES.md").read_text()
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/lab/tree/your-store.ipynb?token={token}", timeout=60
        ) as page:
            assert page.status == 200 and b"JupyterLab" in page.read()
        assert job.stop() == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=3)


def test_lab_refuses_a_missing_store_and_starts_nothing(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sessionkit", "lab", str(tmp_path / "nope.db"), "--dir", str(tmp_path / "tour")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("sessionkit: error: no store at") and "nope.db" in result.stderr
    assert not (tmp_path / "tour").exists()
