// @ts-check
// The event list: every event of the trace, virtualized (a fixed row height over a tall spacer,
// scaled when the trace is taller than a browser can scroll), fetched in cached pages of 200 rows
// for the visible range. Filters by action, minimum size and frame text; selecting a row moves
// the selected moment, and the list follows the moment when it moves elsewhere. A row opens
// (click, Enter) to the event's whole stack, fetched once per event, and hovering a row shows it
// in the tooltip; the frame filter's matches are marked in both.

import { getJSON } from "../lib/api.js";
import { bytes, count, duration, eventTime, hex, parseBytes } from "../lib/units.js";
import { h } from "./dom.js";
import { hideTip, showTip } from "./tooltip.js";

/** Row height in CSS px; on narrow screens a row is two lines (the frame below the numbers). */
const ROW_WIDE = 26;
const ROW_NARROW = 44;
const NARROW = window.matchMedia("(max-width: 600px)");
/** Frames shown in the hover tooltip; the opened row shows them all. */
const TIP_FRAMES = 12;
const PAGE = 200;
const MAX_SPACER = 8_000_000;

export class EventsView {
  /**
   * @param {import("./app.js").App} app
   * @param {HTMLElement} panel
   */
  constructor(app, panel) {
    this.app = app;
    this.panel = panel;
    this.scroller = /** @type {HTMLElement} */ (panel.querySelector("#event-scroller"));
    this.spacer = /** @type {HTMLElement} */ (panel.querySelector("#event-spacer"));
    this.rowsBox = /** @type {HTMLElement} */ (panel.querySelector("#event-rows"));
    this.countText = /** @type {HTMLElement} */ (panel.querySelector("#events-count"));
    this.error = /** @type {HTMLElement} */ (panel.querySelector("#events-error"));
    this.action = /** @type {HTMLSelectElement} */ (panel.querySelector("#events-action"));
    this.min = /** @type {HTMLInputElement} */ (panel.querySelector("#events-min"));
    this.frame = /** @type {HTMLInputElement} */ (panel.querySelector("#events-frame"));
    this.goto = /** @type {HTMLInputElement} */ (panel.querySelector("#events-goto"));
    this.pages = new Map();
    this.matching = null;
    this.filterKey = null;
    this.selected = null;
    this.t0 = null;
    /** The opened row's position among the matches, its stack's height once drawn. */
    this.expanded = null;
    this.expandedHeight = 0;
    /** Event stacks by `device|index|frame filter`, each fetched once. */
    this.stacks = new Map();
    this.gotoNote = h("span", { className: "view-status small events-goto-note", id: "events-goto-note", role: "status" });
    this.goto.closest("label").after(this.gotoNote);
    const s = app.store.get();
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
        app.store.set({ action: this.action.value, min: min || null, frame: this.frame.value.trim() });
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
      const wanted = Math.min(n, this.app.events() - 1);
      this.app.setMoment(wanted);
      this.locate(true).then(() => this.sayWhereGotoLanded(wanted));
      this.scroller.focus({ preventScroll: true });
    });
    this.scroller.addEventListener("scroll", () => {
      hideTip();
      this.render();
    });
    this.scroller.addEventListener("keydown", (event) => this.onKey(event));
    this.rowsBox.addEventListener("click", (event) => {
      const target = /** @type {Element} */ (event.target);
      if (target.closest(".event-stack")) return;
      const row = /** @type {HTMLElement | null} */ (target.closest("[data-position]"));
      if (!row?.dataset.index) return;
      const position = Number(row.dataset.position);
      // The opened stack says what the tooltip said; on a touch screen the tip would cover it.
      hideTip();
      this.hovered = null;
      this.selected = position;
      this.toggle(position);
      this.app.setMoment(Number(row.dataset.index));
      this.scroller.focus({ preventScroll: true });
    });
    this.rowsBox.addEventListener("mouseover", (event) => this.hover(event));
    this.rowsBox.addEventListener("mousemove", (event) => this.hover(event));
    this.rowsBox.addEventListener("mouseleave", () => {
      this.hovered = null;
      hideTip();
    });
    NARROW.addEventListener("change", () => this.visible() && this.locate(true));
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
    const s = this.app.store.get();
    const params = new URLSearchParams();
    params.set("device", String(this.app.device()));
    if (s.action) params.set("action", s.action);
    if (s.min) params.set("min_size", s.min);
    if (s.frame) params.set("frame", s.frame);
    return params;
  }

  async load() {
    const key = this.filterParams().toString();
    if (this.app.events() === 0) {
      this.countText.textContent = "";
      this.rowsBox.replaceChildren(h("div", { className: "event-empty" }, this.app.noHistory || "This device's trace has no events."));
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
    this.expanded = null;
    this.gotoNote.textContent = "";
    this.countText.textContent = "Loading…";
    try {
      if (this.t0 === null) {
        const first = await getJSON(`/api/snapshots/${this.app.id}/events?device=${this.app.device()}&limit=1`);
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
      params.set("offset", String(p * PAGE));
      params.set("limit", String(PAGE));
      const promise = getJSON(`/api/snapshots/${this.app.id}/events?${params}`).then((page) => {
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
    const at = this.app.moment();
    const key = this.filterKey;
    const params = this.filterParams();
    params.set("limit", String(PAGE));
    params.set("find", String(Math.max(0, at ?? 0)));
    const page = await getJSON(`/api/snapshots/${this.app.id}/events?${params}`);
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

  rowHeight() {
    return NARROW.matches ? ROW_NARROW : ROW_WIDE;
  }

  metrics() {
    const ROW = this.rowHeight();
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
    const s = this.app.store.get();
    const n = this.matching ?? 0;
    const total = this.app.events();
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
    const at = this.app.moment();
    const rows = [];
    const missing = new Set();
    const ROW = this.rowHeight();
    const loaded = (pos) => {
      const page = this.pages.get(`${this.filterKey}|${Math.floor(pos / PAGE)}`);
      return page && !(page instanceof Promise) ? page.rows[pos - page.offset] : null;
    };
    // Rows below an opened one move down by its stack's height (the rest of the list keeps
    // its fixed-height arithmetic; the rows pushed past the bottom are simply not seen).
    let below = 0;
    let stackBox = null;
    for (let pos = from; pos < to; pos += 1) {
      const row = loaded(pos);
      if (!this.pages.get(`${this.filterKey}|${Math.floor(pos / PAGE)}`)) missing.add(Math.floor(pos / PAGE));
      const top = (pos - first) * ROW + below;
      rows.push(this.rowElement(pos, row, top, at, loaded(pos - 1)));
      if (pos === this.expanded && row) {
        stackBox = this.stackElement(row, top + ROW);
        rows.push(stackBox);
        below += this.expandedHeight || 120;
      }
    }
    if (m.n === 0) rows.push(h("div", { className: "event-empty" }, "No event matches these filters."));
    this.rowsBox.replaceChildren(...rows);
    if (stackBox) this.fillStack(stackBox);
    for (const p of missing)
      this.page(p).then(
        () => this.render(),
        () => {},
      );
    this.layout = { first, from, to, matching: m.n, scaled: m.n * ROW > MAX_SPACER, expanded: this.expanded };
  }

  rowElement(position, row, top, at, previous) {
    const element = h("div", { className: "event-row", role: "row", dataset: { position } });
    element.style.top = `${top}px`;
    if (!row) {
      element.append(h("span", { className: "c-index muted" }, "…"));
      return element;
    }
    element.dataset.index = row.index;
    element.setAttribute("aria-expanded", String(position === this.expanded));
    if (row.index === at) element.classList.add("selected");
    if (position === this.selected) element.classList.add("cursor");
    const hasTime = row.time_us !== null && row.time_us !== undefined && this.t0 !== null;
    const since = hasTime ? row.time_us - this.t0 : null;
    const gap = hasTime && previous?.time_us !== null && previous?.time_us !== undefined ? row.time_us - previous.time_us : null;
    const timeTitle = hasTime ? `${count(since)} µs after the first event${gap === null ? "" : `; +${duration(gap)} after the row above`}` : "No time recorded";
    // One id form for blocks, PyTorch's viewer's b{hex address}_{reuse}; an event that opens or
    // closes no block (a segment's, an OOM) has none, its address is in the tooltip and stack.
    const block = row.block_id ?? "—";
    const frame = this.frameCell(row);
    element.append(
      h("span", { className: "c-index" }, count(row.index)),
      h("span", { className: "c-time", title: timeTitle }, hasTime ? eventTime(since) : "–"),
      h("span", { className: `c-action action-${row.action}` }, row.action),
      h("span", { className: "c-size" }, bytes(row.size)),
      h("span", { className: "c-addr", title: row.action === "oom" ? "An OOM has no block" : `address ${hex(row.addr)}` }, block),
      h("span", { className: "c-stream" }, String(row.stream)),
      frame,
    );
    return element;
  }

  /** The frame column: the innermost frame PyTorch's viewer shows, or, with a frame filter, the
   * frame that matched it with the matching text marked. */
  frameCell(row) {
    const filter = this.app.store.get().frame;
    const text = (filter && row.matched_frame) || row.top_frame || "";
    const cell = h("span", { className: "c-frame", title: filter && row.matched_frame ? `Matched “${filter}”: ${row.matched_frame}` : text });
    cell.append(...markMatches(text, filter));
    if (filter && row.matched_frame) cell.classList.add("matched");
    return cell;
  }

  /** The stack of the event at `row`, fetched once per event and filter. */
  stackOf(row) {
    const filter = this.app.store.get().frame ?? "";
    const key = `${this.app.device()}|${row.index}|${filter}`;
    if (!this.stacks.has(key)) {
      const params = new URLSearchParams({ device: String(this.app.device()) });
      if (filter) params.set("frame", filter);
      const promise = getJSON(`/api/snapshots/${this.app.id}/events/${row.index}?${params}`);
      promise.catch(() => this.stacks.delete(key));
      this.stacks.set(key, promise);
    }
    return this.stacks.get(key);
  }

  /** Opens the row at `position` (closing any other), or closes it when it is open. */
  toggle(position) {
    this.expanded = this.expanded === position ? null : position;
    this.expandedHeight = 0;
    this.render();
  }

  stackElement(row, top) {
    const box = h("div", { className: "event-stack", role: "region", "aria-label": `Stack of event ${count(row.index)}`, dataset: { index: row.index } });
    box.style.top = `${top}px`;
    box.append(h("div", { className: "muted small" }, "Loading the stack…"));
    return box;
  }

  async fillStack(box) {
    const index = Number(box.dataset.index);
    const page = this.pages.get(`${this.filterKey}|${Math.floor(this.expanded / PAGE)}`);
    const row = page?.rows?.[this.expanded - page.offset];
    if (!row || row.index !== index) return;
    let answer;
    try {
      answer = await this.stackOf(row);
    } catch (error) {
      box.replaceChildren(h("div", { className: "view-error" }, `The stack could not load. ${error.message}`));
      return;
    }
    if (!box.isConnected) return;
    const filter = this.app.store.get().frame;
    const head = h(
      "div",
      { className: "event-stack-head" },
      h("strong", {}, `Event ${count(index)} · ${row.action} · ${bytes(row.size)}`),
      h("span", { className: "muted" }, ` address ${hex(row.addr)}${row.block_id ? ` · block ${row.block_id}` : ""} · stream ${row.stream}`),
    );
    const list = h("ol", { className: "event-frames" });
    if (answer.frames.length === 0) list.append(h("li", { className: "muted" }, "No stack was recorded for this event."));
    for (const frame of answer.frames) {
      const base = (frame.filename ?? "").split("/").pop();
      const item = h("li", { className: frame.hidden ? "frame-hidden" : "", title: `${frame.filename}:${frame.line}` });
      item.append(
        h("span", { className: "frame-name" }, ...markMatches(frame.name, filter)),
        " ",
        h("span", { className: "frame-where" }, ...markMatches(`${base}:${frame.line}`, filter)),
      );
      if (frame.matched) item.classList.add("matched");
      list.append(item);
    }
    box.replaceChildren(head, list);
    const height = box.offsetHeight;
    if (height !== this.expandedHeight) {
      this.expandedHeight = height;
      this.render();
    }
  }

  /** The hover tooltip: the event's stack (the frames PyTorch's viewer shows, innermost first). */
  async hover(event) {
    const row = event.target.closest(".event-row[data-index]");
    if (!row) {
      this.hovered = null;
      hideTip();
      return;
    }
    const { clientX, clientY } = event;
    const index = Number(row.dataset.index);
    this.hovered = index;
    const position = Number(row.dataset.position);
    const page = this.pages.get(`${this.filterKey}|${Math.floor(position / PAGE)}`);
    const data = page?.rows?.[position - page.offset];
    if (!data) return;
    let answer;
    try {
      answer = await this.stackOf(data);
    } catch {
      return;
    }
    if (this.hovered !== index) return;
    const filter = this.app.store.get().frame;
    const shown = answer.frames.filter((f) => !f.hidden || f.matched);
    const lines = shown.slice(0, TIP_FRAMES).map((frame) => {
      const base = (frame.filename ?? "").split("/").pop();
      return h("div", { className: `tip-where${frame.matched ? " matched" : ""}` }, ...markMatches(`${frame.name}  ${base}:${frame.line}`, filter));
    });
    const more = shown.length > TIP_FRAMES ? h("div", { className: "muted" }, `… ${shown.length - TIP_FRAMES} more frames: click the row for all`) : null;
    const none = shown.length === 0 ? h("div", { className: "muted" }, "No stack was recorded for this event.") : null;
    showTip(clientX, clientY, h("div", { className: "tip-title" }, `Event ${count(index)} · ${data.action} · ${bytes(data.size)}`), ...lines, more, none);
  }

  /** After "go to event": says when the event asked for is not in the filtered list. */
  sayWhereGotoLanded(event) {
    const page = this.pages.get(`${this.filterKey}|${Math.floor((this.selected ?? 0) / PAGE)}`);
    const row = page && !(page instanceof Promise) && this.selected !== null ? page.rows[this.selected - page.offset] : null;
    if (row && row.index === event) this.gotoNote.textContent = "";
    else if (row)
      this.gotoNote.textContent = `Event ${count(event)} is filtered out: showing ${row.index > event ? "the next" : "the last"} match, event ${count(row.index)}`;
    else this.gotoNote.textContent = `Event ${count(event)} is filtered out, and no event matches after it`;
  }

  async onKey(event) {
    if (event.key === "Enter" || event.key === "Escape") {
      if (event.key === "Escape" && this.expanded === null) return;
      event.preventDefault();
      event.stopPropagation();
      if (event.key === "Escape") this.toggle(this.expanded);
      else if (this.selected !== null) this.toggle(this.selected);
      return;
    }
    if (!["ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End"].includes(event.key)) return;
    event.preventDefault();
    event.stopPropagation();
    const m = this.metrics();
    const step = { ArrowUp: -1, ArrowDown: 1, PageUp: -Math.floor(m.fit), PageDown: Math.floor(m.fit), Home: -Infinity, End: Infinity }[event.key];
    const position = Math.max(0, Math.min(m.n - 1, (this.selected ?? Math.floor(this.firstRow())) + step));
    this.selected = position;
    // An opened stack follows the cursor, so ↑ ↓ read stack after stack.
    if (this.expanded !== null) {
      this.expanded = position;
      this.expandedHeight = 0;
    }
    if (!this.isVisible(position)) this.scrollToRow(position);
    const page = await this.page(Math.floor(position / PAGE));
    const row = page.rows[position - page.offset];
    if (row) this.app.setMoment(row.index);
    this.render();
  }
}

/** `text` as nodes, each occurrence of `needle` (case-insensitive) in a <mark>. */
function markMatches(text, needle) {
  if (!needle) return [text];
  const lower = text.toLowerCase();
  const find = needle.toLowerCase();
  const parts = [];
  let from = 0;
  for (let at = lower.indexOf(find); at >= 0; at = lower.indexOf(find, from)) {
    if (at > from) parts.push(text.slice(from, at));
    parts.push(h("mark", {}, text.slice(at, at + find.length)));
    from = at + find.length;
  }
  if (from < text.length) parts.push(text.slice(from));
  return parts;
}
