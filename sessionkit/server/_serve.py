"""Running the app with uvicorn: what ``sessionkit serve`` does, with timeouts for stalled clients.

:func:`serve` is the whole command behind ``sessionkit serve`` (the command line only
reads its options): one process, or ``workers`` processes sharing one port on a
PostgreSQL store (each builds its own app, see :mod:`._worker`).

Stalled clients are dropped (docs/server.md):

* a connection must send a complete request (headers and body) within
  ``timeout_request`` seconds of opening, or of its previous answer
  (:class:`TimedH11Protocol`; uvicorn itself only times idle keep-alive
  connections);
* an idle keep-alive connection is closed after ``timeout_keep_alive`` seconds
  (uvicorn's own option);
* the app gives a request body ``timeout_request`` seconds too (``408``), and drops an
  event stream or WebSocket whose client stops reading for 30 seconds;
* WebSocket clients that stop answering pings are closed by uvicorn.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable

from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

__all__ = ["DEFAULTS", "TimedH11Protocol", "serve"]

#: The defaults of ``sessionkit serve`` (seconds; ``limit_concurrency`` in connections).
DEFAULTS = {
    "timeout_keep_alive": 5.0,
    "timeout_request": 30.0,
    "timeout_graceful_shutdown": 10.0,
    "limit_concurrency": 1000,
}

_REQUEST_TIMEOUT_ENV = "SESSIONKIT_SERVE_TIMEOUT_REQUEST"
#: The ``allowed_hosts`` of the worker processes (one per line).
ALLOWED_HOSTS_ENV = "SESSIONKIT_SERVE_ALLOW_HOSTS"


class TimedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request does not arrive in time.

    The clock starts when the connection opens and again after each answer; it
    stops once a request's headers and body are in. The time allowed is
    ``SESSIONKIT_SERVE_TIMEOUT_REQUEST`` (set by :func:`serve`; 30 s otherwise), so
    worker processes started afresh by uvicorn read the same value.
    """

    _request_timeout: float = DEFAULTS["timeout_request"]
    _request_timer: asyncio.TimerHandle | None = None
    _timed_cycle: RequestResponseCycle | None = None  # the request the clock was started before

    def _arm(self) -> None:
        self._disarm()
        self._timed_cycle = self.cycle
        self._request_timer = self.loop.call_later(self._request_timeout, self._request_timed_out)

    def _disarm(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _request_timed_out(self) -> None:
        self._request_timer = None
        if not self.transport.is_closing():
            self.logger.info(
                "sessionkit: closing a connection whose request did not arrive within %.0f s", self._request_timeout
            )
            self.transport.close()

    def connection_made(self, transport) -> None:
        # (read here, as the connection opens, right after uvicorn made this protocol for it)
        self._request_timeout = float(os.environ.get(_REQUEST_TIMEOUT_ENV) or DEFAULTS["timeout_request"])
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if (
            self._request_timer is not None
            and cycle is not None
            and cycle is not self._timed_cycle
            and not cycle.more_body
        ):
            self._disarm()  # the whole request is in

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def handle_websocket_upgrade(self, event) -> None:
        self._disarm()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def serve(
    agent: str,
    store: str,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    timeout_keep_alive: float = DEFAULTS["timeout_keep_alive"],
    timeout_request: float = DEFAULTS["timeout_request"],
    timeout_graceful_shutdown: float = DEFAULTS["timeout_graceful_shutdown"],
    limit_concurrency: int | None = DEFAULTS["limit_concurrency"],  # type: ignore[assignment]
    allowed_hosts: Iterable[str] = (),
    log_level: str = "info",
) -> None:
    """Serve ``agent`` (``"module:attr"``) over ``store`` (a path or URL) until stopped.

    ``workers`` above 1 runs that many processes on one port; they share the store,
    which must be PostgreSQL (``ValueError`` otherwise). The store's tables are
    created or upgraded before the first request. ``allowed_hosts``: the ``Host`` names
    answered besides loopback names and the server's own address (``HostGuard``).
    """
    import uvicorn

    import sessionkit as sk
    from sessionkit.agent import load_agent

    from ._app import create_app
    from ._scheduler import served_agent

    os.environ[_REQUEST_TIMEOUT_ENV] = repr(float(timeout_request))
    options = dict(
        host=host,
        port=port,
        http=TimedH11Protocol,
        timeout_keep_alive=max(1, round(timeout_keep_alive)),
        timeout_graceful_shutdown=max(1, round(timeout_graceful_shutdown)),
        limit_concurrency=limit_concurrency,
        log_level=log_level,
    )
    if workers > 1:
        if not store.lower().startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError(
                "--workers above 1 needs a PostgreSQL store (postgresql://...): "
                "a SQLite or DuckDB store is served by one process"
            )
        load_agent(agent)  # fail here, once, rather than in every worker
        with sk.open_store(store):  # creates or upgrades the tables before the workers start
            pass
        os.environ["SESSIONKIT_SERVE_STORE"] = store
        os.environ["SESSIONKIT_SERVE_AGENT"] = agent
        os.environ["SESSIONKIT_SERVE_CWD"] = os.getcwd()
        os.environ["SESSIONKIT_TOKEN"] = token
        os.environ[ALLOWED_HOSTS_ENV] = "\n".join(allowed_hosts)
        uvicorn.run("sessionkit.server._worker:app", factory=True, workers=workers, **options)  # type: ignore[arg-type]
        return
    loaded = load_agent(agent)
    with sk.open_store(store) as opened:
        app = create_app(
            served_agent(loaded), opened, token=token, body_timeout=timeout_request, allowed_hosts=allowed_hosts
        )
        uvicorn.run(app, **options)  # type: ignore[arg-type]
