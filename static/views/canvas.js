// @ts-check
// Canvas plumbing the views share: sizing for the device's pixel ratio, the placeholder a view
// shows before its first answer, and repaints coalesced to one per animation frame.

import { theme } from "./theme.js";

/**
 * Sizes `canvas` to `cssWidth` × `cssHeight` CSS px backed by device px, and returns its 2D
 * context scaled so drawing code works in CSS px.
 * @param {HTMLCanvasElement} canvas
 * @param {number} cssWidth
 * @param {number} cssHeight
 * @returns {CanvasRenderingContext2D}
 */
export function fitCanvas(canvas, cssWidth, cssHeight) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(cssWidth * dpr));
  const hgt = Math.max(1, Math.round(cssHeight * dpr));
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== hgt) canvas.height = hgt;
  const width = `${cssWidth}px`;
  const height = `${cssHeight}px`;
  if (canvas.style.width !== width) canvas.style.width = width;
  if (canvas.style.height !== height) canvas.style.height = height;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

/**
 * Fills a canvas with the background and `text` (what a view shows before its first answer).
 * @param {HTMLCanvasElement} canvas
 * @param {number} width CSS px
 * @param {number} height CSS px
 * @param {string} text
 */
export function paintPlaceholder(canvas, width, height, text) {
  const t = theme();
  const ctx = fitCanvas(canvas, width, height);
  ctx.fillStyle = t.bg;
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = t.muted;
  ctx.font = t.font;
  ctx.fillText(text, 8, 24);
}

/**
 * Runs `fn` at most once per animation frame.
 * @param {() => void} fn
 * @returns {() => void} call it to ask for a run
 */
export function frameScheduler(fn) {
  let pending = false;
  return () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      fn();
    });
  };
}
