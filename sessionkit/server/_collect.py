"""``sessionkit collect STORE``: an OTLP/HTTP trace receiver writing into a store
(docs/integrations/opentelemetry.md).

A small Starlette app with one route, ``POST /v1/traces`` (protobuf or JSON, gzip
``Content-Encoding`` too), answered as OTLP/HTTP specifies; the payloads go to a
:class:`sessionkit.integrations.otel.TraceReceiver`, on a worker thread, one at a time.

Who may send: bound to a loopback address it needs no token; bound elsewhere it needs
one (``Authorization: Bearer <token>``, compared in constant time as the agent server
does). Against DNS rebinding (a web page whose host name is made to point at
127.0.0.1), the ``Host`` header must name the address served (on loopback: ``localhost``
or a loopback address), as Jupyter checks it; ``allowed_hosts`` adds names (a proxy's).
The check is :class:`._hosts.HostGuard`, the one every app sessionkit serves passes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..integrations.otel import TraceReceiver
from ..store import Store
from ._app import _Auth
from ._hosts import HostGuard
from ._view import is_loopback

__all__ = ["create_collect_app", "serve_collect", "MAX_BODY"]

#: the largest request body taken (bytes, as sent and once decompressed): 64 MiB
MAX_BODY = 64 << 20


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def create_collect_app(
    store: Store,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    session_prefix: str = "",
    max_body: int = MAX_BODY,
) -> Starlette:
    """The receiver app over an open ``store``, served at ``host``.

    ``token``: every request must send ``Authorization: Bearer <token>`` (16 characters or
    more). ``Host`` headers are checked against ``host`` (any loopback name when it is a
    loopback address; not checked when it is a wildcard such as ``0.0.0.0``, where the
    token guards) and ``allowed_hosts``. A body above ``max_body`` bytes gets 413.
    """
    auth = _Auth(token, None) if token is not None else None
    receiver = TraceReceiver(store, session_prefix=session_prefix, max_size=max_body)
    # the address served and the names allowed; bound to a wildcard (0.0.0.0) senders name
    # the machine as they know it, so any name is taken there (the token guards it)
    allowed = [*allowed_hosts, host.strip("[]"), *(["*"] if _wildcard(host) else [])]

    async def traces(request: Request) -> Response:
        if auth is not None and await auth.principal(request) is None:
            return JSONResponse(
                {"error": "unauthorized", "detail": "send Authorization: Bearer <token>"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > max_body:
            return JSONResponse({"error": "too_large", "detail": f"bodies up to {max_body} bytes"}, status_code=413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                return JSONResponse({"error": "too_large", "detail": f"bodies up to {max_body} bytes"}, status_code=413)
        answer = await run_in_threadpool(
            receiver.export,
            bytes(body),
            content_type=request.headers.get("content-type", ""),
            encoding=(request.headers.get("content-encoding") or "").strip().lower() or None,
        )
        return Response(answer.body, status_code=answer.status, media_type=answer.content_type)

    return Starlette(
        routes=[Route("/v1/traces", traces, methods=["POST"])],
        middleware=[Middleware(HostGuard, allowed_hosts=allowed)],
    )


def serve_collect(
    target: str,
    *,
    host: str = "127.0.0.1",
    port: int = 4318,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    session_prefix: str = "",
    on_ready: Callable[[str], object] | None = None,
    log_level: str = "warning",
) -> None:
    """Receive OTLP/HTTP traces into the store at ``target`` (created when missing) until
    stopped. A ``host`` that is not loopback needs a ``token`` (``ValueError`` otherwise).
    ``on_ready(url)`` is called with the traces endpoint's URL once the socket listens."""
    import uvicorn

    import sessionkit as sk

    from ._serve import TimedH11Protocol

    if not is_loopback(host) and not token:
        raise ValueError(f"--host {host} reaches other machines: give a token (SESSIONKIT_TOKEN or --token)")
    with sk.open_store(target) as store:
        app = create_collect_app(
            store, host=host, token=token, allowed_hosts=allowed_hosts, session_prefix=session_prefix
        )
        config = uvicorn.Config(app, host=host, port=port, http=TimedH11Protocol, log_level=log_level)
        server = uvicorn.Server(config)

        if on_ready is not None:
            startup = server.startup

            async def started(sockets=None) -> None:
                await startup(sockets)
                bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
                shown = f"[{host}]" if ":" in host else host
                on_ready(f"http://{shown}:{bound}/v1/traces")

            server.startup = started  # type: ignore[method-assign]
        server.run()
