"""Paging a long conversation over HTTP against reading it at once with ``get_history()``.

A real server (uvicorn on a free loopback port, a SQLite file store) serves one session
of N messages in a chain; a client pages through ``GET /sessions/{id}/conversation``
following ``nextCursor`` to the end. Printed: the time of the whole listing as a ratio
of one ``session.get_history()`` of the same path, measured in the same run (best of
``--repeat``), for each page size.

    python benchmarks/conversation_paging_bench.py                 # 20,000 messages, pages of 1,000 and 100
    python benchmarks/conversation_paging_bench.py --n 5000 --limits 1000
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

TOKEN = "paging-bench-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="messages in the conversation")
    parser.add_argument("--limits", default="1000,100", help="page sizes to list with, comma separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the best counts")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import httpx
    import uvicorn

    import sessionkit as sk
    from sessionkit.server import create_app
    from sessionkit.testing import ScriptedModel

    with tempfile.TemporaryDirectory() as tmp:
        store = sk.open_store(str(Path(tmp) / "paging.db"))
        app = create_app(sk.Agent("echo", "", ScriptedModel([])), store, token=TOKEN)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            with httpx.Client(base_url=base, headers=AUTH, timeout=600) as http:
                deadline = time.monotonic() + 30
                while not server.started:  # the server is up when uvicorn says so
                    if time.monotonic() > deadline:
                        raise SystemExit("the server did not start")
                    time.sleep(0.01)
                http.post("/sessions", json={"sessionId": "long"}).raise_for_status()
                session = store.session("long")
                roles = ("user", "assistant")
                session.append_many(
                    {
                        "id": f"m{i}",
                        "role": roles[i % 2],
                        "parts": [{"type": "text", "text": f"message {i} " + "x" * 200}],
                    }
                    for i in range(args.n)
                )
                whole = session.get_history()
                assert len(whole) == args.n

                def read_all() -> float:
                    t = time.perf_counter()
                    session.get_history()
                    return time.perf_counter() - t

                def page_through(limit: int) -> float:
                    t = time.perf_counter()
                    seen: list[str] = []
                    cursor = None
                    while True:
                        params = {"limit": str(limit)} if cursor is None else {"limit": str(limit), "cursor": cursor}
                        body = http.get("/sessions/long/conversation", params=params).json()
                        seen += [m["id"] for m in body["messages"]]
                        cursor = body["nextCursor"]
                        if cursor is None:
                            break
                    took = time.perf_counter() - t
                    assert seen == [m["id"] for m in whole], "the pages are not the conversation"
                    return took

                base_time = min(read_all() for _ in range(args.repeat))
                print(f"{args.n:,} messages; one get_history(): {base_time * 1000:.1f} ms")
                for limit in (int(x) for x in args.limits.split(",")):
                    took = min(page_through(limit) for _ in range(args.repeat))
                    pages = -(-args.n // limit)
                    print(
                        f"paging over HTTP, {pages} pages of {limit}: {took * 1000:.1f} ms"
                        f" = {took / base_time:.2f}x one get_history()"
                    )
        finally:
            server.should_exit = True
            thread.join(30)
            store.close()


if __name__ == "__main__":
    main()
