// @ts-check
// Selecting table rows by their checkbox, to compare two of them: the list page (index.js) and a
// group's page (group.js). A row is a `<tr>` with `data-id`, `data-uploaded` (ms),
// an `a.name` and an `input.select-row`.

/**
 * The checkbox that selects `row`.
 * @param {HTMLTableRowElement} row
 * @returns {HTMLInputElement}
 */
export function selectBox(row) {
  return /** @type {HTMLInputElement} */ (row.querySelector("input.select-row"));
}

/**
 * The name a row shows.
 * @param {HTMLTableRowElement} row
 */
export function rowName(row) {
  return row.querySelector("a.name")?.textContent?.trim() ?? "";
}

export class RowSelection {
  /**
   * Follows the checkboxes of `rows`, calling `onChange` after each change (not now: the page
   * calls its own once ready).
   * @param {HTMLTableRowElement[]} rows
   * @param {() => void} onChange
   */
  constructor(rows, onChange) {
    /** The selected rows, in the order they were selected; at first the boxes the browser
     * restored on Back. */
    this.rows = rows.filter((row) => selectBox(row).checked);
    for (const row of rows) {
      const box = selectBox(row);
      box.addEventListener("change", () => {
        this.choose(row, box.checked);
        onChange();
      });
    }
  }

  /**
   * Selects `row` (last) or unselects it.
   * @param {HTMLTableRowElement} row
   * @param {boolean} selected
   */
  choose(row, selected) {
    this.rows = this.rows.filter((r) => r !== row);
    if (selected) this.rows.push(row);
  }
}

/**
 * Points `link` at the comparison of the two selected rows, the older upload the before side,
 * or disables it (with `why` as its title) unless exactly two are selected.
 * @param {HTMLAnchorElement} link
 * @param {HTMLTableRowElement[]} selected
 * @param {string} why
 */
export function linkComparison(link, selected, why) {
  if (selected.length !== 2) {
    link.removeAttribute("href");
    link.setAttribute("aria-disabled", "true");
    link.title = why;
    return;
  }
  const [a, b] = [...selected].sort((x, y) => Number(x.dataset.uploaded) - Number(y.dataset.uploaded));
  link.href = `/compare/${a.dataset.id}/${b.dataset.id}`;
  link.removeAttribute("aria-disabled");
  link.title = `Compare ${rowName(a)} (before) with ${rowName(b)} (after) (c)`;
}
