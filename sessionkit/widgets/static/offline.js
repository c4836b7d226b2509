// @ts-check
// Runs a sessionkit view in a page written by to_html(): no kernel, no network.
// The page embeds the view's module and data (common.js is prepended to this file);
// skLocalModel stands in for the widget model and answers the view's requests from the data.
const payload = JSON.parse(document.getElementById("sk-payload").textContent);
const url = URL.createObjectURL(new Blob([payload.esm], { type: "text/javascript" }));
import(url).then((m) => {
  const mod = m.default;
  const model = skLocalModel(payload.state, mod, (msg, state) => (mod.offline ? mod.offline(msg, state) : null));
  const el = document.getElementById("sk-view");
  el.textContent = "";
  if (mod.initialize) mod.initialize({ model });
  mod.render({ model, el });
  el.dataset.ready = "1";
});
