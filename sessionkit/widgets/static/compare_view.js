// @ts-check
// CompareView front end: one column per variant, filled as the kernel sends batches.
//
// The model's `columns` lists {variant, status, model, text, tools, input_tokens,
// output_tokens, cost_usd, error}; each batch replaces the list, and each column is
// redrawn in place (its text node is updated, not rebuilt, so a selection survives).

/** @param {SkRenderArgs<SkCompareState>} args */
function render({ model, el }) {
  const root = skEl("div", { class: "sk-view sk-compare-view" });
  const head = skEl("div", { class: "sk-meta" });
  const grid = skEl("div", { class: "sk-compare-grid" });
  root.append(head, grid);
  el.append(root);
  const cells = new Map();

  function cell(variant) {
    let c = cells.get(variant);
    if (c) return c;
    const name = skEl("div", { class: "sk-compare-name", text: variant });
    const status = skEl("span", { class: "sk-badge" });
    const modelName = skEl("span", { class: "sk-meta" });
    const text = skEl("div", { class: "sk-text sk-compare-text" });
    const foot = skEl("div", { class: "sk-meta sk-compare-foot" });
    const error = skEl("div", { class: "sk-err" });
    const node = skEl("div", { class: "sk-compare-col", "data-variant": variant }, name, status, " ", modelName, text, foot, error);
    grid.append(node);
    c = { node, status, modelName, text, foot, error };
    cells.set(variant, c);
    return c;
  }

  function draw() {
    const columns = model.get("columns") || [];
    root.style.maxHeight = `${model.get("height")}px`;
    const done = columns.filter((c) => c.status === "completed").length;
    head.textContent = `${columns.length} variant${columns.length === 1 ? "" : "s"} · ${done} completed`;
    root.dataset.variants = String(columns.length);
    for (const col of columns) {
      const c = cell(col.variant);
      c.node.dataset.status = col.status;
      c.status.textContent = col.status;
      c.modelName.textContent = col.model || "";
      if (c.text.textContent !== col.text) c.text.textContent = col.text || "";
      const cost = col.cost_usd === null || col.cost_usd === undefined ? "?" : `$${Number(col.cost_usd).toFixed(4)}`;
      const tools = (col.tools || []).join(", ") || "—";
      c.foot.textContent = `in ${skTokens(col.input_tokens)} · out ${skTokens(col.output_tokens)} · cost ${cost} · tools ${tools}`;
      c.error.textContent = col.error || "";
    }
  }

  model.on("change:columns", draw);
  model.on("change:height", draw);
  draw();
  skHideSnapshot(model);
  return () => {
    model.off("change:columns", draw);
    model.off("change:height", draw);
  };
}

export default { render };
