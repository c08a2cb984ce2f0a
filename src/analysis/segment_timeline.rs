//! The Active Cached Segment Timeline: the reserved address ranges over time, one band per
//! range, stacked by address, so reserved memory is seen segment by segment.
//!
//! A range is a `segment_alloc` up to its `segment_free`, or a `segment_map` of an expandable
//! segment up to the `segment_unmap` that takes it back (an unmap of part of a range ends it and
//! starts what is left as new ranges, so every band keeps one size). The ranges alive at the
//! start are the snapshot's segments with every later segment event undone, as the segment map
//! does. Each column of the answer shows the ranges after the event of the column where the
//! reserved total is highest, so the bands of a column sum to the allocation timeline's
//! reserved curve in that column.
//!
//! The answer is bounded by the width and by [`MAX_BANDS`]: it costs the trace's segment
//! events (a few per cudaMalloc, not per allocation) and the columns times the ranges alive.

use super::DeviceAnalysis;
use super::memory_map::{Range, StreamNames, range_of_event, remove, reserved_ranges};
use super::timeline::{Axis, Window, columns};
use crate::snapshot::{ActionCode, Snapshot, StackId};
use serde::Serialize;
use std::collections::BTreeMap;

/// Most bands one answer carries; smaller ranges beyond it are summed per column in `other`.
pub const MAX_BANDS: usize = 4096;

/// Frames kept per cudaMalloc stack in the answer.
const STACK_FRAMES: usize = 40;

#[derive(Debug, Serialize)]
pub struct SegmentTimeline {
    pub device: usize,
    /// The window: first and last event, inclusive, and the trace's length.
    pub start: usize,
    pub end: usize,
    pub events: usize,
    pub axis: Axis,
    /// `width + 1` event indices: column `c` reads events `column_start[c]..column_start[c+1]`.
    pub column_start: Vec<usize>,
    /// Per column, the reserved total drawn (the bands plus `other`).
    pub reserved: Vec<u64>,
    /// Per column, the event whose state the column shows (the first where reserved is highest).
    pub shown_event: Vec<usize>,
    /// Per column, bytes of ranges not sent as bands (past `MAX_BANDS`), stacked on top.
    pub other: Vec<u64>,
    /// The bands, in the shape of the allocation timeline's (`static/lib/timeline-model.js`
    /// reads both): parallel arrays, `points` a flat `[column, offset, ...]` per band where its
    /// offset changes. `start`/`end` are the first and last column's events, so the bands cover
    /// exactly the columns where the range is shown.
    pub bands: SegmentBands,
    pub streams: StreamNames,
    /// The cudaMalloc stacks of the bands, by stack id.
    pub stacks: BTreeMap<StackId, Vec<String>>,
}

#[derive(Debug, Default, Serialize)]
pub struct SegmentBands {
    pub id: Vec<u32>,
    pub size: Vec<u64>,
    pub start: Vec<u32>,
    pub end: Vec<u32>,
    pub points: Vec<Vec<u64>>,
    pub address: Vec<u64>,
    /// The segment_alloc/segment_map that made the range (`null`: reserved from the start).
    pub made_at: Vec<Option<u32>>,
    /// The segment_free/segment_unmap that ended it (`null`: still reserved at the end).
    pub freed_at: Vec<Option<u32>>,
    /// Position in `streams`.
    pub stream: Vec<usize>,
    pub pool: Vec<(i64, i64)>,
    pub expandable: Vec<bool>,
    pub stack: Vec<StackId>,
}

/// One reserved range over its life.
#[derive(Debug, Clone)]
struct Piece {
    address: u64,
    range: Range,
    /// Alive after events `start..end` (`None`: from the start / to the end).
    start: Option<u32>,
    end: Option<u32>,
}

impl Piece {
    fn size(&self) -> u64 {
        self.range.end - self.address
    }

    fn alive_after(&self, event: usize) -> bool {
        self.start.is_none_or(|s| s as usize <= event)
            && self.end.is_none_or(|e| e as usize > event)
    }
}

