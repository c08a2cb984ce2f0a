//! Benchmark: the views' queries on the large corpus files, server time without HTTP.
//!
//! `cargo bench --bench views` loads each large file once (decompressed by `benches/core.rs`, or
//! from `SNAPVIEW_LARGE_DIR`), then times timeline windows at every zoom level for a 1600 px view
//! (and their JSON size), the flame graph and the segment map at spread-out moments. Prints
//! median and max per query kind.

use snapview::analysis::Analysis;
use snapview::analysis::flame::{FlameMode, flame};
use snapview::analysis::memory_map::memory_map;
use snapview::analysis::roles::{UserRules, role_window};
use snapview::analysis::timeline::{Axis, Window, timeline};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let dir = std::env::var_os("SNAPVIEW_LARGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("snapview-large"));
    let mut any = false;
    for name in ["gpt2_big_trace", "gpt2_huge_trace"] {
        let path = dir.join(format!("{name}.pickle"));
        if !path.exists() {
            continue;
        }
        any = true;
        let snapshot = snapview::snapshot::load_path(&path, Default::default()).expect("load");
        let analysis = Analysis::new(&snapshot);
        let device = &analysis.devices[0];
        let trace = snapshot.trace(device.device);
        let n = trace.len();
        println!("{name}: {n} events");

        // Timeline: full view, then windows of 1/10 .. 1/100000 of the trace at spread positions.
        let mut times = Vec::new();
        let mut largest_json = 0;
        let _ = device.allocations_by_size(); // built once per snapshot, on first use
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
        "  {what:<30} median {:>7.2} ms   max {:>7.2} ms   ({} queries)",
        times[times.len() / 2],
        times[times.len() - 1],
        times.len()
    );
}
