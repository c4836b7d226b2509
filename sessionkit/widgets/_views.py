"""The widget classes: BranchTree, Transcript, RunView and StoreBrowser (anywidget on ipywidgets 8).

State the notebook user reads or sets lives in traitlets (``selected_id``,
``leaf_id``, ``mode``...). Bulk data goes the cheapest way: the tree once as
compact arrays, message content only for the ids a front end asks for (custom
messages), run events in batches every ``interval`` seconds. Each front end is
an ES module joined from files in ``static/`` next to this file (:mod:`._modules`):
``static/common.js`` first, the view's own file last, so the modules stay free of
imports and bundlers.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, cast

import anywidget
import ipywidgets
import traitlets

from ..agent import RunController, RunResult
from ..agent.events import Conversation
from ..errors import MessageNotFound, SessionKitError
from . import _modules, _runlog, _static
from ._labelled import LabelledView
from ._payloads import (
    BranchDiff,
    ClearRequest,
    ControllerQueue,
    DetailRequest,
    FetchRequest,
    FollowUpRequest,
    Handler,
    HelloRequest,
    InterruptRequest,
    PathEntry,
    PathPayload,
    QueueReply,
    RunSummary,
    RunViewState,
    SteerRequest,
    TimelinePayload,
    TreePayload,
    ViewReply,
)
from ._source import (
    TreeData,
    ViewedSession,
    branch_diff,
    is_store_session,
    labels_json,
    load_messages,
    message_preview,
    message_view,
    outline_rows,
    path_entries,
    tree_data,
    tree_json,
)
from ._timeline import session_timeline, timeline

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["BranchTree", "Transcript", "RunView", "StoreBrowser"]

log = logging.getLogger("sessionkit.widgets")

STATIC = _modules.STATIC
_MAX_FETCH = 500


def _module(*names: str) -> str:
    """``common.js`` and the files ``names`` (helpers first, the view's module last) as one ES module."""
    return _modules.join(*names)


def _css() -> str:
    return (STATIC / "sessionkit.css").read_text(encoding="utf-8")


def _script_json(value: object) -> str:
    """JSON safe to put inside a <script> element, and still valid JSON.

    Every ``<``, ``>`` and ``&`` becomes its ``\\u`` escape (inside JSON strings, the only
    place they occur), so no ``</script>`` or ``<!--`` in a message can end or alter the
    element, and ``JSON.parse`` reads the text back unchanged.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _marked(snapshot: str, key: str) -> str:
    return snapshot.replace("data-sessionkit-snapshot=", f'data-sk-snapshot-for="{key}" data-sessionkit-snapshot=', 1)


def display_view(widget: ipywidgets.DOMWidget, key: str, snapshot: str) -> None:
    """Display ``widget`` as two outputs: its static snapshot, then the widget itself.

    Wherever no widget front end runs, the snapshot is what shows:
    ``jupyter nbconvert --to html --execute`` (which saves the widget state, so its
    HTML prefers the widget view, which needs a CDN and a network to appear), GitHub,
    nbviewer, a notebook opened before its cells run. Where the widget renders
    (JupyterLab, Notebook 7, an exported page online), its front end hides the
    snapshot output marked with ``key`` (``data-sk-snapshot-for``). The widget's own
    output keeps an empty ``text/html`` so that renderers which show ``text/html``
    in place of a widget do not show the snapshot twice. The snapshot is what the view
    showed when displayed (a live RunView's shows the runs so far).
    """
    from IPython.display import display

    bundle = widget._repr_mimebundle_()
    if bundle is None:
        return
    data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
    data = dict(data)
    plain = data.get("text/plain", repr(widget))
    display({"text/html": _marked(snapshot, key), "text/plain": plain}, raw=True)
    data["text/html"] = ""
    data["text/plain"] = ""
    display(data, metadata=meta, raw=True)


class _View(anywidget.AnyWidget):
    """Common ground: static snapshot in the MIME bundle, ``to_html``, custom messages."""

    _css = _css()
    #: Names this view's snapshot output, which the front end hides once the widget renders.
    _snapshot_key = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **kwargs: object) -> None:
        # traitlets passes unknown keywords on to object.__init__ with only a deprecation
        # warning, so a misspelt option (view="full" for mode="full") would silently do nothing
        unknown = sorted(k for k in kwargs if not self.has_trait(k))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword argument(s): {', '.join(unknown)}")
        kwargs.setdefault("_snapshot_key", uuid.uuid4().hex)
        super().__init__(**kwargs)
        self.on_msg(self._dispatch)
        self._refresh_timer: threading.Timer | None = None
        self._lock = threading.RLock()

    # -- front-end messages ------------------------------------------------------
    def send(self, content: ViewReply | QueueReply, buffers: list[bytes] | None = None) -> None:
        """Send the front end one of the replies of ``_payloads``."""
        super().send(content, buffers)

    #: The handler of each front-end message this view understands, by the message's ``type``
    #: (each type's TypedDict: ``_payloads.VIEW_REQUESTS``); a message of any other type is ignored.
    _handlers: ClassVar[dict[str, Handler]] = {}

    def _dispatch(self, _widget: object, content: object, buffers: object) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            return
        handler = self._handlers.get(content["type"])
        if handler is None:
            return
        try:
            handler(self, content)
        except Exception as exc:  # answer the front end instead of leaving it waiting
            log.exception("sessionkit widget message %r failed", content.get("type"))
            self.send({"type": "error", "req": content.get("req"), "error": f"{type(exc).__name__}: {exc}"})

    # -- static output ---------------------------------------------------------------
    def snapshot_html(self) -> str:
        """Script-free HTML of what the view shows (nbconvert, GitHub, nbviewer)."""
        raise NotImplementedError

    def _safe_snapshot(self) -> str:
        try:
            return self.snapshot_html()
        except Exception as exc:
            log.exception("sessionkit: snapshot failed")
            return f"<pre>{type(self).__name__}: snapshot failed: {_static._e(exc)}</pre>"

    def _repr_mimebundle_(self, **kwargs: dict) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data)
        data["text/html"] = self._safe_snapshot()
        data["text/plain"] = self._plain()
        return data, meta

    def _ipython_display_(self, **kwargs: object) -> None:
        """Show the view in IPython as two outputs: its static snapshot, then the live widget.

        See :func:`display_view`.
        """
        display_view(self, self._snapshot_key, self._safe_snapshot())

    def _plain(self) -> str:
        return repr(self)

    def _offline_state(self) -> dict:
        """Trait values the front end reads, plus what answers its requests offline."""
        raise NotImplementedError

    def to_html(self, path: str | Path | None = None, *, title: str | None = None) -> str | Path:
        """A self-contained page of this view: interactive with JavaScript, readable without.

        The page embeds the front-end module, its data and the message content it
        may ask for, and loads nothing from the network. Returns the HTML, or the
        path written when ``path`` is given.
        """
        title = title or type(self).__name__
        payload = {
            "esm": self._esm,
            "state": self._offline_state(),
        }
        body = (
            f'<div id="sk-view">{self._safe_snapshot()}</div>'
            f'<script type="application/json" id="sk-payload">{_script_json(payload)}</script>'
            f'<script type="module">{_module("offline.js")}</script>'
        )
        html = _static.page(title, body, head=f"<style>{self._css}</style>")
        if path is None:
            return html
        out = Path(path)
        out.write_text(html, encoding="utf-8")
        return out

    # -- live refresh -------------------------------------------------------------------
    def _watch_store(self, session: object) -> None:
        if not is_store_session(session):  # the change feed is the store's (store.subscribe)
            self._unsubscribe = None
            return
        subscribe = session.store.subscribe
        ref = weakref.ref(self)
        sid = session.session_id

        def on_change(event: object) -> None:
            view = ref()
            if view is None or getattr(event, "session_id", None) != sid:
                return
            view._schedule_refresh(labels_only=getattr(event, "type", None) == "label")

        self._unsubscribe = subscribe(on_change)

    def _schedule_refresh(self, delay: float = 0.25, *, labels_only: bool = False) -> None:
        with self._lock:
            if not labels_only:
                self._full_refresh = True
            if self._refresh_timer is not None:
                return
            timer = threading.Timer(delay, self._timed_refresh)
            timer.daemon = True
            self._refresh_timer = timer
        timer.start()

    def _timed_refresh(self) -> None:
        with self._lock:
            self._refresh_timer = None
            full, self._full_refresh = getattr(self, "_full_refresh", False), False
        try:
            if full:
                self.refresh()
            else:  # only labels changed
                self.refresh_labels()
        except Exception:
            log.exception("sessionkit: refreshing %s failed", type(self).__name__)

    def refresh(self) -> None:
        """Read the session again and update the front end."""

    def refresh_labels(self) -> None:
        """Read the session's labels again (views that show them)."""

    def close(self) -> None:
        """Stop following the store and close the front end."""
        unsubscribe = getattr(self, "_unsubscribe", None)
        if unsubscribe is not None:
            unsubscribe()
            self._unsubscribe = None
        timer = getattr(self, "_refresh_timer", None)
        if timer is not None:
            timer.cancel()
        super().close()


def _check_interval(interval: object) -> float:
    """The seconds between two batches a live view sends (0 to 5; 0: every update at once)."""
    if not isinstance(interval, (int, float)) or isinstance(interval, bool) or not 0 <= interval <= 5:
        raise ValueError(f"interval must be between 0 and 5 seconds, got {interval!r}")
    return float(interval)


class _BatchedView(_View):
    """A view of a table filled live (CompareView, ExperimentView): updates are folded in under
    the lock and the table is sent at most every ``interval`` seconds (:meth:`_send_table`)."""

    def __init__(self, *, interval: float, **kwargs: object) -> None:
        self.interval = _check_interval(interval)
        super().__init__(**kwargs)
        self._timer: threading.Timer | None = None
        self.batches = 0  # updates sent to the front end (for tests and curiosity)

    def _updated(self, *, now: bool = False) -> None:
        """An update was folded in (call under the lock): send now, or when the interval ends."""
        if now or self.interval == 0:
            self._flush_locked()
        elif self._timer is None:
            self._timer = threading.Timer(self.interval, self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._send_table()
        self.batches += 1

    def _send_table(self) -> None:
        """Set the synced trait(s) the front end draws the table from."""
        raise NotImplementedError

    def close(self) -> None:
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
            self._timer = None
        super().close()


# ---------------------------------------------------------------------------


class BranchTree(LabelledView, _View):
    """The whole message tree of a session (docs/widgets.md).

    Rows show roles, a preview of each message (fetched as they scroll into
    view), tokens, branch points and the latest path; a chain without branches
    collapses to its first and last message around a "n more" row (click to
    expand); a compaction shows as a band over the messages it replaces, with
    its summary. Clicking a message sets ``selected_id``; shift-click sets
    ``compare_id`` and ``diff`` then compares the two branches from their fork
    point (messages, tokens, tool calls, cost from the runs' usage).

    The tree travels once as compact arrays (ids, parents, roles, tokens) and is
    laid out incrementally, so 10,000 messages open at once: lines and dots are drawn
    on a canvas, every row is real text (selectable, copyable, read by screen readers as
    a tree, found by the browser's find-in-page outside the view too; rows off screen cost
    no layout). Keyboard: arrows move through the rows, Home / End, Enter opens the row
    (expands a chain, shows a compaction, selects; Shift+Enter compares); the host's own
    shortcuts wait while the tree has the focus.

    >>> tree = sk.widgets.BranchTree(session)
    >>> tree.selected_id          # follows clicks in the notebook
    """

    _esm = _modules.view_module("branch_tree")

    _tree = cast("traitlets.TraitType[TreePayload, TreePayload]", traitlets.Dict().tag(sync=True))
    selected_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    compare_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    diff = traitlets.Dict().tag(sync=True)
    collapse = traitlets.Bool(True).tag(sync=True)
    height = traitlets.Int(420).tag(sync=True)

    def __init__(
        self,
        session: ViewedSession,
        *,
        selected_id: str | None = None,
        collapse: bool = True,
        height: int = 420,
        live: bool = True,
        **kwargs: object,
    ) -> None:
        self._session = session
        self._data = tree_data(session)
        super().__init__(
            _tree=tree_json(self._data), _labels=labels_json(session), collapse=collapse, height=height, **kwargs
        )
        self.observe(self._on_pick, names=["selected_id", "compare_id"])
        if selected_id is not None:
            self.selected_id = selected_id
        self._unsubscribe = None
        if live:
            self._watch_store(session)

    def __repr__(self) -> str:
        return f"BranchTree({self._data.session_id!r}, {self._data.n} messages, selected={self.selected_id!r})"

    # -- Python API ------------------------------------------------------------------
    @property
    def session(self) -> ViewedSession:
        return self._session

    @session.setter
    def session(self, session: ViewedSession) -> None:
        unsubscribe = getattr(self, "_unsubscribe", None)
        if unsubscribe is not None:
            unsubscribe()
        self._session = session
        self.selected_id = None
        self.compare_id = None
        self.refresh()
        self._watch_store(session)

    @property
    def data(self) -> TreeData:
        """The tree as parallel arrays (what the front end received)."""
        return self._data

    def rows(self, *, expanded: set[int] | frozenset[int] = frozenset()) -> list[tuple]:
        """The rows the front end draws (see :func:`sessionkit.widgets._source.outline_rows`)."""
        return outline_rows(self._data, collapse=self.collapse, expanded=expanded)

    def selected_path(self, *, compacted: bool = False) -> list[dict]:
        """The messages from the root to the selected message (the latest leaf if none)."""
        if self.selected_id is None and not self._data.n:
            return []
        if not isinstance(self._session, Conversation):  # a list of messages: a straight line
            messages = list(self._session)
            return messages if self.selected_id is None else messages[: self._data.index()[self.selected_id] + 1]
        return self._session.get_history(leaf_id=self.selected_id, compacted=compacted)

    def compare(self, a_id: str, b_id: str) -> BranchDiff:
        """Compare two branches from their fork point (see ``diff``)."""
        return branch_diff(self._session, a_id, b_id, data=self._data)

    def refresh(self) -> None:
        """Read the tree again (new messages, compactions) and send it to the front end."""
        with self._lock:
            self._data = tree_data(self._session)
            idx = self._data.index()
            if self.selected_id is not None and self.selected_id not in idx:
                self.selected_id = None
            if self.compare_id is not None and self.compare_id not in idx:
                self.compare_id = None
            self._tree = tree_json(self._data)
            self._labels = labels_json(self._session)
            self._on_pick(None)

    # -- traits -------------------------------------------------------------------------
    @traitlets.validate("selected_id", "compare_id")
    def _valid_id(self, proposal: Mapping[str, str | None]) -> str | None:
        value = proposal["value"]
        if value is None:
            return None
        if value not in self._data.index():
            raise MessageNotFound(f"message {value!r} is not in session {self._data.session_id!r}")
        return value

    def _on_pick(self, _change: object) -> None:
        a, b = self.selected_id, self.compare_id
        self.diff = dict(self.compare(a, b)) if a is not None and b is not None and a != b else {}

    # -- front end ------------------------------------------------------------------------
    def _msg_fetch(self, content: FetchRequest) -> None:
        ids = [i for i in content.get("ids") or () if isinstance(i, str)][:_MAX_FETCH]
        msgs = load_messages(self._session, ids)
        items = {k: message_preview(m) for k, m in msgs.items()}
        self.send({"type": "previews", "req": content.get("req"), "items": items})

    def _msg_detail(self, content: DetailRequest) -> None:
        mid = content.get("id")
        msgs = load_messages(self._session, [mid]) if isinstance(mid, str) else {}
        idx = self._data.index()
        view = None
        if mid in msgs:
            view = message_view(msgs[mid], tokens=self._data.tokens[idx[mid]] if mid in idx else None)
        self.send({"type": "detail", "req": content.get("req"), "id": mid, "message": view})

    _handlers: ClassVar[dict[str, Handler]] = {
        **LabelledView._label_handlers,
        "fetch": _msg_fetch,
        "detail": _msg_detail,
    }

    # -- static -------------------------------------------------------------------------------
    def snapshot_html(self) -> str:
        return _static.tree_html(
            self._session, data=self._data, selected_id=self.selected_id, collapse=self.collapse, labels=self._labels
        )

    def _offline_state(self) -> dict:
        msgs = load_messages(self._session, self._data.ids)
        idx = self._data.index()
        return {
            "_tree": self._tree,
            "selected_id": self.selected_id,
            "compare_id": self.compare_id,
            "diff": self.diff,
            "collapse": self.collapse,
            "_labels": self._labels,
            "height": max(self.height, 520),
            "_offline": {
                "messages": {k: message_view(m, tokens=self._data.tokens[idx[k]]) for k, m in msgs.items()},
            },
        }


# ---------------------------------------------------------------------------


class Transcript(LabelledView, _View):
    """One path of a session as a chat (docs/widgets.md).

    Shows each message with its tokens, tool calls with input and output, and
    every compaction boundary (summary, messages hidden, tokens before and
    after). ``mode`` switches between ``"model"`` (what the model sees: each
    compacted range replaced by its summary) and ``"full"`` (every message, the
    compacted ones marked). ``leaf_id=None`` follows the latest leaf.

    >>> chat = sk.widgets.Transcript(session, follow=tree)   # shows tree.selected_id's path
    """

    _esm = _module("transcript.js")

    leaf_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    mode = traitlets.Enum(("model", "full"), default_value="model").tag(sync=True)
    following = traitlets.Bool(False).tag(sync=True)
    height = traitlets.Int(520).tag(sync=True)
    _path = cast("traitlets.TraitType[PathPayload, PathPayload]", traitlets.Dict().tag(sync=True))

    def __init__(
        self,
        session: ViewedSession,
        leaf_id: str | None = None,
        *,
        mode: str = "model",
        follow: BranchTree | None = None,
        height: int = 520,
        live: bool = True,
        **kwargs: object,
    ) -> None:
        self._session = session
        if leaf_id is not None and is_store_session(session) and session.get(leaf_id) is None:
            raise MessageNotFound(f"message {leaf_id!r} is not in session {session.session_id!r}")
        super().__init__(leaf_id=leaf_id, mode=mode, height=height, _labels=labels_json(session), **kwargs)
        self._path = path_entries(session, leaf_id, compacted=(mode == "model"))
        self.observe(self._on_change, names=["leaf_id", "mode"])
        self._linked: tuple[BranchTree, Callable[[Mapping[str, str | None]], None]] | None = None
        self._unsubscribe = None
        if follow is not None:
            self.link(follow)
        if live:
            self._watch_store(session)

    def __repr__(self) -> str:
        sid = self._session.session_id if isinstance(self._session, Conversation) else ""
        n = len(self._path.get("entries", []))
        return f"Transcript({sid!r}, leaf_id={self.leaf_id!r}, mode={self.mode!r}, {n} entries)"

    @property
    def session(self) -> ViewedSession:
        return self._session

    @session.setter
    def session(self, session: ViewedSession) -> None:
        unsubscribe = getattr(self, "_unsubscribe", None)
        if unsubscribe is not None:
            unsubscribe()
        self._session = session
        with self.hold_trait_notifications():
            self.leaf_id = None
        self.refresh()
        self._watch_store(session)

    @property
    def entries(self) -> list[PathEntry]:
        """What the front end lists: messages, summaries and hidden messages, in path order."""
        return copy.deepcopy(self._path.get("entries", []))

    @property
    def messages(self) -> list[dict]:
        """The messages of the shown path, as the current ``mode`` reads them."""
        if is_store_session(self._session):
            if self._path.get("leaf_id") is None:
                return []
            return self._session.get_history(leaf_id=self._path["leaf_id"], compacted=(self.mode == "model"))
        return list(self._session.get_history() if isinstance(self._session, Conversation) else self._session)

    def link(self, tree: BranchTree) -> Transcript:
        """Follow ``tree``'s selection: selecting a message shows the path to it."""
        if not isinstance(tree, BranchTree):
            raise TypeError(f"link() needs a BranchTree, got {type(tree).__name__}")
        self.unlink()

        def on_select(change: Mapping[str, str | None]) -> None:
            self.leaf_id = change["new"]

        tree.observe(on_select, names=["selected_id"])
        self._linked = (tree, on_select)
        self.following = True
        self.leaf_id = tree.selected_id
        return self

    def unlink(self) -> None:
        """Stop following a BranchTree."""
        if self._linked is not None:
            tree, handler = self._linked
            tree.unobserve(handler, names=["selected_id"])
            self._linked = None
        self.following = False

    def refresh(self) -> None:
        with self._lock:
            leaf = self.leaf_id
            if leaf is not None and is_store_session(self._session) and self._session.get(leaf) is None:
                leaf = None
                self.leaf_id = None
            self._path = path_entries(self._session, leaf, compacted=(self.mode == "model"))
            self._labels = labels_json(self._session)

    @traitlets.validate("leaf_id")
    def _valid_leaf(self, proposal: Mapping[str, str | None]) -> str | None:
        value = proposal["value"]
        if value is not None and is_store_session(self._session) and self._session.get(value) is None:
            raise MessageNotFound(f"message {value!r} is not in session {self._session.session_id!r}")
        return value

    def _on_change(self, _change: object) -> None:
        self.refresh()

    def _msg_fetch(self, content: FetchRequest) -> None:
        ids = [i for i in content.get("ids") or () if isinstance(i, str)][:_MAX_FETCH]
        tokens = {e["id"]: e["tokens"] for e in self._path.get("entries", [])}
        msgs = load_messages(self._session, ids)
        items = {k: message_view(m, tokens=tokens.get(k)) for k, m in msgs.items()}
        self.send({"type": "messages", "req": content.get("req"), "items": items})

    _handlers: ClassVar[dict[str, Handler]] = {**LabelledView._label_handlers, "fetch": _msg_fetch}

    def snapshot_html(self) -> str:
        return _static.transcript_html(self._session, mode=self.mode, path=self._path, labels=self._labels)

    def _offline_state(self) -> dict:
        leaf = self._path.get("leaf_id")
        both = {m: path_entries(self._session, leaf, compacted=(m == "model")) for m in ("model", "full")}
        ids = [e["id"] for e in both["full"]["entries"]]
        tokens = {e["id"]: e["tokens"] for e in both["full"]["entries"]}
        msgs = load_messages(self._session, ids)
        return {
            "leaf_id": self.leaf_id,
            "mode": self.mode,
            "following": False,
            "height": self.height,
            "_path": self._path,
            "_labels": self._labels,
            "_offline": {
                "paths": both,
                "messages": {k: message_view(m, tokens=tokens.get(k)) for k, m in msgs.items()},
            },
        }


# ---------------------------------------------------------------------------


def _stored_events(session: object, run_id: str | None) -> list[dict]:
    """Events of a session (one run when ``run_id`` is given) from wherever they are kept."""
    if not isinstance(session, Conversation):
        raise TypeError(f"cannot find the run events of {session!r}")
    events = session.run_log.events(session.session_id)
    return [e for e in events if run_id is None or e.get("run_id") == run_id]


class RunView(_View):
    """A run as it streams, or replayed from its stored events (docs/widgets.md).

    Shows each turn's text as it arrives, reasoning, tool calls and results,
    usage and cost per model call and in total, turn boundaries and the
    controller's queue. Give it:

    - a ``RunController``: it follows every run the controller drives, live
      (and offers steer / follow-up / interrupt from the page);
    - a ``RunResult``: it replays that run from the stored events;
    - a list of event dicts: it replays them.

    Events are folded into ``state`` at once and sent to the front end in
    batches every ``interval`` seconds (0.075 by default), consecutive text
    deltas merged, so a fast stream costs a dozen messages a second at most.

    >>> view = sk.widgets.RunView(controller); view
    >>> await agent.run("Plan my week", session=s, controller=controller)
    """

    _esm = _modules.view_module("run_view")

    summary = cast("traitlets.TraitType[RunSummary, RunSummary]", traitlets.Dict().tag(sync=True))
    queue = cast("traitlets.TraitType[ControllerQueue, ControllerQueue]", traitlets.Dict().tag(sync=True))
    controls = traitlets.Bool(False).tag(sync=True)
    height = traitlets.Int(480).tag(sync=True)
    #: The timeline of the runs that have ended (``_timeline.timeline``), drawn above the runs.
    _timeline = cast("traitlets.TraitType[TimelinePayload, TimelinePayload]", traitlets.Dict().tag(sync=True))

    def __init__(
        self,
        source: object = None,
        *,
        run_id: str | None = None,
        interval: float = 0.075,
        height: int = 480,
        **kwargs: object,
    ) -> None:
        interval = _check_interval(interval)
        super().__init__(
            height=height, queue={"active": None, "queued": 0, "items": []}, _timeline={"runs": []}, **kwargs
        )
        self.interval = interval
        self._state = _runlog.new_state()
        self._log: list[dict] = []  # every batch sent, in order; what a new front end replays
        self._pending: list[dict] = []
        self._timer: threading.Timer | None = None
        self._counter = 0
        self._controller: RunController | None = None
        self._session: Conversation | None = None  # where the timeline finds the messages the calls produced
        self._detach: list[Callable[[], None]] = []
        self.batches = 0  # batches sent to the front end (for tests and curiosity)
        self.summary = _runlog.summary(self._state)
        if source is None:
            pass
        elif isinstance(source, RunController):
            self.attach(source)
        elif isinstance(source, (list, tuple)):
            self.extend(source)
        elif isinstance(source, RunResult) and source.session is not None:
            events = _stored_events(source.session, source.run_id)  # (a Conversation, or TypeError)
            self._session = cast(Conversation, source.session)  # before extend(): the timeline reads it
            self.extend(events)
        elif isinstance(source, Conversation):
            self._session = source
            self.extend(_stored_events(source, run_id))
        else:
            raise TypeError(
                "RunView needs a RunController, a RunResult, a session or a list of run events; "
                f"got {type(source).__name__}"
            )

    @classmethod
    def replay(
        cls,
        session: Conversation,
        run_id: str | None = None,
        *,
        interval: float = 0.075,
        height: int = 480,
        **kwargs: object,
    ) -> RunView:
        """A view of a session's stored runs (only ``run_id`` when given), from their events."""
        return cls(session, run_id=run_id, interval=interval, height=height, **kwargs)

    def __repr__(self) -> str:
        s = _runlog.summary(self._state)
        return f"RunView({s['runs']} runs, {s['turns']} turns, status={s['status']!r})"

    # -- sources ------------------------------------------------------------------------
    def attach(self, controller: object) -> RunView:
        """Follow the runs ``controller`` drives and show its queue."""
        if not isinstance(controller, RunController):
            raise TypeError(f"attach() needs a RunController, got {type(controller).__name__}")
        self.detach()
        self._controller = controller
        ref = weakref.ref(self)

        def on_event(event: dict) -> None:
            view = ref()
            if view is not None:
                view.push(event)

        def on_state(state: dict) -> None:
            view = ref()
            if view is not None:
                view.queue = copy.deepcopy(cast(ControllerQueue, state))

        self._detach = [controller.on_event(on_event), controller.subscribe(on_state)]
        self.queue = copy.deepcopy(cast(ControllerQueue, controller.state()))
        self.controls = True
        return self

    def detach(self) -> None:
        """Stop following the controller (what was shown stays)."""
        for undo in getattr(self, "_detach", ()):
            try:
                undo()
            except Exception:
                pass
        self._detach = []
        self._controller = None
        self.controls = False

    # -- events -----------------------------------------------------------------------------
    def push(self, event: dict) -> None:
        """Add one run event (from any thread); the front end gets it with the next batch."""
        if not isinstance(event, dict):
            raise TypeError(f"a run event is a dict, got {type(event).__name__}")
        event = copy.deepcopy(event)
        with self._lock:
            _runlog.apply_event(self._state, event)
            self._pending.append(event)
            final = event.get("kind") == "run.end"
            if final or self.interval == 0:
                self._cancel_timer()
            elif self._timer is None:
                self._timer = threading.Timer(self.interval, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if final or self.interval == 0:
            self.flush()

    def extend(self, events: Iterable[dict]) -> None:
        """Add many events at once (a replay): one batch."""
        with self._lock:
            for event in events:
                if not isinstance(event, dict):
                    raise TypeError(f"a run event is a dict, got {type(event).__name__}")
                event = copy.deepcopy(event)
                _runlog.apply_event(self._state, event)
                self._pending.append(event)
            self._cancel_timer()
        self.flush()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def flush(self) -> None:
        """Send what is pending now (called by the batch timer)."""
        with self._lock:
            self._timer = None
            if not self._pending:
                return
            batch = _runlog.coalesce(self._pending)
            self._pending = []
            for item in batch:
                item["_i"] = self._counter
                self._counter += 1
            self._log.extend(batch)
            self.batches += 1
            self.send({"type": "events", "events": batch})
            self.summary = _runlog.summary(self._state)
            ended = any(e.get("kind") == "run.end" for e in batch)
            log = list(self._log) if ended else None
        if log is not None:
            self._timeline = self._finished_timeline(log)

    def _finished_timeline(self, events: list[dict]) -> TimelinePayload:
        """The timeline of the runs that have ended (a running one is still being drawn below)."""
        session = self._session
        if session is None and self._controller is not None:
            session = getattr(self._controller, "session", None)
        try:
            data = session_timeline(session, events) if session is not None else timeline(events)
        except (SessionKitError, ValueError, LookupError, OSError):
            # a session that cannot be read now (a closed store): the bars without their messages
            data = timeline(events)
        return {"runs": [r for r in data["runs"] if r["status"] is not None]}

    @property
    def state(self) -> RunViewState:
        """Everything shown, folded from the events (runs, turns, tools, usage)."""
        with self._lock:
            return copy.deepcopy(self._state)

    @property
    def events(self) -> list[dict]:
        """The events as sent to the front end (text deltas merged per batch)."""
        with self._lock:
            return copy.deepcopy(self._log)

    @property
    def text(self) -> str:
        """The text of the latest turn that has any."""
        with self._lock:
            for run in reversed(self._state["runs"]):
                for turn in reversed(run["turns"]):
                    if turn["text"]:
                        return turn["text"]
        return ""

    # -- front end ------------------------------------------------------------------------
    def _msg_hello(self, content: HelloRequest) -> None:
        with self._lock:
            self.send({"type": "reset", "req": content.get("req"), "events": self._log})

    def _msg_steer(self, content: SteerRequest) -> None:
        if self._controller is not None and isinstance(content.get("text"), str) and content["text"].strip():
            self._controller.steer(content["text"])

    def _msg_follow_up(self, content: FollowUpRequest) -> None:
        if self._controller is not None and isinstance(content.get("text"), str) and content["text"].strip():
            self._controller.follow_up(content["text"])

    def _msg_clear(self, content: ClearRequest) -> None:
        if self._controller is not None:
            index = content.get("index")
            try:
                self._controller.clear(index if isinstance(index, int) else None)
            except IndexError:
                pass

    def _msg_interrupt(self, content: InterruptRequest) -> None:
        if self._controller is not None:
            self._controller.interrupt()

    _handlers: ClassVar[dict[str, Handler]] = {
        "hello": _msg_hello,
        "steer": _msg_steer,
        "follow_up": _msg_follow_up,
        "clear": _msg_clear,
        "interrupt": _msg_interrupt,
    }

    def snapshot_html(self) -> str:
        with self._lock:
            return _static.run_html(self._state, queue=self.queue)

    def _offline_state(self) -> dict:
        with self._lock:
            return {
                "summary": self.summary,
                "queue": self.queue,
                "controls": False,
                "height": self.height,
                "_timeline": self._timeline,
                "_offline": {"events": self._log},
            }

    def close(self) -> None:
        self.detach()
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
            self._timer = None
        super().close()


# ---------------------------------------------------------------------------


class StoreBrowser(ipywidgets.VBox):
    """A store in a notebook: pick a session, see its tree and the selected path.

    What ``store`` displays as when ipywidgets is installed.
    """

    def __init__(self, store: Store, *, session_id: str | None = None, max_sessions: int = 500) -> None:
        self._store = store
        infos = store.list_sessions()[:max_sessions]
        options = [(f"{i.id or '(default)'} · {i.message_count:,} messages", i.id) for i in infos]
        first = session_id if session_id is not None else (infos[0].id if infos else "")
        self.picker = ipywidgets.Dropdown(
            options=options or [("(no sessions)", "")],
            value=first if options else "",
            description="session",
            layout=ipywidgets.Layout(width="auto"),
        )
        session = store.session(first)
        self.tree = BranchTree(session)
        self.transcript = Transcript(session, follow=self.tree, height=420)
        self.picker.observe(self._on_pick, names="value")
        super().__init__([self.picker, self.tree, self.transcript])

    def _on_pick(self, change: Mapping[str, str]) -> None:
        session = self._store.session(change["new"])
        self.tree.session = session
        self.transcript.session = session

    def __repr__(self) -> str:
        return f"StoreBrowser({self._store!r})"

    def snapshot_html(self) -> str:
        return _static.store_html(self._store)

    def _repr_mimebundle_(self, **kwargs: object) -> tuple[dict, dict]:
        data = super()._repr_mimebundle_(**kwargs) or {}
        if isinstance(data, tuple):
            data, meta = data
        else:
            meta = {}
        data = dict(data)
        data["text/html"] = self.snapshot_html()
        data["text/plain"] = repr(self._store)
        return data, meta

    def _ipython_display_(self, **kwargs: object) -> None:
        """The store's table, then the live browser (whose tree hides the table; see display_view)."""
        display_view(self, self.tree._snapshot_key, self.snapshot_html())
