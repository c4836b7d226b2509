// @ts-check
// QueueView: an annotation queue worked by one annotator (docs/annotation.md).
//
// The notebook's QueueView and the store viewer's #/q/NAME run this module. It asks for the
// queue ({type: "state"}: rubric, progress, agreement), for the annotator's next unit
// ({type: "next"}) and sends a label ({type: "submit", n, tag, rating, note}); the kernel
// (widgets/_queue.answer) or the served viewer (POST api/queue) answers. Every text of the
// store becomes text nodes, never markup.

function qvRatings(scale) {
  const [low, high] = scale;
  const out = [];
  for (let v = Math.ceil(low); v <= Math.floor(high) && out.length <= 20; v += 1) out.push(v);
  return out;
}

function qvNumber(x) {
  return x === null || x === undefined ? "—" : Number(x).toLocaleString("en-US", { maximumFractionDigits: 3 });
}

/** @param {SkRenderArgs<SkQueueState>} args */
function render({ model, el }) {
  skHideSnapshot(model);
  const root = skEl("section", { class: "sk-view skq", "data-queue": model.get("queue") || "" });
  const head = skEl("div", { class: "skq-head" });
  const who = skEl("div", { class: "skq-who" });
  const unitBox = skEl("div", { class: "skq-unit" });
  const stats = skEl("div", { class: "skq-stats" });
  const error = skEl("div", { class: "sk-err skq-error", role: "alert" });
  root.append(head, who, error, unitBox, stats);
  el.append(root);
  const pending = new Map();
  let annotator = model.get("annotator") || null;
  let unit = null;
  let busy = false;

  function onMsg(msg) {
    const done = msg && pending.get(msg.req);
    if (!done) return;
    pending.delete(msg.req);
    if (msg.type === "error") done.reject(new Error(msg.error));
    else done.resolve(msg);
  }
  model.on("msg:custom", onMsg);

  /**
   * One request to the kernel (or the viewer's API), answered by the reply with its req.
   * @param {{type: "state"} | {type: "next"} | Omit<QueueSubmitRequest, "req" | "annotator">} msg
   * @returns {Promise<any>}
   */
  function ask(msg) {
    const req = skNextReq();
    return new Promise((resolve, reject) => {
      pending.set(req, { resolve, reject });
      model.send({ ...msg, req, annotator });
    });
  }

  function showError(err) {
    error.textContent = err ? String(err.message || err) : "";
  }

  function drawState(s) {
    const q = s.queue;
    head.textContent = "";
    head.append(skEl("h2", { class: "skq-title" }, skEl("span", { class: "sk-meta", text: "queue " }), q.name),
      skEl("div", { class: "sk-meta skq-summary", text: `${skPlural(q.unit_count, q.level)} · ${q.per_unit} label${q.per_unit === 1 ? "" : "s"} each · ${s.progress.complete} of ${q.unit_count} complete` }));
    if (q.rubric.instructions) head.append(skEl("p", { class: "skq-instructions", text: q.rubric.instructions }));
    stats.textContent = "";
    const progress = skEl("table", { class: "skv-table skq-progress" },
      skEl("thead", {}, skEl("tr", {}, skEl("th", { text: "annotator" }), skEl("th", { text: "labelled" }))));
    const body = skEl("tbody", {});
    for (const [name, count] of Object.entries(s.progress.done)) {
      body.append(skEl("tr", { "data-annotator": name }, skEl("td", { text: name }), skEl("td", { class: "skq-done", text: String(count) })));
    }
    progress.append(body);
    stats.append(skEl("h3", { class: "skv-sub", text: "Progress" }), progress,
      skEl("div", { class: "sk-meta skq-totals", "data-submitted": s.progress.submitted, "data-complete": s.progress.complete,
        text: `${s.progress.submitted} labels of ${q.unit_count * q.per_unit} · ${s.progress.claimed} units being labelled now` }));
    const agree = skEl("table", { class: "skv-table skq-agreement" },
      skEl("thead", {}, skEl("tr", {}, ...["annotators", "units both labelled", "agreement", "Cohen's kappa"].map((t) => skEl("th", { text: t })))));
    const rows = skEl("tbody", {});
    for (const p of s.agreement) {
      rows.append(skEl("tr", { "data-pair": `${p.a}|${p.b}` }, skEl("td", { text: `${p.a} · ${p.b}` }),
        skEl("td", { class: "skq-n", text: String(p.n) }), skEl("td", { class: "skq-observed", "data-value": p.observed, text: qvNumber(p.observed) }),
        skEl("td", { class: "skq-kappa", "data-value": p.kappa === null ? "" : p.kappa, text: qvNumber(p.kappa) })));
    }
    agree.append(rows);
    stats.append(skEl("h3", { class: "skv-sub", text: "Agreement" }),
      s.agreement.length ? agree : skEl("div", { class: "sk-meta skq-no-agreement", text: "no unit labelled by two annotators yet" }));
    root.dataset.submitted = String(s.progress.submitted);
  }

  async function refresh() {
    try {
      drawState(await ask({ type: "state" }));
    } catch (err) {
      showError(err);
    }
  }

  function drawUnit(q) {
    unitBox.textContent = "";
    delete unitBox.dataset.n;
    if (!unit) {
      unitBox.append(skEl("div", { class: "sk-meta skq-finished", text: `Nothing left for ${annotator} in this queue.` }));
      root.dataset.finished = "1";
      return;
    }
    delete root.dataset.finished;
    unitBox.dataset.n = String(unit.n);
    unitBox.append(skEl("div", { class: "sk-meta", text: `unit ${unit.n + 1} of ${q.unit_count} · session ${unit.session_id} · ${unit.message_id}` }));
    const list = skEl("div", { class: "skq-messages" });
    if (unit.hidden) list.append(skEl("div", { class: "sk-meta", text: `${unit.hidden} earlier messages not shown` }));
    unit.messages.forEach((m, i) => {
      const last = i === unit.messages.length - 1;
      list.append(skEl("div", { class: "sk-msg" + (last ? " skq-target" : ""), "data-id": m.id, style: { borderLeftColor: skRoleColor(m.role) } },
        skEl("div", { class: "sk-role", style: { color: skRoleColor(m.role) }, text: m.role }), skEl("div", { class: "skq-text", text: m.text })));
    });
    let tag = null;
    let rating = null;
    const submit = skEl("button", { class: "sk-btn skq-submit", type: "button", text: "submit", disabled: true });
    const ready = () => {
      submit.disabled = busy || tag === null || (q.rubric.rating !== null && rating === null);
    };
    const tags = skEl("div", { class: "skq-tags" });
    for (const t of q.rubric.tags) {
      const b = skEl("button", { class: "sk-btn skq-tag", type: "button", "data-tag": t, "aria-pressed": "false", text: t });
      b.addEventListener("click", () => {
        tag = t;
        for (const x of tags.children) x.setAttribute("aria-pressed", String(x === b));
        ready();
      });
      tags.append(b);
    }
    const form = skEl("div", { class: "skq-form" }, tags);
    if (q.rubric.rating !== null) {
      const scale = skEl("div", { class: "skq-ratings" }, skEl("span", { class: "sk-meta", text: "rating " }));
      for (const v of qvRatings(q.rubric.rating)) {
        const b = skEl("button", { class: "sk-btn skq-rating", type: "button", "data-rating": v, "aria-pressed": "false", text: String(v) });
        b.addEventListener("click", () => {
          rating = v;
          for (const x of scale.querySelectorAll(".skq-rating")) x.setAttribute("aria-pressed", String(x === b));
          ready();
        });
        scale.append(b);
      }
      form.append(scale);
    }
    const note = skEl("textarea", { class: "sk-input skq-note", placeholder: "note (optional)", rows: 2, "aria-label": "note" });
    submit.addEventListener("click", async () => {
      busy = true;
      ready();
      try {
        await ask({ type: "submit", n: unit.n, tag, rating, note: note.value });
        showError(null);
        await next(q);
      } catch (err) {
        showError(err);
      } finally {
        busy = false;
        ready();
      }
    });
    form.append(note, submit);
    unitBox.append(list, form);
  }

  async function next(q) {
    root.dataset.loading = "1";
    try {
      unit = (await ask({ type: "next" })).unit;
      drawUnit(q);
    } catch (err) {
      showError(err);
    }
    await refresh();
    delete root.dataset.loading;
  }

  async function start() {
    let s;
    try {
      s = await ask({ type: "state" });
    } catch (err) {
      showError(err);
      return;
    }
    drawState(s);
    annotator = annotator || s.annotator || null;
    who.textContent = "";
    if (!annotator) {
      // no token of their own: the annotator says who they are (kept for this tab)
      const names = s.queue.annotators;
      const input = names
        ? skEl("select", { class: "sk-input skq-name", "aria-label": "annotator" }, ...names.map((n) => skEl("option", { value: n, text: n })))
        : skEl("input", { class: "sk-input skq-name", placeholder: "your name", "aria-label": "annotator" });
      const go = skEl("button", { class: "sk-btn skq-start", type: "button", text: "start labelling" });
      go.addEventListener("click", () => {
        if (!input.value.trim()) return;
        annotator = input.value.trim();
        model.set("annotator", annotator);
        model.save_changes();
        start();
      });
      who.append(skEl("span", { class: "sk-meta", text: "Who are you? " }), input, go);
      root.dataset.ready = "1";
      return;
    }
    root.dataset.annotator = annotator;
    who.append(skEl("span", { class: "sk-meta", text: `labelling as ${annotator}` }));
    await next(s.queue);
    root.dataset.ready = "1";
  }

  start();
  return () => model.off("msg:custom", onMsg);
}

export default { render };
