// @ts-check
// Pure (no DOM): cutting a label to the width a canvas gives it.

/**
 * `text` cut with an ellipsis to fit `width` CSS px in `ctx`'s font ("" when nothing fits).
 * @param {{measureText(text: string): {width: number}}} ctx a canvas context (or anything that measures)
 * @param {string} text
 * @param {number} width
 * @returns {string}
 */
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
