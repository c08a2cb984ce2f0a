// @ts-check
// node --test: the number formatting every page shows. The byte strings are the server's
// (src/format.rs `bytes`), so a page and the CLI say the same thing for the same number.

import assert from "node:assert/strict";
import { test } from "node:test";
import { bytes, bytesTick, compact, count, duration, eventTime, hex, parseBytes, percent, relativeTime } from "./units.js";

test("bytes agree with the server's formatter at the unit boundaries", () => {
  // The cases of src/format.rs's own test, plus the edges around each unit.
  assert.equal(bytes(0), "0 B");
  assert.equal(bytes(1), "1 B");
  assert.equal(bytes(1023), "1023 B");
  assert.equal(bytes(1024), "1.00 KiB");
  assert.equal(bytes(1536), "1.50 KiB");
  assert.equal(bytes(10 * 1024), "10.0 KiB");
  assert.equal(bytes(100 * 1024), "100 KiB");
  assert.equal(bytes(1024 ** 2 - 1), "1024 KiB");
  assert.equal(bytes(1024 ** 2), "1.00 MiB");
  assert.equal(bytes(286_650_809), "273 MiB");
  assert.equal(bytes(8_127_203_336), "7.57 GiB");
  assert.equal(bytes(1024 ** 4), "1.00 TiB");
});

test("bytes beyond the last unit stay in PiB rather than inventing one", () => {
  assert.equal(bytes(1024 ** 5), "1.00 PiB");
  assert.equal(bytes(2048 * 1024 ** 5), "2048 PiB");
  assert.equal(bytes(Number.MAX_SAFE_INTEGER), "8.00 PiB");
});

test("negative bytes (a diff that shrank) keep their sign", () => {
  assert.equal(bytes(-1), "-1 B");
  assert.equal(bytes(-1023), "-1023 B");
  assert.equal(bytes(-1536), "-1.50 KiB");
  assert.equal(bytes(-8_127_203_336), "-7.57 GiB");
});

test("bytes with fixed digits, and fractions under a KiB rounded", () => {
  assert.equal(bytes(1536, 0), "2 KiB");
  assert.equal(bytes(1536, 3), "1.500 KiB");
  assert.equal(bytes(12.4), "12 B");
});

test("axis labels drop trailing zeros", () => {
  assert.equal(bytesTick(0), "0");
  assert.equal(bytesTick(512), "512 B");
  assert.equal(bytesTick(1024), "1 KiB");
  assert.equal(bytesTick(1.5 * 1024 ** 3), "1.5 GiB");
  assert.equal(bytesTick(2.25 * 1024 ** 2), "2.25 MiB");
});

test("counts have thousands separators and round", () => {
  assert.equal(count(0), "0");
  assert.equal(count(999), "999");
  assert.equal(count(1000), "1,000");
  assert.equal(count(3_199_230), "3,199,230");
  assert.equal(count(-1234), "-1,234");
  assert.equal(count(2.6), "3");
});

test("compact counts switch units at 10k, 1M and 1G", () => {
  assert.equal(compact(0), "0");
  assert.equal(compact(9999), "9999");
  assert.equal(compact(10_000), "10k");
  assert.equal(compact(25_000), "25k");
  assert.equal(compact(1_234_567), "1.23M");
  assert.equal(compact(3_000_000_000), "3G");
  assert.equal(compact(-1_500_000), "-1.5M");
});

test("durations from microseconds to minutes", () => {
  assert.equal(duration(0), "0 µs");
  assert.equal(duration(999), "999 µs");
  assert.equal(duration(1000), "1 ms");
  assert.equal(duration(12_345), "12.3 ms");
  assert.equal(duration(1_250_000), "1.25 s");
  assert.equal(duration(59_999_999), "60 s");
  assert.equal(duration(125_000_000), "2 min 5 s");
  assert.equal(duration(-125_000_000), "-2 min 5 s");
  assert.equal(duration(-500), "-500 µs");
});

test("addresses are 0x-hex", () => {
  assert.equal(hex(0), "0x0");
  assert.equal(hex(255), "0xff");
  assert.equal(hex(0x7f3a_0000_0000), "0x7f3a00000000");
});

test("percent: whole numbers from 10%, one decimal under, 0% of nothing", () => {
  assert.equal(percent(0, 100), "0%");
  assert.equal(percent(5, 0), "0%");
  assert.equal(percent(1, 3), "33%");
  assert.equal(percent(1, 200), "0.5%");
  assert.equal(percent(100, 100), "100%");
});

test("parseBytes reads what a person types, and refuses the rest", () => {
  assert.equal(parseBytes("1048576"), 1048576);
  assert.equal(parseBytes("1.5 GiB"), 1.5 * 1024 ** 3);
  assert.equal(parseBytes("512MB"), 512 * 1024 ** 2);
  assert.equal(parseBytes("2k"), 2048);
  assert.equal(parseBytes(" 3 t "), 3 * 1024 ** 4);
  assert.equal(parseBytes("0"), 0);
  assert.equal(parseBytes(""), null);
  assert.equal(parseBytes(null), null);
  assert.equal(parseBytes("-5"), null);
  assert.equal(parseBytes("five"), null);
  assert.equal(parseBytes("1.2.3 KiB"), null);
  // The round trip the events filter relies on: what bytes() prints parses back to about the value.
  for (const n of [1536, 286_650_809, 8_127_203_336]) {
    const back = parseBytes(bytes(n));
    assert.ok(Math.abs(back - n) / n < 0.005, `${bytes(n)} parsed back as ${back}`);
  }
});

test("relative times: just now, minutes, hours, yesterday, days, then the date", () => {
  const now = Date.UTC(2026, 0, 15, 12, 0, 0);
  assert.equal(relativeTime(now, now), "just now");
  assert.equal(relativeTime(now - 44_000, now), "just now");
  assert.equal(relativeTime(now - 60_000, now), "1 minute ago");
  assert.equal(relativeTime(now - 3 * 60_000, now), "3 minutes ago");
  assert.equal(relativeTime(now - 3_600_000, now), "1 hour ago");
  assert.equal(relativeTime(now - 5 * 3_600_000, now), "5 hours ago");
  assert.equal(relativeTime(now - 24 * 3_600_000, now), "yesterday");
  assert.equal(relativeTime(now - 3 * 24 * 3_600_000, now), "3 days ago");
  assert.equal(relativeTime(now - 30 * 24 * 3_600_000, now), "2025-12-16");
  // A clock a little behind the server's: still "just now", never "-1 minutes ago".
  assert.equal(relativeTime(now + 10_000, now), "just now");
});

test("event times keep microseconds, so neighbours differ", () => {
  assert.equal(eventTime(151_234), "151.234 ms");
  assert.notEqual(eventTime(151_234), eventTime(151_235));
  assert.equal(eventTime(42), "0.042 ms");
  assert.equal(eventTime(12_345_678), "12.345678 s");
  assert.equal(eventTime(123_456_789), "2 min 03.456789 s");
  assert.equal(eventTime(-5), "-0.005 ms");
});
