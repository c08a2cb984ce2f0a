// @ts-check
// The flame graph's model (pure: no DOM, no canvas), shared by the snapshot page's Flame tab
// (views/flame.js) and the compare page's differential graph (compare/flame.js): icicle layout
// in bytes, subtrees, search, exports, and `FlameModel`, which places the frames in CSS px for a
// zoom, hit-tests them, names the breadcrumb and moves between frames from the keyboard. The
// views only paint what it placed and pass it their events.
// Nodes come from `GET …/flame` in depth-first order (children follow their parent), each with
// its width in `bytes`. The compare page's differential graph uses the same layout through the
// two-weight mode below: nodes carry `before_bytes` and `after_bytes`, `twoWeight` gives them a
// width, and `change` says how much they grew or shrank (the colour).

/**
 * A frame of the graph: the root (index 0, `parent` -1) is everything.
 * @typedef {object} FlameNode
 * @property {string} name
 * @property {string} [file]
 * @property {string} [path]
 * @property {number} [line]
 * @property {number} bytes its width (for two-weight nodes: set by `twoWeight`)
 * @property {number} parent index of its parent, -1 for the root
 * @property {number} depth 0 for the root
 * @property {number} [allocations]
 * @property {number} [before_bytes] two-weight nodes only
 * @property {number} [after_bytes] two-weight nodes only
 */

/**
 * What `layout` gives: x0 (bytes from the left) of each node, children lists, where each
 * node's subtree ends (exclusive index), the deepest depth.
 * @typedef {{ x0: Float64Array, children: number[][], subtreeEnd: Int32Array, maxDepth: number }} FlameLayout
 */

/**
 * @param {FlameNode[]} nodes
 * @returns {FlameLayout}
 */
export function layout(nodes) {
  const n = nodes.length;
  const x0 = new Float64Array(n);
  const cursor = new Float64Array(n);
  /** @type {number[][]} */
  const children = Array.from({ length: n }, () => []);
  const subtreeEnd = new Int32Array(n);
  let maxDepth = 0;
  /** @type {number[]} */
  const stack = [];
  for (let i = 0; i < n; i += 1) {
    const node = nodes[i];
    const p = node.parent;
    if (p >= 0) {
      x0[i] = cursor[p];
      cursor[p] += node.bytes;
      children[p].push(i);
    }
    cursor[i] = x0[i];
    maxDepth = Math.max(maxDepth, node.depth);
    while (stack.length && nodes[stack[stack.length - 1]].depth >= node.depth) subtreeEnd[/** @type {number} */ (stack.pop())] = i;
    stack.push(i);
  }
  while (stack.length) subtreeEnd[/** @type {number} */ (stack.pop())] = n;
  return { x0, children, subtreeEnd, maxDepth };
}

/**
 * The chain root … i.
 * @param {FlameNode[]} nodes
 * @param {number} i
 */
export function ancestors(nodes, i) {
  /** @type {number[]} */
  const chain = [];
  for (let k = i; k >= 0; k = nodes[k].parent) chain.unshift(k);
  return chain;
}

/**
 * Bytes a node holds itself (not through its children).
 * @param {FlameNode[]} nodes
 * @param {FlameLayout} lay
 * @param {number} i
 */
export function selfBytes(nodes, lay, i) {
  let sum = 0;
  for (const c of lay.children[i]) sum += nodes[c].bytes;
  return Math.max(0, nodes[i].bytes - sum);
}

/**
 * Whether a node matches a search (case-insensitive, in its name or file).
 * @param {FlameNode} node
 * @param {string} query
 */
export function matches(node, query) {
  if (!query) return false;
  const q = query.toLowerCase();
  return node.name.toLowerCase().includes(q) || (node.file ?? "").toLowerCase().includes(q) || (node.path ?? "").toLowerCase().includes(q);
}

