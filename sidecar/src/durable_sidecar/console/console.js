// durable-n8n console: plain JavaScript, no framework, no build step, nothing loaded from elsewhere.
// Every read and every action is a call of the durable.v1 contract on the HTTP/JSON face
// (POST /durable.v1.<Service>/<Method>, protobuf JSON) with the operator's bearer token:
// the console has no API of its own and sees exactly what the token's namespace may see.
"use strict";

const TOKEN_KEY = "durable.console.token";
const ACTOR_KEY = "durable.console.actor";
const STATUSES = ["RUNNING", "COMPLETED", "FAILED", "CANCELLED", "SUSPENDED"];
const config = { n8nUrl: "" };

// --- calls ----------------------------------------------------------------------------------------

class RpcError extends Error {
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

async function rpc(service, method, body) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const res = await fetch(`/durable.v1.${service}/${method}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(body || {}),
  });
  let payload = {};
  try {
    payload = await res.json();
  } catch (_) {
    payload = {};
  }
  if (!res.ok) {
    const err = new RpcError(payload.code || "unknown", payload.message || res.statusText, res.status);
    if (res.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      renderLogin(`The sidecar refused the token (${err.code}): ${err.message}`);
    }
    throw err;
  }
  return payload;
}

// Every page of a list RPC, up to `limit` items.
async function all(service, method, body, field, limit = 2000) {
  const out = [];
  let pageToken = "";
  do {
    const reply = await rpc(service, method, { ...body, pageSize: 1000, pageToken });
    out.push(...(reply[field] || []));
    pageToken = reply.nextPageToken || "";
  } while (pageToken && out.length < limit);
  return out;
}

// --- small helpers --------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const main = () => document.getElementById("main");

function show(...nodes) {
  main().replaceChildren(...nodes);
}

function enumName(value, prefix) {
  return value ? String(value).replace(prefix, "") : "";
}

function statusOf(inst) {
  return enumName(inst.status, "INSTANCE_STATUS_") || "UNSPECIFIED";
}

function fmtTime(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d) ? ts : d.toISOString().replace("T", " ").replace("Z", "");
}

function decodeBytes(b64) {
  if (!b64) return "";
  const bin = atob(b64);
  return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}

function encodeBytes(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

function parseJsonBytes(b64) {
  const text = decodeBytes(b64);
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch (_) {
    return text;
  }
}

function pretty(value) {
  return value === undefined ? "" : JSON.stringify(value, null, 2);
}

function badge(text, cls) {
  return h("span", { class: `badge ${cls || String(text).toLowerCase()}` }, String(text).toLowerCase());
}

function executionLink(workflowId, executionId) {
  if (!executionId) return "";
  if (!config.n8nUrl) return h("span", { class: "mono" }, executionId);
  const url = `${config.n8nUrl.replace(/\/+$/, "")}/workflow/${encodeURIComponent(workflowId)}/executions/${encodeURIComponent(executionId)}`;
  return h("a", { class: "mono", href: url, target: "_blank", rel: "noopener noreferrer" }, executionId);
}

function instanceHref(workflowId, key) {
  return `#/instance?${new URLSearchParams({ wf: workflowId, key })}`;
}

function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, `${err.code ? err.code + ": " : ""}${err.message}`);
}

function isStalled(inst) {
  if (inst.runState) return inst.runState === "RUN_STATE_STALLED";
  return statusOf(inst) === "RUNNING" && !inst.wakeAt && inst.leaseExpiresAt && new Date(inst.leaseExpiresAt) < new Date();
}

// --- JSON diff (computed here, between two checkpoint states) -------------------------------------

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function childPath(path, key) {
  return typeof key === "number" ? `${path}[${key}]` : /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function sameJson(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function jsonDiff(a, b, path = "$", out = []) {
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const k of keys) {
      const p = childPath(path, k);
      if (!(k in a)) out.push({ op: "add", path: p, after: b[k] });
      else if (!(k in b)) out.push({ op: "remove", path: p, before: a[k] });
      else jsonDiff(a[k], b[k], p, out);
    }
  } else if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      const p = childPath(path, i);
      if (i >= a.length) out.push({ op: "add", path: p, after: b[i] });
      else if (i >= b.length) out.push({ op: "remove", path: p, before: a[i] });
      else jsonDiff(a[i], b[i], p, out);
    }
  } else if (!sameJson(a, b)) {
    out.push({ op: "change", path, before: a, after: b });
  }
  return out;
}

