// @ts-check
// The segment map at the selected moment: every segment of the device to scale, each live
// block in its allocation's own colour (the timeline's), pending frees hatched, rounding waste
// marked; totals and per-segment stats; hover for a block's allocation and stack, a segment's
// cudaMalloc stack. Beside it the Allocator State History: the events around the moment
// (↑ ↓ or ← → step it), the selected event's stack and totals, its block outlined on the map.
// The wheel zooms the map (around the pointer) so that small blocks can be hovered.

import { allocation } from "../lib/api.js";
import { bandColor } from "../lib/color.js";
import { frameParts, visibleFrames } from "../lib/frames.js";
import { bytes, count, hex, percent } from "../lib/units.js";
import { fitCanvas, paintPlaceholder } from "./canvas.js";
import { CanvasView } from "./canvas-view.js";
import { h } from "./dom.js";
import { newestOnly } from "./newest-only.js";
import { SegmentTimelineView } from "./segment-timeline.js";
import { onThemeChange, theme } from "./theme.js";
import { hideTip, showTip, tipRow } from "./tooltip.js";

const ROW = 22;
const ROW_GAP = 8;
const SEGMENT_GAP = 3;
const STATE_NAMES = { active_allocated: "allocated", active_pending_free: "pending free", inactive: "free" };
/** The most the map magnifies: a 512 B block of a 20 GiB device is then a few px wide. */
export const MAX_ZOOM = 1 << 20;
/** Events listed on each side of the moment. */
const AROUND = 12;

/** Why a block waits: pending frees say for whom, as far as the trace can tell. */
export function pendingReason(block, segmentStream, streams) {
  const others = streams.map((_, i) => i).filter((i) => i !== segmentStream);
  const waitingFor = others.length === 1 ? `waiting for stream ${others[0]}` : "waiting for another stream";
  const when = block.free_requested_at !== undefined ? ` since event ${count(block.free_requested_at)}` : "";
  return `${waitingFor}: \`record_stream\`${when}. The program freed it; the allocator reuses it once that stream's work is done.`;
}

/** "segment(s)", or "mapped range(s)" where the allocator grows expandable segments. */
function segmentWord(data, n) {
  const expandable = data?.segments?.some((s) => s.expandable);
  return `${expandable ? "expandable segment" : "segment"}${n === 1 ? "" : "s"}`;
}

