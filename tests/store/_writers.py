"""Writer processes for the crash and concurrency tests, and the messages they write.

Run as a script::

    python _writers.py crash PATH SESSION START CHUNK_CHARS BUILD_INDEX
    python _writers.py concurrent PATH NAME COUNT SEARCH_AT ALL_NAMES

``crash`` appends ``crash_message(n)`` for n = START, START+1, ... until killed, printing
``try n`` before each append and ``ok n`` right after it returns (flushed each time).
``concurrent`` prints ``ready``, waits for a line on stdin, runs :func:`concurrent_writer`
(``ALL_NAMES``: every writer's name, comma-separated) and prints ``done``.
"""

from __future__ import annotations

import base64
import sys
import traceback
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:  # run as a script: the shared helpers are in tests/
    sys.path.insert(0, _TESTS)

from helpers import payload, wait_until  # noqa: E402 (tests/ is on the path only now)

CRASH_SESSION = "crash"
SHARED = "shared"  # every writer appends here with the default parent
BRANCHES = "branches"  # every writer appends here under its own previous message


def crash_message(n: int) -> dict:
    """Message number ``n``: its whole content follows from ``n``.

    Every fourth one is several continuation rows long (with a small ``chunk_chars``),
    every fifth carries a 4 KiB+ inline file payload (three payloads shared between them,
    alternately as a ``data:`` URL and as a ``data`` field), every third has a ``createdAt``.
    """
    mid = f"n{n:05d}"
    filler = " ".join(f"w{(n * 7 + i) % 97}" for i in range(8))
    parts = [{"type": "text", "text": f"message {mid} {filler}"}]
    if n % 4 == 1:
        parts.append({"type": "text", "text": ("lorem ipsum dolor sit amet " * 200)[: 3000 + (n * 37) % 900]})
    if n % 5 == 2:
        raw = payload(f"crash-payload-{n % 3}", 4096 + (n % 3) * 1500)
        encoded = base64.b64encode(raw).decode("ascii")
        if n % 2:
            parts.append({"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + encoded})
        else:
            parts.append({"type": "file", "mediaType": "application/pdf", "data": encoded})
    if n % 6 == 3:
        parts.append(
            {
                "type": "tool-lookup",
                "toolCallId": f"c{n}",
                "state": "output-available",
                "input": {"n": n},
                "output": {"square": n * n},
            }
        )
    msg = {"id": mid, "role": ("user", "assistant")[n % 2], "parts": parts, "metadata": {"n": n}}
    if n % 3 == 0:
        msg["createdAt"] = f"2024-01-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00.{n % 1000:03d}Z"
    return msg


def crash_writer(path: str, session_id: str, start: int, chunk_chars: int, build_index: bool) -> None:
    import sessionkit as sk

    store = sk.open_store(path, chunk_chars=chunk_chars)
    if build_index:
        store.search("message")  # the first search builds the index; later writes keep it current
    session = store.session(session_id)
    n = start
    out = sys.stdout
    while True:
        out.write(f"try {n}\n")
        out.flush()
        session.append(crash_message(n))
        out.write(f"ok {n}\n")
        out.flush()
        n += 1


def writer_message(name: str, i: int, where: str) -> dict:
    return {
        "id": f"{name}-{i}",
        "role": ("user", "assistant")[i % 2],
        "parts": [{"type": "text", "text": f"{where} {name} number {i}"}],
        "metadata": {"writer": name, "i": i},
    }


def concurrent_writer(store, name: str, count: int, search_at: int = -1, names: tuple[str, ...] = ()) -> None:
    """Append ``count`` messages to the writer's own session, to ``SHARED`` (default parent)
    and to ``BRANCHES`` (under the writer's own previous message), retrying some
    appends to show a retry writes nothing; after ``search_at`` messages, search (the
    first search in a store builds the index while the others keep writing).

    Halfway, the writer waits until every writer of ``names`` has a message in ``SHARED``:
    so all of them were writing at one moment, however the machine schedules them."""
    own = store.session(f"own-{name}")
    shared = store.session(SHARED)
    branches = store.session(BRANCHES)
    for i in range(count):
        if i == count // 2:
            wait_until(
                lambda: all(shared.get(f"{other}-0") is not None for other in names),
                timeout=300,
                what=f"{name}: every writer's first message",
            )
        if i == search_at:
            store.search("number")
        assert own.append(writer_message(name, i, "own")).inserted
        assert shared.append(writer_message(name, i, "shared")).inserted
        parent = None if i == 0 else f"{name}-{i - 1}"
        assert branches.append(writer_message(name, i, "branch"), parent_id=parent).inserted
        if i % 10 == 5:  # a retried append is a no-op
            again = shared.append(writer_message(name, i - 3, "retried"))
            assert not again.inserted and again.message["parts"][0]["text"].startswith("shared ")
            again = branches.append(writer_message(name, i - 2, "retried"), parent_id=f"{name}-{i}")
            assert not again.inserted


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "crash":
        path, session_id, start, chunk, build = argv[1:6]
        crash_writer(path, session_id, int(start), int(chunk), build == "1")
        return 0
    if mode == "concurrent":
        import sessionkit as sk

        path, name, count, search_at, names = argv[1:6]
        store = sk.open_store(path)
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            concurrent_writer(store, name, int(count), int(search_at), tuple(names.split(",")))
        except BaseException:
            traceback.print_exc()
            return 1
        finally:
            store.close()
        print("done", flush=True)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
