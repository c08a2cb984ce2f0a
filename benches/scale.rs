//! Benchmark: the table of issue 12 ("ten times bigger, just as fast"), end to end.
//!
//! `cargo bench --bench scale` measures, on the huge corpus file and on a ten times longer one
//! (made from it by `../shared/corpus/scale_snapshot.py` into the large-files folder when
//! missing: about 3 minutes and 12 GB of memory in Python, once), what a user waits for:
//!
//! - `snapview summary`'s work (read, replay, summary) in a fresh process: median wall time and
//!   peak RSS, against Python's `pickle.load` of the same file measured here;
//! - a real `snapview serve` over HTTP: timeline windows of 1600 px (full and zoomed, both
//!   axes), segment maps at random events, the roles window, the flame graph, filtered event
//!   pages (medians), and the server's peak RSS with the file open and every view queried;
//! - the same server restarted on its data folder: time to the first timeline answer (cold),
//!   and its peak RSS after the views again.
//!
//! It skips cleanly without the large corpus; `SNAPVIEW_SCALE_FILES=huge` leaves out the 10x
//! file. Figures are wall-clock on whatever else the machine is doing: run it on a quiet box.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HUGE: &str = "gpt2_huge_trace";
const X10: &str = "gpt2_huge_trace_x10";
const SERVING_AT: &str = "snapview is serving at ";

fn main() {
    snapview::threads::free_large_blocks_at_once();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--summary") {
        summary_run(Path::new(&args[i + 1]));
        return;
    }
    let Some(dir) = large_dir() else {
        println!("scale bench: skipped (no {HUGE}.pickle; set SNAPVIEW_LARGE_DIR)");
        return;
    };
    let mut files = vec![(HUGE, dir.join(format!("{HUGE}.pickle")), 5)];
    let only_huge = std::env::var("SNAPVIEW_SCALE_FILES").is_ok_and(|v| v == "huge");
    if !only_huge {
        match ten_times(&dir) {
            Ok(path) => files.push((X10, path, 3)),
            Err(why) => println!("scale bench: no 10x file ({why}); the huge file only"),
        }
    }
    let mut columns = Vec::new();
    for (name, path, runs) in &files {
        println!("{name}: measuring ({} MB)", file_mb(path));
        columns.push((name.to_string(), measure(&args[0], path, *runs)));
    }
    print_table(&columns);
}

/// One file's figures; `None` where a step could not run.
#[derive(Default)]
struct Figures {
    summary_s: Option<f64>,
    summary_mb: Option<u64>,
    python_s: Option<f64>,
    python_mb: Option<u64>,
    timeline_ms: Option<(f64, f64)>,
    segments_ms: Option<(f64, f64)>,
    roles_ms: Option<(f64, f64)>,
    flame_ms: Option<(f64, f64)>,
    events_ms: Option<(f64, f64)>,
    served_mb: Option<u64>,
    cold_first_timeline_s: Option<f64>,
    cold_listen_s: Option<f64>,
    restarted_mb: Option<u64>,
    index_mb: Option<u64>,
}

fn measure(bench: &str, path: &Path, runs: usize) -> Figures {
    let mut figures = Figures::default();
    let mut times = Vec::new();
    let mut peak = 0;
    for _ in 0..runs {
        let output = Command::new(bench)
            .args(["--summary", &path.to_string_lossy()])
            .output()
            .expect("run the summary child");
        let text = String::from_utf8_lossy(&output.stdout);
        let mut fields = text.split_whitespace();
        if let (Some(s), Some(kib)) = (
            fields.next().and_then(|s| s.parse::<f64>().ok()),
            fields.next().and_then(|s| s.parse::<u64>().ok()),
        ) {
            times.push(s);
            peak = peak.max(kib / 1024);
        }
    }
    if !times.is_empty() {
        figures.summary_s = Some(median(&mut times));
        figures.summary_mb = Some(peak);
    }
    if let Some((s, mb)) = common::python_baseline(path) {
        figures.python_s = Some(s);
        figures.python_mb = Some(mb);
    }
    serve_figures(path, &mut figures);
    figures
}

