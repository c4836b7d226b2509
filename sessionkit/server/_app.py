"""The Starlette application: authentication, dispatch from the route table, bodies, SSE and WebSocket.

The pieces (see :mod:`sessionkit.server` for the routes):

* :mod:`._routes` - the route table; dispatch and ``/openapi.json`` both come from it;
* :mod:`._bodies` - strict parsing of bodies, frames, ids and resume points;
* :mod:`._sessions` - the sessions: lookup, create, describe, list, delete, event hubs;
* :mod:`._scheduler` - messages into runs, runs driven, saved and retried;
* :mod:`._coordinate` - one server on a file (the lease) or several on PostgreSQL;
* :mod:`._records` - what is kept in the store, and recovery after a crash;
* :mod:`._storeio` - store calls off the event loop, writes ordered and batched.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import hmac
import inspect
import logging
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from types import FrameType
from typing import Literal
from urllib.parse import quote, unquote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.responses import Response
from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import UsageError
from ..store import Store
from . import _records as R
from ._bodies import (
    JSON,
    Accepted,
    check_session_id,
    invalid,
    parse_conversation_query,
    parse_json,
    parse_message,
    resume_after,
)
from ._coordinate import coordinator_for
from ._errors import Rejected, error_response, json_response, store_failure
from ._events import CLOSED, Subscriber, dumps_event
from ._hosts import HostGuard
from ._openapi import openapi_document
from ._routes import Route, match, resolve
from ._scheduler import ServedAgent, served_agent
from ._sessions import Sessions
from ._state import Live
from ._storeio import StoreIO

log = logging.getLogger("sessionkit.server")

__all__ = ["create_app", "SessionServer"]

MIN_TOKEN_CHARS = 16
#: Seconds between comment lines on an idle event stream (keeps proxies from closing it).
KEEPALIVE_SECONDS = 15.0
#: An event stream whose client takes longer than this to accept a frame is dropped.
SEND_TIMEOUT = 30.0

_WS_CLOSE = {"session_deleted": 4404, "server_stopping": 1012, "too_slow": 1013}


_json = json_response


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def _positive_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return float(value)


class _Auth:
    """Bearer token (compared in constant time) and/or a custom ``authenticate``."""

    def __init__(self, token: str | None, authenticate: Callable[..., object] | None) -> None:
        if token is not None:
            if not isinstance(token, str):
                raise TypeError(f"token must be a str, got {type(token).__name__}")
            if len(token) < MIN_TOKEN_CHARS:
                raise ValueError(f"token must be at least {MIN_TOKEN_CHARS} characters long, got {len(token)}")
            if token != token.strip():
                raise ValueError("token must not start or end with whitespace (HTTP would drop it)")
        if authenticate is not None and not callable(authenticate):
            raise TypeError("authenticate must be a callable: authenticate(request) -> principal id or None")
        if token is None and authenticate is None:
            raise ValueError("create_app needs token= (a bearer token) or authenticate= (a function)")
        # Compare digests: equal lengths whatever the caller sends, so the time taken
        # says nothing about the token's length or content.
        self._token_hash = None if token is None else hashlib.sha256(token.encode()).digest()
        self._authenticate = authenticate

    async def principal(self, conn: HTTPConnection) -> str | None:
        """The caller's principal ("" for the bearer token), or None when refused."""
        if self._token_hash is not None:
            header = conn.headers.get("authorization", "")
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "bearer":
                # Header values arrive as bytes (decoded as latin-1): compare bytes with the
                # token's UTF-8 bytes, so a non-ASCII token works too.
                given = hashlib.sha256(value.strip().encode("latin-1", "replace")).digest()
                if hmac.compare_digest(given, self._token_hash):
                    return ""
        if self._authenticate is None:
            return None
        try:
            result = self._authenticate(conn)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            log.debug("authenticate refused a request: %s: %s", type(exc).__name__, exc)
            return None
        if isinstance(result, int) and not isinstance(result, bool):
            result = str(result)
        if not isinstance(result, str) or not result:
            if result not in (None, False, ""):
                log.warning(
                    "authenticate returned %s, not a principal id (str): request refused", type(result).__name__
                )
            return None
        return result


