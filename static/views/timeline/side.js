// @ts-check
// The timeline's side: the pinned allocation's facts and stack, and the legend under the chart.

import { allocation, getJSON } from "../../lib/api.js";
import { roleColor } from "../../lib/color.js";
import { frameParts, visibleFrames } from "../../lib/frames.js";
import { ROLES, roleHelp } from "../../lib/roles.js";
import { bytes, count, duration, hex } from "../../lib/units.js";
import { h } from "../dom.js";
import { theme } from "../theme.js";

/** @typedef {import("./index.js").TimelineView} TimelineView */

/** Rows a grey column's list asks for (the server says how many more there are). */
export const COLUMN_ROWS = 50;
/** The most the server lists at once (`MAX_COLUMN_ROWS`). */
const COLUMN_ROWS_MAX = 500;

/** @param {TimelineView} view */
export async function renderSide(view) {
  const s = view.state();
  const side = view.side;
  if (s.alloc === null) {
    side.replaceChildren(
      h("h3", {}, "Allocation"),
      h(
        "p",
        { className: "muted small" },
        "Hover a band to see what it is; click one to pin its whole stack here. Grey is allocations too small to draw one by one at this zoom: click it to list them, or zoom in (Shift + scroll zooms the bytes).",
      ),
    );
    return;
  }
  const id = s.alloc;
  side.replaceChildren(h("h3", {}, "Allocation"), h("p", { className: "muted small" }, "Loading…"));
  let info;
  try {
    info = await allocation(view.app.id, view.device() ?? 0, id);
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
    at === null ? null : h("button", { type: "button", className: "button button-small", title, onclick: () => view.app.setMoment(at) }, label);
  side.replaceChildren(
    h(
      "div",
      { className: "side-head" },
      h("h3", {}, bytes(info.size)),
      h(
        "button",
        { type: "button", className: "close-button", title: "Unpin (Esc)", "aria-label": "Unpin", onclick: () => view.app.store.set({ alloc: null }) },
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

/** @param {TimelineView} view */
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
    ...(view.app.incomplete ? [item("sw-incomplete", "history incomplete", view.app.incomplete)] : []),
  ];
  view.legend.replaceChildren(...items.filter(Boolean));
}

/** Hides the grey column's list (the window changed: its columns are gone). */
export function closeColumnList(view) {
  view.columnAbort?.abort();
  view.columnListed = null;
  if (view.columnList) {
    view.columnList.hidden = true;
    view.columnList.replaceChildren();
  }
}

/**
 * Lists the allocations drawn in grey in column `column` of the answer drawn now (the same query
 * plus the column), largest first; a row pins its allocation. Resolves to the answer (the tests
 * read it), or null when a newer request replaced it.
 */
export async function openColumnList(view, column, limit = COLUMN_ROWS) {
  const model = view.model;
  if (!model || !view.columnList) return null;
  view.columnAbort?.abort();
  const controller = new AbortController();
  view.columnAbort = controller;
  const list = view.columnList;
  list.hidden = false;
  const e0 = model.cs[column];
  const e1 = model.cs[column + 1] - 1;
  const where = e1 > e0 ? `events ${count(e0)}–${count(e1)}` : `event ${count(e0)}`;
  const head = (...rest) =>
    h(
      "div",
      { className: "column-list-head" },
      h("h4", {}, `Grey allocations, ${where}`),
      ...rest,
      h(
        "button",
        { type: "button", className: "close-button", title: "Close the list", "aria-label": "Close the list", onclick: () => closeColumnList(view) },
        "×",
      ),
    );
  list.replaceChildren(head(), h("p", { className: "muted small" }, "Loading…"));
  let answer;
  try {
    answer = await getJSON(`/api/snapshots/${view.app.id}/timeline/column?${view.dataKey}&column=${column}&limit=${limit}`, controller.signal);
  } catch (error) {
    if (error.name === "AbortError") return null;
    list.replaceChildren(head(), h("p", { className: "view-error" }, `The column's allocations could not load. ${error.message}`));
    return null;
  }
  if (controller.signal.aborted) return null;
  view.columnListed = answer;
  const pinned = view.state().alloc;
  const more = answer.total - answer.rows.length;
  const dark = theme().dark;
  list.replaceChildren(
    head(h("span", { className: "muted small" }, `${count(answer.total)} allocations, ${bytes(answer.total_bytes)}`)),
    answer.rows.length
      ? h(
          "ol",
          { className: "column-rows" },
          answer.rows.map((row) =>
            h(
              "li",
              {},
              h(
                "button",
                {
                  type: "button",
                  className: `column-row${row.id === pinned ? " pinned" : ""}`,
                  dataset: { alloc: String(row.id) },
                  title: "Pin this allocation (its stack shows beside the chart)",
                  onclick: () => view.app.store.set({ alloc: row.id }),
                },
                h("span", { className: "column-size" }, bytes(row.size)),
                h("span", { className: "role-chip", style: `--role:${roleColor(row.role, dark)}` }, row.role),
                h(
                  "span",
                  { className: "column-life muted" },
                  `${row.start === null ? "before the trace" : count(row.start)} → ${row.end === null ? "alive" : count(row.end)}`,
                ),
                h("span", { className: "column-frames" }, row.frames.length ? row.frames.map((f) => frameParts(f).name).join(" ← ") : "no Python frames"),
              ),
            ),
          ),
        )
      : h("p", { className: "muted small" }, "Nothing here: every allocation of this column is drawn as a band."),
    more > 0
      ? h(
          "p",
          { className: "muted small column-more" },
          `${count(more)} more, smaller. `,
          // The server lists at most 500 at once; past that, zooming in splits the column.
          limit < COLUMN_ROWS_MAX
            ? h(
                "button",
                {
                  type: "button",
                  className: "button button-small",
                  onclick: () => openColumnList(view, column, Math.min(COLUMN_ROWS_MAX, limit + COLUMN_ROWS)),
                },
                `Show ${count(Math.min(more, COLUMN_ROWS_MAX - limit, COLUMN_ROWS))} more`,
              )
            : "Zoom in on this column to see the rest.",
        )
      : null,
  );
  return answer;
}
