// Idempotency keys.

import { badge, decodeBytes, enumName, errorBox, fmtTime, h, rpc, show } from "./lib.js";

// --- idempotency keys ---------------------------------------------------------------------------------

export function keyTable(keys) {
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

export async function renderKeys(params) {
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
