// The allocation timeline: every allocation a band stacked over time, the reserved line, the
// peak, OOMs, annotations and the end of the trace; zoom, pan, a minimap, hover and pin.
//
// Coordinate spaces: the server's answer is in *column units* (column c spans [c, c + 1));
// the window shown maps column units to *CSS px* (`px(u)`); canvases are backed by *device px*
// (fitCanvas). While a new window loads, the last answer is drawn through the new mapping, so
// zooming and panning never wait for the network.

import { bandColor } from "../lib/color.js";
import { byteTicks, clamp, eventTicks, timeTicks } from "../lib/scale.js";
import { bandAt, bandRuns, eventOfUnit, panWindow, prepare, unitOfEvent, zoomWindow } from "../lib/timeline-model.js";
import { bytes, count, duration, hex } from "../lib/units.js";
import { allocation, fitCanvas, frameParts, frameScheduler, getJSON, h, hideTip, onThemeChange, showTip, theme, tipRow, visibleFrames } from "./common.js";

const HEIGHT = 400;
const MINIMAP_HEIGHT = 46;
const MARGIN = { left: 66, right: 16, top: 34, bottom: 30 };
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
    this.model = null;
    this.overview = null;
    this.overviewKey = "";
    this.dataKey = "";
    this.hover = null;
    this.showAllFrames = false;
    this.drawn = false;
    this.layout = null;
    this.draw = frameScheduler(() => this.paint());
    this.drawMinimap = frameScheduler(() => this.paintMinimap());
    this.bind();
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

  update(state, changed) {
    if (changed.has("device") || changed.has("axis")) {
      this.model = null;
      this.overview = null;
      this.overviewKey = "";
      this.dataKey = "";
      this.hover = null;
      this.drawn = false;
    }
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
  // Drawing

  paint() {
    if (!this.visible()) return;
    const plot = this.plot();
    const ctx = fitCanvas(this.canvas, plot.width, HEIGHT);
    const t = theme();
    ctx.fillStyle = t.bg;
    ctx.fillRect(0, 0, plot.width, HEIGHT);
    if (!this.model) {
      ctx.fillStyle = t.muted;
      ctx.font = t.font;
      ctx.fillText("Loading the timeline…", plot.x + 8, plot.y + 20);
      return;
    }
    const m = this.mapping();
    const model = this.model;
    const data = model.data;
    const s = this.state();
    const layout = { plot, u0: m.u0, u1: m.u1, yTop: m.yTop, window: this.window(), request: { start: data.start, end: data.end }, bands: [], moment: null, peak: null };

    // Grid and y axis.
    ctx.font = t.font;
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    for (const tick of byteTicks(data.y_max).ticks) {
      const y = Math.round(m.py(tick.value)) + 0.5;
      ctx.strokeStyle = t.line;
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(plot.x, y);
      ctx.lineTo(plot.x + plot.w, y);
      ctx.stroke();
      ctx.fillStyle = t.muted;
      ctx.fillText(tick.label, plot.x - 8, y);
    }

    ctx.save();
    ctx.beginPath();
    ctx.rect(plot.x, plot.y - 2, plot.w, plot.h + 2);
    ctx.clip();

    // The part of the trace with incomplete history.
    const completeFrom = data.complete_from;
    if (completeFrom) {
      const x1 = m.px(unitOfEvent(model, completeFrom));
      if (x1 > plot.x) {
        ctx.fillStyle = t.incomplete;
        ctx.fillRect(plot.x, plot.y, Math.min(plot.w, x1 - plot.x), plot.h);
      }
    }
    // Beyond the trace (visible while a zoomed-out window loads).
    const xEnd = m.px(unitOfEvent(model, model.events));
    const xBegin = m.px(unitOfEvent(model, 0));

    // Small allocations: between the top of the bands and the column's maximum.
    // (fillRect per column, not one path: a many-rect path is slow to rasterize in software.)
    ctx.fillStyle = t.small;
    for (let c = 0; c < model.n; c += 1) {
      const x0 = m.px(c);
      const x1 = m.px(c + 1);
      if (x1 < plot.x || x0 > plot.x + plot.w) continue;
      const top = m.py(data.allocated_max[c]);
      const low = m.py(Math.max(data.allocated_min[c], data.big_top[c]));
      const bottom = m.py(data.big_top[c]);
      if (bottom - low > 0.05) ctx.fillRect(x0, low, Math.max(0.6, x1 - x0), bottom - low);
      ctx.fillStyle = t.smallRange;
      if (low - top > 0.05) ctx.fillRect(x0, top, Math.max(0.6, x1 - x0), low - top);
      ctx.fillStyle = t.small;
    }

    // Bands.
    const hovered = this.hover?.band?.id;
    const pinned = s.alloc;
    for (const band of model.bands) {
      ctx.fillStyle = bandColor(band.id, t.dark);
      let best = null;
      for (const run of bandRuns(band)) {
        const x0 = m.px(run.c0);
        const x1 = m.px(run.c1);
        if (x1 < plot.x || x0 > plot.x + plot.w) continue;
        const y0 = m.py(run.offset + band.size);
        const y1 = m.py(run.offset);
        ctx.fillRect(x0, y0, Math.max(0.6, x1 - x0), Math.max(0.6, y1 - y0));
        const cx0 = Math.max(x0, plot.x);
        const cx1 = Math.min(x1, plot.x + plot.w);
        if (!best || (cx1 - cx0) * (y1 - y0) > best.w * best.h) best = { x: cx0, y: y0, w: cx1 - cx0, h: y1 - y0 };
      }
      if (best) layout.bands.push({ id: band.id, size: band.size, ...best });
    }
    for (const [id, color, width] of [
      [hovered, t.text, 1.5],
      [pinned, t.accent, 2.5],
    ]) {
      const band = id !== null && id !== undefined ? model.bands.find((b) => b.id === id) : null;
      if (!band) continue;
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      for (const run of bandRuns(band)) {
        const x0 = m.px(run.c0);
        const x1 = m.px(run.c1);
        ctx.strokeRect(x0, m.py(run.offset + band.size), Math.max(1, x1 - x0), m.py(run.offset) - m.py(run.offset + band.size));
      }
    }

    // Reserved line.
    ctx.fillStyle = t.reserved;
    stepLine(ctx, model.n, (c) => m.px(c), (c) => m.py(data.reserved[c]), 1.5, plot.x, plot.x + plot.w);

    // Outside the trace.
    ctx.fillStyle = t.sunken;
    if (xBegin > plot.x) ctx.fillRect(plot.x, plot.y, xBegin - plot.x, plot.h);
    if (xEnd < plot.x + plot.w) ctx.fillRect(xEnd, plot.y, plot.x + plot.w - xEnd, plot.h);
    ctx.restore();

    // Markers along the top.
    const labels = [];
    const vline = (x, color, dash, width = 1) => {
      ctx.save();
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.setLineDash(dash);
      ctx.beginPath();
      ctx.moveTo(Math.round(x) + 0.5, plot.y);
      ctx.lineTo(Math.round(x) + 0.5, plot.y + plot.h);
      ctx.stroke();
      ctx.restore();
    };
    const inside = (x) => x >= plot.x - 0.5 && x <= plot.x + plot.w + 0.5;
    if (completeFrom) {
      const x = m.px(unitOfEvent(model, completeFrom));
      if (inside(x)) {
        vline(x, t.warn, [2, 3]);
        labels.push({ x, text: `complete from event ${count(completeFrom)} ▸`, color: t.warn, align: "left" });
      } else if (x > plot.x + plot.w) {
        labels.push({ x: plot.x + 4, text: "history incomplete here (see the note above)", color: t.warn, align: "left" });
      }
    }
    for (const oom of data.markers?.ooms ?? []) {
      const x = m.px(unitOfEvent(model, oom.event + 0.5));
      if (!inside(x)) continue;
      vline(x, t.oom, [], 2);
      labels.push({ x, text: `OOM ${bytes(oom.requested)}`, color: t.oom, bold: true });
    }
    layout.annotations = [];
    const annotations = data.markers?.annotations ?? [];
    // Dense annotations (a step marker per column) become ticks instead of triangles.
    const dense = annotations.length > plot.w / 12;
    ctx.fillStyle = t.annotation;
    for (const a of annotations) {
      const x = m.px(unitOfEvent(model, a.event));
      if (!inside(x)) continue;
      if (dense) {
        ctx.fillRect(Math.round(x), plot.y, 1, 5);
      } else {
        ctx.beginPath();
        ctx.moveTo(x, plot.y + 7);
        ctx.lineTo(x - 4, plot.y);
        ctx.lineTo(x + 4, plot.y);
        ctx.closePath();
        ctx.fill();
      }
      layout.annotations.push({ x, ...a });
    }
    const peak = data.markers?.peak;
    if (peak && peak.event !== null && peak.event !== undefined) {
      const x = m.px(unitOfEvent(model, peak.event + 1));
      if (inside(x)) {
        vline(x, t.peak, [4, 3]);
        const y = m.py(peak.bytes);
        ctx.fillStyle = t.peak;
        ctx.beginPath();
        ctx.arc(x, y, 3.5, 0, Math.PI * 2);
        ctx.fill();
        labels.push({ x, text: `peak ${bytes(peak.bytes)}`, color: t.peak, bold: true });
        layout.peak = { x, y, event: peak.event };
      }
    }
    if (inside(xEnd) && xEnd < plot.x + plot.w - 1) vline(xEnd, t.muted, []);
    if (inside(xEnd)) {
      vline(xEnd - 1, t.muted, [1, 2]);
      labels.push({ x: xEnd, text: "end of trace", color: t.muted, align: "right" });
    }

    // The selected moment.
    const at = this.ctx.moment();
    if (at !== null && at !== undefined) {
      const x = m.px(unitOfEvent(model, at + 1));
      if (inside(x)) {
        vline(x, t.accent, [], 2);
        layout.moment = { x, at };
        const text = `event ${count(at)}`;
        ctx.font = t.fontBold;
        const w = ctx.measureText(text).width + 10;
        const bx = clamp(x - w / 2, plot.x, plot.x + plot.w - w);
        ctx.fillStyle = t.accent;
        ctx.beginPath();
        ctx.roundRect(bx, plot.y + plot.h - 18, w, 16, 3);
        ctx.fill();
        ctx.fillStyle = t.bg;
        ctx.textAlign = "left";
        ctx.fillText(text, bx + 5, plot.y + plot.h - 10);
      }
    }

    // Marker labels, nudged apart.
    labels.sort((a, b) => a.x - b.x);
    let lastRight = -Infinity;
    ctx.textBaseline = "alphabetic";
    for (const label of labels) {
      ctx.font = label.bold ? t.fontBold : t.font;
      const w = ctx.measureText(label.text).width;
      let x = label.align === "right" ? label.x - w - 3 : label.align === "left" ? label.x + 3 : label.x - w / 2;
      x = clamp(x, plot.x, plot.x + plot.w - w);
      const row = x < lastRight + 6 ? 1 : 0;
      ctx.fillStyle = label.color;
      ctx.textAlign = "left";
      ctx.fillText(label.text, x, row ? plot.y - 4 : plot.y - 18);
      if (!row) lastRight = x + w;
    }

    // X axis.
    ctx.strokeStyle = t.lineStrong;
    ctx.beginPath();
    ctx.moveTo(plot.x, plot.y + plot.h + 0.5);
    ctx.lineTo(plot.x + plot.w, plot.y + plot.h + 0.5);
    ctx.stroke();
    ctx.font = t.font;
    ctx.fillStyle = t.muted;
    ctx.textBaseline = "top";
    ctx.textAlign = "center";
    const tickCount = Math.max(2, Math.floor(plot.w / 110));
    let xTicks;
    if (s.axis === "time" && data.time_us) {
      const ts = data.time_us;
      const span = Math.max(1, ts.end - ts.start);
      const timeOf = (u) => ts.start + (span * u) / Math.max(1, model.n);
      xTicks = timeTicks(timeOf(m.u0), timeOf(m.u1), ts.first, tickCount).map((tk) => ({ x: m.px(((tk.value - ts.start) / span) * model.n), label: tk.label }));
    } else {
      const e0 = Math.max(0, eventOfUnit(model, m.u0));
      const e1 = Math.min(model.events, eventOfUnit(model, m.u1));
      xTicks = eventTicks(e0, e1, tickCount).map((tk) => ({ x: m.px(unitOfEvent(model, tk.value)), label: tk.label }));
    }
    for (const tk of xTicks) {
      if (!inside(tk.x)) continue;
      ctx.beginPath();
      ctx.moveTo(Math.round(tk.x) + 0.5, plot.y + plot.h);
      ctx.lineTo(Math.round(tk.x) + 0.5, plot.y + plot.h + 4);
      ctx.stroke();
      ctx.fillText(tk.label, clamp(tk.x, plot.x + 12, plot.x + plot.w - 12), plot.y + plot.h + 7);
    }
    ctx.textAlign = "right";
    ctx.fillStyle = t.faint;
    ctx.fillText(s.axis === "time" && data.time_us ? "time since the first event →" : "event →", plot.x + plot.w, plot.y + plot.h + 18);
    ctx.textAlign = "left";
    ctx.fillText("live bytes", 4, 4);

    // Hover crosshair.
    if (this.hover && inside(this.hover.x)) {
      ctx.strokeStyle = t.faint;
      ctx.setLineDash([2, 2]);
      ctx.beginPath();
      ctx.moveTo(Math.round(this.hover.x) + 0.5, plot.y);
      ctx.lineTo(Math.round(this.hover.x) + 0.5, plot.y + plot.h);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    this.layout = layout;
    this.setStatus(this.loading ? "Loading…" : "");
  }

  paintMinimap() {
    if (!this.visible()) return;
    const plot = this.plot();
    const width = plot.width;
    const ctx = fitCanvas(this.minimap, width, MINIMAP_HEIGHT);
    const t = theme();
    ctx.fillStyle = t.sunken;
    ctx.fillRect(0, 0, width, MINIMAP_HEIGHT);
    const model = this.overview;
    if (!model || model.n === 0) return;
    const data = model.data;
    const x = (u) => plot.x + (u / model.n) * plot.w;
    const yTop = Math.max(1, data.y_max);
    const y = (b) => MINIMAP_HEIGHT - 3 - (b / yTop) * (MINIMAP_HEIGHT - 8);
    ctx.fillStyle = t.small;
    for (let c = 0; c < model.n; c += 1) {
      const top = y(data.allocated_max[c]);
      ctx.fillRect(x(c), top, x(c + 1) - x(c), y(0) - top);
    }
    ctx.fillStyle = t.reserved;
    stepLine(ctx, model.n, x, (c) => y(data.reserved[c]), 1, plot.x, plot.x + plot.w);
    if (data.complete_from) {
      ctx.fillStyle = t.incomplete;
      ctx.fillRect(plot.x, 0, x(unitOfEvent(model, data.complete_from)) - plot.x, MINIMAP_HEIGHT);
    }
    // The brush.
    const { start, end } = this.window();
    const b0 = x(unitOfEvent(model, start));
    const b1 = Math.max(b0 + 2, x(unitOfEvent(model, end + 1)));
    ctx.fillStyle = t.dark ? "rgba(0,0,0,0.45)" : "rgba(255,255,255,0.6)";
    ctx.fillRect(plot.x, 0, b0 - plot.x, MINIMAP_HEIGHT);
    ctx.fillRect(b1, 0, plot.x + plot.w - b1, MINIMAP_HEIGHT);
    ctx.strokeStyle = t.accent;
    ctx.lineWidth = 1.5;
    ctx.strokeRect(b0, 1, b1 - b0, MINIMAP_HEIGHT - 2);
    const at = this.ctx.moment();
    if (at !== null) {
      ctx.fillStyle = t.accent;
      ctx.fillRect(x(unitOfEvent(model, at + 1)) - 0.5, 0, 1.5, MINIMAP_HEIGHT);
    }
    ctx.fillStyle = t.muted;
    ctx.font = t.font;
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    ctx.fillText("all", plot.x - 8, MINIMAP_HEIGHT / 2);
    this.minimapLayout = { x0: plot.x, w: plot.w, brush: [b0, b1] };
  }

  // -------------------------------------------------------------------------------------------
  // Interaction

  bind() {
    const canvas = this.canvas;
    canvas.addEventListener("wheel", (event) => this.onWheel(event), { passive: false });
    canvas.addEventListener("pointerdown", (event) => this.onDown(event));
    canvas.addEventListener("pointermove", (event) => this.onMove(event));
    canvas.addEventListener("pointerup", (event) => this.onUp(event));
    canvas.addEventListener("pointercancel", () => (this.drag = null));
    canvas.addEventListener("pointerleave", () => {
      if (this.drag) return;
      this.hover = null;
      hideTip();
      this.draw();
    });
    canvas.addEventListener("dblclick", () => this.reset());
    this.minimap.addEventListener("pointerdown", (event) => this.onMiniDown(event));
    this.minimap.addEventListener("pointermove", (event) => this.onMiniMove(event));
    this.minimap.addEventListener("pointerup", () => (this.miniDrag = null));
    this.minimap.addEventListener("dblclick", () => this.reset());
    for (const b of this.panel.querySelectorAll("[data-axis]")) {
      b.addEventListener("click", () => this.ctx.store.set({ axis: b.dataset.axis }));
    }
    for (const b of this.panel.querySelectorAll("[data-zoom]")) {
      b.addEventListener("click", () => {
        if (b.dataset.zoom === "reset") this.reset();
        else this.zoomBy(b.dataset.zoom === "in" ? 0.5 : 2);
      });
    }
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

  local(event) {
    const box = this.canvas.getBoundingClientRect();
    return { x: event.clientX - box.left, y: event.clientY - box.top };
  }

  onWheel(event) {
    if (!this.model) return;
    event.preventDefault();
    const m = this.mapping();
    const { x } = this.local(event);
    const scale = event.deltaMode === 1 ? 30 : event.deltaMode === 2 ? 300 : 1;
    if (Math.abs(event.deltaX) > Math.abs(event.deltaY) && !event.ctrlKey) {
      const du = ((event.deltaX * scale) / m.plot.w) * (m.u1 - m.u0);
      this.setWindow(panWindow(this.model, m.u0, m.u1, du));
      return;
    }
    const factor = Math.exp(event.deltaY * scale * (event.ctrlKey ? 0.01 : 0.0015));
    const u = m.unit(clamp(x, m.plot.x, m.plot.x + m.plot.w));
    this.setWindow(zoomWindow(this.model, m.u0, m.u1, u, clamp(factor, 0.2, 5)));
  }

  onDown(event) {
    if (!this.model || event.button !== 0) return;
    const m = this.mapping();
    this.canvas.setPointerCapture(event.pointerId);
    this.drag = { x: this.local(event).x, u0: m.u0, u1: m.u1, moved: false };
  }

  onMove(event) {
    if (!this.model) return;
    const { x, y } = this.local(event);
    if (this.drag) {
      const dx = x - this.drag.x;
      if (Math.abs(dx) > 3) this.drag.moved = true;
      if (this.drag.moved) {
        this.canvas.classList.add("panning");
        hideTip();
        const m = this.mapping();
        const du = (-dx / m.plot.w) * (this.drag.u1 - this.drag.u0);
        this.setWindow(panWindow(this.model, this.drag.u0, this.drag.u1, du));
        return;
      }
    }
    this.hoverAt(x, y, event.clientX, event.clientY);
  }

  onUp(event) {
    const drag = this.drag;
    this.drag = null;
    this.canvas.classList.remove("panning");
    if (!drag || drag.moved || !this.model) return;
    const { x, y } = this.local(event);
    const m = this.mapping();
    if (x < m.plot.x || x > m.plot.x + m.plot.w) return;
    const u = m.unit(x);
    const event_ = Math.round(eventOfUnit(this.model, u)) - 1;
    const band = y >= m.plot.y && y <= m.plot.y + m.plot.h ? bandAt(this.model, u, m.bytesAt(y)) : null;
    const patch = {};
    if (band) patch.alloc = band.id;
    this.ctx.store.set(patch);
    this.ctx.setMoment(clamp(event_, -1, this.model.events - 1));
  }

  hoverAt(x, y, clientX, clientY) {
    const m = this.mapping();
    const model = this.model;
    if (x < m.plot.x || x > m.plot.x + m.plot.w || y < m.plot.y - 8 || y > m.plot.y + m.plot.h) {
      this.hover = null;
      hideTip();
      this.draw();
      return;
    }
    const u = m.unit(x);
    const c = Math.floor(u);
    const band = bandAt(model, u, m.bytesAt(y));
    this.hover = { x, y, band };
    this.draw();
    const annotation = (this.layout?.annotations ?? []).find((a) => Math.abs(a.x - x) < 5 && y < m.plot.y + 10);
    if (annotation) {
      showTip(clientX, clientY, h("div", { className: "tip-title" }, `${annotation.name ?? "annotation"}`), tipRow("stage", annotation.stage ?? ""), tipRow("event", count(annotation.event)));
      return;
    }
    if (band) {
      this.bandTip(band, clientX, clientY);
      return;
    }
    if (c < 0 || c >= model.n) {
      hideTip();
      return;
    }
    const data = model.data;
    const e0 = model.cs[c];
    const e1 = model.cs[c + 1] - 1;
    showTip(
      clientX,
      clientY,
      h("div", { className: "tip-title" }, e1 > e0 ? `events ${count(e0)}–${count(e1)}` : `event ${count(e0)}`),
      tipRow("allocated", data.allocated_min[c] !== data.allocated_max[c] ? `${bytes(data.allocated_min[c])} – ${bytes(data.allocated_max[c])}` : bytes(data.allocated_max[c])),
      tipRow("reserved", bytes(data.reserved[c])),
      tipRow("in bands", bytes(data.big_top[c])),
      h("div", { className: "tip-note" }, `Allocations under ${bytes(data.threshold)} are drawn together (grey). Zoom in to see each.`),
    );
  }

  bandTip(band, clientX, clientY) {
    const device = this.device() ?? this.model.data.device;
    const lifetime = `${band.start === null ? "before the trace" : `event ${count(band.start)}`} → ${band.end === null ? "still alive" : `event ${count(band.end)}`}`;
    const render = (info) => {
      const frames = info ? visibleFrames(info.frames).slice(0, 6) : [];
      showTip(
        clientX,
        clientY,
        h("div", { className: "tip-title" }, `${bytes(band.size)}`, h("span", { className: "tip-id" }, info ? ` ${info.block_id}` : ` allocation ${band.id}`)),
        tipRow("lifetime", lifetime),
        info && info.start_time_us !== null && info.end_time_us !== null ? tipRow("duration", duration(info.end_time_us - info.start_time_us)) : null,
        info ? tipRow("stream", String(info.stream)) : null,
        info ? tipRow("address", hex(info.addr)) : null,
        info
          ? frames.length
            ? h("ol", { className: "tip-frames" }, frames.map((f) => h("li", {}, h("span", { className: "frame-name" }, frameParts(f).name), " ", h("span", { className: "frame-where" }, frameParts(f).where))))
            : h("div", { className: "tip-note" }, "No Python frames recorded for this allocation.")
          : h("div", { className: "tip-note" }, "Loading its stack…"),
        h("div", { className: "tip-note" }, "Click to pin its full stack."),
      );
    };
    render(null);
    allocation(this.ctx.id, device, band.id)
      .then((info) => {
        if (this.hover?.band?.id === band.id) render(info);
      })
      .catch(() => {});
  }

  onMiniDown(event) {
    if (!this.overview || !this.minimapLayout) return;
    this.minimap.setPointerCapture(event.pointerId);
    const box = this.minimap.getBoundingClientRect();
    const x = event.clientX - box.left;
    const [b0, b1] = this.minimapLayout.brush;
    if (x >= b0 - 3 && x <= b1 + 3 && b1 - b0 < this.minimapLayout.w - 4) this.miniDrag = { mode: "move", x, b0, b1 };
    else this.miniDrag = { mode: "brush", x, b0: x, b1: x, moved: false };
  }

  onMiniMove(event) {
    const drag = this.miniDrag;
    if (!drag || !this.overview) return;
    const box = this.minimap.getBoundingClientRect();
    const x = event.clientX - box.left;
    const { x0, w } = this.minimapLayout;
    const n = this.overview.n;
    const unit = (px) => clamp(((px - x0) / w) * n, 0, n);
    if (drag.mode === "move") {
      const dx = x - drag.x;
      const width = drag.b1 - drag.b0;
      const left = clamp(drag.b0 + dx, x0, x0 + w - width);
      this.setWindow(windowOf(this.overview, unit(left), unit(left + width)));
    } else {
      if (Math.abs(x - drag.x) < 3) return;
      const a = Math.min(x, drag.x);
      const b = Math.max(x, drag.x);
      this.setWindow(windowOf(this.overview, unit(a), unit(b)));
    }
  }

  // -------------------------------------------------------------------------------------------
  // The pinned allocation

  async renderSide() {
    const s = this.state();
    const side = this.side;
    if (s.alloc === null) {
      side.replaceChildren(
        h("h3", {}, "Allocation"),
        h("p", { className: "muted small" }, "Hover a band to see what it is; click one to pin its whole stack here. Grey is allocations too small to draw one by one at this zoom."),
      );
      return;
    }
    const id = s.alloc;
    side.replaceChildren(h("h3", {}, "Allocation"), h("p", { className: "muted small" }, "Loading…"));
    let info;
    try {
      info = await allocation(this.ctx.id, this.device() ?? 0, id);
    } catch (error) {
      if (this.state().alloc === id) side.replaceChildren(h("h3", {}, "Allocation"), h("p", { className: "view-error" }, `Allocation ${id} could not load. ${error.message}`));
      return;
    }
    if (this.state().alloc !== id) return;
    const frames = info.frames;
    const hidden = frames.filter((f) => f.hidden).length;
    const shown = visibleFrames(frames, this.showAllFrames);
    const go = (label, at, title) => (at === null ? null : h("button", { type: "button", className: "button button-small", title, onclick: () => this.ctx.setMoment(at) }, label));
    side.replaceChildren(
      h("div", { className: "side-head" }, h("h3", {}, bytes(info.size)), h("button", { type: "button", className: "close-button", title: "Unpin (Esc)", "aria-label": "Unpin", onclick: () => this.ctx.store.set({ alloc: null }) }, "×")),
      h("p", { className: "side-id" }, h("code", {}, info.block_id)),
      h(
        "dl",
        { className: "side-facts" },
        h("dt", {}, "Size"),
        h("dd", {}, `${bytes(info.size)} (${count(info.size)} B)`),
        h("dt", {}, "Allocated"),
        h("dd", {}, info.start === null ? "before the trace began" : `event ${count(info.start)}`),
        h("dt", {}, "Freed"),
        h("dd", {}, info.end === null ? "never (alive at the snapshot)" : `event ${count(info.end)}`),
        info.start_time_us !== null && info.end_time_us !== null ? [h("dt", {}, "Lived"), h("dd", {}, `${duration(info.end_time_us - info.start_time_us)} · ${count(info.end - info.start)} events`)] : null,
        h("dt", {}, "Stream"),
        h("dd", {}, String(info.stream)),
        h("dt", {}, "Address"),
        h("dd", {}, h("code", {}, hex(info.addr))),
        info.origin !== "traced" ? [h("dt", {}, "Origin"), h("dd", {}, info.origin === "freed_without_alloc" ? "freed without a recorded alloc (the trace starts later)" : info.origin)] : null,
      ),
      h("div", { className: "side-actions" }, go("Go to alloc", info.start, "Move the moment to its allocation"), go("Go to free", info.end, "Move the moment to its free")),
      h(
        "div",
        { className: "side-frames-head" },
        h("h4", {}, "Stack"),
        hidden
          ? h(
              "label",
              { className: "small", title: "PyTorch's viewer hides frames of its own machinery; show them too" },
              h("input", {
                type: "checkbox",
                checked: this.showAllFrames,
                onchange: (e) => {
                  this.showAllFrames = e.target.checked;
                  this.renderSide();
                },
              }),
              ` all frames (${hidden} hidden)`,
            )
          : null,
      ),
      shown.length
        ? h(
            "ol",
            { className: "side-frames", "aria-label": "Stack, innermost call first" },
            shown.map((f) => h("li", { className: f.hidden ? "frame-hidden" : "", title: `${f.filename}:${f.line}` }, h("span", { className: "frame-name" }, f.name), h("span", { className: "frame-where" }, frameParts(f).where))),
          )
        : h("p", { className: "muted small" }, "No Python frames were recorded for this allocation (recorded with stacks disabled, or made by C++ code)."),
    );
  }

  renderLegend() {
    const item = (cls, text, title) => h("li", { title }, h("span", { className: `swatch ${cls}` }), text);
    this.legend.replaceChildren(
      item("sw-bands", "allocations (one colour each)", "Each band is one allocation, stacked in allocation order: new ones on top; when one is freed, those above slide down."),
      item("sw-small", "smaller allocations", "Allocations too small to draw alone at this zoom, summed per column: darker up to the column's lowest total, lighter up to its highest (spikes)."),
      item("sw-reserved", "reserved", "Bytes the caching allocator holds from CUDA (segments)."),
      item("sw-peak", "peak", "The most live bytes at once."),
      item("sw-moment", "selected moment", "Every view shows memory right after this event."),
      item("sw-oom", "out of memory", "An allocation that failed."),
      item("sw-annotation", "annotation", "external_annotations (e.g. optimizer steps); hover one."),
      ...(this.ctx.incomplete ? [item("sw-incomplete", "history incomplete", this.ctx.incomplete)] : []),
    );
  }
}

/**
 * A step line of `n` columns (column c spans x(c)…x(c + 1) at height y(c)) drawn with fillRect
 * only, merging equal steps: paths with thousands of vertices are slow to stroke in software.
 */
function stepLine(ctx, n, x, y, width, left, right) {
  const half = width / 2;
  let c = 0;
  while (c < n) {
    const level = y(c);
    let k = c + 1;
    while (k < n && Math.abs(y(k) - level) < 0.25) k += 1;
    const x0 = Math.max(left, x(c));
    const x1 = Math.min(right, x(k));
    if (x1 >= x0) ctx.fillRect(x0, level - half, Math.max(width, x1 - x0), width);
    if (k < n) {
      const next = y(k);
      const xk = x(k);
      if (xk >= left && xk <= right) ctx.fillRect(xk - half, Math.min(level, next) - half, width, Math.abs(next - level) + width);
    }
    c = k;
  }
}

/** Column units [a, b] of the overview as an event window. */
function windowOf(model, a, b) {
  const start = Math.max(0, Math.floor(eventOfUnit(model, a)));
  const end = Math.min(model.events - 1, Math.max(start + 15, Math.ceil(eventOfUnit(model, b)) - 1));
  return { start, end };
}
