// Flow-control limits (LimitService): each key's holders, waiters, reserved slots and open debounce bursts.

import { badge, enumName, errorBox, fmtTime, h, instanceHref, rpc, show } from "./lib.js";

const KINDS = ["CONCURRENCY", "RATE", "DEBOUNCE"];

function entryList(entries) {
  if (!entries || !entries.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "entries" }, entries.map((e) => h("li", {},
    badge(e.state, e.state), " ",
    h("a", { href: instanceHref(e.workflowId, e.instanceKey), class: "mono" }, e.instanceKey),
    e.owner ? h("span", { class: "muted" }, ` held by ${e.owner}`) : "",
    h("span", { class: "muted" }, ` since ${fmtTime(e.since)}`),
    e.at ? h("span", { class: "muted" }, ` slot ${fmtTime(e.at)}`) : "")));
}

export function limitTable(keys) {
  return h("table", { "data-testid": "limits-table" },
    h("thead", {}, h("tr", {}, ["Kind", "Limit", "Key", "Holders", "Waiting", "Next slot / burst ends", "Instances",
      "Updated"].map((t) => h("th", {}, t)))),
    h("tbody", {}, keys.map((k) => h("tr", {},
      h("td", {}, enumName(k.kind, "LIMIT_KIND_").toLowerCase()),
      h("td", { class: "mono" }, k.limitName), h("td", { class: "mono" }, k.limitKey),
      h("td", { class: "num" }, String(k.holders || 0)), h("td", { class: "num" }, String(k.waiters || 0)),
      h("td", {}, fmtTime(k.nextAt)), h("td", {}, entryList(k.entries)), h("td", {}, fmtTime(k.updatedAt))))));
}

export async function renderLimits(params) {
  const form = h("form", {
    class: "filters panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      const next = new URLSearchParams();
      for (const [k, v] of new FormData(ev.target).entries()) if (String(v).trim()) next.set(k, String(v).trim());
      location.hash = `#/limits?${next}`;
    },
  },
  h("label", {}, "Limit name", h("input", { name: "name", value: params.get("name") || "" })),
  h("label", {}, "Kind", h("select", { name: "kind" }, h("option", { value: "" }, "any"),
    KINDS.map((s) => h("option", { value: s, selected: params.get("kind") === s }, s.toLowerCase())))),
  h("button", { type: "submit" }, "Search"));
  const list = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  show(h("h1", {}, "Limits"), h("p", { class: "muted" },
    "Concurrency, rate and debounce limits of the Durable Limit node, per key: who holds a place, who waits in what order."),
  form, list);
  const body = { limitName: params.get("name") || "", pageSize: 100, pageToken: params.get("pt") || "" };
  if (params.get("kind")) body.kind = `LIMIT_KIND_${params.get("kind")}`;
  try {
    const r = await rpc("LimitService", "ListLimitKeys", body);
    const next = new URLSearchParams(params);
    next.set("pt", r.nextPageToken || "");
    list.replaceChildren((r.keys || []).length ? limitTable(r.keys) : h("p", { class: "muted" }, "No limit key matches."),
      h("div", { class: "pager" }, r.nextPageToken ? h("a", { href: `#/limits?${next}` }, "Next page »") : ""));
  } catch (err) {
    list.replaceChildren(errorBox(err));
  }
}
