// @ts-check
// The differential flame graph (an icicle, root on top) of live memory at the two compared
// moments: laid out by lib/flame-model's two-weight mode (a frame as wide as its larger side),
// coloured by the change (grey unchanged, towards red as it grew and blue as it shrank). Hover
// explains a frame, click or Enter zooms, the breadcrumb or Esc zooms out, arrows move: the same
// lib/flame-model `FlameModel` and event wiring as the snapshot page's Flame tab; this file paints.

import { fitText } from "../lib/fit-text.js";
import { change, FlameModel, twoWeight } from "../lib/flame-model.js";
import { bytes } from "../lib/units.js";
import { fitCanvas } from "../views/canvas.js";
import { h } from "../views/dom.js";
import { renderCrumbs, wireFlameCanvas } from "../views/flame.js";
import { theme } from "../views/theme.js";
import { tipRow } from "../views/tooltip.js";
import { pairedFrame, signedBytes, signedPercent, splitFrame, trend } from "./change.js";

export const ROW = 20;

/**
 * "rgb(1 2 3)", "rgb(1, 2, 3)" or "#rrggbb" → [r, g, b].
 * @param {string} text
 * @returns {number[]}
 */
function parseRgb(text) {
  const hex = /^#([0-9a-f]{6})$/i.exec(text);
  if (hex) return [0, 2, 4].map((i) => parseInt(hex[1].slice(i, i + 2), 16));
  const numbers = text.match(/[\d.]+/g)?.map(Number) ?? [128, 128, 128];
  return numbers.slice(0, 3);
}

/**
 * A frame's fill for a change in [-1, 1], between the theme's `same`, `grow` and `shrink`.
 * @param {number} amount
 * @param {{ same: string, grow: string, shrink: string }} t
 */
function changeColor(amount, t) {
  const strength = Math.min(1, Math.abs(amount) ** 0.6);
  const from = parseRgb(t.same);
  const to = parseRgb(amount >= 0 ? t.grow : t.shrink);
  const rgb = from.map((c, i) => Math.round(c + (to[i] - c) * strength));
  return { fill: `rgb(${rgb.join(" ")})`, rgb };
}

/**
 * Dark or light text for a fill, whichever reads better.
 * @param {number[]} rgb
 */
