// The mcp-host operator console: views drawn from the host's JSON endpoints, a playground that
// sends MCP requests through the host. No dependencies; every value is inserted as text.
"use strict";

const BASE = location.pathname.replace(/\/(login)?$/, "").replace(/\/$/, "");
let session = null;
let refresh = null;
let live = null;

// ---------------------------------------------------------------------------------------------
// Helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

async function api(path) {
  const resp = await fetch(`${BASE}/api/${path}`, { credentials: "same-origin" });
  if (resp.status === 401) {
    location.href = `${BASE}/login`;
    throw new Error("log in first");
  }
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

async function post(path, body) {
  const resp = await fetch(`${BASE}/api/${path}`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Console-Csrf": session ? session.csrf : "" },
    body: JSON.stringify(body || {}),
  });
  if (resp.status === 401 && path !== "login") {
    location.href = `${BASE}/login`;
    throw new Error("log in first");
  }
  const answer = await resp.json();
  if (!resp.ok) throw new Error(answer.error || resp.statusText);
  return answer;
}

function rpc(method, params, who) {
  return post("rpc", { method, params, agent: who && who.agent, as: who && who.as });
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || text.replace(/[^a-z]+/gi, "-")}` }, text);
}

function table(head, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function age(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes.flat());
}

function failure(e) {
  return el("p", { class: "error" }, String(e.message || e));
}

// ---------------------------------------------------------------------------------------------
// Overview

function chart(title, points, series, unit) {
  const w = 460, h = 150, pad = 30;
  const svg = svgEl("svg", { viewBox: `0 0 ${w} ${h}`, class: "chart", role: "img" });
  const values = points.flatMap((p) => series.map((s) => p[s.key])).filter((v) => v !== null && v !== undefined);
  const max = Math.max(unit === "%" ? 0.01 : 1, ...values);
  svg.append(svgEl("line", { x1: pad, y1: h - pad, x2: w - 5, y2: h - pad, class: "axis" }));
  svg.append(svgEl("line", { x1: pad, y1: 5, x2: pad, y2: h - pad, class: "axis" }));
  const top = svgEl("text", { x: 2, y: 14, class: "tick" });
  top.textContent = unit === "%" ? `${Math.round(max * 100)}%` : `${+max.toPrecision(3)}`;
  svg.append(top);
  const n = Math.max(points.length - 1, 1);
  for (const s of series) {
    const coords = points
      .map((p, i) => [p[s.key], i])
      .filter(([v]) => v !== null && v !== undefined)
      .map(([v, i]) => `${pad + (i / n) * (w - pad - 5)},${h - pad - (v / max) * (h - pad - 5)}`);
    if (coords.length) svg.append(svgEl("polyline", { points: coords.join(" "), class: `line ${s.key}` }));
    if (coords.length < 40) {
      for (const c of coords) {
        const [x, y] = c.split(",");
        svg.append(svgEl("circle", { cx: x, cy: y, r: 2.5, class: `dot ${s.key}` }));
      }
    }
  }
  const legend = el("div", { class: "legend" }, series.map((s) => el("span", { class: `key ${s.key}` }, s.label)));
  return el("div", { class: "card chart-card", "data-chart": title }, el("h3", {}, title), svg, legend);
}

async function overview() {
  const o = await api("overview");
  const last = o.history[o.history.length - 1] || {};
  const stat = (label, value, cls) => el("div", { class: `stat ${cls || ""} ${String(value).length > 14 ? "long" : ""}`, "data-stat": label }, el("div", { class: "value" }, value), el("div", { class: "label" }, label));
  show(
    el("h2", {}, "Overview"),
    el("div", { class: "stats", id: "stats" },
      stat("health", o.storeReachable ? "ok" : "store unreachable", o.storeReachable ? "ok" : "bad"),
      stat("replica", o.replica),
      stat("store", o.store),
      stat("uptime", age(o.uptimeSecs * 1000)),
      stat("tools", o.tools), stat("resources", o.resources), stat("prompts", o.prompts),
      stat("plugins", o.plugins),
      stat("plugins quarantined", o.quarantined, o.quarantined ? "bad" : ""),
      stat("definitions held by pins", o.held, o.held ? "bad" : ""),
      stat("calls", o.totals.calls),
      stat("calls/s", (last.rate || 0).toFixed(1)),
    ),
    el("div", { class: "charts" },
      chart("Calls per second", o.history, [{ key: "rate", label: "calls/s" }], ""),
      chart("Error rate", o.history, [{ key: "errors", label: "failed share" }], "%"),
      chart("Latency (ms)", o.history, [{ key: "p50", label: "p50" }, { key: "p99", label: "p99" }], "ms"),
    ),
    el("p", { class: "muted" }, `One point every ${o.stepSecs} s over the last ${age(o.history.length * o.stepSecs * 1000)}; latency is the upper bound of its histogram bucket; host ${o.version}.`),
    o.upstreams.length
      ? el("div", { class: "card", id: "upstreams" }, el("h3", {}, "Upstream servers"),
        table(["upstream", "state", "detail"], o.upstreams.map((u) => el("tr", { "data-upstream": u.name, "data-state": u.state },
          el("td", {}, u.name), el("td", {}, badge(u.state, connectionClass(u.state))), el("td", { class: "detail" }, u.detail)))))
      : null,
  );
  refresh = setTimeout(route, o.stepSecs * 1000);
}

// ---------------------------------------------------------------------------------------------
// Sources

function connectionClass(state) {
  return state === "ready" ? "ok" : (state === "quarantined" || state === "failed") ? "bad" : "warn";
}

function statusOf(e) {
  const detail = e.detail || "";
  return el("td", { class: "status" }, badge(e.status, `status-${e.status.replace(/_/g, "-")}`), detail ? el("div", { class: "detail" }, detail) : null);
}

function grants(e) {
  if (!e.permissions) return e.isolation;
  const p = e.permissions;
  const connect = p.connect === "any" ? "any" : (Array.isArray(p.connect) ? p.connect.join(", ") || "none" : JSON.stringify(p.connect));
  return el("div", {}, e.isolation,
    el("div", { class: "detail" }, `read: ${(p.read || []).join(", ") || "none"}`),
    el("div", { class: "detail" }, `write: ${(p.write || []).join(", ") || "none"}`),
    el("div", { class: "detail" }, `connect: ${connect}; exec: ${p.exec ? "yes" : "no"}`));
}

// What a definition served under overrides was at its source, beside what clients are shown.
function exposedAs(e) {
  if (!e.original) return null;
  const x = e.exposed;
  const lines = [e.original === e.tool ? "overridden" : `source name: ${e.original}`];
  const first = (d) => ((d && d.description) || "").split("\n")[0];
  if (x && first(x.source) !== first(x.served)) lines.push(`source description: ${first(x.source)}`);
  if (x && x.agents) for (const [agent, d] of Object.entries(x.agents)) lines.push(`agent ${agent} sees: ${d.name}`);
  return el("div", { class: "detail override-source" }, lines.join("; "));
}

async function sources() {
  const s = await api("sources");
  const overrides = [];
  for (const d of s.dirs) for (const e of d.entries) if (e.status === "overridden_by") overrides.push([d, e]);
  const map = overrides.length
    ? table(["name", "overridden in", "served from"], overrides.map(([d, e]) =>
        el("tr", { class: "override" }, el("td", {}, e.tool), el("td", {}, `#${d.index} ${e.file}`), el("td", {}, e.detail || ""))), { id: "override-map" })
    : el("p", { class: "muted" }, "No definition is overridden.");
  show(
    el("h2", {}, "Sources, in precedence order"),
    el("div", { class: "card" }, el("h3", {}, "Override map"), map),
    s.dirs.map((d) => el("section", { class: `card source${d.upstream ? " upstream" : ""}`, "data-dir": d.index },
      el("h3", {}, `#${d.index} `, el("code", {}, d.path), " ", d.upstream ? badge("upstream server", "muted") : null, " ", badge(`pinning ${d.pinning}`, "muted")),
      d.connection ? el("p", { class: "connection", "data-state": d.connection.state }, badge(d.connection.state, connectionClass(d.connection.state)), " ", d.connection.detail) : null,
      d.server ? el("pre", { class: "settings" }, pretty(d.server)) : null,
      d.entries.length
        ? table(["name", "kind", "status", "plugin", "service", "signer", "isolation"], d.entries.map((e) =>
            el("tr", { "data-name": e.tool, "data-status": e.status },
              el("td", {}, e.tool, exposedAs(e)), el("td", {}, e.kind || "tool"), statusOf(e),
              el("td", {}, e.plugin || "-", el("div", { class: "detail" }, e.file)),
              el("td", {}, e.service || "-"), el("td", {}, e.signer || "-"), el("td", {}, grants(e)))))
        : el("p", { class: "muted" }, "Nothing found here."))),
  );
}

