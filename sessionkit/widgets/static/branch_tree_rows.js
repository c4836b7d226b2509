// @ts-check
// BranchTree, the text rows: one DOM row per layout row (a message's role, labels, preview
// and tokens; a collapsed chain's count; a compaction's summary), above the canvas.
//
// Every row is an element, built in slices after the layout and never rebuilt on scroll:
// rows outside the view cost no layout or paint (CSS `content-visibility: auto`, which
// find-in-page still searches and scrolls to), and a draw updates only the rows in view.

/**
 * What the rows are built from, read afresh at each build.
 * @typedef {object} BTRowSource
 * @property {BTTree} tree
 * @property {BTLayout} layout
 * @property {Uint8Array} active the latest path's flags (btOnPath)
 * @property {Map<string, string>} previews the previews of the messages fetched so far, by id
 * @property {Record<string, any> | null | undefined} labels the model's `_labels` (label lists by message id)
 * @property {number} shift the rows' shift to the left, in indent steps (btShift)
 */

/**
 * A row's left padding: its text starts past its dot (a band's a little before).
 * @param {BTLayout} layout
 * @param {number} r
 * @param {number} shift
 */
function btRowPadding(layout, r, shift) {
  return btX(layout.depth[r], shift) + (layout.kind[r] === BT_KIND_BAND ? -4 : 10) + "px";
}

/**
 * The text of row `r`: a message's role and preview, a collapsed chain's count, a band's summary.
 * @param {BTRowSource} src
 * @param {number} r
 * @returns {HTMLElement}
 */
function btMakeRow(src, r) {
  const { tree, layout } = src;
  const kind = layout.kind[r];
  const depth = layout.depth[r];
  const row = skEl("div", { class: "sk-row", role: "treeitem", "aria-level": String(depth + 1), "data-row": String(r),
    style: { top: r * BT_ROW + "px", height: BT_ROW + "px" } });
  if (kind === BT_KIND_NODE) {
    const i = layout.a[r];
    const id = tree.ids[i];
    const role = tree.roles[tree.role[i]];
    const nk = layout.nKids(i);
    row.dataset.id = id;
    row.setAttribute("aria-selected", "false");
    if (src.active[i] === 1) row.classList.add("sk-on");
    const preview = src.previews.get(id);
    row.append(
      skEl("span", { class: "sk-row-role", style: { color: skRoleColor(role) }, text: role }),
      skLabelBadges(skOwn(src.labels, id)),
      skEl("span", { class: "sk-row-text", text: preview === undefined ? "…" : preview }),
      skEl("span", { class: "sk-row-tok", text: (nk > 1 ? `${nk} branches · ` : "") + skTokens(tree.tokens[i]) + " tok" }),
    );
  } else if (kind === BT_KIND_MORE) {
    const [count, tok] = btMoreCount(tree, layout, r);
    row.classList.add("sk-row-more");
    row.setAttribute("aria-expanded", "false");
    row.append(skEl("span", { class: "sk-row-text", text: `⋯ ${skPlural(count, "more message")} · ${skTokens(tok)} tokens (click or Enter to expand)` }));
  } else {
    const band = tree.compactions[layout.a[r]];
    row.classList.add("sk-row-band");
    row.append(
      skEl("span", { class: "sk-row-head", text: `▤ compacted ${skPlural(band.messages, "message")}, ${skTokens(band.tokens_before)} → ${skTokens(band.tokens_after)} tok${band.superseded ? " (superseded)" : ""}: ` }),
      skEl("span", { class: "sk-row-text", text: band.summary.replace(/\s+/g, " ") }),
    );
  }
  return row;
}

/** The DOM rows of one layout, in row order, in the element `layer`. */
class BTRows {
  /**
   * @param {HTMLElement} layer the element holding the rows
   * @param {HTMLElement} root the view's element (its `data-dom-rows` counts the rows built)
   */
  constructor(layer, root) {
    this.layer = layer;
    this.root = root;
    /** @type {HTMLElement[]} one element per layout row built so far */
    this.els = [];
    /** @type {Set<number>} rows last shown as selected, compared or under the cursor */
    this.marked = new Set();
    this.timer = 0;
  }

