// @ts-check
// The Allocator State History beside the segment map: the events around the moment, the
// selected one's stack and the totals after it.

import { bytes, count, hex } from "../../lib/units.js";
import { h } from "../dom.js";

/** @typedef {import("../segments.js").SegmentsView} SegmentsView */

/** Fills the history box from `view.history`, rewriting the rows in place.
 * @param {SegmentsView} view */
export function renderHistory(view) {
  const d = view.history;
  if (!d) return;
  const selected = d.selected;
  // The list and its rows are built once and rewritten in place: a step changes a few texts
  // and which row is selected, and rebuilding the rows laid the page out again (a long task
  // on the huge trace).
  if (!view.historyList) {
    view.historyList = h("ol", { className: "history-list", "aria-label": "Events around the moment" });
    view.historyList.addEventListener("click", (event) => {
      const row = event.target instanceof Element ? event.target.closest("[data-event]") : null;
      if (row) view.app.setMoment(Number(/** @type {HTMLElement} */ (row).dataset.event));
    });
    view.historyDetail = h("p");
    view.historyBox.replaceChildren(
      h("h3", { className: "history-heading" }, "Allocator state history", h("span", { className: "muted small" }, " ↑ ↓ step")),
      view.historyList,
      view.historyDetail,
    );
  }
  const list = view.historyList;
  while (list.children.length > d.rows.length) list.lastElementChild.remove();
  while (list.children.length < d.rows.length) {
    list.append(
      h(
        "li",
        {},
        h("span", { className: "history-index num" }),
        h("span", {}),
        h("span", { className: "history-size num" }),
        h("code", { className: "history-addr" }),
        h("span", { className: "history-stream" }),
      ),
    );
  }
  const set = (el, key, value) => {
    if (el[key] !== value) el[key] = value;
  };
  for (const [i, row] of d.rows.entries()) {
    const li = /** @type {HTMLElement} */ (list.children[i]);
    const current = row.index === d.at;
    set(li, "className", `history-row${current ? " selected" : ""}`);
    if (li.dataset.event !== String(row.index)) li.dataset.event = String(row.index);
    if (current) li.setAttribute("aria-current", "true");
    else li.removeAttribute("aria-current");
    set(li, "title", `Event ${count(row.index)}: click to show the map after it`);
    const [index, action, size, address, stream] = li.children;
    set(index, "textContent", count(row.index));
    set(action, "className", `history-action action-${row.action}`);
    set(action, "textContent", row.action);
    set(size, "textContent", row.action === "snapshot" ? "" : bytes(row.size));
    set(address, "textContent", row.address ? hex(row.address) : "");
    set(stream, "textContent", row.stream);
  }
  const detail = selected
    ? h(
        "div",
        { className: "history-detail" },
        h(
          "div",
          { className: "history-title" },
          `Event ${count(selected.index)}: ${selected.action} ${selected.action === "snapshot" ? "" : bytes(selected.size)} · ${selected.stream}`,
        ),
        h(
          "div",
          { className: "history-totals small", "data-history-totals": "" },
          `After it: ${bytes(selected.allocated)} allocated${selected.pending ? ` · ${bytes(selected.pending)} pending free` : ""} · ${bytes(selected.reserved)} reserved`,
        ),
        selected.frames.length
          ? h(
              "ol",
              { className: "tip-frames history-frames", "aria-label": "Stack, innermost first" },
              selected.frames.map((f) => h("li", {}, f)),
            )
          : h("p", { className: "muted small" }, "No stack recorded for this event."),
      )
    : h("p", { className: "muted small" }, "No events at this moment.");
  view.historyDetail.replaceWith(detail);
  view.historyDetail = detail;
  // The selected row in the middle of the list, without scrolling the page; read after the
  // next layout, so this does not force one of its own (a long task on a big page).
  const row = /** @type {HTMLElement | null} */ (list.querySelector(".selected"));
  if (row) {
    requestAnimationFrame(() => {
      list.scrollTop = row.offsetTop - list.clientHeight / 2 + row.clientHeight / 2;
    });
  }
}
