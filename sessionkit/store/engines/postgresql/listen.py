"""The PostgreSQL engine's change feed: the thread that LISTENs on the store's channel.

:class:`_Listener` holds one connection of its own (outside the pool), registers its
origin in the listeners table (renewed every :data:`_HEARTBEAT_SECONDS`, so writers
send notifications only while someone listens), reassembles events sent in pieces,
skips the events of its own engine, and hands the others to the subscriber's callback
(signals between processes to the engine's signal handlers). A lost connection is
retried with a growing delay; notifications sent meanwhile are lost.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....errors import missing
from ..._values import ChangeEvent

try:
    import psycopg
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise missing("postgres", "psycopg (with psycopg-pool)", _exc) from _exc

if TYPE_CHECKING:
    from .engine import PostgresEngine

log = logging.getLogger("sessionkit")

#: How often a listener renews its row in the listeners table (seconds).
_HEARTBEAT_SECONDS = 60.0


class _Listener(threading.Thread):
    """LISTENs on the store's channel and hands other processes' events to a callback."""

    def __init__(self, engine: PostgresEngine, callback: Callable[[ChangeEvent], Any]) -> None:
        super().__init__(name=f"sessionkit-listener-{engine._origin[:8]}", daemon=True)
        self.engine = engine
        self.callback = callback
        self.ready = threading.Event()
        self._halt = threading.Event()
        self._partial: dict[tuple[str, str], list[str]] = {}

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)

    def run(self) -> None:
        eng = self.engine
        delay = 0.2
        while not self._halt.is_set():
            try:
                with psycopg.connect(
                    eng._conninfo, autocommit=True, connect_timeout=max(1, int(eng._connect_timeout))
                ) as conn:
                    conn.execute("LISTEN " + eng.quote(eng._channel))
                    conn.execute(eng._extra["listener_register"], (eng._origin,))
                    conn.execute(eng._extra["listener_expire"])
                    self._partial.clear()
                    self.ready.set()
                    delay = 0.2
                    beat = time.monotonic()
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=0.2):
                            self._handle(note.payload)
                        if time.monotonic() - beat > _HEARTBEAT_SECONDS:
                            conn.execute(eng._extra["listener_register"], (eng._origin,))
                            beat = time.monotonic()
                    conn.execute(eng._extra["listener_drop"], (eng._origin,))
            except psycopg.Error as exc:
                if self._halt.is_set():
                    return
                log.warning("sessionkit: change feed of %s lost its connection (%s); reconnecting", eng.path, exc)
                self._halt.wait(delay)
                delay = min(delay * 2, 10.0)

    def _handle(self, payload: str) -> None:
        try:
            origin, key, index, count, piece = payload.split("|", 4)
            if origin == self.engine._origin:
                return  # this store's own write: already reported in this process
            pieces = int(count)
            if pieces == 1:
                doc = piece
            else:
                parts = self._partial.setdefault((origin, key), [])
                if int(index) != len(parts):  # a piece went missing: drop the event
                    self._partial.pop((origin, key), None)
                    return
                parts.append(piece)
                if len(parts) < pieces:
                    return
                doc = "".join(self._partial.pop((origin, key)))
            data = json.loads(doc)
            if data.get("t") == "signal":
                for handler in list(self.engine._signal_handlers):
                    try:
                        handler(data["s"], data["k"], data.get("d"))
                    except Exception:
                        log.exception("sessionkit: signal handler raised")
                return
            event = self.engine._event_from(data)
        except (ValueError, KeyError, TypeError):
            log.debug("sessionkit: ignored a notification that is not a sessionkit event: %.80r", payload)
            return
        try:
            self.callback(event)
        except Exception:  # a subscriber never stops the feed
            log.exception("sessionkit: change subscriber raised")
