//! The timeline as it was before the view index, for the tests only: each column's totals read
//! event by event and the bands picked from every allocation of at least the threshold's size.
//! The comparison is analysis/view_reference.rs; a child of the timeline, so the internals it
//! shares (the band constants, the stacking) stay private.

use super::{MAX_BANDS, MIN_BAND_AREA, MIN_BAND_COLUMNS, Timeline, Window, columns, stack_bands};
use crate::analysis::DeviceAnalysis;
use crate::analysis::replay::{AllocationId, Replay};
use crate::snapshot::Trace;

/// The highest reserved total right after any event in `from..=to`.
fn reserved_max_scanning(replay: &Replay, from: usize, to: usize) -> u64 {
    let mut max = replay.reserved_after(Some(from));
    let steps = &replay.reserved_steps;
    let first = steps.partition_point(|&(event, _)| (event as usize) <= from);
    for &(event, bytes) in &steps[first..] {
        if event as usize > to {
            break;
        }
        max = max.max(bytes);
    }
    max
}

/// The timeline, each column's totals read event by event and the bands picked from every
/// allocation of at least the threshold's size.
pub(crate) fn timeline_scanning(
    device: &DeviceAnalysis,
    trace: &Trace,
    window: Window,
) -> Timeline {
    let replay = &device.replay;
    if trace.is_empty() {
        return Timeline::empty(window.axis, replay.allocated_at_start);
    }
    let window = window.clamped(trace.len());
    let bounds = columns(&window, trace);
    let width = bounds.len() - 1;

    // Totals per column.
    let mut allocated_max = Vec::with_capacity(width);
    let mut allocated_min = Vec::with_capacity(width);
    let mut reserved = Vec::with_capacity(width);
    for c in 0..width {
        let (from, to) = (bounds[c], bounds[c + 1].max(bounds[c] + 1).min(trace.len()));
        let before = replay.allocated_after(from.checked_sub(1));
        let (lo, hi) = replay
            .allocated_over(from, to)
            .fold((before, before), |(lo, hi), v| (lo.min(v), hi.max(v)));
        allocated_max.push(hi);
        allocated_min.push(lo);
        reserved.push(reserved_max_scanning(replay, from, to - 1));
    }
    let y_max = allocated_max
        .iter()
        .chain(&reserved)
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    let threshold = (y_max / window.height as u64).max(1);

    // Bands: at least a pixel tall and `MIN_BAND_AREA` pixels in all, overlapping the window.
    // Smaller ones are summed into the columns' totals, so the answer stays bounded by the
    // window's size however long the trace is; zooming in makes every allocation a band.
    let column_events = ((window.end + 1 - window.start) as f64 / width.max(1) as f64).max(1.0);
    let pixels_per_byte = window.height as f64 / y_max as f64;
    // Every allocation, largest first (ties by id), as the old code kept them.
    let allocations = &replay.allocations;
    let mut by_size: Vec<AllocationId> = (0..allocations.len() as AllocationId).collect();
    by_size.sort_unstable_by(|&a, &b| {
        allocations
            .size(b as usize)
            .cmp(&allocations.size(a as usize))
            .then(a.cmp(&b))
    });
    let chosen: Vec<AllocationId> = by_size
        .into_iter()
        .take_while(|&id| replay.allocations.size(id as usize) >= threshold)
        .filter(|&id| {
            let a = replay.allocations.at(id as usize);
            let first = a.start.map_or(0, |s| s as usize);
            let last = a.end.map_or(trace.len(), |e| e as usize);
            let visible = last
                .min(window.end + 1)
                .saturating_sub(first.max(window.start));
            let area = a.size as f64 * pixels_per_byte * (visible as f64 / column_events);
            first <= window.end
                && last >= window.start
                && visible as f64 >= MIN_BAND_COLUMNS * column_events
                && area >= MIN_BAND_AREA
        })
        .collect();
    // Selection aside, the bands are stacked as they always were (the stacking did not change).
    let (bands, big_top) = stack_bands(replay, trace.len(), &window, &bounds, chosen, MAX_BANDS);
    Timeline {
        start: window.start,
        end: window.end,
        width,
        axis: window.axis,
        events: trace.len(),
        column_start: bounds,
        allocated_max,
        allocated_min,
        reserved,
        big_top,
        threshold,
        y_max,
        y_range: [0, y_max],
        detail: MAX_BANDS,
        bands,
    }
}
