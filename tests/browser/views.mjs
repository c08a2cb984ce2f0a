// Browser test of the snapshot page's interactive views (timeline, flame graph, segments,
// events), in Debian's chromium through playwright-core, against a running server:
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/views.mjs
//
// (`cargo test --release --test browser` starts a server on a fresh data folder and runs this.)
// Uploads its fixtures through the API. Screenshots: target/screenshots/views-*.png.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, drawn, FIXTURES, newContext, painted, problems, run, shot, step, until, upload } from "./harness.mjs";

const TOTAL_TIMEOUT_MS = 100_000;

const state = {};
const layout = (page, view = "timeline") => page.evaluate((view) => window.snapviewTest?.views?.[view]?.layout ?? null, view);
const store = (page) => page.evaluate(() => window.snapviewTest?.store.get() ?? null);

/** Screen position of a point of the timeline canvas (CSS px inside the canvas). */
async function canvasPoint(page, selector, x, y) {
  const box = await page.locator(selector).boundingBox();
  return { x: box.x + x, y: box.y + y };
}

await run(TOTAL_TIMEOUT_MS, async (browser) => {
  const context = await newContext(browser);
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });
  const page = await context.newPage();
  const timelineRequests = [];
  page.on("request", (request) => {
    if (request.url().includes("/timeline?")) timelineRequests.push(new URL(request.url()));
  });

  await step("the fixtures upload", async () => {
    state.gpt2 = (await upload(join(FIXTURES, "gpt2_adamw.pickle"), "gpt2_adamw (views)")).id;
    state.noHistory = (await upload(join(FIXTURES, "no_history.pickle"))).id;
    state.ring = (await upload(join(FIXTURES, "ring_wrap.pickle"))).id;
    state.multi = (await upload(join(FIXTURES, "multi_device.pickle"))).id;
    state.detail = (await api(`/api/snapshots/${state.gpt2}`)).body;
    state.peak = state.detail.analysis.devices[0].peak_event_index;
    state.events = state.detail.analysis.devices[0].trace_entries;
  });

  await step("the timeline draws the trace, with the peak and the moment marked", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    assertEqual(await page.locator("#tab-timeline").getAttribute("aria-selected"), "true", "the timeline tab is selected");
    await until(async () => (await layout(page))?.bands?.length > 10, "bands drawn");
    const ink = await drawn(page, "#timeline-canvas", 0.1);
    assert(ink > 0.1, `the timeline canvas is nearly blank (${ink})`);
    await drawn(page, "#timeline-minimap", 0.05);
    const l = await layout(page);
    assertEqual(l.peak?.event, state.peak, "the peak marker's event");
    assertEqual(l.moment?.at, state.peak, "the default moment is the peak");
    assert(Math.abs(l.moment.x - l.peak.x) < 1, "the moment is drawn at the peak");
    assert(await page.evaluate(() => performance.getEntriesByName("snapview:timeline-drawn").length === 1), "no timeline-drawn mark");
    await shot(page, "views-timeline-gpt2");
    await clean(page);
  });

  await step("hovering a band shows its size, id and a frame of its stack", async () => {
    const l = await layout(page);
    const bands = [...l.bands].sort((a, b) => b.w * b.h - a.w * a.h);
    let target = null;
    for (const band of bands.slice(0, 40)) {
      const info = (await api(`/api/snapshots/${state.gpt2}/allocations/${band.id}`)).body;
      const visible = info.frames.filter((f) => !f.hidden);
      if (visible.length && band.w > 6 && band.h > 6) {
        target = { band, info, frame: visible[0] };
        break;
      }
    }
    assert(target, "no drawn band with Python frames among the 40 biggest");
    const point = await canvasPoint(page, "#timeline-canvas", target.band.x + target.band.w / 2, target.band.y + target.band.h / 2);
    await page.mouse.move(point.x, point.y);
    const tip = page.locator(".tip");
    await until(
      async () => (await tip.isVisible()) && (await tip.textContent()).includes(target.frame.name) && (await tip.textContent()).includes(target.info.block_id),
      `a tooltip naming ${target.frame.name} and ${target.info.block_id}`,
    );
    const text = await tip.textContent();
    assert(text.includes(target.frame.filename.split("/").pop()), `the tooltip lacks the frame's file: ${text}`);
    state.band = target;
    await shot(page, "views-timeline-gpt2-hover", { fullPage: false });
    // A click pins it: the side panel shows the whole stack.
    await page.mouse.down();
    await page.mouse.up();
    await until(async () => (await store(page)).alloc === target.band.id, "the band to be pinned");
    const side = page.locator("#alloc-panel");
    await until(async () => (await side.textContent()).includes(target.info.block_id), "the side panel to show the block id");
    const shown = await side.locator(".side-frames li").count();
    assertEqual(shown, target.info.frames.filter((f) => !f.hidden).length, "frames in the side panel (hidden ones filtered)");
    await clean(page);
  });

  await step("a click moves the moment, and the flame graph follows", async () => {
    await page.keyboard.press("2");
    await until(async () => /live/.test((await page.locator("#flame-total").textContent()) ?? ""), "the flame graph's total");
    await drawn(page, "#flame-canvas", 0.1);
    const before = (await page.locator("#flame-total-bytes").textContent()).trim();
    assert(before.length > 0, "no total");
    state.flameBefore = before;
    await page.keyboard.press("1");
    const l = await until(layout.bind(null, page), "timeline layout");
    const target = Math.round(state.events * 0.95);
    const x = l.plot.x + ((target - l.window.start) / (l.window.end + 1 - l.window.start)) * l.plot.w;
    const point = await canvasPoint(page, "#timeline-canvas", x, l.plot.y + 6);
    await page.mouse.click(point.x, point.y);
    const at = await until(async () => {
      const s = await store(page);
      return s.at !== null && s.at !== state.peak ? s.at : null;
    }, "the moment to move");
    assert(Math.abs(at - target) < 30, `the moment moved to ${at}, expected near ${target}`);
    await until(async () => (await layout(page)).moment?.at === at, "the cursor drawn at the new moment");
    await page.keyboard.press("2");
    await until(async () => (await page.locator("#flame-total-bytes").textContent()).trim() !== before, `the flame total to change from ${before}`);
    assert((await page.locator("#flame-total").textContent()).includes(`event ${at.toLocaleString("en-US")}`), "the flame graph names the moment");
    await drawn(page, "#flame-canvas", 0.05);
    state.at = at;
    await clean(page);
  });

  await step("the flame graph hovers, zooms, searches and downloads", async () => {
    // Back to the peak for a richer graph.
    await page.evaluate((peak) => window.snapviewTest.app.setMoment(peak), state.peak);
    await until(async () => (await page.locator("#flame-total").textContent()).includes("(the peak)"), "the peak's graph");
    await painted(page);
    const rects = await page.evaluate(() => window.snapviewTest.views.flame.rects.map((r) => ({ i: r.i, x: r.x, y: r.y, w: r.w })));
    const deep = rects.filter((r) => r.w > 40 && r.y >= 40).sort((a, b) => b.w - a.w)[0];
    assert(deep, "no wide frame below the root");
    const name = await page.evaluate((i) => window.snapviewTest.views.flame.data.nodes[i].name, deep.i);
    const point = await canvasPoint(page, "#flame-canvas", deep.x + deep.w / 2, deep.y + 10);
    await page.mouse.move(point.x, point.y);
    await until(
      async () => (await page.locator(".tip").textContent()).includes(name) && /of live/.test(await page.locator(".tip").textContent()),
      "the frame's tooltip",
    );
    await shot(page, "views-flame-gpt2-hover", { fullPage: false });
    await page.mouse.click(point.x, point.y);
    await until(async () => (await layout(page, "flame")).focus === deep.i, "zoom into the frame");
    assert(await page.locator("#flame-breadcrumb").isVisible(), "no breadcrumb after zooming");
    // The zoom is in the link: the same URL opens zoomed into the same frame.
    // (The URL follows the view after 300 ms of quiet.)
    const zoomed = await until(() => (new URL(page.url()).searchParams.get("zoom")?.includes(name) ? page.url() : null), "the zoom in the URL");
    const other = await page.context().newPage();
    await other.goto(zoomed);
    await until(async () => (await layout(other, "flame"))?.focus === deep.i, "the copied link's zoom");
    assert((await other.locator("#flame-breadcrumb .crumb.current").textContent()).includes(name), "the copied link's breadcrumb");
    await other.close();
    await page.locator("#flame-breadcrumb .crumb").first().click();
    await until(async () => (await layout(page, "flame")).focus === 0, "zoom back out");
    await until(() => !new URL(page.url()).searchParams.has("zoom"), "zooming out to clear the zoom from the URL");
    // Search.
    await page.keyboard.press("/");
    assertEqual(await page.evaluate(() => document.activeElement?.id), "flame-search", "focus after '/'");
    await page.keyboard.type("forward");
    await until(async () => /frames? match: .+ of live/.test(await page.locator("#flame-matches").textContent()), "the search's sum");
    await shot(page, "views-flame-gpt2");
    // Downloads.
    const [folded] = await Promise.all([page.waitForEvent("download"), page.locator("#flame-folded").click()]);
    const lines = readFileSync(await folded.path(), "utf8")
      .trim()
      .split("\n");
    assert(lines.length > 5 && lines.every((l) => /^.+ \d+$/.test(l)), `folded stacks look wrong: ${lines.slice(0, 3).join(" | ")}`);
    const sum = lines.reduce((s, l) => s + Number(l.split(" ").pop()), 0);
    const total = await page.evaluate(() => window.snapviewTest.views.flame.data.total);
    assertEqual(sum, total, "folded stacks sum to the total");
    const [image] = await Promise.all([page.waitForEvent("download"), page.locator("#flame-svg").click()]);
    const svg = readFileSync(await image.path(), "utf8");
    assert(svg.startsWith("<svg") && svg.includes("<rect") && svg.trim().endsWith("</svg>"), "the SVG download is not an SVG");
    // Reserved mode.
    await page.locator("[data-mode=reserved]").click();
    await until(async () => /reserved/.test(await page.locator("#flame-total").textContent()), "reserved mode");
    await page.keyboard.press("Escape");
    await page.locator("#flame-search").fill("");
    await page.locator("[data-mode=allocated]").click();
    await clean(page);
  });

  await step("zoomed flame graph: no 'null' crumb, search within the zoom, a named export, keys, Esc; reserved mode's role button", async () => {
    // The last step went back to allocated mode: wait for that graph before measuring it.
    await until(async () => / live /.test(await page.locator("#flame-total").textContent()), "the allocated graph");
    await painted(page);
    // A frame whose subtree holds some of the frames matching "forward" but not all of them.
    const pick = await page.evaluate(() => {
      const f = window.snapviewTest.views.flame;
      const nodes = f.data.nodes;
      const hit = (i) => i > 0 && `${nodes[i].name} ${nodes[i].file} ${nodes[i].path ?? ""}`.toLowerCase().includes("forward");
      const all = nodes.filter((_, i) => hit(i)).length;
      const drawn = new Set(f.rects.filter((r) => r.w > 30).map((r) => r.i));
      for (let i = 1; i < nodes.length; i += 1) {
        if (!drawn.has(i) || f.lay.children[i].length === 0) continue;
        let inside = 0;
        for (let k = i; k < f.lay.subtreeEnd[i]; k += 1) if (hit(k)) inside += 1;
        if (inside > 0 && inside < all) {
          const r = f.rects.find((rect) => rect.i === i);
          return { i, inside, all, x: r.x + r.w / 2, y: r.y + 10, name: nodes[i].name };
        }
      }
      return null;
    });
    assert(pick, "no frame holds part of the 'forward' matches");
    await page.evaluate((y) => {
      const canvas = document.getElementById("flame-canvas");
      window.scrollTo(0, window.scrollY + canvas.getBoundingClientRect().top + y - 300);
    }, pick.y);
    const point = await canvasPoint(page, "#flame-canvas", pick.x, pick.y);
    await page.mouse.click(point.x, point.y);
    await until(async () => (await layout(page, "flame")).focus === pick.i, "zoom into the frame");
    const crumbs = await page.locator("#flame-breadcrumb").textContent();
    assert(!crumbs.includes("null"), `a 'null' breadcrumb: ${crumbs}`);
    assert(crumbs.startsWith("all"), `the breadcrumb starts with: ${crumbs}`);
    // Search: the total counts only the zoomed subtree.
    await page.locator("#flame-search").fill("forward");
    const matchText = await until(async () => {
      const text = await page.locator("#flame-matches").textContent();
      return text.includes("in the zoomed") ? text : null;
    }, "the zoomed search total");
    assert(matchText.startsWith(`${pick.inside} frame`), `search total ${matchText}, expected ${pick.inside} of the ${pick.all} in the whole graph`);
    await shot(page, "views-flame-zoomed-search", { fullPage: false });
    // The exports say the zoom: in the file name, and in the SVG's heading.
    const [folded] = await Promise.all([page.waitForEvent("download"), page.locator("#flame-folded").click()]);
    assert(folded.suggestedFilename().includes("-zoom-"), `the zoomed folded export's name: ${folded.suggestedFilename()}`);
    const [image] = await Promise.all([page.waitForEvent("download"), page.locator("#flame-svg").click()]);
    assert(image.suggestedFilename().includes("-zoom-"), `the zoomed SVG's name: ${image.suggestedFilename()}`);
    const svgText = readFileSync(await image.path(), "utf8");
    assert(svgText.includes("Zoomed into"), "the zoomed SVG's heading does not say the zoom");
    await page.locator("#flame-search").fill("");
    // Keys on the canvas: arrows move between frames (not the moment), Enter zooms, Esc zooms out.
    const at = await page.evaluate(() => window.snapviewTest.app.moment());
    await page.locator("#flame-canvas").focus();
    await page.keyboard.press("ArrowDown");
    await page.locator(".tip").waitFor({ state: "visible" });
    const moved = await page.evaluate(() => window.snapviewTest.views.flame.keyFocus);
    assert(moved > 0, "ArrowDown moved to no frame");
    await page.keyboard.press("ArrowLeft");
    assertEqual(await page.evaluate(() => window.snapviewTest.app.moment()), at, "the moment after arrow keys on the graph");
    await page.keyboard.press("Escape");
    await until(async () => (await layout(page, "flame")).focus === 0, "Esc zooms out");
    assert(await page.locator("#flame-breadcrumb").isHidden(), "the breadcrumb after Esc");
    await page.keyboard.press("ArrowDown");
    const child = await page.evaluate(() => window.snapviewTest.views.flame.keyFocus);
    await page.keyboard.press("Enter");
    await until(async () => (await layout(page, "flame")).focus === child, "Enter zooms into the frame the keys are on");
    // Esc from elsewhere on the tab (not typing) zooms out too.
    await page.locator("#flame-total").click();
    await page.keyboard.press("Escape");
    await until(async () => (await layout(page, "flame")).focus === 0, "Esc from the page zooms out");
    // Reserved mode: the graph is by stack whatever was chosen, and the buttons say so.
    await page.locator("[data-by=role]").click();
    await page.locator("[data-mode=reserved]").click();
    await until(async () => /reserved/.test(await page.locator("#flame-total").textContent()), "reserved mode");
    const buttons = await page.evaluate(() =>
      ["role", "stack"].map((by) => {
        const b = document.querySelector(`[data-by=${by}]`);
        return { pressed: b.getAttribute("aria-pressed"), disabled: b.disabled, background: getComputedStyle(b).backgroundColor, title: b.title };
      }),
    );
    assertEqual(buttons[0].pressed, "false", "'By role' pressed in reserved mode");
    assert(buttons[0].disabled && buttons[1].disabled, "the root buttons are not disabled in reserved mode");
    assertEqual(buttons[1].pressed, "true", "'Stacks' in reserved mode");
    assert(buttons[0].background !== buttons[1].background, `'By role' looks as pressed as 'Stacks': ${JSON.stringify(buttons)}`);
    assert(buttons[0].title.includes("Allocated"), `the disabled button does not say why: ${buttons[0].title}`);
    await shot(page, "views-flame-reserved", { fullPage: false });
    await page.locator("[data-mode=allocated]").click();
    await page.locator("[data-by=stack]").click();
    await clean(page);
  });

  await step("the flame graph from the keyboard: Tab to the canvas, arrows, Enter, Backspace, Esc; the URL and breadcrumb follow", async () => {
    await until(async () => / live /.test(await page.locator("#flame-total").textContent()), "the allocated graph");
    await until(
      async () =>
        (await layout(page, "flame"))?.focus === 0 &&
        // The answer for what is asked now (by stack, allocated), not a late one for the step before.
        (await page.evaluate(() => {
          const f = window.snapviewTest.views.flame;
          return f.key === f.params() && f.rects.length > 3;
        })),
      "the unzoomed graph",
    );
    const flame = () =>
      page.evaluate(() => {
        const f = window.snapviewTest.views.flame;
        const name = (i) => (i >= 0 ? f.data.nodes[i].name : null);
        return {
          zoom: f.focus,
          key: f.keyFocus,
          keyName: name(f.keyFocus),
          keyParent: f.keyFocus >= 0 ? f.data.nodes[f.keyFocus].parent : null,
          zoomName: name(f.focus),
        };
      });
    const at = await page.evaluate(() => window.snapviewTest.app.moment());
    // Tab from the last toolbar button reaches the canvas (the breadcrumb is hidden, unzoomed), and
    // the canvas shows that it has the focus.
    await page.locator("#flame-svg").focus();
    await page.keyboard.press("Tab");
    assertEqual(await page.evaluate(() => document.activeElement?.id), "flame-canvas", "focus after Tab");
    const outline = await page.evaluate(() => {
      const style = getComputedStyle(document.getElementById("flame-canvas"));
      return { matches: document.getElementById("flame-canvas").matches(":focus-visible"), style: style.outlineStyle, width: style.outlineWidth };
    });
    assert(outline.matches && outline.style !== "none" && outline.width !== "0px", `no focus outline on the canvas: ${JSON.stringify(outline)}`);
    // Down to the root's first child, right to its sibling: the tooltip names the frame.
    await page.keyboard.press("ArrowDown");
    const first = await flame();
    assertEqual(first.keyParent, 0, "ArrowDown from the root goes to a child of the root");
    await until(async () => (await page.locator(".tip").textContent()).includes(first.keyName), "the tooltip of the keyboard's frame");
    await page.keyboard.press("ArrowRight");
    const second = await flame();
    assert(second.key !== first.key || (await page.evaluate(() => window.snapviewTest.views.flame.lay.children[0].length)) === 1, "ArrowRight did not move");
    assertEqual(second.keyParent, 0, "ArrowRight stays among the root's children");
    await page.keyboard.press("ArrowLeft");
    assertEqual((await flame()).key, first.key, "ArrowLeft comes back");
    // Down to its first child, then Enter zooms into that frame.
    await page.keyboard.press("ArrowDown");
    const deep = await flame();
    assertEqual(deep.keyParent, first.key, "ArrowDown goes to a child");
    await shot(page, "views-flame-keyboard", { fullPage: false });
    await page.keyboard.press("Enter");
    await until(async () => (await flame()).zoom === deep.key, "Enter zooms into the keyboard's frame");
    assertEqual((await page.locator("#flame-breadcrumb .crumb.current").textContent()).trim(), deep.keyName, "the breadcrumb's current frame");
    assertEqual(await page.locator("#flame-breadcrumb .crumb").count(), 3, "crumbs: all, the parent, the zoomed frame");
    await until(() => new URL(page.url()).searchParams.get("zoom")?.includes(deep.keyName), "the zoom in the URL");
    assertEqual(await page.evaluate(() => document.activeElement?.id), "flame-canvas", "the canvas keeps the focus after zooming");
    // Backspace: out one level, to the parent.
    await page.keyboard.press("Backspace");
    await until(async () => (await flame()).zoom === first.key, "Backspace zooms out one level");
    assertEqual((await page.locator("#flame-breadcrumb .crumb.current").textContent()).trim(), first.keyName, "the breadcrumb after Backspace");
    // Esc: out to everything, the breadcrumb hidden, the URL without a zoom.
    await page.keyboard.press("Escape");
    await until(async () => (await flame()).zoom === 0, "Esc zooms out to everything");
    assert(await page.locator("#flame-breadcrumb").isHidden(), "the breadcrumb after Esc");
    await until(() => !new URL(page.url()).searchParams.has("zoom"), "Esc clears the zoom from the URL");
    // None of these keys moved the moment.
    assertEqual(await page.evaluate(() => window.snapviewTest.app.moment()), at, "the moment after keys on the graph");
    // Leaving the canvas forgets the keyboard's frame.
    await page.keyboard.press("ArrowDown");
    await page.locator("#flame-total").click();
    assertEqual((await flame()).key, -1, "the keyboard's frame after the canvas lost the focus");
    await clean(page);
  });

  await step("the segment map draws, steps with the arrow keys, and says exact vs rebuilt", async () => {
    await page.locator("body").click({ position: { x: 5, y: 300 } });
    await page.keyboard.press("3");
    await drawn(page, "#segments-canvas", 0.1);
    await until(async () => /rebuilt/i.test(await page.locator("#segments-source").textContent()), "'rebuilt' at the peak");
    const at0 = (await store(page)).at ?? state.peak;
    await page.keyboard.press("ArrowRight");
    await until(
      async () => (await page.locator("#segments-source").textContent()).includes(`event ${(at0 + 1).toLocaleString("en-US")}`),
      "the map to follow the moment",
    );
    await page.keyboard.press("ArrowLeft");
    await until(async () => (await store(page)).at === at0, "a step back");
    await shot(page, "views-segments-gpt2");
    // Hover a block.
    const pieces = await page.evaluate(() =>
      window.snapviewTest.views.segments.pieces.filter((p) => p.block.allocation !== null && p.w > 8).map((p) => ({ x: p.x, y: p.y, w: p.w })),
    );
    assert(pieces.length > 0, "no allocated block drawn");
    const point = await canvasPoint(page, "#segments-canvas", pieces[0].x + pieces[0].w / 2, pieces[0].y + 5);
    await page.mouse.move(point.x, point.y);
    await until(async () => /allocated/.test(await page.locator(".tip").textContent()), "a block's tooltip");
    // The last event shows the snapshot's own map.
    await page.evaluate((n) => window.snapviewTest.app.setMoment(n - 1), state.events);
    await until(async () => /exact/.test(await page.locator("#segments-source").textContent()), "'exact' at the last event");
    await clean(page);
  });

  await step("the event list scrolls through every event, filters, and sets the moment", async () => {
    await page.evaluate((peak) => window.snapviewTest.app.setMoment(peak), state.peak);
    await page.keyboard.press("4");
    await until(async () => (await page.locator(".event-row.selected").count()) === 1, "the moment's row selected");
    assertEqual(Number(await page.locator(".event-row.selected").getAttribute("data-index")), state.peak, "the selected row");
    await shot(page, "views-events-gpt2");
    // The end of the trace is reachable by scrolling.
    await page.locator("#event-scroller").evaluate((el) => (el.scrollTop = el.scrollHeight));
    await until(async () => (await page.locator(`.event-row[data-index="${state.events - 1}"]`).count()) === 1, "the last event's row");
    // Selecting a row moves the moment.
    const row = page.locator(`.event-row[data-index="${state.events - 3}"]`);
    await row.click();
    await until(async () => (await store(page)).at === state.events - 3, "the moment to follow the row");
    await page.keyboard.press("ArrowUp");
    await until(async () => (await store(page)).at === state.events - 4, "ArrowUp to select the row above");
    // Filters.
    await page.locator("#events-action").selectOption("alloc");
    const allocs = state.detail.analysis.devices[0].actions.alloc;
    await until(async () => (await page.locator("#events-count").textContent()).includes(`${allocs.toLocaleString("en-US")} of`), "the alloc filter's count");
    const actions = await until(async () => {
      const list = await page.locator(".event-row .c-action").allTextContents();
      return list.length > 5 ? list : null;
    }, "the filtered rows");
    assert(
      actions.every((a) => a === "alloc"),
      `rows other than allocs: ${actions.slice(0, 5)}`,
    );
    await page.locator("#events-min").fill("100MiB");
    await until(async () => (await store(page)).min === 100 * 1024 * 1024, "min size in the state");
    const sizes = await page.evaluate(() => [...document.querySelectorAll(".event-row")].map((r) => r.dataset.index).filter(Boolean).length);
    assert(sizes > 0, "no rows of at least 100 MiB");
    await page.locator("#events-frame").fill("no frame is called this");
    await until(async () => /No event matches/.test(await page.locator("#event-rows").textContent()), "the empty filter result");
    await page.locator("#events-frame").fill("");
    await page.locator("#events-min").fill("");
    await page.locator("#events-action").selectOption("");
    // Go to event.
    await page.locator("#events-goto").fill("1234");
    await page.locator("#events-goto").press("Enter");
    await until(async () => (await page.locator('.event-row.selected[data-index="1234"]').count()) === 1, "event 1234 selected");
    await clean(page);
  });

  await step("wheel zoom asks the server for the new window, and a copied link restores the view", async () => {
    await page.keyboard.press("1");
    await until(async () => (await layout(page))?.bands?.length > 0, "the timeline");
    await until(() => page.evaluate(() => !window.snapviewTest.views.timeline.loading), "the timeline to have no window on its way");
    await painted(page);
    const l = await layout(page);
    const before = timelineRequests.length;
    const point = await canvasPoint(page, "#timeline-canvas", l.plot.x + l.plot.w * 0.3, l.plot.y + l.plot.h / 2);
    await page.mouse.move(point.x, point.y);
    for (let i = 0; i < 4; i += 1) {
      await page.mouse.wheel(0, -240);
      await painted(page);
    }
    const request = await until(
      () =>
        timelineRequests
          .slice(before)
          .reverse()
          .find((u) => u.searchParams.has("start") && u.searchParams.has("end")),
      "a timeline request with start and end",
    );
    // The wheel's last window is the one asked for, and drawn.
    await until(async () => {
      const newest = timelineRequests[timelineRequests.length - 1];
      const [s, drawnNow] = [await store(page), await layout(page)];
      return s.start === Number(newest.searchParams.get("start")) && s.end === Number(newest.searchParams.get("end")) && drawnNow?.request.start === s.start;
    }, "the zoomed window asked for and drawn");
    const last = timelineRequests[timelineRequests.length - 1];
    const [start, end] = [Number(last.searchParams.get("start")), Number(last.searchParams.get("end"))];
    assert(end - start < state.events * 0.6, `the window did not narrow: ${start}–${end}`);
    const s = await store(page);
    assertEqual(s.start, start, "the state's start is the requested start");
    assertEqual(s.end, end, "the state's end is the requested end");
    assert(request, "no request");
    const zoomed = await layout(page);
    assertEqual(zoomed.request.start, start, "drawn window start");
    // Drag to pan.
    const from = await canvasPoint(page, "#timeline-canvas", l.plot.x + l.plot.w * 0.6, l.plot.y + 30);
    await page.mouse.move(from.x, from.y);
    await page.mouse.down();
    for (let i = 1; i <= 5; i += 1) await page.mouse.move(from.x - i * 30, from.y);
    await page.mouse.up();
    await until(async () => (await store(page)).start > start, "the pan to move the window right");
    await until(async () => (await layout(page))?.request.start === (await store(page)).start, "the panned window drawn");
    await painted(page);
    await shot(page, "views-timeline-gpt2-zoomed");
    // The URL holds the view; a new page opens exactly it.
    await page.evaluate((id) => window.snapviewTest.store.set({ alloc: id }), state.band.band.id);
    const expected = await store(page);
    await until(async () => new URL(page.url()).searchParams.get("start") === String(expected.start), "the URL to hold the window");
    await page.locator("#copy-link").click();
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    assert(
      copied.includes(`start=${expected.start}`) && copied.includes("tab=timeline") && copied.includes(`alloc=${expected.alloc}`),
      `the copied link lacks the view: ${copied}`,
    );
    const other = await context.newPage();
    const requests = [];
    other.on("request", (r) => r.url().includes("/timeline?") && requests.push(new URL(r.url())));
    await other.goto(copied);
    await until(async () => (await layout(other))?.bands?.length > 0, "the restored timeline");
    assertEqual(await other.locator("#tab-timeline").getAttribute("aria-selected"), "true", "restored tab");
    const restored = await store(other);
    for (const key of ["tab", "start", "end", "at", "alloc", "axis"]) assertEqual(restored[key], expected[key], `restored ${key}`);
    assert(
      requests.some((u) => u.searchParams.get("start") === String(expected.start) && u.searchParams.get("end") === String(expected.end)),
      "the restored page did not request the window",
    );
    assertEqual((await layout(other)).moment?.at ?? expected.at, expected.at, "restored moment cursor");
    await until(async () => (await other.locator("#alloc-panel").textContent()).includes("b"), "the restored pinned allocation");
    await other.close();
    // Double-click resets.
    await page.mouse.dblclick(point.x, point.y);
    await until(async () => (await store(page)).start === null, "double-click to show the whole trace");
    await clean(page);
  });

  await step("the time axis labels wall time", async () => {
    await page.locator("[data-axis=time]").click();
    await until(async () => timelineRequests.some((u) => u.searchParams.get("axis") === "time"), "a request with axis=time");
    await until(async () => (await layout(page))?.bands?.length > 0 && (await store(page)).axis === "time", "the time axis drawn");
    await painted(page);
    await drawn(page, "#timeline-canvas", 0.1);
    await shot(page, "views-timeline-gpt2-time");
    await page.locator("[data-axis=event]").click();
    await clean(page);
  });

  await step("'?' lists the views' keys", async () => {
    await page.locator("body").click({ position: { x: 5, y: 300 } });
    await page.keyboard.press("?");
    const dialog = page.locator("dialog.keys");
    await dialog.waitFor({ state: "visible" });
    const text = await dialog.textContent();
    for (const word of ["Timeline", "Flame graph", "Segments", "Events", "Step the selected moment", "Zoom"])
      assert(text.includes(word), `the help lacks ${word}`);
    await page.keyboard.press("Escape");
  });

  await step("dark mode draws every view", async () => {
    const dark = await newContext(browser, { colorScheme: "dark" });
    const p = await dark.newPage();
    for (const tab of ["timeline", "flame", "segments", "events"]) {
      await p.goto(`${BASE}/s/${state.gpt2}?tab=${tab}`);
      if (tab !== "events") await drawn(p, `#${tab}-canvas`, 0.05);
      else await until(async () => (await p.locator(".event-row.selected").count()) === 1, "rows");
      await painted(p);
      await shot(p, `views-${tab}-gpt2-dark`);
    }
    await clean(p);
    await dark.close();
  });

  await step("degraded snapshots explain themselves", async () => {
    // No history: the timeline says why, the segment map still draws.
    await page.goto(`${BASE}/s/${state.noHistory}?tab=timeline`);
    await until(
      async () => (await page.locator("#timeline-empty").isVisible()) && /record_memory_history/.test(await page.locator("#timeline-empty").textContent()),
      "the no-history explanation",
    );
    await shot(page, "views-timeline-no-history", { fullPage: false });
    await page.keyboard.press("3");
    await drawn(page, "#segments-canvas", 0.05);
    assert(/exact/.test(await page.locator("#segments-source").textContent()), "no-history segments are the snapshot's own");
    await shot(page, "views-segments-no-history");
    // Ring buffer wrapped: the incomplete region is marked on the timeline.
    await page.goto(`${BASE}/s/${state.ring}?tab=timeline`);
    await until(async () => (await layout(page))?.bands?.length > 0, "ring_wrap's timeline");
    const data = await page.evaluate(() => window.snapviewTest.views.timeline.model.data.complete_from);
    assert(data > 0, `ring_wrap has no complete_from: ${data}`);
    assert(await page.locator(".sw-incomplete").count(), "no legend entry for the incomplete history");
    await shot(page, "views-timeline-ring-wrap", { fullPage: false });
    // Two devices: the picker lists both and switches.
    await page.goto(`${BASE}/s/${state.multi}?tab=timeline`);
    await until(async () => (await layout(page))?.bands?.length > 0, "multi-device timeline");
    assertEqual(await page.locator("#device-select option").count(), 2, "devices in the picker");
    await page.locator("#device-select").selectOption("1");
    await until(async () => (await page.evaluate(() => window.snapviewTest.views.timeline.model?.data.device)) === 1, "the timeline of device 1");
    await until(async () => new URL(page.url()).searchParams.get("device") === "1", "the device in the URL");
    await clean(page);
  });

  await step("errors are shown in the view", async () => {
    await page.route("**/flame?**", (route) =>
      route.fulfill({ status: 500, contentType: "application/json", body: JSON.stringify({ error: { code: "internal", message: "the disk is on fire" } }) }),
    );
    await page.goto(`${BASE}/s/${state.gpt2}?tab=flame`);
    await until(
      async () => (await page.locator("#flame-error").isVisible()) && /disk is on fire/.test(await page.locator("#flame-error").textContent()),
      "the flame error",
    );
    await page.unroute("**/flame?**");
    // The deliberate 500 is logged by the browser as a failed resource.
    problems.splice(0);
  });
});
