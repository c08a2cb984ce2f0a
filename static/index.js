// @ts-check
// The snapshot list page: its parts are in list/ (uploads, the filter box, selecting and deleting
// rows, renaming); here are what ties them together: reloading a stale list, the shortcuts and
// the keyboard help.

import { search } from "./list/filter.js";
import { chooseFiles, inFlight } from "./list/upload.js";
import { isShortcut, keyboardHelp, showTimes } from "./views/page.js";
import "./list/selection.js";
import "./list/rename.js";

// Coming back with the Back button may show this page as it was left ("Opening…") or as the
// browser cached it (without the snapshot just added, or with an old name): load it afresh.
window.addEventListener("pageshow", (event) => {
  if (event.persisted) window.location.reload();
});

/** After Back or Forward, reloads the page if the list it shows is not the server's. */
async function reloadIfStale() {
  if (/** @type {PerformanceNavigationTiming | undefined} */ (performance.getEntriesByType("navigation")[0])?.type !== "back_forward") return;
  try {
    const response = await fetch("/api/snapshots", { cache: "no-store" });
    if (!response.ok) return;
    const { snapshots } = await response.json();
    const served = snapshots.map((s) => `/s/${s.id} ${s.name}`).join("\n");
    const shown = [...document.querySelectorAll("table.snapshots a.name")].map((a) => `${a.getAttribute("href")} ${a.textContent.trim()}`).join("\n");
    if (served !== shown) window.location.reload();
  } catch {
    // Offline: the cached list is better than none.
  }
}
reloadIfStale();

// A note recorded for several devices shows once per snapshot.
for (const cell of document.querySelectorAll("table.snapshots td.col-name")) {
  const seen = new Set();
  for (const badge of /** @type {NodeListOf<HTMLElement>} */ (cell.querySelectorAll(".badge[data-note]"))) {
    if (seen.has(badge.dataset.note)) badge.remove();
    seen.add(badge.dataset.note);
  }
}

document.addEventListener("keydown", (event) => {
  if (!isShortcut(event)) return;
  if (event.key === "/" && search) {
    event.preventDefault();
    search.focus();
    search.select();
  } else if (event.key === "u" && !inFlight()) {
    event.preventDefault();
    chooseFiles();
  }
});

showTimes();
const keys = [];
if (search) {
  keys.push(["/", "Filter the list"], ["Enter", "Open the first match (in the filter)"], ["Esc", "Clear the filter"]);
}
if (search) {
  keys.push(
    ["x", "Select the focused row"],
    ["c", "Compare the two selected"],
    ["g", "Group the selected…"],
    ["d", "Delete the selected"],
    ["z", "Undo the last delete"],
  );
}
keys.push(["F2", "Rename the focused row"], ["u", "Upload: choose files"], ["Esc", "Cancel the uploads"], ["?", "Show these keys"]);
keyboardHelp(keys);
