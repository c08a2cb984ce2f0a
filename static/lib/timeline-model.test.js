// @ts-check
// node --test: the timeline's column units, bands and windows, on answers shaped like
// `GET /api/snapshots/{id}/timeline`.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  bandAt,
  bandOffset,
  bandRuns,
  clampByteRange,
  clampWindow,
  clusterAnnotations,
  columnOf,
  eventOfUnit,
  greyByRole,
  greyRange,
  hitAt,
  MIN_BYTE_SPAN,
  panWindow,
  prepare,
  unitOfEvent,
  zoomByteRange,
  zoomWindow,
} from "./timeline-model.js";

/** An answer of 4 columns over events 0..99 (25 a column) with two bands. */
function answer() {
  return {
    events: 100,
    start: 0,
    end: 99,
    column_start: [0, 25, 50, 75, 100],
    bands: {
      id: [7, 9],
      size: [1000, 500],
      // Band 7 lives the whole trace at offset 0; band 9 from event 30 to 80, at 1000 then at 0
      // from column 3 (band 7 freed under it would slide it down).
      start: [null, 30],
      end: [null, 80],
      points: [
        [0, 0],
        [1, 1000, 3, 0],
      ],
    },
  };
}

test("prepare lays out columns and bands", () => {
  const model = prepare(answer());
  assert.equal(model.n, 4);
  assert.equal(model.perColumn, 25);
  assert.equal(model.events, 100);
  assert.equal(model.bands.length, 2);
  const [a, b] = model.bands;
  assert.deepEqual([a.id, a.c0, a.c1], [7, 0, 3], "a band alive throughout spans every column");
  assert.deepEqual([b.id, b.c0, b.c1], [9, 1, 3]);
  assert.deepEqual(b.cols, [1, 3]);
  assert.deepEqual(b.offsets, [1000, 0]);
});

test("prepare of an empty answer has no columns and no bands", () => {
  const model = prepare({ events: 0, start: 0, end: 0 });
  assert.equal(model.n, 0);
  assert.deepEqual(model.bands, []);
  assert.equal(unitOfEvent(model, 5), 0);
  assert.equal(eventOfUnit(model, 5), 0);
  assert.equal(bandAt(model, 0, 0), null);
});

test("columnOf finds the column holding an event, clamped to the answer", () => {
  const cs = [0, 25, 50, 75, 100];
  assert.equal(columnOf(cs, 0), 0);
  assert.equal(columnOf(cs, 24), 0);
  assert.equal(columnOf(cs, 25), 1);
  assert.equal(columnOf(cs, 99), 3);
  assert.equal(columnOf(cs, 100), 3);
  assert.equal(columnOf(cs, -5), 0);
  assert.equal(columnOf(cs, 1e9), 3);
  assert.equal(columnOf([], 3), 0);
  assert.equal(columnOf([0], 3), 0);
});

test("event ↔ column units round trip inside and outside the answer", () => {
  const model = prepare(answer());
  for (const e of [0, 1, 12.5, 25, 60, 99, 100, -50, 150]) {
    assert.ok(Math.abs(eventOfUnit(model, unitOfEvent(model, e)) - e) < 1e-9, `event ${e}`);
  }
  assert.equal(unitOfEvent(model, 50), 2);
  assert.equal(unitOfEvent(model, 100), 4);
  assert.equal(unitOfEvent(model, -25), -1, "extrapolated at the answer's own density");
  assert.equal(eventOfUnit(model, 4.5), 112.5);
});

test("uneven columns (a zoomed window) map through their own widths", () => {
  const model = prepare({ events: 1000, start: 100, end: 199, column_start: [100, 110, 190, 200] });
  assert.equal(unitOfEvent(model, 105), 0.5);
  assert.equal(unitOfEvent(model, 150), 1.5);
  assert.equal(eventOfUnit(model, 2.5), 195);
});

