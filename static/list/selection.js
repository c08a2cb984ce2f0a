// @ts-check
// Selecting rows on the list page: compare two, or label several with a group, or delete them.

import { isShortcut, toast } from "../views/page.js";
import { linkComparison, RowSelection, rowName, selectBox } from "../views/row-selection.js";
import { filter, search, table } from "./filter.js";
import { patchSnapshot, send } from "./write.js";

const compareButton = /** @type {HTMLAnchorElement | null} */ (document.getElementById("compare-selected"));
const groupButton = /** @type {HTMLButtonElement} */ (document.getElementById("group-selected"));
const selectionCount = /** @type {HTMLElement} */ (document.getElementById("selection-count"));
const selectAll = /** @type {HTMLInputElement} */ (document.getElementById("select-all"));
const groupDialog = /** @type {HTMLDialogElement} */ (document.getElementById("group-dialog"));
const deleteButton = /** @type {HTMLButtonElement} */ (document.getElementById("delete-selected"));
/** The selected rows (none where the page offers no comparing: no table, or read-only). */
const selection = new RowSelection(table && compareButton ? [...table.tBodies[0].rows] : [], updateSelection);

function updateSelection() {
  const selected = selection.rows;
  const rows = [...(table?.tBodies[0].rows ?? [])];
  for (const row of rows) row.classList.toggle("selected", selected.includes(row));
  if (selected.length === 0) selectionCount.textContent = "Select rows to compare, group or delete";
  else if (selected.length === 1) selectionCount.textContent = "1 selected · pick one more to compare";
  else selectionCount.textContent = `${selected.length} selected`;
  linkComparison(compareButton, selected, "Select exactly two snapshots to compare them; the older one is the before side (c)");
  groupButton.disabled = selected.length === 0;
  deleteButton.disabled = selected.length === 0;
  const visible = rows.filter((row) => !row.hidden);
  const chosen = visible.filter((row) => selected.includes(row)).length;
  selectAll.checked = visible.length > 0 && chosen === visible.length;
  selectAll.indeterminate = chosen > 0 && chosen < visible.length;
}

