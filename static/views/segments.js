// The segment map at the selected moment: every segment of the device to scale, its blocks
// coloured by state, rounding waste marked; totals and per-segment stats; hover for a block's
// allocation and stack. The map follows the moment (← → step it).

import { bytes, count, hex, percent } from "../lib/units.js";
import {
  allocation,
  fitCanvas,
  frameParts,
  frameScheduler,
  h,
  hideTip,
  newestOnly,
  onThemeChange,
  paintPlaceholder,
  showTip,
  theme,
  tipRow,
  visibleFrames,
} from "./common.js";

const ROW = 22;
const ROW_GAP = 8;
const SEGMENT_GAP = 3;
const STATE_NAMES = { active_allocated: "allocated", active_pending_free: "pending free", inactive: "free" };

export class SegmentsView {
  constructor(ctx, panel) {
    this.ctx = ctx;
    this.panel = panel;
    this.chart = panel.querySelector("#segments-chart");
    this.canvas = panel.querySelector("#segments-canvas");
    this.source = panel.querySelector("#segments-source");
    this.totals = panel.querySelector("#segments-totals");
    this.table = panel.querySelector("#segments-table");
    this.error = panel.querySelector("#segments-error");
    this.fetchSegments = newestOnly({ staleMark: this.source, errorBox: this.error, what: "The segment map" });
    this.legend = panel.querySelector("#segments-legend");
    this.data = null;
    this.key = "";
    this.pieces = [];
    this.draw = frameScheduler(() => this.paint());
    for (const b of panel.querySelectorAll("[data-step]")) b.addEventListener("click", () => ctx.step(Number(b.dataset.step)));
    this.canvas.addEventListener("pointermove", (event) => this.onMove(event));
    this.canvas.addEventListener("pointerleave", () => {
      this.hover = null;
      hideTip();
      this.draw();
    });
    this.canvas.addEventListener("click", (event) => {
      const piece = this.pieceAt(event);
      if (piece?.block.allocation !== null && piece?.block.allocation !== undefined) ctx.store.set({ alloc: piece.block.allocation });
    });
    new ResizeObserver(() => this.visible() && this.draw()).observe(this.chart);
    onThemeChange(() => this.draw());
    const item = (cls, text, title) => h("li", { title }, h("span", { className: `swatch ${cls}` }), text);
    this.legend.replaceChildren(
      item("sw-allocated", "allocated", "A live tensor's block"),
      item("sw-rounding", "rounding waste", "Bytes a block holds beyond what was requested (its size rounded up)"),
      item("sw-pending", "pending free", "Freed by the program but still in use by a stream; not reusable yet"),
      item("sw-free", "free (cached)", "Cached by the allocator, reusable without asking CUDA"),
      item("sw-segment", "segment", "One cudaMalloc (or an expandable segment); gaps separate segments"),
    );
  }

  visible() {
    return !this.panel.hidden;
  }

  show() {
    this.load();
    this.draw();
  }

  update(_state, changed) {
    if (this.visible() && (changed.has("at") || changed.has("device"))) this.load();
    else if (this.visible() && changed.has("alloc")) this.draw();
  }

  async load() {
    const params = new URLSearchParams();
    params.set("device", this.ctx.device());
    const at = this.ctx.moment();
    if (at !== null) params.set("at", at);
    const key = params.toString();
    if (key === this.key) return;
    await this.fetchSegments(`/api/snapshots/${this.ctx.id}/segments?${key}`, (data) => {
      this.key = key;
      this.data = data;
      this.renderSource();
      this.renderTotals();
      this.renderTable();
      this.paint();
    });
  }

  renderSource() {
    const d = this.data;
    const last = this.ctx.events() - 1;
    const when = d.at === null || d.at === undefined ? "when the snapshot was taken" : `right after event ${count(d.at)}`;
    if (d.exact) {
      this.source.replaceChildren(
        h("span", { className: "badge badge-exact", title: "Block sizes, states and rounding as the snapshot recorded them" }, "exact"),
        ` The snapshot's own segments, ${when}.`,
      );
    } else {
      this.source.replaceChildren(
        h("span", { className: "badge badge-rebuilt", title: "Rebuilt by undoing events from the snapshot backwards" }, "rebuilt"),
        ` Rebuilt for the moment ${when} by undoing later events: live blocks at their addresses with sizes rounded up to 512 B, the rest of each segment free. `,
        last >= 0 ? h("button", { type: "button", className: "link-button", onclick: () => this.ctx.setMoment(last) }, "Show the snapshot's own state") : null,
      );
    }
  }

