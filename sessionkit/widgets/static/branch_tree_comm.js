// @ts-check
// BranchTree, the messages exchanged with the Python side (BranchTree._on_msg): the view asks
// for previews ({type: "fetch", ids}) and for a message's content ({type: "detail", id}); the
// kernel answers with "previews", "detail" or "error". Where no kernel runs (a page written
// by to_html), btOffline answers the same requests from the data embedded in the page and
// btOfflineChange recomputes the branch diff as the kernel would.

/**
 * The message cache of a model (skCache in common.js).
 * @typedef {object} BTCache
 * @property {Map<string, string>} previews previews by message id
 * @property {Map<string, any>} details messages' content (_source.message_view) by id
 * @property {Set<string>} asked the ids whose previews were asked for
 */

/**
 * What the view does with the kernel's answers (the cache is filled before each call).
 * @typedef {object} BTReplies
 * @property {(id: string, text: string) => void} preview a message's preview arrived
 * @property {() => void} previews a batch of previews arrived (after its `preview` calls)
 * @property {(id: string) => void} detail a message's content arrived
 * @property {(msg: {req?: number, error?: string}) => void} error the kernel refused a request
 */

/**
 * A state of the view where no kernel runs (skLocalModel's).
 * @typedef {object} BTOfflineState
 * @property {BTTree} _tree
 * @property {string | null} [selected_id]
 * @property {string | null} [compare_id]
 * @property {{messages?: Record<string, any>}} [_offline] the messages' views by id, each with its preview
 */

/** Asks the kernel for previews: in batches of 500 (the kernel's limit), one batch every 30 ms. */
class BTPreviewQueue {
  /**
   * @param {BTModel} model
   * @param {BTCache} cache
   */
  constructor(model, cache) {
    this.model = model;
    this.cache = cache;
    /** @type {string[]} ids whose previews are still to be asked for */
    this.pending = [];
    this.timer = 0;
    this.disposed = false;
  }

  /**
   * Asks for the previews of `list`; `first` puts them ahead of those already waiting (the
   * rows in view before the rest of the tree).
   * @param {string[]} list
   * @param {boolean} [first]
   */
  ask(list, first = true) {
    for (const id of list) this.cache.asked.add(id);
    this.pending = first ? list.concat(this.pending) : this.pending.concat(list);
    const flush = () => {
      this.timer = 0;
      if (this.disposed) return;
      const batch = this.pending.splice(0, 500);
      if (batch.length) this.model.send({ type: "fetch", ids: batch, req: skNextReq() });
      if (this.pending.length) this.timer = setTimeout(flush, 30);
    };
    if (!this.timer) this.timer = setTimeout(flush, 30);
  }

  /**
   * The ids of the message rows from r0 to r1 whose previews are neither known nor asked for.
   * @param {BTTree} tree
   * @param {BTLayout} layout
   * @param {number} r0
   * @param {number} r1
   */
  missing(tree, layout, r0, r1) {
    /** @type {string[]} */
    const want = [];
    for (let r = r0; r <= r1; r++) {
      if (layout.kind[r] !== BT_KIND_NODE) continue;
      const id = tree.ids[layout.a[r]];
      if (!this.cache.previews.has(id) && !this.cache.asked.has(id)) want.push(id);
    }
    return want;
  }

  /**
   * Previews for every message row, asked for in the background once the layout is done:
   * find-in-page searches the whole tree, not only the rows seen so far.
   * @param {BTTree} tree
   * @param {BTLayout} layout
   */
  askAll(tree, layout) {
    const list = this.missing(tree, layout, 0, layout.rows - 1);
    if (list.length) this.ask(list, false);
  }

  /** The view is gone: no more requests. */
  dispose() {
    this.disposed = true;
    clearTimeout(this.timer);
  }
}

/**
 * Asks for the content of message `id` unless it is known (or there is no id).
 * @param {BTModel} model
 * @param {BTCache} cache
 * @param {string | null | undefined} id
 */
function btAskDetail(model, cache, id) {
  if (id && !cache.details.has(id)) model.send({ type: "detail", id, req: skNextReq() });
}

/**
 * Takes a message of the kernel's into the cache and tells the view.
 * @param {any} msg
 * @param {BTCache} cache
 * @param {BTReplies} on
 */
function btReceive(msg, cache, on) {
  if (!msg || typeof msg !== "object") return;
  if (msg.type === "previews") {
    for (const [id, text] of Object.entries(msg.items || {})) {
      cache.previews.set(id, text);
      on.preview(id, text);
    }
    on.previews();
  } else if (msg.type === "detail") {
    cache.details.set(msg.id, msg.message);
    on.detail(msg.id);
  } else if (msg.type === "error") {
    on.error(msg);
  }
}

/**
 * Answers the requests of this view in a page written by to_html (no kernel there).
 * @param {{type: string, ids?: string[], id?: string, req?: number}} msg
 * @param {BTOfflineState} state
 */
function btOffline(msg, state) {
  const messages = (state._offline && state._offline.messages) || {};
  if (msg.type === "fetch") {
    const items = skDict();
    for (const id of msg.ids || []) if (skOwn(messages, id)) items[id] = messages[id].preview;
    return { type: "previews", req: msg.req, items };
  }
  if (msg.type === "detail") return { type: "detail", req: msg.req, id: msg.id, message: skOwn(messages, msg.id) || null };
  return null;
}

/**
 * The branch diff of two messages from the tree and the embedded messages: what
 * sessionkit.widgets._source.branch_diff computes in the kernel, for pages with no kernel.
 * @param {BTTree} tree
 * @param {Record<string, any>} messages the messages' views by id
 * @param {string} aId the selected message
 * @param {string} bId the compared message
 */
function btDiff(tree, messages, aId, bId) {
  const idx = btIndex(tree);
  /** @param {number} i */
  const pathTo = (i) => {
    const out = [];
    for (; i >= 0; i = tree.parent[i]) out.push(i);
    return out.reverse();
  };
  const pa = pathTo(/** @type {number} */ (idx.get(aId)));
  const pb = pathTo(/** @type {number} */ (idx.get(bId)));
  let common = 0;
  while (common < Math.min(pa.length, pb.length) && pa[common] === pb[common]) common++;
  const fork = common ? pa[common - 1] : -1;
  /** @param {number[]} path */
  const side = (path) => {
    const roles = skDict();
    let tools = 0, cost = 0, priced = 0, unpriced = 0, withUsage = 0, tin = 0, tout = 0;
    for (const i of path) {
      const role = tree.roles[tree.role[i]];
      roles[role] = (roles[role] || 0) + 1;
      const m = skOwn(messages, tree.ids[i]) || {};
      tools += (m.parts || []).filter((/** @type {{type: string}} */ p) => p.type === "tool").length;
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

/**
 * In a page written by to_html: a new selection or comparison recomputes the diff there.
 * @param {string} key the model's key that changed
 * @param {BTOfflineState} state
 * @param {(key: string, value: any) => void} set sets a key of the model
 */
function btOfflineChange(key, state, set) {
  if (key !== "selected_id" && key !== "compare_id") return;
  const a = state.selected_id;
  const b = state.compare_id;
  const messages = (state._offline && state._offline.messages) || {};
  const known = new Set(state._tree.ids);
  set("diff", a && b && a !== b && known.has(a) && known.has(b) ? btDiff(state._tree, messages, a, b) : {});
}