if (table && compareButton) {
  const rows = [...table.tBodies[0].rows];
  selectAll.addEventListener("change", () => {
    for (const row of rows) {
      if (row.hidden) continue;
      selectBox(row).checked = selectAll.checked;
      selection.choose(row, selectAll.checked);
    }
    updateSelection();
  });
  search?.addEventListener("input", updateSelection);
  updateSelection();

  // The "Group…" dialog.
  const nameInput = /** @type {HTMLInputElement} */ (document.getElementById("group-name"));
  const groupError = /** @type {HTMLElement} */ (document.getElementById("group-error"));
  const openGroupDialog = () => {
    if (selection.rows.length === 0) return;
    const groups = [...new Set(selection.rows.map((row) => row.dataset.group))];
    nameInput.value = groups.length === 1 ? groups[0] : "";
    document.getElementById("group-dialog-count").textContent =
      selection.rows.length === 1 ? `“${rowName(selection.rows[0])}”` : `${selection.rows.length} snapshots`;
    document.getElementById("group-clear").hidden = selection.rows.every((row) => !row.dataset.group);
    groupError.hidden = true;
    groupDialog.showModal();
    nameInput.focus();
    nameInput.select();
  };
  const saveGroup = async (group) => {
    groupError.hidden = true;
    for (const button of groupDialog.querySelectorAll("button")) button.disabled = true;
    try {
      for (const row of selection.rows) {
        await patchSnapshot(row.dataset.id, { group });
      }
      groupDialog.close();
      toast(group ? `Grouped as ${group}` : "Removed from the group");
      window.location.reload();
    } catch (error) {
      groupError.textContent = `Could not save the group: ${error.message}`;
      groupError.hidden = false;
    } finally {
      for (const button of groupDialog.querySelectorAll("button")) button.disabled = false;
    }
  };
  groupButton.addEventListener("click", openGroupDialog);
  document.getElementById("group-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const group = nameInput.value.trim();
    if (!group) {
      groupError.textContent = "Type a group name (or use “Remove from group”).";
      groupError.hidden = false;
      nameInput.focus();
      return;
    }
    saveGroup(group);
  });
  document.getElementById("group-clear").addEventListener("click", () => saveGroup(""));
  groupDialog.querySelector("[data-close]").addEventListener("click", () => groupDialog.close());

  document.addEventListener("keydown", (event) => {
    const onCheckbox = event.target instanceof HTMLInputElement && event.target.type === "checkbox";
    if (!isShortcut(event) && !onCheckbox) return;
    if (event.ctrlKey || event.metaKey || event.altKey || document.querySelector("dialog[open]")) return;
    const row = /** @type {HTMLTableRowElement | null | undefined} */ (document.activeElement?.closest?.("#snapshot-table tbody tr"));
    if (event.key === "x" && row) {
      event.preventDefault();
      selectBox(row).click();
    } else if (event.key === "c" && compareButton.href) {
      event.preventDefault();
      window.location.assign(compareButton.href);
    } else if (event.key === "g" && selection.rows.length > 0) {
      event.preventDefault();
      openGroupDialog();
    } else if (event.key === "d" && selection.rows.length > 0) {
      event.preventDefault();
      deleteSelected();
    } else if (event.key === "z" && lastDeleted.length > 0) {
      event.preventDefault();
      undoDelete();
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Deleting rows, and undoing it: a delete moves snapshots to the server's trash, so a mistaken
// click costs nothing. The rows are hidden, not reloaded away, so the Undo bar stays put.

const undoBar = /** @type {HTMLElement} */ (document.getElementById("undo-bar"));
/** The rows the last delete removed, for Undo. */
let lastDeleted = [];

async function deleteSelected() {
  if (selection.rows.length === 0) return;
  const rows = [...selection.rows];
  deleteButton.disabled = true;
  const done = [];
  let failure = null;
  for (const row of rows) {
    try {
      await send("DELETE", `/api/snapshots/${row.dataset.id}`);
      done.push(row);
    } catch (error) {
      failure = `Could not delete ${rowName(row)}: ${error.message}`;
    }
  }
  for (const row of done) {
    row.dataset.deleted = "1";
    selectBox(row).checked = false;
  }
  selection.rows = selection.rows.filter((row) => !done.includes(row));
  filter();
  updateSelection();
  if (done.length > 0) {
    lastDeleted = done;
    const what = done.length === 1 ? `“${rowName(done[0])}”` : `${done.length} snapshots`;
    document.getElementById("undo-message").textContent = `Deleted ${what}`;
    undoBar.hidden = false;
    // Straight to Undo, so Enter or Space takes the mistake back.
    document.getElementById("undo-delete").focus();
  }
  if (failure) toast(failure, 5000);
}

async function undoDelete() {
  const rows = lastDeleted;
  if (rows.length === 0) return;
  lastDeleted = [];
  undoBar.hidden = true;
  const restored = [];
  let failure = null;
  for (const row of rows) {
    try {
      await send("POST", `/api/snapshots/${row.dataset.id}/restore`);
      delete row.dataset.deleted;
      restored.push(row);
    } catch (error) {
      failure = `Could not restore ${rowName(row)}: ${error.message}`;
    }
  }
  filter();
  updateSelection();
  if (failure) toast(failure, 5000);
  else toast(restored.length === 1 ? `Restored “${rowName(restored[0])}”` : `Restored ${restored.length} snapshots`);
  restored[0]?.querySelector("a.name")?.focus();
}

if (undoBar && deleteButton) {
  deleteButton.addEventListener("click", deleteSelected);
  document.getElementById("undo-delete").addEventListener("click", undoDelete);
  document.getElementById("undo-dismiss").addEventListener("click", () => {
    undoBar.hidden = true;
    lastDeleted = [];
  });
}
