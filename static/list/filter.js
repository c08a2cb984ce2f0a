// @ts-check
// The list page's filter box: rows whose search text holds every typed word stay shown.

export const search = /** @type {HTMLInputElement | null} */ (document.getElementById("search"));
export const table = /** @type {HTMLTableElement | null} */ (document.getElementById("snapshot-table"));
const count = /** @type {HTMLElement | null} */ (document.querySelector(".count"));
const noMatch = /** @type {HTMLElement | null} */ (document.getElementById("no-match"));

export function filter() {
  const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
  const rows = [...(table?.tBodies[0].rows ?? [])];
  let shown = 0;
  // Rows deleted from this page stay hidden (until Undo) and are not counted.
  const kept = rows.filter((row) => !row.dataset.deleted);
  for (const row of rows) {
    const visible = !row.dataset.deleted && words.every((word) => row.dataset.search.includes(word));
    row.hidden = !visible;
    if (visible) shown += 1;
  }
  if (noMatch) noMatch.hidden = shown > 0 || kept.length === 0;
  if (count) count.textContent = words.length > 0 ? `${shown} of ${kept.length}` : String(kept.length);
}

function clearFilter() {
  search.value = "";
  filter();
}

search?.addEventListener("input", filter);
search?.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    event.preventDefault();
    clearFilter();
    search.blur();
  }
  if (event.key === "Enter") {
    // Enter opens the first snapshot left by the filter.
    const first = [...(table?.tBodies[0].rows ?? [])].find((row) => !row.hidden);
    /** @type {HTMLAnchorElement | null | undefined} */ (first?.querySelector("a.name"))?.click();
  }
});
document.querySelector("[data-clear-filter]")?.addEventListener("click", () => {
  clearFilter();
  search.focus();
});
// The browser may restore the box's text on Back; apply it.
if (search?.value) filter();
