// The monitor's page: one static document; its script polls status.json every 2 s and logs.json with the chosen
// filters, and draws the curves as SVG. Every text from the run is set as text (textContent), never as markup:
// task names, verdict reasons and log lines are untrusted.
#include "monitor/monitor_view.h"

namespace crucible::monitor {

std::string monitor_page() {
  return R"HTML(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Crucible monitor</title>
<style>
body{font-family:sans-serif;margin:18px;max-width:1200px}
table{border-collapse:collapse;margin:6px 0 16px}th,td{border:1px solid #ddd;padding:2px 8px;font-size:13px}
th{background:#f3f3f3}.grid{display:flex;flex-wrap:wrap;gap:18px}.muted{color:#777;font-size:12px}
#log td{font-family:monospace;font-size:12px;white-space:pre-wrap}.error td,.critical td{background:#fde}
.warn td{background:#fff6d6}
</style></head><body>
<h1>Crucible monitor: <span id="experiment"></span></h1>
<p id="progress"></p>
<div class="grid">
 <div><h2>Actors</h2><table id="actors"><thead><tr><th>actor</th><th>state</th></tr></thead><tbody></tbody></table></div>
 <div><h2>Queues</h2><table id="queues"><tbody></tbody></table></div>
 <div><h2>Units by phase</h2><table id="phases"><tbody></tbody></table></div>
</div>
<h2>Curves so far</h2><div id="curves" class="grid"></div>
<h2>Recent verdicts</h2>
<table id="recent"><thead><tr><th>candidate</th><th>unit</th><th>task</th><th>status</th><th>reason</th><th>speedup</th><th>reward</th></tr></thead><tbody></tbody></table>
<h2>Log</h2>
<p>actor <select id="f-actor"><option value="">all</option></select>
 node <select id="f-node"><option value="">all</option></select>
 level <select id="f-level"><option>trace</option><option>debug</option><option selected>info</option><option>warn</option><option>error</option></select>
 <span class="muted" id="updated"></span></p>
<table id="log"><thead><tr><th>time</th><th>level</th><th>node</th><th>actor</th><th>message</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
function url(path, params) {
  const q = new URLSearchParams(params || {});
  if (token) q.set("token", token);
  const s = q.toString();
  return path + (s ? "?" + s : "");
}
function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); return td; }
function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const r of rows) { const tr = document.createElement("tr"); for (const v of r) cell(tr, v); body.appendChild(tr); }
  return body;
}
function fmt(v, digits) { return v === null || v === undefined ? "" : Number(v).toFixed(digits === undefined ? 3 : digits); }
function duration(s) { if (s === null) return "unknown"; s = Math.round(s); return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s"; }
const NS = "http://www.w3.org/2000/svg";
function chart(curve) {
  const w = 360, h = 180, l = 40, b = 20, pts = curve.points;
  const box = document.createElement("div");
  const title = document.createElement("div"); title.textContent = curve.title; box.appendChild(title);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("data-curve", curve.id);
  const frame = document.createElementNS(NS, "rect");
  frame.setAttribute("x", l); frame.setAttribute("y", 4); frame.setAttribute("width", w - l - 4); frame.setAttribute("height", h - b - 4);
  frame.setAttribute("fill", "#fafafa"); frame.setAttribute("stroke", "#ccc"); svg.appendChild(frame);
  if (pts.length) {
    const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(0, ...ys), y1 = Math.max(...ys, y0 + 1e-9);
    const X = x => l + (x - x0) / (x1 - x0) * (w - l - 4), Y = y => 4 + (1 - (y - y0) / (y1 - y0)) * (h - b - 4);
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.map(p => X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#1f77b4"); line.setAttribute("stroke-width", "2");
    svg.appendChild(line);
    for (const [y, v] of [[y0, y0], [y1, y1]]) {
      const t = document.createElementNS(NS, "text"); t.setAttribute("x", l - 3); t.setAttribute("y", Y(y) + 4);
      t.setAttribute("text-anchor", "end"); t.setAttribute("font-size", "10"); t.textContent = fmt(v, 2); svg.appendChild(t);
    }
    const t = document.createElementNS(NS, "text"); t.setAttribute("x", l); t.setAttribute("y", h - 4);
    t.setAttribute("font-size", "10"); t.textContent = "steps " + x0 + " to " + Math.max(...xs); svg.appendChild(t);
  }
  box.appendChild(svg);
  return box;
}
function setOptions(id, values) {
  const sel = document.getElementById(id), keep = sel.value;
  const have = new Set([...sel.options].map(o => o.value));
  for (const v of values) if (!have.has(v)) { const o = document.createElement("option"); o.value = v; o.textContent = v; sel.appendChild(o); }
  sel.value = keep;
}
async function refresh() {
  try {
    const s = await (await fetch(url("status.json"))).json();
    const live = s.live;
    document.getElementById("experiment").textContent = live.experiment + " (" + live.mode + ")";
    document.getElementById("progress").textContent =
      "seed " + live.seed + " (" + (live.seed_index + 1) + " of " + live.seeds + "): " + live.units_committed + " of " +
      live.units_total + " units committed, latest " + live.latest_unit + "; " + live.candidates_done +
      " candidates done, " + live.candidates_in_flight + " in flight; elapsed " + duration(s.elapsed_seconds) +
      ", ETA " + (live.finished ? "finished" : duration(s.eta_seconds));
    fill("actors", Object.entries(live.actors));
    fill("queues", [["compile queue", live.compile_queue], ["evaluation queue", live.evaluation_queue],
                    ["evaluators idle", live.evaluators_idle]]);
    fill("phases", Object.entries(live.units_by_phase));
    const curves = document.getElementById("curves");
    curves.replaceChildren(...s.curves.map(chart));
    fill("recent", s.recent.map(r => [r.id, r.unit, r.task, r.status, r.reason, fmt(r.speedup), fmt(r.reward)]));
    const params = {};
    for (const k of ["actor", "node", "level"]) { const v = document.getElementById("f-" + k).value; if (v) params[k] = v; }
    const logs = await (await fetch(url("logs.json", params))).json();
    setOptions("f-actor", logs.actors); setOptions("f-node", logs.nodes);
    const newest = logs.entries.slice().reverse();  // the newest line on top
    const body = fill("log", newest.map(e => [e.time, e.level, e.node, e.actor, e.text]));
    [...body.children].forEach((tr, i) => tr.className = newest[i].level);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "the run is not answering (" + e + ")";
  }
}
for (const k of ["actor", "node", "level"]) document.getElementById("f-" + k).addEventListener("change", refresh);
// The next refresh is asked for when this one is done: on a large run requests never pile up.
async function loop() { await refresh(); setTimeout(loop, 2000); }
loop();
</script></body></html>
)HTML";
}

}  // namespace crucible::monitor
