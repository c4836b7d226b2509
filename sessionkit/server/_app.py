"""The Starlette application: authentication, routing, bodies, SSE and WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import json
import logging
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import StoreClosed, UsageError
from ..store import Store
from ._events import CLOSED, Subscriber, dumps_event
from ._lease import Lease
from ._openapi import openapi_document
from ._sessions import MODES, SESSION_ID, Rejected, SessionManager, stored_session_id

log = logging.getLogger("sessionkit.server")

__all__ = ["create_app", "SessionServer"]

MIN_TOKEN_CHARS = 16
#: Seconds between comment lines on an idle event stream (keeps proxies from closing it).
KEEPALIVE_SECONDS = 15.0

_WS_CLOSE = {"session_deleted": 4404, "server_stopping": 1012, "too_slow": 1013}


def _json(status: int, body: Any, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


class _Auth:
    """Bearer token (compared in constant time) and/or a custom ``authenticate``."""

    def __init__(self, token: str | None, authenticate: Callable | None) -> None:
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
                log.warning("authenticate returned %s, not a principal id (str): request refused",
                            type(result).__name__)
            return None
        return result


def _segments(scope: Mapping[str, Any]) -> list[str] | None:
    """The path's segments, each percent-decoded (so an encoded ``/`` stays inside its segment)."""
    raw = scope.get("raw_path")
    if isinstance(raw, (bytes, bytearray)):
        path = raw.decode("latin-1").split("?", 1)[0]
    else:
        path = quote(scope.get("path", ""))
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    if not path.startswith("/"):
        return None
    parts = path[1:].split("/")
    return [unquote(p, errors="replace") for p in parts]


def _resume_after(conn: HTTPConnection, *, header: bool = True) -> int | None:
    """``Last-Event-ID`` (or ``?lastEventId=``): resume after this seq; None for the whole window."""
    value = conn.headers.get("last-event-id") if header else None
    if value is None or value.strip() == "":
        value = conn.query_params.get("lastEventId")
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    try:
        n = int(value, 10)
    except ValueError:
        raise Rejected(400, "last_event_id_invalid") from None
    if n < -1 or len(value) > 19:
        raise Rejected(400, "last_event_id_invalid")
    return n


def _check_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
        raise Rejected(400, "session_id_invalid")
    return session_id


_EMPTY = object()  # a request without a body


def _parse_message(body: Any) -> tuple[str, str, str | None]:
    if not isinstance(body, dict):
        raise Rejected(400, "invalid_body", detail="the body must be a JSON object with 'text'")
    text = body.get("text")
    if not isinstance(text, str) or not text:
        raise Rejected(400, "invalid_body", detail="'text' must be a non-empty string")
    mode = body.get("mode")
    if mode is None:
        mode = "followUp"
    if mode not in MODES:
        raise Rejected(400, "invalid_body", detail="'mode' must be 'followUp' or 'steer'")
    author = body.get("author")
    if author is not None and not isinstance(author, str):
        raise Rejected(400, "invalid_body", detail="'author' must be a string")
    return text, mode, author


