// The snapshot list: drag-and-drop upload with progress, and the filter box.

import { NEEDS_TOKEN, savedToken, withToken } from "./lib/auth.js";
import { bytes } from "./lib/units.js";
import { askToken, writeFetch } from "./views/auth.js";
import { isShortcut, keyboardHelp, showTimes, toast } from "./views/page.js";

const dropzone = document.getElementById("dropzone");
const input = document.getElementById("file-input");
const idle = dropzone.querySelector(".drop-idle");
const busy = dropzone.querySelector(".drop-busy");
const errorBox = dropzone.querySelector(".drop-error");
const progress = busy.querySelector(".progress");
const bar = busy.querySelector(".progress-bar");
const status = busy.querySelector("[data-upload-status]");
const cancel = busy.querySelector("[data-upload-cancel]");
/** The upload in flight, if any. */
let request = null;

function setBusy(on) {
  idle.hidden = on;
  busy.hidden = !on;
  dropzone.classList.toggle("busy", on);
  dropzone.setAttribute("aria-busy", String(on));
}

function showError(message) {
  request = null;
  errorBox.textContent = message;
  errorBox.hidden = false;
  setBusy(false);
}

function setProgress(percent) {
  bar.style.width = `${percent}%`;
  progress.setAttribute("aria-valuenow", String(percent));
}

/** Sends the file as the raw request body, reporting progress, then opens its page. */
function upload(file) {
  if (request) return;
  errorBox.hidden = true;
  dropzone.querySelector(".token-form")?.remove();
  setBusy(true);
  busy.querySelector("[data-upload-name]").textContent = file.name;
  busy.querySelector("[data-upload-size]").textContent = bytes(file.size);
  progress.classList.remove("indeterminate");
  setProgress(0);
  status.textContent = "Starting…";
  cancel.hidden = false;

  const xhr = new XMLHttpRequest();
  request = xhr;
  xhr.open("POST", `/api/snapshots?filename=${encodeURIComponent(file.name)}`);
  xhr.setRequestHeader("Content-Type", "application/octet-stream");
  for (const [name, value] of Object.entries(withToken())) xhr.setRequestHeader(name, value);
  xhr.upload.addEventListener("progress", (event) => {
    if (!event.lengthComputable || event.total === 0) return;
    const percent = Math.floor((event.loaded / event.total) * 100);
    setProgress(percent);
    status.textContent = `Uploading ${bytes(event.loaded)} of ${bytes(event.total)} · ${percent}%`;
  });
  xhr.upload.addEventListener("load", () => {
    setProgress(100);
    progress.classList.add("indeterminate");
    progress.removeAttribute("aria-valuenow");
    status.textContent = "Reading and analysing the snapshot…";
  });
  xhr.addEventListener("load", () => {
    let body = null;
    try {
      body = JSON.parse(xhr.responseText);
    } catch {
      // Not JSON: a proxy's error page, say.
    }
    if ((xhr.status === 200 || xhr.status === 201) && body?.id) {
      status.textContent = xhr.status === 200 ? "Already here. Opening…" : "Done. Opening…";
      cancel.hidden = true;
      request = null;
      window.location.assign(`/s/${body.id}`);
    } else if (xhr.status === 401) {
      // The server wants a write token: ask for it here, then send the file again.
      request = null;
      setBusy(false);
      const message = savedToken() ? `That token was refused: ${body?.error?.message ?? "it is not valid here."}` : NEEDS_TOKEN;
      askToken(message, dropzone).then((token) => {
        if (token) upload(file);
        else showError(`${file.name} was not added: this server needs a token.`);
      });
    } else {
      const message = body?.error?.message ?? `The server answered ${xhr.status} ${xhr.statusText}.`;
      showError(`Could not add ${file.name}: ${message}`);
    }
  });
  xhr.addEventListener("error", () => showError(`Could not add ${file.name}: the server could not be reached.`));
  xhr.addEventListener("abort", () => showError(`The upload of ${file.name} was cancelled.`));
  xhr.send(file);
}

