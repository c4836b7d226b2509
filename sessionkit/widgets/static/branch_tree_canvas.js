// @ts-check
// BranchTree, the canvas under the rows: row tints, compaction bands in the gutter, the
// lines between messages and the dots of the messages, for the rows in view only. The text
// of each row is a DOM row above it (branch_tree_rows.js).

/**
 * What one frame of the canvas shows.
 * @typedef {object} BTPaint
 * @property {BTTree} tree
 * @property {BTLayout} layout
 * @property {Uint8Array} active the latest path's flags (btOnPath)
 * @property {Uint8Array} chosen the selected path's flags
 * @property {number | undefined} sel the selected message's index
 * @property {number | undefined} cmp the compared message's index
 * @property {number} hover the row under the pointer, -1 for none
 * @property {number} focusBand the compaction shown in the panel, -1 for none
 * @property {number} shift the rows' shift to the left, in indent steps (btShift)
 * @property {number} r0 the first row in view
 * @property {number} r1 the last row in view
 */

/**
 * Gives the canvas the size of the view (`width` by `height` CSS px) at the screen's pixel ratio.
 * @param {HTMLCanvasElement} canvas
 * @param {number} width
 * @param {number} height
 * @param {number} dpr
 */
function btFitCanvas(canvas, width, height, dpr) {
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
  }
}

/**
 * Paints the rows r0 to r1 of a view scrolled to (`left`, `top`), `width` by `height` CSS px.
 * @param {CanvasRenderingContext2D} ctx
 * @param {BTPaint} p
 * @param {{left: number, top: number, width: number, height: number, dpr: number}} view
 */
function btPaint(ctx, p, view) {
  const { tree, layout, active, chosen, sel, cmp, hover, focusBand, shift, r0, r1 } = p;
  const { left, top, width: W, height: H, dpr } = view;
  const rows = layout.rows;
  /** @param {number} depth */
  const x0 = (depth) => btX(depth, shift);
  /** @param {number} r */
  const rowActive = (r) => active[btRowMessage(tree, layout, r)] === 1;
  /** @param {number} r */
  const rowChosen = (r) => chosen[btRowMessage(tree, layout, r)] === 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  ctx.translate(-left, -top);
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
  // the dots of the messages (the text of each row is a DOM row: branch_tree_rows.js)
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
  }
}
