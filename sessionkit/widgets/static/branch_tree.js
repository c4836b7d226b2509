// @ts-check
// BranchTree front end: the whole message tree, laid out incrementally; lines, dots and row
// tints on a canvas, the text of every row as a real DOM row (selectable, copyable, read by
// screen readers and found by the browser's find-in-page, in view or not).
//
// The model's `_tree` holds parallel arrays (ids, parent, role, tokens) and the compactions.
// Only the rows in view are drawn on the canvas; previews of the messages are fetched from
// the kernel with custom messages ({type: "fetch", ids}), the rows in view first.
//
// This file is the view's module (the last of its files, the one that exports); the files
// before it, in the order of sessionkit.widgets._modules.VIEW_FILES, each keep one part:
//   branch_tree_layout.js  the rows of the tree (BTLayout), the types of the tree and the model
//   branch_tree_canvas.js  the canvas: tints, bands, lines and dots of the rows in view
//   branch_tree_rows.js    the DOM rows (BTRows), built in slices, updated in view
//   branch_tree_panel.js   the toolbar and the panel: selected message, branch diff, compaction
//   branch_tree_labels.js  the label form and the removal of labels (BTLabels)
//   branch_tree_input.js   the pointer and the keyboard
//   branch_tree_comm.js    the messages to and from the kernel, and their stand-in offline
// render below keeps the view's state and wires them together.

/**
 * Draws a BranchTree for `model` in `el`; returns what undoes it (anywidget's render).
 * @param {{model: BTModel, el: HTMLElement}} args
 */
