// @ts-check
// node --test: the JSON API's reader, with `fetch` replaced by answers made here.

import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { allocation, getJSON } from "./api.js";

const realFetch = globalThis.fetch;
afterEach(() => {
  globalThis.fetch = realFetch;
});

/** Makes `fetch` answer with `answer(url)` and records the URLs asked for. */
function fakeFetch(answer) {
  const urls = [];
  globalThis.fetch = async (url, options) => {
    urls.push(String(url));
    return answer(String(url), options);
  };
  return urls;
}

const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

test("an answer's JSON is returned", async () => {
  fakeFetch(() => json(200, { ok: 1 }));
  assert.deepEqual(await getJSON("/api/x"), { ok: 1 });
});

test("a refusal throws the server's own message, else its status", async () => {
  fakeFetch(() => json(404, { error: { message: "no snapshot abc" } }));
  await assert.rejects(getJSON("/api/x"), { message: "The server answered: no snapshot abc" });
  fakeFetch(() => new Response("oops", { status: 502, statusText: "Bad Gateway" }));
  await assert.rejects(getJSON("/api/x"), { message: "The server answered: 502 Bad Gateway" });
});

test("a network failure says the server could not be reached; an abort stays an abort", async () => {
  fakeFetch(() => {
    throw new TypeError("fetch failed");
  });
  await assert.rejects(getJSON("/api/x"), { message: "The server could not be reached. Is snapview still running?" });
  fakeFetch(() => {
    throw new DOMException("aborted", "AbortError");
  });
  await assert.rejects(getJSON("/api/x"), { name: "AbortError" });
});

test("an allocation is fetched once per snapshot, device and id; a failure is asked again", async () => {
  let fail = true;
  const urls = fakeFetch(() => (fail ? json(500, { error: { message: "busy" } }) : json(200, { id: 7 })));
  await assert.rejects(allocation("s1", 0, 7), { message: "The server answered: busy" });
  fail = false;
  assert.deepEqual(await allocation("s1", 0, 7), { id: 7 });
  assert.deepEqual(await allocation("s1", 0, 7), { id: 7 });
  await allocation("s1", 1, 7);
  assert.deepEqual(urls, ["/api/snapshots/s1/allocations/7?device=0", "/api/snapshots/s1/allocations/7?device=0", "/api/snapshots/s1/allocations/7?device=1"]);
});
