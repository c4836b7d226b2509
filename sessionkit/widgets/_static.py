"""Static, script-free HTML for the notebook views (docs/widgets.md), without ipywidgets.

These snapshots are what a notebook shows where widgets cannot run: nbconvert
HTML, GitHub, nbviewer, a notebook opened without its kernel. They use plain
tables, ``<details>`` and a scoped ``<style>``; where a renderer strips styles
(GitHub does) the markup still reads: the tree is drawn with box-drawing
characters, roles are words, numbers are text. No ``<script>``, no event
handler attributes, no external resources.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import TYPE_CHECKING

from ..parts import fold_lines, input_text, output_text
from . import _runlog
from ._payloads import (
    ControllerQueue,
    LabelsByMessage,
    LabelView,
    MessageView,
    PathCompaction,
    PathPayload,
    RunViewState,
    UsageTotals,
)
from ._source import (
    TreeData,
    labels_json,
    load_messages,
    message_preview,
    message_view,
    outline_rows,
    path_entries,
    tree_data,
)

if TYPE_CHECKING:
    from ..store import Store
    from ._source import ViewedSession

__all__ = [
    "STATIC_CSS",
    "tree_html",
    "transcript_html",
    "run_html",
    "session_html",
    "store_html",
    "page",
    "variant_table",
    "fmt_tokens",
    "fmt_cost",
    "plural",
    "UNKNOWN_COST",
]

ROLE_COLORS = {
    "user": "#2563eb",
    "assistant": "#15803d",
    "system": "#64748b",
    "tool": "#c2410c",
}
OTHER_COLOR = "#7c3aed"

STATIC_CSS = """
.sk-snap{font:13px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2937;max-width:100%;overflow:auto}
.sk-snap h4{margin:.2em 0 .4em;font-size:14px}
.sk-snap .sk-meta{color:#6b7280;font-size:12px;margin-bottom:.4em}
.sk-snap table{border-collapse:collapse}
.sk-snap td,.sk-snap th{padding:1px 8px 1px 2px;text-align:left;vertical-align:top;border:0}
.sk-snap th{font-weight:600;border-bottom:1px solid #e5e7eb}
.sk-snap .sk-g{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre;color:#9ca3af}
.sk-snap .sk-role{font-weight:600;white-space:nowrap}
.sk-snap .sk-tok{color:#6b7280;text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.sk-snap .sk-prev{color:#374151;max-width:56em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.sk-snap tr.sk-active .sk-prev{font-weight:600}
.sk-snap tr.sk-sel{background:#eff6ff}
.sk-snap tr.sk-band td{background:#fffbeb;color:#92400e}
.sk-snap tr.sk-more td{color:#6b7280;font-style:italic}
.sk-snap .sk-msg{border-left:3px solid #d1d5db;padding:4px 8px;margin:6px 0;background:#fafafa}
.sk-snap .sk-msg.sk-hidden{opacity:.55}
.sk-snap .sk-msg .sk-head{font-size:12px;color:#6b7280}
.sk-snap .sk-text{white-space:pre-wrap;word-break:break-word}
.sk-snap pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:4px 6px;margin:2px 0;font-size:12px}
.sk-snap .sk-comp{border:1px solid #f59e0b;background:#fffbeb;padding:4px 8px;margin:6px 0}
.sk-snap .sk-tool{border:1px solid #e5e7eb;padding:2px 6px;margin:3px 0;background:#fff}
.sk-snap .sk-err{color:#b91c1c}
.sk-snap .sk-turn{border-top:1px dashed #d1d5db;margin-top:6px;padding-top:4px}
.sk-snap .sk-badge{display:inline-block;padding:0 6px;border-radius:8px;background:#e5e7eb;font-size:11px}
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_EXACT = Context(prec=400)


def _fixed(x: float, places: int) -> str:
    """``x`` with ``places`` decimals, a tie rounded away from zero, as JavaScript's ``toFixed``
    writes it (the live views' ``skTokens`` and ``skCost``): ``f"{x:.1f}"`` would round a tie to
    even (1.25 -> "1.2" where the live view shows "1.3"). Decimal reads the float's exact value,
    as ``toFixed`` does, so 1.005 (1.00499... as a float) stays "1.00" on both sides."""
    exact = Decimal(x + 0.0)  # -0.0 as 0, as toFixed writes it
    # (precision for every digit of the largest float: quantize never fails on a big one)
    return f"{exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP, context=_EXACT):f}"


def fmt_tokens(n: int | float | None) -> str:
    """1234 -> '1.2k', 12 -> '12' (whole tokens: a fraction is cut off)."""
    if n is None:
        return "?"
    n = int(n)
    if abs(n) >= 1_000_000:
        return _fixed(n / 1_000_000, 1) + "M"
    if abs(n) >= 10_000:
        return _fixed(n / 1000, 0) + "k"
    if abs(n) >= 1_000:
        return _fixed(n / 1000, 1) + "k"
    return str(n)


#: The one word every view uses for a cost nobody knows (never shown as zero).
UNKNOWN_COST = "unknown"


def fmt_cost(cost: float | None, *, unknown: int = 0, total: int | None = None) -> str:
    """Dollars; ``unknown`` when no price is known; a partial sum says so.

    ``cost`` is the sum of the known prices, ``unknown`` how many of the ``total``
    priced items (model calls, replies) have no price: ``"≥ $0.0001 (2 of 3 unknown)"``.
    """
    if cost is None or (total is not None and unknown >= total) or (unknown and not cost and total is None):
        return UNKNOWN_COST
    text = "$" + _fixed(cost, 4 if cost < 1 else 2)
    if unknown:
        of = f"{unknown} of {total}" if total is not None else str(unknown)
        return f"≥ {text} ({of} unknown)"
    return text


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 leaf"``, ``"2 leaves"``: the count and the noun that agrees with it."""
    return f"{n:,} {singular if n == 1 else (plural_form or singular + 's')}"


# Inline styles for what a notebook front end must not restyle. JupyterLab and
# Notebook 7 drop the <style> element of an untrusted output (a notebook opened from
# disk) and right-align every table cell; nbconvert and nbviewer keep the <style>.
# Each class of the snapshot markup also gets its rules as a style attribute, in
# properties JupyterLab's sanitizer keeps; GitHub drops both and the markup still reads.
_INLINE = {
    "sk-meta": "color:#6b7280;font-size:12px;text-align:left",
    "sk-badge": "display:inline-block;padding:0 6px;border-radius:8px;background-color:#e5e7eb;"
    "font-size:11px;font-weight:normal;color:#374151",
    "sk-text": "white-space:pre-wrap;text-align:left",
    "sk-msg": "border-left:3px solid #d1d5db;padding:4px 8px;margin:6px 0;background-color:#fafafa;text-align:left",
    "sk-hidden": "opacity:0.55",
    "sk-head": "font-size:12px;color:#6b7280",
    "sk-comp": "border:1px solid #f59e0b;background-color:#fffbeb;padding:4px 8px;margin:6px 0;text-align:left",
    "sk-tool": "border:1px solid #e5e7eb;padding:2px 6px;margin:3px 0;background-color:#fff;text-align:left",
    "sk-err": "color:#b91c1c",
    "sk-turn": "border-top:1px dashed #d1d5db;margin-top:6px;padding-top:4px",
    "sk-g": "font-family:monospace;white-space:pre;color:#9ca3af;text-align:left;padding:1px 8px 1px 2px",
    "sk-prev": "text-align:left;color:#374151;padding:1px 8px 1px 2px",
    "sk-tok": "text-align:right;color:#6b7280;white-space:nowrap;padding:1px 8px 1px 2px",
    "sk-active": "font-weight:600",
    "sk-sel": "background-color:#eff6ff",
    "sk-band": "background-color:#fffbeb;color:#92400e",
    "sk-more": "color:#6b7280;font-style:italic",
    "sk-label-badge": "display:inline-block;padding:0 6px;margin-left:3px;border-radius:8px;"
    "background-color:#fef3c7;color:#92400e;font-size:11px",
    "sk-label-branch": "background-color:#ede9fe;color:#5b21b6",
    "sk-label-judged": "border:1px dashed currentColor",
}
_CLASSED = re.compile(r'<(\w+) class="([^"]*)"( style="([^"]*)")?')
_BARE_CELL = re.compile(r"<(td|th)>")


def _inline_styles(markup: str) -> str:
    """Copy each class's rules into a style attribute (an existing style attribute wins)."""

    def classed(m: re.Match) -> str:
        rules = [_INLINE[c] for c in m.group(2).split() if c in _INLINE]
        if m.group(1) in ("td", "th") and not any("text-align" in r for r in rules):
            rules.insert(0, "text-align:left;padding:1px 8px 1px 2px")
        if m.group(4):
            rules.append(m.group(4))
        style = ";".join(rules)
        return f'<{m.group(1)} class="{m.group(2)}"' + (f' style="{style}"' if style else "")

    markup = _CLASSED.sub(classed, markup)
    return _BARE_CELL.sub(r'<\1 style="text-align:left;padding:1px 8px 1px 2px">', markup)


def _labels_html(labels: list[LabelView] | None) -> str:
    """A message's labels as badges (as the live views show them: ⎇ marks a branch label,
    ⚙ a scorer's)."""
    out = []
    for label in labels or ():
        branch = label.get("target") == "branch"
        judged = label.get("source", "human") != "human"
        rating = "" if label.get("rating") is None else f" ★{label['rating']:g}"
        scorer = judged and f"{label['source']} scorer {label.get('scorer')}"
        parts = (label.get("note"), label.get("author") and f"by {label['author']}", scorer, label.get("rationale"))
        about = " · ".join(x for x in parts if x)
        classes = "sk-label-badge" + (" sk-label-branch" if branch else "") + (" sk-label-judged" if judged else "")
        out.append(
            f'<span class="{classes}" data-tag="{_e(label["tag"])}"'
            f' title="{_e(about)}">{"⚙ " if judged else ""}{"⎇ " if branch else ""}{_e(label["tag"])}{rating}</span>'
        )
    return "".join(out)


def _role(role: str) -> str:
    color = ROLE_COLORS.get(role, OTHER_COLOR)
    return f'<span class="sk-role" style="color:{color};font-weight:600">{_e(role)}</span>'


def _wrap(kind: str, inner: str) -> str:
    return (
        f'<div class="sk-snap sk-snap-{kind}" data-sessionkit-snapshot="{kind}" '
        'style="text-align:left">'
        f"<style>{STATIC_CSS}</style>{_inline_styles(inner)}</div>"
    )


# ---------------------------------------------------------------------------
# BranchTree


def tree_html(
    session: ViewedSession | None = None,
    *,
    data: TreeData | None = None,
    selected_id: str | None = None,
    collapse: bool = True,
    max_rows: int = 400,
    wrap: bool = True,
    labels: LabelsByMessage | None = None,
) -> str:
    """The message tree as an indented table: roles, previews, tokens, branch points, bands, labels."""
    if data is None:
        if session is None:
            raise TypeError("tree_html() needs a session or its tree data")
        data = tree_data(session)
    if labels is None:
        labels = labels_json(session)
    guides: list[str] = []
    rows = outline_rows(data, collapse=collapse, guides=guides)
    shown = rows[:max_rows]
    ids = [data.ids[r[1]] for r in shown if r[0] == "node"]
    msgs = load_messages(session, ids) if session is not None else {}
    kids = [0] * data.n
    for p in data.parent:
        if p >= 0:
            kids[p] += 1
    active = set(data.path_to(data.latest)) if data.latest >= 0 else set()
    idx = data.index()
    # The path to the selected message; the live view tints it, this snapshot does not (yet).
    selected = set(data.path_to(idx[selected_id])) if selected_id in idx else set()  # noqa: F841
    branches = sum(1 for k in kids if k > 1)
    leaves = sum(1 for k in kids if k == 0)
    body = [
        f"<h4>Session {_e(data.session_id or '(default)')}</h4>",
        f'<div class="sk-meta">{plural(data.n, "message")} · {plural(branches, "branch point")} · '
        f"{plural(leaves, 'leaf', 'leaves')} · {plural(len(data.compactions), 'compaction')} · "
        f"latest path {plural(len(active), 'message')}, "
        f"{fmt_tokens(sum(data.tokens[i] for i in active))} tokens · ● marks the latest path</div>",
        '<table class="sk-tree"><thead><tr><th>tree</th><th>role</th><th>message</th><th>tokens</th></tr></thead>'
        "<tbody>",
    ]
    for row, guide in zip(shown, guides):
        if row[0] == "node":
            i = row[1]
            mid = data.ids[i]
            cls = []
            if i in active:
                cls.append("sk-active")
            if selected_id is not None and data.ids[i] == selected_id:
                cls.append("sk-sel")
            mark = "●" if i in active else "○"
            fork = f' <span class="sk-badge">{kids[i]} branches</span>' if kids[i] > 1 else ""
            prev = message_preview(msgs[mid]) if mid in msgs else ""
            body.append(
                f'<tr class="{" ".join(cls)}" data-id="{_e(mid)}"><td class="sk-g">{_e(guide)}{mark}</td>'
                f"<td>{_role(data.role_of(i))}</td>"
                f'<td class="sk-prev">{_labels_html(labels.get(mid))}{_e(prev)}{fork}</td>'
                f'<td class="sk-tok">{fmt_tokens(data.tokens[i])}</td></tr>'
            )
        elif row[0] == "more":
            a, b = row[1], row[2]
            chain = []
            j = b
            while True:
                chain.append(j)
                if j == a:
                    break
                j = data.parent[j]
            tok = sum(data.tokens[j] for j in chain)
            on = any(j in active for j in chain)
            body.append(
                f'<tr class="sk-more"><td class="sk-g">{_e(guide)}{"┊" if on else "┆"}</td><td></td>'
                f"<td>… {plural(len(chain), 'more message')} in this chain</td>"
                f'<td class="sk-tok">{fmt_tokens(tok)}</td></tr>'
            )
        else:
            band = data.compactions[row[1]]
            state = " (superseded)" if band["superseded"] else ""
            body.append(
                f'<tr class="sk-band"><td class="sk-g">{_e(guide)}▤</td><td>compaction</td>'
                f"<td><details><summary>{plural(band['messages'], 'message')} summarized{state}: "
                f"{fmt_tokens(band['tokens_before'])} → {fmt_tokens(band['tokens_after'])} tokens</summary>"
                f'<div class="sk-text">{_e(band["summary"])}</div></details></td>'
                f'<td class="sk-tok">{fmt_tokens(band["tokens_after"])}</td></tr>'
            )
    body.append("</tbody></table>")
    if len(rows) > len(shown):
        more = plural(len(rows) - len(shown), "more row")
        body.append(f'<div class="sk-meta">… {more} not shown in this snapshot.</div>')
    inner = "".join(body)
    return _wrap("tree", inner) if wrap else inner


# ---------------------------------------------------------------------------
# Transcript


def _output_html(value: object) -> str:
    """Tool input or output as readable text (parts.output_text), folded past FOLD_LINES lines:
    the rest behind a ``<details>`` "show all", which needs no script."""
    text = output_text(value)
    head, hidden = fold_lines(text)
    if not hidden:
        return f'<pre class="sk-out">{_e(head)}</pre>'
    rest = text[len(head) + 1 :]
    return (
        f'<pre class="sk-out">{_e(head)}</pre><details class="sk-fold"><summary>show all '
        f"({_e(plural(hidden, 'more line'))})</summary><pre>{_e(rest)}</pre></details>"
    )


def _parts_html(view: MessageView) -> str:
    out = []
    for p in view["parts"]:
        if p["type"] == "text":
            out.append(f'<div class="sk-text">{_e(p["text"])}</div>')
        elif p["type"] == "reasoning":
            out.append(f'<details><summary>reasoning</summary><div class="sk-text">{_e(p["text"])}</div></details>')
        elif p["type"] == "tool":
            status = "error" if p.get("error") else (p.get("state") or "")
            inner = f'<summary>tool <b>{_e(p["name"])}</b> <span class="sk-badge">{_e(status)}</span></summary>'
            if p.get("input") is not None:
                inner += f"<div>input</div>{_output_html(p['input'])}"
            if p.get("output") is not None:
                inner += f"<div>output</div>{_output_html(p['output'])}"
            if p.get("error"):
                inner += f'<div class="sk-err">{_e(p["error"])}</div>'
            out.append(f'<details class="sk-tool" open>{inner}</details>')
        elif p["type"] == "file":
            out.append(f'<div class="sk-badge">file {_e(p.get("mediaType"))} {_e(p.get("name") or "")}</div>')
        else:
            out.append(f"<details><summary>{_e(p.get('kind'))} part</summary><pre>{_e(p.get('json'))}</pre></details>")
    return "".join(out)


def _comp_html(c: PathCompaction, *, full: bool) -> str:
    head = (
        f"▤ Compaction: {plural(c['messages'], 'message')} summarized, {fmt_tokens(c['tokens_before'])} → "
        f"{fmt_tokens(c['tokens_after'])} tokens"
    )
    note = "the messages below are hidden from the model" if full else "the model sees this summary instead"
    return (
        f'<div class="sk-comp" data-compaction="{_e(c["id"])}"><b>{_e(head)}</b> <span class="sk-meta">({note})</span>'
        f'<div class="sk-text">{_e(c["summary"])}</div></div>'
    )


def transcript_html(
    session: ViewedSession,
    leaf_id: str | None = None,
    *,
    mode: str = "model",
    max_messages: int = 300,
    path: PathPayload | None = None,
    wrap: bool = True,
    labels: LabelsByMessage | None = None,
) -> str:
    """One path as a chat: tool calls with input and output, tokens, compaction boundaries, labels."""
    if mode not in ("model", "full"):
        raise ValueError(f"mode must be 'model' or 'full', got {mode!r}")
    if labels is None:
        labels = labels_json(session)
    path = path or path_entries(session, leaf_id, compacted=(mode == "model"))
    entries = path["entries"]
    shown = entries[-max_messages:] if len(entries) > max_messages else entries
    msgs = load_messages(session, [e["id"] for e in shown if e["kind"] != "summary"])
    label = "what the model sees" if mode == "model" else "full history"
    body = [
        f"<h4>Transcript · {label}</h4>",
        f'<div class="sk-meta">{plural(len(entries), "entry", "entries")} · model sees '
        f"{fmt_tokens(path['tokens_model'])} tokens of {fmt_tokens(path['tokens_full'])} · "
        f"{plural(len(path['compactions']), 'compaction')} on this path · "
        f"leaf {_e(path['leaf_id'])}</div>",
    ]
    if len(shown) < len(entries):
        earlier = plural(len(entries) - len(shown), "earlier entry", "earlier entries")
        body.append(f'<div class="sk-meta">… {earlier} not shown.</div>')
    open_comp = None
    for e in shown:
        if e["kind"] == "summary":
            body.append(_comp_html(path["compactions"][e["compaction"]], full=False))
            continue
        if e["kind"] == "hidden" and open_comp != e["compaction"]:
            open_comp = e["compaction"]
            body.append(_comp_html(path["compactions"][open_comp], full=True))
        elif e["kind"] != "hidden":
            open_comp = None
        m = msgs.get(e["id"])
        view = message_view(m, tokens=e["tokens"]) if m else None
        cls = "sk-msg sk-hidden" if e["kind"] == "hidden" else "sk-msg"
        color = ROLE_COLORS.get(e["role"], OTHER_COLOR)
        body.append(
            f'<div class="{cls}" style="border-left-color:{color}" data-id="{_e(e["id"])}">'
            f'<div class="sk-head">{_role(e["role"])} · {fmt_tokens(e["tokens"])} tokens · '
            f"{_e((view and view['createdAt']) or '')}"
            f"{' · hidden by compaction' if e['kind'] == 'hidden' else ''}{_labels_html(labels.get(e['id']))}</div>"
            f"{_parts_html(view) if view else ''}</div>"
        )
    inner = "".join(body)
    return _wrap("transcript", inner) if wrap else inner


# ---------------------------------------------------------------------------
# RunView


def _usage_line(u: UsageTotals) -> str:
    calls = int(u.get("calls") or 0)
    cost = fmt_cost(u.get("cost_usd"), unknown=int(u.get("unpriced") or 0), total=calls) if calls else "—"
    return (
        f"{plural(calls, 'model call')} · in {fmt_tokens(u.get('in'))} · out {fmt_tokens(u.get('out'))} · "
        f"cache read {fmt_tokens(u.get('cache_read'))} · cost {cost}"
    )


def run_html(state: RunViewState, *, queue: ControllerQueue | None = None, wrap: bool = True) -> str:
    """Runs as turns: prompts, streamed text, tool calls and results, usage and cost, the queue."""
    body = ["<h4>Run view</h4>"]
    s = _runlog.summary(state)
    body.append(
        f'<div class="sk-meta">{plural(s["runs"], "run")} · {plural(s["turns"], "turn")} · status {_e(s["status"])} · '
        f"{_e(_usage_line(state['usage']))}</div>"
    )
    for run in state["runs"]:
        body.append(
            f'<div class="sk-run" data-run="{_e(run["run_id"])}"><b>run {_e(run["run_id"])}</b> '
            f'<span class="sk-badge">{_e(run["status"])}</span>'
        )
        if run.get("input") is not None:
            body.append(
                f'<div class="sk-msg" style="border-left-color:{ROLE_COLORS["user"]}">{_role("user")}'
                f'<div class="sk-text">{_e(run["input"])}</div></div>'
            )
        for t in run["turns"]:
            body.append(f'<div class="sk-turn"><div class="sk-head sk-meta">turn {t["turn"]}')
            if t.get("mode"):
                body.append(f" · queued {_e(t['mode'])} message")
            body.append("</div>")
            if t.get("input"):
                body.append(
                    f'<div class="sk-msg" style="border-left-color:{ROLE_COLORS["user"]}">{_role("user")}'
                    f'<div class="sk-text">{_e(t["input"])}</div></div>'
                )
            if t.get("reasoning"):
                body.append(
                    f'<details><summary>reasoning</summary><div class="sk-text">{_e(t["reasoning"])}</div></details>'
                )
            if t.get("text"):
                body.append(
                    f'<div class="sk-msg" style="border-left-color:{ROLE_COLORS["assistant"]}">'
                    f"{_role('assistant')}"
                    f'<div class="sk-text">{_e(t["text"])}</div></div>'
                )
            for tool in t["tools"]:
                status = "error" if tool.get("error") else ("done" if tool.get("done") else "running")
                inner = f'<summary>tool <b>{_e(tool.get("name"))}</b> <span class="sk-badge">{status}</span></summary>'
                inner += f"<div>input</div>{_output_html(input_text(tool.get('input')))}"
                if tool.get("done") and not tool.get("error"):
                    inner += f"<div>output</div>{_output_html(tool.get('output'))}"
                if tool.get("error"):
                    inner += f'<div class="sk-err">{_e(tool["error"])}</div>'
                body.append(f'<details class="sk-tool" open>{inner}</details>')
            u = t.get("usage")
            if u:
                cost = fmt_cost(u.get("cost_usd") if isinstance(u.get("cost_usd"), (int, float)) else None)
                body.append(
                    f'<div class="sk-meta">usage: in {fmt_tokens(u.get("in"))} · out {fmt_tokens(u.get("out"))} · '
                    f"{_e(u.get('model') or '')} · {cost}"
                    f"{' · stop: ' + _e(t['stop_reason']) if t.get('stop_reason') else ''}</div>"
                )
            body.append("</div>")
        if run.get("error"):
            body.append(f'<div class="sk-err">{_e(run["error"])}</div>')
        body.append("</div>")
    if queue and queue.get("items"):
        body.append(f'<div class="sk-meta">{plural(len(queue["items"]), "queued message")}:</div><ol>')
        for item in queue["items"]:
            body.append(f'<li><span class="sk-badge">{_e(item.get("mode"))}</span> {_e(item.get("text"))}</li>')
        body.append("</ol>")
    inner = "".join(body)
    return _wrap("run", inner) if wrap else inner


# ---------------------------------------------------------------------------
# Session and Store


def session_html(session: ViewedSession, *, max_rows: int = 200) -> str:
    """What a session shows as: its tree (a snapshot of :class:`BranchTree`)."""
    return tree_html(session, max_rows=max_rows)


def store_html(store: Store, *, max_sessions: int = 50) -> str:
    """A store as a table of its sessions and its counts."""
    try:
        sessions = store.list_sessions()
        stats = store.stats()
    except Exception as exc:  # a closed store still displays
        return _wrap("store", f'<h4>sessionkit store</h4><div class="sk-meta">{_e(exc)}</div>')
    where = store.path or ":memory:"
    body = [
        f"<h4>sessionkit store · {_e(store.settings.engine)} · {_e(where)}</h4>",
        f'<div class="sk-meta">{plural(stats.get("sessions", len(sessions)), "session")} · '
        f"{plural(stats.get('messages', 0), 'message')} · "
        f"{plural(stats.get('compactions', 0), 'compaction')} · {plural(stats.get('blobs', 0), 'blob')}</div>",
        "<table><thead><tr><th>session</th><th>messages</th><th>created</th><th>updated</th></tr></thead><tbody>",
    ]
    for info in sessions[:max_sessions]:
        body.append(
            f'<tr><td>{_e(info.id or "(default)")}</td><td class="sk-tok">{info.message_count:,}</td>'
            f"<td>{_e(info.created_at)}</td><td>{_e(info.updated_at)}</td></tr>"
        )
    body.append("</tbody></table>")
    if len(sessions) > max_sessions:
        body.append(f'<div class="sk-meta">… {plural(len(sessions) - max_sessions, "more session")}.</div>')
    return _wrap("store", "".join(body))


# ---------------------------------------------------------------------------
# CompareView and ExperimentView


def variant_table(cls: str, corner: str, variants: Iterable[str], rows: Iterable[str]) -> str:
    """A table with a column per variant (the snapshots of CompareView and ExperimentView): the
    header (``corner``, then each variant's name), then ``rows``, each a ``<tr>``."""
    head = "".join(f'<th data-variant="{_e(v)}">{_e(v)}</th>' for v in variants)
    return f'<table class="{cls}"><thead><tr><th>{corner}</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def page(title: str, body: str, *, head: str = "") -> str:
    """A complete HTML page (no external resources)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
        f"<style>body{{margin:16px;background:#fff}}</style>{head}</head><body>{body}</body></html>\n"
    )
