// Browser test of the timeline down to every allocation (issue 20): the byte axis zooms (Shift +
// wheel, a Shift + drag box, the ↑ ↓ keys, the toolbar), the grey threshold falls with it, the
// detail control, a click on the grey part lists its allocations (a row pins one), the grey part
// by role; every allocation of gpt2_adamw reached as its own band or a list row through the
// page's own hit-testing and list; the whole trace's shape (min and max per column, the
// minimap, clustered annotations) and the polish (distinct tick labels, labels that do not
// overlap, a moment past the end, the no-history timeline); on the 287 MB trace too when it is
// in $SNAPVIEW_LARGE_DIR (default /tmp/snapview-large), with no long task while zooming.
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/timeline_zoom.mjs
//
// Screenshots: target/screenshots/timeline-zoom-*.png (1600 px, 390 px, dark).

import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, drawn, exists, FIXTURES, newContext, run, shot, step, until, upload } from "./harness.mjs";

const TOTAL_TIMEOUT_MS = 400_000;
const LARGE = join(process.env.SNAPVIEW_LARGE_DIR ?? "/tmp/snapview-large", "gpt2_huge_trace.pickle");

const state = {};
const layout = (page) => page.evaluate(() => window.snapviewTest?.views?.timeline?.layout ?? null);
const store = (page) => page.evaluate(() => window.snapviewTest?.store.get() ?? null);
const setState = (page, patch) => page.evaluate((patch) => window.snapviewTest.store.set(patch), patch);

/** Waits until the timeline has drawn the answer to the state's window, zoom and detail; returns its layout. */
async function settled(page, what = "the timeline to settle") {
  return until(
    () =>
      page
        .evaluate(() => {
          const view = window.snapviewTest?.views?.timeline;
          if (!view?.model || view.loading || !view.layout) return null;
          const s = view.state();
          const data = view.model.data;
          const { start, end } = view.window();
          if (data.start !== start || data.end !== end) return null;
          const range = s.y0 !== null && s.y1 !== null ? [s.y0, s.y1] : null;
          if (range && (data.y_range[0] !== range[0] || data.y_range[1] !== range[1])) return null;
          if (!range && data.y_range[0] !== 0) return null;
          if ((s.detail ?? 2000) !== data.detail) return null;
          return view.layout;
        })
        // A navigation in flight destroys the context: ask again.
        .catch(() => null),
    what,
    15_000,
  );
}

/** Screen position of CSS px (x, y) of a canvas. */
async function canvasPoint(page, selector, x, y) {
  const box = await page.locator(selector).boundingBox();
  return { x: box.x + x, y: box.y + y };
}

/** The answer drawn now: bands (id, size, columns, offsets), columns' totals, y range. */
const model = (page) =>
  page.evaluate(() => {
    const m = window.snapviewTest.views.timeline.model;
    return {
      n: m.n,
      cs: m.cs,
      threshold: m.data.threshold,
      yRange: m.data.y_range,
      yMax: m.data.y_max,
      bigTop: m.data.big_top,
      max: m.data.allocated_max,
      min: m.data.allocated_min,
      bands: m.bands.map((b) => ({ id: b.id, size: b.size, c0: b.c0, c1: b.c1, cols: b.cols, offsets: b.offsets })),
    };
  });

/** A column whose grey part is at least `px` tall on screen: [column, x, y] (CSS px of the canvas), or null. */
async function greyPoint(page, px = 6) {
  return page.evaluate((px) => {
    const view = window.snapviewTest.views.timeline;
    const m = view.mapping();
    const data = view.model.data;
    // Away from the lines drawn over the grey (the moment, the peak).
    const lines = [view.layout?.moment?.x, view.layout?.peak?.x].filter((x) => x !== undefined);
    let best = null;
    for (let c = 0; c < view.model.n; c += 1) {
      const x0 = Math.max(m.plot.x, m.px(c));
      const x1 = Math.min(m.plot.x + m.plot.w, m.px(c + 1));
      if (x1 - x0 < 1 || lines.some((x) => Math.abs(x - (x0 + x1) / 2) < 6)) continue;
      const top = Math.max(m.plot.y, m.py(data.allocated_max[c]));
      const bottom = Math.min(m.plot.y + m.plot.h, m.py(data.big_top[c]));
      if (bottom - top >= px && (!best || bottom - top > best.h)) best = { c, x: (x0 + x1) / 2, y: (top + bottom) / 2, h: bottom - top };
    }
    return best;
  }, px);
}

