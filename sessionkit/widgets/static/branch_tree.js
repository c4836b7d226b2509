// @ts-check
// BranchTree front end: the whole message tree, laid out incrementally; lines, dots and row
// tints on a canvas, the text of every row as a real DOM row (selectable, copyable, read by
// screen readers and found by the browser's find-in-page, in view or not).
//
// Every row is an element, built in slices after the layout and never rebuilt on scroll:
// rows outside the view cost no layout or paint (CSS `content-visibility: auto`, which
// find-in-page still searches and scrolls to), and a draw updates only the rows in view.
//
// The model's `_tree` holds parallel arrays (ids, parent, role, tokens) and the
// compactions. Rows follow sessionkit.widgets._source.outline_rows exactly:
// chains without branches collapse to first / "n more" / last, children oldest
// first, one indent step per branch point, a band row before each compaction.
// Only the rows in view are drawn on the canvas; previews of the messages are fetched
// from the kernel with custom messages ({type: "fetch", ids}), the rows in view first.

const BT_ROW = 22;
const BT_INDENT = 16;
const BT_GUTTER = 12;
const BT_COLLAPSE_MIN = 4;
const BT_KIND_NODE = 0;
const BT_KIND_MORE = 1;
const BT_KIND_BAND = 2;

class BTLayout {
  constructor(tree, collapse, expanded) {
    const n = tree.n;
    this.tree = tree;
    const count = new Int32Array(n + 1);
    for (let i = 0; i < n; i++) if (tree.parent[i] >= 0) count[tree.parent[i] + 1]++;
    for (let i = 0; i < n; i++) count[i + 1] += count[i];
    this.kidStart = count;
    this.kids = new Int32Array(Math.max(n, 1));
    const fill = count.slice(0, n);
    for (let i = 0; i < n; i++) {
      const p = tree.parent[i];
      if (p >= 0) this.kids[fill[p]++] = i;
    }
    this.bandAt = new Map();
    (tree.compactions || []).forEach((band, k) => {
      if (band.from >= 0 && band.messages) {
        if (!this.bandAt.has(band.from)) this.bandAt.set(band.from, []);
        this.bandAt.get(band.from).push(k);
      }
    });
    this.collapse = collapse;
    this.expanded = expanded;
    this.kind = [];
    this.a = [];
    this.b = [];
    this.depth = [];
    this.chain = [];
    this.chainFirst = [];
    this.rowOf = new Int32Array(n).fill(-1);
    this.forks = [];
    this.maxDepth = 0;
    this.chains = 0;
    this.stack = [];
    for (let i = n - 1; i >= 0; i--) if (tree.parent[i] < 0) this.stack.push([i, 0, -1]);
    this.done = n === 0;
  }
  nKids(i) {
    return this.kidStart[i + 1] - this.kidStart[i];
  }
  push(kind, a, b, depth, chain) {
    const first = this.chain.length === 0 || this.chain[this.chain.length - 1] !== chain;
    this.kind.push(kind);
    this.a.push(a);
    this.b.push(b);
    this.depth.push(depth);
    this.chain.push(chain);
    this.chainFirst.push(first ? 1 : 0);
    return this.kind.length - 1;
  }
  bands(i, depth, chain) {
    for (const k of this.bandAt.get(i) || []) this.push(BT_KIND_BAND, k, i, depth, chain);
  }
  /** Lay out until `deadline` (performance.now() ms); true when finished. */
  step(deadline) {
    while (this.stack.length) {
      if (performance.now() > deadline) return false;
      const [start, depth, fork] = this.stack.pop();
      const chain = [start];
      while (this.nKids(chain[chain.length - 1]) === 1) chain.push(this.kids[this.kidStart[chain[chain.length - 1]]]);
      const id = this.chains++;
      const firstRow = this.kind.length;
      if (depth > this.maxDepth) this.maxDepth = depth;
      if (this.collapse && chain.length >= BT_COLLAPSE_MIN && !this.expanded.has(start)) {
        this.bands(chain[0], depth, id);
        this.rowOf[chain[0]] = this.push(BT_KIND_NODE, chain[0], -1, depth, id);
        for (let j = 1; j < chain.length - 1; j++) this.bands(chain[j], depth, id);
        const more = this.push(BT_KIND_MORE, chain[1], chain[chain.length - 2], depth, id);
        for (let j = 1; j < chain.length - 1; j++) this.rowOf[chain[j]] = more;
        const last = chain[chain.length - 1];
        this.bands(last, depth, id);
        this.rowOf[last] = this.push(BT_KIND_NODE, last, -1, depth, id);
      } else {
        for (const i of chain) {
          this.bands(i, depth, id);
          this.rowOf[i] = this.push(BT_KIND_NODE, i, -1, depth, id);
        }
      }
      if (fork >= 0) this.forks[fork].children.push(firstRow);
      const end = chain[chain.length - 1];
      const k = this.nKids(end);
      if (k >= 2) {
        const f = this.forks.length;
        this.forks.push({ row: this.rowOf[end], depth, children: [] });
        for (let j = this.kidStart[end + 1] - 1; j >= this.kidStart[end]; j--) this.stack.push([this.kids[j], depth + 1, f]);
      }
    }
    this.done = true;
    return true;
  }
  get rows() {
    return this.kind.length;
  }
}

