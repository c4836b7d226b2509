// @ts-check
// BranchTree, the layout: which row shows what, computed from the tree's arrays alone
// (no DOM, no model). Rows follow sessionkit.widgets._source.outline_rows exactly: chains
// without branches collapse to first / "n more" / last, children oldest first, one indent
// step per branch point, a band row before each compaction.
//
// The types of the tree the kernel sends and of the model every BranchTree file uses are
// declared here, the first of the files (_modules.VIEW_FILES).

/**
 * A compaction as the tree carries it (_source._compaction_bands).
 * @typedef {object} BTBand
 * @property {string} [id]
 * @property {number} from the index of its first message, -1 when that is not in the tree
 * @property {number} to the index of its last message, -1 when that is not in the tree
 * @property {string} from_id
 * @property {string} to_id
 * @property {string} summary
 * @property {number} messages how many messages it summarizes
 * @property {number} tokens_before
 * @property {number} tokens_after
 * @property {string} created_at
 * @property {boolean} superseded
 */

/**
 * The model's `_tree` (_source.tree_json): parallel arrays indexed by message.
 * @typedef {object} BTTree
 * @property {number} n
 * @property {string[]} ids
 * @property {number[]} parent the parent's index, -1 for a root
 * @property {number[]} role an index in `roles`
 * @property {string[]} roles
 * @property {number[]} tokens
 * @property {BTBand[]} compactions
 * @property {number} [latest] the index of the latest message
 * @property {string | null} [session_id]
 */

/**
 * The widget model: anywidget's, or skLocalModel (common.js) where no kernel runs.
 * @typedef {object} BTModel
 * @property {(key: string) => any} get
 * @property {(key: string, value: any) => void} set
 * @property {() => void} save_changes
 * @property {(msg: Record<string, any>) => void} send
 * @property {(name: string, fn: (...args: any[]) => void) => void} on
 * @property {(name: string, fn: (...args: any[]) => void) => void} off
 */

const BT_ROW = 22;
const BT_INDENT = 16;
const BT_GUTTER = 12;
const BT_COLLAPSE_MIN = 4;
/** A row of one message: `a` is the message. */
const BT_KIND_NODE = 0;
/** A collapsed chain's "n more" row: `a` and `b` are its first and last hidden message. */
const BT_KIND_MORE = 1;
/** A compaction's band: `a` is the compaction, `b` the message it sits before. */
const BT_KIND_BAND = 2;

