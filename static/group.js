// @ts-check
// The group page (`/g/{name}`): one row per member; select two to compare them.

import { copyLink, isShortcut, keyboardHelp, showTimes } from "./views/page.js";
import { linkComparison, RowSelection, selectBox } from "./views/row-selection.js";

const table = /** @type {HTMLTableElement} */ (document.getElementById("group-table"));
const rows = [...table.tBodies[0].rows];
const compare = /** @type {HTMLAnchorElement} */ (document.getElementById("compare-selected"));
const counter = document.getElementById("selected-count");

// Bars to scale (widths come from the server as data attributes; the CSP forbids style=).
for (const bar of /** @type {NodeListOf<HTMLElement>} */ (table.querySelectorAll(".meter-bar[data-width]"))) bar.style.width = `${bar.dataset.width}%`;
for (const mark of /** @type {NodeListOf<HTMLElement>} */ (table.querySelectorAll(".meter-median[data-left]"))) mark.style.left = `${mark.dataset.left}%`;

const selection = new RowSelection(rows, update);

function update() {
  const selected = selection.rows;
  for (const row of rows) row.classList.toggle("selected", selected.includes(row));
  counter.textContent = `${selected.length} of 2`;
  linkComparison(compare, selected, selected.length > 2 ? "Select exactly two snapshots to compare them" : "Select two snapshots below to compare them (c)");
}
update();

document.getElementById("copy-link").addEventListener("click", () => copyLink());

document.addEventListener("keydown", (event) => {
  if (!isShortcut(event) && !(event.key === "x" && /** @type {Element} */ (event.target).matches?.("input.select-row"))) return;
  const focusedRow = /** @type {HTMLTableRowElement | null | undefined} */ (document.activeElement?.closest?.("#group-table tbody tr"));
  if (event.key === "c" && compare.href) {
    window.location.assign(compare.href);
  } else if (event.key === "y") {
    document.getElementById("copy-link").click();
  } else if (event.key === "x" && focusedRow) {
    event.preventDefault();
    selectBox(focusedRow).click();
  } else if (event.key === "j" || event.key === "k") {
    event.preventDefault();
    const i = rows.indexOf(focusedRow);
    const next = rows[Math.min(rows.length - 1, Math.max(0, i < 0 ? 0 : i + (event.key === "j" ? 1 : -1)))];
    /** @type {HTMLAnchorElement | null | undefined} */ (next?.querySelector("a.name"))?.focus();
  }
});

showTimes();
keyboardHelp([
  ["j k", "Next or previous member"],
  ["x", "Select the focused member"],
  ["c", "Compare the two selected"],
  ["y", "Copy the link to this group"],
  ["?", "Show these keys"],
]);
