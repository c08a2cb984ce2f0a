// The differential flame graph (an icicle, root on top) of live memory at the two compared
// moments: laid out by lib/flame-model's two-weight mode (a frame as wide as its larger side),
// coloured by the change (grey unchanged, towards red as it grew and blue as it shrank). Hover
// explains a frame, click or Enter zooms, the breadcrumb or Esc zooms out, arrows move.

import { fitText } from "../lib/fit-text.js";
import { ancestors, change, layout, twoWeight } from "../lib/flame-model.js";
import { bytes } from "../lib/units.js";
import { fitCanvas } from "../views/canvas.js";
import { h } from "../views/dom.js";
import { theme } from "../views/theme.js";
import { hideTip, showTip, tipRow } from "../views/tooltip.js";
import { pairedFrame, signedBytes, signedPercent, splitFrame, trend } from "./change.js";

export const ROW = 20;

/** "rgb(1 2 3)", "rgb(1, 2, 3)" or "#rrggbb" → [r, g, b]. */
function parseRgb(text) {
  const hex = /^#([0-9a-f]{6})$/i.exec(text);
  if (hex) return [0, 2, 4].map((i) => parseInt(hex[1].slice(i, i + 2), 16));
  const numbers = text.match(/[\d.]+/g)?.map(Number) ?? [128, 128, 128];
  return numbers.slice(0, 3);
}

/** A frame's fill for a change in [-1, 1], between the theme's `same`, `grow` and `shrink`. */
function changeColor(amount, t) {
  const strength = Math.min(1, Math.abs(amount) ** 0.6);
  const from = parseRgb(t.same);
  const to = parseRgb(amount >= 0 ? t.grow : t.shrink);
  const rgb = from.map((c, i) => Math.round(c + (to[i] - c) * strength));
  return { fill: `rgb(${rgb.join(" ")})`, rgb };
}