function renderDiff(changes) {
  if (!changes.length) return h("p", { class: "muted", "data-testid": "diff-empty" }, "No difference: the two states are equal.");
  return h("div", { class: "diff", "data-testid": "diff" }, changes.map((c) => {
    const text = c.op === "add" ? `+ ${c.path}: ${JSON.stringify(c.after)}`
      : c.op === "remove" ? `- ${c.path}: ${JSON.stringify(c.before)}`
        : `~ ${c.path}: ${JSON.stringify(c.before)} → ${JSON.stringify(c.after)}`;
    return h("div", { class: c.op }, text);
  }));
}

// --- node-level diff of two workflow definitions (as the sidecar's definitions.diff) ---------------

const IGNORED_NODE_FIELDS = new Set(["id", "position"]);

function nodesOf(definition) {
  const out = new Map();
  for (const node of (definition && definition.nodes) || []) {
    if (node.type === "n8n-nodes-base.stickyNote") continue;
    const kept = {};
    for (const [k, v] of Object.entries(node)) if (!IGNORED_NODE_FIELDS.has(k)) kept[k] = v;
    out.set(node.name, kept);
  }
  return out;
}

function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (isObject(v)) return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  return v;
}

function nodeDiff(oldDef, newDef) {
  const a = nodesOf(oldDef), b = nodesOf(newDef);
  const ca = (oldDef && oldDef.connections) || {}, cb = (newDef && newDef.connections) || {};
  const added = [...b.keys()].filter((n) => !a.has(n)).sort();
  const removed = [...a.keys()].filter((n) => !b.has(n)).sort();
  const changed = [];
  for (const name of [...a.keys()].filter((n) => b.has(n)).sort()) {
    const x = a.get(name), y = b.get(name);
    const fields = [...new Set([...Object.keys(x), ...Object.keys(y)])].sort()
      .filter((k) => !sameJson(canonical(x[k]), canonical(y[k])));
    if (!sameJson(canonical(ca[name]), canonical(cb[name]))) fields.push("connections");
    if (fields.length) changed.push({ name, fields, before: x, after: y });
  }
  return { added, removed, changed };
}

// --- confirmation dialog -----------------------------------------------------------------------------

// Asks for actor and reason; `run(actor, reason)` performs the action. Resolves with its result, or
// null when the operator backs out. `extra` (optional) is shown above the fields (a dry run, say).
function confirmAction({ title, text, okLabel, extra, run }) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-extra").replaceChildren(...(extra ? [extra] : []));
  const actor = document.getElementById("confirm-actor");
  const reason = document.getElementById("confirm-reason");
  const error = document.getElementById("confirm-error");
  const ok = document.getElementById("confirm-ok");
  actor.value = localStorage.getItem(ACTOR_KEY) || "";
  reason.value = "";
  error.hidden = true;
  ok.textContent = okLabel || "Confirm";
  ok.disabled = false;
  return new Promise((resolve) => {
    const form = document.getElementById("confirm-form");
    const back = document.getElementById("confirm-cancel");
    const done = (value) => {
      form.removeEventListener("submit", submit);
      back.removeEventListener("click", cancel);
      dialog.removeEventListener("cancel", cancel);
      dialog.close();
      resolve(value);
    };
    const cancel = (ev) => {
      if (ev) ev.preventDefault();
      done(null);
    };
    const submit = async (ev) => {
      ev.preventDefault();
      if (!actor.value.trim() || !reason.value.trim()) {
        error.textContent = "Actor and reason are both required: they are recorded with the action.";
        error.hidden = false;
        return;
      }
      ok.disabled = true;
      try {
        localStorage.setItem(ACTOR_KEY, actor.value.trim());
        const result = await run(actor.value.trim(), reason.value.trim());
        done(result === undefined ? true : result);
      } catch (err) {
        error.textContent = `${err.code ? err.code + ": " : ""}${err.message}`;
        error.hidden = false;
        ok.disabled = false;
      }
    };
    form.addEventListener("submit", submit);
    back.addEventListener("click", cancel);
    dialog.addEventListener("cancel", cancel);
    dialog.showModal();
    (actor.value ? reason : actor).focus();
  });
}

// --- login -------------------------------------------------------------------------------------------

function renderLogin(message) {
  document.getElementById("nav").hidden = true;
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true,
    placeholder: "make run prints it (or .durable-data/run-secrets.json); else a token of DURABLE_AUTH_TOKENS" });
  const error = h("p", { class: "error", id: "login-error", role: "alert", hidden: !message }, message || "");
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      error.hidden = true;
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      try {
        // Any call checks the token; this one is cheap and read-only.
        await rpc("AuditService", "CountInstances", {});
      } catch (err) {
        sessionStorage.removeItem(TOKEN_KEY);
        document.getElementById("nav").hidden = true;
        const shown = document.getElementById("login-error") || error;
        shown.textContent = err.status === 401 ? `Token refused: ${err.message}` : `${err.code}: ${err.message}`;
        shown.hidden = false;
        return;
      }
      if (!location.hash || location.hash.startsWith("#/login")) location.hash = "#/instances";
      else route();
    },
  },
  h("label", {}, "Bearer token", input),
  h("button", { type: "submit", id: "login" }, "Log in"),
  error,
  h("p", { class: "muted" }, "The token stays in this tab (sessionStorage) and goes with every call as "
    + "Authorization: Bearer. It decides the namespace you see."));
  show(h("div", { class: "login panel" }, h("h1", {}, "Log in"), form));
  input.focus();
}

