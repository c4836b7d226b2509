"""The app each worker process of ``sessionkit serve --workers N`` builds for itself.

uvicorn starts its worker processes afresh and has each import an app factory;
:func:`sessionkit.server.serve` passes what the factory needs in the environment:
``SESSIONKIT_SERVE_STORE`` (the store URL), ``SESSIONKIT_SERVE_AGENT`` (``module:attr``,
imported from ``SESSIONKIT_SERVE_CWD`` first), ``SESSIONKIT_TOKEN``,
``SESSIONKIT_SERVE_TIMEOUT_REQUEST`` and ``SESSIONKIT_SERVE_ALLOW_HOSTS`` (one per line).
Every worker opens its own connection pool on
the one PostgreSQL store; the store keeps the workers in step (see
:mod:`sessionkit.server._coordinate`).
"""

from __future__ import annotations

import os
import sys

__all__ = ["app"]


def app():
    """Build this worker's app from the environment (an ASGI app for uvicorn's ``factory=True``)."""
    import sessionkit as sk
    from sessionkit.agent import load_agent

    from ._app import create_app
    from ._scheduler import served_agent

    folder = os.environ.get("SESSIONKIT_SERVE_CWD")
    if folder and folder not in sys.path:
        sys.path.insert(0, folder)
    agent = load_agent(os.environ["SESSIONKIT_SERVE_AGENT"])
    store = sk.open_store(os.environ["SESSIONKIT_SERVE_STORE"])
    timeout = float(os.environ.get("SESSIONKIT_SERVE_TIMEOUT_REQUEST") or 30.0)
    hosts = [h for h in os.environ.get("SESSIONKIT_SERVE_ALLOW_HOSTS", "").splitlines() if h]
    return create_app(
        served_agent(agent), store, token=os.environ["SESSIONKIT_TOKEN"], body_timeout=timeout, allowed_hosts=hosts
    )
