// @ts-check
// Scales and axis ticks (pure). Coordinate spaces used by the views:
//   data space   — bytes (y) and event indices or µs (x);
//   CSS px       — what layout and the mouse use;
//   device px    — CSS px × devicePixelRatio, only inside canvas setup.

import { bytesTick, compact } from "./units.js";

/** A linear map from [d0, d1] to [r0, r1] with its inverse. */
export function linear(d0, d1, r0, r1) {
  const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0);
  const map = (d) => r0 + (d - d0) * k;
  map.invert = (r) => (k === 0 ? d0 : d0 + (r - r0) / k);
  map.domain = [d0, d1];
  map.range = [r0, r1];
  return map;
}

/** Step of about `(max - min) / count` rounded to 1, 2, 2.5 or 5 × 10^k. */
export function niceStep(span, count) {
  if (!(span > 0)) return 1;
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

/** Decimal ticks in [min, max]. */
export function ticks(min, max, count) {
  const step = niceStep(max - min, count);
  const out = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** Byte ticks from 0 to at least `max`: steps of 1, 2, 2.5 or 5 × 10^k in the unit that fits. */
export function byteTicks(max, count = 5) {
  if (!(max > 0)) return { ticks: [{ value: 0, label: "0" }], top: 1 };
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(max) / Math.log(1024)));
  const step = niceStep(max / unit, count) * unit;
  const top = Math.ceil(max / step - 1e-9) * step;
  const out = [];
  for (let v = 0; v <= top + step / 2; v += step) out.push({ value: v, label: bytesTick(v) });
  return { ticks: out, top };
}

/**
 * Byte ticks inside [low, high] (a zoomed byte axis): steps of 1, 2, 2.5 or 5 × 10^k in the unit
 * of `high`, labelled with as many decimals as the step needs, so no two labels read the same.
 */
export function byteRangeTicks(low, high, count = 5) {
  if (!(high > low)) return [{ value: low, label: bytesTick(low) }];
  const unitIndex = Math.max(0, Math.min(5, Math.floor(Math.log(Math.max(1, high)) / Math.log(1024))));
  const unit = 1024 ** unitIndex;
  const step = niceStep((high - low) / unit, count) * unit;
  const decimals = decimalsOf(step / unit);
  const names = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  const out = [];
  for (let v = Math.ceil(low / step - 1e-9) * step; v <= high + step * 1e-9; v += step) {
    const value = Math.round(v);
    out.push({ value, label: value === 0 ? "0" : `${(value / unit).toFixed(decimals)} ${names[unitIndex]}` });
  }
  return out;
}

/** Decimals that write `step` exactly (0.25 → 2, 5 → 0), at most 6. */
function decimalsOf(step) {
  let decimals = 0;
  while (decimals < 6 && Math.abs(Number(step.toFixed(decimals)) - step) > 1e-9 * Math.max(1, step)) decimals += 1;
  return decimals;
}

/** Ticks for an event-index axis: "250k", "1.5M", "1.4312M" (as many digits as the step needs). */
export function eventTicks(start, end, count) {
  const step = Math.max(1, niceStep(end - start, count));
  const top = Math.max(Math.abs(start), Math.abs(end));
  const [unit, suffix] = top >= 1e6 ? [1e6, "M"] : top >= 1e4 ? [1e3, "k"] : [1, ""];
  // As many decimals as the step has in this unit: a step of 0.25M needs two ("0.25M", not "0.3M").
  let decimals = 0;
  while (decimals < 6 && Math.abs(Number((step / unit).toFixed(decimals)) - step / unit) > 1e-9) decimals += 1;
  const out = [];
  for (let v = Math.ceil(start / step) * step; v <= end + 1e-9; v += step) {
    const value = Math.round(v);
    out.push({ value, label: value === 0 ? "0" : unit === 1 ? compact(value) : `${Number((value / unit).toFixed(decimals))}${suffix}` });
  }
  return out;
}

/**
 * Ticks for a time axis in µs since `origin`: "1.5 s", "250 ms", "164.2 ms". One unit for the
 * whole axis (the largest value's) and as many decimals as the step needs in it, so a zoomed
 * axis reads "164.2 ms, 164.4 ms", never "164 ms, 164 ms".
 */
export function timeTicks(t0, t1, origin, count) {
  const values = ticks(t0 - origin, t1 - origin, count);
  if (values.length === 0) return [];
  const step = values.length > 1 ? values[1] - values[0] : niceStep(t1 - t0, count);
  const top = Math.max(...values.map(Math.abs));
  const [unit, name] = top >= 1e6 ? [1e6, "s"] : top >= 1e3 ? [1e3, "ms"] : [1, "µs"];
  const decimals = decimalsOf(step / unit);
  return values.map((v) => ({ value: v + origin, label: v === 0 ? "0" : `${(v / unit).toFixed(decimals)} ${name}` }));
}

/** Clamps `x` to [lo, hi]. */
export function clamp(x, lo, hi) {
  return Math.min(hi, Math.max(lo, x));
}
