// Temporary: static/compare.js still imports this; the lead deletes it once static/compare/ lands.
export { copyLink, isShortcut, keyboardHelp, showTimes } from "../views/page.js";
