// Shared pieces of the browser scripts (server_pages, views, compare, oom, perf_huge): a runner
// and steps, the API, a Chromium whose pages report console errors and CSP violations, pixel
// counting and screenshots.
//
// The test hook: a page hands the browser tests its internals through ONE global,
// `window.snapviewTest`, and nothing else; static/views/test-hook.js is the one place that sets
// it. The snapshot page (static/views/app.js) gives `{ store, app, views }`; the compare page
// (static/compare/main.js) `{ flameRects, curvePoint }`. The snapshot page's: the URL state store
// (`store.get()`, `store.set(patch)`), the page's app context (`app.setMoment(n)`) and the
// views by tab (`views.timeline.layout` and `.model`, `views.flame.rects` and `.data`,
// `views.segments.pieces`), so a script asserts on what was drawn where instead of reading
// pixels. A page that needs another hook adds its fields there.

import { createReadStream, mkdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const HERE = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(HERE, "../..");
export const FIXTURES = join(ROOT, "tests/fixtures");
export const SHOTS = process.env.SNAPVIEW_SCREENSHOTS ?? join(ROOT, "target/screenshots");
export const BASE = (process.env.SNAPVIEW_URL ?? "").replace(/\/+$/, "");
export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
export const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-quic",
];

if (!BASE) {
  console.error("Set SNAPVIEW_URL to a running snapview server, e.g. http://127.0.0.1:7979");
  process.exit(2);
}
mkdirSync(SHOTS, { recursive: true });

let passed = 0;
let failed = 0;

export async function step(name, fn, timeoutMs = 30_000) {
  const t0 = Date.now();
  let timer;
  try {
    await Promise.race([fn(), new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs)))]);
    passed += 1;
    console.log(`ok    ${name}  (${Date.now() - t0} ms)`);
  } catch (error) {
    failed += 1;
    console.log(
      `FAIL  ${name}  (${Date.now() - t0} ms)\n      ${String(error?.stack ?? error)
        .split("\n")
        .join("\n      ")}`,
    );
  } finally {
    clearTimeout(timer);
  }
}

export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

export function assert(condition, message) {
  if (!condition) throw new Error(message);
}

export function assertEqual(actual, expected, what) {
  if (actual !== expected) throw new Error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

/** Polls `probe` until it returns a truthy value (returned) or `ms` pass. */
/**
 * Resolves once the page has shown two more frames: every repaint asked for before has run (the
 * views coalesce repaints into the next animation frame, static/views/canvas.js).
 */
export async function painted(page) {
  await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
}

export async function until(probe, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export async function api(path, options = {}) {
  const response = await fetch(`${BASE}${path}`, options);
  const text = await response.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: response.status, body, text };
}

/** Uploads a file through the API; returns the answer ({id, url, …}). */
export async function upload(path, name) {
  // A file over 1 GiB is streamed (Node cannot read one over 2 GiB into a buffer).
  const streamed = statSync(path).size > 1 << 30;
  const bytes = streamed ? Readable.toWeb(createReadStream(path)) : readFileSync(path);
  const query = new URLSearchParams({ filename: path.split("/").pop(), ...(name ? { name } : {}) });
  const options = { method: "POST", body: bytes, ...(streamed ? { duplex: "half" } : {}) };
  const { status, body, text } = await api(`/api/snapshots?${query}`, options);
  assert(status === 201 || status === 200, `upload of ${path} answered ${status}: ${text}`);
  return body;
}

/** Moves the pointer to CSS px (x, y) of `selector`'s box. */
export async function hover(page, selector, x, y) {
  const box = await page.locator(selector).boundingBox();
  await page.mouse.move(box.x + x, box.y + y);
}

export function exists(path) {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

export async function launch() {
  return chromium.launch({ executablePath: CHROMIUM, args: ARGS });
}

/**
 * Runs a script's steps with a browser: gives up after `totalMs`, says how to get chromium if
 * it will not start, and exits with the steps' verdict.
 */
export async function run(totalMs, script) {
  const timer = setTimeout(() => {
    console.log(`FAIL  the whole run took longer than ${totalMs} ms`);
    process.exit(1);
  }, totalMs);
  let browser;
  try {
    browser = await launch();
  } catch (error) {
    console.log(`FAIL  cannot start chromium (install it with \`apt-get install chromium\`): ${error.message}`);
    process.exit(1);
  }
  let code = 1;
  try {
    await script(browser);
    code = finish();
  } catch (error) {
    console.log(`FAIL  ${error?.stack ?? error}`);
  } finally {
    clearTimeout(timer);
    await browser.close().catch(() => {});
  }
  process.exit(code);
}

export const problems = [];

/**
 * A context whose pages report console errors, page errors and CSP violations. `expected(text,
 * url)` names the console errors a script causes on purpose (a refused upload, a 404 page).
 */
export async function newContext(browser, options = {}, expected = () => false) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, ...options });
  context.setDefaultTimeout(10_000);
  context.setDefaultNavigationTimeout(20_000);
  // CSP violations are console errors too, but counting them directly names the blocked thing.
  await context.addInitScript(() => {
    window.__csp = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      window.__csp.push(`${event.violatedDirective} blocked ${event.blockedURI || "inline"} (${event.sourceFile}:${event.lineNumber})`);
    });
  });
  context.on("page", (page) => watch(page, expected));
  return context;
}

function watch(page, expected) {
  page.on("console", (message) => {
    if (process.env.DEBUG_CONSOLE) console.log(`  [console.${message.type()}] ${message.text()}`);
    if (message.type() !== "error") return;
    const url = message.location()?.url ?? "";
    if (expected(message.text(), url)) return;
    problems.push(`${page.url()}: console error: ${message.text()} ${url}`);
  });
  page.on("pageerror", (error) => problems.push(`${page.url()}: uncaught ${error.message}`));
}

/** Fails when a page reported a problem or a CSP violation since the last check. */
export async function clean(page) {
  const violations = await page.evaluate(() => window.__csp ?? []);
  assert(violations.length === 0, `CSP violations on ${page.url()}:\n  ${violations.join("\n  ")}`);
  if (problems.length) throw new Error(`the page reported:\n  ${problems.splice(0).join("\n  ")}`);
}

export async function shot(page, name, options = {}) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true, animations: "disabled", ...options });
}

/**
 * Pixels of a canvas that differ from its top-left pixel (the background), read back with
 * getImageData: [count, total].
 */
export async function inkedPixels(page, selector) {
  return page.evaluate((selector) => {
    const canvas = document.querySelector(selector);
    if (!canvas || canvas.width === 0) return [0, 0];
    const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    const [r, g, b] = [data[0], data[1], data[2]];
    let inked = 0;
    for (let i = 0; i < data.length; i += 4) if (Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) > 24) inked += 1;
    return [inked, data.length / 4];
  }, selector);
}

/** Waits until the canvas has ink on at least `share` of its pixels; returns the share. */
export async function drawn(page, selector, share = 0.02) {
  let last = 0;
  await until(async () => {
    const [inked, total] = await inkedPixels(page, selector);
    last = total ? inked / total : 0;
    return last >= share;
  }, `${selector} to be drawn (ink ${last})`);
  return last;
}