// ---------------------------------------------------------------------------------------------
// Agents

function whoPicker(onchange) {
  const agents = el("select", { id: "who-agent" }, el("option", { value: "" }, session.boundAgent ? session.boundAgent : "(no agent)"),
    session.agents.filter((a) => a !== session.boundAgent).map((a) => el("option", { value: a }, a)));
  if (session.boundAgent) agents.value = "";
  const users = el("select", { id: "who-user" }, el("option", { value: "" }, session.user ? `${session.user} (you)` : "anonymous (you)"),
    session.users.filter((u) => u !== session.user).map((u) => el("option", { value: u }, u)));
  const who = () => ({ agent: agents.value || session.boundAgent || undefined, as: users.value || undefined });
  agents.addEventListener("change", () => onchange(who()));
  users.addEventListener("change", () => onchange(who()));
  const node = el("div", { class: "who" }, el("label", {}, "Agent ", agents), session.users.length ? el("label", {}, "Call as ", users) : null);
  return { node, who };
}

async function agentsView() {
  const a = await api("agents");
  const out = el("div", { id: "agent-view" });
  const select = el("select", { id: "agent" }, el("option", { value: "" }, "(no agent: the main endpoint)"), a.agents.map((x) => el("option", { value: x.name }, x.name)));
  const render = async () => {
    const name = select.value;
    const settings = (a.agents.find((x) => x.name === name) || {}).settings;
    out.replaceChildren(el("p", { class: "muted" }, "Loading…"));
    try {
      const r = await rpc("tools/list", {}, { agent: name || undefined });
      if (r.response.error) { out.replaceChildren(failure(r.response.error)); return; }
      const tools = r.response.result.tools;
      const parts = [
        settings ? el("pre", { class: "settings" }, pretty(settings)) : null,
        el("p", {}, `${tools.length} tools listed for ${name || "the main endpoint"}:`),
        table(["tool", "description"], tools.map((t) => el("tr", { "data-tool": t.name }, el("td", {}, t.name), el("td", {}, (t.description || "").split("\n")[0]))), { id: "agent-tools" }),
      ];
      if (tools.some((t) => t.name === "search_tools")) parts.push(searchBox(name));
      out.replaceChildren(...parts);
    } catch (e) { out.replaceChildren(failure(e)); }
  };
  select.addEventListener("change", render);
  show(el("h2", {}, "Agents"), el("div", { class: "card" }, el("label", {}, "What does this agent see? ", select), out));
  await render();
}

