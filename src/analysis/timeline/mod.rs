//! The allocation timeline at a level of detail: only what a window of a given pixel size can
//! show (see `docs/views-api.md`).
//!
//! Bands are allocations at least two columns wide and 16 square pixels in all (the
//! `MIN_BAND_*` constants); they stack bottom-up in
//! allocation order, so a band only moves when a band below it is freed, and its outline is a
//! handful of points. Everything smaller is summed per column as min/max of the total, so spikes
//! survive. The payload is bounded by the width, not by the trace.

mod column_list;
#[cfg(test)]
pub(crate) mod reference;
mod stacking;
#[cfg(test)]
mod tests;

pub use column_list::{
    ColumnAllocations, ColumnError, MAX_COLUMN_EVENTS, MAX_COLUMN_ROWS, column_allocations,
};

use super::DeviceAnalysis;
use super::extrema::ByPosition;
use super::replay::{AllocationId, Replay};
use super::view_index::{ViewIndex, band_extent};
use crate::snapshot::Trace;
use serde::Serialize;
use stacking::stack_bands;

/// What to draw and how big.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// First and last event index, inclusive.
    pub start: usize,
    pub end: usize,
    pub width: usize,
    pub height: usize,
    pub axis: Axis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// Columns of equal event counts (as PyTorch's viewer).
    Event,
    /// Columns of equal wall time.
    Time,
}

#[derive(Debug, Serialize)]
pub struct Timeline {
    pub start: usize,
    pub end: usize,
    pub width: usize,
    pub axis: Axis,
    pub events: usize,
    pub column_start: Vec<usize>,
    pub allocated_max: Vec<u64>,
    pub allocated_min: Vec<u64>,
    pub reserved: Vec<u64>,
    pub big_top: Vec<u64>,
    pub threshold: u64,
    pub y_max: u64,
    /// The bytes at the bottom and top of the plot the bands were chosen for: `[0, y_max]`
    /// unless the request zoomed the byte axis (`y0`, `y1`).
    pub y_range: [u64; 2],
    /// The most bands this answer could hold (the request's `detail`).
    pub detail: usize,
    pub bands: Bands,
}

/// The bands, column-wise (parallel arrays keep the JSON small: thousands of bands fit in
/// a couple of hundred KB).
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Bands {
    pub id: Vec<AllocationId>,
    pub size: Vec<u64>,
    /// Event of the alloc; `null` when alive from the start.
    pub start: Vec<Option<u32>>,
    /// Event of the free; `null` when alive at the end.
    pub end: Vec<Option<u32>>,
    /// Per band, `column, offset` pairs flattened: the bottom edge from that column on.
    pub points: Vec<Vec<u64>>,
}

impl Bands {
    pub fn len(&self) -> usize {
        self.id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.id.is_empty()
    }
}

/// Smallest band drawn on its own: square pixels, and columns wide.
const MIN_BAND_AREA: f64 = 16.0;
const MIN_BAND_COLUMNS: f64 = 2.0;
/// Most bands in one answer (about 100 bytes of JSON each); only a window over a very long run
/// has more candidates, and then the ones covering the most pixels are kept.
pub(crate) const MAX_BANDS: usize = 2000;

/// Most columns a request may ask for.
pub const MAX_WIDTH: usize = 8192;

/// The most bands a request may ask for (`detail`): stacking costs the columns times the bands
/// live in each, so this keeps a window of the longest trace within the views' time budget.
pub const MAX_DETAIL: usize = 5_000;

/// What a window is zoomed to on the byte axis and how many allocations it may draw one by one
/// (PyTorch's viewer calls the latter "detail"). Zooming the byte axis lowers the smallest band
/// with it: a band needs a pixel of the zoomed axis, not of the whole one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detail {
    /// The bytes at the bottom and top of the plot; `None`: from 0 to the window's maximum.
    pub y_range: Option<(u64, u64)>,
    /// Most bands in the answer; the ones covering the most pixels are kept.
    pub max_bands: usize,
}

