"""The OpenAPI 3.1 document served at ``GET /openapi.json``, built from the route table."""

from __future__ import annotations

import copy

from . import _schemas as S
from ._routes import ROUTES, Route

__all__ = ["openapi_document"]

_INFO = {
    "title": "sessionkit server",
    "version": "2",
    "description": (
        "Sessions owned by the server: send messages, follow their runs live (Server-Sent Events or a "
        "WebSocket), resume by event seq. Every operation but this document needs "
        "`Authorization: Bearer <token>` (or the server's custom authenticator); a refused request "
        "gets 401 before anything else is checked. With a custom authenticator each principal has "
        "its own namespace of session ids. A message answered 202 ends in its conversation, or in a run "
        "recorded failed or interrupted with the reason, also when the server stops or is killed: a run "
        "it left unfinished starts again at the next start."
    ),
}


def _operation(route: Route) -> dict:
    op: dict = {"operationId": route.operation, "summary": route.summary}
    if route.description:
        op["description"] = route.description
    if route.public:
        op["security"] = []
    if route.parameters:
        op["parameters"] = [dict(p) for p in route.parameters]
    if route.body is not None:
        op["requestBody"] = {"required": route.body_required, "content": {"application/json": {"schema": route.body}}}
    op["responses"] = route.responses
    op.update(route.extra)
    return op


def _build() -> dict:
    paths: dict = {}
    for route in ROUTES:
        item = paths.setdefault(route.path, {})
        if "{sessionId}" in route.path and "parameters" not in item:
            item["parameters"] = [S.SESSION_ID_PARAM]
        item[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": _INFO,
        "security": [{"bearerAuth": []}],
        "components": {"securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }


_DOCUMENT = _build()


def openapi_document() -> dict:
    """A fresh copy of the document."""
    return copy.deepcopy(_DOCUMENT)
