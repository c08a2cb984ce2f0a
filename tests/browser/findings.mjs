// Browser test of "why the memory is used": the overview's findings and bars of memory by role,
// and the compare page's change by role, in Debian's chromium through playwright-core.
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/roles.mjs
//
// Screenshots (light and dark) go to target/screenshots/roles-overview-*.png and roles-compare*.png.

import { join } from "node:path";
import { bytes } from "../../static/lib/units.js";
import { api, assert, assertEqual, BASE, clean, FIXTURES, newContext, run, shot, step, until, upload } from "./harness.mjs";

await run(90_000, async (browser) => {
  const light = await newContext(browser);
  const dark = await newContext(browser, { colorScheme: "dark" });
  const page = await light.newPage();
  const state = {};

  await step("infer_grad, infer_nograd and gpt2_adamw upload", async () => {
    state.grad = (await upload(join(FIXTURES, "infer_grad.pickle"), "infer_grad")).id;
    state.nograd = (await upload(join(FIXTURES, "infer_nograd.pickle"), "infer_nograd")).id;
    state.gpt2 = (await upload(join(FIXTURES, "gpt2_adamw.pickle"), "gpt2_adamw")).id;
    state.summary = (await api(`/api/snapshots/${state.grad}`)).body;
  });

  await step("infer_grad's overview opens with the no_grad finding, its bytes and its fix", async () => {
    await page.goto(`${BASE}/s/${state.grad}`);
    const card = page.locator('.finding[data-finding="activations_kept_without_backward"]');
    await until(() => card.count(), "the finding card");
    // The findings come before the device cards: the first thing read.
    const first = await page.locator("#overview > *").first().getAttribute("class");
    assertEqual(first, "findings", "first element of the overview");
    const finding = state.summary.analysis.devices[0].findings.find((f) => f.code === "activations_kept_without_backward");
    assert(finding, "the API has the finding too");
    const text = await card.innerText();
    assert(text.includes(bytes(finding.bytes)), `${bytes(finding.bytes)} in: ${text}`);
    const code = await card.locator(".finding-fix code").allInnerTexts();
    assert(code.includes("torch.no_grad()") && code.includes("torch.inference_mode()"), `the fix's APIs as code: ${code}`);
    assert(await card.evaluate((el) => el.classList.contains("finding-warning")), "a warning");
    await clean(page);
  });

  await step("the role bar at the peak adds up to the peak, each segment as wide as its bytes", async () => {
    const device = state.summary.analysis.devices[0];
    const row = page.locator('[data-role-bar="peak"]');
    const segments = await row.locator(".role-seg[data-role]").evaluateAll((els) =>
      els.map((el) => ({
        role: el.dataset.role,
        bytes: Number(el.dataset.bytes),
        width: el.getBoundingClientRect().width,
        color: getComputedStyle(el).backgroundColor,
        title: el.title,
      })),
    );
    const sum = segments.reduce((total, s) => total + s.bytes, 0);
    assertEqual(sum, device.peak_allocated_bytes, "role bytes at the peak");
    // What autograd saved and the logits the loop keeps (issue 19: their own role) hold the peak.
    const activation = segments.find((s) => s.role === "activation");
    const output = segments.find((s) => s.role === "output");
    assert(
      activation && output && activation.bytes + output.bytes > 0.9 * sum && activation.bytes > output.bytes,
      `activations, then the kept outputs, hold most of the peak: ${JSON.stringify(segments)}`,
    );
    const barWidth = await row.locator(".role-bar").evaluate((el) => el.clientWidth);
    const reserved = Math.max(device.peak_reserved_bytes, sum);
    assert(Math.abs(activation.width - (barWidth * activation.bytes) / reserved) < 2, `activation segment width ${activation.width} of ${barWidth}`);
    assert(activation.color !== "rgba(0, 0, 0, 0)", "coloured by role");
    assert(activation.title.includes("forward"), `the hover says what an activation is: ${activation.title}`);
    // Keyboard: the legend keys take focus and light their segment up.
    await row.locator('.role-key[data-role="activation"]').focus();
    assert(await row.locator('.role-seg[data-role="parameter"]').evaluate((el) => el.classList.contains("dim")), "others dim");
    await page.evaluate(() => document.activeElement?.blur());
    await shot(page, "roles-overview-infer_grad");
    await clean(page);
  });

  await step("a finding's link opens the timeline at its event", async () => {
    const event = state.summary.analysis.devices[0].findings[0].event;
    await page.locator(".finding a", { hasText: "Timeline" }).first().click();
    await until(async () => new URL(page.url()).searchParams.get("tab") === "timeline", "the timeline tab");
    assertEqual(new URL(page.url()).searchParams.get("at"), String(event), "the moment in the URL");
    await clean(page);
  });

  await step("gpt2_adamw, an ordinary training run, says calmly that nothing is wrong", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}`);
    await until(() => page.locator(".no-findings").count(), "the no-problems line");
    assertEqual(await page.locator(".finding").count(), 0, "no finding cards");
    const roles = await page.locator('[data-role-bar="peak"] .role-seg[data-role]').evaluateAll((els) => els.map((el) => el.dataset.role));
    for (const role of ["parameter", "optimizer_state", "activation"]) assert(roles.includes(role), `${role} in the bar: ${roles}`);
    await shot(page, "roles-overview-gpt2_adamw");
    await clean(page);
  });

  await step("compare infer_nograd → infer_grad names activations as the change", async () => {
    await page.goto(`${BASE}/compare/${state.nograd}/${state.grad}`);
    const rows = page.locator(".cmp-role");
    await until(() => rows.count(), "the by-role rows");
    const first = await rows.first().evaluate((el) => ({ role: el.dataset.role, delta: Number(el.dataset.delta) }));
    assertEqual(first.role, "activation", "the largest change");
    assert(first.delta > 10 * 2 ** 30, `activations grew by ${first.delta}`);
    const headline = await page.locator("[data-roles-headline]").first().innerText();
    assert(headline.startsWith("activation +"), `headline: ${headline}`);
    const parameter = await page.locator('.cmp-role[data-role="parameter"] .cr-delta').innerText();
    assertEqual(parameter, "±0 B", "parameters unchanged");
    await shot(page, "roles-compare");
    await clean(page);
  });

  await step("rows of 'who holds the memory' with the same innermost frame say where they part (via)", async () => {
    await page.goto(`${BASE}/s/${state.grad}`);
    const rows = await page.locator("#overview .stack summary").evaluateAll((els) =>
      els.map((el) => ({
        top: el.querySelector(".stack-top").firstChild.textContent.trim(),
        via: el.querySelector("[data-via]")?.textContent.trim() ?? null,
        title: el.title,
      })),
    );
    const byTop = new Map();
    for (const row of rows) byTop.set(row.top, [...(byTop.get(row.top) ?? []), row]);
    const shared = [...byTop.values()].filter((group) => group.length > 1);
    assert(shared.length > 0, `no two rows share an innermost frame here: ${rows.map((r) => r.top)}`);
    for (const group of shared) {
      for (const row of group) {
        assert(row.via?.startsWith("via "), `a row named ${row.top} like others, without a via: ${JSON.stringify(row)}`);
        assert(row.title.includes(row.via.slice(4)), `the row's tooltip does not say the via: ${row.title}`);
      }
      const vias = new Set(group.map((row) => row.via));
      assertEqual(vias.size, group.length, `distinct vias for ${group[0].top}`);
    }
    // A row alone with its innermost frame needs no via.
    for (const group of byTop.values()) if (group.length === 1) assertEqual(group[0].via, null, `via on the lone ${group[0].top}`);
    await page.locator("#overview .stacks").first().scrollIntoViewIfNeeded();
    await shot(page, "overview-stacks-via", { fullPage: false });
    await clean(page);
  });

  await step("health cards agree with the findings: a healthy run's free-in-segments card is calm and says what it measures", async () => {
    for (const id of [state.gpt2, state.nograd]) {
      await page.goto(`${BASE}/s/${id}`);
      const card = page.locator('[data-stat="free"]').first();
      await card.waitFor();
      // gpt2_adamw has no finding at all; infer_nograd none about fragmentation.
      assertEqual(await page.locator('.finding[data-finding="fragmentation"]').count(), 0, "no fragmentation finding on this run");
      if (id === state.gpt2) assertEqual(await page.locator('[data-findings="none"]').count(), 1, "gpt2_adamw's 'No problems found'");
      assertEqual(await card.getAttribute("data-health"), "ok", "the card's rating");
      const verdict = (await card.locator("[data-free-verdict]").textContent()).trim();
      assert(["too little to matter", "smaller requests reuse it; no finding", "nothing cached"].includes(verdict), `verdict: ${verdict}`);
      const text = await card.innerText();
      assert(!/fragmentation \d+%/.test(text), `a bare fragmentation percentage on a healthy run: ${text}`);
      assert(/elsewhere \(\d+%\)/.test(text), `the free bytes outside the largest block, in bytes: ${text}`);
      const title = await card.getAttribute("title");
      assert(
        title.includes("Largest block") && title.includes("fragmentation") && title.includes("bytes at stake"),
        `the card does not say what it measures: ${title}`,
      );
      // Pixels: drawn like the other plain cards, not in the warning colours.
      const colours = await page.evaluate(() => {
        const free = document.querySelector('[data-stat="free"]');
        const plain = [...document.querySelectorAll(".stat")].find((el) => !el.dataset.stat);
        const style = (el) => getComputedStyle(el);
        return { free: [style(free).backgroundColor, style(free).borderTopColor], plain: [style(plain).backgroundColor, style(plain).borderTopColor] };
      });
      assertEqual(JSON.stringify(colours.free), JSON.stringify(colours.plain), "the free card's colours against a plain card");
    }
    await shot(page, "overview-health-infer_nograd", { fullPage: false });
    // And the other way: where the findings name fragmentation, the card says so too.
    const fragmented = (await upload(join(FIXTURES, "synthetic/fragmented_peak.pickle"), "fragmented_peak")).id;
    await page.goto(`${BASE}/s/${fragmented}`);
    await page.locator('.finding[data-finding="fragmentation"]').first().waitFor();
    const warned = page.locator('[data-stat="free"]').first();
    assertEqual(await warned.getAttribute("data-health"), "warn", "the card beside a fragmentation finding");
    assertEqual((await warned.locator("[data-free-verdict]").textContent()).trim(), "a finding above: fragmentation", "its verdict");
    await shot(page, "overview-health-fragmented", { fullPage: false });
    await clean(page);
  });

  await step("dark: the same pages, with the dark role palette", async () => {
    const darkPage = await dark.newPage();
    await darkPage.goto(`${BASE}/s/${state.grad}`);
    await until(() => darkPage.locator(".finding").count(), "the finding card");
    await shot(darkPage, "roles-overview-infer_grad-dark");
    await darkPage.goto(`${BASE}/s/${state.gpt2}`);
    await until(() => darkPage.locator(".no-findings").count(), "the no-problems line");
    await shot(darkPage, "roles-overview-gpt2_adamw-dark");
    await darkPage.goto(`${BASE}/compare/${state.nograd}/${state.grad}`);
    await until(() => darkPage.locator(".cmp-role").count(), "the by-role rows");
    await shot(darkPage, "roles-compare-dark");
    await clean(darkPage);
  });
});
