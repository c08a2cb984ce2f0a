// Browser test of snapview's pages, in Debian's chromium through playwright-core.
//
// Starts nothing itself: point it at a running server whose store may be empty,
//
//   SNAPVIEW_URL=http://127.0.0.1:7979 node tests/browser/server_pages.mjs
//
// (`cargo test --release --test browser` starts a server on a fresh data folder and runs this).
// Screenshots go to target/screenshots/ (or $SNAPVIEW_SCREENSHOTS). Prints "N passed, N failed"
// and exits non-zero when a check failed.

import { readFileSync } from "node:fs";
import { join } from "node:path";
// The page's own formatter; the first step checks it against src/format.rs's cases.
import { bytes as formatBytes } from "../../static/lib/units.js";
import { api, assert, assertEqual, BASE, clean, FIXTURES, newContext, run, shot, step, until } from "./harness.mjs";

const TOTAL_TIMEOUT_MS = 55_000;

/** Uploads through the API (not the page): for snapshots the test only needs to exist. */
async function uploadViaApi(file, name) {
  const bytes = readFileSync(join(FIXTURES, file));
  const query = new URLSearchParams({ filename: file, ...(name ? { name } : {}) });
  const { status, body, text } = await api(`/api/snapshots?${query}`, { method: "POST", body: bytes });
  assert(status === 201 || status === 200, `upload of ${file} answered ${status}: ${text}`);
  return body;
}

/** The console errors this script causes on purpose: refused uploads, and the 404 page's status. */
function expectedErrors(text, url) {
  return (
    (/Failed to load resource: the server responded with a status of (400|404)/.test(text) &&
      (url.includes("/api/snapshots") || url.includes("/s/0123456789abcdef"))) ||
    // A deleted snapshot's page answers 410 Gone.
    (/Failed to load resource: the server responded with a status of 410/.test(text) && url.includes("/s/"))
  );
}

/** Drops `bytes` as a file called `name` on the drop zone, the way a browser would. */
async function dropFile(page, name, bytes, type = "application/octet-stream", shotWhileDragging = null) {
  const dataTransfer = await page.evaluateHandle(
    ({ base64, name, type }) => {
      const binary = atob(base64);
      const array = new Uint8Array(binary.length);
      for (let i = 0; i < binary.length; i += 1) array[i] = binary.charCodeAt(i);
      const transfer = new DataTransfer();
      transfer.items.add(new File([array], name, { type }));
      return transfer;
    },
    { base64: Buffer.from(bytes).toString("base64"), name, type },
  );
  const zone = page.locator("#dropzone");
  await zone.dispatchEvent("dragenter", { dataTransfer });
  await zone.dispatchEvent("dragover", { dataTransfer });
  assert(await zone.evaluate((el) => el.classList.contains("dragging")), "the drop zone does not highlight while a file is dragged over it");
  if (shotWhileDragging) await shot(page, shotWhileDragging, { fullPage: false });
  await zone.dispatchEvent("drop", { dataTransfer });
  await dataTransfer.dispose();
}

// ---------------------------------------------------------------------------------------------

const state = {};