test("a band's offset and runs follow its points", () => {
  const [a, b] = prepare(answer()).bands;
  assert.equal(bandOffset(b, 1), 1000);
  assert.equal(bandOffset(b, 2), 1000);
  assert.equal(bandOffset(b, 3), 0);
  assert.deepEqual(bandRuns(b), [
    { c0: 1, c1: 3, offset: 1000 },
    { c0: 3, c1: 4, offset: 0 },
  ]);
  assert.deepEqual(bandRuns(a), [{ c0: 0, c1: 4, offset: 0 }]);
  assert.deepEqual(bandRuns({ cols: [], offsets: [], c0: 2, c1: 2 }), [{ c0: 2, c1: 3, offset: 0 }], "no points: one run at 0");
});

test("bandAt finds the band under a point, the topmost first, and nothing outside", () => {
  const model = prepare(answer());
  assert.equal(bandAt(model, 0.5, 0)?.id, 7);
  assert.equal(bandAt(model, 0.5, 999)?.id, 7);
  assert.equal(bandAt(model, 0.5, 1000), null, "the top edge belongs to what is above");
  assert.equal(bandAt(model, 1.5, 1200)?.id, 9);
  assert.equal(bandAt(model, 3.5, 100)?.id, 9, "band 9 slid down to 0 and is drawn over band 7");
  assert.equal(bandAt(model, -0.1, 10), null);
  assert.equal(bandAt(model, 4, 10), null);
});

test("zooming in keeps the point under the pointer and never goes under the minimum span", () => {
  const model = prepare(answer());
  assert.deepEqual(zoomWindow(model, 0, 4, 2, 0.5), { start: 25, end: 74 });
  assert.deepEqual(zoomWindow(model, 0, 4, 0, 0.5), { start: 0, end: 49 });
  const tiny = zoomWindow(model, 0, 4, 2, 0.001);
  assert.equal(tiny.end - tiny.start + 1, 16, "at least 16 events");
  const out = zoomWindow(model, 1, 3, 2, 10);
  assert.deepEqual(out, { start: 0, end: 99 }, "zooming out stops at the trace");
});

test("panning moves the window and stops at either end without shrinking it", () => {
  const model = prepare(answer());
  assert.deepEqual(panWindow(model, 1, 2, 1), { start: 50, end: 74 });
  assert.deepEqual(panWindow(model, 1, 2, -5), { start: 0, end: 24 });
  assert.deepEqual(panWindow(model, 1, 2, 5), { start: 75, end: 99 });
});

test("clampWindow: inside the trace, at least the minimum span, a trace shorter than it whole", () => {
  const model = prepare(answer());
  assert.deepEqual(clampWindow(model, -10, 500), { start: 0, end: 99 });
  assert.deepEqual(clampWindow(model, 50, 52), { start: 43, end: 58 });
  assert.deepEqual(clampWindow(model, 98, 99), { start: 84, end: 99 });
  const short = { ...model, events: 5 };
  assert.deepEqual(clampWindow(short, 2, 3), { start: 0, end: 4 });
  assert.deepEqual(clampWindow({ ...model, events: 1 }, 0, 1), { start: 0, end: 0 });
});

test("bands carry their role and why from band_roles; answers without them say unknown", () => {
  const data = answer();
  data.band_roles = { names: ["parameter", "activation"], role: [0, 1], reasons: ["kept", "freed by backward"], because: [0, 1] };
  const model = prepare(data);
  assert.equal(model.bands[0].role, "parameter");
  assert.equal(model.bands[1].role, "activation");
  assert.equal(model.bands[1].because, "freed by backward");
  const bare = prepare(answer());
  assert.equal(bare.bands[0].role, "unknown");
  assert.equal(bare.bands[0].because, "");
});

// Issue 20: the byte zoom, the grey part's hit test and split by role, clustered annotations.

