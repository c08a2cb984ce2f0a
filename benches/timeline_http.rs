//! Benchmark: where a timeline window's time goes over HTTP (`cargo bench --bench timeline_http`).
//!
//! Loads `gpt2_huge_trace.pickle` from `SNAPVIEW_LARGE_DIR` (default /tmp/snapview-large; the
//! bench skips when it is absent, and fails with `SNAPVIEW_REQUIRE_LARGE` set) twice: in this
//! process, to time the view's own work (the timeline and its JSON), and into a real
//! `snapview serve` (the file imported at start), to time `GET /api/snapshots/{id}/timeline`
//! for the same windows over one kept-alive connection. The difference is what HTTP, the
//! extractors (record lookup, cache) and the handler's other parts (markers, roles per band,
//! the blocking-thread hop) add. Prints the median and the slowest of `ROUNDS` requests per
//! window, and a small endpoint's over the same path (`/oom`) for the fixed cost of a request.

// The tests' helpers: where the large files are, and a real `snapview serve` to talk to.
#[path = "../tests/common/mod.rs"]
mod common;

use common::served::Served;
use snapview::analysis::timeline::{Axis, Window, timeline};
use std::time::{Duration, Instant};

const ROUNDS: usize = 50;

fn median_and_max(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() - 1])
}

fn main() {
    let Some(path) = common::large_file("gpt2_huge_trace") else {
        println!(
            "timeline_http bench: skipped (no gpt2_huge_trace.pickle in {}; set SNAPVIEW_LARGE_DIR)",
            common::large_dir().display()
        );
        return;
    };
    let (snapshot, seed) =
        snapview::analysis::load_path(&path, Default::default()).expect("load in process");
    let analysis = snapview::analysis::Analysis::seeded(&snapshot, seed);
    let device = &analysis.devices[0];
    let trace = snapshot.trace(device.device);
    let n = trace.len();
    // The whole trace, a tenth and a ten-thousandth of it, from the middle: the page's first
    // draw and two zoom levels.
    let windows: Vec<(&str, usize, usize)> = vec![
        ("full", 0, n - 1),
        ("zoom 1/10", n / 2, n / 2 + n / 10),
        ("zoom 1/10000", n / 2, n / 2 + n / 10_000),
    ];

    let data = tempfile::tempdir().expect("tempdir");
    let server = Served::builder()
        .data_dir(&data.path().join("data"))
        .env("RUST_LOG", "snapview=warn")
        .arg(&path)
        .start();
    let id = server
        .imported
        .iter()
        .find_map(|line| line.split("/s/").nth(1))
        .map(|rest| rest.chars().take(16).collect::<String>())
        .expect("the imported file's URL");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let get = |path: &str| -> (f64, usize) {
        let began = Instant::now();
        let mut response = agent.get(&server.url(path)).call().expect("answer");
        let body = response.body_mut().read_to_vec().expect("body");
        (began.elapsed().as_secs_f64() * 1e3, body.len())
    };

    println!("gpt2_huge_trace: {n} events, {ROUNDS} rounds per window, width 1600");
    println!(
        "{:<14} {:>16} {:>16} {:>10}",
        "window", "in-process ms", "HTTP ms", "JSON KB"
    );
    for (label, start, end) in &windows {
        let window = Window {
            start: *start,
            end: *end,
            width: 1600,
            height: 400,
            axis: Axis::Event,
        };
        let mut local = Vec::new();
        for _ in 0..ROUNDS {
            let began = Instant::now();
            let answer = timeline(device, trace, window);
            let json = serde_json::to_vec(&answer).expect("json");
            std::hint::black_box(json);
            local.push(began.elapsed().as_secs_f64() * 1e3);
        }
        let query = format!("/api/snapshots/{id}/timeline?start={start}&end={end}&width=1600");
        get(&query); // the first after start-up pays for anything built lazily
        let mut remote = Vec::new();
        let mut size = 0;
        for _ in 0..ROUNDS {
            let (ms, bytes) = get(&query);
            remote.push(ms);
            size = bytes;
        }
        let (local_median, local_max) = median_and_max(&mut local);
        let (remote_median, remote_max) = median_and_max(&mut remote);
        println!(
            "{label:<14} {local_median:>7.1} (max {local_max:>5.1}) {remote_median:>7.1} (max {remote_max:>5.1}) {:>10}",
            size / 1024
        );
    }
    // What each answer paid before the server found these once per snapshot (cache.rs
    // `TimelineMarks`): the peak, the OOM markers and complete_from, each a whole-trace pass.
    let mut passes = Vec::new();
    for _ in 0..ROUNDS {
        let began = Instant::now();
        let peak = device.replay.peak_allocated(trace);
        let ooms = snapview::analysis::markers::oom_markers(trace);
        let complete = snapview::analysis::markers::complete_from(&device.replay);
        std::hint::black_box((peak, ooms, complete));
        passes.push(began.elapsed().as_secs_f64() * 1e3);
    }
    let (passes_median, passes_max) = median_and_max(&mut passes);
    println!(
        "{:<14} {passes_median:>7.1} (max {passes_max:>5.1})   (peak, OOMs, complete_from: now once per load)",
        "whole-trace"
    );
    let mut fixed = Vec::new();
    for _ in 0..ROUNDS {
        fixed.push(get(&format!("/api/snapshots/{id}/oom")).0);
    }
    let (fixed_median, fixed_max) = median_and_max(&mut fixed);
    println!(
        "{:<14} {:>16} {fixed_median:>7.1} (max {fixed_max:>5.1})",
        "/oom", ""
    );
}
