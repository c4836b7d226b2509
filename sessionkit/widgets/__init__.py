"""Notebook views of sessions and runs (docs/widgets.md).

::

    import sessionkit as sk
    tree = sk.widgets.BranchTree(session)          # the whole tree; click selects a path
    chat = sk.widgets.Transcript(session, follow=tree)   # that path as a chat
    live = sk.widgets.RunView(controller)          # a run as it streams
    side = sk.widgets.CompareView()                # compare()'s variants side by side
    exp = sk.widgets.ExperimentView()              # experiment()'s variants against its baseline
    work = sk.widgets.QueueView(store, "check", annotator="ana")  # an annotation queue to label

:mod:`sessionkit.widgets.viewer` holds the data and page of the store viewer
(``sessionkit view``, docs/viewer.md), which runs these views' front end in a web page.

The widget classes need the ``widgets`` extra (anywidget, ipywidgets); the
static snapshots in :mod:`sessionkit.widgets._static` do not, so a session or
store still displays as HTML without it. Nothing here is imported by
``import sessionkit``.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "BranchTree",
    "Transcript",
    "RunView",
    "StoreBrowser",
    "CompareView",
    "ExperimentView",
    "QueueView",
    "snapshot",
    "widgets_available",
]

_WIDGETS = {"BranchTree", "Transcript", "RunView", "StoreBrowser", "CompareView", "ExperimentView", "QueueView"}
_MODULES = {"CompareView": "_compare_view", "ExperimentView": "_experiment_view", "QueueView": "_queue_view"}


def widgets_available() -> bool:
    """True when anywidget and ipywidgets can be imported (the ``widgets`` extra)."""
    for name in ("ipywidgets", "anywidget"):
        try:
            importlib.import_module(name)
        except ImportError:
            return False
    return True


@runtime_checkable
class _Snapshotted(Protocol):
    """A view that renders its own script-free HTML (every widget class here)."""

    def snapshot_html(self) -> str: ...


def snapshot(obj: Any) -> str:
    """Static, script-free HTML for a view, a session or a store (what nbconvert shows)."""
    from ..store import Store
    from . import _static

    if isinstance(obj, _Snapshotted):
        return obj.snapshot_html()
    if isinstance(obj, Store):
        return _static.store_html(obj)
    return _static.session_html(obj)


def __getattr__(name: str) -> Any:
    if name in _WIDGETS:
        try:
            where = _MODULES.get(name, "_views")
            module = importlib.import_module(f"sessionkit.widgets.{where}")
        except ImportError as exc:
            if (exc.name or "").split(".")[0] not in ("anywidget", "ipywidgets", "traitlets", "comm", "psygnal"):
                raise
            from ..errors import MissingDependency

            raise MissingDependency(
                f"sessionkit.widgets.{name} needs anywidget and ipywidgets: pip install 'sessionkit[widgets]'"
            ) from exc
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sessionkit.widgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _WIDGETS)
