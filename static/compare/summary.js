// @ts-check
// One device's totals side by side, and its stacks by change in live bytes.

import { roleColor } from "../lib/color.js";
import { roleHelp } from "../lib/roles.js";
import { bytes, count } from "../lib/units.js";
import { h } from "../views/dom.js";
import { theme } from "../views/theme.js";
import { signedBytes, signedCount, signedPercent, signedPercentFrom, splitFrame, trend } from "./change.js";

/** @type {[label: string, key: string, help: string, format: (n: number) => string][]} */
const TOTALS = [
  [
    "Peak allocated",
    "peak_allocated_bytes",
    "The most memory tensors held at once: requested bytes of live allocations, replayed through the trace as PyTorch's viewer does.",
    bytes,
  ],
  [
    "Peak reserved",
    "peak_reserved_bytes",
    "The most memory the caching allocator held from CUDA at once (segments, including cached free blocks): roughly what nvidia-smi shows, without the CUDA context.",
    bytes,
  ],
  ["Allocated at snapshot", "allocated_bytes_at_snapshot", "Requested bytes of live tensors when the snapshot was taken.", bytes],
  ["Reserved at snapshot", "reserved_bytes_at_snapshot", "Bytes held in segments when the snapshot was taken.", bytes],
  ["Allocations", "allocations", "Allocations made during the recorded trace.", count],
];

/** The totals cards; `growth` is the server's peak growth in percent (null from zero). */
export function totalsCards(device, names, growth) {
  const grid = h("div", { className: "cmp-totals" });
  for (const [label, key, help, format] of TOTALS) {
    const before = device.before[key];
    const after = device.after[key];
    const delta = after - before;
    const larger = Math.max(before, after, 1);
    const percent = key === "peak_allocated_bytes" && growth !== null ? signedPercentFrom(growth) : signedPercent(before, after);
    const deltaText = format === bytes ? signedBytes(delta) : signedCount(delta);
    const barBefore = h("span", { className: "tbar tbar-before" });
    const barAfter = h("span", { className: "tbar tbar-after" });
    barBefore.style.width = `${(100 * before) / larger}%`;
    barAfter.style.width = `${(100 * after) / larger}%`;
    grid.append(
      h(
        "div",
        {
          className: `cmp-total ${key === "peak_allocated_bytes" ? "cmp-total-peak" : ""}`,
          title: `${help}\n${names[0]}: ${format(before)}\n${names[1]}: ${format(after)}\nChange: ${deltaText} (${percent})`,
          dataset: { total: key },
        },
        h("span", { className: "label" }, label),
        h(
          "span",
          { className: "pair" },
          h("span", { className: "v v-before", dataset: { side: "before" } }, format(before)),
          h("span", { className: "pair-arrow", "aria-label": "to" }, "→"),
          h("span", { className: "v v-after", dataset: { side: "after" } }, format(after)),
        ),
        h("span", { className: "bars", "aria-hidden": "true" }, h("span", { className: "track" }, barBefore), h("span", { className: "track" }, barAfter)),
        h(
          "span",
          { className: `delta ${trend(delta)}` },
          h("span", { className: "delta-bytes" }, deltaText),
          h("span", { className: "delta-percent", dataset: { percent: key } }, percent),
        ),
      ),
    );
  }
  return grid;
}

/** Wrappers that say little about where memory went. */
const PLUMBING = new Set(["_wrapped_call_impl", "_call_impl", "wrapper", "__call__", "_fn", "inner", "decorate_context"]);

/** The innermost frame, and the innermost frame of other code that called it (skipping plumbing). */
function stackHeadline(frames) {
  const inner = frames[frames.length - 1] ?? "<non-python>";
  const innerFile = splitFrame(inner).file;
  for (let i = frames.length - 2; i >= 0; i -= 1) {
    const f = splitFrame(frames[i]);
    if (f.file !== innerFile && !PLUMBING.has(f.name) && f.file !== "module.py") return { inner, via: frames[i] };
  }
  return { inner, via: null };
}

const STACKS_SHOWN = 12;

