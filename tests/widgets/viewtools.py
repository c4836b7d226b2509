"""Helpers for the widget tests: record what a widget sends, talk to it as its front end would."""

from __future__ import annotations


class Sent(list):
    """What a widget sent to its front end with ``send`` (custom messages)."""

    def of(self, kind: str) -> list[dict]:
        return [m for m in self if m.get("type") == kind]


def front(widget, content: dict) -> None:
    """Deliver a custom message as the front end would."""
    widget._handle_custom_msg(content, [])
