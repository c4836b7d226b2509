"""``sessionkit lab [STORE]``: the tour notebooks copied to a folder of the user's choosing and
served by JupyterLab, from the installed command (no checkout needed to find them)."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import sessionkit as sk
from nbtools import EXPECTED, REPO, need

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: starts JupyterLab


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
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
    env = jupyter_env(tmp_path / "jupyter")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sessionkit", "lab", str(store_path), "--dir", str(dest), "--port", str(port),
         "--no-browser", "--timeout", "150"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    url = None
    try:
        deadline = time.monotonic() + 170
        while url is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no URL printed in time:\n" + "".join(seen)) from None
            if line is None:
                raise AssertionError(f"sessionkit lab exited with {proc.wait()}:\n" + "".join(seen))
            seen.append(line)
            match = re.search(r"(http://127\.0\.0\.1:(\d+)/lab/tree/(\S+)\?token=(\S+))", line)
            if match:
                url = match
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
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/tree/your-store.ipynb?token={token}",
                                    timeout=10) as page:
            assert page.status == 200 and b"JupyterLab" in page.read()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=3)


def test_lab_refuses_a_missing_store_and_starts_nothing(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sessionkit", "lab", str(tmp_path / "nope.db"), "--dir",
                             str(tmp_path / "tour")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("sessionkit: error: no store at") and "nope.db" in result.stderr
    assert not (tmp_path / "tour").exists()
