// Diffs computed in the browser: two checkpoint states (JSON), two workflow definitions (nodes).

import { h } from "./lib.js";

// --- JSON diff (computed here, between two checkpoint states) -------------------------------------

export function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

export function childPath(path, key) {
  return typeof key === "number" ? `${path}[${key}]` : /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

export function sameJson(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function jsonDiff(a, b, path = "$", out = []) {
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

export function renderDiff(changes) {
  if (!changes.length) return h("p", { class: "muted", "data-testid": "diff-empty" }, "No difference: the two states are equal.");
  return h("div", { class: "diff", "data-testid": "diff" }, changes.map((c) => {
    const text = c.op === "add" ? `+ ${c.path}: ${JSON.stringify(c.after)}`
      : c.op === "remove" ? `- ${c.path}: ${JSON.stringify(c.before)}`
        : `~ ${c.path}: ${JSON.stringify(c.before)} → ${JSON.stringify(c.after)}`;
    return h("div", { class: c.op }, text);
  }));
}

// --- node-level diff of two workflow definitions (as the sidecar's definitions.diff) ---------------

export const IGNORED_NODE_FIELDS = new Set(["id", "position"]);

export function nodesOf(definition) {
  const out = new Map();
  for (const node of (definition && definition.nodes) || []) {
    if (node.type === "n8n-nodes-base.stickyNote") continue;
    const kept = {};
    for (const [k, v] of Object.entries(node)) if (!IGNORED_NODE_FIELDS.has(k)) kept[k] = v;
    out.set(node.name, kept);
  }
  return out;
}

export function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (isObject(v)) return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  return v;
}

export function nodeDiff(oldDef, newDef) {
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
