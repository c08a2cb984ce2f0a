// node --test: the flame graph's layout, search, keys and exports, on nodes shaped like
// `GET /api/snapshots/{id}/flame` (depth-first, children after their parent).
// (flame-model.test.js has the two-weight compare mode and the interactive FlameModel.)

import assert from "node:assert/strict";
import { test } from "node:test";
import { ancestors, findKey, folded, frameLabel, keyOf, layout, matches, search, selfBytes, svg } from "./flame-model.js";

/**
 *   all 100
 *   ├─ train (train.py:10) 80
 *   │  ├─ forward (model.py:5) 50
 *   │  │  └─ linear (linear.py:134) 30
 *   │  └─ backward (autograd.py:7) 20
 *   └─ free (no file) 20
 */
function nodes() {
  return [
    { name: "all", file: "", line: 0, depth: 0, parent: -1, bytes: 100 },
    { name: "train", file: "train.py", line: 10, depth: 1, parent: 0, bytes: 80 },
    { name: "forward", file: "model.py", line: 5, depth: 2, parent: 1, bytes: 50 },
    { name: "linear", file: "linear.py", line: 134, depth: 3, parent: 2, bytes: 30 },
    { name: "backward", file: "autograd.py", line: 7, depth: 2, parent: 1, bytes: 20 },
    { name: "free", file: "", line: 0, depth: 1, parent: 0, bytes: 20 },
  ];
}

test("layout places each child after its older siblings, inside its parent", () => {
  const lay = layout(nodes());
  assert.deepEqual([...lay.x0], [0, 0, 0, 0, 50, 80]);
  assert.deepEqual(lay.children, [[1, 5], [2, 4], [3], [], [], []]);
  assert.deepEqual([...lay.subtreeEnd], [6, 5, 4, 4, 5, 6]);
  assert.equal(lay.maxDepth, 3);
});

test("layout of no nodes, and of a root alone", () => {
  const empty = layout([]);
  assert.equal(empty.x0.length, 0);
  assert.equal(empty.maxDepth, 0);
  const root = layout([{ name: "all", depth: 0, parent: -1, bytes: 0 }]);
  assert.deepEqual([...root.subtreeEnd], [1]);
  assert.deepEqual(root.children, [[]]);
});

test("ancestors and self bytes", () => {
  const n = nodes();
  const lay = layout(n);
  assert.deepEqual(ancestors(n, 3), [0, 1, 2, 3]);
  assert.deepEqual(ancestors(n, 0), [0]);
  assert.equal(selfBytes(n, lay, 0), 0);
  assert.equal(selfBytes(n, lay, 1), 10);
  assert.equal(selfBytes(n, lay, 2), 20);
  assert.equal(selfBytes(n, lay, 3), 30);
  // Children that sum past their parent (rounding in the server) never give negative bytes.
  const over = [
    { name: "all", depth: 0, parent: -1, bytes: 10 },
    { name: "a", depth: 1, parent: 0, bytes: 11 },
  ];
  assert.equal(selfBytes(over, layout(over), 0), 0);
});

test("search counts a match under a match once, and never the root", () => {
  const n = nodes();
  const none = search(n, "");
  assert.equal(none.count, 0);
  assert.equal(none.bytes, 0);
  const py = search(n, ".PY");
  assert.equal(py.count, 4, "case-insensitive, by file");
  assert.equal(py.bytes, 80, "train holds the other three");
  assert.deepEqual([...py.hit], [0, 1, 1, 1, 1, 0]);
  const leaves = search(n, "linear");
  assert.equal(leaves.bytes, 30);
  assert.equal(search(n, "all").count, 0, "the root is not a frame");
  assert.ok(matches(/** @type {any} */ ({ name: "x", file: "", path: "/src/pkg/mod.py" }), "pkg/"), "by path too");
  assert.ok(!matches(n[1], ""), "an empty query matches nothing");
});

test("a node's key finds the same frame in another answer, or -1", () => {
  const n = nodes();
  const key = keyOf(n, 3);
  assert.equal(findKey(n, key), 3);
  // The next answer at another moment: forward's subtree moved after backward.
  const next = [n[0], n[1], n[4], n[2], n[3], n[5]].map((node) => ({ ...node }));
  next[2].parent = 1;
  next[3].parent = 1;
  next[4].parent = 3;
  assert.equal(findKey(next, key), 4);
  assert.equal(findKey(n, ""), -1);
  assert.equal(findKey(n, "gone@x.py:1"), -1);
});

test("frame labels and folded stacks (semicolons in names cannot split a line)", () => {
  const n = nodes();
  assert.equal(frameLabel(n[3]), "linear (linear.py:134)");
  assert.equal(frameLabel(n[5]), "free");
  const lay = layout(n);
  assert.equal(
    folded(n, lay),
    [
      "train (train.py:10) 10",
      "train (train.py:10);forward (model.py:5) 20",
      "train (train.py:10);forward (model.py:5);linear (linear.py:134) 30",
      "train (train.py:10);backward (autograd.py:7) 20",
      "free 20",
      "",
    ].join("\n"),
  );
  assert.equal(folded(n, lay, 2), ["forward (model.py:5) 20", "forward (model.py:5);linear (linear.py:134) 30", ""].join("\n"), "a subtree keeps its own root");
  const semi = [
    { name: "all", depth: 0, parent: -1, bytes: 5 },
    { name: "a;b", file: "", depth: 1, parent: 0, bytes: 5 },
  ];
  assert.equal(folded(semi, layout(semi)), "a,b 5\n");
  // Every line's bytes add up to the root's.
  const total = folded(n, lay)
    .trim()
    .split("\n")
    .reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0);
  assert.equal(total, 100);
});

test("the SVG export is standalone, scaled to the focus, and escapes names", () => {
  const n = nodes();
  n[3].name = "<lambda> & 'x'";
  const lay = layout(n);
  const text = svg(n, lay, { focus: 2, width: 500, title: "a <b>", color: () => "#abc", hit: search(n, "lambda").hit });
  assert.ok(text.startsWith('<svg xmlns="http://www.w3.org/2000/svg" width="500"'));
  assert.ok(text.endsWith("</svg>"));
  assert.ok(text.includes("a &lt;b&gt;"));
  assert.ok(text.includes("&lt;lambda&gt; &amp; &apos;x&apos;"));
  assert.ok(!text.includes("<lambda>"));
  // forward (the focus) is full width; linear 30 of its 50 bytes; its ancestors full width above.
  assert.ok(text.includes('x="0.00" y="64" width="499.50"'), "the focus row, under the title and its two ancestors");
  assert.ok(text.includes('width="299.50"'), "linear at 3/5 of the width");
  assert.equal((text.match(/<rect x=/g) ?? []).length, 4, "all, train, forward, linear");
  assert.equal((text.match(/stroke="#d6336c"/g) ?? []).length, 1, "the match outlined");
  assert.ok(!text.includes("backward"), "outside the focus");
});
