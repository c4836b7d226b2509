"""Finding an agent by name: ``module:attribute``, as ``sessionkit serve --agent`` takes it.

The command line checks the name and loads the agent once before serving; each
worker process of ``sessionkit serve --workers N`` loads it again from the name
it is handed (:mod:`sessionkit.server._worker`). Both come here, so a name means
the same in both.
"""

from __future__ import annotations

import importlib
import os
import sys

__all__ = ["split_agent_spec", "load_agent"]


def split_agent_spec(spec: str) -> tuple[str, str]:
    """``"myapp.agents:support"`` -> ``("myapp.agents", "support")``; any other shape -> ValueError."""
    module_name, sep, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or not module_name or not attr:
        raise ValueError(f"an agent is named module:attribute (for example myapp.agents:support), got {spec!r}")
    return module_name, attr


def load_agent(spec: str) -> object:
    """The object ``module:attribute`` names, importing from the current folder first (as uvicorn does).

    A name that cannot be loaded raises ValueError saying why: the module cannot be
    imported, importing it failed (its error is named), or it has no such attribute.
    """
    module_name, attr = split_agent_spec(spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing
        raise ValueError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    obj: object = module
    for name in attr.split("."):
        if not hasattr(obj, name):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, name)
    return obj
