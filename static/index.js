// @ts-check
// The snapshot list: drag-and-drop upload with progress, and the filter box.

import { NEEDS_TOKEN, savedToken, withToken } from "./lib/auth.js";
import { rankGroup } from "./lib/ranks.js";
import { bytes } from "./lib/units.js";
import { askToken, writeFetch } from "./views/auth.js";
import { h } from "./views/dom.js";
import { isShortcut, keyboardHelp, showTimes, toast } from "./views/page.js";
import { linkComparison, RowSelection, rowName, selectBox } from "./views/row-selection.js";

/**
 * Sends `method` to `url` with the tab's write token (asking for one on 401), and `json` as the
 * body when given; throws with the server's message when it refuses.
 * @param {string} method
 * @param {string} url
 * @param {object} [json]
 */
async function send(method, url, json) {
  const init = json === undefined ? { method } : { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(json) };
  const response = await writeFetch(url, init);
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new Error(body?.error?.message ?? `the server answered ${response.status}`);
  }
  return response;
}

/**
 * Changes a stored snapshot's fields (name, group); a refusal throws the server's own message.
 * @param {string} id
 * @param {{name?: string, group?: string}} fields
 */
async function patchSnapshot(id, fields) {
  await send("PATCH", `/api/snapshots/${id}`, fields);
}

const dropzone = /** @type {HTMLElement} */ (document.getElementById("dropzone"));
const input = /** @type {HTMLInputElement} */ (document.getElementById("file-input"));
const idle = /** @type {HTMLElement} */ (dropzone.querySelector(".drop-idle"));
const busy = /** @type {HTMLElement} */ (dropzone.querySelector(".drop-busy"));
const errorBox = /** @type {HTMLElement} */ (dropzone.querySelector(".drop-error"));
const rowList = /** @type {HTMLElement} */ (busy.querySelector(".upload-rows"));
/** The first row is in the page (so it is there before any drop); others are its copies. */
const rowTemplate = /** @type {HTMLElement} */ (rowList.querySelector(".upload-row"));
const donePanel = /** @type {HTMLElement} */ (busy.querySelector(".upload-done"));

/** Files taken from one drop or one choice; the rest are refused with a message. Bounded so a
 * drop of a whole folder cannot open thousands of requests or rows. */
const MAX_FILES_AT_ONCE = 32;
/** Uploads sent at once; the others wait their turn. Below the server's default per-client
 * limit (`--max-uploads-per-client`, 4) so a batch is never answered 503. */
const MAX_PARALLEL_UPLOADS = 3;

/** The current batch: one entry per file, `{file, row, xhr, state, answer}`; state is
 * "queued", "sending", "done", "failed" or "cancelled". */
let batch = [];
/** Whether the current batch has been summed up (once, when its last upload settled). */
let batchFinished = false;

function inFlight() {
  return batch.some((u) => u.state === "queued" || u.state === "sending" || u.state === "waiting-for-token");
}

function setBusy(on) {
  idle.hidden = on;
  busy.hidden = !on;
  dropzone.classList.toggle("busy", on);
  dropzone.setAttribute("aria-busy", String(on));
}

function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = false;
  setBusy(false);
}

function setProgress(upload, percent) {
  upload.row.querySelector(".progress-bar").style.width = `${percent}%`;
  upload.row.querySelector(".progress").setAttribute("aria-valuenow", String(percent));
}

function setStatus(upload, text) {
  upload.row.querySelector("[data-upload-status]").textContent = text;
}

/** Starts uploading `files` (a FileList or array): one row each, at most
 * `MAX_PARALLEL_UPLOADS` at a time. Ignored while a batch is in flight. */
