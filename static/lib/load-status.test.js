// @ts-check
// node --test: the words and timing of the pages shown while snapshots are read
// (static/views/loads.js over GET /api/snapshots/{id}/status).

import assert from "node:assert/strict";
import { test } from "node:test";
import { describe, failedLine, overall, POLL_MS, RETRY_MAX_MS, readyWaiting, retryDelay } from "./load-status.js";

test("reading says the file, the bytes read of the total, and the bar's share", () => {
  const shown = describe({ state: "reading", read: 1288490189, total: 2684354560 }, "snapshot.pickle");
  assert.equal(shown.line, "Reading snapshot.pickle: 1.20 GiB of 2.50 GiB");
  assert.equal(shown.percent, 48);
  assert.equal(shown.stage, "Reading snapshot.pickle");
  assert.equal(shown.next, "poll");
});

test("the stage read out does not change with the numbers, only with the stage", () => {
  const a = describe({ state: "reading", read: 1, total: 100 }, "f");
  const b = describe({ state: "reading", read: 90, total: 100 }, "f");
  assert.equal(a.stage, b.stage);
  assert.notEqual(a.line, b.line);
  assert.notEqual(describe({ state: "analysing" }, "f").stage, a.stage);
});

test("reading clamps what a server could send out of range, and an empty file has no share", () => {
  assert.equal(describe({ state: "reading", read: 150, total: 100 }, "f").percent, 100);
  assert.equal(describe({ state: "reading", read: -5, total: 100 }, "f").percent, 0);
  assert.equal(describe({ state: "reading", read: 0, total: 0 }, "f").percent, null);
  assert.equal(describe({ state: "reading", read: "x", total: 100 }, "f").line, "Reading f: 0 B of 100 B");
});

test("analysing and queued slide the bar; ready reloads; failed stops with the reason", () => {
  assert.deepEqual(
    ["queued", "analysing"].map((state) => describe({ state }, "f").percent),
    [null, null],
  );
  assert.equal(describe({ state: "analysing" }, "f").line, "Analysing…");
  assert.equal(describe({ state: "waiting" }, "f").line, "Waiting for another server to read this snapshot…");
  assert.equal(describe({ state: "waiting" }, "f").next, "poll");
  assert.equal(describe({ state: "ready" }, "f").next, "reload");
  const failed = describe({ state: "failed", error: "its stored file does not read as a snapshot: truncated" }, "s.pickle");
  assert.equal(failed.next, "stop");
  assert.equal(failed.error, "its stored file does not read as a snapshot: truncated");
  assert.equal(failed.line, "The server could not read s.pickle.");
  assert.equal(describe({ state: "failed", error: "x" }, "s.pickle", 2048).line, "The server could not read s.pickle (2.00 KiB).");
  assert.equal(describe({ state: "failed" }, "f").error, "the server did not say why");
});

test("an unknown answer keeps polling without claiming a stage", () => {
  for (const status of [null, {}, { state: "later" }]) {
    const shown = describe(status, "f");
    assert.equal(shown.next, "poll");
    assert.equal(shown.error, "");
  }
});

test("the failed line matches the server's wording", () => {
  // src/server/pages/snapshot.rs `failed_line`.
  assert.equal(failedLine("a.pickle", 2684354560), "The server could not read a.pickle (2.50 GiB).");
});

test("polls four times a second, and backs off to a few seconds while the server is away", () => {
  assert.equal(retryDelay(0), POLL_MS);
  assert.equal(POLL_MS, 250);
  assert.ok(retryDelay(1) > POLL_MS);
  assert.ok(retryDelay(2) > retryDelay(1));
  assert.equal(retryDelay(50), RETRY_MAX_MS);
});

test("a page waiting for several loads stops at the first failure and reloads when all are ready", () => {
  assert.equal(overall(["reload", "poll"]), "poll");
  assert.equal(overall(["reload", "reload"]), "reload");
  assert.equal(overall(["poll", "stop"]), "stop");
  assert.equal(overall(["reload", "stop"]), "stop");
  assert.equal(overall(["reload"]), "reload");
  assert.equal(readyWaiting(1), "Ready; waiting for the other snapshot…");
  assert.equal(readyWaiting(2), "Ready; waiting for 2 other snapshots…");
});
