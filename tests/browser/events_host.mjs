// Browser test of the Events tab (issue 20, item 6) and of pinned host memory in the pages
// (item 8): a row opens to its whole stack (click, Enter) and shows it on hover, the frame
// filter marks the frame that matched, "go to event" says when the event is filtered out, times
// tell neighbouring events apart, the block column names blocks one way, the list is readable
// at 390 px; and the host's pinned memory is a device the pages offer and draw.
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/events_host.mjs

import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, drawn, FIXTURES, newContext, run, shot, step, until, upload } from "./harness.mjs";

const state = {};

async function rowsShown(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll(".event-row[data-index]")].map((row) => ({
      index: Number(row.dataset.index),
      time: row.querySelector(".c-time").textContent,
      block: row.querySelector(".c-addr").textContent,
      action: row.querySelector(".c-action").textContent,
      frame: row.querySelector(".c-frame").textContent,
    })),
  );
}

await run(110_000, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1600, height: 1000 } });
  const page = await context.newPage();

  await step("times keep µs so neighbours differ, and blocks have one id form", async () => {
    state.id = (await upload(join(FIXTURES, "gpt2_adamw.pickle"), "gpt2 (events)")).id;
    state.page = (await api(`/api/snapshots/${state.id}/events?device=0&offset=0&limit=200`)).body;
    await page.goto(`${BASE}/s/${state.id}?tab=events&at=0`);
    await until(async () => (await rowsShown(page)).length > 10, "the event rows");
    const rows = await rowsShown(page);
    const t0 = state.page.rows[0].time_us;
    const byIndex = new Map(state.page.rows.map((r) => [r.index, r]));
    const distinctTimes = new Set(rows.map((r) => byIndex.get(r.index).time_us));
    const distinctTexts = new Set(rows.map((r) => r.time));
    assertEqual(distinctTexts.size, distinctTimes.size, "distinct time texts (one per distinct time)");
    for (const row of rows) {
      assert(/^\d+\.\d{3} ms$|^\d+\.\d{6} s$/.test(row.time), `a time without µs: ${row.time}`);
      const us = byIndex.get(row.index).time_us - t0;
      assertEqual(row.time.endsWith(" ms") ? Math.round(parseFloat(row.time) * 1000) : Math.round(parseFloat(row.time) * 1e6), us, `event ${row.index}'s time`);
      assert(/^b[0-9a-f]+_\d+$/.test(row.block) || row.block === "—", `a block named another way: ${row.block}`);
      if (["alloc", "free_requested", "free_completed"].includes(row.action)) assert(row.block.startsWith("b"), `${row.action} ${row.index} has no block id`);
    }
    await clean(page);
  });

  await step("a clicked row opens to its whole stack; Enter closes and opens it", async () => {
    const target = state.page.rows.find((r) => r.action === "alloc" && r.index > 3);
    state.target = target;
    state.stack = (await api(`/api/snapshots/${state.id}/events/${target.index}?device=0`)).body;
    assert(state.stack.frames.length > 3, `a short stack: ${state.stack.frames.length}`);
    await page.locator(`.event-row[data-index="${target.index}"]`).click();
    const box = page.locator(`.event-stack[data-index="${target.index}"]`);
    await until(async () => (await box.locator(".event-frames li").count()) === state.stack.frames.length, "every frame listed");
    const text = await box.textContent();
    const deepest = state.stack.frames.at(-1);
    assert(text.includes(deepest.name), `the outermost frame ${deepest.name} is not shown`);
    assertEqual(await page.locator(`.event-row[data-index="${target.index}"]`).getAttribute("aria-expanded"), "true", "aria-expanded");
    // The row below moved down under the stack, not under it.
    const rowBox = await page.locator(`.event-row[data-index="${target.index}"]`).boundingBox();
    const stackBox = await box.boundingBox();
    const next = await page
      .locator(".event-row[data-index]")
      .evaluateAll((rows, index) => rows.find((r) => Number(r.dataset.index) === index + 1)?.getBoundingClientRect().top, target.index);
    assert(stackBox.y >= rowBox.y + rowBox.height - 1 && next >= stackBox.y + stackBox.height - 1, "the stack overlaps the rows");
    await shot(page, "events-expanded-1600", { fullPage: false });
    await page.locator("#event-scroller").focus();
    await page.keyboard.press("Enter");
    await until(async () => (await box.count()) === 0, "Enter to close the stack");
    await page.keyboard.press("Enter");
    await until(async () => (await box.count()) === 1, "Enter to open it again");
    await page.keyboard.press("Escape");
    await until(async () => (await box.count()) === 0, "Esc to close it");
    await clean(page);
  });

  await step("hovering a row shows its stack in the tooltip", async () => {
    const row = page.locator(`.event-row[data-index="${state.target.index}"]`);
    await row.hover();
    const tip = page.locator(".tip");
    await until(
      async () => (await tip.isVisible()) && (await tip.textContent()).includes(`Event ${state.target.index.toLocaleString("en-US")}`),
      "the stack tooltip",
    );
    const shown = state.stack.frames.filter((f) => !f.hidden);
    assert((await tip.textContent()).includes(shown[0].name), `the tooltip lacks the first frame ${shown[0].name}`);
    await shot(page, "events-hover", { fullPage: false });
    await page.mouse.move(5, 5);
  });

  await step("the frame filter shows and marks the frame that matched", async () => {
    // A frame deeper than the top one, so the match is not what the column shows unfiltered.
    const visible = state.stack.frames.filter((f) => !f.hidden);
    const deep = visible.find((f, i) => i > 0 && f.name.length > 4 && !visible[0].name.includes(f.name) && !visible[0].filename.includes(f.name));
    state.needle = deep.name;
    await page.locator("#events-frame").fill(state.needle);
    await until(async () => (await page.locator(".c-frame.matched mark").count()) > 0, "marked matches in the frame column");
    const marked = await page.locator(".c-frame.matched mark").first().textContent();
    assertEqual(marked.toLowerCase(), state.needle.toLowerCase(), "the marked text");
    const first = page.locator(".event-row[data-index]").first();
    await first.click();
    const box = page.locator(".event-stack");
    await until(async () => (await box.locator("li.matched").count()) > 0, "the matched frame in the opened stack");
    assert((await box.locator("li.matched mark").first().textContent()).toLowerCase() === state.needle.toLowerCase(), "the stack marks the match");
    await shot(page, "events-filter-highlight", { fullPage: false });
    await clean(page);
  });

  await step("go to an event the filter hides says so, and where it went", async () => {
    await page.locator("#events-frame").fill("");
    await page.locator("#events-action").selectOption("alloc");
    const allocs = (await api(`/api/snapshots/${state.id}/events?device=0&action=alloc&limit=1`)).body.matching;
    await until(async () => (await page.locator("#events-count").textContent()).startsWith(`${allocs.toLocaleString("en-US")} of`), "the alloc filter alone");
    const hidden = state.page.rows.find((r) => r.action !== "alloc" && r.index > 10);
    await page.locator("#events-goto").fill(String(hidden.index));
    await page.locator("#events-goto").press("Enter");
    const note = page.locator("#events-goto-note");
    await until(async () => (await note.textContent()).includes("filtered out"), "the filtered-out note");
    const text = await note.textContent();
    assert(text.includes(`Event ${hidden.index.toLocaleString("en-US")} is filtered out`), text);
    const shownIndex = Number(await page.locator(".event-row.cursor").getAttribute("data-index"));
    assert(shownIndex > hidden.index && text.includes(shownIndex.toLocaleString("en-US")), `the note names the match shown (${shownIndex}): ${text}`);
    // An event the filter keeps: no note.
    await page.locator("#events-goto").fill(String(shownIndex));
    await page.locator("#events-goto").press("Enter");
    await until(async () => (await note.textContent()) === "", "the note cleared");
    await page.locator("#events-action").selectOption("");
    await clean(page);
  });

  await step("at 390 px every row keeps its frame, on a second line", async () => {
    const narrow = await newContext(browser, { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
    const phone = await narrow.newPage();
    await phone.goto(`${BASE}/s/${state.id}?tab=events&at=0`);
    await until(async () => (await phone.locator(".event-row[data-index]").count()) > 5, "rows at 390 px");
    const frames = await phone
      .locator(".event-row[data-index] .c-frame")
      .evaluateAll((cells) =>
        cells.slice(0, 6).map((c) => ({ width: c.getBoundingClientRect().width, visible: c.offsetParent !== null, text: c.textContent })),
      );
    for (const frame of frames) assert(frame.visible && frame.width > 250, `a frame cell at 390 px: ${JSON.stringify(frame)}`);
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth);
    assert(overflow <= 390, `the page scrolls sideways: ${overflow}`);
    await phone.locator(".event-row[data-index]").nth(2).click();
    await phone.locator(".event-stack .event-frames li").first().waitFor();
    await shot(phone, "events-390", { fullPage: false });
    await narrow.close();
  });

  await step("dark mode", async () => {
    const dark = await newContext(browser, { viewport: { width: 1600, height: 1000 }, colorScheme: "dark" });
    const darkPage = await dark.newPage();
    await darkPage.goto(`${BASE}/s/${state.id}?tab=events&at=0&frame=${encodeURIComponent(state.needle)}`);
    await until(async () => (await darkPage.locator(".c-frame.matched mark").count()) > 0, "marks in dark mode");
    await darkPage.locator(".event-row[data-index]").first().click();
    await darkPage.locator(".event-stack li.matched").first().waitFor();
    await shot(darkPage, "events-dark", { fullPage: false });
    await dark.close();
  });

  await step("pinned host memory is a device: offered by name, its timeline, segments and events drawn", async () => {
    // A synthetic file (tests/fixtures/synthetic/gen_host_pinned.py): torch 2.11 cannot record one.
    state.host = (await upload(join(FIXTURES, "synthetic", "host_pinned.pickle"))).id;
    const detail = (await api(`/api/snapshots/${state.host}`)).body;
    const hostDevice = detail.analysis.source.host_device;
    assertEqual(hostDevice, 1, "the host's ordinal");
    await page.goto(`${BASE}/s/${state.host}`);
    const heading = page.locator(`#device-${hostDevice}-title`);
    assertEqual((await heading.textContent()).trim(), "host (pinned)", "the overview's card");
    await page.goto(`${BASE}/s/${state.host}?tab=timeline`);
    const option = page.locator("#device-select option[data-host]");
    assertEqual((await option.textContent()).trim(), "host (pinned) · 10 events", "the device option");
    await page.locator("#device-select").selectOption({ label: "host (pinned) · 10 events" });
    await until(async () => new URL(page.url()).searchParams.get("device") === String(hostDevice), "device in the URL");
    await drawn(page, "#timeline-canvas");
    const peak = await page.evaluate(
      () => window.snapviewTest.views.timeline.model?.peak?.bytes ?? window.snapviewTest.views.timeline.layout?.peak?.bytes ?? null,
    );
    if (peak !== null) assertEqual(peak, 80 << 20, "the host's peak on the timeline");
    await shot(page, "host-timeline", { fullPage: false });
    await page.keyboard.press("4");
    await until(async () => (await page.locator(".event-row[data-index]").count()) === 10, "the host's 10 events");
    const actions = await page.locator(".event-row .c-action").allTextContents();
    assertEqual(actions[0], "segment_alloc", "the first host event");
    await page.locator(".event-row[data-index]").nth(1).click();
    await until(async () => (await page.locator(".event-stack").textContent()).includes("pin_memory"), "the host event's stack");
    await shot(page, "host-events", { fullPage: false });
    const segments = await api(`/api/snapshots/${state.host}/segments?device=host`);
    assertEqual(segments.body.totals.reserved, 128 << 20, "the host's reserved bytes");
    await clean(page);
  });

  await step("two devices' notes say which device each is about", async () => {
    const id = (await upload(join(FIXTURES, "multi_device.pickle"))).id;
    await page.goto(`${BASE}/s/${id}`);
    const labels = await page.locator(".banner-note .banner-device").allTextContents();
    assertEqual(labels.join(","), "cuda:0,cuda:1", "the banners' labels");
    await shot(page, "overview-two-devices", { fullPage: false });
  });
});