function uploadAll(files) {
  if (inFlight() || files.length === 0) return;
  const taken = [...files].slice(0, MAX_FILES_AT_ONCE);
  errorBox.hidden = true;
  dropzone.querySelector(".token-form")?.remove();
  for (const row of rowList.querySelectorAll(".upload-row")) if (row !== rowTemplate) row.remove();
  donePanel.hidden = true;
  batchFinished = false;
  batch = taken.map((file, i) => {
    const row = i === 0 ? rowTemplate : /** @type {HTMLElement} */ (rowTemplate.cloneNode(true));
    if (i > 0) rowList.append(row);
    row.dataset.state = "queued";
    row.querySelector("[data-upload-name]").textContent = file.name;
    row.querySelector("[data-upload-size]").textContent = bytes(file.size);
    row.querySelector(".progress").classList.remove("indeterminate");
    row.querySelector("[data-upload-status]").textContent = taken.length > 1 && i >= MAX_PARALLEL_UPLOADS ? "Waiting…" : "Starting…";
    const cancelButton = /** @type {HTMLButtonElement} */ (row.querySelector("[data-upload-cancel]"));
    cancelButton.hidden = false;
    cancelButton.setAttribute("aria-label", `Cancel the upload of ${file.name}`);
    const upload = { file, row, xhr: null, state: "queued", answer: null };
    setProgress(upload, 0);
    return upload;
  });
  busy.classList.toggle("several", batch.length > 1);
  setBusy(true);
  if (files.length > MAX_FILES_AT_ONCE) {
    errorBox.textContent = `Only the first ${MAX_FILES_AT_ONCE} of ${files.length} files are being added: drop the others after these.`;
    errorBox.hidden = false;
  }
  next();
}

/** Sends queued files while fewer than `MAX_PARALLEL_UPLOADS` are on the way; ends the batch
 * when none is left. */
function next() {
  while (batch.filter((u) => u.state === "sending").length < MAX_PARALLEL_UPLOADS) {
    const upload = batch.find((u) => u.state === "queued");
    if (!upload) break;
    sendFile(upload);
  }
  if (!inFlight()) finishBatch();
}

function settle(upload, state, text) {
  upload.state = state;
  upload.row.dataset.state = state;
  upload.row.querySelector("[data-upload-cancel]").hidden = true;
  if (text) setStatus(upload, text);
  next();
}

/** Sends one file as the raw request body, reporting its progress in its row. */
function sendFile(upload) {
  const { file } = upload;
  upload.state = "sending";
  upload.row.dataset.state = "sending";
  setStatus(upload, "Starting…");
  const xhr = new XMLHttpRequest();
  upload.xhr = xhr;
  xhr.open("POST", `/api/snapshots?filename=${encodeURIComponent(file.name)}`);
  xhr.setRequestHeader("Content-Type", "application/octet-stream");
  for (const [name, value] of Object.entries(withToken())) xhr.setRequestHeader(name, value);
  xhr.upload.addEventListener("progress", (event) => {
    if (!event.lengthComputable || event.total === 0) return;
    const percent = Math.floor((event.loaded / event.total) * 100);
    setProgress(upload, percent);
    setStatus(upload, `Uploading ${bytes(event.loaded)} of ${bytes(event.total)} · ${percent}%`);
  });
  xhr.upload.addEventListener("load", () => {
    setProgress(upload, 100);
    const bar = upload.row.querySelector(".progress");
    bar.classList.add("indeterminate");
    bar.removeAttribute("aria-valuenow");
    setStatus(upload, "Reading and analysing the snapshot…");
  });
  xhr.addEventListener("load", () => {
    let body = null;
    try {
      body = JSON.parse(xhr.responseText);
    } catch {
      // Not JSON: a proxy's error page, say.
    }
    upload.row.querySelector(".progress").classList.remove("indeterminate");
    if ((xhr.status === 200 || xhr.status === 201) && body?.id) {
      upload.answer = body;
      const text = batch.length > 1 ? (xhr.status === 200 ? "Already here" : "Added") : xhr.status === 200 ? "Already here. Opening…" : "Done. Opening…";
      settle(upload, "done", text);
      if (batch.length > 1) {
        const link = h("a", { href: `/s/${body.id}`, className: "upload-open" }, "Open");
        upload.row.querySelector("[data-upload-status]").append(" · ", link);
      }
    } else if (xhr.status === 401) {
      // The server wants a write token: ask for it once here, then send the file again.
      upload.state = "waiting-for-token";
      const message = savedToken() ? `That token was refused: ${body?.error?.message ?? "it is not valid here."}` : NEEDS_TOKEN;
      askToken(message, dropzone).then((token) => {
        if (token) sendFile(upload);
        else settle(upload, "failed", `${file.name} was not added: this server needs a token.`);
      });
    } else {
      const message = body?.error?.message ?? `The server answered ${xhr.status} ${xhr.statusText}.`;
      settle(upload, "failed", `Could not add ${file.name}: ${message}`);
    }
  });
  xhr.addEventListener("error", () => settle(upload, "failed", `Could not add ${file.name}: the server could not be reached.`));
  xhr.addEventListener("abort", () => settle(upload, "cancelled", `The upload of ${file.name} was cancelled.`));
  xhr.send(file);
}

