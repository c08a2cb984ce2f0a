//! The allocator's segments and blocks at any moment of the trace.
//!
//! At the last event the map is the snapshot's own (exact block sizes and states). Earlier, it is
//! rebuilt: segment events after the moment are undone from the snapshot's segments (a
//! `segment_alloc` after it means that range was not reserved yet, a `segment_free` after it that
//! it still was; `segment_map`/`segment_unmap` likewise for expandable segments), and the live
//! allocations of the replay are placed at their addresses with their size rounded up to 512
//! bytes, the caching allocator's default rounding. The trace does not record block splits, so
//! earlier maps are close to, not exactly, what the allocator held; `exact` says which.
//!
//! A block whose free was requested but not completed (it waits on another stream after
//! `record_stream`) is `active_pending_free` at every moment between the two events, as the
//! snapshot's own blocks are at the end.

use super::DeviceAnalysis;
use super::replay::AllocationId;
use super::segments::SegmentStats;
use crate::snapshot::{ActionCode, BlockState, Snapshot, StackId, StreamColumn};
use serde::Serialize;
use std::collections::BTreeMap;

/// The caching allocator rounds every request up to a multiple of this (kMinBlockSize).
const ROUNDING: u64 = 512;

#[derive(Debug, Serialize)]
pub struct MemoryMap {
    pub device: usize,
    /// The moment: after this event (`None`: before the first).
    pub at: Option<usize>,
    /// True when the blocks are the snapshot's own.
    pub exact: bool,
    pub totals: Totals,
    pub segments: Vec<MapSegment>,
    /// Short names of the device's streams, `stream_names[i]` for `streams[i]` ("stream 0" is
    /// the default stream): raw `cudaStream_t` values are pointers, above 2^53.
    pub streams: StreamNames,
    /// The cudaMalloc stacks of the segments, by stack id (each segment's `stack`).
    pub segment_stacks: BTreeMap<StackId, Vec<String>>,
}

/// A device's streams in a stable order and their short names (`stream 0` is the default).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamNames {
    /// The raw values as decimal strings (they exceed what a JSON number keeps exact).
    pub raw: Vec<String>,
    #[serde(skip)]
    values: Vec<u64>,
}

impl StreamNames {
    /// The default stream first, then the trace's streams in order of first use, then any
    /// other stream a segment names.
    pub fn of(snapshot: &Snapshot, device: usize) -> Self {
        let trace = snapshot.trace(device);
        let mut values = vec![0u64];
        let add = |value: u64, values: &mut Vec<u64>| {
            if !values.contains(&value) && values.len() < MAX_STREAMS {
                values.push(value);
            }
        };
        match &trace.stream {
            StreamColumn::Coded { streams, .. } => {
                for &value in streams {
                    add(value, &mut values);
                }
            }
            StreamColumn::Raw(column) => {
                for &value in column {
                    add(value, &mut values);
                }
            }
        }
        for segment in snapshot.device_segments(device) {
            add(segment.stream, &mut values);
        }
        Self {
            raw: values.iter().map(u64::to_string).collect(),
            values,
        }
    }

    /// The short name of `stream`: `stream N`, N its position.
    pub fn name(&self, stream: u64) -> String {
        match self.values.iter().position(|&v| v == stream) {
            Some(n) => format!("stream {n}"),
            None => "another stream".to_owned(),
        }
    }

