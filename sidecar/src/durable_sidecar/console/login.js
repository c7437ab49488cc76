// The log-in page: a bearer token, kept in this tab only.

import { route } from "./console.js";
import { TOKEN_KEY, h, rpc, show } from "./lib.js";

// --- login -------------------------------------------------------------------------------------------

export function renderLogin(message) {
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
