// The flame graph (icicle) of live memory at the selected moment: widths are bytes, the root
// at the top. Hover explains a frame, click zooms into it, the breadcrumb zooms back out, search
// highlights frames and sums their bytes (within the zoom); the graph downloads as folded stacks
// or SVG, named for the zoom. With the canvas focused, arrow keys move between frames, Enter zooms
// in, Backspace up one level; Esc (anywhere on the tab) zooms out to everything.

import { frameColor, roleColor } from "../lib/color.js";
import { fitText } from "../lib/fit-text.js";
import { ancestors, findKey, folded, frameLabel, keyOf, layout, search, selfBytes, svg, zoomName } from "../lib/flame-model.js";
import { bytes, count, percent } from "../lib/units.js";
import { fitCanvas, frameScheduler, paintPlaceholder } from "./canvas.js";
import { download, h } from "./dom.js";
import { newestOnly } from "./newest-only.js";
import { onThemeChange, theme } from "./theme.js";
import { hideTip, showTip, tipRow } from "./tooltip.js";

const ROW = 20;

export class FlameView {
  constructor(ctx, panel) {
    this.ctx = ctx;
    this.panel = panel;
    this.chart = panel.querySelector("#flame-chart");
    this.canvas = panel.querySelector("#flame-canvas");
    this.total = panel.querySelector("#flame-total");
    this.crumbs = panel.querySelector("#flame-breadcrumb");
    this.input = panel.querySelector("#flame-search");
    this.matchText = panel.querySelector("#flame-matches");
    this.error = panel.querySelector("#flame-error");
    this.fetchFlame = newestOnly({ staleMark: this.total, errorBox: this.error, what: "The flame graph" });
    this.data = null;
    this.key = "";
    this.focus = 0;
    // The frame zoomed into, by its path from the root (kept in the URL as `zoom`, so a shared
    // link opens the same zoom, and it survives moving to another moment).
    this.focusKey = ctx.store.get().zoom;
    this.hits = null;
    this.rects = [];
    this.draw = frameScheduler(() => this.paint());
    this.input.value = ctx.store.get().q;
    this.input.addEventListener("input", () => ctx.store.set({ q: this.input.value }));
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        this.input.value = "";
        ctx.store.set({ q: "" });
        this.input.blur();
      }
    });
    for (const b of panel.querySelectorAll("[data-mode]")) b.addEventListener("click", () => ctx.store.set({ mode: b.dataset.mode }));
    for (const b of panel.querySelectorAll("[data-by]")) b.addEventListener("click", () => ctx.store.set({ by: b.dataset.by }));
    panel.querySelector("#flame-folded").addEventListener("click", () => this.downloadFolded());
    panel.querySelector("#flame-svg").addEventListener("click", () => this.downloadSvg());
    this.canvas.addEventListener("pointermove", (event) => this.onMove(event));
    this.canvas.addEventListener("pointerleave", () => {
      this.hover = -1;
      hideTip();
      this.draw();
    });
    this.canvas.addEventListener("click", (event) => this.onClick(event));
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute(
      "aria-label",
      "Flame graph of memory by stack. Arrow keys move between frames, Enter zooms in, Backspace zooms out one level, Escape zooms out to everything.",
    );
    // The frame the keyboard is on (-1: none; drawn like the hovered one).
    this.keyFocus = -1;
    this.canvas.addEventListener("keydown", (event) => this.onKey(event));
    this.canvas.addEventListener("blur", () => {
      this.keyFocus = -1;
      hideTip();
      this.draw();
    });
    // Esc zooms out from anywhere on the tab, as on the compare page; typing and dialogs keep it.
    document.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || !this.visible() || !this.data || this.focus === 0) return;
      if (event.defaultPrevented || document.querySelector("dialog[open]")) return;
      if (event.target instanceof HTMLElement && event.target.closest("input, textarea, select, [contenteditable]")) return;
      event.preventDefault();
      this.zoom(0);
    });
    new ResizeObserver(() => this.visible() && this.draw()).observe(this.chart);
    onThemeChange(() => this.draw());
    this.syncMode();
  }

  visible() {
    return !this.panel.hidden;
  }

  show() {
    this.load();
    this.draw();
  }

  syncMode() {
    const { mode, by } = this.ctx.store.get();
    for (const b of this.panel.querySelectorAll("[data-mode]")) b.setAttribute("aria-pressed", String(b.dataset.mode === mode));
    // Roots by role count live allocations only (reserved free bytes have no role).
    // In reserved mode the graph is by stack whatever was chosen: say that, and never show the
    // disabled "By role" as the pressed one.
    const reserved = mode === "reserved";
    const shown = reserved ? "stack" : by;
    for (const b of this.panel.querySelectorAll("[data-by]")) {
      b.setAttribute("aria-pressed", String(b.dataset.by === shown));
      b.disabled = reserved;
      b.title = reserved
        ? "Reserved bytes include free and rounding bytes, which have no role: switch to Allocated to root the graph by role"
        : b.dataset.by === "role"
          ? "Each stack under its role (o): which code holds the activations, the optimizer state, …"
          : "Stacks as recorded";
    }
  }

  update(state, changed) {
    if (changed.has("mode") || changed.has("by")) this.syncMode();
    if (changed.has("q")) {
      if (this.input.value !== state.q) this.input.value = state.q;
      this.searchNow();
      this.draw();
    }
    if (changed.has("device")) {
      this.focus = 0;
      this.focusKey = "";
    }
    if (changed.has("zoom") && state.zoom !== this.focusKey) {
      this.focusKey = state.zoom;
      if (this.data) {
        this.focus = Math.max(0, findKey(this.data.nodes, this.focusKey));
        this.renderCrumbs();
        this.draw();
      }
    }
    if (this.visible() && (changed.has("at") || changed.has("device") || changed.has("mode") || changed.has("by"))) this.load();
  }

  params() {
    const params = new URLSearchParams();
    params.set("device", this.ctx.device());
    const at = this.ctx.moment();
    if (at !== null) params.set("at", at);
    if (this.ctx.store.get().mode === "reserved") params.set("mode", "reserved");
    else if (this.ctx.store.get().by === "role") params.set("by", "role");
    return params.toString();
  }

  async load() {
    const key = this.params();
    if (key === this.key) return;
    await this.fetchFlame(`/api/snapshots/${this.ctx.id}/flame?${key}`, (data) => {
      this.key = key;
      this.data = data;
      this.lay = layout(data.nodes);
      this.focus = Math.max(0, findKey(data.nodes, this.focusKey));
      this.searchNow();
      this.renderTotal();
      this.renderCrumbs();
      this.paint();
    });
  }

  searchNow() {
    if (!this.data) return;
    const q = this.ctx.store.get().q.trim();
    // Zoomed: count only what is drawn, the zoomed frame's subtree, against its bytes.
    const zoomed = this.focus > 0;
    this.hits = q ? search(this.data.nodes, q, zoomed ? { root: this.focus, end: this.lay.subtreeEnd[this.focus] } : null) : null;
    const of = zoomed ? this.data.nodes[this.focus].bytes : this.data.total;
    const within = zoomed ? ` in the zoomed ${this.data.nodes[this.focus].name}` : "";
    if (!q) this.matchText.textContent = "";
    else if (!this.hits.count && this.hits.bytes)
      this.matchText.textContent = `All of the zoomed frame is under a frame matching “${q}”: ${bytes(this.hits.bytes)}`;
    else if (!this.hits.count) this.matchText.textContent = `No frame${within} matches “${q}”`;
    else
      this.matchText.textContent = `${count(this.hits.count)} frame${this.hits.count === 1 ? "" : "s"}${within} match: ${bytes(this.hits.bytes)} (${percent(this.hits.bytes, of)} of ${zoomed ? "its" : this.modeWord()} ${bytes(of)})`;
  }

  /** "reserved" or "live": the mode asked for (the flame answer does not repeat it). */
  modeWord() {
    return this.ctx.store.get().mode === "reserved" ? "reserved" : "live";
  }

  renderTotal() {
    const d = this.data;
    const info = this.ctx.deviceInfo();
    const reserved = this.ctx.store.get().mode === "reserved";
    const when =
      d.at === null || d.at === undefined
        ? "when the snapshot was taken"
        : `right after event ${count(d.at)}${d.at === info?.peak_event_index ? " (the peak)" : ""}`;
    this.total.replaceChildren(
      h("strong", { id: "flame-total-bytes" }, bytes(d.total)),
      reserved
        ? ` reserved ${when}: ${count(d.allocations)} live allocations plus free, pending-free and rounding bytes per segment.`
        : ` live ${when} in ${count(d.allocations)} allocation${d.allocations === 1 ? "" : "s"}.`,
    );
  }

  renderCrumbs() {
    const nodes = this.data.nodes;
    const chain = ancestors(nodes, this.focus);
    // replaceChildren writes a null as the text "null": the first crumb has no separator at all.
    this.crumbs.replaceChildren(
      ...chain.flatMap((i, k) => [
        ...(k ? [h("span", { className: "crumb-sep", "aria-hidden": "true" }, "›")] : []),
        h(
          "button",
          { type: "button", className: `crumb${i === this.focus ? " current" : ""}`, title: frameLabel(nodes[i]), onclick: () => this.zoom(i) },
          i === 0 ? "all" : nodes[i].name,
        ),
      ]),
    );
    this.crumbs.hidden = chain.length < 2;
  }

  zoom(i) {
    this.focus = i;
    this.focusKey = i ? keyOf(this.data.nodes, i) : "";
    this.keyFocus = -1;
    hideTip();
    this.renderCrumbs();
    // Search totals follow the zoom.
    this.searchNow();
    this.paint();
    this.ctx.store.set({ zoom: this.focusKey });
  }

  paint() {
    if (!this.visible()) return;
    const width = Math.max(320, this.chart.clientWidth);
    const t = theme();
    if (!this.data) {
      paintPlaceholder(this.canvas, width, 80, "Loading the flame graph…");
      return;
    }
    const nodes = this.data.nodes;
    const lay = this.lay;
    const height = (lay.maxDepth + 1) * ROW + 2;
    const ctx = fitCanvas(this.canvas, width, height);
    ctx.fillStyle = t.bg;
    ctx.fillRect(0, 0, width, height);
    const rects = [];
    const focus = this.focus;
    const scale = nodes[focus].bytes > 0 ? width / nodes[focus].bytes : 0;
    const chain = ancestors(nodes, focus);
    for (const i of chain.slice(0, -1)) rects.push({ i, x: 0, w: width, y: nodes[i].depth * ROW, ancestor: true });
    const end = lay.subtreeEnd[focus];
    for (let i = focus; i < end; i += 1) {
      const w = nodes[i].bytes * scale;
      if (w < 0.5) continue;
      rects.push({ i, x: (lay.x0[i] - lay.x0[focus]) * scale, w, y: nodes[i].depth * ROW });
    }
    const hits = this.hits;
    // The answer drawn was asked by role when its key says so (the state may have moved on).
    const byRole = this.key.includes("by=role");
    ctx.font = t.font;
    ctx.textBaseline = "middle";
    for (const r of rects) {
      const node = nodes[r.i];
      ctx.globalAlpha = hits?.count && !hits.hit[r.i] ? 0.35 : r.ancestor ? 0.75 : 1;
      ctx.fillStyle = hits?.hit[r.i]
        ? t.match
        : r.i === 0
          ? t.lineStrong
          : byRole && node.depth === 1
            ? roleColor(node.name, t.dark)
            : frameColor(node.name, node.file, t.dark);
      ctx.fillRect(r.x + 0.5, r.y + 0.5, Math.max(0.5, r.w - 1), ROW - 1);
      if (r.i === this.hover || r.i === this.keyFocus) {
        ctx.globalAlpha = 1;
        ctx.strokeStyle = t.text;
        ctx.lineWidth = 1.5;
        ctx.strokeRect(r.x + 1, r.y + 1, Math.max(1, r.w - 2), ROW - 2);
      }
      if (r.w > 28) {
        ctx.globalAlpha = hits?.count && !hits.hit[r.i] ? 0.5 : 1;
        ctx.fillStyle = t.dark ? "#f1f3f7" : "#1b2130";
        const label = r.i === 0 ? `all · ${bytes(node.bytes)}` : node.file ? `${node.name}  ${node.file}:${node.line}` : node.name;
        ctx.fillText(fitText(ctx, label, r.w - 8), r.x + 4, r.y + ROW / 2 + 0.5);
      }
    }
    ctx.globalAlpha = 1;
    this.rects = rects;
    this.layout = { width, height, rows: lay.maxDepth + 1, focus, total: this.data.total, rects: rects.length };
  }

  at(event) {
    const box = this.canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    for (let k = this.rects.length - 1; k >= 0; k -= 1) {
      const r = this.rects[k];
      if (x >= r.x && x < r.x + r.w && y >= r.y && y < r.y + ROW) return r.i;
    }
    return -1;
  }

  onMove(event) {
    if (!this.data) return;
    const i = this.at(event);
    if (i !== this.hover) {
      this.hover = i;
      this.draw();
    }
    if (i < 0) {
      hideTip();
      return;
    }
    showTip(event.clientX, event.clientY, ...this.tooltipFor(i));
  }

  /** Arrow keys move between drawn frames, Enter or Space zooms in, Backspace zooms out one level. */
  onKey(event) {
    if (!this.data) return;
    const nodes = this.data.nodes;
    const current = this.keyFocus >= 0 ? this.keyFocus : this.focus;
    const parent = nodes[current].parent;
    const drawn = (i) => this.rects.some((r) => r.i === i && !r.ancestor);
    let next = -1;
    if (event.key === "ArrowUp") next = parent >= 0 ? parent : -1;
    else if (event.key === "ArrowDown") next = this.lay.children[current].find(drawn) ?? -1;
    else if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      const siblings = parent >= 0 ? this.lay.children[parent].filter(drawn) : [];
      next = siblings[siblings.indexOf(current) + (event.key === "ArrowLeft" ? -1 : 1)] ?? -1;
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      event.stopPropagation();
      this.zoom(current);
      return;
    } else if (event.key === "Backspace") {
      event.preventDefault();
      event.stopPropagation();
      if (this.focus > 0) this.zoom(Math.max(0, nodes[this.focus].parent));
      return;
    } else return;
    // The page's arrows step the moment: not while moving in the graph.
    event.preventDefault();
    event.stopPropagation();
    if (next < 0) return;
    this.keyFocus = next;
    this.paint();
    const rect = this.rects.find((r) => r.i === next);
    const box = this.canvas.getBoundingClientRect();
    if (rect) showTip(box.left + rect.x + Math.min(rect.w / 2, 60), box.top + rect.y + ROW, ...this.tooltipFor(next));
  }

  tooltipFor(i) {
    const node = this.data.nodes[i];
    const own = selfBytes(this.data.nodes, this.lay, i);
    return [
      h("div", { className: "tip-title" }, i === 0 ? "everything" : node.name),
      node.file ? h("div", { className: "tip-where" }, `${node.path || node.file}:${node.line}`) : null,
      tipRow("bytes", `${bytes(node.bytes)} · ${percent(node.bytes, this.data.total)} of ${this.modeWord()}`),
      own && own !== node.bytes ? tipRow("itself", bytes(own)) : null,
      tipRow("allocations", count(node.allocations)),
      h("div", { className: "tip-note" }, i === this.focus ? "Click the breadcrumb or press Esc to zoom out." : "Click or press Enter to zoom in."),
    ];
  }

  onClick(event) {
    if (!this.data) return;
    const i = this.at(event);
    if (i < 0) return;
    this.zoom(i === this.focus && i !== 0 ? Math.max(0, this.data.nodes[i].parent) : i);
  }

  baseName() {
    const name = (document.getElementById("snapshot-name")?.textContent ?? "snapshot").trim().replace(/[^\w.-]+/g, "_");
    // A zoomed export is a part of the graph: its name says which.
    const zoom = this.data && this.focus > 0 ? `-zoom-${zoomName(this.data.nodes[this.focus])}` : "";
    return `${name}-cuda${this.ctx.device()}-${this.data?.at ?? "snapshot"}-${this.ctx.store.get().mode}${zoom}`;
  }

  downloadFolded() {
    if (!this.data) return;
    download(`${this.baseName()}.folded.txt`, folded(this.data.nodes, this.lay, this.focus), "text/plain");
  }

  downloadSvg() {
    if (!this.data) return;
    const nodes = this.data.nodes;
    const text = svg(nodes, this.lay, {
      focus: this.focus,
      width: 1200,
      title:
        this.focus > 0
          ? `Zoomed into ${frameLabel(nodes[this.focus])}: ${bytes(nodes[this.focus].bytes)} of ${this.total.textContent}`
          : this.total.textContent,
      color: (node) => frameColor(node.name, node.file, false),
      hit: this.hits?.hit,
      describe: (i) =>
        `${frameLabel(nodes[i])}: ${bytes(nodes[i].bytes)} (${percent(nodes[i].bytes, this.data.total)}), ${count(nodes[i].allocations)} allocations`,
    });
    download(`${this.baseName()}.svg`, text, "image/svg+xml");
  }
}
