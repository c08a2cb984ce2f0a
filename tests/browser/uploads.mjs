// Browser test of the list page's uploads and inline rename (issue 20, item 7), and of the page
// an unknown address gets: several files dropped at once (one progress row each, all stored, a
// bounded number sent at a time), ranks of one job offered as a group, Esc cancelling an upload
// started from the file chooser, and renaming a snapshot from the list with mouse and keyboard.
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/uploads.mjs

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, FIXTURES, newContext, run, shot, step, until } from "./harness.mjs";

/** Refused uploads (text files) and the 404 page are console errors the script causes. */
function expectedErrors(text, url) {
  return /Failed to load resource: the server responded with a status of (400|404)/.test(text) && (url.includes("/api/snapshots") || url.includes("/nope"));
}

/** Drops `files` (`[{name, bytes}]`) on the drop zone at once, as a browser would. */
async function dropFiles(page, files) {
  const transfer = await page.evaluateHandle(
    (files) => {
      const dataTransfer = new DataTransfer();
      for (const { name, base64 } of files) {
        const binary = atob(base64);
        const array = new Uint8Array(binary.length);
        for (let i = 0; i < binary.length; i += 1) array[i] = binary.charCodeAt(i);
        dataTransfer.items.add(new File([array], name, { type: "application/octet-stream" }));
      }
      return dataTransfer;
    },
    files.map(({ name, bytes }) => ({ name, base64: Buffer.from(bytes).toString("base64") })),
  );
  await page.locator("#dropzone").dispatchEvent("drop", { dataTransfer: transfer });
  await transfer.dispose();
}

/** Slows uploads to `bytesPerSecond` (null: full speed). */
async function throttle(cdp, bytesPerSecond) {
  await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: bytesPerSecond ?? -1 });
}

/** Records the most upload rows ever in the "sending" state at once, in `window.__mostSending`. */
async function countSending(page) {
  await page.evaluate(() => {
    window.__mostSending = 0;
    new MutationObserver(() => {
      const sending = document.querySelectorAll('.upload-row[data-state="sending"]').length;
      window.__mostSending = Math.max(window.__mostSending, sending);
    }).observe(document.querySelector(".upload-rows"), { subtree: true, attributes: true, attributeFilter: ["data-state"], childList: true });
  });
}

const RANKS = [
  ["job-rank0.pickle", "mlp_small.pickle"],
  ["job-rank1.pickle", "empty_cache.pickle"],
  ["job-rank2.pickle", "streams.pickle"],
].map(([name, fixture]) => ({ name, bytes: readFileSync(join(FIXTURES, fixture)) }));