def _segments(scope: Scope) -> list[str] | None:
    """The path's segments, each percent-decoded (so an encoded ``/`` stays inside its segment)."""
    raw = scope.get("raw_path")
    if isinstance(raw, (bytes, bytearray)):
        path = raw.decode("latin-1").split("?", 1)[0]
    else:
        path = quote(scope.get("path", ""))
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if not path.startswith("/"):
        return None
    parts = path[1:].split("/")
    return [unquote(p, errors="replace") for p in parts]


class _NoBody(enum.Enum):
    """What :meth:`SessionServer._body` gives for a request without a body (not a JSON value)."""

    EMPTY = "a request without a body"


_EMPTY: Literal[_NoBody.EMPTY] = _NoBody.EMPTY


class SessionServer:
    """The server behind the app (``app.state.sessionkit``): the pieces, wired once."""

    def __init__(
        self,
        agent: ServedAgent,
        store: Store,
        *,
        token: str | None,
        authenticate: Callable[..., object] | None,
        max_body_bytes: int,
        max_concurrent_runs: int,
        max_queued: int,
        events_window: int,
        body_timeout: float = 30.0,
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a sessionkit Store (sk.open_store(...)), got {type(store).__name__}")
        agent = served_agent(agent)  # (checked for callers without a type checker)
        self.auth = _Auth(token, authenticate)
        self.max_body_bytes = _positive_int("max_body_bytes", max_body_bytes)
        self.events_window = _positive_int("events_window", events_window)
        self.body_timeout = _positive_number("body_timeout", body_timeout)
        max_concurrent_runs = _positive_int("max_concurrent_runs", max_concurrent_runs)
        max_queued = _positive_int("max_queued", max_queued)
        self.agent = agent
        self.store = store
        try:
            R.check_layout(store)  # records of a newer layout: refused before anything is written
        except UsageError as exc:
            raise UsageError(f"the {store.settings.engine} engine cannot hold the server's tables yet: {exc}") from exc
        self.coord = coordinator_for(store)  # on a file: takes the lease, or fails naming its holder
        try:
            R.stamp_layout(store)
        except BaseException:
            self.coord.close()
            raise
        self.lease = self.coord.lease
        self.io = StoreIO(store)
        self.scheduler = self.coord.scheduler(
            agent, store, self.io, max_concurrent_runs=max_concurrent_runs, max_queued=max_queued
        )
        self.sessions = Sessions(agent, store, self.io, self.coord, self.scheduler, events_window=self.events_window)
        self.keepalive = KEEPALIVE_SECONDS
        self.send_timeout = SEND_TIMEOUT
        self._openapi = openapi_document()
        self._sweep: asyncio.Task | None = None

    def close(self) -> None:
        """Give the lease back (the app's shutdown does it too)."""
        self.coord.close()

    # ------------------------------------------------------------------ lifespan

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.coord.start(self.io, self.sessions.signal_from_thread)
        self.io.start()
        self.sessions.bind()
        self.scheduler.closing = False
        self._sweep = self.sessions.spawn(self.sessions.sweep_forever(), "sessionkit sweep")
        restore = self._watch_signals()
        try:
            yield
        finally:
            restore()
            try:
                self.scheduler.closing = True
                await self.sessions.stop_background()
                await self.scheduler.shutdown(list(self.sessions.states.values()))
                self.sessions.close_streams("server_stopping")
                await self.io.close()
            finally:
                self.close()

    def _watch_signals(self) -> Callable[[], None]:
        """End event streams as soon as the process is asked to stop.

        uvicorn waits for open responses before it runs the app's shutdown, and an
        event stream never ends by itself; so on SIGINT/SIGTERM the streams are
        closed first (their clients reconnect with Last-Event-ID to the next server),
        then the server's own handler runs as before.
        """
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

        def handler(signum: int, frame: FrameType | None, _sessions: Sessions = self.sessions) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_sessions.close_streams, "server_stopping")
            prev = previous.get(signum)
            if callable(prev):
                prev(signum, frame)
            elif prev == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.getsignal(sig)
                signal.signal(sig, handler)
            except (ValueError, OSError):
                previous.pop(sig, None)

        def restore() -> None:
            for sig, prev in previous.items():
                with contextlib.suppress(ValueError, OSError, TypeError):
                    if signal.getsignal(sig) is handler:
                        signal.signal(sig, prev)

        return restore

    # ------------------------------------------------------------------ HTTP

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope, receive)
            response = await self.http(request)
            await response(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.websocket(WebSocket(scope, receive, send))

    async def http(self, request: Request) -> Response | _EventStream:
        try:
            return await self._dispatch(request)
        except Rejected as exc:
            return error_response(exc)
        except Exception as exc:
            failure = store_failure(exc)
            if failure is not None:
                return error_response(failure)
            log.exception("sessionkit server: %s %s failed", request.method, request.url.path)
            return _json(500, {"error": "internal_error"})

    async def _dispatch(self, request: Request) -> Response | _EventStream:
        segments = _segments(request.scope)
        method = request.method
        routes, _ = match(segments or [])
        if routes and all(r.public for r in routes):  # the document: no token needed
            route, params = resolve(method, segments)
            return await self._handle(route, request, "", params)
        principal = await self.auth.principal(request)
        if principal is None:
            raise Rejected(401, "unauthorized")
        length = request.headers.get("content-length")
        if length is not None:
            if not (length.isascii() and length.isdigit()):
                raise invalid("a malformed Content-Length")
            if int(length) > self.max_body_bytes:
                raise Rejected(413, "body_too_large")
        route, params = resolve(method, segments)
        return await self._handle(route, request, principal, params)

    async def _handle(
        self, route: Route, request: Request, principal: str, params: dict[str, str]
    ) -> Response | _EventStream:
        handler = getattr(self, "op_" + route.operation)
        answer: Response | _EventStream = await handler(request, principal, **params)
        return answer

    async def _live(self, principal: str, session_id: str) -> Live:
        check_session_id(session_id)
        return await self.sessions.get(principal, session_id)

    async def _body(self, request: Request) -> JSON | Literal[_NoBody.EMPTY]:
        body = bytearray()
        try:
            async with asyncio.timeout(self.body_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > self.max_body_bytes:
                        raise Rejected(413, "body_too_large")
        except TimeoutError:
            raise Rejected(408, "request_timeout") from None
        except ClientDisconnect:
            raise Rejected(400, "invalid_body", detail="the client went away before the body ended") from None
        if not body:  # nothing at all; whitespace alone is a body that is not JSON
            return _EMPTY
        return parse_json(body)

    # ------------------------------------------------------------------ operations (the route table's)

    async def op_openapi(self, request: Request, principal: str) -> Response:
        return _json(200, self._openapi)

    async def op_listSessions(self, request: Request, principal: str) -> Response:
        return _json(200, await self.sessions.listing(principal))

    async def op_createSession(self, request: Request, principal: str) -> Response:
        body = await self._body(request)
        if body is _EMPTY:  # no body: a random id
            body = {}
        if not isinstance(body, dict):
            raise invalid("the body must be a JSON object")
        session_id = check_session_id(body["sessionId"] if "sessionId" in body else uuid.uuid4().hex)
        if await self.sessions.create(principal, session_id):
            return _json(201, {"sessionId": session_id}, {"Location": f"/sessions/{session_id}"})
        return _json(200, {"sessionId": session_id})

    async def op_getSession(self, request: Request, principal: str, sessionId: str) -> Response:
        live = await self._live(principal, sessionId)
        return _json(200, await self.sessions.describe(live))

    async def op_deleteSession(self, request: Request, principal: str, sessionId: str) -> Response:
        live = await self._live(principal, sessionId)
        await self.sessions.delete(live)
        return _json(202, {"sessionId": sessionId, "status": "deleted"})

    async def op_sendMessage(self, request: Request, principal: str, sessionId: str) -> Response:
        live = await self._live(principal, sessionId)
        body = await self._body(request)
        if body is _EMPTY:
            raise invalid("the body must be a JSON object with 'text'")
        msg = parse_message(body)
        answer = await self.scheduler.submit(live, msg.text, msg.mode, msg.author, msg.context, msg.at)
        return _json(202, answer)

    async def op_getConversation(self, request: Request, principal: str, sessionId: str) -> Response:
        live = await self._live(principal, sessionId)
        query = parse_conversation_query(request.query_params)
        return _json(200, await self.sessions.conversation(live, query))

    async def op_streamEvents(self, request: Request, principal: str, sessionId: str) -> _EventStream:
        live = await self._live(principal, sessionId)
        after = resume_after(request.headers, request.query_params)
        sub = await self.sessions.subscribe(live, after)
        return _EventStream(self, live, sub)

    async def op_websocket(self, request: Request, principal: str, sessionId: str) -> Response:
        await self._live(principal, sessionId)
        resume_after(request.headers, request.query_params, header=False)
        raise Rejected(426, "upgrade_required")

    # ------------------------------------------------------------------ WebSocket

    async def websocket(self, ws: WebSocket) -> None:
        try:
            live, after = await self._ws_open(ws)
            sub = await self.sessions.subscribe(live, after)
        except Rejected as exc:
            await _deny(ws, exc)
            return
        except Exception as exc:
            failure = store_failure(exc)
            if failure is None:
                log.exception("sessionkit server: websocket %s failed", ws.url.path)
                failure = Rejected(500, "internal_error")
            await _deny(ws, failure)
            return
        try:
            await ws.accept()
        except Exception:
            self.sessions.unsubscribe(live, sub)
            return
        pump = asyncio.create_task(self._ws_pump(ws, sub))
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                reply = await self._ws_message(live, message)
                sub.put(None, dumps_event(reply))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        finally:
            self.sessions.unsubscribe(live, sub)
            sub.close("client_gone")
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump

    async def _ws_open(self, ws: WebSocket) -> tuple[Live, int | None]:
        principal = await self.auth.principal(ws)
        if principal is None:
            raise Rejected(401, "unauthorized")
        segments = _segments(ws.scope)
        routes, params = match(segments or [])
        if not any(r.websocket for r in routes):
            raise Rejected(404, "not_found")
        live = await self._live(principal, params["sessionId"])
        return live, resume_after(ws.headers, ws.query_params, header=False)

    async def _ws_message(self, live: Live, message: ASGIMessage) -> Accepted | dict[str, str]:
        data = message.get("text")
        if data is None and message.get("bytes") is not None:
            data = message["bytes"]
        if data is None:
            return {"error": "invalid_body", "detail": "an empty frame"}
        size = len(data) if isinstance(data, (bytes, bytearray)) else len(data.encode("utf-8", "surrogatepass"))
        if size > self.max_body_bytes:
            return {"error": "body_too_large"}
        try:
            msg = parse_message(parse_json(data, what="frame"))
            return await self.scheduler.submit(live, msg.text, msg.mode, msg.author, msg.context, msg.at)
        except Rejected as exc:
            return exc.body()
        except Exception as exc:
            failure = store_failure(exc)
            if failure is not None:
                return failure.body()
            log.exception("sessionkit server: a websocket message to %r failed", live.public_id)
            return {"error": "internal_error"}

    async def _ws_pump(self, ws: WebSocket, sub: Subscriber) -> None:
        try:
            while True:
                item = await sub.get()
                if item is CLOSED:
                    if sub.reason != "client_gone":
                        await ws.close(code=_WS_CLOSE.get(sub.reason or "", 1000), reason=sub.reason or "")
                    return
                async with asyncio.timeout(self.send_timeout):
                    await ws.send_text(item[1])
        except (WebSocketDisconnect, RuntimeError, OSError, TimeoutError):
            return  # the client went away (or stopped reading); the receiving side ends the connection


class _EventStream:
    """An SSE response that ends when its reader closes, and drops a client that stops reading."""

    def __init__(self, server: SessionServer, live: Live, sub: Subscriber) -> None:
        self.server = server
        self.live = live
        self.sub = sub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub, sessions = self.sub, self.server.sessions

        async def watch() -> None:  # the client going away ends the stream
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    sub.close("client_gone")
                    return

        watcher = asyncio.create_task(watch())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            while True:
                item = await sub.get(timeout=self.server.keepalive)
                if item is None:
                    chunk = b": keepalive\n\n"
                elif item is CLOSED:
                    break
                else:
                    parts = [_sse(item)]
                    while sub.items:  # send what is already waiting in one write
                        parts.append(_sse(sub.items.popleft()))
                    chunk = "".join(parts).encode()
                try:
                    async with asyncio.timeout(self.server.send_timeout):
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except TimeoutError:
                    log.info("sessionkit server: an event stream of %r stopped reading; dropped", self.live.public_id)
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            return
        finally:
            watcher.cancel()
            sessions.unsubscribe(self.live, sub)


def _sse(item: tuple[int | None, str]) -> str:
    seq, text = item
    if seq is None:
        return f"data: {text}\n\n"
    return f"id: {seq}\ndata: {text}\n\n"


async def _deny(ws: WebSocket, exc: Rejected) -> None:
    """Refuse a WebSocket handshake with an HTTP answer (or a close code without the extension)."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        await ws.send_denial_response(_json(exc.status, exc.body(), headers))
    else:
        await ws.close(code=4000 + exc.status)


def create_app(
    agent: ServedAgent,
    store: Store,
    *,
    token: str | None = None,
    authenticate: Callable[..., object] | None = None,
    max_body_bytes: int = 1_000_000,
    max_concurrent_runs: int = 16,
    max_queued: int = 100,
    events_window: int = 1_000,
    body_timeout: float = 30.0,
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """An ASGI app serving ``agent`` over the sessions of ``store`` (docs/server.md).

    Requests pass :class:`~sessionkit.server.HostGuard` first: one whose ``Host`` names
    neither a loopback name, the address it arrived on, nor a name in ``allowed_hosts``
    (``"*"``: any) is ``403 host_not_allowed``, and a change sent by another site's page
    (its ``Origin``) is ``403 origin_not_allowed``.

    Clients authenticate with ``Authorization: Bearer <token>`` (``token`` is at least
    16 characters) or through ``authenticate(request)`` (sync or async; gets the
    Starlette request, a ``WebSocket`` on the WebSocket route; returns the caller's
    principal id, a non-empty str, or None/raises to refuse). With ``authenticate`` every
    principal has its own namespace of session ids, stored under a hash of the
    principal id (never the id itself); the bearer token has the default one, whose
    sessions keep their ids in the store. When both are given, a request carrying the
    token is the token's, any other goes to ``authenticate``.

    Limits: ``max_body_bytes`` (413), ``max_concurrent_runs`` across sessions and
    ``max_queued`` messages per session (429), ``events_window`` events kept per
    session for readers that (re)connect (older ones stay in the store,
    ``store.events``), ``body_timeout`` seconds for a request body to arrive (408).

    On a SQLite or DuckDB file the app takes the store's server lease now: a second
    server on the same file raises :class:`~sessionkit.StoreLocked` naming the
    holder. The lease goes back when the app shuts down (or with
    ``app.state.sessionkit.close()``). Serve the app with one worker process; on
    PostgreSQL any number of processes may serve the store together.

    A store whose server records are of a newer layout than this sessionkit's
    (docs/server.md) raises :class:`~sessionkit.SchemaVersionError` naming both,
    and nothing is written.
    """
    server = SessionServer(
        agent,
        store,
        token=token,
        authenticate=authenticate,
        max_body_bytes=max_body_bytes,
        max_concurrent_runs=max_concurrent_runs,
        max_queued=max_queued,
        events_window=events_window,
        body_timeout=body_timeout,
    )
    app = Starlette(lifespan=server.lifespan, middleware=[Middleware(HostGuard, allowed_hosts=list(allowed_hosts))])
    # Every request goes to the server's own dispatch, which reads the raw path: a
    # session id with an encoded "/" or a newline is still one path segment (400),
    # and every answer, even for an unknown path, is JSON and comes after the auth check.
    app.router.default = server.asgi
    app.state.sessionkit = server
    return app