function searchBox(agent) {
  const input = el("input", { id: "search-query", placeholder: "what the agent looks for, e.g. convert a time zone" });
  const results = el("div", { id: "search-results" });
  const run = async (ev) => {
    ev.preventDefault();
    try {
      const r = await rpc("tools/call", { name: "search_tools", arguments: { query: input.value } }, { agent: agent || undefined });
      results.replaceChildren(resultView(r.response));
    } catch (e) { results.replaceChildren(failure(e)); }
  };
  return el("form", { class: "search", onsubmit: run }, el("h3", {}, "Try search_tools"), input, el("button", { type: "submit" }, "Search"), results);
}

// ---------------------------------------------------------------------------------------------
// Trust

function shown(v) {
  return v === null || v === undefined ? "(absent)" : (typeof v === "string" ? v : JSON.stringify(v));
}

async function trust() {
  const t = await api("trust");
  const action = (label, path, body) => session.admin
    ? el("button", { type: "button", class: "action", onclick: async (ev) => {
        ev.target.disabled = true;
        try { await post(path, body); route(); } catch (e) { ev.target.after(failure(e)); }
      } }, label)
    : el("span", { class: "muted" }, "(admins only)");
  show(
    el("h2", {}, "Trust"),
    el("p", { class: "muted" }, `${t.pinned} definitions pinned in `, el("code", {}, t.lockFile)),
    el("div", { class: "card", id: "drifts" }, el("h3", {}, "Definitions not as pinned"),
      t.drifts.length ? t.drifts.map((d) => el("div", { class: "drift", "data-name": d.name },
        el("h4", {}, `${d.section} ${d.name} `, badge(d.held ? "held" : "served (warn)", d.held ? "bad" : "warn"), " ", badge(d.change, "muted")),
        el("p", { class: "detail" }, `plugin ${d.plugin || "?"} · ${d.file}`),
        d.fields.length ? table(["field", "pinned", "now"], d.fields.map((f) =>
          el("tr", {}, el("td", {}, el("code", {}, f.path)), el("td", { class: "old" }, shown(f.old)), el("td", { class: "new" }, shown(f.new)))), { class: "diff" })
          : el("pre", {}, pretty(d.definition)),
        action("Accept this definition", "pins/accept", { section: d.section, name: d.name, sha256: d.sha256 })))
        : el("p", { class: "muted" }, "Everything served is as pinned.")),
    el("div", { class: "card", id: "quarantined" }, el("h3", {}, "Quarantined plugins"),
      t.quarantined.length ? table(["plugin", "file", "reason", ""], t.quarantined.map((q) => el("tr", { "data-file": q.file },
        el("td", {}, q.plugin || "-"), el("td", {}, q.file), el("td", {}, q.reason), el("td", {}, action("Retry all", "quarantine/retry", {})))))
        : el("p", { class: "muted" }, "No plugin is quarantined.")),
  );
}