function render({ model, el }) {
  const cache = /** @type {BTCache} */ (skCache(model));
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
  const canvas = /** @type {HTMLCanvasElement} */ (skEl("canvas", { class: "sk-tree-canvas", "aria-hidden": "true" }));
  const panel = skEl("div", { class: "sk-tree-panel" });
  const live = skEl("div", { class: "sk-sr", "aria-live": "polite" });
  sizer.append(rowsLayer);
  scroller.append(sizer);
  wrap.append(canvas, scroller); // the canvas paints under the scroller and its text rows
  main.append(wrap, panel);
  root.append(toolbar, main, live);
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));

  /** @type {BTTree | null} */
  let tree = null;
  /** @type {Map<string, number>} */
  let ids = new Map();
  /** @type {BTLayout | null} */
  let layout = null;
  /** @type {Set<number>} the first messages of the collapsed chains expanded by a click */
  const expanded = new Set();
  /** @type {Uint8Array} the latest path's flags */
  let active = new Uint8Array(0);
  /** @type {Uint8Array} the selected path's flags */
  let chosen = new Uint8Array(0);
  let hover = -1;
  let cursor = -1; // the row the keyboard is on
  let focusBand = -1;
  let shift = 0; // the rows' shift to the left, in indent steps (btShift)
  let frame = 0;
  let layoutTimer = 0;
  let disposed = false;
  const rows = new BTRows(rowsLayer, root);
  const previews = new BTPreviewQueue(model, cache);
  const labels = new BTLabels(model);

  /** What the rows are built from now; null once the view is gone or before a layout. */
  function rowSource() {
    if (disposed || !tree || !layout) return null;
    return { tree, layout, active, previews: cache.previews, labels: model.get("_labels"), shift };
  }

  function setHeight() {
    wrap.style.height = (model.get("height") || 420) + "px";
  }

  function buildToolbar() {
    btToolbar(toolbar, tree, active, !!model.get("collapse"), (checked) => {
      model.set("collapse", checked);
      model.save_changes();
    });
  }

  function resetTree() {
    tree = /** @type {BTTree} */ (model.get("_tree") || btEmptyTree());
    ids = btIndex(tree);
    active = btOnPath(tree, tree.latest);
    updateChosen();
    buildToolbar();
    startLayout();
  }

  function updateChosen() {
    const sel = ids.get(model.get("selected_id"));
    chosen = sel === undefined || !tree ? new Uint8Array(tree ? tree.n : 0) : btOnPath(tree, sel);
    root.dataset.selected = model.get("selected_id") || "";
  }

  function startLayout() {
    if (!tree) return;
    const keepTop = scroller.scrollTop;
    const lay = new BTLayout(tree, !!model.get("collapse"), expanded);
    layout = lay;
    root.dataset.layout = "running";
    clearTimeout(layoutTimer);
    rows.reset();
    const work = () => {
      if (disposed || layout !== lay) return;
      const finished = lay.step(performance.now() + 12);
      sizer.style.height = lay.rows * BT_ROW + "px";
      sizer.style.width = "100%";
      root.dataset.rows = String(lay.rows);
      if (scroller.scrollTop !== keepTop && keepTop <= lay.rows * BT_ROW) scroller.scrollTop = keepTop;
      schedule();
      rows.buildLater(rowSource);
      if (finished) {
        root.dataset.layout = "done";
        previews.askAll(/** @type {BTTree} */ (tree), lay);
      } else layoutTimer = setTimeout(work, 0);
    };
    work();
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function draw() {
    frame = 0;
    if (disposed || !layout || !tree) return;
    const dpr = window.devicePixelRatio || 1;
    const W = scroller.clientWidth;
    const H = scroller.clientHeight;
    if (!W || !H) return;
    btFitCanvas(canvas, W, H, dpr);
    const top = scroller.scrollTop;
    const left = scroller.scrollLeft;
    const [r0, r1] = btVisibleRows(layout, top, H);
    const sel = ids.get(model.get("selected_id"));
    const cmp = ids.get(model.get("compare_id"));
    shift = btShift(layout, r0, r1);
    root.dataset.shift = String(shift);
    const paint = { tree, layout, active, chosen, sel, cmp, hover, focusBand, shift, r0, r1 };
    btPaint(ctx, paint, { left, top, width: W, height: H, dpr });
    const want = previews.missing(tree, layout, r0, r1);
    rows.update(/** @type {BTRowSource} */ (rowSource()), r0, r1, { sel, cmp, cursor });
    if (want.length) previews.ask(want);
  }

  function renderPanel() {
    const id = model.get("selected_id");
    btPanel(panel, tree && {
      tree,
      layout,
      index: ids,
      focusBand,
      selectedId: id,
      labels: model.get("_labels"),
      editor: skEditable(model) ? labels : null,
      detail: cache.details.get(id),
      diff: model.get("diff"),
    });
  }

  /** @param {any} msg a custom message of the kernel's */
  function onMessage(msg) {
    btReceive(msg, cache, {
      preview(id, text) {
        const i = ids.get(id);
        if (layout && i !== undefined) rows.setPreview(layout, layout.rowOf[i], text);
      },
      previews: schedule,
      detail(id) {
        if (id === model.get("selected_id")) renderPanel();
      },
      error: (reply) => labels.showError(reply),
    });
  }

  // A change of the labels (made here or in any other view of the store): new badges in place.
  function onLabels() {
    rows.setLabels(model.get("_labels") || {});
    renderPanel();
  }

  /**
   * Opens row `r`: expands a collapsed chain, shows a compaction, selects a message (`compare`: compares it).
   * @param {number} r
   * @param {boolean} compare
   */
  function pick(r, compare) {
    if (!layout || !tree) return;
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
    btAskDetail(model, cache, id);
    const i = ids.get(id);
    if (i !== undefined && tree) live.textContent = `selected ${tree.roles[tree.role[i]]} message ${id}`;
    renderPanel();
    schedule();
  }

  /** @param {number | undefined} i */
  function scrollToNode(i) {
    if (!layout || i === undefined) return;
    const r = layout.rowOf[i];
    if (r < 0) return;
    btScrollToRow(scroller, r);
  }

  const unwatch = btListen({ root, scroller, rowsLayer }, () => (layout ? layout.rows : 0), {
    redraw: schedule,
    click(r, compare) {
      cursor = r;
      pick(r, compare);
    },
    hover(r) {
      if (r !== hover) {
        hover = r;
        scroller.style.cursor = r >= 0 ? "pointer" : "default";
        schedule();
      }
    },
    leave() {
      hover = -1;
      schedule();
    },
    key(event) {
      if (!layout || !layout.rows) return;
      const i = ids.get(model.get("selected_id"));
      const move = btKeyMove(event.key, cursor, layout.rows, i === undefined ? -1 : layout.rowOf[i]);
      if (!move) return;
      event.preventDefault();
      cursor = move.row;
      if (move.enter) {
        if (cursor >= 0) pick(cursor, event.shiftKey);
        return;
      }
      root.dataset.cursor = String(cursor);
      if (layout.kind[cursor] === BT_KIND_NODE) pick(cursor, false);
      btScrollToRow(scroller, cursor);
      schedule();
    },
  });

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
    previews.dispose();
    rows.dispose();
    unwatch();
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

export default { render, offline: btOffline, offlineChange: btOfflineChange };
