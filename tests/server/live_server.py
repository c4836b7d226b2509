"""Helpers for the HTTP tests: a uvicorn server on 127.0.0.1 in a thread, scripted agents, an SSE reader,
an authenticator naming principals by a header, and a wait for a server process to answer.

Every wait here is on a state (an event, a frame, an answer); its time limit only ends a test
that would otherwise hang, far above what a loaded machine takes."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable

import httpx
import uvicorn
from helpers import wait_until

import sessionkit as sk
from sessionkit.testing import ScriptedModel

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: How long a wait on a state may take before the test is declared hung (seconds).
HANG = 60


# ---------------------------------------------------------------------------
# scripted agents


def last_user_text(messages: list[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return content or ""
    return ""


def echo(delay: float = 0.0) -> Callable[[list[dict]], dict]:
    """A scripted reply answering ``echo: <last user text>`` after ``delay`` seconds."""

    def reply(messages: list[dict]) -> dict:
        return {"text": f"echo: {last_user_text(messages)}", "delay": delay}

    return reply


class Gate:
    """A tool that holds a run at a turn boundary until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def tool(self):
        gate = self

        async def hold() -> str:
            """Wait until the test lets the run go on."""
            gate.entered.set()
            while not gate.opened.is_set():
                await asyncio.sleep(0.01)
            return "released"

        return hold


def echo_agent(delay: float = 0.0, n: int = 500, tools=()) -> sk.Agent:
    return sk.Agent("echo", "Repeat what you hear.", ScriptedModel([echo(delay)] * n), tools=tools)


# ---------------------------------------------------------------------------
# principals


def user_of(request):
    """A sync authenticator: the ``X-User`` header names the principal (none: refused);
    ``X-User: boom`` raises, as a failing authenticator does."""
    user = request.headers.get("x-user")
    if user == "boom":
        raise PermissionError("no")
    return user or None


async def async_user_of(request):
    """:func:`user_of` as a coroutine."""
    return user_of(request)


# ---------------------------------------------------------------------------
# a live server


class PromptServer(uvicorn.Server):
    """uvicorn's server, stopping as soon as :meth:`wake` is called.

    uvicorn looks at ``should_exit`` every 0.1 s and, on the way out, sleeps a fixed 0.1 s
    before it waits for the open connections; hundreds of tests start and stop a server, and
    those waits were a tenth of the fast suite. This one is woken by :meth:`wake` and, on the
    way out, waits on the connections and tasks themselves (the same order: stop accepting,
    ask each connection to shut down, wait for them up to the graceful timeout, cancel what is
    left, then the lifespan's shutdown). uvicorn has no option for either wait.
    """

    _loop: asyncio.AbstractEventLoop | None = None
    _woken: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            try:  # the tick stays (uvicorn refreshes its Date header on it); wake() cuts it short
                await asyncio.wait_for(self._woken.wait(), 0.1)
            except TimeoutError:
                pass

    def wake(self) -> None:
        """From any thread: look at ``should_exit`` now."""
        loop, woken = self._loop, self._woken
        if loop is not None and woken is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(woken.set)
            except RuntimeError:  # the loop closed in between: the server has stopped
                pass

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        state, loop = self.server_state, asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout_graceful_shutdown or 0)
        while (state.connections or state.tasks) and not self.force_exit and loop.time() < deadline:
            await asyncio.sleep(0.005)
        for task in list(state.tasks):
            task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


class LiveServer:
    """uvicorn serving ``app`` on a free loopback port, in a thread."""

    def __init__(self, app, **config) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, **{"log_level": "warning", "lifespan": "on", "timeout_graceful_shutdown": 2, **config}
        )
        self.server = PromptServer(config)
        self.thread = threading.Thread(target=self._run, name=f"uvicorn:{self.port}", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as exc:  # startup failures end the thread
            self.error = exc

    def start(self) -> LiveServer:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError(f"the server did not start: {self.error!r}")
            return self.server.started

        wait_until(started, timeout=HANG, what="the server to start")
        return self

    def stop(self) -> None:
        if self.thread.is_alive():
            # As on SIGINT/SIGTERM in `sessionkit serve`: end the event streams, then stop.
            server = getattr(self.app.state, "sessionkit", None)  # None: another app (the viewer)
            loop = getattr(server.sessions, "loop", None) if server is not None else None
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self.app.state.sessionkit.sessions.close_streams, "server_stopping")
                except RuntimeError:
                    pass
            self.server.should_exit = True
            self.server.wake()
            self.thread.join(HANG)
            assert not self.thread.is_alive(), "the server did not stop"
        self.sock.close()

    def client(self, headers: dict | None = AUTH, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=headers or {}, timeout=HANG, **kwargs)


