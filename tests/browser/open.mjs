// Browser test of `snapview open FILE` (issue 20, item 9): the URL it printed opens the file's
// page with its timeline drawn, the list holds that one file, and the page says nothing of a
// server's store. Run by tests/browser.rs, which starts `snapview open --no-browser` and sets
// SNAPVIEW_URL (its base) and SNAPVIEW_OPEN_URL (the page it printed).

import { assert, assertEqual, BASE, clean, drawn, newContext, run, shot, step, until } from "./harness.mjs";

const PAGE = process.env.SNAPVIEW_OPEN_URL;

await run(40_000, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1600, height: 1000 } });
  const page = await context.newPage();

  await step("the printed URL opens the file's page with its timeline drawn", async () => {
    assert(PAGE?.startsWith(BASE), `SNAPVIEW_OPEN_URL ${PAGE} is not under ${BASE}`);
    const response = await page.goto(`${PAGE}?tab=timeline`);
    assertEqual(response.status(), 200, "the page's status");
    assertEqual((await page.locator("#snapshot-name").textContent()).trim(), "multi_device", "the title");
    await drawn(page, "#timeline-canvas");
    await shot(page, "open-page", { fullPage: false });
    await clean(page);
  });

  await step("the list holds that one file", async () => {
    await page.goto(`${BASE}/`);
    await until(async () => (await page.locator("#snapshot-table tbody tr").count()) === 1, "one row");
    assertEqual((await page.locator("#snapshot-table a.name").textContent()).trim(), "multi_device", "the row");
    await clean(page);
  });
});
