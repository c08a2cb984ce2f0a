//! The Allocator State History: the events around a moment, as the segment map's side list,
//! and for the moment's own event its stack and the totals after it.

use super::DeviceAnalysis;
use super::memory_map::StreamNames;
use super::segment_timeline::shown_frames;
use crate::snapshot::Snapshot;
use serde::Serialize;

/// Most events asked for on either side of the moment.
pub const MAX_AROUND: usize = 200;

#[derive(Debug, Serialize)]
pub struct History {
    pub device: usize,
    /// The moment (clamped into the trace); `None` when the trace is empty or before its start.
    pub at: Option<usize>,
    pub events: usize,
    /// The events around the moment, in trace order.
    pub rows: Vec<HistoryRow>,
    pub selected: Option<SelectedEvent>,
}

#[derive(Debug, Serialize)]
pub struct HistoryRow {
    pub index: usize,
    pub action: String,
    pub size: u64,
    pub address: u64,
    /// `stream N` (see [`StreamNames`]): the raw `cudaStream_t` is a pointer.
    pub stream: String,
    /// The replay allocation the event opens or closes.
    pub allocation: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct SelectedEvent {
    #[serde(flatten)]
    pub row: HistoryRow,
    /// µs after the first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_us: Option<i64>,
    /// Innermost first, hidden frames left out.
    pub frames: Vec<String>,
    /// Totals right after the event: requested bytes held by tensors, requested bytes of
    /// frees waiting on another stream, and reserved bytes.
    pub allocated: u64,
    pub pending: u64,
    pub reserved: u64,
}

/// The events `before` and `after` around `at` (each at most [`MAX_AROUND`]).
pub fn history(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    before: usize,
    after: usize,
) -> History {
    let trace = snapshot.trace(device.device);
    let replay = &device.replay;
    let streams = StreamNames::of(snapshot, device.device);
    let at = at
        .zip(trace.len().checked_sub(1))
        .map(|(at, last)| at.min(last));
    let row = |index: usize| HistoryRow {
        index,
        action: trace.action_name(trace.action[index]).to_owned(),
        size: trace.size.get(index),
        address: trace.addr.get(index),
        stream: streams.name(trace.stream(index)),
        allocation: replay.allocation_at(index),
    };
    let centre = at.unwrap_or(0);
    let first = centre.saturating_sub(before.min(MAX_AROUND));
    let last = (centre + after.min(MAX_AROUND) + 1).min(trace.len());
    let selected = at.map(|index| {
        let pending = replay.pending_after(Some(index));
        SelectedEvent {
            row: row(index),
            // Relative to the first event, as every time the API sends.
            time_us: trace
                .has_time
                .then(|| trace.time_us.at(index).zip(trace.time_us.at(0)))
                .flatten()
                .map(|(time, first)| time - first),
            frames: shown_frames(snapshot, trace.stack.get(index)),
            allocated: replay.allocated_after(Some(index)).saturating_sub(pending),
            pending,
            reserved: replay.reserved_after(Some(index)),
        }
    });
    History {
        device: device.device,
        at,
        events: trace.len(),
        rows: (first..last).map(row).collect(),
        selected,
    }
}
