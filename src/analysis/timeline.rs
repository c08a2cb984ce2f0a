//! The allocation timeline at a level of detail: only what a window of a given pixel size can
//! show (see `docs/views-api.md`).
//!
//! Bands are allocations at least two columns wide and 16 square pixels in all (the
//! `MIN_BAND_*` constants); they stack bottom-up in
//! allocation order, so a band only moves when a band below it is freed, and its outline is a
//! handful of points. Everything smaller is summed per column as min/max of the total, so spikes
//! survive. The payload is bounded by the width, not by the trace.

use super::DeviceAnalysis;
use super::replay::{AllocationId, Replay};
use super::view_index::{ViewIndex, band_extent};
use crate::snapshot::Trace;
use serde::Serialize;

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
pub(crate) const MIN_BAND_AREA: f64 = 16.0;
pub(crate) const MIN_BAND_COLUMNS: f64 = 2.0;
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
pub(crate) fn column_of(bounds: &[usize], event: usize) -> usize {
    let c = bounds.partition_point(|&b| b <= event);
    c.saturating_sub(1).min(bounds.len().saturating_sub(2))
}

/// The highest reserved total right after any event in `from..=to`: the total after `from`,
/// and every step in `from + 1..=to` (read from the view index, not step by step).
fn reserved_max_between(replay: &Replay, index: &ViewIndex, from: usize, to: usize) -> u64 {
    let steps = &replay.reserved_steps[..];
    let first = steps.partition_point(|&(event, _)| (event as usize) <= from);
    let last = steps.partition_point(|&(event, _)| (event as usize) <= to);
    let step_bytes = |i: usize| steps[i].1;
    replay
        .reserved_after(Some(from))
        .max(index.reserved.max(&step_bytes, first, last))
}

