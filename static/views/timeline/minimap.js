// @ts-check
// The minimap under the timeline: the whole trace at a glance with a brush over the window
// shown. Dragging the brush moves the window; dragging elsewhere draws a new one.

import { clamp } from "../../lib/scale.js";
import { eventOfUnit, unitOfEvent } from "../../lib/timeline-model.js";
import { fitCanvas } from "../canvas.js";
import { theme } from "../theme.js";
import { stepLine } from "./paint.js";

/** @typedef {import("./index.js").TimelineView} TimelineView */

/** The minimap's height in CSS px (also the height asked of the server for the overview). */
export const MINIMAP_HEIGHT = 46;

/** Paints the overview answer and the brush; records the brush in `view.minimapLayout`. */
export function paintMinimap(view) {
  if (!view.visible()) return;
  const plot = view.plot();
  const width = plot.width;
  const ctx = fitCanvas(view.minimap, width, MINIMAP_HEIGHT);
  const t = theme();
  ctx.fillStyle = t.sunken;
  ctx.fillRect(0, 0, width, MINIMAP_HEIGHT);
  const model = view.overview;
  if (!model || model.n === 0) return;
  const x = (u) => plot.x + (u / model.n) * plot.w;
  // The overview changes only with its answer, the width and the theme; the brush moves on
  // every frame of a zoom, so the overview is drawn once into a canvas of its own and copied.
  const dpr = window.devicePixelRatio || 1;
  const key = `${width}:${dpr}:${t.dark}:${t.small}`;
  if (view.minimapCache?.model !== model || view.minimapCache.key !== key) {
    const image = document.createElement("canvas");
    image.width = Math.max(1, Math.round(width * dpr));
    image.height = Math.max(1, Math.round(MINIMAP_HEIGHT * dpr));
    const c = image.getContext("2d");
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    paintOverview(c, t, model, plot, x);
    view.minimapCache = { model, key, image };
  }
  ctx.drawImage(view.minimapCache.image, 0, 0, width, MINIMAP_HEIGHT);
  // The brush.
  const { start, end } = view.window();
  const b0 = x(unitOfEvent(model, start));
  const b1 = Math.max(b0 + 2, x(unitOfEvent(model, end + 1)));
  ctx.fillStyle = t.dark ? "rgba(0,0,0,0.45)" : "rgba(255,255,255,0.6)";
  ctx.fillRect(plot.x, 0, b0 - plot.x, MINIMAP_HEIGHT);
  ctx.fillRect(b1, 0, plot.x + plot.w - b1, MINIMAP_HEIGHT);
  ctx.strokeStyle = t.accent;
  ctx.lineWidth = 1.5;
  ctx.strokeRect(b0, 1, b1 - b0, MINIMAP_HEIGHT - 2);
  const at = view.app.moment();
  if (at !== null) {
    ctx.fillStyle = t.accent;
    ctx.fillRect(x(unitOfEvent(model, at + 1)) - 0.5, 0, 1.5, MINIMAP_HEIGHT);
  }
  ctx.fillStyle = t.muted;
  ctx.font = t.font;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  ctx.fillText("all", plot.x - 8, MINIMAP_HEIGHT / 2);
  view.minimapLayout = { x0: plot.x, w: plot.w, brush: [b0, b1] };
}

/** The minimap's pointer handling: move the brush, or brush a new window; double click resets. */
export function bindMinimap(view) {
  const minimap = view.minimap;
  minimap.addEventListener("pointerdown", (event) => startDrag(view, event));
  minimap.addEventListener("pointermove", (event) => drag(view, event));
  minimap.addEventListener("pointerup", () => (view.miniDrag = null));
  minimap.addEventListener("dblclick", () => view.reset());
}

/** @param {TimelineView} view */
function startDrag(view, event) {
  if (!view.overview || !view.minimapLayout) return;
  view.minimap.setPointerCapture(event.pointerId);
  const box = view.minimap.getBoundingClientRect();
  const x = event.clientX - box.left;
  const [b0, b1] = view.minimapLayout.brush;
  if (x >= b0 - 3 && x <= b1 + 3 && b1 - b0 < view.minimapLayout.w - 4) view.miniDrag = { mode: "move", x, b0, b1 };
  else view.miniDrag = { mode: "brush", x, b0: x, b1: x, moved: false };
}

/** @param {TimelineView} view */
function drag(view, event) {
  const miniDrag = view.miniDrag;
  if (!miniDrag || !view.overview) return;
  const box = view.minimap.getBoundingClientRect();
  const x = event.clientX - box.left;
  const { x0, w } = view.minimapLayout;
  const n = view.overview.n;
  const unit = (px) => clamp(((px - x0) / w) * n, 0, n);
  if (miniDrag.mode === "move") {
    const dx = x - miniDrag.x;
    const width = miniDrag.b1 - miniDrag.b0;
    const left = clamp(miniDrag.b0 + dx, x0, x0 + w - width);
    view.setWindow(windowOf(view.overview, unit(left), unit(left + width)));
  } else {
    if (Math.abs(x - miniDrag.x) < 3) return;
    const a = Math.min(x, miniDrag.x);
    const b = Math.max(x, miniDrag.x);
    view.setWindow(windowOf(view.overview, unit(a), unit(b)));
  }
}

/** Column units [a, b] of the overview as an event window. */
function windowOf(model, a, b) {
  const start = Math.max(0, Math.floor(eventOfUnit(model, a)));
  const end = Math.min(model.events - 1, Math.max(start + 15, Math.ceil(eventOfUnit(model, b)) - 1));
  return { start, end };
}

/** The overview answer, as the chart draws it (without the brush). */
function paintOverview(ctx, t, model, plot, x) {
  const data = model.data;
  const yTop = Math.max(1, data.y_max);
  const y = (b) => MINIMAP_HEIGHT - 3 - (b / yTop) * (MINIMAP_HEIGHT - 8);
  // As the chart draws it: solid up to each column's lowest total, lighter up to its highest,
  // the highest outlined, so the steps of a long run show in the overview too.
  for (let c = 0; c < model.n; c += 1) {
    const top = y(data.allocated_max[c]);
    const low = y(data.allocated_min[c]);
    const w = Math.max(0.6, x(c + 1) - x(c));
    ctx.fillStyle = t.small;
    ctx.fillRect(x(c), low, w, y(0) - low);
    ctx.fillStyle = t.smallRange;
    ctx.fillRect(x(c), top, w, low - top);
    ctx.fillStyle = t.smallEdge;
    ctx.fillRect(x(c), top - 0.5, w, 1);
  }
  ctx.fillStyle = t.reserved;
  stepLine(ctx, model.n, x, (c) => y(data.reserved[c]), 1, plot.x, plot.x + plot.w);
  if (data.complete_from) {
    ctx.fillStyle = t.incomplete;
    ctx.fillRect(plot.x, 0, x(unitOfEvent(model, data.complete_from)) - plot.x, MINIMAP_HEIGHT);
  }
}
