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
