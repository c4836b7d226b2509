// @ts-check
// Transcript front end: one path as a chat, content fetched as entries scroll into view.
//
// The model's `_path` lists the path's entries without content ({id, role,
// tokens, kind}); kind "summary" is a compaction as the model sees it, "hidden"
// a message a compaction replaces (full history only). Message bodies come
// from the kernel ({type: "fetch", ids} -> {type: "messages", items}).

/** @param {SkRenderArgs<SkTranscriptState>} args */
function render({ model, el }) {
  const cache = skCache(model);
  const root = skEl("div", { class: "sk-view sk-transcript-view" });
  const head = skEl("div", { class: "sk-toolbar" });
  const list = skEl("div", { class: "sk-transcript-list" });
  root.append(head, list);
  el.append(root);
  let nodes = new Map();
  let fetchTimer = 0;
  const pending = new Set();
  let disposed = false;
  const labelErrors = new Map(); // req -> the error line of the form that sent it

  /**
   * @param {Omit<AddLabelRequest, "req"> | Omit<RemoveLabelRequest, "req">} message
   * @param {Element | null} errorLine
   */
  function sendLabel(message, errorLine) {
    const req = skNextReq();
    labelErrors.set(req, errorLine);
    model.send({ ...message, req });
  }

  const removeLabel = (label) => sendLabel({ type: "remove-label", label: label.id }, null);

  function labelBadges(id) {
    return skLabelBadges(skOwn(model.get("_labels"), id), skEditable(model) ? removeLabel : null);
  }

  // "+ label" under a message's head: a form adding a label to that message (or its branch)
  function labelButton(id, node) {
    if (!skEditable(model)) return null;
    return skEl("button", { class: "sk-btn sk-label-add", type: "button", text: "+ label", "aria-label": `label message ${id}`,
      onclick: () => {
        const open = node.querySelector(".sk-label-form");
        if (open) {
          open.remove();
          return;
        }
        const form = skLabelForm((fields) => sendLabel({ type: "add-label", id, ...fields }, form.querySelector(".sk-label-error")));
        node.querySelector(".sk-head").after(form);
        /** @type {HTMLInputElement} */ (form.querySelector(".sk-label-tag")).focus();
      } });
  }

  const observer = new IntersectionObserver(
    (items) => {
      for (const item of items) if (item.isIntersecting) want(/** @type {HTMLElement} */ (item.target).dataset.id);
    },
    { root: list, rootMargin: "600px 0px" },
  );

  function want(id) {
    if (!id || id.startsWith("compaction:") || cache.messages.has(id) || cache.asked.has(id)) return;
    cache.asked.add(id);
    pending.add(id);
    clearTimeout(fetchTimer);
    fetchTimer = setTimeout(flushWanted, 20);
  }

  function flushWanted() {
    const ids = [...pending].slice(0, 200);
    for (const x of ids) pending.delete(x);
    if (ids.length) model.send({ type: "fetch", ids, req: skNextReq() });
    if (pending.size) fetchTimer = setTimeout(flushWanted, 0);
  }

  function modeButton(mode, label) {
    const button = skEl("button", { class: "sk-btn" + (model.get("mode") === mode ? " sk-on" : ""), type: "button", text: label, "data-mode": mode });
    button.addEventListener("click", () => {
      model.set("mode", mode);
      model.save_changes();
    });
    return button;
  }

  function compCard(c, full) {
    return skEl(
      "div",
      { class: "sk-comp", "data-compaction": c.id },
      skEl("div", { class: "sk-comp-head" },
        skEl("b", { text: `▤ Compaction: ${skPlural(c.messages, "message")} summarized, ${skTokens(c.tokens_before)} → ${skTokens(c.tokens_after)} tokens` }),
        skEl("span", { class: "sk-meta", text: full ? "  the messages below are hidden from the model" : "  the model sees this summary instead of them" })),
      skEl("div", { class: "sk-text", text: c.summary }),
    );
  }

  function fill(node, entry) {
    const view = cache.messages.get(entry.id);
    const body = node.querySelector(".sk-body");
    if (!view) return;
    const when = view.createdAt ? " · " + view.createdAt.replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
    node.querySelector(".sk-when").textContent = when;
    body.textContent = "";
    body.append(skParts(view));
    if (view.usage) body.append(skEl("div", { class: "sk-meta", text: `model ${view.usage.model || "?"} · in ${skTokens(view.usage.in)} · out ${skTokens(view.usage.out)} · ${skCost(view.usage.cost_usd)}` }));
    node.classList.remove("sk-loading");
  }

  function build() {
    const path = model.get("_path") || /** @type {PathPayload} */ ({ entries: [], compactions: [] });
    const mode = model.get("mode");
    head.textContent = "";
    head.append(
      skEl("span", { class: "sk-seg" }, modeButton("model", "What the model sees"), modeButton("full", "Full history")),
      skEl("span", { class: "sk-meta", text: ` ${skPlural(path.entries.length, "entry", "entries")} · model sees ${skTokens(path.tokens_model)} of ${skTokens(path.tokens_full)} tokens · ${skPlural(path.compactions.length, "compaction")} on this path` }),
    );
    if (model.get("following")) head.append(skEl("span", { class: "sk-badge", text: "following tree selection" }));
    observer.disconnect();
    list.textContent = "";
    nodes = new Map();
    list.style.height = (model.get("height") || 520) + "px";
    let open = -1;
    for (const entry of path.entries) {
      if (entry.kind === "summary") {
        list.append(compCard(path.compactions[entry.compaction], false));
        continue;
      }
      if (entry.kind === "hidden" && open !== entry.compaction) {
        open = entry.compaction;
        list.append(compCard(path.compactions[open], true));
      } else if (entry.kind !== "hidden") open = -1;
      const node = skEl(
        "div",
        { class: "sk-msg sk-loading" + (entry.kind === "hidden" ? " sk-hidden" : ""), "data-id": entry.id, style: { borderLeftColor: skRoleColor(entry.role) } },
        skEl("div", { class: "sk-head" },
          skEl("span", { class: "sk-role", style: { color: skRoleColor(entry.role) }, text: entry.role }),
          ` · ${skTokens(entry.tokens)} tokens`,
          skEl("span", { class: "sk-when" }),
          entry.kind === "hidden" ? " · hidden by compaction" : "",
          labelBadges(entry.id)),
        skEl("div", { class: "sk-body" }, skEl("span", { class: "sk-meta", text: "…" })),
      );
      const button = labelButton(entry.id, node);
      if (button) node.querySelector(".sk-head").append(button);
      nodes.set(entry.id, { node, entry });
      list.append(node);
      if (cache.messages.has(entry.id)) fill(node, entry);
      else observer.observe(node);
    }
    if (!path.entries.length) list.append(skEl("div", { class: "sk-meta", text: "(empty path)" }));
    root.dataset.leaf = path.leaf_id || "";
    root.dataset.mode = mode;
    root.dataset.entries = String(path.entries.length);
    list.scrollTop = list.scrollHeight;
  }

  // A change of the labels (made here or in any other view of the store): new badges in place.
  function onLabels() {
    for (const [id, hit] of nodes) hit.node.querySelector(".sk-labels").replaceWith(labelBadges(id));
  }

  function onMessage(msg) {
    if (msg && msg.type === "error" && labelErrors.has(msg.req)) {
      const line = labelErrors.get(msg.req);
      if (line) line.textContent = msg.error;
    }
    if (msg && msg.req !== undefined) labelErrors.delete(msg.req);
    if (!msg || msg.type !== "messages") return;
    for (const [id, view] of Object.entries(msg.items || {})) {
      cache.messages.set(id, view);
      const hit = nodes.get(id);
      if (hit) {
        const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
        fill(hit.node, hit.entry);
        observer.unobserve(hit.node);
        if (atBottom) list.scrollTop = list.scrollHeight;
      }
    }
  }

  const rebuild = () => {
    if (!disposed) build();
  };
  model.on("change:_path", rebuild);
  model.on("change:mode", rebuild);
  model.on("change:following", rebuild);
  model.on("change:height", rebuild);
  model.on("change:_labels", onLabels);
  model.on("msg:custom", onMessage);
  build();
  skHideSnapshot(model);
  return () => {
    disposed = true;
    observer.disconnect();
    clearTimeout(fetchTimer);
    model.off("change:_path", rebuild);
    model.off("change:mode", rebuild);
    model.off("change:following", rebuild);
    model.off("change:height", rebuild);
    model.off("change:_labels", onLabels);
    model.off("msg:custom", onMessage);
  };
}

/** Answers this view's requests in a page written by to_html; switching modes swaps the path. */
/**
 * @param {ViewRequest} msg
 * @param {SkTranscriptState} state
 * @returns {MessagesReply | null}
 */
function offline(msg, state) {
  /** @type {Partial<NonNullable<SkTranscriptState["_offline"]>>} */
  const data = state._offline || {};
  if (msg.type === "fetch") {
    const items = skDict();
    for (const id of msg.ids) if (skOwn(data.messages, id)) items[id] = data.messages[id];
    return { type: "messages", req: msg.req, items };
  }
  return null;
}

/**
 * @param {string} name
 * @param {SkTranscriptState} state
 * @param {(key: string, value: unknown) => void} set
 */
function offlineChange(name, state, set) {
  if (name === "mode" && state._offline && state._offline.paths) set("_path", state._offline.paths[state.mode]);
}

export default { render, offline, offlineChange };
