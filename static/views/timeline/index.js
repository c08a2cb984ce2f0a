// @ts-check
// The allocation timeline: every allocation a band stacked over time, the reserved line, the
// peak, OOMs, annotations and the end of the trace; zoom, pan, a minimap, hover and pin.
// This module holds the view's state, its data and its window; the drawing is paint.js and
// minimap.js, the pointer interaction.js, the pinned allocation and the legend side.js.
//
// Coordinate spaces: the server's answer is in *column units* (column c spans [c, c + 1));
// the window shown maps column units to *CSS px* (`px(u)`); canvases are backed by *device px*
// (fitCanvas). While a new window loads, the last answer is drawn through the new mapping, so
// zooming and panning never wait for the network.

import { getJSON } from "../../lib/api.js";
import { byteTicks, clamp } from "../../lib/scale.js";
import { clampByteRange, prepare, unitOfEvent, zoomByteRange, zoomWindow } from "../../lib/timeline-model.js";
import { count } from "../../lib/units.js";
import { frameScheduler } from "../canvas.js";
import { h } from "../dom.js";
import { onThemeChange } from "../theme.js";
import { bindChart } from "./interaction.js";
import { bindMinimap, MINIMAP_HEIGHT, paintMinimap } from "./minimap.js";
import { HEIGHT, MARGIN, paintTimeline, prepareBands } from "./paint.js";
import { bindRoleStrip, loadRoles, paintRoleStrip } from "./roles.js";
import { closeColumnList, renderLegend, renderSide } from "./side.js";

/** Yields to the event loop (input and frames go first). */
const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));

/** How long the window must stay still before its answer is asked for (zooming asks once). */
const FETCH_DELAY_MS = 100;

export class TimelineView {
  /**
   * @param {import("../app.js").App} app
   * @param {HTMLElement} panel
   */
  constructor(app, panel) {
    this.app = app;
    this.panel = panel;
    /** Repaints the hover under a still pointer after new data (timeline/interaction.js sets it). */
    /** @type {(() => void) | null} */
    this.rehover = null;
    this.chart = /** @type {HTMLElement} */ (panel.querySelector("#timeline-chart"));
    this.canvas = /** @type {HTMLCanvasElement} */ (panel.querySelector("#timeline-canvas"));
    this.minimap = /** @type {HTMLCanvasElement} */ (panel.querySelector("#timeline-minimap"));
    this.status = /** @type {HTMLElement} */ (panel.querySelector("#timeline-status"));
    this.error = /** @type {HTMLElement} */ (panel.querySelector("#timeline-error"));
    this.empty = /** @type {HTMLElement} */ (panel.querySelector("#timeline-empty"));
    this.side = /** @type {HTMLElement} */ (panel.querySelector("#alloc-panel"));
    this.legend = /** @type {HTMLElement} */ (panel.querySelector("#timeline-legend"));
    // The list of a grey column's allocations (a click on the grey part opens it).
    this.columnList = /** @type {HTMLElement} */ (panel.querySelector("#timeline-column-list"));
    this.detailSelect = /** @type {HTMLSelectElement} */ (panel.querySelector("#timeline-detail"));
    // Colour by role: the strip of memory by role under the chart, and its last answer.
    this.roleCanvas = /** @type {HTMLCanvasElement} */ (panel.querySelector("#timeline-roles"));
    this.resetData();
    this.showAllFrames = false;
    this.layout = null;
    // Pointer state that interaction.js and minimap.js keep on the view.
    /** A press on the chart: where, the window then, whether it moved, whether a box zoom. */
    /** @type {{x: number, y: number, u0: number, u1: number, moved: boolean, box: boolean} | null} */
    this.drag = null;
    /** The box a shift-drag draws (painted by paint.js), or null. */
    /** @type {{x0: number, y0: number, x1: number, y1: number} | null} */
    this.zoomBox = null;
    /** The minimap's plot and brush as last painted. */
    /** @type {{x0: number, w: number, brush: number[]} | null} */
    this.minimapLayout = null;
    /** A drag on the minimap: moving the brush or drawing a new one. */
    /** @type {{mode: "move" | "brush", x: number, b0: number, b1: number, moved?: boolean} | null} */
    this.miniDrag = null;
    this.draw = frameScheduler(() => this.paint());
    this.drawMinimap = frameScheduler(() => this.paintMinimap());
    this.bind();
    bindRoleStrip(this);
    this.syncColor();
    this.renderLegend();
    this.renderSide();
  }

