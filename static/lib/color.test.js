// @ts-check
// node --test: mark colours are stable per key and valid CSS.

import assert from "node:assert/strict";
import { test } from "node:test";
import { bandColor, frameColor, hash, roleColor } from "./color.js";
import { ROLES } from "./roles.js";

const HSL = /^hsl\(\d{1,3} \d{1,3}% \d{1,3}%\)$/;

test("hash is a stable unsigned 32-bit value that tells near keys apart", () => {
  assert.equal(hash("a"), hash("a"));
  assert.equal(hash(7), hash("7"), "a number hashes as its text");
  for (const key of ["", "a", "model.py", 0, 123456789]) {
    const h = hash(key);
    assert.ok(Number.isInteger(h) && h >= 0 && h < 2 ** 32, `${key} → ${h}`);
  }
  const values = new Set(Array.from({ length: 1000 }, (_, i) => hash(i)));
  assert.equal(values.size, 1000, "no collision among the first thousand ids");
});

test("a band's colour depends only on its id and the scheme, and is valid CSS", () => {
  assert.equal(bandColor(42, false), bandColor(42, false));
  assert.notEqual(bandColor(42, false), bandColor(42, true));
  for (const id of [0, 1, 2, 1023, 1024, 2 ** 31]) {
    assert.match(bandColor(id, false), HSL);
    assert.match(bandColor(id, true), HSL);
  }
});

test("neighbouring bands get different hues", () => {
  const hue = (id) => Number(/^hsl\((\d+)/.exec(bandColor(id, false))[1]);
  for (let id = 0; id < 50; id += 1) assert.notEqual(hue(id), hue(id + 1), `bands ${id} and ${id + 1}`);
});

test("frame colours: by file for Python code, fixed for the allocator's own blocks", () => {
  assert.equal(frameColor("forward", "model.py", false), frameColor("backward", "model.py", false), "one colour per file");
  assert.match(frameColor("forward", "model.py", true), HSL);
  assert.equal(frameColor("free (inactive split)", "", false), "hsl(140 30% 80%)");
  assert.equal(frameColor("pending free", null, true), "hsl(32 70% 40%)");
  assert.equal(frameColor("rounding", "", false), "hsl(0 0% 72%)");
  assert.equal(frameColor("<unknown>", "", false), "hsl(220 18% 78%)");
  const hue = Number(/^hsl\((\d+)/.exec(frameColor("f", "a.py", false))[1]);
  assert.ok(hue >= 8 && hue < 50, "Python frames are warm");
});

test("every role has one colour per scheme, built-in roles distinct, custom roles stable", () => {
  for (const dark of [false, true]) {
    const colors = ROLES.map((role) => roleColor(role, dark));
    for (const c of colors) assert.match(c, HSL);
    assert.equal(new Set(colors).size, ROLES.length, "no two built-in roles share a colour");
    assert.equal(roleColor("ema_weights", dark), roleColor("ema_weights", dark));
    assert.match(roleColor("ema_weights", dark), HSL);
  }
  assert.notEqual(roleColor("activation", false), roleColor("activation", true), "the scheme changes the shade");
});
