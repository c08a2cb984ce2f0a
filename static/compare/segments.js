// @ts-check
// The segments in only one of the two snapshots (torch's `_memory_viz.py compare`), drawn from
// the server's structure; torch's own text is fetched only to be read or downloaded.

import { bytes, count, hex } from "../lib/units.js";
import { h } from "../views/dom.js";

/** Fills `#torch-compare` from `segments` (`{only_before, only_after, folded_lines}`). */
export function segmentsSection(segments, ids, names) {
  const section = document.getElementById("torch-compare");
  const grid = document.getElementById("torch-only");
  grid.replaceChildren();
  for (const [key, side, name] of [
    ["only_before", "before", names[0]],
    ["only_after", "after", names[1]],
  ]) {
    const only = segments[key];
    const total = only.reduce((sum, s) => sum + s.total_size, 0);
    const live = only.reduce((sum, s) => sum + s.live_bytes, 0);
    const rows = only.map((s) =>
      h(
        "li",
        {
          title: `Segment at ${hex(s.address)} (${s.address}), stream ${s.stream}: ${bytes(s.total_size)} in ${count(s.blocks)} block${s.blocks === 1 ? "" : "s"}, ${bytes(s.live_bytes)} in live blocks`,
        },
        h("code", {}, hex(s.address)),
        h("span", { className: "seg-size" }, bytes(s.total_size)),
        h("span", { className: "seg-live muted" }, `${bytes(s.live_bytes)} live`),
      ),
    );
    grid.append(
      h(
        "div",
        { className: `only only-${side}`, dataset: { only: key } },
        h("h4", {}, h("span", { className: "side-dot" }), `Only in ${name} `, h("span", { className: "muted" }, `(${key})`)),
        h(
          "p",
          { className: "only-count" },
          h("strong", { dataset: { count: key } }, count(only.length)),
          ` ${only.length === 1 ? "segment" : "segments"}`,
          only.length ? ` · ${bytes(total)}, ${bytes(live)} in live blocks` : "",
        ),
        only.length
          ? h("ol", { className: "seg-list" }, rows)
          : h("p", { className: "muted small" }, "None: every segment of this snapshot is in the other one too."),
      ),
    );
  }
  document.getElementById("torch-lines").textContent = `${count(segments.folded_lines)} lines`;
  const textUrl = `/api/compare/${ids[0]}/${ids[1]}/torch.txt`;
  const pre = document.getElementById("torch-text");
  const details = /** @type {HTMLDetailsElement} */ (section.querySelector("details.folded"));
  // Fetched on first opening: the text can be long, and most visits never read it.
  details.addEventListener("toggle", async () => {
    if (!details.open || pre.textContent) return;
    pre.textContent = "Loading torch's text…";
    try {
      const response = await fetch(textUrl);
      if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
      pre.textContent = await response.text();
    } catch (error) {
      pre.textContent = `torch's text could not load: ${error.message}. Close and open again to retry.`;
      details.addEventListener("toggle", () => (pre.textContent = ""), { once: true });
    }
  });
  const download = /** @type {HTMLAnchorElement} */ (document.getElementById("torch-download"));
  download.href = textUrl;
  download.download = `compare-${names[0]}-${names[1]}.txt`.replace(/[^\w.-]+/g, "_");
  section.hidden = false;
}