function cancelUpload(upload) {
  if (upload.state === "sending") upload.xhr?.abort();
  else if (upload.state === "queued") settle(upload, "cancelled", `The upload of ${upload.file.name} was cancelled.`);
}

function cancelAll() {
  // Queued ones first, so cancelling a sending one does not start the next.
  for (const upload of batch.filter((u) => u.state === "queued")) {
    upload.state = "cancelled";
    upload.row.dataset.state = "cancelled";
    upload.row.querySelector("[data-upload-cancel]").hidden = true;
    setStatus(upload, `The upload of ${upload.file.name} was cancelled.`);
  }
  for (const upload of batch.filter((u) => u.state === "sending")) upload.xhr?.abort();
  if (!inFlight()) finishBatch();
}

/** One file: open its page, or say why not. Several: say what came of each, offer to group
 * them when they look like the ranks of one job, and leave the rows (with their links). */
function finishBatch() {
  if (batch.length === 0 || batchFinished) return;
  batchFinished = true;
  const added = batch.filter((u) => u.state === "done");
  if (batch.length === 1) {
    const [only] = batch;
    if (only.state === "done") window.location.assign(`/s/${only.answer.id}`);
    else showError(only.row.querySelector("[data-upload-status]").textContent);
    return;
  }
  const failed = batch.length - added.length;
  const notAdded = failed > 0 ? ` · ${failed} not added (see each row)` : "";
  busy.querySelector("[data-upload-summary]").textContent = `${added.length} of ${batch.length} added${notAdded}`;
  const offer = /** @type {HTMLElement} */ (busy.querySelector("[data-group-offer]"));
  const group = rankGroup(added.map((u) => ({ filename: u.file.name, summary: u.answer.summary })));
  offer.hidden = group === null;
  if (group !== null) {
    offer.querySelector("[data-group-offer-text]").textContent = `These ${added.length} look like the ranks of one job. Group them as`;
    offer.querySelector("input").value = group;
  }
  donePanel.hidden = false;
  (group !== null ? offer.querySelector("input") : /** @type {HTMLButtonElement} */ (busy.querySelector("[data-upload-finish]"))).focus();
}

/** Labels every added snapshot of the batch with `group`, then opens the group's page. */
async function groupBatch(group) {
  const save = /** @type {HTMLButtonElement} */ (busy.querySelector("[data-group-offer-save]"));
  save.disabled = true;
  try {
    for (const upload of batch.filter((u) => u.state === "done")) {
      await patchSnapshot(upload.answer.id, { group });
    }
    window.location.assign(`/g/${encodeURIComponent(group)}`);
  } catch (error) {
    toast(`Could not group them: ${error.message}`, 5000);
    save.disabled = false;
  }
}

