"""How fast ``sessionkit view`` opens and searches a store of 10,000 and 100,000 sessions.

For each size, a SQLite store is built from a sessionkit JSONL file (two messages a session),
``sessionkit view`` is started as a real process on 127.0.0.1, and the script times over HTTP
what the page asks for before it shows its first rows (the page, its scripts, the first page
of the sessions table), the same first page with three columns from SQL (``--column``, each a
query over the views, computed for the page's rows), and a search. Each figure is also given
as a ratio against a raw query of the same store in this process:
``store.sql("SELECT count(*) FROM sessions")``. A ratio that stays flat from 10,000 to 100,000
sessions means the page costs what the store's own query costs: it reads one page of rows,
not the whole store.

"cold" is the first request after the server started (the analysis views are filled then,
once per process); "warm" is the median of the next five.

    .venv/bin/python benchmarks/view_bench.py            # 10,000 and 100,000 sessions
    .venv/bin/python benchmarks/view_bench.py 10000      # one size
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from jsonl_store import build_store, timed

import sessionkit as sk

WORDS = ("deploy", "rollback", "gunicorn", "nginx", "migration", "index", "weather", "forecast")


def _messages(n: int) -> Iterator[tuple[str, str | None, dict]]:
    for k in range(n):
        sid = f"s{k:06d}"
        for j, role in enumerate(("user", "assistant")):
            text = f"{role} {k}: how do I {WORDS[k % len(WORDS)]} the {WORDS[(k * 7 + j) % len(WORDS)]} service"
            yield (
                sid,
                f"m{j - 1}" if j else None,
                {"id": f"m{j}", "role": role, "parts": [{"type": "text", "text": text}]},
            )


def build(path: Path, n: int) -> None:
    build_store(path, _messages(n)).close()


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as response:
        return response.read()


def open_page(base: str) -> None:
    """What the browser fetches before the table shows rows."""
    for part in ("", "common.js", "viewer.js", "modules.js", "sessionkit.css", "viewer.css"):
        get(base + part)
    body = json.loads(get(base + "api/sessions?offset=0&limit=50&sort=last_activity&desc=1&filter="))
    assert len(body["rows"]) == 50, body.get("total")


#: Three columns from SQL, as a user would give them with ``sessionkit view --column``.
COLUMNS = (
    "words=SELECT session_id, sum(length(text)) FROM messages GROUP BY session_id",
    "answers=SELECT session_id, count(*) FROM messages WHERE role = 'assistant' GROUP BY session_id",
    "last=SELECT session_id, max(created_at) FROM messages GROUP BY session_id",
)


def open_page_with_columns(base: str) -> None:
    """The first page of the sessions table, sorted by one of the SQL columns."""
    body = json.loads(get(base + "api/sessions?offset=0&limit=50&sort=words&desc=1&filter="))
    assert len(body["rows"]) == 50 and "words" in body["rows"][0], body.get("total")


def search(base: str) -> None:
    hits = json.loads(get(base + "api/search?q=rollback"))
    assert hits, "no hit"


@contextlib.contextmanager
def serving(path: Path, *options: str):
    """``sessionkit view PATH OPTIONS`` as a real process; yields its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sessionkit", "view", str(path), "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r" at (http://\S+)", line)
        assert match, line
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(30)


def measure(n: int, folder: Path) -> dict:
    path = folder / f"view-{n}.db"
    t_build = timed(lambda: build(path, n))
    with sk.open_store(path) as store:
        store.sql("SELECT count(*) AS n FROM sessions")  # fill the analysis views, as the server does once
        raw = statistics.median(timed(lambda: store.sql("SELECT count(*) AS n FROM sessions")) for _ in range(5))
    with serving(path) as base:
        cold_open = timed(lambda: open_page(base))
        warm_open = statistics.median(timed(lambda: open_page(base)) for _ in range(5))
        cold_search = timed(lambda: search(base))
        warm_search = statistics.median(timed(lambda: search(base)) for _ in range(5))
    with serving(path, *[arg for column in COLUMNS for arg in ("--column", column)]) as base:
        cold_columns = timed(lambda: open_page_with_columns(base))
        warm_columns = statistics.median(timed(lambda: open_page_with_columns(base)) for _ in range(5))
    return {
        "sessions": n,
        "build_s": t_build,
        "raw_count_ms": raw * 1e3,
        "open_cold_ms": cold_open * 1e3,
        "open_warm_ms": warm_open * 1e3,
        "search_cold_ms": cold_search * 1e3,
        "search_warm_ms": warm_search * 1e3,
        "columns_cold_ms": cold_columns * 1e3,
        "columns_warm_ms": warm_columns * 1e3,
    }


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [10_000, 100_000]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, Path(tmp)) for n in sizes]
    print(
        f"{'sessions':>9} | {'raw count':>9} | {'open cold':>16} | {'open warm':>16} | {'search warm':>16} | "
        f"{'3 columns cold':>16} | {'3 columns warm':>16}"
    )
    print("-" * 116)
    for r in rows:
        raw = r["raw_count_ms"]

        def cell(ms: float, raw: float = raw) -> str:
            return f"{ms:7.1f} ms {ms / raw:5.1f}x"

        print(
            f"{r['sessions']:>9,} | {raw:6.1f} ms | {cell(r['open_cold_ms']):>16} | "
            f"{cell(r['open_warm_ms']):>16} | {cell(r['search_warm_ms']):>16} | "
            f"{cell(r['columns_cold_ms']):>16} | {cell(r['columns_warm_ms']):>16}"
        )
    print("(ratios: against the raw store.sql count of the same store; cold: first request of a fresh server)")
    print("search cold: " + ", ".join(f"{r['sessions']:,}: {r['search_cold_ms']:.0f} ms" for r in rows))


if __name__ == "__main__":
    main(sys.argv[1:])