test("zoomByteRange zooms around a height, stays in [0, full], and null means the whole axis", () => {
  const full = 8 * 2 ** 30;
  const half = zoomByteRange(null, full, 2 * 2 ** 30, 0.5);
  assert.ok(half[1] - half[0] <= full / 2 + 1, `${half}`);
  // The height under the pointer stays where it was on screen (a quarter up).
  assert.ok(Math.abs((2 * 2 ** 30 - half[0]) / (half[1] - half[0]) - 0.25) < 1e-6);
  assert.equal(zoomByteRange(half, full, 2 * 2 ** 30, 4), null, "zooming out past the whole axis");
  const low = zoomByteRange(null, full, 0, 0.1);
  assert.equal(low[0], 0, "never below 0");
  // Never narrower than MIN_BYTE_SPAN.
  let range = null;
  for (let i = 0; i < 60; i += 1) range = zoomByteRange(range, full, 2 ** 30, 0.2);
  assert.equal(range[1] - range[0], MIN_BYTE_SPAN);
  assert.deepEqual(clampByteRange(-100, 5000, full), [0, MIN_BYTE_SPAN]);
  assert.equal(clampByteRange(0, full, full), null);
});

test("hitAt tells a band, the grey part of a column and empty space apart", () => {
  const model = prepare({
    start: 0,
    end: 3,
    events: 4,
    column_start: [0, 1, 2, 3, 4],
    allocated_max: [100, 150, 150, 100],
    allocated_min: [100, 120, 150, 100],
    big_top: [60, 60, 60, 0],
    bands: { id: [7], size: [60], start: [null], end: [3], points: [[0, 0]] },
  });
  assert.equal(hitAt(model, 1.5, 30).kind, "band");
  assert.equal(hitAt(model, 1.5, 30).band.id, 7);
  assert.deepEqual(hitAt(model, 1.5, 100), { kind: "grey", column: 1 });
  assert.deepEqual(hitAt(model, 1.5, 149), { kind: "grey", column: 1 });
  assert.equal(hitAt(model, 1.5, 151).kind, "none");
  assert.deepEqual(greyRange(model, 3), [0, 100]);
  assert.equal(greyRange(model, 9), null);
});

test("greyByRole splits each column's grey part by role, less the bands' bytes, filling it exactly", () => {
  const model = prepare({
    start: 0,
    end: 1,
    events: 2,
    column_start: [0, 1, 2],
    allocated_max: [100, 200],
    allocated_min: [100, 200],
    big_top: [60, 60],
    bands: { id: [1], size: [60], start: [null], end: [null], points: [[0, 0]] },
    band_roles: { names: ["parameter"], role: [0], reasons: [""], because: [0] },
  });
  const roles = {
    n: 2,
    cs: [0, 1, 2],
    order: ["parameter", "activation"],
    data: {
      roles: ["parameter", "activation"],
      bytes: [
        [70, 70],
        [30, 130],
      ],
    },
  };
  const parts = greyByRole(model, roles);
  // Column 0: parameter 70 - 60 in bands = 10, activation 30: grey 40 split 10 / 30.
  assert.deepEqual(parts[0], [
    ["parameter", 10],
    ["activation", 30],
  ]);
  const sum = parts[1].reduce((a, [, b]) => a + b, 0);
  assert.ok(Math.abs(sum - 140) < 1e-9, `column 1 fills its grey: ${sum}`);
  assert.deepEqual(greyByRole(model, { ...roles, n: 3, cs: [0, 1, 2, 3] }), [], "other columns: nothing");
});

test("clusterAnnotations groups marks closer than the gap, counting names", () => {
  const marks = [
    { x: 10, event: 5, name: "step", stage: "START" },
    { x: 14, event: 9, name: "step", stage: "END" },
    { x: 12, event: 7, name: "step", stage: "START" },
    { x: 40, event: 30, name: "zero_grad" },
  ];
  const clusters = clusterAnnotations(marks, 10);
  assert.equal(clusters.length, 2);
  assert.equal(clusters[0].count, 3);
  assert.equal(clusters[0].first, 5);
  assert.equal(clusters[0].last, 9);
  assert.deepEqual(clusters[0].names, [
    ["step (START)", 2],
    ["step (END)", 1],
  ]);
  assert.equal(clusters[0].x, 12);
  assert.equal(clusters[1].count, 1);
  // A mark per pixel over 1000 px: a hundred markers at most.
  const dense = Array.from({ length: 4000 }, (_, i) => ({ x: i / 4, event: i, name: "a" }));
  assert.ok(clusterAnnotations(dense, 10).length <= 100);
});