busy.querySelector("[data-group-offer-save]").addEventListener("click", (event) => {
  event.stopPropagation();
  const group = /** @type {HTMLInputElement} */ (busy.querySelector("#group-offer-name")).value.trim();
  if (group) groupBatch(group);
});
busy.querySelector("#group-offer-name").addEventListener("keydown", (/** @type {KeyboardEvent} */ event) => {
  if (event.key !== "Enter") return;
  event.preventDefault();
  /** @type {HTMLButtonElement} */ (busy.querySelector("[data-group-offer-save]")).click();
});
busy.querySelector("[data-upload-finish]").addEventListener("click", (event) => {
  event.stopPropagation();
  window.location.reload();
});
rowList.addEventListener("click", (event) => {
  event.stopPropagation();
  const button = /** @type {Element} */ (event.target).closest("[data-upload-cancel]");
  if (!button) return;
  const upload = batch.find((u) => u.row === button.closest(".upload-row"));
  if (upload) cancelUpload(upload);
});
dropzone.addEventListener("click", (event) => {
  if (!busy.hidden || event.target === input || /** @type {Element} */ (event.target).closest("label, button, input, .drop-error, .token-form")) return;
  input.click();
});
dropzone.addEventListener("keydown", (event) => {
  if ((event.key === "Enter" || event.key === " ") && event.target === dropzone && busy.hidden) {
    event.preventDefault();
    input.click();
  }
});
input.addEventListener("change", () => {
  uploadAll([...input.files]);
  input.value = "";
});
for (const type of ["dragenter", "dragover"]) {
  dropzone.addEventListener(type, (event) => {
    event.preventDefault();
    if (!inFlight()) dropzone.classList.add("dragging");
  });
}
dropzone.addEventListener("dragleave", (event) => {
  // Moving over a child fires dragleave on the zone too; only leaving the zone counts.
  if (!dropzone.contains(/** @type {Node | null} */ (event.relatedTarget))) dropzone.classList.remove("dragging");
});
dropzone.addEventListener("drop", (event) => {
  event.preventDefault();
  dropzone.classList.remove("dragging");
  const files = event.dataTransfer?.files;
  if (files && files.length > 0) uploadAll([...files]);
});
// A file dropped anywhere on the page goes to the drop zone, not to the browser's viewer.
window.addEventListener("dragover", (event) => event.preventDefault());
window.addEventListener("drop", (event) => {
  event.preventDefault();
  if (!dropzone.contains(/** @type {Node} */ (event.target)) && event.dataTransfer?.files.length) uploadAll([...event.dataTransfer.files]);
});
// Esc stops every upload in flight, wherever the focus is: after the file chooser closes the
// focus is on its (hidden) input, where the letter shortcuts below do not fire.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || !inFlight() || document.querySelector("dialog[open]")) return;
  if (event.target instanceof HTMLElement && event.target.closest(".token-form")) return;
  event.preventDefault();
  cancelAll();
});
// Leaving mid-upload loses it: ask first.
window.addEventListener("beforeunload", (event) => {
  if (inFlight()) event.preventDefault();
});
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

// The filter box.
const search = /** @type {HTMLInputElement | null} */ (document.getElementById("search"));
const table = /** @type {HTMLTableElement | null} */ (document.getElementById("snapshot-table"));
const count = /** @type {HTMLElement | null} */ (document.querySelector(".count"));
const noMatch = /** @type {HTMLElement | null} */ (document.getElementById("no-match"));

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
    /** @type {HTMLAnchorElement | null | undefined} */ (first?.querySelector("a.name"))?.click();
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
  } else if (event.key === "u" && !inFlight()) {
    event.preventDefault();
    input.click();
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

// ---------------------------------------------------------------------------------------------
// Selecting rows: compare two, or label several with a group.

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

// ---------------------------------------------------------------------------------------------
// Renaming from the list: the pencil beside a name (or F2 on a focused row) turns the name into
// a text field; Enter or leaving it saves, Esc puts the old name back. Same limit as the server
// (200 characters, checked there too).

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
