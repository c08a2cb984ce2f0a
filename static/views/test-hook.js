// @ts-check
// The one test hook: a page hands the browser tests its internals through one global,
// `window.snapviewTest`, set here and nowhere else (tests/browser/harness.mjs says what each
// page puts in it). The snapshot page (views/app.js) gives `{ store, app, views }`; the compare
// page (compare/main.js) `{ curvePoint, flameRects }`.

/**
 * Makes `hook` the page's `window.snapviewTest`.
 * @param {object} hook
 */
export function exposeToTests(hook) {
  window.snapviewTest = hook;
}
