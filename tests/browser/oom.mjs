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
