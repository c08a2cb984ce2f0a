// @ts-check
// The timeline's painter: one pass over the canvas in named steps, back to front. Each step
// reads a `scene` (the 2D context, the theme, the mapping from column units and bytes to CSS px,
// the answer being drawn) and leaves the context's font and styles as the next step expects,
// so the order of the steps in paintTimeline is part of the drawing.

import { bandColor, roleColor } from "../../lib/color.js";
import { byteRangeTicks, clamp, eventTicks, timeTicks } from "../../lib/scale.js";
import { bandRuns, clusterAnnotations, eventOfUnit, greyByRole, unitOfEvent } from "../../lib/timeline-model.js";
import { bytes, count } from "../../lib/units.js";
import { fitCanvas } from "../canvas.js";
import { theme } from "../theme.js";

/** The chart's height in CSS px and the margins around the plot (the axes' labels live there). */
export const HEIGHT = 400;
export const MARGIN = { left: 66, right: 16, top: 34, bottom: 30 };

/**
 * Paints the view's answer through its current window and records what was drawn where in
 * `view.layout` (bands, markers, the moment), which hover and the tests read.
 */
export function paintTimeline(view) {
  if (!view.visible()) return;
  const plot = view.plot();
  const ctx = fitCanvas(view.canvas, plot.width, HEIGHT);
  const t = theme();
  ctx.fillStyle = t.bg;
  ctx.fillRect(0, 0, plot.width, HEIGHT);
  if (!view.model) {
    ctx.fillStyle = t.muted;
    ctx.font = t.font;
    ctx.fillText("Loading the timeline…", plot.x + 8, plot.y + 20);
    return;
  }
  const m = view.mapping();
  const model = view.model;
  const data = model.data;
  const s = view.state();
  const byRole = s.color === "role";
  const scene = { ctx, t, m, plot, model, data, byRole, greyRoles: byRole ? greyRolesOf(view) : null };
  const layout = {
    plot,
    u0: m.u0,
    u1: m.u1,
    yTop: m.yTop,
    yRange: [m.yLow, m.yHigh],
    window: view.window(),
    request: { start: data.start, end: data.end },
    bands: [],
    moment: null,
    peak: null,
  };

  layout.yTicks = paintGrid(scene);

  // Everything inside the plot is clipped to it.
  ctx.save();
  ctx.beginPath();
  ctx.rect(plot.x, plot.y - 2, plot.w, plot.h + 2);
  ctx.clip();
  paintIncompleteHistory(scene);
  paintSmallAllocations(scene);
  layout.bands = paintBands(scene);
  outlineBands(scene, [
    [view.hover?.band?.id, t.text, 1.5],
    [s.alloc, t.accent, 2.5],
  ]);
  ctx.fillStyle = t.reserved;
  stepLine(
    ctx,
    model.n,
    (c) => m.px(c),
    (c) => m.py(data.reserved[c]),
    1.5,
    plot.x,
    plot.x + plot.w,
  );
  paintOutsideTrace(scene);
  ctx.restore();

  // Markers along the top; their labels are placed together at the end.
  const labels = [];
  markCompleteFrom(scene, labels);
  markOoms(scene, labels);
  layout.annotations = markAnnotations(scene);
  layout.peak = markPeak(scene, labels);
  markEndOfTrace(scene, labels);
  layout.moment = markMoment(scene, view.app.moment());
  layout.labels = placeLabels(scene, labels);

  layout.xTicks = paintXAxis(scene, s.axis === "time" && data.time_us);
  paintCrosshair(scene, view.hover);
  paintZoomBox(scene, view.zoomBox);
  view.layout = layout;
  view.setStatus(view.loading ? "Loading…" : "");
}

/** Whether CSS px `x` falls on the plot (half a pixel of slack each side). */
function inside({ plot }, x) {
  return x >= plot.x - 0.5 && x <= plot.x + plot.w + 0.5;
}

/** A vertical line the plot's height at `x`, snapped to the pixel grid. */
function vline({ ctx, plot }, x, color, dash, width = 1) {
  ctx.save();
  ctx.strokeStyle = color;
  ctx.lineWidth = width;
  ctx.setLineDash(dash);
  ctx.beginPath();
  ctx.moveTo(Math.round(x) + 0.5, plot.y);
  ctx.lineTo(Math.round(x) + 0.5, plot.y + plot.h);
  ctx.stroke();
  ctx.restore();
}

