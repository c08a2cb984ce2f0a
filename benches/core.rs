//! Benchmark: read + model + analysis indexes (replay, views' index) of the large corpus files.
//!
//! `cargo bench --bench core` decompresses `../shared/corpus/large/*.pickle.xz` (with the `xz`
//! command) into a temporary folder, or uses `SNAPVIEW_LARGE_DIR` if it holds the `.pickle` files,
//! then loads each file several times, each in a fresh process so peak RSS is the load's own.
//! It prints the median, minimum and maximum wall time and the peak RSS. With no large files it
//! says so and exits 0.
//!
//! Then the scaling curve (issue 23): the huge file, and the ten-times file when
//! `SNAPVIEW_SCALE_FILE` names one (made on demand with `/work/shared/corpus/scale_snapshot.py`
//! if it names a missing file), read and analysed with 1, 2, 4, ... and all cores
//! (`--threads`), beside Python's `pickle.load` of the same file. "Read and analysed" is what an
//! upload costs before its first view: decoding, the replay, the summary with every role, and
//! the views' index.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A target of issue 2: the median time, and the peak RSS if it sets one.
struct Target {
    seconds: f64,
    rss_mb: Option<u64>,
}

/// Each file, its number of runs, and its target.
const FILES: [(&str, usize, Option<Target>); 3] = [
    ("gpt2_cpp_trace", 7, None),
    (
        "gpt2_big_trace",
        7,
        Some(Target {
            seconds: 0.12,
            rss_mb: None,
        }),
    ),
    (
        "gpt2_huge_trace",
        9,
        Some(Target {
            seconds: 0.5,
            rss_mb: Some(400),
        }),
    ),
];

fn main() {
    snapview::threads::free_large_blocks_at_once();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let path = PathBuf::from(&args[i + 1]);
        let threads = args
            .iter()
            .position(|a| a == "--threads")
            .and_then(|t| args.get(t + 1)?.parse().ok())
            .unwrap_or_else(snapview::snapshot::default_threads);
        one_run(&path, threads, args.iter().any(|a| a == "--summary"));
        return;
    }
    let Some(dir) = large_dir() else {
        println!(
            "core bench: skipped (no large corpus files; set SNAPVIEW_LARGE_DIR or provide ../shared/corpus/large)"
        );
        return;
    };
    println!(
        "{:<18} {:>9} {:>9} {:>9} {:>10} {:>6}",
        "file", "median", "min", "max", "peak RSS", "runs"
    );
    let mut summary = Vec::new();
    for (name, runs, target) in FILES {
        let path = dir.join(format!("{name}.pickle"));
        if !path.exists() {
            continue;
        }
        let (times, peak_rss) = measure(
            &args[0],
            &path,
            snapview::snapshot::default_threads(),
            runs,
            false,
        );
        let median = times[times.len() / 2];
        let peak_mb = peak_rss / 1024;
        println!(
            "{:<18} {:>8.3}s {:>8.3}s {:>8.3}s {:>7} MB {:>6}",
            name,
            median,
            times[0],
            times[times.len() - 1],
            peak_mb,
            runs
        );
        if let Some(Target { seconds, rss_mb }) = target {
            let met = median <= seconds && rss_mb.is_none_or(|mb| peak_mb <= mb);
            let rss = rss_mb
                .map(|mb| format!(", peak RSS <= {mb} MB"))
                .unwrap_or_default();
            let verdict = if met { "met" } else { "MISSED" };
            summary.push(format!(
                "{name}: target median <= {seconds} s{rss}: {verdict}"
            ));
        }
        if let Some((python_seconds, python_mb)) = common::python_baseline(&path) {
            summary.push(format!(
                "{name}: Python's pickle.load takes {python_seconds:.2} s and {python_mb} MB: snapview is {:.1}x faster with {:.1}x less memory",
                python_seconds / median,
                python_mb as f64 / peak_mb.max(1) as f64
            ));
        }
    }
    for line in summary {
        println!("{line}");
    }
    scaling(&args[0], &dir);
}

/// The seconds of `runs` loads of `path` with `threads`, each in a fresh process, sorted, and
/// their peak RSS (KiB).
fn measure(
    bench: &str,
    path: &Path,
    threads: usize,
    runs: usize,
    summary: bool,
) -> (Vec<f64>, u64) {
    let mut times = Vec::new();
    let mut peak_rss = 0u64;
    for _ in 0..runs {
        let output = Command::new(bench)
            .args([
                "--one",
                &path.to_string_lossy(),
                "--threads",
                &threads.to_string(),
            ])
            .args(summary.then_some("--summary"))
            .output()
            .expect("run the bench child");
        let text = String::from_utf8_lossy(&output.stdout);
        let mut fields = text.split_whitespace();
        let seconds: f64 = fields
            .next()
            .and_then(|s| s.parse().ok())
            .expect("child time");
        let rss: u64 = fields
            .next()
            .and_then(|s| s.parse().ok())
            .expect("child rss");
        times.push(seconds);
        peak_rss = peak_rss.max(rss);
    }
    times.sort_by(f64::total_cmp);
    (times, peak_rss)
}

