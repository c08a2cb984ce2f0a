// @ts-check
// Pure number formatting for every page (no DOM): bytes, counts, times, addresses.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/** Bytes in binary units, `digits` significant-ish decimals (3 significant digits by default). */
export function bytes(n, digits) {
  const sign = n < 0 ? "-" : "";
  let value = Math.abs(n);
  if (value < 1024) return `${sign}${Math.round(value)} B`;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const d = digits ?? (value >= 100 ? 0 : value >= 10 ? 1 : 2);
  return `${sign}${value.toFixed(d)} ${UNITS[unit]}`;
}

/** An axis label: "1.5 GiB", "512 MiB", "0" (no trailing zeros). */
export function bytesTick(n) {
  if (n === 0) return "0";
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number(value.toFixed(2))} ${UNITS[unit]}`;
}

const COUNT = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

/** 1234567 → "1,234,567". */
export function count(n) {
  return COUNT.format(Math.round(n));
}

/** 1234567 → "1.23M", 25000 → "25k". */
export function compact(n) {
  const abs = Math.abs(n);
  if (abs >= 1e9) return `${Number((n / 1e9).toFixed(2))}G`;
  if (abs >= 1e6) return `${Number((n / 1e6).toFixed(2))}M`;
  if (abs >= 1e4) return `${Number((n / 1e3).toFixed(1))}k`;
  return `${Math.round(n)}`;
}

/** Microseconds as "1.25 s", "340 ms", "12 µs", "2 min 5 s". */
export function duration(us) {
  const abs = Math.abs(us);
  if (abs < 1000) return `${Math.round(us)} µs`;
  if (abs < 1e6) return `${Number((us / 1000).toPrecision(3))} ms`;
  if (abs < 60e6) return `${Number((us / 1e6).toPrecision(3))} s`;
  const minutes = Math.floor(abs / 60e6);
  const seconds = Math.round((abs - minutes * 60e6) / 1e6);
  return `${us < 0 ? "-" : ""}${minutes} min ${seconds} s`;
}

/**
 * Time since the first event with microsecond resolution, so events a few µs apart read apart
 * (`duration` rounds to 3 digits: "151 ms" on every row of a busy step): "0.042 ms",
 * "151.234 ms", "12.345678 s", "2 min 03.456789 s".
 */
export function eventTime(us) {
  const abs = Math.abs(us);
  const sign = us < 0 ? "-" : "";
  if (abs < 1e6) return `${sign}${(abs / 1000).toFixed(3)} ms`;
  if (abs < 60e6) return `${sign}${(abs / 1e6).toFixed(6)} s`;
  const minutes = Math.floor(abs / 60e6);
  return `${sign}${minutes} min ${((abs - minutes * 60e6) / 1e6).toFixed(6).padStart(9, "0")} s`;
}

/** An address as 0x-hex. */
export function hex(n) {
  return `0x${Math.round(n).toString(16)}`;
}

/** Share as "12.3%". */
export function percent(part, whole) {
  if (!whole) return "0%";
  const p = (100 * part) / whole;
  return `${p >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)}%`;
}

/** Parses "1.5 GiB", "512MB", "2k", "1048576" into bytes (binary units; null when unreadable). */
export function parseBytes(text) {
  const m = /^\s*([\d.]+)\s*([kmgtp]?)(i?b?)\s*$/i.exec(text ?? "");
  if (!m) return null;
  const value = Number(m[1]);
  if (!Number.isFinite(value)) return null;
  const power = " kmgtp".indexOf(m[2].toLowerCase() || " ");
  return Math.round(value * 1024 ** Math.max(0, power));
}

/** "3 minutes ago", "yesterday", or a date, for an upload time in Unix milliseconds. */
export function relativeTime(ms, now = Date.now()) {
  const seconds = Math.round((now - ms) / 1000);
  if (seconds < 45) return "just now";
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} minute${minutes === 1 ? "" : "s"} ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 24) return `${hours} hour${hours === 1 ? "" : "s"} ago`;
  const days = Math.round(hours / 24);
  if (days === 1) return "yesterday";
  if (days < 7) return `${days} days ago`;
  return new Date(ms).toISOString().slice(0, 10);
}