export class SegmentsView extends CanvasView {
  /**
   * @param {import("./app.js").App} app
   * @param {HTMLElement} panel
   */
  constructor(app, panel) {
    super(app, panel, "segments");
    this.source = /** @type {HTMLElement} */ (panel.querySelector("#segments-source"));
    this.totals = /** @type {HTMLElement} */ (panel.querySelector("#segments-totals"));
    this.table = /** @type {HTMLTableElement} */ (panel.querySelector("#segments-table"));
    this.fetchSegments = newestOnly({ staleMark: this.source, errorBox: this.error, what: "The segment map" });
    this.legend = /** @type {HTMLElement} */ (panel.querySelector("#segments-legend"));
    this.historyBox = /** @type {HTMLElement} */ (panel.querySelector("#segments-history"));
    this.fetchHistory = newestOnly({ staleMark: this.historyBox, errorBox: this.error, what: "The allocator's history" });
    this.history = null;
    // The segments over time, above the map: same window and moment as the timeline.
    this.overTime = new SegmentTimelineView(app, panel);
    this.zoom = 1;
    this.offset = 0;
    this.data = null;
    this.key = "";
    this.pieces = [];
    for (const b of /** @type {NodeListOf<HTMLElement>} */ (panel.querySelectorAll("[data-step]")))
      b.addEventListener("click", () => app.step(Number(b.dataset.step)));
    this.canvas.addEventListener("click", (event) => {
      const piece = this.pieceAt(event);
      if (piece?.block.allocation !== null && piece?.block.allocation !== undefined) app.store.set({ alloc: piece.block.allocation });
    });
    this.canvas.addEventListener("wheel", (event) => this.onWheel(event), { passive: false });
    for (const b of /** @type {NodeListOf<HTMLElement>} */ (panel.querySelectorAll("[data-map-zoom]"))) {
      b.addEventListener("click", () => {
        if (b.dataset.mapZoom === "reset") this.setZoom(1, 0);
        else this.zoomAround(b.dataset.mapZoom === "in" ? 4 : 0.25, null);
      });
    }
    document.addEventListener("keydown", (event) => {
      if (!this.visible() || (event.key !== "ArrowUp" && event.key !== "ArrowDown")) return;
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      const target = event.target;
      if (target instanceof HTMLElement && (target.isContentEditable || /^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName))) return;
      event.preventDefault();
      app.step((event.key === "ArrowUp" ? -1 : 1) * (event.shiftKey ? 100 : 1));
    });
    new ResizeObserver(() => this.visible() && this.draw()).observe(this.chart);
    onThemeChange(() => this.draw());
    const item = (cls, text, title) => h("li", { title }, h("span", { className: `swatch ${cls}` }), text);
    this.legend.replaceChildren(
      item("sw-allocated", "allocated", "A live tensor's block"),
      item("sw-rounding", "rounding waste", "Bytes a block holds beyond what was requested (its size rounded up)"),
      item("sw-pending", "pending free", "Freed by the program but still in use by a stream; not reusable yet"),
      item("sw-free", "free (cached)", "Cached by the allocator, reusable without asking CUDA"),
      item("sw-segment", "segment", "One cudaMalloc (or an expandable segment); gaps separate segments"),
      item("sw-touched", "this event's block", "The block the selected event allocated, freed or mapped"),
    );
  }

  show() {
    this.load();
    this.draw();
    this.overTime.show();
  }

  update(state, changed) {
    if (this.visible() && (changed.has("at") || changed.has("device"))) this.load();
    else if (this.visible() && changed.has("alloc")) this.draw();
    this.overTime.update(state, changed);
  }

  async load() {
    const params = new URLSearchParams();
    params.set("device", String(this.app.device()));
    const at = this.app.moment();
    if (at !== null) params.set("at", String(at));
    const key = params.toString();
    if (key === this.key) return;
    this.loadHistory(key);
    await this.fetchSegments(`/api/snapshots/${this.app.id}/segments?${key}`, (data) => {
      this.key = key;
      this.data = data;
      this.renderSource();
      this.renderTotals();
      // The table below the map after the map's frame: rebuilt (a new set of segments) it costs
      // a layout of its own, which on the huge trace and a busy machine made one long task
      // together with the map's paint.
      requestAnimationFrame(() => setTimeout(() => this.data === data && this.renderTable()));
      // Next frame: painting now would force a layout of the page just changed (a long task).
      this.draw();
    });
  }

  async loadHistory(key) {
    await this.fetchHistory(`/api/snapshots/${this.app.id}/history?${key}&before=${AROUND}&after=${AROUND}`, (data) => {
      this.history = data;
      this.renderHistory();
      this.draw();
    });
  }

  /** The touched address of the selected event (alloc, free, segment event), or null. */
  touched() {
    const selected = this.history?.selected;
    if (!selected || selected.action === "snapshot" || selected.action === "oom") return null;
    return selected;
  }

  renderHistory() {
    const d = this.history;
    if (!d) return;
    const selected = d.selected;
    // The list and its rows are built once and rewritten in place: a step changes a few texts
    // and which row is selected, and rebuilding the rows laid the page out again (a long task
    // on the huge trace).
    if (!this.historyList) {
      this.historyList = h("ol", { className: "history-list", "aria-label": "Events around the moment" });
      this.historyList.addEventListener("click", (event) => {
        const row = event.target instanceof Element ? event.target.closest("[data-event]") : null;
        if (row) this.app.setMoment(Number(/** @type {HTMLElement} */ (row).dataset.event));
      });
      this.historyDetail = h("p");
      this.historyBox.replaceChildren(
        h("h3", { className: "history-heading" }, "Allocator state history", h("span", { className: "muted small" }, " ↑ ↓ step")),
        this.historyList,
        this.historyDetail,
      );
    }
    const list = this.historyList;
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
    this.historyDetail.replaceWith(detail);
    this.historyDetail = detail;
    // The selected row in the middle of the list, without scrolling the page; read after the
    // next layout, so this does not force one of its own (a long task on a big page).
    const row = /** @type {HTMLElement | null} */ (list.querySelector(".selected"));
    if (row) {
      requestAnimationFrame(() => {
        list.scrollTop = row.offsetTop - list.clientHeight / 2 + row.clientHeight / 2;
      });
    }
  }

  setZoom(zoom, offset) {
    this.zoom = Math.max(1, Math.min(MAX_ZOOM, zoom));
    const tape = this.layout?.tape ?? 0;
    this.offset = Math.max(0, Math.min(tape * this.zoom - tape, offset));
    if (this.zoom === 1) this.offset = 0;
    this.draw();
  }

  /** Zooms by `factor` keeping tape position `q` (visible px along the tape; null: the
   * touched block, else the middle) where it is. */
  zoomAround(factor, q) {
    const tape = this.layout?.tape ?? 0;
    let anchor = q;
    if (anchor === null) {
      const target = this.touchedAt;
      anchor = target !== undefined && target !== null ? target * this.zoom - this.offset : tape / 2;
      anchor = Math.max(0, Math.min(tape, anchor));
    }
    const zoom = Math.max(1, Math.min(MAX_ZOOM, this.zoom * factor));
    const absolute = ((this.offset + anchor) * zoom) / this.zoom;
    this.setZoom(zoom, absolute - anchor);
  }

  onWheel(event) {
    if (!this.layout) return;
    event.preventDefault();
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const row = Math.max(0, Math.floor((event.clientY - box.top) / (ROW + ROW_GAP)));
    const scale = event.deltaMode === 1 ? 30 : event.deltaMode === 2 ? 300 : 1;
    this.zoomAround(Math.exp(-event.deltaY * scale * 0.004), row * this.layout.width + x);
  }

  renderSource() {
    const d = this.data;
    const last = this.app.events() - 1;
    const when = d.at === null || d.at === undefined ? "when the snapshot was taken" : `right after event ${count(d.at)}`;
    if (d.exact) {
      this.source.replaceChildren(
        h("span", { className: "badge badge-exact", title: "Block sizes, states and rounding as the snapshot recorded them" }, "exact"),
        ` The snapshot's own segments, ${when}.`,
      );
    } else {
      this.source.replaceChildren(
        h("span", { className: "badge badge-rebuilt", title: "Rebuilt by undoing events from the snapshot backwards" }, "rebuilt"),
        ` Rebuilt for the moment ${when} by undoing later events: live blocks at their addresses with sizes rounded up to 512 B, the rest of each segment free. `,
        last >= 0 ? h("button", { type: "button", className: "link-button", onclick: () => this.app.setMoment(last) }, "Show the snapshot's own state") : null,
      );
    }
  }

  renderTotals() {
    const t = this.data.totals;
    const stat = (label, value, detail, title) =>
      h(
        "div",
        { className: "stat", title },
        h("span", { className: "label" }, label),
        h("span", { className: "value" }, value),
        h("span", { className: "detail" }, detail),
      );
    this.totals.replaceChildren(
      stat(
        "Reserved",
        bytes(t.reserved),
        `in ${count(t.segments)} ${segmentWord(this.data, t.segments)}`,
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

  renderTable() {
    const segments = this.data.segments;
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
    if (shape === this.tableShape && this.tableCells) {
      for (const [i, s] of segments.entries()) {
        const cells = this.tableCells[i];
        for (const [j, text] of stats(s.stats).entries()) if (cells[j].textContent !== text) cells[j].textContent = text;
      }
      return;
    }
    this.tableShape = shape;
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
    this.tableCells = [];
    for (const [i, s] of segments.entries()) {
      const cells = stats(s.stats).map((text) => h("td", { className: "num" }, text));
      this.tableCells.push(cells);
      const row = h(
        "tr",
        {
          onpointerenter: () => {
            this.hoverSegment = i;
            this.draw();
          },
          onpointerleave: () => {
            this.hoverSegment = null;
            this.draw();
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
    this.table.replaceChildren(
      h(
        "caption",
        { className: "muted small" },
        `${count(segments.length)} ${segmentWord(this.data, segments.length)}, by address. Hover a row to find it in the map.`,
      ),
      head,
      body,
    );
  }

  paint() {
    if (!this.visible()) return;
    const width = Math.max(320, this.chart.clientWidth);
    const t = theme();
    if (!this.data) {
      paintPlaceholder(this.canvas, width, 60, "Loading the segment map…");
      return;
    }
    const segments = this.data.segments;
    const reserved = segments.reduce((sum, s) => sum + s.size, 0);
    const rows = Math.max(4, Math.min(32, Math.ceil(segments.length / 7)));
    const usable = width * rows - segments.length * SEGMENT_GAP;
    const perPx = Math.max(1, reserved / Math.max(1, usable));
    // The tape: segments laid end to end at zoom 1, wrapping at the right edge. Zoomed, the
    // tape is `zoom` times longer and the canvas shows the part from `offset` on.
    let cursor = 0;
    const placed = segments.map((s) => {
      const length = Math.max(2, s.size / perPx);
      const at = cursor;
      cursor += length + SEGMENT_GAP;
      return { segment: s, at, length };
    });
    const tape = Math.max(width, Math.ceil(cursor / width) * width);
    const zoom = this.zoom;
    const offset = Math.max(0, Math.min(tape * zoom - tape, this.offset));
    this.offset = offset;
    // A piece of the zoomed tape [start, start + length) as drawn rows, clipped to the view.
    const place = (start, length) => {
      let x = start * zoom - offset;
      let left = length * zoom;
      if (x + left <= 0 || x >= tape) return [];
      if (x < 0) {
        left += x;
        x = 0;
      }
      left = Math.min(left, tape - x);
      const pieces = [];
      while (left > 0.01) {
        const row = Math.floor(x / width);
        const inRow = x - row * width;
        const w = Math.min(left, width - inRow);
        pieces.push({ x: inRow, row, w });
        x += w;
        left -= w;
      }
      return pieces;
    };
    const totalRows = Math.max(1, Math.ceil(tape / width));
    const height = totalRows * (ROW + ROW_GAP);
    const ctx = fitCanvas(this.canvas, width, height);
    ctx.fillStyle = t.bg;
    ctx.fillRect(0, 0, width, height);
    const pieces = [];
    const y = (row) => row * (ROW + ROW_GAP) + 2;
    const alloc = this.app.store.get().alloc;
    const touched = this.touched();
    const touchedBoxes = [];
    this.touchedAt = null;
    for (const [si, p] of placed.entries()) {
      const s = p.segment;
      const scale = p.length / s.size;
      const segmentPieces = place(p.at, p.length);
      for (const piece of segmentPieces) {
        ctx.fillStyle = t.free;
        ctx.fillRect(piece.x, y(piece.row), piece.w, ROW);
      }
      const segmentTouched = touched && /^segment_/.test(touched.action) && touched.address >= s.address && touched.address < s.address + s.size;
      if (segmentTouched) {
        this.touchedAt = p.at + (touched.address - s.address) * scale;
        for (const piece of place(this.touchedAt, Math.max(1 / zoom, Math.min(touched.size, s.size) * scale))) touchedBoxes.push({ ...piece, y: y(piece.row) });
      }
      if (segmentPieces.length === 0) continue;
      for (const [bi, block] of s.blocks.entries()) {
        const offsetPx = (block.address - s.address) * scale;
        // At least a pixel at any zoom, so every block can be found and hovered.
        const length = Math.max(1 / zoom, block.size * scale);
        const used = block.state === "inactive" ? 0 : Math.min(block.size, block.requested || block.size) * scale;
        const blockPieces = place(p.at + offsetPx, length);
        for (const piece of blockPieces) pieces.push({ x: piece.x, y: y(piece.row), w: Math.max(1, piece.w), segment: si, block, blockIndex: bi });
        if (touched && !/^segment_/.test(touched.action) && block.address === touched.address && block.state !== "inactive") {
          this.touchedAt = p.at + offsetPx;
          for (const piece of blockPieces) touchedBoxes.push({ ...piece, y: y(piece.row) });
        }
        if (block.state === "inactive") continue;
        const pending = block.state === "active_pending_free";
        ctx.fillStyle = pending ? t.pending : block.allocation !== null && block.allocation !== undefined ? bandColor(block.allocation, t.dark) : t.allocated;
        // A 1 px gap after each wide block shows where blocks meet.
        for (const piece of blockPieces) ctx.fillRect(piece.x, y(piece.row), Math.max(1, piece.w - (piece.w > 4 ? 1 : 0)), ROW);
        if (pending) {
          // Hatched: held, but by no tensor.
          ctx.strokeStyle = t.bg;
          ctx.lineWidth = 1;
          for (const piece of blockPieces) {
            ctx.save();
            ctx.beginPath();
            ctx.rect(piece.x, y(piece.row), piece.w, ROW);
            ctx.clip();
            ctx.beginPath();
            for (let hx = piece.x - ROW; hx < piece.x + piece.w; hx += 6) {
              ctx.moveTo(hx, y(piece.row) + ROW);
              ctx.lineTo(hx + ROW, y(piece.row));
            }
            ctx.stroke();
            ctx.restore();
          }
        }
        if ((block.size * scale - used) * zoom >= 0.5) {
          ctx.fillStyle = t.rounding;
          for (const piece of place(p.at + offsetPx + used, block.size * scale - used))
            ctx.fillRect(piece.x, y(piece.row) + ROW * 0.45, Math.max(1, piece.w), ROW * 0.55);
        }
        if (alloc !== null && block.allocation === alloc) {
          ctx.strokeStyle = t.accent;
          ctx.lineWidth = 2;
          for (const piece of blockPieces) ctx.strokeRect(piece.x + 1, y(piece.row) - 1, Math.max(1, piece.w - 2), ROW + 2);
        }
      }
      const hovered = this.hoverSegment === si || this.hover?.segment === si;
      ctx.strokeStyle = hovered ? t.text : t.lineStrong;
      ctx.lineWidth = hovered ? 2 : 1;
      for (const piece of segmentPieces) ctx.strokeRect(piece.x + 0.5, y(piece.row) + 0.5, Math.max(1, piece.w - 1), ROW - 1);
    }
    // The selected event's block: a thick outline and a marker above it, seen at any size.
    ctx.strokeStyle = t.oom;
    ctx.fillStyle = t.oom;
    ctx.lineWidth = 3;
    for (const box of touchedBoxes) {
      ctx.strokeRect(box.x - 1.5, box.y - 1.5, Math.max(3, box.w + 3), ROW + 3);
      ctx.beginPath();
      ctx.moveTo(box.x + Math.max(3, box.w) / 2 - 4, box.y - 6);
      ctx.lineTo(box.x + Math.max(3, box.w) / 2 + 4, box.y - 6);
      ctx.lineTo(box.x + Math.max(3, box.w) / 2, box.y - 1);
      ctx.fill();
    }
    // Tiny blocks last, so hit-testing prefers them over their neighbours' padding.
    pieces.sort((a, b) => b.w - a.w);
    this.pieces = pieces;
    this.layout = {
      width,
      height,
      rows: totalRows,
      perPx,
      tape,
      zoom,
      offset,
      segments: segments.length,
      blocks: pieces.length,
      touched: touchedBoxes.map((b) => ({ x: b.x, y: b.y, w: b.w })),
    };
    const zoomLabel = this.panel.querySelector("#segments-zoom-level");
    if (zoomLabel) zoomLabel.textContent = zoom > 1 ? `×${zoom >= 100 ? Math.round(zoom) : zoom.toFixed(1)}` : "";
  }

  pieceAt(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    let found = null;
    for (const p of this.pieces) if (x >= p.x - 0.5 && x < p.x + p.w + 0.5 && y >= p.y && y < p.y + ROW) found = p;
    return found;
  }

  onMove(event) {
    const piece = this.pieceAt(event);
    const same = piece && this.hover && piece.block === this.hover.block;
    this.hover = piece;
    if (!same) this.draw();
    if (!piece) {
      hideTip();
      return;
    }
    const { block } = piece;
    const s = this.data.segments[piece.segment];
    const streams = this.data.streams?.raw ?? [];
    const segmentStack = this.data.segment_stacks?.[s.stack] ?? [];
    const rounding = block.state === "inactive" ? 0 : Math.max(0, block.size - block.requested);
    const render = (info) =>
      showTip(
        event.clientX,
        event.clientY,
        h(
          "div",
          { className: "tip-title" },
          `${STATE_NAMES[block.state] ?? block.state} · ${bytes(block.size)}`,
          info ? h("span", { className: "tip-id" }, ` ${info.block_id}`) : null,
        ),
        block.state === "active_pending_free" ? h("div", { className: "tip-note tip-pending" }, pendingReason(block, s.stream_id, streams)) : null,
        block.state !== "inactive" ? tipRow("requested", bytes(block.requested)) : null,
        rounding ? tipRow("rounding", bytes(rounding)) : null,
        tipRow("address", hex(block.address)),
        tipRow("segment", `${hex(s.address)} · ${bytes(s.size)} · stream ${s.stream_id}${s.expandable ? " · expandable" : ""}`),
        tipRow("pool", s.pool && (s.pool[0] || s.pool[1]) ? `private (${s.pool.join(", ")})` : "default"),
        tipRow("segment free", `${bytes(s.stats.external_free)} (largest ${bytes(s.stats.largest_free_block)})`),
        info
          ? h(
              "ol",
              { className: "tip-frames" },
              visibleFrames(info.frames)
                .slice(0, 6)
                .map((f) => h("li", {}, h("span", { className: "frame-name" }, f.name), " ", h("span", { className: "frame-where" }, frameParts(f).where))),
            )
          : null,
        info && !visibleFrames(info.frames).length ? h("div", { className: "tip-note" }, "No Python frames recorded.") : null,
        h(
          "div",
          { className: "tip-note" },
          segmentStack.length ? `Segment ${s.expandable ? "mapped" : "cudaMalloc'd"} at:` : "No stack recorded for the segment's cudaMalloc.",
        ),
        segmentStack.length
          ? h(
              "ol",
              { className: "tip-frames tip-segment-stack" },
              segmentStack.slice(0, 4).map((f) => h("li", {}, f)),
            )
          : null,
        block.allocation !== null && block.allocation !== undefined ? h("div", { className: "tip-note" }, "Click to pin this allocation.") : null,
      );
    render(null);
    if (block.allocation !== null && block.allocation !== undefined) {
      allocation(this.app.id, this.app.device(), block.allocation)
        .then((info) => {
          if (this.hover?.block === block) render(info);
        })
        .catch(() => {});
    }
  }
}
