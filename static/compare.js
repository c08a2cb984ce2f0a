// The compare page (`/compare/{a}/{b}`) and its picker (`/compare/{a}`).
//
// Everything the page shows is in its URL (the two ids, `ignore_lines`, and the moments `at_a`
// and `at_b` when they are not the peaks), so the link can be shared. The data is
// `/api/compare/{a}/{b}`: per device, totals side by side, a differential flame graph of live
// memory at each one's compared moment (its peak unless chosen on the curves), stacks by byte
// delta and both memory curves; plus the segment-level text of PyTorch's `_memory_viz.py
// compare`.

import { bytes } from "./lib/format.js";
import { copyLink, isShortcut, keyboardHelp, showTimes } from "./lib/page.js";

// ---------------------------------------------------------------------------------------------
// Small helpers (DOM, numbers, canvas).

/** `el("div", {className: "x"}, child, "text")`; never sets a style attribute (the CSP forbids it). */
function el(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key in element) element[key] = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/** "+1.50 GiB", "−512 MiB", "±0 B". */
function signedBytes(n) {
  if (n === 0) return "±0 B";
  return `${n > 0 ? "+" : "−"}${bytes(Math.abs(n))}`;
}

/** "+245%", "−3.1%", "new" (from 0), "±0%". */
function signedPercent(before, after) {
  if (before === after) return "±0%";
  if (before === 0) return "new";
  const p = ((after - before) * 100) / before;
  const abs = Math.abs(p);
  const text = abs >= 100 ? abs.toFixed(0) : abs >= 10 ? abs.toFixed(1) : abs.toFixed(abs >= 0.1 ? 1 : 2);
  return `${p > 0 ? "+" : "−"}${text}%`;
}

function count(n) {
  return Math.round(n).toLocaleString("en-US");
}

/** −1, 0 or 1 as a class name suffix. */
function trend(delta) {
  return delta > 0 ? "grow" : delta < 0 ? "shrink" : "same";
}

/** Sizes a canvas to CSS px backed by device px; returns a context drawing in CSS px. */
function fitCanvas(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(width * dpr));
  const hh = Math.max(1, Math.round(height * dpr));
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== hh) canvas.height = hh;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");

/** Colours from the stylesheets' custom properties (light or dark). */
function theme() {
  const style = getComputedStyle(document.documentElement);
  const v = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  return {
    dark: darkQuery.matches,
    panel: v("--panel", "#fff"),
    text: v("--text", "#1b2130"),
    muted: v("--muted", "#5f6b7e"),
    faint: v("--faint", "#8b95a5"),
    line: v("--line", "#e3e6ec"),
    before: v("--cmp-before", "#0c8599"),
    after: v("--cmp-after", "#7048e8"),
    grow: parseRgb(v("--cmp-grow", "rgb(224 72 60)")),
    shrink: parseRgb(v("--cmp-shrink", "rgb(60 110 220)")),
    same: parseRgb(v("--cmp-same", "rgb(222 226 233)")),
    mono: v("--mono", "monospace"),
    sans: v("--sans", "sans-serif"),
  };
}

/** "rgb(1 2 3)", "rgb(1, 2, 3)" or "#rrggbb" → [r, g, b]. */
function parseRgb(text) {
  const hex = /^#([0-9a-f]{6})$/i.exec(text);
  if (hex) return [0, 2, 4].map((i) => parseInt(hex[1].slice(i, i + 2), 16));
  const numbers = text.match(/[\d.]+/g)?.map(Number) ?? [128, 128, 128];
  return numbers.slice(0, 3);
}

function mix(from, to, t) {
  return from.map((c, i) => Math.round(c + (to[i] - c) * t));
}

/** A frame's fill: grey when unchanged, towards red as it grows and blue as it shrinks. */
function diffColor(before, after, colors) {
  const larger = Math.max(before, after);
  const relative = larger === 0 ? 0 : (after - before) / larger;
  const t = Math.min(1, Math.abs(relative) ** 0.6);
  const rgb = mix(colors.same, relative >= 0 ? colors.grow : colors.shrink, t);
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

/** Byte ticks from 0 to at least `max` in a unit that fits. */
function byteTicks(max, wanted = 4) {
  if (!(max > 0)) return { ticks: [0], top: 1 };
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(max) / Math.log(1024)));
  const raw = max / unit / wanted;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 2.5, 5, 10].find((m) => m * power >= raw) ?? 10) * power * unit;
  const top = Math.ceil(max / step - 1e-9) * step;
  const ticks = [];
  for (let v = 0; v <= top + step / 2; v += step) ticks.push(v);
  return { ticks, top };
}