/// The huge file (and the ten-times file, when asked for) with 1, 2 and all cores, beside
/// Python's `pickle.load`.
fn scaling(bench: &str, dir: &Path) {
    let mut files = vec![dir.join("gpt2_huge_trace.pickle")];
    if let Some(scale) = std::env::var_os("SNAPVIEW_SCALE_FILE").map(PathBuf::from) {
        if !scale.exists() {
            make_scale_file(&files[0], &scale);
        }
        files.push(scale);
    }
    let all = snapview::snapshot::default_threads();
    // 1, 2, 4, ... and all: the scaling curve.
    let mut counts: Vec<usize> = std::iter::successors(Some(1), |&n| Some(n * 2))
        .take_while(|&n| n < all)
        .chain([all])
        .collect();
    counts.dedup();
    println!();
    println!(
        "scaling (read, replay, summary with every role, views' index: what an upload costs before its first view; median of 5 runs, each in a fresh process; {all} cores here)"
    );
    println!(
        "{:<24} {:>8} {:>9} {:>10} {:>8}",
        "file", "threads", "median", "peak RSS", "speedup"
    );
    for path in files.iter().filter(|p| p.exists()) {
        let name = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let mut one = None;
        for &threads in &counts {
            let (times, rss) = measure(bench, path, threads, 5, true);
            let median = times[times.len() / 2];
            let base = *one.get_or_insert(median);
            println!(
                "{name:<24} {threads:>8} {median:>8.3}s {:>7} MB {:>7.2}x",
                rss / 1024,
                base / median
            );
        }
        match common::python_baseline(path) {
            Some((seconds, mb)) => {
                println!(
                    "{name:<24} {:>8} {seconds:>8.3}s {mb:>7} MB   (Python pickle.load)",
                    "-"
                );
            }
            None => println!("{name:<24} (no python3: no pickle.load baseline)"),
        }
    }
}

/// Makes the ten-times file from the huge one with the corpus's script.
fn make_scale_file(huge: &Path, out: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/scale_snapshot.py");
    let script = if script.exists() {
        script
    } else {
        PathBuf::from("/work/shared/corpus/scale_snapshot.py")
    };
    let status = Command::new("python3")
        .arg(&script)
        .arg(huge)
        .arg(out)
        .arg("10")
        .status();
    if !status.is_ok_and(|s| s.success()) {
        println!("could not make {} with {}", out.display(), script.display());
    }
}

/// One measured load in this process: prints seconds and peak RSS in KiB. Without `summary`,
/// the work issue 2's targets are about (read, replay, the views' index); with it, what an
/// upload costs before its first view (the summary with every role besides).
fn one_run(path: &Path, threads: usize, summary: bool) {
    let started = Instant::now();
    // As the CLI and server load: the replay's first pass runs on the loader's column thread.
    let options = snapview::snapshot::LoadOptions {
        threads,
        ..Default::default()
    };
    snapview::snapshot::set_default_threads(threads);
    let (snapshot, seed) = snapview::analysis::load_path(path, options).expect("load");
    let devices = if summary {
        let rules = snapview::analysis::roles::UserRules::default();
        let (_, summary) = snapview::analysis::analyse(&snapshot, seed, &rules);
        summary.devices.len()
    } else {
        let analysis = snapview::analysis::Analysis::seeded(&snapshot, seed);
        analysis.index_views();
        analysis.devices.len()
    };
    let elapsed = started.elapsed().as_secs_f64();
    assert!(devices > 0);
    println!(
        "{elapsed} {}",
        common::peak_rss_kib(std::process::id()).unwrap_or(0)
    );
}

/// The folder with the decompressed large files.
fn large_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SNAPVIEW_LARGE_DIR") {
        let dir = PathBuf::from(dir);
        if dir.join("gpt2_huge_trace.pickle").exists() || dir.join("gpt2_big_trace.pickle").exists()
        {
            return Some(dir);
        }
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/large");
    if !source.is_dir() {
        return None;
    }
    let target = std::env::temp_dir().join("snapview-large");
    std::fs::create_dir_all(&target).ok()?;
    for (name, _, _) in FILES {
        let xz = source.join(format!("{name}.pickle.xz"));
        let out = target.join(format!("{name}.pickle"));
        if xz.exists() && !out.exists() {
            let partial = target.join(format!("{name}.pickle.partial"));
            let file = std::fs::File::create(&partial).ok()?;
            let status = Command::new("xz")
                .arg("-dc")
                .arg(&xz)
                .stdout(file)
                .status()
                .ok()?;
            if !status.success() {
                return None;
            }
            std::fs::rename(&partial, &out).ok()?;
        }
    }
    Some(target)
}