/** Dark or light text for a fill, whichever reads better. */
function textOn(rgb) {
  const [r, g, b] = rgb.map((c) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.32 ? "#111722" : "#ffffff";
}

/** Before, after and change lines for a tooltip. */
export function sidesRows(before, after) {
  const side = (name) => h("span", { className: `side-${name}` }, h("span", { className: "side-dot" }), ` ${name}`);
  const changeRow = tipRow("change", `${signedBytes(after - before)} · ${signedPercent(before, after)}`);
  changeRow.classList.add("tip-change", trend(after - before));
  return [tipRow(side("before"), bytes(before)), tipRow(side("after"), bytes(after)), changeRow];
}

export class DiffFlame {
  /** `tree`: depth-first nodes, root first, each `{name, before_bytes, after_bytes, parent, depth}`. */
  constructor(box, tree) {
    this.box = box;
    this.nodes = twoWeight(tree);
    this.lay = layout(this.nodes);
    this.zoom = 0;
    this.focus = -1;
    this.hover = -1;
    this.rects = [];
    this.canvas = h("canvas", { className: "cmp-canvas flame-canvas", tabIndex: 0, role: "img" });
    this.canvas.setAttribute(
      "aria-label",
      "Differential flame graph of live memory at each snapshot's peak. Arrow keys move between frames, Enter zooms, Escape zooms out.",
    );
    this.crumbs = h("nav", { className: "breadcrumb cmp-breadcrumb", "aria-label": "Zoomed frames" });
    box.append(this.crumbs, h("div", { className: "cmp-chart" }, this.canvas));
    this.canvas.addEventListener("mousemove", (e) => this.onMove(e));
    this.canvas.addEventListener("mouseleave", () => {
      this.hover = -1;
      hideTip();
      this.draw();
    });
    this.canvas.addEventListener("click", (e) => {
      const rect = this.hit(e);
      if (rect) this.setZoom(rect.i);
    });
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
    this.canvas.addEventListener("blur", () => {
      this.focus = -1;
      hideTip();
      this.draw();
    });
    new ResizeObserver(() => this.draw()).observe(box);
  }

  /** Zooms to node `i` (the root: 0). */
  setZoom(i) {
    this.zoom = i;
    this.focus = -1;
    hideTip();
    this.draw();
    this.renderCrumbs();
  }

  renderCrumbs() {
    const chain = ancestors(this.nodes, this.zoom);
    this.crumbs.hidden = chain.length <= 1;
    this.crumbs.replaceChildren(
      ...chain.flatMap((i, k) => {
        const label = i === 0 ? "All" : this.nodes[i].name;
        const crumb =
          i === this.zoom
            ? h("span", { className: "crumb current", "aria-current": "true" }, label)
            : h("button", { type: "button", className: "crumb", title: `Zoom out to ${label}`, onclick: () => this.setZoom(i) }, label);
        return k ? [h("span", { className: "crumb-sep", "aria-hidden": "true" }, "›"), crumb] : [crumb];
      }),
    );
  }

  /** Rectangles (x, w in CSS px) of what is drawn: the zoomed node's ancestors, then its subtree. */
  place(width) {
    const { nodes, lay, zoom } = this;
    const chain = ancestors(nodes, zoom);
    const rects = chain.slice(0, -1).map((i, row) => ({ i, x: 0, w: width, row, ancestor: true }));
    const top = chain.length - 1;
    rects.push({ i: zoom, x: 0, w: width, row: top, ancestor: false });
    const scale = nodes[zoom].bytes > 0 ? width / nodes[zoom].bytes : 0;
    for (let i = zoom + 1; i < lay.subtreeEnd[zoom]; i += 1) {
      const w = nodes[i].bytes * scale;
      // Narrower than a third of a pixel: neither it nor its children would show.
      if (w < 0.35) continue;
      rects.push({ i, x: (lay.x0[i] - lay.x0[zoom]) * scale, w, row: top + nodes[i].depth - nodes[zoom].depth, ancestor: false });
    }
    return rects;
  }

  draw() {
    const width = Math.max(200, this.box.clientWidth);
    const rects = this.place(width);
    const rows = rects.reduce((m, r) => Math.max(m, r.row + 1), 1);
    const height = rows * ROW + 1;
    const ctx = fitCanvas(this.canvas, width, height);
    const t = theme();
    ctx.clearRect(0, 0, width, height);
    ctx.font = t.font;
    ctx.textBaseline = "middle";
    for (const rect of rects) {
      const node = this.nodes[rect.i];
      const y = rect.row * ROW;
      const { fill, rgb } = changeColor(change(node), t);
      ctx.globalAlpha = rect.ancestor ? 0.45 : 1;
      ctx.fillStyle = fill;
      ctx.fillRect(rect.x, y, Math.max(0.5, rect.w - (rect.w > 3 ? 1 : 0)), ROW - 1);
      if (rect.w > 28) {
        const label = rect.i === 0 ? `all  ${bytes(node.before_bytes)} → ${bytes(node.after_bytes)}` : node.name;
        ctx.fillStyle = textOn(rgb);
        ctx.fillText(fitText(ctx, label, rect.w - 8), rect.x + 4, y + ROW / 2);
      }
      ctx.globalAlpha = 1;
    }
    const marked = this.focus >= 0 ? this.focus : this.hover;
    const mark = rects.find((r) => r.i === marked);
    if (mark) {
      ctx.strokeStyle = t.text;
      ctx.lineWidth = 2;
      ctx.strokeRect(mark.x + 1, mark.row * ROW + 1, Math.max(1, mark.w - 3), ROW - 3);
    }
    this.rects = rects;
  }

  hit(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const row = Math.floor((event.clientY - box.top) / ROW);
    return this.rects.find((r) => r.row === row && x >= r.x && x < r.x + r.w) ?? null;
  }

  tooltipFor(i) {
    const node = this.nodes[i];
    const root = this.nodes[0];
    const share = (n, total) => (total ? ` (${((100 * n) / total).toFixed(1)}%)` : "");
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
      ...sidesRows(node.before_bytes, node.after_bytes),
      i === 0
        ? null
        : h(
            "div",
            { className: "tip-note" },
            `of all: ${bytes(node.before_bytes)}${share(node.before_bytes, root.before_bytes)} → ${bytes(node.after_bytes)}${share(node.after_bytes, root.after_bytes)}`,
          ),
      h("div", { className: "tip-note" }, this.lay.children[i].length ? "Click to zoom in" : "A leaf: memory allocated right here"),
    ];
  }

  onMove(event) {
    const i = this.hit(event)?.i ?? -1;
    if (i !== this.hover) {
      this.hover = i;
      this.draw();
    }
    this.canvas.style.cursor = i >= 0 ? "pointer" : "default";
    if (i >= 0) showTip(event.clientX, event.clientY, this.tooltipFor(i));
    else hideTip();
  }

  onKey(event) {
    const current = this.focus >= 0 ? this.focus : this.zoom;
    const parent = this.nodes[current].parent;
    const visible = (i) => this.rects.some((r) => r.i === i);
    let next = -1;
    if (event.key === "ArrowUp" && parent >= 0) next = parent;
    else if (event.key === "ArrowDown") next = this.lay.children[current].find(visible) ?? -1;
    else if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      const siblings = parent >= 0 ? this.lay.children[parent].filter(visible) : [];
      next = siblings[siblings.indexOf(current) + (event.key === "ArrowLeft" ? -1 : 1)] ?? -1;
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      this.setZoom(current);
      return;
    } else if (event.key === "Escape" || event.key === "Backspace") {
      if (this.zoom !== 0) {
        event.preventDefault();
        event.stopPropagation();
        const up = this.nodes[this.zoom].parent;
        this.setZoom(up >= 0 && event.key === "Backspace" ? up : 0);
      }
      return;
    } else return;
    event.preventDefault();
    if (next < 0) return;
    this.focus = next;
    this.draw();
    const rect = this.rects.find((r) => r.i === next);
    const box = this.canvas.getBoundingClientRect();
    if (rect) showTip(box.left + rect.x + Math.min(rect.w / 2, 60), box.top + rect.row * ROW + ROW, this.tooltipFor(next));
  }

  /** What was drawn, in CSS px from the canvas's corner (the test hook's view). */
  drawn() {
    return this.rects.map((r) => {
      const node = this.nodes[r.i];
      return { name: node.name, before: node.before_bytes, after: node.after_bytes, x: r.x, y: r.row * ROW, w: r.w, h: ROW, ancestor: r.ancestor };
    });
  }
}