// ---------------------------------------------------------------------------------------------
// Tasks

async function tasks() {
  const t = await api("tasks");
  const cancel = (task) => (!task.terminal && session.admin)
    ? el("button", { type: "button", onclick: async (ev) => {
        ev.target.disabled = true;
        try { await post("tasks/cancel", { id: task.id }); route(); } catch (e) { ev.target.after(failure(e)); }
      } }, "Cancel")
    : null;
  show(el("h2", {}, "Tasks"), t.all ? null : el("p", { class: "muted" }, "Your own tasks (admins see everyone's)."),
    t.tasks.length ? table(["task", "tool", "status", "owner", "agent", "age", ""], t.tasks.map((x) => el("tr", { "data-task": x.id },
      el("td", {}, el("code", {}, x.id.slice(0, 8))), el("td", {}, x.tool), el("td", {}, badge(x.status), x.statusMessage ? el("div", { class: "detail" }, x.statusMessage) : null),
      el("td", {}, x.owner), el("td", {}, x.agent || "-"), el("td", {}, age(t.now - x.createdMs)), el("td", {}, cancel(x)))), { id: "tasks" })
      : el("p", { class: "muted" }, "No tasks."));
  refresh = setTimeout(route, 5000);
}

// ---------------------------------------------------------------------------------------------
// Approvals: calls a policy rule (`approver: console`) holds until an admin answers

async function approvals() {
  const a = await api("approvals");
  const answer = (x, approve) => el("button", { type: "button", class: approve ? "approve" : "refuse", onclick: async (ev) => {
    ev.target.disabled = true;
    try { await post("approvals/answer", { id: x.id, approve }); route(); } catch (e) { ev.target.after(failure(e)); }
  } }, approve ? "Approve" : "Refuse");
  const shown = (x) => Object.keys(x.shown || {}).length
    ? el("div", {}, ...Object.entries(x.shown).map(([k, v]) => el("div", { class: "detail" }, el("code", {}, k), ": ", JSON.stringify(v))))
    : el("span", { class: "muted" }, "-");
  show(el("h2", {}, "Approvals"),
    el("p", { class: "muted" }, a.canAnswer
      ? "Calls waiting for an admin's yes (policy rules with approver: console), on this replica. A call not answered in time is refused."
      : "Calls waiting for an admin's yes, on this replica; only the users in console.admins may answer."),
    a.approvals.length ? table(["kind", "name", "rule", "arguments shown", "caller", "agent", "waiting", "time left", ""], a.approvals.map((x) => el("tr", { "data-approval": x.id },
      el("td", {}, x.kind), el("td", {}, el("code", {}, x.name)), el("td", {}, x.rule), el("td", {}, shown(x)),
      el("td", {}, x.user || "anonymous"), el("td", {}, x.agent || "-"), el("td", {}, age(a.now - x.askedMs)),
      el("td", {}, age(Math.max(0, x.expiresMs - a.now))),
      el("td", {}, a.canAnswer ? answer(x, true) : null, " ", a.canAnswer ? answer(x, false) : null))), { id: "approvals" })
      : el("p", { class: "muted", id: "no-approvals" }, "No call is waiting for approval."));
  refresh = setTimeout(route, 2000);
}

