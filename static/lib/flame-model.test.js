// Unit tests of the flame graph's model, for node's built-in runner: `node --test static/lib/`.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ancestors, change, layout, search, selfBytes, twoWeight, zoomName } from "./flame-model.js";

// root ─┬─ a (60) ─── a1 (40)
//       └─ b (40)
const single = [
  { name: "all", file: "", line: 0, bytes: 100, parent: -1, depth: 0 },
  { name: "a", file: "x.py", line: 1, bytes: 60, parent: 0, depth: 1 },
  { name: "a1", file: "y.py", line: 2, bytes: 40, parent: 1, depth: 2 },
  { name: "b", file: "x.py", line: 3, bytes: 40, parent: 0, depth: 1 },
];

test("layout places children left to right inside their parent", () => {
  const lay = layout(single);
  assert.deepEqual([...lay.x0], [0, 0, 0, 60]);
  assert.deepEqual(lay.children, [[1, 3], [2], [], []]);
  assert.deepEqual([...lay.subtreeEnd], [4, 3, 3, 4]);
  assert.equal(lay.maxDepth, 2);
  assert.equal(selfBytes(single, lay, 1), 20);
  assert.deepEqual(ancestors(single, 2), [0, 1, 2]);
});

test("search counts the bytes of a match under a match once", () => {
  const found = search(single, "x.py");
  assert.equal(found.count, 2);
  assert.equal(found.bytes, 100);
});

test("zoomed, search counts only the zoomed subtree, against what is drawn", () => {
  const lay = layout(single);
  // Zoomed into a: b (x.py, outside) is not counted; a itself is.
  const inA = search(single, "x.py", { root: 1, end: lay.subtreeEnd[1] });
  assert.equal(inA.count, 1);
  assert.equal(inA.bytes, 60);
  // Zoomed into a, searching y.py: only a1.
  const y = search(single, "y.py", { root: 1, end: lay.subtreeEnd[1] });
  assert.deepEqual([y.count, y.bytes], [1, 40]);
  // Zoomed into a1 under a matching a: all of a1 is under a match, counted once.
  const under = search(single, "x.py", { root: 2, end: lay.subtreeEnd[2] });
  assert.deepEqual([under.count, under.bytes], [0, 40]);
  // Zoomed into b: nothing under it matches y.py.
  assert.deepEqual([search(single, "y.py", { root: 3, end: 4 }).count, search(single, "y.py", { root: 3, end: 4 }).bytes], [0, 0]);
});

test("a zoomed export's name part is safe in a file name", () => {
  assert.equal(zoomName({ name: "forward", file: "linear.py", line: 134 }), "forward-linear.py-134");
  assert.equal(zoomName({ name: "<lambda> / x", file: "", line: 0 }), "_lambda_x");
});

// Before → after: `grew` 10 → 50, `shrank` 50 → 10, `gone` 20 → 0, `new` 0 → 30.
const diff = [
  { name: "all", before_bytes: 80, after_bytes: 90, parent: -1, depth: 0 },
  { name: "grew", before_bytes: 10, after_bytes: 50, parent: 0, depth: 1 },
  { name: "shrank", before_bytes: 50, after_bytes: 10, parent: 0, depth: 1 },
  { name: "gone", before_bytes: 20, after_bytes: 0, parent: 2, depth: 2 },
  { name: "new", before_bytes: 0, after_bytes: 30, parent: 0, depth: 1 },
];

test("two weights: a frame is as wide as its larger side", () => {
  const nodes = twoWeight(diff);
  assert.deepEqual(
    nodes.map((n) => n.bytes),
    [130, 50, 50, 20, 30],
  );
  // The input is left as it was; the other fields travel along.
  assert.equal(diff[0].bytes, undefined);
  assert.equal(nodes[3].name, "gone");
  assert.equal(nodes[3].before_bytes, 20);
});

test("two weights: a parent widens to hold its children, so none overflows", () => {
  // The root's larger side (90) is less than its children's (50 + 50 + 30).
  const nodes = twoWeight(diff);
  const lay = layout(nodes);
  for (let i = 1; i < nodes.length; i += 1) {
    const p = nodes[i].parent;
    assert.ok(lay.x0[i] >= lay.x0[p], `${nodes[i].name} starts before its parent`);
    assert.ok(lay.x0[i] + nodes[i].bytes <= lay.x0[p] + nodes[p].bytes, `${nodes[i].name} overflows its parent`);
  }
  assert.deepEqual([...lay.x0], [0, 0, 50, 50, 100]);
});

test("two weights: the change is relative to the larger side", () => {
  const nodes = twoWeight(diff);
  assert.deepEqual(nodes.map(change), [(90 - 80) / 90, 0.8, -0.8, -1, 1]);
  assert.equal(change({ before_bytes: 0, after_bytes: 0 }), 0);
  assert.equal(change({ before_bytes: 7, after_bytes: 7 }), 0);
});