await run(TOTAL_TIMEOUT_MS, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1600, height: 1000 } });
  const page = await context.newPage();

  await step("the fixtures upload", async () => {
    state.gpt2 = (await upload(join(FIXTURES, "gpt2_adamw.pickle"), "gpt2_adamw (timeline zoom)")).id;
    state.oom = (await upload(join(FIXTURES, "oom.pickle"), "oom (timeline zoom)")).id;
    state.noHistory = (await upload(join(FIXTURES, "no_history.pickle"), "no history (timeline zoom)")).id;
    state.mlp = (await upload(join(FIXTURES, "mlp_small.pickle"), "mlp_small (timeline zoom)")).id;
    const detail = (await api(`/api/snapshots/${state.gpt2}`)).body.analysis.devices[0];
    state.events = detail.trace_entries;
    state.allocations = detail.allocations;
    assert(state.allocations > 1000, `gpt2_adamw has ${state.allocations} allocations`);
  });

  await step("Shift + wheel zooms the byte axis: y0/y1 in the URL, the threshold falls, more bands, distinct tick labels", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    const before = await settled(page);
    const whole = await model(page);
    assertEqual(whole.yRange[0], 0, "the unzoomed axis starts at 0");
    const point = await canvasPoint(page, "#timeline-canvas", before.plot.x + before.plot.w * 0.3, before.plot.y + before.plot.h * 0.7);
    await page.mouse.move(point.x, point.y);
    await page.keyboard.down("Shift");
    for (let i = 0; i < 6; i += 1) {
      await page.mouse.wheel(0, -300);
      await page.waitForTimeout(30);
    }
    await page.keyboard.up("Shift");
    const s = await until(async () => {
      const s = await store(page);
      return s.y0 !== null ? s : null;
    }, "y0 and y1 in the state");
    await until(() => {
      const url = new URL(page.url());
      return url.searchParams.get("y0") === String(s.y0) && url.searchParams.get("y1") === String(s.y1);
    }, "y0 and y1 in the URL");
    assertEqual(s.start, null, "a byte zoom leaves the event window alone");
    const l = await settled(page, "the byte-zoomed answer");
    const zoomed = await model(page);
    assert(s.y1 - s.y0 < whole.yMax / 4, `the byte range did not narrow: ${s.y0}–${s.y1} of ${whole.yMax}`);
    assert(zoomed.threshold < whole.threshold / 4, `the grey threshold did not fall: ${whole.threshold} → ${zoomed.threshold}`);
    assert(zoomed.bands.length > whole.bands.length, `no more bands when zoomed: ${whole.bands.length} → ${zoomed.bands.length}`);
    assert(l.yTicks.length >= 2 && new Set(l.yTicks).size === l.yTicks.length, `y tick labels repeat: ${l.yTicks}`);
    assert(!l.yTicks.includes("0"), `a zoomed axis away from 0 still labels 0: ${l.yTicks}`);
    assert(l.yRange[0] === s.y0 && l.yRange[1] === s.y1, "the painter draws the state's byte range");
    await shot(page, "timeline-zoom-gpt2-bytes");
    // The toolbar's "All bytes" undoes it, ↑ zooms in again, ↓ out.
    await page.locator('[data-yzoom="reset"]').click();
    await until(async () => (await store(page)).y0 === null, "All bytes to clear the byte zoom");
    await page
      .locator("#timeline-canvas")
      .focus()
      .catch(() => {});
    await page.keyboard.press("ArrowUp");
    const up = await until(async () => {
      const s = await store(page);
      return s.y0 !== null ? s : null;
    }, "↑ to zoom the bytes");
    await page.keyboard.press("ArrowDown");
    await until(async () => {
      const s = await store(page);
      return s.y0 === null || s.y1 - s.y0 > up.y1 - up.y0;
    }, "↓ to zoom the bytes out");
    await clean(page);
  });

  await step("Shift + drag draws a box and zooms both axes to it; a copied link restores it", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    const l = await settled(page);
    const from = await canvasPoint(page, "#timeline-canvas", l.plot.x + l.plot.w * 0.4, l.plot.y + l.plot.h * 0.3);
    const to = await canvasPoint(page, "#timeline-canvas", l.plot.x + l.plot.w * 0.5, l.plot.y + l.plot.h * 0.6);
    await page.keyboard.down("Shift");
    await page.mouse.move(from.x, from.y);
    await page.mouse.down();
    for (let i = 1; i <= 6; i += 1) await page.mouse.move(from.x + ((to.x - from.x) * i) / 6, from.y + ((to.y - from.y) * i) / 6);
    await page.mouse.up();
    await page.keyboard.up("Shift");
    const s = await until(async () => {
      const s = await store(page);
      return s.start !== null && s.y0 !== null ? s : null;
    }, "the box zoom in the state");
    const span = s.end - s.start + 1;
    assert(span < state.events * 0.2 && span > state.events * 0.05, `the box's window is ${span} events of ${state.events}`);
    const boxBytes = l.yTop * 0.3;
    assert(Math.abs(s.y1 - s.y0 - boxBytes) < boxBytes * 0.1, `the box's byte range ${s.y1 - s.y0} is not 30% of ${l.yTop}`);
    await settled(page, "the boxed answer");
    await until(() => new URL(page.url()).searchParams.get("y1") === String(s.y1), "the box in the URL");
    const other = await context.newPage();
    await other.goto(page.url());
    const restored = await settled(other, "the copied link's view");
    assertEqual(restored.yRange.join(), [s.y0, s.y1].join(), "the link's byte range");
    assertEqual(restored.request.start, s.start, "the link's window");
    await other.close();
    await clean(page);
  });

  await step("the detail control bounds the bands and is in the URL", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline&y0=0&y1=200000000`);
    await settled(page);
    const many = (await model(page)).bands.length;
    assert(many > 500, `a 200 MB byte range draws ${many} bands`);
    await page.locator("#timeline-detail").selectOption("500");
    await until(() => new URL(page.url()).searchParams.get("detail") === "500", "detail=500 in the URL");
    await settled(page, "the answer at detail 500");
    const few = (await model(page)).bands.length;
    assertEqual(few, 500, "bands at detail 500");
    const status = await page.locator("#timeline-status").textContent();
    assert(status.includes("500 bands"), `the status does not count the bands: ${status}`);
    await clean(page);
  });

  await step("a click on the grey part lists its allocations (size, role, lifetime, frames); a row pins one", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    await settled(page);
    const grey = await greyPoint(page, 8);
    assert(grey, "no column with grey 8 px tall on the whole trace");
    const hit = await page.evaluate(({ x, y }) => window.snapviewTest.views.timeline.hitTest(x, y), grey);
    assertEqual(hit.kind, "grey", "the hit test at the grey part");
    // The tooltip says what grey is and that a click lists it.
    const point = await canvasPoint(page, "#timeline-canvas", grey.x, grey.y);
    await page.mouse.move(point.x, point.y);
    const tip = await until(async () => {
      const text = await page
        .locator(".tip")
        .first()
        .textContent()
        .catch(() => "");
      return text?.includes("Click to list") ? text : null;
    }, "the grey tooltip");
    assert(tip.includes("allocated"), `the grey tooltip lacks the column's totals: ${tip}`);
    await page.mouse.click(point.x, point.y);
    const list = page.locator("#timeline-column-list");
    await until(async () => (await list.locator(".column-row").count()) > 0, "the grey column's list");
    const text = await list.textContent();
    assert(/\d[\d,]* allocations, [\d.]+ [KMG]?i?B/.test(text), `the list does not count its allocations: ${text}`);
    const answer = await page.evaluate(() => window.snapviewTest.views.timeline.columnListed);
    assert(answer.rows.length > 0 && answer.rows.length <= 50, `rows: ${answer.rows.length}`);
    for (let i = 1; i < answer.rows.length; i += 1) assert(answer.rows[i - 1].size >= answer.rows[i].size, "rows are not largest first");
    const bandIds = new Set((await model(page)).bands.map((b) => b.id));
    assert(
      answer.rows.every((r) => !bandIds.has(r.id)),
      "the grey list holds a band",
    );
    const first = list.locator(".column-row").first();
    const firstText = await first.textContent();
    assert(firstText.includes(answer.rows[0].role), `the row does not show its role: ${firstText}`);
    assert(firstText.includes("→"), `the row does not show its lifetime: ${firstText}`);
    if (answer.total > answer.rows.length) {
      assert(text.includes(`${(answer.total - answer.rows.length).toLocaleString("en-US")} more`), `the list does not say how many more: ${text}`);
      await list.getByRole("button", { name: /Show \d+ more/ }).click();
      await until(async () => (await list.locator(".column-row").count()) > answer.rows.length, "more rows");
    }
    await first.click();
    await until(async () => (await store(page)).alloc === answer.rows[0].id, "the row to pin its allocation");
    await until(
      async () => (await page.locator("#alloc-panel").textContent()).includes(answer.rows[0].block_id),
      "the pinned allocation's block id beside the chart",
    );
    await shot(page, "timeline-zoom-gpt2-grey-list");
    await clean(page);
  });

  await step("by role, the grey part takes the roles' colours, stacked", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    await settled(page);
    const grey = await greyPoint(page, 20);
    const colourAt = (x, y) =>
      page.evaluate(
        ({ x, y }) => {
          const canvas = document.querySelector("#timeline-canvas");
          const k = canvas.width / canvas.getBoundingClientRect().width;
          const [r, g, b] = canvas.getContext("2d").getImageData(Math.round(x * k), Math.round(y * k), 1, 1).data;
          return [r, g, b];
        },
        { x, y },
      );
    const saturation = ([r, g, b]) => Math.max(r, g, b) - Math.min(r, g, b);
    const plain = await colourAt(grey.x, grey.y);
    assert(saturation(plain) < 30, `the grey part is not grey: ${plain}`);
    await page.locator('[data-color="role"]').click();
    await until(() => page.evaluate(() => (window.snapviewTest.views.timeline.greyRolesCache?.parts?.length ?? 0) > 0), "the grey split by role");
    await page.waitForTimeout(200);
    const parts = await page.evaluate((c) => window.snapviewTest.views.timeline.greyRolesCache.parts[c], grey.c);
    assert(parts.length > 0, "no role parts in the grey column");
    const coloured = await colourAt(grey.x, grey.y);
    assert(saturation(coloured) >= 30, `the grey part is still grey by role: ${coloured}`);
    const sum = parts.reduce((a, [, b]) => a + b, 0);
    const m = await model(page);
    assert(Math.abs(sum - (m.max[grey.c] - m.bigTop[grey.c])) <= 2, "the role parts do not fill the grey part");
    await shot(page, "timeline-zoom-gpt2-grey-by-role");
    await page.locator('[data-color="allocation"]').click();
    await clean(page);
  });

  await step(
    "every allocation of gpt2_adamw is reached: its own band (hit-tested) or a row of a grey column's list",
    async () => {
      await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
      await settled(page);
      const reached = await page.evaluate(async () => {
        const view = window.snapviewTest.views.timeline;
        const asBand = new Set();
        const asRow = new Set();
        let hitMisses = 0;
        for (const band of view.layout.bands) {
          if (band.w < 1 || band.h < 1) continue;
          const hit = view.hitTest(band.x + band.w / 2, band.y + band.h / 2);
          if (hit.kind === "band" && hit.band.id === band.id) asBand.add(band.id);
          else hitMisses += 1;
        }
        let overflow = 0;
        for (let c = 0; c < view.model.n; c += 1) {
          if (view.model.data.allocated_max[c] <= view.model.data.big_top[c] && view.model.data.allocated_min[c] <= view.model.data.big_top[c]) continue;
          const answer = await view.openColumn(c, 500);
          if (!answer) continue;
          for (const row of answer.rows) asRow.add(row.id);
          if (answer.total > answer.rows.length) overflow += 1;
        }
        return { asBand: [...asBand], asRow: [...asRow], hitMisses, overflow, columns: view.model.n };
      });
      const all = new Set([...reached.asBand, ...reached.asRow]);
      const missing = [];
      for (let id = 0; id < state.allocations; id += 1) if (!all.has(id)) missing.push(id);
      assertEqual(reached.overflow, 0, "columns with more grey allocations than one list holds");
      assert(
        missing.length === 0,
        `${missing.length} of ${state.allocations} allocations not reached (${reached.asBand.length} bands, ${reached.asRow.length} rows over ${reached.columns} columns): ${missing.slice(0, 10)}`,
      );
      state.rowOnly = reached.asRow.filter((id) => !reached.asBand.includes(id));
      console.log(`      ${reached.asBand.length} as bands, ${reached.asRow.length} as rows, ${reached.hitMisses} bands covered by others at their centre`);
      await page.evaluate(() => window.snapviewTest.views.timeline.columnList.replaceChildren());
      // A list per column of the whole trace: a thousand requests, slow on a busy machine.
    },
    150_000,
  );

  await step("zooming both axes makes small allocations their own bands (the grey threshold falls with x and y)", async () => {
    // The smallest allocations that live a few events: zoom on their lifetime, then on their
    // height, until the hit test at their centre finds them.
    const candidates = [];
    for (const id of state.rowOnly) {
      const a = (await api(`/api/snapshots/${state.gpt2}/allocations/${id}`)).body;
      if (a.start !== null && a.end !== null && a.end - a.start >= 6) candidates.push(a);
      if (candidates.length >= 40) break;
    }
    candidates.sort((a, b) => a.size - b.size);
    const sample = [candidates[0], candidates[Math.floor(candidates.length / 2)], candidates[candidates.length - 1]];
    for (const a of sample) {
      const start = Math.max(0, a.start - 4);
      const end = Math.min(state.events - 1, Math.max(a.end + 4, start + 16));
      // The most detail: a window of a thousand events holds thousands of candidates.
      await setState(page, { start, end, y0: null, y1: null, detail: 5000 });
      let found = null;
      for (let round = 0; round < 8 && !found; round += 1) {
        await settled(page, `the window around allocation ${a.id}`);
        const m = await model(page);
        const band = m.bands.find((b) => b.id === a.id);
        if (band) {
          const l = await layout(page);
          const drawnBand = l.bands.find((b) => b.id === a.id);
          if (drawnBand && drawnBand.h >= 1 && drawnBand.w >= 1) {
            const hit = await page.evaluate(({ x, y }) => window.snapviewTest.views.timeline.hitTest(x, y), {
              x: drawnBand.x + drawnBand.w / 2,
              y: drawnBand.y + drawnBand.h / 2,
            });
            if (hit.kind === "band" && hit.band.id === a.id) found = { round, h: drawnBand.h, threshold: m.threshold };
          }
          if (!found) {
            const offset = band.offsets[0] ?? 0;
            await setState(page, { y0: Math.max(0, Math.round(offset - a.size * 4)), y1: Math.round(offset + a.size * 5) + 16384 });
          }
        } else {
          // Not a band yet: zoom the bytes until a pixel row is well under its size, around the
          // grey part of its first column.
          const c = Math.max(
            0,
            m.cs.findLastIndex((e) => e <= a.start),
          );
          const low = m.bigTop[c];
          const span = Math.max(16384, a.size * 64);
          await setState(page, { y0: Math.max(0, Math.round(low - span / 2)), y1: Math.round(low + span / 2) });
        }
      }
      assert(found, `allocation ${a.id} (${a.size} B, events ${a.start}–${a.end}) never became its own band`);
      console.log(
        `      allocation ${a.id} (${a.size} B) is its own band after ${found.round} byte zooms (threshold ${found.threshold} B, ${found.h.toFixed(1)} px tall)`,
      );
    }
    await shot(page, "timeline-zoom-gpt2-small-band");
    await clean(page);
  });

  await step("the whole trace: min part solid, max outlined; the minimap likewise", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    await settled(page);
    await drawn(page, "#timeline-minimap", 0.1);
    // A column whose lowest and highest totals differ: solid below the lowest, lighter above it.
    const probe = await page.evaluate(() => {
      const view = window.snapviewTest.views.timeline;
      const m = view.mapping();
      const data = view.model.data;
      const canvas = view.canvas;
      const k = canvas.width / canvas.getBoundingClientRect().width;
      const ctx = canvas.getContext("2d");
      const alpha = (x, y) => {
        const [r, g, b] = ctx.getImageData(Math.round(x * k), Math.round(y * k), 1, 1).data;
        return 255 * 3 - (r + g + b);
      };
      for (let c = 1; c < view.model.n - 1; c += 1) {
        const low = m.py(Math.max(data.allocated_min[c], data.big_top[c]));
        const top = m.py(data.allocated_max[c]);
        const bottom = m.py(data.big_top[c]);
        if (low - top > 20 && bottom - low > 20) {
          const x = (m.px(c) + m.px(c + 1)) / 2;
          return { solid: alpha(x, (low + bottom) / 2), range: alpha(x, (top + low) / 2) };
        }
      }
      return null;
    });
    assert(probe, "no column with both a solid and a range part");
    assert(probe.solid > probe.range + 20, `the part under the lowest total is not darker than the range: ${JSON.stringify(probe)}`);
    await clean(page);
  });

  await step("labels never overlap (OOM and end of trace), and time ticks read distinct when zoomed", async () => {
    await page.goto(`${BASE}/s/${state.oom}?tab=timeline`);
    const l = await settled(page);
    const texts = l.labels.map((label) => label.text);
    assert(
      texts.some((t) => t.startsWith("OOM")),
      `the OOM label is not drawn: ${texts}`,
    );
    for (let i = 0; i < l.labels.length; i += 1) {
      for (let j = i + 1; j < l.labels.length; j += 1) {
        const [a, b] = [l.labels[i], l.labels[j]];
        const overlap = a.y === b.y && a.x < b.x + b.w && b.x < a.x + a.w;
        assert(!overlap, `labels overlap: "${a.text}" and "${b.text}"`);
      }
    }
    await shot(page, "timeline-zoom-oom-labels");
    // Time axis zoomed to 20 events of the middle: every tick label differs.
    const start = Math.floor(state.events / 2);
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline&axis=time&start=${start}&end=${start + 19}`);
    const zoomed = await settled(page);
    assert(zoomed.xTicks.length >= 3, `too few time ticks: ${zoomed.xTicks}`);
    assertEqual(new Set(zoomed.xTicks).size, zoomed.xTicks.length, `time tick labels repeat: ${zoomed.xTicks}`);
    await clean(page);
  });

  await step("?at past the end shows the last event and says so; no history shows only why", async () => {
    const { body } = await api(`/api/snapshots/${state.mlp}`);
    const events = body.analysis.devices[0].trace_entries;
    await page.goto(`${BASE}/s/${state.mlp}?tab=timeline&at=999999`);
    const l = await settled(page);
    assertEqual(l.moment?.at, events - 1, "the moment drawn");
    const status = await page.locator("#timeline-status").textContent();
    assert(
      status.includes("past the end") && status.includes((events - 1).toLocaleString("en-US")),
      `the status does not say the moment was clamped: ${status}`,
    );
    await page.goto(`${BASE}/s/${state.noHistory}?tab=timeline`);
    await until(async () => page.locator("#timeline-empty").isVisible(), "the no-timeline note");
    await page.waitForTimeout(500);
    const emptyText = await page.locator("#timeline-empty").textContent();
    assert(emptyText.includes("No timeline"), `the note: ${emptyText}`);
    const statusText = (await page.locator("#timeline-status").textContent()) ?? "";
    assert(!statusText.includes("Loading"), `"Loading…" beside "No timeline": ${statusText}`);
    await clean(page);
  });

  await step("screenshots at 390 px and dark", async () => {
    const narrow = await browser.newContext({ viewport: { width: 390, height: 900 } });
    const small = await narrow.newPage();
    await small.goto(`${BASE}/s/${state.gpt2}?tab=timeline&y0=0&y1=1000000000`);
    await settled(small);
    await shot(small, "timeline-zoom-gpt2-390");
    await narrow.close();
    const dark = await browser.newContext({ viewport: { width: 1600, height: 1000 }, colorScheme: "dark" });
    const night = await dark.newPage();
    await night.goto(`${BASE}/s/${state.gpt2}?tab=timeline&color=role`);
    await settled(night);
    await shot(night, "timeline-zoom-gpt2-dark");
    await dark.close();
  });

  if (!exists(LARGE)) {
    console.log(`skipped the 287 MB trace: ${LARGE} is not there (set SNAPVIEW_LARGE_DIR)`);
    return;
  }

  await step(
    "the 287 MB trace: the whole view shows min and max, annotations clustered with counts, no long task while zooming",
    async () => {
      state.huge = (await upload(LARGE, "gpt2 huge trace (timeline zoom)")).id;
      const { status } = await api(`/api/snapshots/${state.huge}/timeline?width=1000`);
      assertEqual(status, 200, "the huge timeline");
      const watched = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
      await watched.addInitScript(() => {
        window.__longtasks = [];
        new PerformanceObserver((list) => {
          for (const entry of list.getEntries()) window.__longtasks.push(entry.duration);
        }).observe({ type: "longtask", buffered: true });
      });
      const huge = await watched.newPage();
      await huge.goto(`${BASE}/s/${state.huge}?tab=timeline`);
      const l = await settled(huge, "the huge timeline");
      const m = await model(huge);
      // The steps' low (about 1.8 GiB) and high (over 6 GiB) are there, column by column.
      const sorted = [...m.min].sort((a, b) => a - b);
      const typicalLow = sorted[Math.floor(sorted.length / 2)];
      assert(typicalLow > m.yMax * 0.15, `the columns' lowest totals are near 0: ${typicalLow} of ${m.yMax}`);
      const highs = [...m.max].sort((a, b) => a - b);
      assert(highs[Math.floor(highs.length / 2)] > typicalLow * 2, "the columns' highest totals are not above their lowest");
      // Annotations: far fewer markers than annotations, each with its count.
      const clusters = l.annotations;
      const total = clusters.reduce((a, c) => a + c.count, 0);
      assert(total > 1000, `annotations drawn: ${total}`);
      assert(clusters.length < l.plot.w / 8, `${clusters.length} annotation markers on ${l.plot.w} px: a solid bar`);
      const c = clusters[Math.floor(clusters.length / 2)];
      const point = await canvasPoint(huge, "#timeline-canvas", c.x, l.plot.y + 3);
      await huge.mouse.move(point.x, point.y);
      const tip = await until(async () => {
        const text = await huge
          .locator(".tip")
          .first()
          .textContent()
          .catch(() => "");
        return text?.includes("annotations") ? text : null;
      }, "the annotation cluster's tooltip");
      assert(tip.includes(String(c.count)) && tip.includes("×"), `the cluster's tooltip does not say how many of which: ${tip}`);
      await shot(huge, "timeline-zoom-huge-whole");
      await drawn(huge, "#timeline-minimap", 0.1);
      // Zoom x and y with the wheel and keys; no main-thread task over 50 ms.
      await huge.evaluate(() => {
        window.__longtasks = [];
      });
      const centre = await canvasPoint(huge, "#timeline-canvas", l.plot.x + l.plot.w * 0.5, l.plot.y + l.plot.h * 0.5);
      await huge.mouse.move(centre.x, centre.y);
      for (let i = 0; i < 12; i += 1) {
        await huge.mouse.wheel(0, -400);
        await huge.waitForTimeout(60);
      }
      await huge.keyboard.down("Shift");
      for (let i = 0; i < 8; i += 1) {
        await huge.mouse.wheel(0, -400);
        await huge.waitForTimeout(60);
      }
      await huge.keyboard.up("Shift");
      await huge.locator("#timeline-detail").selectOption("5000");
      await settled(huge, "the zoomed huge timeline");
      const deep = await model(huge);
      const s = await store(huge);
      assert(s.y0 !== null && s.start !== null, "both axes zoomed");
      assert(deep.threshold < m.threshold / 10, `the threshold did not fall: ${m.threshold} → ${deep.threshold}`);
      await huge.waitForTimeout(300);
      const tasks = await huge.evaluate(() => window.__longtasks);
      const longest = Math.max(0, ...tasks);
      console.log(`      longest main-thread task while zooming the 287 MB trace: ${longest.toFixed(0)} ms (${tasks.length} over 50 ms)`);
      assert(longest <= 50 || tasks.length === 0, `long tasks while zooming: ${tasks.map((t) => t.toFixed(0))}`);
      await shot(huge, "timeline-zoom-huge-deep");
      // The grey of a deep column lists its allocations.
      const grey = await greyPoint(huge, 4);
      if (grey) {
        const at = await canvasPoint(huge, "#timeline-canvas", grey.x, grey.y);
        await huge.mouse.click(at.x, at.y);
        await until(async () => (await huge.locator("#timeline-column-list .column-row").count()) > 0, "the huge trace's grey list");
        await shot(huge, "timeline-zoom-huge-grey-list");
      }
      const narrow = await browser.newContext({ viewport: { width: 390, height: 900 } });
      const small = await narrow.newPage();
      await small.goto(`${BASE}/s/${state.huge}?tab=timeline`);
      await settled(small);
      await shot(small, "timeline-zoom-huge-390");
      await narrow.close();
      const dark = await browser.newContext({ viewport: { width: 1600, height: 1000 }, colorScheme: "dark" });
      const night = await dark.newPage();
      await night.goto(`${BASE}/s/${state.huge}?tab=timeline`);
      await settled(night);
      await shot(night, "timeline-zoom-huge-dark");
      await dark.close();
      await watched.close();
    },
    240_000,
  );
});