class SessionServer:
    """The server behind the app (``app.state.sessionkit``): sessions, runs, lease."""

    def __init__(
        self,
        agent: Any,
        store: Store,
        *,
        token: str | None,
        authenticate: Callable | None,
        max_body_bytes: int,
        max_concurrent_runs: int,
        max_queued: int,
        events_window: int,
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a sessionkit Store (sk.open_store(...)), got {type(store).__name__}")
        if not callable(getattr(agent, "run", None)):
            raise TypeError(f"agent must be a sessionkit Agent, got {type(agent).__name__}")
        self.auth = _Auth(token, authenticate)
        self.max_body_bytes = _positive_int("max_body_bytes", max_body_bytes)
        self.events_window = _positive_int("events_window", events_window)
        self.agent = agent
        self.store = store
        try:
            store.records("", "server.session")
        except UsageError as exc:
            raise UsageError(f"the {store.engine} engine cannot hold the server's tables yet: {exc}") from exc
        self.sessions = SessionManager(
            agent,
            store,
            max_concurrent_runs=_positive_int("max_concurrent_runs", max_concurrent_runs),
            max_queued=_positive_int("max_queued", max_queued),
            events_window=self.events_window,
        )
        self.keepalive = KEEPALIVE_SECONDS
        self.lease: Lease | None = None
        if store.engine in ("sqlite", "duckdb") and store.path is not None:
            self.lease = Lease(store.path)
            self.lease.acquire()
        self._openapi = openapi_document()

    def close(self) -> None:
        """Give the lease back (the app's shutdown does it too)."""
        if self.lease is not None:
            self.lease.release()

    # ------------------------------------------------------------------ lifespan

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette):
        if self.lease is not None:
            self.lease.acquire()  # again, if a previous shutdown gave it back
        self.sessions.bind_loop()
        restore = self._watch_signals()
        try:
            yield
        finally:
            restore()
            try:
                await self.sessions.shutdown()
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
        previous: dict[int, Any] = {}

        def handler(signum, frame, _sessions=self.sessions):
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

    async def asgi(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            response = await self.http(Request(scope, receive))
            await response(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.websocket(WebSocket(scope, receive, send))

    async def http(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except Rejected as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            if exc.status == 405:
                headers = {"Allow": exc.extra.pop("allow", "GET")}
            return _json(exc.status, exc.body(), headers)
        except StoreClosed:
            return _json(503, {"error": "store_closed"})
        except Exception:
            log.exception("sessionkit server: %s %s failed", request.method, request.url.path)
            return _json(500, {"error": "internal_error"})

    async def _route(self, request: Request) -> Response:
        segments = _segments(request.scope)
        method = request.method
        if segments == ["openapi.json"]:
            if method not in ("GET", "HEAD"):
                raise Rejected(405, "method_not_allowed", allow="GET")
            return _json(200, self._openapi)
        principal = await self.auth.principal(request)
        if principal is None:
            raise Rejected(401, "unauthorized")
        length = request.headers.get("content-length")
        if length is not None:
            try:
                if int(length) > self.max_body_bytes:
                    raise Rejected(413, "body_too_large")
            except ValueError:
                raise Rejected(400, "invalid_body", detail="a malformed Content-Length") from None
        if not segments or segments[0] != "sessions":
            raise Rejected(404, "not_found")
        if len(segments) == 1:
            if method != "POST":
                raise Rejected(405, "method_not_allowed", allow="POST")
            return await self._create(request, principal)
        session_id = segments[1]
        if len(segments) == 2:
            if method == "GET":
                return self._describe(principal, session_id)
            if method == "DELETE":
                return await self._delete(principal, session_id)
            raise Rejected(405, "method_not_allowed", allow="GET, DELETE")
        if len(segments) == 3:
            action = segments[2]
            if action == "messages":
                if method != "POST":
                    raise Rejected(405, "method_not_allowed", allow="POST")
                return await self._send(request, principal, session_id)
            if action == "events":
                if method != "GET":
                    raise Rejected(405, "method_not_allowed", allow="GET")
                return self._events(request, principal, session_id)
            if action == "ws":
                if method != "GET":
                    raise Rejected(405, "method_not_allowed", allow="GET")
                self._state(principal, session_id)
                _resume_after(request, header=False)
                raise Rejected(426, "upgrade_required")
        raise Rejected(404, "not_found")

    def _state(self, principal: str, session_id: str):
        _check_id(session_id)
        return self.sessions.get(stored_session_id(principal, session_id), session_id)

    async def _body(self, request: Request) -> Any:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body_bytes:
                raise Rejected(413, "body_too_large")
        if not body:  # nothing at all; whitespace alone is a body that is not JSON
            return _EMPTY
        try:
            return json.loads(body)
        except ValueError:
            raise Rejected(400, "invalid_body", detail="the body is not JSON") from None

    async def _create(self, request: Request, principal: str) -> Response:
        body = await self._body(request)
        if body is _EMPTY:  # no body: a random id
            body = {}
        if not isinstance(body, dict):
            raise Rejected(400, "invalid_body", detail="the body must be a JSON object")
        session_id = body["sessionId"] if "sessionId" in body else uuid.uuid4().hex
        _check_id(session_id)
        created = await self.sessions.create(stored_session_id(principal, session_id), session_id)
        if created:
            return _json(201, {"sessionId": session_id}, {"Location": f"/sessions/{session_id}"})
        return _json(200, {"sessionId": session_id})

    def _describe(self, principal: str, session_id: str) -> Response:
        state = self._state(principal, session_id)
        return _json(200, self.sessions.describe(state))

    async def _delete(self, principal: str, session_id: str) -> Response:
        state = self._state(principal, session_id)
        await self.sessions.delete(state)
        return _json(202, {"sessionId": session_id, "status": "deleted"})

    async def _send(self, request: Request, principal: str, session_id: str) -> Response:
        state = self._state(principal, session_id)
        text, mode, author = _parse_message(await self._body(request))
        answer = await self.sessions.submit(state, text, mode, author)
        return _json(202, answer)

    def _events(self, request: Request, principal: str, session_id: str) -> Response:
        state = self._state(principal, session_id)
        after = _resume_after(request)
        sub = self.sessions.subscribe(state, after)
        sessions = self.sessions
        keepalive = self.keepalive

        async def stream():
            try:
                while True:
                    item = await sub.get(timeout=keepalive)
                    if item is None:
                        yield b": keepalive\n\n"
                        continue
                    if item is CLOSED:
                        return
                    chunk = [_sse(item)]
                    while sub.items:  # send what is already waiting in one write
                        chunk.append(_sse(sub.items.popleft()))
                    yield "".join(chunk).encode()
            finally:
                sessions.unsubscribe(state, sub)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # ------------------------------------------------------------------ WebSocket

    async def websocket(self, ws: WebSocket) -> None:
        try:
            state, after = await self._ws_open(ws)
        except Rejected as exc:
            await _deny(ws, exc)
            return
        except Exception:
            log.exception("sessionkit server: websocket %s failed", ws.url.path)
            await _deny(ws, Rejected(500, "internal_error"))
            return
        await ws.accept()
        sub = self.sessions.subscribe(state, after)
        pump = asyncio.create_task(self._ws_pump(ws, sub))
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                reply = await self._ws_message(state, message)
                sub.put(None, dumps_event(reply))
        except WebSocketDisconnect:
            pass
        finally:
            self.sessions.unsubscribe(state, sub)
            sub.close("client_gone")
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump

    async def _ws_open(self, ws: WebSocket):
        principal = await self.auth.principal(ws)
        if principal is None:
            raise Rejected(401, "unauthorized")
        segments = _segments(ws.scope)
        if not segments or len(segments) != 3 or segments[0] != "sessions" or segments[2] != "ws":
            raise Rejected(404, "not_found")
        state = self._state(principal, segments[1])
        return state, _resume_after(ws, header=False)

    async def _ws_message(self, state, message: Mapping[str, Any]) -> dict:
        data = message.get("text")
        if data is None and message.get("bytes") is not None:
            raw = message["bytes"]
            if len(raw) > self.max_body_bytes:
                return {"error": "body_too_large"}
            try:
                data = raw.decode("utf-8")
            except UnicodeDecodeError:
                return {"error": "invalid_body", "detail": "frames must be UTF-8 JSON"}
        if data is None:
            return {"error": "invalid_body", "detail": "an empty frame"}
        if len(data) > self.max_body_bytes or len(data.encode("utf-8", "surrogatepass")) > self.max_body_bytes:
            return {"error": "body_too_large"}
        try:
            body = json.loads(data)
            text, mode, author = _parse_message(body)
            return await self.sessions.submit(state, text, mode, author)
        except ValueError:
            return {"error": "invalid_body", "detail": "the frame is not JSON"}
        except Rejected as exc:
            return exc.body()
        except StoreClosed:
            return {"error": "store_closed"}
        except Exception:
            log.exception("sessionkit server: a websocket message to %r failed", state.public_id)
            return {"error": "internal_error"}

    async def _ws_pump(self, ws: WebSocket, sub: Subscriber) -> None:
        try:
            while True:
                item = await sub.get()
                if item is CLOSED:
                    if sub.reason != "client_gone":
                        await ws.close(code=_WS_CLOSE.get(sub.reason or "", 1000), reason=sub.reason or "")
                    return
                await ws.send_text(item[1])
        except (WebSocketDisconnect, RuntimeError, OSError):
            return  # the client went away; the receiving side ends the connection


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
    agent: Any,
    store: Store,
    *,
    token: str | None = None,
    authenticate: Callable | None = None,
    max_body_bytes: int = 1_000_000,
    max_concurrent_runs: int = 16,
    max_queued: int = 100,
    events_window: int = 1_000,
) -> Starlette:
    """An ASGI app serving ``agent`` over the sessions of ``store`` (SPEC section 9).

    Clients authenticate with ``Authorization: Bearer <token>`` (``token`` is at least
    16 characters) or through ``authenticate(request)`` (sync or async; gets the
    Starlette request, a ``WebSocket`` on the WebSocket route; returns the caller's
    principal id, a non-empty str, or None/raises to refuse). With ``authenticate`` every
    principal has its own namespace of session ids; the bearer token has the
    default one, whose sessions keep their ids in the store. When both are given,
    a request carrying the token is the token's, any other goes to ``authenticate``.

    Limits: ``max_body_bytes`` (413), ``max_concurrent_runs`` across sessions and
    ``max_queued`` messages per session (429), ``events_window`` events kept per
    session for readers that (re)connect; older ones stay in the store
    (``store.events``).

    On a SQLite or DuckDB file the app takes the store's server lease now: a second
    server on the same file raises :class:`~sessionkit.StoreLocked` naming the
    holder. The lease goes back when the app shuts down (or with
    ``app.state.sessionkit.close()``). Serve the app with one worker process.
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
    )
    app = Starlette(lifespan=server.lifespan)
    # Every request goes to the server's own dispatch, which reads the raw path: a
    # session id with an encoded "/" or a newline is still one path segment (400),
    # and every answer, even for an unknown path, is JSON and comes after the auth check.
    app.router.default = server.asgi
    app.state.sessionkit = server
    return app
