// Browser test of the allocator's blocks (issue 20): the Allocator State History beside the
// segment map (↑ ↓ step it, the event's block outlined, streams as short ids, a pending free
// says why), the map's zoom (a small block becomes hoverable), the Active Cached Segment
// Timeline (its reserved top is the timeline's reserved curve, hover names the segment), and
// the overview saying allocated / pending once. Screenshots at 1600 px, 390 px and dark, on
// side_stream_frees. The huge trace's timings are segments_huge.mjs's, run with nothing beside it.
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/segments.mjs

import { join } from "node:path";
import { bytes } from "../../static/lib/units.js";
import { api, assert, assertEqual, BASE, clean, FIXTURES, hover, newContext, run, shot, step, until, upload } from "./harness.mjs";

/** The tooltip's text once it shows `needle`. */
async function tipText(page, needle) {
  return until(async () => {
    const text = await page.evaluate(() => {
      const tip = document.querySelector(".tip");
      return tip && !tip.hidden ? tip.innerText : "";
    });
    return text.includes(needle) ? text : null;
  }, `a tooltip with "${needle}"`);
}

/** The canvas pixel at CSS px (x, y) and the page's colour `cssVar`, both as [r, g, b]. */
async function pixelAndColor(page, selector, x, y, cssVar) {
  return page.evaluate(
    ({ selector, x, y, cssVar }) => {
      const canvas = document.querySelector(selector);
      const dpr = canvas.width / canvas.clientWidth;
      const pixel = [...canvas.getContext("2d").getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data].slice(0, 3);
      const probe = document.createElement("canvas").getContext("2d");
      probe.fillStyle = getComputedStyle(document.documentElement).getPropertyValue(cssVar).trim();
      probe.fillRect(0, 0, 1, 1);
      return { pixel, color: [...probe.getImageData(0, 0, 1, 1).data].slice(0, 3) };
    },
    { selector, x, y, cssVar },
  );
}

const near = (a, b) => a.every((v, i) => Math.abs(v - b[i]) <= 40);

