// @ts-check
// The compare page (`/compare/{a}/{b}`) and its picker (`/compare/{a}`).
//
// Everything the page shows is in its URL (the two ids, `ignore_lines`, and the moments `at_a`
// and `at_b` when they are not the peaks), so the link can be shared. The data is
// `/api/compare/{a}/{b}`: per device, totals side by side, a differential flame graph of live
// memory at each one's compared moment (its peak unless chosen on the curves), stacks by byte
// delta and both memory curves; plus the segments in only one snapshot (torch's
// `_memory_viz.py compare`, as data).

import { getJSON } from "../lib/api.js";
import { bytes } from "../lib/units.js";
import { h } from "../views/dom.js";
import { followLoads } from "../views/loads.js";
import { copyLink, isShortcut, keyboardHelp, showTimes } from "../views/page.js";
import { exposeToTests } from "../views/test-hook.js";
import { onThemeChange } from "../views/theme.js";
import { alignFrom, alignmentText, momentText, signedBytes } from "./change.js";
import { Curves, momentForm } from "./curves.js";
import { DiffFlame } from "./flame.js";
import { pickerPage } from "./picker.js";
import { segmentsSection } from "./segments.js";
import { rolesChange, rolesHeadline, stacksList, totalsCards } from "./summary.js";

const flames = [];
const charts = [];

/** A card: a heading row (`head`: its children) and the rest. */
function card(head, ...rest) {
  return h("section", { className: "cmp-card" }, h("div", { className: "section-head" }, ...head), ...rest);
}

function deviceSection(device, answer, multiple, moments) {
  const names = [answer.before.name, answer.after.name];
  const same = device.before_device === device.after_device;
  const title = same ? `cuda:${device.before_device}` : `cuda:${device.before_device} → cuda:${device.after_device}`;
  const article = h("article", { className: "cmp-device", id: `device-${device.before_device}-${device.after_device}` });
  if (multiple || !same) article.append(h("h2", { className: "device-title" }, title));
  article.append(totalsCards(device, names, device.peak_growth_percent));

  // Why the memory changed: bytes per role at the compared moments.
  if (device.roles?.length) {
    const headline = rolesHeadline(device.roles);
    article.append(
      card(
        [
          h(
            "h3",
            { title: "Live bytes by role (docs/roles.md) at the compared moments: what kind of memory grew or shrank. Hover a role for what it means." },
            "Change by role",
          ),
        ],
        h(
          "p",
          { className: "muted small section-help", dataset: { rolesHeadline: "" } },
          headline ? `${headline}.` : "Every role holds the same bytes on both sides.",
        ),
        rolesChange(device.roles, names),
      ),
    );
  }

  // The differential flame graph.
  const root = device.tree[0] ?? { before_bytes: 0, after_bytes: 0 };
  const flameBox = h("div", { className: "flame-box" });
  article.append(
    card(
      [
        h(
          "h3",
          {
            title:
              "Live allocations at each snapshot's peak, merged by stack (frames matched by file, line and function; root on top). A frame's width is the larger of its two sides. Red: it holds more after; blue: less; the stronger the colour, the larger the change relative to the frame.",
          },
          moments.chosen ? "What is live at the chosen moments, and what changed" : "What is live at the peak, and what changed",
        ),
        h(
          "div",
          { className: "flame-legend small", "aria-label": "Colour legend" },
          h("span", {}, "shrank"),
          h("span", { className: "legend-ramp", "aria-hidden": "true" }),
          h("span", {}, "grew"),
        ),
      ],
      h(
        "p",
        { className: "muted small section-help" },
        `${names[0]} at ${momentText(device.before)} holds ${bytes(root.before_bytes)}; ${names[1]} at ${momentText(device.after)} holds ${bytes(root.after_bytes)} (${signedBytes(root.after_bytes - root.before_bytes)}).`,
      ),
      alignNote(device, answer, names),
      flameBox,
      h(
        "p",
        { className: "hint muted small" },
        "Width: the larger side. Hover a frame for both sides; click to zoom in, the breadcrumb or Esc to zoom out. With the graph focused, arrow keys move between frames.",
      ),
    ),
  );

  // Curves.
  const curvesBox = h("div", { className: "curves-box" });
  article.append(
    card(
      [
        h(
          "h3",
          {
            title:
              "Bytes allocated over each trace, resampled to the same width: x is the share of each one's own trace, so runs of different lengths line up start to end",
          },
          "Memory over time",
        ),
        h(
          "ul",
          { className: "curve-legend small", "aria-label": "Legend" },
          h("li", { className: "side-before" }, h("span", { className: "side-dot" }), `${names[0]} · peak ${bytes(device.before.peak_allocated_bytes)}`),
          h("li", { className: "side-after" }, h("span", { className: "side-dot" }), `${names[1]} · peak ${bytes(device.after.peak_allocated_bytes)}`),
        ),
      ],
      curvesBox,
      momentForm(device, names, moments),
    ),
  );

  // Stacks.
  const grew = device.stacks.filter((s) => s.delta_bytes > 0).length;
  article.append(
    card(
      [
        h(
          "h3",
          { title: "Live bytes at the compared moments by the stack that allocated them; the largest growth first, then the largest shrink" },
          "Stacks by change",
        ),
        h(
          "span",
          { className: "muted small" },
          `${grew} grew · ${device.stacks.length - grew} shrank${answer.diff.ignore_lines ? " · line numbers ignored" : ""}${device.alignment ? " · outer callers aligned" : answer.diff.align?.drop_outer ? ` · ${answer.diff.align.drop_outer} outer frames dropped` : ""}`,
        ),
      ],
      device.stacks.length === 0 ? h("p", { className: "muted" }, "No stack holds a different number of bytes.") : stacksList(device.stacks),
    ),
  );

  // Drawn once in the document (the boxes need a width).
  queueMicrotask(() => {
    const flame = new DiffFlame(flameBox, device.tree);
    flame.draw();
    flames.push(flame);
    const pick = (side, event) => (side === 0 ? moments.go(event, moments.at[1]) : moments.go(moments.at[0], event));
    const curves = new Curves(curvesBox, device.before_curve, device.after_curve, names, [device.before, device.after], pick);
    curves.draw();
    charts.push(curves);
  });
  return article;
}