    /// The position of `stream` (`None` past the names kept).
    pub fn index(&self, stream: u64) -> Option<usize> {
        self.values.iter().position(|&v| v == stream)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Streams named one by one: a program uses a handful; past this they are "another stream".
const MAX_STREAMS: usize = 256;

#[derive(Debug, Default, Serialize)]
pub struct Totals {
    #[serde(flatten)]
    pub stats: SegmentStats,
    pub fragmentation: f64,
    pub segments: usize,
}

#[derive(Debug, Serialize)]
pub struct MapSegment {
    pub address: u64,
    pub size: u64,
    /// The raw `cudaStream_t` (a pointer: above 2^53, so not sent; `stream_id` is).
    #[serde(skip)]
    pub stream: u64,
    /// The position of its stream in [`MemoryMap::streams`]: shown as `stream N`.
    pub stream_id: usize,
    /// The stack that called cudaMalloc (0: not recorded), a key of `segment_stacks`.
    pub stack: StackId,
    pub pool: (i64, i64),
    pub expandable: bool,
    #[serde(rename = "type")]
    pub segment_type: String,
    pub stats: SegmentStats,
    pub blocks: Vec<MapBlock>,
}

#[derive(Debug, Serialize, Clone)]
pub struct MapBlock {
    pub address: u64,
    pub size: u64,
    pub requested: u64,
    pub state: &'static str,
    /// The replay allocation held here, if any.
    pub allocation: Option<AllocationId>,
    /// For a pending free, the event of its `free_requested` (when the trace has it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_requested_at: Option<u32>,
}

/// A reserved address range and what the snapshot says about it.
#[derive(Debug, Clone)]
pub(crate) struct Range {
    pub(crate) end: u64,
    pub(crate) stream: u64,
    pub(crate) stack: StackId,
    pub(crate) pool: (i64, i64),
    pub(crate) expandable: bool,
    pub(crate) segment_type: String,
}

fn state_name(state: &BlockState) -> &'static str {
    match state {
        BlockState::ActiveAllocated => "active_allocated",
        BlockState::ActivePendingFree => "active_pending_free",
        BlockState::Inactive => "inactive",
        BlockState::Unknown(_) => "unknown",
    }
}

/// The map of `device` after event `at` (`None`: before the first event).
pub fn memory_map(snapshot: &Snapshot, device: &DeviceAnalysis, at: Option<usize>) -> MemoryMap {
    // Only segment events change the ranges, and the replay's reserved steps are one per
    // segment event: undoing those after `at` (not every event after it) costs the segment
    // events, not the trace.
    map_undoing(snapshot, device, at, move |from| {
        let steps = &device.replay.reserved_steps[..];
        let first_step = steps.partition_point(|&(event, _)| (event as usize) < from);
        steps[first_step..]
            .iter()
            .rev()
            .map(|&(event, _)| event as usize)
    })
}

/// The map after `at` (clamped to the trace): the snapshot's own at the last event, otherwise
/// rebuilt by undoing the events `undone(from)` names, newest first, `from` being the first
/// event after `at`.
fn map_undoing<Undone: Iterator<Item = usize>>(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    undone: impl FnOnce(usize) -> Undone,
) -> MemoryMap {
    let last = snapshot.trace(device.device).len().checked_sub(1);
    let at = at.zip(last).map(|(at, last)| at.min(last));
    if at == last {
        return exact(snapshot, device);
    }
    let from = at.map_or(0, |a| a + 1);
    rebuilt(snapshot, device, at, undone(from))
}

/// The reserved ranges of `device`: the snapshot's segments with the segment events among
/// `undone` (newest first; other events are passed over) undone.
pub(crate) fn reserved_ranges(
    snapshot: &Snapshot,
    device: usize,
    undone: impl Iterator<Item = usize>,
) -> BTreeMap<u64, Range> {
    let trace = snapshot.trace(device);
    let mut ranges: BTreeMap<u64, Range> = BTreeMap::new();
    for segment in snapshot.device_segments(device) {
        ranges.insert(
            segment.address,
            Range {
                end: segment.address + segment.total_size,
                stream: segment.stream,
                stack: segment.stack,
                pool: segment.pool_id,
                expandable: segment.is_expandable,
                segment_type: segment.segment_type.clone(),
            },
        );
    }
    for event in undone {
        let range = range_of_event(trace, event);
        let addr = trace.addr.get(event);
        match trace.action[event] {
            ActionCode::SEGMENT_ALLOC | ActionCode::SEGMENT_MAP => {
                remove(&mut ranges, addr, range.end);
            }
            ActionCode::SEGMENT_FREE | ActionCode::SEGMENT_UNMAP => {
                insert(&mut ranges, addr, range);
            }
            _ => {}
        }
    }
    ranges
}

/// The range a segment event names, with what the trace says of it (the pool is not traced).
pub(crate) fn range_of_event(trace: &crate::snapshot::Trace, event: usize) -> Range {
    let (addr, size) = (trace.addr.get(event), trace.size.get(event));
    Range {
        end: addr + size,
        stream: trace.stream(event),
        stack: trace.stack.get(event),
        pool: (0, 0),
        expandable: matches!(
            trace.action[event],
            ActionCode::SEGMENT_MAP | ActionCode::SEGMENT_UNMAP
        ),
        segment_type: if size < (1 << 20) * 2 + 1 {
            "small"
        } else {
            "large"
        }
        .to_owned(),
    }
}

/// The map after `at` rebuilt from the snapshot's by undoing the segment events among `undone`
/// (the events after `at`, newest first; the others are passed over).
fn rebuilt(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    undone: impl Iterator<Item = usize>,
) -> MemoryMap {
    let replay = &device.replay;

    let ranges = reserved_ranges(snapshot, device.device, undone);

    // Live allocations at their addresses. A block still alive at the end has its exact size.
    let mut exact_size: BTreeMap<u64, u64> = BTreeMap::new();
    for segment in snapshot.device_segments(device.device) {
        for block in &segment.blocks {
            if block.state == BlockState::ActiveAllocated {
                exact_size.insert(block.address, block.size);
            }
        }
    }
    let pending: BTreeMap<AllocationId, u32> = replay
        .pending_frees_after(at)
        .into_iter()
        .map(|(request, id)| (id, request))
        .collect();
    let mut live: Vec<(u64, u64, u64, AllocationId)> = replay
        .live_after(at)
        .into_iter()
        .map(|id| {
            let a = replay.allocations.at(id as usize);
            let rounded = match (a.end, exact_size.get(&a.addr)) {
                (None, Some(&size)) if size >= a.size => size,
                _ => a.size.div_ceil(ROUNDING).max(1) * ROUNDING,
            };
            (a.addr, rounded, a.size, id)
        })
        .collect();
    live.sort_unstable();

    let streams = StreamNames::of(snapshot, device.device);
    let mut segments = Vec::with_capacity(ranges.len());
    let mut totals = Totals::default();
    for (&start, range) in &ranges {
        let first = live.partition_point(|&(addr, ..)| addr < start);
        let mut blocks = Vec::new();
        let mut cursor = start;
        for &(addr, size, requested, id) in &live[first..] {
            if addr >= range.end {
                break;
            }
            if addr > cursor {
                blocks.push(free_block(cursor, addr - cursor));
            }
            let size = size.min(range.end - addr);
            let free_requested_at = pending.get(&id).copied();
            blocks.push(MapBlock {
                address: addr,
                size,
                requested: requested.min(size),
                state: if free_requested_at.is_some() {
                    "active_pending_free"
                } else {
                    "active_allocated"
                },
                allocation: Some(id),
                free_requested_at,
            });
            cursor = cursor.max(addr + size);
        }
        if cursor < range.end {
            blocks.push(free_block(cursor, range.end - cursor));
        }
        let stats = stats_of(range.end - start, &blocks);
        totals.stats.add(&stats);
        segments.push(MapSegment {
            address: start,
            size: range.end - start,
            stream: range.stream,
            stream_id: streams.index(range.stream).unwrap_or(streams.len()),
            stack: range.stack,
            pool: range.pool,
            expandable: range.expandable,
            segment_type: range.segment_type.clone(),
            stats,
            blocks,
        });
    }
    totals.segments = segments.len();
    totals.fragmentation = totals.stats.fragmentation();
    MemoryMap {
        device: device.device,
        at,
        exact: false,
        totals,
        segment_stacks: segment_stacks(snapshot, device, at, &mut segments),
        segments,
        streams,
    }
}

/// [`memory_map`] as it was: undoing every event after `at`, one by one (the reference the
/// tests compare it with).
#[cfg(test)]
pub(crate) fn memory_map_undoing_every_event(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
) -> MemoryMap {
    let events = snapshot.trace(device.device).len();
    map_undoing(snapshot, device, at, |from| (from..events).rev())
}

/// The snapshot's own segments, with each allocated block linked to its replay allocation.
fn exact(snapshot: &Snapshot, device: &DeviceAnalysis) -> MemoryMap {
    let replay = &device.replay;
    let trace = snapshot.trace(device.device);
    let last = trace.len().checked_sub(1);
    let open: BTreeMap<u64, AllocationId> = replay
        .live_after(last)
        .into_iter()
        .map(|id| (replay.allocations.addr(id as usize), id))
        .collect();
    let requested_at: BTreeMap<AllocationId, u32> = replay
        .pending_frees_after(last)
        .into_iter()
        .map(|(request, id)| (id, request))
        .collect();
    let streams = StreamNames::of(snapshot, device.device);
    let mut totals = Totals::default();
    let mut segments: Vec<MapSegment> = snapshot
        .device_segments(device.device)
        .map(|segment| {
            let stats = SegmentStats::of(segment);
            totals.stats.add(&stats);
            MapSegment {
                address: segment.address,
                size: segment.total_size,
                stream: segment.stream,
                stream_id: streams.index(segment.stream).unwrap_or(streams.len()),
                stack: segment.stack,
                pool: segment.pool_id,
                expandable: segment.is_expandable,
                segment_type: segment.segment_type.clone(),
                stats,
                blocks: segment
                    .blocks
                    .iter()
                    .map(|block| {
                        let allocation = (block.state != BlockState::Inactive)
                            .then(|| open.get(&block.address).copied())
                            .flatten();
                        MapBlock {
                            address: block.address,
                            size: block.size,
                            requested: block.requested_size,
                            state: state_name(&block.state),
                            allocation,
                            free_requested_at: (block.state == BlockState::ActivePendingFree)
                                .then(|| allocation.and_then(|id| requested_at.get(&id).copied()))
                                .flatten(),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    totals.segments = segments.len();
    totals.fragmentation = totals.stats.fragmentation();
    MemoryMap {
        device: device.device,
        at: last,
        exact: true,
        totals,
        segment_stacks: segment_stacks(snapshot, device, last, &mut segments),
        segments,
        streams,
    }
}

fn free_block(address: u64, size: u64) -> MapBlock {
    MapBlock {
        address,
        size,
        requested: 0,
        state: "inactive",
        allocation: None,
        free_requested_at: None,
    }
}

/// The distinct cudaMalloc stacks of `segments`, each as its shown frames (innermost first,
/// `name (file:line)`), the frames PyTorch's viewer hides left out. A segment the snapshot
/// recorded no stack for takes the stack of the last `segment_alloc`/`segment_map` at its
/// address up to `at` (the trace's segment events are few: one per cudaMalloc).
fn segment_stacks(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    at: Option<usize>,
    segments: &mut [MapSegment],
) -> BTreeMap<StackId, Vec<String>> {
    let trace = snapshot.trace(device.device);
    let mut traced: BTreeMap<u64, StackId> = BTreeMap::new();
    for &(event, _) in &device.replay.reserved_steps {
        let event = event as usize;
        if at.is_none_or(|at| event > at) {
            break;
        }
        if matches!(
            trace.action[event],
            ActionCode::SEGMENT_ALLOC | ActionCode::SEGMENT_MAP
        ) {
            traced.insert(trace.addr.get(event), trace.stack.get(event));
        }
    }
    for segment in segments.iter_mut() {
        if segment.stack == 0
            && let Some(&stack) = traced.get(&segment.address)
        {
            segment.stack = stack;
        }
    }
    let mut stacks = BTreeMap::new();
    for segment in segments.iter() {
        if segment.stack == 0 || stacks.contains_key(&segment.stack) {
            continue;
        }
        let frames = super::segment_timeline::shown_frames(snapshot, segment.stack);
        stacks.insert(segment.stack, frames);
    }
    stacks
}

fn stats_of(reserved: u64, blocks: &[MapBlock]) -> SegmentStats {
    let mut stats = SegmentStats {
        reserved,
        blocks: blocks.len(),
        ..SegmentStats::default()
    };
    for block in blocks {
        match block.state {
            "inactive" => {
                stats.external_free += block.size;
                stats.largest_free_block = stats.largest_free_block.max(block.size);
            }
            "active_pending_free" => {
                stats.pending_free += block.requested;
                stats.internal_free += block.size - block.requested;
            }
            _ => {
                stats.allocated += block.requested;
                stats.internal_free += block.size - block.requested;
            }
        }
    }
    stats
}

/// Removes `[start, end)` from the reserved ranges, splitting any range it cuts.
pub(crate) fn remove(ranges: &mut BTreeMap<u64, Range>, start: u64, end: u64) {
    let overlapping: Vec<u64> = ranges
        .range(..end)
        .filter(|(_, r)| r.end > start)
        .map(|(&s, _)| s)
        .collect();
    for s in overlapping {
        let Some(range) = ranges.remove(&s) else {
            continue;
        };
        if s < start {
            ranges.insert(
                s,
                Range {
                    end: start,
                    ..range.clone()
                },
            );
        }
        if range.end > end {
            ranges.insert(end, range);
        }
    }
}

/// Adds `[start, range.end)`, joining an expandable range to the ones it touches.
pub(crate) fn insert(ranges: &mut BTreeMap<u64, Range>, start: u64, range: Range) {
    remove(ranges, start, range.end);
    let mut start = start;
    let mut range = range;
    if range.expandable {
        if let Some((&before, previous)) = ranges.range(..start).next_back()
            && previous.end == start
            && previous.expandable
        {
            start = before;
            ranges.remove(&before);
        }
        if let Some(next) = ranges.get(&range.end).cloned()
            && next.expandable
        {
            ranges.remove(&range.end);
            range.end = next.end;
        }
    }
    ranges.insert(start, range);
}
