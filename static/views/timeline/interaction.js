// @ts-check
// The timeline's pointer and toolbar: wheel zooms (sideways scrolls pan; with Shift or Alt it
// zooms the byte axis), drag pans (with Shift it draws a box to zoom both axes to), a click
// pins the band under it or lists the grey column's allocations and moves the moment there,
// hover explains what is under the pointer.

import { allocation } from "../../lib/api.js";
import { frameParts, visibleFrames } from "../../lib/frames.js";
import { clamp } from "../../lib/scale.js";
import { eventOfUnit, hitAt, panWindow, zoomWindow } from "../../lib/timeline-model.js";
import { bytes, count, duration, hex } from "../../lib/units.js";
import { h } from "../dom.js";
import { hideTip, showTip, tipRow } from "../tooltip.js";
import { openColumnList } from "./side.js";

/** @typedef {import("./index.js").TimelineView} TimelineView */

/** Listens on the chart's canvas and on the toolbar's axis and zoom buttons. */
export function bindChart(view) {
  const canvas = view.canvas;
  canvas.addEventListener("wheel", (event) => onWheel(view, event), { passive: false });
  canvas.addEventListener("pointerdown", (event) => onDown(view, event));
  canvas.addEventListener("pointermove", (event) => onMove(view, event));
  canvas.addEventListener("pointerup", (event) => onUp(view, event));
  canvas.addEventListener("pointercancel", () => (view.drag = null));
  canvas.addEventListener("pointerleave", () => {
    if (view.drag) return;
    view.hover = null;
    view.pointer = null;
    hideTip();
    view.draw();
  });
  canvas.addEventListener("dblclick", () => view.reset());
  for (const b of view.panel.querySelectorAll("[data-color]")) {
    b.addEventListener("click", () => view.app.store.set({ color: b.dataset.color }));
  }
  for (const b of view.panel.querySelectorAll("[data-axis]")) {
    b.addEventListener("click", () => view.app.store.set({ axis: b.dataset.axis }));
  }
  for (const b of view.panel.querySelectorAll("[data-yzoom]")) {
    b.addEventListener("click", () => {
      if (b.dataset.yzoom === "reset") view.setByteRange(null);
      else view.zoomBytesBy(b.dataset.yzoom === "in" ? 0.5 : 2);
    });
  }
  // What is under a point of the chart (CSS px of the canvas): the tests walk allocations with it.
  view.hitTest = (x, y) => hitTest(view, x, y);
  view.openColumn = (column, limit) => openColumnList(view, column, limit);
  // A new answer under a still pointer: the tip is asked again of it, or it would go on
  // describing the old answer's column until the pointer moved.
  view.rehover = () => {
    const p = view.pointer;
    if (p && view.hover && !view.drag) hoverAt(view, p.x, p.y, p.clientX, p.clientY);
  };
  for (const b of view.panel.querySelectorAll("[data-zoom]")) {
    b.addEventListener("click", () => {
      if (b.dataset.zoom === "reset") view.reset();
      else view.zoomBy(b.dataset.zoom === "in" ? 0.5 : 2);
    });
  }
}

/** The pointer in the canvas's CSS px. */
function local(view, event) {
  const box = view.canvas.getBoundingClientRect();
  return { x: event.clientX - box.left, y: event.clientY - box.top };
}

/** @param {TimelineView} view */
function onWheel(view, event) {
  if (!view.model) return;
  event.preventDefault();
  const m = view.mapping();
  const { x } = local(view, event);
  const scale = event.deltaMode === 1 ? 30 : event.deltaMode === 2 ? 300 : 1;
  if (event.shiftKey || event.altKey) {
    // The byte axis, around the pointer's height (browsers turn a Shift + wheel sideways).
    const delta = event.deltaY || event.deltaX;
    const factor = clamp(Math.exp(delta * scale * 0.0015), 0.2, 5);
    const { y } = local(view, event);
    view.zoomBytesBy(factor, m.bytesAt(clamp(y, m.plot.y, m.plot.y + m.plot.h)));
    return;
  }
  if (Math.abs(event.deltaX) > Math.abs(event.deltaY) && !event.ctrlKey) {
    const du = ((event.deltaX * scale) / m.plot.w) * (m.u1 - m.u0);
    view.setWindow(panWindow(view.model, m.u0, m.u1, du));
    return;
  }
  const factor = Math.exp(event.deltaY * scale * (event.ctrlKey ? 0.01 : 0.0015));
  const u = m.unit(clamp(x, m.plot.x, m.plot.x + m.plot.w));
  view.setWindow(zoomWindow(view.model, m.u0, m.u1, u, clamp(factor, 0.2, 5)));
}