/// The served figures: import, views, restart.
fn serve_figures(path: &Path, figures: &mut Figures) {
    let data = tempfile::tempdir().expect("tempdir");
    let data_dir = data.path().join("data");
    let (mut server, url, imported) = serve(&data_dir, Some(path));
    let Some(page) = imported else {
        println!("  the server did not import the file");
        stop(&mut server);
        return;
    };
    let id = page
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let agent = agent();
    let base = format!("{url}/api/snapshots/{id}");
    let Some(events) = get_json(&agent, &base)
        .and_then(|detail| detail["analysis"]["devices"][0]["trace_entries"].as_u64())
    else {
        println!("  no trace entries in the snapshot's detail");
        stop(&mut server);
        return;
    };
    query_views(&agent, &base, events as usize, figures);
    figures.served_mb = peak_rss_mb(server.id());
    // The stored index is written after the import answers, in the background (seconds for
    // 32 million events): a server stopped before it is there reads the pickle again.
    let index = data_dir.join("indexes").join(format!("{id}.snapidx"));
    let waited = Instant::now();
    while !index.exists() && waited.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(50));
    }
    figures.index_mb = std::fs::metadata(&index).ok().map(|m| m.len() >> 20);
    stop(&mut server);

    // Restarted on the same folder: nothing is in memory.
    let spawned = Instant::now();
    let (mut server, url, _) = serve(&data_dir, None);
    figures.cold_listen_s = Some(spawned.elapsed().as_secs_f64());
    let base = format!("{url}/api/snapshots/{id}");
    if get(&agent, &format!("{base}/timeline?width=1600")).is_some() {
        figures.cold_first_timeline_s = Some(spawned.elapsed().as_secs_f64());
    }
    let mut again = Figures::default();
    query_views(&agent, &base, events as usize, &mut again);
    figures.restarted_mb = peak_rss_mb(server.id());
    stop(&mut server);
}

/// Every view at many windows and moments, timed over HTTP.
fn query_views(agent: &ureq::Agent, base: &str, events: usize, figures: &mut Figures) {
    let time = |query: &str| -> Option<f64> {
        let began = Instant::now();
        get(agent, &format!("{base}/{query}"))?;
        Some(began.elapsed().as_secs_f64() * 1e3)
    };
    let mut timeline = Vec::new();
    let mut roles = Vec::new();
    for zoom in [1usize, 10, 100, 1000, 10_000] {
        let span = (events / zoom).max(10);
        for k in 0..5 {
            let start = (events - span) * k / 4;
            let end = start + span - 1;
            for axis in ["event", "time"] {
                let window = format!("start={start}&end={end}&width=1600&axis={axis}");
                timeline.extend(time(&format!("timeline?{window}")));
                roles.extend(time(&format!("roles?{window}")));
            }
        }
    }
    let mut random = Lcg(12);
    let mut segments = Vec::new();
    let mut flame = Vec::new();
    for _ in 0..20 {
        let at = random.below(events);
        segments.extend(time(&format!("segments?at={at}")));
        flame.extend(time(&format!("flame?at={at}")));
    }
    let mut listed = Vec::new();
    for query in [
        "events?action=alloc&min_size=1048576",
        "events?action=segment_alloc",
        "events?frame=forward&offset=1000",
        "events?min_size=104857600",
    ] {
        for _ in 0..3 {
            listed.extend(time(query));
        }
    }
    figures.timeline_ms = spread(&mut timeline);
    figures.roles_ms = spread(&mut roles);
    figures.segments_ms = spread(&mut segments);
    figures.flame_ms = spread(&mut flame);
    figures.events_ms = spread(&mut listed);
}

/// A row of the table: its label, how a file's figures print in it, and the goal.
type Row<'a> = (
    &'static str,
    Box<dyn Fn(&Figures) -> String + 'a>,
    &'static str,
);

fn print_table(columns: &[(String, Figures)]) {
    let head: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
    println!();
    println!(
        "| measured (medians) | {} | goal on the 10x file |",
        head.join(" | ")
    );
    println!("|---|{}---|", "---|".repeat(columns.len()));
    let ms =
        |v: Option<(f64, f64)>| v.map_or("-".into(), |(m, x)| format!("{m:.1} ms (max {x:.0})"));
    let mb = |v: Option<u64>| v.map_or("-".into(), |v| format!("{v} MiB"));
    let s = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2} s"));
    let rows: Vec<Row> = vec![
        (
            "timeline window, 1600 px, HTTP",
            Box::new(|f: &Figures| ms(f.timeline_ms)),
            "<= 30 ms",
        ),
        (
            "segment map at a random event, HTTP",
            Box::new(|f: &Figures| ms(f.segments_ms)),
            "<= 50 ms",
        ),
        (
            "roles window, 1600 px, HTTP",
            Box::new(|f: &Figures| ms(f.roles_ms)),
            "",
        ),
        (
            "flame graph at a random event, HTTP",
            Box::new(|f: &Figures| ms(f.flame_ms)),
            "",
        ),
        (
            "filtered events page, HTTP",
            Box::new(|f: &Figures| ms(f.events_ms)),
            "",
        ),
        (
            "server peak RSS, file open, every view queried",
            Box::new(|f: &Figures| mb(f.served_mb)),
            "<= 1.5 GB",
        ),
        (
            "stored index beside the blob",
            Box::new(|f: &Figures| mb(f.index_mb)),
            "",
        ),
        (
            "restart: listening",
            Box::new(|f: &Figures| s(f.cold_listen_s)),
            "",
        ),
        (
            "restart: first timeline answer (cold)",
            Box::new(|f: &Figures| s(f.cold_first_timeline_s)),
            "<= 2 s",
        ),
        (
            "restart: peak RSS after every view",
            Box::new(|f: &Figures| mb(f.restarted_mb)),
            "",
        ),
        (
            "`snapview summary` work",
            Box::new(|f: &Figures| format!("{} · {}", s(f.summary_s), mb(f.summary_mb))),
            "<= 10x huge, <= 1.5 GB",
        ),
        (
            "Python `pickle.load`",
            Box::new(|f: &Figures| format!("{} · {}", s(f.python_s), mb(f.python_mb))),
            "",
        ),
        (
            "snapview vs Python",
            Box::new(|f: &Figures| match (f.summary_s, f.python_s) {
                (Some(ours), Some(python)) => format!("{:.1}x faster", python / ours),
                _ => "-".into(),
            }),
            ">= 20x",
        ),
    ];
    for (label, value, goal) in rows {
        let cells: Vec<String> = columns.iter().map(|(_, f)| value(f)).collect();
        println!("| {label} | {} | {goal} |", cells.join(" | "));
    }
}