impl Default for Detail {
    fn default() -> Self {
        Self {
            y_range: None,
            max_bands: MAX_BANDS,
        }
    }
}

impl Detail {
    /// Sane values: a byte range of at least one byte per pixel row, 1 to [`MAX_DETAIL`] bands.
    pub fn clamped(self, height: usize) -> Self {
        let y_range = self.y_range.map(|(low, high)| {
            let low = low.min(high);
            (low, high.max(low.saturating_add(height as u64)))
        });
        Self {
            y_range,
            max_bands: self.max_bands.clamp(1, MAX_DETAIL),
        }
    }

    /// The byte range drawn when the window's own maximum is `y_max`.
    fn range(&self, y_max: u64) -> (u64, u64) {
        self.y_range.unwrap_or((0, y_max))
    }
}

impl Window {
    /// A window clamped to the trace (`len` events) with sane sizes.
    pub fn clamped(mut self, len: usize) -> Self {
        let last = len.saturating_sub(1);
        self.end = self.end.min(last);
        self.start = self.start.min(self.end);
        self.width = self.width.clamp(1, MAX_WIDTH);
        self.height = self.height.clamp(16, 8192);
        self
    }
}

/// Column boundaries: `width + 1` event indices, the last one past the window.
pub fn columns(window: &Window, trace: &Trace) -> Vec<usize> {
    let span = window.end + 1 - window.start;
    let width = window.width.min(span.max(1));
    match window.axis {
        Axis::Time if trace.has_time && span > 1 => {
            let t0 = trace.time_us.get(window.start);
            let t1 = trace.time_us.get(window.end).max(t0 + 1);
            let mut bounds: Vec<usize> = (0..=width)
                .map(|c| {
                    let t = t0 + ((t1 - t0) as f64 * c as f64 / width as f64) as i64;
                    window.start
                        + trace
                            .time_us
                            .partition_point(window.start..window.end + 1, |x| x < t)
                })
                .collect();
            bounds[0] = window.start;
            bounds[width] = window.end + 1;
            bounds
        }
        _ => (0..=width)
            .map(|c| window.start + (span as u128 * c as u128 / width as u128) as usize)
            .collect(),
    }
}

/// The column holding event `event` (clamped into the window).
fn column_of(bounds: &[usize], event: usize) -> usize {
    let c = bounds.partition_point(|&b| b <= event);
    c.saturating_sub(1).min(bounds.len().saturating_sub(2))
}

/// The highest reserved total right after any event in `from..=to`: the total after `from`,
/// and every step in `from + 1..=to` (read from the view index, not step by step).
fn reserved_max_between(replay: &Replay, index: &ViewIndex, from: usize, to: usize) -> u64 {
    let steps = &replay.reserved_steps[..];
    let first = steps.partition_point(|&(event, _)| (event as usize) <= from);
    let last = steps.partition_point(|&(event, _)| (event as usize) <= to);
    let step_bytes = ByPosition(|i: usize| steps[i].1);
    replay
        .reserved_after(Some(from))
        .max(index.reserved.max(&step_bytes, first, last))
}

impl Timeline {
    /// The timeline of a device with no events: nothing but the memory alive from the start.
    fn empty(axis: Axis, y_max: u64) -> Self {
        Self {
            start: 0,
            end: 0,
            width: 0,
            axis,
            events: 0,
            column_start: Vec::new(),
            allocated_max: Vec::new(),
            allocated_min: Vec::new(),
            reserved: Vec::new(),
            big_top: Vec::new(),
            threshold: 0,
            y_max,
            y_range: [0, y_max],
            detail: MAX_BANDS,
            bands: Bands::default(),
        }
    }
}

/// The timeline of one device for `window`, at the default detail (no zoom on bytes).
pub fn timeline(device: &DeviceAnalysis, trace: &Trace, window: Window) -> Timeline {
    timeline_detailed(device, trace, window, Detail::default())
}

