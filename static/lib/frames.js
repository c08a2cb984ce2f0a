// @ts-check
// Pure (no DOM): how the views show a stack frame.

/**
 * @typedef {object} Frame a frame as the API sends it
 * @property {string} name
 * @property {string} [filename]
 * @property {number} [line]
 * @property {boolean} [hidden] one PyTorch's viewer leaves out (its own internals)
 */

/**
 * A frame as "name  file.py:123" parts: the function, and the file's base name with the line.
 * @param {Frame} frame
 * @returns {{name: string, where: string}}
 */
export function frameParts(frame) {
  const base = (frame.filename ?? "").split("/").pop();
  return { name: frame.name, where: base ? `${base}:${frame.line}` : "" };
}

/**
 * Frames PyTorch's viewer shows (hidden ones filtered), innermost first.
 * @template {Frame} F
 * @param {F[]} frames
 * @param {boolean} [showAll] keep the hidden ones too
 * @returns {F[]}
 */
export function visibleFrames(frames, showAll = false) {
  return showAll ? frames : frames.filter((f) => !f.hidden);
}
