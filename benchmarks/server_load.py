"""Load test of ``sessionkit.server``: many clients, each talking to its own session.

A server process (uvicorn, one worker, a SQLite file store, the scripted model
answering ``echo: <text>``) runs on 127.0.0.1; this process runs the clients.
Each client creates a session, follows its event stream (SSE, or the WebSocket
with ``--transport ws``) and sends its messages: one at a time, and every third
time two at once, so the second joins the active run. A client waits for the end
of the run its last message went to before sending more.

Checked at the end, for every session: every message sent is in the conversation
exactly once and in order, followed by its reply; the event stream received each
stored event exactly once, ``seq`` 0, 1, 2, ... with nothing missing; the server
lists every message. Any failure exits non-zero. Besides wall-clock throughput it
prints the CPU time the server spent per message, which depends much less on what
else the machine is doing (the load average is printed too).

    python benchmarks/server_load.py                      # 50 clients x 20 messages
    python benchmarks/server_load.py --clients 10 --messages 5 --transport ws

With ``--store postgresql`` (a throwaway PostgreSQL cluster, started here with the
server's default durability) or ``--store postgresql://...``, ``--servers N`` runs N
server processes on the one store. Client *i* then follows its event stream on
server *i+1* and sends its *k*-th message to server *i+k*, so every stream shows runs
another process drives and each pair of messages sent at once goes to two servers.

    python benchmarks/server_load.py --store postgresql --servers 2

Bounded: the whole run stops with an error after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TOKEN = "load-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


# ---------------------------------------------------------------------------
# the server process


def serve(store_path: str, replies: int) -> None:
    """Run the server on a free loopback port; print the port (and CPU seconds so far), then at exit the CPU seconds."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import uvicorn

    import sessionkit as sk
    from sessionkit.server import create_app
    from sessionkit.testing import ScriptedModel

    def echo(messages: list[dict]) -> str:
        last = [m for m in messages if m["role"] == "user"][-1]["content"]
        return f"echo: {last}"

    store = sk.open_store(store_path)
    agent = sk.Agent("echo", "Repeat what you hear.", ScriptedModel([echo] * replies))
    app = create_app(agent, store, token=TOKEN, max_concurrent_runs=1_000)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(sock.getsockname()[1], f"{usage.ru_utime + usage.ru_stime:.3f}", flush=True)  # port, CPU so far
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, backlog=4096)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # the SIGINT that stopped it, raised again by uvicorn
        pass
    finally:
        store.close()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(f"cpu {usage.ru_utime + usage.ru_stime:.3f}", flush=True)


# ---------------------------------------------------------------------------
# the clients


class Client:
    def __init__(self, index: int, bases: list[str], messages: int, transport: str) -> None:
        self.sid = f"load-{index:03d}"
        self.index = index
        self.bases = bases
        self.base = bases[(index + 1) % len(bases)]  # where its event stream is read
        self.count = messages
        self.transport = transport
        self.sent: list[str] = []
        self.answers: list[dict] = []
        self.frames: list[tuple[int | None, dict]] = []
        self.latencies: list[float] = []
        self._ended: dict[str, asyncio.Event] = {}
        self._opened = asyncio.Event()

    def _ended_event(self, run_id: str) -> asyncio.Event:
        return self._ended.setdefault(run_id, asyncio.Event())

    def _frame(self, event_id: int | None, data: dict) -> None:
        self.frames.append((event_id, data))
        if data.get("kind") == "run.end":
            self._ended_event(data["run_id"]).set()

    async def follow_sse(self, http) -> None:
        async with http.stream(
            "GET", f"{self.base}/sessions/{self.sid}/events", headers=AUTH, timeout=None
        ) as response:
            response.raise_for_status()
            self._opened.set()
            event_id, data = None, []
            async for line in response.aiter_lines():
                if line == "":
                    if data:
                        self._frame(event_id, json.loads("\n".join(data)))
                    event_id, data = None, []
                elif line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))

    async def follow_ws(self, ws) -> None:
        self._opened.set()
        async for raw in ws:
            data = json.loads(raw)
            if "seq" in data:
                self._frame(data["seq"], data)
            elif "runId" in data or "error" in data:
                self._ws_replies.put_nowait(data)

    async def send(self, http, ws, text: str) -> dict:
        base = self.bases[(self.index + len(self.sent)) % len(self.bases)]
        self.sent.append(text)
        if ws is None:
            r = await http.post(f"{base}/sessions/{self.sid}/messages", json={"text": text}, headers=AUTH)
            if r.status_code != 202:
                raise RuntimeError(f"{self.sid}: {text!r} got {r.status_code} {r.text}")
            answer = r.json()
        else:
            await ws.send(json.dumps({"text": text}))
            answer = await self._ws_replies.get()
            if "runId" not in answer:
                raise RuntimeError(f"{self.sid}: {text!r} got {answer}")
        self.answers.append(answer)
        return answer

    async def talk(self, http) -> None:
        r = await http.post(f"{self.base}/sessions", json={"sessionId": self.sid}, headers=AUTH)
        r.raise_for_status()
        ws = None
        if self.transport == "ws":
            import websockets

            self._ws_replies: asyncio.Queue = asyncio.Queue()
            ws = await websockets.connect(
                f"{self.base.replace('http', 'ws', 1)}/sessions/{self.sid}/ws", additional_headers=AUTH, max_queue=None
            )
            follower = asyncio.create_task(self.follow_ws(ws))
        else:
            follower = asyncio.create_task(self.follow_sse(http))
        await asyncio.wait_for(self._opened.wait(), 30)
        try:
            n = 0
            while n < self.count:
                burst = 2 if n % 3 == 2 and n + 1 < self.count else 1
                started = time.perf_counter()
                answers = [await self.send(http, ws, f"{self.sid} message {n + k}") for k in range(burst)]
                n += burst
                for run_id in dict.fromkeys(a["runId"] for a in answers):
                    await self._ended_event(run_id).wait()
                self.latencies.append(time.perf_counter() - started)
        finally:
            follower.cancel()
            if ws is not None:
                await ws.close()
            try:
                await follower
            except (asyncio.CancelledError, Exception):
                pass


