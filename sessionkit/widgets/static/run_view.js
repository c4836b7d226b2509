// @ts-check
// RunView front end: run events folded into turns, updated in place as batches arrive.
//
// The kernel sends {type: "events", events: [...]} every ~75 ms while a run
// streams (consecutive text deltas already merged) and {type: "reset", events}
// when a view asks with {type: "hello"}. rvApply mirrors
// sessionkit.widgets._runlog.apply_event, so live and replayed views agree.

function rvUsage() {
  return { in: 0, out: 0, cache_read: 0, cache_write: 0, cost_usd: 0, calls: 0, unpriced: 0 };
}

function rvAddUsage(total, ev) {
  for (const key of ["in", "out", "cache_read", "cache_write"]) if (typeof ev[key] === "number") total[key] += ev[key];
  total.calls += 1;
  if (typeof ev.cost_usd === "number") total.cost_usd += ev.cost_usd;
  else total.unpriced += 1;
}

function rvNewTurn(run, ev) {
  const turn = { turn: (ev && ev.turn) || run.turns.length + 1, input: (ev && ev.input) || null, mode: (ev && ev.mode) || null, text: "", reasoning: "", tools: [], usage: null, stop_reason: null, done: false };
  run.turns.push(turn);
  return turn;
}

function rvTurn(run, opening) {
  if (!run.turns.length || (opening && run.turns[run.turns.length - 1].done)) return rvNewTurn(run, null);
  return run.turns[run.turns.length - 1];
}

function rvApply(state, ev) {
  if (typeof ev.seq === "number") state.last_seq = Math.max(state.last_seq, ev.seq);
  if (typeof ev.kind !== "string") return;
  let run = null;
  for (let i = state.runs.length - 1; i >= 0; i--) if (state.runs[i].run_id === ev.run_id) { run = state.runs[i]; break; }
  if (!run) {
    run = { run_id: ev.run_id, input: null, status: "running", error: null, started: ev.ts, ended: null, turns: [], usage: rvUsage() };
    state.runs.push(run);
  }
  const k = ev.kind;
  if (k === "run.start") {
    run.input = ev.input;
    run.started = ev.ts;
  } else if (k === "turn.start") rvNewTurn(run, ev);
  else if (k === "delta.text") rvTurn(run, true).text += ev.text || "";
  else if (k === "delta.reasoning") rvTurn(run, true).reasoning += ev.text || "";
  else if (k === "tool.call") rvTurn(run, true).tools.push({ id: ev.tool_call_id, name: ev.name, input: ev.input, output: null, error: null, done: false });
  else if (k === "tool.result") {
    const turn = rvTurn(run, false);
    let tool = null;
    for (let i = turn.tools.length - 1; i >= 0; i--) if (turn.tools[i].id === ev.tool_call_id) { tool = turn.tools[i]; break; }
    if (!tool) {
      tool = { id: ev.tool_call_id, name: null, input: null, output: null, error: null, done: false };
      turn.tools.push(tool);
    }
    tool.output = ev.output;
    tool.error = ev.error;
    tool.done = true;
  } else if (k === "usage") {
    const u = {};
    for (const key of ["in", "out", "cache_read", "cache_write", "cost_usd", "model"]) u[key] = ev[key] === undefined ? null : ev[key];
    rvTurn(run, false).usage = u;
    rvAddUsage(run.usage, ev);
    rvAddUsage(state.usage, ev);
  } else if (k === "turn.end") {
    const turn = rvTurn(run, false);
    turn.stop_reason = ev.stop_reason;
    turn.done = true;
  } else if (k === "run.end") {
    run.status = ev.status || "completed";
    run.error = ev.error;
    run.ended = ev.ts;
  }
}

function rvUsageText(u) {
  return `${skPlural(u.calls, "model call")} · in ${skTokens(u.in)} · out ${skTokens(u.out)} · cache ${skTokens(u.cache_read)} · cost ${u.calls ? skCost(u.cost_usd, u.unpriced, u.calls) : "—"}`;
}