  renderTotals() {
    const t = this.data.totals;
    const stat = (label, value, detail, title) =>
      h(
        "div",
        { className: "stat", title },
        h("span", { className: "label" }, label),
        h("span", { className: "value" }, value),
        h("span", { className: "detail" }, detail),
      );
    this.totals.replaceChildren(
      stat("Reserved", bytes(t.reserved), `in ${count(t.segments)} segments`, "Bytes of all segments: what the allocator holds from CUDA"),
      stat("Allocated", bytes(t.allocated), `${percent(t.allocated, t.reserved)} of reserved`, "Requested bytes of live blocks"),
      stat(
        "Free",
        bytes(t.external_free),
        `largest block ${bytes(t.largest_free_block)}`,
        "Cached free blocks: reusable without asking CUDA again. The largest is the biggest request they can serve.",
      ),
      stat(
        "Fragmentation",
        `${(100 * t.fragmentation).toFixed(0)}%`,
        `rounding ${bytes(t.internal_free)}${t.pending_free ? ` · pending ${bytes(t.pending_free)}` : ""}`,
        "The share of free bytes outside the largest free block. Rounding: bytes inside live blocks beyond the request.",
      ),
    );
  }

  renderTable() {
    const segments = this.data.segments;
    const head = h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["Segment", "Size", "Stream", "Pool", "Allocated", "Free", "Largest free", "Fragmentation", "Blocks"].map((c, i) =>
          h("th", { className: i ? "num" : "" }, c),
        ),
      ),
    );
    const body = h("tbody");
    for (const [i, s] of segments.entries()) {
      const st = s.stats;
      const row = h(
        "tr",
        {
          onpointerenter: () => {
            this.hoverSegment = i;
            this.draw();
          },
          onpointerleave: () => {
            this.hoverSegment = null;
            this.draw();
          },
        },
        h("td", {}, h("code", {}, hex(s.address)), s.expandable ? h("span", { className: "badge" }, "expandable") : null),
        h("td", { className: "num" }, bytes(s.size)),
        h("td", { className: "num" }, String(s.stream)),
        h("td", { className: "num" }, `${s.type}${s.pool && (s.pool[0] || s.pool[1]) ? ` (${s.pool.join(",")})` : ""}`),
        h("td", { className: "num" }, bytes(st.allocated)),
        h("td", { className: "num" }, bytes(st.external_free)),
        h("td", { className: "num" }, bytes(st.largest_free_block)),
        h("td", { className: "num" }, st.external_free ? `${(100 * (st.fragmentation ?? 1 - st.largest_free_block / st.external_free)).toFixed(0)}%` : "–"),
        h("td", { className: "num" }, count(st.blocks)),
      );
      body.append(row);
    }
    this.table.replaceChildren(
      h("caption", { className: "muted small" }, `${count(segments.length)} segments, by address. Hover a row to find it in the map.`),
      head,
      body,
    );
  }

  paint() {
    if (!this.visible()) return;
    const width = Math.max(320, this.chart.clientWidth);
    const t = theme();
    if (!this.data) {
      paintPlaceholder(this.canvas, width, 60, "Loading the segment map…");
      return;
    }
    const segments = this.data.segments;
    const reserved = segments.reduce((sum, s) => sum + s.size, 0);
    const rows = Math.max(4, Math.min(32, Math.ceil(segments.length / 7)));
    const usable = width * rows - segments.length * SEGMENT_GAP;
    const perPx = Math.max(1, reserved / Math.max(1, usable));
    // The tape: segments laid end to end, wrapping at the right edge.
    let cursor = 0;
    const place = (start, length) => {
      const pieces = [];
      let x = start;
      let left = length;
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
    const placed = segments.map((s) => {
      const length = Math.max(2, s.size / perPx);
      const at = cursor;
      cursor += length + SEGMENT_GAP;
      return { segment: s, at, length };
    });
    const totalRows = Math.max(1, Math.ceil(cursor / width));
    const height = totalRows * (ROW + ROW_GAP);
    const ctx = fitCanvas(this.canvas, width, height);
    ctx.fillStyle = t.bg;
    ctx.fillRect(0, 0, width, height);
    const pieces = [];
    const y = (row) => row * (ROW + ROW_GAP) + 2;
    const alloc = this.ctx.store.get().alloc;
    for (const [si, p] of placed.entries()) {
      const s = p.segment;
      const scale = p.length / s.size;
      for (const piece of place(p.at, p.length)) {
        ctx.fillStyle = t.free;
        ctx.fillRect(piece.x, y(piece.row), piece.w, ROW);
      }
      for (const [bi, block] of s.blocks.entries()) {
        const offset = (block.address - s.address) * scale;
        const length = Math.max(block.state === "inactive" ? 0 : 1, block.size * scale);
        const used = block.state === "inactive" ? 0 : Math.min(block.size, block.requested || block.size) * scale;
        for (const piece of place(p.at + offset, Math.max(0.5, length))) {
          pieces.push({ x: piece.x, y: y(piece.row), w: Math.max(1, piece.w), segment: si, block, blockIndex: bi });
        }
        if (block.state === "inactive") continue;
        ctx.fillStyle = block.state === "active_pending_free" ? t.pending : t.allocated;
        // A 1 px gap after each wide block shows where blocks meet.
        for (const piece of place(p.at + offset, length)) ctx.fillRect(piece.x, y(piece.row), Math.max(1, piece.w - (piece.w > 4 ? 1 : 0)), ROW);
        if (block.size * scale - used >= 0.5) {
          ctx.fillStyle = t.rounding;
          for (const piece of place(p.at + offset + used, block.size * scale - used))
            ctx.fillRect(piece.x, y(piece.row) + ROW * 0.45, Math.max(1, piece.w), ROW * 0.55);
        }
        if (alloc !== null && block.allocation === alloc) {
          ctx.strokeStyle = t.accent;
          ctx.lineWidth = 2;
          for (const piece of place(p.at + offset, length)) ctx.strokeRect(piece.x + 1, y(piece.row) - 1, Math.max(1, piece.w - 2), ROW + 2);
        }
      }
      ctx.strokeStyle = this.hoverSegment === si || this.hover?.segment === si ? t.text : t.lineStrong;
      ctx.lineWidth = this.hoverSegment === si || this.hover?.segment === si ? 2 : 1;
      for (const piece of place(p.at, p.length)) ctx.strokeRect(piece.x + 0.5, y(piece.row) + 0.5, Math.max(1, piece.w - 1), ROW - 1);
    }
    // Tiny blocks last, so hit-testing prefers them over their neighbours' padding.
    pieces.sort((a, b) => b.w - a.w);
    this.pieces = pieces;
    this.layout = { width, height, rows: totalRows, perPx, segments: segments.length, blocks: pieces.length };
  }

  pieceAt(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    let found = null;
    for (const p of this.pieces) if (x >= p.x - 0.5 && x < p.x + p.w + 0.5 && y >= p.y && y < p.y + ROW) found = p;
    return found;
  }

  onMove(event) {
    const piece = this.pieceAt(event);
    const same = piece && this.hover && piece.block === this.hover.block;
    this.hover = piece;
    if (!same) this.draw();
    if (!piece) {
      hideTip();
      return;
    }
    const { block } = piece;
    const s = this.data.segments[piece.segment];
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
        block.state !== "inactive" ? tipRow("requested", bytes(block.requested)) : null,
        rounding ? tipRow("rounding", bytes(rounding)) : null,
        tipRow("address", hex(block.address)),
        tipRow("segment", `${hex(s.address)} · ${bytes(s.size)} · stream ${s.stream}`),
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
        block.allocation !== null && block.allocation !== undefined ? h("div", { className: "tip-note" }, "Click to pin this allocation.") : null,
      );
    render(null);
    if (block.allocation !== null && block.allocation !== undefined) {
      allocation(this.ctx.id, this.ctx.device(), block.allocation)
        .then((info) => {
          if (this.hover?.block === block) render(info);
        })
        .catch(() => {});
    }
  }
}
