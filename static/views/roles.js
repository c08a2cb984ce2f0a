// @ts-check
// The overview's bars of memory by role: widths from the server, colours from the one role palette.

import { roleColor } from "../lib/color.js";
import { roleHelp } from "../lib/roles.js";
import { onThemeChange, theme } from "./theme.js";

/**
 * Colour every role segment and swatch under `root`, and give each its hover sentence.
 * @param {ParentNode} [root]
 */
export function showRoleBars(root = document) {
  const paint = () => {
    const { dark } = theme();
    for (const el of /** @type {NodeListOf<HTMLElement>} */ (root.querySelectorAll(".role-seg[data-role], .role-key[data-role] .role-swatch"))) {
      const role = /** @type {HTMLElement} */ (el.closest("[data-role]")).dataset.role;
      el.style.background = roleColor(role, dark);
    }
  };
  for (const seg of /** @type {NodeListOf<HTMLElement>} */ (root.querySelectorAll(".role-seg[data-width]"))) {
    seg.style.width = `${Math.min(100, Math.max(0, Number(seg.dataset.width) || 0))}%`;
  }
  for (const el of /** @type {NodeListOf<HTMLElement>} */ (root.querySelectorAll(".role-seg[data-role], .role-key[data-role]"))) {
    el.title = `${el.title}\n${roleHelp(el.dataset.role)}`;
  }
  // Hovering or focusing a legend key lights its segment up, and the other way round.
  for (const row of /** @type {NodeListOf<HTMLElement>} */ (root.querySelectorAll(".role-bar-row"))) {
    const highlight = (role) => {
      for (const el of /** @type {NodeListOf<HTMLElement>} */ (row.querySelectorAll("[data-role]")))
        el.classList.toggle("dim", role !== null && el.dataset.role !== role);
    };
    for (const el of /** @type {NodeListOf<HTMLElement>} */ (row.querySelectorAll("[data-role]"))) {
      el.addEventListener("pointerenter", () => highlight(el.dataset.role));
      el.addEventListener("pointerleave", () => highlight(null));
      el.addEventListener("focus", () => highlight(el.dataset.role));
      el.addEventListener("blur", () => highlight(null));
    }
  }
  paint();
  onThemeChange(paint);
}
