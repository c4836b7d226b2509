"""How sessions and stores display in a notebook (called by their ``_repr_*`` methods).

With the ``widgets`` extra installed a session shows as a live
:class:`~sessionkit.widgets.BranchTree` and a store as a
:class:`~sessionkit.widgets.StoreBrowser`; either MIME bundle also carries the
static HTML snapshot and plain text, so nbconvert and GitHub still show the
tree. Without the extra, the same static HTML is all there is. Any failure
while building a widget falls back to the static HTML: displaying a session
must never raise in a notebook.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import _static

if TYPE_CHECKING:
    from ..store import Store
    from ._source import ViewedSession

log = logging.getLogger("sessionkit.widgets")


def _widgets_ok() -> bool:
    from . import widgets_available

    return widgets_available()


def session_bundle(session: ViewedSession) -> dict | tuple[dict, dict]:
    """The MIME bundle of a store session: the BranchTree widget plus its snapshot."""
    if _widgets_ok():
        try:
            from ._views import BranchTree

            bundle = BranchTree(session)._repr_mimebundle_()
            if bundle is not None:
                return bundle
        except Exception:
            log.exception("sessionkit: could not build a BranchTree; showing static HTML")
    return {"text/html": session_html(session), "text/plain": repr(session)}


def session_html(session: ViewedSession) -> str:
    """Static HTML of a session (its tree)."""
    try:
        return _static.session_html(session)
    except Exception as exc:
        return f"<pre>{_static._e(repr(session))}: {_static._e(exc)}</pre>"


def store_bundle(store: Store) -> dict | tuple[dict, dict]:
    """The MIME bundle of a store: a session browser widget plus the sessions table."""
    if _widgets_ok() and not getattr(store, "closed", False):
        try:
            from ._views import StoreBrowser

            return StoreBrowser(store)._repr_mimebundle_()
        except Exception:
            log.exception("sessionkit: could not build a StoreBrowser; showing static HTML")
    return {"text/html": store_html(store), "text/plain": repr(store)}


def store_html(store: Store) -> str:
    """Static HTML of a store (a table of its sessions)."""
    return _static.store_html(store)


def _display_static(html_text: str, plain: str) -> None:
    from IPython.display import display

    display({"text/html": html_text, "text/plain": plain}, raw=True)


def display_session(session: ViewedSession) -> None:
    """IPython display of a session: the tree's snapshot, then the live BranchTree (if any)."""
    if _widgets_ok():
        try:
            from ._views import BranchTree

            BranchTree(session)._ipython_display_()
            return
        except Exception:
            log.exception("sessionkit: could not build a BranchTree; showing static HTML")
    _display_static(session_html(session), repr(session))


def display_store(store: Store) -> None:
    """IPython display of a store: its sessions table, then the live StoreBrowser (if any)."""
    if _widgets_ok() and not getattr(store, "closed", False):
        try:
            from ._views import StoreBrowser

            StoreBrowser(store)._ipython_display_()
            return
        except Exception:
            log.exception("sessionkit: could not build a StoreBrowser; showing static HTML")
    _display_static(store_html(store), repr(store))
