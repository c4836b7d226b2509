"""Sessions over HTTP (SPEC section 9): a Starlette app that owns sessions and their runs.

::

    import sessionkit as sk

    store = sk.open_store("chats.db")
    agent = sk.Agent("helper", "You are concise.", "gpt-4o-mini")
    app = sk.server.create_app(agent, store, token=os.environ["SESSIONKIT_TOKEN"])
    # uvicorn.run(app, host="127.0.0.1", port=8000)   or:   sessionkit serve --store chats.db --agent app:agent

Routes (every one but ``GET /openapi.json`` needs ``Authorization: Bearer <token>``
or the ``authenticate`` function's approval; a refused request gets ``401
{"error": "unauthorized"}`` before anything else is looked at):

====================================  ==================================================
``POST /sessions``                    ``{sessionId}`` -> ``201`` (created) / ``200`` (existed)
``POST /sessions/{id}/messages``      ``{text, author?, mode?}`` -> ``202 {runId, queued}``
``GET /sessions/{id}``                runs, active run, queue length, messages sent
``GET /sessions/{id}/events``         Server-Sent Events (id = seq), across runs
``GET /sessions/{id}/ws``             WebSocket: the same frames; send ``{text, mode?}``
``DELETE /sessions/{id}``             ``202``: cancels the active run, drops the queue
``GET /openapi.json``                 the OpenAPI 3.1 document
====================================  ==================================================

How it behaves:

* A message to an idle session starts run ``<id>.<n>`` (n counts the session's
  runs from 1, also across restarts). A message to a busy session joins the
  active run at its next turn boundary (same ``runId``, ``queued: true``; steers
  before follow-ups). One that arrives after the run's last turn boundary opens
  the next run, and its answer names that run.
* Each run's events are stored by the agent; readers get the last
  ``events_window`` of them, then every new one live, each exactly once and in
  ``seq`` order. ``Last-Event-ID: n`` (or ``?lastEventId=n``) resumes after ``n``;
  a resume older than the window first gets ``{"error": "events_gap",
  "requestedSeq": n + 1, "earliestSeq": ...}``.
* Sessions, the messages callers sent, runs and events live in the store, so a
  server restarted on the same store continues every session. After each run the
  server stores a SHA-256 digest of the conversation; a session whose stored
  conversation changed behind the server's back answers ``409
  conversation_unrecoverable`` to new messages (delete and re-create it to start
  over). Runs a killed server left ``running`` are closed when their session is
  next used.
* On a SQLite or DuckDB file a server holds a lease (an OS lock on
  ``<store>.server.lock``, released by the kernel even after a crash): a second
  server refuses to start with :class:`~sessionkit.StoreLocked` naming the holder
  (pid, host, start time). Run one worker process per store.
* On PostgreSQL there is no lease: any number of server processes (``sessionkit
  serve --workers N``, or servers on several machines) share one store. One of
  them at a time drives a session's runs; a message sent to another is handed to
  it through the store (same ``runId``, ``queued: true`` while the run takes
  messages), and every process streams every session's events. ``max_concurrent_runs``
  counts the runs of one process.
"""

from __future__ import annotations

try:
    from ._app import SessionServer, create_app
except ImportError as exc:  # starlette is an optional extra
    if (exc.name or "").split(".")[0] not in ("starlette", "anyio"):
        raise
    from ..errors import missing

    raise missing("server", "starlette", exc) from exc

__all__ = ["create_app", "SessionServer"]
