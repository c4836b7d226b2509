"""CompareView: the replies of a comparison's variants side by side, filled live (docs/widgets.md)."""

from __future__ import annotations

from typing import cast

import traitlets

from . import _static
from ._payloads import CompareColumn
from ._views import _BatchedView, _module

__all__ = ["CompareView", "compare_html"]


def _column(variant: str) -> CompareColumn:
    return {
        "variant": variant,
        "status": "waiting",
        "model": None,
        "text": "",
        "tools": [],
        "input_tokens": None,
        "output_tokens": None,
        "cost_usd": None,
        "error": None,
    }


def compare_html(columns: list[CompareColumn], *, wrap: bool = True) -> str:
    """The variants side by side, one column each: status, model, reply, tokens, cost, tools, error."""
    rows: list[str] = []

    def row(label: str, cells: list[str]) -> None:
        rows.append(f"<tr><td>{label}</td>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")

    row("status", [f'<span class="sk-badge">{_static._e(c["status"])}</span>' for c in columns])
    row("model", [_static._e(c.get("model") or "") for c in columns])
    row("reply", [f'<div class="sk-text">{_static._e(c.get("text") or "")}</div>' for c in columns])
    row(
        "tokens",
        [
            f"in {_static.fmt_tokens(c.get('input_tokens'))} · out {_static.fmt_tokens(c.get('output_tokens'))}"
            for c in columns
        ],
    )
    row("cost", [_static.fmt_cost(c.get("cost_usd")) for c in columns])
    row("tools", [_static._e(", ".join(c.get("tools") or ()) or "—") for c in columns])
    if any(c.get("error") for c in columns):
        row("error", [f'<span class="sk-err">{_static._e(c.get("error") or "")}</span>' for c in columns])
    inner = (
        "<h4>Comparison</h4>"
        f'<div class="sk-meta">{_static.plural(len(columns), "variant")} · '
        f"{sum(1 for c in columns if c['status'] == 'completed')} completed</div>"
        + _static.variant_table("sk-compare", "", [c["variant"] for c in columns], rows)
    )
    return _static._wrap("compare", inner) if wrap else inner


class CompareView(_BatchedView):
    """The variants of :func:`sessionkit.prototyping.compare` side by side (docs/widgets.md).

    Pass ``view.on_event`` as ``compare(..., on_event=view.on_event)``: each variant gets
    a column when its first event arrives and fills as its reply streams (the latest
    model call's text, tool calls, then usage, cost and status). Updates go to the front
    end in batches every ``interval`` seconds (0.075 by default), not one per token.
    ``view.show(comparison)`` (or ``CompareView(comparison)``) shows a finished comparison.

    >>> view = sk.widgets.CompareView(); view
    >>> await compare("Plan a rainy day", session, variants=variants, on_event=view.on_event)
    """

    _esm = _module("compare_view.js")

    columns = cast("traitlets.TraitType[list[CompareColumn], list[CompareColumn]]", traitlets.List().tag(sync=True))
    height = traitlets.Int(360).tag(sync=True)

    def __init__(
        self, comparison: object = None, *, interval: float = 0.075, height: int = 360, **kwargs: object
    ) -> None:
        super().__init__(interval=interval, height=height, **kwargs)
        self._columns: dict[str, CompareColumn] = {}
        if comparison is not None:
            self.show(comparison)

    def __repr__(self) -> str:
        names = ", ".join(self._columns)
        return f"CompareView({_static.plural(len(self._columns), 'variant')}: {names})"

    # -- sources ------------------------------------------------------------------------
    def on_event(self, variant: str, event: dict) -> None:
        """Fold one event of one variant's run into its column (thread-safe; sends in batches)."""
        kind = event.get("kind")
        with self._lock:
            col = self._columns.setdefault(variant, _column(variant))
            if kind == "run.start":
                col["status"] = "running"
                settings = (event.get("labels") or {}).get("settings") or {}
                col["model"] = settings.get("model")
            elif kind == "turn.start":
                col["text"] = ""  # the column shows the latest model call's reply
            elif kind == "delta.text":
                col["text"] += str(event.get("text") or "")
            elif kind == "tool.call":
                col["tools"] = [*col["tools"], str(event.get("name"))]
            elif kind == "run.end":
                usage = event.get("usage") or {}
                col.update(
                    {
                        "status": event.get("status") or "completed",
                        "error": event.get("error"),
                        "input_tokens": usage.get("in"),
                        "output_tokens": usage.get("out"),
                        "cost_usd": usage.get("cost_usd"),
                    }
                )
            self._updated(now=kind == "run.end")

    def show(self, comparison: object) -> CompareView:
        """Show a finished comparison (its rows, in the order the variants were given)."""
        rows = getattr(comparison, "rows", None)
        if not isinstance(rows, list):
            raise TypeError(f"show() needs a Comparison, got {type(comparison).__name__}")
        with self._lock:
            self._columns = {}
            for r in rows:
                col = _column(str(r["variant"]))
                col.update(
                    {
                        "status": r.get("status") or "completed",
                        "model": r.get("model"),
                        "text": r.get("text") or "",
                        "tools": list(r.get("tool_names") or ()),
                        "input_tokens": r.get("input_tokens"),
                        "output_tokens": r.get("output_tokens"),
                        "cost_usd": r.get("cost_usd"),
                        "error": r.get("error"),
                    }
                )
                self._columns[col["variant"]] = col
            self._flush_locked()
        return self

    def _send_table(self) -> None:
        self.columns = [{**c, "tools": list(c["tools"])} for c in self._columns.values()]

    # -- static output ---------------------------------------------------------------------
    def snapshot_html(self) -> str:
        with self._lock:
            return compare_html([c.copy() for c in self._columns.values()])

    def _offline_state(self) -> dict:
        return {"columns": self.columns, "height": self.height}
