// @ts-check
// node --test: how a stack frame is shown.

import assert from "node:assert/strict";
import { test } from "node:test";
import { frameParts, visibleFrames } from "./frames.js";

test("a frame shows its function and its file's base name with the line", () => {
  assert.deepEqual(frameParts({ name: "forward", filename: "/src/model/layers.py", line: 42 }), { name: "forward", where: "layers.py:42" });
  assert.deepEqual(frameParts({ name: "??", filename: "", line: 0 }), { name: "??", where: "" });
  assert.deepEqual(frameParts({ name: "<unknown>" }), { name: "<unknown>", where: "" });
});

test("hidden frames are left out unless all are asked for", () => {
  const frames = [{ name: "a" }, { name: "b", hidden: true }, { name: "c", hidden: false }];
  assert.deepEqual(
    visibleFrames(frames).map((f) => f.name),
    ["a", "c"],
  );
  assert.equal(visibleFrames(frames, true), frames);
});