/// In a fresh process: what `snapview summary` does before printing (read with the replay's
/// first pass alongside, analysis, summary with roles); prints seconds and peak RSS in KiB.
fn summary_run(path: &Path) {
    let started = Instant::now();
    let (snapshot, seed) = snapview::analysis::load_path(path, Default::default()).expect("load");
    let analysis = snapview::analysis::Analysis::seeded(&snapshot, seed);
    let summary = snapview::analysis::Summary::with_rules(
        &snapshot,
        &analysis,
        &snapview::analysis::roles::UserRules::default(),
    );
    let elapsed = started.elapsed().as_secs_f64();
    assert!(!summary.devices.is_empty());
    let kib = peak_rss_mb(std::process::id()).unwrap_or(0) * 1024;
    println!("{elapsed} {kib}");
}

/// Starts `snapview serve` on `data_dir` (importing `file` if given): the child, its URL, and
/// the imported file's page URL.
fn serve(data_dir: &Path, file: Option<&Path>) -> (Child, String, Option<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_snapview"));
    command
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env_remove("SNAPVIEW_PUBLIC_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(file) = file {
        command.arg(file);
    }
    let mut child = command.spawn().expect("start the server");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut imported = None;
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => match line.strip_prefix(SERVING_AT) {
                Some(url) => break url.trim_end_matches('/').to_owned(),
                None => imported = line.split_whitespace().next().map(str::to_owned),
            },
            _ => panic!("the server exited before serving"),
        }
    };
    // Drain the rest so a full pipe never blocks the server.
    std::thread::spawn(move || for _ in lines {});
    (child, url, imported)
}

fn stop(server: &mut Child) {
    let _ = server.kill();
    let _ = server.wait();
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into()
}

/// The body of a 200 answer.
fn get(agent: &ureq::Agent, url: &str) -> Option<Vec<u8>> {
    let mut response = agent.get(url).call().ok()?;
    if response.status() != 200 {
        println!("  {url}: {}", response.status());
        return None;
    }
    response
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .ok()
}

fn get_json(agent: &ureq::Agent, url: &str) -> Option<serde_json::Value> {
    serde_json::from_slice(&get(agent, url)?).ok()
}

/// A small deterministic generator, so every run asks for the same moments.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Median and maximum.
fn spread(values: &mut [f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let m = median(values);
    Some((m, values[values.len() - 1]))
}

/// Peak RSS (`VmHWM`) of a process, in MB.
fn peak_rss_mb(pid: u32) -> Option<u64> {
    common::peak_rss_kib(pid).map(|kib| kib / 1024)
}

fn file_mb(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len() >> 20)
}

/// The folder with the decompressed huge file (`benches/core.rs` makes it).
fn large_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SNAPVIEW_LARGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("snapview-large"));
    dir.join(format!("{HUGE}.pickle")).exists().then_some(dir)
}

/// The 10x file beside the huge one, made by the corpus's own script when missing.
fn ten_times(dir: &Path) -> Result<PathBuf, String> {
    let out = dir.join(format!("{X10}.pickle"));
    if out.exists() {
        return Ok(out);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/scale_snapshot.py");
    if !script.exists() {
        return Err(format!("{} is missing", script.display()));
    }
    println!(
        "making {} (about 3 minutes, 12 GB of memory in Python)",
        out.display()
    );
    let partial = dir.join(format!("{X10}.pickle.partial"));
    let status = Command::new("python3")
        .arg(&script)
        .arg(dir.join(format!("{HUGE}.pickle")))
        .arg(&partial)
        .arg("10")
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!("scale_snapshot.py failed: {status}"));
    }
    std::fs::rename(&partial, &out).map_err(|e| e.to_string())?;
    Ok(out)
}
