// Temporary: static/compare.js still imports this; the lead deletes it once static/compare/ lands.
export { bytes, relativeTime } from "./units.js";
