//! Load test (run explicitly, one test at a time so the two do not load the machine together:
//! `cargo test --release --test load -- --ignored --nocapture --test-threads=1`): 50 clients
//! over the pages and the view queries of the largest snapshot at hand, while uploads arrive,
//! against the real server over TCP. It asserts that every request succeeds and prints the
//! latency per endpoint. The second test spreads the same mix over two replicas sharing one
//! PostgreSQL database and S3 prefix (the services of `.ci/services up`, which it requires).
//!
//! The snapshot is `gpt2_huge_trace` from `SNAPVIEW_LARGE_DIR` (default /tmp/snapview-large),
//! else the largest small fixture (with `SNAPVIEW_REQUIRE_LARGE` set, a missing file fails).
//! `SNAPVIEW_LOAD_SECONDS` sets how long the load lasts (default 30).

mod common;

use common::served::Served;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const READERS: usize = 50;
const UPLOADERS: usize = 3;

/// The snapshot to load the server with, and what it is called in the report.
fn snapshot_under_test() -> (PathBuf, String) {
    // With SNAPVIEW_REQUIRE_LARGE set (as in .ci/run) a missing file fails here instead.
    if let Some(large) = common::large_file("gpt2_huge_trace") {
        return (large, "gpt2_huge_trace".into());
    }
    let biggest = common::small_names()
        .into_iter()
        .max_by_key(|name| std::fs::metadata(common::path_of(name)).map_or(0, |m| m.len()))
        .expect("fixtures");
    println!(
        "note: gpt2_huge_trace.pickle is not in {}; loading the largest small fixture, {biggest}, instead",
        common::large_dir().display()
    );
    (common::path_of(&biggest), biggest)
}

/// Latencies of one endpoint, and its failures (status or transport error, with the URL).
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    failures: Vec<String>,
}

type Tallies = Arc<Mutex<BTreeMap<&'static str, Tally>>>;

