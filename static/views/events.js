// The event list: every event of the trace, virtualized (a fixed row height over a tall spacer,
// scaled when the trace is taller than a browser can scroll), fetched in cached pages of 200 rows
// for the visible range. Filters by action, minimum size and frame text; selecting a row moves
// the selected moment, and the list follows the moment when it moves elsewhere.

import { bytes, count, duration, hex, parseBytes } from "../lib/units.js";
import { getJSON, h } from "./common.js";

const ROW = 26;
const PAGE = 200;
const MAX_SPACER = 8_000_000;

export class EventsView {
  constructor(ctx, panel) {
    this.ctx = ctx;
    this.panel = panel;
    this.scroller = panel.querySelector("#event-scroller");
    this.spacer = panel.querySelector("#event-spacer");
    this.rowsBox = panel.querySelector("#event-rows");
    this.countText = panel.querySelector("#events-count");
    this.error = panel.querySelector("#events-error");
    this.action = panel.querySelector("#events-action");
    this.min = panel.querySelector("#events-min");
    this.frame = panel.querySelector("#events-frame");
    this.goto = panel.querySelector("#events-goto");
    this.pages = new Map();
    this.matching = null;
    this.filterKey = null;
    this.selected = null;
    this.t0 = null;
    const s = ctx.store.get();
    this.action.value = s.action;
    if (this.action.value !== s.action) this.action.value = "";
    this.min.value = s.min ? bytes(s.min) : "";
    this.frame.value = s.frame;
    let timer;
    const filters = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const min = parseBytes(this.min.value);
        this.min.classList.toggle("invalid", this.min.value.trim() !== "" && min === null);
        ctx.store.set({ action: this.action.value, min: min || null, frame: this.frame.value.trim() });
      }, 250);
    };
    this.action.addEventListener("change", filters);
    this.min.addEventListener("input", filters);
    this.frame.addEventListener("input", filters);
    panel.querySelector("#events-filters").addEventListener("submit", (event) => event.preventDefault());
    this.goto.addEventListener("keydown", (event) => {
      if (event.key !== "Enter") return;
      event.preventDefault();
      const n = Number(this.goto.value.replace(/[,_\s#]/g, ""));
      if (!Number.isInteger(n) || n < 0) {
        this.goto.classList.add("invalid");
        return;
      }
      this.goto.classList.remove("invalid");
      this.ctx.setMoment(Math.min(n, this.ctx.events() - 1));
      this.locate(true);
      this.scroller.focus({ preventScroll: true });
    });
    this.scroller.addEventListener("scroll", () => this.render());
    this.scroller.addEventListener("keydown", (event) => this.onKey(event));
    this.rowsBox.addEventListener("click", (event) => {
      const row = event.target.closest("[data-position]");
      if (!row?.dataset.index) return;
      this.selected = Number(row.dataset.position);
      this.ctx.setMoment(Number(row.dataset.index));
      this.scroller.focus({ preventScroll: true });
    });
    new ResizeObserver(() => this.visible() && this.render()).observe(this.scroller);
  }

  visible() {
    return !this.panel.hidden;
  }

  show() {
    this.load();
  }

  update(_state, changed) {
    if (!this.visible()) return;
    if (changed.has("device") || changed.has("action") || changed.has("min") || changed.has("frame")) this.load();
    else if (changed.has("at")) this.locate(false);
  }

  filterParams() {
    const s = this.ctx.store.get();
    const params = new URLSearchParams();
    params.set("device", this.ctx.device());
    if (s.action) params.set("action", s.action);
    if (s.min) params.set("min_size", s.min);
    if (s.frame) params.set("frame", s.frame);
    return params;
  }

  async load() {
    const key = this.filterParams().toString();
    if (this.ctx.events() === 0) {
      this.countText.textContent = "";
      this.rowsBox.replaceChildren(h("div", { className: "event-empty" }, this.ctx.noHistory || "This device's trace has no events."));
      return;
    }
    if (key === this.filterKey) {
      this.render();
      return;
    }
    this.filterKey = key;
    this.pages.clear();
    this.matching = null;
    this.selected = null;
    this.countText.textContent = "Loading…";
    try {
      if (this.t0 === null) {
        const first = await getJSON(`/api/snapshots/${this.ctx.id}/events?device=${this.ctx.device()}&limit=1`);
        this.t0 = first.rows[0]?.time_us ?? null;
      }
      await this.locate(true);
      this.error.hidden = true;
    } catch (error) {
      this.error.textContent = `The events could not load. ${error.message}`;
      this.error.hidden = false;
    }
  }

  /** Fetches (once) the page `p` of the current filter. */
  page(p) {
    const key = `${this.filterKey}|${p}`;
    if (!this.pages.has(key)) {
      const params = this.filterParams();
      params.set("offset", p * PAGE);
      params.set("limit", PAGE);
      const promise = getJSON(`/api/snapshots/${this.ctx.id}/events?${params}`).then((page) => {
        this.matching = page.matching;
        this.pages.set(key, page);
        return page;
      });
      promise.catch((error) => {
        this.pages.delete(key);
        this.error.textContent = `The events could not load. ${error.message}`;
        this.error.hidden = false;
      });
      this.pages.set(key, promise);
    }
    return this.pages.get(key);
  }

  /** Finds the selected moment's row (or the first match after it) and scrolls to it. */
  async locate(force) {
    const at = this.ctx.moment();
    const key = this.filterKey;
    const params = this.filterParams();
    params.set("limit", PAGE);
    params.set("find", Math.max(0, at ?? 0));
    const page = await getJSON(`/api/snapshots/${this.ctx.id}/events?${params}`);
    if (key !== this.filterKey) return;
    this.matching = page.matching;
    this.pages.set(`${key}|${page.offset / PAGE}`, page);
    const k = page.rows.findIndex((r) => r.index >= (at ?? 0));
    // No match at or after the moment: the last match.
    this.selected = k >= 0 ? page.offset + k : page.matching ? page.matching - 1 : null;
    this.updateSpacer();
    if (this.selected !== null && (force || !this.isVisible(this.selected))) this.scrollToRow(this.selected);
    this.render();
  }

  metrics() {
    const n = this.matching ?? 0;
    const view = this.scroller.clientHeight;
    const virtual = Math.min(n * ROW, MAX_SPACER);
    const fit = view / ROW;
    const maxFirst = Math.max(0, n - fit);
    const maxScroll = Math.max(0, virtual - view);
    return { n, view, virtual, fit, maxFirst, maxScroll };
  }

  updateSpacer() {
    const { virtual } = this.metrics();
    this.spacer.style.height = `${virtual}px`;
    const s = this.ctx.store.get();
    const n = this.matching ?? 0;
    const total = this.ctx.events();
    this.countText.textContent = s.action || s.min || s.frame ? `${count(n)} of ${count(total)} events match` : `${count(total)} events`;
  }

  firstRow() {
    const m = this.metrics();
    return m.maxScroll ? Math.min(1, this.scroller.scrollTop / m.maxScroll) * m.maxFirst : 0;
  }

  scrollToRow(position) {
    const m = this.metrics();
    const first = Math.max(0, Math.min(m.maxFirst, position - m.fit / 2 + 0.5));
    this.scroller.scrollTop = m.maxFirst ? (first / m.maxFirst) * m.maxScroll : 0;
  }

  isVisible(position) {
    const first = this.firstRow();
    return position >= first && position + 1 <= first + this.metrics().fit;
  }

  render() {
    if (this.matching === null) return;
    const m = this.metrics();
    const first = this.firstRow();
    const from = Math.floor(first);
    const to = Math.min(m.n, Math.ceil(first + m.fit) + 1);
    this.rowsBox.style.top = `${this.scroller.scrollTop}px`;
    const at = this.ctx.moment();
    const rows = [];
    const missing = new Set();
    for (let pos = from; pos < to; pos += 1) {
      const page = this.pages.get(`${this.filterKey}|${Math.floor(pos / PAGE)}`);
      const row = page && !(page instanceof Promise) ? page.rows[pos - page.offset] : null;
      if (!page) missing.add(Math.floor(pos / PAGE));
      rows.push(this.rowElement(pos, row, (pos - first) * ROW, at));
    }
    if (m.n === 0) rows.push(h("div", { className: "event-empty" }, "No event matches these filters."));
    this.rowsBox.replaceChildren(...rows);
    for (const p of missing)
      this.page(p).then(
        () => this.render(),
        () => {},
      );
    this.layout = { first, from, to, matching: m.n, scaled: m.n * ROW > MAX_SPACER };
  }

  rowElement(position, row, top, at) {
    const element = h("div", { className: "event-row", role: "row", dataset: { position } });
    element.style.top = `${top}px`;
    if (!row) {
      element.append(h("span", { className: "c-index muted" }, "…"));
      return element;
    }
    element.dataset.index = row.index;
    if (row.index === at) element.classList.add("selected");
    if (position === this.selected) element.classList.add("cursor");
    element.append(
      h("span", { className: "c-index" }, count(row.index)),
      h("span", { className: "c-time" }, row.time_us !== null && row.time_us !== undefined && this.t0 !== null ? duration(row.time_us - this.t0) : "–"),
      h("span", { className: `c-action action-${row.action}` }, row.action),
      h("span", { className: "c-size" }, bytes(row.size)),
      h("span", { className: "c-addr", title: `address ${hex(row.addr)}` }, row.block_id ?? hex(row.addr)),
      h("span", { className: "c-stream" }, String(row.stream)),
      h("span", { className: "c-frame", title: row.top_frame ?? "" }, row.top_frame ?? ""),
    );
    return element;
  }

  async onKey(event) {
    if (!["ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End"].includes(event.key)) return;
    event.preventDefault();
    event.stopPropagation();
    const m = this.metrics();
    const step = { ArrowUp: -1, ArrowDown: 1, PageUp: -Math.floor(m.fit), PageDown: Math.floor(m.fit), Home: -Infinity, End: Infinity }[event.key];
    const position = Math.max(0, Math.min(m.n - 1, (this.selected ?? Math.floor(this.firstRow())) + step));
    this.selected = position;
    if (!this.isVisible(position)) this.scrollToRow(position);
    const page = await this.page(Math.floor(position / PAGE));
    const row = page.rows[position - page.offset];
    if (row) this.ctx.setMoment(row.index);
    this.render();
  }
}
