//! The command line's cache of stored indexes: what a read of a file computed (its columns,
//! analysis and summary, the same index the server keeps beside each snapshot), kept in
//! `$XDG_CACHE_HOME/snapview` (else `~/.cache/snapview`) under a key made of the file's path,
//! size and modification time, so a second `snapview summary` of a large file opens it instead
//! of reading the pickle. `--no-cache` skips it.

use super::progress::load_with_progress;
use crate::analysis::roles::UserRules;
use crate::analysis::{Analysis, Summary};
use crate::index::{BlobIdentity, Verify};
use crate::snapshot::Snapshot;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// Files from this size on are cached: a smaller one is read in well under a second anyway,
/// and is not worth the cache's disk space.
const CACHE_FROM: u64 = 8 << 20;

/// Turns the cache off for this process (`--no-cache`).
static DISABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(super) fn disable() {
    DISABLED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Where the index of `file` is cached, and the identity it is stored under; `None` when the
/// cache is off or there is no cache folder or no modification time to key it by.
fn entry(file: &Path) -> Option<(PathBuf, String, u64)> {
    if DISABLED.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let folder = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    }
    .join("snapview");
    let meta = std::fs::metadata(file).ok()?;
    if meta.len() < CACHE_FROM {
        return None;
    }
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    // SipHash with fixed keys: the same key in every run. A file changed in place keeps its
    // path but not its size and modification time together.
    let mut hasher = std::hash::DefaultHasher::new();
    std::fs::canonicalize(file).ok()?.hash(&mut hasher);
    meta.len().hash(&mut hasher);
    modified.as_nanos().hash(&mut hasher);
    let id = format!("{:016x}", hasher.finish());
    Some((folder.join(format!("{id}.snapidx")), id, meta.len()))
}

/// The snapshot in `file` and its summary under `rules`: from the cached index when there is a
/// sound one, else read (and the index written for next time).
pub(super) fn summary(
    file: &Path,
    max_events: u64,
    rules: &UserRules,
) -> Result<(Snapshot, Summary), String> {
    let entry = entry(file);
    if let Some((index, id, bytes)) = &entry {
        let identity = BlobIdentity { id, bytes: *bytes };
        // SAFETY: the cache folder is snapview's own; indexes are written there only by a
        // temporary file and rename (`crate::index::write`), never edited in place. A file
        // truncated in place by someone else anyway makes a read past its new end raise
        // SIGBUS, which no check can prevent (as for the server's data folder).
        if let Ok(opened) = unsafe { crate::index::open(index, identity, Verify::Structure) } {
            let events: u64 = opened
                .snapshot
                .device_traces
                .iter()
                .map(|trace| trace.len() as u64)
                .sum();
            // A lower --max-events than the cached read had: read again, and refuse as then.
            if events <= max_events {
                let summary = if opened.rules_fingerprint == rules.fingerprint() {
                    opened.summary
                } else {
                    Summary::with_rules(&opened.snapshot, &opened.analysis, rules)
                };
                return Ok((opened.snapshot, summary));
            }
        }
    }
    let started = std::time::Instant::now();
    let (snapshot, seed) = load_with_progress(file, max_events, crate::analysis::load_path)?;
    tracing::debug!(ms = started.elapsed().as_millis() as u64, "read");
    let analysis = Analysis::seeded(&snapshot, seed);
    tracing::debug!(ms = started.elapsed().as_millis() as u64, "replayed");
    let summary = Summary::with_rules(&snapshot, &analysis, rules);
    tracing::debug!(ms = started.elapsed().as_millis() as u64, "summarised");
    if let Some((index, id, bytes)) = entry {
        let identity = BlobIdentity { id: &id, bytes };
        // A failed write costs only this: the next run reads the file again.
        if let Err(error) = crate::index::write(
            &index,
            identity,
            &snapshot,
            &analysis,
            &summary,
            rules.fingerprint(),
        ) {
            tracing::debug!(%error, index = %index.display(), "the CLI cache was not written");
        }
    }
    Ok((snapshot, summary))
}