await run(100_000, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1600, height: 1000 } }, expectedErrors);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  const choosers = [];
  page.on("filechooser", (chooser) => choosers.push(chooser));
  const state = {};

  await step("three files dropped at once: three rows, three stored, at most 3 sent at a time", async () => {
    await page.goto(`${BASE}/`);
    await countSending(page);
    // Slow enough that the three are seen on the way together.
    await throttle(cdp, 60_000);
    await dropFiles(page, RANKS);
    await until(async () => (await page.locator(".upload-row").count()) === 3, "three upload rows");
    const names = await page.locator(".upload-row [data-upload-name]").allTextContents();
    assertEqual(names.join(","), RANKS.map((r) => r.name).join(","), "the rows' names");
    await until(
      async () =>
        (await page
          .locator(".upload-row .progress-bar")
          .first()
          .evaluate((bar) => parseFloat(bar.style.width) > 0)) === true,
      "the first bar to grow",
    );
    await shot(page, "uploads-three-in-flight", { fullPage: false });
    await throttle(cdp, null);
    await page.locator("[data-upload-summary]").waitFor({ state: "visible", timeout: 30_000 });
    assertEqual((await page.locator("[data-upload-summary]").textContent()).trim(), "3 of 3 added", "the summary");
    assertEqual(await page.evaluate(() => window.__mostSending), 3, "uploads on the way at once");
    const { body } = await api("/api/snapshots");
    const stored = body.snapshots.map((s) => s.filename);
    for (const { name } of RANKS) assert(stored.includes(name), `${name} is not stored: ${stored}`);
    assertEqual(await page.locator(".upload-row a.upload-open").count(), 3, "an Open link per row");
    await clean(page);
  });

  await step("ranks of one job are offered as a group, which opens the group page", async () => {
    const offer = page.locator("[data-group-offer]");
    assert(await offer.isVisible(), "no group offer for job-rank0..2");
    assert((await offer.textContent()).includes("look like the ranks of one job"), "the offer says why");
    assertEqual(await page.locator("#group-offer-name").inputValue(), "job", "the group name offered");
    assert(await page.locator("#group-offer-name").evaluate((input) => input === document.activeElement), "the offer has the focus");
    await shot(page, "uploads-group-offer", { fullPage: false });
    await page.locator("#group-offer-name").fill("job-h20");
    await page.locator("[data-group-offer-save]").click();
    await page.waitForURL(/\/g\/job-h20$/);
    const group = await api("/api/groups/job-h20");
    assertEqual(group.body.members.length, 3, "members of the group");
    await clean(page);
  });

  await step("files that are not ranks of one job get no offer", async () => {
    await page.goto(`${BASE}/`);
    await dropFiles(page, [
      { name: "oom.pickle", bytes: readFileSync(join(FIXTURES, "oom.pickle")) },
      { name: "cuda_graph.pickle", bytes: readFileSync(join(FIXTURES, "cuda_graph.pickle")) },
    ]);
    await page.locator("[data-upload-summary]").waitFor({ state: "visible" });
    assert(await page.locator("[data-group-offer]").isHidden(), "a group was offered for unrelated files");
    await clean(page);
  });

  await step("40 files dropped: the first 32 are taken, 3 at a time, the rest refused with a message", async () => {
    await page.goto(`${BASE}/`);
    await countSending(page);
    await throttle(cdp, 20_000);
    const many = Array.from({ length: 40 }, (_, i) => ({ name: `note${i}.txt`, bytes: Buffer.from(`not a snapshot ${i}\n`.repeat(200)) }));
    await dropFiles(page, many);
    await until(async () => (await page.locator(".upload-row").count()) === 32, "32 rows");
    assert((await page.locator(".drop-error").textContent()).includes("Only the first 32 of 40"), "the refusal of the rest is not said");
    await throttle(cdp, null);
    await page.locator("[data-upload-summary]").waitFor({ state: "visible", timeout: 30_000 });
    assertEqual((await page.locator("[data-upload-summary]").textContent()).trim(), "0 of 32 added · 32 not added (see each row)", "the summary");
    assert((await page.evaluate(() => window.__mostSending)) <= 3, `more than 3 uploads at once: ${await page.evaluate(() => window.__mostSending)}`);
    const failed = await page.locator('.upload-row[data-state="failed"] [data-upload-status]').first().textContent();
    assert(failed.includes("note0.txt"), `a refused row names its file: ${failed}`);
    await clean(page);
  });

  await step("Esc cancels an upload started from the file chooser", async () => {
    await page.goto(`${BASE}/`);
    await throttle(cdp, 50_000);
    choosers.length = 0;
    await page.locator("label[for=file-input]").click();
    await until(() => choosers.length > 0, "the file chooser");
    await choosers[0].setFiles(join(FIXTURES, "gpt2_adamw.pickle"));
    await until(async () => (await page.locator(".upload-row").first().getAttribute("data-state")) === "sending", "the upload to start");
    await page.keyboard.press("Escape");
    const error = page.locator(".drop-error");
    await error.waitFor({ state: "visible" });
    assert((await error.textContent()).includes("cancelled"), `Esc did not cancel: ${await error.textContent()}`);
    await throttle(cdp, null);
    const { body } = await api("/api/snapshots");
    assert(!body.snapshots.some((s) => s.filename === "gpt2_adamw.pickle"), "the cancelled file was stored");
    await clean(page);
  });

  await step("a snapshot is renamed from the list with the mouse, and the name persists", async () => {
    await page.goto(`${BASE}/`);
    const row = page.locator("#snapshot-table tbody tr", { has: page.locator("a.name", { hasText: /^job-rank1$/ }) });
    state.renamedId = await row.getAttribute("data-id");
    await row.locator("[data-rename]").click();
    const field = row.locator("input.rename-input");
    assert(await field.evaluate((input) => input === document.activeElement), "the field has the focus");
    assert((await field.getAttribute("aria-label")).includes("Enter saves"), "the field says how to save");
    await shot(page, "uploads-rename-inline", { fullPage: false });
    await field.fill("rank one, renamed");
    await field.press("Enter");
    await until(async () => (await api(`/api/snapshots/${state.renamedId}`)).body?.name === "rank one, renamed", "the new name stored");
    await page.reload();
    assertEqual((await page.locator(`tr[data-id="${state.renamedId}"] a.name`).textContent()).trim(), "rank one, renamed", "the name after a reload");
    await clean(page);
  });

  await step("F2 renames the focused row; Esc keeps the old name", async () => {
    const link = page.locator(`tr[data-id="${state.renamedId}"] a.name`);
    await link.focus();
    await page.keyboard.press("F2");
    const field = page.locator(`tr[data-id="${state.renamedId}"] input.rename-input`);
    await field.waitFor();
    await page.keyboard.type("thrown away");
    await page.keyboard.press("Escape");
    await field.waitFor({ state: "detached" });
    assertEqual((await link.textContent()).trim(), "rank one, renamed", "the name after Esc");
    assert(await link.evaluate((a) => a === document.activeElement), "the focus is back on the name");
    await page.keyboard.press("F2");
    await field.waitFor();
    await page.keyboard.press("Control+a");
    await page.keyboard.type("rank1 by keyboard");
    await page.keyboard.press("Enter");
    await until(async () => (await api(`/api/snapshots/${state.renamedId}`)).body?.name === "rank1 by keyboard", "the keyboard name stored");
    await clean(page);
  });

  await step("the list at 390 px and in dark mode", async () => {
    await page.setViewportSize({ width: 390, height: 900 });
    await page.goto(`${BASE}/`);
    const pencil = await page.locator(`tr[data-id="${state.renamedId}"] [data-rename]`).boundingBox();
    assert(pencil && pencil.x + pencil.width <= 390, `the rename button is off screen at 390 px: ${JSON.stringify(pencil)}`);
    await shot(page, "uploads-list-390");
    const dark = await newContext(browser, { viewport: { width: 1600, height: 1000 }, colorScheme: "dark" }, expectedErrors);
    const darkPage = await dark.newPage();
    await darkPage.goto(`${BASE}/`);
    await dropFiles(darkPage, RANKS);
    await darkPage.locator("[data-upload-summary]").waitFor({ state: "visible" });
    await shot(darkPage, "uploads-dark", { fullPage: false });
    await dark.close();
  });

  await step("an unknown address says page not found, 404, with a link home", async () => {
    const response = await page.goto(`${BASE}/nope`);
    assertEqual(response.status(), 404, "status of /nope");
    const heading = (await page.locator("h1").textContent()).trim();
    assertEqual(heading, "Page not found", "the heading");
    assert(!(await page.locator("body").textContent()).includes("Snapshot not found"), "it talks of a snapshot");
    assertEqual(await page.locator("a.button-primary").getAttribute("href"), "/", "the link home");
  });
});
