// Bulk operations (OperationService): retry, resume or cancel every instance matching the instance list's
// filter. A preview (the count and the first ones) comes first; the operation then runs in the sidecar, in
// batches, and its page follows the progress and pauses, continues or cancels it.

import { badge, confirmAction, enumName, errorBox, fmtTime, h, instanceHref, may, rpc, show, statusOf } from "./lib.js";

const ACTIONS = { RETRY: "Retry", RESUME: "Resume", CANCEL: "Cancel", REPLAY: "Replay", MOVE: "Move" };

/** The instance list's filter (ListInstances' fields) as an operation's selector. */
function selectorFrom(filters, status) {
  const selector = { ...filters };
  if (status === "STALLED") selector.stalledOnly = true;
  else if (status) selector.statuses = [`INSTANCE_STATUS_${status}`];
  return selector;
}

/** The "every match" panel under the instance list (operators and admins only). */
export function bulkPanel(filters, status) {
  if (!may("operate")) return "";
  const selector = selectorFrom(filters, status);
  const action = h("select", { id: "bulk-action" },
    Object.entries(ACTIONS).filter(([value]) => value !== "MOVE" || may("admin"))
      .map(([value, label]) => h("option", { value }, label)));
  // A move needs a version; a replay may name the step to run again from (else: from the start item) and a
  // version (an admin's).
  const toVersion = h("input", { id: "bulk-to-version", type: "number", min: 1, class: "narrow",
    placeholder: "version" });
  const fromStep = h("input", { id: "bulk-from-step", size: 14, placeholder: "step (empty: start)" });
  const versionBox = h("label", { hidden: true }, "To version", toVersion);
  const stepBox = h("label", { hidden: true }, "Replay from step", fromStep);
  action.addEventListener("change", () => {
    versionBox.hidden = !(action.value === "MOVE" || (action.value === "REPLAY" && may("admin")));
    stepBox.hidden = action.value !== "REPLAY";
    result.replaceChildren();
  });
  const extra = () => {
    const body = {};
    if (!versionBox.hidden && toVersion.value) body.toVersion = toVersion.value;
    if (!stepBox.hidden && fromStep.value.trim()) body.replayFromStep = fromStep.value.trim();
    return body;
  };
  const result = h("div", { id: "bulk-preview" });
  const preview = async () => {
    result.replaceChildren(h("p", { class: "muted" }, "Counting…"));
    let got;
    try {
      got = await rpc("OperationService", "PreviewOperation", { selector, sampleSize: 10 });
    } catch (err) {
      result.replaceChildren(errorBox(err));
      return;
    }
    const count = Number(got.count || 0);
    const verb = ACTIONS[action.value];
    const sample = h("ul", { class: "entries", "data-testid": "bulk-sample" }, (got.sample || []).map((i) =>
      h("li", {}, h("a", { class: "mono", href: instanceHref(i.workflowId, i.instanceKey) }, i.instanceKey), " ",
        badge(statusOf(i).toLowerCase(), statusOf(i).toLowerCase()),
        i.lastError || i.errorMessage
          ? h("span", { class: "muted" }, ` ${(i.lastError || i.errorMessage).slice(0, 80)}`) : "")));
    const start = h("button", {
      type: "button", id: "bulk-start", class: "danger", disabled: count === 0,
      onclick: async () => {
        const op = await confirmAction({
          title: `${verb} ${count} instance${count === 1 ? "" : "s"}`,
          text: `The sidecar ${verb.toLowerCase()}s every instance matching this filter, in batches; `
            + "you can pause or cancel it on its page."
            + (action.value === "REPLAY" ? " A replay runs each instance again as a new instance <key>~r<n>: "
              + "the steps after the chosen one run again, side effects included." : ""),
          okLabel: `${verb} ${count}`,
          extra: h("p", { class: "mono" }, JSON.stringify(selector)),
          run: async (actor, reason) => (await rpc("OperationService", "StartOperation",
            { action: `BULK_ACTION_${action.value}`, selector, actor, reason, ...extra() })).operation,
        });
        if (op && op.id) location.hash = `#/operations?id=${op.id}`;
      },
    }, `${verb} all ${count}…`);
    result.replaceChildren(
      h("p", { "data-testid": "bulk-count" }, h("b", {}, String(count)), ` instance${count === 1 ? "" : "s"} match`,
        count > (got.sample || []).length ? `; the first ${(got.sample || []).length}:` : ":"),
      sample, start);
  };
  return h("div", { class: "panel", id: "bulk" },
    h("div", { class: "actions" }, h("b", {}, "Every match at once:"), action, stepBox, versionBox,
      h("button", { type: "button", id: "bulk-preview-button", class: "secondary", onclick: preview }, "Preview"),
      h("span", { class: "muted" }, "acts on all the instances this filter matches, not only this page")),
    result);
}

