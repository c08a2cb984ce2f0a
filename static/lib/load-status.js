// @ts-check
// What a page waiting for snapshots being read shows for each answer of
// `GET /api/snapshots/{id}/status` ({state: queued | waiting | reading | analysing | ready |
// failed}),
// and when it asks again. No DOM: static/views/loads.js draws it (on the snapshot page's
// loading page and on the compare page).

import { bytes } from "./units.js";

/** How often the page asks while a load runs (about four times a second). */
export const POLL_MS = 250;

/** The longest wait between two tries while the server cannot be reached. */
export const RETRY_MAX_MS = 5000;

/**
 * What to show for `status` of the file `filename` (`size` bytes stored): the visible `line`, the progress bar's
 * `percent` (null: no measure, the bar slides), the `stage` read out to screen readers (it only
 * changes with the stage, not with each number), the `error` for a failed load, and `next`:
 * "poll" (ask again), "reload" (ready: the full page) or "stop" (failed).
 */
export function describe(status, filename, size) {
  switch (status?.state) {
    case "queued":
      return { line: "Waiting for other snapshots to finish loading…", percent: null, stage: "Waiting for other snapshots to load", error: "", next: "poll" };
    case "waiting":
      return { line: "Waiting for another server to read this snapshot…", percent: null, stage: "Waiting for another server", error: "", next: "poll" };
    case "reading": {
      const total = Math.max(0, Number(status.total) || 0);
      const read = Math.min(Math.max(0, Number(status.read) || 0), total);
      const percent = total > 0 ? Math.floor((read / total) * 100) : null;
      return { line: `Reading ${filename}: ${bytes(read)} of ${bytes(total)}`, percent, stage: `Reading ${filename}`, error: "", next: "poll" };
    }
    case "analysing":
      return { line: "Analysing…", percent: null, stage: "Analysing", error: "", next: "poll" };
    case "ready":
      return { line: "Ready; opening the views…", percent: 100, stage: "Ready", error: "", next: "reload" };
    case "failed":
      return {
        line: failedLine(filename, size),
        percent: null,
        stage: "This snapshot could not be opened",
        error: String(status.error ?? "the server did not say why"),
        next: "stop",
      };
    default:
      // An answer this page does not know (a newer server): keep asking, say nothing new.
      return { line: "Loading…", percent: null, stage: "Loading", error: "", next: "poll" };
  }
}

/**
 * Where a page waiting for several loads stands, from each one's `next`: "stop" once one failed
 * (the page cannot be shown), "reload" when every one is ready, else "poll".
 */
export function overall(nexts) {
  if (nexts.includes("stop")) return "stop";
  if (nexts.every((next) => next === "reload")) return "reload";
  return "poll";
}

/** The line of a snapshot that is ready while the page still waits for `others` more. */
export function readyWaiting(others) {
  return others === 1 ? "Ready; waiting for the other snapshot…" : `Ready; waiting for ${others} other snapshots…`;
}

/** The line above a failed load's reason (the server's page words it the same). */
export function failedLine(filename, size) {
  return size === undefined ? `The server could not read ${filename}.` : `The server could not read ${filename} (${bytes(size)}).`;
}

/** The wait before the next try after `failures` failed requests in a row (0: a normal poll). */
export function retryDelay(failures) {
  if (failures <= 0) return POLL_MS;
  return Math.min(RETRY_MAX_MS, POLL_MS * 2 ** failures);
}
