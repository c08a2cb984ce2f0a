//! Loading a file with a progress bar on stderr.

use crate::format::bytes;
use crate::snapshot::{LoadError, LoadOptions};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

/// Loads a snapshot with `load` (the model alone, or with the replay's first pass), with at
/// most `max_events` trace events, drawing a progress bar on stderr if it takes over a second
/// and stderr is a terminal.
pub(super) fn load_with_progress<T>(
    file: &Path,
    max_events: u64,
    load: impl FnOnce(&Path, LoadOptions<'_>) -> Result<T, LoadError>,
) -> Result<T, String> {
    let total = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let show = std::io::stderr().is_terminal();
    // Called from the thread that reads the file (a decompressor's, for a compressed one).
    let drawn = std::sync::atomic::AtomicBool::new(false);
    let progress = |read: u64| {
        if show && started.elapsed() > Duration::from_secs(1) {
            draw_progress(file, read, total);
            drawn.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let options = LoadOptions {
        progress: Some(&progress),
        max_events,
        ..LoadOptions::default()
    };
    let result = load(file, options);
    if drawn.load(std::sync::atomic::Ordering::Relaxed) {
        eprint!("\r\x1b[2K");
    }
    result.map_err(|e| format!("{}: {e}", file.display()))
}

fn draw_progress(file: &Path, read: u64, total: u64) {
    const WIDTH: u64 = 30;
    let fraction = if total == 0 {
        1.0
    } else {
        read as f64 / total as f64
    };
    let filled = ((fraction.min(1.0) * WIDTH as f64) as u64).min(WIDTH);
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    eprint!(
        "\r\x1b[2Kreading {name} [{}{}] {:>3.0}% {} of {}",
        "#".repeat(filled as usize),
        " ".repeat((WIDTH - filled) as usize),
        fraction * 100.0,
        bytes(read),
        bytes(total)
    );
}
