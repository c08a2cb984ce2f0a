//! Benchmark: the stored index (`snapview::index`) of each large corpus file: how long writing
//! it takes, its size per event, and how long opening it takes (checking the structure only, as
//! the server does, and checking every checksum), against reading the pickle.
//!
//! `cargo bench --bench index` reads the `.pickle` files in `SNAPVIEW_LARGE_DIR` (default
//! `/tmp/snapview-large`); `-- FILE…` names files instead (the 10x file is not read unless
//! named). With none it says so and exits 0. The page cache is warm for every figure: the file
//! was just written (say `echo 3 > /proc/sys/vm/drop_caches` between runs for cold ones).

use snapview::analysis::{Analysis, Summary};
use snapview::index::{BlobIdentity, Verify};
use std::path::PathBuf;
use std::time::Instant;

const OPEN_RUNS: usize = 5;

fn main() {
    let named: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    let files = if named.is_empty() {
        let dir = std::env::var_os("SNAPVIEW_LARGE_DIR")
            .map_or_else(|| PathBuf::from("/tmp/snapview-large"), PathBuf::from);
        ["gpt2_big_trace", "gpt2_huge_trace"]
            .iter()
            .map(|name| dir.join(format!("{name}.pickle")))
            .filter(|path| path.exists())
            .collect()
    } else {
        named
    };
    if files.is_empty() {
        println!("index bench: skipped (no large corpus files)");
        return;
    }
    for path in files {
        run(&path);
    }
}

fn seconds(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn run(path: &std::path::Path) {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let started = Instant::now();
    let (snapshot, seed) = snapview::analysis::load_path(path, Default::default()).expect("loads");
    let analysis = Analysis::seeded(&snapshot, seed);
    let summary = Summary::new(&snapshot, &analysis);
    let read = seconds(started);
    let events: usize = snapshot
        .device_traces
        .iter()
        .map(snapview::snapshot::Trace::len)
        .sum();

    let dir =
        tempfile::tempdir_in(path.parent().unwrap_or(std::path::Path::new("."))).expect("temp dir");
    let index = dir.path().join("bench.snapidx");
    let blob = BlobIdentity {
        id: "0123456789abcdef",
        bytes: std::fs::metadata(path).expect("size").len(),
    };
    let fingerprint = snapview::analysis::roles::UserRules::default().fingerprint();
    let started = Instant::now();
    let bytes = snapview::index::write(&index, blob, &snapshot, &analysis, &summary, fingerprint)
        .expect("writes");
    let write = seconds(started);
    drop((snapshot, analysis, summary));

    let open = |verify| {
        median(
            (0..OPEN_RUNS)
                .map(|_| {
                    let started = Instant::now();
                    // SAFETY: the benchmark's own index file, written above and never
                    // changed in place.
                    let opened =
                        unsafe { snapview::index::open(&index, blob, verify) }.expect("opens");
                    let took = seconds(started);
                    drop(opened);
                    took
                })
                .collect(),
        )
    };
    let structure = open(Verify::Structure);
    let everything = open(Verify::Everything);
    println!(
        "{name}: {events} events; pickle read + analysis {read:.2} s; index written in {write:.2} s, \
         {bytes} bytes ({:.1} per event); open (median of {OPEN_RUNS}): {structure:.3} s checking \
         the structure, {everything:.3} s checking every checksum",
        bytes as f64 / events.max(1) as f64
    );
}
