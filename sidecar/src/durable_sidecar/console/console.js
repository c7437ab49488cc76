// durable-n8n console: plain JavaScript, no framework, no build step, nothing loaded from elsewhere.
// Every read and every action is a call of the durable.v1 contract on the HTTP/JSON face
// (POST /durable.v1.<Service>/<Method>, protobuf JSON) with the operator's bearer token:
// the console has no API of its own and sees exactly what the token's namespace may see.
// This file is the entry point (a module): the routes and the start; the pages live in their own modules.

import { jsonDiff, nodeDiff } from "./diff.js";
import { renderInstance, renderInstances } from "./instances.js";
import { renderKeys } from "./keys.js";
import { renderLimits } from "./limits.js";
import { renderOperations } from "./operations.js";
import { TOKEN_KEY, caller, config, encodeBytes, errorBox, h, rpc, show } from "./lib.js";
import { renderLogin } from "./login.js";
import { renderVersions } from "./versions.js";

// --- routing ----------------------------------------------------------------------------------------

export async function route() {
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    renderLogin("");
    return;
  }
  document.getElementById("nav").hidden = false;
  await showCaller();
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
    else if (page === "limits") await renderLimits(params);
    else if (page === "operations") await renderOperations(params);
    else await renderInstances(params);
  } catch (err) {
    if (err.status !== 401) show(errorBox(err));
  }
}

/** The namespace the token opens, beside the navigation, and its role (asked once per log-in). */
async function showCaller() {
  const box = document.getElementById("namespace");
  if (box.dataset.token === sessionStorage.getItem(TOKEN_KEY)) return;
  try {
    const got = await rpc("AuditService", "GetCaller", {});
    Object.assign(caller, { namespace: got.namespace || "", role: got.role || "" });
    box.dataset.token = sessionStorage.getItem(TOKEN_KEY) || "";
    box.dataset.role = caller.role;
    box.replaceChildren("namespace ", h("b", {}, caller.namespace), ` · ${caller.role}`);
  } catch (_) {
    Object.assign(caller, { namespace: "", role: "" });
    box.replaceChildren();
    delete box.dataset.token;
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
    const box = document.getElementById("namespace");
    box.replaceChildren();
    delete box.dataset.token;
    Object.assign(caller, { namespace: "", role: "" });
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
