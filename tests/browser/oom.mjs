// Browser test of the OOM explainer: a snapshot dumped by the OOM observer opens on a panel
// saying what happened, with numbers equal to the API's and links into the views.
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/oom.mjs

import { join } from "node:path";
import { bytes } from "../../static/lib/units.js";
import { api, assert, assertEqual, BASE, clean, FIXTURES, newContext, run, shot, step, until, upload } from "./harness.mjs";

await run(50_000, async (browser) => {
  const context = await newContext(browser);
  const page = await context.newPage();
  const state = {};

  await step("the OOM snapshot uploads and its report matches the oom event", async () => {
    state.id = (await upload(join(FIXTURES, "oom.pickle"))).id;
    state.reports = (await api(`/api/snapshots/${state.id}/oom`)).body;
    assertEqual(state.reports.length, 1, "oom reports");
    assertEqual(state.reports[0].requested_bytes, 524288000, "requested bytes");
  });

  await step("the page opens on the explainer panel", async () => {
    await page.goto(`${BASE}/s/${state.id}`);
    const panel = page.locator(".oom-panel");
    await until(() => panel.count(), "the OOM panel");
    const report = state.reports[0];
    const text = await panel.innerText();
    assert(text.includes(bytes(report.requested_bytes)), `requested ${bytes(report.requested_bytes)} in: ${text}`);
    assert(text.includes(bytes(report.device_free_bytes)), "device free shown");
    assert(text.toLowerCase().includes(report.verdict), `verdict ${report.verdict} shown`);
    assert(text.includes("memory_fraction"), "the hint about a cap below the GPU");
    // The panel is the first thing in the overview, above the device cards.
    const first = await page.locator("#overview > *").first().getAttribute("class");
    assert(first?.includes("oom-explainer"), `first overview element: ${first}`);
    assertEqual(await page.locator("#overview .banner-oom").count(), 0, "the short banner is replaced");
    await shot(page, "oom-explainer");
    await clean(page);
  });

  await step("the OOM is explained, never 'No problems found' under it", async () => {
    await page.goto(`${BASE}/s/${state.id}`);
    await until(() => page.locator(".oom-panel").count(), "the OOM panel");
    const overview = await page.locator("#overview").innerText();
    assert(!overview.includes("No problems found"), "'No problems found' on a page with an OOM");
    assertEqual(await page.locator('[data-findings="none"]').count(), 0, "the no-problems line");
    const line = await page.locator('[data-findings="oom"]').innerText();
    assert(line.includes("ran out of memory") && line.includes("explanation above"), `the OOM's own line: ${line}`);
    // The explainer comes first, then this line, not a reassurance between them.
    const order = await page.evaluate(() => [...document.querySelectorAll("#overview > *")].map((el) => el.className));
    assert(order.indexOf("oom-explainer") < order.findIndex((c) => c.includes("no-findings")), `order: ${order}`);
    await clean(page);
  });

  await step("at 390 px the explainer and its table stay within the page; dark too", async () => {
    for (const colorScheme of ["light", "dark"]) {
      const phone = await newContext(browser, { viewport: { width: 390, height: 844 }, colorScheme });
      const small = await phone.newPage();
      await small.goto(`${BASE}/s/${state.id}`);
      await until(() => small.locator(".oom-panel").count(), "the OOM panel");
      const sizes = await small.evaluate(() => ({
        page: document.documentElement.scrollWidth,
        panel: document.querySelector(".oom-panel").getBoundingClientRect().right,
        table: document.querySelector(".oom-table-wrap").getBoundingClientRect().right,
      }));
      assert(sizes.page <= 390, `the page scrolls sideways: ${JSON.stringify(sizes)}`);
      assert(sizes.panel <= 390 && sizes.table <= 390, `the panel or its table runs past 390 px: ${JSON.stringify(sizes)}`);
      await shot(small, `oom-explainer-390${colorScheme === "dark" ? "-dark" : ""}`);
      await phone.close();
    }
    const dark = await newContext(browser, { colorScheme: "dark", viewport: { width: 1600, height: 1000 } });
    const wide = await dark.newPage();
    await wide.goto(`${BASE}/s/${state.id}`);
    await until(() => wide.locator(".oom-panel").count(), "the OOM panel");
    await shot(wide, "oom-explainer-1600-dark");
    await dark.close();
  });

  await step("its links open the timeline and the segment map at the OOM event", async () => {
    const event = state.reports[0].event_index;
    await page.locator(".oom-links a", { hasText: "Segments at this moment" }).click();
    await until(async () => new URL(page.url()).searchParams.get("tab") === "segments", "the segments tab");
    assertEqual(new URL(page.url()).searchParams.get("at"), String(event), "the moment in the URL");
    await clean(page);
  });

  await step("a snapshot without OOM has no panel", async () => {
    const id = (await upload(join(FIXTURES, "mlp_small.pickle"))).id;
    await page.goto(`${BASE}/s/${id}`);
    await page.waitForLoadState("networkidle");
    assertEqual(await page.locator(".oom-panel").count(), 0, "no OOM panel");
    await clean(page);
  });
});