// ---------------------------------------------------------------------------------------------
// Connections: users' accounts at upstreams with server.auth (never a token)

async function connections() {
  const c = await api("connections");
  const when = (ms) => (ms ? new Date(ms).toISOString().replace(".000", "") : "-");
  const disconnect = (x) => el("button", { type: "button", onclick: async (ev) => {
    ev.target.disabled = true;
    try { await post("connections/disconnect", { upstream: x.upstream, principal: x.principal }); route(); } catch (e) { ev.target.after(failure(e)); }
  } }, "Disconnect");
  show(el("h2", {}, "Connections"),
    el("p", { class: "muted" }, c.all ? "Who is connected where (every user)." : "Your accounts at upstream servers."),
    c.upstreams.length ? el("p", {}, "Connect: ", ...c.upstreams.map((u) => el("a", { href: u.connect, class: "connect" }, u.name, " "))) : null,
    c.connections.length ? table(["user", "upstream", "authorization server", "scopes", "expires", "last used", ""], c.connections.map((x) => el("tr", { "data-connection": `${x.principal}@${x.upstream}` },
      el("td", {}, x.principal), el("td", {}, x.upstream), el("td", {}, x.issuer), el("td", {}, (x.scopes || []).join(" ")),
      el("td", {}, when(x.expiresMs)), el("td", {}, when(x.lastUsedMs)), el("td", {}, disconnect(x)))), { id: "connections" })
      : el("p", { class: "muted", id: "no-connections" }, "No connection."));
}

// ---------------------------------------------------------------------------------------------
// Live calls

function calls() {
  const body = el("tbody", {});
  const state = el("p", { class: "muted", id: "live-state" }, "Connecting…");
  show(el("h2", {}, "Live calls"), state,
    el("table", { id: "live" }, el("thead", {}, el("tr", {}, ["time", "tool / action", "caller", "agent", "duration", "outcome"].map((h) => el("th", {}, h)))), body));
  live = new EventSource(`${BASE}/api/calls`);
  live.onopen = () => { state.textContent = "Watching: every call and console action from now on (never argument values)."; };
  live.onerror = () => { state.textContent = "Disconnected; retrying…"; };
  live.onmessage = (m) => {
    const r = JSON.parse(m.data);
    const row = el("tr", { class: `outcome-${r.outcome}`, "data-tool": r.tool || r.action },
      el("td", {}, (r.time || "").replace("T", " ").slice(0, 23)),
      el("td", {}, r.tool || r.action, r.target ? el("div", { class: "detail" }, r.target) : null),
      el("td", {}, r.caller || "-"), el("td", {}, r.agent || "-"),
      el("td", {}, r.duration_ms !== undefined ? `${r.duration_ms.toFixed(2)} ms` : ""),
      el("td", {}, badge(r.outcome), r.policy ? el("div", { class: "detail" }, `policy: ${r.policy} (${r.policy_rule})`) : null));
    body.prepend(row);
    while (body.children.length > 200) body.lastChild.remove();
  };
}

// ---------------------------------------------------------------------------------------------
// Playground: forms from JSON Schemas

function typeOf(schema) {
  let t = schema.type;
  if (Array.isArray(t)) t = t.find((x) => x !== "null");
  if (!t && schema.enum) t = "enum";
  if (!t && schema.properties) t = "object";
  if (!t && schema.items) t = "array";
  if (schema.enum) return "enum";
  return t || "json";
}

// `schema` with local references (`#/$defs/...`) resolved against `root`, an `allOf` of one
// schema merged in, and an optional value's `anyOf`/`oneOf` [X, null] read as X.
function resolve(schema, root, depth) {
  schema = schema || {};
  if (depth > 8) return schema;
  for (let i = 0; i < 8 && typeof schema.$ref === "string" && schema.$ref.startsWith("#/"); i++) {
    const target = schema.$ref.slice(2).split("/").reduce((node, key) =>
      node && node[key.replace(/~1/g, "/").replace(/~0/g, "~")], root);
    const { $ref, ...rest } = schema;
    schema = { ...(target || {}), ...rest };
  }
  const branches = schema.anyOf || schema.oneOf;
  if (Array.isArray(branches) && !schema.type && !schema.properties) {
    const real = branches.filter((b) => !(b && b.type === "null"));
    if (real.length === 1) {
      const { anyOf, oneOf, ...rest } = schema;
      schema = { ...resolve(real[0], root, depth + 1), ...rest };
    }
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length === 1 && depth < 8) {
    const { allOf, ...rest } = schema;
    schema = { ...resolve(allOf[0], root, depth + 1), ...rest };
  }
  return schema;
}