function tickLabel(n) {
  if (n === 0) return "0";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number(value.toFixed(2))} ${units[unit]}`;
}

/** Frames are `file:line function` (or `file function`); `file` may be long. */
function splitFrame(frame) {
  const m = /^(\S+?)(?::(\d+))? (.+)$/.exec(frame);
  if (!m) return { file: "", line: "", name: frame };
  return { file: m[1], line: m[2] ?? "", name: m[3] };
}

/** Wrappers that say little about where memory went. */
const PLUMBING = new Set(["_wrapped_call_impl", "_call_impl", "wrapper", "__call__", "_fn", "inner", "decorate_context"]);

/** The innermost frame, and the innermost frame of other code that called it (skipping plumbing). */
function stackHeadline(frames) {
  const inner = frames[frames.length - 1] ?? "<non-python>";
  const innerFile = splitFrame(inner).file;
  for (let i = frames.length - 2; i >= 0; i -= 1) {
    const f = splitFrame(frames[i]);
    if (f.file !== innerFile && !PLUMBING.has(f.name) && f.file !== "module.py") return { inner, via: frames[i] };
  }
  return { inner, via: null };
}

// ---------------------------------------------------------------------------------------------
// The tooltip (one per page, follows the pointer inside the viewport).

const tooltip = el("div", { className: "cmp-tooltip", role: "tooltip", hidden: true });
document.body.append(tooltip);

function showTooltip(content, clientX, clientY) {
  tooltip.replaceChildren(...content);
  tooltip.hidden = false;
  const box = tooltip.getBoundingClientRect();
  const margin = 12;
  let x = clientX + 14;
  let y = clientY + 16;
  if (x + box.width + margin > window.innerWidth) x = Math.max(margin, clientX - box.width - 14);
  if (y + box.height + margin > window.innerHeight) y = Math.max(margin, clientY - box.height - 14);
  tooltip.style.left = `${x}px`;
  tooltip.style.top = `${y}px`;
}

function hideTooltip() {
  tooltip.hidden = true;
}

/** Before/after/change lines for a tooltip. */
function sidesLines(before, after) {
  const delta = after - before;
  return [
    el("div", { className: "tt-row" }, el("span", { className: "tt-key tt-before" }, "before"), el("span", { className: "tt-value" }, bytes(before))),
    el("div", { className: "tt-row" }, el("span", { className: "tt-key tt-after" }, "after"), el("span", { className: "tt-value" }, bytes(after))),
    el(
      "div",
      { className: `tt-row tt-delta ${trend(delta)}` },
      el("span", { className: "tt-key" }, "change"),
      el("span", { className: "tt-value" }, `${signedBytes(delta)} · ${signedPercent(before, after)}`),
    ),
  ];
}

// ---------------------------------------------------------------------------------------------
// The differential flame graph (an icicle: root on top).

const ROW = 20;

class DiffFlame {
  /** `tree`: depth-first nodes, root first, each `{name, before_bytes, after_bytes, parent, depth}`. */
  constructor(box, tree) {
    this.box = box;
    this.nodes = tree.map((n, i) => ({ ...n, index: i, children: [], size: Math.max(n.before_bytes, n.after_bytes) }));
    for (const node of this.nodes) if (node.parent >= 0) this.nodes[node.parent].children.push(node);
    this.zoom = 0;
    this.focus = null;
    this.hover = null;
    this.rects = [];
    this.canvas = el("canvas", { className: "cmp-canvas flame-canvas", tabIndex: 0, role: "img" });
    this.canvas.setAttribute("aria-label", "Differential flame graph of live memory at each snapshot's peak. Arrow keys move between frames, Enter zooms, Escape zooms out.");
    this.crumbs = el("nav", { className: "breadcrumb cmp-breadcrumb", "aria-label": "Zoomed frames" });
    box.append(this.crumbs, el("div", { className: "cmp-chart" }, this.canvas));
    this.canvas.addEventListener("mousemove", (e) => this.onMove(e));
    this.canvas.addEventListener("mouseleave", () => {
      this.hover = null;
      hideTooltip();
      this.draw();
    });
    this.canvas.addEventListener("click", (e) => {
      const rect = this.hit(e);
      if (rect) this.setZoom(rect.node.index);
    });
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
    this.canvas.addEventListener("blur", () => {
      this.focus = null;
      hideTooltip();
      this.draw();
    });
    this.resizer = new ResizeObserver(() => this.draw());
    this.resizer.observe(box);
  }

  /** Zooms to node `index` (the root: 0). */
  setZoom(index) {
    this.zoom = index;
    this.focus = null;
    hideTooltip();
    this.draw();
    this.renderCrumbs();
  }

  ancestors(index) {
    const chain = [];
    for (let n = this.nodes[index]; n; n = n.parent >= 0 ? this.nodes[n.parent] : null) chain.unshift(n);
    return chain;
  }

  renderCrumbs() {
    const chain = this.ancestors(this.zoom);
    this.crumbs.replaceChildren();
    if (chain.length <= 1) {
      this.crumbs.hidden = true;
      return;
    }
    this.crumbs.hidden = false;
    chain.forEach((node, i) => {
      if (i > 0) this.crumbs.append(el("span", { className: "crumb-sep", "aria-hidden": "true" }, "›"));
      const last = i === chain.length - 1;
      const label = node.index === 0 ? "All" : node.name;
      this.crumbs.append(
        last
          ? el("span", { className: "crumb current", "aria-current": "true" }, label)
          : el("button", { type: "button", className: "crumb", title: `Zoom out to ${label}`, onclick: () => this.setZoom(node.index) }, label),
      );
    });
  }

  /** Rectangles (x, w in CSS px) of what is drawn: the zoomed node's ancestors, then its subtree. */
  layout(width) {
    const rects = [];
    const chain = this.ancestors(this.zoom);
    chain.slice(0, -1).forEach((node, row) => rects.push({ node, x: 0, w: width, row, ancestor: true }));
    const top = chain.length - 1;
    const visit = (node, x, w, row) => {
      rects.push({ node, x, w, row, ancestor: false });
      if (node.children.length === 0) return;
      const sum = node.children.reduce((s, c) => s + c.size, 0);
      const total = Math.max(node.size, sum);
      if (total === 0) return;
      let cx = x;
      for (const child of node.children) {
        const cw = (w * child.size) / total;
        if (cw >= 0.35) visit(child, cx, cw, row + 1);
        cx += cw;
      }
    };
    visit(this.nodes[this.zoom], 0, width, top);
    return rects;
  }

  draw() {
    const width = Math.max(200, this.box.clientWidth);
    const rects = this.layout(width);
    const rows = rects.reduce((m, r) => Math.max(m, r.row + 1), 1);
    const height = rows * ROW + 1;
    const ctx = fitCanvas(this.canvas, width, height);
    const colors = theme();
    ctx.clearRect(0, 0, width, height);
    ctx.font = `12px ${colors.sans}`;
    ctx.textBaseline = "middle";
    for (const rect of rects) {
      const { node } = rect;
      const y = rect.row * ROW;
      const { fill, rgb } = diffColor(node.before_bytes, node.after_bytes, colors);
      ctx.globalAlpha = rect.ancestor ? 0.45 : 1;
      ctx.fillStyle = fill;
      const w = Math.max(0.5, rect.w - (rect.w > 3 ? 1 : 0));
      ctx.fillRect(rect.x, y, w, ROW - 1);
      if (rect.w > 28) {
        const label = node.index === 0 ? `all  ${bytes(node.before_bytes)} → ${bytes(node.after_bytes)}` : node.name;
        ctx.fillStyle = textOn(rgb);
        ctx.save();
        ctx.beginPath();
        ctx.rect(rect.x + 4, y, rect.w - 8, ROW);
        ctx.clip();
        const text = fitText(ctx, label, rect.w - 8);
        ctx.fillText(text, rect.x + 4, y + ROW / 2);
        ctx.restore();
      }
      ctx.globalAlpha = 1;
    }
    const marked = this.focus ?? this.hover;
    const mark = marked && rects.find((r) => r.node === marked);
    if (mark) {
      ctx.strokeStyle = colors.text;
      ctx.lineWidth = 2;
      ctx.strokeRect(mark.x + 1, mark.row * ROW + 1, Math.max(1, mark.w - 3), ROW - 3);
    }
    this.rects = rects;
    this.width = width;
  }

  hit(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const row = Math.floor((event.clientY - box.top) / ROW);
    return this.rects.find((r) => r.row === row && x >= r.x && x < r.x + r.w) ?? null;
  }

  tooltipFor(node) {
    const root = this.nodes[0];
    const share = (n, total) => (total ? ` (${((100 * n) / total).toFixed(1)}%)` : "");
    const f = splitFrame(node.name);
    return [
      el("div", { className: "tt-title" }, node.index === 0 ? "Everything live at the compared moments" : `${f.name}`),
      node.index === 0 ? null : el("div", { className: "tt-frame" }, f.line ? `${f.file}:${f.line}` : f.file),
      ...sidesLines(node.before_bytes, node.after_bytes),
      node.index === 0
        ? null
        : el("div", { className: "tt-note" }, `of all: ${bytes(node.before_bytes)}${share(node.before_bytes, root.before_bytes)} → ${bytes(node.after_bytes)}${share(node.after_bytes, root.after_bytes)}`),
      el("div", { className: "tt-hint" }, node.children.length ? "Click to zoom in" : "A leaf: memory allocated right here"),
    ];
  }

  onMove(event) {
    const rect = this.hit(event);
    const node = rect?.node ?? null;
    if (node !== this.hover) {
      this.hover = node;
      this.draw();
    }
    this.canvas.style.cursor = node ? "pointer" : "default";
    if (node) showTooltip(this.tooltipFor(node), event.clientX, event.clientY);
    else hideTooltip();
  }

  onKey(event) {
    const current = this.focus ?? this.nodes[this.zoom];
    const visible = (n) => this.rects.some((r) => r.node === n);
    let next = null;
    if (event.key === "ArrowUp" && current.parent >= 0) next = this.nodes[current.parent];
    else if (event.key === "ArrowDown") next = current.children.find(visible) ?? null;
    else if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      const siblings = current.parent >= 0 ? this.nodes[current.parent].children.filter(visible) : [];
      const i = siblings.indexOf(current);
      next = siblings[i + (event.key === "ArrowLeft" ? -1 : 1)] ?? null;
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      this.setZoom(current.index);
      return;
    } else if (event.key === "Escape" || event.key === "Backspace") {
      if (this.zoom !== 0) {
        event.preventDefault();
        event.stopPropagation();
        this.setZoom(this.nodes[this.zoom].parent >= 0 && event.key === "Backspace" ? this.nodes[this.zoom].parent : 0);
      }
      return;
    } else return;
    event.preventDefault();
    if (!next) return;
    this.focus = next;
    this.draw();
    const rect = this.rects.find((r) => r.node === next);
    const box = this.canvas.getBoundingClientRect();
    if (rect) showTooltip(this.tooltipFor(next), box.left + rect.x + Math.min(rect.w / 2, 60), box.top + rect.row * ROW + ROW);
  }
}

/** `text` cut with an ellipsis to fit `width` px. */
function fitText(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= width) lo = mid;
    else hi = mid - 1;
  }
  return lo === 0 ? "" : `${text.slice(0, lo)}…`;
}

// ---------------------------------------------------------------------------------------------
// Both memory curves on one canvas.

class Curves {
  /**
   * `sides`: the before and after `Totals` (their `at` and `events` place the compared
   * moments); `onPick(side, event)` is called when a curve is clicked.
   */
  constructor(box, before, after, names, sides, onPick) {
    this.box = box;
    this.before = before;
    this.after = after;
    this.names = names;
    this.sides = sides;
    this.hoverX = null;
    this.hoverY = null;
    this.layout = null;
    this.canvas = el("canvas", { className: "cmp-canvas curves-canvas", role: "img" });
    const peaks = sides.map((t) => t.peak_allocated_bytes);
    this.canvas.setAttribute("aria-label", `Memory allocated over each trace: ${names[0]} peaks at ${bytes(peaks[0])}, ${names[1]} at ${bytes(peaks[1])}`);
    this.readout = el("div", { className: "curve-readout small", "aria-live": "polite" });
    box.append(el("div", { className: "cmp-chart" }, this.canvas), this.readout);
    this.canvas.addEventListener("mousemove", (e) => {
      const b = this.canvas.getBoundingClientRect();
      this.hoverX = e.clientX - b.left;
      this.hoverY = e.clientY - b.top;
      this.draw();
    });
    this.canvas.addEventListener("click", (e) => {
      const b = this.canvas.getBoundingClientRect();
      const pick = this.pickAt(e.clientX - b.left, e.clientY - b.top);
      if (pick) onPick(pick.side, pick.event);
    });
    this.canvas.addEventListener("mouseleave", () => {
      this.hoverX = null;
      this.draw();
    });
    this.resizer = new ResizeObserver(() => this.draw());
    this.resizer.observe(box);
  }

  draw() {
    const width = Math.max(200, this.box.clientWidth);
    const height = width < 500 ? 190 : 240;
    const ctx = fitCanvas(this.canvas, width, height);
    const colors = theme();
    const pad = { left: 62, right: 14, top: 12, bottom: 26 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const max = Math.max(1, ...this.before, ...this.after);
    const { ticks, top } = byteTicks(max, height < 200 ? 3 : 4);
    const xOf = (f) => pad.left + f * plotW;
    const yOf = (v) => pad.top + plotH - (v / top) * plotH;
    this.layout = { pad, plotW, plotH, width, yOf };
    ctx.clearRect(0, 0, width, height);
    ctx.font = `11px ${colors.sans}`;
    ctx.fillStyle = colors.muted;
    ctx.strokeStyle = colors.line;
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const t of ticks) {
      const y = Math.round(yOf(t)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(pad.left, y);
      ctx.lineTo(width - pad.right, y);
      ctx.stroke();
      ctx.fillText(tickLabel(t), pad.left - 8, y);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const f of width < 500 ? [0, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1]) {
      ctx.textAlign = f === 0 ? "left" : f === 1 ? "right" : "center";
      ctx.fillText(f === 0 ? "start" : f === 1 ? (width < 500 ? "end" : "end of trace") : `${f * 100}%`, xOf(f), height - pad.bottom + 8);
    }
    const series = [
      [this.before, colors.before],
      [this.after, colors.after],
    ];
    for (const [values, color] of series) {
      if (values.length === 0) continue;
      const n = values.length;
      const x = (i) => xOf(n === 1 ? 0.5 : i / (n - 1));
      ctx.beginPath();
      ctx.moveTo(x(0), yOf(0));
      values.forEach((v, i) => ctx.lineTo(x(i), yOf(v)));
      ctx.lineTo(x(n - 1), yOf(0));
      ctx.closePath();
      ctx.globalAlpha = 0.12;
      ctx.fillStyle = color;
      ctx.fill();
      ctx.globalAlpha = 1;
      ctx.beginPath();
      values.forEach((v, i) => (i === 0 ? ctx.moveTo(x(i), yOf(v)) : ctx.lineTo(x(i), yOf(v))));
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.75;
      ctx.lineJoin = "round";
      ctx.stroke();
      // The peak.
      let peak = 0;
      values.forEach((v, i) => {
        if (v > values[peak]) peak = i;
      });
      ctx.beginPath();
      ctx.arc(x(peak), yOf(values[peak]), 3.5, 0, Math.PI * 2);
      ctx.fillStyle = color;
      ctx.fill();
    }
    // The compared moments: a dashed line down from each side's curve.
    series.forEach(([values, color], side) => {
      const i = this.sampleOf(side);
      if (i === null) return;
      const xm = Math.round(xOf(values.length === 1 ? 0.5 : i / (values.length - 1))) + 0.5;
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.25;
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(xm, yOf(values[i]));
      ctx.lineTo(xm, pad.top + plotH);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.beginPath();
      ctx.moveTo(xm - 4, pad.top + plotH + 1);
      ctx.lineTo(xm + 4, pad.top + plotH + 1);
      ctx.lineTo(xm, pad.top + plotH - 6);
      ctx.closePath();
      ctx.fillStyle = color;
      ctx.fill();
    });
    const readout = [];
    if (this.hoverX !== null && this.hoverX >= pad.left && this.hoverX <= width - pad.right) {
      const f = (this.hoverX - pad.left) / plotW;
      ctx.strokeStyle = colors.faint;
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(Math.round(this.hoverX) + 0.5, pad.top);
      ctx.lineTo(Math.round(this.hoverX) + 0.5, pad.top + plotH);
      ctx.stroke();
      ctx.setLineDash([]);
      readout.push(el("span", { className: "readout-at" }, `${(f * 100).toFixed(0)}% through each trace`));
      series.forEach(([values, color], side) => {
        if (values.length === 0) return;
        const i = Math.min(values.length - 1, Math.round(f * (values.length - 1)));
        ctx.beginPath();
        ctx.arc(xOf(values.length === 1 ? 0.5 : i / (values.length - 1)), yOf(values[i]), 4, 0, Math.PI * 2);
        ctx.fillStyle = colors.panel;
        ctx.fill();
        ctx.strokeStyle = color;
        ctx.lineWidth = 2;
        ctx.stroke();
        readout.push(el("span", { className: `readout-side side-${side === 0 ? "before" : "after"}` }, el("span", { className: "side-dot" }), `${this.names[side]} ${bytes(values[i])}`));
      });
      const pick = this.pickAt(this.hoverX, this.hoverY);
      if (pick) readout.push(el("span", { className: "muted" }, `click: compare ${this.names[pick.side]} at event ${count(pick.event)}`));
    } else {
      readout.push(el("span", { className: "muted" }, "Hover the chart to read both curves at the same point; click a curve to compare at that point of its run (the triangles mark the compared moments)."));
    }
    this.readout.replaceChildren(...readout);
  }

  /** Where side `side`'s curve is drawn a fraction `f` through its trace, in CSS px. */
  pointAt(side, f) {
    const values = side === 0 ? this.before : this.after;
    if (!this.layout || values.length === 0) return null;
    const { pad, plotW, yOf } = this.layout;
    const i = Math.min(values.length - 1, Math.round(f * (values.length - 1)));
    return { x: pad.left + (values.length === 1 ? 0.5 : i / (values.length - 1)) * plotW, y: yOf(values[i]) };
  }

  /** The curve sample at which side `side`'s compared moment falls, or null. */
  sampleOf(side) {
    const values = side === 0 ? this.before : this.after;
    const { at, events } = this.sides[side];
    if (values.length === 0 || at === null || at === undefined || events === 0) return null;
    return Math.min(values.length - 1, Math.floor((at * values.length) / events));
  }

  /** The side whose curve is nearest (x, y) and the first event of the sample there, or null. */
  pickAt(x, y) {
    if (!this.layout) return null;
    const { pad, plotW, plotH, yOf } = this.layout;
    if (x < pad.left - 4 || x > pad.left + plotW + 4 || y < pad.top - 8 || y > pad.top + plotH + 8) return null;
    const f = Math.min(1, Math.max(0, (x - pad.left) / plotW));
    let best = null;
    [this.before, this.after].forEach((values, side) => {
      const events = this.sides[side].events;
      if (values.length === 0 || events === 0) return;
      const i = Math.min(values.length - 1, Math.round(f * (values.length - 1)));
      const distance = Math.abs(yOf(values[i]) - y);
      if (best === null || distance < best.distance) {
        best = { side, distance, event: Math.min(events - 1, Math.floor((i * events) / values.length)) };
      }
    });
    return best;
  }
}

/** The form that sets each side's compared moment by event index (the keyboard's way). */
function momentForm(device, names, moments) {
  const sides = [device.before, device.after];
  const inputs = sides.map((totals, side) =>
    el("input", {
      type: "number",
      className: "moment-input",
      min: -1,
      max: Math.max(-1, totals.events - 1),
      step: 1,
      value: totals.at ?? -1,
      disabled: totals.events === 0,
      "aria-label": `${names[side]}: compare at event index (-1: before the first event)`,
    }),
  );
  const form = el(
    "form",
    { className: "moment-form small", "aria-label": "Compared moments" },
    ...sides.map((totals, side) =>
      el(
        "label",
        { className: `moment-side side-${side === 0 ? "before" : "after"}` },
        el("span", { className: "side-dot" }),
        `${names[side]} at event `,
        inputs[side],
        ` of ${count(totals.events)}`,
      ),
    ),
    el("button", { type: "submit", className: "button button-small" }, "Compare at these moments"),
    moments.chosen ? el("button", { type: "button", className: "button button-small", dataset: { action: "peaks" } }, "Both at their peaks") : null,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = inputs.map((input, side) => {
      const n = Math.round(Number(input.value));
      return Number.isFinite(n) ? Math.min(Math.max(n, -1), sides[side].events - 1) : null;
    });
    moments.go(values[0], values[1]);
  });
  form.querySelector("[data-action=peaks]")?.addEventListener("click", () => moments.go(null, null));
  return form;
}

// ---------------------------------------------------------------------------------------------
// One device's comparison.

const TOTALS = [
  ["Peak allocated", "peak_allocated_bytes", "The most memory tensors held at once: requested bytes of live allocations, replayed through the trace as PyTorch's viewer does.", bytes],
  ["Peak reserved", "peak_reserved_bytes", "The most memory the caching allocator held from CUDA at once (segments, including cached free blocks): roughly what nvidia-smi shows, without the CUDA context.", bytes],
  ["Allocated at snapshot", "allocated_bytes_at_snapshot", "Requested bytes of live tensors when the snapshot was taken.", bytes],
  ["Reserved at snapshot", "reserved_bytes_at_snapshot", "Bytes held in segments when the snapshot was taken.", bytes],
  ["Allocations", "allocations", "Allocations made during the recorded trace.", count],
];

function totalsCards(device, names, growth) {
  const grid = el("div", { className: "cmp-totals" });
  for (const [label, key, help, format] of TOTALS) {
    const before = device.before[key];
    const after = device.after[key];
    const delta = after - before;
    const larger = Math.max(before, after, 1);
    const percent = key === "peak_allocated_bytes" && growth !== null ? signedPercentFrom(growth) : signedPercent(before, after);
    const deltaText = format === bytes ? signedBytes(delta) : `${delta > 0 ? "+" : delta < 0 ? "−" : "±"}${count(Math.abs(delta))}`;
    const barBefore = el("span", { className: "tbar tbar-before" });
    const barAfter = el("span", { className: "tbar tbar-after" });
    barBefore.style.width = `${(100 * before) / larger}%`;
    barAfter.style.width = `${(100 * after) / larger}%`;
    grid.append(
      el(
        "div",
        {
          className: `cmp-total ${key === "peak_allocated_bytes" ? "cmp-total-peak" : ""}`,
          title: `${help}\n${names[0]}: ${format(before)}\n${names[1]}: ${format(after)}\nChange: ${deltaText} (${percent})`,
          dataset: { total: key },
        },
        el("span", { className: "label" }, label),
        el(
          "span",
          { className: "pair" },
          el("span", { className: "v v-before", dataset: { side: "before" } }, format(before)),
          el("span", { className: "pair-arrow", "aria-label": "to" }, "→"),
          el("span", { className: "v v-after", dataset: { side: "after" } }, format(after)),
        ),
        el("span", { className: "bars", "aria-hidden": "true" }, el("span", { className: "track" }, barBefore), el("span", { className: "track" }, barAfter)),
        el("span", { className: `delta ${trend(delta)}` }, el("span", { className: "delta-bytes" }, deltaText), el("span", { className: "delta-percent", dataset: { percent: key } }, percent)),
      ),
    );
  }
  return grid;
}

function signedPercentFrom(p) {
  if (Math.abs(p) < 0.005) return "±0%";
  const abs = Math.abs(p);
  return `${p > 0 ? "+" : "−"}${abs >= 100 ? abs.toFixed(0) : abs.toFixed(1)}%`;
}

function momentText(totals) {
  return totals.at === null || totals.at === undefined ? "before the first event" : `event ${count(totals.at)}`;
}

const STACKS_SHOWN = 12;

function stacksList(stacks) {
  const largest = Math.max(1, ...stacks.map((s) => Math.abs(s.delta_bytes)));
  const list = el("ol", { className: "cmp-stacks", "aria-label": "Stacks by change in live bytes, largest growth first" });
  stacks.forEach((stack, i) => {
    const { inner, via } = stackHeadline(stack.frames);
    const bar = el("span", { className: `dbar ${trend(stack.delta_bytes)}` });
    bar.style.width = `${Math.max(1.5, (100 * Math.abs(stack.delta_bytes)) / largest)}%`;
    const frames = el(
      "ol",
      { className: "frames", "aria-label": "Stack, innermost call first" },
      [...stack.frames].reverse().map((f) => el("li", { title: f }, f)),
    );
    const allocations = `${count(stack.before_allocations)} → ${count(stack.after_allocations)} allocations`;
    const row = el(
      "li",
      { className: "cmp-stack", hidden: i >= STACKS_SHOWN },
      el(
        "details",
        {},
        el(
          "summary",
          { title: `${signedBytes(stack.delta_bytes)}: ${bytes(stack.before_bytes)} before, ${bytes(stack.after_bytes)} after, ${allocations}. Click for the whole stack.` },
          el("span", { className: `cs-delta ${trend(stack.delta_bytes)}` }, signedBytes(stack.delta_bytes)),
          el("span", { className: "cs-sides" }, `${bytes(stack.before_bytes)} → ${bytes(stack.after_bytes)}`),
          el("span", { className: "cs-meter", "aria-hidden": "true" }, bar),
          el("span", { className: "cs-where" }, el("span", { className: "cs-inner" }, inner), via ? el("span", { className: "cs-via" }, `via ${via}`) : null),
          el("span", { className: "cs-count" }, allocations),
        ),
        frames,
      ),
    );
    list.append(row);
  });
  const wrap = el("div", {}, list);
  if (stacks.length > STACKS_SHOWN) {
    const more = el("button", { type: "button", className: "button button-small show-more" }, `Show all ${stacks.length} stacks`);
    more.addEventListener("click", () => {
      for (const row of list.children) row.hidden = false;
      more.remove();
    });
    wrap.append(more);
  }
  return wrap;
}

const flames = [];
const charts = [];

function deviceSection(device, answer, multiple, moments) {
  const names = [answer.before.name, answer.after.name];
  const title =
    device.before_device === device.after_device ? `cuda:${device.before_device}` : `cuda:${device.before_device} → cuda:${device.after_device}`;
  const article = el("article", { className: "cmp-device", id: `device-${device.before_device}-${device.after_device}` });
  if (multiple || device.before_device !== device.after_device) article.append(el("h2", { className: "device-title" }, title));
  article.append(totalsCards(device, names, device.peak_growth_percent));

  // The differential flame graph.
  const root = device.tree[0] ?? { before_bytes: 0, after_bytes: 0 };
  const flameCard = el(
    "section",
    { className: "cmp-card" },
    el(
      "div",
      { className: "section-head" },
      el(
        "h3",
        {
          title:
            "Live allocations at each snapshot's peak, merged by stack (frames matched by file, line and function; root on top). A frame's width is the larger of its two sides. Red: it holds more after; blue: less; the stronger the colour, the larger the change relative to the frame.",
        },
        moments.chosen ? "What is live at the chosen moments, and what changed" : "What is live at the peak, and what changed",
      ),
      el(
        "div",
        { className: "flame-legend small", "aria-label": "Colour legend" },
        el("span", {}, "shrank"),
        el("span", { className: "legend-ramp", "aria-hidden": "true" }),
        el("span", {}, "grew"),
      ),
    ),
    el(
      "p",
      { className: "muted small section-help" },
      `${names[0]} at ${momentText(device.before)} holds ${bytes(root.before_bytes)}; ${names[1]} at ${momentText(device.after)} holds ${bytes(root.after_bytes)} (${signedBytes(root.after_bytes - root.before_bytes)}).`,
    ),
  );
  const flameBox = el("div", { className: "flame-box" });
  flameCard.append(flameBox);
  flameCard.append(el("p", { className: "hint muted small" }, "Width: the larger side. Hover a frame for both sides; click to zoom in, the breadcrumb or Esc to zoom out. With the graph focused, arrow keys move between frames."));
  article.append(flameCard);

  // Curves.
  const curvesCard = el(
    "section",
    { className: "cmp-card" },
    el(
      "div",
      { className: "section-head" },
      el("h3", { title: "Bytes allocated over each trace, resampled to the same width: x is the share of each one's own trace, so runs of different lengths line up start to end" }, "Memory over time"),
      el(
        "ul",
        { className: "curve-legend small", "aria-label": "Legend" },
        el("li", { className: "side-before" }, el("span", { className: "side-dot" }), `${names[0]} · peak ${bytes(device.before.peak_allocated_bytes)}`),
        el("li", { className: "side-after" }, el("span", { className: "side-dot" }), `${names[1]} · peak ${bytes(device.after.peak_allocated_bytes)}`),
      ),
    ),
  );
  const curvesBox = el("div", { className: "curves-box" });
  curvesCard.append(curvesBox, momentForm(device, names, moments));
  article.append(curvesCard);

  // Stacks.
  const grew = device.stacks.filter((s) => s.delta_bytes > 0).length;
  const shrank = device.stacks.length - grew;
  const stacksCard = el(
    "section",
    { className: "cmp-card" },
    el(
      "div",
      { className: "section-head" },
      el("h3", { title: "Live bytes at the compared moments by the stack that allocated them; the largest growth first, then the largest shrink" }, "Stacks by change"),
      el("span", { className: "muted small" }, `${grew} grew · ${shrank} shrank${answer.diff.ignore_lines ? " · line numbers ignored" : ""}`),
    ),
  );
  if (device.stacks.length === 0) stacksCard.append(el("p", { className: "muted" }, "No stack holds a different number of bytes."));
  else stacksCard.append(stacksList(device.stacks));
  article.append(stacksCard);

  // Draw once in the document (the boxes need a width).
  queueMicrotask(() => {
    const flame = new DiffFlame(flameBox, device.tree);
    flame.draw();
    flames.push(flame);
    const pick = (side, event) => (side === 0 ? moments.go(event, moments.at[1]) : moments.go(moments.at[0], event));
    const curves = new Curves(curvesBox, device.before_curve, device.after_curve, names, [device.before, device.after], pick);
    curves.draw();
    charts.push(curves);
  });
  return article;
}

// ---------------------------------------------------------------------------------------------
// torch's compare: `only_before = [...]`, `only_after = [...]`, then folded block lines.

function parseTorchCompare(text) {
  const lines = text.split("\n");
  const header = {};
  const segments = { only_before: new Map(), only_after: new Map() };
  let folded = 0;
  for (const line of lines) {
    const head = /^(only_before|only_after) = \[(.*)\]$/.exec(line);
    if (head) {
      header[head[1]] = head[2].trim() ? head[2].split(",").map((s) => s.trim()) : [];
      continue;
    }
    const m = /^(only_before|only_after);stream_(\d+);seg_(\d+);([a-z_]+);.* (\d+)$/.exec(line);
    if (!m) continue;
    folded += 1;
    const [, side, stream, address, state, size] = m;
    const map = segments[side];
    const seg = map.get(address) ?? { address, stream, total: 0, live: 0 };
    seg.total += Number(size);
    if (state.startsWith("active")) seg.live += Number(size);
    map.set(address, seg);
  }
  return { header, segments, folded };
}

function hexAddress(decimal) {
  try {
    return `0x${BigInt(decimal).toString(16)}`;
  } catch {
    return decimal;
  }
}

function torchSection(text, names) {
  const section = document.getElementById("torch-compare");
  const { header, segments, folded } = parseTorchCompare(text);
  const grid = document.getElementById("torch-only");
  grid.replaceChildren();
  for (const [key, side, name] of [
    ["only_before", "before", names[0]],
    ["only_after", "after", names[1]],
  ]) {
    const addresses = header[key] ?? [];
    const segs = segments[key];
    const total = [...segs.values()].reduce((s, x) => s + x.total, 0);
    const live = [...segs.values()].reduce((s, x) => s + x.live, 0);
    const rows = addresses.map((a) => {
      const seg = segs.get(a);
      return el(
        "li",
        { title: `Segment at ${hexAddress(a)} (${a})${seg ? `, stream ${seg.stream}: ${bytes(seg.total)}, ${bytes(seg.live)} in live blocks` : ""}` },
        el("code", {}, hexAddress(a)),
        el("span", { className: "seg-size" }, seg ? bytes(seg.total) : ""),
        el("span", { className: "seg-live muted" }, seg ? `${bytes(seg.live)} live` : ""),
      );
    });
    const list = el("ol", { className: "seg-list" }, rows);
    grid.append(
      el(
        "div",
        { className: `only only-${side}`, dataset: { only: key } },
        el("h4", {}, el("span", { className: `side-dot` }), `Only in ${name} `, el("span", { className: "muted" }, `(${key})`)),
        el("p", { className: "only-count" }, el("strong", { dataset: { count: key } }, count(addresses.length)), ` ${addresses.length === 1 ? "segment" : "segments"}`, addresses.length ? ` · ${bytes(total)}, ${bytes(live)} in live blocks` : ""),
        addresses.length ? list : el("p", { className: "muted small" }, "None: every segment of this snapshot is in the other one too."),
      ),
    );
  }
  document.getElementById("torch-lines").textContent = `${count(folded)} lines`;
  const pre = document.getElementById("torch-text");
  const details = section.querySelector("details.folded");
  // Filled on first opening: the text can be long.
  details.addEventListener("toggle", () => {
    if (details.open && !pre.textContent) pre.textContent = text;
  });
  const download = document.getElementById("torch-download");
  download.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
  download.download = `compare-${names[0]}-${names[1]}.txt`.replace(/[^\w.-]+/g, "_");
  section.hidden = false;
}

// ---------------------------------------------------------------------------------------------
// The page.

async function comparePage(root) {
  const a = root.dataset.before;
  const b = root.dataset.after;
  const params = new URLSearchParams(window.location.search);
  const ignore = ["1", "true", "yes", "on"].includes(params.get("ignore_lines") ?? "");
  const checkbox = document.getElementById("ignore-lines");
  checkbox.checked = ignore;
  const reloadWith = (ignoreLines) => {
    const url = new URL(window.location.href);
    if (ignoreLines) url.searchParams.set("ignore_lines", "1");
    else url.searchParams.delete("ignore_lines");
    window.location.assign(url.toString());
  };
  checkbox.addEventListener("change", () => reloadWith(checkbox.checked));
  // The compared moments: event indices from the URL (-1: before the first event), else peaks.
  const momentParam = (name) => {
    const value = params.get(name);
    return value !== null && /^-?\d+$/.test(value) ? Number(value) : null;
  };
  const moments = {
    at: [momentParam("at_a"), momentParam("at_b")],
    get chosen() {
      return this.at[0] !== null || this.at[1] !== null;
    },
    go(before, after) {
      const url = new URL(window.location.href);
      url.searchParams.delete("at_a");
      url.searchParams.delete("at_b");
      for (const [name, value] of [["at_a", before], ["at_b", after]]) {
        if (value !== null && value !== undefined) url.searchParams.set(name, String(value));
      }
      window.location.assign(url.toString());
    },
  };
  const swap = document.getElementById("swap");
  const swapped = new URLSearchParams(params);
  swapped.delete("at_a");
  swapped.delete("at_b");
  if (params.has("at_b")) swapped.set("at_a", params.get("at_b"));
  if (params.has("at_a")) swapped.set("at_b", params.get("at_a"));
  swap.href = `/compare/${b}/${a}${swapped.size ? `?${swapped}` : ""}`;
  document.getElementById("copy-link").addEventListener("click", () => copyLink());

  document.addEventListener("keydown", (event) => {
    if (!isShortcut(event)) return;
    if (event.key === "s") swap.click();
    else if (event.key === "i") reloadWith(!checkbox.checked);
    else if (event.key === "c") document.getElementById("copy-link").click();
    else if (event.key === "f") {
      event.preventDefault();
      flames[0]?.canvas.focus();
    } else if (event.key === "m") {
      event.preventDefault();
      document.querySelector(".moment-input:not([disabled])")?.focus();
    } else if (event.key === "p" && moments.chosen) {
      moments.go(null, null);
    } else if (event.key === "Escape") {
      for (const flame of flames) if (flame.zoom !== 0) flame.setZoom(0);
    }
  });
  keyboardHelp([
    ["s", "Swap before and after"],
    ["i", "Ignore line numbers (or not)"],
    ["c", "Copy the link"],
    ["f", "Focus the flame graph"],
    ["m", "Choose the compared moments (event indices)"],
    ["p", "Compare both at their peaks again"],
    ["← → ↑ ↓", "Move between frames (flame graph focused)"],
    ["Enter", "Zoom into the frame"],
    ["Esc", "Zoom out"],
    ["?", "Show these keys"],
  ]);

  const loading = document.getElementById("compare-loading");
  const errorBox = document.getElementById("compare-error");
  const apiParams = new URLSearchParams();
  if (ignore) apiParams.set("ignore_lines", "1");
  if (moments.at[0] !== null) apiParams.set("at_a", String(moments.at[0]));
  if (moments.at[1] !== null) apiParams.set("at_b", String(moments.at[1]));
  const query = apiParams.size ? `?${apiParams}` : "";
  let answer;
  try {
    const response = await fetch(`/api/compare/${a}/${b}${query}`);
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new Error(body?.error?.message ?? `the server answered ${response.status} ${response.statusText}`);
    answer = body;
  } catch (error) {
    loading.hidden = true;
    errorBox.textContent = `Could not compare these snapshots: ${error.message}`;
    errorBox.hidden = false;
    return;
  }
  loading.hidden = true;
  const names = [answer.before.name, answer.after.name];
  const devices = document.getElementById("devices");
  if (answer.diff.devices.length === 0) {
    devices.append(el("div", { className: "banner banner-note" }, "Neither snapshot has a device with recorded memory: nothing to compare."));
  }
  const multiple = answer.diff.devices.length > 1;
  for (const device of answer.diff.devices) devices.append(deviceSection(device, answer, multiple, moments));
  torchSection(answer.torch_compare ?? "", names);
  root.dataset.ready = "true";
}

function pickerPage(root) {
  const me = root.dataset.before;
  const links = [...root.querySelectorAll("a[data-other]")];
  const buttons = [...root.querySelectorAll("[data-role]")];
  const setRole = (role) => {
    for (const button of buttons) button.setAttribute("aria-pressed", String(button.dataset.role === role));
    const title = root.querySelector(".compare-title .side");
    title?.classList.toggle("side-before", role === "before");
    title?.classList.toggle("side-after", role === "after");
    for (const link of links) {
      const other = link.dataset.other;
      link.href = role === "before" ? `/compare/${me}/${other}` : `/compare/${other}/${me}`;
    }
  };
  for (const button of buttons) button.addEventListener("click", () => setRole(button.dataset.role));

  const search = document.getElementById("search");
  const rows = [...root.querySelectorAll("tbody tr")];
  const noMatch = document.getElementById("no-match");
  const filter = () => {
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const row of rows) {
      row.hidden = !words.every((w) => row.dataset.search.includes(w));
      if (!row.hidden) shown += 1;
    }
    if (noMatch) noMatch.hidden = shown > 0;
  };
  search?.addEventListener("input", filter);
  search?.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      search.value = "";
      filter();
      search.blur();
    } else if (event.key === "Enter") {
      rows.find((r) => !r.hidden)?.querySelector("a.name")?.click();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (!isShortcut(event)) return;
    if (event.key === "/" && search) {
      event.preventDefault();
      search.focus();
    } else if (event.key === "b") setRole("before");
    else if (event.key === "a") setRole("after");
  });
  keyboardHelp([
    ["/", "Filter the list"],
    ["Enter", "Compare with the first match (in the filter)"],
    ["b", "This snapshot is the before side"],
    ["a", "This snapshot is the after side"],
    ["?", "Show these keys"],
  ]);
}

showTimes();
const compareRoot = document.getElementById("compare");
const pickerRoot = document.getElementById("picker");
if (compareRoot) comparePage(compareRoot);
else if (pickerRoot) pickerPage(pickerRoot);
// Redraw canvases when the colour scheme changes.
darkQuery.addEventListener("change", () => [...flames, ...charts].forEach((chart) => chart.draw()));

/** For tests and the curious: what the flame graphs drew, in CSS px from each canvas's corner. */
window.snapviewCompare = {
  curvePoint: (side, f, i = 0) => charts[i]?.pointAt(side, f) ?? null,
  flameRects: (i = 0) =>
    (flames[i]?.rects ?? []).map((r) => ({ name: r.node.name, before: r.node.before_bytes, after: r.node.after_bytes, x: r.x, y: r.row * ROW, w: r.w, h: ROW, ancestor: r.ancestor })),
};
