// Browser test of the compare and group pages, in Debian's chromium through playwright-core.
//
// Starts nothing itself: point it at a running server (its store may hold other snapshots),
//
//   SNAPVIEW_URL=http://127.0.0.1:7995 node tests/browser/compare.mjs
//
// (`cargo test --release --test browser` starts a server on a fresh data folder and runs
// this). Screenshots go to target/screenshots/ (or $SNAPVIEW_SCREENSHOTS): compare-*.png and
// group-*.png. Prints "N passed, N failed" and exits non-zero when a check failed.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { bytes as formatBytes } from "../../static/lib/units.js";
import { api, assert, assertEqual, BASE, clean, FIXTURES, newContext, run, shot, step, until } from "./harness.mjs";

const TOTAL_TIMEOUT_MS = 100_000;

async function upload(file, name, group) {
  const bytes = readFileSync(join(FIXTURES, file));
  const query = new URLSearchParams({ filename: file, name, ...(group ? { group } : {}) });
  const { status, body, text } = await api(`/api/snapshots?${query}`, { method: "POST", body: bytes });
  assert(status === 201 || status === 200, `upload of ${file} answered ${status}: ${text}`);
  // Already stored (a re-run against the same server): make the name and group what we need.
  if (status === 200) {
    await api(`/api/snapshots/${body.id}`, {
      method: "PATCH",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name, group: group ?? "" }),
    });
  }
  return body.id;
}

/** The console errors this script causes on purpose: the error pages it opens answer 400/404. */
function expectedErrors(text, url) {
  return /status of (400|404)/.test(text) && /\/(compare|g)\//.test(url);
}

/** Pixels of a canvas: how many are drawn (not transparent), and how many are clearly red. */
async function canvasPixels(page, selector) {
  return page
    .locator(selector)
    .first()
    .evaluate((canvas) => {
      const ctx = canvas.getContext("2d");
      const { data } = ctx.getImageData(0, 0, canvas.width, canvas.height);
      let drawn = 0;
      let red = 0;
      let blue = 0;
      for (let i = 0; i < data.length; i += 4) {
        if (data[i + 3] === 0) continue;
        drawn += 1;
        const [r, g, b] = [data[i], data[i + 1], data[i + 2]];
        if (r > 150 && r > g + 60 && r > b + 60) red += 1;
        if (b > 150 && b > r + 60) blue += 1;
      }
      return { drawn, red, blue, total: data.length / 4, width: canvas.width, cssWidth: canvas.getBoundingClientRect().width };
    });
}

/** Waits for the compare page's data to arrive and its canvases to be drawn. */
async function compareReady(page) {
  await page.locator("#compare[data-ready=true]").waitFor({ timeout: 20_000 });
  await until(() => page.evaluate(() => (window.snapviewTest?.flameRects().length ?? 0) > 0), "the flame graph's layout");
}

// ---------------------------------------------------------------------------------------------

const state = {};