await run(240_000, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1600, height: 1100 } });
  const page = await context.newPage();
  const state = {};

  await step("side_stream_frees uploads; a moment with a pending free is found", async () => {
    state.id = (await upload(join(FIXTURES, "alloc_detail/side_stream_frees.pickle"))).id;
    const summary = (await api(`/api/snapshots/${state.id}`)).body;
    state.events = summary.analysis.devices[0].trace_entries;
    for (let at = 0; at < state.events; at += 7) {
      const history = (await api(`/api/snapshots/${state.id}/history?at=${at}&before=0&after=0`)).body;
      if (history.selected.pending > 0 && history.selected.action === "alloc") {
        state.at = at;
        break;
      }
    }
    assert(state.at !== undefined, "an alloc while a free waits");
  });

  await step("the history lists the events around the moment, streams as short ids", async () => {
    await page.goto(`${BASE}/s/${state.id}?tab=segments&at=${state.at}`);
    await until(() => page.evaluate(() => window.snapviewTest?.views?.segments?.history?.at), "the history");
    const list = page.locator("#segments-history .history-list");
    const text = await list.innerText();
    assert(/stream 0/.test(text), `stream 0 in: ${text}`);
    const streams = await page.locator("#segments-history .history-stream").allInnerTexts();
    assert(streams.length > 0 && streams.every((s) => /^stream \d{1,3}$/.test(s)), `streams as short ids: ${streams}`);
    const selected = await page.locator("#segments-history .history-row.selected").getAttribute("data-event");
    assertEqual(selected, String(state.at), "the selected row");
    const totals = await page.locator("[data-history-totals]").innerText();
    assert(/allocated · .* pending free · .* reserved/.test(totals), `totals: ${totals}`);
    await shot(page, "segments-history-side-stream");
    await clean(page);
  });

  await step("↓ and ↑ step the history one event and move the selection", async () => {
    await page
      .locator("#segments-canvas")
      .click({ position: { x: 2, y: 2 }, force: true })
      .catch(() => {});
    await page.keyboard.press("Escape");
    await page.keyboard.press("ArrowDown");
    await until(async () => new URL(page.url()).searchParams.get("at") === String(state.at + 1), "at + 1 in the URL");
    await until(
      async () => (await page.locator("#segments-history .history-row.selected").getAttribute("data-event")) === String(state.at + 1),
      "the next row selected",
    );
    await page.keyboard.press("ArrowUp");
    await until(async () => new URL(page.url()).searchParams.get("at") === String(state.at), "back at the moment");
    await until(
      async () => (await page.locator("#segments-history .history-row.selected").getAttribute("data-event")) === String(state.at),
      "the row selected again",
    );
  });

  await step("the block the event touched is outlined on the map", async () => {
    const layout = await until(
      () => page.evaluate(() => (window.snapviewTest.views.segments.layout?.touched?.length ? window.snapviewTest.views.segments.layout : null)),
      "a touched block",
    );
    const box = layout.touched[0];
    const { pixel, color } = await pixelAndColor(page, "#segments-canvas", box.x - 1.5, box.y + 10, "--oom");
    assert(near(pixel, color), `the outline's colour ${pixel} is the highlight ${color}`);
    // The selected event's address is the outlined block's.
    const history = await page.evaluate(() => window.snapviewTest.views.segments.history.selected);
    const piece = await page.evaluate(
      ({ x, y }) => window.snapviewTest.views.segments.pieces.find((p) => Math.abs(p.x - x) < 1 && Math.abs(p.y - y) < 1)?.block,
      { x: box.x, y: box.y },
    );
    assertEqual(piece?.address, history.address, "the outlined block's address");
  });

  await step("a pending free says why it waits", async () => {
    const target = await page.evaluate(() => {
      const p = window.snapviewTest.views.segments.pieces.find((p) => p.block.state === "active_pending_free");
      return p ? { x: p.x + p.w / 2, y: p.y + 8 } : null;
    });
    assert(target, "a pending block on the map");
    await hover(page, "#segments-canvas", target.x, target.y);
    const text = await tipText(page, "record_stream");
    assert(/waiting for stream 1/.test(text), `the stream it waits for: ${text}`);
    assert(/since event/.test(text), `when it was freed: ${text}`);
    assert(/pending free/.test(text), text);
    await shot(page, "segments-pending-tip");
  });

  await step("the segments table has a pending column and plurals", async () => {
    const head = await page.locator("#segments-table thead").innerText();
    assert(/Pending/i.test(head), `pending column: ${head}`);
    const totals = await page.locator("#segments-totals").innerText();
    assert(/Pending free/i.test(totals), totals);
    assert(!/\b1 segments\b/.test(totals), `plural: ${totals}`);
  });

  await step("the segments table, out of sight while the moment moves, shows the moment once scrolled to", async () => {
    const short = await newContext(browser, { viewport: { width: 1200, height: 500 } });
    const s = await short.newPage();
    await s.goto(`${BASE}/s/${state.id}?tab=segments&at=0`);
    await until(() => s.evaluate(() => window.snapviewTest?.views?.segments?.tableShape), "the table at event 0");
    await s.evaluate((at) => window.snapviewTest.app.setMoment(at), state.at);
    await until(() => s.evaluate((at) => window.snapviewTest.views.segments.key.endsWith(`at=${at}`), state.at), "the map at the pending free");
    assert(!(await s.evaluate(() => window.snapviewTest.views.segments.tableInView)), "the table is below the fold");
    await s.locator("#segments-table").scrollIntoViewIfNeeded();
    // The Pending column (the table's sixth) against the answer for the moment.
    const pending = () =>
      s.evaluate(() => {
        const v = window.snapviewTest.views.segments;
        return { shown: [...v.table.tBodies[0].rows].map((r) => r.cells[5].textContent), data: v.data.segments.map((g) => g.stats.pending_free) };
      });
    const now = await pending();
    assert(
      now.data.some((b) => b > 0),
      "a segment with a pending free at the moment",
    );
    await until(async () => {
      const { shown, data } = await pending();
      return shown.length === data.length && shown.every((text, i) => text === (data[i] ? bytes(data[i]) : "–"));
    }, "the table's pending column at the moment");
    const caption = await s.locator("#segments-table caption").textContent();
    assert(caption.includes(`right after event ${state.at.toLocaleString("en-US")}`), `the caption names the moment: ${caption}`);
    await short.close();
  });

  await step("zooming the map makes a small block hoverable", async () => {
    await page.goto(`${BASE}/s/${state.id}?tab=segments`);
    await until(() => page.evaluate(() => window.snapviewTest?.views?.segments?.layout?.blocks), "the map");
    const small = await page.evaluate(() => {
      const pieces = window.snapviewTest.views.segments.pieces.filter((p) => p.block.state === "active_allocated");
      pieces.sort((a, b) => a.block.size - b.block.size);
      const p = pieces[0];
      return { address: p.block.address, size: p.block.size, w: p.w, x: p.x, y: p.y };
    });
    assert(small.w < 3, `the smallest block starts tiny (${small.w} px)`);
    let found = small;
    for (let i = 0; i < 30 && found.w < 8; i += 1) {
      await hover(page, "#segments-canvas", found.x + found.w / 2, found.y + 8);
      await page.mouse.wheel(0, -400);
      found = await until(
        () =>
          page.evaluate((address) => {
            const p = window.snapviewTest.views.segments.pieces.find((p) => p.block.address === address);
            return p ? { address, w: p.w, x: p.x, y: p.y } : null;
          }, small.address),
        "the block after zooming",
      );
    }
    assert(found.w >= 8, `zoomed to ${found.w} px`);
    await hover(page, "#segments-canvas", found.x + found.w / 2, found.y + 8);
    const text = await tipText(page, bytes(small.size));
    assert(text.includes("allocated"), text);
    await shot(page, "segments-zoomed");
    await page.locator("[data-map-zoom=reset]").click();
    await clean(page);
  });

  await step("the cached segment timeline's reserved top is the timeline's reserved curve", async () => {
    const view = await until(
      () => page.evaluate(() => (window.snapviewTest.views.segments.overTime.layout ? window.snapviewTest.views.segments.overTime.data : null)),
      "the segment timeline",
    );
    const width = view.column_start.length - 1;
    const timeline = (await api(`/api/snapshots/${state.id}/timeline?device=0&width=${width}`)).body;
    assertEqual(JSON.stringify(view.reserved), JSON.stringify(timeline.reserved), "reserved per column");
    // Pixels: just under the curve is a band, just above it the background.
    const probe = await page.evaluate(() => {
      const v = window.snapviewTest.views.segments.overTime;
      const m = v.mapping();
      const c = v.data.reserved.indexOf(Math.max(...v.data.reserved));
      return { x: m.x(c + 0.5), top: m.y(v.data.reserved[c]), c };
    });
    const inside = await pixelAndColor(page, "#segtl-canvas", probe.x, probe.top + 5, "--panel");
    const above = await pixelAndColor(page, "#segtl-canvas", probe.x, probe.top - 4, "--panel");
    assert(!near(inside.pixel, inside.color) || inside.pixel.join() !== inside.color.join(), `a band under the curve at column ${probe.c}`);
    assertEqual(above.pixel.join(), above.color.join(), "background above the curve");
  });

  await step("hovering a band names its segment, stream, pool and cudaMalloc stack", async () => {
    const target = await page.evaluate(() => {
      const v = window.snapviewTest.views.segments.overTime;
      const m = v.mapping();
      const band = v.model.bands[0];
      const run = band.cols.length ? { c: band.cols[0], offset: band.offsets[0] } : { c: band.c0, offset: 0 };
      return { x: m.x(run.c + 0.5), y: (m.y(run.offset) + m.y(run.offset + band.size)) / 2 };
    });
    await hover(page, "#segtl-canvas", target.x, target.y);
    const text = await tipText(page, "stream");
    assert(/segment 0x|mapped range 0x/.test(text), text);
    assert(/default pool|private pool/.test(text), text);
    assert(/cudaMalloc called from|No stack recorded|Mapped at/.test(text), text);
    await shot(page, "segments-timeline-tip");
  });

  await step("zooming the segment timeline sets the timeline's window in the URL", async () => {
    await hover(page, "#segtl-canvas", 300, 60);
    await page.mouse.wheel(0, -600);
    await until(() => new URL(page.url()).searchParams.get("start") !== null, "start in the URL");
    const view = await until(
      () =>
        page.evaluate(() => {
          const v = window.snapviewTest.views.segments.overTime;
          return v.data && v.data.start > 0 ? v.data : null;
        }),
      "a zoomed answer",
    );
    const url = new URL(page.url());
    assertEqual(String(view.start), url.searchParams.get("start"), "the answer's window");
    await clean(page);
  });

  await step("the overview says allocated and pending once, the same on the card and the bars", async () => {
    await page.goto(`${BASE}/s/${state.id}`);
    const card = await page.locator("[data-stat=snapshot]").innerText();
    const pending = await page.locator("[data-pending-now]").innerText();
    const bar = await page.locator("[data-role-bar=snapshot]").innerText();
    assert(bar.includes(pending), `the bar says ${pending}: ${bar}`);
    const allocated = await page.locator("[data-allocated-now]").innerText();
    assert(bar.includes(allocated), `the bar says ${allocated} allocated: ${bar}`);
    assert(!/\b1 segments\b/.test(card), card);
    await shot(page, "segments-overview-pending");
    await clean(page);
  });

  await step("an expandable-segments snapshot says mapped ranges, and its bands grow", async () => {
    const id = (await upload(join(FIXTURES, "expandable.pickle"))).id;
    await page.goto(`${BASE}/s/${id}`);
    const cards = await page.locator(".device .stats").first().innerText();
    assert(/mapped ranges of expandable segments/.test(cards), cards);
    assert(!/segments from cudaMalloc/.test(cards), cards);
    await page.goto(`${BASE}/s/${id}?tab=segments`);
    const data = await until(
      () => page.evaluate(() => (window.snapviewTest?.views?.segments?.overTime?.layout ? window.snapviewTest.views.segments.overTime.data : null)),
      "the segment timeline",
    );
    assert(data.bands.expandable.some(Boolean), "mapped ranges are bands");
    const caption = await page.locator("#segments-table caption").innerText();
    assert(/expandable segment/.test(caption), caption);
    await shot(page, "segments-expandable");
    await clean(page);
  });

  await step("screenshots at 390 px and dark", async () => {
    const narrow = await newContext(browser, { viewport: { width: 390, height: 900 } });
    const p = await narrow.newPage();
    await p.goto(`${BASE}/s/${state.id}?tab=segments&at=${state.at}`);
    await until(() => p.evaluate(() => window.snapviewTest?.views?.segments?.layout?.touched?.length), "the map at 390 px");
    await until(() => p.evaluate(() => window.snapviewTest.views.segments.overTime.layout), "the segment timeline at 390 px");
    await shot(p, "segments-390");
    await narrow.close();
    const dark = await newContext(browser, { colorScheme: "dark", viewport: { width: 1600, height: 1100 } });
    const d = await dark.newPage();
    await d.goto(`${BASE}/s/${state.id}?tab=segments&at=${state.at}`);
    await until(() => d.evaluate(() => window.snapviewTest?.views?.segments?.layout?.touched?.length), "the map in dark");
    await until(() => d.evaluate(() => window.snapviewTest.views.segments.overTime.layout), "the segment timeline in dark");
    await shot(d, "segments-dark");
    await dark.close();
  });
});