/// Every reserved range of `device` over the trace.
fn pieces(snapshot: &Snapshot, device: &DeviceAnalysis) -> Vec<Piece> {
    let trace = snapshot.trace(device.device);
    let segment_events: Vec<usize> = device
        .replay
        .reserved_steps
        .iter()
        .map(|&(event, _)| event as usize)
        .collect();
    let at_start = reserved_ranges(
        snapshot,
        device.device,
        segment_events.iter().rev().copied(),
    );
    // What the snapshot says of a range (pool, stack) is better than the trace's guess.
    let at_end: BTreeMap<u64, Range> = reserved_ranges(snapshot, device.device, std::iter::empty());
    let described = |address: u64, traced: Range| -> Range {
        match at_end.range(..=address).next_back() {
            Some((_, known)) if known.end > address => Range {
                end: traced.end,
                stream: known.stream,
                stack: if traced.stack != 0 {
                    traced.stack
                } else {
                    known.stack
                },
                pool: known.pool,
                expandable: known.expandable || traced.expandable,
                segment_type: known.segment_type.clone(),
            },
            _ => traced,
        }
    };

    let mut pieces: Vec<Piece> = Vec::new();
    // Start address -> piece id of the ranges alive now.
    let mut alive: BTreeMap<u64, usize> = BTreeMap::new();
    for (address, range) in at_start {
        alive.insert(address, pieces.len());
        pieces.push(Piece {
            address,
            range,
            start: None,
            end: None,
        });
    }
    for event in segment_events {
        let addr = trace.addr.get(event);
        let traced = range_of_event(trace, event);
        let end = traced.end;
        // Ranges this event overlaps end here; what an unmap leaves of them starts again.
        let overlapping: Vec<(u64, usize)> = alive
            .range(..end)
            .filter(|&(_, &id)| pieces[id].range.end > addr)
            .map(|(&a, &id)| (a, id))
            .collect();
        let mut rest: BTreeMap<u64, Range> = BTreeMap::new();
        for (start, id) in overlapping {
            alive.remove(&start);
            pieces[id].end = Some(event as u32);
            // Alive ranges are disjoint: no joining needed (each keeps its own band).
            rest.insert(start, pieces[id].range.clone());
        }
        remove(&mut rest, addr, end);
        if matches!(
            trace.action[event],
            ActionCode::SEGMENT_ALLOC | ActionCode::SEGMENT_MAP
        ) {
            rest.insert(addr, described(addr, traced));
        }
        for (start, range) in rest {
            alive.insert(start, pieces.len());
            pieces.push(Piece {
                address: start,
                range,
                start: Some(event as u32),
                end: None,
            });
        }
    }
    pieces
}

