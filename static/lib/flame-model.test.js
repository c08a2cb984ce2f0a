// @ts-check
// Unit tests of the flame graph's model, for node's built-in runner: `node --test static/lib/`:
// the basics, the two-weight compare mode, and `FlameModel`, the interactive graph both pages
// draw (placement, hit-testing, zoom, breadcrumb, keys). flame-model.layout.test.js has more of
// the layout, the search and the exports.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ancestors, change, FlameModel, layout, MIN_FRAME_PX, search, selfBytes, svg, twoWeight, zoomName } from "./flame-model.js";

/**
 * The fixtures are partial nodes on purpose (only the fields a test reads): typed as whole ones.
 * @param {object} fields
 * @returns {any}
 */
const partial = (fields) => fields;

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
  assert.equal(zoomName(partial({ name: "forward", file: "linear.py", line: 134 })), "forward-linear.py-134");
  assert.equal(zoomName(partial({ name: "<lambda> / x", file: "", line: 0 })), "_lambda_x");
});

// Before → after: `grew` 10 → 50, `shrank` 50 → 10, `gone` 20 → 0, `new` 0 → 30.
const diff = partial([
  { name: "all", before_bytes: 80, after_bytes: 90, parent: -1, depth: 0 },
  { name: "grew", before_bytes: 10, after_bytes: 50, parent: 0, depth: 1 },
  { name: "shrank", before_bytes: 50, after_bytes: 10, parent: 0, depth: 1 },
  { name: "gone", before_bytes: 20, after_bytes: 0, parent: 2, depth: 2 },
  { name: "new", before_bytes: 0, after_bytes: 30, parent: 0, depth: 1 },
]);

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
  assert.equal(change(partial({ before_bytes: 0, after_bytes: 0 })), 0);
  assert.equal(change(partial({ before_bytes: 7, after_bytes: 7 })), 0);
});

// ---------------------------------------------------------------------------------------------
// FlameModel: what both pages draw and how they move in it.

const ROW = 20;

/** `single` in thousands of bytes, and under b a sliver of 1 byte (0.008 px at 800 px) with a child. */
function withSliver() {
  return [
    ...single.map((n) => ({ ...n, bytes: n.bytes * 1000 })),
    { name: "sliver", file: "z.py", line: 4, bytes: 1, parent: 3, depth: 2 },
    { name: "sliver-child", file: "z.py", line: 5, bytes: 1, parent: 4, depth: 3 },
  ];
}

test("placing: the whole graph scaled to the width, a row per depth", () => {
  const model = new FlameModel(single, ROW);
  const rects = model.place(200);
  assert.deepEqual(
    rects.map((r) => [r.i, r.x, r.w, r.y, r.row, r.ancestor]),
    [
      [0, 0, 200, 0, 0, false],
      [1, 0, 120, 20, 1, false],
      [2, 0, 80, 40, 2, false],
      [3, 120, 80, 20, 1, false],
    ],
  );
  assert.equal(model.rowsDrawn(), 3);
  assert.equal(model.rects, rects);
});

test("placing zoomed: the ancestors full width above, the zoomed frame's subtree scaled below", () => {
  const model = new FlameModel(single, ROW);
  model.zoomTo(1);
  const rects = model.place(300);
  assert.deepEqual(
    rects.map((r) => [r.i, r.x, r.w, r.row, r.ancestor]),
    [
      [0, 0, 300, 0, true],
      [1, 0, 300, 1, false],
      [2, 0, 200, 2, false],
    ],
  );
  // b is outside the zoom: not drawn, not hit.
  assert.equal(model.rectOf(3), undefined);
});

test(`frames under ${MIN_FRAME_PX} px are skipped with their subtree, in the canvas and the SVG alike`, () => {
  const nodes = withSliver();
  // b holds its sliver: 40 000 bytes, of which 1 is the sliver's.
  const model = new FlameModel(nodes, ROW);
  const drawn = model.place(800).map((r) => nodes[r.i].name);
  assert.deepEqual(drawn, ["all", "a", "a1", "b"]);
  // Wide enough, the sliver and its child show.
  assert.ok(
    model
      .place(100_000 * 100)
      .map((r) => nodes[r.i].name)
      .includes("sliver-child"),
  );
  const image = svg(nodes, layout(nodes), { width: 800, color: () => "#abc" });
  assert.ok(!image.includes("sliver"), "the SVG draws a frame the canvas skips");
  assert.ok(image.includes("a1"));
});

test("a zoomed frame of no bytes still fills the width, alone", () => {
  const nodes = [
    { name: "all", bytes: 10, parent: -1, depth: 0 },
    { name: "empty", bytes: 0, parent: 0, depth: 1 },
    { name: "inside", bytes: 0, parent: 1, depth: 2 },
  ];
  const model = new FlameModel(nodes, ROW);
  model.zoomTo(1);
  assert.deepEqual(
    model.place(100).map((r) => [r.i, r.w, r.ancestor]),
    [
      [0, 100, true],
      [1, 100, false],
    ],
  );
});

test("hit-testing: the frame under a point, by its row, or -1", () => {
  const model = new FlameModel(single, ROW);
  model.place(200);
  assert.equal(model.at(10, 5), 0);
  assert.equal(model.at(10, 25), 1);
  assert.equal(model.at(119.9, 25), 1);
  assert.equal(model.at(120, 25), 3);
  assert.equal(model.at(10, 45), 2);
  // Under b there is nothing; nor beyond the right edge or below the deepest row.
  assert.equal(model.at(150, 45), -1);
  assert.equal(model.at(200, 5), -1);
  assert.equal(model.at(10, 65), -1);
});

