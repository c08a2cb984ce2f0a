//! Benchmark: the views' queries on the large corpus files, server time without HTTP.
//!
//! `cargo bench --bench views [-- NAME]` loads each large file once (decompressed by
//! `benches/core.rs`, or from `SNAPVIEW_LARGE_DIR`), then times timeline windows at every zoom
//! level for a 1600 px view (and their JSON size), the `/roles` window, the flame graph, the
//! segment map at spread-out and at pseudo-random moments, the allocator's history and the
//! cached segment timeline, and filtered pages of the event list.
//! Prints median and max per query kind. With `NAME`, only that file (e.g.
//! `gpt2_huge_trace_x10`, the ten-times file, which takes ~3 GB to load: one at a time).

use snapview::analysis::Analysis;
use snapview::analysis::events::{EventFilter, page};
use snapview::analysis::flame::{FlameMode, flame};
use snapview::analysis::history::history;
use snapview::analysis::memory_map::memory_map;
use snapview::analysis::roles::{UserRules, role_window};
use snapview::analysis::segment_timeline::segment_timeline;
use snapview::analysis::timeline::{
    Axis, Detail, MAX_DETAIL, Window, column_allocations, timeline, timeline_detailed,
};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let dir = std::env::var_os("SNAPVIEW_LARGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("snapview-large"));
    // `cargo bench` passes `--bench`; any other argument names the one file to run.
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let mut any = false;
    for name in ["gpt2_big_trace", "gpt2_huge_trace", "gpt2_huge_trace_x10"] {
        if only.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let path = dir.join(format!("{name}.pickle"));
        if !path.exists() {
            continue;
        }
        any = true;
        let began = Instant::now();
        let (snapshot, seed) =
            snapview::analysis::load_path(&path, Default::default()).expect("load");
        let analysis = Analysis::seeded(&snapshot, seed);
        println!(
            "{name}: loaded and analysed in {:.2} s, analysis holds {} MB",
            began.elapsed().as_secs_f64(),
            analysis.heap_bytes() >> 20
        );
        let device = &analysis.devices[0];
        let trace = snapshot.trace(device.device);
        let n = trace.len();
        println!(
            "{name}: {n} events, {} allocations, {} segment events, {} segments at the end",
            device.replay.allocations.len(),
            device.replay.reserved_steps.len(),
            snapshot.device_segments(device.device).count()
        );
        let began = Instant::now();
        let index = snapview::analysis::view_index::ViewIndex::new(&device.replay);
        println!(
            "  view index (built with the analysis) builds in {:.0} ms, holds {:.1} MB",
            began.elapsed().as_secs_f64() * 1e3,
            index.heap_bytes() as f64 / (1 << 20) as f64
        );
        drop(index);
        println!("  the analysis holds {} MB", analysis.heap_bytes() >> 20);

        // Timeline: full view, then windows of 1/10 .. 1/100000 of the trace at spread positions.
        let mut times = Vec::new();
        let mut largest_json = 0;
        for zoom in [1usize, 10, 100, 1000, 10_000, 100_000] {
            let span = (n / zoom).max(10);
            for k in 0..5 {
                let start = (n - span) * k / 4;
                for axis in [Axis::Event, Axis::Time] {
                    let window = Window {
                        start,
                        end: start + span - 1,
                        width: 1600,
                        height: 400,
                        axis,
                    };
                    let began = Instant::now();
                    let t = timeline(device, trace, window);
                    let json = serde_json::to_string(&t).expect("json");
                    times.push(began.elapsed().as_secs_f64() * 1e3);
                    largest_json = largest_json.max(json.len());
                }
            }
        }
        report("timeline 1600px (incl. JSON)", &mut times);
        println!("  largest timeline JSON: {} KB", largest_json / 1024);

        // The same windows with the byte axis zoomed (1 GiB to 1 GiB + 100 KB, where the grey
        // threshold falls to about 300 bytes, and a 100 MB range over the steps' low) at the
        // most detail, and a grey column's list in each.
        let mut times = Vec::new();
        let mut list_times = Vec::new();
        let mut largest_json = 0;
        for zoom in [1usize, 10, 100, 1000, 10_000, 100_000] {
            let span = (n / zoom).max(10);
            for k in 0..5 {
                let start = (n - span) * k / 4;
                for y_range in [
                    (1 << 30, (1 << 30) + 100_000),
                    (1_900_000_000, 2_000_000_000),
                ] {
                    let window = Window {
                        start,
                        end: start + span - 1,
                        width: 1600,
                        height: 400,
                        axis: Axis::Event,
                    };
                    let detail = Detail {
                        y_range: Some(y_range),
                        max_bands: MAX_DETAIL,
                    };
                    let began = Instant::now();
                    let t = timeline_detailed(device, trace, window, detail);
                    let json = serde_json::to_string(&t).expect("json");
                    times.push(began.elapsed().as_secs_f64() * 1e3);
                    largest_json = largest_json.max(json.len());
                    let began = Instant::now();
                    let _ = column_allocations(device, trace, window, detail, t.width / 2, 50);
                    list_times.push(began.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        report(
            "timeline 1600px, bytes zoomed, detail 5000 (incl. JSON)",
            &mut times,
        );
        println!("  largest zoomed timeline JSON: {} KB", largest_json / 1024);
        report("grey column list (50 rows)", &mut list_times);

        // The `/roles` window beside it: the same windows, bytes per role per column (the roles
        // themselves are decided once per snapshot, at load, as the summary does).
        let began = Instant::now();
        let roles = device.roles(&snapshot, &UserRules::default());
        println!(
            "  roles decided in {:.0} ms",
            began.elapsed().as_secs_f64() * 1e3
        );
        let mut times = Vec::new();
        for zoom in [1usize, 10, 100, 1000, 10_000, 100_000] {
            let span = (n / zoom).max(10);
            for k in 0..5 {
                let start = (n - span) * k / 4;
                for axis in [Axis::Event, Axis::Time] {
                    let window = Window {
                        start,
                        end: start + span - 1,
                        width: 1600,
                        height: 400,
                        axis,
                    };
                    let began = Instant::now();
                    let w = role_window(device, roles, trace, window);
                    let _ = serde_json::to_string(&w).expect("json");
                    times.push(began.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        report("roles window 1600px (incl. JSON)", &mut times);

        let moments: Vec<Option<usize>> = (0..20)
            .map(|k| Some(n * k / 19).map(|m| m.min(n - 1)))
            .collect();
        let mut times = Vec::new();
        for &at in &moments {
            let began = Instant::now();
            let f = flame(&snapshot, device, at, FlameMode::Allocated, None);
            let _ = serde_json::to_string(&f).expect("json");
            times.push(began.elapsed().as_secs_f64() * 1e3);
        }
        report("flame graph at a moment", &mut times);

        let mut times = Vec::new();
        for &at in &moments {
            let began = Instant::now();
            let map = memory_map(&snapshot, device, at);
            let _ = serde_json::to_string(&map).expect("json");
            times.push(began.elapsed().as_secs_f64() * 1e3);
        }
        report("segment map at a moment", &mut times);

        // Pseudo-random moments (a fixed LCG, so runs compare), mostly early in the trace where
        // undoing what follows was the most work.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut times = Vec::new();
        for _ in 0..30 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let at = (state >> 33) as usize % n;
            let began = Instant::now();
            let map = memory_map(&snapshot, device, Some(at));
            let _ = serde_json::to_string(&map).expect("json");
            times.push(began.elapsed().as_secs_f64() * 1e3);
        }
        report("segment map at random events", &mut times);

        // The allocator's history beside the map, at the same random moments, and the cached
        // segment timeline at every zoom (issue 20).
        let mut times = Vec::new();
        for _ in 0..30 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let at = (state >> 33) as usize % n;
            let began = Instant::now();
            let h = history(&snapshot, device, Some(at), 12, 12);
            let _ = serde_json::to_string(&h).expect("json");
            times.push(began.elapsed().as_secs_f64() * 1e3);
        }
        report("allocator history at random events", &mut times);
        let mut times = Vec::new();
        for zoom in [1usize, 10, 100, 1000, 10_000, 100_000] {
            let span = (n / zoom).max(10);
            for k in 0..5 {
                let start = (n - span) * k / 4;
                for axis in [Axis::Event, Axis::Time] {
                    let window = Window {
                        start,
                        end: start + span - 1,
                        width: 1600,
                        height: 400,
                        axis,
                    };
                    let began = Instant::now();
                    let t = segment_timeline(&snapshot, device, window);
                    let _ = serde_json::to_string(&t).expect("json");
                    times.push(began.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        report("segment timeline 1600px (incl. JSON)", &mut times);

        // Filtered pages of the event list: a new filter's first page, then paging through it
        // and jumping to an event, as the list does.
        let filters = [
            EventFilter {
                actions: vec!["alloc".to_owned()],
                ..EventFilter::default()
            },
            EventFilter {
                min_size: 1 << 20,
                ..EventFilter::default()
            },
            EventFilter {
                frame: Some("linear".to_owned()),
                ..EventFilter::default()
            },
            EventFilter {
                actions: vec!["free_completed".to_owned(), "alloc".to_owned()],
                min_size: 4096,
                frame: Some("forward".to_owned()),
            },
        ];
        let mut first_pages = Vec::new();
        let mut next_pages = Vec::new();
        for filter in &filters {
            let began = Instant::now();
            let first = page(&snapshot, trace, &device.replay, filter, 0, 200, None);
            let _ = serde_json::to_string(&first).expect("json");
            first_pages.push(began.elapsed().as_secs_f64() * 1e3);
            for k in 1..6 {
                let began = Instant::now();
                let p = if k % 2 == 0 {
                    page(
                        &snapshot,
                        trace,
                        &device.replay,
                        filter,
                        0,
                        200,
                        Some(n * k / 6),
                    )
                } else {
                    let offset = first.matching * k / 6;
                    page(&snapshot, trace, &device.replay, filter, offset, 200, None)
                };
                let _ = serde_json::to_string(&p).expect("json");
                next_pages.push(began.elapsed().as_secs_f64() * 1e3);
            }
        }
        report("events page, new filter", &mut first_pages);
        report("events page, same filter", &mut next_pages);
    }
    if !any {
        println!(
            "views bench: skipped (no large corpus files; run `cargo bench --bench core` first or set SNAPVIEW_LARGE_DIR)"
        );
    }
}

fn report(what: &str, times: &mut [f64]) {
    times.sort_by(f64::total_cmp);
    println!(
        "  {what:<32} median {:>7.2} ms   max {:>7.2} ms   ({} queries)",
        times[times.len() / 2],
        times[times.len() - 1],
        times.len()
    );
}
