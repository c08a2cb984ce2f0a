// @ts-check
// A view's loader where only the newest request counts (a new window, device or moment makes the
// answer in flight worthless).

import { getJSON } from "../lib/api.js";

/**
 * A loader for a view whose newest request is the only one that counts: a new request aborts
 * the one in flight, `staleMark` is marked stale until the newest settles, its answer goes to
 * `show`, and a failure fills `errorBox` with "`what` could not load. <why>".
 * @param {{staleMark: Element, errorBox: HTMLElement, what: string}} parts
 * @returns {(url: string, show: (data: any) => void) => Promise<void>}
 */
export function newestOnly({ staleMark, errorBox, what }) {
  /** @type {AbortController | null} */
  let inFlight = null;
  return async (url, show) => {
    inFlight?.abort();
    const controller = new AbortController();
    inFlight = controller;
    staleMark.classList.add("stale");
    try {
      const data = await getJSON(url, controller.signal);
      errorBox.hidden = true;
      show(data);
    } catch (error) {
      if (error.name === "AbortError") return;
      errorBox.textContent = `${what} could not load. ${error.message}`;
      errorBox.hidden = false;
    } finally {
      if (inFlight === controller) staleMark.classList.remove("stale");
    }
  };
}
