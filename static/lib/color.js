// @ts-check
// Colours for marks (pure): stable per key, readable on light and dark backgrounds.

/** A 32-bit hash of a string or number. */
export function hash(value) {
  const text = String(value);
  let h = 2166136261;
  for (let i = 0; i < text.length; i += 1) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  h ^= h >>> 13;
  h = Math.imul(h, 0x5bd1e995);
  return (h ^ (h >>> 15)) >>> 0;
}

/** An allocation band's colour: hues spread by the golden angle, soft saturation. */
export function bandColor(id, dark) {
  const hue = ((hash(id) % 360) + id * 137.508) % 360;
  const s = 45 + (hash(id + 7) % 20);
  const l = dark ? 52 + (hash(id + 3) % 10) : 62 + (hash(id + 3) % 12);
  return `hsl(${hue.toFixed(0)} ${s}% ${l}%)`;
}

/** A flame-graph frame colour by file: warm hues for Python code, blue-grey for the rest. */
export function frameColor(name, file, dark) {
  if (!file) {
    if (name.startsWith("free")) return dark ? "hsl(140 20% 34%)" : "hsl(140 30% 80%)";
    if (name.startsWith("pending")) return dark ? "hsl(32 70% 40%)" : "hsl(32 90% 72%)";
    if (name === "rounding") return dark ? "hsl(0 0% 40%)" : "hsl(0 0% 72%)";
    return dark ? "hsl(220 14% 38%)" : "hsl(220 18% 78%)";
  }
  const h = hash(file);
  const hue = 8 + (h % 42);
  const l = dark ? 40 + ((h >>> 8) % 12) : 60 + ((h >>> 8) % 14);
  return `hsl(${hue} ${68 + ((h >>> 16) % 20)}% ${l}%)`;
}

/** Hue and saturation of each built-in role: set apart so that neighbours in the stack differ. */
const ROLE_HUES = {
  parameter: [217, 62],
  gradient: [275, 48],
  optimizer_state: [32, 80],
  comm_buffer: [245, 35],
  activation: [350, 70],
  output: [320, 55],
  kv_cache: [190, 65],
  workspace: [55, 45],
  temporary: [170, 42],
  input: [100, 42],
};

/** A role's colour, the same in every view; custom roles get a stable hue of their own. */
export function roleColor(role, dark) {
  if (role === "unknown") return dark ? "hsl(220 8% 46%)" : "hsl(220 10% 70%)";
  const [hue, s] = ROLE_HUES[role] ?? [hash(role) % 360, 55];
  return `hsl(${hue} ${s}% ${dark ? 56 : 58}%)`;
}
