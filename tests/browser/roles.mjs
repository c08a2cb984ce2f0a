// Browser test of roles in the views (issue 11): the timeline coloured by role, its legend and
// the strip of memory by role under it, the flame graph rooted by role; in Debian's chromium
// through playwright-core, against a running server:
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/roles.mjs
//
// (`cargo test --release --test browser` starts a server on a fresh data folder and runs this.)
// Screenshots: target/screenshots/roles-*.png, light and dark.

import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, drawn, FIXTURES, newContext, painted, run, shot, step, until, upload } from "./harness.mjs";

const TOTAL_TIMEOUT_MS = 160_000;
const ROLES = ["parameter", "gradient", "optimizer_state", "comm_buffer", "activation", "output", "kv_cache", "workspace", "temporary", "input", "unknown"];

const state = {};
const store = (page) => page.evaluate(() => window.snapviewTest?.store.get() ?? null);

/** The timeline's answer and the role strip's, when both are for the same window. */
const answers = (page) =>
  page.evaluate(() => {
    const view = window.snapviewTest?.views?.timeline;
    if (!view?.model || !view.roles || view.loading || view.rolesKey !== view.dataKey) return null;
    return {
      max: view.model.data.allocated_max,
      columns: view.model.data.column_start,
      total: view.roles.total,
      roleColumns: view.roles.cs,
      bandRoles: view.model.bands.map((b) => b.role),
      strip: view.roleLayout,
    };
  });

/** The role area's top equals the timeline's curve at a few columns spread over the window. */
async function checkAreaMatchesCurve(page, what) {
  await until(async () => (await answers(page)) !== null, `${what}: the timeline and the roles of one window`);
  const a = await answers(page);
  assertEqual(JSON.stringify(a.roleColumns), JSON.stringify(a.columns), `${what}: the same columns`);
  const n = a.max.length;
  assert(n > 10, `${what}: only ${n} columns`);
  for (const c of [0, Math.floor(n / 4), Math.floor(n / 2), Math.floor((3 * n) / 4), n - 1]) {
    assertEqual(a.total[c], a.max[c], `${what}: the role area's top at column ${c}`);
  }
  assert(a.strip !== null, `${what}: the strip was laid out`);
  return a;
}

