// @ts-check
// ExperimentView front end: a row per item, a column per variant (the baseline first),
// each cell the reply, its scores with their delta from the baseline, and a link to its branch.
//
// The model's `items` lists {item, prompt, cells: [{variant, status, reply, error, scores:
// [{name, value, delta}], output_tokens, cost_usd, latency_s, session_id, reply_id, href,
// baseline}]}; each batch replaces the list and the table is redrawn.

function skExpValue(v) {
  return typeof v === "number" ? String(Number(v.toPrecision(6))) : String(v);
}

function skExpDelta(d) {
  if (d === null || d === undefined) return "";
  if (d === 0) return " (=)";
  return ` (${d > 0 ? "+" : ""}${Number(d.toPrecision(6))})`;
}

/** @param {SkRenderArgs<SkExperimentState>} args */
function render({ model, el }) {
  const root = skEl("div", { class: "sk-view sk-experiment-view" });
  const head = skEl("div", { class: "sk-meta sk-exp-head" });
  const table = skEl("table", { class: "sk-exp" });
  root.append(head, table);
  el.append(root);

  function cellOf(cell) {
    const td = skEl("td", { "data-variant": cell.variant, "data-status": cell.status });
    td.append(skEl("span", { class: "sk-badge", text: cell.status }));
    td.append(skEl("div", { class: "sk-text sk-exp-reply", text: cell.reply || "" }));
    if (cell.error) td.append(skEl("div", { class: "sk-err", text: cell.error }));
    const scores = skEl("div", { class: "sk-meta sk-exp-scores" });
    for (const s of cell.scores || []) {
      const span = skEl("span", { class: "sk-exp-score", "data-scorer": s.name, text: `${s.name} ${skExpValue(s.value)}` });
      if (s.delta !== null && s.delta !== undefined) {
        span.append(skEl("span", { class: "sk-exp-delta" + (s.delta > 0 ? " sk-up" : s.delta < 0 ? " sk-down" : ""), text: skExpDelta(s.delta) }));
      }
      scores.append(span, " ");
    }
    td.append(scores);
    const cost = cell.cost_usd === null || cell.cost_usd === undefined ? "?" : `$${Number(cell.cost_usd).toFixed(4)}`;
    const latency = cell.latency_s === null || cell.latency_s === undefined ? "?" : `${Number(cell.latency_s).toFixed(2)} s`;
    const foot = skEl("div", { class: "sk-meta", text: `out ${skTokens(cell.output_tokens)} · ${cost} · ${latency}` });
    if (cell.href) {
      const link = skEl("a", { class: "sk-exp-link", href: cell.href, target: "_blank", text: "branch" });
      link.addEventListener("click", () => {
        model.set("selected", { session_id: cell.session_id, message_id: cell.reply_id });
        model.save_changes();
      });
      foot.append(" · ", link);
    }
    td.append(foot);
    return td;
  }

  function draw() {
    const items = model.get("items") || [];
    const baseline = model.get("baseline");
    root.style.maxHeight = `${model.get("height")}px`;
    const variants = [];
    for (const it of items) for (const c of it.cells) if (!variants.includes(c.variant)) variants.push(c.variant);
    const cells = items.flatMap((it) => it.cells);
    const done = cells.filter((c) => c.status === "completed").length;
    const name = model.get("name");
    head.textContent = `${name ? name + " · " : ""}${skPlural(items.length, "item")} · ${skPlural(variants.length, "variant")} · ${done} of ${cells.length} completed · baseline ${baseline || "—"}`;
    root.dataset.completed = String(done);
    table.textContent = "";
    const tr = skEl("tr", {}, skEl("th", { text: "item" }));
    for (const v of variants) tr.append(skEl("th", { "data-variant": v, text: v + (v === baseline ? " (baseline)" : "") }));
    table.append(skEl("thead", {}, tr));
    const body = skEl("tbody");
    for (const it of items) {
      const row = skEl("tr", { "data-item": String(it.item) });
      row.append(skEl("td", {}, String(it.item), skEl("div", { class: "sk-text", text: it.prompt || "" })));
      const byVariant = new Map(it.cells.map((c) => [c.variant, c]));
      for (const v of variants) row.append(byVariant.has(v) ? cellOf(byVariant.get(v)) : skEl("td"));
      body.append(row);
    }
    table.append(body);
  }

  model.on("change:items", draw);
  model.on("change:baseline", draw);
  model.on("change:height", draw);
  draw();
  skHideSnapshot(model);
  return () => {
    model.off("change:items", draw);
    model.off("change:baseline", draw);
    model.off("change:height", draw);
  };
}

export default { render };
