// @ts-check
// A run's timeline: its model and tool calls as bars on a time axis (docs/viewer.md).
//
// Plain top-level functions after common.js (skEl, skTokens, skCost), so the file is both a
// classic script of the viewer page and part of RunView's ES module. The data is what
// sessionkit.widgets._timeline.timeline computes in Python ({runs: [{run_id, duration_s,
// calls: [{kind, name, offset_s, duration_s, tokens_in, tokens_out, cost_usd, error,
// message_id}]}]}); nothing is derived here but the drawing. Bars are positioned <div>s with
// inline styles, hand-drawn: a chart library would be a download for a few rectangles.

const SK_TL_COLORS = { model: "#15803d", tool: "#c2410c", error: "#dc2626" };

/** Seconds as a short duration: "850 ms", "2.40 s", "3 min 5 s"; "—" for none. */
function skDuration(s) {
  if (s === null || s === undefined) return "—";
  if (s < 0.01) return +(s * 1000).toFixed(2) + " ms";
  if (s < 1) return Math.round(s * 1000) + " ms";
  if (s < 60) return s.toFixed(2) + " s";
  return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}

/** Tick spacing for an axis of `span` seconds: 1, 2 or 5 times a power of ten, 4-10 ticks. */
function skTickStep(span) {
  if (!(span > 0)) return 1;
  const raw = span / 6;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * p) return m * p;
  return 10 * p;
}

/**
 * @param {TimelineRun} run
 * @param {((messageId: string, call: TimelineCall) => void) | null} [onOpen]
 */
function skTlRun(run, onOpen) {
  const calls = run.calls || [];
  let span = run.duration_s || 0;
  for (const c of calls) span = Math.max(span, (c.offset_s || 0) + (c.duration_s || 0));
  const box = skEl("div", { class: "sk-timeline-run", "data-run": run.run_id, style: { margin: "6px 0 10px" } });
  const models = calls.filter((c) => c.kind === "model");
  const tokens = models.reduce((n, c) => n + (c.tokens_in || 0) + (c.tokens_out || 0), 0);
  const priced = models.filter((c) => typeof c.cost_usd === "number");
  const cost = priced.reduce((n, c) => n + c.cost_usd, 0);
  const errors = calls.filter((c) => c.error).length;
  box.append(
    skEl("div", { class: "sk-meta", style: { marginBottom: "2px" } },
      skEl("b", { text: "run " + run.run_id }),
      ` · ${skPlural(models.length, "model call")} · ${skPlural(calls.length - models.length, "tool call")} · ${skDuration(run.duration_s)}` +
        ` · ${skTokens(tokens)} tokens · ${models.length ? skCost(cost, models.length - priced.length, models.length) : "—"}` +
        (errors ? ` · ${skPlural(errors, "error")}` : "") + (run.status ? ` · ${run.status}` : "")),
  );
  const pct = (s) => (span > 0 ? (100 * s) / span : 0);
  const LABEL = "11em";
  const row = (label, track, attrs) =>
    skEl("div", { ...(attrs || {}), style: { display: "flex", alignItems: "center", gap: "6px", minHeight: "20px" } },
      skEl("div", { style: { flex: "0 0 " + LABEL, overflow: "hidden", textOverflow: "ellipsis", whiteSpace: "nowrap" } }, label),
      track);
  const axis = skEl("div", { class: "sk-timeline-axis", style: { position: "relative", flex: "1", height: "16px", borderBottom: "1px solid #d1d5db" } });
  const step = skTickStep(span);
  for (let t = 0; span > 0 && t <= span + 1e-9; t += step) {
    axis.append(skEl("span", { class: "sk-meta", style: { position: "absolute", left: pct(t) + "%", fontSize: "10px", transform: !t ? "none" : pct(t) > 92 ? "translateX(-100%)" : "translateX(-50%)" }, text: skDuration(t) }));
  }
  box.append(row("", axis));
  for (const c of calls) {
    const color = c.error ? SK_TL_COLORS.error : SK_TL_COLORS[c.kind] || "#6b7280";
    const parts = [skDuration(c.duration_s)];
    if (c.kind === "model") {
      parts.push(`${skTokens(c.tokens_in)} in / ${skTokens(c.tokens_out)} out`);
      parts.push(skCost(c.cost_usd, c.cost_usd === null || c.cost_usd === undefined ? 1 : 0));
    }
    if (c.error) parts.push("error: " + c.error);
    const tip = `${c.kind === "model" ? "model call" : "tool call"} ${c.name || ""} · ${parts.join(" · ")}` + (c.message_id ? " · click to open its message" : "");
    const open = c.duration_s === null || c.duration_s === undefined;
    const bar = skEl("button", {
      type: "button",
      class: "sk-timeline-bar" + (c.error ? " sk-timeline-error" : ""),
      title: tip,
      "aria-label": tip,
      "data-kind": c.kind,
      "data-index": c.index,
      "data-duration": open ? "" : String(c.duration_s),
      "data-message": c.message_id || "",
      disabled: !c.message_id,
      style: {
        position: "absolute", top: "3px", height: "14px", padding: "0", border: c.error ? "2px solid #7f1d1d" : "0",
        borderRadius: "2px", left: pct(c.offset_s || 0) + "%", width: open ? "2px" : `max(3px, ${pct(c.duration_s)}%)`,
        background: open ? "transparent" : color, borderLeft: open ? `2px dashed ${color}` : undefined,
        cursor: c.message_id ? "pointer" : "default", opacity: "0.9",
      },
      onclick: () => c.message_id && onOpen && onOpen(c.message_id, c),
    });
    const track = skEl("div", { style: { position: "relative", flex: "1", height: "20px", background: "#f9fafb" } }, bar);
    const label = skEl("span", { title: tip },
      skEl("span", { style: { color, fontWeight: "600" }, text: (c.error ? "✕ " : "") + (c.kind === "model" ? "model " : "tool ") }),
      c.name || "?");
    const info = skEl("div", { class: "sk-meta", style: { flex: "0 0 16em", fontSize: "11px", whiteSpace: "nowrap", overflow: "hidden", textOverflow: "ellipsis" }, text: parts.join(" · ") });
    const line = row(label, track, { class: "sk-timeline-call", "data-kind": c.kind, "data-index": c.index });
    line.append(info);
    box.append(line);
  }
  return box;
}

/**
 * The timeline of every run in `data` (from sessionkit.widgets._timeline.timeline). `onOpen(messageId,
 * call)` is called when a bar is clicked (a bar with no message is disabled).
 */
/**
 * @param {TimelinePayload} data
 * @param {((messageId: string, call: TimelineCall) => void) | null} [onOpen]
 */
function skTimeline(data, onOpen) {
  const runs = (data && data.runs) || [];
  const box = skEl("div", { class: "sk-timeline", "data-runs": runs.length });
  if (!runs.length) box.append(skEl("div", { class: "sk-meta", text: "no runs" }));
  for (const run of runs) box.append(skTlRun(run, onOpen));
  return box;
}