impl Timeline {
    /// The timeline of a device with no events: nothing but the memory alive from the start.
    pub(crate) fn empty(axis: Axis, y_max: u64) -> Self {
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
    let allocated_at = |i: usize| replay.allocated[i];
    let mut allocated_max = Vec::with_capacity(width);
    let mut allocated_min = Vec::with_capacity(width);
    let mut reserved = Vec::with_capacity(width);
    for c in 0..width {
        let (from, to) = (bounds[c], bounds[c + 1].max(bounds[c] + 1).min(trace.len()));
        let before = replay.allocated_after(from.checked_sub(1));
        allocated_max.push(before.max(index.allocated.max(&allocated_at, from, to)));
        allocated_min.push(before.min(index.allocated.min(&allocated_at, from, to)));
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

/// The bands of `chosen` (candidates in any order), at most `max_bands` of them,
/// stacked in the order PyTorch's viewer stacks them over the columns `bounds`, and the top of
/// the stack per column. `events` is the trace's length.
pub(super) fn stack_bands(
    replay: &Replay,
    events: usize,
    window: &Window,
    bounds: &[usize],
    mut chosen: Vec<AllocationId>,
    max_bands: usize,
) -> (Bands, Vec<u64>) {
    let width = bounds.len() - 1;
    if chosen.len() > max_bands {
        // A window showing a long run at once: keep the bands that cover the most pixels.
        let area = |id: AllocationId| {
            let a = replay.allocations.at(id as usize);
            let first = a.start.map_or(0, |s| s as usize).max(window.start);
            let last = a.end.map_or(events, |e| e as usize).min(window.end + 1);
            a.size as u128 * last.saturating_sub(first) as u128
        };
        // Ties broken by size, then id, so the bands kept do not depend on the candidates'
        // order (no need to sort them all first: a zoomed byte axis can have many).
        chosen.select_nth_unstable_by_key(max_bands, |&id| {
            (
                std::cmp::Reverse(area(id)),
                std::cmp::Reverse(replay.allocations.size(id as usize)),
                id,
            )
        });
        chosen.truncate(max_bands);
    }
    // Stacking order: alive-from-start first (as PyTorch's viewer), then by allocation order.
    chosen.sort_unstable_by_key(|&id| {
        let a = replay.allocations.at(id as usize);
        (a.start.is_some(), a.start, id)
    });

    let first_column = |id: AllocationId| {
        let a = replay.allocations.at(id as usize);
        column_of(
            bounds,
            a.start
                .map_or(window.start, |s| (s as usize).max(window.start)),
        )
    };
    let last_column = |id: AllocationId| {
        let a = replay.allocations.at(id as usize);
        match a.end {
            // Freed at event e: gone from the column holding e on (it was live before).
            Some(e) => column_of(bounds, (e as usize).min(window.end)),
            None => width - 1,
        }
    };
    let spans: Vec<(usize, usize)> = chosen
        .iter()
        .map(|&id| (first_column(id), last_column(id)))
        .collect();

    // Sweep columns; a band's offset is the sum of the chosen bands below it that are live.
    // `live` is in stacking order (ascending index into `chosen`) with each one's offset beside
    // it; a column only recomputes the offsets from the lowest band that started or ended
    // there, so a window of thousands of bands over thousands of columns costs its changes,
    // not bands times columns (most allocations end on top of the stack, where they began).
    let size_of = |i: usize| replay.allocations.size(chosen[i] as usize);
    let mut points: Vec<Vec<(usize, u64)>> = vec![Vec::new(); chosen.len()];
    let mut last_offset: Vec<Option<u64>> = vec![None; chosen.len()];
    let mut starting: Vec<Vec<usize>> = vec![Vec::new(); width];
    // Bands gone from column `c` on: their last column is `c - 1`.
    let mut ending: Vec<Vec<usize>> = vec![Vec::new(); width + 1];
    for (i, &(first, last)) in spans.iter().enumerate() {
        starting[first].push(i);
        // (A band ending before it starts still spans its first column, as it always did.)
        ending[(last.max(first) + 1).min(width)].push(i);
    }
    let mut live: Vec<usize> = Vec::new();
    let mut live_offset: Vec<u64> = Vec::new();
    let mut big_top = Vec::with_capacity(width);
    let mut top = 0u64;
    for c in 0..width {
        let mut first_changed = usize::MAX;
        for &i in &ending[c] {
            if let Ok(at) = live.binary_search(&i) {
                live.remove(at);
                live_offset.remove(at);
                first_changed = first_changed.min(at);
            }
        }
        for &i in &starting[c] {
            let at = live.partition_point(|&j| j < i);
            live.insert(at, i);
            live_offset.insert(at, 0);
            first_changed = first_changed.min(at);
        }
        if first_changed != usize::MAX {
            let mut offset = match first_changed.checked_sub(1) {
                Some(below) => live_offset[below] + size_of(live[below]),
                None => 0,
            };
            for k in first_changed..live.len() {
                let i = live[k];
                live_offset[k] = offset;
                if last_offset[i] != Some(offset) {
                    points[i].push((c, offset));
                    last_offset[i] = Some(offset);
                }
                offset += size_of(i);
            }
            top = offset;
        }
        big_top.push(top);
    }
    let mut bands = Bands::default();
    for (&id, points) in chosen.iter().zip(points) {
        let a = replay.allocations.at(id as usize);
        bands.id.push(id);
        bands.size.push(a.size);
        bands.start.push(a.start);
        bands.end.push(a.end);
        bands.points.push(
            points
                .into_iter()
                .flat_map(|(c, o)| [c as u64, o])
                .collect(),
        );
    }
    (bands, big_top)
}

/// Most rows of a column's list one request may ask for.
pub const MAX_COLUMN_ROWS: usize = 500;
/// Most events a listed column may span: the list reads each of its events once (the client's
/// columns are at most a 320th of the trace; a request for one column over a whole long trace
/// is refused rather than read).
pub const MAX_COLUMN_EVENTS: usize = 1 << 17;

/// The allocations of one column of a timeline answer that it does not draw as bands (the grey
/// part), largest first: what a click on the grey part lists.
#[derive(Debug, Serialize, PartialEq)]
pub struct ColumnAllocations {
    pub column: usize,
    /// The column's first and last event.
    pub first_event: usize,
    pub last_event: usize,
    /// How many allocations live during the column are not bands, and their bytes.
    pub total: usize,
    pub total_bytes: u64,
    /// The largest `limit` of them (ties by id).
    pub ids: Vec<AllocationId>,
}

/// Why a column cannot be listed.
#[derive(Debug, PartialEq, Eq)]
pub enum ColumnError {
    /// The window has no such column (it has `columns`).
    NoSuchColumn { column: usize, columns: usize },
    /// The column spans more events than [`MAX_COLUMN_EVENTS`].
    TooLong { events: usize },
}

/// The allocations live during column `column` of the answer to (`window`, `detail`) that are
/// not among its bands: alive when the column begins, or allocated during it. At most `limit`
/// ids (capped at [`MAX_COLUMN_ROWS`]) with the count and bytes of all of them.
pub fn column_allocations(
    device: &DeviceAnalysis,
    trace: &Trace,
    window: Window,
    detail: Detail,
    column: usize,
    limit: usize,
) -> Result<ColumnAllocations, ColumnError> {
    let answer = timeline_detailed(device, trace, window, detail);
    let columns = answer.column_start.len().saturating_sub(1);
    if column >= columns {
        return Err(ColumnError::NoSuchColumn { column, columns });
    }
    let (from, to) = (
        answer.column_start[column],
        answer.column_start[column + 1].max(answer.column_start[column] + 1),
    );
    if to - from > MAX_COLUMN_EVENTS {
        return Err(ColumnError::TooLong { events: to - from });
    }
    let replay = &device.replay;
    let mut live = replay.live_after(from.checked_sub(1));
    for event in from..to.min(trace.len()) {
        if let Some(id) = replay.allocation_at(event)
            && replay.allocations.start(id as usize) == Some(event as u32)
        {
            live.push(id);
        }
    }
    let mut bands = answer.bands.id.clone();
    bands.sort_unstable();
    live.retain(|id| bands.binary_search(id).is_err() && replay.allocations.size(*id as usize) > 0);
    let total = live.len();
    let total_bytes = live
        .iter()
        .map(|&id| replay.allocations.size(id as usize))
        .sum();
    let by_size =
        |&id: &AllocationId| (std::cmp::Reverse(replay.allocations.size(id as usize)), id);
    let limit = limit.min(MAX_COLUMN_ROWS);
    if live.len() > limit {
        live.select_nth_unstable_by_key(limit, by_size);
        live.truncate(limit);
    }
    live.sort_unstable_by_key(by_size);
    Ok(ColumnAllocations {
        column,
        first_event: from,
        last_event: to - 1,
        total,
        total_bytes,
        ids: live,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fixtures::analysed;

    /// The stacking as it was before offsets were recomputed only from the lowest change: every
    /// live band's offset summed again in every column.
    fn stack_every_column(
        replay: &Replay,
        bounds: &[usize],
        window: &Window,
        bands: &Bands,
    ) -> (Vec<Vec<u64>>, Vec<u64>) {
        let width = bounds.len() - 1;
        let span = |k: usize| {
            let first = column_of(
                bounds,
                bands.start[k].map_or(window.start, |s| (s as usize).max(window.start)),
            );
            let last = match bands.end[k] {
                Some(e) => column_of(bounds, (e as usize).min(window.end)),
                None => width - 1,
            };
            (first, last)
        };
        let mut points = vec![Vec::new(); bands.len()];
        let mut last_offset = vec![None; bands.len()];
        let mut big_top = Vec::new();
        // `bands` is in stacking order.
        for c in 0..width {
            let mut offset = 0;
            for k in 0..bands.len() {
                let (first, last) = span(k);
                if c < first || c > last.max(first) {
                    continue;
                }
                if last_offset[k] != Some(offset) {
                    points[k].extend([c as u64, offset]);
                    last_offset[k] = Some(offset);
                }
                offset += replay.allocations.size(bands.id[k] as usize);
            }
            big_top.push(offset);
        }
        (points, big_top)
    }

    fn windows(events: usize) -> Vec<(Window, Detail)> {
        let mut out = Vec::new();
        for (start, end) in [
            (0, events - 1),
            (events / 3, events / 3 + 40),
            (events / 2, events / 2 + 900),
        ] {
            for y_range in [
                None,
                Some((0, 200_000_000)),
                Some((1 << 30, (1 << 30) + 50_000)),
            ] {
                for max_bands in [MAX_BANDS, 300, MAX_DETAIL] {
                    out.push((
                        Window {
                            start,
                            end,
                            width: 1200,
                            height: 336,
                            axis: Axis::Event,
                        },
                        Detail { y_range, max_bands },
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn stacking_from_the_lowest_change_matches_stacking_every_column() {
        let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
        let device = &analysis.devices[0];
        let trace = snapshot.trace(0);
        for (window, detail) in windows(trace.len()) {
            let answer = timeline_detailed(device, trace, window, detail);
            let clamped = window.clamped(trace.len());
            let (points, big_top) = stack_every_column(
                &device.replay,
                &answer.column_start,
                &clamped,
                &answer.bands,
            );
            assert_eq!(answer.bands.points, points, "{window:?} {detail:?}");
            assert_eq!(answer.big_top, big_top, "{window:?} {detail:?}");
        }
    }

    #[test]
    fn zooming_the_bytes_lowers_the_threshold_and_draws_more_bands_up_to_the_detail() {
        let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
        let device = &analysis.devices[0];
        let trace = snapshot.trace(0);
        let window = Window {
            start: 0,
            end: trace.len() - 1,
            width: 1200,
            height: 336,
            axis: Axis::Event,
        };
        let whole = timeline(device, trace, window);
        assert_eq!(whole.y_range, [0, whole.y_max]);
        let zoomed = timeline_detailed(
            device,
            trace,
            window,
            Detail {
                y_range: Some((0, whole.y_max / 100)),
                max_bands: MAX_DETAIL,
            },
        );
        assert_eq!(zoomed.y_range, [0, whole.y_max / 100]);
        assert!(zoomed.threshold * 50 < whole.threshold);
        assert!(zoomed.bands.len() > 2 * whole.bands.len());
        // The columns' totals do not depend on the zoom.
        assert_eq!(zoomed.allocated_max, whole.allocated_max);
        let capped = timeline_detailed(
            device,
            trace,
            window,
            Detail {
                y_range: Some((0, whole.y_max / 100)),
                max_bands: 100,
            },
        );
        assert_eq!(capped.bands.len(), 100);
        assert_eq!(capped.detail, 100);
        // Out-of-range asks are clamped: no band count of 0 or over the maximum, a byte range of
        // at least a byte per row.
        let clamped = Detail {
            y_range: Some((500, 500)),
            max_bands: 0,
        }
        .clamped(336);
        assert_eq!(clamped.y_range, Some((500, 836)));
        assert_eq!(clamped.max_bands, 1);
        assert_eq!(
            Detail {
                y_range: None,
                max_bands: usize::MAX
            }
            .clamped(336)
            .max_bands,
            MAX_DETAIL
        );
    }

    #[test]
    fn every_allocation_is_a_band_or_in_a_column_list() {
        let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
        let device = &analysis.devices[0];
        let trace = snapshot.trace(0);
        let window = Window {
            start: 0,
            end: trace.len() - 1,
            width: 800,
            height: 336,
            axis: Axis::Event,
        };
        let answer = timeline(device, trace, window);
        let mut seen = vec![false; device.replay.allocations.len()];
        for &id in &answer.bands.id {
            seen[id as usize] = true;
        }
        for column in 0..answer.width {
            let listed = column_allocations(
                device,
                trace,
                window,
                Detail::default(),
                column,
                MAX_COLUMN_ROWS,
            )
            .expect("a column of the window");
            assert!(listed.ids.len() <= MAX_COLUMN_ROWS);
            assert_eq!(listed.total, listed.ids.len(), "column {column} overflows");
            let sizes: Vec<u64> = listed
                .ids
                .iter()
                .map(|&id| device.replay.allocations.size(id as usize))
                .collect();
            assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first");
            assert_eq!(listed.total_bytes, sizes.iter().sum::<u64>());
            for &id in &listed.ids {
                assert!(!answer.bands.id.contains(&id), "a band listed as grey");
                seen[id as usize] = true;
            }
        }
        let missing: Vec<usize> = (0..seen.len())
            .filter(|&id| !seen[id] && device.replay.allocations.size(id) > 0)
            .collect();
        assert!(missing.is_empty(), "never reached: {missing:?}");
    }

    #[test]
    fn a_column_list_is_bounded_and_refuses_what_it_cannot_answer() {
        let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
        let device = &analysis.devices[0];
        let trace = snapshot.trace(0);
        let window = Window {
            start: 0,
            end: trace.len() - 1,
            width: 800,
            height: 336,
            axis: Axis::Event,
        };
        let busiest = (0..800)
            .filter_map(|c| column_allocations(device, trace, window, Detail::default(), c, 3).ok())
            .max_by_key(|listed| listed.total)
            .expect("columns");
        assert_eq!(busiest.ids.len(), 3);
        assert!(busiest.total > 3);
        assert_eq!(
            column_allocations(device, trace, window, Detail::default(), 800, 3),
            Err(ColumnError::NoSuchColumn {
                column: 800,
                columns: 800
            })
        );
        // One column over the whole trace reads every event: refused past MAX_COLUMN_EVENTS
        // (this trace is shorter, so it is answered).
        let one = Window { width: 1, ..window };
        assert!(column_allocations(device, trace, one, Detail::default(), 0, 10).is_ok());
        assert!(trace.len() < MAX_COLUMN_EVENTS);
    }
}
