"""Helpers for the widget tests: record what a widget sends, talk to it as its front end would."""

from __future__ import annotations


class Sent(list):
    """What a widget sent to its front end with ``send`` (custom messages)."""

    def of(self, kind: str) -> list[dict]:
        return [m for m in self if m.get("type") == kind]


def front(widget, content: dict) -> None:
    """Deliver a custom message as the front end would."""
    widget._handle_custom_msg(content, [])


class ManualTimers:
    """Stands in for ``threading.Timer`` in the widgets' module: timers start when asked, and
    go off only when the test calls :meth:`fire` (the interval has passed), so what is sent in
    each batch does not depend on how fast the machine runs."""

    def __init__(self) -> None:
        self.intervals: list[float] = []  # of every timer started, in order
        self._pending: list[_ManualTimer] = []

    def __call__(self, interval: float, function) -> _ManualTimer:
        return _ManualTimer(self, interval, function)

    def fire(self) -> int:
        """Run the timers started and not cancelled; how many ran."""
        due, self._pending = self._pending, []
        live = [t for t in due if not t.cancelled]
        for timer in live:
            timer.function()
        return len(live)


class _ManualTimer:
    def __init__(self, owner: ManualTimers, interval: float, function) -> None:
        self.owner, self.interval, self.function = owner, interval, function
        self.daemon = False
        self.cancelled = False

    def start(self) -> None:
        self.owner.intervals.append(self.interval)
        self.owner._pending.append(self)

    def cancel(self) -> None:
        self.cancelled = True