cancel.addEventListener("click", (event) => {
  event.stopPropagation();
  request?.abort();
});
dropzone.addEventListener("click", (event) => {
  if (request || event.target === input || event.target.closest("label, button, .drop-error, .token-form")) return;
  input.click();
});
dropzone.addEventListener("keydown", (event) => {
  if ((event.key === "Enter" || event.key === " ") && event.target === dropzone && !request) {
    event.preventDefault();
    input.click();
  }
});
input.addEventListener("change", () => {
  if (input.files.length > 0) upload(input.files[0]);
  input.value = "";
});
for (const type of ["dragenter", "dragover"]) {
  dropzone.addEventListener(type, (event) => {
    event.preventDefault();
    if (!request) dropzone.classList.add("dragging");
  });
}
dropzone.addEventListener("dragleave", (event) => {
  // Moving over a child fires dragleave on the zone too; only leaving the zone counts.
  if (!dropzone.contains(event.relatedTarget)) dropzone.classList.remove("dragging");
});
dropzone.addEventListener("drop", (event) => {
  event.preventDefault();
  dropzone.classList.remove("dragging");
  const files = event.dataTransfer?.files;
  if (files && files.length > 0) upload(files[0]);
});
// A file dropped anywhere on the page goes to the drop zone, not to the browser's viewer.
window.addEventListener("dragover", (event) => event.preventDefault());
window.addEventListener("drop", (event) => {
  event.preventDefault();
  if (!dropzone.contains(event.target) && event.dataTransfer?.files.length) upload(event.dataTransfer.files[0]);
});
// Leaving mid-upload loses it: ask first.
window.addEventListener("beforeunload", (event) => {
  if (request) event.preventDefault();
});
// Coming back with the Back button may show this page as it was left ("Opening…") or as the
// browser cached it (without the snapshot just added, or with an old name): load it afresh.
window.addEventListener("pageshow", (event) => {
  if (event.persisted) window.location.reload();
});

/** After Back or Forward, reloads the page if the list it shows is not the server's. */
async function reloadIfStale() {
  if (performance.getEntriesByType("navigation")[0]?.type !== "back_forward") return;
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
  for (const badge of cell.querySelectorAll(".badge[data-note]")) {
    if (seen.has(badge.dataset.note)) badge.remove();
    seen.add(badge.dataset.note);
  }
}

// The filter box.
const search = document.getElementById("search");
const table = document.getElementById("snapshot-table");
const count = document.querySelector(".count");
const noMatch = document.getElementById("no-match");

function filter() {
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
    first?.querySelector("a.name")?.click();
  }
});
document.querySelector("[data-clear-filter]")?.addEventListener("click", () => {
  clearFilter();
  search.focus();
});
// The browser may restore the box's text on Back; apply it.
if (search?.value) filter();

