//! What changed between two snapshots: per-device totals side by side, and live memory at each
//! one's peak compared stack by stack.
//!
//! Stacks are aligned by frame (file basename, line, function), root first, after PyTorch's
//! viewer's filter; with `ignore_lines` the line is left out, so an edit that shifts lines still
//! lines up. Devices are paired by ordinal when both snapshots have the same devices, else in
//! order (rank 0's cuda:0 against rank 7's cuda:7).

mod align;
#[cfg(test)]
mod tests;

use super::{Analysis, DeviceAnalysis, Summary};
use crate::snapshot::{Snapshot, StackId};
use align::{FURTHER_ALIGNMENT_ROUNDS, apply_alignment, drop_outer, find_alignment};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, Default)]
pub struct DiffOptions {
    pub ignore_lines: bool,
    /// How the two sides' stacks are lined up before they are compared.
    pub align: Align,
    /// Moments to compare instead of each one's peak (`Some(None)`: before the first event).
    pub at_before: Option<Option<usize>>,
    pub at_after: Option<Option<usize>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotDiff {
    pub devices: Vec<DeviceDiff>,
    pub ignore_lines: bool,
    /// The alignment asked for (each device says what it found in `alignment`).
    #[serde(default)]
    pub align: Align,
}

/// How stacks of the two sides are lined up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Align {
    /// Stacks are matched frame for frame, except where the two runs reach the same code through
    /// different outer callers (a `no_grad` wrapper, a renamed script entry): those outer frames
    /// are paired, only when many stacks below them match (see `find_alignment`).
    #[default]
    Auto,
    /// Frame for frame, root to leaf.
    Off,
    /// The outermost N frames of every stack on both sides are left out, so stacks that differ
    /// only there are merged, on each side and across.
    DropOuter(usize),
}

/// The most outer frames one may ask to drop: deeper than any real stack, and it bounds the work.
pub const MAX_DROPPED_OUTER_FRAMES: usize = 256;

impl Align {
    /// `auto` (also empty), `off` (or `0`), or a number of outer frames to drop, at most
    /// `MAX_DROPPED_OUTER_FRAMES`: the spelling of `?align=` and `snapview diff --align`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "" | "auto" => Ok(Align::Auto),
            "off" | "0" => Ok(Align::Off),
            number => match number.parse::<usize>() {
                Ok(frames) if frames <= MAX_DROPPED_OUTER_FRAMES => Ok(Align::DropOuter(frames)),
                _ => Err(format!(
                    "align must be auto, off or a number of outer frames to drop from 0 to {MAX_DROPPED_OUTER_FRAMES}, not {number:?}"
                )),
            },
        }
    }
}

/// The outer frames that `Align::Auto` paired on one device: every stack of `before` under
/// `before_frames` is compared with the stack of `after` under `after_frames` that continues the
/// same way; in rows and in the tree the differing frames become `"{before} ⇄ {after}"`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Alignment {
    /// The outer frames of `before` that were paired, root first (the shared root included).
    pub before_frames: Vec<String>,
    /// The outer frames of `after` they were paired with.
    pub after_frames: Vec<String>,
    /// How many leading frames the two share (they are kept as they are).
    pub shared_frames: usize,
    /// Distinct stacks below the paired frames found on both sides: the evidence.
    pub matched_stacks: usize,
    /// Bytes those matched stacks hold on each side.
    pub matched_before_bytes: u64,
    pub matched_after_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceDiff {
    pub before_device: usize,
    pub after_device: usize,
    pub before: Totals,
    pub after: Totals,
    /// Growth of the peak allocated bytes, in percent of before (`null` when before is 0).
    pub peak_growth_percent: Option<f64>,
    /// Stacks by byte delta at the compared moments, largest growth first, then largest shrink.
    pub stacks: Vec<StackDelta>,
    /// The differential flame graph: depth-first nodes, root first.
    pub tree: Vec<DiffNode>,
    /// Both memory-over-time curves, each resampled to `CURVE_POINTS` points over its own trace
    /// (x = fraction of the trace), as the max in each bucket.
    pub before_curve: Vec<u64>,
    pub after_curve: Vec<u64>,
    /// Bytes per role at the compared moments, largest change first ("activation +6.0 GiB").
    #[serde(default)]
    pub roles: Vec<RoleDelta>,
    /// The outer frames paired by `Align::Auto`, if any were (`null`: stacks match frame for frame).
    #[serde(default)]
    pub alignment: Option<Alignment>,
    /// The same two outer callers paired again where they called from other lines (the model
    /// built a few lines above the loop in both), after `alignment`.
    #[serde(default)]
    pub further_alignments: Vec<Alignment>,
    /// Stacks of each side merged into another of the same side by `Align::DropOuter`.
    #[serde(default)]
    pub merged_by_drop: [usize; 2],
}