/**
 * Search: which nodes match, and their bytes counted once (a match under a match is not added).
 * `within` (`{root, end}`: a zoomed node and its subtree's end from `layout`) limits the count and
 * bytes to that subtree, what a zoomed graph draws; a match above the root covers all of it.
 * @param {FlameNode[]} nodes
 * @param {string} query
 * @param {{ root: number, end: number } | null} [within]
 * @returns {{ hit: Uint8Array, bytes: number, count: number }}
 */
export function search(nodes, query, within = null) {
  const hit = new Uint8Array(nodes.length);
  const covered = new Uint8Array(nodes.length);
  let bytes = 0;
  let count = 0;
  if (!query) return { hit, bytes, count };
  const from = within ? within.root : 0;
  const to = within ? within.end : nodes.length;
  // Matched above the zoom: everything drawn is under a match already.
  let coveredAbove = false;
  if (within) for (let k = nodes[from].parent; k > 0; k = nodes[k].parent) coveredAbove ||= matches(nodes[k], query);
  if (coveredAbove) covered[from] = 1;
  for (let i = from; i < to; i += 1) {
    const p = nodes[i].parent;
    if (i > from && p >= 0 && covered[p]) covered[i] = 1;
    if (i > 0 && matches(nodes[i], query)) {
      hit[i] = 1;
      count += 1;
      if (!covered[i]) bytes += nodes[i].bytes;
      covered[i] = 1;
    }
  }
  if (coveredAbove) bytes = nodes[from].bytes;
  return { hit, bytes, count };
}

/**
 * A node as a file-name part: "forward-linear.py-134", only letters, digits, `.`, `_` and `-`.
 * @param {FlameNode} node
 */
export function zoomName(node) {
  const text = node.file ? `${node.name}-${node.file}-${node.line}` : node.name;
  return text.replace(/[^\w.-]+/g, "_").slice(0, 80);
}

/**
 * A stable key for a node (its chain of frames), to find it again in another answer.
 * @param {FlameNode[]} nodes
 * @param {number} i
 */
export function keyOf(nodes, i) {
  return ancestors(nodes, i)
    .map((k) => `${nodes[k].name}@${nodes[k].file}:${nodes[k].line}`)
    .join("\u0001");
}

/**
 * The node with `key`, or -1.
 * @param {FlameNode[]} nodes
 * @param {string | null | undefined} key
 */
export function findKey(nodes, key) {
  if (!key) return -1;
  for (let i = 0; i < nodes.length; i += 1) if (keyOf(nodes, i) === key) return i;
  return -1;
}

/**
 * A frame as one label: "forward (linear.py:134)".
 * @param {FlameNode} node
 */
export function frameLabel(node) {
  return node.file ? `${node.name} (${node.file}:${node.line})` : node.name;
}

/**
 * Folded stacks ("frame;frame;… bytes" per leaf's own bytes), under `root` (default: all).
 * @param {FlameNode[]} nodes
 * @param {FlameLayout} lay
 * @param {number} [root]
 */
export function folded(nodes, lay, root = 0) {
  /** @type {string[]} */
  const lines = [];
  const end = lay.subtreeEnd[root];
  /** @type {string[]} */
  const path = [];
  for (let i = root; i < end; i += 1) {
    const depth = nodes[i].depth - nodes[root].depth;
    path.length = depth;
    path.push(frameLabel(nodes[i]).replaceAll(";", ","));
    const own = selfBytes(nodes, lay, i);
    const names = path.slice(nodes[root].parent < 0 ? 1 : 0);
    if (own > 0 && names.length) lines.push(`${names.join(";")} ${own}`);
  }
  return `${lines.join("\n")}\n`;
}

/** @type {Record<string, string>} */
const XML_ESCAPES = { "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" };

