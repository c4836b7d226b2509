"""The server lease (H5): one server per SQLite/DuckDB store file; the second one names the holder.

On SQLite files only: a PostgreSQL store holds no lease (several servers share it, see
test_workers.py), and the lease is the same code for a DuckDB file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

import httpx
import pytest
from helpers import free_port
from live_server import AUTH, HANG, TOKEN, SSEReader, echo_agent, wait_serving

import sessionkit as sk
from sessionkit.server import create_app


def test_a_second_server_on_the_same_file_refuses_to_start_naming_the_holder(tmp_path, serve):
    path = tmp_path / "leased.db"
    first = sk.open_store(path)
    live = serve(echo_agent(), first)
    second = sk.open_store(path)
    with pytest.raises(sk.StoreLocked) as info:
        create_app(echo_agent(), second, token=TOKEN)
    message = str(info.value)
    assert f"pid {os.getpid()}" in message and socket.gethostname() in message and "started 20" in message
    assert str(path) in message
    live.stop()  # shutting down gives the lease back
    app = create_app(echo_agent(), second, token=TOKEN)
    app.state.sessionkit.close()
    first.close()
    second.close()


def test_a_server_in_another_process_is_refused_too(tmp_path, serve):
    path = tmp_path / "leased.db"
    live = serve(echo_agent(), sk.open_store(path))
    code = textwrap.dedent(
        f"""
        import sys, sessionkit as sk
        from sessionkit.server import create_app
        from sessionkit.testing import ScriptedModel
        store = sk.open_store({str(path)!r})
        try:
            create_app(sk.Agent("a", "", ScriptedModel([])), store, token={TOKEN!r})
        except sk.StoreLocked as exc:
            print(exc)
            sys.exit(3)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG)
    assert out.returncode == 3, out.stderr
    assert f"pid {os.getpid()}" in out.stdout and "already served" in out.stdout
    assert httpx.get(f"{live.url}/sessions/x", headers=AUTH).status_code == 404  # the first one carries on


def test_in_memory_stores_hold_no_lease():
    a = create_app(echo_agent(), sk.open_store(), token=TOKEN)
    b = create_app(echo_agent(), sk.open_store(), token=TOKEN)
    assert a.state.sessionkit.lease is None and b.state.sessionkit.lease is None


AGENT_MODULE = textwrap.dedent(
    """
    import sessionkit as sk
    from sessionkit.testing import ScriptedModel

    agent = sk.Agent("cli", "", ScriptedModel(["hi"] * 10))
    """
)


def _output(proc: subprocess.Popen) -> str:
    """What a server process printed (it is stopped first if it still runs)."""
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=HANG)
    return out + err


@pytest.mark.kill
@pytest.mark.slow
def test_sessionkit_serve_refuses_a_second_server_and_stops_on_sigint_with_open_streams(tmp_path):
    (tmp_path / "cli_agent.py").write_text(AGENT_MODULE)
    store = str(tmp_path / "cli.db")
    port = free_port()
    env = dict(os.environ, SESSIONKIT_TOKEN=TOKEN, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true")
    cmd = [
        sys.executable,
        "-m",
        "sessionkit",
        "serve",
        "--store",
        store,
        "--agent",
        "cli_agent:agent",
        "--host",
        "127.0.0.1",
    ]
    first = subprocess.Popen(
        cmd + ["--port", str(port)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    reader = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_serving(url, first, output=lambda: _output(first))
        second = subprocess.run(
            cmd + ["--port", str(free_port())], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG
        )
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "already served" in lines[0], second.stderr
        # a client keeps an event stream open; Ctrl-C still stops the server promptly: the
        # server ends the stream itself rather than waiting out its graceful-shutdown time
        httpx.post(f"{url}/sessions", json={"sessionId": "s"}, headers=AUTH)
        reader = SSEReader(f"{url}/sessions/s/events")
        first.send_signal(signal.SIGINT)
        _, log = first.communicate(timeout=HANG)
        assert reader.ended.wait(HANG)
        assert "timeout graceful shutdown exceeded" not in log, log
    finally:
        if reader is not None:
            reader.close()
        if first.poll() is None:
            first.kill()
            first.wait()
    # and the lease is free again
    with sk.open_store(store) as again:
        create_app(echo_agent(), again, token=TOKEN).state.sessionkit.close()


@pytest.mark.kill
def test_the_holder_is_named_by_pid_and_program_never_its_arguments(tmp_path):
    path = tmp_path / "secret.db"
    holder = textwrap.dedent(
        f"""
        import sys, sessionkit as sk
        from sessionkit.server import create_app
        from sessionkit.testing import ScriptedModel
        app = create_app(sk.Agent("a", "", ScriptedModel([])), sk.open_store({str(path)!r}), token={TOKEN!r})
        print("ready", flush=True)
        sys.stdin.read()  # holds the lease until the test is done with it (closes stdin or kills it)
        """
    )
    secret = "--api-key=sk-very-secret-0123456789"
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, secret], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        with sk.open_store(path) as second:
            with pytest.raises(sk.StoreLocked) as info:
                create_app(echo_agent(), second, token=TOKEN)
        message = str(info.value)
        assert f"pid {proc.pid} (" in message and "python" in message.lower()
        assert "very-secret" not in message and "api-key" not in message and "import" not in message
    finally:
        proc.kill()
        proc.wait(HANG)