  visible() {
    return !this.panel.hidden;
  }

  state() {
    return this.app.store.get();
  }

  device() {
    return this.app.summary ? this.app.device() : this.state().device;
  }

  /** Events in the trace (from the last answer, else the summary). */
  events() {
    return this.model?.events ?? this.app.events();
  }

  /** The window shown, inclusive event indices. */
  window() {
    const s = this.state();
    const last = Math.max(0, this.events() - 1);
    const start = clamp(s.start ?? 0, 0, last);
    const end = clamp(s.end ?? last, start, last);
    return { start, end };
  }

  plot() {
    // The chart's width, measured when it is shown or resized (reading it here would force a
    // layout on every frame while zooming).
    if (!this.width) this.width = this.chart.clientWidth;
    const width = Math.max(320, this.width);
    return { x: MARGIN.left, y: MARGIN.top, w: width - MARGIN.left - MARGIN.right, h: HEIGHT - MARGIN.top - MARGIN.bottom, width };
  }

  /** Starts loading before the page has its summary (the timeline tab was in the URL). */
  prefetch() {
    this.panel.hidden = false;
    this.show();
  }

  show() {
    if (this.app.summary && this.app.events() === 0) {
      this.showEmpty();
      return;
    }
    this.draw();
    this.fetchWindow(0);
    this.fetchOverview();
  }

  showEmpty() {
    // Only the reason: no "Loading…" beside it.
    clearTimeout(this.fetchTimer);
    this.abort?.abort();
    this.loading = false;
    this.status.textContent = "";
    this.empty.hidden = false;
    this.empty.replaceChildren(
      h("strong", {}, "No timeline: "),
      this.app.noHistory || "this device's trace has no events.",
      " The Segments tab shows the allocator's state when the snapshot was taken.",
    );
    /** @type {HTMLElement} */ (this.panel.querySelector(".timeline-layout")).hidden = true;
    for (const b of /** @type {NodeListOf<HTMLButtonElement>} */ (this.panel.querySelectorAll(".view-toolbar button"))) b.disabled = true;
  }

  /** Colour by role or not: the toolbar's buttons, the strip, the legend. */
  syncColor() {
    const byRole = this.state().color === "role";
    for (const b of /** @type {NodeListOf<HTMLElement>} */ (this.panel.querySelectorAll("[data-color]")))
      b.setAttribute("aria-pressed", String(b.dataset.color === this.state().color));
    this.roleCanvas.hidden = !byRole;
    this.roleCanvas.parentElement.hidden = !byRole;
  }

  /** Forgets every answer drawn from: a new device or axis starts from nothing. */
  resetData() {
    this.roles = null;
    this.rolesKey = "";
    this.model = null;
    this.overview = null;
    this.overviewKey = "";
    this.dataKey = "";
    this.hover = null;
    this.drawn = false;
  }

  update(state, changed) {
    if (changed.has("color")) {
      this.syncColor();
      this.renderLegend();
      if (state.color === "role" && this.dataKey) loadRoles(this, this.dataKey);
    }
    if (changed.has("device") || changed.has("axis")) this.resetData();
    for (const b of /** @type {NodeListOf<HTMLElement>} */ (this.panel.querySelectorAll("[data-axis]")))
      b.setAttribute("aria-pressed", String(b.dataset.axis === state.axis));
    if (changed.has("alloc") || changed.has("device")) this.renderSide();
    if (!this.visible()) return;
    if (changed.has("device") || changed.has("axis")) {
      this.show();
      return;
    }
    if (["start", "end", "y0", "y1", "detail"].some((key) => changed.has(key))) {
      this.fetchWindow(FETCH_DELAY_MS);
      closeColumnList(this);
    }
    if (changed.has("detail")) this.syncDetail();
    this.draw();
    this.drawMinimap();
  }

  // -------------------------------------------------------------------------------------------
  // Data

