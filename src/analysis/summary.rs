//! The summary of a snapshot: the numbers `snapview summary` prints and the server lists.

use super::findings::{Finding, device_findings};
use super::roles::UserRules;
use super::{Analysis, Note, Peak, SegmentStats, StackBytes, notes, segments, top_stacks};
use crate::snapshot::{ActionCode, Snapshot, SourceInfo};
use serde::Serialize;
use std::collections::BTreeMap;

/// How many stacks the summary lists at the peak.
const TOP_STACKS: usize = 10;

/// `Deserialize` is for the stored index (`crate::index`), which keeps the summary it made.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Summary {
    pub devices: Vec<DeviceSummary>,
    /// Segments and blocks over all devices.
    pub segments: usize,
    pub blocks: usize,
    pub notes: Vec<Note>,
    pub source: SourceInfo,
    /// Findings about the whole file rather than one device (none yet are file-wide).
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct DeviceSummary {
    pub device: usize,
    pub trace_entries: usize,
    /// Count of each action, by torch's name.
    pub actions: BTreeMap<String, usize>,
    /// Allocations in the replay (traced, freed-without-alloc, and ghosts).
    pub allocations: usize,
    /// Highest requested bytes live at once, by PyTorch's viewer's rules.
    pub peak_allocated_bytes: u64,
    /// The event after which the peak was first reached (`null`: before the first event).
    pub peak_event_index: Option<usize>,
    pub peak_time_us: Option<i64>,
    pub peak_reserved_bytes: u64,
    pub peak_reserved_event_index: Option<usize>,
    /// Requested bytes of `active_allocated` blocks in the segments.
    pub allocated_bytes_at_snapshot: u64,
    /// Sum of segment sizes.
    pub reserved_bytes_at_snapshot: u64,
    pub segment_stats: SegmentStats,
    pub segments: usize,
    pub blocks: usize,
    pub oom_events: Vec<OomEvent>,
    /// Stacks holding the most bytes at the peak.
    pub top_stacks_at_peak: Vec<StackBytes>,
    /// Bytes live at the peak, by role (see docs/roles.md); frees still pending are not here
    /// but in `pending_at_peak_bytes`.
    pub roles_at_peak: BTreeMap<String, u64>,
    /// Bytes live after the last event (at the dump), by role; pending frees aside, as above.
    pub roles_at_snapshot: BTreeMap<String, u64>,
    /// Requested bytes whose free waited on another stream at the peak: PyTorch's viewer counts
    /// them in the peak (they are not reusable yet), no tensor holds them.
    #[serde(default)]
    pub pending_at_peak_bytes: u64,
    /// The same after the last event: the snapshot's `active_pending_free` blocks.
    #[serde(default)]
    pub pending_bytes_at_snapshot: u64,
    /// Diagnoses with the fix, warnings first.
    pub findings: Vec<Finding>,
}

/// An `oom` event: the allocator could not serve a request.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct OomEvent {
    pub event_index: usize,
    pub requested_bytes: u64,
    /// What CUDA reported free on the device at that moment.
    pub device_free_bytes: Option<u64>,
    pub stream: u64,
    pub time_us: Option<i64>,
}

impl Summary {
    pub fn new(snapshot: &Snapshot, analysis: &Analysis) -> Self {
        Self::with_rules(snapshot, analysis, &UserRules::default())
    }

    /// The summary with roles decided by `rules` as well as the built-in ones.
    pub fn with_rules(snapshot: &Snapshot, analysis: &Analysis, rules: &UserRules) -> Self {
        let devices = analysis
            .devices
            .iter()
            .map(|device| {
                let trace = snapshot.trace(device.device);
                let replay = &device.replay;
                let mut actions = BTreeMap::new();
                for &code in &trace.action {
                    *actions
                        .entry(trace.action_name(code).to_owned())
                        .or_default() += 1;
                }
                let peak: Peak = replay.peak_allocated(trace);
                let peak_reserved = replay.peak_reserved(trace);
                let live = replay.live_after(peak.event_index);
                let roles = device.roles(snapshot, rules);
                let last = replay.len().checked_sub(1);
                let at_snapshot = replay.live_after(last);
                // Pending frees are said once, as pending, not also under their role.
                let held = |live: &[u32], at: Option<usize>| -> Vec<u32> {
                    let pending: std::collections::BTreeSet<u32> = replay
                        .pending_frees_after(at)
                        .into_iter()
                        .map(|(_, id)| id)
                        .collect();
                    live.iter()
                        .copied()
                        .filter(|id| !pending.contains(id))
                        .collect()
                };
                let stats = segments::totals(snapshot.device_segments(device.device));
                let oom_events = trace
                    .action
                    .iter()
                    .enumerate()
                    .filter(|&(_, &a)| a == ActionCode::OOM)
                    .map(|(i, _)| OomEvent {
                        event_index: i,
                        requested_bytes: trace.size.get(i),
                        device_free_bytes: trace.device_free.get(&i).copied(),
                        stream: trace.stream(i),
                        time_us: trace.has_time.then_some(trace.time_us.get(i)),
                    })
                    .collect();
                DeviceSummary {
                    device: device.device,
                    trace_entries: trace.len(),
                    actions,
                    allocations: replay.allocations.len(),
                    peak_allocated_bytes: peak.bytes,
                    peak_event_index: peak.event_index,
                    peak_time_us: peak.time_us,
                    peak_reserved_bytes: peak_reserved.bytes,
                    peak_reserved_event_index: peak_reserved.event_index,
                    allocated_bytes_at_snapshot: stats.allocated,
                    reserved_bytes_at_snapshot: stats.reserved,
                    segment_stats: stats,
                    segments: snapshot.device_segments(device.device).count(),
                    blocks: stats.blocks,
                    oom_events,
                    top_stacks_at_peak: top_stacks(
                        snapshot,
                        &replay.allocations,
                        &live,
                        TOP_STACKS,
                    ),
                    roles_at_peak: roles.bytes_by_role(replay, &held(&live, peak.event_index)),
                    roles_at_snapshot: roles.bytes_by_role(replay, &held(&at_snapshot, last)),
                    pending_at_peak_bytes: replay.pending_after(peak.event_index),
                    pending_bytes_at_snapshot: replay.pending_after(last),
                    findings: device_findings(snapshot, device, roles),
                }
            })
            .collect();
        Self {
            devices,
            segments: snapshot.segments.len(),
            blocks: snapshot.segments.iter().map(|s| s.blocks.len()).sum(),
            notes: notes(snapshot, analysis),
            source: snapshot.source.clone(),
            findings: Vec::new(),
        }
    }
}