document.addEventListener("keydown", (event) => {
  if (!isShortcut(event)) return;
  if (event.key === "/" && search) {
    event.preventDefault();
    search.focus();
    search.select();
  } else if (event.key === "u" && !request) {
    event.preventDefault();
    input.click();
  } else if (event.key === "Escape" && request) {
    request.abort();
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
keys.push(["u", "Upload: choose a file"], ["Esc", "Cancel an upload"], ["?", "Show these keys"]);
keyboardHelp(keys);

// ---------------------------------------------------------------------------------------------
// Selecting rows: compare two, or label several with a group.

const compareButton = document.getElementById("compare-selected");
const groupButton = document.getElementById("group-selected");
const selectionCount = document.getElementById("selection-count");
const selectAll = document.getElementById("select-all");
const groupDialog = document.getElementById("group-dialog");
const deleteButton = document.getElementById("delete-selected");
/** Selected rows, in the order they were selected. */
let selected = [];

function rowName(row) {
  return row.querySelector("a.name").textContent.trim();
}

function updateSelection() {
  const rows = [...(table?.tBodies[0].rows ?? [])];
  for (const row of rows) row.classList.toggle("selected", selected.includes(row));
  if (selected.length === 0) selectionCount.textContent = "Select rows to compare, group or delete";
  else if (selected.length === 1) selectionCount.textContent = "1 selected · pick one more to compare";
  else selectionCount.textContent = `${selected.length} selected`;
  if (selected.length === 2) {
    // The older upload is the before side.
    const [a, b] = [...selected].sort((x, y) => Number(x.dataset.uploaded) - Number(y.dataset.uploaded));
    compareButton.href = `/compare/${a.dataset.id}/${b.dataset.id}`;
    compareButton.removeAttribute("aria-disabled");
    compareButton.title = `Compare ${rowName(a)} (before) with ${rowName(b)} (after) (c)`;
  } else {
    compareButton.removeAttribute("href");
    compareButton.setAttribute("aria-disabled", "true");
    compareButton.title = "Select exactly two snapshots to compare them; the older one is the before side (c)";
  }
  groupButton.disabled = selected.length === 0;
  deleteButton.disabled = selected.length === 0;
  const visible = rows.filter((row) => !row.hidden);
  const chosen = visible.filter((row) => selected.includes(row)).length;
  selectAll.checked = visible.length > 0 && chosen === visible.length;
  selectAll.indeterminate = chosen > 0 && chosen < visible.length;
}

if (table && compareButton) {
  const rows = [...table.tBodies[0].rows];
  for (const row of rows) {
    const box = row.querySelector("input.select-row");
    box.addEventListener("change", () => {
      selected = selected.filter((r) => r !== row);
      if (box.checked) selected.push(row);
      updateSelection();
    });
  }
  selectAll.addEventListener("change", () => {
    for (const row of rows) {
      if (row.hidden) continue;
      row.querySelector("input.select-row").checked = selectAll.checked;
      selected = selected.filter((r) => r !== row);
      if (selectAll.checked) selected.push(row);
    }
    updateSelection();
  });
  search?.addEventListener("input", updateSelection);
  // The browser may restore checkboxes on Back.
  selected = rows.filter((row) => row.querySelector("input.select-row").checked);
  updateSelection();

  // The "Group…" dialog.
  const nameInput = document.getElementById("group-name");
  const groupError = document.getElementById("group-error");
  const openGroupDialog = () => {
    if (selected.length === 0) return;
    const groups = [...new Set(selected.map((row) => row.dataset.group))];
    nameInput.value = groups.length === 1 ? groups[0] : "";
    document.getElementById("group-dialog-count").textContent = selected.length === 1 ? `“${rowName(selected[0])}”` : `${selected.length} snapshots`;
    document.getElementById("group-clear").hidden = selected.every((row) => !row.dataset.group);
    groupError.hidden = true;
    groupDialog.showModal();
    nameInput.focus();
    nameInput.select();
  };
  const saveGroup = async (group) => {
    groupError.hidden = true;
    for (const button of groupDialog.querySelectorAll("button")) button.disabled = true;
    try {
      for (const row of selected) {
        const response = await writeFetch(`/api/snapshots/${row.dataset.id}`, {
          method: "PATCH",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ group }),
        });
        if (!response.ok) {
          const body = await response.json().catch(() => null);
          throw new Error(body?.error?.message ?? `the server answered ${response.status}`);
        }
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
    const row = document.activeElement?.closest?.("#snapshot-table tbody tr");
    if (event.key === "x" && row) {
      event.preventDefault();
      row.querySelector("input.select-row").click();
    } else if (event.key === "c" && compareButton.href) {
      event.preventDefault();
      window.location.assign(compareButton.href);
    } else if (event.key === "g" && selected.length > 0) {
      event.preventDefault();
      openGroupDialog();
    } else if (event.key === "d" && selected.length > 0) {
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

const undoBar = document.getElementById("undo-bar");
/** The rows the last delete removed, for Undo. */
let lastDeleted = [];

/** Sends `method` to `url` with the tab's write token (asking for one on 401); throws with the
 * server's message when it refuses. */
async function send(method, url) {
  const response = await writeFetch(url, { method });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new Error(body?.error?.message ?? `the server answered ${response.status}`);
  }
  return response;
}

async function deleteSelected() {
  if (selected.length === 0) return;
  const rows = [...selected];
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
    row.querySelector("input.select-row").checked = false;
  }
  selected = selected.filter((row) => !done.includes(row));
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
