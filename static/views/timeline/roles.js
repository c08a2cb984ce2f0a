// @ts-check
// The role strip under the timeline (colour by role): memory by role over the same window,
// stacked in ROLES order, from `/roles`. Each column is taken at its peak event, so the strip's
// top is the timeline's memory line; it is drawn through the timeline's own mapping, so zoom
// and pan move both together, and the last answer is redrawn while the next one loads.

import { getJSON } from "../../lib/api.js";
import { roleColor } from "../../lib/color.js";
import { ROLES, roleHelp } from "../../lib/roles.js";
import { byteTicks } from "../../lib/scale.js";
import { unitOfEvent } from "../../lib/timeline-model.js";
import { bytes, count, percent } from "../../lib/units.js";
import { fitCanvas } from "../canvas.js";
import { h } from "../dom.js";
import { theme } from "../theme.js";
import { hideTip, showTip, tipRow } from "../tooltip.js";

/** The strip's height in CSS px. */
export const ROLE_STRIP_HEIGHT = 140;
const PAD = { top: 8, bottom: 6 };

/** Roles in display order: the built-in ones first, custom ones after, by name. */
export function orderedRoles(names) {
  const known = ROLES.filter((r) => names.includes(r));
  const custom = names.filter((r) => !ROLES.includes(r)).sort();
  return [...known, ...custom];
}

/** Asks for the roles of the window the timeline asked for (same query; `key` its params). */
export async function loadRoles(view, key) {
  if (view.rolesKey === key && view.roles) return;
  view.rolesAbort?.abort();
  const controller = new AbortController();
  view.rolesAbort = controller;
  try {
    const data = await getJSON(`/api/snapshots/${view.app.id}/roles?${key}`, controller.signal);
    if (controller.signal.aborted) return;
    view.rolesKey = key;
    view.roles = prepareRoles(data);
    paintRoleStrip(view);
    // The chart's grey part is split by role from this answer.
    view.draw();
  } catch (error) {
    if (error.name === "AbortError") return;
    view.roles = null;
    view.rolesError = error.message;
    paintRoleStrip(view);
  }
}

/** Cumulative tops per role per column, in display order (bottom first). */
export function prepareRoles(data) {
  const order = orderedRoles(data.roles).filter((role) => {
    const row = data.bytes[data.roles.indexOf(role)];
    return row.some((b) => b > 0);
  });
  const n = data.column_start.length - 1;
  const tops = [];
  const below = new Array(n).fill(0);
  for (const role of order) {
    const row = data.bytes[data.roles.indexOf(role)];
    const top = row.map((b, c) => below[c] + b);
    tops.push(top);
    for (let c = 0; c < n; c += 1) below[c] = top[c];
  }
  return { data, n, cs: data.column_start, order, tops, total: below, start: data.start, end: data.end, events: data.column_start[n] };
}