/// One role's bytes before and after.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoleDelta {
    pub role: String,
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub delta_bytes: i64,
}

/// Bytes per role of each side at its moment, every role either side has.
fn role_deltas(
    before: (&Snapshot, &super::DeviceAnalysis, Option<usize>),
    after: (&Snapshot, &super::DeviceAnalysis, Option<usize>),
) -> Vec<RoleDelta> {
    // Roles are decided once per snapshot with the rules of the first call: on the server that
    // was the summary, with `serve --roles`, so these default rules only apply to a fresh load.
    let rules = super::roles::UserRules::default();
    let by_role = |(snapshot, device, at): (&Snapshot, &super::DeviceAnalysis, Option<usize>)| {
        let roles = device.roles(snapshot, &rules);
        roles.bytes_by_role(&device.replay, &device.replay.live_after(at))
    };
    let (b, a) = (by_role(before), by_role(after));
    let mut names: Vec<&String> = b.keys().chain(a.keys()).collect();
    names.sort();
    names.dedup();
    let mut deltas: Vec<RoleDelta> = names
        .into_iter()
        .map(|role| {
            let before_bytes = b.get(role).copied().unwrap_or(0);
            let after_bytes = a.get(role).copied().unwrap_or(0);
            RoleDelta {
                role: role.clone(),
                before_bytes,
                after_bytes,
                delta_bytes: after_bytes as i64 - before_bytes as i64,
            }
        })
        .collect();
    deltas.sort_by_key(|d| {
        (
            std::cmp::Reverse(d.delta_bytes.unsigned_abs()),
            d.role.clone(),
        )
    });
    deltas
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub allocated_bytes_at_snapshot: u64,
    pub reserved_bytes_at_snapshot: u64,
    pub allocations: usize,
    /// Events in the device's trace (moments are event indices below this).
    pub events: usize,
    /// The moment compared (the peak unless asked otherwise).
    pub at: Option<usize>,
    pub live_bytes_at: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StackDelta {
    /// Root first, `file:line function` (`file function` with `ignore_lines`).
    pub frames: Vec<String>,
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub delta_bytes: i64,
    pub before_allocations: u64,
    pub after_allocations: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DiffNode {
    pub name: String,
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub parent: i64,
    pub depth: u32,
}

/// Points per memory curve.
pub const CURVE_POINTS: usize = 600;
/// Stacks listed per device.
const STACKS_LISTED: usize = 50;

/// A frame as the alignment key sees it.
type FrameKey = String;

fn stack_key(snapshot: &Snapshot, stack: StackId, ignore_lines: bool) -> Vec<FrameKey> {
    let frames: Vec<FrameKey> = snapshot
        .stacks
        .get(stack)
        .iter()
        .rev()
        .map(|&f| snapshot.frames.get(f))
        .filter(|f| !f.is_hidden())
        .map(|f| {
            if ignore_lines {
                f.label().short_without_line()
            } else {
                f.label().short()
            }
        })
        .collect();
    if frames.is_empty() {
        vec!["<non-python>".to_owned()]
    } else {
        frames
    }
}

/// Live bytes and allocation counts by aligned stack at a moment.
fn live_by_stack(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    ignore_lines: bool,
) -> BTreeMap<Vec<FrameKey>, (u64, u64)> {
    let replay = &device.replay;
    let mut by_id: BTreeMap<StackId, (u64, u64)> = BTreeMap::new();
    for id in replay.live_after(at) {
        let a = replay.allocations.at(id as usize);
        let entry = by_id.entry(a.stack).or_default();
        entry.0 += a.size;
        entry.1 += 1;
    }
    let mut by_key: BTreeMap<Vec<FrameKey>, (u64, u64)> = BTreeMap::new();
    for (stack, (bytes, count)) in by_id {
        let entry = by_key
            .entry(stack_key(snapshot, stack, ignore_lines))
            .or_default();
        entry.0 += bytes;
        entry.1 += count;
    }
    by_key
}

fn curve(device: &DeviceAnalysis) -> Vec<u64> {
    let replay = &device.replay;
    let events = replay.len();
    if events == 0 {
        return vec![replay.allocated_at_start];
    }
    let points = CURVE_POINTS.min(events);
    (0..points)
        .map(|p| {
            let from = events * p / points;
            let to = (events * (p + 1) / points).max(from + 1);
            replay.allocated_over(from, to).max().unwrap_or(0)
        })
        .collect()
}

/// Compares `before` with `after`.
pub fn diff(
    before: (&Snapshot, &Analysis, &Summary),
    after: (&Snapshot, &Analysis, &Summary),
    options: DiffOptions,
) -> SnapshotDiff {
    let (b_snapshot, b_analysis, b_summary) = before;
    let (a_snapshot, a_analysis, a_summary) = after;
    let same_devices = b_analysis
        .devices
        .iter()
        .map(|d| d.device)
        .eq(a_analysis.devices.iter().map(|d| d.device));
    let pairs: Vec<(usize, usize)> = if same_devices {
        (0..b_analysis.devices.len()).map(|i| (i, i)).collect()
    } else {
        (0..b_analysis.devices.len().min(a_analysis.devices.len()))
            .map(|i| (i, i))
            .collect()
    };
    let devices = pairs
        .into_iter()
        .map(|(bi, ai)| {
            let (bd, ad) = (&b_analysis.devices[bi], &a_analysis.devices[ai]);
            let (bs, as_) = (&b_summary.devices[bi], &a_summary.devices[ai]);
            let b_at = options.at_before.unwrap_or(bs.peak_event_index);
            let a_at = options.at_after.unwrap_or(as_.peak_event_index);
            let mut b_live = live_by_stack(b_snapshot, bd, b_at, options.ignore_lines);
            let mut a_live = live_by_stack(a_snapshot, ad, a_at, options.ignore_lines);
            let mut alignment = None;
            let mut merged_by_drop = [0, 0];
            let mut further_alignments = Vec::new();
            match options.align {
                Align::Off => {}
                Align::Auto => {
                    if let Some(found) = find_alignment(&b_live, &a_live, None) {
                        (b_live, a_live) = apply_alignment(&found, b_live, a_live);
                        for _ in 0..FURTHER_ALIGNMENT_ROUNDS {
                            let Some(more) = find_alignment(&b_live, &a_live, Some(&found)) else {
                                break;
                            };
                            (b_live, a_live) = apply_alignment(&more, b_live, a_live);
                            further_alignments.push(more);
                        }
                        alignment = Some(found);
                    }
                }
                Align::DropOuter(frames) => {
                    let frames = frames.min(MAX_DROPPED_OUTER_FRAMES);
                    let (b_count, a_count) = (b_live.len(), a_live.len());
                    b_live = drop_outer(b_live, frames);
                    a_live = drop_outer(a_live, frames);
                    merged_by_drop = [b_count - b_live.len(), a_count - a_live.len()];
                }
            }

            let mut keys: Vec<&Vec<FrameKey>> = b_live.keys().chain(a_live.keys()).collect();
            keys.sort();
            keys.dedup();
            let mut stacks: Vec<StackDelta> = keys
                .iter()
                .map(|key| {
                    let (bb, bc) = b_live.get(*key).copied().unwrap_or_default();
                    let (ab, ac) = a_live.get(*key).copied().unwrap_or_default();
                    StackDelta {
                        frames: (*key).clone(),
                        before_bytes: bb,
                        after_bytes: ab,
                        delta_bytes: ab as i64 - bb as i64,
                        before_allocations: bc,
                        after_allocations: ac,
                    }
                })
                .filter(|s| s.delta_bytes != 0)
                .collect();
            stacks.sort_by(|x, y| {
                y.delta_bytes
                    .cmp(&x.delta_bytes)
                    .then(x.frames.cmp(&y.frames))
            });
            let growth: Vec<StackDelta> = stacks
                .iter()
                .filter(|s| s.delta_bytes > 0)
                .take(STACKS_LISTED)
                .cloned()
                .collect();
            let mut shrink: Vec<StackDelta> = stacks
                .iter()
                .rev()
                .filter(|s| s.delta_bytes < 0)
                .take(STACKS_LISTED)
                .cloned()
                .collect();
            let mut listed = growth;
            listed.append(&mut shrink);

            let tree = diff_tree(&b_live, &a_live);
            let totals =
                |s: &super::DeviceSummary,
                 at: Option<usize>,
                 live: &BTreeMap<Vec<FrameKey>, (u64, u64)>| Totals {
                    peak_allocated_bytes: s.peak_allocated_bytes,
                    peak_reserved_bytes: s.peak_reserved_bytes,
                    allocated_bytes_at_snapshot: s.allocated_bytes_at_snapshot,
                    reserved_bytes_at_snapshot: s.reserved_bytes_at_snapshot,
                    allocations: s.allocations,
                    events: s.trace_entries,
                    at,
                    live_bytes_at: live.values().map(|v| v.0).sum(),
                };
            DeviceDiff {
                before_device: bd.device,
                after_device: ad.device,
                before: totals(bs, b_at, &b_live),
                after: totals(as_, a_at, &a_live),
                peak_growth_percent: (bs.peak_allocated_bytes > 0).then(|| {
                    (as_.peak_allocated_bytes as f64 - bs.peak_allocated_bytes as f64) * 100.0
                        / bs.peak_allocated_bytes as f64
                }),
                stacks: listed,
                tree,
                before_curve: curve(bd),
                after_curve: curve(ad),
                roles: role_deltas((b_snapshot, bd, b_at), (a_snapshot, ad, a_at)),
                alignment,
                further_alignments,
                merged_by_drop,
            }
        })
        .collect();
    SnapshotDiff {
        devices,
        ignore_lines: options.ignore_lines,
        align: options.align,
    }
}

/// Both sides' stacks merged into one tree: each node has its bytes before and after.
fn diff_tree(
    before: &BTreeMap<Vec<FrameKey>, (u64, u64)>,
    after: &BTreeMap<Vec<FrameKey>, (u64, u64)>,
) -> Vec<DiffNode> {
    struct Node {
        name: String,
        before: u64,
        after: u64,
        children: BTreeMap<String, usize>,
    }
    let mut nodes = vec![Node {
        name: "all".into(),
        before: 0,
        after: 0,
        children: BTreeMap::new(),
    }];
    for (side, map) in [(0, before), (1, after)] {
        for (key, &(bytes, _)) in map {
            let mut node = 0;
            for frame in std::iter::once(None).chain(key.iter().map(Some)) {
                if let Some(frame) = frame {
                    node = match nodes[node].children.get(frame) {
                        Some(&child) => child,
                        None => {
                            nodes.push(Node {
                                name: frame.clone(),
                                before: 0,
                                after: 0,
                                children: BTreeMap::new(),
                            });
                            let child = nodes.len() - 1;
                            nodes[node].children.insert(frame.clone(), child);
                            child
                        }
                    };
                }
                if side == 0 {
                    nodes[node].before += bytes;
                } else {
                    nodes[node].after += bytes;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(nodes.len());
    let mut stack = vec![(0usize, -1i64, 0u32)];
    while let Some((node, parent, depth)) = stack.pop() {
        let index = out.len() as i64;
        out.push(DiffNode {
            name: nodes[node].name.clone(),
            before_bytes: nodes[node].before,
            after_bytes: nodes[node].after,
            parent,
            depth,
        });
        let mut children: Vec<usize> = nodes[node].children.values().copied().collect();
        children.sort_by_key(|&c| (nodes[c].before.max(nodes[c].after), std::cmp::Reverse(c)));
        for child in children {
            stack.push((child, index, depth + 1));
        }
    }
    out
}
