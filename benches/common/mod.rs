//! What the benchmarks share: the baseline they are measured against, and peak memory.

use std::path::Path;
use std::process::Command;

/// The baseline the issues name, measured on the spot: `pickle.load` of the file by `python3`
/// in a fresh process (seconds, peak RSS in MB); `None` without `python3`.
pub fn python_baseline(path: &Path) -> Option<(f64, u64)> {
    let script = "import pickle, resource, sys, time\n\
        start = time.perf_counter()\n\
        pickle.load(open(sys.argv[1], 'rb'))\n\
        print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)";
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .ok()
        .filter(|output| output.status.success())?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut fields = text.split_whitespace();
    let seconds = fields.next()?.parse().ok()?;
    let rss_kib: u64 = fields.next()?.parse().ok()?;
    Some((seconds, rss_kib / 1024))
}

/// Peak RSS (`VmHWM`) of process `pid`, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
