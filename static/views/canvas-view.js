// @ts-check
// What the segment map and the segment timeline share: a view of the snapshot page drawn on one
// canvas inside its tab's panel, repainted at most once a frame, with a tooltip on hover.

import { frameScheduler } from "./canvas.js";
import { hideTip } from "./tooltip.js";

export class CanvasView {
  /**
   * Finds the view's parts by their ids in `panel` (`#{prefix}-chart`, `-canvas`, `-error`) and
   * follows the pointer over the canvas: moves go to `onMove`; leaving forgets what was hovered,
   * hides the tooltip and repaints.
   * @param {import("./app.js").App} app the snapshot page's state and selected moment
   * @param {HTMLElement} panel the tab's panel
   * @param {string} prefix
   */
  constructor(app, panel, prefix) {
    this.app = app;
    this.panel = panel;
    this.chart = /** @type {HTMLElement} */ (panel.querySelector(`#${prefix}-chart`));
    this.canvas = /** @type {HTMLCanvasElement} */ (panel.querySelector(`#${prefix}-canvas`));
    this.error = /** @type {HTMLElement} */ (panel.querySelector(`#${prefix}-error`));
    /** What the pointer is over (the subclass's kind of thing), or null. */
    this.hover = null;
    this.draw = frameScheduler(() => this.paint());
    this.canvas.addEventListener("pointermove", (event) => this.onMove(event));
    this.canvas.addEventListener("pointerleave", () => {
      this.hover = null;
      hideTip();
      this.draw();
    });
  }

  /** Whether the view's tab is shown (a hidden one skips its work). */
  visible() {
    return !this.panel.hidden;
  }

  /** Draws the view; the subclass's. */
  paint() {}

  /**
   * Answers the pointer over the canvas; the subclass's.
   * @param {PointerEvent} _event
   */
  onMove(_event) {}
}
