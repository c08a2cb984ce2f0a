// @ts-check
// node --test: labels cut to fit a canvas.

import assert from "node:assert/strict";
import { test } from "node:test";
import { fitText } from "./fit-text.js";

/** A measurer with a monospace font 10 px a character. */
const mono = { measureText: (/** @type {string} */ text) => ({ width: text.length * 10 }) };

test("text that fits is kept whole", () => {
  assert.equal(fitText(mono, "forward", 70), "forward");
  assert.equal(fitText(mono, "", 0), "");
});

test("text that does not fit is cut to the longest prefix that fits with an ellipsis", () => {
  assert.equal(fitText(mono, "forward", 69), "forwa…");
  assert.equal(fitText(mono, "forward", 20), "f…");
});

test("nothing is shown where not even one character and the ellipsis fit", () => {
  assert.equal(fitText(mono, "forward", 19), "");
});
