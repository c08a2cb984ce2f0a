// @ts-check
// The flame graph (icicle) of live memory at the selected moment: widths are bytes, the root
// at the top. Hover explains a frame, click zooms into it, the breadcrumb zooms back out, search
// highlights frames and sums their bytes (within the zoom); the graph downloads as folded stacks
// or SVG, named for the zoom. With the canvas focused, arrow keys move between frames, Enter zooms
// in, Backspace up one level; Esc (anywhere on the tab) zooms out to everything. Placement,
// hit-testing, zoom, breadcrumb and keys are lib/flame-model's `FlameModel`, shared with the
// compare page's graph: this file paints it and wires the events to it, with the DOM side both
// pages share (`renderCrumbs`, `wireFlameCanvas`, which compare/flame.js imports).

import { frameColor, roleColor } from "../lib/color.js";
import { fitText } from "../lib/fit-text.js";
import { FlameModel, findKey, folded, frameLabel, keyOf, search, selfBytes, svg, zoomName } from "../lib/flame-model.js";
import { bytes, count, percent } from "../lib/units.js";
import { fitCanvas, frameScheduler, paintPlaceholder } from "./canvas.js";
import { download, h } from "./dom.js";
import { newestOnly } from "./newest-only.js";
import { onThemeChange, theme } from "./theme.js";
import { hideTip, showTip, tipRow } from "./tooltip.js";

const ROW = 20;

/**
 * @typedef {import("../lib/flame-model.js").FlameNode} FlameNode
 * @typedef {{ nodes: FlameNode[], total: number, allocations: number, at?: number | null }} FlameAnswer
 */

/**
 * The graph's DOM side, shared by both pages: fills `nav` with the model's breadcrumb (a button
 * per step, the current one marked, "›" between), hidden when the graph is not zoomed.
 * @param {HTMLElement} nav
 * @param {FlameModel} model
 * @param {(i: number) => void} zoomTo
 */
export function renderCrumbs(nav, model, zoomTo) {
  const crumbs = model.crumbs();
  // replaceChildren writes a null as the text "null": the first crumb has no separator at all.
  nav.replaceChildren(
    ...crumbs.flatMap((c, k) => [
      ...(k ? [h("span", { className: "crumb-sep", "aria-hidden": "true" }, "›")] : []),
      h(
        "button",
        {
          type: "button",
          className: `crumb${c.current ? " current" : ""}`,
          "aria-current": c.current ? "true" : null,
          title: c.current ? c.title : `Zoom out to ${c.title}`,
          onclick: () => zoomTo(c.i),
        },
        c.label,
      ),
    ]),
  );
  nav.hidden = crumbs.length < 2;
}

/**
 * What a page gives `wireFlameCanvas`: its model (null while none is loaded), a repaint, what to
 * do once the model's zoom changed, and a frame's tooltip.
 * @typedef {object} FlameCanvasHooks
 * @property {() => FlameModel | null} model
 * @property {() => void} draw
 * @property {() => void} zoomed
 * @property {(i: number) => (Node | string | null)[]} tooltip
 */

/**
 * Wires a flame canvas's pointer and keys to its model, the same on both pages: hover outlines
 * and explains a frame, a click zooms (out one level on the zoomed frame), the keys are the
 * model's with the keyboard's frame outlined and explained.
 * @param {HTMLCanvasElement} canvas
 * @param {FlameCanvasHooks} hooks
 */
