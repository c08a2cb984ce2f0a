// @ts-check
// The colours and fonts canvases draw with, read from the stylesheet's custom properties so that
// the light and dark schemes live in the CSS alone.

const dark = window.matchMedia("(prefers-color-scheme: dark)");

/** Colours and fonts from the stylesheet's custom properties (light or dark). */
export function theme() {
  const style = getComputedStyle(document.documentElement);
  /** @param {string} name */
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

/** @typedef {ReturnType<typeof theme>} Theme */

/**
 * Calls `fn` when the colour scheme changes.
 * @param {() => void} fn
 */
export function onThemeChange(fn) {
  dark.addEventListener("change", fn);
}