# ---------------------------------------------------------------------------
# an event-stream reader


class SSEReader:
    """Reads ``GET /sessions/{id}/events`` over a plain socket in a thread.

    ``frames`` are ``(id, data)`` in arrival order. ``close()`` shuts the socket
    down, which is what a client going away looks like to the server.
    """

    def __init__(self, url: str, headers: dict | None = None) -> None:
        parsed = httpx.URL(url)
        self.host, self.port = parsed.host, parsed.port
        self.target = parsed.raw_path.decode()
        self.headers = dict(AUTH if headers is None else headers)
        self.frames: list[tuple[int | None, dict]] = []
        self.comments = 0
        self.status: int | None = None
        self.body = b""
        self.ended = threading.Event()
        self.opened = threading.Event()
        self._cond = threading.Condition()
        self._sock = socket.create_connection((self.host, self.port), timeout=HANG)
        self._sock.settimeout(None)  # an idle stream is not an ended one: the reader waits as long as it is open
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.opened.wait(HANG), "the event stream did not open"

    def _read(self) -> None:
        try:
            lines = [f"GET {self.target} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept: text/event-stream"]
            lines += [f"{k}: {v}" for k, v in self.headers.items()]
            self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            reader = self._sock.makefile("rb")
            status = reader.readline().decode()
            self.status = int(status.split()[1])
            headers = {}
            while True:
                line = reader.readline().decode().strip()
                if not line:
                    break
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            self.opened.set()
            chunks = self._chunks(reader) if headers.get("transfer-encoding") == "chunked" else None
            if self.status != 200:
                self.body = (
                    b"".join(chunks) if chunks is not None else reader.read(int(headers.get("content-length", 0)))
                )
                return
            buffer = b""
            for chunk in chunks:
                buffer += chunk
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    self._frame(block.decode())
        except (OSError, ValueError):
            pass
        finally:
            self.opened.set()
            self.ended.set()
            with self._cond:
                self._cond.notify_all()

    @staticmethod
    def _chunks(reader):
        while True:
            size_line = reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                reader.readline()
                return
            data = reader.read(size)
            reader.readline()
            yield data

    def _frame(self, block: str) -> None:
        event_id, data = None, []
        for line in block.split("\n"):
            if line.startswith(":"):
                self.comments += 1
            elif line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            with self._cond:
                self.frames.append((event_id, json.loads("\n".join(data))))
                self._cond.notify_all()

    def wait(self, predicate: Callable[[list], bool], timeout: float = HANG) -> list:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.frames):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting on the event stream; got {self.frames!r}")
                self._cond.wait(min(left, 0.2))
            return list(self.frames)

    def events(self) -> list[dict]:
        with self._cond:
            return [d for _, d in self.frames if "seq" in d]

    def wait_runs_ended(self, count: int, timeout: float = HANG) -> list:
        return self.wait(lambda fs: sum(1 for _, d in fs if d.get("kind") == "run.end") >= count, timeout)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(HANG)


def wait_idle(client: httpx.Client, session_id: str, timeout: float = HANG) -> dict:
    """Poll ``GET /sessions/{id}`` until no run is active and nothing is queued."""
    seen: list[dict] = []

    def idle() -> dict | None:
        state = client.get(f"/sessions/{session_id}").json()
        seen[:] = [state]
        if state["active"] is None and state["queued"] == 0 and all(r["status"] != "running" for r in state["runs"]):
            return state
        return None

    try:
        return wait_until(idle, timeout=timeout, interval=0.02)
    except AssertionError:
        raise AssertionError(f"session {session_id} still busy: {seen[-1] if seen else None}") from None


def wait_serving(
    url: str, proc: subprocess.Popen | None = None, *, output: Callable[[], str] = lambda: "", timeout: float = HANG
) -> None:
    """Until ``GET {url}/openapi.json`` answers 200: a server process is up. Fails at once,
    with ``output()`` (its log), if ``proc`` exits first."""

    def up() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {output()}")
        try:
            return httpx.get(f"{url}/openapi.json", timeout=HANG).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, timeout=timeout, interval=0.05, what=f"a server answering at {url}")
    except AssertionError as exc:
        if proc is not None and proc.poll() is not None:
            raise
        raise AssertionError(f"{exc}: {output()}") from None


def seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events]
