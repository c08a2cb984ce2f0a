// @ts-check
// The segment map's tooltip: a block's state, sizes and segment, then its allocation's stack
// once fetched.

import { allocation } from "../../lib/api.js";
import { frameParts, visibleFrames } from "../../lib/frames.js";
import { bytes, count, hex } from "../../lib/units.js";
import { h } from "../dom.js";
import { hideTip, showTip, tipRow } from "../tooltip.js";

/** @typedef {import("../segments.js").SegmentsView} SegmentsView */

const STATE_NAMES = { active_allocated: "allocated", active_pending_free: "pending free", inactive: "free" };

/** Why a block waits: pending frees say for whom, as far as the trace can tell. */
export function pendingReason(block, segmentStream, streams) {
  const others = streams.map((_, i) => i).filter((i) => i !== segmentStream);
  const waitingFor = others.length === 1 ? `waiting for stream ${others[0]}` : "waiting for another stream";
  const when = block.free_requested_at !== undefined ? ` since event ${count(block.free_requested_at)}` : "";
  return `${waitingFor}: \`record_stream\`${when}. The program freed it; the allocator reuses it once that stream's work is done.`;
}

/** Shows the tip for the block under the pointer (or hides it).
 * @param {SegmentsView} view
 * @param {MouseEvent} event */
export function showBlockTip(view, event) {
  const piece = view.pieceAt(event);
  const same = piece && view.hover && piece.block === view.hover.block;
  view.hover = piece;
  if (!same) view.draw();
  if (!piece) {
    hideTip();
    return;
  }
  const { block } = piece;
  const s = view.data.segments[piece.segment];
  const streams = view.data.streams?.raw ?? [];
  const segmentStack = view.data.segment_stacks?.[s.stack] ?? [];
  const rounding = block.state === "inactive" ? 0 : Math.max(0, block.size - block.requested);
  const render = (info) =>
    showTip(
      event.clientX,
      event.clientY,
      h(
        "div",
        { className: "tip-title" },
        `${STATE_NAMES[block.state] ?? block.state} · ${bytes(block.size)}`,
        info ? h("span", { className: "tip-id" }, ` ${info.block_id}`) : null,
      ),
      block.state === "active_pending_free" ? h("div", { className: "tip-note tip-pending" }, pendingReason(block, s.stream_id, streams)) : null,
      block.state !== "inactive" ? tipRow("requested", bytes(block.requested)) : null,
      rounding ? tipRow("rounding", bytes(rounding)) : null,
      tipRow("address", hex(block.address)),
      tipRow("segment", `${hex(s.address)} · ${bytes(s.size)} · stream ${s.stream_id}${s.expandable ? " · expandable" : ""}`),
      tipRow("pool", s.pool && (s.pool[0] || s.pool[1]) ? `private (${s.pool.join(", ")})` : "default"),
      tipRow("segment free", `${bytes(s.stats.external_free)} (largest ${bytes(s.stats.largest_free_block)})`),
      info
        ? h(
            "ol",
            { className: "tip-frames" },
            visibleFrames(info.frames)
              .slice(0, 6)
              .map((f) => h("li", {}, h("span", { className: "frame-name" }, f.name), " ", h("span", { className: "frame-where" }, frameParts(f).where))),
          )
        : null,
      info && !visibleFrames(info.frames).length ? h("div", { className: "tip-note" }, "No Python frames recorded.") : null,
      h(
        "div",
        { className: "tip-note" },
        segmentStack.length ? `Segment ${s.expandable ? "mapped" : "cudaMalloc'd"} at:` : "No stack recorded for the segment's cudaMalloc.",
      ),
      segmentStack.length
        ? h(
            "ol",
            { className: "tip-frames tip-segment-stack" },
            segmentStack.slice(0, 4).map((f) => h("li", {}, f)),
          )
        : null,
      block.allocation !== null && block.allocation !== undefined ? h("div", { className: "tip-note" }, "Click to pin this allocation.") : null,
    );
  render(null);
  if (block.allocation !== null && block.allocation !== undefined) {
    allocation(view.app.id, view.app.device(), block.allocation)
      .then((info) => {
        if (view.hover?.block === block) render(info);
      })
      .catch(() => {});
  }
}
