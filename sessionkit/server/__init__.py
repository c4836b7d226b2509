"""Sessions over HTTP (docs/server.md): a Starlette app that owns sessions and their runs.

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
``GET /sessions``                     the caller's sessions, newest activity first
``POST /sessions``                    ``{sessionId}`` -> ``201`` (created) / ``200`` (existed)
``POST /sessions/{id}/messages``      ``{text, author?, mode?, context?, at?}`` -> ``202 {runId, queued}``
``GET /sessions/{id}``                runs, active run, queue length, messages sent
``GET /sessions/{id}/conversation``   a path's messages, paged (``leaf``, ``compacted``, ``limit``, ``cursor``)
``GET /sessions/{id}/events``         Server-Sent Events (id = seq), across runs
``GET /sessions/{id}/ws``             WebSocket: the same frames; send a message body
``DELETE /sessions/{id}``             ``202``: cancels the active run, drops the queue
``GET /openapi.json``                 the OpenAPI 3.1 document
====================================  ==================================================

How it behaves:

* A message to an idle session starts run ``<id>.<n>`` (n counts the session's
  runs from 1, across restarts, and after ``DELETE`` and creation again: run ids
  are never reused). A message to a busy session joins the active run at its next
  turn boundary (same ``runId``, ``queued: true``; steers before follow-ups). One
  that arrives after the run's last turn boundary, or once the run has taken
  queued messages for 10 s (or 8 of them), waits for the next run, and its answer
  names that run. ``context`` (a JSON object) is shown to the model beside the
  message and given to tools (docs/agents.md); it is never stored nor returned, and a
  message carrying one opens a run of its own.
* Each run's events are stored; readers get the last ``events_window`` of them,
  then every new one live, each exactly once and in ``seq`` order (an event is
  sent once it is stored). ``Last-Event-ID: n`` (or ``?lastEventId=n``, ASCII digits)
  resumes after ``n``, also on a restarted server; a resume older than the window
  first gets ``{"error": "events_gap", "requestedSeq": n + 1, "earliestSeq": ...}``.
  A session deleted and created again numbers its events on after the deleted one's
  (ids never repeat under one session id); a resume point of the deleted session
  replays the new one from its start.
* Crash safety: every message answered ``202`` is in the store before the answer,
  with the run it belongs to. A run saves its messages, the conversation's digest
  and its "saved" mark in one transaction; a run that takes many queued messages
  is saved in steps (above). A server killed at any moment (or stopped) leaves
  records that say what to do: the next server closes the runs left running
  (``run.end``, ``interrupted``, ``error_type: ServerStopped``) and starts them
  again under the same id with the messages accepted for them (``attempts`` + 1;
  after 3 attempts the run is recorded ``failed`` with the reason). So every
  ``202`` ends in the conversation, or in a run recorded ``failed``/``interrupted``
  with a reason. A session whose stored conversation changed behind the server's
  back answers ``409 conversation_unrecoverable`` to new messages (delete and
  re-create it to start over); a crash never causes that.
* With ``authenticate``, each principal's sessions are stored under
  ``<16 hex characters of the SHA-256 of the principal id>/<id>``: the principal
  id itself is never stored, and a principal reaches no key but its own.
* Bodies: JSON that cannot be handled (nested deeper than 64, a lone surrogate,
  a wrong type) is ``400 {"error": "invalid_body", "detail"}``; a body that does not
  arrive within ``body_timeout`` is ``408``. ``sessionkit serve`` also drops
  connections that stall before their request is in (:mod:`._serve`).
* On a SQLite or DuckDB file a server holds a lease (an OS lock on
  ``<store>.server.lock``, released by the kernel even after a crash): a second
  server refuses to start with :class:`~sessionkit.StoreLocked` naming the holder
  (pid, program, host, start time; never its arguments). Run one worker process
  per store.
* On PostgreSQL there is no lease: any number of server processes (``sessionkit
  serve --workers N``, or servers on several machines) share one store. One of
  them at a time drives a session's runs; a message sent to another is handed to
  it through the store, every process streams every session's events, and a
  process that dies has its sessions taken over by another within seconds. Until
  then, the run it was driving is still the session's ``active`` run for every
  process (its records say it is running); the takeover records it
  ``interrupted`` and starts it again under the same id.
  ``max_concurrent_runs`` counts the runs of one process.

How it is built: :mod:`._app` (HTTP, WebSocket, auth), :mod:`._routes` (the route
table behind dispatch and the OpenAPI document), :mod:`._bodies` (what clients
send), :mod:`._sessions` (the sessions), :mod:`._scheduler` (runs),
:mod:`._coordinate` (one process or several), :mod:`._records` (the store's
records, recovery), :mod:`._storeio` (store calls off the event loop), :mod:`._hosts`
(:class:`HostGuard`: the Host and Origin checks every app sessionkit serves passes first),
:mod:`._serve` (uvicorn and its timeouts), :mod:`._view` (``sessionkit view``: the store
viewer over HTTP, docs/viewer.md).
"""

from __future__ import annotations

try:
    from ._app import SessionServer, create_app
    from ._collect import create_collect_app, serve_collect
    from ._hosts import HostGuard
    from ._view import create_view_app, is_loopback, serve_view
except ImportError as exc:  # starlette is an optional extra
    if (exc.name or "").split(".")[0] not in ("starlette", "anyio"):
        raise
    from ..errors import missing

    raise missing("server", "starlette", exc) from exc

__all__ = [
    "create_app",
    "SessionServer",
    "serve",
    "create_view_app",
    "serve_view",
    "is_loopback",
    "create_collect_app",
    "serve_collect",
    "HostGuard",
]


def serve(agent: str, store: str, *, token: str, **options):
    """Serve ``agent`` (``"module:attr"``) over ``store`` with uvicorn until stopped.

    What ``sessionkit serve`` runs; ``options`` are ``host``, ``port``, ``workers``
    (above 1: a PostgreSQL store), ``timeout_keep_alive``, ``timeout_request``,
    ``timeout_graceful_shutdown``, ``limit_concurrency``, ``allowed_hosts`` and ``log_level`` (see
    :func:`sessionkit.server._serve.serve`).
    """
    try:
        from ._serve import serve as run
    except ImportError as exc:  # uvicorn is part of the server extra
        if (exc.name or "").split(".")[0] != "uvicorn":
            raise
        from ..errors import missing

        raise missing("server", "uvicorn", exc) from exc
    return run(agent, store, token=token, **options)
