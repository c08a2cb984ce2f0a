// Globals the front end adds to the page, for `tsc` (tsconfig.json); the browser never loads this.

interface Window {
  /** The browser tests' hook (static/views/test-hook.js). */
  snapviewTest?: object;
}