/** Says how rows were lined up when it was not frame for frame (null when it was). */
function alignNote(device, answer, names) {
  const dropped = answer.diff.align?.drop_outer;
  let text = null;
  if (device.alignment) text = alignmentText(device.alignment, names, device.further_alignments);
  else if (dropped) {
    const [before, after] = device.merged_by_drop ?? [0, 0];
    text = `The ${dropped} outermost ${dropped === 1 ? "frame" : "frames"} of every stack are left out on both sides, so stacks that differ only there are merged (${before} on ${names[0]}'s side, ${after} on ${names[1]}'s).`;
  }
  if (!text) return null;
  return h("p", { className: "banner banner-note small cmp-aligned", dataset: { aligned: device.alignment ? "auto" : "drop" } }, text);
}

/** The compared moments: event indices from the URL (-1: before the first event), else peaks. */
function momentsFrom(params) {
  const param = (name) => {
    const value = params.get(name);
    return value !== null && /^-?\d+$/.test(value) ? Number(value) : null;
  };
  return {
    at: [param("at_a"), param("at_b")],
    get chosen() {
      return this.at[0] !== null || this.at[1] !== null;
    },
    go(before, after) {
      const url = new URL(window.location.href);
      url.searchParams.delete("at_a");
      url.searchParams.delete("at_b");
      for (const [name, value] of [
        ["at_a", before],
        ["at_b", after],
      ]) {
        if (value !== null && value !== undefined) url.searchParams.set(name, String(value));
      }
      window.location.assign(url.toString());
    },
  };
}

