// A workflow's versions and their node diffs.

import { jsonDiff, nodeDiff, renderDiff } from "./diff.js";
import { all, enumName, errorBox, fmtTime, h, instanceHref, parseJsonBytes, rpc, show } from "./lib.js";

/** Every workflow of the namespace that has a registered version or an instance, each linked to its versions. */
async function workflowsTable() {
  let rows;
  try {
    rows = await all("AuditService", "ListWorkflows", {}, "workflows", 1000);
  } catch (err) {
    return errorBox(err);
  }
  if (!rows.length) return h("p", { class: "muted", "data-testid": "no-workflows" }, "No workflow has a registered version or an instance yet.");
  return h("div", {},
    h("table", { "data-testid": "workflows-table" },
      h("thead", {}, h("tr", {}, ["Workflow", "Versions", "Newest version", "Instances"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((w) => h("tr", { dataset: { wf: w.workflowId } },
        h("td", {}, h("a", { class: "mono", href: `#/versions?${new URLSearchParams({ wf: w.workflowId })}` }, w.workflowId)),
        h("td", { class: "num" }, w.versions || "0"),
        h("td", {}, w.latestVersion && w.latestVersion !== "0"
          ? `v${w.latestVersion}${w.latestLabel ? " (" + w.latestLabel + ")" : ""}` : "none registered"),
        h("td", { class: "num" }, h("a", { href: `#/instances?${new URLSearchParams({ wf: w.workflowId })}` }, w.instances || "0")))))),
    rows.truncated ? h("p", { class: "note" }, `The first ${rows.length} workflows; give a workflow ID for another.`) : "");
}

// --- versions -----------------------------------------------------------------------------------------

export async function renderVersions(params) {
  const wf = params.get("wf") || "";
  const form = h("form", {
    class: "filters panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      location.hash = `#/versions?${new URLSearchParams({ wf: new FormData(ev.target).get("wf") || "" })}`;
    },
  }, h("label", {}, "Workflow ID", h("input", { name: "wf", value: wf, required: true })), h("button", { type: "submit" }, "Show"));
  if (!wf) {
    const box = h("div", {}, h("p", { class: "muted" }, "Loading…"));
    show(h("h1", {}, "Versions"), form, h("h2", {}, "Workflows"), box);
    box.replaceChildren(await workflowsTable());
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
