// The instance list, one instance's page with its timeline, and the operator's actions on it.

import { jsonDiff, renderDiff } from "./diff.js";
import { keyTable } from "./keys.js";
import { bulkPanel } from "./operations.js";
import { RpcError, STATUSES, all, badge, confirmAction, decodeBytes, downloadFile, encodeBytes, enumName, errorBox, executionLink, fmtBytes, fmtTime, h, idText, instanceHref, isStalled, may, parseJsonBytes, pretty, rpc, show, statusOf, versionText } from "./lib.js";

// --- instances --------------------------------------------------------------------------------------

/** The n8n process of the lease owner, from its session: "n8n worker pid 4242 on host-1". */
function holderText(holder) {
  if (!holder) return "–";
  const ended = holder.endReason ? ` (session ended: ${holder.endReason})` : "";
  return `n8n ${holder.mode} pid ${holder.pid} on ${holder.host}${ended}`;
}

export function filtersFrom(params) {
  const body = {};
  if (params.get("wf")) body.workflowId = params.get("wf");
  if (params.get("prefix")) body.instanceKeyPrefix = params.get("prefix");
  if (params.get("step")) body.lastStep = params.get("step");
  if (params.get("version")) body.boundVersion = params.get("version");
  if (params.get("from")) body.createdAfter = new Date(params.get("from")).toISOString();
  if (params.get("to")) body.createdBefore = new Date(params.get("to")).toISOString();
  if (params.get("sf")) body.searchFields = searchConditions(params.get("sf"));
  if (params.get("err")) body.errorContains = params.get("err");
  return body;
}

const SEARCH_OPS = { "=": "SEARCH_FIELD_OP_EQ", "<": "SEARCH_FIELD_OP_LT", "<=": "SEARCH_FIELD_OP_LTE",
  ">": "SEARCH_FIELD_OP_GT", ">=": "SEARCH_FIELD_OP_GTE" };

/** "country=DE, amount>=100" as ListInstances' search_fields: a JSON number compares as a number, "quoted" as
 * text, anything else as the text written. A condition without an operator is sent as it is: the sidecar names it. */
export function searchConditions(text) {
  return text.split(",").map((part) => part.trim()).filter(Boolean).map((part) => {
    const m = /^([^<>=]+?)\s*(>=|<=|=|<|>)\s*(.*)$/s.exec(part);
    if (!m) return { name: part, op: "SEARCH_FIELD_OP_EQ", valueJson: "" };
    let value = m[3];
    try {
      const parsed = JSON.parse(m[3]);
      if ((typeof parsed === "number" && Number.isFinite(parsed)) || typeof parsed === "string") value = parsed;
    } catch { /* the text as written */ }
    return { name: m[1].trim(), op: SEARCH_OPS[m[2]], valueJson: encodeBytes(JSON.stringify(value)) };
  });
}

/** An instance's search fields as short text: "customerId=C-42 · amount=99.5". */
export function fieldsText(inst) {
  const fields = parseJsonBytes(inst.searchFieldsJson);
  if (!fields || typeof fields !== "object") return "";
  return Object.entries(fields).map(([k, v]) => `${k}=${v}`).join(" · ");
}