async function comparePage(root) {
  const a = root.dataset.before;
  const b = root.dataset.after;
  const params = new URLSearchParams(window.location.search);
  const ignore = ["1", "true", "yes", "on"].includes(params.get("ignore_lines") ?? "");
  const checkbox = /** @type {HTMLInputElement} */ (document.getElementById("ignore-lines"));
  checkbox.checked = ignore;
  const reloadWith = (ignoreLines) => {
    const url = new URL(window.location.href);
    if (ignoreLines) url.searchParams.set("ignore_lines", "1");
    else url.searchParams.delete("ignore_lines");
    window.location.assign(url.toString());
  };
  checkbox.addEventListener("change", () => reloadWith(checkbox.checked));
  const align = alignFrom(params.get("align"));
  const alignSelect = /** @type {HTMLSelectElement} */ (document.getElementById("align-stacks"));
  const alignChoices = [
    ["auto", "automatically"],
    ["off", "off (frame for frame)"],
    ...Array.from({ length: 12 }, (_, i) => [String(i + 1), `drop ${i + 1} outer ${i ? "frames" : "frame"}`]),
  ];
  if (!alignChoices.some(([value]) => value === align)) alignChoices.push([align, `drop ${align} outer frames`]);
  alignSelect.replaceChildren(...alignChoices.map(([value, label]) => h("option", { value, selected: value === align }, label)));
  alignSelect.addEventListener("change", () => {
    const url = new URL(window.location.href);
    if (alignSelect.value === "auto") url.searchParams.delete("align");
    else url.searchParams.set("align", alignSelect.value);
    window.location.assign(url.toString());
  });
  const moments = momentsFrom(params);
  const swap = /** @type {HTMLAnchorElement} */ (document.getElementById("swap"));
  const swapped = new URLSearchParams(params);
  swapped.delete("at_a");
  swapped.delete("at_b");
  if (params.has("at_b")) swapped.set("at_a", params.get("at_b"));
  if (params.has("at_a")) swapped.set("at_b", params.get("at_a"));
  swap.href = `/compare/${b}/${a}${swapped.size ? `?${swapped}` : ""}`;
  document.getElementById("copy-link").addEventListener("click", () => copyLink());

  document.addEventListener("keydown", (event) => {
    if (!isShortcut(event)) return;
    if (event.key === "s") swap.click();
    else if (event.key === "i") reloadWith(!checkbox.checked);
    else if (event.key === "c") document.getElementById("copy-link").click();
    else if (event.key === "a") {
      event.preventDefault();
      alignSelect.focus();
    } else if (event.key === "f") {
      event.preventDefault();
      flames[0]?.canvas.focus();
    } else if (event.key === "m") {
      event.preventDefault();
      /** @type {HTMLInputElement | null} */ (document.querySelector(".moment-input:not([disabled])"))?.focus();
    } else if (event.key === "p" && moments.chosen) {
      moments.go(null, null);
    } else if (event.key === "Escape") {
      for (const flame of flames) if (flame.zoom !== 0) flame.setZoom(0);
    }
  });
  keyboardHelp([
    ["s", "Swap before and after"],
    ["i", "Ignore line numbers (or not)"],
    ["c", "Copy the link"],
    ["a", "Choose how stacks are aligned"],
    ["f", "Focus the flame graph"],
    ["m", "Choose the compared moments (event indices)"],
    ["p", "Compare both at their peaks again"],
    ["← → ↑ ↓", "Move between frames (flame graph focused)"],
    ["Enter", "Zoom into the frame"],
    ["Esc", "Zoom out"],
    ["?", "Show these keys"],
  ]);

  const loading = document.getElementById("compare-loading");
  // Snapshots not in memory: the server started reading them and listed them on a card; the
  // data request below waits for them meanwhile, and the card shows how far each one is.
  const card = document.getElementById("load-card");
  const loads = card ? followLoads(card) : null;
  if (loads) {
    loads.settled.then((outcome) => {
      if (outcome === "ready") {
        card.hidden = true;
        if (!root.dataset.ready) loading.hidden = false;
      } else if (outcome === "gone") {
        window.location.reload();
      }
    });
    // Failed already: the card says why, and the data request would only answer 500.
    if (loads.state() === "stop") return;
  }
  const apiParams = new URLSearchParams();
  if (ignore) apiParams.set("ignore_lines", "1");
  if (align !== "auto") apiParams.set("align", align);
  if (moments.at[0] !== null) apiParams.set("at_a", String(moments.at[0]));
  if (moments.at[1] !== null) apiParams.set("at_b", String(moments.at[1]));
  let answer;
  try {
    answer = await getJSON(`/api/compare/${a}/${b}${apiParams.size ? `?${apiParams}` : ""}`);
  } catch (error) {
    loading.hidden = true;
    // A load that failed while the request waited: the card's next poll says why (the
    // server remembers the failure), which says more than the request's 500.
    const waited = loads && (await Promise.race([loads.settled, new Promise((resolve) => setTimeout(resolve, 2000))]));
    if (waited === "failed") return;
    loads?.stop();
    const errorBox = document.getElementById("compare-error");
    errorBox.textContent = `Could not compare these snapshots. ${error.message}`;
    errorBox.hidden = false;
    return;
  }
  loads?.stop();
  if (card) card.hidden = true;
  loading.hidden = true;
  const names = [answer.before.name, answer.after.name];
  const devices = document.getElementById("devices");
  if (answer.diff.devices.length === 0) {
    devices.append(h("div", { className: "banner banner-note" }, "Neither snapshot has a device with recorded memory: nothing to compare."));
  }
  const multiple = answer.diff.devices.length > 1;
  for (const device of answer.diff.devices) devices.append(deviceSection(device, answer, multiple, moments));
  segmentsSection(answer.segments, [a, b], names);
  root.dataset.ready = "true";
}

showTimes();
const compareRoot = document.getElementById("compare");
const pickerRoot = document.getElementById("picker");
if (compareRoot) comparePage(compareRoot);
else if (pickerRoot) pickerPage(pickerRoot);
// Redraw canvases when the colour scheme changes.
onThemeChange(() => {
  for (const chart of [...flames, ...charts]) chart.draw();
});

// The browser tests read what the charts drew, in CSS px from each canvas's corner.
exposeToTests({
  curvePoint: (side, f, i = 0) => charts[i]?.pointAt(side, f) ?? null,
  flameRects: (i = 0) => flames[i]?.drawn() ?? [],
});