async def drive(clients: list[Client]) -> float:
    import httpx

    # Idle connections are dropped by the client before uvicorn drops them (after 5 s), so a
    # request never goes out on a connection the server is closing at that moment.
    limits = httpx.Limits(
        max_connections=len(clients) * 2 + 10, max_keepalive_connections=len(clients) * 2, keepalive_expiry=2.0
    )
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        started = time.perf_counter()
        await asyncio.gather(*(c.talk(http) for c in clients))
        return time.perf_counter() - started


# ---------------------------------------------------------------------------
# checks


def check(store_path: str, clients: list[Client]) -> dict:
    import sessionkit as sk

    problems: list[str] = []
    events_total = runs_total = queued = 0
    with sk.open_store(store_path) as store:
        for c in clients:
            history = store.session(c.sid).get_history()
            users = [m["parts"][0]["text"] for m in history if m["role"] == "user"]
            replies = [m["parts"][0]["text"] for m in history if m["role"] == "assistant"]
            if users != c.sent:
                problems.append(
                    f"{c.sid}: the conversation holds {len(users)} of {len(c.sent)} messages (or another order)"
                )
            if replies != [f"echo: {t}" for t in c.sent]:
                problems.append(f"{c.sid}: replies do not match the messages")
            stored = store.events(c.sid)
            ids = [i for i, _ in c.frames]
            if ids != list(range(len(stored))) or [d for _, d in c.frames] != stored:
                dup = len(ids) - len(set(ids))
                problems.append(
                    f"{c.sid}: the stream got {len(ids)} frames ({dup} duplicated) for {len(stored)} stored events"
                )
            records = store.session_records.get(c.sid, "server.message")
            if [r["text"] for _, r in records] != c.sent:
                problems.append(f"{c.sid}: the server lists {len(records)} messages of {len(c.sent)}")
            runs = store.runs(c.sid)
            if any(r.status != "completed" for r in runs):
                problems.append(f"{c.sid}: runs not completed: {[(r.run_id, r.status) for r in runs]}")
            events_total += len(stored)
            runs_total += len(runs)
            queued += sum(1 for a in c.answers if a["queued"])
    return {"problems": problems, "events": events_total, "runs": runs_total, "queued": queued}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20, help="messages per client")
    parser.add_argument("--transport", choices=("sse", "ws"), default="sse")
    parser.add_argument("--timeout", type=float, default=180, help="seconds before giving up")
    parser.add_argument(
        "--store",
        default="sqlite",
        help="sqlite (a temporary file, the default), postgresql (a throwaway cluster) or a postgresql:// URL",
    )
    parser.add_argument("--servers", type=int, default=1, help="server processes on the store (PostgreSQL)")
    parser.add_argument("--serve", nargs=2, metavar=("STORE", "REPLIES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    if not (1 <= args.clients <= 500 and 1 <= args.messages <= 1_000):
        parser.error("keep it bounded: 1-500 clients, 1-1000 messages each")
    if not 1 <= args.servers <= 16:
        parser.error("--servers: 1-16")
    postgres = args.store != "sqlite"
    if args.servers > 1 and not postgres:
        parser.error("--servers above 1 needs --store postgresql (a SQLite store is served by one process)")

    load_before = os.getloadavg()[0]
    folder = tempfile.mkdtemp(prefix="sessionkit-load-")
    cluster = None
    if args.store == "sqlite":
        store_path = os.path.join(folder, "load.db")
    elif args.store == "postgresql":
        sys.path.insert(0, str(HERE.parent / "tests" / "store"))
        from pg_cluster import Cluster  # tests/store/pg_cluster.py

        cluster = Cluster(durable=True).start()
        store_path = cluster.url("postgres") + f"?schema=load_{os.getpid()}"
    else:
        store_path = args.store + ("&" if "?" in args.store else "?") + f"schema=load_{os.getpid()}"
    replies = args.clients * args.messages + 10
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true")
    if postgres:
        import sessionkit as sk

        sk.open_store(store_path).close()  # the tables, before the servers start together
    servers = [
        subprocess.Popen(
            [sys.executable, __file__, "--serve", store_path, str(replies)], stdout=subprocess.PIPE, env=env
        )
        for _ in range(args.servers)
    ]
    startup_cpu: list[float] = []
    try:
        bases = []
        for server in servers:
            port_text, cpu_text = server.stdout.readline().split()
            startup_cpu.append(float(cpu_text))
            bases.append(f"http://127.0.0.1:{int(port_text)}")
        for base in bases:
            _wait_for(base)
        clients = [Client(i, bases, args.messages, args.transport) for i in range(args.clients)]
        cpu_before = _cpu()
        elapsed = asyncio.run(asyncio.wait_for(drive(clients), args.timeout))
        client_cpu = _cpu() - cpu_before
    finally:
        server_cpu = sum(_server_cpu(server) for server in servers) - (
            sum(startup_cpu) if len(startup_cpu) == len(servers) else float("nan")
        )
    load_after = os.getloadavg()[0]
    try:
        result = check(store_path, clients)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if cluster is not None:
            cluster.stop()
    sent = sum(len(c.sent) for c in clients)
    latencies = sorted(x for c in clients for x in c.latencies)
    print(
        f"sessionkit server load test ({platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {args.transport.upper()}, "
        f"{'PostgreSQL store, ' + str(args.servers) + ' server process(es)' if postgres else 'SQLite file store'}, "
        f"scripted model)"
    )
    print(
        f"  clients x messages      {args.clients} x {args.messages} = {sent} messages, "
        f"{result['queued']} sent to a busy session, {sent - result['runs']} joined a run, {result['runs']} runs"
    )
    print(f"  wall time               {elapsed:.2f} s")
    print(
        f"  throughput              {sent / elapsed:.0f} messages/s, {result['runs'] / elapsed:.0f} runs/s, "
        f"{result['events'] / elapsed:.0f} events/s streamed"
    )
    print(
        f"  round trip (send -> run.end)  p50 {_pct(latencies, 50) * 1000:.0f} ms, "
        f"p95 {_pct(latencies, 95) * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
    print(
        f"  CPU time                server {server_cpu:.1f} s ({server_cpu / sent * 1000:.1f} ms per message, "
        f"after startup), clients {client_cpu:.1f} s"
    )
    print(
        f"  machine load average    {load_before:.1f} before, {load_after:.1f} after "
        f"(other processes share the {os.cpu_count()} CPUs)"
    )
    print(
        f"  events                  {result['events']} stored, each received once and in order: "
        f"{'yes' if not result['problems'] else 'NO'}"
    )
    if result["problems"]:
        print(f"FAILED: {len(result['problems'])} problems")
        for line in result["problems"][:20]:
            print("  " + line)
        return 1
    print("  no lost message, no duplicated event")
    return 0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _server_cpu(server: subprocess.Popen) -> float:
    """The server's CPU seconds, which it prints when it stops."""
    server.send_signal(signal.SIGINT)
    try:
        out, _ = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        out, _ = server.communicate()
    for line in out.decode().splitlines():
        if line.startswith("cpu "):
            return float(line.split()[1])
    return float("nan")


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def _wait_for(base: str) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/openapi.json", timeout=1)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
