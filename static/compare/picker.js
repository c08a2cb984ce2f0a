// @ts-check
// The picker (`/compare/{a}`): choose the snapshot to compare `a` with, and which side `a` is.

import { isShortcut, keyboardHelp } from "../views/page.js";

export function pickerPage(root) {
  const me = root.dataset.before;
  const links = [...root.querySelectorAll("a[data-other]")];
  const buttons = [...root.querySelectorAll("[data-role]")];
  const setRole = (role) => {
    for (const button of buttons) button.setAttribute("aria-pressed", String(button.dataset.role === role));
    const title = root.querySelector(".compare-title .side");
    title?.classList.toggle("side-before", role === "before");
    title?.classList.toggle("side-after", role === "after");
    for (const link of links) {
      const other = link.dataset.other;
      link.href = role === "before" ? `/compare/${me}/${other}` : `/compare/${other}/${me}`;
    }
  };
  for (const button of buttons) button.addEventListener("click", () => setRole(button.dataset.role));

  const search = /** @type {HTMLInputElement} */ (document.getElementById("search"));
  const rows = [...root.querySelectorAll("tbody tr")];
  const noMatch = document.getElementById("no-match");
  const filter = () => {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const row of rows) {
      row.hidden = !words.every((w) => row.dataset.search.includes(w));
      if (!row.hidden) shown += 1;
    }
    if (noMatch) noMatch.hidden = shown > 0;
  };
  search?.addEventListener("input", filter);
  search?.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      search.value = "";
      filter();
      search.blur();
    } else if (event.key === "Enter") {
      rows
        .find((r) => !r.hidden)
        ?.querySelector("a.name")
        ?.click();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (!isShortcut(event)) return;
    if (event.key === "/" && search) {
      event.preventDefault();
      search.focus();
    } else if (event.key === "b") setRole("before");
    else if (event.key === "a") setRole("after");
  });
  keyboardHelp([
    ["/", "Filter the list"],
    ["Enter", "Compare with the first match (in the filter)"],
    ["b", "This snapshot is the before side"],
    ["a", "This snapshot is the after side"],
    ["?", "Show these keys"],
  ]);
}
