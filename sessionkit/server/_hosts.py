"""Which ``Host`` a server answers and which ``Origin`` may change things: :class:`HostGuard`.

Every HTTP app sessionkit serves (``sessionkit serve``, ``sessionkit view``, and any later
receiver) is wrapped in this one ASGI middleware, the place where the check is made.

Why: a server on 127.0.0.1 is still reachable from a web page the user visits. With DNS
rebinding a page of ``attacker.example`` has its name resolve to 127.0.0.1 and then reads the
server's answers as its own (same origin for the browser); the request it sends carries
``Host: attacker.example``. So a request is answered only when its ``Host`` names this
server: a loopback name (``localhost``, ``*.localhost``, 127.0.0.0/8, ``::1``), the address
the connection arrived on (``scope["server"]``, as the socket reports it: with a bind to
0.0.0.0 the machine's own address the client used), or a name given in ``allowed_hosts``
(a reverse proxy's public name; ``"*"`` allows any, for a proxy that checks ``Host``
itself). A port in ``Host`` is not compared: a rebinding page cannot choose the name, and a
proxy in front may listen on another port.

And a state-changing request (any method but GET, HEAD, OPTIONS) sent by a browser from
another site (its ``Origin`` names another host than ``Host``, or is ``null``) is refused:
a form or ``fetch`` of another site cannot delete or post. A request without ``Origin``
(curl, httpx, a server-side client) is not a cross-site browser request and passes.

Refusals are ``403`` JSON bodies, ``{"error": "host_not_allowed" | "origin_not_allowed",
"detail": ...}``, before the app sees anything; a WebSocket handshake with a bad ``Host``
is refused the same way (or closed with code 4403 where the server cannot send an answer).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # (annotations only: this module needs no Starlette to run)
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HostGuard", "host_name", "is_loopback_host"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback_host(name: str) -> bool:
    """Whether ``name`` (a host name or address, lower case, no port) only reaches this machine:
    ``localhost`` and its subdomains (RFC 6761), 127.0.0.0/8, ``::1``."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The host name of a ``Host`` header value (``example.org:8080`` -> ``example.org``,
    ``[::1]:80`` -> ``::1``), lower case, a trailing dot dropped; None for a malformed one."""
    value = value.strip()
    if not value or any(c in value for c in "/?#@ \\"):
        return None
    try:
        parts = urlsplit("//" + value)
        name = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return None
    if not name:
        return None
    return name.rstrip(".")


def _same_address(name: str, address: object) -> bool:
    if not isinstance(address, str):
        return False
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False


# Not Starlette's TrustedHostMiddleware: it knows a fixed list of names only, while this check
# also accepts the address the connection arrived on (known per request, from the socket) and
# checks Origin on writes, with the project's JSON refusals.
class HostGuard:
    """ASGI middleware: answer only requests whose ``Host`` names this server, and refuse
    state-changing requests from another site's page (see the module's docstring).

    ``allowed_hosts``: more host names to answer (exact, case-insensitive; ``.example.org``
    also allows every subdomain of example.org; ``"*"`` allows any Host). Use with Starlette
    as ``Starlette(middleware=[Middleware(HostGuard, allowed_hosts=[...])])`` or wrap any ASGI
    app: ``HostGuard(app, allowed_hosts=[...])``."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        names = []
        for host in allowed_hosts:
            if not isinstance(host, str) or not host.strip():
                raise ValueError(f"an allowed host must be a non-empty host name, got {host!r}")
            names.append(host.strip().lower().rstrip("."))
        self.any_host = "*" in names
        self.exact = frozenset(n for n in names if not n.startswith("."))
        self.suffixes = tuple(n for n in names if n.startswith("."))

    def _listed(self, name: str) -> bool:
        return self.any_host or name in self.exact or any(name.endswith(s) or name == s[1:] for s in self.suffixes)

    def host_allowed(self, name: str, scope: Scope) -> bool:
        """Whether the host name ``name`` (from :func:`host_name`) names this server."""
        if is_loopback_host(name) or self._listed(name):
            return True
        server = scope.get("server")  # (host, port) of the socket the request arrived on, or None
        return server is not None and _same_address(name, server[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        name = host_name(host) if host is not None else None
        if name is None or not self.host_allowed(name, scope):
            shown = "no Host header" if host is None else f"Host {host!r}"
            detail = (
                f"{shown} does not name this server: it answers its own address and loopback names "
                "(allow another name with --allow-host, or allowed_hosts=)"
            )
            await _refuse(scope, receive, send, "host_not_allowed", detail)
            return
        if scope["type"] == "http" and scope.get("method", "GET") not in _SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None and not self._origin_allowed(origin, host or ""):
                detail = f"a change requested by a page of another site (Origin {origin!r}) is refused"
                await _refuse(scope, receive, send, "origin_not_allowed", detail)
                return
        await self.app(scope, receive, send)

    def _origin_allowed(self, origin: str, host: str) -> bool:
        try:
            parts = urlsplit(origin.strip())
            netloc = parts.netloc
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not netloc:
            return False  # "null" (a sandboxed frame, a file:// page) or something else
        if netloc.lower() == host.strip().lower():
            return True  # the page this server served
        name = host_name(netloc)
        return name is not None and self._listed(name)


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope.get("headers") or ():
        name = key.decode("latin-1").lower()
        if name not in out:  # a repeated Host is read as its first value (h11 refuses it anyway)
            out[name] = value.decode("latin-1")
    return out


async def _refuse(scope: Scope, receive: Receive, send: Send, error: str, detail: str) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": 403, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 4403})