/** Horizontal grid lines and the byte labels of the y axis. */
function paintGrid({ ctx, t, m, plot }) {
  ctx.font = t.font;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  const ticks = byteRangeTicks(m.yLow, m.yHigh, Math.max(2, Math.min(5, Math.floor(plot.h / 60))));
  for (const tick of ticks) {
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
  return ticks.map((tick) => tick.label);
}

/** Shades the part of the trace whose history is incomplete (before `complete_from`). */
function paintIncompleteHistory({ ctx, t, m, plot, model, data }) {
  const completeFrom = data.complete_from;
  if (!completeFrom) return;
  const x1 = m.px(unitOfEvent(model, completeFrom));
  if (x1 > plot.x) {
    ctx.fillStyle = t.incomplete;
    ctx.fillRect(plot.x, plot.y, Math.min(plot.w, x1 - plot.x), plot.h);
  }
}

/**
 * Small allocations: between the top of the bands and the column's maximum. Up to the column's
 * lowest total they are there the whole column (solid); from there to its highest only for part
 * of it (lighter), so a column spanning whole training steps shows the steps' low and high. The
 * lowest and highest totals are outlined, so the pattern of steps reads at the whole trace.
 * By role, the grey part is split by role (each role's share of the column's small bytes).
 * (fillRect per column, not one path: a many-rect path is slow to rasterize in software.)
 */
function paintSmallAllocations({ ctx, t, m, plot, model, data, byRole, greyRoles }) {
  const visible = (c) => {
    const x0 = m.px(c);
    const x1 = m.px(c + 1);
    return x1 >= plot.x && x0 <= plot.x + plot.w ? [x0, Math.max(0.6, x1 - x0)] : null;
  };
  for (let c = 0; c < model.n; c += 1) {
    const span = visible(c);
    if (!span) continue;
    const [x0, w] = span;
    const low = m.py(Math.max(data.allocated_min[c], data.big_top[c]));
    const bottom = m.py(data.big_top[c]);
    const parts = greyRoles?.[c];
    if (byRole && parts?.length) {
      // Stacked by role from the top of the bands, in the roles' order (bottom first).
      let below = data.big_top[c];
      for (const [role, bytes] of parts) {
        const y1 = m.py(below);
        const y0 = m.py(below + bytes);
        ctx.fillStyle = roleColor(role, t.dark);
        ctx.globalAlpha = below + bytes > Math.max(data.allocated_min[c], data.big_top[c]) ? 0.45 : 0.8;
        if (y1 - y0 > 0.05) ctx.fillRect(x0, y0, w, y1 - y0);
        below += bytes;
      }
      ctx.globalAlpha = 1;
      continue;
    }
    ctx.fillStyle = t.small;
    if (bottom - low > 0.05) ctx.fillRect(x0, low, w, bottom - low);
  }
  // The lighter part in a pass of its own: it never overlaps the solid part, and switching the
  // fill twice a column for thousands of columns cost more than the rectangles.
  ctx.fillStyle = t.smallRange;
  for (let c = 0; c < model.n; c += 1) {
    if (byRole && greyRoles?.[c]?.length) continue;
    const span = visible(c);
    if (!span) continue;
    const top = m.py(data.allocated_max[c]);
    const low = m.py(Math.max(data.allocated_min[c], data.big_top[c]));
    if (low - top > 0.05) ctx.fillRect(span[0], top, span[1], low - top);
  }
  // The outline of the highest and lowest totals (one rect per column: cheap, and exact).
  ctx.fillStyle = t.smallEdge;
  for (let c = 0; c < model.n; c += 1) {
    const span = visible(c);
    if (!span) continue;
    const [x0, w] = span;
    const top = m.py(data.allocated_max[c]);
    const low = m.py(Math.max(data.allocated_min[c], data.big_top[c]));
    ctx.fillRect(x0, top - 0.5, w, 1);
    if (low - top > 1.5) ctx.fillRect(x0, low - 0.5, w, 1);
  }
}

/** The grey part split by role, recomputed only when the answer or the roles change. */
function greyRolesOf(view) {
  const cache = view.greyRolesCache;
  if (cache && cache.model === view.model && cache.roles === view.roles) return cache.parts;
  const parts = view.roles && view.model ? greyByRole(view.model, view.roles) : [];
  view.greyRolesCache = { model: view.model, roles: view.roles, parts };
  return parts;
}

/**
 * Each band's runs as one Float64Array of (c0, c1, offset) triples and its fill, computed once
 * per answer and colouring: every frame of a zoom redraws the same answer through a new mapping,
 * and rebuilding thousands of run objects and colour strings each frame made those frames long.
 */
function bandGeometry(model, byRole, dark) {
  const key = `${byRole}:${dark}`;
  if (model.geometry?.key === key) return model.geometry.bands;
  const bands = model.bands.map((band) => {
    const list = bandRuns(band);
    const runs = new Float64Array(list.length * 3);
    list.forEach((run, i) => {
      runs[i * 3] = run.c0;
      runs[i * 3 + 1] = run.c1;
      runs[i * 3 + 2] = run.offset;
    });
    return { band, runs, fill: byRole ? roleColor(band.role, dark) : bandColor(band.id, dark) };
  });
  model.geometry = { key, bands };
  return bands;
}

/** Builds an answer's band geometry ahead of its first paint (see bandGeometry). */
export function prepareBands(view, model) {
  bandGeometry(model, view.state().color === "role", theme().dark);
}

/** Every band's runs; returns each drawn band's largest visible rectangle (for labels and tests). */
function paintBands({ ctx, t, m, plot, model, byRole }) {
  const drawn = [];
  const left = plot.x;
  const right = plot.x + plot.w;
  for (const { band, runs, fill } of bandGeometry(model, byRole, t.dark)) {
    let best = null;
    // The fill is set only for bands with a run on screen (parsing it is not free).
    let filled = false;
    for (let i = 0; i < runs.length; i += 3) {
      const x0 = m.px(runs[i]);
      const x1 = m.px(runs[i + 1]);
      if (x1 < left || x0 > right) continue;
      const y0 = m.py(runs[i + 2] + band.size);
      const y1 = m.py(runs[i + 2]);
      // Bands wholly above or below a zoomed byte axis are not drawn (the clip would hide them).
      if (y1 < plot.y - 2 || y0 > plot.y + plot.h) continue;
      if (!filled) {
        ctx.fillStyle = fill;
        filled = true;
      }
      ctx.fillRect(x0, y0, Math.max(0.6, x1 - x0), Math.max(0.6, y1 - y0));
      // The part inside the plot (a zoomed byte axis clips bands above and below it).
      const cx0 = Math.max(x0, left);
      const cx1 = Math.min(x1, right);
      const cy0 = Math.max(y0, plot.y);
      const cy1 = Math.min(y1, plot.y + plot.h);
      if (cy1 <= cy0) continue;
      if (!best || (cx1 - cx0) * (cy1 - cy0) > best.w * best.h) best = { x: cx0, y: cy0, w: cx1 - cx0, h: cy1 - cy0 };
    }
    if (best) drawn.push({ id: band.id, size: band.size, role: band.role, ...best });
  }
  return drawn;
}

/** Outlines the bands named in `outlines` ([id, colour, line width]; the later ones on top). */
function outlineBands({ ctx, m, model }, outlines) {
  for (const [id, color, width] of outlines) {
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
}

/** Sinks the plot before the first event and after the last (seen while a zoomed-out window loads). */
function paintOutsideTrace({ ctx, t, m, plot, model }) {
  const xBegin = m.px(unitOfEvent(model, 0));
  const xEnd = m.px(unitOfEvent(model, model.events));
  ctx.fillStyle = t.sunken;
  if (xBegin > plot.x) ctx.fillRect(plot.x, plot.y, xBegin - plot.x, plot.h);
  if (xEnd < plot.x + plot.w) ctx.fillRect(xEnd, plot.y, plot.x + plot.w - xEnd, plot.h);
}

/** Where complete history starts: a line and a label, or a note when it starts right of the window. */
function markCompleteFrom(scene, labels) {
  const { t, m, plot, model, data } = scene;
  const completeFrom = data.complete_from;
  if (!completeFrom) return;
  const x = m.px(unitOfEvent(model, completeFrom));
  if (inside(scene, x)) {
    vline(scene, x, t.warn, [2, 3]);
    labels.push({ x, text: `complete from event ${count(completeFrom)} ▸`, color: t.warn, align: "left" });
  } else if (x > plot.x + plot.w) {
    labels.push({ x: plot.x + 4, text: "history incomplete here (see the note above)", color: t.warn, align: "left" });
  }
}

function markOoms(scene, labels) {
  const { t, m, model, data } = scene;
  for (const oom of data.markers?.ooms ?? []) {
    const x = m.px(unitOfEvent(model, oom.event + 0.5));
    if (!inside(scene, x)) continue;
    vline(scene, x, t.oom, [], 2);
    labels.push({ x, text: `OOM ${bytes(oom.requested)}`, color: t.oom, bold: true });
  }
}

/**
 * Annotations as triangles on the top edge, those closer than a triangle's width clustered into
 * one (a number above it counts them; hover says which): thousands of step markers read as a row
 * of markers, not a solid bar. Returns the clusters drawn, with their x.
 */
function markAnnotations(scene) {
  const { ctx, t, m, plot, model, data } = scene;
  const marks = [];
  for (const a of data.markers?.annotations ?? []) {
    const x = m.px(unitOfEvent(model, a.event));
    if (inside(scene, x)) marks.push({ x, ...a });
  }
  const clusters = clusterAnnotations(marks, 10);
  ctx.fillStyle = t.annotation;
  ctx.font = t.font;
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const cluster of clusters) {
    const x = cluster.x;
    ctx.beginPath();
    ctx.moveTo(x, plot.y + 7);
    ctx.lineTo(x - 4, plot.y);
    ctx.lineTo(x + 4, plot.y);
    ctx.closePath();
    ctx.fill();
  }
  // Counts under the triangles (inside the plot: the labels' rows are above it), only where
  // every count fits with room to spare, so they read as numbers and not as a second bar.
  const withCounts = clusters.filter((c) => c.count > 1);
  const room = Math.min(...clusters.slice(1).map((c, i) => c.x - clusters[i].x));
  if (withCounts.length && room >= 26) {
    ctx.fillStyle = t.text;
    for (const cluster of withCounts) ctx.fillText(cluster.count > 999 ? "999+" : String(cluster.count), cluster.x, plot.y + 8);
  }
  return clusters;
}

/** The peak: a dashed line and a dot at its height; returns where, or null when off the window. */
function markPeak(scene, labels) {
  const { ctx, t, m, model, data } = scene;
  const peak = data.markers?.peak;
  if (!peak || peak.event === null || peak.event === undefined) return null;
  const x = m.px(unitOfEvent(model, peak.event + 1));
  if (!inside(scene, x)) return null;
  vline(scene, x, t.peak, [4, 3]);
  const y = m.py(peak.bytes);
  ctx.fillStyle = t.peak;
  ctx.beginPath();
  ctx.arc(x, y, 3.5, 0, Math.PI * 2);
  ctx.fill();
  labels.push({ x, text: `peak ${bytes(peak.bytes)}`, color: t.peak, bold: true });
  return { x, y, event: peak.event };
}

function markEndOfTrace(scene, labels) {
  const { t, m, plot, model } = scene;
  const xEnd = m.px(unitOfEvent(model, model.events));
  if (inside(scene, xEnd) && xEnd < plot.x + plot.w - 1) vline(scene, xEnd, t.muted, []);
  if (inside(scene, xEnd)) {
    vline(scene, xEnd - 1, t.muted, [1, 2]);
    labels.push({ x: xEnd, text: "end of trace", color: t.muted, align: "right" });
  }
}

/** The selected moment `at`: a line and a tag at the bottom; returns where, or null. */
function markMoment(scene, at) {
  const { ctx, t, m, plot, model } = scene;
  if (at === null || at === undefined) return null;
  const x = m.px(unitOfEvent(model, at + 1));
  if (!inside(scene, x)) return null;
  vline(scene, x, t.accent, [], 2);
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
  return { x, at };
}

/**
 * Marker labels above the plot in two rows: each label takes the first row where it overlaps
 * nothing already placed (checked by drawn extent, after clamping to the plot); one that fits
 * neither row is left out (its marker is still drawn, and hover explains it). Returns what was
 * placed, for the tests.
 */
function placeLabels({ ctx, t, plot }, labels) {
  // The most important first: OOMs and the peak keep their place over the end of the trace.
  const rank = (label) => (label.bold ? 0 : 1);
  const order = [...labels].sort((a, b) => rank(a) - rank(b) || a.x - b.x);
  const rows = [[], []];
  const placed = [];
  ctx.textBaseline = "alphabetic";
  for (const label of order) {
    ctx.font = label.bold ? t.fontBold : t.font;
    const w = ctx.measureText(label.text).width;
    let x = label.align === "right" ? label.x - w - 3 : label.align === "left" ? label.x + 3 : label.x - w / 2;
    x = clamp(x, plot.x, plot.x + plot.w - w);
    const row = rows.findIndex((spans) => spans.every(([a, b]) => x + w + 6 <= a || x >= b + 6));
    if (row < 0) continue;
    rows[row].push([x, x + w]);
    ctx.fillStyle = label.color;
    ctx.textAlign = "left";
    const y = row === 0 ? plot.y - 18 : plot.y - 4;
    ctx.fillText(label.text, x, y);
    placed.push({ text: label.text, x, y, w });
  }
  return placed;
}

/** The x axis in events, or in time since the first event when `byTime`; and the axis titles. */
function paintXAxis(scene, byTime) {
  const { ctx, t, m, plot, model, data } = scene;
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
  if (byTime) {
    const ts = data.time_us;
    const span = Math.max(1, ts.end - ts.start);
    const timeOf = (u) => ts.start + (span * u) / Math.max(1, model.n);
    xTicks = timeTicks(timeOf(m.u0), timeOf(m.u1), ts.first, tickCount).map((tk) => ({ x: m.px(((tk.value - ts.start) / span) * model.n), label: tk.label }));
  } else {
    const e0 = Math.max(0, eventOfUnit(model, m.u0));
    const e1 = Math.min(model.events, eventOfUnit(model, m.u1));
    xTicks = eventTicks(e0, e1, tickCount).map((tk) => ({ x: m.px(unitOfEvent(model, tk.value)), label: tk.label }));
  }
  const labels = [];
  for (const tk of xTicks) {
    if (!inside(scene, tk.x)) continue;
    labels.push(tk.label);
    ctx.beginPath();
    ctx.moveTo(Math.round(tk.x) + 0.5, plot.y + plot.h);
    ctx.lineTo(Math.round(tk.x) + 0.5, plot.y + plot.h + 4);
    ctx.stroke();
    ctx.fillText(tk.label, clamp(tk.x, plot.x + 12, plot.x + plot.w - 12), plot.y + plot.h + 7);
  }
  ctx.textAlign = "right";
  ctx.fillStyle = t.faint;
  ctx.fillText(byTime ? "time since the first event →" : "event →", plot.x + plot.w, plot.y + plot.h + 18);
  ctx.textAlign = "left";
  ctx.fillText("live bytes", 4, 4);
  // A zoomed byte axis does not start at 0: a second line says so (within the left margin, so
  // it never runs into the markers' labels on a narrow screen).
  if (m.zoomedY) {
    ctx.fillStyle = t.accent;
    ctx.fillText("zoomed ↕", 4, 17);
  }
  return labels;
}

function paintCrosshair(scene, hover) {
  const { ctx, t, plot } = scene;
  if (!hover || !inside(scene, hover.x)) return;
  ctx.strokeStyle = t.faint;
  ctx.setLineDash([2, 2]);
  ctx.beginPath();
  ctx.moveTo(Math.round(hover.x) + 0.5, plot.y);
  ctx.lineTo(Math.round(hover.x) + 0.5, plot.y + plot.h);
  ctx.stroke();
  ctx.setLineDash([]);
}

/**
 * A step line of `n` columns (column c spans x(c)…x(c + 1) at height y(c)) drawn with fillRect
 * only, merging equal steps: paths with thousands of vertices are slow to stroke in software.
 */
export function stepLine(ctx, n, x, y, width, left, right) {
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

/** The box a Shift + drag is drawing (both axes zoom to it on release). */
function paintZoomBox({ ctx, t }, box) {
  if (!box) return;
  ctx.save();
  ctx.strokeStyle = t.accent;
  ctx.fillStyle = t.dark ? "rgba(120,150,255,0.15)" : "rgba(60,90,220,0.1)";
  ctx.setLineDash([4, 3]);
  const x = Math.min(box.x0, box.x1);
  const y = Math.min(box.y0, box.y1);
  ctx.fillRect(x, y, Math.abs(box.x1 - box.x0), Math.abs(box.y1 - box.y0));
  ctx.strokeRect(x + 0.5, y + 0.5, Math.abs(box.x1 - box.x0), Math.abs(box.y1 - box.y0));
  ctx.restore();
}
