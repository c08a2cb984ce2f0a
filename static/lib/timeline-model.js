// @ts-check
// The allocation timeline's data model (pure). One answer of `GET …/timeline` is laid out in
// "column units": column c of the answer spans [c, c + 1). Views map column units to CSS px
// through the window they show, so the last answer can be drawn scaled while the next loads.

/** Prepares a timeline answer for drawing and hit-testing. */
export function prepare(data) {
  const cs = data.column_start ?? [];
  const n = Math.max(0, cs.length - 1);
  const bands = data.bands ?? { id: [], size: [], start: [], end: [], points: [] };
  const prepared = [];
  // Each band's role and why (absent from answers of servers without roles: "unknown").
  const roles = data.band_roles ?? { names: [], role: [], reasons: [], because: [] };
  for (let i = 0; i < bands.id.length; i += 1) {
    const start = bands.start[i] ?? data.start;
    const end = bands.end[i] ?? data.end;
    const c0 = columnOf(cs, Math.max(start, data.start));
    const c1 = columnOf(cs, Math.min(end, data.end));
    const flat = bands.points[i] ?? [];
    const cols = [];
    const offsets = [];
    for (let k = 0; k + 1 < flat.length; k += 2) {
      cols.push(flat[k]);
      offsets.push(flat[k + 1]);
    }
    const role = roles.names[roles.role[i]] ?? "unknown";
    const because = roles.reasons[roles.because[i]] ?? "";
    prepared.push({ index: i, id: bands.id[i], size: bands.size[i], start: bands.start[i], end: bands.end[i], role, because, c0, c1, cols, offsets });
  }
  const perColumn = n > 0 ? (cs[n] - cs[0]) / n : 1;
  return { data, n, cs, bands: prepared, perColumn, start: data.start, end: data.end, events: data.events };
}

