// @ts-check
// The segment map at the selected moment: every segment of the device to scale, each live
// block in its allocation's own colour (the timeline's), pending frees hatched, rounding waste
// marked; totals and per-segment stats; hover for a block's allocation and stack, a segment's
// cudaMalloc stack. Beside it the Allocator State History: the events around the moment
// (↑ ↓ or ← → step it), the selected event's stack and totals, its block outlined on the map.
// The wheel zooms the map (around the pointer) so that small blocks can be hovered.

import { CanvasView } from "./canvas-view.js";
import { h } from "./dom.js";
import { newestOnly } from "./newest-only.js";
import { SegmentTimelineView } from "./segment-timeline.js";
import { renderHistory } from "./segments/history.js";
import { paintMap, pieceAt, ROW, ROW_GAP } from "./segments/map.js";
import { renderSource, renderTable, renderTotals } from "./segments/tables.js";
import { showBlockTip } from "./segments/tip.js";
import { onThemeChange } from "./theme.js";

/** The most the map magnifies: a 512 B block of a 20 GiB device is then a few px wide. */
export const MAX_ZOOM = 1 << 20;
/** Events listed on each side of the moment. */
const AROUND = 12;

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
    // Set by the parts in segments/: the map's geometry and where the selected event's block
    // lies on the tape (map.js), the segment whose table row is hovered and the table's
    // reusable cells (tables.js), the history's list and detail (history.js).
    /** @type {any} */
    this.layout = null;
    /** @type {number | null} */
    this.touchedAt = null;
    /** @type {number | null} */
    this.hoverSegment = null;
    /** @type {string | null} */
    this.tableShape = null;
    /** @type {HTMLElement[][] | null} */
    this.tableCells = null;
    /** @type {HTMLElement | null} */
    this.historyList = null;
    /** @type {HTMLElement | null} */
    this.historyDetail = null;
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
    /** Whether any of the segments table is on screen (or nearly), and whether it shows an
     * older moment. */
    this.tableInView = false;
    this.tableStale = false;
    // A quarter of the window's height ahead, so that scrolling brings the table up to date
    // before it shows.
    new IntersectionObserver(
      (entries) => {
        this.tableInView = entries.some((e) => e.isIntersecting);
        if (this.tableInView && this.tableStale && this.data) this.renderTable();
      },
      { rootMargin: "25% 0px" },
    ).observe(this.table);
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
      // together with the map's paint. Out of sight it waits until it is scrolled to: a changed
      // cell repaints the whole table (every row of its scroller), which on the huge trace was
      // the largest part of a step.
      if (this.tableInView || !this.tableShape) requestAnimationFrame(() => setTimeout(() => this.data === data && this.renderTable()));
      else this.tableStale = true;
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
    renderHistory(this);
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
    renderSource(this);
  }

  renderTotals() {
    renderTotals(this);
  }

  renderTable() {
    this.tableStale = false;
    renderTable(this);
  }

  paint() {
    paintMap(this);
  }

  pieceAt(event) {
    return pieceAt(this, event);
  }

  onMove(event) {
    showBlockTip(this, event);
  }
}
