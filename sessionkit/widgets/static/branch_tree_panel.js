// @ts-check
// BranchTree, the text around the tree: the toolbar above it (the session's figures, the
// "collapse chains" box, the roles' colours) and the panel beside it (the selected message
// with its labels and content, the branch diff, or a compaction's summary).

/**
 * One side of a branch diff (_source.branch_diff, or btDiff where no kernel runs).
 * @typedef {object} BTDiffSide
 * @property {number} messages
 * @property {number} tokens
 * @property {number} tool_calls
 * @property {number | null} [usage_in]
 * @property {number | null} [usage_out]
 * @property {number} [usage_known] how many messages have a usage
 * @property {number | null} [cost_usd] the cost when every priced item has a price
 * @property {number | null} [cost_known_usd] the sum of the known prices
 * @property {number} [cost_known] how many items have a price
 * @property {number} [cost_unknown] how many have none
 * @property {string | null} [first_preview]
 */

/**
 * The model's `diff`: empty, or the comparison of the selected and the compared message's branches.
 * @typedef {object} BTDiff
 * @property {BTDiffSide} [a] the selected message's side
 * @property {BTDiffSide} [b] the compared message's side
 * @property {string | null} [fork_id]
 * @property {number} [shared_messages]
 * @property {number} [shared_tokens]
 */

/**
 * What the panel shows.
 * @typedef {object} BTPanelState
 * @property {BTTree} tree
 * @property {BTLayout | null} layout
 * @property {Map<string, number>} index the messages' indices by id (btIndex)
 * @property {number} focusBand the compaction to show, -1 for none
 * @property {string | null | undefined} selectedId
 * @property {Record<string, any> | null | undefined} labels the model's `_labels`
 * @property {BTLabels | null} editor the label controls, null where labels are read-only
 * @property {any} detail the selected message's content (_source.message_view), undefined while it loads
 * @property {BTDiff | null | undefined} diff
 */

/**
 * Fills `toolbar` for `tree`: its figures, the "collapse chains" box and the roles' colours.
 * @param {HTMLElement} toolbar
 * @param {BTTree | null} tree
 * @param {Uint8Array} active the latest path's flags (btOnPath)
 * @param {boolean} collapse whether the box is ticked
 * @param {(collapse: boolean) => void} onCollapse called when the box is ticked or cleared
 */
function btToolbar(toolbar, tree, active, collapse, onCollapse) {
  toolbar.textContent = "";
  if (!tree) return;
  const { forks, leaves, pathMessages, pathTokens } = btTreeCounts(tree, active);
  const box = /** @type {HTMLInputElement} */ (skEl("input", { type: "checkbox" }));
  box.checked = collapse;
  box.addEventListener("change", () => onCollapse(box.checked));
  const legend = skEl("span", { class: "sk-legend" });
  for (const role of tree.roles) legend.append(skEl("span", { class: "sk-dot", style: { background: skRoleColor(role) } }), role + " ");
  toolbar.append(
    skEl("b", { text: `Session ${tree.session_id || "(default)"}` }),
    skEl("span", { class: "sk-meta", text: ` ${skPlural(tree.n, "message")} · ${skPlural(forks, "branch point")} · ${skPlural(leaves, "leaf", "leaves")} · ${skPlural((tree.compactions || []).length, "compaction")} · latest path ${skPlural(pathMessages, "message")}, ${skTokens(pathTokens)} tokens ` }),
    skEl("label", { class: "sk-check" }, box, " collapse chains"),
    legend,
  );
}

/**
 * Fills `panel`: the compaction in focus, else the selected message and the branch diff, else a hint.
 * @param {HTMLElement} panel
 * @param {BTPanelState | null} s null before the view has a tree
 */