/** Paints the strip through the timeline's current mapping (its x), with its own byte scale. */
export function paintRoleStrip(view) {
  const canvas = view.roleCanvas;
  if (!canvas || canvas.hidden || !view.visible()) return;
  const plot = view.plot();
  const ctx = fitCanvas(canvas, plot.width, ROLE_STRIP_HEIGHT);
  const t = theme();
  ctx.fillStyle = t.bg;
  ctx.fillRect(0, 0, plot.width, ROLE_STRIP_HEIGHT);
  const roles = view.roles;
  const y0 = ROLE_STRIP_HEIGHT - PAD.bottom;
  const hPlot = ROLE_STRIP_HEIGHT - PAD.top - PAD.bottom;
  ctx.font = t.font;
  ctx.textBaseline = "middle";
  if (!roles || !view.model) {
    ctx.fillStyle = t.muted;
    ctx.fillText(view.rolesError ? `Roles could not load. ${view.rolesError}` : "Loading roles…", plot.x + 8, ROLE_STRIP_HEIGHT / 2);
    view.roleLayout = null;
    return;
  }
  // The strip's x follows the timeline's window; its columns are this answer's, placed by event.
  const m = view.mapping();
  const x = (c) => m.px(unitOfEvent(view.model, roles.cs[Math.min(c, roles.n)]));
  const yTop = byteTicks(Math.max(1, ...roles.total)).top;
  const y = (b) => y0 - (b / yTop) * hPlot;
  ctx.save();
  ctx.beginPath();
  ctx.rect(plot.x, 0, plot.w, ROLE_STRIP_HEIGHT);
  ctx.clip();
  // Top role first, each filled down to the bottom: the next one below paints over its part.
  for (let r = roles.order.length - 1; r >= 0; r -= 1) {
    ctx.fillStyle = roleColor(roles.order[r], t.dark);
    const top = roles.tops[r];
    ctx.beginPath();
    ctx.moveTo(x(0), y0);
    for (let c = 0; c < roles.n; c += 1) {
      ctx.lineTo(x(c), y(top[c]));
      ctx.lineTo(x(c + 1), y(top[c]));
    }
    ctx.lineTo(x(roles.n), y0);
    ctx.closePath();
    ctx.fill();
  }
  // The timeline's memory line over it: they agree column by column.
  ctx.strokeStyle = t.text;
  ctx.globalAlpha = 0.55;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let c = 0; c < roles.n; c += 1) {
    ctx.lineTo(x(c), y(roles.total[c]));
    ctx.lineTo(x(c + 1), y(roles.total[c]));
  }
  ctx.stroke();
  ctx.globalAlpha = 1;
  ctx.restore();
  ctx.fillStyle = t.muted;
  ctx.textAlign = "right";
  ctx.fillText(bytes(yTop), plot.x - 8, y(yTop) + 4);
  ctx.fillText("by role", plot.x - 8, ROLE_STRIP_HEIGHT / 2 + 8);
  view.roleLayout = { x0: plot.x, w: plot.w, y0, hPlot, yTop, columns: roles.n, x };
}

/** The column of the strip under CSS px `x` (-1 outside). */
export function roleColumnAt(view, px) {
  const roles = view.roles;
  if (!roles || !view.roleLayout) return -1;
  const x = view.roleLayout.x;
  let lo = 0;
  let hi = roles.n - 1;
  if (roles.n === 0 || px < x(0) || px > x(roles.n)) return -1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (x(mid) <= px) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** Hover on the strip: the column's bytes by role, largest first. */
export function bindRoleStrip(view) {
  const canvas = view.roleCanvas;
  canvas.addEventListener("pointermove", (event) => {
    const rect = canvas.getBoundingClientRect();
    const c = roleColumnAt(view, event.clientX - rect.left);
    if (c < 0) {
      hideTip();
      return;
    }
    const roles = view.roles;
    const data = roles.data;
    const total = roles.total[c];
    const rows = roles.order
      .map((role) => [role, data.bytes[data.roles.indexOf(role)][c]])
      .filter(([, b]) => b > 0)
      .sort((a, b) => b[1] - a[1]);
    const e0 = roles.cs[c];
    const e1 = roles.cs[c + 1] - 1;
    const at = data.at[c];
    showTip(
      event.clientX,
      event.clientY,
      h(
        "div",
        { className: "tip-title" },
        `${bytes(total)} live`,
        h("span", { className: "tip-id" }, e1 > e0 ? ` events ${count(e0)}–${count(e1)}` : ` event ${count(e0)}`),
      ),
      ...rows.map(([role, b]) =>
        h(
          "div",
          { className: "tip-row", title: roleHelp(role) },
          h("span", { className: "tip-label" }, h("span", { className: "swatch", style: `background:${roleColor(role, theme().dark)}` }), ` ${role}`),
          h("span", { className: "tip-value" }, `${bytes(b)} · ${percent(b, total)}`),
        ),
      ),
      at === null ? null : tipRow("at", `the column's peak, after event ${count(at)}`),
    );
  });
  canvas.addEventListener("pointerleave", () => hideTip());
}
