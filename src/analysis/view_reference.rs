//! The views as they were before the view index: each reads every event of its range (the
//! timeline's columns and bands, the `/roles` window, the event list's filter). Kept only for
//! the tests, which ask both versions the same questions on every fixture and compare every field
//! of the answers (`tests` below).

use super::DeviceAnalysis;
use super::events::{EventFilter, EventPage, matching, row_matching};
use super::replay::{AllocationId, Replay};
use super::roles::{DeviceRoles, RoleWindow, without_events};
use super::timeline::{
    MAX_BANDS, MIN_BAND_AREA, MIN_BAND_COLUMNS, Timeline, Window, columns, stack_bands,
};
use crate::snapshot::{Snapshot, Trace};

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
        let slice = &replay.allocated[from..to.max(from)];
        let before = replay.allocated_after(from.checked_sub(1));
        let (lo, hi) = slice
            .iter()
            .fold((before, before), |(lo, hi), &v| (lo.min(v), hi.max(v)));
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

/// The `/roles` window, each column replayed event by event.
pub(crate) fn role_window_scanning(
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
    trace: &Trace,
    window: Window,
) -> RoleWindow {
    let replay = &device.replay;
    let names = roles.names().to_vec();
    let events = replay.len();
    if events == 0 || trace.is_empty() {
        return without_events(replay, roles, names);
    }
    let window = window.clamped(trace.len().min(events));
    let column_start = columns(&window, trace);
    let width = column_start.len() - 1;
    let mut current = vec![0u64; names.len()];
    for id in replay.live_after(window.start.checked_sub(1)) {
        let slot = &mut current[roles.role_index_of(id) as usize];
        *slot = slot.wrapping_add(replay.allocations.size(id as usize));
    }
    let mut bytes = vec![Vec::with_capacity(width); names.len()];
    let mut at = Vec::with_capacity(width);
    let mut applied = window.start;
    for c in 0..width {
        let from = column_start[c];
        // The timeline reads one event even from an empty column (a time axis gap), so this
        // does too: its peak is the larger of before and after that event.
        let to = column_start[c + 1].max(from + 1).min(events);
        let before = replay.allocated_after(from.checked_sub(1));
        // The first event where the column reaches its maximum; none when it never rises above
        // what it started with (the timeline's fold starts from `before` too).
        let mut peak: Option<usize> = None;
        let mut high = before;
        for (offset, &value) in replay.allocated[from..to].iter().enumerate() {
            if value > high {
                high = value;
                peak = Some(from + offset);
            }
        }
        let mut sample = |current: &[u64], event: Option<usize>| {
            for (r, value) in current.iter().enumerate() {
                bytes[r].push(*value);
            }
            at.push(event);
        };
        match peak {
            None => sample(&current, from.checked_sub(1)),
            Some(event) if event >= column_start[c + 1] => {
                // An empty column's look-ahead: peek at the next column's first event without
                // applying it (that column applies it).
                let mut peek = current.clone();
                apply_event(device, roles, event, &mut peek);
                sample(&peek, Some(event));
            }
            Some(event) => {
                while applied <= event {
                    apply_event(device, roles, applied, &mut current);
                    applied += 1;
                }
                sample(&current, Some(event));
            }
        }
        while applied < column_start[c + 1] {
            apply_event(device, roles, applied, &mut current);
            applied += 1;
        }
    }
    RoleWindow {
        start: window.start,
        end: window.end,
        column_start,
        roles: names,
        bytes,
        at,
    }
}

/// Adds or removes the allocation event `event` opens or closes.
fn apply_event(device: &DeviceAnalysis, roles: &DeviceRoles, event: usize, current: &mut [u64]) {
    let replay = &device.replay;
    let Some(id) = replay.allocation_at(event) else {
        return;
    };
    let allocation = replay.allocations.at(id as usize);
    let slot = &mut current[roles.role_index_of(id) as usize];
    if allocation.start == Some(event as u32) {
        *slot = slot.wrapping_add(allocation.size);
    } else if allocation.end == Some(event as u32) {
        *slot = slot.wrapping_sub(allocation.size);
    }
}

