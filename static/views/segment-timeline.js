// @ts-check
// The Active Cached Segment Timeline: reserved memory over time, one band per reserved range
// (a cudaMalloc'd segment, or a mapped range of an expandable segment), stacked by address.
// It shares the allocation timeline's window (`start`/`end`/`axis` in the URL) and its model
// (static/lib/timeline-model.js), so zooming either zooms both; a click moves the moment.

import { clamp } from "../lib/scale.js";
import { bandAt, bandRuns, eventOfUnit, panWindow, prepare, unitOfEvent, zoomWindow } from "../lib/timeline-model.js";
import { bytes, count, hex } from "../lib/units.js";
import { fitCanvas, paintPlaceholder } from "./canvas.js";
import { CanvasView } from "./canvas-view.js";
import { h } from "./dom.js";
import { newestOnly } from "./newest-only.js";
import { onThemeChange, theme } from "./theme.js";
import { hideTip, showTip, tipRow } from "./tooltip.js";

const HEIGHT = 180;
const AXIS = 16;

/** A band's fill: its stream picks the hue, neighbours alternate lightness so they part. */
export function segmentColor(stream, band, dark) {
  const hue = (210 + stream * 137) % 360;
  const light = dark ? 38 + (band % 3) * 7 : 62 + (band % 3) * 7;
  return `hsl(${hue} 55% ${light}%)`;
}

export class SegmentTimelineView extends CanvasView {
  /**
   * @param {import("./app.js").App} app
   * @param {HTMLElement} panel
   */
  constructor(app, panel) {
    super(app, panel, "segtl");
    this.status = /** @type {HTMLElement} */ (panel.querySelector("#segtl-status"));
    this.fetch = newestOnly({ staleMark: this.status, errorBox: this.error, what: "The segment timeline" });
    this.model = null;
    this.key = "";
    /** The bands as last drawn, and what they were drawn for (see `paint`).
     * @type {{ data: any, key: string, image: HTMLCanvasElement } | null} */
    this.bandsImage = null;
    this.canvas.addEventListener("wheel", (event) => this.onWheel(event), { passive: false });
    this.canvas.addEventListener("click", (event) => {
      const at = this.eventAt(event);
      if (at !== null) app.setMoment(at);
    });
    this.canvas.addEventListener("dblclick", () => app.store.set({ start: null, end: null }));
    new ResizeObserver(() => this.visible() && this.load()).observe(this.chart);
    onThemeChange(() => this.draw());
  }

  width() {
    return Math.max(200, Math.floor(this.chart.clientWidth));
  }

  async load() {
    const s = this.app.store.get();
    const params = new URLSearchParams({ device: String(this.app.device()), width: String(this.width()) });
    if (s.start !== null) params.set("start", s.start);
    if (s.end !== null) params.set("end", s.end);
    if (s.axis === "time") params.set("axis", "time");
    const key = params.toString();
    if (key === this.key) return this.draw();
    await this.fetch(`/api/snapshots/${this.app.id}/segment-timeline?${key}`, (data) => {
      this.key = key;
      this.model = prepare(data);
      this.data = data;
      const bands = data.bands.id.length;
      const peak = Math.max(0, ...data.reserved);
      this.status.textContent = `${count(bands)} reserved ${data.bands.expandable.some(Boolean) ? "ranges" : bands === 1 ? "segment" : "segments"} in events ${count(data.start)}–${count(data.end)}, at most ${bytes(peak)} reserved`;
      // Next frame: painting now would force a layout of the page just changed (a long task).
      this.draw();
    });
  }

  /** Column units ↔ CSS px: the answer covers the window exactly. */
  mapping() {
    const width = this.width();
    const n = Math.max(1, this.model?.n ?? 1);
    const yMax = Math.max(1, ...(this.data?.reserved ?? [1]));
    const plotH = HEIGHT - AXIS;
    return {
      width,
      n,
      x: (u) => (u / n) * width,
      unit: (x) => (x / width) * n,
      y: (b) => plotH - (b / yMax) * (plotH - 4),
      bytesAt: (y) => ((plotH - y) / (plotH - 4)) * yMax,
      plotH,
    };
  }

