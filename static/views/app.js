// @ts-check
// The snapshot page's views: one state (in the URL), tabs, the shared selected moment, keys.

import { getJSON } from "../lib/api.js";
import { parse, serialize, TABS } from "../lib/state.js";
import { count } from "../lib/units.js";
import { EventsView } from "./events.js";
import { FlameView } from "./flame.js";
import { isShortcut, isTyping } from "./page.js";
import { SegmentsView } from "./segments.js";
import { exposeToTests } from "./test-hook.js";
import { TimelineView } from "./timeline/index.js";
import { hideTip } from "./tooltip.js";

/** Keys the views add to the page's `?` dialog. */
export const VIEW_KEYS = [
  ["0", "Overview"],
  ["1", "Timeline"],
  ["2", "Flame graph"],
  ["3", "Segments"],
  ["4", "Events"],
  ["← →", "Step the selected moment one event (Shift: 100)"],
  ["↑ ↓", "Segments: step the allocator's history one event"],
  ["+ -", "Zoom the timeline in or out"],
  ["↑ ↓", "Zoom the timeline's byte axis in or out"],
  ["/", "Search (flame graph) or filter by frame (events)"],
  ["o", "Roles: colour the timeline by role, root the flame graph by role"],
  ["Esc", "Unpin the allocation"],
];

let liveStore = null;

/** The query string of the view shown now (the URL catches up a moment later). */
export function viewSearch() {
  return liveStore ? serialize(liveStore.get()) : window.location.search;
}

/**
 * The URL's state, the one source of what the views show.
 * @typedef {object} Store
 * @property {() => import("../lib/state.js").State} get
 * @property {(patch: Partial<import("../lib/state.js").State>) => void} set changes the given keys; subscribers hear which changed
 * @property {(fn: (state: import("../lib/state.js").State, changed: Set<string>) => void) => void} subscribe
 */

/**
 * The snapshot page's app context, which every view is given: the state, the snapshot's summary
 * and the selected moment.
 * @typedef {object} App
 * @property {string} id the snapshot's id
 * @property {Store} store
 * @property {any} summary `/api/snapshots/{id}` once it answered, else null
 * @property {() => number} device the device shown: the URL's, else the server's default
 * @property {() => any} deviceInfo the summary's entry for that device, or null
 * @property {() => number} events events in the device's trace
 * @property {() => number | null} moment the selected event (-1: before the first), null without history
 * @property {(at: number | null) => void} setMoment
 * @property {(delta: number) => void} step moves the moment `delta` events
 * @property {string} incomplete the note that the trace starts mid-run, or ""
 * @property {string} noHistory the note that the device has no history, or ""
 */

/**
 * @param {import("../lib/state.js").State} initial
 * @param {(state: import("../lib/state.js").State) => void} onChange
 * @returns {Store}
 */
function createStore(initial, onChange) {
  let state = initial;
  const subscribers = [];
  return {
    get: () => state,
    set(patch) {
      const changed = new Set();
      for (const [key, value] of Object.entries(patch)) if (state[key] !== value) changed.add(key);
      if (changed.size === 0) return;
      state = { ...state, ...patch };
      onChange(state);
      for (const fn of subscribers) fn(state, changed);
    },
    subscribe(fn) {
      subscribers.push(fn);
    },
  };
}

