// @ts-check
// The snapshot page: rename in place, copy the link, stack bars.

import { startViews, VIEW_KEYS, viewSearch } from "./views/app.js";
import { writeFetch } from "./views/auth.js";
import { showOomPanels } from "./views/oom.js";
import { copyLink, isShortcut, keyboardHelp, showTimes, toast } from "./views/page.js";
import { showRoleBars } from "./views/roles.js";

const root = /** @type {HTMLElement} */ (document.querySelector(".snapshot"));
const id = root.dataset.id;
const title = document.getElementById("snapshot-name");

function startRename() {
  if (title.querySelector("input")) return;
  const old = title.textContent.trim();
  const input = document.createElement("input");
  input.type = "text";
  input.value = old;
  input.maxLength = 200;
  input.setAttribute("aria-label", "Snapshot name (Enter saves, Esc cancels)");
  title.classList.add("editing");
  title.textContent = "";
  title.append(input);
  input.focus();
  input.select();
  let done = false;
  const finish = async (save, refocus = true) => {
    if (done) return;
    done = true;
    const name = input.value.trim();
    title.classList.remove("editing");
    title.textContent = save && name ? name : old;
    if (refocus) title.focus();
    if (!save || !name || name === old) return;
    let response = null;
    try {
      response = await writeFetch(`/api/snapshots/${id}`, {
        method: "PATCH",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ name }),
      });
    } catch {
      // Network failure: handled below.
    }
    if (response?.ok) {
      document.title = `${name} · snapview`;
      toast("Renamed");
    } else {
      title.textContent = old;
      const body = await response?.json().catch(() => null);
      toast(body?.error?.message ?? "Renaming failed: the server could not be reached");
    }
  };
  input.addEventListener("keydown", (event) => {
    event.stopPropagation();
    if (event.key === "Enter") finish(true);
    if (event.key === "Escape") {
      event.preventDefault();
      finish(false);
    }
  });
  input.addEventListener("blur", () => finish(true, false));
}

title.addEventListener("click", startRename);
title.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && event.target === title) {
    event.preventDefault();
    startRename();
  }
});

function copyViewLink() {
  // The view state (tab, window, moment, …) is in the query: the link opens what is shown.
  copyLink(`${root.dataset.shareUrl || `${window.location.origin}${window.location.pathname}`}${viewSearch()}`);
}

document.getElementById("copy-link").addEventListener("click", copyViewLink);

for (const bar of /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll(".stack-bar[data-width]"))) {
  bar.style.width = `${Math.min(100, Math.max(0, Number(bar.dataset.width) || 0))}%`;
}

showRoleBars(document.getElementById("overview"));

document.addEventListener("keydown", (event) => {
  if (!isShortcut(event)) return;
  if (event.key === "r") {
    event.preventDefault();
    startRename();
  } else if (event.key === "c") {
    event.preventDefault();
    copyViewLink();
  }
});

// After Back or Forward the browser may show its cached copy of this page: bring the name up to
// date (it may have been renamed since).
if (/** @type {PerformanceNavigationTiming | undefined} */ (performance.getEntriesByType("navigation")[0])?.type === "back_forward") {
  fetch(`/api/snapshots/${id}`, { cache: "no-store" })
    .then((response) => (response.ok ? response.json() : null))
    .then((body) => {
      if (body?.name && !title.querySelector("input") && title.textContent.trim() !== body.name) {
        title.textContent = body.name;
        document.title = `${body.name} · snapview`;
      }
    })
    .catch(() => {});
}

showTimes();
keyboardHelp([
  ...VIEW_KEYS,
  ["r", "Rename (or Enter on the name)"],
  ["c", "Copy the link to this view"],
  ["Enter", "Open or close a stack (when focused)"],
  ["?", "Show these keys"],
]);
showOomPanels(id);
startViews().catch((error) => {
  console.warn("the views failed to start", error);
  toast(`The views could not start: ${error.message}`, 8000);
});
