// @ts-check
// node --test: the view state in the URL, so a copied link opens what the sender saw.

import assert from "node:assert/strict";
import { test } from "node:test";
import { defaults, parse, serialize, TABS } from "./state.js";

test("the defaults serialize to an empty query and parse back", () => {
  assert.equal(serialize(defaults()), "");
  assert.deepEqual(parse(""), defaults());
  assert.deepEqual(parse("?"), defaults());
});

test("every field survives a round trip through the URL", () => {
  const state = {
    ...defaults(),
    tab: "timeline",
    device: 1,
    start: 100,
    end: 2500,
    axis: "time",
    at: 1234,
    alloc: 77,
    mode: "reserved",
    q: "linear & conv; 50% ?",
    zoom: "forward@model.py:12\u0001mm@ops.py:3",
    action: "free",
    min: 1048576,
    frame: "train.py",
  };
  const query = serialize(state);
  assert.ok(query.startsWith("?tab=timeline&device=1&axis=time&start=100&end=2500"), query);
  assert.deepEqual(parse(query), state);
  assert.deepEqual(parse(new URL(`http://host/s/1${query}`).search), state, "as the browser hands it back");
});

test("every tab round-trips; the overview is the default and not written", () => {
  for (const tab of TABS) assert.equal(parse(serialize({ ...defaults(), tab })).tab, tab);
  assert.equal(serialize({ ...defaults(), tab: "overview" }), "");
});

test("moment -1 (before the first event) and 0 are kept, not mistaken for 'none'", () => {
  assert.equal(parse(serialize({ ...defaults(), at: -1 })).at, -1);
  assert.equal(parse(serialize({ ...defaults(), at: 0 })).at, 0);
  assert.equal(parse(serialize({ ...defaults(), device: 0 })).device, 0);
});

test("malformed values fall back to the defaults", () => {
  const state = parse("?tab=nope&device=1.5&start=abc&end=&at=1e3&alloc=0x10&axis=sideways&mode=weird&min=-");
  assert.deepEqual(state, defaults());
});

test("integers with spaces are read; huge ones are kept as numbers", () => {
  assert.equal(parse("?at=%2012%20").at, 12);
  assert.equal(parse("?start=3199229&end=3199230").end, 3199230);
});

test("a window whose end is before its start is dropped", () => {
  const state = parse("?start=50&end=10");
  assert.equal(state.start, null);
  assert.equal(state.end, null);
  assert.equal(parse("?start=10&end=10").end, 10, "a one-event window is fine");
});

test("keys are written in a stable order whatever the object's order", () => {
  const a = serialize({ ...defaults(), q: "x", tab: "flame", at: 3 });
  const b = serialize({ at: 3, q: "x", tab: "flame" });
  assert.equal(a, b);
  assert.equal(a, "?tab=flame&at=3&q=x");
});

test("colour by role and the flame by role live in the URL; other values fall back", () => {
  const state = parse("?tab=timeline&color=role&by=role");
  assert.equal(state.color, "role");
  assert.equal(state.by, "role");
  assert.equal(serialize(state), "?tab=timeline&color=role&by=role");
  assert.equal(parse("?color=rainbow").color, "allocation");
  assert.equal(parse("?by=file").by, "stack");
  assert.equal(serialize({ ...defaults(), color: "allocation", by: "stack" }), "", "defaults are left out");
});

test("the timeline's byte zoom and detail round-trip, and a half or reversed zoom is dropped", () => {
  const state = parse("?tab=timeline&y0=1000&y1=50000&detail=500");
  assert.equal(state.y0, 1000);
  assert.equal(state.y1, 50000);
  assert.equal(state.detail, 500);
  assert.ok(serialize(state).includes("y0=1000&y1=50000&detail=500"), serialize(state));
  assert.equal(parse("?y0=1000").y0, null, "y0 alone");
  assert.equal(parse("?y0=5000&y1=1000").y1, null, "reversed");
  assert.equal(parse("?y0=-5&y1=1000").y0, null, "below zero");
  assert.equal(parse("?detail=0").detail, null);
});
