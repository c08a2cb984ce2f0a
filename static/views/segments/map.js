// @ts-check
// Painting the segment map: segments laid end to end on a tape that wraps at the canvas's
// width, blocks in their allocation's colour, and the pieces kept for hit-testing.

import { bandColor } from "../../lib/color.js";
import { fitCanvas, paintPlaceholder } from "../canvas.js";
import { theme } from "../theme.js";

/** @typedef {import("../segments.js").SegmentsView} SegmentsView */

export const ROW = 22;
export const ROW_GAP = 8;
const SEGMENT_GAP = 3;

/** @param {SegmentsView} view */
export function paintMap(view) {
  if (!view.visible()) return;
  const width = Math.max(320, view.chart.clientWidth);
  const t = theme();
  if (!view.data) {
    paintPlaceholder(view.canvas, width, 60, "Loading the segment map…");
    return;
  }
  const segments = view.data.segments;
  const reserved = segments.reduce((sum, s) => sum + s.size, 0);
  const rows = Math.max(4, Math.min(32, Math.ceil(segments.length / 7)));
  const usable = width * rows - segments.length * SEGMENT_GAP;
  const perPx = Math.max(1, reserved / Math.max(1, usable));
  // The tape: segments laid end to end at zoom 1, wrapping at the right edge. Zoomed, the
  // tape is `zoom` times longer and the canvas shows the part from `offset` on.
  let cursor = 0;
  const placed = segments.map((s) => {
    const length = Math.max(2, s.size / perPx);
    const at = cursor;
    cursor += length + SEGMENT_GAP;
    return { segment: s, at, length };
  });
  const tape = Math.max(width, Math.ceil(cursor / width) * width);
  const zoom = view.zoom;
  const offset = Math.max(0, Math.min(tape * zoom - tape, view.offset));
  view.offset = offset;
  // A piece of the zoomed tape [start, start + length) as drawn rows, clipped to the view.
  const place = (start, length) => {
    let x = start * zoom - offset;
    let left = length * zoom;
    if (x + left <= 0 || x >= tape) return [];
    if (x < 0) {
      left += x;
      x = 0;
    }
    left = Math.min(left, tape - x);
    const pieces = [];
    while (left > 0.01) {
      const row = Math.floor(x / width);
      const inRow = x - row * width;
      const w = Math.min(left, width - inRow);
      pieces.push({ x: inRow, row, w });
      x += w;
      left -= w;
    }
    return pieces;
  };
  const totalRows = Math.max(1, Math.ceil(tape / width));
  const height = totalRows * (ROW + ROW_GAP);
  const ctx = fitCanvas(view.canvas, width, height);
  ctx.fillStyle = t.bg;
  ctx.fillRect(0, 0, width, height);
  const pieces = [];
  const y = (row) => row * (ROW + ROW_GAP) + 2;
  const alloc = view.app.store.get().alloc;
  const touched = view.touched();
  const touchedBoxes = [];
  view.touchedAt = null;
  for (const [si, p] of placed.entries()) {
    const s = p.segment;
    const scale = p.length / s.size;
    const segmentPieces = place(p.at, p.length);
    for (const piece of segmentPieces) {
      ctx.fillStyle = t.free;
      ctx.fillRect(piece.x, y(piece.row), piece.w, ROW);
    }
    const segmentTouched = touched && /^segment_/.test(touched.action) && touched.address >= s.address && touched.address < s.address + s.size;
    if (segmentTouched) {
      view.touchedAt = p.at + (touched.address - s.address) * scale;
      for (const piece of place(view.touchedAt, Math.max(1 / zoom, Math.min(touched.size, s.size) * scale))) touchedBoxes.push({ ...piece, y: y(piece.row) });
    }
    if (segmentPieces.length === 0) continue;
    for (const [bi, block] of s.blocks.entries()) {
      const offsetPx = (block.address - s.address) * scale;
      // At least a pixel at any zoom, so every block can be found and hovered.
      const length = Math.max(1 / zoom, block.size * scale);
      const used = block.state === "inactive" ? 0 : Math.min(block.size, block.requested || block.size) * scale;
      const blockPieces = place(p.at + offsetPx, length);
      for (const piece of blockPieces) pieces.push({ x: piece.x, y: y(piece.row), w: Math.max(1, piece.w), segment: si, block, blockIndex: bi });
      if (touched && !/^segment_/.test(touched.action) && block.address === touched.address && block.state !== "inactive") {
        view.touchedAt = p.at + offsetPx;
        for (const piece of blockPieces) touchedBoxes.push({ ...piece, y: y(piece.row) });
      }
      if (block.state === "inactive") continue;
      const pending = block.state === "active_pending_free";
      ctx.fillStyle = pending ? t.pending : block.allocation !== null && block.allocation !== undefined ? bandColor(block.allocation, t.dark) : t.allocated;
      // A 1 px gap after each wide block shows where blocks meet.
      for (const piece of blockPieces) ctx.fillRect(piece.x, y(piece.row), Math.max(1, piece.w - (piece.w > 4 ? 1 : 0)), ROW);
      if (pending) {
        // Hatched: held, but by no tensor.
        ctx.strokeStyle = t.bg;
        ctx.lineWidth = 1;
        for (const piece of blockPieces) {
          ctx.save();
          ctx.beginPath();
          ctx.rect(piece.x, y(piece.row), piece.w, ROW);
          ctx.clip();
          ctx.beginPath();
          for (let hx = piece.x - ROW; hx < piece.x + piece.w; hx += 6) {
            ctx.moveTo(hx, y(piece.row) + ROW);
            ctx.lineTo(hx + ROW, y(piece.row));
          }
          ctx.stroke();
          ctx.restore();
        }
      }
      if ((block.size * scale - used) * zoom >= 0.5) {
        ctx.fillStyle = t.rounding;
        for (const piece of place(p.at + offsetPx + used, block.size * scale - used))
          ctx.fillRect(piece.x, y(piece.row) + ROW * 0.45, Math.max(1, piece.w), ROW * 0.55);
      }
      if (alloc !== null && block.allocation === alloc) {
        ctx.strokeStyle = t.accent;
        ctx.lineWidth = 2;
        for (const piece of blockPieces) ctx.strokeRect(piece.x + 1, y(piece.row) - 1, Math.max(1, piece.w - 2), ROW + 2);
      }
    }
    const hovered = view.hoverSegment === si || view.hover?.segment === si;
    ctx.strokeStyle = hovered ? t.text : t.lineStrong;
    ctx.lineWidth = hovered ? 2 : 1;
    for (const piece of segmentPieces) ctx.strokeRect(piece.x + 0.5, y(piece.row) + 0.5, Math.max(1, piece.w - 1), ROW - 1);
  }
  // The selected event's block: a thick outline and a marker above it, seen at any size.
  ctx.strokeStyle = t.oom;
  ctx.fillStyle = t.oom;
  ctx.lineWidth = 3;
  for (const box of touchedBoxes) {
    ctx.strokeRect(box.x - 1.5, box.y - 1.5, Math.max(3, box.w + 3), ROW + 3);
    ctx.beginPath();
    ctx.moveTo(box.x + Math.max(3, box.w) / 2 - 4, box.y - 6);
    ctx.lineTo(box.x + Math.max(3, box.w) / 2 + 4, box.y - 6);
    ctx.lineTo(box.x + Math.max(3, box.w) / 2, box.y - 1);
    ctx.fill();
  }
  // Tiny blocks last, so hit-testing prefers them over their neighbours' padding.
  pieces.sort((a, b) => b.w - a.w);
  view.pieces = pieces;
  view.layout = {
    width,
    height,
    rows: totalRows,
    perPx,
    tape,
    zoom,
    offset,
    segments: segments.length,
    blocks: pieces.length,
    touched: touchedBoxes.map((b) => ({ x: b.x, y: b.y, w: b.w })),
  };
  const zoomLabel = view.panel.querySelector("#segments-zoom-level");
  if (zoomLabel) zoomLabel.textContent = zoom > 1 ? `×${zoom >= 100 ? Math.round(zoom) : zoom.toFixed(1)}` : "";
}

/** The drawn piece of a block under the pointer, or null.
 * @param {SegmentsView} view
 * @param {MouseEvent} event */
export function pieceAt(view, event) {
  const box = view.canvas.getBoundingClientRect();
  const x = event.clientX - box.left;
  const y = event.clientY - box.top;
  let found = null;
  for (const p of view.pieces) if (x >= p.x - 0.5 && x < p.x + p.w + 0.5 && y >= p.y && y < p.y + ROW) found = p;
  return found;
}
