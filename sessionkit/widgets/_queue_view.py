"""QueueView: an annotation queue worked by one annotator in a notebook (docs/annotation.md).

The front end is ``static/queue_view.js``, the module the store viewer mounts at ``#/q/NAME``;
the kernel answers its requests with :func:`._queue.answer`, as the served viewer does.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

import traitlets

from ..errors import UsageError
from . import _queue
from ._views import _module, _View

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["QueueView"]


class QueueView(_View):
    """Queue ``queue`` of ``store`` labelled by ``annotator`` (docs/annotation.md): the rubric,
    the annotator's next unit with its messages, buttons for the rubric's tags and rating, and
    the queue's progress per annotator and agreement between annotators. Each label is
    stored with ``store.submit_label`` as it is submitted. Without ``annotator`` the view asks
    who labels (one of the queue's annotators, or a name)."""

    _esm = _module("queue_view.js")
    queue = traitlets.Unicode().tag(sync=True)
    annotator = traitlets.Unicode(None, allow_none=True).tag(sync=True)

    def __init__(self, store: Store, queue: str, annotator: str | None = None, **kwargs: object) -> None:
        store.queue_info(queue)  # QueueNotFound before anything is shown
        self._store = store
        super().__init__(queue=queue, annotator=annotator, **kwargs)

    def _dispatch(self, _widget: object, content: object, buffers: object) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            return
        who = self.annotator or content.get("annotator") or None
        self.send(_queue.answer(self._store, self.queue, who, content))

    def snapshot_html(self) -> str:
        q, p = self._store.queue_info(self.queue), self._store.queue_progress(self.queue)
        rows = "".join(f"<tr><td>{html.escape(name)}</td><td>{count}</td></tr>" for name, count in p.done.items())
        return (
            f'<div class="sk-view skq" data-sessionkit-snapshot="queue"><h3>queue {html.escape(q.name)}</h3>'
            f"<p>{p.complete} of {q.unit_count} units complete · {p.submitted} labels</p>"
            f"<table><tr><th>annotator</th><th>labelled</th></tr>{rows}</table></div>"
        )

    def to_html(self, path: str | Path | None = None, *, title: str | None = None) -> str | Path:
        """Refused: a queue is labelled through the kernel (or ``sessionkit view --write``), so it
        has no page that works offline; :meth:`snapshot_html` is its progress as static HTML."""
        raise UsageError(
            "a QueueView labels through the kernel and has no offline page: serve the queue with"
            " `sessionkit view STORE --write` (#/q/NAME), or keep QueueView.snapshot_html() for its progress"
        )

    def _plain(self) -> str:
        return f"QueueView(queue={self.queue!r}, annotator={self.annotator!r})"