fn record(
    tallies: &Tallies,
    endpoint: &'static str,
    started: Instant,
    outcome: Result<u16, String>,
    url: &str,
) {
    let elapsed = started.elapsed();
    let mut tallies = tallies.lock().expect("tallies");
    let tally = tallies.entry(endpoint).or_default();
    tally.latencies.push(elapsed);
    match outcome {
        Ok(status) if (200..300).contains(&status) => {}
        Ok(status) => tally.failures.push(format!("{status} {url}")),
        Err(error) => tally.failures.push(format!("{error} {url}")),
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// A GET that reads the whole body, as a browser would.
fn get(agent: &ureq::Agent, url: &str) -> Result<u16, String> {
    let mut response = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    response
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    Ok(status)
}

fn load_seconds() -> u64 {
    std::env::var("SNAPVIEW_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// What the readers walk: the snapshot's id, its first device and how many events it has.
struct Target {
    id: String,
    device_index: u64,
    entries: u64,
}

#[test]
#[ignore = "a minute of load; run with --ignored"]
fn fifty_clients_over_pages_views_and_uploads() {
    let (path, label) = snapshot_under_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let started = Instant::now();
    let server = Served::start(&data, &[&path.to_string_lossy()]);
    let target = imported(&server, &label, started);
    run_mix(&[&server], &target, &label);
}

#[test]
#[ignore = "a minute of load; run with --ignored"]
fn fifty_clients_over_two_replicas_sharing_postgres_and_s3() {
    let (path, label) = snapshot_under_test();
    let shared = common::backend::SharedBackend::fresh();
    let started = Instant::now();
    // A imports the file at start (into the database and the bucket); B starts on the same
    // ones with an empty cache of its own, and opens the snapshot from what A stored.
    let a = Served::builder()
        .args(shared.serve_args())
        .arg(&path)
        .start();
    let target = imported(&a, &format!("{label} through replica A"), started);
    let b = Served::builder().args(shared.serve_args()).start();
    let first_view = Instant::now();
    // A limit long enough for a first view that fetches a large blob or index.
    let (status, detail) = b.call_within(
        "GET",
        &format!("/api/snapshots/{}", target.id),
        None,
        Duration::from_secs(300),
    );
    assert_eq!(status, 200, "replica B's first view: {detail}");
    println!(
        "replica B's first view of {label} (from the bucket, with an empty cache): {:.1} s",
        first_view.elapsed().as_secs_f64()
    );
    run_mix(&[&a, &b], &target, &format!("{label}, two replicas"));
}

/// Waits until `server` lists the file it imported at start; returns what the readers walk.
fn imported(server: &Served, label: &str, started: Instant) -> Target {
    // The file is imported before the server answers its first request.
    let mut stored = Vec::new();
    while stored.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the import never finished"
        );
        let (status, _) = server.call("GET", "/api/snapshots", None);
        if status == 200 {
            stored = server.stored();
        }
    }
    let id = stored[0]["id"].as_str().expect("id").to_owned();
    let (status, detail) = server.call("GET", &format!("/api/snapshots/{id}"), None);
    assert_eq!(status, 200, "{detail}");
    let detail: serde_json::Value = serde_json::from_str(&detail).expect("json");
    let device = &detail["analysis"]["devices"][0];
    let device_index = device["device"].as_u64().expect("device");
    let entries = device["trace_entries"]
        .as_u64()
        .expect("trace_entries")
        .max(1);
    println!(
        "{label}: {entries} events on device {device_index}; imported and answering after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Target {
        id,
        device_index,
        entries,
    }
}

/// The readers and uploaders over `servers` (client `n` on server `n % servers.len()`) for
/// [`load_seconds`]; prints the latencies and fails on any failed request.
fn run_mix(servers: &[&Served], target: &Target, label: &str) {
    let seconds = load_seconds();
    let Target {
        id,
        device_index,
        entries,
    } = target;
    let (device_index, entries) = (*device_index, *entries);
    let bases: Vec<String> = servers.iter().map(|server| server.url("")).collect();
    let tallies: Tallies = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let uploads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for client in 0..READERS {
        let (base, id, tallies, stop) = (
            bases[client % bases.len()].clone(),
            id.clone(),
            tallies.clone(),
            stop.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let agent = agent();
            let mut round = client as u64;
            while !stop.load(Ordering::Relaxed) {
                // Moments and windows spread over the trace, differently for each client.
                let at = (round * 7919 + client as u64 * 104_729) % entries;
                let span = (entries >> (round % 8)).max(1);
                let start = at.saturating_sub(span / 2);
                let requests: [(&'static str, String); 6] = [
                    ("page /", format!("{base}/")),
                    ("page /s/{id}", format!("{base}/s/{id}")),
                    (
                        "timeline",
                        format!("{base}/api/snapshots/{id}/timeline?device={device_index}&start={start}&end={}&width=1200", (start + span).min(entries)),
                    ),
                    (
                        "flame",
                        format!("{base}/api/snapshots/{id}/flame?device={device_index}&at={at}"),
                    ),
                    (
                        "segments",
                        format!("{base}/api/snapshots/{id}/segments?device={device_index}&at={at}"),
                    ),
                    (
                        "events",
                        format!("{base}/api/snapshots/{id}/events?device={device_index}&offset={at}&limit=200"),
                    ),
                ];
                let (endpoint, url) = &requests[(round % 6) as usize];
                let began = Instant::now();
                record(&tallies, endpoint, began, get(&agent, url), url);
                round += 1;
            }
        }));
    }
    // Uploads of small real snapshots, each made new by trailing bytes after the pickle's STOP
    // (which readers ignore), so each one is parsed and stored, not found as a duplicate.
    let small: Vec<Vec<u8>> = ["mlp_small", "oom", "streams", "infer_grad"]
        .iter()
        .map(|name| std::fs::read(common::path_of(name)).expect("fixture"))
        .collect();
    for uploader in 0..UPLOADERS {
        let (base, tallies, stop, uploads, small) = (
            bases[uploader % bases.len()].clone(),
            tallies.clone(),
            stop.clone(),
            uploads.clone(),
            small.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let agent = agent();
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let mut bytes = small[round % small.len()].clone();
                bytes.extend_from_slice(format!("upload {uploader} {round}").as_bytes());
                let url = format!("{base}/api/snapshots?name=load-{uploader}-{round}");
                let began = Instant::now();
                let outcome = agent
                    .post(&url)
                    .header("Content-Type", "application/octet-stream")
                    .send(&bytes[..])
                    .map(|mut r| {
                        let _ = r.body_mut().read_to_string();
                        r.status().as_u16()
                    })
                    .map_err(|e| e.to_string());
                record(&tallies, "upload", began, outcome, &url);
                uploads.fetch_add(1, Ordering::Relaxed);
                round += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("client thread");
    }

    let tallies = tallies.lock().expect("tallies");
    println!(
        "{READERS} readers and {UPLOADERS} uploaders for {seconds} s on {label}:\n{:<14} {:>7} {:>9} {:>9} {:>9} {:>7}",
        "endpoint", "count", "p50 ms", "p99 ms", "max ms", "errors"
    );
    let mut failures = Vec::new();
    for (endpoint, tally) in tallies.iter() {
        let mut sorted = tally.latencies.clone();
        sorted.sort();
        let quantile = |q: f64| {
            sorted
                .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "{endpoint:<14} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>7}",
            sorted.len(),
            quantile(0.5),
            quantile(0.99),
            quantile(1.0),
            tally.failures.len()
        );
        failures.extend(tally.failures.iter().take(5).cloned());
    }
    assert!(
        tallies.len() == 7,
        "every endpoint was exercised: {:?}",
        tallies.keys()
    );
    assert!(failures.is_empty(), "failed requests: {failures:#?}");
    for server in servers {
        let (status, _) = server.call("GET", "/api/snapshots", None);
        assert_eq!(status, 200);
    }
}