function actionText(op) {
  return enumName(op.action, "BULK_ACTION_").toLowerCase()
    + (Number(op.toVersion || 0) ? ` to version ${op.toVersion}` : "")
    + (op.replayFromStep ? ` from step ${op.replayFromStep}` : "");
}

function progressText(op) {
  const taken = Number(op.acted || 0) + Number(op.skipped || 0);
  return `${taken} of ${op.matchedAtStart || 0} taken · ${op.acted || 0} acted on · ${op.skipped || 0} skipped`;
}

function operationStatus(op) {
  return enumName(op.status, "OPERATION_STATUS_").toLowerCase();
}

export async function renderOperations(params) {
  if (params.get("id")) {
    await renderOperation(params.get("id"));
    return;
  }
  const list = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  show(h("h1", {}, "Operations"), h("p", { class: "muted" },
    "Bulk retries, resumes and cancellations; start one from the instance list's filter (Every match at once)."),
  list);
  try {
    const r = await rpc("OperationService", "ListOperations", { pageSize: 100 });
    const ops = r.operations || [];
    list.replaceChildren(ops.length ? h("table", { "data-testid": "operations-table" },
      h("thead", {}, h("tr", {}, ["#", "Action", "Status", "Progress", "By", "Reason", "Filter", "Started"]
        .map((t) => h("th", {}, t)))),
      h("tbody", {}, ops.map((op) => h("tr", {},
        h("td", {}, h("a", { href: `#/operations?id=${op.id}` }, String(op.id))),
        h("td", {}, actionText(op)),
        h("td", {}, badge(operationStatus(op), operationStatus(op))),
        h("td", {}, progressText(op)), h("td", {}, op.actor), h("td", {}, op.reason),
        h("td", { class: "mono" }, op.selectorJson), h("td", {}, fmtTime(op.createdAt))))))
      : h("p", { class: "muted" }, "No operation yet."));
  } catch (err) {
    list.replaceChildren(errorBox(err));
  }
}

async function renderOperation(id) {
  const box = h("div", { id: "operation" }, h("p", { class: "muted" }, "Loading…"));
  show(h("h1", {}, `Operation ${id}`), h("p", {}, h("a", { href: "#/operations" }, "« All operations")), box);
  const act = (method, label) => h("button", {
    type: "button", class: "secondary", id: `operation-${label.toLowerCase()}`,
    onclick: async () => {
      try {
        await rpc("OperationService", method, { id, actor: localStorage.getItem("durable.console.actor") || "console" });
      } catch (err) {
        box.append(errorBox(err));
      }
      await refresh();
    },
  }, label);
  let timer = null;
  const refresh = async () => {
    if (!document.body.contains(box)) return; // the operator went elsewhere
    let op;
    try {
      op = (await rpc("OperationService", "GetOperation", { id })).operation;
    } catch (err) {
      box.replaceChildren(errorBox(err));
      return;
    }
    const status = operationStatus(op);
    const taken = Number(op.acted || 0) + Number(op.skipped || 0);
    const total = Math.max(Number(op.matchedAtStart || 0), taken, 1);
    box.replaceChildren(h("div", { class: "panel" },
      h("dl", { class: "facts" },
        h("dt", {}, "Action"), h("dd", {}, actionText(op)),
        h("dt", {}, "Status"), h("dd", { "data-testid": "operation-status" }, badge(status, status)),
        h("dt", {}, "Progress"), h("dd", { "data-testid": "operation-progress" }, progressText(op)),
        h("dt", {}, "By"), h("dd", {}, `${op.actor}: ${op.reason}`),
        h("dt", {}, "Filter"), h("dd", { class: "mono" }, op.selectorJson),
        h("dt", {}, "Started"), h("dd", {}, fmtTime(op.createdAt)),
        h("dt", {}, "Finished"), h("dd", {}, fmtTime(op.finishedAt) || "–"),
        h("dt", {}, "Last taken"), h("dd", { class: "mono" }, op.lastInstanceKey
          ? h("a", { href: instanceHref(op.lastWorkflowId, op.lastInstanceKey) }, op.lastInstanceKey) : "–"),
        op.lastSkip ? [h("dt", {}, "Last skipped"), h("dd", {}, op.lastSkip)] : ""),
      h("progress", { max: String(total), value: String(taken), class: "wide" }),
      may("operate") ? h("div", { class: "actions" },
        status === "running" ? act("PauseOperation", "Pause") : "",
        status === "paused" ? act("ContinueOperation", "Continue") : "",
        status === "running" || status === "paused" ? act("CancelOperation", "Cancel") : "") : ""));
    if (status === "running") {
      clearTimeout(timer);
      timer = setTimeout(refresh, 1000);
    }
  };
  await refresh();
}