function textOn(rgb) {
  const [r, g, b] = rgb.map((c) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.32 ? "#111722" : "#ffffff";
}

/**
 * Before, after and change lines for a tooltip.
 * @param {number} before
 * @param {number} after
 */
export function sidesRows(before, after) {
  const side = (/** @type {string} */ name) => h("span", { className: `side-${name}` }, h("span", { className: "side-dot" }), ` ${name}`);
  const changeRow = tipRow("change", `${signedBytes(after - before)} · ${signedPercent(before, after)}`);
  changeRow.classList.add("tip-change", trend(after - before));
  return [tipRow(side("before"), bytes(before)), tipRow(side("after"), bytes(after)), changeRow];
}

export class DiffFlame {
  /**
   * @param {HTMLElement} box
   * @param {import("../lib/flame-model.js").FlameNode[]} tree depth-first nodes, root first, each
   *   `{name, before_bytes, after_bytes, parent, depth}`
   */
  constructor(box, tree) {
    this.box = box;
    this.model = new FlameModel(twoWeight(tree), ROW);
    this.nodes = this.model.nodes;
    this.canvas = /** @type {HTMLCanvasElement} */ (h("canvas", { className: "cmp-canvas flame-canvas", role: "img" }));
    this.canvas.setAttribute(
      "aria-label",
      "Differential flame graph of live memory at each snapshot's peak. Arrow keys move between frames, Enter zooms, Backspace zooms out one level, Escape zooms out to everything.",
    );
    this.crumbs = h("nav", { className: "breadcrumb cmp-breadcrumb", "aria-label": "Zoomed frames" });
    box.append(this.crumbs, h("div", { className: "cmp-chart" }, this.canvas));
    wireFlameCanvas(this.canvas, {
      model: () => this.model,
      draw: () => this.draw(),
      zoomed: () => this.zoomed(),
      tooltip: (i) => this.tooltipFor(i),
    });
    new ResizeObserver(() => this.draw()).observe(box);
  }

  /** The frame zoomed into (0: everything). */
  get zoom() {
    return this.model.zoom;
  }

  /**
   * Zooms to node `i` (the root: 0).
   * @param {number} i
   */
  setZoom(i) {
    this.model.zoomTo(i);
    this.zoomed();
  }

  /** After the model's zoom changed. */
  zoomed() {
    this.draw();
    renderCrumbs(this.crumbs, this.model, (i) => this.setZoom(i));
  }

  draw() {
    const width = Math.max(200, this.box.clientWidth);
    const rects = this.model.place(width);
    // As tall as what is drawn: a zoomed graph shrinks to its subtree.
    const height = this.model.rowsDrawn() * ROW + 1;
    const pen = fitCanvas(this.canvas, width, height);
    const t = theme();
    pen.clearRect(0, 0, width, height);
    pen.font = t.font;
    pen.textBaseline = "middle";
    for (const rect of rects) {
      const node = this.nodes[rect.i];
      const { fill, rgb } = changeColor(change(node), t);
      pen.globalAlpha = rect.ancestor ? 0.45 : 1;
      pen.fillStyle = fill;
      pen.fillRect(rect.x, rect.y, Math.max(0.5, rect.w - (rect.w > 3 ? 1 : 0)), ROW - 1);
      if (rect.w > 28) {
        const label = rect.i === 0 ? `all  ${bytes(node.before_bytes ?? 0)} → ${bytes(node.after_bytes ?? 0)}` : node.name;
        pen.fillStyle = textOn(rgb);
        pen.fillText(fitText(pen, label, rect.w - 8), rect.x + 4, rect.y + ROW / 2);
      }
      pen.globalAlpha = 1;
    }
    const mark = this.model.rectOf(this.model.marked());
    if (mark) {
      pen.strokeStyle = t.text;
      pen.lineWidth = 2;
      pen.strokeRect(mark.x + 1, mark.y + 1, Math.max(1, mark.w - 3), ROW - 3);
    }
  }

  /**
   * @param {number} i
   * @returns {(Node | string | null)[]}
   */
  tooltipFor(i) {
    const node = this.nodes[i];
    const root = this.nodes[0];
    const before = node.before_bytes ?? 0;
    const after = node.after_bytes ?? 0;
    const share = (/** @type {number} */ n, /** @type {number} */ total) => (total ? ` (${((100 * n) / total).toFixed(1)}%)` : "");
    const f = splitFrame(node.name);
    const paired = pairedFrame(node.name);
    const where = paired
      ? [
          h("div", { className: "tip-title" }, "Outer callers, aligned"),
          h("div", { className: "tip-where" }, `before: ${paired.before}`),
          h("div", { className: "tip-where" }, `after: ${paired.after}`),
        ]
      : [
          h("div", { className: "tip-title" }, i === 0 ? "Everything live at the compared moments" : f.name),
          i === 0 ? null : h("div", { className: "tip-where" }, f.line ? `${f.file}:${f.line}` : f.file),
        ];
    return [
      ...where,
      ...sidesRows(before, after),
      i === 0
        ? null
        : h(
            "div",
            { className: "tip-note" },
            `of all: ${bytes(before)}${share(before, root.before_bytes ?? 0)} → ${bytes(after)}${share(after, root.after_bytes ?? 0)}`,
          ),
      h(
        "div",
        { className: "tip-note" },
        i === this.model.zoom && i !== 0
          ? "Click or press Backspace to zoom out one level, Esc to everything"
          : this.model.lay.children[i].length
            ? "Click to zoom in"
            : "A leaf: memory allocated right here",
      ),
    ];
  }

  /** What was drawn, in CSS px from the canvas's corner (the test hook's view). */
  drawn() {
    return this.model.rects.map((r) => {
      const node = this.nodes[r.i];
      return { name: node.name, before: node.before_bytes, after: node.after_bytes, x: r.x, y: r.y, w: r.w, h: ROW, ancestor: r.ancestor };
    });
  }
}