export async function renderInstances(params) {
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
  field("sf", "Search fields", { size: 22, placeholder: "country=DE, amount>=100" }),
  field("err", "Error text", { size: 16, placeholder: "payment API 503" }),
  field("sort", "Sort by field", { size: 12 }),
  h("label", {}, h("input", { type: "checkbox", name: "desc", value: "1", checked: params.get("desc") === "1" }),
    " largest first"),
  h("button", { type: "submit", id: "search" }, "Search"),
  h("a", { href: "#/instances" }, "Clear"));

  const counts = h("div", { class: "counts", id: "counts" });
  const list = h("div", { id: "instances" }, h("p", { class: "muted" }, "Loading…"));
  const bulk = h("div", { id: "bulk-slot" });
  show(h("h1", {}, "Instances"), form, counts, bulk, list);

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
  if (params.get("sort")) {
    body.sortByField = params.get("sort");
    body.sortDescending = params.get("desc") === "1";
  }
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
  const withFields = rows.some((i) => fieldsText(i));
  const next = new URLSearchParams(params);
  next.set("pt", reply.nextPageToken || "");
  const first = new URLSearchParams(params);
  first.delete("pt");
  list.replaceChildren(
    rows.length ? h("table", { "data-testid": "instances-table" },
      h("thead", {}, h("tr", {}, ["Instance key", "Workflow", "Status", "Version", "Last step", "Seq", "Resumes",
        "Created", "Updated", ...(withFields ? ["Search fields"] : [])].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((i) => h("tr", { dataset: { key: i.instanceKey } },
        h("td", {}, h("a", { class: "mono", href: instanceHref(i.workflowId, i.instanceKey) }, i.instanceKey)),
        h("td", { class: "mono" }, i.workflowId),
        h("td", {}, badge(statusOf(i)), isStalled(i) ? [" ", badge("stalled")] : ""),
        h("td", {}, versionText(i)),
        h("td", {}, i.lastStep || "–"),
        h("td", { class: "num" }, i.lastSequence || "0"),
        h("td", { class: "num" }, i.resumeCount || "0"),
        h("td", {}, fmtTime(i.createdAt)),
        h("td", {}, fmtTime(i.updatedAt)),
        withFields ? h("td", { class: "mono fields" }, fieldsText(i) || "–") : ""))))
      : h("p", { class: "muted", "data-testid": "no-instances" }, "No instance matches."),
    h("div", { class: "pager" },
      params.get("pt") ? h("a", { href: `#/instances?${first}` }, "« First page") : "",
      reply.nextPageToken ? h("a", { href: `#/instances?${next}`, id: "next-page" }, "Next page »") : "",
      h("span", {}, `${rows.length} shown`)));
  if (rows.length) bulk.replaceChildren(bulkPanel(filters, status));
}

// --- one instance -----------------------------------------------------------------------------------

export async function optional(promise, fallback) {
  try {
    return await promise;
  } catch (err) {
    if (err.status === 401) throw err;
    return fallback;
  }
}

export async function renderInstance(params) {
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
    ["Bound version", versionText(inst)], ["Version label", inst.versionLabel || "–"],
    ["Last step", inst.lastStep ? `${inst.lastStep} (#${inst.lastSequence})` : "–"],
    ["Checkpoints", inst.checkpointCount || "0"], ["Resumes", inst.resumeCount || "0"],
    ["Lease owner", inst.leaseOwner ? executionLink(wf, inst.leaseOwner) : "–"],
    ["Held by", holderText(got.leaseHolder)],
    ["Lease until", fmtTime(inst.leaseExpiresAt) || "–"], ["Wake at", fmtTime(inst.wakeAt) || "–"],
    ["Created by", executionLink(wf, inst.createdByExecutionId) || "–"], ["Created", fmtTime(inst.createdAt)],
    ["Updated", fmtTime(inst.updatedAt)], ["Finished", fmtTime(inst.finishedAt) || "–"],
  ];
  if (inst.errorMessage) facts.push(["Error / reason", inst.errorMessage]);
  // An error an instance got past (it completed since) is history: the timeline keeps it.
  if (inst.lastError && status !== "COMPLETED") facts.push(["Last error", inst.lastError]);
  if (inst.awaitedEvent) facts.push(["Awaits event", inst.awaitedEvent]);
  if (fieldsText(inst)) facts.push(["Search fields", h("span", { class: "mono" }, fieldsText(inst))]);
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
      h("td", {}, e.execution ? executionLink(wf, e.execution) : e.actor ? idText(e.actor, { class: "muted" }) : ""),
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
        } }, "State") : "",
        e.checkpoint && Number(e.checkpoint.fileCount || 0) > 0 ? h("button", { type: "button", class: "secondary",
          dataset: { files: e.checkpoint.sequence }, onclick: async () => {
            statePanel.replaceChildren(h("p", { class: "muted" }, "Loading…"));
            try {
              const r = await rpc("FileService", "ListCheckpointFiles", { ...ref, sequence: String(e.checkpoint.sequence) });
              statePanel.replaceChildren(h("h2", {}, `Files of checkpoint #${e.checkpoint.sequence} (${e.checkpoint.stepName})`),
                filesTable(r.files || []));
            } catch (err) {
              statePanel.replaceChildren(errorBox(err));
            }
          } }, `Files (${e.checkpoint.fileCount})`) : "")))));

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
    truncatedNote([[events, "audit events"], [checkpoints, "checkpoints"], [changes, "version changes"],
      [signals, "signals"]]),
    timeline,
    h("div", { class: "pager" }, diffButton,
      h("span", {}, cps.length < 2 ? "A diff needs two checkpoints." : "Pick A and B in the timeline (default: the last two).")),
    diffPanel, statePanel,
    h("h2", {}, "Idempotency keys of this instance"), keysTable);
}