test("hover and the keyboard's frame: the keyboard's is outlined first", () => {
  const model = new FlameModel(single, ROW);
  model.place(200);
  assert.equal(model.marked(), -1);
  assert.equal(model.hoverOn(3), true);
  assert.equal(model.hoverOn(3), false, "the same frame again: nothing to repaint");
  assert.equal(model.marked(), 3);
  model.key("ArrowDown");
  assert.equal(model.cursor, 1);
  assert.equal(model.marked(), 1);
});

test("a click zooms into a frame, and out one level on the zoomed frame", () => {
  const model = new FlameModel(single, ROW);
  assert.equal(model.clickZoom(2), 2);
  assert.equal(model.clickZoom(0), 0, "the root zooms nowhere");
  model.zoomTo(2);
  assert.equal(model.clickZoom(2), 1);
  assert.equal(model.clickZoom(0), 0, "an ancestor: out to it");
  // A zoom from an old answer's index falls back to everything.
  model.zoomTo(99);
  assert.equal(model.zoom, 0);
  model.zoomTo(-1);
  assert.equal(model.zoom, 0);
});

test("the breadcrumb: all, the ancestors, the zoomed frame (current)", () => {
  const model = new FlameModel(single, ROW);
  assert.deepEqual(model.crumbs(), [{ i: 0, label: "all", title: "all", current: true }]);
  model.zoomTo(2);
  assert.deepEqual(model.crumbs(), [
    { i: 0, label: "all", title: "all", current: false },
    { i: 1, label: "a", title: "a (x.py:1)", current: false },
    { i: 2, label: "a1", title: "a1 (y.py:2)", current: true },
  ]);
});

test("keys: arrows move between drawn frames, from the zoomed frame at first", () => {
  const model = new FlameModel(single, ROW);
  model.place(200);
  const moved = { zoomed: false, moved: true };
  const stayed = { zoomed: false, moved: false };
  assert.deepEqual(model.key("ArrowDown"), moved);
  assert.equal(model.cursor, 1);
  assert.deepEqual(model.key("ArrowRight"), moved);
  assert.equal(model.cursor, 3);
  // At an edge the arrow is still the graph's (the page must not step the moment), it stays.
  assert.deepEqual(model.key("ArrowRight"), stayed);
  assert.equal(model.cursor, 3);
  assert.deepEqual(model.key("ArrowDown"), stayed, "b has no children");
  assert.deepEqual(model.key("ArrowLeft"), moved);
  assert.deepEqual(model.key("ArrowDown"), moved);
  assert.equal(model.cursor, 2);
  assert.deepEqual(model.key("ArrowUp"), moved);
  assert.deepEqual(model.key("ArrowUp"), moved);
  assert.equal(model.cursor, 0);
  assert.deepEqual(model.key("ArrowUp"), stayed, "nothing above the root");
  assert.deepEqual(model.key("ArrowLeft"), stayed, "the root has no siblings");
  // Not the graph's keys.
  assert.equal(model.key("a"), null);
  assert.equal(model.key("Tab"), null);
});

test("keys: a frame too narrow to draw is not reached", () => {
  const nodes = withSliver();
  const model = new FlameModel(nodes, ROW);
  model.place(800);
  model.key("ArrowDown");
  model.key("ArrowRight");
  assert.equal(nodes[model.cursor].name, "b");
  assert.deepEqual(model.key("ArrowDown"), { zoomed: false, moved: false });
});

test("keys: Enter zooms into the keyboard's frame, Backspace out one level, Escape to everything", () => {
  const model = new FlameModel(single, ROW);
  model.place(200);
  assert.equal(model.key("Escape"), null, "not zoomed: Esc is the page's");
  assert.equal(model.key("Backspace"), null);
  model.key("ArrowDown");
  assert.deepEqual(model.key("Enter"), { zoomed: true, moved: false });
  assert.equal(model.zoom, 1);
  assert.equal(model.cursor, -1, "the keys start again from the zoomed frame");
  model.place(200);
  model.key("ArrowDown");
  model.key(" ");
  assert.equal(model.zoom, 2);
  assert.deepEqual(model.key("Backspace"), { zoomed: true, moved: false });
  assert.equal(model.zoom, 1);
  model.zoomTo(2);
  assert.deepEqual(model.key("Escape"), { zoomed: true, moved: false });
  assert.equal(model.zoom, 0);
});

test("keys: zoomed, up from the zoomed frame reaches its ancestors, and down comes back", () => {
  const model = new FlameModel(single, ROW);
  model.zoomTo(2);
  model.place(200);
  model.key("ArrowUp");
  model.key("ArrowUp");
  assert.equal(model.cursor, 0);
  model.key("ArrowDown");
  model.key("ArrowDown");
  assert.equal(model.cursor, 2);
  // b is not drawn when zoomed into a1: no sibling to reach from a.
  model.key("ArrowUp");
  assert.deepEqual(model.key("ArrowRight"), { zoomed: false, moved: false });
});

test("the keyboard's tooltip goes under its frame, near its left end", () => {
  const model = new FlameModel(single, ROW);
  model.place(200);
  assert.deepEqual(model.anchor(0), { x: 60, y: 20 });
  assert.deepEqual(model.anchor(3), { x: 160, y: 40 });
  assert.equal(model.anchor(99), null);
});

test("the compare page's graph places its two-weight nodes the same way", () => {
  const model = new FlameModel(twoWeight(diff), ROW);
  const rects = model.place(130);
  assert.deepEqual(
    rects.map((r) => [model.nodes[r.i].name, r.x, r.w, r.row]),
    [
      ["all", 0, 130, 0],
      ["grew", 0, 50, 1],
      ["shrank", 50, 50, 1],
      ["gone", 50, 20, 2],
      ["new", 100, 30, 1],
    ],
  );
});
