// @ts-check
// Asking for the write token in the page (a form, never prompt()) and writes that ask for it on a
// 401; the token's storage and headers are lib/auth.js.

import { NEEDS_TOKEN, refusal, savedToken, saveToken, withToken } from "../lib/auth.js";

/**
 * Asks for a token with an inline form in `container` (in a dialog when there is none).
 * Resolves with the token typed (saved for the tab), or null when the person cancels.
 */
export function askToken(message, container = null) {
  return new Promise((resolve) => {
    const form = document.createElement("form");
    form.className = "token-form";
    form.innerHTML =
      "<p class='token-message' role='alert'></p>" +
      "<label class='token-label'>Token <input type='password' name='token' autocomplete='off' spellcheck='false' required></label>" +
      "<div class='token-actions'><button type='submit' class='button button-small button-primary'>Use this token</button>" +
      "<button type='button' class='button button-small' data-token-cancel>Cancel</button></div>" +
      "<p class='muted small'>Kept for this tab only. Whoever runs this server can give you one.</p>";
    form.querySelector(".token-message").textContent = message;
    const input = form.querySelector("input");
    let dialog = null;
    if (container) {
      container.querySelector(".token-form")?.remove();
      container.append(form);
    } else {
      dialog = document.createElement("dialog");
      dialog.className = "keys token-dialog";
      dialog.setAttribute("aria-label", "Token");
      dialog.append(form);
      document.body.append(dialog);
      dialog.showModal();
    }
    const finish = (token) => {
      form.remove();
      dialog?.close();
      dialog?.remove();
      if (token) saveToken(token);
      resolve(token);
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (token) finish(token);
    });
    form.querySelector("[data-token-cancel]").addEventListener("click", () => finish(null));
    // Keys typed in the field are not the page's shortcuts; Esc cancels.
    form.addEventListener("keydown", (event) => {
      event.stopPropagation();
      if (event.key === "Escape") {
        event.preventDefault();
        finish(null);
      }
    });
    dialog?.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(null);
    });
    input.focus();
  });
}

/**
 * fetch() for a write (PATCH, DELETE, POST): sends the tab's token; on 401 asks for one (in
 * `container`, else a dialog) and tries again until it is accepted or the person cancels, in
 * which case the 401 response is returned.
 */
export async function writeFetch(url, init = {}, container = null) {
  for (;;) {
    const response = await fetch(url, { ...init, headers: withToken(init.headers) });
    if (response.status !== 401) return response;
    const token = await askToken(savedToken() ? `That token was refused: ${await refusal(response)}` : NEEDS_TOKEN, container);
    if (!token) return response;
  }
}
