// @ts-check
// sessionkit widgets: helpers shared by every view (prepended to each view's module).
// The payloads they take are typed in types.d.ts (generated from sessionkit/widgets/_payloads.py).

const SK_ROLE_COLORS = { user: "#2563eb", assistant: "#15803d", system: "#64748b", tool: "#c2410c" };
const SK_OTHER_COLOR = "#7c3aed";

/** @param {string | null | undefined} role */
function skRoleColor(role) {
  return skOwn(SK_ROLE_COLORS, role) || SK_OTHER_COLOR;
}

/**
 * obj[key] when obj has it as its own property, else undefined. Message, session and label
 * ids are any strings, "constructor", "toString" and "__proto__" among them: looked up in a
 * plain object with obj[key] they would find Object.prototype's members instead of nothing.
 * @template T
 * @param {Record<string, T> | null | undefined} obj
 * @param {string} key
 * @returns {T | undefined}
 */
function skOwn(obj, key) {
  return obj !== null && obj !== undefined && Object.prototype.hasOwnProperty.call(obj, key) ? obj[key] : undefined;
}

/** An empty object for values by id: no prototype, so no id names an inherited member and
 * setting "__proto__" stores a value like any other id. */
function skDict() {
  return Object.create(null);
}

/**
 * Create an element: skEl("div", {class: "x", onclick: fn}, child, "text", ...).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, unknown> | null} [attrs]
 * @param {...(Node | string | number | null | undefined | false)} children
 * @returns {HTMLElementTagNameMap[K]}
 */
