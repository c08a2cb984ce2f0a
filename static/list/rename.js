// @ts-check
// Renaming from the list: the pencil beside a name (or F2 on a focused row) turns the name into
// a text field; Enter or leaving it saves, Esc puts the old name back. Same limit as the server
// (200 characters, checked there too).

import { h } from "../views/dom.js";
import { toast } from "../views/page.js";
import { selectBox } from "../views/row-selection.js";
import { table } from "./filter.js";
import { patchSnapshot } from "./write.js";

const MAX_NAME_LENGTH = 200;

function startListRename(row) {
  const cell = row.querySelector("td.col-name");
  const link = cell.querySelector("a.name");
  if (cell.querySelector("input.rename-input")) return;
  const old = link.textContent.trim();
  const field = h("input", {
    type: "text",
    className: "rename-input",
    value: old,
    maxLength: MAX_NAME_LENGTH,
    "aria-label": `New name for ${old} (Enter saves, Esc cancels)`,
  });
  link.hidden = true;
  cell.querySelector("[data-rename]").hidden = true;
  link.after(field);
  field.focus();
  field.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const name = field.value.trim();
    field.remove();
    link.hidden = false;
    cell.querySelector("[data-rename]").hidden = false;
    link.focus();
    if (!save || !name || name === old) return;
    link.textContent = name;
    try {
      await patchSnapshot(row.dataset.id, { name });
      row.dataset.search = row.dataset.search.replace(old.toLowerCase(), name.toLowerCase());
      selectBox(row)?.setAttribute("aria-label", `Select ${name}`);
      cell.querySelector("[data-rename]").setAttribute("aria-label", `Rename ${name}`);
      toast(`Renamed to “${name}”`);
    } catch (error) {
      link.textContent = old;
      toast(`Could not rename ${old}: ${error.message}`, 5000);
    }
  };
  field.addEventListener("keydown", (event) => {
    event.stopPropagation();
    if (event.key === "Enter") {
      event.preventDefault();
      finish(true);
    } else if (event.key === "Escape") {
      event.preventDefault();
      finish(false);
    }
  });
  field.addEventListener("blur", () => finish(true));
}

for (const row of table?.tBodies[0].rows ?? []) {
  row.querySelector("[data-rename]")?.addEventListener("click", () => startListRename(row));
}
document.addEventListener("keydown", (event) => {
  if (event.key !== "F2" || event.ctrlKey || event.metaKey || event.altKey) return;
  const row = /** @type {HTMLTableRowElement | null | undefined} */ (document.activeElement?.closest?.("#snapshot-table tbody tr"));
  if (!row || document.activeElement.matches("input.rename-input")) return;
  event.preventDefault();
  startListRename(row);
});
