// Runs a sessionkit view in a page written by to_html(): no kernel, no network.
// The page embeds the view's module and data; this stands in for the widget
// model (get / set / on / send) and answers the view's requests from the data.
const payload = JSON.parse(document.getElementById("sk-payload").textContent);
const state = payload.state;
const handlers = new Map();
function emit(name, ...args) {
  for (const fn of handlers.get(name) || []) fn(...args);
}
let mod = null;
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
      const reply = mod && mod.offline ? mod.offline(msg, state) : null;
      if (reply) emit("msg:custom", reply, []);
    }, 0);
  },
};
const url = URL.createObjectURL(new Blob([payload.esm], { type: "text/javascript" }));
import(url).then((m) => {
  mod = m.default;
  const el = document.getElementById("sk-view");
  el.textContent = "";
  if (mod.initialize) mod.initialize({ model });
  mod.render({ model, el });
  el.dataset.ready = "1";
});