// A field for `schema`: { node, get } where get() is the value, or undefined when left empty.
// `root` is the whole schema its references point into.
function field(schema, name, required, path, root, depth) {
  root = root || schema;
  depth = depth || 0;
  schema = resolve(schema, root, 0);
  // A recursive schema (a tree) is drawn a few levels deep, then as JSON text.
  if (depth > 6) schema = { description: schema.description };
  const id = `f-${path.replace(/[^a-zA-Z0-9_-]/g, "_")}`;
  const label = el("label", { for: id }, name, required ? el("span", { class: "required", title: "required" }, " *") : null);
  const help = schema.description ? el("div", { class: "detail" }, schema.description) : null;
  const wrap = (input) => el("div", { class: "field", "data-field": path }, label, input, help);
  const t = typeOf(schema);
  const dflt = schema.default;
  if (t === "object") {
    const fields = Object.entries(schema.properties || {}).map(([k, s]) =>
      [k, field(s, k, (schema.required || []).includes(k), `${path}.${k}`, root, depth + 1)]);
    const node = el("fieldset", { class: "object", "data-field": path }, el("legend", {}, name, required ? " *" : ""), help, fields.map(([, f]) => f.node));
    return { node, get: () => {
      const out = {};
      for (const [k, f] of fields) { const v = f.get(); if (v !== undefined) out[k] = v; }
      return Object.keys(out).length || required ? out : undefined;
    } };
  }
  if (t === "array") {
    const items = [];
    const list = el("div", { class: "items" });
    const add = (value) => {
      const f = field(schema.items || {}, `${name}[${items.length}]`, true, `${path}.${items.length}`, root, depth + 1);
      if (value !== undefined) setValue(f, value);
      const entry = { f, node: null };
      entry.node = el("div", { class: "item" }, f.node, el("button", { type: "button", class: "remove", onclick: () => {
        items.splice(items.indexOf(entry), 1); entry.node.remove(); } }, "Remove"));
      items.push(entry);
      list.append(entry.node);
    };
    (Array.isArray(dflt) ? dflt : []).forEach(add);
    const node = el("fieldset", { class: "array", "data-field": path }, el("legend", {}, name, required ? " *" : ""), help, list,
      el("button", { type: "button", class: "add", "data-add": path, onclick: () => add() }, `Add ${schema.items && schema.items.title ? schema.items.title : "item"}`));
    return { node, get: () => {
      const values = items.map((i) => i.f.get()).filter((v) => v !== undefined);
      return values.length || required ? values : undefined;
    } };
  }
  if (t === "enum") {
    const select = el("select", { id, name: path }, required ? null : el("option", { value: "" }, "(unset)"),
      schema.enum.map((v, i) => el("option", { value: String(i) }, JSON.stringify(v))));
    if (dflt !== undefined) select.value = String(schema.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(dflt)));
    return { node: wrap(select), get: () => (select.value === "" ? undefined : schema.enum[+select.value]), input: select };
  }
  if (t === "boolean") {
    const select = el("select", { id, name: path }, required ? null : el("option", { value: "" }, "(unset)"),
      el("option", { value: "true" }, "true"), el("option", { value: "false" }, "false"));
    if (dflt !== undefined) select.value = String(dflt);
    return { node: wrap(select), get: () => (select.value === "" ? undefined : select.value === "true"), input: select };
  }
  if (t === "integer" || t === "number") {
    const input = el("input", { id, name: path, type: "number", step: t === "integer" ? "1" : "any", min: schema.minimum, max: schema.maximum });
    if (dflt !== undefined) input.value = dflt;
    return { node: wrap(input), get: () => (input.value === "" ? undefined : Number(input.value)), input };
  }
  if (t === "string") {
    const long = (schema.maxLength || 0) > 200 || /text|body|content|pattern/i.test(name);
    const input = long ? el("textarea", { id, name: path, rows: 3 }) : el("input", { id, name: path, type: "text", placeholder: schema.format || (schema.examples || [])[0] || "" });
    if (dflt !== undefined) input.value = dflt;
    return { node: wrap(input), get: () => (input.value === "" ? undefined : input.value), input };
  }
  const area = el("textarea", { id, name: path, rows: 3, placeholder: "JSON" });
  if (dflt !== undefined) area.value = JSON.stringify(dflt);
  return { node: wrap(area), get: () => {
    if (area.value.trim() === "") return undefined;
    try { return JSON.parse(area.value); } catch { return area.value; }
  }, input: area };
}