/// A page of the event list, the filter run over the whole trace.
pub(crate) fn page_scanning(
    snapshot: &Snapshot,
    trace: &Trace,
    replay: &Replay,
    filter: &EventFilter,
    offset: usize,
    limit: usize,
    find: Option<usize>,
) -> EventPage {
    let limit = limit.clamp(1, 1000);
    let matches = matching(snapshot, trace, filter);
    let matching_count = matches.as_ref().map_or(trace.len(), Vec::len);
    let offset = match find {
        Some(event) => {
            let position = match &matches {
                None => event.min(trace.len().saturating_sub(1)),
                Some(list) => list.partition_point(|&i| (i as usize) < event),
            };
            position.min(matching_count.saturating_sub(1)) / limit * limit
        }
        None => offset.min(matching_count),
    };
    let end = (offset + limit).min(matching_count);
    let rows = (offset..end)
        .map(|position| {
            let index = match &matches {
                None => position,
                Some(list) => list[position] as usize,
            };
            row_matching(snapshot, trace, replay, index, filter.frame.as_deref())
        })
        .collect();
    EventPage {
        total: trace.len(),
        matching: matching_count,
        offset,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use crate::analysis::events::page;
    use crate::analysis::memory_map::{memory_map, memory_map_undoing_every_event};
    use crate::analysis::roles::{UserRules, role_window};
    use crate::analysis::timeline::{Axis, timeline};
    use serde::Serialize;
    use std::path::{Path, PathBuf};

    /// Every field of an answer, through its JSON (what the pages read).
    fn json(answer: &impl Serialize) -> serde_json::Value {
        serde_json::to_value(answer).expect("serializes")
    }

    /// The windows asked of a trace of `events`: the whole trace and zoomed spans at spread
    /// positions, tiny ones, on both axes, at many widths and heights (the heights move the
    /// band threshold; the widest and tallest has the most candidates, over `MAX_BANDS` on
    /// the large files).
    fn windows(events: usize, thorough: bool) -> Vec<Window> {
        let mut spans = vec![events, 1, 2, 3];
        let mut span = events / 3;
        while span > 3 {
            spans.push(span);
            span /= if thorough { 3 } else { 10 };
        }
        let mut windows = Vec::new();
        for (s, &span) in spans.iter().enumerate() {
            let positions = if span >= events { 1 } else { 5 };
            for k in 0..positions {
                let start = (events - span) * k / 4.max(positions - 1);
                for axis in [Axis::Event, Axis::Time] {
                    let sizes: &[(usize, usize)] = if thorough {
                        &[(1600, 400), (7, 16), (300, 1000), (8192, 8192), (1, 100)]
                    } else {
                        &[(1600, 400), (8192, 8192)]
                    };
                    for (i, &(width, height)) in sizes.iter().enumerate() {
                        // Not every size at every position: enough to vary the mix.
                        if (s + k + i) % 2 == 1 && !(width == 1600 && height == 400) {
                            continue;
                        }
                        windows.push(Window {
                            start,
                            end: start + span - 1,
                            width,
                            height,
                            axis,
                        });
                    }
                }
            }
        }
        // Out of range and odd requests are clamped the same way.
        windows.push(Window {
            start: events + 5,
            end: events * 2 + 10,
            width: 0,
            height: 0,
            axis: Axis::Event,
        });
        windows.push(Window {
            start: 0,
            end: events,
            width: events * 2 + 1,
            height: 3,
            axis: Axis::Time,
        });
        windows
    }

    /// Moments for the segment map: spread over the trace, and around every segment event
    /// (where the reserved ranges change), at most `budget` of those.
    fn moments(device: &DeviceAnalysis, events: usize, budget: usize) -> Vec<Option<usize>> {
        let mut moments: Vec<Option<usize>> = vec![None, Some(events + 3)];
        for k in 0..=40 {
            moments.push(Some(events.saturating_sub(1) * k / 40));
        }
        let steps = &device.replay.reserved_steps;
        let every = (steps.len() / budget.max(1)).max(1);
        for &(event, _) in steps.iter().step_by(every) {
            let event = event as usize;
            moments.extend([event.checked_sub(1), Some(event), Some(event + 1)]);
        }
        moments
    }

    fn filters(trace: &Trace) -> Vec<EventFilter> {
        let actions = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        let mut filters = vec![
            EventFilter::default(),
            EventFilter {
                actions: actions(&["alloc"]),
                ..EventFilter::default()
            },
            EventFilter {
                actions: actions(&["free_completed", "alloc", "alloc"]),
                min_size: 4096,
                ..EventFilter::default()
            },
            EventFilter {
                actions: actions(&["segment_alloc", "segment_map"]),
                ..EventFilter::default()
            },
            EventFilter {
                actions: actions(&["no_such_action"]),
                ..EventFilter::default()
            },
            EventFilter {
                min_size: 1 << 20,
                ..EventFilter::default()
            },
            EventFilter {
                frame: Some("Forward".to_owned()),
                ..EventFilter::default()
            },
            EventFilter {
                frame: Some("linear".to_owned()),
                min_size: 512,
                ..EventFilter::default()
            },
            EventFilter {
                frame: Some(String::new()),
                ..EventFilter::default()
            },
        ];
        if let Some(name) = trace.unknown_actions.first() {
            filters.push(EventFilter {
                actions: vec![name.clone()],
                ..EventFilter::default()
            });
        }
        filters
    }

    /// What the comparisons found: questions asked, and per view the answers that differ
    /// (how many, and the first), so one run shows every view that went wrong.
    #[derive(Default)]
    struct Tally {
        asked: usize,
        /// Timeline windows where the bands were capped at `MAX_BANDS` (the selection by area).
        capped: usize,
        differ: std::collections::BTreeMap<&'static str, (usize, String)>,
    }

    impl Tally {
        fn check(
            &mut self,
            view: &'static str,
            new: &impl Serialize,
            old: &impl Serialize,
            what: impl FnOnce() -> String,
        ) {
            self.asked += 1;
            if json(new) != json(old) {
                let entry = self.differ.entry(view).or_insert_with(|| (0, what()));
                entry.0 += 1;
            }
        }

        fn assert_none_differ(&self) {
            assert!(
                self.differ.is_empty(),
                "answers differ from the reference (view: count, first): {:#?}",
                self.differ
            );
        }
    }

    /// Asks the old and new versions of every view the same questions on one snapshot and
    /// compares the answers, field for field.
    fn compare(
        name: &str,
        snapshot: &Snapshot,
        analysis: &Analysis,
        thorough: bool,
        tally: &mut Tally,
    ) {
        for device in &analysis.devices {
            let d = device.device;
            let trace = snapshot.trace(d);
            let events = trace.len();
            let roles = device.roles(snapshot, &UserRules::default());
            for window in windows(events.max(1), thorough) {
                let old = timeline_scanning(device, trace, window);
                tally.capped += usize::from(old.bands.len() == MAX_BANDS);
                tally.check("timeline", &timeline(device, trace, window), &old, || {
                    format!("{name} device {d}: {window:?}")
                });
                tally.check(
                    "roles window",
                    &role_window(device, roles, trace, window),
                    &role_window_scanning(device, roles, trace, window),
                    || format!("{name} device {d}: {window:?}"),
                );
            }
            for at in moments(device, events, if thorough { 400 } else { 40 }) {
                tally.check(
                    "segment map",
                    &memory_map(snapshot, device, at),
                    &memory_map_undoing_every_event(snapshot, device, at),
                    || format!("{name} device {d}: at {at:?}"),
                );
            }
            // Twice round, so the second round reads the match cache (which holds fewer
            // filters than there are: the first ones are evicted and scanned again).
            for round in 0..2 {
                for filter in filters(trace) {
                    for (offset, limit, find) in [
                        (0, 200, None),
                        (0, 1, None),
                        (3, 7, None),
                        (events / 2, 50, None),
                        (events, 200, None),
                        (usize::MAX / 2, 1000, None),
                        (0, 10, Some(0)),
                        (0, 10, Some(events / 3)),
                        (0, 1, Some(events.saturating_sub(1))),
                        (0, 5000, Some(events + 10)),
                    ] {
                        let replay = &device.replay;
                        tally.check(
                            "events page",
                            &page(snapshot, trace, replay, &filter, offset, limit, find),
                            &page_scanning(snapshot, trace, replay, &filter, offset, limit, find),
                            || format!("{name} device {d} round {round}: {filter:?} at {offset} ({limit}, {find:?})"),
                        );
                    }
                }
            }
        }
    }

    fn pickles(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pickles(&path, out);
            } else if path.extension().is_some_and(|e| e == "pickle") {
                out.push(path);
            }
        }
    }

    /// Every snapshot of tests/fixtures (the hostile ones that do not load are passed over).
    #[test]
    fn views_answer_as_before_on_every_fixture() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut paths = Vec::new();
        pickles(&dir, &mut paths);
        paths.sort();
        let mut compared = 0;
        let mut tally = Tally::default();
        for path in &paths {
            let Ok(snapshot) = crate::snapshot::load_path(path, Default::default()) else {
                continue;
            };
            let analysis = Analysis::new(&snapshot);
            let name = path
                .strip_prefix(&dir)
                .unwrap_or(path)
                .display()
                .to_string();
            compare(&name, &snapshot, &analysis, true, &mut tally);
            compared += 1;
        }
        println!(
            "{compared} fixtures, {} questions asked of both versions ({} timelines at the band cap)",
            tally.asked, tally.capped
        );
        assert!(compared >= 20, "only {compared} fixtures loaded");
        tally.assert_none_differ();
    }

    /// A generated trace that no fixture is like: tens of thousands of allocations of four
    /// sizes and a few lifetimes (so many bands tie on area at the `MAX_BANDS` cap, where the
    /// order they are considered in decides which are kept), frees of allocations from before
    /// the trace, never-freed ones, segment allocs, frees, maps and unmaps, and gaps in time
    /// (empty columns on the time axis).
    #[test]
    fn views_answer_as_before_on_a_trace_of_many_equal_bands() {
        use crate::snapshot::{ActionCode, Snapshot, StackId};
        let mut trace = Trace::default();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut roll = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let sizes = [512u64, 4096, 1 << 20, 8 << 20];
        let mut open: Vec<(u64, u64)> = Vec::new();
        let mut time = 0i64;
        let stack: StackId = 0;
        for step in 0..80_000u64 {
            time += if roll(200) == 0 {
                50_000
            } else {
                1 + roll(3) as i64
            };
            let mut push = |action, addr, size| {
                trace.push(action, addr, size, 0, Some(time), stack, 0, 0);
            };
            match roll(20) {
                0..=9 => {
                    let (addr, size) = (0x1_0000_0000 + step * 0x10_0000, sizes[roll(4) as usize]);
                    push(ActionCode::ALLOC, addr, size);
                    open.push((addr, size));
                }
                10..=16 if !open.is_empty() => {
                    // Mostly the newest (short lifetimes), sometimes any (long ones).
                    let at = if roll(4) == 0 {
                        roll(open.len() as u64) as usize
                    } else {
                        open.len() - 1
                    };
                    let (addr, size) = open.swap_remove(at);
                    push(ActionCode::FREE_REQUESTED, addr, size);
                    push(ActionCode::FREE_COMPLETED, addr, size);
                }
                17 => push(
                    ActionCode::FREE_COMPLETED,
                    0x9_0000_0000 + step * 512,
                    sizes[roll(4) as usize],
                ),
                18 => {
                    let action = [
                        ActionCode::SEGMENT_ALLOC,
                        ActionCode::SEGMENT_FREE,
                        ActionCode::SEGMENT_MAP,
                        ActionCode::SEGMENT_UNMAP,
                    ][roll(4) as usize];
                    push(
                        action,
                        0x7_0000_0000 + roll(64) * (2 << 20),
                        (1 + roll(3)) * (2 << 20),
                    );
                }
                _ => push(ActionCode::ALLOC, 0x5_0000_0000 + step * 512, 512),
            }
        }
        let mut snapshot = Snapshot::default();
        snapshot.device_traces.push(trace);
        let analysis = Analysis::new(&snapshot);
        let mut tally = Tally::default();
        compare("generated", &snapshot, &analysis, true, &mut tally);
        println!(
            "generated: {} questions asked of both versions ({} timelines at the band cap)",
            tally.asked, tally.capped
        );
        assert!(tally.capped > 0, "no window reached the band cap");
        tally.assert_none_differ();
    }

    /// The large files, when decompressed into `SNAPVIEW_LARGE_DIR` (skipped otherwise; the
    /// ten-times file is never read by a test).
    #[test]
    fn views_answer_as_before_on_the_large_files() {
        let Some(dir) = std::env::var_os("SNAPVIEW_LARGE_DIR").map(PathBuf::from) else {
            return;
        };
        for name in ["gpt2_cpp_trace", "gpt2_big_trace", "gpt2_huge_trace"] {
            let path = dir.join(format!("{name}.pickle"));
            if !path.exists() {
                continue;
            }
            let snapshot = crate::snapshot::load_path(&path, Default::default()).expect("loads");
            let analysis = Analysis::new(&snapshot);
            let mut tally = Tally::default();
            compare(name, &snapshot, &analysis, false, &mut tally);
            println!(
                "{name}: {} questions asked of both versions ({} timelines at the band cap)",
                tally.asked, tally.capped
            );
            tally.assert_none_differ();
        }
    }
}
