// The group page (`/g/{name}`): one row per member; select two to compare them.

import { copyLink, isShortcut, keyboardHelp, showTimes } from "./views/page.js";

const table = document.getElementById("group-table");
const rows = [...table.tBodies[0].rows];
const compare = document.getElementById("compare-selected");
const counter = document.getElementById("selected-count");

// Bars to scale (widths come from the server as data attributes; the CSP forbids style=).
for (const bar of table.querySelectorAll(".meter-bar[data-width]")) bar.style.width = `${bar.dataset.width}%`;
for (const mark of table.querySelectorAll(".meter-median[data-left]")) mark.style.left = `${mark.dataset.left}%`;

/** Selected rows, in the order they were selected. */
let selected = [];

function update() {
  for (const row of rows) row.classList.toggle("selected", selected.includes(row));
  counter.textContent = `${selected.length} of 2`;
  if (selected.length === 2) {
    // The older upload is the before side.
    const [a, b] = [...selected].sort((x, y) => Number(x.dataset.uploaded) - Number(y.dataset.uploaded));
    compare.href = `/compare/${a.dataset.id}/${b.dataset.id}`;
    compare.removeAttribute("aria-disabled");
    const name = (row) => row.querySelector("a.name").textContent.trim();
    compare.title = `Compare ${name(a)} (before) with ${name(b)} (after) (c)`;
  } else {
    compare.removeAttribute("href");
    compare.setAttribute("aria-disabled", "true");
    compare.title = selected.length > 2 ? "Select exactly two snapshots to compare them" : "Select two snapshots below to compare them (c)";
  }
}

for (const row of rows) {
  const box = row.querySelector("input.select-row");
  box.addEventListener("change", () => {
    selected = selected.filter((r) => r !== row);
    if (box.checked) selected.push(row);
    update();
  });
}
// The browser may restore checkboxes on Back.
selected = rows.filter((row) => row.querySelector("input.select-row").checked);
update();

document.getElementById("copy-link").addEventListener("click", () => copyLink());

document.addEventListener("keydown", (event) => {
  if (!isShortcut(event) && !(event.key === "x" && event.target.matches?.("input.select-row"))) return;
  const focusedRow = document.activeElement?.closest?.("#group-table tbody tr");
  if (event.key === "c" && compare.href) {
    window.location.assign(compare.href);
  } else if (event.key === "y") {
    document.getElementById("copy-link").click();
  } else if (event.key === "x" && focusedRow) {
    event.preventDefault();
    focusedRow.querySelector("input.select-row").click();
  } else if (event.key === "j" || event.key === "k") {
    event.preventDefault();
    const i = rows.indexOf(focusedRow);
    const next = rows[Math.min(rows.length - 1, Math.max(0, i < 0 ? 0 : i + (event.key === "j" ? 1 : -1)))];
    next?.querySelector("a.name")?.focus();
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