function rvTurnUsage(u) {
  const bits = [`usage: in ${skTokens(u.in)}`, `out ${skTokens(u.out)}`];
  if (u.cache_read || u.cache_write) bits.push(`cache ${skTokens(u.cache_read || 0)} read / ${skTokens(u.cache_write || 0)} written`);
  if (u.model) bits.push(u.model);
  bits.push(skCost(u.cost_usd));
  return bits.join(" · ");
}

/** @param {SkRenderArgs<SkRunState>} args */
function render({ model, el }) {
  const root = skEl("div", { class: "sk-view sk-run-view" });
  const head = skEl("div", { class: "sk-toolbar" });
  const body = skEl("div", { class: "sk-run-body" });
  const queueBox = skEl("div", { class: "sk-queue" });
  // the finished runs' timeline (computed by the kernel: sessionkit.widgets._timeline), above them
  const tlBox = skEl("details", { class: "skr-timeline", open: true });
  root.append(head, tlBox, body, queueBox);
  el.append(root);
  let state = { runs: [], usage: rvUsage(), last_seq: -1 };
  let lastI = -1;
  let ready = false;
  let early = [];
  const doms = new Map();

  function runDom(run) {
    let d = doms.get(run.run_id);
    if (!d) {
      const node = skEl("div", { class: "skr-run", "data-run": run.run_id || "" });
      const title = skEl("div", { class: "skr-run-head" });
      const input = skEl("div", { class: "sk-msg", style: { borderLeftColor: skRoleColor("user") } });
      const turns = skEl("div", {});
      const error = skEl("div", { class: "sk-err" });
      node.append(title, input, turns, error);
      body.append(node);
      d = { node, title, input, turns, error, turnDoms: [] };
      doms.set(run.run_id, d);
    }
    return d;
  }

  function turnDom(d, index, turn) {
    let t = d.turnDoms[index];
    if (!t) {
      const node = skEl("div", { class: "skr-turn", "data-turn": String(turn.turn) });
      const label = skEl("div", { class: "skr-turn-head sk-meta" });
      const input = skEl("div", { class: "sk-msg skr-turn-input", style: { borderLeftColor: skRoleColor("user") } });
      const reasoning = skEl("details", { class: "sk-reasoning" }, skEl("summary", { text: "reasoning" }));
      const reasoningText = skEl("div", { class: "sk-text" });
      reasoning.append(reasoningText);
      const textNode = document.createTextNode("");
      const text = skEl("div", { class: "sk-text skr-text" }, textNode);
      const reply = skEl("div", { class: "sk-msg skr-reply", style: { borderLeftColor: skRoleColor("assistant") } }, skEl("span", { class: "sk-role", style: { color: skRoleColor("assistant") }, text: "assistant" }), text);
      const tools = skEl("div", { class: "skr-tools" });
      const usage = skEl("div", { class: "sk-meta skr-usage" });
      const end = skEl("div", { class: "skr-end" });
      node.append(label, input, reasoning, reply, tools, usage, end);
      d.turns.append(node);
      t = { node, label, input, reasoning, reasoningText, reply, textNode, tools, usage, end, toolSig: "" };
      d.turnDoms[index] = t;
    }
    return t;
  }

  function sync() {
    for (const run of state.runs) {
      const d = runDom(run);
      d.title.textContent = "";
      // events stored without a run id (a run log written by hand) are no run: no status to show
      if (run.run_id === null || run.run_id === undefined) d.title.append(skEl("b", { text: "events outside any run" }));
      else d.title.append(skEl("b", { text: "run " + run.run_id }), " ", skEl("span", { class: "sk-badge sk-status-" + run.status, text: run.status }));
      d.title.append(skEl("span", { class: "sk-meta", text: " · " + rvUsageText(run.usage) }));
      d.input.style.display = run.input === null || run.input === undefined ? "none" : "";
      if (d.input.textContent !== run.input) {
        d.input.textContent = "";
        d.input.append(skEl("span", { class: "sk-role", style: { color: skRoleColor("user") }, text: "user" }), skEl("div", { class: "sk-text", text: run.input || "" }));
      }
      run.turns.forEach((turn, index) => {
        const t = turnDom(d, index, turn);
        t.label.textContent = `turn ${turn.turn}` + (turn.mode ? ` · queued ${turn.mode} message delivered` : "");
        t.input.style.display = turn.input ? "" : "none";
        if (turn.input && !t.input.childNodes.length)
          t.input.append(skEl("span", { class: "sk-role", style: { color: skRoleColor("user") }, text: "user" }), skEl("div", { class: "sk-text", text: turn.input }));
        t.reasoning.style.display = turn.reasoning ? "" : "none";
        if (t.reasoningText.textContent !== turn.reasoning) t.reasoningText.textContent = turn.reasoning;
        const shown = t.textNode.data;
        if (shown !== turn.text) {
          if (turn.text.startsWith(shown)) t.textNode.appendData(turn.text.slice(shown.length));
          else t.textNode.data = turn.text;
        }
        t.reply.style.display = turn.text ? "" : "none";
        t.reply.classList.toggle("skr-streaming", !turn.done && run.status === "running");
        const sig = JSON.stringify(turn.tools.map((x) => [x.id, x.done, !!x.error]));
        if (sig !== t.toolSig) {
          t.toolSig = sig;
          t.tools.textContent = "";
          for (const tool of turn.tools) {
            const status = tool.error ? "error" : tool.done ? "done" : "running…";
            const box = skEl("details", { class: "sk-tool", open: true, "data-tool": tool.id || "" },
              skEl("summary", {}, "tool ", skEl("b", { text: tool.name || "?" }), " ", skEl("span", { class: "sk-badge" + (tool.error ? " sk-bad" : ""), text: status })),
              skEl("div", { class: "sk-label", text: "input" }), skInput(tool.input));
            if (tool.done && !tool.error) box.append(skEl("div", { class: "sk-label", text: "output" }), skOutput(tool.output));
            if (tool.error) box.append(skEl("div", { class: "sk-err", text: tool.error }));
            t.tools.append(box);
          }
        }
        const u = turn.usage;
        t.usage.textContent = u ? rvTurnUsage(u) : "";
        t.node.classList.toggle("skr-done", turn.done);
        t.end.textContent = turn.done ? `— turn ${turn.turn} ended (${turn.stop_reason || "?"}) —` : "";
      });
      d.error.textContent = run.error || "";
    }
    const last = state.runs[state.runs.length - 1];
    head.textContent = "";
    head.append(
      skEl("b", { text: "Run view" }),
      skEl("span", { class: "sk-badge sk-status-" + (last ? last.status : "idle"), text: last ? last.status : "idle" }),
      skEl("span", { class: "sk-meta", text: ` ${skPlural(state.runs.length, "run")} · ${skPlural(state.runs.reduce((n, r) => n + r.turns.length, 0), "turn")} · ${rvUsageText(state.usage)}` }),
    );
    root.dataset.status = last ? last.status : "idle";
    root.dataset.lastSeq = String(state.last_seq);
  }

  function renderQueue() {
    const q = model.get("queue") || { items: [] };
    const controls = model.get("controls");
    queueBox.textContent = "";
    const items = q.items || [];
    queueBox.append(skEl("div", { class: "sk-meta", text: `${q.active ? "active run " + q.active + " · " : ""}${skPlural(items.length, "queued message")}` }));
    if (items.length) {
      const ol = skEl("ol", { class: "skr-queue" });
      items.forEach((item, index) => {
        const li = skEl("li", {}, skEl("span", { class: "sk-badge", text: item.mode }), " ", item.text);
        if (controls) {
          const x = skEl("button", { class: "sk-btn sk-small", type: "button", title: "remove from the queue", text: "✕" });
          x.addEventListener("click", () => model.send({ type: "clear", index }));
          li.append(" ", x);
        }
        ol.append(li);
      });
      queueBox.append(ol);
    }
    if (controls) {
      const input = skEl("input", { class: "sk-input", type: "text", placeholder: "message for the run…" });
      const send = (type) => {
        if (!input.value.trim()) return;
        if (type === "steer") model.send({ type: "steer", text: input.value });
        else model.send({ type: "follow_up", text: input.value });
        input.value = "";
      };
      const steer = skEl("button", { class: "sk-btn", type: "button", text: "Steer" });
      steer.addEventListener("click", () => send("steer"));
      const follow = skEl("button", { class: "sk-btn", type: "button", text: "Follow up" });
      follow.addEventListener("click", () => send("follow_up"));
      const stop = skEl("button", { class: "sk-btn sk-danger", type: "button", text: "Interrupt", disabled: !q.active });
      stop.addEventListener("click", () => model.send({ type: "interrupt" }));
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") send(e.shiftKey ? "steer" : "follow_up");
      });
      queueBox.append(skEl("div", { class: "skr-controls" }, input, steer, follow, stop));
    }
  }

  function applyAll(events) {
    const atBottom = body.scrollHeight - body.scrollTop - body.clientHeight < 40;
    const hadRuns = state.runs.length > 0;
    for (const ev of events) {
      if (typeof ev._i === "number") {
        if (ev._i <= lastI) continue;
        lastI = ev._i;
      }
      rvApply(state, ev);
    }
    sync();
    // Follow the end of a run while it streams (unless the reader scrolled up); a replay,
    // or a run that has ended, opens at its start instead of hiding it above the fold.
    if (atBottom && hadRuns && state.runs.some((r) => r.status === "running")) body.scrollTop = body.scrollHeight;
    root.dataset.scroll = String(body.scrollTop);
  }

  function onMessage(msg) {
    if (!msg || typeof msg !== "object") return;
    if (msg.type === "reset") {
      ready = true;
      applyAll(msg.events || []);
      applyAll(early);
      early = [];
    } else if (msg.type === "events") {
      if (!ready) early.push(...(msg.events || []));
      else applyAll(msg.events || []);
    }
  }

  /** A bar clicked: say which message it produced, and show its turn (or tool) in the view. */
  function openCall(messageId, call) {
    model.set("selected_id", messageId);
    if (model.save_changes) model.save_changes();
    const d = doms.get(call.run_id);
    let target = null;
    if (d && call.kind === "tool") target = [...d.node.querySelectorAll(".sk-tool[data-tool]")].find((n) => n.dataset.tool === call.tool_call_id) || null;
    if (d && call.kind === "model") target = d.turnDoms[call.model_index] ? d.turnDoms[call.model_index].node : null;
    for (const node of root.querySelectorAll(".skr-picked")) node.classList.remove("skr-picked");
    if (target) {
      target.classList.add("skr-picked");
      target.scrollIntoView({ block: "nearest" });
    }
    root.dataset.selected = messageId;
  }

  function renderTimeline() {
    const data = model.get("_timeline") || { runs: [] };
    const runs = data.runs || [];
    tlBox.textContent = "";
    tlBox.style.display = runs.length ? "" : "none";
    if (!runs.length) return;
    for (const run of runs) {
      const calls = /** @type {SkTimelineCall[]} */ (run.calls);
      let k = 0;
      for (const c of calls) if (c.kind === "model") c.model_index = k++;
      for (const c of calls) c.run_id = run.run_id;
    }
    tlBox.append(skEl("summary", { class: "sk-meta", text: "timeline" }), skTimeline(data, openCall));
  }

  const onQueue = () => renderQueue();
  const onHeight = () => {
    body.style.maxHeight = (model.get("height") || 480) + "px";
  };
  model.on("msg:custom", onMessage);
  model.on("change:queue", onQueue);
  model.on("change:controls", onQueue);
  model.on("change:height", onHeight);
  model.on("change:_timeline", renderTimeline);
  onHeight();
  renderTimeline();
  sync();
  renderQueue();
  skHideSnapshot(model);
  model.send({ type: "hello", req: skNextReq() });
  return () => {
    model.off("msg:custom", onMessage);
    model.off("change:queue", onQueue);
    model.off("change:controls", onQueue);
    model.off("change:height", onHeight);
    model.off("change:_timeline", renderTimeline);
  };
}

/** In a page written by to_html: the stored events stand in for the kernel's reset. */
/**
 * @param {ViewRequest} msg
 * @param {SkRunState} state
 * @returns {ResetReply | null}
 */
function offline(msg, state) {
  if (msg.type === "hello") return { type: "reset", req: msg.req, events: (state._offline && state._offline.events) || [] };
  return null;
}

export default { render, offline };
