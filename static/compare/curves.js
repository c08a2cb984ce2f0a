// @ts-check
// Both memory curves on one canvas (x: the share of each one's own trace, so runs of different
// lengths line up start to end), the compared moments marked; a click on a curve compares that
// side at that point. Beside it, the form that sets the moments by event index (the keyboard's way).

import { byteTicks } from "../lib/scale.js";
import { bytes, count } from "../lib/units.js";
import { fitCanvas } from "../views/canvas.js";
import { h } from "../views/dom.js";
import { theme } from "../views/theme.js";

/** The sample `f` (0…1) of the way through `values`, and its x as a share of the plot. */
function sampleAt(values, f) {
  const i = Math.min(values.length - 1, Math.round(f * (values.length - 1)));
  return { i, share: values.length === 1 ? 0.5 : i / (values.length - 1) };
}

export class Curves {
  /**
   * `sides`: the before and after `Totals` (their `at` and `events` place the compared
   * moments); `onPick(side, event)` is called when a curve is clicked.
   */
  constructor(box, before, after, names, sides, onPick) {
    this.box = box;
    this.series = [before, after];
    this.names = names;
    this.sides = sides;
    this.hoverX = null;
    this.hoverY = null;
    this.layout = null;
    this.canvas = h("canvas", { className: "cmp-canvas curves-canvas", role: "img" });
    const peaks = sides.map((t) => t.peak_allocated_bytes);
    this.canvas.setAttribute("aria-label", `Memory allocated over each trace: ${names[0]} peaks at ${bytes(peaks[0])}, ${names[1]} at ${bytes(peaks[1])}`);
    this.readout = h("div", { className: "curve-readout small", "aria-live": "polite" });
    box.append(h("div", { className: "cmp-chart" }, this.canvas), this.readout);
    const local = (e) => {
      const b = this.canvas.getBoundingClientRect();
      return [e.clientX - b.left, e.clientY - b.top];
    };
    this.canvas.addEventListener("mousemove", (e) => {
      [this.hoverX, this.hoverY] = local(e);
      this.draw();
    });
    this.canvas.addEventListener("click", (e) => {
      const pick = this.pickAt(...local(e));
      if (pick) onPick(pick.side, pick.event);
    });
    this.canvas.addEventListener("mouseleave", () => {
      this.hoverX = null;
      this.draw();
    });
    new ResizeObserver(() => this.draw()).observe(box);
  }