function setValue(f, value) {
  if (f.input) f.input.value = typeof value === "string" ? value : JSON.stringify(value);
}

function contentView(item) {
  if (item.type === "text") return el("pre", { class: "content text" }, item.text);
  if (item.type === "image" && /^image\/(png|jpeg|gif|webp)$/.test(item.mimeType || "")) return el("img", { class: "content", alt: "image result", src: `data:${item.mimeType};base64,${item.data}` });
  return el("pre", { class: "content" }, pretty(item));
}

// A JSON-RPC response to a call, a read or a prompt, for a person.
function resultView(response) {
  if (response.error) {
    return el("div", { class: "result rpc-error", id: "result" }, el("h4", {}, `Error ${response.error.code}`),
      el("p", { class: "error", id: "error-message" }, response.error.message),
      response.error.data !== undefined ? el("pre", {}, pretty(response.error.data)) : null);
  }
  const r = response.result || {};
  const parts = [];
  if (r.content !== undefined) parts.push(el("p", {}, "isError: ", badge(String(!!r.isError), r.isError ? "bad" : "ok")));
  for (const c of r.content || []) parts.push(contentView(c));
  for (const c of r.contents || []) parts.push(c.text !== undefined ? el("pre", { class: "content text" }, c.text) : el("pre", { class: "content" }, pretty(c)));
  for (const m of r.messages || []) parts.push(el("div", { class: "message" }, el("strong", {}, m.role), contentView(m.content)));
  if (r.structuredContent !== undefined) parts.push(el("h4", {}, "structuredContent"), el("pre", { class: "structured", id: "structured" }, pretty(r.structuredContent)));
  if (!parts.length) parts.push(el("pre", {}, pretty(r)));
  return el("div", { class: `result ${r.isError ? "is-error" : ""}`, id: "result" }, parts);
}

async function playground() {
  const kind = el("select", { id: "kind" }, el("option", { value: "tools" }, "Tools"), el("option", { value: "resources" }, "Resources"), el("option", { value: "prompts" }, "Prompts"));
  const picker = whoPicker(() => load());
  const items = el("select", { id: "item", size: 12 });
  const form = el("div", { id: "form" });
  const out = el("div", { id: "output" });
  let listed = [];
  const load = async () => {
    // Another agent or user sees other things: list again, keeping the chosen item if it is there.
    const chosen = listed[+items.value];
    const chosenKey = chosen && (chosen.name || chosen.uri);
    items.replaceChildren();
    form.replaceChildren();
    try {
      const method = kind.value === "tools" ? "tools/list" : kind.value === "prompts" ? "prompts/list" : "resources/list";
      const r = await rpc(method, {}, picker.who());
      if (r.response.error) { form.replaceChildren(failure(r.response.error)); return; }
      listed = r.response.result[kind.value] || [];
      if (kind.value === "resources") {
        const t = await rpc("resources/templates/list", {}, picker.who());
        listed = listed.concat(((t.response.result || {}).resourceTemplates || []).map((x) => ({ ...x, uri: x.uriTemplate })));
      }
      items.append(...listed.map((x, i) => el("option", { value: String(i) }, x.name || x.uri)));
      const again = listed.findIndex((x) => (x.name || x.uri) === chosenKey);
      if (chosenKey && again >= 0) {
        items.value = String(again);
        form.replaceChildren(formFor(kind.value, listed[again], picker, out));
      }
    } catch (e) { form.replaceChildren(failure(e)); }
  };
  items.addEventListener("change", () => {
    const item = listed[+items.value];
    if (item) form.replaceChildren(formFor(kind.value, item, picker, out));
  });
  kind.addEventListener("change", () => { items.value = ""; load(); });
  show(el("h2", {}, "Playground"), el("div", { class: "card" }, el("div", { class: "row" }, el("label", {}, "Kind ", kind), picker.node)),
    el("div", { class: "play" }, el("div", { class: "card list" }, items), el("div", { class: "card" }, form, out)));
  await load();
}

