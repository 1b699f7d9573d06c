// The atoll dashboard: renders each snapshot the node streams
// (GET /api/events) and sends migrate and kill requests (POST /api/...).
// The token comes from the URL the node printed and is kept for the tab.
"use strict";

const token = new URLSearchParams(location.search).get("token") || sessionStorage.getItem("atoll-token") || "";
sessionStorage.setItem("atoll-token", token);

const HISTORY = 120; // samples of each kernel's load the chart keeps
const COLORS = ["#0b6e99", "#d9822b", "#2e7d32", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#b7950b"];
const history = new Map(); // kernel -> [busy, ...]
const chosen = new Map(); // pid -> kernel the user picked in its row
let latest = null;

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function td(value, cls = "") {
  return el("td", { class: cls + (value === 0 || value === "0" ? " zero" : "") }, value);
}

const rate = (x) => (x >= 100 ? Math.round(x).toLocaleString() : x.toFixed(1));
const percent = (x) => `${Math.round(x * 100)}%`;

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function bar(share) {
  const w = Math.min(100, Math.round(share * 100));
  return el("span", {}, el("span", { class: "bar" }, el("span", { style: `width:${w}%` })), percent(share));
}

function color(kernel) {
  const kernels = latest ? latest.kernels.map((k) => k.kernel) : [];
  return COLORS[Math.max(0, kernels.indexOf(kernel)) % COLORS.length];
}

function show(text, isError = false) {
  const m = $("#message");
  m.textContent = text;
  m.className = isError ? "error" : "";
  m.hidden = false;
}

async function post(path, body) {
  const r = await fetch(`/api/${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const answer = await r.json();
  if (!r.ok) throw new Error(answer.error || r.statusText);
  return answer;
}

async function migrate(pid) {
  const to = chosen.get(pid);
  const mode = $("#mode").value || undefined;
  show(`moving ${pid} to ${to}...`);
  try {
    const r = await post("migrate", { pid, to, mode });
    show(`${pid} moved ${r.from} \u2192 ${r.to} (${r.mode}): downtime ${r.downtime_us} \u00b5s, total ${r.total_us} \u00b5s`);
  } catch (e) {
    show(`cannot move ${pid}: ${e.message}`, true);
  }
}

async function kill(pid) {
  try {
    await post("kill", { pid });
    show(`killed ${pid}`);
  } catch (e) {
    show(`cannot kill ${pid}: ${e.message}`, true);
  }
}

function renderChart(s) {
  for (const k of s.kernels) {
    const h = history.get(k.kernel) || [];
    h.push(k.busy);
    if (h.length > HISTORY) h.shift();
    history.set(k.kernel, h);
  }
  const W = 600, H = 160, L = 34, B = 16;
  const top = Math.max(1, ...[...history.values()].flat());
  const x = (i) => L + ((W - L) * i) / (HISTORY - 1);
  const y = (v) => (H - B) - ((H - B - 6) * v) / top;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(svg.namespaceURI, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  for (const v of [0, top / 2, top]) {
    add("line", { class: "grid", x1: L, x2: W, y1: y(v), y2: y(v) });
    add("text", { x: 0, y: y(v) + 3 }, percent(v));
  }
  add("text", { x: L, y: H - 2 }, `busy, last ${HISTORY} samples`);
  for (const [kernel, h] of history) {
    if (!s.kernels.some((k) => k.kernel === kernel)) continue;
    const start = HISTORY - h.length;
    const points = h.map((v, i) => `${x(start + i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    add("polyline", { points, stroke: color(kernel), "data-kernel": kernel });
  }
  $("#load-chart").replaceChildren(svg);
}

function renderKernels(s) {
  $("#kernels tbody").replaceChildren(...s.kernels.map((k) => el("tr", { "data-kernel": k.kernel },
    el("td", {}, el("span", { class: "legend", style: `background:${color(k.kernel)}` }), k.kernel),
    el("td", {}, bar(k.busy)), td(k.runnable), td(k.processes), td(k.dormant), td(bytes(k.memory_bytes)),
    td(rate(k.local_per_s)), td(rate(k.out_per_s)), td(rate(k.in_per_s)))));
}

function renderFlows(s) {
  const kernels = s.kernels.map((k) => k.kernel);
  const per = new Map(s.flows.map((f) => [`${f.from}>${f.to}`, f.per_s]));
  $("#flows thead").replaceChildren(el("tr", {}, el("th", {}, "from \\ to"), ...kernels.map((k) => el("th", {}, k))));
  $("#flows tbody").replaceChildren(...kernels.map((from) => el("tr", { "data-from": from },
    el("th", { class: "text" }, from),
    ...kernels.map((to) => {
      const local = from === to ? s.kernels.find((k) => k.kernel === from).local_per_s : 0;
      const v = from === to ? local : per.get(`${from}>${to}`) || 0;
      return el("td", { "data-to": to, class: v ? "" : "zero", title: from === to ? "within the kernel" : "" }, rate(v));
    }))));
}

// Process rows are kept and updated in place, not redrawn: a click whose
// press and release straddle a snapshot must land on the same button, and
// a kernel picked in a row must stay picked.
function processRow(pid) {
  const select = el("select", { class: "move-to", onchange: (e) => chosen.set(pid, e.target.value) });
  const cells = ["pid text", "name text", "kernel text", "state text", "domain text", "cpu", "memory", "moves"]
    .map((cls) => el("td", { class: cls }));
  return el("tr", { "data-pid": pid }, ...cells,
    el("td", {}, select, " ",
      el("button", { class: "migrate", onclick: () => migrate(pid) }, "migrate"), " ",
      el("button", { class: "kill", onclick: () => kill(pid) }, "kill")));
}

function updateProcessRow(tr, p, kernels) {
  const set = (cls, value) => { tr.querySelector(`td.${cls}`).textContent = value; };
  set("pid", p.pid);
  set("name", p.name);
  set("kernel", p.kernel);
  set("state", p.dormant ? `${p.state} (dormant)` : p.state);
  set("domain", p.domain || "-");
  set("cpu", percent(p.cpu));
  set("memory", bytes(p.memory_bytes));
  set("moves", p.moves);
  const others = kernels.filter((k) => k !== p.kernel);
  if (!others.includes(chosen.get(p.pid))) chosen.set(p.pid, others[0]);
  const select = tr.querySelector("select");
  if (select.dataset.options !== others.join()) {
    select.replaceChildren(...others.map((k) => el("option", { value: k }, k)));
    select.dataset.options = others.join();
  }
  select.value = chosen.get(p.pid) || "";
  tr.querySelector("button.migrate").disabled = !others.length;
}

function renderProcesses(s) {
  const kernels = s.kernels.map((k) => k.kernel);
  for (const n of s.nodes) {
    if (!n.up || n.member.node === s.node) continue;
    for (let i = 0; i < n.member.kernels; i++) kernels.push(`${n.member.node}.${i}`);
  }
  $("#process-count").textContent = s.processes_total > s.processes.length
    ? `the ${s.processes.length} busiest of ${s.processes_total}` : `${s.processes_total}`;
  const tbody = $("#processes tbody");
  const rows = new Map([...tbody.children].map((tr) => [tr.dataset.pid, tr]));
  s.processes.forEach((p, i) => {
    const tr = rows.get(p.pid) || processRow(p.pid);
    rows.delete(p.pid);
    updateProcessRow(tr, p, kernels);
    if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
  });
  for (const [pid, tr] of rows) {
    tr.remove();
    chosen.delete(pid);
  }
}

function renderMigrations(s) {
  if (!s.migrations.length) {
    $("#migrations tbody").replaceChildren(el("tr", {}, el("td", { class: "none", colspan: 10 }, "none since the dashboard started")));
    return;
  }
  $("#migrations tbody").replaceChildren(...s.migrations.map((m) => el("tr", { "data-pid": m.report.pid },
    td(new Date(m.seen_ms).toLocaleTimeString(), "text"), td(m.report.pid, "text"), td(m.name, "text"),
    td(m.report.from, "text"), td(m.report.to, "text"), td(m.report.mode, "text"),
    td(`${m.report.downtime_us.toLocaleString()} \u00b5s`), td(`${m.report.total_us.toLocaleString()} \u00b5s`),
    td(bytes(m.report.rounds.reduce((n, r) => n + r.bytes, 0))),
    td(m.balanced ? "balancer" : "asked", "text"))));
}

function renderDomains(s) {
  $("#domains tbody").replaceChildren(...s.domains.map((d) => el("tr", { "data-domain": d.name },
    td(d.id), td(d.name, "text"), td(d.processes), td(d.max_processes ?? "-"))));
}

function render(s) {
  latest = s;
  const up = s.nodes.filter((n) => n.up).length;
  $("#where").textContent = `node ${s.node}, ${s.kernels.length} kernels` + (s.nodes.length ? `, ${up} of ${s.nodes.length} nodes up` : "");
  renderChart(s);
  renderKernels(s);
  renderFlows(s);
  renderProcesses(s);
  renderMigrations(s);
  renderDomains(s);
}

function connect() {
  const events = new EventSource(`/api/events?token=${encodeURIComponent(token)}`);
  events.addEventListener("snapshot", (e) => {
    $("#status").className = "up";
    $("#status").textContent = "live";
    render(JSON.parse(e.data));
  });
  events.onerror = () => {
    $("#status").className = "down";
    $("#status").textContent = token ? "disconnected: retrying" : "no token in the URL";
  };
}

connect();
