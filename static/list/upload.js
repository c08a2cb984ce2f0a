// @ts-check
// Uploading from the list page: drag-and-drop or the file chooser, several files at once with
// progress, cancelling, and grouping what was added.

import { NEEDS_TOKEN, savedToken, withToken } from "../lib/auth.js";
import { rankGroup } from "../lib/ranks.js";
import { bytes } from "../lib/units.js";
import { askToken } from "../views/auth.js";
import { h } from "../views/dom.js";
import { toast } from "../views/page.js";
import { patchSnapshot } from "./write.js";

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

export function inFlight() {
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
  upload.row.querySelector("[data-upload-cancel]").hidden = false;
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
      upload.row.dataset.state = "waiting-for-token";
      // The token field has its own Cancel; the row's would have nothing to stop.
      upload.row.querySelector("[data-upload-cancel]").hidden = true;
      setProgress(upload, 0);
      setStatus(upload, "Waiting for a write token: this server asks for one before it takes a file.");
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
// focus is on its (hidden) input, where the page's letter shortcuts do not fire.
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

/** Opens the file chooser (the `u` shortcut). */
export function chooseFiles() {
  input.click();
}