export function wireFlameCanvas(canvas, hooks) {
  /** @param {MouseEvent} event */
  const frameAt = (event) => {
    const box = canvas.getBoundingClientRect();
    return hooks.model()?.at(event.clientX - box.left, event.clientY - box.top) ?? -1;
  };
  canvas.tabIndex = 0;
  canvas.addEventListener("pointermove", (event) => {
    const model = hooks.model();
    if (!model) return;
    const i = frameAt(event);
    if (model.hoverOn(i)) hooks.draw();
    canvas.style.cursor = i >= 0 ? "pointer" : "default";
    if (i >= 0) showTip(event.clientX, event.clientY, ...hooks.tooltip(i));
    else hideTip();
  });
  canvas.addEventListener("pointerleave", () => {
    hooks.model()?.hoverOn(-1);
    hideTip();
    hooks.draw();
  });
  canvas.addEventListener("click", (event) => {
    const model = hooks.model();
    const i = frameAt(event);
    if (!model || i < 0) return;
    model.zoomTo(model.clickZoom(i));
    hideTip();
    hooks.zoomed();
  });
  canvas.addEventListener("keydown", (event) => {
    const model = hooks.model();
    const done = model?.key(event.key);
    if (!model || !done) return;
    event.preventDefault();
    // The page's arrows step the moment and its Backspace or Enter may act: not while in the
    // graph. Esc goes on to the page too, which clears what else it has selected.
    if (event.key !== "Escape") event.stopPropagation();
    if (done.zoomed) {
      hideTip();
      hooks.zoomed();
    } else if (done.moved) {
      hooks.draw();
      const anchor = model.anchor(model.cursor);
      const box = canvas.getBoundingClientRect();
      if (anchor) showTip(box.left + anchor.x, box.top + anchor.y, ...hooks.tooltip(model.cursor));
    }
  });
  canvas.addEventListener("blur", () => {
    const model = hooks.model();
    if (model) model.cursor = -1;
    hideTip();
    hooks.draw();
  });
}

