// @ts-check
// node --test: the write token's storage and headers, and the words shown when one is refused.
// Node has no sessionStorage: the tests run once without one (storage disabled, as in a
// locked-down browser) and once with a minimal Storage of the same interface.

import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { NEEDS_TOKEN, refusal, savedToken, saveToken, withToken } from "./auth.js";

/** The part of the Web Storage interface auth.js uses, over a Map. */
/**
 * Makes `storage` the page's sessionStorage: a stand-in with the two methods auth.js calls.
 * @param {Pick<Storage, "getItem" | "setItem">} storage
 */
function useStorage(storage) {
  globalThis.sessionStorage = /** @type {Storage} */ (storage);
}

class MemoryStorage {
  items = new Map();
  getItem(key) {
    return this.items.has(key) ? this.items.get(key) : null;
  }
  setItem(key, value) {
    this.items.set(key, String(value));
  }
}

afterEach(() => {
  delete globalThis.sessionStorage;
});

test("without storage there is no token and nothing breaks", () => {
  assert.equal(savedToken(), "");
  saveToken("ignored");
  assert.equal(savedToken(), "");
  assert.deepEqual(withToken({ Accept: "application/json" }), { Accept: "application/json" });
  assert.deepEqual(withToken(), {});
});

test("storage that throws (disabled by the browser) reads as no token", () => {
  useStorage({
    getItem() {
      throw new Error("SecurityError");
    },
    setItem() {
      throw new Error("QuotaExceededError");
    },
  });
  saveToken("t");
  assert.equal(savedToken(), "");
});

test("a saved token is sent as a Bearer header, beside the other headers", () => {
  useStorage(new MemoryStorage());
  assert.deepEqual(withToken({ "Content-Type": "text/plain" }), { "Content-Type": "text/plain" }, "none saved yet");
  saveToken("s3cret-token");
  assert.equal(savedToken(), "s3cret-token");
  const headers = { "Content-Type": "text/plain" };
  assert.deepEqual(withToken(headers), { "Content-Type": "text/plain", Authorization: "Bearer s3cret-token" });
  assert.deepEqual(headers, { "Content-Type": "text/plain" }, "the caller's object is not changed");
});

test("a refusal says the server's words, else ours, and leaves the body readable", async () => {
  const json = new Response(JSON.stringify({ error: { message: "the token is not valid" } }), { status: 401 });
  assert.equal(await refusal(json), "the token is not valid");
  assert.deepEqual(await json.json(), { error: { message: "the token is not valid" } });
  assert.equal(await refusal(new Response("Unauthorized", { status: 401 })), "This server needs a token to change snapshots.");
  assert.equal(await refusal(new Response("{}", { status: 401 })), "This server needs a token to change snapshots.");
  assert.match(NEEDS_TOKEN, /write token/);
});