  paint() {
    if (!this.visible()) return;
    const width = this.width();
    if (!this.model) {
      paintPlaceholder(this.canvas, width, HEIGHT, "Loading the segment timeline…");
      return;
    }
    const t = theme();
    const ctx = fitCanvas(this.canvas, width, HEIGHT);
    const m = this.mapping();
    // The bands change with the answer, the width, the hovered band and the scheme; stepping
    // the moment only moves its line. So the bands are drawn once into a canvas of their own
    // and copied: on the huge trace redrawing them on every step was most of a step's work.
    const dpr = window.devicePixelRatio || 1;
    const key = `${width}:${dpr}:${t.dark}:${this.hover?.index ?? ""}`;
    if (this.bandsImage?.data !== this.data || this.bandsImage.key !== key) {
      // One canvas, drawn again: a hover changes the key at every band the pointer crosses.
      const image = this.bandsImage?.image ?? document.createElement("canvas");
      this.paintBands(fitCanvas(image, width, HEIGHT), m, t);
      this.bandsImage = { data: this.data, key, image };
    }
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(this.bandsImage.image, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const data = this.data;
    // The moment.
    const at = this.app.moment();
    if (at !== null && at >= data.start && at <= data.end) {
      const x = m.x(unitOfEvent(this.model, at + 0.5));
      ctx.strokeStyle = t.accent;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(x, 0);
      ctx.lineTo(x, m.plotH);
      ctx.stroke();
    }
    this.layout = { width, height: HEIGHT, bands: this.model.bands.length, columns: this.model.n };
  }

  /**
   * Everything but the moment: the background, the bands, the ranges past them, the reserved
   * outline and the window's first and last event.
   * @param {CanvasRenderingContext2D} ctx
   * @param {ReturnType<SegmentTimelineView["mapping"]>} m
   * @param {import("./theme.js").Theme} t
   */
  paintBands(ctx, m, t) {
    const width = m.width;
    ctx.fillStyle = t.bg;
    ctx.fillRect(0, 0, width, HEIGHT);
    const data = this.data;
    for (const band of this.model.bands) {
      const stream = data.bands.stream[band.index];
      const hovered = this.hover?.index === band.index;
      ctx.fillStyle = hovered ? t.accent : segmentColor(stream, band.index, t.dark);
      for (const run of bandRuns(band)) {
        const x0 = m.x(run.c0);
        const x1 = m.x(run.c1);
        const top = m.y(run.offset + band.size);
        const bottom = m.y(run.offset);
        ctx.fillRect(x0, top, Math.max(1, x1 - x0), Math.max(1, bottom - top - (bottom - top > 3 ? 1 : 0)));
      }
    }
    // Ranges past the bands sent, summed on top.
    ctx.fillStyle = t.small;
    for (let c = 0; c < data.other.length; c += 1) {
      if (!data.other[c]) continue;
      const top = m.y(data.reserved[c]);
      ctx.fillRect(m.x(c), top, Math.max(1, m.x(c + 1) - m.x(c)), m.y(data.reserved[c] - data.other[c]) - top);
    }
    // The reserved outline, the allocation timeline's curve.
    ctx.strokeStyle = t.reserved;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (let c = 0; c < data.reserved.length; c += 1) {
      const y = m.y(data.reserved[c]);
      if (c === 0) ctx.moveTo(m.x(c), y);
      else ctx.lineTo(m.x(c), y);
      ctx.lineTo(m.x(c + 1), y);
    }
    ctx.stroke();
    ctx.fillStyle = t.muted;
    ctx.font = t.font;
    ctx.textBaseline = "top";
    ctx.fillText(`event ${count(data.start)}`, 2, m.plotH + 3);
    const endLabel = `event ${count(data.end)}`;
    ctx.fillText(endLabel, width - ctx.measureText(endLabel).width - 2, m.plotH + 3);
  }

  local(event) {
    const box = this.canvas.getBoundingClientRect();
    return { x: event.clientX - box.left, y: event.clientY - box.top };
  }

  eventAt(event) {
    if (!this.model) return null;
    const { x } = this.local(event);
    return Math.floor(eventOfUnit(this.model, this.mapping().unit(x)));
  }

  onWheel(event) {
    if (!this.model) return;
    event.preventDefault();
    const m = this.mapping();
    const { x } = this.local(event);
    const scale = event.deltaMode === 1 ? 30 : event.deltaMode === 2 ? 300 : 1;
    let window;
    if (Math.abs(event.deltaX) > Math.abs(event.deltaY) && !event.ctrlKey) {
      window = panWindow(this.model, 0, m.n, (event.deltaX * scale * m.n) / m.width);
    } else {
      const factor = clamp(Math.exp(event.deltaY * scale * (event.ctrlKey ? 0.01 : 0.0015)), 0.2, 5);
      window = zoomWindow(this.model, 0, m.n, clamp(m.unit(x), 0, m.n), factor);
    }
    const last = this.model.events - 1;
    if (window.start <= 0 && window.end >= last) this.app.store.set({ start: null, end: null });
    else this.app.store.set(window);
  }

  onMove(event) {
    if (!this.model) return;
    const m = this.mapping();
    const { x, y } = this.local(event);
    const band = bandAt(this.model, m.unit(x), m.bytesAt(y));
    if (band?.index !== this.hover?.index) {
      this.hover = band;
      this.draw();
    }
    if (!band) {
      hideTip();
      return;
    }
    const b = this.data.bands;
    const i = band.index;
    const pool = b.pool[i];
    const stack = this.data.stacks[b.stack[i]] ?? [];
    showTip(
      event.clientX,
      event.clientY,
      h("div", { className: "tip-title" }, `${b.expandable[i] ? "mapped range" : "segment"} ${hex(b.address[i])} · ${bytes(b.size[i])}`),
      tipRow("stream", `stream ${b.stream[i]}${b.stream[i] === 0 ? " (default)" : ""}`),
      tipRow("pool", pool[0] || pool[1] ? `private pool (${pool.join(", ")})` : "default pool"),
      tipRow(
        "reserved",
        `${b.made_at[i] === null ? "from the start" : `event ${count(b.made_at[i])}`} → ${b.freed_at[i] === null ? "the end" : `event ${count(b.freed_at[i])}`}`,
      ),
      b.expandable[i] ? h("div", { className: "tip-note" }, "Part of an expandable segment: grown by segment_map, shrunk by segment_unmap.") : null,
      stack.length
        ? h("div", { className: "tip-note" }, b.expandable[i] ? "Mapped at:" : "cudaMalloc called from:")
        : h("div", { className: "tip-note" }, "No stack recorded for its cudaMalloc."),
      stack.length
        ? h(
            "ol",
            { className: "tip-frames" },
            stack.slice(0, 8).map((f) => h("li", {}, f)),
          )
        : null,
    );
  }

  show() {
    this.load();
  }

  update(_state, changed) {
    if (!this.visible()) return;
    if (["start", "end", "axis", "device"].some((k) => changed.has(k))) this.load();
    else if (changed.has("at")) this.draw();
  }
}
