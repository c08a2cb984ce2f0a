// The timeline's side: the pinned allocation's facts and stack, and the legend under the chart.

import { roleColor } from "../../lib/color.js";
import { ROLES, roleHelp } from "../../lib/roles.js";
import { bytes, count, duration, hex } from "../../lib/units.js";
import { allocation, frameParts, h, theme, visibleFrames } from "../common.js";

export async function renderSide(view) {
  const s = view.state();
  const side = view.side;
  if (s.alloc === null) {
    side.replaceChildren(
      h("h3", {}, "Allocation"),
      h(
        "p",
        { className: "muted small" },
        "Hover a band to see what it is; click one to pin its whole stack here. Grey is allocations too small to draw one by one at this zoom.",
      ),
    );
    return;
  }
  const id = s.alloc;
  side.replaceChildren(h("h3", {}, "Allocation"), h("p", { className: "muted small" }, "Loading…"));
  let info;
  try {
    info = await allocation(view.ctx.id, view.device() ?? 0, id);
  } catch (error) {
    if (view.state().alloc === id)
      side.replaceChildren(h("h3", {}, "Allocation"), h("p", { className: "view-error" }, `Allocation ${id} could not load. ${error.message}`));
    return;
  }
  if (view.state().alloc !== id) return;
  const frames = info.frames;
  const hidden = frames.filter((f) => f.hidden).length;
  const shown = visibleFrames(frames, view.showAllFrames);
  const go = (label, at, title) =>
    at === null ? null : h("button", { type: "button", className: "button button-small", title, onclick: () => view.ctx.setMoment(at) }, label);
  side.replaceChildren(
    h(
      "div",
      { className: "side-head" },
      h("h3", {}, bytes(info.size)),
      h(
        "button",
        { type: "button", className: "close-button", title: "Unpin (Esc)", "aria-label": "Unpin", onclick: () => view.ctx.store.set({ alloc: null }) },
        "×",
      ),
    ),
    h("p", { className: "side-id" }, h("code", {}, info.block_id)),
    h(
      "dl",
      { className: "side-facts" },
      info.role
        ? [
            h("dt", {}, "Role"),
            h(
              "dd",
              { title: info.because },
              h("span", { className: "role-chip", style: `--role:${roleColor(info.role, theme().dark)}` }, info.role),
              h("div", { className: "muted small" }, info.because),
            ),
          ]
        : null,
      h("dt", {}, "Size"),
      h("dd", {}, `${bytes(info.size)} (${count(info.size)} B)`),
      h("dt", {}, "Allocated"),
      h("dd", {}, info.start === null ? "before the trace began" : `event ${count(info.start)}`),
      h("dt", {}, "Freed"),
      h("dd", {}, info.end === null ? "never (alive at the snapshot)" : `event ${count(info.end)}`),
      info.start_time_us !== null && info.end_time_us !== null
        ? [h("dt", {}, "Lived"), h("dd", {}, `${duration(info.end_time_us - info.start_time_us)} · ${count(info.end - info.start)} events`)]
        : null,
      h("dt", {}, "Stream"),
      h("dd", {}, String(info.stream)),
      h("dt", {}, "Address"),
      h("dd", {}, h("code", {}, hex(info.addr))),
      info.origin !== "traced"
        ? [h("dt", {}, "Origin"), h("dd", {}, info.origin === "freed_without_alloc" ? "freed without a recorded alloc (the trace starts later)" : info.origin)]
        : null,
    ),
    h(
      "div",
      { className: "side-actions" },
      go("Go to alloc", info.start, "Move the moment to its allocation"),
      go("Go to free", info.end, "Move the moment to its free"),
    ),
    h(
      "div",
      { className: "side-frames-head" },
      h("h4", {}, "Stack"),
      hidden
        ? h(
            "label",
            { className: "small", title: "PyTorch's viewer hides frames of its own machinery; show them too" },
            h("input", {
              type: "checkbox",
              checked: view.showAllFrames,
              onchange: (e) => {
                view.showAllFrames = e.target.checked;
                renderSide(view);
              },
            }),
            ` all frames (${hidden} hidden)`,
          )
        : null,
    ),
    shown.length
      ? h(
          "ol",
          { className: "side-frames", "aria-label": "Stack, innermost call first" },
          shown.map((f) =>
            h(
              "li",
              { className: f.hidden ? "frame-hidden" : "", title: `${f.filename}:${f.line}` },
              h("span", { className: "frame-name" }, f.name),
              h("span", { className: "frame-where" }, frameParts(f).where),
            ),
          ),
        )
      : h("p", { className: "muted small" }, "No Python frames were recorded for this allocation (recorded with stacks disabled, or made by C++ code)."),
  );
}

export function renderLegend(view) {
  const item = (cls, text, title) => h("li", { title }, h("span", { className: `swatch ${cls}` }), text);
  const byRole = view.state().color === "role";
  const roleItems = byRole
    ? ROLES.map((role) =>
        h(
          "li",
          { title: roleHelp(role), dataset: { role } },
          h("span", { className: "swatch", style: `background:${roleColor(role, theme().dark)}` }),
          role.replace("_", " "),
        ),
      )
    : [];
  const items = [
    ...roleItems,
    byRole
      ? null
      : item(
          "sw-bands",
          "allocations (one colour each)",
          "Each band is one allocation, stacked in allocation order: new ones on top; when one is freed, those above slide down.",
        ),
    item(
      "sw-small",
      "smaller allocations",
      "Allocations too small to draw alone at this zoom, summed per column: darker up to the column's lowest total, lighter up to its highest (spikes).",
    ),
    item("sw-reserved", "reserved", "Bytes the caching allocator holds from CUDA (segments)."),
    item("sw-peak", "peak", "The most live bytes at once."),
    item("sw-moment", "selected moment", "Every view shows memory right after this event."),
    item("sw-oom", "out of memory", "An allocation that failed."),
    item("sw-annotation", "annotation", "external_annotations (e.g. optimizer steps); hover one."),
    ...(view.ctx.incomplete ? [item("sw-incomplete", "history incomplete", view.ctx.incomplete)] : []),
  ];
  view.legend.replaceChildren(...items.filter(Boolean));
}
