// Browser test of a server with tokens (started with SNAPVIEW_WRITE_TOKEN and
// SNAPVIEW_READ_TOKEN): the login form and its cookie, the drop zone asking for the write token
// on 401 and retrying, rename with the tab's token, and a cross-site write refused.
//
//   SNAPVIEW_WRITE_TOKEN=… SNAPVIEW_READ_TOKEN=… snapview serve --addr 127.0.0.1:7979 &
//   SNAPVIEW_URL=http://127.0.0.1:7979 SNAPVIEW_TEST_WRITE_TOKEN=… SNAPVIEW_TEST_READ_TOKEN=… node tests/browser/access.mjs

import { createServer } from "node:http";
import { join } from "node:path";
import { api, assert, assertEqual, BASE, clean, FIXTURES, newContext, run, shot, step, until } from "./harness.mjs";

const WRITE = process.env.SNAPVIEW_TEST_WRITE_TOKEN ?? "";
const READ = process.env.SNAPVIEW_TEST_READ_TOKEN ?? "";
if (!WRITE || !READ) {
  console.error("Set SNAPVIEW_TEST_WRITE_TOKEN and SNAPVIEW_TEST_READ_TOKEN to the server's tokens");
  process.exit(2);
}
const asReader = { headers: { Authorization: `Bearer ${READ}` } };

await run(60_000, async (browser) => {
  // The 401s and 403s below are on purpose; Chromium logs each failed load as a console error.
  const context = await newContext(browser, {}, (text) => /status of (401|403)/.test(text));
  const page = await context.newPage();
  const state = {};

  await step("a page asks for the read token once, then opens with a cookie that is not the token", async () => {
    const answer = await api("/api/snapshots");
    assertEqual(answer.status, 401, "API read without a token");
    await page.goto(`${BASE}/?from=test`);
    assert(new URL(page.url()).pathname === "/login", `sent to the login form, at ${page.url()}`);
    await page.fill("#login-token", "not-the-token-at-all");
    await page.click("form.login-form button[type=submit]");
    await until(() => page.locator(".login-form [role=alert]").count(), "the refusal");
    assert((await page.locator(".login-form [role=alert]").innerText()).includes("not valid"), "says the token is not valid");
    await shot(page, "access-login-refused");
    await page.fill("#login-token", READ);
    await page.click("form.login-form button[type=submit]");
    await until(async () => new URL(page.url()).pathname === "/", "the list after login");
    assertEqual(new URL(page.url()).search, "?from=test", "back to the page asked for");
    // The drop zone is in the HTML before the page's module has wired it: a file chosen before
    // the load would meet no listener (a busy CI machine hit that).
    await page.waitForLoadState("load");
    await page.locator("#dropzone").waitFor();
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === "snapview_session");
    assert(session, "a session cookie");
    assert(session.httpOnly && session.sameSite === "Strict", `HttpOnly, SameSite=Strict: ${JSON.stringify(session)}`);
    assert(!session.value.includes(READ), "the cookie is not the token");
    assertEqual(await page.evaluate(() => document.cookie), "", "scripts cannot read the cookie");
    await clean(page);
  });

  await step("a dropped file meets the token field, a wrong token is refused, the right one uploads", async () => {
    await page.setInputFiles("#file-input", join(FIXTURES, "mempool.pickle"));
    const form = page.locator("#dropzone .token-form");
    await form.waitFor();
    assert((await form.innerText()).includes("token"), "the form says what it wants");
    const row = (await page.locator("[data-upload-status]").first().innerText()) ?? "";
    assert(row.includes("Waiting for a write token"), `the file's row says what it waits for: ${row}`);
    assertEqual(await page.locator("[data-upload-cancel]:visible").count(), 0, "one Cancel: the token field's");
    assert(await page.locator("#dropzone .token-form input[type=password]").evaluate((input) => input === document.activeElement), "the field has focus");
    await shot(page, "access-token-field");
    await page.fill("#dropzone .token-form input", "wrong-token-0123456789");
    await page.keyboard.press("Enter");
    await until(async () => (await form.count()) && (await form.innerText()).includes("refused"), "the wrong token refused");
    await page.fill("#dropzone .token-form input", WRITE);
    await page.keyboard.press("Enter");
    await until(async () => new URL(page.url()).pathname.startsWith("/s/"), "the snapshot page");
    state.id = new URL(page.url()).pathname.split("/").pop();
    const stored = await api(`/api/snapshots/${state.id}`, asReader);
    assertEqual(stored.status, 200, "stored");
    assertEqual(await page.evaluate(() => sessionStorage.getItem("snapview.token")), WRITE, "the token kept for the tab");
    await clean(page);
  });

  await step("rename uses the tab's token without asking again", async () => {
    // The URL changes when the navigation commits, before the page's module has run: a click
    // then would land on a title that does not yet know how to rename (CI once hit exactly that).
    await page.waitForLoadState("load");
    const title = page.locator("#snapshot-name");
    await title.click();
    const input = title.locator("input");
    await input.waitFor();
    await input.fill("renamed with a token");
    await input.press("Enter");
    await until(async () => (await api(`/api/snapshots/${state.id}`, asReader)).body?.name === "renamed with a token", "the new name stored");
    assertEqual(await page.locator(".token-form").count(), 0, "no token form");
    await clean(page);
  });

  await step("another origin's page cannot upload, even with no-cors", async () => {
    // Another site on this machine (a real server: Chromium only lets loopback pages reach
    // loopback addresses, so a page from anywhere else is stopped before our check).
    const site = createServer((_, response) => {
      response.setHeader("Content-Type", "text/html");
      response.end("<!doctype html><title>another site</title>");
    });
    await new Promise((done) => site.listen(0, "127.0.0.1", done));
    const foreign = await context.newPage();
    await foreign.goto(`http://127.0.0.1:${site.address().port}/`);
    const statuses = [];
    foreign.on("response", (response) => {
      if (response.url().startsWith(`${BASE}/api/snapshots`)) statuses.push(response.status());
    });
    const before = (await api("/api/snapshots", asReader)).body.snapshots.length;
    await foreign.evaluate(
      async ({ base, token }) => {
        await fetch(`${base}/api/snapshots?name=evil`, { method: "POST", mode: "no-cors", body: "x", headers: { "Content-Type": "text/plain" } }).catch(
          () => {},
        );
        // Even a page that somehow had the token is refused for its origin.
        await fetch(`${base}/api/snapshots?name=evil`, { method: "POST", mode: "no-cors", body: "x", headers: { Authorization: `Bearer ${token}` } }).catch(
          () => {},
        );
      },
      { base: BASE, token: WRITE },
    );
    await until(() => statuses.length >= 1, "the server's answer");
    assert(
      statuses.every((s) => s === 403),
      `refused with 403: ${statuses}`,
    );
    assertEqual((await api("/api/snapshots", asReader)).body.snapshots.length, before, "nothing stored");
    await foreign.close();
    site.close();
  });
});
