"""Crash safety of the SQLite engine (docs/stores.md): a writer killed with SIGKILL at random
moments loses no append that had returned and leaves no partial message behind."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_until

import sessionkit as sk

_spec = importlib.util.spec_from_file_location("sessionkit_test_writers", Path(__file__).with_name("_writers.py"))
writers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writers)

KILLS = int(os.environ.get("SESSIONKIT_CRASH_KILLS", 24))
#: Small continuation rows, so large messages span several of them.
CHUNK_CHARS = 700
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

pytestmark = [pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL"), pytest.mark.kill]


class Writer:
    """A writer process and the lines it printed (read on a thread so its pipe never fills)."""

    def __init__(self, path: Path, start: int, build_index: bool):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(writers.__file__)),
                "crash",
                str(path),
                writers.CRASH_SESSION,
                str(start),
                str(CHUNK_CHARS),
                "1" if build_index else "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.returned = 0  # "ok" lines read so far
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut short by the kill is not a report
                self.lines.append(line.strip())
                self.returned += line.startswith("ok ")

    def kill(self) -> str:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        return self.proc.stderr.read()


@pytest.mark.slow
def test_sigkilled_writers_lose_no_returned_append_and_leave_no_partial_message(tmp_path):
    seed = int(os.environ.get("SESSIONKIT_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    path = tmp_path / "crash.db"
    confirmed: set[int] = set()  # "ok n": the append had returned
    attempted: set[int] = set()  # "try n": the append may or may not have happened
    kills_mid_append = 0
    for k in range(KILLS):
        start = max(confirmed) + 1 if confirmed else 0
        appends = rng.randint(3, 8)
        writer = Writer(path, start, build_index=k >= KILLS // 3)
        if k % 4 == 0:
            time.sleep(rng.uniform(0.0, 0.6))  # may land while the process starts or opens the store
        else:
            # a few appends returned (counted, so the total below does not depend on how fast
            # this machine is), then the kill lands anywhere in the next append or between two
            wait_until(
                lambda writer=writer, appends=appends: writer.returned >= appends or writer.proc.poll() is not None,
                what=f"{appends} appends to return",
            )
            time.sleep(rng.uniform(0.0, 0.05))
        err = writer.kill()
        assert writer.proc.returncode == -signal.SIGKILL, f"writer ended on its own (seed {seed}):\n{err}"
        last = None
        for line in writer.lines:
            word, n = line.split()
            (confirmed if word == "ok" else attempted).add(int(n))
            last = word
        if last == "try":
            kills_mid_append += 1

    print(f"seed {seed}: {KILLS} kills, {kills_mid_append} during an append, {len(confirmed)} appends returned")
    assert len(confirmed) >= 50, f"too few appends returned to test anything (seed {seed})"
    assert kills_mid_append >= 1, f"no kill landed during an append (seed {seed})"

    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        fts = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE sql LIKE '%USING fts5%'")]
        for table in fts:  # the full-text index agrees with its own content
            raw.execute(f'INSERT INTO "{table}"("{table}") VALUES (\'integrity-check\')')

    with sk.open_store(path) as store:
        session = store.session(writers.CRASH_SESSION)
        history = session.get_history(compacted=False)
        ids = [m["id"] for m in history]
        stored = {int(i[1:]) for i in ids}
        assert len(ids) == len(stored), "a message is stored twice"
        assert len(session) == len(ids), "a stored message is not on the conversation's path"
        missing = confirmed - stored
        assert not missing, f"appends that had returned are lost: {sorted(missing)} (seed {seed})"
        assert stored <= attempted, "a message no writer attempted"
        # each writer continued the one conversation: one chain, in write order, no gaps
        assert ids == [f"n{n:05d}" for n in range(len(ids))]
        for message in history:
            want = writers.crash_message(int(message["id"][1:]))
            if "createdAt" not in want:
                assert ISO_MS.match(message.pop("createdAt")), message["id"]
            assert message == want, f"message {message['id']} reads back different from what was written"
        payloads = {
            p.get("data") or p["url"].split(",", 1)[1] for m in history for p in m["parts"] if p["type"] == "file"
        }
        assert store.stats()["blobs"] == len(payloads), "each distinct payload is stored once"
        # the search index kept up with every write, across the kills
        for n in sorted(stored):
            hits = session.search(f"n{n:05d}", limit=5)
            assert [h.id for h in hits] == [f"n{n:05d}"]
        # and the store takes new writes after all that
        nxt = len(ids)
        assert session.append(writers.crash_message(nxt)).inserted
        assert session.latest_leaf()["id"] == f"n{nxt:05d}"
        assert session.path_length() == nxt + 1
