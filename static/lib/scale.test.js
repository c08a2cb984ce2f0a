// @ts-check
// node --test: scales and axis ticks.

import assert from "node:assert/strict";
import { test } from "node:test";
import { byteRangeTicks, byteTicks, clamp, eventTicks, linear, niceStep, ticks, timeTicks } from "./scale.js";

test("linear maps a domain to a range and back", () => {
  const x = linear(0, 100, 50, 250);
  assert.equal(x(0), 50);
  assert.equal(x(100), 250);
  assert.equal(x(25), 100);
  assert.equal(x.invert(100), 25);
  assert.equal(x(-10), 30, "extrapolates outside the domain");
  assert.deepEqual(x.domain, [0, 100]);
  assert.deepEqual(x.range, [50, 250]);
});

test("a linear map of an empty domain is flat and inverts to its start", () => {
  const x = linear(5, 5, 0, 100);
  assert.equal(x(5), 0);
  assert.equal(x(1000), 0);
  assert.equal(x.invert(42), 5);
});

test("nice steps are 1, 2, 2.5 or 5 times a power of ten", () => {
  assert.equal(niceStep(10, 10), 1);
  assert.equal(niceStep(100, 5), 20);
  assert.equal(niceStep(100, 4), 25);
  assert.equal(niceStep(100, 3), 50);
  assert.equal(niceStep(1, 4), 0.25);
  assert.equal(niceStep(0, 5), 1, "an empty span still gets a step");
  assert.equal(niceStep(-5, 5), 1);
  assert.equal(niceStep(Number.NaN, 5), 1);
});

test("decimal ticks cover [min, max] on the step without float noise", () => {
  assert.deepEqual(ticks(0, 10, 5), [0, 2, 4, 6, 8, 10]);
  assert.deepEqual(ticks(0.1, 0.3, 2), [0.1, 0.2, 0.3]);
  assert.deepEqual(ticks(-5, 5, 2), [-5, 0, 5]);
});

/** Checks what every byte axis needs: 0 first, even steps, a top at or above `max`, distinct labels. */
function assertByteAxis(max) {
  const { ticks: t, top } = byteTicks(max);
  assert.deepEqual(t[0], { value: 0, label: "0" });
  assert.ok(top >= max, `top ${top} under ${max}`);
  assert.equal(t.at(-1).value, top, "the last tick is the top");
  const step = t[1].value - t[0].value;
  for (let i = 1; i < t.length; i += 1) assert.ok(Math.abs(t[i].value - t[i - 1].value - step) < step * 1e-9, "even steps");
  assert.equal(new Set(t.map((tick) => tick.label)).size, t.length, "no two ticks share a label");
  assert.ok(t.length >= 2 && t.length <= 12, `${t.length} ticks`);
}

test("byte ticks start at 0, end at or above the maximum, in the unit that fits", () => {
  assert.deepEqual(
    byteTicks(3 * 1024 ** 3).ticks.map((tick) => tick.label),
    ["0", "1 GiB", "2 GiB", "3 GiB"],
  );
  assert.deepEqual(
    byteTicks(700 * 1024 ** 2).ticks.map((tick) => tick.label),
    ["0", "200 MiB", "400 MiB", "600 MiB", "800 MiB"],
  );
  for (const max of [1, 1023, 1024, 1025, 5e6, 8_127_203_336, 2 ** 53]) assertByteAxis(max);
});

test("byte ticks of nothing: one tick at 0 and a top of 1 (never a division by zero)", () => {
  for (const max of [0, -1, Number.NaN]) assert.deepEqual(byteTicks(max), { ticks: [{ value: 0, label: "0" }], top: 1 });
});

test("event ticks are labelled with as many digits as the step needs", () => {
  assert.deepEqual(
    eventTicks(0, 100, 5).map((t) => t.label),
    ["0", "20", "40", "60", "80", "100"],
  );
  assert.deepEqual(
    eventTicks(0, 1_000_000, 4).map((t) => t.label),
    ["0", "0.25M", "0.5M", "0.75M", "1M"],
  );
  assert.deepEqual(
    eventTicks(0, 25_000, 5).map((t) => t.label),
    ["0", "5k", "10k", "15k", "20k", "25k"],
  );
  // A step of 25 events near 1.43M: every label exact (once "1.43122M" for 1,431,225).
  assert.deepEqual(
    eventTicks(1_431_200, 1_431_300, 4).map((t) => t.label),
    ["1.4312M", "1.431225M", "1.43125M", "1.431275M", "1.4313M"],
  );
  assert.ok(
    eventTicks(0, 3, 10).every((t) => Number.isInteger(t.value)),
    "never a fractional event",
  );
});

test("time ticks count from the origin", () => {
  const t = timeTicks(1_000_000, 3_000_000, 1_000_000, 2);
  assert.deepEqual(
    t.map((tick) => tick.label),
    ["0", "1 s", "2 s"],
  );
  assert.equal(t[1].value, 2_000_000);
});

test("clamp", () => {
  assert.equal(clamp(5, 0, 10), 5);
  assert.equal(clamp(-1, 0, 10), 0);
  assert.equal(clamp(11, 0, 10), 10);
});

test("byteRangeTicks on a zoomed axis: inside the range, distinct labels, enough decimals", () => {
  const low = 4 * 2 ** 30;
  const high = low + 100 * 2 ** 20;
  const t = byteRangeTicks(low, high, 5);
  assert.ok(t.length >= 3, JSON.stringify(t));
  assert.ok(t.every((tick) => tick.value >= low && tick.value <= high));
  assert.equal(new Set(t.map((tick) => tick.label)).size, t.length, t.map((tick) => tick.label).join());
  assert.ok(t[0].label.endsWith("GiB"));
  assert.deepEqual(
    byteRangeTicks(0, 4 * 2 ** 30, 4).map((tick) => tick.label),
    ["0", "1 GiB", "2 GiB", "3 GiB", "4 GiB"],
  );
});

test("timeTicks on a window of a fraction of a millisecond: labels never repeat", () => {
  // 164 ms to 165.2 ms after the first event ("164 ms, 164 ms, 165 ms" before).
  const origin = 1_000_000_000;
  const t = timeTicks(origin + 164_000, origin + 165_200, origin, 6);
  const labels = t.map((tick) => tick.label);
  assert.equal(new Set(labels).size, labels.length, labels.join());
  assert.ok(
    labels.every((l) => l.endsWith(" ms")),
    labels.join(),
  );
  assert.equal(labels[0], "164.0 ms");
});