  draw() {
    const width = Math.max(200, this.box.clientWidth);
    const height = width < 500 ? 190 : 240;
    const ctx = fitCanvas(this.canvas, width, height);
    const t = theme();
    const pad = { left: 62, right: 14, top: 12, bottom: 26 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const max = Math.max(1, ...this.series[0], ...this.series[1]);
    const { ticks, top } = byteTicks(max, height < 200 ? 3 : 4);
    const xOf = (f) => pad.left + f * plotW;
    const yOf = (v) => pad.top + plotH - (v / top) * plotH;
    this.layout = { pad, plotW, plotH, width, yOf };
    ctx.clearRect(0, 0, width, height);
    ctx.font = t.font;
    ctx.fillStyle = t.muted;
    ctx.strokeStyle = t.line;
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const tick of ticks) {
      const y = Math.round(yOf(tick.value)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(pad.left, y);
      ctx.lineTo(width - pad.right, y);
      ctx.stroke();
      ctx.fillText(tick.label, pad.left - 8, y);
    }
    ctx.textBaseline = "top";
    for (const f of width < 500 ? [0, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1]) {
      ctx.textAlign = f === 0 ? "left" : f === 1 ? "right" : "center";
      ctx.fillText(f === 0 ? "start" : f === 1 ? (width < 500 ? "end" : "end of trace") : `${f * 100}%`, xOf(f), height - pad.bottom + 8);
    }
    const colors = [t.before, t.after];
    this.series.forEach((values, side) => {
      if (values.length === 0) return;
      const x = (i) => xOf(values.length === 1 ? 0.5 : i / (values.length - 1));
      ctx.beginPath();
      ctx.moveTo(x(0), yOf(0));
      for (const [i, v] of values.entries()) ctx.lineTo(x(i), yOf(v));
      ctx.lineTo(x(values.length - 1), yOf(0));
      ctx.closePath();
      ctx.globalAlpha = 0.12;
      ctx.fillStyle = colors[side];
      ctx.fill();
      ctx.globalAlpha = 1;
      ctx.beginPath();
      for (const [i, v] of values.entries()) {
        if (i === 0) ctx.moveTo(x(i), yOf(v));
        else ctx.lineTo(x(i), yOf(v));
      }
      ctx.strokeStyle = colors[side];
      ctx.lineWidth = 1.75;
      ctx.lineJoin = "round";
      ctx.stroke();
      // The peak.
      const peak = values.reduce((best, v, i) => (v > values[best] ? i : best), 0);
      ctx.beginPath();
      ctx.arc(x(peak), yOf(values[peak]), 3.5, 0, Math.PI * 2);
      ctx.fillStyle = colors[side];
      ctx.fill();
    });
    // The compared moments: a dashed line down from each side's curve.
    this.series.forEach((values, side) => {
      const i = this.sampleOf(side);
      if (i === null) return;
      const xm = Math.round(xOf(values.length === 1 ? 0.5 : i / (values.length - 1))) + 0.5;
      ctx.strokeStyle = colors[side];
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
      ctx.fillStyle = colors[side];
      ctx.fill();
    });
    const readout = [];
    if (this.hoverX !== null && this.hoverX >= pad.left && this.hoverX <= width - pad.right) {
      const f = (this.hoverX - pad.left) / plotW;
      ctx.strokeStyle = t.faint;
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(Math.round(this.hoverX) + 0.5, pad.top);
      ctx.lineTo(Math.round(this.hoverX) + 0.5, pad.top + plotH);
      ctx.stroke();
      ctx.setLineDash([]);
      readout.push(h("span", { className: "readout-at" }, `${(f * 100).toFixed(0)}% through each trace`));
      this.series.forEach((values, side) => {
        if (values.length === 0) return;
        const { i, share } = sampleAt(values, f);
        ctx.beginPath();
        ctx.arc(xOf(share), yOf(values[i]), 4, 0, Math.PI * 2);
        ctx.fillStyle = t.bg;
        ctx.fill();
        ctx.strokeStyle = colors[side];
        ctx.lineWidth = 2;
        ctx.stroke();
        readout.push(
          h(
            "span",
            { className: `readout-side side-${side === 0 ? "before" : "after"}` },
            h("span", { className: "side-dot" }),
            `${this.names[side]} ${bytes(values[i])}`,
          ),
        );
      });
      const pick = this.pickAt(this.hoverX, this.hoverY);
      if (pick) readout.push(h("span", { className: "muted" }, `click: compare ${this.names[pick.side]} at event ${count(pick.event)}`));
    } else {
      readout.push(
        h(
          "span",
          { className: "muted" },
          "Hover the chart to read both curves at the same point; click a curve to compare at that point of its run (the triangles mark the compared moments).",
        ),
      );
    }
    this.readout.replaceChildren(...readout);
  }

  /** Where side `side`'s curve is drawn a fraction `f` through its trace, in CSS px. */
  pointAt(side, f) {
    const values = this.series[side];
    if (!this.layout || values.length === 0) return null;
    const { pad, plotW, yOf } = this.layout;
    const { i, share } = sampleAt(values, f);
    return { x: pad.left + share * plotW, y: yOf(values[i]) };
  }

  /** The curve sample at which side `side`'s compared moment falls, or null. */
  sampleOf(side) {
    const values = this.series[side];
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
    this.series.forEach((values, side) => {
      const events = this.sides[side].events;
      if (values.length === 0 || events === 0) return;
      const { i } = sampleAt(values, f);
      const distance = Math.abs(yOf(values[i]) - y);
      if (best === null || distance < best.distance) {
        best = { side, distance, event: Math.min(events - 1, Math.floor((i * events) / values.length)) };
      }
    });
    return best;
  }
}

/** The form that sets each side's compared moment by event index (-1: before the first event). */
export function momentForm(device, names, moments) {
  const sides = [device.before, device.after];
  const inputs = sides.map((totals, side) =>
    h("input", {
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
  const form = h(
    "form",
    { className: "moment-form small", "aria-label": "Compared moments" },
    ...sides.map((totals, side) =>
      h(
        "label",
        { className: `moment-side side-${side === 0 ? "before" : "after"}` },
        h("span", { className: "side-dot" }),
        `${names[side]} at event `,
        inputs[side],
        ` of ${count(totals.events)}`,
      ),
    ),
    h("button", { type: "submit", className: "button button-small" }, "Compare at these moments"),
    moments.chosen ? h("button", { type: "button", className: "button button-small", dataset: { action: "peaks" } }, "Both at their peaks") : null,
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
