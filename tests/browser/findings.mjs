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