export async function startViews() {
  const root = /** @type {HTMLElement | null} */ (document.querySelector(".snapshot"));
  if (!root || !document.getElementById("timeline")) return;
  const id = root.dataset.id;
  let urlTimer;
  const store = createStore(parse(window.location.search), (state) => {
    clearTimeout(urlTimer);
    urlTimer = setTimeout(() => {
      const url = `${window.location.pathname}${serialize(state)}`;
      if (url !== `${window.location.pathname}${window.location.search}`) history.replaceState(history.state, "", url);
    }, 300);
  });

  liveStore = store;
  /** @type {App} */
  const app = {
    id,
    store,
    summary: null,
    /** The device shown: the URL's, else the server's default (`default_device`). */
    device() {
      const state = store.get();
      const devices = app.summary?.analysis?.devices ?? [];
      if (state.device !== null && devices.some((d) => d.device === state.device)) return state.device;
      return app.summary?.default_device ?? 0;
    },
    deviceInfo() {
      return app.summary?.analysis?.devices?.find((d) => d.device === app.device()) ?? null;
    },
    /** Events in the device's trace. */
    events() {
      return app.deviceInfo()?.trace_entries ?? 0;
    },
    /** The selected moment: the URL's `at`, else the peak; -1 is before the first event (the
     * peak of a trace that never rises above its start), null only when there is no history. */
    moment() {
      const at = store.get().at;
      // A link past the end (?at=999999) shows the last event; the timeline says so.
      if (at !== null) return app.events() > 0 ? Math.min(at, app.events() - 1) : at;
      return app.deviceInfo()?.peak_event_index ?? (app.events() > 0 ? -1 : null);
    },
    setMoment(at) {
      const n = app.events();
      if (n === 0 || at === null) return;
      store.set({ at: Math.max(-1, Math.min(n - 1, Math.round(at))) });
    },
    step(delta) {
      const now = app.moment() ?? -1;
      app.setMoment(now + delta);
    },
    /** The note that the trace starts mid-run, if any. */
    incomplete: document.querySelector(".banner-trace_incomplete")?.textContent.trim() ?? "",
    noHistory: document.querySelector(".banner-no_history, .banner-state_only")?.textContent.trim() ?? "",
  };

  // The timeline starts loading before the summary answers (it is the slowest request).
  const views = {};
  const tabs = [.../** @type {NodeListOf<HTMLAnchorElement>} */ (root.querySelectorAll(".tab[data-tab]"))];
  const panels = Object.fromEntries(TABS.map((t) => [t, document.getElementById(t)]));
  const context = /** @type {HTMLElement} */ (root.querySelector(".view-context"));
  const showPanels = (tab) => {
    for (const a of tabs) a.setAttribute("aria-selected", String(a.dataset.tab === tab));
    for (const [name, panel] of Object.entries(panels)) if (panel) panel.hidden = name !== tab;
    context.hidden = tab === "overview";
  };
  showPanels(store.get().tab);
  views.timeline = new TimelineView(app, document.getElementById("timeline"));
  if (store.get().tab === "timeline") views.timeline.show();

  try {
    app.summary = await getJSON(`/api/snapshots/${id}`);
  } catch (error) {
    for (const panel of document.querySelectorAll(".tab-panel.view")) {
      const box = /** @type {HTMLElement | null} */ (panel.querySelector(".view-error"));
      if (box) {
        box.textContent = `The views cannot load: ${error.message}`;
        box.hidden = false;
      }
    }
    return;
  }
  views.flame = new FlameView(app, document.getElementById("flame"));
  views.segments = new SegmentsView(app, document.getElementById("segments"));
  views.events = new EventsView(app, document.getElementById("events"));

  // Device picker: every device with a trace (or, without any, every device).
  const select = /** @type {HTMLSelectElement} */ (document.getElementById("device-select"));
  const devices = app.summary.analysis.devices;
  const traced = devices.filter((d) => d.trace_entries > 0);
  for (const d of traced.length ? traced : devices) {
    const option = document.createElement("option");
    option.value = String(d.device);
    // Pinned host memory (`record_pinned_host_memory=True`) is one more device after the GPUs.
    const label = d.device === app.summary.analysis.source?.host_device ? "host (pinned)" : `cuda:${d.device}`;
    option.textContent = `${label}${d.trace_entries ? ` · ${count(d.trace_entries)} events` : ""}`;
    if (label !== `cuda:${d.device}`) option.dataset.host = "";
    select.append(option);
  }
  select.value = String(app.device());
  select.disabled = select.options.length < 2;
  select.addEventListener("change", () => {
    store.set({ device: Number(select.value), start: null, end: null, at: null, alloc: null, zoom: "" });
  });
  const chip = document.getElementById("moment-chip");
  const showMoment = () => {
    const at = app.moment();
    const info = app.deviceInfo();
    if (at === null) chip.textContent = app.events() ? "" : "no history";
    else chip.textContent = `${at === info?.peak_event_index ? "peak · " : ""}event ${count(at)}`;
  };

  // Tabs.
  const showTab = (tab) => {
    showPanels(tab);
    hideTip();
    views[tab]?.show();
  };
  for (const a of tabs) {
    a.addEventListener("click", (/** @type {MouseEvent} */ event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      store.set({ tab: a.dataset.tab });
    });
  }

  store.subscribe((state, changed) => {
    if (changed.has("device")) select.value = String(app.device());
    for (const view of Object.values(views)) view.update(state, changed);
    if (changed.has("tab")) showTab(state.tab);
    showMoment();
  });
  showMoment();
  showTab(store.get().tab);

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !document.querySelector("dialog[open]")) {
      if (isTyping(event)) return;
      if (store.get().alloc !== null) store.set({ alloc: null });
      return;
    }
    if (!isShortcut(event)) return;
    const tab = store.get().tab;
    if (/^[0-4]$/.test(event.key)) {
      event.preventDefault();
      store.set({ tab: TABS[Number(event.key)] });
    } else if ((event.key === "ArrowLeft" || event.key === "ArrowRight") && tab !== "overview") {
      event.preventDefault();
      app.step((event.key === "ArrowLeft" ? -1 : 1) * (event.shiftKey ? 100 : 1));
    } else if ((event.key === "ArrowUp" || event.key === "ArrowDown") && tab === "timeline") {
      // The timeline's byte axis: up zooms in, down zooms out.
      event.preventDefault();
      views.timeline.zoomBytesBy(event.key === "ArrowUp" ? 0.5 : 2);
    } else if ((event.key === "+" || event.key === "=" || event.key === "-") && tab !== "overview") {
      event.preventDefault();
      if (tab !== "timeline") store.set({ tab: "timeline" });
      views.timeline.zoomBy(event.key === "-" ? 2 : 0.5);
    } else if (event.key === "o" && (tab === "timeline" || tab === "flame")) {
      // Roles: the timeline coloured by role, the flame graph rooted by role.
      event.preventDefault();
      const s = store.get();
      if (tab === "timeline") store.set({ color: s.color === "role" ? "allocation" : "role" });
      else store.set({ by: s.by === "role" ? "stack" : "role" });
    } else if (event.key === "/") {
      event.preventDefault();
      if (tab === "events") {
        document.getElementById("events-frame").focus();
      } else {
        if (tab !== "flame") store.set({ tab: "flame" });
        document.getElementById("flame-search").focus();
      }
    }
  });
  // The browser tests read what the views drew (their `layout`, the timeline's `model`) and set
  // the moment through `app`.
  exposeToTests({ store, app, views });
}
