// The page of a snapshot the server is still reading (templates/loading.html): asks
// GET /api/snapshots/{id}/status about four times a second, shows the bytes read and the stage,
// and reloads into the snapshot's full page when it is ready. A failed load shows the server's
// reason and stops asking.

import { describe, retryDelay } from "./lib/load-status.js";
import { showTimes } from "./views/page.js";

const root = document.querySelector(".snapshot.loading");
const { id, filename } = root.dataset;
const size = Number(root.dataset.total);
const line = document.getElementById("load-line");
const bar = document.getElementById("load-progress");
const fill = bar.querySelector(".progress-bar");
const stage = document.getElementById("load-stage");
const errorBox = document.getElementById("load-error");
const title = document.getElementById("load-title");
const actions = document.querySelector(".load-actions");
const why = document.getElementById("load-why");

let failures = 0;

function show(shown) {
  line.textContent = shown.line;
  bar.hidden = shown.next === "stop";
  bar.classList.toggle("indeterminate", shown.percent === null);
  if (shown.percent === null) {
    bar.removeAttribute("aria-valuenow");
  } else {
    fill.style.width = `${shown.percent}%`;
    bar.setAttribute("aria-valuenow", String(shown.percent));
  }
  // Written only when it changes, so a screen reader hears each stage once.
  if (stage.textContent !== shown.stage) stage.textContent = shown.stage;
  if (shown.next === "stop") {
    title.textContent = "This snapshot could not be opened";
    errorBox.textContent = shown.error;
    errorBox.hidden = false;
    actions.hidden = false;
    why.hidden = true;
  }
}

async function poll() {
  let response;
  try {
    response = await fetch(`/api/snapshots/${id}/status`, { cache: "no-store" });
  } catch {
    failures += 1;
    line.textContent = "The server could not be reached; trying again…";
    setTimeout(poll, retryDelay(failures));
    return;
  }
  if (!response.ok) {
    // Deleted, or a token needed, meanwhile: the page itself says what happened.
    window.location.reload();
    return;
  }
  failures = 0;
  const shown = describe(await response.json().catch(() => null), filename, size);
  show(shown);
  if (shown.next === "reload") window.location.reload();
  else if (shown.next === "poll") setTimeout(poll, retryDelay(0));
}

showTimes(root);
const initial = describe({ state: root.dataset.loadState, read: Number(root.dataset.read), total: size, error: errorBox.textContent }, filename, size);
show(initial);
if (initial.next !== "stop") poll();