await run(TOTAL_TIMEOUT_MS, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1280, height: 900 } }, expectedErrors);
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });
  const page = await context.newPage();

  await step("upload the two inference snapshots and two DDP ranks", async () => {
    state.nograd = await upload("infer_nograd.pickle", "infer no_grad");
    state.grad = await upload("infer_grad.pickle", "infer with grad");
    state.rank0 = await upload("ddp_rank.pickle", "ddp rank 0", "ddp");
    state.rank1 = await upload("ddp_rank_rank1.pickle", "ddp rank 1", "ddp");
    state.compare = await api(`/api/compare/${state.nograd}/${state.grad}`);
    assertEqual(state.compare.status, 200, "GET /api/compare status");
  });

  await step("on the list, selecting the two inference rows and pressing Compare opens /compare/{a}/{b}", async () => {
    await page.goto(`${BASE}/`);
    const compare = page.locator("#compare-selected");
    assertEqual(await compare.getAttribute("aria-disabled"), "true", "Compare before any selection");
    await page.locator(`tr[data-id="${state.nograd}"] input.select-row`).check();
    assertEqual(await compare.getAttribute("aria-disabled"), "true", "Compare with one selected");
    await page.locator(`tr[data-id="${state.grad}"] input.select-row`).check();
    await until(async () => (await compare.getAttribute("aria-disabled")) === null, "Compare to be enabled with two selected");
    await shot(page, "compare-list-selected", { fullPage: false });
    // A third selection disables it again.
    await page.locator(`tr[data-id="${state.rank0}"] input.select-row`).check();
    assertEqual(await compare.getAttribute("aria-disabled"), "true", "Compare with three selected");
    await page.locator(`tr[data-id="${state.rank0}"] input.select-row`).uncheck();
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.nograd}/${state.grad}`), compare.click()]);
    await clean(page);
  });

  await step("the compare page shows both peaks and the growth", async () => {
    await compareReady(page);
    const device = state.compare.body.diff.devices[0];
    const peak = page.locator("[data-total=peak_allocated_bytes]").first();
    assertEqual((await peak.locator("[data-side=before]").textContent()).trim(), formatBytes(device.before.peak_allocated_bytes), "before peak");
    assertEqual((await peak.locator("[data-side=after]").textContent()).trim(), formatBytes(device.after.peak_allocated_bytes), "after peak");
    const percent = (await peak.locator("[data-percent]").textContent()).trim();
    assertEqual(percent, `+${device.peak_growth_percent.toFixed(0)}%`, "growth %");
    assert((await peak.getAttribute("title")).includes("requested bytes"), "hovering the peak does not explain it");
    await shot(page, "compare-light");
    await clean(page);
  });

  await step("the differential flame graph is drawn, with red, and hovering the widest growing frame explains it", async () => {
    const pixels = await canvasPixels(page, "canvas.flame-canvas");
    assert(pixels.drawn > pixels.total * 0.2, `the flame graph is mostly blank: ${JSON.stringify(pixels)}`);
    assert(pixels.red > 500, `no red in the flame graph: ${JSON.stringify(pixels)}`);
    const rects = await page.evaluate(() => window.snapviewTest.flameRects());
    const growing = rects.filter((r) => r.after > r.before && /modeling_gpt2\.py|forward/.test(r.name) && !r.ancestor);
    assert(growing.length > 0, "no growing modeling_gpt2.py frame is drawn");
    const widest = growing.reduce((a, b) => (b.w > a.w ? b : a));
    // The by-role block above grows with the roles present (issue 19 added four): bring the
    // frame into the viewport before hovering it.
    await page.evaluate((y) => {
      const canvas = document.querySelector("canvas.flame-canvas");
      window.scrollTo(0, window.scrollY + canvas.getBoundingClientRect().top + y - 200);
    }, widest.y);
    const box = await page.locator("canvas.flame-canvas").first().boundingBox();
    await page.mouse.move(box.x + widest.x + widest.w / 2, box.y + widest.y + widest.h / 2);
    const tooltip = page.locator(".tip");
    await tooltip.waitFor({ state: "visible" });
    const text = await tooltip.textContent();
    assert(/modeling_gpt2\.py|forward/.test(text), `the tooltip does not name the frame: ${text}`);
    assert(
      text.includes(formatBytes(widest.before).replace(/^0 B$/, "0 B")) && text.includes(formatBytes(widest.after)),
      `the tooltip does not give both sides (${formatBytes(widest.before)}, ${formatBytes(widest.after)}): ${text}`,
    );
    assert(/change\s*\+/.test(text), `the tooltip shows no growth: ${text}`);
    await shot(page, "compare-flame-hover", { fullPage: false, clip: { x: 0, y: Math.max(0, box.y - 120), width: 1280, height: 700 } });
    // Click zooms in; the breadcrumb goes back.
    await page.mouse.click(box.x + widest.x + widest.w / 2, box.y + widest.y + widest.h / 2);
    const crumbs = page.locator(".cmp-breadcrumb").first();
    await crumbs.waitFor({ state: "visible" });
    const zoomed = await page.evaluate(() => window.snapviewTest.flameRects().filter((r) => !r.ancestor)[0]);
    assertEqual(zoomed.name, widest.name, "the zoomed frame");
    await crumbs.locator("button.crumb").first().click();
    await crumbs.waitFor({ state: "hidden" });
    await clean(page);
  });

  await step("the stacks table lists the biggest growth first, with modeling_gpt2.py", async () => {
    const first = page.locator(".cmp-stack").first();
    const text = await first.locator("summary").textContent();
    assert(text.includes("modeling_gpt2.py"), `the first row does not mention modeling_gpt2.py: ${text}`);
    const top = state.compare.body.diff.devices[0].stacks[0];
    assert(text.includes(`+${formatBytes(top.delta_bytes)}`), `the first row does not show +${formatBytes(top.delta_bytes)}: ${text}`);
    // Expanding shows the whole stack, innermost first.
    await first.locator("summary").click();
    const frames = first.locator(".frames li");
    await frames.first().waitFor();
    assertEqual(await frames.count(), top.frames.length, "frames in the expanded stack");
    assertEqual((await frames.first().textContent()).trim(), top.frames[top.frames.length - 1], "the innermost frame first");
    await clean(page);
  });

  await step("stacks reached through another outer caller are aligned, said so, and can be turned off", async () => {
    // infer_nograd and infer_grad run the same model under w_infer_nograd and w_infer_grad.
    const device = state.compare.body.diff.devices[0];
    assert(device.alignment, "the answer has no alignment");
    const note = await page.locator(".cmp-aligned").first().textContent();
    assert(note.includes("w_infer_nograd") && note.includes("w_infer_grad") && note.includes("paired"), `the page does not say what was aligned: ${note}`);
    assertEqual(await page.locator("#align-stacks").inputValue(), "auto", "the align control");
    // One trunk: the paired callers hold (nearly) everything, not a red half beside a blue half.
    const rects = await page.evaluate(() => window.snapviewTest.flameRects());
    const paired = rects.find((r) => r.name.includes(" ⇄ "));
    const full = rects[0].w;
    assert(paired && paired.w > full * 0.95, `no full-width node for the paired callers: ${JSON.stringify(paired)} of ${full}`);
    const box = await page.locator("canvas.flame-canvas").first().boundingBox();
    await page.evaluate((y) => {
      const canvas = document.querySelector("canvas.flame-canvas");
      window.scrollTo(0, window.scrollY + canvas.getBoundingClientRect().top + y - 200);
    }, paired.y);
    const moved = await page.locator("canvas.flame-canvas").first().boundingBox();
    await page.mouse.move(moved.x + paired.x + paired.w / 2, moved.y + paired.y + paired.h / 2);
    const tip = await page.locator(".tip").textContent();
    assert(
      tip.includes("Outer callers, aligned") && /before: .*w_infer_nograd/.test(tip) && /after: .*w_infer_grad/.test(tip),
      `the paired frame's tooltip: ${tip}`,
    );
    await shot(page, "compare-aligned", { fullPage: false, clip: { x: 0, y: Math.max(0, moved.y - 160), width: 1280, height: 520 } });
    // The same allocation is never listed as grown and as shrunk.
    const rows = await page.locator(".cmp-stack summary").allTextContents();
    assertEqual(rows.filter((t) => t.includes("linear.py:134 forward")).length, 0, "rows of the unchanged lm_head output");
    assert(box, "no flame canvas");
    // Off: frame for frame again, the split shows (which is why aligning is the default).
    await Promise.all([page.waitForURL(/align=off/), page.locator("#align-stacks").selectOption("off")]);
    await compareReady(page);
    assertEqual(await page.locator(".cmp-aligned").count(), 0, "an alignment note with alignment off");
    const offRows = await page.locator(".cmp-stack summary").allTextContents();
    assertEqual(offRows.filter((t) => t.includes("linear.py:134 forward")).length, 2, "the lm_head output, both ways, frame for frame");
    // Dropping outer frames by hand says so too.
    await Promise.all([page.waitForURL(/align=4/), page.locator("#align-stacks").selectOption("4")]);
    await compareReady(page);
    assert((await page.locator(".cmp-aligned").first().textContent()).includes("4 outermost frames"), "the drop note");
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.nograd}/${state.grad}`), page.locator("#align-stacks").selectOption("auto")]);
    await compareReady(page);
    await clean(page);
  });

  await step("the memory curves are drawn, and hovering reads both", async () => {
    const pixels = await canvasPixels(page, "canvas.curves-canvas");
    assert(pixels.drawn > 2000, `the curves canvas is blank: ${JSON.stringify(pixels)}`);
    assert(pixels.width >= Math.round(pixels.cssWidth), "the curves canvas is not backed by device pixels");
    await page.locator("canvas.curves-canvas").first().scrollIntoViewIfNeeded();
    const box = await page.locator("canvas.curves-canvas").first().boundingBox();
    await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
    await until(async () => (await page.locator(".curve-readout").first().textContent()).includes("through each trace"), "the curve readout");
    await clean(page);
  });

  await step("torch's compare lists the segments only before and only after", async () => {
    // torch's own text, which the page's lists (drawn from the JSON) must agree with.
    const torchText = await api(`/api/compare/${state.nograd}/${state.grad}/torch.txt`);
    assertEqual(torchText.status, 200, "GET torch.txt status");
    const text = torchText.text;
    const count = (key) => {
      const m = new RegExp(`^${key} = \\[(.*)\\]$`, "m").exec(text);
      return m[1].trim() ? m[1].split(",").length : 0;
    };
    const section = page.locator("#torch-compare");
    await section.waitFor({ state: "visible" });
    for (const key of ["only_before", "only_after"]) {
      assertEqual((await section.locator(`[data-count=${key}]`).textContent()).trim(), count(key).toLocaleString("en-US"), `${key} count`);
      assert((await section.locator(`[data-only=${key}]`).textContent()).includes(key), `no ${key} label`);
    }
    assert((await section.locator(".seg-list li").count()) === count("only_before") + count("only_after"), "the segment lists are not complete");
    for (const key of ["only_before", "only_after"]) {
      const first = new RegExp(`^${key} = \\[(\\d+)`, "m").exec(text);
      if (!first) continue;
      const shown = (await section.locator(`[data-only=${key}] .seg-list li code`).first().textContent()).trim();
      assertEqual(shown, `0x${BigInt(first[1]).toString(16)}`, `the first segment ${key}, in torch's order`);
    }
    await section.locator("details.folded summary").click();
    await until(async () => (await page.locator("#torch-text").textContent()).includes("only_before;"), "the folded lines");
    assertEqual(await page.locator("#torch-download").getAttribute("href"), `/api/compare/${state.nograd}/${state.grad}/torch.txt`, "the download link");
    assertEqual(await page.locator("#torch-text").textContent(), text, "the folded lines shown");
    await clean(page);
  });

  await step("ignore line numbers and swap keep everything in the URL", async () => {
    await Promise.all([page.waitForURL(/ignore_lines=1/), page.locator("#ignore-lines").check()]);
    await compareReady(page);
    assert(await page.locator("#ignore-lines").isChecked(), "the box is not checked after the reload");
    assert((await page.locator(".cmp-stack").first().textContent()).includes("modeling_gpt2.py forward"), "the stacks are not shown without line numbers");
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.grad}/${state.nograd}?ignore_lines=1`), page.locator("#swap").click()]);
    await compareReady(page);
    const percent = (await page.locator("[data-total=peak_allocated_bytes] [data-percent]").first().textContent()).trim();
    assert(percent.startsWith("−"), `after swapping, the peak should shrink: ${percent}`);
    const pixels = await canvasPixels(page, "canvas.flame-canvas");
    assert(pixels.blue > 500, `no blue after swapping: ${JSON.stringify(pixels)}`);
    // The keyboard: 's' swaps back.
    await page.locator(".eyebrow").click();
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.nograd}/${state.grad}?ignore_lines=1`), page.keyboard.press("s")]);
    await compareReady(page);
    await page.keyboard.press("?");
    await page.locator("dialog.keys").waitFor({ state: "visible" });
    assert((await page.locator("dialog.keys").textContent()).includes("Swap"), "the help does not list Swap");
    await page.keyboard.press("Escape");
    await clean(page);
  });

  await step("the flame graph works from the keyboard", async () => {
    await page.goto(`${BASE}/compare/${state.nograd}/${state.grad}`);
    await compareReady(page);
    await page.locator("canvas.flame-canvas").first().focus();
    await page.keyboard.press("ArrowDown");
    await page.locator(".tip").waitFor({ state: "visible" });
    assert((await page.locator(".tip").textContent()).includes("before"), "no tooltip for the focused frame");
    await page.keyboard.press("Enter");
    await page.locator(".cmp-breadcrumb").first().waitFor({ state: "visible" });
    // The same model as the snapshot page's graph: the breadcrumb ends at the zoomed frame, and
    // Backspace goes out one level.
    const zoomed = await page.evaluate(() => window.snapviewTest.flameRects().find((r) => !r.ancestor)?.name);
    assertEqual(await page.locator(".cmp-breadcrumb .crumb.current").first().getAttribute("title"), zoomed, "the current crumb");
    await page.keyboard.press("ArrowDown");
    await page.locator(".tip").waitFor({ state: "visible" });
    const box = await page.locator("canvas.flame-canvas").first().boundingBox();
    await shot(page, "compare-flame-keyboard", { fullPage: false, clip: { x: 0, y: Math.max(0, box.y - 120), width: 1280, height: 600 } });
    await page.keyboard.press("Enter");
    await until(async () => (await page.locator(".cmp-breadcrumb .crumb").count()) === 3, "a second zoom from the keyboard");
    await page.keyboard.press("Backspace");
    await until(async () => (await page.locator(".cmp-breadcrumb .crumb.current").first().getAttribute("title")) === zoomed, "Backspace out one level");
    await page.keyboard.press("Escape");
    await page.locator(".cmp-breadcrumb").first().waitFor({ state: "hidden" });
    await clean(page);
  });

  await step("moments other than the peaks: a click on a curve, the keyboard's form, swap and back", async () => {
    await page.goto(`${BASE}/compare/${state.nograd}/${state.grad}`);
    await compareReady(page);
    // Click the after curve a quarter of the way through its trace.
    const canvas = page.locator("canvas.curves-canvas").first();
    await canvas.scrollIntoViewIfNeeded();
    const box = await canvas.boundingBox();
    const point = await page.evaluate(() => window.snapviewTest.curvePoint(1, 0.25));
    assert(point, "no point on the after curve");
    await page.mouse.move(box.x + point.x, box.y + point.y);
    const hint = await page.locator(".curve-readout").first().textContent();
    assert(hint.includes(`click: compare ${state.compare.body.after.name} at event`), `hovering the curve does not say what a click does: ${hint}`);
    await Promise.all([page.waitForURL(/[?&]at_b=\d+/), page.mouse.click(box.x + point.x, box.y + point.y)]);
    await compareReady(page);
    const atB = Number(new URL(page.url()).searchParams.get("at_b"));
    const events = state.compare.body.diff.devices[0].after.events;
    assert(atB > events * 0.2 && atB < events * 0.3, `a click at 25% chose event ${atB} of ${events}`);
    assert(!new URL(page.url()).searchParams.has("at_a"), "the before side's moment changed too");
    const answer = await api(`/api/compare/${state.nograd}/${state.grad}?at_b=${atB}`);
    assertEqual(answer.body.diff.devices[0].after.at, atB, "the compared moment");
    const heading = await page.locator(".cmp-card:has(.flame-box) h3").first().textContent();
    assert(heading.includes("chosen moments"), `the flame graph's heading: ${heading}`);
    const help = await page.locator(".cmp-card:has(.flame-box) .section-help").first().textContent();
    assert(help.includes(`event ${atB.toLocaleString("en-US")}`), `the flame graph does not say which moment: ${help}`);
    assertEqual(Number(await page.locator(".moment-input").nth(1).inputValue()), atB, "the after side's field");
    const card = page.locator(".curves-box").first().locator("xpath=..");
    await card.scrollIntoViewIfNeeded();
    const cardBox = await card.boundingBox();
    const newBox = await canvas.boundingBox();
    await page.mouse.move(newBox.x + newBox.width * 0.6, newBox.y + newBox.height * 0.5);
    await shot(page, "compare-moments", { fullPage: false, clip: { x: 0, y: Math.max(0, cardBox.y - 8), width: 1280, height: cardBox.height + 16 } });
    // The keyboard: m focuses the before side's field; Enter compares there.
    await page.locator(".eyebrow").click();
    await page.keyboard.press("m");
    assert(
      await page
        .locator(".moment-input")
        .first()
        .evaluate((input) => input === document.activeElement),
      "m does not focus the moment field",
    );
    await page.keyboard.press("Control+A");
    await page.keyboard.type("100");
    await Promise.all([page.waitForURL(new RegExp(`at_a=100&at_b=${atB}$`)), page.keyboard.press("Enter")]);
    await compareReady(page);
    // Swapping swaps the moments with the sides.
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.grad}/${state.nograd}?at_a=${atB}&at_b=100`), page.locator("#swap").click()]);
    await compareReady(page);
    // p: both at their peaks again.
    await page.locator(".eyebrow").click();
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.grad}/${state.nograd}`), page.keyboard.press("p")]);
    await compareReady(page);
    assert((await page.locator(".cmp-card:has(.flame-box) h3").first().textContent()).includes("at the peak"), "not back at the peaks");
    await clean(page);
  });

  await step("/compare/{a} picks the other snapshot", async () => {
    await page.goto(`${BASE}/compare/${state.nograd}`);
    const link = page.locator(`a[data-other="${state.grad}"]`);
    assertEqual(await link.getAttribute("href"), `/compare/${state.nograd}/${state.grad}`, "the link as before");
    assertEqual(await page.locator(`a[data-other="${state.nograd}"]`).count(), 0, "the snapshot is offered to compare with itself");
    await page.locator("[data-role=after]").click();
    assertEqual(await link.getAttribute("href"), `/compare/${state.grad}/${state.nograd}`, "the link as after");
    await shot(page, "compare-picker");
    await page.locator("[data-role=before]").click();
    await Promise.all([page.waitForURL(`${BASE}/compare/${state.nograd}/${state.grad}`), link.click()]);
    await clean(page);
  });

  await step("bad and unknown ids get the error pages", async () => {
    let response = await page.goto(`${BASE}/compare/not-an-id/${state.grad}`);
    assertEqual(response.status(), 400, "status for a bad id");
    assertEqual((await page.locator("h1").textContent()).trim(), "That link is not right", "heading");
    response = await page.goto(`${BASE}/compare/0123456789abcdef/${state.grad}`);
    assertEqual(response.status(), 404, "status for an unknown id");
    assertEqual((await page.locator("h1").textContent()).trim(), "Snapshot not found", "heading");
    response = await page.goto(`${BASE}/g/no-such-group-here`);
    assertEqual(response.status(), 404, "status for an unknown group");
    await shot(page, "group-404");
    await clean(page);
  });

  await step("the group page lists both ranks with their peak; the list's badge links to it", async () => {
    await page.goto(`${BASE}/`);
    const badge = page.locator(`tr[data-id="${state.rank0}"] a.badge-group`);
    assertEqual(await badge.getAttribute("href"), "/g/ddp", "the group badge's link");
    await Promise.all([page.waitForURL(`${BASE}/g/ddp`), badge.click()]);
    const group = await api("/api/groups/ddp");
    const rows = page.locator("#group-table tbody tr");
    assertEqual(await rows.count(), group.body.members.length, "rows");
    for (const id of [state.rank0, state.rank1]) {
      const row = page.locator(`#group-table tr[data-id="${id}"]`);
      assertEqual((await row.locator("[data-peak-text]").textContent()).trim(), "3.43 GiB", `peak of ${id}`);
      assertEqual(await row.getAttribute("data-peak"), "3680751624", `peak bytes of ${id}`);
      assertEqual(await row.locator("a.name").getAttribute("href"), `/s/${id}`, "the member's link");
      // The top stack is one with Python frames; what has none is said beneath it.
      const top = (await row.locator(".top-stack").textContent()).trim();
      assert(top !== "<non-python>" && /\.py:\d+ /.test(top), `the top stack of ${id}: ${top}`);
      const member = group.body.members.find((m) => m.id === id);
      const none = (await row.locator("[data-non-python]").textContent()).trim();
      assertEqual(none, `${formatBytes(member.non_python_bytes)} with no Python frame`, `what has no Python frame on ${id}`);
      assert((await row.locator(".top-stack").getAttribute("title")).includes(formatBytes(member.top_stack_bytes)), "the top stack's bytes in its tooltip");
    }
    assertEqual((await page.locator("[data-median-text]").textContent()).trim(), formatBytes(group.body.median_peak_bytes), "median");
    await shot(page, "group-light");
    // Select two → compare.
    await rows.nth(0).locator("input.select-row").check();
    await rows.nth(1).locator("input.select-row").check();
    const compare = page.locator("#compare-selected");
    await until(async () => (await compare.getAttribute("href"))?.startsWith("/compare/"), "the compare link");
    await Promise.all([page.waitForURL(/\/compare\/[0-9a-f]{16}\/[0-9a-f]{16}$/), compare.click()]);
    await compareReady(page);
    await clean(page);
  });

  await step("an outlier is highlighted with a compare link to the median-closest member", async () => {
    // A third member far from the others makes an outlier.
    state.odd = await upload("mlp_small.pickle", "mlp small (odd one out)", "ddp");
    await page.goto(`${BASE}/g/ddp`);
    const outlier = page.locator(`#group-table tr.outlier[data-id="${state.odd}"]`);
    await outlier.waitFor();
    const link = outlier.locator("a.quick-compare");
    const href = await link.getAttribute("href");
    assert(href.endsWith(`/${state.odd}`) && (href.includes(state.rank0) || href.includes(state.rank1)), `the outlier's compare link: ${href}`);
    await shot(page, "group-outlier");
    await api(`/api/snapshots/${state.odd}`, { method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ group: "" }) });
    await clean(page);
  });

  await step("the list's Group… button sets a group on the selected rows", async () => {
    await page.goto(`${BASE}/`);
    await page.locator(`tr[data-id="${state.nograd}"] input.select-row`).check();
    await page.locator(`tr[data-id="${state.grad}"] input.select-row`).check();
    await page.locator("#group-selected").click();
    const dialog = page.locator("#group-dialog");
    await dialog.waitFor({ state: "visible" });
    await page.locator("#group-name").fill("infer");
    await shot(page, "group-dialog", { fullPage: false });
    await Promise.all([page.waitForLoadState("load"), page.locator("#group-save").click()]);
    await until(async () => (await api(`/api/snapshots/${state.grad}`)).body.group === "infer", "the group to be saved");
    assertEqual((await api(`/api/snapshots/${state.nograd}`)).body.group, "infer", "group of the other");
    await page.locator(`tr[data-id="${state.grad}"] a.badge-group[href="/g/infer"]`).waitFor();
    await clean(page);
  });

  await step("dark mode", async () => {
    const dark = await newContext(browser, { viewport: { width: 1280, height: 900 }, colorScheme: "dark" }, expectedErrors);
    const darkPage = await dark.newPage();
    await darkPage.goto(`${BASE}/compare/${state.nograd}/${state.grad}`);
    await compareReady(darkPage);
    const background = await darkPage.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const [r, g, b] = background.match(/\d+/g).map(Number);
    assert(r + g + b < 120, `dark mode background is ${background}`);
    const pixels = await canvasPixels(darkPage, "canvas.flame-canvas");
    assert(pixels.red > 500, `no red in the dark flame graph: ${JSON.stringify(pixels)}`);
    await shot(darkPage, "compare-dark");
    await darkPage.goto(`${BASE}/g/ddp`);
    await shot(darkPage, "group-dark");
    await darkPage.goto(`${BASE}/compare/${state.nograd}`);
    await shot(darkPage, "compare-picker-dark");
    await clean(darkPage);
    await dark.close();
  });

  await step("a 390 px phone screen has no sideways scrolling", async () => {
    const phone = await newContext(browser, { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true }, expectedErrors);
    const phonePage = await phone.newPage();
    const wide = [];
    for (const [path, name] of [
      [`/compare/${state.nograd}/${state.grad}`, "compare-mobile"],
      ["/g/ddp", "group-mobile"],
      [`/compare/${state.nograd}`, "compare-picker-mobile"],
      ["/", "compare-list-mobile"],
    ]) {
      await phonePage.goto(`${BASE}${path}`);
      if (path.split("/").length === 4) {
        await compareReady(phonePage);
        const pixels = await canvasPixels(phonePage, "canvas.flame-canvas");
        assert(pixels.width >= pixels.cssWidth * 2 - 1, `the flame canvas is not drawn at devicePixelRatio 2: ${JSON.stringify(pixels)}`);
      }
      await shot(phonePage, name);
      const width = await phonePage.evaluate(() => document.documentElement.scrollWidth);
      if (width > 390) wide.push(`${path} is ${width} px wide`);
    }
    assert(wide.length === 0, `sideways scrolling on a 390 px screen: ${wide.join("; ")}`);
    await clean(phonePage);
    await phone.close();
  });

  await context.close();
});