/** @param {TimelineView} view */
function onDown(view, event) {
  if (!view.model || event.button !== 0) return;
  const m = view.mapping();
  view.canvas.setPointerCapture(event.pointerId);
  const { x, y } = local(view, event);
  view.drag = { x, y, u0: m.u0, u1: m.u1, moved: false, box: event.shiftKey };
}

/** @param {TimelineView} view */
function onMove(view, event) {
  if (!view.model) return;
  const { x, y } = local(view, event);
  if (view.drag?.box) {
    // Shift + drag: the box to zoom to, drawn by the painter.
    if (Math.abs(x - view.drag.x) > 3 || Math.abs(y - view.drag.y) > 3) view.drag.moved = true;
    view.zoomBox = view.drag.moved ? { x0: view.drag.x, y0: view.drag.y, x1: x, y1: y } : null;
    hideTip();
    view.draw();
    return;
  }
  if (view.drag) {
    const dx = x - view.drag.x;
    if (Math.abs(dx) > 3) view.drag.moved = true;
    if (view.drag.moved) {
      view.canvas.classList.add("panning");
      hideTip();
      const m = view.mapping();
      const du = (-dx / m.plot.w) * (view.drag.u1 - view.drag.u0);
      view.setWindow(panWindow(view.model, view.drag.u0, view.drag.u1, du));
      return;
    }
  }
  hoverAt(view, x, y, event.clientX, event.clientY);
}

/** A click (a press without a drag): pins the band under it and moves the moment there. */
function onUp(view, event) {
  const drag = view.drag;
  view.drag = null;
  view.canvas.classList.remove("panning");
  const { x, y } = local(view, event);
  if (drag?.box && drag.moved) {
    view.zoomBox = null;
    view.zoomToBox(drag.x, drag.y, x, y);
    return;
  }
  if (!drag || drag.moved || !view.model) return;
  const m = view.mapping();
  if (x < m.plot.x || x > m.plot.x + m.plot.w) return;
  const u = m.unit(x);
  const clickedEvent = Math.round(eventOfUnit(view.model, u)) - 1;
  const hit = hitTest(view, x, y);
  const patch = {};
  if (hit.kind === "band") patch.alloc = hit.band.id;
  view.app.store.set(patch);
  view.app.setMoment(clamp(clickedEvent, -1, view.model.events - 1));
  if (hit.kind === "grey") {
    // The list below the chart answers the click; the hover's tip would cover it.
    hideTip();
    openColumnList(view, hit.column);
  }
}

/** What is at CSS px (x, y) of the chart: {kind: "band", band}, {kind: "grey", column} or {kind: "none"}. */
function hitTest(view, x, y) {
  if (!view.model) return { kind: "none" };
  const m = view.mapping();
  if (x < m.plot.x || x > m.plot.x + m.plot.w || y < m.plot.y || y > m.plot.y + m.plot.h) return { kind: "none" };
  return hitAt(view.model, m.unit(x), m.bytesAt(y));
}

