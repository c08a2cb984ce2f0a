// @ts-check
// The text around the segment map: where its state comes from, the totals, and the table of
// segments with their stats.

import { bytes, count, hex, percent } from "../../lib/units.js";
import { h } from "../dom.js";

/** @typedef {import("../segments.js").SegmentsView} SegmentsView */

/** "segment(s)", or "mapped range(s)" where the allocator grows expandable segments. */
function segmentWord(data, n) {
  const expandable = data?.segments?.some((s) => s.expandable);
  return `${expandable ? "expandable segment" : "segment"}${n === 1 ? "" : "s"}`;
}

/** Says whether the map is the snapshot's own state or rebuilt for the moment.
 * @param {SegmentsView} view */
export function renderSource(view) {
  const d = view.data;
  const last = view.app.events() - 1;
  const when = d.at === null || d.at === undefined ? "when the snapshot was taken" : `right after event ${count(d.at)}`;
  if (d.exact) {
    view.source.replaceChildren(
      h("span", { className: "badge badge-exact", title: "Block sizes, states and rounding as the snapshot recorded them" }, "exact"),
      ` The snapshot's own segments, ${when}.`,
    );
  } else {
    view.source.replaceChildren(
      h("span", { className: "badge badge-rebuilt", title: "Rebuilt by undoing events from the snapshot backwards" }, "rebuilt"),
      ` Rebuilt for the moment ${when} by undoing later events: live blocks at their addresses with sizes rounded up to 512 B, the rest of each segment free. `,
      last >= 0 ? h("button", { type: "button", className: "link-button", onclick: () => view.app.setMoment(last) }, "Show the snapshot's own state") : null,
    );
  }
}

/** @param {SegmentsView} view */
export function renderTotals(view) {
  const t = view.data.totals;
  const stat = (label, value, detail, title) =>
    h(
      "div",
      { className: "stat", title },
      h("span", { className: "label" }, label),
      h("span", { className: "value" }, value),
      h("span", { className: "detail" }, detail),
    );
  view.totals.replaceChildren(
    stat(
      "Reserved",
      bytes(t.reserved),
      `in ${count(t.segments)} ${segmentWord(view.data, t.segments)}`,
      "Bytes of all segments: what the allocator holds from CUDA",
    ),
    stat("Allocated", bytes(t.allocated), `${percent(t.allocated, t.reserved)} of reserved`, "Requested bytes of live blocks"),
    stat(
      "Pending free",
      bytes(t.pending_free),
      t.pending_free ? `${percent(t.pending_free, t.reserved)} of reserved` : "none waiting",
      "Freed by the program but waiting for work on another stream (record_stream): not reusable until it completes",
    ),
    stat(
      "Free",
      bytes(t.external_free),
      `largest block ${bytes(t.largest_free_block)}`,
      "Cached free blocks: reusable without asking CUDA again. The largest is the biggest request they can serve.",
    ),
    stat(
      "Fragmentation",
      `${(100 * t.fragmentation).toFixed(0)}%`,
      `rounding ${bytes(t.internal_free)}`,
      "The share of free bytes outside the largest free block. Rounding: bytes inside live blocks beyond the request.",
    ),
  );
}

/** The table of segments, rebuilt only when the set of segments changed.
 * @param {SegmentsView} view */
export function renderTable(view) {
  const segments = view.data.segments;
  const stats = (st) => [
    bytes(st.allocated),
    st.pending_free ? bytes(st.pending_free) : "–",
    bytes(st.external_free),
    bytes(st.largest_free_block),
    st.external_free ? `${(100 * (st.fragmentation ?? 1 - st.largest_free_block / st.external_free)).toFixed(0)}%` : "–",
    count(st.blocks),
  ];
  // Stepping one event changes a block or two: the same segments keep their rows and only the
  // cells that read differently are rewritten. Rebuilding hundreds of rows on every step cost
  // a layout of the whole table (a long task on the huge trace).
  const shape = segments.map((s) => `${s.address}:${s.size}:${s.stream_id}:${s.type}:${s.pool}:${s.expandable}`).join(";");
  // The caption names the moment, so a table that waited out of sight (segments.js) can never
  // pass for another moment's.
  const at = view.data.at;
  const caption = `${count(segments.length)} ${segmentWord(view.data, segments.length)} ${at === null || at === undefined ? "when the snapshot was taken" : `right after event ${count(at)}`}, by address. Hover a row to find it in the map.`;
  if (shape === view.tableShape && view.tableCells) {
    for (const [i, s] of segments.entries()) {
      const cells = view.tableCells[i];
      for (const [j, text] of stats(s.stats).entries()) if (cells[j].textContent !== text) cells[j].textContent = text;
    }
    const shown = view.table.caption;
    if (shown && shown.textContent !== caption) shown.textContent = caption;
    return;
  }
  view.tableShape = shape;
  const head = h(
    "thead",
    {},
    h(
      "tr",
      {},
      ["Segment", "Size", "Stream", "Pool", "Allocated", "Pending", "Free", "Largest free", "Fragmentation", "Blocks"].map((c, i) =>
        h("th", { className: i ? "num" : "" }, c),
      ),
    ),
  );
  const body = h("tbody");
  view.tableCells = [];
  for (const [i, s] of segments.entries()) {
    const cells = stats(s.stats).map((text) => h("td", { className: "num" }, text));
    view.tableCells.push(cells);
    const row = h(
      "tr",
      {
        onpointerenter: () => {
          view.hoverSegment = i;
          view.draw();
        },
        onpointerleave: () => {
          view.hoverSegment = null;
          view.draw();
        },
      },
      h("td", {}, h("code", {}, hex(s.address)), s.expandable ? h("span", { className: "badge" }, "expandable") : null),
      h("td", { className: "num" }, bytes(s.size)),
      h("td", { className: "num" }, `stream ${s.stream_id}`),
      h("td", { className: "num" }, `${s.type}${s.pool && (s.pool[0] || s.pool[1]) ? ` (${s.pool.join(",")})` : ""}`),
      ...cells,
    );
    body.append(row);
  }
  view.table.replaceChildren(h("caption", { className: "muted small" }, caption), head, body);
}