/// The segment timeline of `device` for `window`.
pub fn segment_timeline(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    window: Window,
) -> SegmentTimeline {
    let trace = snapshot.trace(device.device);
    let streams = StreamNames::of(snapshot, device.device);
    let mut answer = SegmentTimeline {
        device: device.device,
        start: 0,
        end: 0,
        events: trace.len(),
        axis: window.axis,
        column_start: Vec::new(),
        reserved: Vec::new(),
        shown_event: Vec::new(),
        other: Vec::new(),
        bands: SegmentBands::default(),
        streams,
        stacks: BTreeMap::new(),
    };
    if trace.is_empty() {
        return answer;
    }
    let window = window.clamped(trace.len());
    let bounds = columns(&window, trace);
    let width = bounds.len() - 1;
    let replay = &device.replay;
    let steps = &replay.reserved_steps[..];

    // Per column, the first event where reserved is highest (as the timeline's reserved curve
    // takes the highest of the column).
    let mut shown = Vec::with_capacity(width);
    for c in 0..width {
        let (from, to) = (bounds[c], bounds[c + 1].max(bounds[c] + 1).min(trace.len()));
        let mut best = (replay.reserved_after(Some(from)), from);
        let first = steps.partition_point(|&(event, _)| (event as usize) <= from);
        for &(event, bytes) in &steps[first..] {
            if event as usize >= to {
                break;
            }
            if bytes > best.0 {
                best = (bytes, event as usize);
            }
        }
        shown.push(best.1);
    }

    let pieces = pieces(snapshot, device);
    // The ranges shown in the window, the largest first when there are too many.
    let (first_shown, last_shown) = (shown[0], shown[width - 1]);
    let mut in_window: Vec<usize> = (0..pieces.len())
        .filter(|&id| {
            let piece = &pieces[id];
            piece.start.is_none_or(|s| s as usize <= last_shown)
                && piece.end.is_none_or(|e| e as usize > first_shown)
        })
        .collect();
    if in_window.len() > MAX_BANDS {
        in_window.sort_by_key(|&id| std::cmp::Reverse(pieces[id].size()));
        in_window.truncate(MAX_BANDS);
    }
    let mut band_of = vec![usize::MAX; pieces.len()];
    for (band, &id) in in_window.iter().enumerate() {
        band_of[id] = band;
    }
    let bands = in_window.len();
    let mut points: Vec<Vec<u64>> = vec![Vec::new(); bands];
    let mut first_column = vec![usize::MAX; bands];
    let mut last_column = vec![0usize; bands];
    let mut last_offset = vec![u64::MAX; bands];

    // Sweep the columns: ranges sorted by start enter, by end leave.
    let mut by_start: Vec<usize> = (0..pieces.len()).collect();
    by_start.sort_by_key(|&id| pieces[id].start.map_or(-1, i64::from));
    let mut next = 0;
    let mut alive: BTreeMap<u64, usize> = BTreeMap::new();
    for (c, &event) in shown.iter().enumerate() {
        while next < by_start.len()
            && pieces[by_start[next]]
                .start
                .is_none_or(|s| s as usize <= event)
        {
            let id = by_start[next];
            alive.insert(pieces[id].address, id);
            next += 1;
        }
        alive.retain(|_, id| pieces[*id].alive_after(event));
        let mut offset = 0u64;
        let mut other = 0u64;
        for &id in alive.values() {
            let size = pieces[id].size();
            match band_of[id] {
                usize::MAX => other += size,
                band => {
                    if first_column[band] == usize::MAX || last_offset[band] != offset {
                        points[band].extend([c as u64, offset]);
                        last_offset[band] = offset;
                    }
                    first_column[band] = first_column[band].min(c);
                    last_column[band] = c;
                    offset += size;
                }
            }
        }
        answer.reserved.push(offset + other);
        answer.other.push(other);
    }

    for (band, &id) in in_window.iter().enumerate() {
        if first_column[band] == usize::MAX {
            continue;
        }
        let piece = &pieces[id];
        let out = &mut answer.bands;
        out.id.push(id as u32);
        out.size.push(piece.size());
        out.start.push(bounds[first_column[band]] as u32);
        out.end.push(bounds[last_column[band]] as u32);
        out.points.push(std::mem::take(&mut points[band]));
        out.address.push(piece.address);
        out.made_at.push(piece.start);
        out.freed_at.push(piece.end);
        out.stream.push(
            answer
                .streams
                .index(piece.range.stream)
                .unwrap_or(answer.streams.len()),
        );
        out.pool.push(piece.range.pool);
        out.expandable.push(piece.range.expandable);
        out.stack.push(piece.range.stack);
        if piece.range.stack != 0 && !answer.stacks.contains_key(&piece.range.stack) {
            answer
                .stacks
                .insert(piece.range.stack, shown_frames(snapshot, piece.range.stack));
        }
    }
    answer.start = window.start;
    answer.end = window.end;
    answer.column_start = bounds;
    answer.shown_event = shown;
    answer
}

/// A stack's frames as the views show them (hidden frames left out), innermost first.
pub(crate) fn shown_frames(snapshot: &Snapshot, stack: StackId) -> Vec<String> {
    snapshot
        .stacks
        .get(stack)
        .iter()
        .map(|&f| snapshot.frames.get(f))
        .filter(|frame| !frame.is_hidden())
        .take(STACK_FRAMES)
        .map(|frame| format!("{} ({}:{})", frame.name, frame.filename, frame.line))
        .collect()
}