/// The timeline of one device for `window`, zoomed on the byte axis and with as many bands as
/// `detail` says.
pub fn timeline_detailed(
    device: &DeviceAnalysis,
    trace: &Trace,
    window: Window,
    detail: Detail,
) -> Timeline {
    let replay = &device.replay;
    if trace.is_empty() {
        return Timeline::empty(window.axis, replay.allocated_at_start);
    }
    let window = window.clamped(trace.len());
    let detail = detail.clamped(window.height);
    let bounds = columns(&window, trace);
    let width = bounds.len() - 1;

    // Totals per column: the extremes of the total before the column and after each of its
    // events (a column reads at least one event, even an empty one on the time axis).
    let index = device.views();
    let mut allocated_max = Vec::with_capacity(width);
    let mut allocated_min = Vec::with_capacity(width);
    let mut reserved = Vec::with_capacity(width);
    for c in 0..width {
        let (from, to) = (bounds[c], bounds[c + 1].max(bounds[c] + 1).min(trace.len()));
        let before = replay.allocated_after(from.checked_sub(1));
        allocated_max.push(before.max(index.allocated.max(replay, from, to)));
        allocated_min.push(before.min(index.allocated.min(replay, from, to)));
        reserved.push(reserved_max_between(replay, index, from, to - 1));
    }
    let y_max = allocated_max
        .iter()
        .chain(&reserved)
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    // A pixel row of the byte range drawn: the whole window's, or the zoomed one.
    let (y_low, y_high) = detail.range(y_max);
    let y_span = y_high.saturating_sub(y_low).max(1);
    let threshold = (y_span / window.height as u64).max(1);

    // Bands: at least a pixel tall and `MIN_BAND_AREA` pixels in all, overlapping the window.
    // Smaller ones are summed into the columns' totals, so the answer stays bounded by the
    // window's size however long the trace is; zooming in (on either axis) makes every
    // allocation a band.
    let column_events = ((window.end + 1 - window.start) as f64 / width.max(1) as f64).max(1.0);
    let pixels_per_byte = window.height as f64 / y_span as f64;
    let events = trace.len();
    let passes = |id: AllocationId| {
        let a = replay.allocations.at(id as usize);
        let (first, last) = band_extent(a.start, a.end, events);
        let visible = last
            .min(window.end + 1)
            .saturating_sub(first.max(window.start));
        let area = a.size as f64 * pixels_per_byte * (visible as f64 / column_events);
        a.size >= threshold
            && first <= window.end
            && last >= window.start
            && visible as f64 >= MIN_BAND_COLUMNS * column_events
            && area >= MIN_BAND_AREA
    };
    // The same tests on the largest size and the most visible events a bucket of the index can
    // hold: every step of the area is monotonic, so a bucket failing them holds no band.
    let bucket_may_pass = |size: u64, visible: usize| {
        let area = size as f64 * pixels_per_byte * (visible as f64 / column_events);
        visible as f64 >= MIN_BAND_COLUMNS * column_events && area >= MIN_BAND_AREA
    };
    let mut chosen: Vec<AllocationId> = Vec::new();
    let indexed = index.bands.visit(
        &replay.allocations,
        events,
        threshold,
        (window.start, window.end),
        bucket_may_pass,
        |id| {
            if passes(id) {
                chosen.push(id);
            }
        },
    );
    if indexed.is_none() {
        // Not the trace the index was built for: test every allocation.
        chosen = (0..replay.allocations.len() as AllocationId)
            .filter(|&id| passes(id))
            .collect();
    }
    let (bands, big_top) = stack_bands(
        replay,
        trace.len(),
        &window,
        &bounds,
        chosen,
        detail.max_bands,
    );
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
        y_range: [y_low, y_high],
        detail: detail.max_bands,
        bands,
    }
}
