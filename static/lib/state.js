// @ts-check
// The view state held in the URL query, so a copied link opens exactly what the sender saw.
// Pure: parse and serialize only.

export const TABS = ["overview", "timeline", "flame", "segments", "events"];

// y0, y1: the timeline's byte zoom (bytes at the plot's bottom and top); detail: most bands.
const INTEGER_KEYS = ["device", "start", "end", "at", "alloc", "min", "y0", "y1", "detail"];
const TEXT_KEYS = ["q", "frame", "action", "zoom"];

/** Default state: the overview, no moment chosen (the peak), the whole trace. */
export function defaults() {
  return {
    tab: "overview",
    device: null,
    start: null,
    end: null,
    y0: null,
    y1: null,
    detail: null,
    axis: "event",
    at: null,
    alloc: null,
    q: "",
    mode: "allocated",
    action: "",
    min: null,
    frame: "",
    zoom: "",
    // The timeline's colours: one per allocation, or by role (docs/roles.md).
    color: "allocation",
    // The flame graph's root: stacks as recorded, or each stack under its role.
    by: "stack",
  };
}

/** @typedef {ReturnType<typeof defaults>} State the view state (`defaults()`'s keys) */

/** State from a query string; unknown or malformed values fall back to the defaults. */
export function parse(search) {
  const params = new URLSearchParams(search);
  const state = defaults();
  const tab = params.get("tab");
  if (TABS.includes(tab)) state.tab = tab;
  for (const key of INTEGER_KEYS) {
    const raw = params.get(key);
    if (raw !== null && /^-?\d+$/.test(raw.trim())) state[key] = Number(raw);
  }
  for (const key of TEXT_KEYS) state[key] = params.get(key) ?? "";
  if (params.get("axis") === "time") state.axis = "time";
  if (params.get("mode") === "reserved") state.mode = "reserved";
  if (params.get("color") === "role") state.color = "role";
  if (params.get("by") === "role") state.by = "role";
  if (state.start !== null && state.end !== null && state.end < state.start) {
    state.start = null;
    state.end = null;
  }
  // The byte zoom needs both ends, in order, not below zero.
  if (state.y0 === null || state.y1 === null || state.y0 < 0 || state.y1 <= state.y0) {
    state.y0 = null;
    state.y1 = null;
  }
  if (state.detail !== null && state.detail < 1) state.detail = null;
  return state;
}

/** The query string for `state` ("" for the defaults), keys in a stable order. */
export function serialize(state) {
  const base = defaults();
  const params = new URLSearchParams();
  for (const key of [
    "tab",
    "device",
    "axis",
    "start",
    "end",
    "y0",
    "y1",
    "detail",
    "at",
    "alloc",
    "mode",
    "q",
    "zoom",
    "action",
    "min",
    "frame",
    "color",
    "by",
  ]) {
    const value = state[key];
    if (value === null || value === undefined || value === base[key] || value === "") continue;
    params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}