/** A checkpoint's files (FileService.ListCheckpointFiles): each downloadable through the same token. */
function filesTable(files) {
  return h("table", { "data-testid": "files" },
    h("thead", {}, h("tr", {}, ["Property", "File name", "Type", "Size", "SHA-256", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, files.map((f) => {
      const status = h("span", { class: "muted" });
      return h("tr", {},
        h("td", { class: "mono" }, f.property), h("td", {}, f.fileName || ""), h("td", { class: "mono" }, f.mimeType || ""),
        h("td", {}, fmtBytes(f.sizeBytes)), h("td", {}, idText(f.sha256, { class: "mono" })),
        h("td", {}, h("button", { type: "button", class: "secondary", dataset: { download: f.property }, onclick: async () => {
          status.textContent = "";
          try {
            await downloadFile(f.sha256, f.fileName, f.mimeType);
          } catch (err) {
            status.textContent = `${err.code}: ${err.message}`;
          }
        } }, "Download"), status));
    })));
}

/** A note where a source of the timeline had more entries than the console reads (the rest exist, unshown). */
function truncatedNote(sources) {
  const cut = sources.filter(([rows]) => rows && rows.truncated).map(([rows, name]) => `the first ${rows.length} ${name}`);
  if (!cut.length) return "";
  return h("p", { class: "note", "data-testid": "timeline-truncated" }, `This timeline shows only ${cut.join(", ")}: `
    + "the instance has more. Page through them all with AuditService.ListInstanceEvents, "
    + "CheckpointService.ListCheckpoints, VersionService.ListChangeLog and EventService.ListEvents on the "
    + "HTTP/JSON face (docs/http-json.md).");
}

export function instanceActions(inst, reload) {
  const status = statusOf(inst);
  const wf = inst.workflowId, key = inst.instanceKey;
  const ref = { workflowId: wf, instanceKey: key };
  const out = h("div", { class: "actions panel", id: "actions" }, h("b", {}, "Operator actions: "));
  const done = (result) => { if (result) reload(); };
  const parked = status === "SUSPENDED" || ["RUN_STATE_WAITING", "RUN_STATE_SCHEDULED"].includes(inst.runState)
    || (status === "RUNNING" && !inst.runState && inst.wakeAt);
  if (!may("operate")) {
    out.append(h("span", { class: "muted", "data-testid": "read-only" }, "none with this token (its role is read)."));
    return out;
  }
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
  if (["COMPLETED", "FAILED", "CANCELLED"].includes(status)) {
    const from = h("select", { id: "replay-from" },
      h("option", { value: "0" }, "its start item (run it all again)"),
      Array.from({ length: Number(inst.lastSequence || 0) }, (_, i) => i + 1).reverse().map((n) =>
        h("option", { value: String(n), selected: n === Number(inst.lastSequence || 0) }, `checkpoint ${n}`)));
    out.append(h("button", { type: "button", class: "secondary", id: "replay-instance",
      onclick: async () => {
        const fork = await confirmAction({
          title: "Replay this instance?",
          text: `A new instance ${key}~r<n> starts from the chosen checkpoint of ${wf} / ${key} and the Resume `
            + "Trigger runs it: every step after that checkpoint runs again, side effects included (with new "
            + "idempotency keys). This instance stays as it is.",
          okLabel: "Replay",
          extra: h("label", {}, "From", from),
          run: async (actor, reason) => (await rpc("RecoveryService", "ReplayInstance",
            { ...ref, fromSequence: from.value, actor, reason })).instance,
        });
        if (fork && fork.instanceKey) location.hash = instanceHref(wf, fork.instanceKey);
      } }, "Replay…"));
  }
  if ((status === "RUNNING" || status === "SUSPENDED") && may("admin")) {
    out.append(h("button", { type: "button", class: "secondary", id: "move-instance",
      onclick: () => moveDialog(inst).then(done) }, "Move to version…"));
  }
  if (out.children.length === 1) out.append(h("span", { class: "muted" }, `none: the instance is ${status.toLowerCase()}.`));
  return out;
}

export async function moveDialog(inst) {
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