await run(TOTAL_TIMEOUT_MS, async (browser) => {
  const context = await newContext(browser);
  const page = await context.newPage();

  await step("the fixture uploads", async () => {
    state.gpt2 = (await upload(join(FIXTURES, "gpt2_adamw.pickle"), "gpt2_adamw (roles)")).id;
    const detail = (await api(`/api/snapshots/${state.gpt2}`)).body;
    state.events = detail.analysis.devices[0].trace_entries;
  });

  await step("the Roles button colours the timeline by role, with a legend and the role strip", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=timeline`);
    await until(async () => (await page.evaluate(() => window.snapviewTest?.views?.timeline?.layout?.bands?.length ?? 0)) > 10, "bands drawn");
    assert(await page.locator("#timeline-roles").isHidden(), "the role strip is hidden until asked for");
    await page.locator('[data-color="role"]').click();
    assertEqual((await store(page)).color, "role", "the state's colour");
    await until(async () => page.url().includes("color=role"), "the URL keeps the colour");
    assertEqual(await page.locator('[data-color="role"]').getAttribute("aria-pressed"), "true", "the button is pressed");
    const legend = await page.locator("#timeline-legend li[data-role]").evaluateAll((items) => items.map((li) => li.dataset.role));
    assertEqual(JSON.stringify(legend), JSON.stringify(ROLES), "the legend lists the roles");
    await checkAreaMatchesCurve(page, "whole trace");
    await drawn(page, "#timeline-roles", 0.15);
    const a = await answers(page);
    assert(
      a.bandRoles.every((role) => ROLES.includes(role)),
      `every band has a role: ${[...new Set(a.bandRoles)]}`,
    );
    assert(new Set(a.bandRoles).size >= 3, `gpt2_adamw's bands have several roles: ${[...new Set(a.bandRoles)]}`);
    await painted(page);
    await shot(page, "roles-timeline-gpt2");
  });

  await step("hovering a band says its role and why", async () => {
    const band = await page.evaluate(() => {
      const view = window.snapviewTest.views.timeline;
      return view.layout.bands.find((b) => b.w > 8 && b.h > 6) ?? null;
    });
    assert(band, "a band big enough to hover");
    const box = await page.locator("#timeline-canvas").boundingBox();
    await page.mouse.move(box.x + band.x + band.w / 2, box.y + band.y + band.h / 2);
    await until(
      async () =>
        /role/.test(
          (await page
            .locator(".tip")
            .textContent()
            .catch(() => "")) ?? "",
        ),
      "the band's tooltip names its role",
    );
    const tip = await page.locator(".tip").textContent();
    assert(tip.includes(band.role), `the tooltip names ${band.role}: ${tip}`);
    await shot(page, "roles-timeline-gpt2-hover", { fullPage: false });
    // The strip's own hover: the column's bytes by role.
    const strip = await page.locator("#timeline-roles").boundingBox();
    await page.mouse.move(strip.x + strip.width / 2, strip.y + strip.height - 12);
    await until(
      async () =>
        /live/.test(
          (await page
            .locator(".tip")
            .textContent()
            .catch(() => "")) ?? "",
        ),
      "the strip's tooltip",
    );
    await page.mouse.move(0, 0);
  });

  await step("colour by role survives a reload, and o toggles it", async () => {
    await page.reload();
    await until(async () => (await store(page))?.color === "role", "the colour from the URL");
    assertEqual(await page.locator('[data-color="role"]').getAttribute("aria-pressed"), "true", "pressed after reload");
    await checkAreaMatchesCurve(page, "after reload");
    await page.locator("#timeline-canvas").click({ position: { x: 5, y: 5 } });
    await page.keyboard.press("o");
    await until(async () => (await store(page))?.color === "allocation", "o turns it off");
    assert(await page.locator("#timeline-roles").isHidden(), "the strip hides again");
    await until(async () => !page.url().includes("color="), "the default colour left out of the URL");
    await page.keyboard.press("o");
    await until(async () => (await store(page))?.color === "role", "o turns it on");
  });

  await step("zoomed in, the strip follows the window and still tops out on the curve", async () => {
    const start = Math.floor(state.events * 0.4);
    const end = Math.floor(state.events * 0.55);
    await page.evaluate(([start, end]) => window.snapviewTest.store.set({ start, end }), [start, end]);
    await until(async () => {
      const a = await answers(page);
      return a !== null && a.columns[0] === start;
    }, "the zoomed window's answers");
    await checkAreaMatchesCurve(page, "zoomed");
    await painted(page);
    await shot(page, "roles-timeline-gpt2-zoomed");
  });

  await step("the flame graph rooted by role has the roles as the root's children", async () => {
    await page.goto(`${BASE}/s/${state.gpt2}?tab=flame`);
    await drawn(page, "#flame-canvas", 0.05);
    await page.locator('[data-by="role"]').click();
    await until(async () => page.url().includes("by=role"), "the URL keeps the root");
    await until(async () => page.evaluate(() => window.snapviewTest.views.flame.key.includes("by=role")), "the flame graph by role loaded");
    const children = await page.evaluate(() => window.snapviewTest.views.flame.data.nodes.filter((n) => n.parent === 0).map((n) => n.name));
    assert(children.length >= 3, `several roles at the peak: ${children}`);
    for (const name of children) assert(ROLES.includes(name), `${name} is a role`);
    await painted(page);
    await shot(page, "roles-flame-gpt2");
    await page.reload();
    await until(async () => (await store(page))?.by === "role", "by=role after reload");
    await clean(page);
  });

  await step("the roles of issue 19 show like the others: overview, timeline, flame graph, compare", async () => {
    const grad = (await upload(join(FIXTURES, "setups/s_grad_keep_outputs_end.pickle"), "keeps outputs, grad on")).id;
    const nograd = (await upload(join(FIXTURES, "setups/s_nograd_keep_outputs_end.pickle"), "keeps outputs, no_grad")).id;
    await page.goto(`${BASE}/s/${grad}`);
    // The overview: the findings (the no_grad fix and the kept outputs, apart) and the bars by
    // role, where the new roles have their own colour and hover sentence.
    const findings = await page.locator("[data-finding]").evaluateAll((items) => items.map((li) => li.dataset.finding));
    assert(findings.includes("activations_kept_without_backward"), `the no_grad warning: ${findings}`);
    assert(findings.includes("outputs_kept_across_steps"), `the kept outputs, apart: ${findings}`);
    const keys = await page.locator(".role-key[data-role]").evaluateAll((items) => items.map((el) => el.dataset.role));
    for (const role of ["output", "workspace", "activation"]) assert(keys.includes(role), `the overview's key lists ${role}: ${keys}`);
    // The key is drawn for the peak and for the dump: one colour per role across both.
    const swatches = await page
      .locator(".role-key[data-role] .role-swatch")
      .evaluateAll((items) => items.map((el) => [el.closest("[data-role]").dataset.role, getComputedStyle(el).backgroundColor]));
    const colorOf = new Map(swatches);
    assertEqual(new Set(colorOf.values()).size, colorOf.size, "one colour per role in the key");
    for (const [role, color] of swatches) assertEqual(color, colorOf.get(role), `${role} has one colour`);
    const title = await page.locator('.role-key[data-role="output"]').first().getAttribute("title");
    assert(/program keeps/.test(title ?? ""), `the output key's hover says what it is: ${title}`);
    await painted(page);
    await shot(page, "roles-overview-keep-outputs");
    // The timeline by role: bands of the new roles, and the legend of one palette.
    await page.goto(`${BASE}/s/${grad}?tab=timeline&color=role`);
    await until(async () => (await answers(page)) !== null, "the timeline and roles of the set-up");
    const a = await answers(page);
    for (const role of ["output", "workspace"]) assert(a.bandRoles.includes(role), `a band of ${role}: ${[...new Set(a.bandRoles)]}`);
    await drawn(page, "#timeline-roles", 0.1);
    await painted(page);
    await shot(page, "roles-timeline-keep-outputs");
    // The flame graph by role.
    await page.goto(`${BASE}/s/${grad}?tab=flame&by=role`);
    await drawn(page, "#flame-canvas", 0.05);
    await until(async () => page.evaluate(() => window.snapviewTest.views.flame.data?.nodes?.length > 1), "the flame graph by role");
    const children = await page.evaluate(() => window.snapviewTest.views.flame.data.nodes.filter((n) => n.parent === 0).map((n) => n.name));
    for (const role of ["output", "workspace"]) assert(children.includes(role), `${role} under the root: ${children}`);
    await painted(page);
    await shot(page, "roles-flame-keep-outputs");
    // The compare page: activation is the change; output the same on both sides.
    await page.goto(`${BASE}/compare/${nograd}/${grad}`);
    await page.locator("#compare[data-ready=true]").waitFor({ timeout: 20_000 });
    const compared = await page.locator("[data-role]").evaluateAll((items) => [...new Set(items.map((el) => el.dataset.role))]);
    for (const role of ["activation", "output"]) assert(compared.includes(role), `the compare lists ${role}: ${compared}`);
    await painted(page);
    await shot(page, "roles-compare-keep-outputs");
  });

  await step("dark mode: the timeline by role and the flame graph by role", async () => {
    const dark = await newContext(browser, { colorScheme: "dark" });
    const p = await dark.newPage();
    await p.goto(`${BASE}/s/${state.gpt2}?tab=timeline&color=role`);
    await until(async () => (await answers(p)) !== null, "dark timeline and roles");
    await drawn(p, "#timeline-roles", 0.15);
    await painted(p);
    await shot(p, "roles-timeline-gpt2-dark");
    await p.goto(`${BASE}/s/${state.gpt2}?tab=flame&by=role`);
    await drawn(p, "#flame-canvas", 0.05);
    await until(() => p.evaluate(() => window.snapviewTest.views.flame.key?.includes("by=role")), "the dark flame graph by role");
    await painted(p);
    await shot(p, "roles-flame-gpt2-dark");
    await clean(p);
    await dark.close();
  });
});
