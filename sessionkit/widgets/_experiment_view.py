"""ExperimentView: an experiment's variants against its baseline, item by item, filled live
(docs/widgets.md)."""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import cast
from urllib.parse import quote

import traitlets

from . import _static
from ._payloads import ExperimentItem
from ._views import _BatchedView, _module

__all__ = ["ExperimentView", "experiment_items", "experiment_html"]


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def experiment_items(
    rows: list[dict], baseline: str | None, viewer_url: str = ""
) -> tuple[str | None, list[ExperimentItem]]:
    """The rows of an experiment grouped by item, each variant a cell with its scores and
    their difference from the baseline's (numbers only) and a link to its branch in the store
    viewer. The baseline is the first variant of the rows unless given."""
    if baseline is None and rows:
        baseline = str(rows[0]["variant"])
    items: dict[Hashable, ExperimentItem] = {}
    for row in rows:
        entry = items.setdefault(row["item"], {"item": row["item"], "prompt": row.get("prompt"), "cells": []})
        if entry["prompt"] is None:
            entry["prompt"] = row.get("prompt")
        session_id, reply_id = row.get("session_id"), row.get("reply_id")
        href = (
            f"{viewer_url}#/s/{quote(str(session_id), safe='')}/m/{quote(str(reply_id), safe='')}"
            if session_id and reply_id
            else None
        )
        entry["cells"].append(
            {
                "variant": str(row["variant"]),
                "status": row.get("status") or "waiting",
                "reply": row.get("reply") or "",
                "error": row.get("error"),
                "scores": [
                    {"name": k, "value": v, "delta": None} for k, v in sorted((row.get("scores") or {}).items())
                ],
                "output_tokens": row.get("output_tokens"),
                "cost_usd": row.get("cost_usd"),
                "latency_s": row.get("latency_s"),
                "session_id": session_id,
                "reply_id": reply_id,
                "href": href,
                "baseline": str(row["variant"]) == baseline,
            }
        )
    for entry in items.values():
        base = next((c for c in entry["cells"] if c["baseline"]), None)
        base_scores = {s["name"]: _number(s["value"]) for s in base["scores"]} if base else {}
        for cell in entry["cells"]:
            for score in cell["scores"]:
                mine, theirs = _number(score["value"]), base_scores.get(score["name"])
                if not cell["baseline"] and mine is not None and theirs is not None:
                    score["delta"] = mine - theirs
    return baseline, list(items.values())


def _fmt_value(value: object) -> str:
    number = _number(value)
    return f"{number:g}" if number is not None else str(value)


def _fmt_delta(delta: float | None) -> str:
    if delta is None:
        return ""
    return f" ({delta:+g})" if delta else " (=)"


def experiment_html(name: str, baseline: str | None, items: list[ExperimentItem], *, wrap: bool = True) -> str:
    """The items as a table: a row per item, a column per variant (the baseline first as
    given), each cell the reply, its scores with their delta from the baseline, tokens,
    cost, latency and a link to the branch."""
    variants: list[str] = []
    for entry in items:
        for cell in entry["cells"]:
            if cell["variant"] not in variants:
                variants.append(cell["variant"])
    done = sum(1 for e in items for c in e["cells"] if c["status"] == "completed")
    total = sum(len(e["cells"]) for e in items)
    body: list[str] = []  # the table's rows
    for entry in items:
        cells = {c["variant"]: c for c in entry["cells"]}
        body.append(
            f'<tr data-item="{_static._e(entry["item"])}"><td>{_static._e(entry["item"])}'
            f'<div class="sk-text">{_static._e(entry.get("prompt") or "")}</div></td>'
        )
        for variant in variants:
            found = cells.get(variant)
            if found is None:
                body.append("<td></td>")
                continue
            cell = found
            scores = " · ".join(
                f'<span class="sk-exp-score">{_static._e(s["name"])} {_static._e(_fmt_value(s["value"]))}'
                f"{_static._e(_fmt_delta(s['delta']))}</span>"
                for s in cell["scores"]
            )
            link = f' · <a href="{_static._e(cell["href"])}">branch</a>' if cell["href"] else ""
            latency = "?" if cell["latency_s"] is None else f"{cell['latency_s']:.2f} s"
            body.append(
                f'<td data-variant="{_static._e(variant)}" data-status="{_static._e(cell["status"])}">'
                f'<span class="sk-badge">{_static._e(cell["status"])}</span>'
                f'<div class="sk-text">{_static._e(cell["reply"])}</div>'
                + (f'<span class="sk-err">{_static._e(cell["error"])}</span>' if cell["error"] else "")
                + f'<div class="sk-meta">{scores}</div>'
                f'<div class="sk-meta">out {_static.fmt_tokens(cell["output_tokens"])} · '
                f"{_static.fmt_cost(cell['cost_usd'])} · {latency}{link}</div></td>"
            )
        body.append("</tr>")
    inner = (
        (f"<h4>Experiment {_static._e(name)}</h4>" if name else "<h4>Experiment</h4>")
        + f'<div class="sk-meta">{_static.plural(len(items), "item")} · {_static.plural(len(variants), "variant")}'
        f" · {done} of {total} completed · baseline {_static._e(baseline or '—')}</div>"
        + _static.variant_table("sk-exp", "item", variants, ["".join(body)])
    )
    return _static._wrap("experiment", inner) if wrap else inner


