// Browser test of snapshots the server has stored but not parsed ("cold"): a snapshot's page
// answers at once with the page that follows the parse, shows each stage of
// GET /api/snapshots/{id}/status, and becomes the snapshot's page, timeline drawn, when the parse
// is done; the compare page of two cold snapshots shows both progresses, then draws the
// comparison.
//
//   SNAPVIEW_CACHE=1 snapview serve ...   (a cache of one byte keeps only the snapshot used last)
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/cold.mjs
//
// With a one-byte cache, uploading a second snapshot drops the first from memory: the first is
// then cold, exactly as after a restart. A small fixture parses in a millisecond, so to see the
// stages the test holds the page's status requests in the browser (page.route) and answers each
// in turn: the server's own first page (rendered before any poll), a half-read and an analysing
// answer, then the server's real answer. A second snapshot is opened with nothing held: its
// first HTML answer is the loading page, and it turns into the full page by itself. The compare
// page's data request is held the same way, so the test sees its card before it draws.

import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, drawn, FIXTURES, newContext, run, shot, step, until, upload } from "./harness.mjs";

const STATUS = "**/api/snapshots/*/status";
const COMPARE_DATA = "**/api/compare/*/*";

await run(110_000, async (browser) => {
  const context = await newContext(browser);
  const page = await context.newPage();
  const state = {};

  /** Status requests the page made and the test has not answered yet. */
  const held = [];
  const hold = (route) => {
    held.push(route);
  };
  /** The compare page's data requests, held until `releaseData`. */
  const heldData = [];
  const holdData = (route) => {
    heldData.push(route);
  };
  async function releaseData() {
    await page.unroute(COMPARE_DATA, holdData);
    for (const route of heldData.splice(0)) route.continue().catch(() => {});
  }
  /** Answers the page's next status request with `body`, or lets the server answer (null). */
  async function answerNext(body) {
    await until(() => held.length > 0, "the page to ask for the status");
    const route = held.shift();
    if (body) await route.fulfill({ json: body });
    else await route.continue();
  }
  /** Answers the page's next status request for snapshot `id` with `body`. */
  async function answerFor(id, body) {
    const ofId = (route) => route.request().url().includes(`/api/snapshots/${id}/status`);
    await until(() => held.some(ofId), `the page to ask for the status of ${id}`);
    const route = held.splice(held.findIndex(ofId), 1)[0];
    await route.fulfill({ json: body });
  }
  const line = () => page.locator(".load-line").innerText();
  /** The line of the compare page's card for snapshot `id`. */
  const lineOf = (id) => page.locator(`.load[data-id="${id}"] .load-line`).innerText();

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
    assertEqual(await page.locator(".load .progress").getAttribute("role"), "progressbar", "the bar's role");
    assertEqual(await page.locator(".load-stage").getAttribute("aria-live"), "polite", "the stage is read out");
    assertEqual(await page.locator(".load-name").count(), 0, "one snapshot: its name is the page's heading");
    assertEqual(await page.locator("#tab-timeline").count(), 0, "not the full page yet");
    await shot(page, "cold-first-answer");
    await clean(page);
  });

  await step("each answer of the status shows: bytes read with the bar, then analysing", async () => {
    await answerNext({ state: "reading", read: 16384, total: 33455 });
    await until(async () => (await line()) === "Reading mlp_small.pickle: 16.0 KiB of 32.7 KiB", "the bytes read");
    assertEqual(await page.locator(".load .progress").getAttribute("aria-valuenow"), "48", "the bar's value");
    assertEqual(await page.locator(".load-stage").innerText(), "Reading mlp_small.pickle", "the stage read out");
    const width = await page.locator(".load .progress-bar").evaluate((bar) => bar.style.width);
    assertEqual(width, "48%", "the bar's fill");
    await shot(page, "cold-reading", { fullPage: false });
    await answerNext({ state: "analysing" });
    await until(async () => (await line()) === "Analysing…", "analysing");
    assertEqual(await page.locator(".load-stage").innerText(), "Analysing", "the stage read out");
    assert(await page.locator(".load .progress").evaluate((bar) => bar.classList.contains("indeterminate")), "the bar slides");
    assertEqual(await page.locator(".load .progress").getAttribute("aria-valuenow"), null, "no value while analysing");
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
    await page.locator(".load-error").waitFor();
    assert((await page.locator(".load-error").innerText()).includes("the file ends early"), "the reason");
    assertEqual(await page.locator("#load-title").innerText(), "This snapshot could not be opened", "the heading");
    assertEqual(await line(), "The server could not read mlp_small.pickle (32.7 KiB).", "the line");
    assert(await page.locator(".load .progress").isHidden(), "no bar");
    assert(await page.locator(".load-actions a").isVisible(), "a way back to the list");
    const before = asked;
    await page.waitForTimeout(1000);
    assertEqual(asked, before, "no more status requests after a failure");
    await shot(page, "cold-failed", { fullPage: false });
    await page.unroute(STATUS, failed);
    await clean(page);
  });
  await step("the compare page of two cold snapshots answers at once with both loads", async () => {
    // A third snapshot in the one-byte cache: mlp and oom are both cold.
    state.third = (await upload(join(FIXTURES, "streams.pickle"), "cold third")).id;
    await page.route(STATUS, hold);
    await page.route(COMPARE_DATA, holdData);
    const response = await page.goto(`${BASE}/compare/${state.mlp}/${state.oom}`, { waitUntil: "domcontentloaded" });
    assertEqual(response.status(), 200, "the compare page's status");
    await page.locator("#load-card").waitFor();
    assertEqual(await page.locator("#load-title").innerText(), "Opening both snapshots", "the card's heading");
    assertEqual(await page.locator(".load").count(), 2, "one line per cold snapshot");
    assertEqual(
      await page
        .locator(".load-name")
        .allInnerTexts()
        .then((names) => names.join(" | ")),
      "cold mlp | cold oom",
      "both named",
    );
    assert(await page.locator("#compare-loading").isHidden(), "no spinner while the card shows the loads");
    assertEqual(
      await page
        .locator(".compare-title")
        .innerText()
        .then((t) => t.replace(/\s+/g, " ").trim()),
      "cold mlp → cold oom",
      "the comparison's title",
    );
    await clean(page);
  });

  await step("each snapshot shows its own progress, then the comparison draws", async () => {
    await answerFor(state.mlp, { state: "reading", read: 16384, total: 33455 });
    await answerFor(state.oom, { state: "analysing" });
    await until(async () => (await lineOf(state.mlp)) === "Reading mlp_small.pickle: 16.0 KiB of 32.7 KiB", "mlp's bytes read");
    await until(async () => (await lineOf(state.oom)) === "Analysing…", "oom analysing");
    assertEqual(await page.locator(`.load[data-id="${state.mlp}"] .progress`).getAttribute("aria-valuenow"), "48", "mlp's bar");
    assert(await page.locator(`.load[data-id="${state.oom}"] .progress`).evaluate((bar) => bar.classList.contains("indeterminate")), "oom's bar slides");
    await shot(page, "cold-compare-progress", { fullPage: false });
    await answerFor(state.mlp, { state: "ready" });
    await answerFor(state.oom, { state: "reading", read: 40000, total: 51840 });
    await until(async () => (await lineOf(state.mlp)) === "Ready; waiting for the other snapshot…", "mlp ready, waiting for oom");
    await until(async () => (await lineOf(state.oom)).startsWith("Reading oom.pickle: 39.1 KiB"), "oom's bytes read");
    await shot(page, "cold-compare-one-ready", { fullPage: false });
    // Only oom is asked about now: a ready snapshot is not asked again.
    await answerFor(state.oom, { state: "ready" });
    await until(() => page.locator("#load-card").isHidden(), "the card goes once both are ready");
    assert(await page.locator("#compare-loading").isVisible(), "the spinner while the stacks are lined up");
    assertEqual(held.filter((route) => route.request().url().includes(state.mlp)).length, 0, "mlp was not asked about again");
    await page.unroute(STATUS, hold);
    for (const route of held.splice(0)) route.continue().catch(() => {});
    await releaseData();
    await page.locator("#compare[data-ready=true]").waitFor({ timeout: 20_000 });
    await until(() => page.evaluate(() => (window.snapviewTest?.flameRects().length ?? 0) > 0), "the flame graph's layout");
    assert(await page.locator("#compare-loading").isHidden(), "the spinner is gone");
    await shot(page, "cold-compare-ready", { fullPage: false });
    await clean(page);
  });

  await step("a compare with a snapshot that fails to load says why, with a way back", async () => {
    // Both cold again: the third is loaded last.
    assertEqual((await api(`/api/snapshots/${state.third}`)).status, 200, "the third loads");
    const failing = (route) => {
      const failed = route.request().url().includes(state.mlp);
      route.fulfill({ json: failed ? { state: "failed", error: "its stored file does not read as a snapshot: the file ends early" } : { state: "analysing" } });
    };
    await page.route(STATUS, failing);
    await page.route(COMPARE_DATA, holdData);
    await page.goto(`${BASE}/compare/${state.mlp}/${state.oom}`, { waitUntil: "domcontentloaded" });
    const error = page.locator(`.load[data-id="${state.mlp}"] .load-error`);
    await error.waitFor();
    assert((await error.innerText()).includes("the file ends early"), "the reason");
    assertEqual(await page.locator("#load-title").innerText(), "These snapshots cannot be compared", "the heading");
    assertEqual(await lineOf(state.mlp), "The server could not read mlp_small.pickle (32.7 KiB).", "which one");
    assert(await page.locator(".load-actions a").isVisible(), "a way back to the list");
    assert(await page.locator("#compare-error").isHidden(), "no second, vaguer error");
    await shot(page, "cold-compare-failed", { fullPage: false });
    await clean(page);
    await page.goto("about:blank");
    await page.unroute(STATUS, failing);
    await releaseData();
  });
});