export class FlameView {
  /**
   * @param {any} app the snapshot page's context (store, device, moment, …: views/app.js)
   * @param {HTMLElement} panel
   */
  constructor(app, panel) {
    this.app = app;
    this.panel = panel;
    const find = (/** @type {string} */ selector) => /** @type {HTMLElement} */ (panel.querySelector(selector));
    this.chart = find("#flame-chart");
    this.canvas = /** @type {HTMLCanvasElement} */ (find("#flame-canvas"));
    this.total = find("#flame-total");
    this.crumbs = find("#flame-breadcrumb");
    this.input = /** @type {HTMLInputElement} */ (find("#flame-search"));
    this.matchText = find("#flame-matches");
    this.error = find("#flame-error");
    this.fetchFlame = newestOnly({ staleMark: this.total, errorBox: this.error, what: "The flame graph" });
    /** @type {FlameAnswer | null} */
    this.data = null;
    /** @type {FlameModel | null} the graph of `data` */
    this.model = null;
    this.key = "";
    // The frame zoomed into, by its path from the root (kept in the URL as `zoom`, so a shared
    // link opens the same zoom, and it survives moving to another moment).
    this.focusKey = app.store.get().zoom;
    /** @type {{ hit: Uint8Array, bytes: number, count: number } | null} */
    this.hits = null;
    /** @type {{ width: number, height: number, rows: number, focus: number, total: number, rects: number } | null} what was drawn (the test hook's view) */
    this.layout = null;
    this.draw = frameScheduler(() => this.paint());
    this.input.value = app.store.get().q;
    this.input.addEventListener("input", () => app.store.set({ q: this.input.value }));
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        this.input.value = "";
        app.store.set({ q: "" });
        this.input.blur();
      }
    });
    for (const b of this.buttons("[data-mode]")) b.addEventListener("click", () => app.store.set({ mode: b.dataset.mode }));
    for (const b of this.buttons("[data-by]")) b.addEventListener("click", () => app.store.set({ by: b.dataset.by }));
    find("#flame-folded").addEventListener("click", () => this.downloadFolded());
    find("#flame-svg").addEventListener("click", () => this.downloadSvg());
    this.canvas.setAttribute(
      "aria-label",
      "Flame graph of memory by stack. Arrow keys move between frames, Enter zooms in, Backspace zooms out one level, Escape zooms out to everything.",
    );
    wireFlameCanvas(this.canvas, {
      model: () => this.model,
      draw: () => this.draw(),
      zoomed: () => this.zoomed(),
      tooltip: (i) => this.tooltipFor(i),
    });
    // Esc zooms out from anywhere on the tab, as on the compare page; typing and dialogs keep it.
    document.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || !this.visible() || !this.model || this.model.zoom === 0) return;
      if (event.defaultPrevented || document.querySelector("dialog[open]")) return;
      if (event.target instanceof HTMLElement && event.target.closest("input, textarea, select, [contenteditable]")) return;
      event.preventDefault();
      this.zoom(0);
    });
    new ResizeObserver(() => this.visible() && this.draw()).observe(this.chart);
    onThemeChange(() => this.draw());
    this.syncMode();
  }

  /** The frame zoomed into (0: everything, also while nothing is loaded). */
  get focus() {
    return this.model?.zoom ?? 0;
  }

  /** The frame the keyboard is on (-1: none). */
  get keyFocus() {
    return this.model?.cursor ?? -1;
  }

  /** The frames drawn (the test hook's view). */
  get rects() {
    return this.model?.rects ?? [];
  }

  get lay() {
    return this.model?.lay ?? null;
  }

  /**
   * @param {string} selector
   * @returns {HTMLButtonElement[]}
   */
  buttons(selector) {
    return Array.from(this.panel.querySelectorAll(selector), (b) => /** @type {HTMLButtonElement} */ (b));
  }

  visible() {
    return !this.panel.hidden;
  }

  show() {
    this.load();
    this.draw();
  }

  syncMode() {
    const { mode, by } = this.app.store.get();
    for (const b of this.buttons("[data-mode]")) b.setAttribute("aria-pressed", String(b.dataset.mode === mode));
    // Roots by role count live allocations only (reserved free bytes have no role).
    // In reserved mode the graph is by stack whatever was chosen: say that, and never show the
    // disabled "By role" as the pressed one.
    const reserved = mode === "reserved";
    const shown = reserved ? "stack" : by;
    for (const b of this.buttons("[data-by]")) {
      b.setAttribute("aria-pressed", String(b.dataset.by === shown));
      b.disabled = reserved;
      b.title = reserved
        ? "Reserved bytes include free and rounding bytes, which have no role: switch to Allocated to root the graph by role"
        : b.dataset.by === "role"
          ? "Each stack under its role (o): which code holds the activations, the optimizer state, …"
          : "Stacks as recorded";
    }
  }

  /**
   * @param {any} state the URL state (lib/state.js)
   * @param {Set<string>} changed
   */
  update(state, changed) {
    if (changed.has("mode") || changed.has("by")) this.syncMode();
    if (changed.has("q")) {
      if (this.input.value !== state.q) this.input.value = state.q;
      this.searchNow();
      this.draw();
    }
    if (changed.has("device")) {
      this.model?.zoomTo(0);
      this.focusKey = "";
    }
    if (changed.has("zoom") && state.zoom !== this.focusKey) {
      this.focusKey = state.zoom;
      if (this.model) {
        this.model.zoomTo(findKey(this.model.nodes, this.focusKey));
        this.renderCrumbs();
        this.draw();
      }
    }
    if (this.visible() && (changed.has("at") || changed.has("device") || changed.has("mode") || changed.has("by"))) this.load();
  }

  params() {
    const params = new URLSearchParams();
    params.set("device", this.app.device());
    const at = this.app.moment();
    if (at !== null) params.set("at", at);
    if (this.app.store.get().mode === "reserved") params.set("mode", "reserved");
    else if (this.app.store.get().by === "role") params.set("by", "role");
    return params.toString();
  }

  async load() {
    const key = this.params();
    if (key === this.key) return;
    await this.fetchFlame(`/api/snapshots/${this.app.id}/flame?${key}`, (/** @type {FlameAnswer} */ data) => {
      // The keyboard's frame stays where it was, by its path, when the same frame is in the new
      // graph (another moment, or an answer that lands while the keys move).
      const old = this.model;
      const cursorKey = old && old.cursor >= 0 ? keyOf(old.nodes, old.cursor) : "";
      this.key = key;
      this.data = data;
      this.model = new FlameModel(data.nodes, ROW);
      this.model.zoomTo(findKey(data.nodes, this.focusKey));
      if (cursorKey) this.model.cursor = findKey(data.nodes, cursorKey);
      this.searchNow();
      this.renderTotal();
      this.renderCrumbs();
      this.paint();
    });
  }

  searchNow() {
    const { data, model } = this;
    if (!data || !model) return;
    const q = this.app.store.get().q.trim();
    // Zoomed: count only what is drawn, the zoomed frame's subtree, against its bytes.
    const focus = model.zoom;
    const zoomed = focus > 0;
    const hits = q ? search(data.nodes, q, zoomed ? { root: focus, end: model.lay.subtreeEnd[focus] } : null) : null;
    this.hits = hits;
    const of = zoomed ? data.nodes[focus].bytes : data.total;
    const within = zoomed ? ` in the zoomed ${data.nodes[focus].name}` : "";
    if (!hits) this.matchText.textContent = "";
    else if (!hits.count && hits.bytes) this.matchText.textContent = `All of the zoomed frame is under a frame matching “${q}”: ${bytes(hits.bytes)}`;
    else if (!hits.count) this.matchText.textContent = `No frame${within} matches “${q}”`;
    else
      this.matchText.textContent = `${count(hits.count)} frame${hits.count === 1 ? "" : "s"}${within} match: ${bytes(hits.bytes)} (${percent(hits.bytes, of)} of ${zoomed ? "its" : this.modeWord()} ${bytes(of)})`;
  }

  /** "reserved" or "live": the mode asked for (the flame answer does not repeat it). */
  modeWord() {
    return this.app.store.get().mode === "reserved" ? "reserved" : "live";
  }

  renderTotal() {
    const d = this.data;
    if (!d) return;
    const info = this.app.deviceInfo();
    const reserved = this.app.store.get().mode === "reserved";
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
    if (this.model) renderCrumbs(this.crumbs, this.model, (i) => this.zoom(i));
  }

  /**
   * Zooms into frame `i` (0: everything).
   * @param {number} i
   */
  zoom(i) {
    if (!this.model) return;
    this.model.zoomTo(i);
    hideTip();
    this.zoomed();
  }

  /** After the model's zoom changed: the breadcrumb, the search totals, the URL follow. */
  zoomed() {
    if (!this.model) return;
    const focus = this.model.zoom;
    this.focusKey = focus ? keyOf(this.model.nodes, focus) : "";
    this.renderCrumbs();
    // Search totals follow the zoom.
    this.searchNow();
    this.paint();
    this.app.store.set({ zoom: this.focusKey });
  }

  paint() {
    if (!this.visible()) return;
    const width = Math.max(320, this.chart.clientWidth);
    const t = theme();
    const { data, model } = this;
    if (!data || !model) {
      paintPlaceholder(this.canvas, width, 80, "Loading the flame graph…");
      return;
    }
    const nodes = data.nodes;
    // As tall as the deepest frame whatever the zoom, so zooming does not move the page.
    const height = (model.lay.maxDepth + 1) * ROW + 2;
    const pen = fitCanvas(this.canvas, width, height);
    pen.fillStyle = t.bg;
    pen.fillRect(0, 0, width, height);
    const rects = model.place(width);
    const hits = this.hits;
    const marked = model.marked();
    // The answer drawn was asked by role when its key says so (the state may have moved on).
    const byRole = this.key.includes("by=role");
    pen.font = t.font;
    pen.textBaseline = "middle";
    for (const r of rects) {
      const node = nodes[r.i];
      pen.globalAlpha = hits?.count && !hits.hit[r.i] ? 0.35 : r.ancestor ? 0.75 : 1;
      pen.fillStyle = hits?.hit[r.i]
        ? t.match
        : r.i === 0
          ? t.lineStrong
          : byRole && node.depth === 1
            ? roleColor(node.name, t.dark)
            : frameColor(node.name, node.file, t.dark);
      pen.fillRect(r.x + 0.5, r.y + 0.5, Math.max(0.5, r.w - 1), ROW - 1);
      if (r.i === marked) {
        pen.globalAlpha = 1;
        pen.strokeStyle = t.text;
        pen.lineWidth = 1.5;
        pen.strokeRect(r.x + 1, r.y + 1, Math.max(1, r.w - 2), ROW - 2);
      }
      if (r.w > 28) {
        pen.globalAlpha = hits?.count && !hits.hit[r.i] ? 0.5 : 1;
        pen.fillStyle = t.dark ? "#f1f3f7" : "#1b2130";
        const label = r.i === 0 ? `all · ${bytes(node.bytes)}` : node.file ? `${node.name}  ${node.file}:${node.line}` : node.name;
        pen.fillText(fitText(pen, label, r.w - 8), r.x + 4, r.y + ROW / 2 + 0.5);
      }
    }
    pen.globalAlpha = 1;
    this.layout = { width, height, rows: model.lay.maxDepth + 1, focus: model.zoom, total: data.total, rects: rects.length };
  }

  /**
   * @param {number} i
   * @returns {(Node | string | null)[]}
   */
  tooltipFor(i) {
    const { data, model } = this;
    if (!data || !model) return [];
    const node = data.nodes[i];
    const own = selfBytes(data.nodes, model.lay, i);
    return [
      h("div", { className: "tip-title" }, i === 0 ? "everything" : node.name),
      node.file ? h("div", { className: "tip-where" }, `${node.path || node.file}:${node.line}`) : null,
      tipRow("bytes", `${bytes(node.bytes)} · ${percent(node.bytes, data.total)} of ${this.modeWord()}`),
      own && own !== node.bytes ? tipRow("itself", bytes(own)) : null,
      tipRow("allocations", count(node.allocations)),
      h("div", { className: "tip-note" }, i === model.zoom ? "Click the breadcrumb or press Esc to zoom out." : "Click or press Enter to zoom in."),
    ];
  }

  baseName() {
    const name = (document.getElementById("snapshot-name")?.textContent ?? "snapshot").trim().replace(/[^\w.-]+/g, "_");
    // A zoomed export is a part of the graph: its name says which.
    const zoom = this.data && this.focus > 0 ? `-zoom-${zoomName(this.data.nodes[this.focus])}` : "";
    return `${name}-cuda${this.app.device()}-${this.data?.at ?? "snapshot"}-${this.app.store.get().mode}${zoom}`;
  }

  downloadFolded() {
    if (!this.data || !this.model) return;
    download(`${this.baseName()}.folded.txt`, folded(this.data.nodes, this.model.lay, this.focus), "text/plain");
  }

  downloadSvg() {
    const { data, model } = this;
    if (!data || !model) return;
    const nodes = data.nodes;
    const focus = model.zoom;
    const text = svg(nodes, model.lay, {
      focus,
      width: 1200,
      title: focus > 0 ? `Zoomed into ${frameLabel(nodes[focus])}: ${bytes(nodes[focus].bytes)} of ${this.total.textContent}` : (this.total.textContent ?? ""),
      color: (node) => frameColor(node.name, node.file, false),
      hit: this.hits?.hit,
      describe: (i) => `${frameLabel(nodes[i])}: ${bytes(nodes[i].bytes)} (${percent(nodes[i].bytes, data.total)}), ${count(nodes[i].allocations)} allocations`,
    });
    download(`${this.baseName()}.svg`, text, "image/svg+xml");
  }
}