function skEl(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    else if (key === "class") node.className = String(value);
    else if (key === "text") node.textContent = String(value);
    else if (key === "style" && typeof value === "object") Object.assign(node.style, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/**
 * 1234 -> "1.2k", 12 -> "12" (as _static.fmt_tokens).
 * @param {number | null | undefined} n
 */
function skTokens(n) {
  if (n === null || n === undefined) return "?";
  n = Math.trunc(n); // whole tokens, as _static.fmt_tokens; each rounding below is toFixed's (a tie away from zero)
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(0) + "k";
  if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
  return String(n);
}

/** The one word every view uses for a cost nobody knows (as _static.UNKNOWN_COST). */
const SK_UNKNOWN_COST = "unknown";

/**
 * Dollars; "unknown" when no price is known; a partial sum says so (as _static.fmt_cost):
 * skCost(0.0001, 2, 3) -> "≥ $0.0001 (2 of 3 unknown)". Never shows an unknown cost as zero.
 * @param {number | null | undefined} cost
 * @param {number | null} [unknown]
 * @param {number | null} [total]
 */
function skCost(cost, unknown, total) {
  unknown = unknown || 0;
  const hasTotal = total !== null && total !== undefined;
  const known = cost !== null && cost !== undefined && (!hasTotal || unknown < total);
  if (!known || (unknown && !cost && !hasTotal)) return SK_UNKNOWN_COST;
  const text = cost < 1 ? "$" + cost.toFixed(4) : "$" + cost.toFixed(2);
  if (!unknown) return text;
  return `≥ ${text} (${hasTotal ? unknown + " of " + total : unknown} unknown)`;
}

/**
 * "1 leaf", "2 leaves": the count and the noun that agrees with it (as _static.plural).
 * @param {number} n
 * @param {string} singular
 * @param {string} [plural]
 */
function skPlural(n, singular, plural) {
  return `${Number(n).toLocaleString("en-US")} ${n === 1 ? singular : plural || singular + "s"}`;
}

/** @param {unknown} value */
function skJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (err) {
    return String(value);
  }
}

// ECMA-48 escape sequences (colours, cursor moves, titles): the same pattern as sessionkit.parts._ANSI.
const SK_ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;
/** Output longer than this many lines is folded behind "show all" (as sessionkit.parts.FOLD_LINES). */
const SK_FOLD_LINES = 30;

/**
 * A tool's input or output as a person reads it (as sessionkit.parts.output_text): a string
 * as itself with real line breaks and no ANSI colour codes, any other value as indented JSON.
 */
/**
 * @param {unknown} value
 * @returns {string}
 */
function skOutputText(value) {
  if (typeof value !== "string") return value === undefined ? "" : skJson(value);
  return value.replace(SK_ANSI, "").replace(/\r\n?/g, "\n");
}

/** A string argument this long or longer is shown under its name (as sessionkit.parts.INLINE_CHARS). */
const SK_INLINE_CHARS = 60;

/**
 * A tool's input as a person reads it (as sessionkit.parts.input_text): each argument of an
 * object (or of a JSON text of one) on a line of its own, a short one-line string, a number,
 * true/false or null beside its name, anything longer under it, indented, with real line
 * breaks; any other input as skOutputText shows it. A text the kernel already made (the
 * message views send input_text's result) reads back as itself.
 */
/** @param {unknown} value */
function skInputText(value) {
  if (typeof value === "string") {
    if (!value.trimStart().startsWith("{")) return skOutputText(value);
    try {
      value = JSON.parse(value); // a model's raw tool-call arguments: an object's JSON text
    } catch (err) {
      return skOutputText(value);
    }
  }
  if (value === null || typeof value !== "object" || Array.isArray(value) || !Object.keys(value).length) return skOutputText(value);
  const lines = [];
  for (const [name, arg] of Object.entries(value)) {
    if (arg === null || typeof arg === "boolean" || typeof arg === "number") {
      lines.push(`${name}: ${JSON.stringify(arg)}`);
      continue;
    }
    const text = skOutputText(arg);
    if (typeof arg === "string" && !text.includes("\n") && text.length < SK_INLINE_CHARS) {
      lines.push(text ? `${name}: ${text}` : `${name}: ""`);
      continue;
    }
    lines.push(`${name}:`);
    for (const line of text.replace(/\n+$/, "").split("\n")) lines.push(line ? "  " + line : "");
  }
  return lines.join("\n");
}

/** A tool's input in a view: skInputText's text, folded as skOutput folds output. */
/** @param {unknown} value */
function skInput(value) {
  return skOutput(skInputText(value));
}

/**
 * The one renderer of tool input and output in every web view: a <pre> of readable text
 * (skOutputText), folded past SK_FOLD_LINES lines with a "show all" button. Tool output is
 * untrusted: it only ever becomes text nodes, never markup.
 */
/** @param {unknown} value */
function skOutput(value) {
  const text = skOutputText(value);
  const lines = text.split("\n");
  const pre = skEl("pre", { class: "sk-out" });
  if (lines.length <= SK_FOLD_LINES + 1) {
    pre.textContent = text;
    return pre;
  }
  pre.textContent = lines.slice(0, SK_FOLD_LINES).join("\n");
  const hidden = lines.length - SK_FOLD_LINES;
  const more = skEl("button", { class: "sk-btn sk-small sk-show-all", type: "button", text: `show all (${skPlural(hidden, "more line")})` });
  more.addEventListener("click", () => {
    pre.textContent = text;
    pre.style.maxHeight = "none";
    more.remove();
  });
  return skEl("div", { class: "sk-fold", "data-hidden-lines": String(hidden) }, pre, more);
}

/**
 * Render a condensed message (see _source.message_view) into a DOM fragment.
 * @param {MessageView | null | undefined} view
 */
function skParts(view) {
  const frag = document.createDocumentFragment();
  for (const p of (view && view.parts) || []) {
    if (p.type === "text") frag.append(skEl("div", { class: "sk-text", text: p.text }));
    else if (p.type === "reasoning")
      frag.append(skEl("details", { class: "sk-reasoning" }, skEl("summary", { text: "reasoning" }), skEl("div", { class: "sk-text", text: p.text })));
    else if (p.type === "tool") {
      const status = p.error ? "error" : p.state || "";
      const box = skEl("details", { class: "sk-tool", open: true },
        skEl("summary", {}, "tool ", skEl("b", { text: p.name }), " ", skEl("span", { class: "sk-badge" + (p.error ? " sk-bad" : ""), text: status })));
      if (p.input !== null && p.input !== undefined) box.append(skEl("div", { class: "sk-label", text: "input" }), skInput(p.input));
      if (p.output !== null && p.output !== undefined) box.append(skEl("div", { class: "sk-label", text: "output" }), skOutput(p.output));
      if (p.error) box.append(skEl("div", { class: "sk-err", text: p.error }));
      frag.append(box);
    } else if (p.type === "file") {
      frag.append(skEl("div", { class: "sk-badge", text: `file ${p.mediaType || ""} ${p.name || ""}` }));
    } else {
      frag.append(skEl("details", {}, skEl("summary", { text: `${p.kind} part` }), skEl("pre", { text: p.json })));
    }
  }
  return frag;
}

/** Message cache shared by every view of one model (a model can be displayed twice). */
const skCaches = new WeakMap();
/** @param {object} model */
function skCache(model) {
  let cache = skCaches.get(model);
  if (!cache) {
    cache = { previews: new Map(), details: new Map(), messages: new Map(), asked: new Set() };
    skCaches.set(model, cache);
  }
  return cache;
}

let skReq = 0;
function skNextReq() {
  skReq += 1;
  return skReq;
}

/**
 * The widget renders: hide the static snapshot displayed just before it (the output
 * marked data-sk-snapshot-for with this view's key; see _views.display_view). Where no
 * widget renders (nbconvert offline, GitHub, nbviewer) nothing runs and the snapshot stays.
 * @param {SkModel} model
 */
function skHideSnapshot(model) {
  const key = model.get("_snapshot_key");
  if (!key || typeof document === "undefined") return;
  for (const node of document.querySelectorAll(`[data-sk-snapshot-for="${key}"]`)) {
    const output = /** @type {HTMLElement} */ (node.closest(".jp-OutputArea-child") || node);
    output.style.display = "none";
    output.dataset.skSnapshotHidden = "1";
  }
}

/**
 * A stand-in for the widget model where no kernel runs: the pages written by to_html()
 * (offline.js) and the store viewer (viewer.js). It keeps the view's state in a plain
 * object, runs the module's offlineChange on each set (as the kernel would recompute),
 * and answers the view's requests with answer(msg, state): a reply, a Promise of one, or null.
 * @template S
 * @param {S} state
 * @param {{offlineChange?: (key: string, state: S, set: (key: string, value: unknown) => void) => void} | null} mod
 * @param {(msg: ViewRequest | QueueRequest, state: S) => unknown} answer
 * @returns {SkModel<S>}
 */
function skLocalModel(state, mod, answer) {
  const handlers = new Map();
  const emit = (name, ...args) => {
    for (const fn of handlers.get(name) || []) fn(...args);
  };
  const model = {
    get: (key) => state[key],
    set(key, value) {
      state[key] = value;
      if (mod && mod.offlineChange) mod.offlineChange(key, state, (k, v) => model.set(k, v));
      emit("change:" + key);
    },
    save_changes() {},
    on(name, fn) {
      if (!handlers.has(name)) handlers.set(name, new Set());
      handlers.get(name).add(fn);
    },
    off(name, fn) {
      if (handlers.has(name)) handlers.get(name).delete(fn);
    },
    send(msg) {
      setTimeout(() => {
        Promise.resolve(answer(msg, state)).then((reply) => {
          if (reply) emit("msg:custom", reply, []);
        });
      }, 0);
    },
  };
  return model;
}

/**
 * A label's badge text: its tag, its rating, ⎇ for a label on the branch ending at the message, ⚙ for a scorer's.
 * @param {LabelView} label
 */
function skLabelText(label) {
  const rating = label.rating === null || label.rating === undefined ? "" : ` ★${label.rating}`;
  const judged = label.source && label.source !== "human" ? "⚙ " : "";
  return judged + (label.target === "branch" ? "⎇ " : "") + label.tag + rating;
}

/**
 * The badges of a message's labels (see _source.labels_json); a × on each when `onRemove` is given.
 * @param {LabelView[] | undefined} labels
 * @param {((label: LabelView) => void) | null} [onRemove]
 */
function skLabelBadges(labels, onRemove) {
  const box = skEl("span", { class: "sk-labels" });
  for (const label of Array.isArray(labels) ? labels : []) {
    const judged = label.source && label.source !== "human";
    const about = [label.target === "branch" ? "on the branch ending here" : "", label.note, label.author ? "by " + label.author : "",
      judged ? `${label.source} scorer ${label.scorer}` : "", label.rationale];
    const badge = skEl("span", { class: "sk-label-badge" + (label.target === "branch" ? " sk-label-branch" : "") + (judged ? " sk-label-judged" : ""),
      "data-label-id": label.id, "data-tag": label.tag, "data-source": label.source || "human",
      title: about.filter(Boolean).join(" · ") || null, text: skLabelText(label) });
    if (onRemove)
      badge.append(skEl("button", { class: "sk-label-x", type: "button", "aria-label": `remove label ${label.tag}`, text: "×",
        onclick: (event) => {
          event.stopPropagation();
          onRemove(label);
        } }));
    box.append(badge);
  }
  return box;
}

/**
 * A form that adds a label: tag, rating, on the message or on its branch; `onAdd({tag, rating, target})`.
 * @param {(fields: {tag: string, rating: number | null, target: "message" | "branch"}) => void} onAdd
 */
function skLabelForm(onAdd) {
  const tag = skEl("input", { class: "sk-label-tag", type: "text", placeholder: "tag", maxlength: "100", "aria-label": "label tag" });
  const rating = skEl("input", { class: "sk-label-rating", type: "number", step: "any", placeholder: "rating", "aria-label": "label rating" });
  const target = skEl("select", { class: "sk-label-target", "aria-label": "label on" },
    skEl("option", { value: "message", text: "this message" }), skEl("option", { value: "branch", text: "its branch" }));
  const error = skEl("span", { class: "sk-err sk-label-error", role: "status" });
  const form = skEl("form", { class: "sk-label-form" }, tag, rating, target, skEl("button", { class: "sk-btn", type: "submit", text: "Add label" }), error);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    event.stopPropagation();
    const text = tag.value.trim();
    if (!text) {
      error.textContent = "a label needs a tag";
      return;
    }
    const value = rating.value === "" ? null : Number(rating.value);
    if (value !== null && !Number.isFinite(value)) {
      error.textContent = "the rating must be a number";
      return;
    }
    error.textContent = "";
    onAdd({ tag: text, rating: value, target: target.value === "branch" ? "branch" : "message" });
    tag.value = "";
    rating.value = "";
  });
  // keys typed here are text, not the view's or the notebook's shortcuts
  form.addEventListener("keydown", (event) => event.stopPropagation());
  return form;
}

/**
 * Whether the view runs with a kernel (a page written by to_html has none: labels are read-only there).
 * @param {SkModel<{_offline?: unknown}>} model
 */
function skEditable(model) {
  return !model.get("_offline");
}