// The form for one tool, resource or prompt; its submission, and any input-required rounds.
function formFor(kind, item, picker, out) {
  let make;
  let fields;
  if (kind === "tools") {
    const f = field(item.inputSchema || { type: "object" }, "arguments", true, "arguments");
    fields = f.node;
    make = () => ["tools/call", { name: item.name, arguments: f.get() || {} }];
  } else if (kind === "prompts") {
    const schema = { type: "object", properties: {}, required: [] };
    for (const a of item.arguments || []) {
      schema.properties[a.name] = { type: "string", description: a.description };
      if (a.required) schema.required.push(a.name);
    }
    const f = field(schema, "arguments", true, "arguments");
    fields = f.node;
    make = () => ["prompts/get", { name: item.name, arguments: f.get() || {} }];
  } else {
    const uri = el("input", { id: "uri", type: "text", value: item.uri });
    fields = el("div", { class: "field" }, el("label", { for: "uri" }, "URI"), uri);
    make = () => ["resources/read", { uri: uri.value }];
  }
  const send = async (extra) => {
    const [method, params] = make();
    out.replaceChildren(el("p", { class: "muted" }, "Sending…"));
    try {
      const r = await rpc(method, { ...params, ...(extra || {}) }, picker.who());
      const result = r.response.result;
      if (result && result.inputRequests) out.replaceChildren(questions(result, send));
      else out.replaceChildren(resultView(r.response), el("details", {}, el("summary", {}, "JSON-RPC response"), el("pre", {}, pretty(r.response))));
    } catch (e) { out.replaceChildren(failure(e)); }
  };
  const title = item.title || item.name || item.uri;
  return el("form", { id: "call-form", novalidate: true, onsubmit: (ev) => { ev.preventDefault(); send(); } },
    el("h3", {}, title), item.description ? el("p", { class: "detail" }, item.description) : null,
    fields, el("button", { type: "submit", id: "send" }, kind === "tools" ? "Call" : kind === "prompts" ? "Get" : "Read"));
}

// An input-required result: each question as a form; the answers go with the request again.
function questions(result, send) {
  const answers = [];
  const parts = Object.entries(result.inputRequests).map(([key, q]) => {
    const params = q.params || {};
    const schema = params.requestedSchema || { type: "object", properties: {} };
    const f = field(schema, "answer", true, `answer.${key}`);
    let action = "accept";
    answers.push([key, () => (action === "accept" ? { action, content: f.get() || {} } : { action })]);
    const decline = el("button", { type: "button", class: "decline", onclick: () => { action = "decline"; submit(); } }, "Decline");
    return el("div", { class: "question", "data-key": key }, el("p", {}, params.message || q.method), q.method === "elicitation/create" ? f.node : el("pre", {}, pretty(q)), decline);
  });
  const submit = () => {
    const inputResponses = Object.fromEntries(answers.map(([k, get]) => [k, get()]));
    send({ inputResponses, requestState: result.requestState });
  };
  return el("form", { class: "card questions", id: "questions", novalidate: true, onsubmit: (ev) => { ev.preventDefault(); submit(); } },
    el("h4", {}, "The server asks"), parts, el("button", { type: "submit", id: "answer" }, "Answer"));
}

// ---------------------------------------------------------------------------------------------
// Routing

const VIEWS = { overview, sources, agents: agentsView, trust, tasks, approvals, connections, calls, playground };

async function route() {
  clearTimeout(refresh);
  if (live) { live.close(); live = null; }
  const name = (location.hash || "#overview").slice(1);
  const view = VIEWS[name] || overview;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.getAttribute("href") === `#${name}`);
  try { await view(); } catch (e) { show(failure(e)); }
}

async function start() {
  if (document.body.dataset.page === "login") {
    document.getElementById("login").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const error = document.getElementById("error");
      try {
        await post("login", { token: document.getElementById("token").value });
        location.href = `${BASE}/`;
      } catch (e) { error.hidden = false; error.textContent = String(e.message || e); }
    });
    return;
  }
  session = await api("session");
  document.getElementById("who").textContent = `${session.user || "anonymous"}${session.admin ? " (admin)" : " (read-only)"}`;
  document.getElementById("logout").addEventListener("click", async () => {
    await post("logout");
    location.href = `${BASE}/login`;
  });
  window.addEventListener("hashchange", route);
  await route();
}

start();
