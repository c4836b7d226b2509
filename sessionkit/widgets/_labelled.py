"""Labels in the session views (BranchTree, Transcript): badges, and adding or removing
labels from the front end (docs/labels.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import traitlets

from ..errors import UsageError
from ._payloads import AddLabelRequest, Handler, LabelsByMessage, QueueReply, RemoveLabelRequest, ViewReply
from ._source import ViewedSession, is_store_session, labels_json

if TYPE_CHECKING:
    from ..store import Session

__all__ = ["LabelledView"]


class LabelledView(traitlets.HasTraits):
    """Mixed into a view of one session (``_views._View``): its labels by message id in the
    synced ``_labels`` (badges in the front end), and the front end's ``add-label`` /
    ``remove-label`` messages written to the store. Every other view of the session learns
    of the change from the store's change feed (an event of type ``"label"``)."""

    _labels = cast("traitlets.TraitType[LabelsByMessage, LabelsByMessage]", traitlets.Dict().tag(sync=True))
    #: The author of the labels added from this view (None: not recorded).
    author = traitlets.Unicode(None, allow_none=True)
    _session: ViewedSession

    if TYPE_CHECKING:  # the widget's own (_views._View.send)

        def send(self, content: ViewReply | QueueReply, buffers: list[bytes] | None = None) -> None: ...

    def refresh_labels(self) -> None:
        """Read the session's labels again and send them to the front end."""
        self._labels = labels_json(self._session)

    def _store_session(self) -> Session:
        if not is_store_session(self._session):
            raise UsageError("labels need a session of a sessionkit store")
        return self._session

    def _msg_add_label(self, content: AddLabelRequest) -> None:
        label = self._store_session().add_label(
            content.get("id"),
            content.get("tag"),
            rating=content.get("rating"),
            target=content.get("target") or "message",
            author=self.author,
        )
        self.refresh_labels()
        self.send({"type": "label-added", "req": content.get("req"), "label": label.id})

    def _msg_remove_label(self, content: RemoveLabelRequest) -> None:
        removed = self._store_session().remove_label(content.get("label"))
        self.refresh_labels()
        self.send({"type": "label-removed", "req": content.get("req"), "removed": removed})

    #: The label messages' handlers, for the handler tables of the views that show labels.
    _label_handlers: ClassVar[dict[str, Handler]] = {"add-label": _msg_add_label, "remove-label": _msg_remove_label}