/** The stacks by change, largest growth first; the first dozen shown, the rest on request. */
export function stacksList(stacks) {
  const largest = Math.max(1, ...stacks.map((s) => Math.abs(s.delta_bytes)));
  const list = h("ol", { className: "cmp-stacks", "aria-label": "Stacks by change in live bytes, largest growth first" });
  stacks.forEach((stack, i) => {
    const { inner, via } = stackHeadline(stack.frames);
    const bar = h("span", { className: `dbar ${trend(stack.delta_bytes)}` });
    bar.style.width = `${Math.max(1.5, (100 * Math.abs(stack.delta_bytes)) / largest)}%`;
    const frames = h(
      "ol",
      { className: "frames", "aria-label": "Stack, innermost call first" },
      [...stack.frames].reverse().map((f) => h("li", { title: f }, f)),
    );
    const allocations = `${count(stack.before_allocations)} → ${count(stack.after_allocations)} allocations`;
    list.append(
      h(
        "li",
        { className: "cmp-stack", hidden: i >= STACKS_SHOWN },
        h(
          "details",
          {},
          h(
            "summary",
            {
              title: `${signedBytes(stack.delta_bytes)}: ${bytes(stack.before_bytes)} before, ${bytes(stack.after_bytes)} after, ${allocations}. Click for the whole stack.`,
            },
            h("span", { className: `cs-delta ${trend(stack.delta_bytes)}` }, signedBytes(stack.delta_bytes)),
            h("span", { className: "cs-sides" }, `${bytes(stack.before_bytes)} → ${bytes(stack.after_bytes)}`),
            h("span", { className: "cs-meter", "aria-hidden": "true" }, bar),
            h("span", { className: "cs-where" }, h("span", { className: "cs-inner" }, inner), via ? h("span", { className: "cs-via" }, `via ${via}`) : null),
            h("span", { className: "cs-count" }, allocations),
          ),
          frames,
        ),
      ),
    );
  });
  const wrap = h("div", {}, list);
  if (stacks.length > STACKS_SHOWN) {
    const more = h("button", { type: "button", className: "button button-small show-more" }, `Show all ${stacks.length} stacks`);
    more.addEventListener("click", () => {
      for (const row of /** @type {HTMLCollectionOf<HTMLElement>} */ (list.children)) row.hidden = false;
      more.remove();
    });
    wrap.append(more);
  }
  return wrap;
}

/** The change per role at the compared moments ("activation +6.00 GiB"), largest change first. */
export function rolesChange(roles, names) {
  const largest = Math.max(1, ...roles.map((r) => Math.max(r.before_bytes, r.after_bytes)));
  const { dark } = theme();
  const list = h("ol", { className: "cmp-roles", "aria-label": "Live bytes by role, largest change first" });
  for (const role of roles) {
    const bar = (side, value) => {
      const el = h("span", { className: `rbar rbar-${side}` });
      el.style.width = `${(100 * value) / largest}%`;
      el.style.background = roleColor(role.role, dark);
      return h("span", { className: "track" }, el);
    };
    const swatch = h("span", { className: "role-swatch", "aria-hidden": "true" });
    swatch.style.background = roleColor(role.role, dark);
    list.append(
      h(
        "li",
        {
          className: "cmp-role",
          tabIndex: 0,
          dataset: { role: role.role, delta: String(role.delta_bytes) },
          title: `${role.role}: ${roleHelp(role.role)}\n${names[0]}: ${bytes(role.before_bytes)}\n${names[1]}: ${bytes(role.after_bytes)}`,
        },
        h("span", { className: "cr-name" }, swatch, role.role),
        h("span", { className: `cr-delta ${trend(role.delta_bytes)}` }, signedBytes(role.delta_bytes)),
        h("span", { className: "cr-sides" }, `${bytes(role.before_bytes)} → ${bytes(role.after_bytes)}`),
        h("span", { className: "bars", "aria-hidden": "true" }, bar("before", role.before_bytes), bar("after", role.after_bytes)),
      ),
    );
  }
  return list;
}

/** One line for the headline: the roles that changed, largest first ("activation +6.00 GiB · …"). */
export function rolesHeadline(roles) {
  return roles
    .filter((r) => r.delta_bytes !== 0)
    .slice(0, 3)
    .map((r) => `${r.role} ${signedBytes(r.delta_bytes)}`)
    .join(" · ");
}
