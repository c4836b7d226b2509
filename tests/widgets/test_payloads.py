"""The typed boundary between the views' Python and their front end (sessionkit/widgets/_payloads.py):
every message the JavaScript sends has its TypedDict and a handler, and every handler a message
the JavaScript sends; the views route them through their handler tables."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path
from typing import TypedDict

from sessionkit.widgets import _jstypes, _payloads, _queue
from sessionkit.widgets._compare_view import CompareView
from sessionkit.widgets._experiment_view import ExperimentView
from sessionkit.widgets._views import BranchTree, RunView, Transcript, _View

STATIC = Path(_payloads.__file__).parent / "static"
# a message sent to the kernel: model.send({...}), and the views' own senders (sendLabel in the
# transcript, ask in the queue's page), each with its type as a string literal
_SEND = re.compile(r"(?:\.send|\bsendLabel|\bask)\(\s*\{\s*type:\s*\"([\w-]+)\"")
# any call of model.send: each must be one of _SEND's, or forward a message built by such a call
_ANY_SEND = re.compile(r"model\.send\(([^)]*)\)")
_FORWARDERS = {"{ ...message, req }", "{ ...msg, req, annotator }"}


def _sent(name: str) -> set[str]:
    text = (STATIC / name).read_text(encoding="utf-8")
    for call in _ANY_SEND.findall(text):
        assert call.startswith("{ type: ") or call in _FORWARDERS, f"{name}: model.send({call}) has no literal type"
    return set(_SEND.findall(text))


def _views_sent() -> set[str]:
    return set().union(*(_sent(p.name) for p in STATIC.glob("*.js") if p.name != "queue_view.js"))


def _param_type(fn: typing.Callable[..., object], name: str) -> object:
    """The TypedDict a handler's parameter names (annotations are strings in the package)."""
    annotation = inspect.signature(fn).parameters[name].annotation
    return getattr(_payloads, annotation) if isinstance(annotation, str) else annotation


def test_every_message_the_views_send_has_a_typeddict_and_a_handler_and_back():
    sent = _views_sent()
    assert {"fetch", "add-label", "steer", "follow_up"} <= sent  # the scan finds the sends
    assert sent == set(_payloads.VIEW_REQUESTS)
    handled: set[str] = set()
    for view in (BranchTree, Transcript, RunView, CompareView, ExperimentView):
        for kind, handler in view._handlers.items():
            # each handler takes the message's TypedDict, and the TypedDict says its type
            request = _payloads.VIEW_REQUESTS[kind]
            assert _param_type(handler, "content") is request, (view.__name__, kind)
            assert typing.get_type_hints(request)["type"] == typing.Literal[kind]
        handled |= set(view._handlers)
    assert handled == sent


def test_every_request_of_the_queue_page_has_a_typeddict_and_a_handler_and_back():
    sent = _sent("queue_view.js")
    assert sent == {"state", "next", "submit"}
    assert set(_queue.HANDLERS) == set(_payloads.QUEUE_REQUESTS)
    # release is the API's alone (docs/annotation.md: POST /api/queue)
    assert set(_payloads.QUEUE_REQUESTS) - sent == _payloads.API_ONLY_REQUESTS
    for kind, handler in _queue.HANDLERS.items():
        request = _payloads.QUEUE_REQUESTS[kind]
        assert _param_type(handler, "msg") is request, kind
        assert typing.get_type_hints(request)["type"] == typing.Literal[kind]


def test_the_replies_the_front_end_reads_are_declared():
    """Each reply type the kernel sends is one the JavaScript tests for (msg.type === "...")."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in STATIC.glob("*.js"))
    read = set(re.findall(r"msg\.type === \"([\w-]+)\"", text))
    for kind, reply in _payloads.VIEW_REPLIES.items():
        assert typing.get_type_hints(reply)["type"] == typing.Literal[kind]
    # replies a view waits for by req (label-added, label-removed, messages, previews, detail)
    # are matched by their req; those it dispatches on by type must be declared
    assert read - {"fetch", "detail", "hello"} <= set(_payloads.VIEW_REPLIES) | set(_payloads.QUEUE_REPLIES)


def test_dispatch_routes_by_the_table_ignores_other_types_and_answers_a_failure(trip, record):
    tree = BranchTree(trip, live=False)
    sent = record(tree)
    mid = tree.data.ids[1]
    tree._dispatch(tree, {"type": "detail", "id": mid, "req": 3}, [])
    assert [(m["type"], m["req"], m["id"]) for m in sent] == [("detail", 3, mid)]
    # an unknown type, a name that was a method before the tables, a malformed message: ignored
    for content in ({"type": "steer", "text": "x"}, {"type": "msg_fetch"}, {"type": "_msg_fetch"}, {"ids": []}, []):
        tree._dispatch(tree, content, [])
    assert len(sent) == 1
    # a handler that fails answers the front end with the error
    tree._dispatch(tree, {"type": "remove-label", "label": 12, "req": 4}, [])
    assert sent[-1]["type"] == "error" and sent[-1]["req"] == 4 and sent[-1]["error"]


def test_each_view_only_routes_its_own_messages():
    assert set(RunView._handlers) == {"hello", "steer", "follow_up", "clear", "interrupt"}
    assert set(Transcript._handlers) == {"fetch", "add-label", "remove-label"}
    assert set(BranchTree._handlers) == {"fetch", "detail", "add-label", "remove-label"}
    assert CompareView._handlers == ExperimentView._handlers == _View._handlers == {}


def test_the_typedefs_of_the_javascript_are_current():
    """static/types.d.ts is what the TypedDicts give: `python -m sessionkit.widgets._jstypes` after a change."""
    assert _jstypes.TYPES_FILE.read_text(encoding="utf-8") == _jstypes.render(), (
        "static/types.d.ts is stale: run python -m sessionkit.widgets._jstypes"
    )


def test_a_changed_typeddict_changes_the_typedefs(monkeypatch):
    before = _jstypes.render()
    Changed = TypedDict("LabelView", {"id": str, "tag": str, "weight": float})  # noqa: UP013
    monkeypatch.setattr(_payloads, "PAYLOADS", (Changed, *_payloads.PAYLOADS[1:]))
    after = _jstypes.render()
    assert after != before
    assert "interface LabelView {\n  id: string;\n  tag: string;\n  weight: number;\n}" in after
    assert "interface MessageView {" in after and "  tokens?: number;" in after