  /** Drops every row (a new layout follows). */
  reset() {
    clearTimeout(this.timer);
    this.timer = 0;
    this.els = [];
    this.marked = new Set();
    this.layer.replaceChildren();
  }

  /**
   * Appends rows up to `upto` (exclusive) or until `deadline`; true when every laid-out row has its element.
   * @param {BTRowSource} src
   * @param {number} upto
   * @param {number} [deadline] performance.now() ms
   */
  build(src, upto, deadline) {
    const { layout } = src;
    const frag = document.createDocumentFragment();
    const stop = Math.min(upto, layout.rows);
    let r = this.els.length;
    for (; r < stop; r++) {
      if (deadline !== undefined && (r & 63) === 0 && performance.now() > deadline) break;
      const row = btMakeRow(src, r);
      row.style.paddingLeft = btRowPadding(layout, r, src.shift);
      this.els.push(row);
      frag.append(row);
    }
    this.layer.append(frag);
    this.root.dataset.domRows = String(this.els.length);
    return this.els.length >= layout.rows;
  }

  /**
   * Builds the rows in slices of a few milliseconds, so a large tree never blocks the page,
   * until every row of a finished layout has its element. `source` gives null once the view is gone.
   * @param {() => BTRowSource | null} source
   */
  buildLater(source) {
    if (this.timer || !source()) return;
    this.timer = setTimeout(() => {
      this.timer = 0;
      const src = source();
      if (!src) return;
      if (!this.build(src, src.layout.rows, performance.now() + 8) || !src.layout.done) this.buildLater(source);
    }, 0);
  }

  /**
   * The rows in view, r0 to r1 (and those that were marked), follow the selection, the cursor and the shift.
   * @param {BTRowSource} src
   * @param {number} r0
   * @param {number} r1
   * @param {{sel: number | undefined, cmp: number | undefined, cursor: number}} marks
   *   the selected and compared messages' indices, the cursor's row
   */
  update(src, r0, r1, marks) {
    const { layout } = src;
    const { sel, cmp, cursor } = marks;
    if (this.els.length <= r1) this.build(src, r1 + 1);
    const touch = new Set(this.marked);
    for (let r = r0; r <= r1; r++) touch.add(r);
    this.marked = new Set();
    for (const r of touch) {
      const row = this.els[r];
      if (!row) continue;
      const kind = layout.kind[r];
      if (r >= r0 && r <= r1) row.style.paddingLeft = btRowPadding(layout, r, src.shift);
      const isSel = kind === BT_KIND_NODE && layout.a[r] === sel;
      const isCmp = kind === BT_KIND_NODE && layout.a[r] === cmp;
      row.classList.toggle("sk-cursor", r === cursor);
      row.classList.toggle("sk-sel", isSel);
      row.classList.toggle("sk-cmp", isCmp);
      if (kind === BT_KIND_NODE) row.setAttribute("aria-selected", isSel ? "true" : "false");
      if (isSel || isCmp || r === cursor) this.marked.add(r);
    }
  }

  /**
   * A preview arrived: the text of message row `r`, when built.
   * @param {BTLayout} layout
   * @param {number} r
   * @param {string} text
   */
  setPreview(layout, r, text) {
    if (r >= 0 && this.els[r] && layout.kind[r] === BT_KIND_NODE) {
      const span = this.els[r].querySelector(".sk-row-text");
      if (span) span.textContent = text;
    }
  }

  /**
   * The labels changed (here or in any other view of the store): new badges in place.
   * @param {Record<string, any>} labels label lists by message id
   */
  setLabels(labels) {
    for (const row of this.els) {
      if (!row || !row.dataset.id) continue;
      const badges = row.querySelector(".sk-labels");
      if (badges) badges.replaceWith(skLabelBadges(skOwn(labels, row.dataset.id)));
    }
  }

  /** The view is gone: no more slices. */
  dispose() {
    clearTimeout(this.timer);
  }
}