await run(TOTAL_TIMEOUT_MS, async (browser) => {
  const context = await newContext(browser, { viewport: { width: 1280, height: 860 } }, expectedErrors);
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });
  const page = await context.newPage();
  // File choosers are caught from the start (waiting for one only when it is due can miss it).
  const choosers = [];
  page.on("filechooser", (chooser) => choosers.push(chooser));

  await step("bytes formatting matches src/format.rs", async () => {
    assertEqual(formatBytes(4150431752), "3.87 GiB", "bytes(4150431752)");
    assertEqual(formatBytes(8_127_203_336), "7.57 GiB", "bytes(8127203336)");
    assertEqual(formatBytes(286_650_809), "273 MiB", "bytes(286650809)");
    assertEqual(formatBytes(1023), "1023 B", "bytes(1023)");
  });

  await step("the list page opens, empty or not, without errors", async () => {
    const response = await page.goto(`${BASE}/`);
    assertEqual(response.status(), 200, "GET / status");
    assert((await response.headerValue("content-security-policy"))?.includes("script-src 'self'"), "GET / has no strict CSP");
    await page.locator("#dropzone").waitFor();
    const { body } = await api("/api/snapshots");
    state.emptyAtStart = body.snapshots.length === 0;
    if (state.emptyAtStart) {
      assert(await page.locator("#empty-list").isVisible(), "an empty store shows no empty-state text");
      await shot(page, "index-empty");
    }
    await clean(page);
  });

  await step("'?' opens the keyboard help on the list, and Esc closes it", async () => {
    await page.locator("body").click({ position: { x: 5, y: 600 } });
    await page.keyboard.press("?");
    const dialog = page.locator("dialog.keys");
    await dialog.waitFor({ state: "visible" });
    assert((await dialog.textContent()).includes("Upload"), "the help lists no upload key");
    if (state.emptyAtStart) await shot(page, "index-keys", { fullPage: false });
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "hidden" });
    // The ? button in the top bar opens it too.
    await page.locator("[data-show-keys]").click();
    await dialog.waitFor({ state: "visible" });
    await dialog.locator(".close-button").click();
    await dialog.waitFor({ state: "hidden" });
    await clean(page);
  });

  await step("dropping a text file shows the server's message and stays on /", async () => {
    const bytes = Buffer.from("hello, this is not a snapshot\n");
    const expected = await api("/api/snapshots?filename=notes.txt", { method: "POST", body: bytes });
    assertEqual(expected.status, 400, "server status for a text file");
    await dropFile(page, "notes.txt", bytes, "text/plain", "index-dragging");
    const error = page.locator(".drop-error");
    await error.waitFor({ state: "visible" });
    const text = await error.textContent();
    assert(
      text.includes(expected.body.error.message),
      `.drop-error says ${JSON.stringify(text)}, not the server's ${JSON.stringify(expected.body.error.message)}`,
    );
    assert(text.includes("notes.txt"), ".drop-error does not name the file");
    assertEqual(new URL(page.url()).pathname, "/", "path after a failed upload");
    assert(await page.locator(".drop-idle").isVisible(), "the drop zone is not ready for another file");
    await shot(page, "index-drop-error");
    await clean(page);
  });

  await step("dropping a truncated pickle shows the reader's message and stays on /", async () => {
    const bytes = readFileSync(join(FIXTURES, "mlp_small.pickle")).subarray(0, 5000);
    const expected = await api("/api/snapshots?filename=cut.pickle", { method: "POST", body: bytes });
    assertEqual(expected.status, 400, "server status for a truncated pickle");
    await dropFile(page, "cut.pickle", bytes);
    const error = page.locator(".drop-error");
    await until(async () => (await error.textContent()).includes("cut.pickle"), "the truncated file's error");
    const text = await error.textContent();
    assert(text.includes(expected.body.error.message), `.drop-error says ${JSON.stringify(text)}, not ${JSON.stringify(expected.body.error.message)}`);
    assert(/truncated|ends early/.test(text), "the message does not say the file is cut short");
    assertEqual(new URL(page.url()).pathname, "/", "path after a failed upload");
    await clean(page);
  });

  await step("dropping gpt2_adamw.pickle shows progress, then opens its page with the right peak", async () => {
    const file = "gpt2_adamw.pickle";
    const bytes = readFileSync(join(FIXTURES, file));
    // Record every status text and bar width the page shows, from before the drop, in
    // sessionStorage so the record survives the move to the snapshot's page.
    await page.evaluate(() => {
      const record = { texts: [], widths: [] };
      const save = () => sessionStorage.setItem("progress", JSON.stringify(record));
      const status = document.querySelector("[data-upload-status]");
      const bar = document.querySelector(".progress-bar");
      new MutationObserver(() => {
        record.texts.push(status.textContent);
        save();
      }).observe(status, { childList: true, characterData: true, subtree: true });
      new MutationObserver(() => {
        record.widths.push(bar.style.width);
        save();
      }).observe(bar, { attributes: true, attributeFilter: ["style"] });
      save();
    });
    // Slow the upload down (about 2 s) so the progress is visible and a screenshot can catch it.
    const cdp = await context.newCDPSession(page);
    await cdp.send("Network.enable");
    await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: bytes.length / 2 });
    const navigated = page.waitForURL(/\/s\/[0-9a-f]{16}$/, { timeout: 25_000 });
    await dropFile(page, file, bytes);
    const midway = await until(
      () =>
        page
          .evaluate(() => {
            const text = document.querySelector("[data-upload-status]")?.textContent ?? "";
            const width = parseFloat(document.querySelector(".progress-bar")?.style.width ?? "0");
            return /^Uploading .+ of .+ · \d+%$/.test(text) && width > 0 && width < 100;
          })
          .catch(() => false),
      "a progress update part way through",
      15_000,
    ).catch(() => false);
    if (midway) await shot(page, "index-uploading", { fullPage: false });
    await navigated;
    await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 }).catch(() => {});
    await cdp.detach().catch(() => {});

    const progress = JSON.parse(await page.evaluate(() => sessionStorage.getItem("progress")));
    const size = formatBytes(bytes.length);
    const uploading = progress.texts.filter((t) => new RegExp(`^Uploading \\d[\\d.]* \\S+ of ${size} · \\d+%$`).test(t));
    assert(uploading.length > 0, `no 'Uploading X of ${size} · N%' text among ${JSON.stringify(progress.texts)}`);
    const widths = [...new Set(progress.widths)];
    assert(widths.length >= 2, `the bar width never changed: ${JSON.stringify(progress.widths)}`);
    assert(
      widths.some((w) => parseFloat(w) > 0),
      `the bar never grew: ${JSON.stringify(widths)}`,
    );
    assert(
      progress.texts.some((t) => t.startsWith("Reading")),
      `never said it was reading the file: ${JSON.stringify(progress.texts)}`,
    );
    assert(midway, "no progress update was seen part way through a 2 s upload");

    state.gpt2 = new URL(page.url()).pathname.split("/").pop();
    const detail = await api(`/api/snapshots/${state.gpt2}`);
    assertEqual(detail.status, 200, "GET /api/snapshots/{id}");
    assertEqual(detail.body.filename, file, "stored filename");
    const expected = formatBytes(detail.body.analysis.devices[0].peak_allocated_bytes);
    assertEqual((await page.locator("[data-peak]").first().textContent()).trim(), expected, "[data-peak] text");
    assertEqual((await page.locator("#snapshot-name").textContent()).trim(), detail.body.name, "the page's title");
    await shot(page, "snapshot-gpt2");
    // Hovering a number explains it.
    const peakHelp = await page.locator("[data-stat=peak]").first().getAttribute("title");
    assert(/requested bytes/.test(peakHelp ?? ""), `the peak's tooltip does not explain it: ${peakHelp}`);
    // A stack opens with the keyboard and shows its frames.
    const summary = page.locator(".stack summary").first();
    await summary.focus();
    await page.keyboard.press("Enter");
    const frames = page.locator(".stack").first().locator(".frames");
    await frames.waitFor({ state: "visible" });
    assert((await frames.locator("li").count()) >= 1, "an opened stack shows no frames");
    await page.locator(".stack").nth(1).locator("summary").click();
    await page.locator(".stack").nth(1).locator(".frames").waitFor({ state: "visible" });
    await shot(page, "snapshot-gpt2-stacks-open");
    await clean(page);
  });

  await step("renaming by clicking the title is saved", async () => {
    assert(state.gpt2, "no uploaded snapshot");
    const title = page.locator("#snapshot-name");
    // (Against a server that already has it renamed, rename it to something else.)
    const current = (await title.textContent()).trim();
    state.newName = current === "GPT-2 small, AdamW" ? "GPT-2 small, AdamW (renamed again)" : "GPT-2 small, AdamW";
    await title.click();
    const input = title.locator("input");
    await input.waitFor();
    await input.fill(state.newName);
    await shot(page, "snapshot-renaming", { fullPage: false, clip: { x: 0, y: 0, width: 1280, height: 200 } });
    await input.press("Enter");
    await page.locator(".toast", { hasText: "Renamed" }).waitFor({ state: "visible" });
    assertEqual((await title.textContent()).trim(), state.newName, "title after Enter");
    await page.reload();
    assertEqual((await page.locator("#snapshot-name").textContent()).trim(), state.newName, "title after reload");
    assertEqual((await api(`/api/snapshots/${state.gpt2}`)).body.name, state.newName, "name from the API");
    assertEqual(await page.title(), `${state.newName} · snapview`, "document title");
    // Escape abandons an edit.
    await page.locator("#snapshot-name").click();
    await page.locator("#snapshot-name input").fill("not this");
    await page.locator("#snapshot-name input").press("Escape");
    assertEqual((await page.locator("#snapshot-name").textContent()).trim(), state.newName, "title after Escape");
    await clean(page);
  });

  await step("the copy-link button copies the link and says so", async () => {
    await page.locator("#copy-link").click();
    await page.locator(".toast", { hasText: "Link copied" }).waitFor({ state: "visible" });
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    assertEqual(copied, (await api(`/api/snapshots/${state.gpt2}`)).body.url, "clipboard text");
    assertEqual(copied, `${BASE}/s/${state.gpt2}`, "clipboard text");
    await clean(page);
  });

  await step("'?' opens the keyboard help on the snapshot page", async () => {
    await page.locator("h2").first().click();
    await page.keyboard.press("?");
    const dialog = page.locator("dialog.keys");
    await dialog.waitFor({ state: "visible" });
    assert((await dialog.textContent()).includes("Rename"), "the help does not list renaming");
    await shot(page, "snapshot-keys", { fullPage: false });
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "hidden" });
    await clean(page);
  });

  await step("going back, the list shows the snapshot under its new name", async () => {
    await page.goBack();
    await until(async () => new URL(page.url()).pathname === "/", "the list page");
    const link = page.locator(`table.snapshots a[href="/s/${state.gpt2}"]`);
    await link.waitFor();
    assertEqual((await link.textContent()).trim(), state.newName, "the list's name");
    assert(await page.locator(".drop-idle").isVisible(), "the drop zone still shows the finished upload");
    await clean(page);
  });

  await step("the filter box filters rows", async () => {
    state.oom = (await uploadViaApi("oom.pickle")).id;
    state.noHistory = (await uploadViaApi("no_history.pickle")).id;
    state.multi = (await uploadViaApi("multi_device.pickle", "two GPUs")).id;
    await page.goto(`${BASE}/`);
    const rows = page.locator("table.snapshots tbody tr");
    const total = await rows.count();
    assert(total >= 4, `the list has ${total} rows, expected at least 4`);
    await shot(page, "index-list");
    const search = page.locator("#search");
    await page.locator("body").click({ position: { x: 5, y: 5 } });
    await page.keyboard.press("/");
    assertEqual(await page.evaluate(() => document.activeElement?.id), "search", "focused element after '/'");
    await search.fill("oom");
    await until(async () => (await page.locator("table.snapshots tbody tr:visible").count()) === 1, "one row for 'oom'");
    assertEqual(await page.locator("table.snapshots tbody tr:visible a.name").getAttribute("href"), `/s/${state.oom}`, "the row left by 'oom'");
    await search.fill("two gpus");
    await until(async () => (await page.locator("table.snapshots tbody tr:visible").count()) === 1, "one row for 'two gpus'");
    await search.fill("no such snapshot anywhere");
    await until(async () => (await page.locator("table.snapshots tbody tr:visible").count()) === 0, "no rows");
    assert(await page.locator("#no-match").isVisible(), "no 'nothing matches' text");
    assertEqual((await page.locator(".count").textContent()).trim(), `0 of ${total}`, "the count while filtering");
    await search.press("Escape");
    await until(async () => (await page.locator("table.snapshots tbody tr:visible").count()) === total, "all rows after Escape");
    await clean(page);
  });

  await step("oom.pickle opens on the out-of-memory explainer", async () => {
    await page.goto(`${BASE}/s/${state.oom}`);
    await page.locator(".oom-panel").first().waitFor();
    assert((await page.locator(".oom-panel").first().textContent()).includes("Out of memory"), "the OOM panel says nothing about running out");
    await shot(page, "snapshot-oom");
    await clean(page);
  });

  await step("no_history.pickle shows a data-quality note", async () => {
    await page.goto(`${BASE}/s/${state.noHistory}`);
    await page.locator(".banner[role=note]").first().waitFor();
    await shot(page, "snapshot-no-history");
    await clean(page);
  });

  await step("multi_device.pickle shows two devices", async () => {
    await page.goto(`${BASE}/s/${state.multi}`);
    const detail = await api(`/api/snapshots/${state.multi}`);
    const devices = detail.body.analysis.devices;
    assertEqual(await page.locator("article.device").count(), devices.length, "device sections");
    assert(devices.length === 2, `multi_device has ${devices.length} devices`);
    for (let i = 0; i < devices.length; i += 1) {
      assertEqual((await page.locator("[data-peak]").nth(i).textContent()).trim(), formatBytes(devices[i].peak_allocated_bytes), `device ${i} peak`);
    }
    await shot(page, "snapshot-multi-device");
    await clean(page);
  });

  await step("an unknown id shows the 404 page", async () => {
    const response = await page.goto(`${BASE}/s/0123456789abcdef`);
    assertEqual(response.status(), 404, "status");
    assertEqual((await page.locator("h1").textContent()).trim(), "Snapshot not found", "heading");
    assert(await page.locator(".error-page a[href='/']").isVisible(), "no way back to the list");
    await shot(page, "error-404");
    await clean(page);
  });

  await step("deleting a row offers Undo, which brings it back; the keyboard does both", async () => {
    await page.goto(`${BASE}/`);
    const row = page.locator(`table.snapshots tbody tr[data-id="${state.noHistory}"]`);
    const count = async () => (await page.locator(".count").textContent()).trim();
    const before = await count();
    await row.locator("input.select-row").check();
    await page.locator("#delete-selected").click();
    await until(async () => await row.isHidden(), "the deleted row hidden");
    const bar = page.locator("#undo-bar");
    assert(await bar.isVisible(), "no Undo bar after a delete");
    assert((await bar.textContent()).includes("Deleted “no_history”"), `the Undo bar says ${await bar.textContent()}`);
    assertEqual(await page.evaluate(() => document.activeElement?.id), "undo-delete", "focus after a delete");
    assertEqual(Number(await count()), Number(before) - 1, "the count after a delete");
    assertEqual((await api(`/api/snapshots/${state.noHistory}`)).status, 410, "the API of a deleted snapshot");
    await shot(page, "index-undo", { fullPage: false });
    await page.keyboard.press("Enter");
    await until(async () => await row.isVisible(), "the row back after Undo");
    assert(await bar.isHidden(), "the Undo bar stays after Undo");
    assertEqual((await api(`/api/snapshots/${state.noHistory}`)).status, 200, "the API after Undo");
    assertEqual(await count(), before, "the count after Undo");
    // 'x' selects the focused row, 'd' deletes, 'z' undoes.
    await row.locator("a.name").focus();
    await page.keyboard.press("x");
    await page.keyboard.press("d");
    await until(async () => await row.isHidden(), "the row hidden after 'd'");
    const response = await page.goto(`${BASE}/s/${state.noHistory}`);
    assertEqual(response.status(), 410, "a deleted snapshot's page");
    assertEqual((await page.locator("h1").textContent()).trim(), "Snapshot deleted", "heading");
    assert((await page.locator(".error-page").textContent()).includes("restore"), "the page says it can be restored");
    await shot(page, "snapshot-deleted");
    const restored = await api(`/api/snapshots/${state.noHistory}/restore`, { method: "POST" });
    assertEqual(restored.status, 200, "restore through the API");
    await page.goto(`${BASE}/`);
    await row.locator("input.select-row").check();
    await page.keyboard.press("d");
    await until(async () => await row.isHidden(), "the row hidden again");
    await page.locator("body").click({ position: { x: 5, y: 5 } });
    await page.keyboard.press("z");
    await until(async () => await row.isVisible(), "the row back after 'z'");
    await clean(page);
  });

  await step("the keyboard alone can choose a file and upload it", async () => {
    await page.goto(`${BASE}/`);
    await page.locator("#dropzone").focus();
    choosers.length = 0;
    await page.keyboard.press("Enter");
    const chooser = await until(() => choosers.shift(), "a file chooser after Enter on the drop zone");
    await Promise.all([page.waitForURL(/\/s\/[0-9a-f]{16}$/, { timeout: 20_000 }), chooser.setFiles(join(FIXTURES, "mlp_small.pickle"))]);
    assertEqual((await page.locator("#snapshot-name").textContent()).trim(), "mlp_small", "the new snapshot's name");
    // 'u' on the list opens the chooser too.
    await page.goto(`${BASE}/`);
    choosers.length = 0;
    await page.keyboard.press("u");
    await until(() => choosers.shift(), "a file chooser after 'u'");
    await clean(page);
  });

  await step("dark mode", async () => {
    const dark = await newContext(browser, { viewport: { width: 1280, height: 860 }, colorScheme: "dark" }, expectedErrors);
    const darkPage = await dark.newPage();
    await darkPage.goto(`${BASE}/`);
    const background = await darkPage.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const [r, g, b] = background.match(/\d+/g).map(Number);
    assert(r + g + b < 120, `dark mode background is ${background}`);
    await shot(darkPage, "dark-index");
    await darkPage.goto(`${BASE}/s/${state.gpt2}`);
    await shot(darkPage, "dark-snapshot-gpt2");
    await darkPage.goto(`${BASE}/s/${state.oom}`);
    await shot(darkPage, "dark-snapshot-oom");
    await clean(darkPage);
    await dark.close();
  });

  await step("a 390 px phone screen has no sideways scrolling", async () => {
    const phone = await newContext(browser, { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true }, expectedErrors);
    const phonePage = await phone.newPage();
    const wide = [];
    for (const [path, name] of [
      ["/", "mobile-index"],
      [`/s/${state.gpt2}`, "mobile-snapshot-gpt2"],
      [`/s/${state.multi}`, "mobile-snapshot-multi-device"],
      ["/s/0123456789abcdef", "mobile-error-404"],
    ]) {
      await phonePage.goto(`${BASE}${path}`);
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
