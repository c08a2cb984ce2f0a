// @ts-check
// The tooltip: one floating box for every view, placed beside the pointer and kept on screen.

import { h } from "./dom.js";

/** @type {HTMLDivElement | undefined} */
let tip;

/**
 * Shows the tooltip near (clientX, clientY) with `content` (nodes or text).
 * @param {number} clientX
 * @param {number} clientY
 * @param {...(Node | string | null | undefined | false | (Node | string | null | undefined | false)[])} content
 */
export function showTip(clientX, clientY, ...content) {
  if (!tip) {
    tip = h("div", { className: "tip", role: "tooltip" });
    document.body.append(tip);
  }
  // Empty parts (null, false, "") are left out.
  tip.replaceChildren(.../** @type {(Node | string)[]} */ (content.flat().filter(Boolean)));
  tip.hidden = false;
  const box = tip.getBoundingClientRect();
  let x = clientX + 14;
  let y = clientY + 16;
  if (x + box.width > window.innerWidth - 8) x = Math.max(8, clientX - box.width - 14);
  if (y + box.height > window.innerHeight - 8) y = Math.max(8, clientY - box.height - 12);
  // Placement through the CSSOM, which the CSP allows (a `style=` attribute it would refuse).
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}

export function hideTip() {
  if (tip) tip.hidden = true;
}

/**
 * A tooltip line "label value".
 * @param {Node | string} label
 * @param {Node | string | number} value
 */
export function tipRow(label, value) {
  return h("div", { className: "tip-row" }, h("span", { className: "tip-label" }, label), h("span", { className: "tip-value" }, value));
}