function btPanel(panel, s) {
  panel.textContent = "";
  if (!s) return;
  const { tree } = s;
  if (s.focusBand >= 0 && tree.compactions[s.focusBand]) {
    const band = tree.compactions[s.focusBand];
    panel.append(
      skEl("div", { class: "sk-panel-title", text: "▤ Compaction" + (band.superseded ? " (superseded)" : "") }),
      skEl("div", { class: "sk-meta", text: `${skPlural(band.messages, "message")} (${band.from_id} … ${band.to_id}) · ${skTokens(band.tokens_before)} → ${skTokens(band.tokens_after)} tokens · ${band.created_at}` }),
      skEl("div", { class: "sk-text sk-summary", text: band.summary }),
    );
    return;
  }
  const id = s.selectedId;
  const i = id === null || id === undefined ? undefined : s.index.get(id);
  if (id === null || id === undefined || i === undefined) {
    panel.append(skEl("div", { class: "sk-meta", text: "Click a message to select its path; shift-click another to compare the two branches. Click a band for its summary." }));
    return;
  }
  const path = btPathTotals(tree, i);
  const role = tree.roles[tree.role[i]];
  const editor = s.editor;
  panel.append(
    skEl("div", { class: "sk-panel-title" }, skEl("span", { class: "sk-dot", style: { background: skRoleColor(role) } }), `${role} · ${skTokens(tree.tokens[i])} tokens`),
    skEl("div", { class: "sk-meta", text: `${id} · path ${skPlural(path.messages, "message")}, ${skTokens(path.tokens)} tokens · ${skPlural(s.layout ? s.layout.nKids(i) : 0, "child", "children")}` }),
    skEl("div", { class: "sk-panel-labels" }, skLabelBadges(skOwn(s.labels, id), editor ? editor.remove : null)),
  );
  if (editor) panel.append(editor.form);
  const detail = s.detail;
  if (detail) {
    const box = skEl("div", { class: "sk-panel-msg" });
    box.append(skParts(detail));
    if (detail.usage) box.append(skEl("div", { class: "sk-meta", text: `usage: in ${skTokens(detail.usage.in)} · out ${skTokens(detail.usage.out)} · ${skCost(detail.usage.cost_usd)}` }));
    panel.append(box);
  } else panel.append(skEl("div", { class: "sk-meta", text: "loading…" }));
  const diff = s.diff || {};
  if (diff.a && diff.b) panel.append(...btDiffTable(diff, diff.a, diff.b));
  else panel.append(skEl("div", { class: "sk-meta sk-hint", text: "Shift-click another message to compare branches." }));
}

/**
 * The branch diff as a title, a line on the shared part and a table of the two sides.
 * @param {BTDiff} diff
 * @param {BTDiffSide} a the selected message's side
 * @param {BTDiffSide} b the compared message's side
 * @returns {HTMLElement[]}
 */
function btDiffTable(diff, a, b) {
  /**
   * @param {string} name
   * @param {string | number} x
   * @param {string | number} y
   */
  const row = (name, x, y) => skEl("tr", {}, skEl("th", { text: name }), skEl("td", { text: x }), skEl("td", { text: y }));
  return [
    skEl("div", { class: "sk-panel-title", text: "Branch diff from the fork point" }),
    skEl("div", { class: "sk-meta", text: `fork at ${diff.fork_id || "(separate roots)"} · ${skPlural(/** @type {number} */ (diff.shared_messages), "shared message")}, ${skTokens(diff.shared_tokens)} tokens` }),
    skEl("table", { class: "sk-diff" },
      skEl("tr", {}, skEl("th", {}), skEl("th", { text: "selected" }), skEl("th", { text: "compared" })),
      row("messages", a.messages, b.messages),
      row("tokens", skTokens(a.tokens), skTokens(b.tokens)),
      row("tool calls", a.tool_calls, b.tool_calls),
      row("usage in/out", btSideUsage(a), btSideUsage(b)),
      row("cost", btSideCost(a), btSideCost(b)),
      row("first message", a.first_preview || "—", b.first_preview || "—"),
    ),
  ];
}

/**
 * A side's cost: "unknown", a sum, or a partial sum that says how many prices it lacks.
 * @param {BTDiffSide} s
 */
function btSideCost(s) {
  const known = s.cost_known || 0;
  const unknown = s.cost_unknown || 0;
  if (s.cost_usd !== null && s.cost_usd !== undefined && !unknown) return skCost(s.cost_usd);
  return skCost(known ? s.cost_known_usd : null, unknown, known + unknown);
}

/**
 * A side's tokens in and out as the runs' usage reports them ("unknown" without a usage).
 * @param {BTDiffSide} s
 */
function btSideUsage(s) {
  if (s.usage_in === null || s.usage_in === undefined) return SK_UNKNOWN_COST;
  const text = `${skTokens(s.usage_in)}/${skTokens(s.usage_out)}`;
  const missing = (s.cost_known || 0) + (s.cost_unknown || 0) - (s.usage_known || 0);
  return missing > 0 ? `≥ ${text} (${missing} of ${(s.cost_known || 0) + (s.cost_unknown || 0)} unknown)` : text;
}
