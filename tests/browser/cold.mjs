// Browser test of a snapshot the server has stored but not parsed ("cold"): its page answers at
// once with the page that follows the parse, shows each stage of GET /api/snapshots/{id}/status,
// and becomes the snapshot's page, timeline drawn, when the parse is done.
//
//   SNAPVIEW_CACHE=1 snapview serve ...   (a cache of one byte keeps only the snapshot used last)
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/cold.mjs
//
// With a one-byte cache, uploading a second snapshot drops the first from memory: the first is
// then cold, exactly as after a restart. A small fixture parses in a millisecond, so to see the
// stages the test holds the page's status requests in the browser (page.route) and answers each
// in turn: the server's own first page (rendered before any poll), a half-read and an analysing
// answer, then the server's real answer. A second snapshot is opened with nothing held: its
// first HTML answer is the loading page, and it turns into the full page by itself.

import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, drawn, FIXTURES, newContext, run, shot, step, until, upload } from "./harness.mjs";

const STATUS = "**/api/snapshots/*/status";

await run(80_000, async (browser) => {
  const context = await newContext(browser);
  const page = await context.newPage();
  const state = {};

  /** Status requests the page made and the test has not answered yet. */
  const held = [];
  const hold = (route) => {
    held.push(route);
  };
  /** Answers the page's next status request with `body`, or lets the server answer (null). */
  async function answerNext(body) {
    await until(() => held.length > 0, "the page to ask for the status");
    const route = held.shift();
    if (body) await route.fulfill({ json: body });
    else await route.continue();
  }
  const line = () => page.locator("#load-line").innerText();

  await step("a snapshot dropped from memory is cold (a one-byte cache)", async () => {
    state.mlp = (await upload(join(FIXTURES, "mlp_small.pickle"), "cold mlp")).id;
    state.oom = (await upload(join(FIXTURES, "oom.pickle"), "cold oom")).id;
    // Not /status: asking would start the parse this test wants to watch.
    const list = await api("/api/snapshots");
    assert(
      list.body.snapshots.some((s) => s.id === state.mlp),
      "mlp is listed",
    );
  });

  await step("its page answers at once with the loading page, named and sized from the record", async () => {
    await page.route(STATUS, hold);
    const response = await page.goto(`${BASE}/s/${state.mlp}?tab=timeline`, { waitUntil: "domcontentloaded" });
    assertEqual(response.status(), 200, "the loading page's status");
    await page.locator(".snapshot.loading").waitFor();
    assertEqual(await page.locator(".snapshot-name").innerText(), "cold mlp", "the stored name");
    assert((await page.locator(".meta").innerText()).includes("32.7 KiB"), "the stored size");
    const text = await line();
    assert(/^Reading mlp_small\.pickle: .+ of 32\.7 KiB$|^Analysing…$/.test(text), `the first line: ${text}`);
    assertEqual(await page.locator("#load-progress").getAttribute("role"), "progressbar", "the bar's role");
    assertEqual(await page.locator("#load-stage").getAttribute("aria-live"), "polite", "the stage is read out");
    assertEqual(await page.locator("#tab-timeline").count(), 0, "not the full page yet");
    await shot(page, "cold-first-answer");
    await clean(page);
  });

  await step("each answer of the status shows: bytes read with the bar, then analysing", async () => {
    await answerNext({ state: "reading", read: 16384, total: 33455 });
    await until(async () => (await line()) === "Reading mlp_small.pickle: 16.0 KiB of 32.7 KiB", "the bytes read");
    assertEqual(await page.locator("#load-progress").getAttribute("aria-valuenow"), "48", "the bar's value");
    assertEqual(await page.locator("#load-stage").innerText(), "Reading mlp_small.pickle", "the stage read out");
    const width = await page.locator("#load-progress .progress-bar").evaluate((bar) => bar.style.width);
    assertEqual(width, "48%", "the bar's fill");
    await shot(page, "cold-reading", { fullPage: false });
    await answerNext({ state: "analysing" });
    await until(async () => (await line()) === "Analysing…", "analysing");
    assertEqual(await page.locator("#load-stage").innerText(), "Analysing", "the stage read out");
    assert(await page.locator("#load-progress").evaluate((bar) => bar.classList.contains("indeterminate")), "the bar slides");
    assertEqual(await page.locator("#load-progress").getAttribute("aria-valuenow"), null, "no value while analysing");
    await shot(page, "cold-analysing", { fullPage: false });
    await clean(page);
  });

  await step("the server's answer (ready) turns it into the snapshot's page, timeline drawn", async () => {
    const reloaded = page.waitForEvent("load");
    await answerNext(null);
    await reloaded;
    await page.locator("#tab-timeline").waitFor();
    assertEqual(await page.locator(".snapshot.loading").count(), 0, "the loading page is gone");
    assertEqual(await page.locator("#tab-timeline").getAttribute("aria-selected"), "true", "the tab asked for in the URL");
    await drawn(page, "#timeline-canvas", 0.05);
    await shot(page, "cold-ready", { fullPage: false });
    await page.unroute(STATUS, hold);
    for (const route of held.splice(0)) route.continue().catch(() => {});
    await clean(page);
  });

  await step("with nothing held, a cold page's first answer is the loading page and it opens by itself", async () => {
    // Loading mlp dropped oom from the one-byte cache.
    const first = await api(`/s/${state.oom}`);
    assertEqual(first.status, 200, "first answer");
    assert(first.text.includes('class="snapshot loading"'), "the first HTML answer is the loading page");
    await page.goto(`${BASE}/s/${state.oom}`);
    await until(() => page.locator("#tab-timeline").count(), "the full page", 15_000);
    await page.locator(".oom-panel").waitFor();
    await clean(page);
  });

  await step("a failed load shows the server's reason and stops asking", async () => {
    // mlp is cold again (oom was loaded last).
    let asked = 0;
    const failed = (route) => {
      asked += 1;
      route.fulfill({ json: { state: "failed", error: "its stored file does not read as a snapshot: the file ends early" } });
    };
    await page.route(STATUS, failed);
    await page.goto(`${BASE}/s/${state.mlp}`, { waitUntil: "domcontentloaded" });
    await page.locator("#load-error").waitFor();
    assert((await page.locator("#load-error").innerText()).includes("the file ends early"), "the reason");
    assertEqual(await page.locator("#load-title").innerText(), "This snapshot could not be opened", "the heading");
    assertEqual(await line(), "The server could not read mlp_small.pickle (32.7 KiB).", "the line");
    assert(await page.locator("#load-progress").isHidden(), "no bar");
    assert(await page.locator(".load-actions a").isVisible(), "a way back to the list");
    const before = asked;
    await page.waitForTimeout(1000);
    assertEqual(asked, before, "no more status requests after a failure");
    await shot(page, "cold-failed", { fullPage: false });
    await page.unroute(STATUS, failed);
    await clean(page);
  });
});