  fetchWindow(delay) {
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => this.load(), delay);
  }

  async load() {
    const s = this.state();
    const plot = this.plot();
    const params = new URLSearchParams();
    const device = this.device();
    if (device !== null && device !== undefined) params.set("device", device);
    if (s.start !== null || s.end !== null) {
      const { start, end } = this.window();
      params.set("start", String(start));
      params.set("end", String(end));
    }
    params.set("width", String(Math.round(plot.w)));
    params.set("height", String(Math.round(plot.h)));
    if (s.axis === "time") params.set("axis", "time");
    // The byte zoom and detail choose the bands (the server lowers its threshold with them).
    if (s.y0 !== null && s.y1 !== null) {
      params.set("y0", s.y0);
      params.set("y1", s.y1);
    }
    if (s.detail !== null) params.set("detail", s.detail);
    const key = params.toString();
    // The role strip asks for the same window (the answers share their columns).
    if (s.color === "role") loadRoles(this, key);
    if (key === this.dataKey && this.model) return;
    // The same window already on its way: asking again would throw away its answer.
    if (this.loading && key === this.pendingKey) return;
    this.pendingKey = key;
    this.abort?.abort();
    const controller = new AbortController();
    this.abort = controller;
    this.loading = true;
    this.setStatus("Loading…");
    try {
      const data = await getJSON(`/api/snapshots/${this.app.id}/timeline?${key}`, controller.signal);
      // A newer window was asked for meanwhile: this answer is dropped before any work on it.
      const superseded = () => controller.signal.aborted || this.abort !== controller;
      if (superseded()) return;
      // Parsing, preparing and painting a large answer are each a task of their own, so that
      // on a loaded machine none of them runs long, and a newer zoom can cut in between them.
      await nextTask();
      if (superseded()) return;
      const model = prepare(data);
      prepareBands(this, model);
      await nextTask();
      if (superseded()) return;
      this.dataKey = key;
      this.loading = false;
      this.model = model;
      this.error.hidden = true;
      if (data.events === 0) {
        this.showEmpty();
        return;
      }
      this.paint();
      // The minimap draws the overview, not this answer: only its brush may have moved, and
      // that is a frame's work, not this task's.
      this.drawMinimap();
      this.rehover?.();
      if (!this.drawn) {
        this.drawn = true;
        performance.mark("snapview:timeline-drawn");
      }
    } catch (error) {
      if (error.name === "AbortError") return;
      this.loading = false;
      this.error.textContent = `The timeline could not load. ${error.message}`;
      this.error.hidden = false;
      this.setStatus("");
    }
  }

  async fetchOverview() {
    const s = this.state();
    const params = new URLSearchParams();
    const device = this.device();
    if (device !== null && device !== undefined) params.set("device", device);
    params.set("width", String(Math.round(this.plot().w)));
    params.set("height", String(MINIMAP_HEIGHT));
    if (s.axis === "time") params.set("axis", "time");
    const key = params.toString();
    if (key === this.overviewKey) return;
    this.overviewKey = key;
    try {
      this.overview = prepare(await getJSON(`/api/snapshots/${this.app.id}/timeline?${key}`));
      this.drawMinimap();
    } catch {
      this.overviewKey = "";
    }
  }

  setStatus(loading) {
    const { start, end } = this.window();
    const n = this.events();
    const parts = [];
    if (n) parts.push(start === 0 && end === n - 1 ? `all ${count(n)} events` : `events ${count(start)}–${count(end)} of ${count(n)}`);
    if (this.model?.data.bands) parts.push(`${count(this.model.data.bands.id.length)} bands`);
    const asked = this.state().at;
    if (asked !== null && n && asked > n - 1) parts.push(`at=${count(asked)} is past the end: showing the last event, ${count(n - 1)}`);
    if (this.byteRange()) parts.push("bytes zoomed");
    if (loading) parts.push(loading);
    const text = parts.join(" · ");
    if (this.status.textContent !== text) this.status.textContent = text;
  }

  // -------------------------------------------------------------------------------------------
  // Mapping

  /** The window in the current answer's column units. */
  units(model = this.model) {
    const { start, end } = this.window();
    return [unitOfEvent(model, start), unitOfEvent(model, end + 1)];
  }

  /** The byte zoom from the URL, [low, high], or null for the whole axis. */
  byteRange() {
    const s = this.state();
    return s.y0 !== null && s.y1 !== null && s.y1 > s.y0 ? [s.y0, s.y1] : null;
  }

  /** The top of the unzoomed byte axis (a round value above the window's maximum). */
  fullTop() {
    return byteTicks(this.model?.data.y_max ?? 1).top;
  }

  mapping() {
    const plot = this.plot();
    const [u0, u1] = this.units();
    const k = plot.w / Math.max(1e-9, u1 - u0);
    const range = this.byteRange();
    const yTop = this.fullTop();
    const [yLow, yHigh] = range ?? [0, yTop];
    const span = Math.max(1, yHigh - yLow);
    return {
      plot,
      u0,
      u1,
      yTop,
      yLow,
      yHigh,
      zoomedY: range !== null,
      px: (u) => plot.x + (u - u0) * k,
      unit: (x) => u0 + (x - plot.x) / k,
      py: (b) => plot.y + plot.h - ((b - yLow) / span) * plot.h,
      bytesAt: (y) => yLow + ((plot.y + plot.h - y) / plot.h) * span,
    };
  }

  // -------------------------------------------------------------------------------------------
  // Drawing (paint.js, minimap.js, side.js)

  paint() {
    paintTimeline(this);
    paintRoleStrip(this);
  }

  paintMinimap() {
    paintMinimap(this);
  }

  renderSide() {
    return renderSide(this);
  }

  renderLegend() {
    renderLegend(this);
  }

  // -------------------------------------------------------------------------------------------
  // Interaction (the pointer is interaction.js and minimap.js)

  bind() {
    bindChart(this);
    bindMinimap(this);
    this.syncDetail();
    this.detailSelect?.addEventListener("change", () => {
      const value = this.detailSelect.value;
      this.app.store.set({ detail: value === "" ? null : Number(value) });
    });
    let lastWidth = 0;
    new ResizeObserver((entries) => {
      const width = Math.floor(entries[entries.length - 1].contentRect.width);
      if (!this.visible() || width === lastWidth || width === 0) return;
      lastWidth = width;
      this.width = width;
      this.draw();
      this.drawMinimap();
      if (this.model) {
        this.fetchWindow(FETCH_DELAY_MS);
        this.overviewKey = "";
        this.fetchOverview();
      }
    }).observe(this.chart);
    onThemeChange(() => {
      this.draw();
      this.drawMinimap();
    });
  }

  reset() {
    this.app.store.set({ start: null, end: null, y0: null, y1: null });
  }

  /** Sets the byte zoom ([low, high] bytes, or null for the whole axis). */
  setByteRange(range) {
    this.app.store.set(range ? { y0: range[0], y1: range[1] } : { y0: null, y1: null });
  }

  /** Zooms the byte axis by `factor` (< 1: in) around `bytes` (default: the middle shown). */
  zoomBytesBy(factor, bytes) {
    if (!this.model) return;
    const m = this.mapping();
    this.setByteRange(zoomByteRange(this.byteRange(), m.yTop, bytes ?? (m.yLow + m.yHigh) / 2, factor));
  }

  /** Zooms both axes to a box drawn on the chart (CSS px corners). */
  zoomToBox(x0, y0, x1, y1) {
    if (!this.model) return;
    const m = this.mapping();
    const a = clamp(Math.min(x0, x1), m.plot.x, m.plot.x + m.plot.w);
    const b = clamp(Math.max(x0, x1), m.plot.x, m.plot.x + m.plot.w);
    const window = zoomWindow(this.model, m.unit(a), m.unit(b), m.unit(a), 1);
    const range = clampByteRange(m.bytesAt(Math.max(y0, y1)), m.bytesAt(Math.min(y0, y1)), m.yTop);
    const last = this.events() - 1;
    const whole = window.start <= 0 && window.end >= last;
    this.app.store.set({
      start: whole ? null : window.start,
      end: whole ? null : window.end,
      y0: range ? range[0] : null,
      y1: range ? range[1] : null,
    });
  }

  /** The detail select shows the URL's detail. */
  syncDetail() {
    if (!this.detailSelect) return;
    const value = String(this.state().detail ?? "");
    if (![...this.detailSelect.options].some((o) => o.value === value)) this.detailSelect.add(new Option(`${count(Number(value))} bands`, value));
    this.detailSelect.value = value;
  }

  setWindow({ start, end }) {
    const last = this.events() - 1;
    if (start <= 0 && end >= last) this.app.store.set({ start: null, end: null });
    else this.app.store.set({ start, end });
  }

  /** Zooms by `factor` (< 1: in) around the moment if shown, else the middle. */
  zoomBy(factor) {
    if (!this.model) return;
    const m = this.mapping();
    const moment = this.layout?.moment;
    const u = moment ? m.unit(moment.x) : (m.u0 + m.u1) / 2;
    this.setWindow(zoomWindow(this.model, m.u0, m.u1, u, factor));
  }
}