/** @param {unknown} text */
function escapeXml(text) {
  return String(text).replace(/[<>&"']/g, (c) => XML_ESCAPES[c]);
}

/**
 * The graph as a standalone SVG: the subtree of `focus` scaled to `width`, its ancestors full
 * width above it, matching frames outlined. `color(node)` gives each frame's fill.
 * @param {FlameNode[]} nodes
 * @param {FlameLayout} lay
 * @param {{ focus?: number, width?: number, row?: number, title?: string, color: (node: FlameNode) => string,
 *   hit?: Uint8Array | null, describe?: (i: number) => string }} options
 */
export function svg(nodes, lay, { focus = 0, width = 1200, row = 18, title = "", color, hit, describe }) {
  const chain = ancestors(nodes, focus);
  const end = lay.subtreeEnd[focus];
  const depthRows = lay.maxDepth + 1;
  const top = title ? 28 : 4;
  const height = top + depthRows * row + 4;
  const scale = nodes[focus].bytes > 0 ? width / nodes[focus].bytes : 0;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
  ];
  if (title) parts.push(`<text x="4" y="18" font-size="13" font-weight="600" fill="#1b2130">${escapeXml(title)}</text>`);
  /** @type {(i: number, x: number, w: number) => void} */
  const rect = (i, x, w) => {
    const y = top + nodes[i].depth * row;
    const label = frameLabel(nodes[i]);
    const fits = Math.floor((w - 6) / 6.2);
    const text = fits >= 3 ? (label.length > fits ? `${label.slice(0, fits - 1)}…` : label) : "";
    parts.push(
      `<g><title>${escapeXml(describe ? describe(i) : label)}</title>` +
        `<rect x="${x.toFixed(2)}" y="${y}" width="${Math.max(0.5, w - 0.5).toFixed(2)}" height="${row - 1}" rx="2" fill="${color(nodes[i])}"${hit?.[i] ? ' stroke="#d6336c" stroke-width="2"' : ""}/>` +
        (text ? `<text x="${(x + 4).toFixed(2)}" y="${y + row - 5}" fill="#1b2130">${escapeXml(text)}</text>` : "") +
        `</g>`,
    );
  };
  for (const i of chain.slice(0, -1)) rect(i, 0, width);
  for (let i = focus; i < end; i += 1) {
    const w = nodes[i].bytes * scale;
    if (w < MIN_FRAME_PX) {
      i = lay.subtreeEnd[i] - 1;
      continue;
    }
    rect(i, (lay.x0[i] - lay.x0[focus]) * scale, w);
  }
  parts.push("</svg>");
  return parts.join("\n");
}

// ---------------------------------------------------------------------------------------------
// The interactive graph: placement, hit-testing, zoom, breadcrumb and keys.

/**
 * Frames narrower than this many CSS px are not drawn, hit-tested or reached by the keys, nor is
 * their subtree (a child is never wider than its parent). Half a CSS px: below it a frame covers
 * less than one device pixel even on a 2x screen, so it shows only as an antialiased smear that
 * the pointer cannot land on, and skipping such subtrees keeps a huge graph cheap to place.
 * (The two views had drifted to 0.5 and 0.35; the SVG export used 0.3.)
 */
export const MIN_FRAME_PX = 0.5;

/**
 * A placed frame, in CSS px from the canvas's top left corner. `row` is the node's depth (the
 * root's row is 0); `ancestor` marks the zoomed frame's ancestors, drawn full width above it.
 * @typedef {{ i: number, x: number, y: number, w: number, row: number, ancestor: boolean }} FlameRect
 */

/**
 * A step of the breadcrumb: the root ("all"), the zoomed frame's ancestors, the zoomed frame.
 * @typedef {{ i: number, label: string, title: string, current: boolean }} FlameCrumb
 */

/**
 * What a key did: `zoomed` when the zoom changed, `moved` when the keyboard's frame did; null when
 * the key is not the graph's (or had nothing to do: Esc or Backspace unzoomed), so the page may
 * use it.
 * @typedef {{ zoomed: boolean, moved: boolean } | null} FlameKeyResult
 */

/** The graph's state: the zoom, the frame under the pointer, the frame the keys are on. */
export class FlameModel {
  /**
   * @param {FlameNode[]} nodes depth-first, root first (two-weight nodes after `twoWeight`)
   * @param {number} rowHeight CSS px per depth
   */
  constructor(nodes, rowHeight) {
    this.nodes = nodes;
    this.lay = layout(nodes);
    this.rowHeight = rowHeight;
    /** The frame zoomed into (0: everything). */
    this.zoom = 0;
    /** The frame the keyboard is on (-1: none). */
    this.cursor = -1;
    /** The frame under the pointer (-1: none). */
    this.hover = -1;
    /** @type {FlameRect[]} what the last `place` laid out, in drawing order */
    this.rects = [];
  }

  /**
   * Places the frames for a canvas `width` CSS px wide: the zoomed frame's ancestors full width,
   * then its subtree scaled to the width.
   * @param {number} width
   * @returns {FlameRect[]}
   */
  place(width) {
    const { nodes, lay, zoom, rowHeight } = this;
    /** @type {FlameRect[]} */
    const rects = [];
    const chain = ancestors(nodes, zoom);
    for (const i of chain.slice(0, -1)) rects.push({ i, x: 0, w: width, y: nodes[i].depth * rowHeight, row: nodes[i].depth, ancestor: true });
    // The zoomed frame fills the width even when it holds no bytes (and then alone).
    rects.push({ i: zoom, x: 0, w: width, y: nodes[zoom].depth * rowHeight, row: nodes[zoom].depth, ancestor: false });
    const scale = nodes[zoom].bytes > 0 ? width / nodes[zoom].bytes : 0;
    const end = scale > 0 ? lay.subtreeEnd[zoom] : zoom + 1;
    for (let i = zoom + 1; i < end; i += 1) {
      const w = nodes[i].bytes * scale;
      if (w < MIN_FRAME_PX) {
        i = lay.subtreeEnd[i] - 1;
        continue;
      }
      const row = nodes[i].depth;
      rects.push({ i, x: (lay.x0[i] - lay.x0[zoom]) * scale, w, y: row * rowHeight, row, ancestor: false });
    }
    this.rects = rects;
    return rects;
  }

  /** Rows the last `place` filled (the deepest drawn frame's row + 1). */
  rowsDrawn() {
    let rows = 1;
    for (const r of this.rects) rows = Math.max(rows, r.row + 1);
    return rows;
  }

  /**
   * The frame drawn at (x, y) CSS px in the canvas, or -1.
   * @param {number} x
   * @param {number} y
   */
  at(x, y) {
    const row = Math.floor(y / this.rowHeight);
    return this.rects.find((r) => r.row === row && x >= r.x && x < r.x + r.w)?.i ?? -1;
  }

  /**
   * Where node `i` was placed, if it was.
   * @param {number} i
   */
  rectOf(i) {
    return this.rects.find((r) => r.i === i);
  }

  /**
   * Sets the frame under the pointer; whether it changed (the outline needs painting).
   * @param {number} i
   */
  hoverOn(i) {
    if (i === this.hover) return false;
    this.hover = i;
    return true;
  }

  /** The frame to outline: the keyboard's, else the pointer's (-1: none). */
  marked() {
    return this.cursor >= 0 ? this.cursor : this.hover;
  }

  /**
   * Zooms into node `i` (0: everything); the keyboard starts again from it.
   * @param {number} i
   */
  zoomTo(i) {
    this.zoom = i >= 0 && i < this.nodes.length ? i : 0;
    this.cursor = -1;
  }

  /**
   * The zoom a click on frame `i` asks for: into it, or one level up when it is the zoomed frame.
   * @param {number} i
   */
  clickZoom(i) {
    return i === this.zoom && i !== 0 ? Math.max(0, this.nodes[i].parent) : i;
  }

  /** @returns {FlameCrumb[]} */
  crumbs() {
    return ancestors(this.nodes, this.zoom).map((i) => ({
      i,
      label: i === 0 ? "all" : this.nodes[i].name,
      title: frameLabel(this.nodes[i]),
      current: i === this.zoom,
    }));
  }

  /**
   * The keyboard (key: `KeyboardEvent.key`): arrows move between drawn frames (up to the parent,
   * down to the first child, left and right among siblings), Enter or Space zooms into the
   * keyboard's frame (the zoomed one before any arrow), Backspace zooms out one level, Escape
   * to everything.
   * @param {string} key
   * @returns {FlameKeyResult}
   */
  key(key) {
    const { nodes, lay } = this;
    const current = this.cursor >= 0 ? this.cursor : this.zoom;
    const parent = nodes[current].parent;
    /** @param {number} i */
    const drawn = (i) => this.rects.some((r) => r.i === i);
    let next = -1;
    if (key === "ArrowUp") next = parent;
    else if (key === "ArrowDown") next = lay.children[current].find(drawn) ?? -1;
    else if (key === "ArrowLeft" || key === "ArrowRight") {
      const siblings = parent >= 0 ? lay.children[parent].filter(drawn) : [];
      next = siblings[siblings.indexOf(current) + (key === "ArrowLeft" ? -1 : 1)] ?? -1;
    } else if (key === "Enter" || key === " ") {
      this.zoomTo(current);
      return { zoomed: true, moved: false };
    } else if (key === "Backspace" || key === "Escape") {
      if (this.zoom === 0) return null;
      this.zoomTo(key === "Escape" ? 0 : Math.max(0, nodes[this.zoom].parent));
      return { zoomed: true, moved: false };
    } else return null;
    // An arrow: the graph's, even at an edge (the page's arrows must not act meanwhile).
    if (next < 0) return { zoomed: false, moved: false };
    this.cursor = next;
    return { zoomed: false, moved: true };
  }

  /**
   * Where a tooltip for frame `i` goes when the keyboard is on it (CSS px in the canvas): under
   * the frame, near its left end.
   * @param {number} i
   * @returns {{ x: number, y: number } | null}
   */
  anchor(i) {
    const r = this.rectOf(i);
    return r ? { x: r.x + Math.min(r.w / 2, 60), y: r.y + this.rowHeight } : null;
  }
}

// ---------------------------------------------------------------------------------------------
// Two weights (before and after): the differential flame graph.

/**
 * Nodes with `before_bytes` and `after_bytes` (depth-first, as above), given the `bytes` every
 * function here lays out by: the larger side, so a frame that vanished or appeared still shows.
 * Children's larger sides can add up to more than their parent's (one grew, its sibling shrank),
 * so a parent is widened to hold them: a child never overflows its parent in the layout.
 * @param {FlameNode[]} nodes
 * @returns {FlameNode[]}
 */
export function twoWeight(nodes) {
  const out = nodes.map((node) => ({ ...node, bytes: Math.max(node.before_bytes ?? 0, node.after_bytes ?? 0) }));
  const childrenWidth = new Float64Array(out.length);
  // Children follow their parent, so walking backwards sees every child before its parent.
  for (let i = out.length - 1; i >= 0; i -= 1) {
    out[i].bytes = Math.max(out[i].bytes, childrenWidth[i]);
    const p = out[i].parent;
    if (p >= 0) childrenWidth[p] += out[i].bytes;
  }
  return out;
}

/**
 * How much a two-weight node changed, in [-1, 1]: the change relative to its larger side
 * (1: it appeared, -1: it vanished, 0: unchanged).
 * @param {FlameNode} node
 */
export function change(node) {
  const before = node.before_bytes ?? 0;
  const after = node.after_bytes ?? 0;
  const larger = Math.max(before, after);
  return larger === 0 ? 0 : (after - before) / larger;
}
