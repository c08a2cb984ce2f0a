//! The summary of a snapshot: the numbers `snapview summary` prints and the server lists.

use super::findings::{Finding, device_findings};
use super::roles::UserRules;
use super::{
    Analysis, DeviceAnalysis, Note, Peak, SegmentStats, StackBytes, notes, segments, top_stacks,
};
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

    /// The summary with roles decided by `rules` as well as the built-in ones. Devices are
    /// summarised on threads of their own (up to [`crate::snapshot::default_threads`] at once),
    /// and the notes beside them.
    pub fn with_rules(snapshot: &Snapshot, analysis: &Analysis, rules: &UserRules) -> Self {
        let (devices, notes) = std::thread::scope(|scope| {
            let notes = scope.spawn(|| notes(snapshot, analysis));
            let devices = crate::threads::map_on_threads(
                crate::snapshot::default_threads(),
                analysis.devices.len(),
                |i| device_summary(snapshot, &analysis.devices[i], rules),
            );
            (devices, crate::threads::joined(notes.join()))
        });
        Self {
            devices,
            segments: snapshot.segments.len(),
            blocks: snapshot.segments.iter().map(|s| s.blocks.len()).sum(),
            notes,
            source: snapshot.source.clone(),
            findings: Vec::new(),
        }
    }
}

/// One device's summary. The role pass is the longest step after decoding, so it runs on a
/// thread of its own while this one counts actions, finds the peaks and ranks the stacks.
fn device_summary(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    rules: &UserRules,
) -> DeviceSummary {
    let trace = snapshot.trace(device.device);
    let replay = &device.replay;
    let started = std::time::Instant::now();
    let (summary, live_at_peak, roles) = std::thread::scope(|scope| {
        let deciding = scope.spawn(|| device.roles(snapshot, rules));
        // Counted by code first: a name per event would be 32 million strings.
        let mut by_code = [0usize; 256];
        for &code in &trace.action {
            by_code[usize::from(code.0)] += 1;
        }
        let mut actions = BTreeMap::new();
        for (code, &n) in by_code.iter().enumerate().filter(|&(_, &n)| n > 0) {
            let name = trace.action_name(ActionCode(code as u8));
            *actions.entry(name.to_owned()).or_default() += n;
        }
        let peak: Peak = replay.peak_allocated(trace);
        let peak_reserved = replay.peak_reserved(trace);
        let stats = segments::totals(snapshot.device_segments(device.device));
        let oom_events = trace
            .events_of(ActionCode::OOM)
            .map(|i| OomEvent {
                event_index: i,
                requested_bytes: trace.size.get(i),
                device_free_bytes: trace.device_free.get(&i).copied(),
                stream: trace.stream(i),
                time_us: trace.has_time.then_some(trace.time_us.get(i)),
            })
            .collect();
        let live = replay.live_after(peak.event_index);
        let summary = DeviceSummary {
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
            top_stacks_at_peak: top_stacks(snapshot, &replay.allocations, &live, TOP_STACKS),
            roles_at_peak: BTreeMap::new(),
            roles_at_snapshot: BTreeMap::new(),
            pending_at_peak_bytes: replay.pending_after(peak.event_index),
            pending_bytes_at_snapshot: replay.pending_after(replay.len().checked_sub(1)),
            findings: Vec::new(),
        };
        tracing::debug!(
            ms = started.elapsed().as_millis() as u64,
            "summary: counted"
        );
        (summary, live, crate::threads::joined(deciding.join()))
    });
    tracing::debug!(
        ms = started.elapsed().as_millis() as u64,
        "summary: roles decided"
    );
    let last = replay.len().checked_sub(1);
    // Pending frees are said once, as pending, not also under their role.
    let held = |mut live: Vec<u32>, at: Option<usize>| -> Vec<u32> {
        let pending: std::collections::BTreeSet<u32> = replay
            .pending_frees_after(at)
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        live.retain(|id| !pending.contains(id));
        live
    };
    let summary = DeviceSummary {
        roles_at_peak: roles.bytes_by_role(replay, &held(live_at_peak, summary.peak_event_index)),
        roles_at_snapshot: roles.bytes_by_role(replay, &held(replay.live_after(last), last)),
        findings: device_findings(snapshot, device, roles),
        ..summary
    };
    tracing::debug!(
        ms = started.elapsed().as_millis() as u64,
        "summary: findings"
    );
    summary
}
