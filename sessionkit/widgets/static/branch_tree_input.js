// @ts-check
// BranchTree, the pointer and the keyboard: which row an event is on, what a key does, and
// the listeners that report both to the view (branch_tree.js decides what a row does).
//
// Keyboard: ArrowUp / ArrowDown move through the rows (a message row becomes the selection),
// Home / End go to the first / last row, Enter opens the row under the cursor (expands a
// collapsed chain, shows a compaction's summary, selects a message; Shift+Enter compares).

/** The keys the tree takes for itself while it has the focus (the host's shortcuts wait). */
const BT_KEYS = ["ArrowDown", "ArrowUp", "Home", "End", "Enter"];

/**
 * What the view does with the pointer and the keyboard.
 * @typedef {object} BTInputHandlers
 * @property {(row: number, compare: boolean) => void} click a click on a row (`compare`: with a modifier key)
 * @property {(row: number) => void} hover the pointer moved, over a row (-1: over none)
 * @property {() => void} leave the pointer left the rows
 * @property {(event: KeyboardEvent) => void} key a key pressed while the view has the focus
 * @property {() => void} redraw the view scrolled or changed size
 */

/**
 * The row at `clientY` (a pointer event's), -1 for none.
 * @param {HTMLElement} scroller
 * @param {number} clientY
 * @param {number} rows how many rows the layout has
 */
function btRowAt(scroller, clientY, rows) {
  const rect = scroller.getBoundingClientRect();
  const y = clientY - rect.top + scroller.scrollTop;
  const r = Math.floor(y / BT_ROW);
  return r >= 0 && r < rows ? r : -1;
}

/**
 * Whether a click compares (shift, alt, meta or ctrl held) instead of selecting.
 * @param {MouseEvent} event
 */
function btCompares(event) {
  return event.shiftKey || event.altKey || event.metaKey || event.ctrlKey;
}

/**
 * Where `key` takes the cursor, or null for a key the tree leaves to the host. `cursor` is
 * the cursor's row (one out of range starts from `selectedRow`, the selected message's row
 * or -1); `enter`: the key opens the row instead of moving.
 * @param {string} key
 * @param {number} cursor
 * @param {number} rows how many rows the layout has (at least one)
 * @param {number} selectedRow
 * @returns {{row: number, enter: boolean} | null}
 */
function btKeyMove(key, cursor, rows, selectedRow) {
  if (!BT_KEYS.includes(key)) return null;
  let r = cursor < 0 || cursor >= rows ? selectedRow : cursor;
  if (key === "Enter") return { row: r, enter: true };
  if (key === "Home") r = 0;
  else if (key === "End") r = rows - 1;
  else r = Math.min(rows - 1, Math.max(0, r + (key === "ArrowDown" ? 1 : -1)));
  return { row: r, enter: false };
}

/**
 * Scrolls row `r` to the middle of the view unless it is in view already.
 * @param {HTMLElement} scroller
 * @param {number} r
 */
function btScrollToRow(scroller, r) {
  const y = r * BT_ROW;
  if (y < scroller.scrollTop || y > scroller.scrollTop + scroller.clientHeight - BT_ROW)
    scroller.scrollTop = Math.max(0, y - scroller.clientHeight / 2);
}

/**
 * Listens to the pointer on `scroller`, the keyboard on `root` and the size of the view;
 * returns what stops watching the size (the listeners go with the elements).
 * @param {{root: HTMLElement, scroller: HTMLElement, rowsLayer: HTMLElement}} parts
 * @param {() => number} rows how many rows the layout has now
 * @param {BTInputHandlers} on
 * @returns {() => void}
 */
function btListen(parts, rows, on) {
  const { root, scroller, rowsLayer } = parts;
  scroller.addEventListener("scroll", () => on.redraw(), { passive: true });
  scroller.addEventListener("click", (event) => {
    const chosen = window.getSelection ? window.getSelection() : null;
    if (chosen && !chosen.isCollapsed && rowsLayer.contains(chosen.anchorNode)) return; // selecting text, not a row
    const r = btRowAt(scroller, event.clientY, rows());
    if (r >= 0) on.click(r, btCompares(event));
    root.focus({ preventScroll: true });
  });
  // shift-click compares two messages: it must not extend a text selection instead
  scroller.addEventListener("mousedown", (event) => {
    if (btCompares(event)) event.preventDefault();
  });
  scroller.addEventListener("mousemove", (event) => on.hover(btRowAt(scroller, event.clientY, rows())));
  scroller.addEventListener("mouseleave", () => on.leave());
  root.addEventListener("keydown", (event) => on.key(event));
  const resize = new ResizeObserver(() => on.redraw());
  resize.observe(scroller);
  return () => resize.disconnect();
}
