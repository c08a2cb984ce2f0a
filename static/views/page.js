// @ts-check
// Behaviour every page shares (DOM): relative times, the toast, the keyboard-shortcut dialog.

import { relativeTime } from "../lib/units.js";

/**
 * Fills every `<time data-ms>` with "3 minutes ago" (the exact time on hover), and keeps it fresh.
 * @param {ParentNode} [root]
 */
export function showTimes(root = document) {
  const update = () => {
    for (const time of /** @type {NodeListOf<HTMLTimeElement>} */ (root.querySelectorAll("time[data-ms]"))) {
      const ms = Number(time.dataset.ms);
      time.textContent = relativeTime(ms);
      time.dateTime = new Date(ms).toISOString();
      time.title = new Date(ms).toLocaleString();
    }
  };
  update();
  setInterval(update, 30_000);
}

let toastTimer;
/** Shows `message` at the bottom of the page for a moment (longer for long messages). */
export function toast(message, ms = 2200) {
  const element = /** @type {HTMLElement | null} */ (document.querySelector(".toast"));
  if (!element) return;
  element.textContent = message;
  element.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (element.hidden = true), Math.max(ms, message.length * 60));
}

/** Registers the `?` dialog listing `keys` ([["/", "Filter"], ...]) and shows the `?` button. */
export function keyboardHelp(keys) {
  const dialog = document.createElement("dialog");
  dialog.className = "keys";
  dialog.setAttribute("aria-labelledby", "keys-title");
  // Focus the dialog itself on opening, not its close button.
  dialog.tabIndex = -1;
  dialog.innerHTML =
    "<div class='keys-head'><h2 id='keys-title'>Keyboard shortcuts</h2>" +
    "<button type='button' class='close-button' aria-label='Close' title='Close (Esc)'>×</button></div>" +
    "<table></table>";
  const table = dialog.querySelector("table");
  for (const [key, what] of [...keys, ["Esc", "Close this"]]) {
    const row = table.insertRow();
    const cell = row.insertCell();
    for (const [i, part] of key.split(" ").entries()) {
      if (i > 0) cell.append(" ");
      const kbd = document.createElement("kbd");
      kbd.textContent = part;
      cell.append(kbd);
    }
    row.insertCell().textContent = what;
  }
  document.body.append(dialog);
  dialog.querySelector(".close-button").addEventListener("click", () => dialog.close());
  // A click on the backdrop (outside the box) closes it too.
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) {
      const box = dialog.getBoundingClientRect();
      const inside = event.clientX >= box.left && event.clientX <= box.right && event.clientY >= box.top && event.clientY <= box.bottom;
      if (!inside) dialog.close();
    }
  });
  const toggle = () => {
    if (dialog.open) {
      dialog.close();
    } else {
      dialog.showModal();
      dialog.focus();
    }
  };
  const button = /** @type {HTMLButtonElement | null} */ (document.querySelector("[data-show-keys]"));
  if (button) {
    button.hidden = false;
    button.addEventListener("click", toggle);
  }
  document.addEventListener("keydown", (event) => {
    if (event.key === "?" && !isTyping(event) && !event.ctrlKey && !event.metaKey && !event.altKey) {
      event.preventDefault();
      toggle();
    }
  });
}

/** Whether a key press belongs to a text field (or comes with a modifier) and is not a shortcut. */
export function isTyping(event) {
  const target = event.target;
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

/** Whether a plain letter shortcut should fire: no modifier, not typing, no dialog open. */
export function isShortcut(event) {
  return !event.ctrlKey && !event.metaKey && !event.altKey && !isTyping(event) && !document.querySelector("dialog[open]");
}

/** Copies with the Clipboard API, or the old way where that is unavailable (plain http). */
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.append(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    area.remove();
    return ok;
  }
}

/** Copies `url` and says so, or shows it to copy by hand. */
export async function copyLink(url = window.location.href) {
  if (await copyText(url)) toast("Link copied");
  else toast(`Copy this link: ${url}`, 8000);
}
