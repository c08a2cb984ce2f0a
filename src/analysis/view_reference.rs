//! The views against their references, the versions from before the view index (each reads
//! every event of its range): the timeline's columns and bands, the `/roles` window, the
//! segment map and the event list's filter, asked the same questions on every fixture, a
//! generated trace and the large files, every field of the answers compared.
//!
//! The references live beside what they are the reference of (`timeline::reference`,
//! `roles::window::reference`, `events::reference`, `memory_map_undoing_every_event`), test-only
//! children that read those modules' private parts; this module asks and compares through the
//! same public calls the server makes.

use super::events::reference::page_scanning;
use super::events::{EventFilter, page};
use super::memory_map::{memory_map, memory_map_undoing_every_event};
use super::roles::{UserRules, role_window, role_window_scanning};
use super::timeline::reference::timeline_scanning;
use super::timeline::{Axis, MAX_BANDS, Window, timeline};
use super::{Analysis, DeviceAnalysis};
use crate::snapshot::{Snapshot, Trace};
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
