// @ts-check
// sessionkit viewer: the store's overview page (#/overview), drawn as SVG charts (docs/viewer.md).
//
// A classic script after common.js, defining skOverview(data) -> element. `data` is what
// sessionkit.analysis.overview_data gives (GET /api/overview, or the bundle's data): each
// figure the rows of one SQL query over the store's views. The charts are drawn by hand as
// SVG rather than with a chart library: a few horizontal bars need no dependency, and the page
// must work from file:// with no network. Every bar carries its figure in data attributes
// (data-chart on the chart, data-key, data-series and data-value on each mark) and a <title>
// a screen reader and a hover read; every text from the store becomes a text node.

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
  const LABEL_W = 170;
  const BAR_W = 340;
  const BAR_H = 14;

  function svgEl(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    for (const c of children) if (c !== null && c !== undefined) el.append(c);
    return el;
  }

  function fmt(v, unit) {
    if (v === null || v === undefined) return "unknown";
    if (unit === "usd") return "$" + v.toLocaleString("en-US", { maximumFractionDigits: 4 });
    if (unit === "s") return v.toLocaleString("en-US", { maximumFractionDigits: 3 }) + " s";
    if (unit === "rate") return (v * 100).toLocaleString("en-US", { maximumFractionDigits: 1 }) + "%";
    return v.toLocaleString("en-US", { maximumFractionDigits: 3 });
  }

  /**
   * One chart: a row per key, in each row a bar per series. `rows` are [key, label, {series: value}]
   * (a value null or undefined: no bar, "unknown"); `series` the names in the order drawn;
   * `note` a line below the chart, `empty` what it says when there are no rows.
   */
  function chart(name, title, series, rows, unit, note, empty) {
    const fig = skEl("figure", { class: "skv-chart", "data-chart": name });
    fig.append(skEl("figcaption", { class: "skv-sub", text: title }));
    if (!rows.length) {
      fig.append(skEl("div", { class: "sk-meta skv-chart-empty", text: empty || "nothing to show" }));
      return fig;
    }
    let top = 0;
    for (const [, , values] of rows) for (const s of series) if (typeof values[s] === "number") top = Math.max(top, values[s]);
    const rowH = BAR_H * series.length + 8;
    const height = rowH * rows.length + 4;
    const svg = svgEl("svg", { class: "skv-chart-svg", width: LABEL_W + BAR_W + 110, height, role: "img", "aria-label": title }, svgEl("title", {}, title));
    rows.forEach(([key, label, values], i) => {
      const y0 = i * rowH + 4;
      svg.append(svgEl("text", { class: "skv-chart-key", x: LABEL_W - 6, y: y0 + (BAR_H * series.length) / 2 + 4, "text-anchor": "end" }, label));
      series.forEach((s, j) => {
        const v = values[s];
        const known = typeof v === "number";
        const w = known && v > 0 && top > 0 ? Math.max(1, (v / top) * BAR_W) : 0;
        const y = y0 + j * BAR_H;
        const text = `${label}${series.length > 1 ? " · " + s : ""}: ${fmt(known ? v : null, unit)}`;
        const mark = svgEl("g", { class: "skv-mark", "data-key": key, "data-series": s, "data-value": known ? String(v) : "" },
          svgEl("title", {}, text),
          svgEl("rect", { x: LABEL_W, y, width: w, height: BAR_H - 2, fill: COLORS[j % COLORS.length] }),
          svgEl("text", { class: "skv-chart-value", x: LABEL_W + w + 4, y: y + BAR_H - 4 }, fmt(known ? v : null, unit)));
        svg.append(mark);
      });
    });
    fig.append(svg);
    if (series.length > 1) {
      const legend = skEl("div", { class: "sk-meta skv-chart-legend" });
      series.forEach((s, j) => legend.append(skEl("span", { class: "skv-swatch", style: { background: COLORS[j % COLORS.length] } }), " " + s + "  "));
      fig.append(legend);
    }
    if (note) fig.append(skEl("div", { class: "sk-meta", text: note }));
    return fig;
  }

  const str = (v) => (v === null || v === undefined ? "" : String(v));

  window.skOverview = function skOverview(data) {
    const box = skEl("section", { class: "sk-view skv-overview" });
    const t = data.totals || {};
    const totals = skEl("div", { class: "sk-meta skv-totals" });
    for (const k of ["sessions", "messages", "runs", "tool_calls", "labels"])
      totals.append(skEl("span", { class: "skv-total", "data-total": k, "data-value": String(t[k] || 0), text: `${(t[k] || 0).toLocaleString("en-US")} ${k.replace("_", " ")}` }), "  ");
    box.append(skEl("h2", { class: "skv-title", text: "Overview" }), totals);
    const grid = skEl("div", { class: "skv-charts" });
    box.append(grid);
    grid.append(
      chart("sessions_by_day", "Sessions by day of their first message", ["sessions"], data.sessions_by_day.map((r) => [r.day, r.day, r]), null, null, "no sessions with messages"),
      chart("messages_by_day", "Messages by day written", ["messages"], data.messages_by_day.map((r) => [r.day, r.day, r]), null, null, "no messages"),
      chart("tokens_by_model", "Tokens of the agent runs by model", ["tokens_in", "tokens_out"], data.models.map((r) => [str(r.model), r.model || "(no model)", r]), null, null, "no agent runs"),
      chart("cost_by_model", "Cost of the agent runs by model (USD)", ["cost_usd"], data.models.map((r) => [str(r.model), r.model || "(no model)", r]), "usd",
        data.models.some((r) => r.cost_usd === null || r.cost_usd === undefined) ? "unknown: no run of the model is priced" : null, "no agent runs"),
      chart("latency", "Latency: p50 and p95 of turns (their run) and tool calls", ["p50", "p95"],
        data.latency.filter((r) => r.n > 0).map((r) => [r.what, `${r.what} (${r.n.toLocaleString("en-US")})`, r]), "s", null, "no turn or tool call with a recorded latency"),
      chart("tool_errors", "Tool error rate (errors of the calls answered)", ["error_rate"], data.tools.map((r) => [r.tool_name, `${r.tool_name} (${r.errors}/${r.answered})`, r]), "rate", null, "no tool calls"),
      chart("tags", "Labels by tag and source", tagSources(data.tags), tagRows(data.tags), null, null, "no labels"),
      chart("ratings", "Ratings (scores) of the labels", ["labels"], data.ratings.map((r) => [String(r.rating), String(r.rating), r]), null, null, "no rated labels"),
    );
    box.dataset.ready = "1";
    return box;
  };

  /** The sources the labels come from (human, code, llm, in that order, then any other). */
  function tagSources(tags) {
    const seen = new Set(tags.map((r) => str(r.source)));
    return ["human", "code", "llm"].filter((s) => seen.has(s)).concat([...seen].filter((s) => !["human", "code", "llm"].includes(s)).sort());
  }

  /** One row per tag, its counts by source (0 from a source that gave it none). */
  function tagRows(tags) {
    const sources = tagSources(tags);
    const rows = new Map();
    for (const r of tags) {
      if (!rows.has(r.tag)) {
        const zero = skDict();
        for (const s of sources) zero[s] = 0;
        rows.set(r.tag, zero);
      }
      rows.get(r.tag)[str(r.source)] = r.labels;
    }
    return [...rows].map(([tag, values]) => [tag, tag, values]);
  }
})();
