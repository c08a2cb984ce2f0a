// @ts-check
// The OOM explainer: when a snapshot holds an out-of-memory event, the overview opens on a
// panel saying what happened at that event, from GET /api/snapshots/{id}/oom.

import { bytes, count } from "../lib/units.js";
import { h } from "./dom.js";

const SETTINGS_SHOWN = ["PYTORCH_CUDA_ALLOC_CONF", "expandable_segments", "max_split_size", "garbage_collection_threshold", "roundup_power2_divisions"];

function number(label, value, title) {
  return h("div", { className: "oom-number", title }, h("span", { className: "label" }, label), h("span", { className: "value" }, value));
}

function settingText(value) {
  if (value === "") return "(empty)";
  if (typeof value === "object" && value !== null) {
    const set = Object.entries(value).filter(([, v]) => v !== 0);
    return set.length === 0 ? "(default)" : set.map(([k, v]) => `${k}:${v}`).join(", ");
  }
  return String(value);
}

function panel(report) {
  const verdict = report.verdict === "fragmentation" ? "Fragmentation" : "Exhaustion";
  const at = `?tab=timeline&at=${report.event_index}${report.device ? `&device=${report.device}` : ""}`;
  const segmentsAt = `?tab=segments&at=${report.event_index}${report.device ? `&device=${report.device}` : ""}`;
  const pools = h(
    "table",
    { className: "oom-pools" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["Stream", "Pool", "Free (cached)", "Largest free block", "Segments"].map((t) => h("th", {}, t)),
      ),
    ),
    h(
      "tbody",
      {},
      report.free_by_pool.map((pool) =>
        h(
          "tr",
          { className: pool.stream === report.stream && pool.pool[0] === 0 && pool.pool[1] === 0 ? "oom-own-pool" : "" },
          h("td", {}, pool.stream === 0 ? "default" : String(pool.stream)),
          h("td", {}, pool.pool[0] === 0 && pool.pool[1] === 0 ? "default" : `(${pool.pool.join(", ")})`),
          h("td", { className: "num" }, bytes(pool.free_bytes)),
          h("td", { className: "num" }, bytes(pool.largest_free_block)),
          h("td", { className: "num" }, count(pool.segments)),
        ),
      ),
    ),
  );
  const settings = SETTINGS_SHOWN.filter((key) => key in (report.allocator_settings ?? {})).map((key) =>
    h("li", {}, h("code", {}, key), " ", settingText(report.allocator_settings[key])),
  );
  return h(
    "article",
    { className: "oom-panel", id: `oom-${report.device}-${report.event_index}` },
    h(
      "header",
      {},
      h("h2", {}, `Out of memory on cuda:${report.device}`),
      h("span", { className: `oom-verdict oom-verdict-${report.verdict}`, title: "Read from the segment map at the OOM event" }, verdict),
      h("span", { className: "muted small" }, `event ${count(report.event_index)}${report.map_exact ? " · the snapshot was taken at this moment" : ""}`),
    ),
    h("p", { className: "oom-explanation" }, report.explanation),
    // Said once where it changes what "reserved" and "fragmentation" mean (issue 20).
    report.allocator_settings?.expandable_segments === true
      ? h(
          "p",
          { className: "oom-expandable muted" },
          "Expandable segments are on: each segment grows and shrinks in place (segment_map / segment_unmap), so reserved memory is mapped ranges rather than fixed cudaMalloc segments, and the free space above is gaps between live blocks inside them.",
        )
      : null,
    h(
      "div",
      { className: "oom-numbers" },
      number("Requested", bytes(report.requested_bytes), "What the failing allocation asked for"),
      number(
        "Free on the device",
        report.device_free_bytes === null ? "unknown" : bytes(report.device_free_bytes),
        "What CUDA reported free when the allocator gave up",
      ),
      number("Reserved", bytes(report.reserved_bytes), "Segments the caching allocator held"),
      number("Allocated", bytes(report.allocated_bytes), "Requested bytes of live tensors"),
      number("Free in segments", bytes(report.free_in_segments_bytes), "Cached free blocks, reusable by requests that fit"),
      number("Rounding", bytes(report.rounding_bytes), "Bytes lost to rounding requests up to block sizes"),
    ),
    h("h3", {}, "Free space by stream and pool"),
    // Scrolls on its own on a phone instead of widening the page.
    h("div", { className: "oom-table-wrap" }, pools),
    report.hints.length ? h("h3", {}, "What to try") : null,
    report.hints.length
      ? h(
          "ul",
          { className: "oom-hints" },
          report.hints.map((hint) => h("li", {}, hint)),
        )
      : null,
    report.top_stacks.length ? h("h3", {}, "Holding the most memory at that moment") : null,
    report.top_stacks.length
      ? h(
          "ol",
          { className: "oom-stacks" },
          report.top_stacks
            .slice(0, 5)
            .map((stack) =>
              h("li", { title: stack.frames.join("\n") }, h("span", { className: "num" }, bytes(stack.bytes)), " ", h("code", {}, shortFrame(stack.frames[0]))),
            ),
        )
      : null,
    settings.length ? h("details", { className: "oom-settings" }, h("summary", {}, "Allocator settings in effect"), h("ul", {}, settings)) : null,
    h(
      "p",
      { className: "oom-links" },
      h("a", { className: "button", href: at }, "See it on the timeline"),
      " ",
      h("a", { className: "button", href: segmentsAt }, "Segments at this moment"),
    ),
  );
}

/** `/long/path/linear.py:134:forward` → `linear.py:134 forward`. */
function shortFrame(frame) {
  const match = /^(.*):(\d+):(.*)$/.exec(frame ?? "");
  if (!match) return frame ?? "";
  return `${match[1].split("/").pop()}:${match[2]} ${match[3]}`;
}

/** Replaces the overview's OOM banners with the explainer, if the snapshot has OOM events. */
export async function showOomPanels(id) {
  const banners = document.querySelectorAll("#overview .banner-oom");
  if (banners.length === 0) return;
  const overview = document.getElementById("overview");
  try {
    const response = await fetch(`/api/snapshots/${id}/oom`);
    if (!response.ok) throw new Error(`the server answered ${response.status}`);
    const reports = await response.json();
    if (reports.length === 0) return;
    const section = h(
      "section",
      { className: "oom-explainer", "aria-label": "Out-of-memory explainer" },
      reports.map((r) => panel(r)),
    );
    overview.prepend(section);
    for (const banner of banners) banner.remove();
  } catch (error) {
    overview.prepend(h("p", { className: "banner banner-oom" }, `The OOM explainer could not load: ${error.message}`));
  }
}
