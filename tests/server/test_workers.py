"""Several server processes on one PostgreSQL store (issue: PostgreSQL engine).

Each worker is a real ``sessionkit serve`` process on its own 127.0.0.1 port (and,
last, ``--workers 2`` sharing one port), all on one store of the throwaway
PostgreSQL server of ``tests/store/pg_cluster.py``. The agent module they serve is
written to a temporary folder: a scripted model that echoes, and a ``hold`` tool
that keeps a run at a turn boundary until the test creates a file.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import pytest
from helpers import free_port, wait_until
from live_server import AUTH, HANG, TOKEN, SSEReader, wait_idle, wait_serving

pytest.importorskip("psycopg")

# PostgreSQL only: several server processes share a store only there (a SQLite or DuckDB
# file is leased to one server, see test_lease.py). Slow: each test starts worker processes.
pytestmark = pytest.mark.slow

AGENT = textwrap.dedent('''
    import os, pathlib, time
    import sessionkit as sk
    from sessionkit.testing import ScriptedModel

    GATE = pathlib.Path(os.environ["GATE_DIR"])

    def last_user_text(messages):
        for m in reversed(messages):
            if m.get("role") == "user":
                c = m.get("content")
                return "".join(b.get("text", "") for b in c) if isinstance(c, list) else (c or "")
        return ""

    def reply(messages):
        text = last_user_text(messages)
        if messages[-1].get("role") == "user" and text.startswith("hold"):
            return {"text": "holding", "tool_calls": [{"name": "hold", "arguments": {}}]}
        return {"text": f"echo: {text}", "delay": float(os.environ.get("REPLY_DELAY", "0"))}

    def hold() -> str:
        """Wait until the test opens the gate."""
        (GATE / "entered").touch()
        while not (GATE / "open").exists():
            time.sleep(0.01)
        return "released"

    agent = sk.Agent("echo", "Repeat what you hear.", ScriptedModel([reply] * 100000), tools=[hold])
''')


class Worker:
    """A ``sessionkit serve`` process on its own port."""

    def __init__(self, folder: Path, store_url: str, *, workers: int = 1, delay: float = 0.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(
            os.environ,
            SESSIONKIT_TOKEN=TOKEN,
            GATE_DIR=str(folder / "gate"),
            REPLY_DELAY=str(delay),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            LITELLM_OFFLINE_MODE="true",
        )
        self.log = open(folder / f"worker-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sessionkit",
                "serve",
                "--store",
                store_url,
                "--agent",
                "workers_agent:agent",
                "--port",
                str(self.port),
                "--workers",
                str(workers),
            ],
            cwd=folder,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_serving(self.url, self.proc, output=self.output)
        self.client = httpx.Client(base_url=self.url, headers=AUTH, timeout=HANG)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(HANG)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(HANG)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def cluster(tmp_path, pg_store_url):
    """``start(n, **options) -> [Worker]``: n servers on one new store; all stopped at the end."""
    (tmp_path / "workers_agent.py").write_text(AGENT)
    (tmp_path / "gate").mkdir()
    url = pg_store_url()
    started: list[Worker] = []

    def start(n: int, **options) -> list[Worker]:
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            workers = list(pool.map(lambda _: Worker(tmp_path, url, **options), range(n)))
        started.extend(workers)
        return workers

    start.url = url
    start.gate = tmp_path / "gate"
    yield start
    for worker in started:
        worker.stop()
        # shown only when the test fails: what each worker logged
        print(f"--- worker on port {worker.port}:\n{worker.output()}")


def _wait_file(path: Path) -> None:
    wait_until(path.exists, what=f"{path.name} to appear")


def _wait_absorbed(url: str, session_id: str) -> None:
    """Until the worker driving the session has taken every message other workers accepted."""
    import sessionkit as sk

    with sk.open_store(url) as store:
        wait_until(
            lambda: not any(v.get("pending") for _, v in store.session_records.get(session_id, "server.message")),
            interval=0.02,
            what="the owner to take the message",
        )


def _conversation(url: str, session_id: str) -> list[tuple[str, str]]:
    import sessionkit as sk

    with sk.open_store(url) as store:
        return [
            (m["role"], "".join(p.get("text", "") for p in m["parts"] if p.get("type") == "text"))
            for m in store.session(session_id).history()
            if m["role"] in ("user", "assistant")
        ]


def _wait_recorded_start(url: str, session_id: str, attempts: int) -> None:
    """Until the store holds the run's start and its attempt count (a worker writes both on its
    store thread after the agent has begun, so a worker frozen too early would leave neither)."""
    import sessionkit as sk

    with sk.open_store(url) as store:
        wait_until(
            lambda: (
                store.runs(session_id)
                and any(
                    v.get("attempts") == attempts and v.get("state") == "running"
                    for v in dict(store.session_records.get(session_id, "server.run")).values()
                )
            ),
            interval=0.02,
            what=f"the recorded start of attempt {attempts}",
        )


def test_a_message_to_one_worker_is_seen_by_a_stream_on_another(cluster):
    a, b = cluster(2)
    assert a.client.post("/sessions", json={"sessionId": "chat"}).status_code == 201
    assert b.client.post("/sessions", json={"sessionId": "chat"}).status_code == 200  # one session, both see it
    on_b = SSEReader(f"{b.url}/sessions/chat/events")
    on_a = SSEReader(f"{a.url}/sessions/chat/events")
    try:
        assert a.client.post("/sessions/chat/messages", json={"text": "one"}).json() == {
            "runId": "chat.1",
            "queued": False,
        }
        frames = on_b.wait_runs_ended(1)
        wait_idle(a.client, "chat")
        assert b.client.post("/sessions/chat/messages", json={"text": "two"}).json() == {
            "runId": "chat.2",
            "queued": False,
        }
        frames = on_b.wait_runs_ended(2)
        frames_a = on_a.wait_runs_ended(2)
    finally:
        on_b.close()
        on_a.close()
    for seen in (frames, frames_a):  # every event of both runs, once each, in order, on both workers
        assert [s for s, _ in seen] == list(range(len(seen)))
        assert [(d["kind"], d["run_id"]) for _, d in seen if d["kind"] in ("run.start", "run.end")] == [
            ("run.start", "chat.1"),
            ("run.end", "chat.1"),
            ("run.start", "chat.2"),
            ("run.end", "chat.2"),
        ]
        assert "".join(d["text"] for _, d in seen if d["kind"] == "delta.text") == "echo: oneecho: two"
    assert frames == frames_a
    state = wait_idle(b.client, "chat")
    assert [(r["runId"], r["status"]) for r in state["runs"]] == [("chat.1", "completed"), ("chat.2", "completed")]
    assert a.client.get("/sessions/chat").json() == state


def test_a_message_to_a_busy_session_on_another_worker_joins_the_active_run(cluster):
    a, b = cluster(2)
    a.client.post("/sessions", json={"sessionId": "chat"})
    stream = SSEReader(f"{b.url}/sessions/chat/events")
    try:
        assert a.client.post("/sessions/chat/messages", json={"text": "hold on"}).json() == {
            "runId": "chat.1",
            "queued": False,
        }
        _wait_file(cluster.gate / "entered")
        assert b.client.post("/sessions/chat/messages", json={"text": "two", "author": "bo"}).json() == {
            "runId": "chat.1",
            "queued": True,
        }
        busy = b.client.get("/sessions/chat").json()  # the other worker reports the owner's run
        assert busy["active"] == "chat.1"
        assert [(m["runId"], m["text"], m["queued"]) for m in busy["messages"]] == [
            ("chat.1", "hold on", False),
            ("chat.1", "two", True),
        ]
        _wait_absorbed(cluster.url, "chat")  # the owner has it (told through the store), then the run goes on
        (cluster.gate / "open").touch()
        frames = stream.wait_runs_ended(1)
    finally:
        stream.close()
    state = wait_idle(b.client, "chat")
    assert [(r["runId"], r["status"]) for r in state["runs"]] == [("chat.1", "completed")]
    assert state["messages"][1]["author"] == "bo"
    inputs = [d.get("input") for _, d in frames if d["kind"] == "turn.start"]
    assert "two" in inputs  # taken by the run on the other worker, at a turn boundary
    assert _conversation(cluster.url, "chat")[-2:] == [("user", "two"), ("assistant", "echo: two")]


def test_runs_are_numbered_once_across_workers_under_concurrent_messages(cluster):
    # a model that takes a moment to answer, so messages meet active runs; the numbering must
    # hold whatever the timing, which is all that is checked
    workers = cluster(3, delay=0.05)
    sessions = [f"s{i}" for i in range(6)]
    for sid in sessions:
        assert workers[0].client.post("/sessions", json={"sessionId": sid}).status_code == 201
    jobs = [(sid, f"{sid} message {k}", workers[(i + k) % 3]) for k in range(5) for i, sid in enumerate(sessions)]

    def send(job):
        sid, text, worker = job
        with httpx.Client(base_url=worker.url, headers=AUTH, timeout=HANG) as c:
            r = c.post(f"/sessions/{sid}/messages", json={"text": text})
        return sid, text, r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, jobs))
    assert all(status == 202 for _, _, status, _ in answers), answers
    for sid in sessions:
        state = wait_idle(workers[1].client, sid)
        said = {text: answer["runId"] for s, text, _, answer in answers if s == sid}
        run_ids = [r["runId"] for r in state["runs"]]
        assert len(run_ids) == len(set(run_ids)) and all(r["status"] == "completed" for r in state["runs"]), state
        assert run_ids == [f"{sid}.{n}" for n in range(1, len(run_ids) + 1)]
        recorded = {m["text"]: m["runId"] for m in state["messages"]}
        assert recorded.keys() == said.keys()
        assert set(recorded.values()) <= set(run_ids)
        talk = _conversation(cluster.url, sid)
        users = [t for role, t in talk if role == "user"]
        assert sorted(users) == sorted(said)  # every message answered, none twice
        assert [t for role, t in talk if role == "assistant"] == [f"echo: {u}" for u in users]


def test_a_run_another_worker_opened_keeps_its_message_when_the_owner_takes_several_at_once(serve, new_store):
    # Two servers on one PostgreSQL store, in this process (each on a store object of its own,
    # so each holds and signals as a process would). B accepts two messages while A drives the
    # session: one for A's active run (A's status said it was taking messages), one with a
    # context, which opens run 2 (recorded "queued"; the caller is told "q.2"); its context
    # reaches A's model through the pending record, which drops it once taken. A misses B's
    # signals (a listener reconnecting loses them), so it takes both at once, as its run ends:
    # the first needs a run of its own (3). Run 2 must keep its message and run, before 3: a
    # run left with none would be recorded failed by the next takeover.
    from live_server import Gate, echo

    import sessionkit as sk
    from sessionkit.testing import ScriptedModel

    store_a = new_store("postgresql")
    store_b = sk.open_store(store_a.path)
    try:
        gate = Gate()
        model_a = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 20)
        a = serve(sk.Agent("w", "", model_a, tools=[gate.tool()]), store_a)
        b = serve(sk.Agent("w", "", ScriptedModel([echo()] * 20), tools=[gate.tool()]), store_b)

        async def signal_lost(live):
            return None

        a.app.state.sessionkit.scheduler.absorb = signal_lost
        with a.client() as ca, b.client() as cb:
            assert ca.post("/sessions", json={"sessionId": "q"}).status_code == 201
            assert ca.post("/sessions/q/messages", json={"text": "start"}).json() == {"runId": "q.1", "queued": False}
            assert gate.entered.wait(HANG)
            assert cb.post("/sessions/q/messages", json={"text": "first"}).json() == {"runId": "q.1", "queued": True}
            marker = "CONTEXT-ACROSS-WORKERS-7"
            assert cb.post("/sessions/q/messages", json={"text": "second", "context": {"k": marker}}).json() == {
                "runId": "q.2",
                "queued": True,
            }
            gate.opened.set()

            def settled(client):
                """Idle, and the run of every message accepted so far has ended (a message another
                worker holds for the session is not "queued" in the state that is read)."""
                state = wait_idle(client, "q")
                ended = {r["runId"] for r in state["runs"] if r["status"] != "running"}
                return state if all(m["runId"] in ended for m in state["messages"]) else None

            wait_until(lambda: settled(ca), what="every run of A to end")
            # a message to B now: B takes the session over (its recovery finds nothing left to do)
            assert cb.post("/sessions/q/messages", json={"text": "third"}).status_code == 202
            state = wait_until(lambda: settled(cb), what="the run of the message to B to end")
        runs = state["runs"]
        assert all(r["status"] == "completed" for r in runs), runs
        assert [r["runId"] for r in runs] == [f"q.{n}" for n in range(1, len(runs) + 1)], runs
        recorded = {m["text"]: m["runId"] for m in state["messages"]}
        assert recorded["second"] == "q.2"  # the run its caller was told
        talk = [
            (m["role"], m["parts"][0].get("text"))
            for m in store_a.session("q").history()
            if m["role"] in ("user", "assistant")
        ]
        users = [text for role, text in talk if role == "user"]
        assert sorted(users) == ["first", "second", "start", "third"]  # each once, the prompt alone
        answers = [text for role, text in talk if role == "assistant"][-len(users) + 1 :]
        assert [t.startswith("echo: ") and t.endswith(u) for t, u in zip(answers, users[1:])] == [True] * 3
        shown = [json.dumps(call) for call in model_a.calls if "second" in json.dumps(call)]
        assert shown and marker in shown[0]  # the run "second" opened showed its context
        for kind in ("server.message", "server.run", "server.status"):
            assert marker not in json.dumps(store_a.session_records.get("q", kind))  # and it is stored nowhere now
    finally:
        store_b.close()


def test_delete_on_one_worker_stops_the_run_on_another(cluster):
    a, b = cluster(2)
    a.client.post("/sessions", json={"sessionId": "chat"})
    stream = SSEReader(f"{a.url}/sessions/chat/events")
    try:
        a.client.post("/sessions/chat/messages", json={"text": "hold it"})
        _wait_file(cluster.gate / "entered")
        assert b.client.delete("/sessions/chat").json() == {"sessionId": "chat", "status": "deleted"}
        assert stream.ended.wait(HANG)  # the owner closed its readers
    finally:
        stream.close()
    for worker in (a, b):
        assert worker.client.get("/sessions/chat").status_code == 404
        assert worker.client.post("/sessions/chat/messages", json={"text": "x"}).status_code == 404
    import sessionkit as sk

    with sk.open_store(cluster.url) as store:
        assert "chat" not in store.list_sessions()
    # the id can be used again, on either worker, from scratch (its run ids are never used again)
    assert b.client.post("/sessions", json={"sessionId": "chat"}).status_code == 201
    (cluster.gate / "open").touch()
    assert a.client.post("/sessions/chat/messages", json={"text": "again"}).json() == {
        "runId": "chat.2",
        "queued": False,
    }
    assert [(r["runId"], r["status"]) for r in wait_idle(b.client, "chat")["runs"]] == [("chat.2", "completed")]


@pytest.mark.kill
def test_a_killed_worker_s_run_starts_again_on_another_worker_with_what_it_accepted(cluster):
    a, b = cluster(2)
    a.client.post("/sessions", json={"sessionId": "chat"})
    a.client.post("/sessions/chat/messages", json={"text": "hold this"})
    _wait_file(cluster.gate / "entered")
    assert b.client.get("/sessions/chat").json()["active"] == "chat.1"
    _wait_recorded_start(cluster.url, "chat", attempts=1)  # a's start is written behind the agent's back
    os.killpg(a.proc.pid, signal.SIGSTOP)  # frozen: it still holds the session but takes nothing
    # The message goes to b while a is frozen. a may be frozen inside one of its own store
    # transactions, whose locks b's decision then waits for until a is gone: so the message
    # is sent from a thread, and a is killed while it may wait.
    answer: dict = {}
    sender = threading.Thread(
        target=lambda: answer.update(b.client.post("/sessions/chat/messages", json={"text": "two"}).json()),
        daemon=True,
    )
    sender.start()
    a.kill()  # SIGKILL mid-run: its connections, and the hold on the session, go with it
    sender.join(timeout=HANG)  # a hang guard: nothing of a's holds the session now
    assert answer == {"runId": "chat.1", "queued": True}
    (cluster.gate / "open").touch()
    # nobody asks: the other worker finds the session (its sweep), closes the dead run and starts it again
    state = wait_idle(b.client, "chat")
    assert [(r["runId"], r["status"], r["attempts"]) for r in state["runs"]] == [("chat.1", "completed", 2)]
    assert [(m["text"], m["runId"]) for m in state["messages"]] == [("hold this", "chat.1"), ("two", "chat.1")]
    talk = _conversation(cluster.url, "chat")
    assert [t for role, t in talk if role == "user"] == ["hold this", "two"]
    assert talk[-1] == ("assistant", "echo: two")
    assert b.client.post("/sessions/chat/messages", json={"text": "next"}).json() == {
        "runId": "chat.2",
        "queued": False,
    }
    assert [r["status"] for r in wait_idle(b.client, "chat")["runs"]] == ["completed", "completed"]


@pytest.mark.kill
def test_a_dead_worker_s_run_is_the_session_s_active_run_until_another_takes_it_over(cluster, serve, monkeypatch):
    # A worker process drives a run and is killed (SIGKILL). Another server on the store (in this
    # process, its sweep made to run only at its start, so the session stays as the dead worker
    # left it until a message asks for it) reads the session meanwhile: the run its records show
    # running is its active run, in GET /sessions/{id} and in GET /sessions alike, never
    # "active: null" beside a run listed running. A message then has it taken over: the run is
    # closed and started again under the same id (attempt 2), and completes.
    from live_server import echo_agent

    import sessionkit as sk
    from sessionkit.server._coordinate import SharedCoordinator

    monkeypatch.setattr(SharedCoordinator, "sweep_every", None)
    (a,) = cluster(1)
    store_b = sk.open_store(cluster.url)
    try:
        b = serve(echo_agent(), store_b)
        with b.client() as cb:
            assert a.client.post("/sessions", json={"sessionId": "chat"}).status_code == 201
            assert a.client.post("/sessions/chat/messages", json={"text": "hold this"}).status_code == 202
            _wait_file(cluster.gate / "entered")
            _wait_recorded_start(cluster.url, "chat", attempts=1)
            assert cb.get("/sessions/chat").json()["active"] == "chat.1"  # a's own view, through the store
            a.kill()
            # PostgreSQL has let go of the dead worker's hold on the session: nobody drives it now
            wait_until(
                lambda: not store_b.coordination.hold_taken("server.run\x00chat"), what="the dead worker's hold to go"
            )
            state = cb.get("/sessions/chat").json()
            assert [(r["runId"], r["status"]) for r in state["runs"]] == [("chat.1", "running")], state
            assert (state["active"], state["queued"]) == ("chat.1", 0), state
            (listed,) = cb.get("/sessions").json()["sessions"]
            assert (listed["sessionId"], listed["active"], listed["queued"]) == ("chat", "chat.1", 0)
            # a message has b take the session over: the dead run starts again, the message joins or follows it
            assert cb.post("/sessions/chat/messages", json={"text": "two"}).status_code == 202
            state = wait_idle(cb, "chat")
        assert [(r["runId"], r["status"]) for r in state["runs"]][0] == ("chat.1", "completed"), state
        assert state["runs"][0]["attempts"] == 2
        assert all(r["status"] == "completed" for r in state["runs"]), state
        assert [m["text"] for m in state["messages"]] == ["hold this", "two"]
    finally:
        store_b.close()


def test_serve_workers_shares_one_port_between_processes(cluster):
    (server,) = cluster(1, workers=2)
    workers = _worker_pids(server.proc.pid)
    assert len(workers) == 2
    sessions = [f"w{i}" for i in range(8)]
    for sid in sessions:
        assert server.client.post("/sessions", json={"sessionId": sid}).status_code == 201
    streams = {sid: SSEReader(f"{server.url}/sessions/{sid}/events") for sid in sessions}
    try:
        for k in range(2):
            for sid in sessions:  # a new connection each: the kernel hands them to either worker
                with httpx.Client(base_url=server.url, headers=AUTH) as c:
                    assert c.post(f"/sessions/{sid}/messages", json={"text": f"{sid}-{k}"}).status_code == 202
        for sid, stream in streams.items():
            frames = stream.wait(
                lambda fs, sid=sid: any(d.get("kind") == "delta.text" and d["text"] == f"{sid}-1" for _, d in fs),
                timeout=HANG,
            )
            assert [s for s, _ in frames] == list(range(len(frames)))
    finally:
        for stream in streams.values():
            stream.close()
    owners = set()
    import sessionkit as sk

    with sk.open_store(cluster.url) as store:
        for sid in sessions:
            owners.update(v["owner"] for _, v in store.session_records.get(sid, "server.status"))
    assert owners  # each owner is "host:pid" of a worker process
    assert {int(o.rsplit(":", 1)[1]) for o in owners} <= workers


def _worker_pids(parent: int) -> set[int]:
    """The pids of uvicorn's worker processes under ``parent`` (read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and "spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def test_workers_above_one_need_postgresql(tmp_path):
    env = dict(os.environ, SESSIONKIT_TOKEN=TOKEN)
    (tmp_path / "workers_agent.py").write_text(AGENT)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sessionkit",
            "serve",
            "--store",
            str(tmp_path / "x.db"),
            "--agent",
            "workers_agent:agent",
            "--workers",
            "2",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert out.returncode != 0
    assert "--workers above 1 needs a PostgreSQL store" in out.stderr
    assert not (tmp_path / "x.db").exists()
