"""Progress of a long import: a bar where one helps (a terminal, a Jupyter kernel), a callback, or nothing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Progress", "wants_total", "check_progress"]


def _interactive() -> bool:
    """True in a terminal or a Jupyter kernel: where a progress bar helps and harms nothing."""
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    shell = sys.modules.get("IPython")
    if shell is not None:
        try:
            ip = shell.get_ipython()
        except Exception:
            return False
        return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"
    return False


def wants_total(progress: Any) -> bool:
    """Whether ``progress`` may show or report a total (else no pass over the file counts it)."""
    if progress is False:
        return False
    if progress is None:
        return _interactive()
    return True


class Progress:
    """Progress of a long import.

    ``progress`` is ``None`` (show it only for long inputs, ``auto_min`` records or
    more, and only when running in a terminal or a Jupyter kernel, so scripts, CI
    logs, tests and loops of small imports stay quiet), ``True`` (always show it),
    ``False`` (never), or a callable ``fn(done, total)`` called as records finish
    (``total`` may be ``None`` when unknown). Shown progress uses ``tqdm`` when it
    is installed, otherwise a one-line counter on stderr.
    """

    #: Inputs shorter than this show no progress unless asked for.
    AUTO_MIN = 1000

    def __init__(self, progress: Any, *, total: int | None, desc: str, unit: str, auto_min: int | None = None):
        self.done = 0
        self.total = total
        self._fn: Callable[[int, int | None], Any] | None = None
        self._bar = None
        self._plain = False
        self._desc = desc
        self._unit = unit
        self._last = 0.0
        if progress is None:
            floor = self.AUTO_MIN if auto_min is None else auto_min
            progress = (total is None or total >= floor) and _interactive()
        if callable(progress) and not isinstance(progress, bool):
            self._fn = progress
        elif progress is True:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self._plain = True
            else:
                self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", leave=True, file=sys.stderr)
        elif progress is not False:
            raise TypeError(f"progress must be None, True, False or a callable, got {type(progress).__name__}")

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._fn is not None:
            self._fn(self.done, self.total)
        elif self._bar is not None:
            self._bar.update(n)
        elif self._plain:
            now = time.monotonic()
            if now - self._last >= 0.2 or (self.total is not None and self.done >= self.total):
                self._last = now
                of = f"/{self.total}" if self.total is not None else ""
                sys.stderr.write(f"\r{self._desc}: {self.done}{of} {self._unit}")
                sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._plain:
            of = f"/{self.total}" if self.total is not None else ""
            sys.stderr.write(f"\r{self._desc}: {self.done}{of} {self._unit}\n")
            sys.stderr.flush()
            self._plain = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_progress(progress: Any) -> None:
    """``TypeError`` for a ``progress`` value no importer takes, before any work."""
    if progress is None or isinstance(progress, bool) or callable(progress):
        return
    raise TypeError(f"progress must be None, True, False or a callable, got {type(progress).__name__}")
