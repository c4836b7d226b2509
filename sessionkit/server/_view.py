"""``sessionkit view STORE``: the store viewer over HTTP (docs/viewer.md).

A small Starlette app: the page and its assets (:mod:`sessionkit.widgets.viewer`, the same
front end as the notebook views) and a read-only JSON API over the store's public API.
Every request passes :class:`._hosts.HostGuard` first (its ``Host`` must name this server;
a change from another site's page is refused), as on the agent server. Bound to 127.0.0.1
it needs no token to read; bound elsewhere it needs one, checked as the agent server checks
it (:class:`._app._Auth`, a bearer header compared in constant time), and ``serve_view``
with ``write=True`` makes a random one when none is given. Store calls run on a worker
thread, one at a time, never on the event loop. ``write=True`` adds the writing routes:
deleting a session, and the annotation queues (``/api/queues``, ``/api/queue``: the next
unit of an annotator, a label submitted), where each annotator is known by a token of their
own (``annotators``) or by the principal an ``authenticate`` function gives.

``GET /api/changes`` keeps the page live: a stream of server-sent events, one ``change``
each time the store's change marker (``store.change_marker()``) moves, looked at every
``poll`` seconds and at once when the store reports a write (this process's writes, and
every process's on PostgreSQL, whose change feed crosses processes). Each event's id is
the marker, so a page that reconnects with ``Last-Event-ID`` hears at once of what it
missed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import FrameType
from typing import ParamSpec, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import QueueNotFound, SessionKitError, SessionNotFound
from ..store import ChangeEvent, Store
from ..widgets import viewer
from ._app import MIN_TOKEN_CHARS, _Auth
from ._hosts import HostGuard, is_loopback_host

__all__ = ["create_view_app", "is_loopback", "serve_view"]

#: Seconds between two looks at the store's change marker by an open page's stream (the
#: default), and the range allowed.
VIEW_POLL = 1.0
VIEW_POLL_MIN = 0.05
VIEW_POLL_MAX = 60.0
#: Seconds of silence after which a stream sends a comment, so that proxies keep it open.
_KEEP_ALIVE = 15.0

#: The page may load its own files and Blob modules only: nothing from another host, and no
#: script from message content (which only ever becomes text).
CSP = (
    "default-src 'none'; script-src 'self' blob:; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

_P = ParamSpec("_P")
_T = TypeVar("_T")
#: A route of the JSON API: the request in, the body to answer with out.
_Handler = Callable[[Request], Awaitable[object]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    return is_loopback_host(host.strip("[]").lower())


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None


def create_view_app(
    store: Store,
    *,
    token: str | None = None,
    write: bool = False,
    title: str | None = None,
    allowed_hosts: Iterable[str] = (),
    columns: Iterable[tuple[str, str]] = (),
    annotators: Mapping[str, str] | None = None,
    authenticate: Callable[..., object] | None = None,
    poll: float = VIEW_POLL,
) -> Starlette:
    """The viewer app over an open ``store``. ``token``: every ``/api`` request must send
    ``Authorization: Bearer <token>`` (16 characters or more); the page and its assets hold
    no data and need none. ``write``: allow ``DELETE /api/session?id=...``. Every request
    passes :class:`HostGuard` first: a ``Host`` naming another server than this one (but the
    names in ``allowed_hosts``) and a change asked by another site's page are refused (403).
    ``columns``: the sessions table's extra ``(name, sql)`` columns, checked now
    (:func:`sessionkit.widgets.viewer.check_columns`: ``UsageError`` for a bad one).
    ``annotators`` (with ``write``): ``{name: token}``, each annotator's own bearer token
    (16 characters or more), which reads the store and works the queues as that annotator
    (it cannot delete); ``authenticate(request) -> principal or None``: the principal is the
    annotator (docs/annotation.md). With the main ``token`` (or none), a queue request names
    its annotator itself. ``poll``: seconds between two looks at the store's change marker
    by each open page's ``/api/changes`` stream (``VIEW_POLL_MIN`` to ``VIEW_POLL_MAX``)."""
    if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not VIEW_POLL_MIN <= poll <= VIEW_POLL_MAX:
        raise ValueError(
            f"poll is the seconds between two looks at the store, {VIEW_POLL_MIN} to {VIEW_POLL_MAX}, got {poll!r}"
        )
    extra = viewer.check_columns(store, columns)
    people = _annotator_tokens(annotators, token, write)
    if authenticate is not None and not callable(authenticate):
        raise TypeError("authenticate must be a callable: authenticate(request) -> principal id or None")

    def who(conn: HTTPConnection) -> object:
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if people and scheme.lower() == "bearer":
            given = hashlib.sha256(value.strip().encode("latin-1", "replace")).digest()
            found = None
            for name, digest in people.items():  # every one compared: the time says nothing of which
                if hmac.compare_digest(given, digest):
                    found = name
            if found is not None:
                return found
        return authenticate(conn) if authenticate is not None else None

    gated = people or authenticate is not None
    auth = _Auth(token, who if gated else None) if token is not None or gated else None
    lock = threading.Lock()
    # Set when the server stops: the streams of /api/changes end at their next look, so the
    # server need not wait for the pages to go away (``app.state.stopping``).
    stopping = threading.Event()
    title = title or "sessionkit viewer"
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}

    async def call(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        def locked() -> _T:
            with lock:
                return fn(*args, **kwargs)

        return await run_in_threadpool(locked)

    def refused() -> Response:
        return JSONResponse(
            {"error": "unauthorized", "detail": "send Authorization: Bearer <token>"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer", **headers},
        )

    def api(handler: _Handler, *, owner: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            principal = None if auth is None else await auth.principal(request)
            if auth is not None and principal is None:
                return refused()
            if owner and principal:
                return JSONResponse(
                    {"error": "forbidden", "detail": f"annotator {principal!r} may not do this"},
                    status_code=403,
                    headers=headers,
                )
            request.state.principal = principal or None
            try:
                body = await handler(request)
            except (SessionNotFound, QueueNotFound) as exc:
                return JSONResponse({"error": "not_found", "detail": str(exc)}, status_code=404, headers=headers)
            except (ValueError, SessionKitError) as exc:
                return JSONResponse({"error": "bad_request", "detail": str(exc)}, status_code=400, headers=headers)
            return JSONResponse(body, headers=headers)

        return endpoint

    def session_id(request: Request) -> str:
        sid = request.query_params.get("id")
        if sid is None:
            raise ValueError("id (the session id) is required")
        return sid

    async def sessions(request: Request) -> object:
        return await call(
            viewer.sessions_page,
            store,
            offset=_int(request, "offset", 0),
            limit=_int(request, "limit", viewer.PAGE_SIZE),
            sort=request.query_params.get("sort") or "last_activity",
            desc=request.query_params.get("desc", "1") not in ("0", "false"),
            filter=request.query_params.get("filter") or "",
            columns=extra,
        )

    async def search(request: Request) -> object:
        return await call(
            viewer.search_hits, store, request.query_params.get("q") or "", limit=_int(request, "limit", 50)
        )

    async def session(request: Request) -> object:
        return await call(viewer.session_state, store, session_id(request))

    async def path(request: Request) -> object:
        return await call(viewer.path_state, store, session_id(request), request.query_params.get("leaf") or None)

    async def messages(request: Request) -> object:
        ids = request.query_params.getlist("ids")
        return {"items": await call(viewer.message_views, store, session_id(request), ids)}

    async def events(request: Request) -> object:
        return {"events": await call(viewer.run_events, store, session_id(request))}

    async def timeline(request: Request) -> object:
        return await call(viewer.session_timeline, store, session_id(request))

    async def similar(request: Request) -> object:
        return await call(viewer.similar_sessions, store, session_id(request))

    async def overview(request: Request) -> object:  # the #/overview page's figures, from SQL
        return await call(viewer.overview, store)

    async def delete(request: Request) -> object:
        sid = session_id(request)
        await call(viewer.session_state, store, sid)  # SessionNotFound (404) before anything is changed
        await call(store.delete_session, sid)
        return {"deleted": sid}

    async def queues(request: Request) -> object:
        return {"queues": await call(viewer.queues_list, store), "annotator": request.state.principal}

    async def queue(request: Request) -> object:
        name = request.query_params.get("name")
        if name is None:
            raise ValueError("name (the queue's name) is required")
        raw = await request.body()
        if len(raw) > _MAX_BODY:
            raise ValueError(f"a queue request is at most {_MAX_BODY} bytes, got {len(raw)}")
        try:
            msg = json.loads(raw or b"{}")
        except ValueError:
            raise ValueError("a queue request is a JSON object: {type: state | next | submit | release, ...}") from None
        annotator = request.state.principal
        if annotator is None and isinstance(msg, dict) and msg.get("annotator") is not None:
            annotator = msg["annotator"]  # the main token (or none on 127.0.0.1): the request says who
        return await call(viewer.queue_answer, store, name, annotator, msg, catch=False)

    async def changes(request: Request) -> Response:
        if auth is not None and await auth.principal(request) is None:
            return refused()
        seen = request.headers.get("last-event-id")
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def written(event: ChangeEvent) -> None:  # from a writer's thread, or PostgreSQL's listener
            loop.call_soon_threadsafe(wake.set)

        async def stream() -> AsyncIterator[str]:
            unsubscribe = store.subscribe(written)
            try:
                marker = await call(store.change_marker)
                # "retry": how long the page waits before it reconnects; "ready": the stream is
                # open, and a page that saw another marker before has missed a change
                missed = json.dumps({"missed": seen not in (None, marker)})
                yield f"retry: 2000\nid: {marker}\nevent: ready\ndata: {missed}\n\n"
                quiet = 0.0
                while not stopping.is_set():
                    try:
                        await asyncio.wait_for(wake.wait(), poll)
                    except TimeoutError:
                        pass
                    wake.clear()
                    now = await call(store.change_marker)
                    if now != marker:
                        marker, quiet = now, 0.0
                        yield f"id: {marker}\nevent: change\ndata: {{}}\n\n"
                    else:
                        quiet += poll
                        if quiet >= _KEEP_ALIVE:
                            quiet = 0.0
                            yield ": keep-alive\n\n"
            finally:
                unsubscribe()

        # Starlette stops the generator when the page goes away (it watches for the disconnect)
        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={**headers, "X-Accel-Buffering": "no"}
        )

    async def page(request: Request) -> Response:
        config = {"write": write}
        scripts = ["modules.js"]
        return HTMLResponse(
            viewer.page_html(mode="served", title=title, scripts=scripts, config=config), headers=headers
        )

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "modules.js":
            text = viewer.modules_script()
        elif name in viewer.ASSETS:
            text = viewer.asset(name)
        else:
            return Response("not found", status_code=404, headers=headers)
        return Response(text, media_type=_TYPES["." + name.rsplit(".", 1)[-1]], headers=headers)

    routes = [
        Route("/", page),
        Route("/api/sessions", api(sessions)),
        Route("/api/search", api(search)),
        Route("/api/session", api(session)),
        Route("/api/path", api(path)),
        Route("/api/messages", api(messages)),
        Route("/api/events", api(events)),
        Route("/api/timeline", api(timeline)),
        Route("/api/similar", api(similar)),
        Route("/api/overview", api(overview)),
        Route("/api/changes", changes),
        Route("/{name:str}", asset),
    ]
    if write:
        routes.insert(4, Route("/api/session", api(delete, owner=True), methods=["DELETE"]))
        routes.insert(5, Route("/api/queues", api(queues)))
        routes.insert(6, Route("/api/queue", api(queue), methods=["POST"]))
    app = Starlette(routes=routes, middleware=[Middleware(HostGuard, allowed_hosts=list(allowed_hosts))])
    app.state.stopping = stopping
    return app


_MAX_BODY = 64 * 1024


def _annotator_tokens(annotators: Mapping[str, str] | None, token: str | None, write: bool) -> dict[str, bytes]:
    """``{name: sha256(token)}`` of each annotator, checked (``ValueError`` naming the problem)."""
    if not annotators:
        return {}
    if not write:
        raise ValueError("annotators label through the queues, which need write=True (--write)")
    out = {}
    seen: set[str] = set() if token is None else {token}
    for name, secret in dict(annotators).items():
        if not isinstance(name, str) or not name.strip() or name != name.strip() or not name.isprintable():
            raise ValueError(f"an annotator's name is a non-blank str without surrounding spaces, got {name!r}")
        if not isinstance(secret, str) or len(secret) < MIN_TOKEN_CHARS or secret != secret.strip():
            raise ValueError(
                f"annotator {name!r}'s token must be a str of at least {MIN_TOKEN_CHARS} characters, without"
                " surrounding spaces"
            )
        if secret in seen:
            raise ValueError(f"annotator {name!r}'s token is another's (or the main token): each needs its own")
        seen.add(secret)
        out[name] = hashlib.sha256(secret.encode("utf-8")).digest()
    return out


def serve_view(
    target: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8800,
    token: str | None = None,
    write: bool = False,
    allowed_hosts: Iterable[str] = (),
    columns: Iterable[tuple[str, str]] = (),
    annotators: Mapping[str, str] | None = None,
    poll: float = VIEW_POLL,
    on_ready: Callable[[str], object] | None = None,
    log_level: str = "warning",
    sql_memory_limit: str | None = None,
) -> None:
    """Serve the viewer over the store at ``target`` (which must exist) until stopped.
    A ``host`` that is not loopback needs a ``token`` (``ValueError`` otherwise); with
    ``write`` and no ``token`` a random one is made (the page's URL carries it).
    ``columns``: extra ``(name, sql)`` columns of the sessions table, ``annotators`` each
    annotator's token, ``poll`` the seconds between two looks at the store's change marker
    (see :func:`create_view_app`).
    ``on_ready(url)`` is called with the page's URL (the token in it) once the socket listens.
    ``sql_memory_limit``: the store's (see :func:`sessionkit.open_store`), bounding the columns' queries."""
    import uvicorn

    import sessionkit as sk

    from ._serve import TimedH11Protocol

    if not is_loopback(host) and not token:
        raise ValueError(f"--host {host} reaches other machines: give a token (SESSIONKIT_TOKEN or --token)")
    if write and not token:
        # a page that can delete needs more than the Host and Origin checks: any program on this
        # machine could call it; the token is in the printed URL only
        token = secrets.token_urlsafe(24)
    with sk.open_store(target, create=False, sql_memory_limit=sql_memory_limit) as store:
        app = create_view_app(
            store,
            token=token,
            write=write,
            title=f"sessionkit viewer · {target}",
            allowed_hosts=allowed_hosts,
            columns=columns,
            annotators=annotators,
            poll=poll,
        )
        config = uvicorn.Config(
            app, host=host, port=port, http=TimedH11Protocol, log_level=log_level, timeout_graceful_shutdown=10
        )
        server = uvicorn.Server(config)
        exit_asked = server.handle_exit

        def handle_exit(sig: int, frame: FrameType | None) -> None:
            app.state.stopping.set()  # the open pages' streams end too
            exit_asked(sig, frame)

        server.handle_exit = handle_exit  # type: ignore[method-assign]

        if on_ready is not None:
            startup = server.startup

            async def started(sockets=None) -> None:
                await startup(sockets)
                bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
                shown = f"[{host}]" if ":" in host else host
                on_ready(f"http://{shown}:{bound}/" + (f"?token={token}" if token else ""))

            server.startup = started  # type: ignore[method-assign]
        server.run()
