// @ts-check
// sessionkit viewer: a whole store in one page (docs/viewer.md).
//
// A classic script (a file:// page may not load module files), after common.js. The page
// gives its config in #sk-app's data-config ({mode: "served" | "bundle", title, write}) and
// modules.js sets window.SK_MODULES (each view's ES module as a string). The sessions table, the search and the session page are drawn
// here; the session page mounts the notebook views' own modules (BranchTree, Transcript,
// RunView) with skLocalModel standing in for the kernel: one front end for both.
//
// Served, the data comes from /api (a token given in the page's URL, ?token=..., is kept in
// sessionStorage and goes in an Authorization header); in a bundle from script files setting globals. Every text
// from the store becomes text nodes (skEl's text, textContent), never markup.

(function () {
  const app = document.getElementById("sk-app");
  const CONFIG = JSON.parse(app.dataset.config || '{"mode": "served"}');
  const TOKEN = pageToken();
  /** @type {[key: string, label: string, extra?: boolean][]} */
  const COLUMNS = [
    ["session_id", "session"],
    ["messages", "messages"],
    ["branches", "branches"],
    ["runs", "runs"],
    ["tokens", "tokens"],
    ["cost", "cost"],
    ["last_activity", "last activity"],
    ["source", "source"],
    ["labels", "labels"],
  ];
  const PAGE = 50;

  /**
   * The token of a served viewer: from the URL the command printed (?token=...), kept in this
   * tab's sessionStorage and taken out of the address bar, so the links copied from the page
   * (#/s/...) never carry it and a reload or a link followed in this tab still has it.
   */
  function pageToken() {
    const query = new URLSearchParams(location.search);
    const given = query.get("token");
    let store = null;
    try {
      store = window.sessionStorage;
    } catch (err) {
      store = null; // storage refused (a file:// page in some browsers): the URL keeps the token
    }
    if (given && store) {
      store.setItem("sk-viewer-token", given);
      query.delete("token");
      const rest = query.toString();
      history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
    }
    return given || (store && store.getItem("sk-viewer-token")) || null;
  }

  // -- data: the same calls over /api or over the bundle's globals --------------------------

  /** @returns {SkViewerApi} */
  function served() {
    async function get(path, params, method) {
      const url = new URL(path, location.href);
      for (const [k, v] of Object.entries(params || {})) {
        if (Array.isArray(v)) for (const x of v) url.searchParams.append(k, x);
        else if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
      }
      const response = await fetch(url, { method: method || "GET", headers: TOKEN ? { Authorization: "Bearer " + TOKEN } : {} });
      const body = await response.json();
      if (response.status === 401)
        throw new Error("This viewer needs its token: open the URL that `sessionkit view` printed (it ends in ?token=...).");
      if (!response.ok) throw new Error(body.detail || body.error || response.statusText);
      return body;
    }
    return {
      sessions: (q) => get("api/sessions", q),
      search: (text, limit) => get("api/search", { q: text, limit }),
      session: (id) => get("api/session", { id }),
      path: (id, leaf) => get("api/path", { id, leaf }),
      messages: (id, ids) => get("api/messages", { id, ids }).then((r) => r.items),
      events: (id) => get("api/events", { id }).then((r) => r.events),
      timeline: (id) => get("api/timeline", { id }),
      similar: (id) => get("api/similar", { id }),
      overview: () => get("api/overview"),
      remove: (id) => get("api/session", { id }, "DELETE"),
      queues: () => get("api/queues"),
      follow: (onChange) => follow(onChange),
      async queue(name, msg) {
        // one request of the queue's view (queue_view.js), answered as the notebook's kernel would
        const url = new URL("api/queue", location.href);
        url.searchParams.set("name", name);
        const headers = { "Content-Type": "application/json" };
        if (TOKEN) headers.Authorization = "Bearer " + TOKEN;
        const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(msg) });
        const body = await response.json();
        if (response.ok) return body;
        return { type: "error", req: msg.req, error: body.detail || body.error || response.statusText };
      },
    };
  }

  /**
   * The store's changes, live: GET api/changes, a stream of server-sent events ("ready" when
   * it opens, "change" each time the store's change marker moves). Read with fetch rather
   * than EventSource, which cannot send the Authorization header a token needs; the few
   * lines of the format it uses are parsed here. A broken stream is opened again after the
   * server's "retry" delay, with the last event's id (Last-Event-ID): the server then says
   * whether a change was missed meanwhile. app's data-live is "1" while a stream is open.
   */
  async function follow(onChange) {
    let last = null;
    let retry = 2000;
    for (;;) {
      try {
        /** @type {Record<string, string>} */
        const headers = {};
        if (TOKEN) headers.Authorization = "Bearer " + TOKEN;
        if (last !== null) headers["Last-Event-ID"] = last;
        const response = await fetch(new URL("api/changes", location.href), { headers, cache: "no-store" });
        if (!response.ok || !response.body) throw new Error(response.statusText);
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replace(/\r\n?/g, "\n");
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const fields = { event: "message", data: "" };
            for (const line of buffer.slice(0, end).split("\n")) {
              const at = line.indexOf(":");
              if (at <= 0) continue; // a comment (keep-alive) or a bare line
              fields[line.slice(0, at)] = line.slice(at + 1).replace(/^ /, "");
            }
            buffer = buffer.slice(end + 2);
            if (fields.retry && /^\d+$/.test(fields.retry)) retry = Number(fields.retry);
            if (fields.id !== undefined) last = fields.id;
            if (fields.event === "ready") {
              app.dataset.live = "1";
              if (JSON.parse(fields.data || "{}").missed) onChange();
            } else if (fields.event === "change") onChange();
          }
        }
      } catch (err) {
        // the server went away or refused: try again after the delay
      }
      delete app.dataset.live;
      await new Promise((resolve) => setTimeout(resolve, retry));
    }
  }

  /** @returns {SkViewerApi} */
  function bundle() {
    /** @type {Pick<BundleTable, "rows" | "files"> & Partial<BundleTable>} */
    const data = window.SK_BUNDLE || { rows: [], files: {} };
    const loaded = new Map();
    window.skBundleSession = (id, payload) => {
      const entry = loaded.get(id);
      if (entry) entry.resolve(payload);
    };
    function load(id) {
      if (!loaded.has(id)) {
        /** @type {(payload: BundleSession) => void} */
        let resolve = () => {};
        /** @type {(err: Error) => void} */
        let reject = () => {};
        const promise = new Promise((ok, fail) => ((resolve = ok), (reject = fail)));
        loaded.set(id, { promise, resolve });
        const file = skOwn(data.files, id);
        if (!file) reject(new Error(`no session ${JSON.stringify(id)} in this bundle`));
        else document.head.append(skEl("script", { src: file, onerror: () => reject(new Error("cannot read " + file)) }));
      }
      return loaded.get(id).promise;
    }
    // Another leaf than the latest: its path from the tree (every message; no compaction marks).
    function treePath(s, leaf) {
      const t = s.tree;
      const at = t.ids.indexOf(leaf);
      const entries = [];
      for (let i = at; i >= 0; i = t.parent[i]) entries.push({ id: t.ids[i], role: t.roles[t.role[i]], tokens: t.tokens[i], kind: "message" });
      entries.reverse();
      const tokens = entries.reduce((n, e) => n + e.tokens, 0);
      const path = { leaf_id: leaf, entries, compactions: [], tokens_model: tokens, tokens_full: tokens };
      return { model: path, full: path };
    }
    return {
      async sessions(q) {
        const f = (q.filter || "").toLowerCase();
        const extra = (data.columns || []).map((c) => c.name);
        const shown = (r) => [r.session_id, r.source, r.labels, ...extra.map((k) => r[k])];
        let rows = data.rows.filter((r) => !f || shown(r).some((x) => (x === null || x === undefined ? "" : String(x)).toLowerCase().includes(f)));
        const key = q.sort;
        const dir = q.desc === "1" || q.desc === true ? -1 : 1;
        rows = rows.slice().sort((a, b) => {
          const x = a[key], y = b[key];
          if (x === y) return a.session_id < b.session_id ? -1 : 1;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          return (x < y ? -1 : 1) * dir;
        });
        return { rows: rows.slice(q.offset, q.offset + q.limit), total: rows.length, labels: data.labels, columns: data.columns || [] };
      },
      // the bundle's index, ranked as store.search ranks (search.js)
      search: (text, limit) => skBundleSearch(text, limit),
      session: (id) => load(id),
      path: (id, leaf) => load(id).then((s) => (!leaf || (s.paths && s.paths.model.leaf_id === leaf) ? s.paths : treePath(s, leaf))),
      messages: (id, ids) =>
        load(id).then((s) => {
          const out = skDict();
          for (const x of ids) if (skOwn(s.messages, x)) out[x] = s.messages[x];
          return out;
        }),
      events: (id) => load(id).then((s) => s.events || []),
      timeline: (id) => load(id).then((s) => s.timeline || { runs: [] }),
      similar: (id) => load(id).then((s) => s.similar || { sessions: [], note: "No similar conversations: this bundle has none." }),
      overview: async () => {
        if (!data.overview) throw new Error("This bundle has no overview: write it again with this version of sessionkit.");
        return data.overview;
      },
    };
  }

  const api = CONFIG.mode === "bundle" ? bundle() : served();

  // -- the views' modules, imported once from Blob URLs ---------------------------------------

  const modules = new Map();
  function viewModule(name) {
    if (!modules.has(name)) {
      const src = (window.SK_MODULES || {})[name];
      const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
      modules.set(name, import(url).then((m) => m.default));
    }
    return modules.get(name);
  }

  /**
   * Mount view module `name` in `el` with a stand-in model over `state`, answering its requests with `answer`.
   * @template S
   * @param {string} name
   * @param {HTMLElement} el
   * @param {S} state
   * @param {(msg: ViewRequest | QueueRequest, state: S) => unknown} answer
   */
  async function mount(name, el, state, answer) {
    const mod = await viewModule(name);
    const model = skLocalModel(state, mod, answer);
    if (mod.initialize) mod.initialize({ model });
    const dispose = mod.render({ model, el });
    return { model, dispose };
  }

  // -- routes: #/ (table), #/search/<q>, #/s/<session>[/m/<message>], #/overview, #/q/[<queue>] (--write)

  const table = { offset: 0, sort: "last_activity", desc: true, filter: "" };
  let cleanup = [];
  // What the shown page does when the store changes (served viewer only: a bundle is a copy
  // and never changes): the sessions table asks for its page again, a session its state.
  let onStoreChange = null;
  let refreshing = null;
  async function storeChanged() {
    if (refreshing) {
      refreshing.again = true; // one more refresh once this one ends: none is lost, none overlaps
      return;
    }
    refreshing = { again: false };
    try {
      do {
        refreshing.again = false;
        if (onStoreChange) await onStoreChange();
      } while (refreshing.again);
    } catch (err) {
      // the next change tries again
    } finally {
      refreshing = null;
    }
  }

  function route() {
    for (const fn of cleanup) fn();
    cleanup = [];
    onStoreChange = null;
    const hash = location.hash.replace(/^#\/?/, "");
    let parts;
    try {
      parts = hash.split("/").map(decodeURIComponent);
    } catch (err) {
      parts = null; // a malformed escape (%E0%A4%A): a link cut short or mistyped
    }
    app.textContent = "";
    if (parts === null) {
      app.dataset.route = "bad-link";
      app.append(skEl("header", { class: "skv-header" }, skEl("a", { class: "skv-home", href: "#/", text: CONFIG.title || "sessionkit viewer" }), searchBox("")),
        skEl("div", { class: "sk-err skv-error skv-bad-link", role: "alert", text: "Bad link: its address is malformed (a %-escape that is cut short or invalid), so it names no session. Check the link, or go to the sessions." }));
      return;
    }
    app.dataset.route = parts[0] || "sessions";
    const header = skEl("header", { class: "skv-header" },
      skEl("a", { class: "skv-home", href: "#/", text: CONFIG.title || "sessionkit viewer" }),
      searchBox(parts[0] === "search" ? parts.slice(1).join("/") : ""),
      skEl("a", { class: "skv-overview-link", href: "#/overview", text: "overview" }),
      CONFIG.write && api.queues ? skEl("a", { class: "skv-queues-link", href: "#/q/", text: "annotation queues" }) : null);
    app.append(header);
    if (parts[0] === "s" && parts.length >= 2) sessionPage(parts[1], parts[2] === "m" ? parts[3] : null);
    else if (parts[0] === "q" && CONFIG.write && api.queue) (parts[1] ? queuePage(parts.slice(1).join("/")) : queuesPage());
    else if (parts[0] === "search") searchPage(parts.slice(1).join("/"));
    else if (parts[0] === "overview") overviewPage();
    else sessionsPage();
  }

  function searchBox(value) {
    const input = skEl("input", { class: "sk-input skv-search", type: "search", placeholder: "search every message…", value, "aria-label": "search" });
    const form = skEl("form", { class: "skv-search-form" }, input);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (input.value.trim()) location.hash = "#/search/" + encodeURIComponent(input.value.trim());
    });
    return form;
  }

  function failed(box, err) {
    box.textContent = "";
    box.append(skEl("div", { class: "sk-err skv-error", text: String(err && err.message ? err.message : err) }));
  }

  function sessionHref(id, mid) {
    return "#/s/" + encodeURIComponent(id) + (mid ? "/m/" + encodeURIComponent(mid) : "");
  }

  // -- the sessions table ------------------------------------------------------------------

  function cell(key, row) {
    const v = row[key];
    if (key === "session_id") return skEl("a", { href: sessionHref(v), text: v === "" ? '""' : v });
    if (key === "tokens") return skTokens(v);
    if (key === "cost") return row.runs ? skCost(v, row.unpriced, row.runs) : "—";
    if (key === "last_activity") return v ? String(v).replace("T", " ").slice(0, 19) : "—";
    if (key === "labels" && v) {
      // the session's tags, each a badge as in the session's views
      const box = skEl("span", { class: "sk-labels" });
      for (const tag of String(v).split(", ")) box.append(skEl("span", { class: "sk-label-badge", "data-tag": tag, text: tag }));
      return box;
    }
    if (v === null || v === undefined) return "—";
    return typeof v === "number" ? v.toLocaleString("en-US", { maximumFractionDigits: 3 }) : String(v);
  }

  function sessionsPage() {
    const box = skEl("section", { class: "sk-view skv-sessions" });
    const filter = skEl("input", { class: "sk-input skv-filter", type: "search", placeholder: "filter by session, source, label or column", value: table.filter, "aria-label": "filter" });
    const status = skEl("span", { class: "sk-meta skv-status" });
    const prev = skEl("button", { class: "sk-btn skv-prev", type: "button", text: "← previous" });
    const next = skEl("button", { class: "sk-btn skv-next", type: "button", text: "next →" });
    const grid = skEl("table", { class: "skv-table" });
    box.append(skEl("div", { class: "sk-toolbar" }, filter, status, prev, next), grid);
    app.append(box);
    let timer = 0;
    let asked = 0;

    async function load() {
      const mine = ++asked;
      box.dataset.loading = "1";
      let page;
      try {
        page = await api.sessions({ offset: table.offset, limit: PAGE, sort: table.sort, desc: table.desc ? "1" : "0", filter: table.filter });
      } catch (err) {
        failed(grid, err);
        return;
      }
      if (mine !== asked) return;
      // the built-in columns, then the extra ones (--column, and those computed from the labels)
      const cols = COLUMNS.filter(([key]) => key !== "labels" || page.labels).concat((page.columns || []).map((c) => [c.name, c.label, true]));
      grid.textContent = "";
      const head = skEl("tr", {});
      for (const [key, label] of cols) {
        const on = table.sort === key;
        const th = skEl("th", { "data-sort": key, "aria-sort": on ? (table.desc ? "descending" : "ascending") : "none" },
          skEl("button", { class: "skv-sort", type: "button", text: label + (on ? (table.desc ? " ▼" : " ▲") : "") }));
        th.firstChild.addEventListener("click", () => {
          table.desc = on ? !table.desc : key !== "session_id" && key !== "source" && key !== "labels";
          table.sort = key;
          table.offset = 0;
          load();
        });
        head.append(th);
      }
      const body = skEl("tbody", {});
      for (const row of page.rows) {
        const tr = skEl("tr", { "data-session": row.session_id });
        for (const [key, , extra] of cols) tr.append(skEl("td", { class: extra ? "skv-extra" : "skv-" + key, "data-column": key }, cell(key, row)));
        body.append(tr);
      }
      grid.append(skEl("thead", {}, head), body);
      const last = Math.min(page.total, table.offset + page.rows.length);
      status.textContent = page.total ? `${(table.offset + 1).toLocaleString("en-US")}–${last.toLocaleString("en-US")} of ${skPlural(page.total, "session")}` : "no sessions";
      prev.disabled = table.offset === 0;
      next.disabled = last >= page.total;
      box.dataset.total = String(page.total);
      box.dataset.rows = String(page.rows.length);
      box.dataset.sort = table.sort + (table.desc ? " desc" : " asc");
      delete box.dataset.loading;
    }

    filter.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        table.filter = filter.value;
        table.offset = 0;
        load();
      }, 150);
    });
    prev.addEventListener("click", () => {
      table.offset = Math.max(0, table.offset - PAGE);
      load();
    });
    next.addEventListener("click", () => {
      table.offset += PAGE;
      load();
    });
    cleanup.push(() => clearTimeout(timer));
    onStoreChange = () => load(); // the same page, sort and filter; the rows as they are now
    load();
  }

  // -- search ------------------------------------------------------------------------------

  /** A snippet with its matches marked [like this] (docs/search.md), as text and <mark>s. */
  function snippet(text) {
    const out = skEl("div", { class: "skv-snippet" });
    String(text || "").split(/(\[[^[\]]*\])/).forEach((bit) => {
      if (bit.startsWith("[") && bit.endsWith("]") && bit.length > 2) out.append(skEl("mark", { text: bit.slice(1, -1) }));
      else if (bit) out.append(bit);
    });
    return out;
  }

  // Hits come a page at a time: one more than shown is asked for, so that the count says
  // "50+" only when there are more; "more hits" asks for the next page, up to the server's cap.
  const HITS_PAGE = 50;
  const MAX_HITS = 1000;

  async function searchPage(query) {
    const box = skEl("section", { class: "sk-view skv-results" });
    app.append(box);
    box.append(skEl("div", { class: "sk-toolbar" }, skEl("span", { class: "sk-meta", text: `searching for ${JSON.stringify(query)}…` })));
    await showHits(box, query, HITS_PAGE);
  }

  async function showHits(box, query, wanted) {
    let hits;
    try {
      hits = await api.search(query, wanted + 1);
    } catch (err) {
      failed(box, err);
      return;
    }
    const more = hits.length > wanted;
    hits = hits.slice(0, wanted);
    box.textContent = "";
    const count = more ? `${hits.length}+ hits` : skPlural(hits.length, "hit");
    box.append(skEl("div", { class: "sk-toolbar" }, skEl("span", { class: "sk-meta skv-hit-count", text: `${count} for ${JSON.stringify(query)}` })));
    const list = skEl("ol", { class: "skv-hits" });
    for (const h of hits) {
      const href = sessionHref(h.session_id, h.id);
      list.append(skEl("li", { class: "skv-hit", "data-session": h.session_id, "data-id": h.id, "data-score": String(h.score) },
        skEl("a", { href },
          skEl("span", { class: "sk-role", style: { color: skRoleColor(h.role) }, text: h.role }),
          skEl("span", { class: "sk-meta", text: ` · ${h.session_id === "" ? '""' : h.session_id} · ${h.id}` })),
        skEl("a", { class: "skv-snippet-link", href }, snippet(h.snippet))));
    }
    box.append(list);
    if (more && wanted < MAX_HITS) {
      const button = skEl("button", { class: "sk-btn skv-more-hits", type: "button", text: `${HITS_PAGE} more hits` });
      button.addEventListener("click", () => {
        button.disabled = true;
        showHits(box, query, Math.min(wanted + HITS_PAGE, MAX_HITS));
      });
      box.append(skEl("div", { class: "sk-toolbar" }, button));
    } else if (more) {
      box.append(skEl("div", { class: "sk-toolbar" }, skEl("span", { class: "sk-meta", text: `the first ${MAX_HITS} hits are shown: add words to narrow the search` })));
    }
    box.dataset.hits = String(hits.length);
    box.dataset.more = String(more);
  }

  // -- one session -------------------------------------------------------------------------

  async function sessionPage(id, messageId) {
    const box = skEl("section", { class: "skv-session", "data-session": id });
    const title = skEl("h2", { class: "skv-title" }, skEl("span", { class: "sk-meta", text: "session " }), skEl("span", { text: id === "" ? '""' : id }));
    const link = skEl("a", { class: "skv-link sk-meta", href: sessionHref(id, messageId), text: "link to this view" });
    const treeEl = skEl("div", { class: "skv-tree" });
    const chatEl = skEl("div", { class: "skv-chat" });
    const runsEl = skEl("div", { class: "skv-runs" });
    const head = skEl("div", { class: "skv-session-head" }, title, link);
    if (CONFIG.write && api.remove) {
      // --write: the one change the page offers; the store keeps everything else as it is
      const del = skEl("button", { class: "sk-btn sk-danger skv-delete", type: "button", text: "delete session" });
      del.addEventListener("click", async () => {
        if (!confirm(`Delete session ${JSON.stringify(id)} and all its messages?`)) return;
        try {
          await api.remove(id);
          location.hash = "#/";
        } catch (err) {
          failed(box, err);
        }
      });
      head.append(del);
    }
    box.append(head, skEl("div", { class: "skv-panes" }, treeEl, chatEl), runsEl);
    box.append(similarPane(id));
    app.append(box);
    let s;
    try {
      s = await api.session(id);
    } catch (err) {
      failed(box, err);
      return;
    }
    let known = new Set(s.tree.ids);
    const selected = messageId && known.has(messageId) ? messageId : s.latest;
    const views = skDict(); // message views fetched so far, shared by the tree and the transcript

    async function fetchViews(ids) {
      const want = ids.filter((x) => !views[x] && !String(x).startsWith("compaction:"));
      if (want.length) {
        const got = await api.messages(id, want);
        for (const x of Object.keys(got)) views[x] = got[x];
      }
      const out = skDict();
      for (const x of ids) if (views[x]) out[x] = views[x];
      return out;
    }

    const labels = s.labels || skDict(); // by message id: the badges of the tree and the transcript
    const treeState = { _tree: s.tree, _labels: labels, selected_id: selected, compare_id: null, diff: {}, collapse: true, height: 520, _offline: { messages: views } };
    const tree = await mount("branch_tree", treeEl, treeState, async (msg) => {
      if (msg.type === "fetch") {
        const got = await fetchViews(msg.ids);
        const items = skDict();
        for (const [k, v] of Object.entries(got)) items[k] = v.preview;
        return { type: "previews", req: msg.req, items };
      }
      if (msg.type === "detail") return { type: "detail", req: msg.req, id: msg.id, message: skOwn(await fetchViews([msg.id]), msg.id) || null };
      return null;
    });

    let paths = selected ? await api.path(id, selected) : null;
    const empty = { leaf_id: null, entries: [], compactions: [], tokens_model: 0, tokens_full: 0 };
    const chatState = { _labels: labels, leaf_id: selected, mode: "model", following: true, height: 520, _path: paths ? paths.model : empty, _offline: { paths: paths || { model: empty, full: empty }, messages: views } };
    const chat = await mount("transcript", chatEl, chatState, async (msg) => {
      if (msg.type === "fetch") return { type: "messages", req: msg.req, items: await fetchViews(msg.ids) };
      return null;
    });
    const mark = () => {
      for (const node of chatEl.querySelectorAll(".skv-target")) node.classList.remove("skv-target");
      const target = [.../** @type {NodeListOf<HTMLElement>} */ (chatEl.querySelectorAll(".sk-msg[data-id]"))].find((n) => n.dataset.id === tree.model.get("selected_id"));
      if (target) {
        target.classList.add("skv-target");
        target.scrollIntoView({ block: "nearest" });
      }
    };
    const follow = async () => {
      const mid = tree.model.get("selected_id");
      if (!mid) return;
      link.href = sessionHref(id, mid);
      if (location.hash !== link.getAttribute("href")) history.replaceState(null, "", link.getAttribute("href"));
      paths = await api.path(id, mid);
      chatState._offline.paths = paths;
      chat.model.set("_path", paths[chat.model.get("mode")]);
      mark();
      box.dataset.selected = mid;
    };
    tree.model.on("change:selected_id", follow);
    mark();
    box.dataset.selected = selected || "";

    const events = await api.events(id);
    if (events.length) {
      // the timeline beside the runs: a click on a bar selects the message it produced
      const times = skEl("div", { class: "skv-timeline" }, skEl("h3", { class: "skv-sub", text: "Timeline" }));
      const runList = skEl("div", { class: "skv-runlist" }, skEl("h3", { class: "skv-sub", text: "Runs" }));
      const host = skEl("div", {});
      runList.append(host);
      runsEl.append(times, runList);
      try {
        times.append(skTimeline(await api.timeline(id), (mid) => {
          if (known.has(mid)) tree.model.set("selected_id", mid);
        }));
      } catch (err) {
        times.append(skEl("div", { class: "sk-err skv-error", text: String(err && err.message ? err.message : err) }));
      }
      await mount("run_view", host, { summary: {}, queue: { items: [] }, controls: false, height: 480 }, (msg) => (msg.type === "hello" ? { type: "reset", req: msg.req, events } : null));
    }
    box.dataset.ready = "1";
    cleanup.push(() => tree.model.off("change:selected_id", follow));
    // The store changed: this session's state again. Its tree and labels are replaced in the
    // views (which keep their scroll); a selection on the latest message moves to the new
    // latest one (the transcript follows a conversation going on), any other stays.
    let alive = true;
    cleanup.push(() => (alive = false));
    onStoreChange = async () => {
      let now;
      try {
        now = await api.session(id);
      } catch (err) {
        if (alive && !box.querySelector(".skv-gone"))
          head.append(skEl("span", { class: "sk-err skv-gone", text: "this session is no longer in the store" }));
        return;
      }
      if (!alive) return;
      const mid = tree.model.get("selected_id");
      const onLatest = !mid || mid === s.latest;
      s = now;
      known = new Set(s.tree.ids);
      for (const k of Object.keys(views)) delete views[k]; // a message may have been updated
      const marks = s.labels || skDict();
      tree.model.set("_labels", marks);
      chat.model.set("_labels", marks);
      tree.model.set("_tree", s.tree);
      const want = onLatest || !known.has(mid) ? s.latest : mid;
      if (want && want !== mid) tree.model.set("selected_id", want); // follow() fetches its path
      else await follow();
      box.dataset.messages = String(s.tree.ids.length);
    };
  }

  // -- similar conversations (store.similar(..., level="session")) ----------------------------

  /** The sessions most like this one, each a link; or why there are none. Filled when the answer comes. */
  function similarPane(id) {
    const pane = skEl("div", { class: "skv-similar" }, skEl("h3", { class: "skv-sub", text: "Similar conversations" }));
    api.similar(id).then(
      (got) => {
        if (got.sessions.length) {
          const list = skEl("ol", { class: "skv-similar-list" });
          for (const s of got.sessions)
            list.append(skEl("li", { "data-session": s.session_id, "data-score": String(s.score) },
              skEl("a", { href: sessionHref(s.session_id), text: s.session_id === "" ? '""' : s.session_id }),
              skEl("span", { class: "sk-meta", text: ` · ${s.score.toFixed(3)} · ${skPlural(s.messages, "message")}` })));
          pane.append(list, skEl("div", { class: "sk-meta", text: `by the mean of each session's ${got.model} message vectors` }));
        } else pane.append(skEl("div", { class: "sk-meta skv-similar-none", text: got.note }));
        pane.dataset.ready = "1";
      },
      (err) => {
        pane.append(skEl("div", { class: "sk-err skv-error", text: String(err && err.message ? err.message : err) }));
        pane.dataset.ready = "1";
      },
    );
    return pane;
  }

  // -- the store's overview (#/overview): charts of overview_data's figures (overview.js) -----

  async function overviewPage() {
    const box = skEl("div", { class: "skv-overview-host" });
    box.append(skEl("div", { class: "sk-meta", text: "computing the overview…" }));
    app.append(box);
    let data;
    try {
      data = await api.overview();
    } catch (err) {
      failed(box, err);
      return;
    }
    box.textContent = "";
    box.append(skOverview(data));
  }

  // -- annotation queues (--write): the list, and one queue worked by its annotator ----------

  function queueHref(name) {
    return "#/q/" + encodeURIComponent(name);
  }

  async function queuesPage() {
    const box = skEl("section", { class: "sk-view skv-queues" });
    app.append(box);
    let got;
    try {
      got = await api.queues();
    } catch (err) {
      failed(box, err);
      return;
    }
    box.append(skEl("h2", { class: "skv-title", text: "Annotation queues" }));
    if (!got.queues.length) box.append(skEl("div", { class: "sk-meta", text: "no queue: define one with store.queue(...)" }));
    const list = skEl("ul", { class: "skv-queue-list" });
    for (const q of got.queues) {
      list.append(skEl("li", { "data-queue": q.name }, skEl("a", { href: queueHref(q.name), text: q.name }),
        skEl("span", { class: "sk-meta", text: ` · ${skPlural(q.unit_count, q.level)} · ${q.progress.complete} complete` })));
    }
    box.append(list);
    box.dataset.ready = "1";
  }

  async function queuePage(name) {
    const host = skEl("div", { class: "skv-queue" });
    app.append(host);
    let who = null;
    try {
      who = window.sessionStorage.getItem("sk-viewer-annotator");
    } catch (err) {
      who = null;
    }
    const state = { queue: name, annotator: who };
    const view = await mount("queue_view", host, state, (msg) => api.queue(name, /** @type {QueueRequest} */ (msg)));  // queue_view.js sends queue requests only
    const keep = () => {
      try {
        window.sessionStorage.setItem("sk-viewer-annotator", view.model.get("annotator"));
      } catch (err) {
        // storage refused: the name is asked again after a reload
      }
    };
    view.model.on("change:annotator", keep);
    cleanup.push(() => {
      view.model.off("change:annotator", keep);
      if (view.dispose) view.dispose();
    });
  }

  window.addEventListener("hashchange", route);
  route();
  if (api.follow) api.follow(storeChanged);
})();