/** The column holding event `e` (clamped to the answer's columns). */
export function columnOf(cs, e) {
  const n = cs.length - 1;
  if (n <= 0) return 0;
  let lo = 0;
  let hi = n - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (cs[mid] <= e) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** Event index (fractional; the boundary before event e is at e) → column units. */
export function unitOfEvent(model, e) {
  const { cs, n, perColumn } = model;
  if (n === 0) return 0;
  if (e <= cs[0]) return (e - cs[0]) / perColumn;
  if (e >= cs[n]) return n + (e - cs[n]) / perColumn;
  const c = columnOf(cs, e);
  const width = cs[c + 1] - cs[c];
  return c + (width > 0 ? (e - cs[c]) / width : 0);
}

/** Column units → event index (fractional), extrapolated outside the answer. */
export function eventOfUnit(model, u) {
  const { cs, n, perColumn } = model;
  if (n === 0) return 0;
  if (u <= 0) return cs[0] + u * perColumn;
  if (u >= n) return cs[n] + (u - n) * perColumn;
  const c = Math.floor(u);
  return cs[c] + (u - c) * (cs[c + 1] - cs[c]);
}

/** The bottom offset (bytes) of a prepared band in column c. */
export function bandOffset(band, c) {
  let offset = band.offsets[0] ?? 0;
  for (let k = 0; k < band.cols.length && band.cols[k] <= c; k += 1) offset = band.offsets[k];
  return offset;
}

/** The band under column units u and height `bytes`, or null. */
export function bandAt(model, u, bytes) {
  const c = Math.floor(u);
  if (c < 0 || c >= model.n) return null;
  for (let i = model.bands.length - 1; i >= 0; i -= 1) {
    const band = model.bands[i];
    if (c < band.c0 || c > band.c1) continue;
    const offset = bandOffset(band, c);
    if (bytes >= offset && bytes < offset + band.size) return band;
  }
  return null;
}

/** Where a prepared band is drawn: [{c0, c1, offset}] runs of columns (c1 exclusive). */
export function bandRuns(band) {
  const runs = [];
  for (let k = 0; k < band.cols.length; k += 1) {
    const from = Math.max(band.cols[k], band.c0);
    const to = Math.min(k + 1 < band.cols.length ? band.cols[k + 1] : band.c1 + 1, band.c1 + 1);
    if (to > from) runs.push({ c0: from, c1: to, offset: band.offsets[k] });
  }
  if (runs.length === 0 && band.cols.length === 0) runs.push({ c0: band.c0, c1: band.c1 + 1, offset: 0 });
  return runs;
}

/**
 * A new window [start, end] (inclusive events) zoomed by `factor` (< 1 zooms in) around column
 * units `u`, from the window [u0, u1] shown now; clamped to the trace and to `minSpan` events.
 */
export function zoomWindow(model, u0, u1, u, factor, minSpan = 16) {
  const a = u - (u - u0) * factor;
  const b = u + (u1 - u) * factor;
  return clampWindow(model, eventOfUnit(model, a), eventOfUnit(model, b), minSpan);
}

/** The window [u0, u1] moved by `du` column units, as events. */
export function panWindow(model, u0, u1, du) {
  const start = eventOfUnit(model, u0 + du);
  const end = eventOfUnit(model, u1 + du);
  const span = end - start;
  const last = model.events;
  let s = start;
  if (s < 0) s = 0;
  if (s + span > last) s = Math.max(0, last - span);
  return { start: Math.round(s), end: Math.min(last - 1, Math.round(s + span) - 1) };
}

/** Events [a, b) (fractional boundaries) as an inclusive window inside the trace. */
export function clampWindow(model, a, b, minSpan = 16) {
  const last = model.events;
  let start = Math.max(0, Math.floor(a));
  let endExclusive = Math.min(last, Math.ceil(b));
  const want = Math.min(minSpan, last);
  if (endExclusive - start < want) {
    const middle = (a + b) / 2;
    start = Math.max(0, Math.min(last - want, Math.round(middle - want / 2)));
    endExclusive = start + want;
  }
  return { start, end: Math.max(start, endExclusive - 1) };
}

/** The smallest byte range the y axis zooms to: a 512-byte block is then many pixels tall. */
export const MIN_BYTE_SPAN = 16 * 1024;

/**
 * The byte range [low, high] zoomed by `factor` (< 1 zooms in) around `bytes`, kept inside
 * [0, full]; null when it would show all of [0, full] (no zoom).
 */
export function zoomByteRange(range, full, bytes, factor) {
  const [low, high] = range ?? [0, full];
  const span = Math.max(MIN_BYTE_SPAN, (high - low) * factor);
  if (span >= full) return null;
  const share = high > low ? (bytes - low) / (high - low) : 0.5;
  return clampByteRange(bytes - share * span, bytes - share * span + span, full);
}

/** [a, b] as whole bytes inside [0, full], at least MIN_BYTE_SPAN wide; null when it is all of it. */
export function clampByteRange(a, b, full) {
  let low = Math.min(a, b);
  let high = Math.max(a, b);
  if (high - low < MIN_BYTE_SPAN) {
    const middle = (low + high) / 2;
    low = middle - MIN_BYTE_SPAN / 2;
    high = middle + MIN_BYTE_SPAN / 2;
  }
  if (low < 0) {
    high -= low;
    low = 0;
  }
  if (high >= full && low <= 0) return null;
  return [Math.max(0, Math.round(low)), Math.round(high)];
}

/** The grey (small allocations) part of column c: [from, to] bytes, from the top of the bands to the column's maximum. */
export function greyRange(model, c) {
  if (c < 0 || c >= model.n) return null;
  const from = model.data.big_top[c];
  const to = model.data.allocated_max[c];
  return to > from ? [from, to] : null;
}

/** What is under column units u and height `bytes`: a band, the grey part of a column, or nothing. */
export function hitAt(model, u, bytes) {
  const band = bandAt(model, u, bytes);
  if (band) return { kind: "band", band, column: Math.floor(u) };
  const c = Math.floor(u);
  const grey = greyRange(model, c);
  if (grey && bytes >= grey[0] && bytes <= grey[1]) return { kind: "grey", column: c };
  return { kind: "none", column: c };
}

/**
 * The grey part of each column split by role, in `order` (bottom first): the column's bytes of
 * each role (the `/roles` answer for the same columns, taken at the column's peak) less the
 * bytes of that role's bands live in the column, scaled to fill the grey part exactly.
 * Returns per column an array of [role, bytes] (empty where the answers' columns differ).
 */
export function greyByRole(model, roles) {
  const out = [];
  const same = roles && roles.n === model.n && roles.cs[0] === model.cs[0] && roles.cs[roles.n] === model.cs[model.n];
  if (!same) return out;
  const data = roles.data;
  const inBands = new Map();
  for (const band of model.bands) {
    let row = inBands.get(band.role);
    if (!row) {
      row = new Float64Array(model.n);
      inBands.set(band.role, row);
    }
    for (let c = Math.max(0, band.c0); c <= Math.min(model.n - 1, band.c1); c += 1) row[c] += band.size;
  }
  for (let c = 0; c < model.n; c += 1) {
    const grey = Math.max(0, model.data.allocated_max[c] - model.data.big_top[c]);
    const parts = [];
    let sum = 0;
    for (const role of roles.order) {
      const bytes = data.bytes[data.roles.indexOf(role)][c] - (inBands.get(role)?.[c] ?? 0);
      if (bytes > 0) {
        parts.push([role, bytes]);
        sum += bytes;
      }
    }
    const k = sum > 0 ? grey / sum : 0;
    out.push(parts.map(([role, bytes]) => [role, bytes * k]));
  }
  return out;
}

/**
 * Annotations at CSS px `x` grouped into clusters at least `gap` px apart, so thousands of them
 * read as a row of markers with counts, not a solid bar. Input sorted or not; each cluster has
 * its mean x, its annotations' count, first and last event and the names with their counts
 * (most frequent first).
 */
export function clusterAnnotations(marks, gap = 10) {
  const sorted = [...marks].sort((a, b) => a.x - b.x);
  const clusters = [];
  let current = null;
  for (const mark of sorted) {
    if (!current || mark.x - current.x0 >= gap) {
      current = { x0: mark.x, sumX: 0, count: 0, first: mark.event, last: mark.event, names: new Map() };
      clusters.push(current);
    }
    current.sumX += mark.x;
    current.count += 1;
    current.first = Math.min(current.first, mark.event);
    current.last = Math.max(current.last, mark.event);
    const name = `${mark.name ?? "annotation"}${mark.stage ? ` (${mark.stage})` : ""}`;
    current.names.set(name, (current.names.get(name) ?? 0) + 1);
  }
  return clusters.map((c) => ({
    x: c.sumX / c.count,
    count: c.count,
    first: c.first,
    last: c.last,
    names: [...c.names.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)),
  }));
}
