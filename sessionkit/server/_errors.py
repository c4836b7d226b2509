"""What the server answers when it refuses a request: one exception, one way to turn it
into a response, and the store failures that become ``503`` (never a ``500``).

Every refusal in the server is a :class:`Rejected` carrying the HTTP status and the
``error`` code of the JSON body (``{"error": "...", ...}``); the codes are listed in
the OpenAPI document and in docs/server.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

from ..errors import StoreClosed, StoreLocked
from ._storeio import WriterStopped

__all__ = ["Rejected", "error_response", "json_response", "store_failure"]


class Rejected(Exception):
    """A request the server refuses: HTTP ``status`` and the ``error`` code of the body."""

    def __init__(self, status: int, error: str, **extra: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.extra = extra

    def body(self) -> dict[str, str]:
        return {"error": self.error, **self.extra}


def json_response(status: int, body: object, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def error_response(exc: Rejected) -> JSONResponse:
    """The response of a refusal, with the headers its status calls for."""
    headers = None
    if exc.status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif exc.status == 405:
        headers = {"Allow": exc.extra.pop("allow", "GET")}
    return json_response(exc.status, exc.body(), headers)


def store_failure(exc: BaseException) -> Rejected | None:
    """The answer for a store that cannot serve now (never a 500), or None."""
    if isinstance(exc, StoreClosed):
        return Rejected(503, "store_closed")
    if isinstance(exc, WriterStopped):
        return Rejected(503, "server_stopping")
    if isinstance(exc, StoreLocked):
        return Rejected(503, "store_unavailable")
    return None
