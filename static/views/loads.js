// @ts-check
// The card of the snapshots a page waits for (templates/load-card.html): asks
// GET /api/snapshots/{id}/status of each about four times a second, draws each one's bytes read
// and stage, and says when every one is ready (the page then reloads, or draws what it waited
// for) or one failed (its reason shows, with a way back). A snapshot that answered "ready" is not
// asked again: asking about one the cache has dropped since would start reading it once more.

import { describe, overall, readyWaiting, retryDelay } from "../lib/load-status.js";

/**
 * Follows the loads listed in `card`. Returns `settled`, a promise of "ready" (every one is),
 * "failed" (one failed: the card says why) or "gone" (a snapshot was deleted, or a token is
 * needed, meanwhile: the page itself says what happened on a reload); `state()`, where they
 * stand now ("poll", "reload" or "stop", as `overall` says it); and `stop()`, to stop asking.
 */
export function followLoads(card) {
  const title = card.querySelector("#load-title");
  const why = card.querySelector(".load-why");
  const actions = card.querySelector(".load-actions");
  const loads = [...card.querySelectorAll(".load[data-id]")].map((item) => ({
    id: item.dataset.id,
    filename: item.dataset.filename,
    size: Number(item.dataset.total),
    line: item.querySelector(".load-line"),
    bar: item.querySelector(".progress"),
    stage: item.querySelector(".load-stage"),
    errorBox: item.querySelector(".load-error"),
    next: "poll",
  }));
  let stopped = false;
  let failures = 0;
  let settle;
  const settled = new Promise((resolve) => {
    settle = resolve;
  });
  const state = () => overall(loads.map((load) => load.next));

  function show(load, shown) {
    load.next = shown.next;
    load.line.textContent = shown.line;
    load.bar.hidden = shown.next === "stop";
    load.bar.classList.toggle("indeterminate", shown.percent === null);
    if (shown.percent === null) {
      load.bar.removeAttribute("aria-valuenow");
    } else {
      load.bar.querySelector(".progress-bar").style.width = `${shown.percent}%`;
      load.bar.setAttribute("aria-valuenow", String(shown.percent));
    }
    // Written only when it changes, so a screen reader hears each stage once.
    if (load.stage.textContent !== shown.stage) load.stage.textContent = shown.stage;
    if (shown.next === "stop") {
      load.errorBox.textContent = shown.error;
      load.errorBox.hidden = false;
    }
  }

  /** After each answer: the card's heading and lines, the outcome, and the next poll (in `wait` ms). */
  function decide(wait) {
    const now = state();
    const waiting = loads.filter((load) => load.next === "poll").length;
    if (now === "poll" && loads.length > 1) {
      for (const load of loads) if (load.next === "reload") load.line.textContent = readyWaiting(waiting);
    }
    if (now === "stop") {
      title.textContent = card.dataset.failedHeading;
      why.hidden = true;
      actions.hidden = false;
      settle("failed");
    } else if (now === "reload") {
      settle("ready");
    }
    // The others of a failed page are followed to their end, so what they show stays true.
    if (waiting > 0 && !stopped) setTimeout(poll, wait);
  }

  async function poll() {
    if (stopped) return;
    const asking = loads.filter((load) => load.next === "poll");
    let answers;
    try {
      answers = await Promise.all(
        asking.map(async (load) => {
          const response = await fetch(`/api/snapshots/${load.id}/status`, { cache: "no-store" });
          return response.ok ? await response.json().catch(() => null) : undefined;
        }),
      );
    } catch {
      failures += 1;
      for (const load of asking) load.line.textContent = "The server could not be reached; trying again…";
      if (!stopped) setTimeout(poll, retryDelay(failures));
      return;
    }
    if (stopped) return;
    if (answers.includes(undefined)) {
      stopped = true;
      settle("gone");
      return;
    }
    failures = 0;
    for (const [i, load] of asking.entries()) show(load, describe(answers[i], load.filename, load.size));
    decide(retryDelay(0));
  }

  for (const load of loads) {
    const item = load.line.closest(".load");
    const first = { state: item.dataset.loadState, read: Number(item.dataset.read), total: load.size, error: load.errorBox.textContent };
    show(load, describe(first, load.filename, load.size));
  }
  // The first question at once: the page was rendered a moment ago, but that may be all.
  decide(0);
  return {
    settled,
    state,
    stop() {
      stopped = true;
    },
  };
}
