// @ts-check
// Words for a change from a before side to an after side (pure): signed bytes and percents, the
// trend as a class name, a compared moment, and the parts of a frame as the diff writes it.

import { bytes, count } from "../lib/units.js";

/** "+1.50 GiB", "−512 MiB", "±0 B". */
export function signedBytes(n) {
  if (n === 0) return "±0 B";
  return `${n > 0 ? "+" : "−"}${bytes(Math.abs(n))}`;
}

/** "+245%", "−3.1%", "new" (from 0), "±0%". */
export function signedPercent(before, after) {
  if (before === after) return "±0%";
  if (before === 0) return "new";
  const p = ((after - before) * 100) / before;
  const abs = Math.abs(p);
  const text = abs >= 100 ? abs.toFixed(0) : abs >= 10 ? abs.toFixed(1) : abs.toFixed(abs >= 0.1 ? 1 : 2);
  return `${p > 0 ? "+" : "−"}${text}%`;
}

/** A percent the server computed, as `signedPercent` writes it. */
export function signedPercentFrom(p) {
  if (Math.abs(p) < 0.005) return "±0%";
  const abs = Math.abs(p);
  return `${p > 0 ? "+" : "−"}${abs >= 100 ? abs.toFixed(0) : abs.toFixed(1)}%`;
}

/** "+12", "−3", "±0". */
export function signedCount(n) {
  return `${n > 0 ? "+" : n < 0 ? "−" : "±"}${count(Math.abs(n))}`;
}

/** The class name of a change: `grow`, `shrink` or `same`. */
export function trend(delta) {
  return delta > 0 ? "grow" : delta < 0 ? "shrink" : "same";
}

/** The moment one side is compared at (`at`: an event index, null before the first event). */
export function momentText(totals) {
  return totals.at === null || totals.at === undefined ? "before the first event" : `event ${count(totals.at)}`;
}

/** The diff's frames are `file:line function` (or `file function`); `file` may be long. */
export function splitFrame(frame) {
  const m = /^(\S+?)(?::(\d+))? (.+)$/.exec(frame);
  if (!m) return { file: "", line: "", name: frame };
  return { file: m[1], line: m[2] ?? "", name: m[3] };
}

/** A frame standing for two paired outer callers (`"before ⇄ after"`), else null. */
export function pairedFrame(frame) {
  const parts = frame.split(" ⇄ ");
  return parts.length === 2 ? { before: parts[0], after: parts[1] } : null;
}

/** `?align=`: "auto" (also when absent or unknown), "off", or a number of outer frames to drop. */
export function alignFrom(value) {
  if (value === "off" || value === "0") return "off";
  if (value !== null && /^\d{1,3}$/.test(value) && Number(value) <= 256) return value;
  return "auto";
}

/** What an alignment did, in words: which outer frames of each side were paired (`further`: the same callers paired again at other lines). */
export function alignmentText(alignment, names, further = []) {
  const outer = (frames) => frames.slice(alignment.shared_frames).join(" › ");
  const again = further.length ? `, and the same callers again from ${further.length} other ${further.length === 1 ? "line" : "lines"}` : "";
  return `Aligned from the leaf side: ${names[0]}'s ${outer(alignment.before_frames)} is paired with ${names[1]}'s ${outer(alignment.after_frames)}, since ${alignment.matched_stacks} stacks below them continue alike${again}. Frames written “before ⇄ after” stand for both; everything under them is matched frame for frame.`;
}
