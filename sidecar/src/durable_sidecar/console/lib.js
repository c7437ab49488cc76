// The console's shared pieces: the contract's calls, DOM helpers, formatting, the confirmation dialog.

import { renderLogin } from "./login.js";

export const TOKEN_KEY = "durable.console.token";
export const ACTOR_KEY = "durable.console.actor";
export const STATUSES = ["RUNNING", "COMPLETED", "FAILED", "CANCELLED", "SUSPENDED"];
export const config = { n8nUrl: "" };

// The token's role (AuditService.GetCaller): read < operate < admin. Actions the role may not take are not
// shown (the sidecar refuses them anyway, with PERMISSION_DENIED).
export const caller = { namespace: "", role: "" };
const RANK = { read: 1, operate: 2, admin: 3 };
export function may(role) {
  return (RANK[caller.role] || 0) >= RANK[role];
}

// --- calls ----------------------------------------------------------------------------------------

export class RpcError extends Error {
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

export async function rpc(service, method, body) {
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

/** Downloads a stored file (GET /files/<sha256>, the same token) and saves it under its name. */
export async function downloadFile(sha256, name, type) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const query = new URLSearchParams({ name: name || sha256, type: type || "" });
  const res = await fetch(`/files/${encodeURIComponent(sha256)}?${query}`, { headers: { Authorization: `Bearer ${token}` } });
  if (!res.ok) {
    let payload = {};
    try {
      payload = await res.json();
    } catch (_) {
      payload = {};
    }
    throw new RpcError(payload.code || "unknown", payload.message || res.statusText, res.status);
  }
  const url = URL.createObjectURL(await res.blob());
  const link = h("a", { href: url, download: name || sha256 });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** A size in bytes as people read it. */
export function fmtBytes(n) {
  const v = Number(n || 0);
  if (v < 1024) return `${v} B`;
  if (v < 1024 * 1024) return `${(v / 1024).toFixed(1)} KiB`;
  return `${(v / 1024 / 1024).toFixed(1)} MiB`;
}

// Every page of a list RPC, up to `limit` items.
export async function all(service, method, body, field, limit = 2000) {
  const out = [];
  let pageToken = "";
  do {
    const reply = await rpc(service, method, { ...body, pageSize: 1000, pageToken });
    out.push(...(reply[field] || []));
    pageToken = reply.nextPageToken || "";
  } while (pageToken && out.length < limit);
  // More were there than `limit`: the caller says so instead of showing a part as the whole.
  out.truncated = Boolean(pageToken);
  return out;
}

// --- small helpers --------------------------------------------------------------------------------

export function h(tag, attrs, ...children) {
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

export const main = () => document.getElementById("main");

export function show(...nodes) {
  main().replaceChildren(...nodes);
}

export function enumName(value, prefix) {
  return value ? String(value).replace(prefix, "") : "";
}

export function statusOf(inst) {
  return enumName(inst.status, "INSTANCE_STATUS_") || "UNSPECIFIED";
}

export function fmtTime(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d) ? ts : d.toISOString().replace("T", " ").replace("Z", "");
}

export function decodeBytes(b64) {
  if (!b64) return "";
  const bin = atob(b64);
  return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}

export function encodeBytes(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

export function parseJsonBytes(b64) {
  const text = decodeBytes(b64);
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch (_) {
    return text;
  }
}

export function pretty(value) {
  return value === undefined ? "" : JSON.stringify(value, null, 2);
}

export function badge(text, cls) {
  return h("span", { class: `badge ${cls || String(text).toLowerCase()}` }, String(text).toLowerCase());
}

// A Resume Trigger's claim token (`claim:<host>:<pid>:<32 hex>`): it holds an instance until the execution it
// starts takes it over.
const CLAIM = /^claim:/;

/** An id as text: a claim token named as one, a long id shortened (the whole in its tooltip). */
export function idText(id, attrs = {}) {
  if (CLAIM.test(id)) return h("span", { class: "muted", title: id, dataset: { claim: "" } }, "Resume Trigger claim");
  const short = id.length > 24 ? `${id.slice(0, 14)}…${id.slice(-6)}` : id;
  return h("span", { class: "mono", title: id, ...attrs }, short);
}

/**
 * An n8n execution id as a link into n8n. n8n numbers its executions; anything else (an operator's name, a
 * Resume Trigger's claim, an id a script chose) is shown as text, long ones shortened with the whole in a tooltip.
 */
export function executionLink(workflowId, executionId) {
  if (!executionId) return "";
  if (CLAIM.test(executionId) || !config.n8nUrl || !/^\d+$/.test(executionId)) return idText(executionId);
  const url = `${config.n8nUrl.replace(/\/+$/, "")}/workflow/${encodeURIComponent(workflowId)}/executions/${encodeURIComponent(executionId)}`;
  return h("a", { class: "mono", href: url, target: "_blank", rel: "noopener noreferrer" }, executionId);
}

export function instanceHref(workflowId, key) {
  return `#/instance?${new URLSearchParams({ wf: workflowId, key })}`;
}

export function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, `${err.code ? err.code + ": " : ""}${err.message}`);
}

export function isStalled(inst) {
  if (inst.runState) return inst.runState === "RUN_STATE_STALLED";
  return statusOf(inst) === "RUNNING" && !inst.wakeAt && inst.leaseExpiresAt && new Date(inst.leaseExpiresAt) < new Date();
}

// --- confirmation dialog -----------------------------------------------------------------------------

// Asks for actor and reason; `run(actor, reason)` performs the action. Resolves with its result, or
// null when the operator backs out. `extra` (optional) is shown above the fields (a dry run, say).
export function confirmAction({ title, text, okLabel, extra, run }) {
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

/** An instance's version as the lists show it: its number (and the author's label), or that none was bound. */
export function versionText(inst) {
  const label = inst.versionLabel ? ` (${inst.versionLabel})` : "";
  if (inst.boundVersion && inst.boundVersion !== "0") return `v${inst.boundVersion}${label}`;
  return inst.versionLabel ? `not registered${label}` : "not registered";
}
