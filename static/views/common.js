// DOM and canvas helpers the views share: element builder, devicePixelRatio-aware canvases,
// theme colours from the stylesheet, the tooltip, JSON fetches with human errors.

/** `h("div", {className: "x", title: "y"}, child, "text")`. Never sets inline style attributes. */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key in element && key !== "list") element[key] = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/**
 * Sizes `canvas` to `cssWidth` × `cssHeight` CSS px backed by device px, and returns its 2D
 * context scaled so drawing code works in CSS px.
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
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

const dark = window.matchMedia("(prefers-color-scheme: dark)");

/** Colours and fonts from the stylesheet's custom properties (light or dark). */
export function theme() {
  const style = getComputedStyle(document.documentElement);
  const v = (name) => style.getPropertyValue(name).trim();
  return {
    dark: dark.matches,
    bg: v("--panel"),
    sunken: v("--sunken"),
    text: v("--text"),
    muted: v("--muted"),
    faint: v("--faint"),
    line: v("--line"),
    lineStrong: v("--line-strong"),
    accent: v("--accent"),
    oom: v("--oom"),
    warn: v("--warn"),
    small: v("--viz-small"),
    smallRange: v("--viz-small-range"),
    smallEdge: v("--viz-small-edge"),
    reserved: v("--viz-reserved"),
    peak: v("--viz-peak"),
    annotation: v("--viz-annotation"),
    incomplete: v("--viz-incomplete"),
    allocated: v("--viz-allocated"),
    pending: v("--viz-pending"),
    free: v("--viz-free"),
    rounding: v("--viz-rounding"),
    match: v("--viz-match"),
    // The compare page's sides and changes (compare.css; empty on other pages).
    before: v("--cmp-before"),
    after: v("--cmp-after"),
    grow: v("--cmp-grow"),
    shrink: v("--cmp-shrink"),
    same: v("--cmp-same"),
    font: `11px ${v("--sans") || "sans-serif"}`,
    fontBold: `600 11px ${v("--sans") || "sans-serif"}`,
    mono: `11px ${v("--mono") || "monospace"}`,
  };
}

/** `text` cut with an ellipsis to fit `width` CSS px in `ctx`'s font ("" when nothing fits). */
export function fitText(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= width) lo = mid;
    else hi = mid - 1;
  }
  return lo > 0 ? `${text.slice(0, lo)}…` : "";
}

/** Calls `fn` when the colour scheme changes. */
export function onThemeChange(fn) {
  dark.addEventListener("change", fn);
}

// ---------------------------------------------------------------------------------------------
// Tooltip: one floating box for every view.

let tip;
/** Shows the tooltip near (clientX, clientY) with `content` (nodes or text). */
export function showTip(clientX, clientY, ...content) {
  if (!tip) {
    tip = h("div", { className: "tip", role: "tooltip" });
    document.body.append(tip);
  }
  tip.replaceChildren(...content.flat().filter(Boolean));
  tip.hidden = false;
  const box = tip.getBoundingClientRect();
  let x = clientX + 14;
  let y = clientY + 16;
  if (x + box.width > window.innerWidth - 8) x = Math.max(8, clientX - box.width - 14);
  if (y + box.height > window.innerHeight - 8) y = Math.max(8, clientY - box.height - 12);
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}

export function hideTip() {
  if (tip) tip.hidden = true;
}

/** A tooltip line "label value". */
export function tipRow(label, value) {
  return h("div", { className: "tip-row" }, h("span", { className: "tip-label" }, label), h("span", { className: "tip-value" }, value));
}

/** Fills a canvas with the background and `text` (what a view shows before its first answer). */
export function paintPlaceholder(canvas, width, height, text) {
  const t = theme();
  const ctx = fitCanvas(canvas, width, height);
  ctx.fillStyle = t.bg;
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = t.muted;
  ctx.font = t.font;
  ctx.fillText(text, 8, 24);
}

// ---------------------------------------------------------------------------------------------
// Fetching.

/** GETs JSON; throws an Error whose message a person can read (aborts rethrow as AbortError). */
export async function getJSON(url, signal) {
  let response;
  try {
    response = await fetch(url, { signal });
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new Error("The server could not be reached. Is snapview still running?");
  }
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    const message = body?.error?.message ?? `${response.status} ${response.statusText}`;
    throw new Error(`The server answered: ${message}`);
  }
  return response.json();
}

/**
 * A loader for a view whose newest request is the only one that counts: a new request aborts
 * the one in flight, `staleMark` is marked stale until the newest settles, its answer goes to
 * `show`, and a failure fills `errorBox` with "`what` could not load. <why>".
 */
export function newestOnly({ staleMark, errorBox, what }) {
  let inFlight = null;
  return async (url, show) => {
    inFlight?.abort();
    const controller = new AbortController();
    inFlight = controller;
    staleMark.classList.add("stale");
    try {
      const data = await getJSON(url, controller.signal);
      errorBox.hidden = true;
      show(data);
    } catch (error) {
      if (error.name === "AbortError") return;
      errorBox.textContent = `${what} could not load. ${error.message}`;
      errorBox.hidden = false;
    } finally {
      if (inFlight === controller) staleMark.classList.remove("stale");
    }
  };
}

/** Allocation details by id, fetched once per (snapshot, device, id). */
const allocationCache = new Map();
export function allocation(snapshot, device, n) {
  const key = `${snapshot}/${device}/${n}`;
  if (!allocationCache.has(key)) {
    const promise = getJSON(`/api/snapshots/${snapshot}/allocations/${n}?device=${device}`);
    promise.catch(() => allocationCache.delete(key));
    allocationCache.set(key, promise);
  }
  return allocationCache.get(key);
}

/** A frame as "name  file.py:123" parts. */
export function frameParts(frame) {
  const base = (frame.filename ?? "").split("/").pop();
  return { name: frame.name, where: base ? `${base}:${frame.line}` : "" };
}

/** Frames PyTorch's viewer shows (hidden ones filtered), innermost first. */
export function visibleFrames(frames, showAll = false) {
  return showAll ? frames : frames.filter((f) => !f.hidden);
}

/** Downloads `text` as a file. */
export function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Runs `fn` at most once per animation frame. */
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