class ExperimentView(_BatchedView):
    """The items of :func:`sessionkit.prototyping.experiment`, each variant beside the
    baseline with its scores' deltas and a link to its branch (docs/widgets.md).

    Pass ``view.on_row`` as ``experiment(..., on_row=view.on_row)``: every item gets a row
    as soon as the experiment starts, and each variant's cell fills as it runs, replies and
    is scored (sent to the front end in batches every ``interval`` seconds). ``view.show(result)``
    (or ``ExperimentView(result)``) shows a finished experiment. A click on a cell's
    "branch" link sets ``view.selected`` to ``{"session_id", "message_id"}`` of its reply (to
    open with ``sk.widgets.Transcript``); the link itself opens the reply in the store viewer
    at ``viewer_url`` (``sessionkit view``'s address).

    >>> view = sk.widgets.ExperimentView(); view
    >>> await experiment("qa", variants, [scorer], name="terse", store=store, on_row=view.on_row)
    """

    _esm = _module("experiment_view.js")

    name = traitlets.Unicode("").tag(sync=True)
    baseline = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    items = cast("traitlets.TraitType[list[ExperimentItem], list[ExperimentItem]]", traitlets.List().tag(sync=True))
    selected = traitlets.Dict().tag(sync=True)
    height = traitlets.Int(480).tag(sync=True)

    def __init__(
        self,
        experiment: object = None,
        *,
        baseline: str | None = None,
        viewer_url: str = "",
        interval: float = 0.1,
        height: int = 480,
        **kwargs: object,
    ) -> None:
        if not isinstance(viewer_url, str):
            raise TypeError(f"viewer_url must be a str, got {type(viewer_url).__name__}")
        super().__init__(interval=interval, height=height, baseline=baseline, **kwargs)
        self.viewer_url = viewer_url
        self._rows: dict[tuple[Hashable, str], dict] = {}
        if experiment is not None:
            self.show(experiment)

    def __repr__(self) -> str:
        items = {key[0] for key in self._rows}
        return f"ExperimentView({self.name or 'experiment'}: {_static.plural(len(items), 'item')})"

    # -- sources ------------------------------------------------------------------------
    def on_row(self, row: dict) -> None:
        """Fold one row of the experiment in (thread-safe; sent in batches)."""
        if not isinstance(row, dict) or "item" not in row or "variant" not in row:
            raise TypeError(f"on_row takes a row of an experiment (a dict with item and variant), got {row!r}")
        with self._lock:
            self._rows[(row["item"], str(row["variant"]))] = copy.deepcopy(row)
            self._updated()

    def show(self, experiment: object) -> ExperimentView:
        """Show a finished experiment (an :class:`~sessionkit.prototyping.Experiment`)."""
        rows = getattr(experiment, "rows", None)
        if not isinstance(rows, list):
            raise TypeError(f"show() needs an Experiment, got {type(experiment).__name__}")
        with self._lock:
            self.name = str(getattr(experiment, "name", "") or "")
            self.baseline = getattr(experiment, "baseline", None) or self.baseline
            self._rows = {(r["item"], str(r["variant"])): copy.deepcopy(r) for r in rows}
            self._flush_locked()
        return self

    def _send_table(self) -> None:
        baseline, items = experiment_items(list(self._rows.values()), self.baseline, self.viewer_url)
        if self.baseline is None and baseline is not None:
            self.baseline = baseline
        self.items = items

    # -- static output ---------------------------------------------------------------------
    def snapshot_html(self) -> str:
        with self._lock:
            baseline, items = experiment_items(list(self._rows.values()), self.baseline, self.viewer_url)
            return experiment_html(self.name, baseline, items)

    def _offline_state(self) -> dict:
        return {
            "name": self.name,
            "baseline": self.baseline,
            "items": self.items,
            "selected": {},
            "height": self.height,
        }