// --- instances --------------------------------------------------------------------------------------

function filtersFrom(params) {
  const body = {};
  if (params.get("wf")) body.workflowId = params.get("wf");
  if (params.get("prefix")) body.instanceKeyPrefix = params.get("prefix");
  if (params.get("step")) body.lastStep = params.get("step");
  if (params.get("version")) body.boundVersion = params.get("version");
  if (params.get("from")) body.createdAfter = new Date(params.get("from")).toISOString();
  if (params.get("to")) body.createdBefore = new Date(params.get("to")).toISOString();
  return body;
}

async function renderInstances(params) {
  const status = params.get("status") || "";
  const field = (name, label, attrs) => h("label", {}, label,
    h("input", { name, value: params.get(name) || "", ...attrs }));
  const form = h("form", {
    class: "filters panel", id: "instance-filters",
    onsubmit: (ev) => {
      ev.preventDefault();
      const next = new URLSearchParams();
      for (const [k, v] of new FormData(ev.target).entries()) if (String(v).trim()) next.set(k, String(v).trim());
      location.hash = `#/instances?${next}`;
    },
  },
  field("wf", "Workflow ID", { size: 18 }),
  h("label", {}, "Status", h("select", { name: "status" },
    h("option", { value: "" }, "any"),
    [...STATUSES, "STALLED"].map((s) => h("option", { value: s, selected: s === status }, s.toLowerCase())))),
  field("step", "Last step", { size: 14 }),
  field("prefix", "Key prefix", { size: 14 }),
  field("version", "Bound version", { type: "number", min: 1, class: "narrow" }),
  field("from", "Created from", { type: "datetime-local" }),
  field("to", "Created before", { type: "datetime-local" }),
  h("button", { type: "submit", id: "search" }, "Search"),
  h("a", { href: "#/instances" }, "Clear"));

  const counts = h("div", { class: "counts", id: "counts" });
  const list = h("div", { id: "instances" }, h("p", { class: "muted" }, "Loading…"));
  show(h("h1", {}, "Instances"), form, counts, list);

  const filters = filtersFrom(params);
  try {
    const c = await rpc("AuditService", "CountInstances", filters);
    const chip = (name, n, value) => {
      const p = new URLSearchParams(params);
      p.delete("pt");
      if (value) p.set("status", value); else p.delete("status");
      return h("button", { type: "button", class: status === value ? "active" : "", dataset: { status: value || "ALL" },
        onclick: () => { location.hash = `#/instances?${p}`; } }, name, h("b", {}, String(n || 0)));
    };
    counts.replaceChildren(
      chip("all", c.total, ""),
      ...(c.counts || []).map((x) => chip(enumName(x.status, "INSTANCE_STATUS_").toLowerCase(), x.count,
        enumName(x.status, "INSTANCE_STATUS_"))),
      chip("stalled", c.stalled, "STALLED"));
  } catch (err) {
    counts.replaceChildren(errorBox(err));
  }

  const body = { ...filters, pageSize: 50, pageToken: params.get("pt") || "" };
  if (status === "STALLED") body.stalledOnly = true;
  else if (status) body.statuses = [`INSTANCE_STATUS_${status}`];
  let reply;
  try {
    reply = await rpc("InstanceService", "ListInstances", body);
  } catch (err) {
    list.replaceChildren(errorBox(err));
    return;
  }
  const rows = reply.instances || [];
  const next = new URLSearchParams(params);
  next.set("pt", reply.nextPageToken || "");
  const first = new URLSearchParams(params);
  first.delete("pt");
  list.replaceChildren(
    rows.length ? h("table", { "data-testid": "instances-table" },
      h("thead", {}, h("tr", {}, ["Instance key", "Workflow", "Status", "Version", "Last step", "Seq", "Resumes",
        "Created", "Updated"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((i) => h("tr", { dataset: { key: i.instanceKey } },
        h("td", {}, h("a", { class: "mono", href: instanceHref(i.workflowId, i.instanceKey) }, i.instanceKey)),
        h("td", { class: "mono" }, i.workflowId),
        h("td", {}, badge(statusOf(i)), isStalled(i) ? [" ", badge("stalled")] : ""),
        h("td", {}, i.boundVersion || i.versionLabel || "–"),
        h("td", {}, i.lastStep || "–"),
        h("td", { class: "num" }, i.lastSequence || "0"),
        h("td", { class: "num" }, i.resumeCount || "0"),
        h("td", {}, fmtTime(i.createdAt)),
        h("td", {}, fmtTime(i.updatedAt))))))
      : h("p", { class: "muted", "data-testid": "no-instances" }, "No instance matches."),
    h("div", { class: "pager" },
      params.get("pt") ? h("a", { href: `#/instances?${first}` }, "« First page") : "",
      reply.nextPageToken ? h("a", { href: `#/instances?${next}`, id: "next-page" }, "Next page »") : "",
      h("span", {}, `${rows.length} shown`)));
}

// --- one instance -----------------------------------------------------------------------------------

async function optional(promise, fallback) {
  try {
    return await promise;
  } catch (err) {
    if (err.status === 401) throw err;
    return fallback;
  }
}

async function renderInstance(params) {
  const wf = params.get("wf") || "", key = params.get("key") || "";
  show(h("h1", {}, "Instance ", h("span", { class: "mono" }, key)), h("p", { class: "muted" }, "Loading…"));
  let got;
  try {
    got = await rpc("InstanceService", "GetInstance", { workflowId: wf, instanceKey: key });
  } catch (err) {
    show(h("h1", {}, "Instance ", h("span", { class: "mono" }, key)), errorBox(err));
    return;
  }
  const inst = got.instance;
  const ref = { workflowId: wf, instanceKey: key };
  const [events, checkpoints, changes, signals, keys] = await Promise.all([
    optional(all("AuditService", "ListInstanceEvents", ref, "events"), null),
    optional(all("CheckpointService", "ListCheckpoints", ref, "checkpoints"), []),
    optional(all("VersionService", "ListChangeLog", ref, "entries"), []),
    optional(all("EventService", "ListEvents", ref, "events", 500), []),
    optional(all("IdempotencyService", "ListKeys", { keyPrefix: key }, "keys", 500), []),
  ]);

  const status = statusOf(inst);
  const facts = [
    ["Workflow", h("a", { class: "mono", href: `#/versions?${new URLSearchParams({ wf })}` }, wf)],
    ["Status", [badge(status), isStalled(inst) ? [" ", badge("stalled")] : "",
      inst.runState ? h("span", { class: "muted" }, ` ${enumName(inst.runState, "RUN_STATE_").toLowerCase()}`) : ""]],
    ["Bound version", inst.boundVersion || "–"], ["Version label", inst.versionLabel || "–"],
    ["Last step", inst.lastStep ? `${inst.lastStep} (#${inst.lastSequence})` : "–"],
    ["Checkpoints", inst.checkpointCount || "0"], ["Resumes", inst.resumeCount || "0"],
    ["Lease owner", inst.leaseOwner ? executionLink(wf, inst.leaseOwner) : "–"],
    ["Lease until", fmtTime(inst.leaseExpiresAt) || "–"], ["Wake at", fmtTime(inst.wakeAt) || "–"],
    ["Created by", executionLink(wf, inst.createdByExecutionId) || "–"], ["Created", fmtTime(inst.createdAt)],
    ["Updated", fmtTime(inst.updatedAt)], ["Finished", fmtTime(inst.finishedAt) || "–"],
  ];
  if (inst.errorMessage) facts.push(["Error / reason", inst.errorMessage]);
  if (inst.lastError) facts.push(["Last error", inst.lastError]);
  if (inst.awaitedEvent) facts.push(["Awaits event", inst.awaitedEvent]);
  if (inst.resultJson) facts.push(["Result", h("code", {}, decodeBytes(inst.resultJson))]);

  const reload = () => renderInstance(params);
  const actions = instanceActions(inst, reload);

  // The timeline: audit events, checkpoints, version moves and signals, in time order.
  const entries = [];
  for (const e of events || []) {
    // Same database time as a checkpoint (one transaction): a start comes before it, an end after it.
    const order = ["started", "resumed", "claimed"].includes(e.kind) ? 0 : 2;
    entries.push({ at: e.createdAt, order, id: Number(e.id), kind: e.kind, actor: e.actor,
      execution: e.executionId || "", node: "", detail: e.detail || "" });
  }
  for (const c of checkpoints) {
    entries.push({ at: c.createdAt, order: 1, id: Number(c.sequence), kind: "checkpoint", execution: c.executionId,
      node: c.nodeName || "", detail: `#${c.sequence} after step “${c.stepName}”, ${c.sizeBytes || 0} bytes`,
      checkpoint: c });
  }
  for (const m of changes) {
    if (m.kind !== "CHANGE_KIND_INSTANCE_MOVED") continue;
    entries.push({ at: m.createdAt, order: 3, id: Number(m.id), kind: "moved", actor: m.actor, execution: "",
      node: "", detail: `version ${m.fromVersion || 0} → ${m.toVersion || 0}: ${m.reason || ""}` });
  }
  for (const s of signals) {
    entries.push({ at: s.receivedAt, order: 4, id: 0, kind: "signal", actor: s.sender || "", execution: "",
      node: "", detail: `event “${s.eventName}” (${s.dedupeId})${s.consumedAt ? ", consumed " + fmtTime(s.consumedAt) : ", pending"}` });
  }
  entries.sort((x, y) => (new Date(x.at) - new Date(y.at)) || (x.order - y.order) || (x.id - y.id));

  const cps = checkpoints.map((c) => Number(c.sequence));
  let pickA = cps.length > 1 ? cps[cps.length - 2] : cps[0];
  let pickB = cps[cps.length - 1];
  const statePanel = h("div", { id: "state-panel" });
  const diffPanel = h("div", { id: "diff-panel" });

  const pickers = (seq) => [
    h("input", { type: "radio", name: "diff-a", value: seq, title: "diff from this checkpoint", checked: seq === pickA,
      "aria-label": `diff from #${seq}`, onchange: () => { pickA = seq; } }),
    h("input", { type: "radio", name: "diff-b", value: seq, title: "diff to this checkpoint", checked: seq === pickB,
      "aria-label": `diff to #${seq}`, onchange: () => { pickB = seq; } }),
  ];

  const stateOf = async (seq) => {
    const r = await rpc("CheckpointService", "GetCheckpoint", { ...ref, sequence: String(seq), includeState: true });
    return parseJsonBytes(r.checkpoint.stateJson);
  };

  const timeline = h("table", { "data-testid": "timeline" },
    h("thead", {}, h("tr", {}, ["Time", "What", "Execution", "Node", "Detail", "Diff A/B", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, entries.map((e) => h("tr", { dataset: { kind: e.kind } },
      h("td", { class: "mono" }, fmtTime(e.at)),
      h("td", {}, badge(e.kind.replace(/_/g, " "), e.kind)),
      h("td", {}, e.execution ? executionLink(wf, e.execution) : e.actor ? h("span", { class: "muted" }, e.actor) : ""),
      h("td", {}, e.node),
      h("td", {}, e.detail),
      h("td", {}, e.checkpoint ? pickers(Number(e.checkpoint.sequence)) : ""),
      h("td", {}, e.checkpoint ? h("button", { type: "button", class: "secondary", dataset: { state: e.checkpoint.sequence },
        onclick: async () => {
          statePanel.replaceChildren(h("p", { class: "muted" }, "Loading…"));
          try {
            const value = await stateOf(e.checkpoint.sequence);
            statePanel.replaceChildren(h("h2", {}, `State at checkpoint #${e.checkpoint.sequence} (${e.checkpoint.stepName})`),
              h("pre", { "data-testid": "state" }, pretty(value)));
          } catch (err) {
            statePanel.replaceChildren(errorBox(err));
          }
        } }, "State") : "")))));

  const diffButton = h("button", { type: "button", id: "diff", disabled: cps.length < 2,
    onclick: async () => {
      diffPanel.replaceChildren(h("p", { class: "muted" }, "Loading…"));
      try {
        const [a, b] = await Promise.all([stateOf(pickA), stateOf(pickB)]);
        diffPanel.replaceChildren(h("h2", {}, `Changes from checkpoint #${pickA} to #${pickB}`), renderDiff(jsonDiff(a, b)));
      } catch (err) {
        diffPanel.replaceChildren(errorBox(err));
      }
    } }, "Diff checkpoints A → B");

  const keysTable = keys.length ? keyTable(keys) : h("p", { class: "muted" },
    "No idempotency key starts with this instance key (the Idempotency Guard's default key).");

  show(
    h("p", {}, h("a", { href: `#/instances?${new URLSearchParams({ wf })}` }, "« Instances of this workflow")),
    h("h1", {}, "Instance ", h("span", { class: "mono", id: "instance-key" }, key)),
    h("div", { class: "panel" }, h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))),
    actions,
    h("h2", {}, "Timeline"),
    events === null ? h("p", { class: "error" }, "The audit trail could not be read (AuditService.ListInstanceEvents).") : "",
    timeline,
    h("div", { class: "pager" }, diffButton,
      h("span", {}, cps.length < 2 ? "A diff needs two checkpoints." : "Pick A and B in the timeline (default: the last two).")),
    diffPanel, statePanel,
    h("h2", {}, "Idempotency keys of this instance"), keysTable);
}

function instanceActions(inst, reload) {
  const status = statusOf(inst);
  const wf = inst.workflowId, key = inst.instanceKey;
  const ref = { workflowId: wf, instanceKey: key };
  const out = h("div", { class: "actions panel", id: "actions" }, h("b", {}, "Operator actions: "));
  const done = (result) => { if (result) reload(); };
  const parked = status === "SUSPENDED" || ["RUN_STATE_WAITING", "RUN_STATE_SCHEDULED"].includes(inst.runState)
    || (status === "RUNNING" && !inst.runState && inst.wakeAt);
  if (status === "RUNNING" || status === "SUSPENDED") {
    out.append(h("button", { type: "button", class: "danger", id: "cancel-instance",
      onclick: async () => done(await confirmAction({
        title: "Cancel this instance?",
        text: `${wf} / ${key} becomes CANCELLED (final): no execution will run it again. This cannot be undone.`,
        okLabel: "Cancel instance",
        run: (actor, reason) => rpc("InstanceService", "CancelInstance", { ...ref, actor, reason }),
      })) }, "Cancel…"));
  }
  if (status === "FAILED" || status === "SUSPENDED") {
    out.append(h("button", { type: "button", id: "retry-instance",
      onclick: async () => done(await confirmAction({
        title: "Retry this instance?",
        text: `${wf} / ${key} becomes RUNNING again and the Resume Trigger runs it from its newest checkpoint.`,
        okLabel: "Retry",
        run: (actor, reason) => rpc("RecoveryService", "RetryInstance", { ...ref, actor, reason }),
      })) }, "Retry…"));
  }
  if (parked) {
    out.append(h("button", { type: "button", id: "resume-instance",
      onclick: async () => done(await confirmAction({
        title: "Resume this instance now?",
        text: `${wf} / ${key} is due at once: its wait ends and the Resume Trigger hands it out.`,
        okLabel: "Resume now",
        run: (actor, reason) => rpc("RecoveryService", "ResumeInstance", { ...ref, actor, reason }),
      })) }, "Resume now…"));
  }
  if (status === "RUNNING" || status === "SUSPENDED") {
    out.append(h("button", { type: "button", class: "secondary", id: "move-instance",
      onclick: () => moveDialog(inst).then(done) }, "Move to version…"));
  }
  if (out.children.length === 1) out.append(h("span", { class: "muted" }, `none: the instance is ${status.toLowerCase()}.`));
  return out;
}

async function moveDialog(inst) {
  const wf = inst.workflowId, key = inst.instanceKey;
  let versions = [];
  try {
    versions = await all("VersionService", "ListVersions", { workflowId: wf }, "versions", 200);
  } catch (err) {
    versions = [];
  }
  const select = h("select", { id: "move-target" }, versions
    .filter((v) => String(v.version) !== String(inst.boundVersion || "0"))
    .map((v) => h("option", { value: v.version }, `version ${v.version}${v.label ? " (" + v.label + ")" : ""}`)));
  const preview = h("div", { id: "move-preview" });
  let checked = "";
  const selector = { workflowId: wf, instanceKeys: [key], statuses: [inst.status] };
  const dry = h("button", { type: "button", class: "secondary", id: "move-dry-run",
    onclick: async () => {
      preview.replaceChildren(h("p", { class: "muted" }, "Dry run…"));
      try {
        const r = await rpc("VersionService", "MoveInstances", { selector, toVersion: select.value, dryRun: true });
        const moves = r.moves || [];
        checked = moves.length ? select.value : "";
        preview.replaceChildren(moves.length ? h("ul", {}, moves.map((m) => h("li", {},
          `${m.instanceKey}: version ${m.fromVersion || 0} → ${m.toVersion}`,
          m.lastStepMissingInTarget ? h("b", { class: "error" }, ` — step “${m.lastStep}” is not in the target version`) : "")))
          : h("p", { class: "error" }, "Nothing would move."));
      } catch (err) {
        preview.replaceChildren(errorBox(err));
      }
    } }, "Dry run");
  const extra = versions.length > 1 || (versions.length && !inst.boundVersion)
    ? h("div", {}, h("label", {}, "Target version", select), h("p", {}, dry, " (required before the move)"), preview)
    : h("p", { class: "error" }, "This workflow has no other registered version to move to.");
  return confirmAction({
    title: "Move this instance to another version?",
    text: `${wf} / ${key} is bound to version ${inst.boundVersion || 0}. A move is logged in the change log.`,
    okLabel: "Move",
    extra,
    run: async (actor, reason) => {
      if (!checked || checked !== select.value) throw new RpcError("", "Run the dry run for this target version first.", 0);
      return rpc("VersionService", "MoveInstances", { selector, toVersion: select.value, dryRun: false, actor, reason });
    },
  });
}

// --- idempotency keys ---------------------------------------------------------------------------------

function keyTable(keys) {
  return h("table", { "data-testid": "keys-table" },
    h("thead", {}, h("tr", {}, ["Scope", "Key", "Status", "Attempts", "Result / error", "Lease until", "Expires", "Updated"]
      .map((t) => h("th", {}, t)))),
    h("tbody", {}, keys.map((k) => h("tr", {},
      h("td", { class: "mono" }, k.scope), h("td", { class: "mono" }, k.key),
      h("td", {}, badge(enumName(k.status, "KEY_STATUS_"), enumName(k.status, "KEY_STATUS_").toLowerCase())),
      h("td", { class: "num" }, k.attempt || "0"),
      h("td", {}, k.resultJson ? h("code", {}, decodeBytes(k.resultJson).slice(0, 300)) : k.errorMessage || ""),
      h("td", {}, fmtTime(k.leaseExpiresAt)), h("td", {}, fmtTime(k.expiresAt)), h("td", {}, fmtTime(k.updatedAt))))));
}

async function renderKeys(params) {
  const form = h("form", {
    class: "filters panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      const next = new URLSearchParams();
      for (const [k, v] of new FormData(ev.target).entries()) if (String(v).trim()) next.set(k, String(v).trim());
      location.hash = `#/keys?${next}`;
    },
  },
  h("label", {}, "Scope", h("input", { name: "scope", value: params.get("scope") || "" })),
  h("label", {}, "Key prefix", h("input", { name: "prefix", value: params.get("prefix") || "" })),
  h("label", {}, "Status", h("select", { name: "status" }, h("option", { value: "" }, "any"),
    ["IN_PROGRESS", "COMPLETED", "FAILED"].map((s) => h("option", { value: s, selected: params.get("status") === s }, s.toLowerCase())))),
  h("button", { type: "submit" }, "Search"));
  const list = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  show(h("h1", {}, "Idempotency keys"), form, list);
  const body = { scope: params.get("scope") || "", keyPrefix: params.get("prefix") || "", pageSize: 100,
    pageToken: params.get("pt") || "" };
  if (params.get("status")) body.statuses = [`KEY_STATUS_${params.get("status")}`];
  try {
    const r = await rpc("IdempotencyService", "ListKeys", body);
    const next = new URLSearchParams(params);
    next.set("pt", r.nextPageToken || "");
    list.replaceChildren((r.keys || []).length ? keyTable(r.keys) : h("p", { class: "muted" }, "No key matches."),
      h("div", { class: "pager" }, r.nextPageToken ? h("a", { href: `#/keys?${next}` }, "Next page »") : ""));
  } catch (err) {
    list.replaceChildren(errorBox(err));
  }
}

// --- versions -----------------------------------------------------------------------------------------

async function renderVersions(params) {
  const wf = params.get("wf") || "";
  const form = h("form", {
    class: "filters panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      location.hash = `#/versions?${new URLSearchParams({ wf: new FormData(ev.target).get("wf") || "" })}`;
    },
  }, h("label", {}, "Workflow ID", h("input", { name: "wf", value: wf, required: true })), h("button", { type: "submit" }, "Show"));
  if (!wf) {
    show(h("h1", {}, "Versions"), form, h("p", { class: "muted" }, "Give a workflow ID."));
    return;
  }
  const versionsBox = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const diffBox = h("div", { id: "version-diff" });
  const logBox = h("div", {});
  show(h("h1", {}, "Versions of ", h("span", { class: "mono" }, wf)), form, versionsBox, diffBox,
    h("h2", {}, "Change log"), logBox);
  let versions = [];
  try {
    versions = await all("VersionService", "ListVersions", { workflowId: wf }, "versions", 500);
  } catch (err) {
    versionsBox.replaceChildren(errorBox(err));
  }
  if (versions.length) {
    let current = "";
    try {
      current = String((await rpc("VersionService", "GetVersion", { workflowId: wf, version: "0" })).version.version);
    } catch (_) {
      current = "";
    }
    const nums = versions.map((v) => String(v.version));
    let oldV = nums[1] || nums[0], newV = nums[0];
    versionsBox.replaceChildren(h("table", { "data-testid": "versions-table" },
      h("thead", {}, h("tr", {}, ["Version", "Old/New", "Label", "Content hash", "n8n version id", "Steps", "Created", "By", "Note"]
        .map((t) => h("th", {}, t)))),
      h("tbody", {}, versions.map((v) => h("tr", {},
        h("td", {}, String(v.version), String(v.version) === current ? h("b", {}, " (current)") : ""),
        h("td", {}, h("input", { type: "radio", name: "v-old", checked: String(v.version) === oldV, "aria-label": `old ${v.version}`,
          onchange: () => { oldV = String(v.version); } }),
        h("input", { type: "radio", name: "v-new", checked: String(v.version) === newV, "aria-label": `new ${v.version}`,
          onchange: () => { newV = String(v.version); } })),
        h("td", {}, v.label || "–"), h("td", { class: "mono" }, (v.contentHash || "").slice(0, 12)),
        h("td", { class: "mono" }, v.n8nVersionId || "–"), h("td", { class: "num" }, (v.nodeNames || []).length),
        h("td", {}, fmtTime(v.createdAt)), h("td", {}, v.createdBy || "–"), h("td", {}, v.note || ""))))),
    h("div", { class: "pager" }, h("button", { type: "button", id: "version-diff-button", disabled: nums.length < 2,
      onclick: async () => {
        diffBox.replaceChildren(h("p", { class: "muted" }, "Loading…"));
        try {
          const [a, b] = await Promise.all([oldV, newV].map((n) => rpc("VersionService", "GetVersion", { workflowId: wf, version: n })));
          const d = nodeDiff(parseJsonBytes(a.version.definitionJson), parseJsonBytes(b.version.definitionJson));
          const lines = [
            ...d.added.map((n) => h("div", { class: "add" }, `+ ${n} (added)`)),
            ...d.removed.map((n) => h("div", { class: "remove" }, `- ${n} (removed)`)),
            ...d.changed.map((c) => h("div", { class: "change" }, `~ ${c.name} (changed: ${c.fields.join(", ")})`)),
          ];
          const details = d.changed.map((c) => h("details", {}, h("summary", {}, `${c.name}: what changed`),
            renderDiff(jsonDiff(c.before, c.after))));
          diffBox.replaceChildren(h("h2", {}, `Nodes from version ${oldV} to version ${newV}`),
            lines.length ? h("div", { class: "diff", "data-testid": "node-diff" }, lines) : h("p", { class: "muted" }, "No node added, removed or changed."),
            ...details);
        } catch (err) {
          diffBox.replaceChildren(errorBox(err));
        }
      } }, "Node diff old → new")));
  } else if (!versionsBox.querySelector(".error")) {
    versionsBox.replaceChildren(h("p", { class: "muted" }, "No version registered for this workflow."));
  }
  try {
    const log = await all("VersionService", "ListChangeLog", { workflowId: wf }, "entries", 500);
    logBox.replaceChildren(log.length ? h("table", { "data-testid": "change-log" },
      h("thead", {}, h("tr", {}, ["Time", "What", "Instance", "From", "To", "Actor", "Reason"].map((t) => h("th", {}, t)))),
      h("tbody", {}, log.map((e) => h("tr", {},
        h("td", {}, fmtTime(e.createdAt)), h("td", {}, enumName(e.kind, "CHANGE_KIND_").toLowerCase().replace(/_/g, " ")),
        h("td", {}, e.instanceKey ? h("a", { class: "mono", href: instanceHref(wf, e.instanceKey) }, e.instanceKey) : ""),
        h("td", {}, e.fromVersion || "–"), h("td", {}, e.toVersion || "–"), h("td", {}, e.actor || ""), h("td", {}, e.reason || "")))))
      : h("p", { class: "muted" }, "Nothing logged yet."));
  } catch (err) {
    logBox.replaceChildren(errorBox(err));
  }
}