/** The crosshair and the tooltip for what is at (x, y): an annotation, a band, or the column. */
function hoverAt(view, x, y, clientX, clientY) {
  view.pointer = { x, y, clientX, clientY };
  const m = view.mapping();
  const model = view.model;
  if (x < m.plot.x || x > m.plot.x + m.plot.w || y < m.plot.y - 8 || y > m.plot.y + m.plot.h) {
    view.hover = null;
    hideTip();
    view.draw();
    return;
  }
  const u = m.unit(x);
  const c = Math.floor(u);
  const hit = hitAt(model, u, m.bytesAt(y));
  const band = hit.kind === "band" ? hit.band : null;
  view.hover = { x, y, band };
  view.draw();
  const clusters = view.layout?.annotations ?? [];
  const cluster = y < m.plot.y + 10 ? nearest(clusters, x, 6) : null;
  if (cluster) {
    showTip(
      clientX,
      clientY,
      h("div", { className: "tip-title" }, cluster.count === 1 ? cluster.names[0][0] : `${count(cluster.count)} annotations`),
      cluster.count > 1 ? cluster.names.slice(0, 6).map(([name, n]) => tipRow(name, `× ${count(n)}`)) : null,
      cluster.names.length > 6 ? h("div", { className: "tip-note" }, `and ${count(cluster.names.length - 6)} other names`) : null,
      tipRow(
        cluster.first === cluster.last ? "event" : "events",
        cluster.first === cluster.last ? count(cluster.first) : `${count(cluster.first)}–${count(cluster.last)}`,
      ),
      cluster.count > 1 ? h("div", { className: "tip-note" }, "Zoom in to tell them apart.") : null,
    );
    return;
  }
  if (band) {
    bandTip(view, band, clientX, clientY);
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
    tipRow(
      "allocated",
      data.allocated_min[c] !== data.allocated_max[c] ? `${bytes(data.allocated_min[c])} – ${bytes(data.allocated_max[c])}` : bytes(data.allocated_max[c]),
    ),
    tipRow("reserved", bytes(data.reserved[c])),
    tipRow("in bands", bytes(data.big_top[c])),
    h(
      "div",
      { className: "tip-note" },
      hit.kind === "grey"
        ? `Grey: allocations drawn together here (under ${bytes(data.threshold)}, or too short or too many at this zoom). Click to list them; zoom in (Shift + scroll for bytes) to draw each.`
        : `Allocations under ${bytes(data.threshold)} are drawn together (grey). Zoom in to see each.`,
    ),
  );
}

/** The cluster whose x is nearest `x`, within `slack` px (they are sorted by x). */
function nearest(clusters, x, slack) {
  let best = null;
  for (const cluster of clusters) {
    const d = Math.abs(cluster.x - x);
    if (d <= slack && (!best || d < Math.abs(best.x - x))) best = cluster;
  }
  return best;
}

/** A band's tooltip: what the answer knows at once, then its stack once that has loaded. */
function bandTip(view, band, clientX, clientY) {
  const device = view.device() ?? view.model.data.device;
  const lifetime = `${band.start === null ? "before the trace" : `event ${count(band.start)}`} → ${band.end === null ? "still alive" : `event ${count(band.end)}`}`;
  const render = (info) => {
    const frames = info ? visibleFrames(info.frames).slice(0, 6) : [];
    showTip(
      clientX,
      clientY,
      h("div", { className: "tip-title" }, `${bytes(band.size)}`, h("span", { className: "tip-id" }, info ? ` ${info.block_id}` : ` allocation ${band.id}`)),
      tipRow("role", band.role),
      band.because ? h("div", { className: "tip-note" }, band.because) : null,
      tipRow("lifetime", lifetime),
      info && info.start_time_us !== null && info.end_time_us !== null ? tipRow("duration", duration(info.end_time_us - info.start_time_us)) : null,
      info ? tipRow("stream", String(info.stream)) : null,
      info ? tipRow("address", hex(info.addr)) : null,
      info
        ? frames.length
          ? h(
              "ol",
              { className: "tip-frames" },
              frames.map((f) =>
                h("li", {}, h("span", { className: "frame-name" }, frameParts(f).name), " ", h("span", { className: "frame-where" }, frameParts(f).where)),
              ),
            )
          : h("div", { className: "tip-note" }, "No Python frames recorded for this allocation.")
        : h("div", { className: "tip-note" }, "Loading its stack…"),
      h("div", { className: "tip-note" }, "Click to pin its full stack."),
    );
  };
  render(null);
  allocation(view.app.id, device, band.id)
    .then((info) => {
      if (view.hover?.band?.id === band.id) render(info);
    })
    .catch(() => {});
}