/** The rows of a tree, laid out a slice at a time (`step`) so that a large tree never blocks the page. */
class BTLayout {
  /**
   * @param {BTTree} tree
   * @param {boolean} collapse whether chains of BT_COLLAPSE_MIN or more messages collapse
   * @param {Set<number>} expanded the first messages of the chains shown in full all the same
   */
  constructor(tree, collapse, expanded) {
    const n = tree.n;
    this.tree = tree;
    const count = new Int32Array(n + 1);
    for (let i = 0; i < n; i++) if (tree.parent[i] >= 0) count[tree.parent[i] + 1]++;
    for (let i = 0; i < n; i++) count[i + 1] += count[i];
    /** The children of message i are kids[kidStart[i]] up to kids[kidStart[i + 1]] (exclusive). */
    this.kidStart = count;
    this.kids = new Int32Array(Math.max(n, 1));
    const fill = count.slice(0, n);
    for (let i = 0; i < n; i++) {
      const p = tree.parent[i];
      if (p >= 0) this.kids[fill[p]++] = i;
    }
    /** @type {Map<number, number[]>} the compactions starting at each message */
    this.bandAt = new Map();
    (tree.compactions || []).forEach((band, k) => {
      if (band.from >= 0 && band.messages) {
        if (!this.bandAt.has(band.from)) this.bandAt.set(band.from, []);
        /** @type {number[]} */ (this.bandAt.get(band.from)).push(k);
      }
    });
    this.collapse = collapse;
    this.expanded = expanded;
    /** @type {number[]} BT_KIND_NODE, BT_KIND_MORE or BT_KIND_BAND, by row */
    this.kind = [];
    /** @type {number[]} */
    this.a = [];
    /** @type {number[]} */
    this.b = [];
    /** @type {number[]} */
    this.depth = [];
    /** @type {number[]} the chain each row belongs to */
    this.chain = [];
    /** @type {number[]} 1 for the first row of a chain */
    this.chainFirst = [];
    /** The row showing each message (a collapsed one: its "n more" row); -1 before it is laid out. */
    this.rowOf = new Int32Array(n).fill(-1);
    /** @type {{row: number, depth: number, children: number[]}[]} branch points: their row, depth and children's first rows */
    this.forks = [];
    this.maxDepth = 0;
    this.chains = 0;
    /** @type {[number, number, number][]} chains still to lay out: [first message, depth, fork] */
    this.stack = [];
    for (let i = n - 1; i >= 0; i--) if (tree.parent[i] < 0) this.stack.push([i, 0, -1]);
    this.done = n === 0;
  }
  /** @param {number} i */
  nKids(i) {
    return this.kidStart[i + 1] - this.kidStart[i];
  }
  /**
   * @param {number} kind
   * @param {number} a
   * @param {number} b
   * @param {number} depth
   * @param {number} chain
   */
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
  /**
   * @param {number} i
   * @param {number} depth
   * @param {number} chain
   */
  bands(i, depth, chain) {
    for (const k of this.bandAt.get(i) || []) this.push(BT_KIND_BAND, k, i, depth, chain);
  }
  /**
   * Lay out until `deadline` (performance.now() ms); true when finished.
   * @param {number} deadline
   */
  step(deadline) {
    while (this.stack.length) {
      if (performance.now() > deadline) return false;
      const [start, depth, fork] = /** @type {[number, number, number]} */ (this.stack.pop());
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

/** The tree of a model with none yet. */
function btEmptyTree() {
  return /** @type {BTTree} */ ({ n: 0, ids: [], parent: [], role: [], roles: [], tokens: [], compactions: [] });
}

/**
 * Flags (1) for the messages on the path from a root down to `leaf`.
 * @param {BTTree} tree
 * @param {number | undefined} leaf the index of the path's last message (none: no flags)
 * @returns {Uint8Array}
 */
function btOnPath(tree, leaf) {
  const flags = new Uint8Array(tree.n);
  let i = /** @type {number} */ (leaf);
  while (i >= 0 && i < tree.n && !flags[i]) {
    flags[i] = 1;
    i = tree.parent[i];
  }
  return flags;
}

/**
 * Each message's index by its id.
 * @param {BTTree} tree
 * @returns {Map<string, number>}
 */
function btIndex(tree) {
  const ids = new Map();
  for (let i = 0; i < tree.n; i++) ids.set(tree.ids[i], i);
  return ids;
}

/**
 * The message whose path flags (btOnPath) say whether row `r` is on a path: a band's first
 * message, a collapsed chain's first hidden one, a message row's own.
 * @param {BTTree} tree
 * @param {BTLayout} layout
 * @param {number} r
 */
function btRowMessage(tree, layout, r) {
  return layout.kind[r] === BT_KIND_BAND ? tree.compactions[layout.a[r]].from : layout.a[r];
}

/**
 * How many messages a "n more" row stands for, and their tokens.
 * @param {BTTree} tree
 * @param {BTLayout} layout
 * @param {number} r a BT_KIND_MORE row
 * @returns {[number, number]}
 */
function btMoreCount(tree, layout, r) {
  let count = 0;
  let tok = 0;
  for (let i = layout.b[r]; ; i = tree.parent[i]) {
    count++;
    tok += tree.tokens[i];
    if (i === layout.a[r]) break;
  }
  return [count, tok];
}

/**
 * The figures of the toolbar: branch points, leaves, and the messages and tokens of the path `onPath` flags.
 * @param {BTTree} tree
 * @param {Uint8Array} onPath
 */
function btTreeCounts(tree, onPath) {
  let forks = 0;
  let leaves = 0;
  const kidsCount = new Int32Array(tree.n);
  for (let i = 0; i < tree.n; i++) if (tree.parent[i] >= 0) kidsCount[tree.parent[i]]++;
  for (let i = 0; i < tree.n; i++) {
    if (kidsCount[i] > 1) forks++;
    if (kidsCount[i] === 0) leaves++;
  }
  let pathMessages = 0;
  let pathTokens = 0;
  for (let i = 0; i < tree.n; i++)
    if (onPath[i]) {
      pathMessages++;
      pathTokens += tree.tokens[i];
    }
  return { forks, leaves, pathMessages, pathTokens };
}

/**
 * The messages and tokens of the path from a root down to message `i`.
 * @param {BTTree} tree
 * @param {number} i
 */
function btPathTotals(tree, i) {
  let messages = 0;
  let tokens = 0;
  for (let j = i; j >= 0; j = tree.parent[j]) {
    messages++;
    tokens += tree.tokens[j];
  }
  return { messages, tokens };
}

/**
 * The first and last rows to draw for a view of `height` px scrolled to `top` (one more each side).
 * @param {BTLayout} layout
 * @param {number} top
 * @param {number} height
 * @returns {[number, number]}
 */
function btVisibleRows(layout, top, height) {
  const r0 = Math.max(0, Math.floor(top / BT_ROW) - 1);
  const r1 = Math.min(layout.rows - 1, Math.ceil((top + height) / BT_ROW) + 1);
  return [r0, r1];
}

/**
 * Deep trees would run off the right edge: the rows in view are shifted left so the
 * shallowest of them sits near the gutter (ancestors' lines leave the view). The shift,
 * in indent steps, for the rows r0 to r1.
 * @param {BTLayout} layout
 * @param {number} r0
 * @param {number} r1
 */
function btShift(layout, r0, r1) {
  let minDepth = Infinity;
  for (let r = r0; r <= r1; r++) if (layout.depth[r] < minDepth) minDepth = layout.depth[r];
  return Number.isFinite(minDepth) ? Math.max(0, minDepth - 2) : 0;
}

/**
 * The x of a row's dot (and of the lines through it) at `depth`, shifted by `shift` steps.
 * @param {number} depth
 * @param {number} shift
 */
function btX(depth, shift) {
  return BT_GUTTER + 10 + (depth - shift) * BT_INDENT;
}