// --- routing ----------------------------------------------------------------------------------------

async function route() {
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    renderLogin("");
    return;
  }
  document.getElementById("nav").hidden = false;
  const hash = location.hash.replace(/^#/, "") || "/instances";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const page = path.replace(/^\//, "") || "instances";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === page || (page === "instance" && a.dataset.page === "instances"));
  }
  try {
    if (page === "instance") await renderInstance(params);
    else if (page === "keys") await renderKeys(params);
    else if (page === "versions") await renderVersions(params);
    else await renderInstances(params);
  } catch (err) {
    if (err.status !== 401) show(errorBox(err));
  }
}

async function start() {
  try {
    Object.assign(config, await (await fetch("config.json")).json());
  } catch (_) {
    // No links to n8n without it; everything else works.
  }
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    renderLogin("Logged out.");
  });
  window.addEventListener("hashchange", route);
  takeTokenFromLink();
  route();
}

/**
 * A log-in link (`/console/#token=…`, as make run prints it): the token goes to this tab's
 * sessionStorage and out of the address bar and the history. A fragment never reaches a server.
 */
function takeTokenFromLink() {
  const match = /^#token=([^&]+)/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}${location.search}#/instances`);
}

// Exposed for tests and the curious: the two diffs are plain functions.
window.durableConsole = { jsonDiff, nodeDiff, encodeBytes };

document.addEventListener("DOMContentLoaded", start);
