// node --test: the timeline's column units, bands and windows, on answers shaped like
// `GET /api/snapshots/{id}/timeline`.

import assert from "node:assert/strict";
import { test } from "node:test";
import { bandAt, bandOffset, bandRuns, clampWindow, columnOf, eventOfUnit, panWindow, prepare, unitOfEvent, zoomWindow } from "./timeline-model.js";

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