function btOnPath(tree, leaf) {
  const flags = new Uint8Array(tree.n);
  let i = leaf;
  while (i >= 0 && i < tree.n && !flags[i]) {
    flags[i] = 1;
    i = tree.parent[i];
  }
  return flags;
}

function render({ model, el }) {
  const cache = skCache(model);
  // data-lm-suppress-shortcuts: while the tree has the focus, its keys (arrows, Home, End, Enter)
  // move through the tree, not through the host's cells (Notebook 7 binds them in command mode).
  const root = skEl("div", { class: "sk-view sk-tree-view", tabindex: "0", "data-lm-suppress-shortcuts": "true" });
  el.append(root);
  const toolbar = skEl("div", { class: "sk-toolbar" });
  const main = skEl("div", { class: "sk-tree-main" });
  const wrap = skEl("div", { class: "sk-tree-wrap" });
  const scroller = skEl("div", { class: "sk-tree-scroll", "data-row-height": String(BT_ROW), role: "tree",
    "aria-label": "message tree", tabindex: "-1" });
  const sizer = skEl("div", { class: "sk-tree-sizer" });
  const rowsLayer = skEl("div", { class: "sk-tree-rows" });
  const canvas = skEl("canvas", { class: "sk-tree-canvas", "aria-hidden": "true" });
  const panel = skEl("div", { class: "sk-tree-panel" });
  const live = skEl("div", { class: "sk-sr", "aria-live": "polite" });
  sizer.append(rowsLayer);
  scroller.append(sizer);
  wrap.append(canvas, scroller); // the canvas paints under the scroller and its text rows
  main.append(wrap, panel);
  root.append(toolbar, main, live);
  const ctx = canvas.getContext("2d");

  let tree = null;
  let ids = new Map();
  let layout = null;
  let expanded = new Set();
  let active = new Uint8Array(0);
  let chosen = new Uint8Array(0);
  let pathTokens = [];
  let hover = -1;
  let cursor = -1; // the row the keyboard is on
  let focusBand = -1;
  let frame = 0;
  let layoutTimer = 0;
  let fetchTimer = 0;
  let pending = []; // ids whose previews are still to be asked for
  let rowEls = []; // one element per layout row, in row order
  let buildTimer = 0;
  let marked = new Set(); // rows last shown as selected, compared or under the cursor
  let disposed = false;
  // Labels: the add form lives as long as the view (re-rendering the panel keeps what is typed in it)
  let labelReq = 0;
  const labelForm = skLabelForm((fields) => {
    const id = model.get("selected_id");
    if (!id) return;
    labelReq = skNextReq();
    model.send({ type: "add-label", id, ...fields, req: labelReq });
  });
  const removeLabel = (label) => {
    labelReq = skNextReq();
    model.send({ type: "remove-label", label: label.id, req: labelReq });
  };

  function setHeight() {
    wrap.style.height = (model.get("height") || 420) + "px";
  }

  function buildToolbar() {
    toolbar.textContent = "";
    if (!tree) return;
    let forks = 0;
    let leaves = 0;
    const kidsCount = new Int32Array(tree.n);
    for (let i = 0; i < tree.n; i++) if (tree.parent[i] >= 0) kidsCount[tree.parent[i]]++;
    for (let i = 0; i < tree.n; i++) {
      if (kidsCount[i] > 1) forks++;
      if (kidsCount[i] === 0) leaves++;
    }
    let activeLen = 0;
    let activeTok = 0;
    for (let i = 0; i < tree.n; i++)
      if (active[i]) {
        activeLen++;
        activeTok += tree.tokens[i];
      }
    const box = skEl("input", { type: "checkbox" });
    box.checked = !!model.get("collapse");
    box.addEventListener("change", () => {
      model.set("collapse", box.checked);
      model.save_changes();
    });
    const legend = skEl("span", { class: "sk-legend" });
    for (const role of tree.roles) legend.append(skEl("span", { class: "sk-dot", style: { background: skRoleColor(role) } }), role + " ");
    toolbar.append(
      skEl("b", { text: `Session ${tree.session_id || "(default)"}` }),
      skEl("span", { class: "sk-meta", text: ` ${skPlural(tree.n, "message")} · ${skPlural(forks, "branch point")} · ${skPlural(leaves, "leaf", "leaves")} · ${skPlural((tree.compactions || []).length, "compaction")} · latest path ${skPlural(activeLen, "message")}, ${skTokens(activeTok)} tokens ` }),
      skEl("label", { class: "sk-check" }, box, " collapse chains"),
      legend,
    );
  }

  function resetTree() {
    tree = model.get("_tree") || { n: 0, ids: [], parent: [], role: [], roles: [], tokens: [], compactions: [] };
    ids = new Map();
    for (let i = 0; i < tree.n; i++) ids.set(tree.ids[i], i);
    active = btOnPath(tree, tree.latest);
    updateChosen();
    buildToolbar();
    startLayout();
  }

  function updateChosen() {
    const sel = ids.get(model.get("selected_id"));
    chosen = sel === undefined ? new Uint8Array(tree ? tree.n : 0) : btOnPath(tree, sel);
    root.dataset.selected = model.get("selected_id") || "";
  }

  function startLayout() {
    const keepTop = scroller.scrollTop;
    layout = new BTLayout(tree, !!model.get("collapse"), expanded);
    root.dataset.layout = "running";
    clearTimeout(layoutTimer);
    clearTimeout(buildTimer);
    buildTimer = 0;
    rowEls = [];
    marked = new Set();
    rowsLayer.replaceChildren();
    const work = () => {
      if (disposed || !layout) return;
      const finished = layout.step(performance.now() + 12);
      sizer.style.height = layout.rows * BT_ROW + "px";
      sizer.style.width = "100%";
      root.dataset.rows = String(layout.rows);
      if (scroller.scrollTop !== keepTop && keepTop <= layout.rows * BT_ROW) scroller.scrollTop = keepTop;
      schedule();
      buildLater();
      if (finished) {
        root.dataset.layout = "done";
        askAllPreviews();
      } else layoutTimer = setTimeout(work, 0);
    };
    work();
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  // Deep trees would run off the right edge: the rows in view are shifted left so
  // the shallowest of them sits near the gutter (ancestors' lines leave the view).
  let shift = 0;
  function x0(depth) {
    return BT_GUTTER + 10 + (depth - shift) * BT_INDENT;
  }

  function rowActive(r) {
    const kind = layout.kind[r];
    if (kind === BT_KIND_BAND) return active[tree.compactions[layout.a[r]].from] === 1;
    return active[layout.a[r]] === 1;
  }

  function rowChosen(r) {
    const kind = layout.kind[r];
    if (kind === BT_KIND_BAND) return chosen[tree.compactions[layout.a[r]].from] === 1;
    return chosen[layout.a[r]] === 1;
  }

  function draw() {
    frame = 0;
    if (disposed || !layout) return;
    const dpr = window.devicePixelRatio || 1;
    const W = scroller.clientWidth;
    const H = scroller.clientHeight;
    if (!W || !H) return;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      canvas.style.width = W + "px";
      canvas.style.height = H + "px";
    }
    const top = scroller.scrollTop;
    const left = scroller.scrollLeft;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.translate(-left, -top);
    const rows = layout.rows;
    const r0 = Math.max(0, Math.floor(top / BT_ROW) - 1);
    const r1 = Math.min(rows - 1, Math.ceil((top + H) / BT_ROW) + 1);
    const sel = ids.get(model.get("selected_id"));
    const cmp = ids.get(model.get("compare_id"));
    const right = left + W;
    let minDepth = Infinity;
    for (let r = r0; r <= r1; r++) if (layout.depth[r] < minDepth) minDepth = layout.depth[r];
    shift = Number.isFinite(minDepth) ? Math.max(0, minDepth - 2) : 0;
    root.dataset.shift = String(shift);
    // row backgrounds
    for (let r = r0; r <= r1; r++) {
      const y = r * BT_ROW;
      const kind = layout.kind[r];
      if (kind === BT_KIND_BAND) {
        ctx.fillStyle = layout.a[r] === focusBand ? "#fde68a" : "#fffbeb";
        ctx.fillRect(left, y, W, BT_ROW);
      } else if (kind === BT_KIND_NODE && (layout.a[r] === sel || layout.a[r] === cmp)) {
        ctx.fillStyle = layout.a[r] === sel ? "#dbeafe" : "#fce7f3";
        ctx.fillRect(left, y, W, BT_ROW);
      } else if (rowChosen(r)) {
        ctx.fillStyle = "#f1f5ff";
        ctx.fillRect(left, y, W, BT_ROW);
      }
      if (r === hover) {
        ctx.fillStyle = "rgba(0,0,0,0.04)";
        ctx.fillRect(left, y, W, BT_ROW);
      }
    }
    // compaction bands in the gutter
    (tree.compactions || []).forEach((band, k) => {
      if (band.from < 0 || band.to < 0 || !band.messages) return;
      const a = layout.rowOf[band.from];
      const b = layout.rowOf[band.to];
      if (a < 0 || b < 0 || b < r0 || a > r1) return;
      ctx.fillStyle = band.superseded ? "#fcd34d80" : "#f59e0b";
      const lane = k % 3;
      const start = Math.max(a - 1, 0);
      ctx.fillRect(left + 2 + lane * 3.5, start * BT_ROW + 4, 3, (b - start + 1) * BT_ROW - 8);
    });
    ctx.lineWidth = 1.5;
    // branch connectors: vertical from the fork row to its last child, elbows into each child
    for (const fork of layout.forks) {
      const kids = fork.children;
      if (!kids.length) continue;
      const last = kids[kids.length - 1];
      if (last < r0 || fork.row > r1) continue;
      const x = x0(fork.depth);
      const x2 = x0(fork.depth + 1);
      ctx.strokeStyle = "#cbd5e1";
      ctx.beginPath();
      ctx.moveTo(x, fork.row * BT_ROW + BT_ROW / 2);
      ctx.lineTo(x, last * BT_ROW + BT_ROW / 2);
      ctx.stroke();
      let activeKid = -1;
      for (const c of kids) {
        if (c < r0 - 1 && c !== last) continue;
        const y = c * BT_ROW + BT_ROW / 2;
        const on = rowActive(c);
        if (on) activeKid = c;
        ctx.strokeStyle = on ? "#1e3a8a" : "#cbd5e1";
        ctx.beginPath();
        ctx.moveTo(x, y);
        ctx.lineTo(x2 - 5, y);
        ctx.stroke();
      }
      if (activeKid < 0) for (const c of kids) if (rowActive(c)) activeKid = c;
      if (activeKid >= 0 && rowActive(fork.row)) {
        ctx.strokeStyle = "#1e3a8a";
        ctx.lineWidth = 2.5;
        ctx.beginPath();
        ctx.moveTo(x, fork.row * BT_ROW + BT_ROW / 2);
        ctx.lineTo(x, activeKid * BT_ROW + BT_ROW / 2);
        ctx.stroke();
        ctx.lineWidth = 1.5;
      }
    }
    // chain connectors
    for (let r = Math.max(r0 - 1, 0); r < Math.min(r1 + 1, rows - 1); r++) {
      if (layout.chain[r] !== layout.chain[r + 1]) continue;
      const x = x0(layout.depth[r]);
      const on = rowActive(r) && rowActive(r + 1);
      ctx.strokeStyle = on ? "#1e3a8a" : "#cbd5e1";
      ctx.lineWidth = on ? 2.5 : 1.5;
      ctx.setLineDash(layout.kind[r] === BT_KIND_MORE || layout.kind[r + 1] === BT_KIND_MORE ? [3, 3] : []);
      ctx.beginPath();
      ctx.moveTo(x, r * BT_ROW + BT_ROW / 2);
      ctx.lineTo(x, (r + 1) * BT_ROW + BT_ROW / 2);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    // glyphs on the canvas; the text of each row is a DOM row (makeRow, updateRows)
    const want = [];
    for (let r = r0; r <= r1; r++) {
      if (layout.kind[r] !== BT_KIND_NODE) continue;
      const y = r * BT_ROW + BT_ROW / 2;
      const x = x0(layout.depth[r]);
      const i = layout.a[r];
      const role = tree.roles[tree.role[i]];
      const on = active[i] === 1;
      ctx.fillStyle = skRoleColor(role);
      ctx.beginPath();
      ctx.arc(x, y, on ? 5 : 4, 0, Math.PI * 2);
      ctx.fill();
      if (!on) {
        ctx.fillStyle = "#fff";
        ctx.beginPath();
        ctx.arc(x, y, 2, 0, Math.PI * 2);
        ctx.fill();
      }
      if (i === sel || i === cmp) {
        ctx.strokeStyle = i === sel ? "#1d4ed8" : "#be185d";
        ctx.lineWidth = 2;
        ctx.beginPath();
        ctx.arc(x, y, 7.5, 0, Math.PI * 2);
        ctx.stroke();
      }
      const id = tree.ids[i];
      if (!cache.previews.has(id) && !cache.asked.has(id)) want.push(id);
    }
    updateRows(r0, r1, sel, cmp);
    if (want.length) requestPreviews(want);
  }

  function moreCount(r) {
    let count = 0;
    let tok = 0;
    for (let i = layout.b[r]; ; i = tree.parent[i]) {
      count++;
      tok += tree.tokens[i];
      if (i === layout.a[r]) break;
    }
    return [count, tok];
  }

  // The text of a row: a message's role and preview, a collapsed chain's count, a band's summary.
  function makeRow(r) {
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
      if (active[i] === 1) row.classList.add("sk-on");
      const preview = cache.previews.get(id);
      row.append(
        skEl("span", { class: "sk-row-role", style: { color: skRoleColor(role) }, text: role }),
        skLabelBadges(skOwn(model.get("_labels"), id)),
        skEl("span", { class: "sk-row-text", text: preview === undefined ? "…" : preview }),
        skEl("span", { class: "sk-row-tok", text: (nk > 1 ? `${nk} branches · ` : "") + skTokens(tree.tokens[i]) + " tok" }),
      );
    } else if (kind === BT_KIND_MORE) {
      const [count, tok] = moreCount(r);
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

  // Appends rows up to `upto` (exclusive) or until `deadline`; true when every laid-out row has its element.
  function buildRows(upto, deadline) {
    const frag = document.createDocumentFragment();
    const stop = Math.min(upto, layout.rows);
    let r = rowEls.length;
    for (; r < stop; r++) {
      if (deadline !== undefined && (r & 63) === 0 && performance.now() > deadline) break;
      const row = makeRow(r);
      row.style.paddingLeft = x0(layout.depth[r]) + (layout.kind[r] === BT_KIND_BAND ? -4 : 10) + "px";
      rowEls.push(row);
      frag.append(row);
    }
    rowsLayer.append(frag);
    root.dataset.domRows = String(rowEls.length);
    return rowEls.length >= layout.rows;
  }

  // The rows are built in slices of a few milliseconds, so a large tree never blocks the page.
  function buildLater() {
    if (buildTimer || disposed || !layout) return;
    buildTimer = setTimeout(() => {
      buildTimer = 0;
      if (disposed || !layout) return;
      if (!buildRows(layout.rows, performance.now() + 8) || !layout.done) buildLater();
    }, 0);
  }

  // The rows in view (and those that were marked) follow the selection, the cursor and the shift.
  function updateRows(r0, r1, sel, cmp) {
    if (rowEls.length <= r1) buildRows(r1 + 1);
    const touch = new Set(marked);
    for (let r = r0; r <= r1; r++) touch.add(r);
    marked = new Set();
    for (const r of touch) {
      const row = rowEls[r];
      if (!row) continue;
      const kind = layout.kind[r];
      if (r >= r0 && r <= r1) row.style.paddingLeft = x0(layout.depth[r]) + (kind === BT_KIND_BAND ? -4 : 10) + "px";
      const isSel = kind === BT_KIND_NODE && layout.a[r] === sel;
      const isCmp = kind === BT_KIND_NODE && layout.a[r] === cmp;
      row.classList.toggle("sk-cursor", r === cursor);
      row.classList.toggle("sk-sel", isSel);
      row.classList.toggle("sk-cmp", isCmp);
      if (kind === BT_KIND_NODE) row.setAttribute("aria-selected", isSel ? "true" : "false");
      if (isSel || isCmp || r === cursor) marked.add(r);
    }
  }

  // Previews for every message row, asked for in the background once the layout is done:
  // find-in-page searches the whole tree, not only the rows seen so far.
  function askAllPreviews() {
    const list = [];
    for (let r = 0; r < layout.rows; r++) {
      if (layout.kind[r] !== BT_KIND_NODE) continue;
      const id = tree.ids[layout.a[r]];
      if (!cache.previews.has(id) && !cache.asked.has(id)) list.push(id);
    }
    if (list.length) requestPreviews(list, false);
  }

  // Asks in batches of 500 (the kernel's limit), one batch every 30 ms; `first` puts the ids
  // ahead of those already waiting (the rows in view before the rest of the tree).
  function requestPreviews(list, first = true) {
    for (const id of list) cache.asked.add(id);
    pending = first ? list.concat(pending) : pending.concat(list);
    const flush = () => {
      fetchTimer = 0;
      if (disposed) return;
      const batch = pending.splice(0, 500);
      if (batch.length) model.send({ type: "fetch", ids: batch, req: skNextReq() });
      if (pending.length) fetchTimer = setTimeout(flush, 30);
    };
    if (!fetchTimer) fetchTimer = setTimeout(flush, 30);
  }

  function onMessage(msg) {
    if (!msg || typeof msg !== "object") return;
    if (msg.type === "previews") {
      for (const [id, text] of Object.entries(msg.items || {})) {
        cache.previews.set(id, text);
        const i = ids.get(id);
        const r = i === undefined || !layout ? -1 : layout.rowOf[i];
        if (r >= 0 && rowEls[r] && layout.kind[r] === BT_KIND_NODE) rowEls[r].querySelector(".sk-row-text").textContent = text;
      }
      schedule();
    } else if (msg.type === "detail") {
      cache.details.set(msg.id, msg.message);
      if (msg.id === model.get("selected_id")) renderPanel();
    } else if (msg.type === "error" && msg.req === labelReq) {
      labelForm.querySelector(".sk-label-error").textContent = msg.error;
    }
  }

  // A change of the labels (made here or in any other view of the store): new badges in place.
  function onLabels() {
    const labels = model.get("_labels") || {};
    for (const row of rowEls) {
      if (!row || !row.dataset.id) continue;
      row.querySelector(".sk-labels").replaceWith(skLabelBadges(skOwn(labels, row.dataset.id)));
    }
    renderPanel();
  }

  function rowAt(event) {
    const rect = scroller.getBoundingClientRect();
    const y = event.clientY - rect.top + scroller.scrollTop;
    const r = Math.floor(y / BT_ROW);
    return layout && r >= 0 && r < layout.rows ? r : -1;
  }

  function pick(r, compare) {
    const kind = layout.kind[r];
    if (kind === BT_KIND_MORE) {
      expanded.add(tree.parent[layout.a[r]]);
      startLayout();
      return;
    }
    if (kind === BT_KIND_BAND) {
      focusBand = layout.a[r];
      renderPanel();
      schedule();
      return;
    }
    focusBand = -1;
    const id = tree.ids[layout.a[r]];
    model.set(compare ? "compare_id" : "selected_id", id);
    model.save_changes();
    onSelection();
  }

  function onSelection() {
    updateChosen();
    const id = model.get("selected_id");
    if (id && !cache.details.has(id)) model.send({ type: "detail", id, req: skNextReq() });
    const i = ids.get(id);
    if (i !== undefined) live.textContent = `selected ${tree.roles[tree.role[i]]} message ${id}`;
    renderPanel();
    schedule();
  }

  function scrollToNode(i) {
    if (!layout || i === undefined) return;
    const r = layout.rowOf[i];
    if (r < 0) return;
    const y = r * BT_ROW;
    if (y < scroller.scrollTop || y > scroller.scrollTop + scroller.clientHeight - BT_ROW)
      scroller.scrollTop = Math.max(0, y - scroller.clientHeight / 2);
  }

  function renderPanel() {
    panel.textContent = "";
    if (!tree) return;
    if (focusBand >= 0 && tree.compactions[focusBand]) {
      const band = tree.compactions[focusBand];
      panel.append(
        skEl("div", { class: "sk-panel-title", text: "▤ Compaction" + (band.superseded ? " (superseded)" : "") }),
        skEl("div", { class: "sk-meta", text: `${skPlural(band.messages, "message")} (${band.from_id} … ${band.to_id}) · ${skTokens(band.tokens_before)} → ${skTokens(band.tokens_after)} tokens · ${band.created_at}` }),
        skEl("div", { class: "sk-text sk-summary", text: band.summary }),
      );
      return;
    }
    const id = model.get("selected_id");
    const i = ids.get(id);
    if (i === undefined) {
      panel.append(skEl("div", { class: "sk-meta", text: "Click a message to select its path; shift-click another to compare the two branches. Click a band for its summary." }));
      return;
    }
    let depth = 0;
    let tok = 0;
    for (let j = i; j >= 0; j = tree.parent[j]) {
      depth++;
      tok += tree.tokens[j];
    }
    const role = tree.roles[tree.role[i]];
    const editable = skEditable(model);
    panel.append(
      skEl("div", { class: "sk-panel-title" }, skEl("span", { class: "sk-dot", style: { background: skRoleColor(role) } }), `${role} · ${skTokens(tree.tokens[i])} tokens`),
      skEl("div", { class: "sk-meta", text: `${id} · path ${skPlural(depth, "message")}, ${skTokens(tok)} tokens · ${skPlural(layout ? layout.nKids(i) : 0, "child", "children")}` }),
      skEl("div", { class: "sk-panel-labels" }, skLabelBadges(skOwn(model.get("_labels"), id), editable ? removeLabel : null)),
    );
    if (editable) panel.append(labelForm);
    const detail = cache.details.get(id);
    if (detail) {
      const box = skEl("div", { class: "sk-panel-msg" });
      box.append(skParts(detail));
      if (detail.usage) box.append(skEl("div", { class: "sk-meta", text: `usage: in ${skTokens(detail.usage.in)} · out ${skTokens(detail.usage.out)} · ${skCost(detail.usage.cost_usd)}` }));
      panel.append(box);
    } else panel.append(skEl("div", { class: "sk-meta", text: "loading…" }));
    const diff = model.get("diff") || {};
    if (diff.a && diff.b) {
      const row = (name, a, b) => skEl("tr", {}, skEl("th", { text: name }), skEl("td", { text: a }), skEl("td", { text: b }));
      const sideCost = (s) => {
        const known = s.cost_known || 0;
        const unknown = s.cost_unknown || 0;
        if (s.cost_usd !== null && s.cost_usd !== undefined && !unknown) return skCost(s.cost_usd);
        return skCost(known ? s.cost_known_usd : null, unknown, known + unknown);
      };
      const sideUsage = (s) => {
        if (s.usage_in === null || s.usage_in === undefined) return SK_UNKNOWN_COST;
        const text = `${skTokens(s.usage_in)}/${skTokens(s.usage_out)}`;
        const missing = (s.cost_known || 0) + (s.cost_unknown || 0) - (s.usage_known || 0);
        return missing > 0 ? `≥ ${text} (${missing} of ${(s.cost_known || 0) + (s.cost_unknown || 0)} unknown)` : text;
      };
      panel.append(
        skEl("div", { class: "sk-panel-title", text: "Branch diff from the fork point" }),
        skEl("div", { class: "sk-meta", text: `fork at ${diff.fork_id || "(separate roots)"} · ${skPlural(diff.shared_messages, "shared message")}, ${skTokens(diff.shared_tokens)} tokens` }),
        skEl("table", { class: "sk-diff" },
          skEl("tr", {}, skEl("th", {}), skEl("th", { text: "selected" }), skEl("th", { text: "compared" })),
          row("messages", diff.a.messages, diff.b.messages),
          row("tokens", skTokens(diff.a.tokens), skTokens(diff.b.tokens)),
          row("tool calls", diff.a.tool_calls, diff.b.tool_calls),
          row("usage in/out", sideUsage(diff.a), sideUsage(diff.b)),
          row("cost", sideCost(diff.a), sideCost(diff.b)),
          row("first message", diff.a.first_preview || "—", diff.b.first_preview || "—"),
        ),
      );
    } else panel.append(skEl("div", { class: "sk-meta sk-hint", text: "Shift-click another message to compare branches." }));
  }

  // events
  const onScroll = () => schedule();
  const onClick = (event) => {
    const chosen = window.getSelection ? window.getSelection() : null;
    if (chosen && !chosen.isCollapsed && rowsLayer.contains(chosen.anchorNode)) return; // selecting text, not a row
    const r = rowAt(event);
    if (r >= 0) cursor = r;
    if (r >= 0) pick(r, event.shiftKey || event.altKey || event.metaKey || event.ctrlKey);
    root.focus({ preventScroll: true });
  };
  const onMove = (event) => {
    const r = rowAt(event);
    if (r !== hover) {
      hover = r;
      scroller.style.cursor = r >= 0 ? "pointer" : "default";
      schedule();
    }
  };
  const onLeave = () => {
    hover = -1;
    schedule();
  };
  // Keyboard: ArrowUp / ArrowDown move through the rows (a message row becomes the selection),
  // Home / End go to the first / last row, Enter opens the row under the cursor (expands a
  // collapsed chain, shows a compaction's summary, selects a message; Shift+Enter compares).
  const onKey = (event) => {
    if (!layout || !layout.rows) return;
    const keys = ["ArrowDown", "ArrowUp", "Home", "End", "Enter"];
    if (!keys.includes(event.key)) return;
    event.preventDefault();
    if (cursor < 0 || cursor >= layout.rows) {
      const i = ids.get(model.get("selected_id"));
      cursor = i === undefined ? -1 : layout.rowOf[i];
    }
    if (event.key === "Enter") {
      if (cursor >= 0) pick(cursor, event.shiftKey);
      return;
    }
    let r = cursor;
    if (event.key === "Home") r = 0;
    else if (event.key === "End") r = layout.rows - 1;
    else r = Math.min(layout.rows - 1, Math.max(0, r + (event.key === "ArrowDown" ? 1 : -1)));
    cursor = r;
    root.dataset.cursor = String(r);
    if (layout.kind[r] === BT_KIND_NODE) pick(r, false);
    const y = r * BT_ROW;
    if (y < scroller.scrollTop || y > scroller.scrollTop + scroller.clientHeight - BT_ROW)
      scroller.scrollTop = Math.max(0, y - scroller.clientHeight / 2);
    schedule();
  };
  scroller.addEventListener("scroll", onScroll, { passive: true });
  scroller.addEventListener("click", onClick);
  // shift-click compares two messages: it must not extend a text selection instead
  scroller.addEventListener("mousedown", (event) => {
    if (event.shiftKey || event.altKey || event.metaKey || event.ctrlKey) event.preventDefault();
  });
  scroller.addEventListener("mousemove", onMove);
  scroller.addEventListener("mouseleave", onLeave);
  root.addEventListener("keydown", onKey);
  const resize = new ResizeObserver(() => schedule());
  resize.observe(scroller);

  const onTree = () => resetTree();
  const onSel = () => {
    onSelection();
    scrollToNode(ids.get(model.get("selected_id")));
  };
  const onCollapse = () => {
    buildToolbar();
    startLayout();
  };
  const onDiff = () => renderPanel();
  const onHeight = () => {
    setHeight();
    schedule();
  };
  model.on("change:_tree", onTree);
  model.on("change:selected_id", onSel);
  model.on("change:compare_id", onSelection);
  model.on("change:collapse", onCollapse);
  model.on("change:diff", onDiff);
  model.on("change:height", onHeight);
  model.on("change:_labels", onLabels);
  model.on("msg:custom", onMessage);

  setHeight();
  resetTree();
  onSelection();
  skHideSnapshot(model);

  return () => {
    disposed = true;
    cancelAnimationFrame(frame);
    clearTimeout(layoutTimer);
    clearTimeout(fetchTimer);
    clearTimeout(buildTimer);
    resize.disconnect();
    model.off("change:_tree", onTree);
    model.off("change:selected_id", onSel);
    model.off("change:compare_id", onSelection);
    model.off("change:collapse", onCollapse);
    model.off("change:diff", onDiff);
    model.off("change:height", onHeight);
    model.off("change:_labels", onLabels);
    model.off("msg:custom", onMessage);
  };
}

/** Answers the requests of this view in a page written by to_html (no kernel there). */
function offline(msg, state) {
  const messages = (state._offline && state._offline.messages) || {};
  if (msg.type === "fetch") {
    const items = skDict();
    for (const id of msg.ids) if (skOwn(messages, id)) items[id] = messages[id].preview;
    return { type: "previews", req: msg.req, items };
  }
  if (msg.type === "detail") return { type: "detail", req: msg.req, id: msg.id, message: skOwn(messages, msg.id) || null };
  return null;
}

/**
 * The branch diff of two messages from the tree and the embedded messages: what
 * sessionkit.widgets._source.branch_diff computes in the kernel, for pages with no kernel.
 */
function btDiff(tree, messages, aId, bId) {
  const idx = new Map();
  for (let i = 0; i < tree.n; i++) idx.set(tree.ids[i], i);
  const pathTo = (i) => {
    const out = [];
    for (; i >= 0; i = tree.parent[i]) out.push(i);
    return out.reverse();
  };
  const pa = pathTo(idx.get(aId));
  const pb = pathTo(idx.get(bId));
  let common = 0;
  while (common < Math.min(pa.length, pb.length) && pa[common] === pb[common]) common++;
  const fork = common ? pa[common - 1] : -1;
  const side = (path) => {
    const roles = skDict();
    let tools = 0, cost = 0, priced = 0, unpriced = 0, withUsage = 0, tin = 0, tout = 0;
    for (const i of path) {
      const role = tree.roles[tree.role[i]];
      roles[role] = (roles[role] || 0) + 1;
      const m = skOwn(messages, tree.ids[i]) || {};
      tools += (m.parts || []).filter((p) => p.type === "tool").length;
      const usage = m.usage && typeof m.usage === "object" ? m.usage : null;
      if (usage) {
        withUsage++;
        tin += Number(usage.in) || 0;
        tout += Number(usage.out) || 0;
      }
      const c = usage ? usage.cost_usd : null;
      if (typeof c === "number" && Number.isFinite(c)) {
        cost += c;
        priced++;
      } else if (role === "assistant" || usage) unpriced++;
    }
    const first = path.length ? skOwn(messages, tree.ids[path[0]]) : null;
    return {
      leaf_id: path.length ? tree.ids[path[path.length - 1]] : fork >= 0 ? tree.ids[fork] : null,
      messages: path.length,
      tokens: path.reduce((t, i) => t + tree.tokens[i], 0),
      roles,
      tool_calls: tools,
      usage_in: withUsage ? tin : null,
      usage_out: withUsage ? tout : null,
      usage_known: withUsage,
      cost_usd: priced && !unpriced ? cost : null,
      cost_known_usd: priced ? cost : null,
      cost_known: priced,
      cost_unknown: unpriced,
      first_id: path.length ? tree.ids[path[0]] : null,
      first_preview: first ? first.preview : null,
    };
  };
  const a = side(pa.slice(common));
  const b = side(pb.slice(common));
  return {
    a_id: aId,
    b_id: bId,
    fork_id: fork >= 0 ? tree.ids[fork] : null,
    shared_messages: common,
    shared_tokens: pa.slice(0, common).reduce((t, i) => t + tree.tokens[i], 0),
    a,
    b,
    tokens_delta: b.tokens - a.tokens,
  };
}

/** In a page written by to_html: a new selection or comparison recomputes the diff there. */
function offlineChange(key, state, set) {
  if (key !== "selected_id" && key !== "compare_id") return;
  const a = state.selected_id;
  const b = state.compare_id;
  const messages = (state._offline && state._offline.messages) || {};
  const known = new Set(state._tree.ids);
  set("diff", a && b && a !== b && known.has(a) && known.has(b) ? btDiff(state._tree, messages, a, b) : {});
}

export default { render, offline, offlineChange };
