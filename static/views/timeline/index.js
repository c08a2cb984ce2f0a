// The allocation timeline: every allocation a band stacked over time, the reserved line, the
// peak, OOMs, annotations and the end of the trace; zoom, pan, a minimap, hover and pin.
// This module holds the view's state, its data and its window; the drawing is paint.js and
// minimap.js, the pointer interaction.js, the pinned allocation and the legend side.js.
//
// Coordinate spaces: the server's answer is in *column units* (column c spans [c, c + 1));
// the window shown maps column units to *CSS px* (`px(u)`); canvases are backed by *device px*
// (fitCanvas). While a new window loads, the last answer is drawn through the new mapping, so
// zooming and panning never wait for the network.

import { byteTicks, clamp } from "../../lib/scale.js";
import { prepare, unitOfEvent, zoomWindow } from "../../lib/timeline-model.js";
import { count } from "../../lib/units.js";
import { frameScheduler, getJSON, h, onThemeChange } from "../common.js";
import { bindChart } from "./interaction.js";
import { bindMinimap, MINIMAP_HEIGHT, paintMinimap } from "./minimap.js";
import { HEIGHT, MARGIN, paintTimeline } from "./paint.js";
import { bindRoleStrip, loadRoles, paintRoleStrip } from "./roles.js";
import { renderLegend, renderSide } from "./side.js";

/** How long the window must stay still before its answer is asked for (zooming asks once). */
const FETCH_DELAY_MS = 100;

export class TimelineView {
  constructor(ctx, panel) {
    this.ctx = ctx;
    this.panel = panel;
    this.chart = panel.querySelector("#timeline-chart");
    this.canvas = panel.querySelector("#timeline-canvas");
    this.minimap = panel.querySelector("#timeline-minimap");
    this.status = panel.querySelector("#timeline-status");
    this.error = panel.querySelector("#timeline-error");
    this.empty = panel.querySelector("#timeline-empty");
    this.side = panel.querySelector("#alloc-panel");
    this.legend = panel.querySelector("#timeline-legend");
    // Colour by role: the strip of memory by role under the chart, and its last answer.
    this.roleCanvas = panel.querySelector("#timeline-roles");
    this.resetData();
    this.showAllFrames = false;
    this.layout = null;
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
    return this.ctx.store.get();
  }

  device() {
    return this.ctx.summary ? this.ctx.device() : this.state().device;
  }

  /** Events in the trace (from the last answer, else the summary). */
  events() {
    return this.model?.events ?? this.ctx.events();
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
    if (this.ctx.summary && this.ctx.events() === 0) {
      this.showEmpty();
      return;
    }
    this.draw();
    this.fetchWindow(0);
    this.fetchOverview();
  }

  showEmpty() {
    this.empty.hidden = false;
    this.empty.replaceChildren(
      h("strong", {}, "No timeline: "),
      this.ctx.noHistory || "this device's trace has no events.",
      " The Segments tab shows the allocator's state when the snapshot was taken.",
    );
    this.panel.querySelector(".timeline-layout").hidden = true;
    for (const b of this.panel.querySelectorAll(".view-toolbar button")) b.disabled = true;
  }

  /** Colour by role or not: the toolbar's buttons, the strip, the legend. */
  syncColor() {
    const byRole = this.state().color === "role";
    for (const b of this.panel.querySelectorAll("[data-color]")) b.setAttribute("aria-pressed", String(b.dataset.color === this.state().color));
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
    for (const b of this.panel.querySelectorAll("[data-axis]")) b.setAttribute("aria-pressed", String(b.dataset.axis === state.axis));
    if (changed.has("alloc") || changed.has("device")) this.renderSide();
    if (!this.visible()) return;
    if (changed.has("device") || changed.has("axis")) {
      this.show();
      return;
    }
    if (changed.has("start") || changed.has("end")) this.fetchWindow(FETCH_DELAY_MS);
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
      params.set("start", start);
      params.set("end", end);
    }
    params.set("width", Math.round(plot.w));
    params.set("height", Math.round(plot.h));
    if (s.axis === "time") params.set("axis", "time");
    const key = params.toString();
    // The role strip asks for the same window (the answers share their columns).
    if (s.color === "role") loadRoles(this, key);
    if (key === this.dataKey && this.model) return;
    this.abort?.abort();
    const controller = new AbortController();
    this.abort = controller;
    this.loading = true;
    this.setStatus("Loading…");
    try {
      const data = await getJSON(`/api/snapshots/${this.ctx.id}/timeline?${key}`, controller.signal);
      if (controller.signal.aborted) return;
      this.dataKey = key;
      this.loading = false;
      this.model = prepare(data);
      this.error.hidden = true;
      if (data.events === 0) {
        this.showEmpty();
        return;
      }
      this.paint();
      this.paintMinimap();
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
    params.set("width", Math.round(this.plot().w));
    params.set("height", MINIMAP_HEIGHT);
    if (s.axis === "time") params.set("axis", "time");
    const key = params.toString();
    if (key === this.overviewKey) return;
    this.overviewKey = key;
    try {
      this.overview = prepare(await getJSON(`/api/snapshots/${this.ctx.id}/timeline?${key}`));
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

  mapping() {
    const plot = this.plot();
    const [u0, u1] = this.units();
    const k = plot.w / Math.max(1e-9, u1 - u0);
    const yTop = byteTicks(this.model.data.y_max).top;
    return {
      plot,
      u0,
      u1,
      yTop,
      px: (u) => plot.x + (u - u0) * k,
      unit: (x) => u0 + (x - plot.x) / k,
      py: (b) => plot.y + plot.h - (b / yTop) * plot.h,
      bytesAt: (y) => ((plot.y + plot.h - y) / plot.h) * yTop,
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
    this.ctx.store.set({ start: null, end: null });
  }

  setWindow({ start, end }) {
    const last = this.events() - 1;
    if (start <= 0 && end >= last) this.ctx.store.set({ start: null, end: null });
    else this.ctx.store.set({ start, end });
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
