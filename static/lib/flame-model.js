// The flame graph's model (pure): icicle layout in bytes, subtrees, search, exports.
// Nodes come from `GET …/flame` in depth-first order (children follow their parent), each with
// its width in `bytes`. The compare page's differential graph uses the same layout through the
// two-weight mode below: nodes carry `before_bytes` and `after_bytes`, `twoWeight` gives them a
// width, and `change` says how much they grew or shrank (the colour).

/** x0 (bytes from the left) of each node, children lists, subtree ends, deepest depth. */
export function layout(nodes) {
  const n = nodes.length;
  const x0 = new Float64Array(n);
  const cursor = new Float64Array(n);
  const children = Array.from({ length: n }, () => []);
  const subtreeEnd = new Int32Array(n);
  let maxDepth = 0;
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
    while (stack.length && nodes[stack[stack.length - 1]].depth >= node.depth) subtreeEnd[stack.pop()] = i;
    stack.push(i);
  }
  while (stack.length) subtreeEnd[stack.pop()] = n;
  return { x0, children, subtreeEnd, maxDepth };
}

/** The chain root … i. */
export function ancestors(nodes, i) {
  const chain = [];
  for (let k = i; k >= 0; k = nodes[k].parent) chain.unshift(k);
  return chain;
}

/** Bytes a node holds itself (not through its children). */
export function selfBytes(nodes, lay, i) {
  let sum = 0;
  for (const c of lay.children[i]) sum += nodes[c].bytes;
  return Math.max(0, nodes[i].bytes - sum);
}

/** Whether a node matches a search (case-insensitive, in its name or file). */
export function matches(node, query) {
  if (!query) return false;
  const q = query.toLowerCase();
  return node.name.toLowerCase().includes(q) || (node.file ?? "").toLowerCase().includes(q) || (node.path ?? "").toLowerCase().includes(q);
}

/**
 * Search: which nodes match, and their bytes counted once (a match under a match is not added).
 * `within` (`{root, end}`: a zoomed node and its subtree's end from `layout`) limits the count and
 * bytes to that subtree, what a zoomed graph draws; a match above the root covers all of it.
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

/** A node as a file-name part: "forward-linear.py-134", only letters, digits, `.`, `_` and `-`. */
export function zoomName(node) {
  const text = node.file ? `${node.name}-${node.file}-${node.line}` : node.name;
  return text.replace(/[^\w.-]+/g, "_").slice(0, 80);
}

/** A stable key for a node (its chain of frames), to find it again in another answer. */
export function keyOf(nodes, i) {
  return ancestors(nodes, i)
    .map((k) => `${nodes[k].name}@${nodes[k].file}:${nodes[k].line}`)
    .join("\u0001");
}

/** The node with `key`, or -1. */
export function findKey(nodes, key) {
  if (!key) return -1;
  for (let i = 0; i < nodes.length; i += 1) if (keyOf(nodes, i) === key) return i;
  return -1;
}

/** A frame as one label: "forward (linear.py:134)". */
export function frameLabel(node) {
  return node.file ? `${node.name} (${node.file}:${node.line})` : node.name;
}

/** Folded stacks ("frame;frame;… bytes" per leaf's own bytes), under `root` (default: all). */
export function folded(nodes, lay, root = 0) {
  const lines = [];
  const end = lay.subtreeEnd[root];
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

function escapeXml(text) {
  return String(text).replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]);
}

/**
 * The graph as a standalone SVG: the subtree of `focus` scaled to `width`, its ancestors full
 * width above it, matching frames outlined. `color(node)` gives each frame's fill.
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
    if (w < 0.3) continue;
    rect(i, (lay.x0[i] - lay.x0[focus]) * scale, w);
  }
  parts.push("</svg>");
  return parts.join("\n");
}

// ---------------------------------------------------------------------------------------------
// Two weights (before and after): the differential flame graph.

/**
 * Nodes with `before_bytes` and `after_bytes` (depth-first, as above), given the `bytes` every
 * function here lays out by: the larger side, so a frame that vanished or appeared still shows.
 * Children's larger sides can add up to more than their parent's (one grew, its sibling shrank),
 * so a parent is widened to hold them: a child never overflows its parent in the layout.
 */
export function twoWeight(nodes) {
  const out = nodes.map((node) => ({ ...node, bytes: Math.max(node.before_bytes, node.after_bytes) }));
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
 */
export function change(node) {
  const larger = Math.max(node.before_bytes, node.after_bytes);
  return larger === 0 ? 0 : (node.after_bytes - node.before_bytes) / larger;
}
