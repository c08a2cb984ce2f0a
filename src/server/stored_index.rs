//! The server's use of stored indexes (`crate::index`): a cold load opens the snapshot's index
//! when it is there and sound, else parses the pickle; a snapshot parsed from its pickle (a
//! cold load, an upload) gets its index written afterwards, on a blocking thread, so the answer
//! does not wait for it; one opened from its index gets its columns checked the same way.

use super::AppState;
use super::cache::{IndexWork, Loaded};
use super::store::SnapshotId;
use crate::analysis::roles::UserRules;
use crate::index::{BlobIdentity, IndexError, Verify};
use std::path::Path;
use std::sync::Arc;

/// How much of an index a load checks. The header, section table and JSON section always; the
/// columns only by their bounds and lengths: checksumming them would read the whole file (as
/// large as the pickle) on every cold open, which costs the seconds the index is there to
/// save when the page cache is cold. A column corrupted on disk after it was written is then
/// not caught (see [`Verify::Structure`]); the file is rewritten by rename only, so this is
/// the disk's own corruption, which the pickle would suffer as well.
const VERIFY_ON_LOAD: Verify = Verify::Structure;

/// The snapshot `id`, from its stored index at `index` when that is sound, else by `parse`
/// (which reads the blob at `blob`; what it loads is marked for its index to be written: see
/// [`maintain_in_background`]). Runs on a blocking thread.
pub fn load(
    id: &SnapshotId,
    blob: &Path,
    index: &Path,
    rules: &UserRules,
    parse: impl FnOnce() -> Result<Loaded, String>,
) -> Result<Loaded, String> {
    // A blob that cannot be read is for `parse` to report, in its words.
    let Ok(blob_bytes) = std::fs::metadata(blob).map(|m| m.len()) else {
        return parse();
    };
    let identity = BlobIdentity {
        id: id.as_str(),
        bytes: blob_bytes,
    };
    let started = std::time::Instant::now();
    match crate::index::open(index, identity, VERIFY_ON_LOAD) {
        Ok(opened) => {
            let loaded = Loaded::from_index(opened, rules);
            tracing::info!(%id, ms = started.elapsed().as_millis() as u64, "opened from its stored index");
            return Ok(loaded);
        }
        Err(IndexError::Missing) => {
            tracing::debug!(%id, "no stored index yet: reading the snapshot");
        }
        Err(error) => {
            tracing::warn!(%id, %error, "the stored index is not used: reading the snapshot, and writing it again");
        }
    }
    parse()
}

/// After a load, on a blocking thread, what its stored index needs, if nobody has started it
/// yet: written when the snapshot was parsed from its pickle; when it was opened from the
/// index, its columns checked against their checksums (which the open skipped, see
/// [`VERIFY_ON_LOAD`]), and a corrupt index deleted and the snapshot dropped from the cache,
/// so the next request reads the pickle and writes a sound index. A failed write is logged:
/// the index is a cache, and the next cold load tries again.
pub fn maintain_in_background(state: &AppState, id: &SnapshotId, loaded: &Arc<Loaded>) {
    let work = loaded.take_index_work();
    if work == IndexWork::None {
        return;
    }
    let (state, id, loaded) = (state.clone(), id.clone(), loaded.clone());
    let blob = state.store.blob_path(&id);
    let index = state.store.index_path(&id);
    tokio::task::spawn_blocking(move || match work {
        IndexWork::Write => {
            if let Err(error) = write_now(&id, &blob, &index, &loaded) {
                tracing::warn!(%id, %error, "writing the stored index failed; the next cold load reads the snapshot again");
            }
        }
        IndexWork::Check => {
            let started = std::time::Instant::now();
            match crate::index::verify_sections(&index) {
                Ok(()) => {
                    tracing::debug!(%id, ms = started.elapsed().as_millis() as u64, "stored index checked");
                }
                Err(error) => {
                    tracing::warn!(%id, %error, "the stored index is corrupt: deleting it and reading the snapshot again on the next request");
                    if let Err(error) = std::fs::remove_file(&index) {
                        tracing::warn!(%id, %error, "deleting the corrupt stored index failed");
                    }
                    state.cache.remove(&id);
                }
            }
        }
        IndexWork::None => {}
    });
}

/// Writes the index now (the caller's thread): what [`maintain_in_background`] runs.
pub fn write_now(
    id: &SnapshotId,
    blob: &Path,
    index: &Path,
    loaded: &Loaded,
) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let identity = BlobIdentity {
        id: id.as_str(),
        bytes: std::fs::metadata(blob)?.len(),
    };
    let bytes = crate::index::write(
        index,
        identity,
        &loaded.snapshot,
        &loaded.analysis,
        &loaded.summary,
        loaded.rules_fingerprint,
    )?;
    tracing::info!(%id, bytes, ms = started.elapsed().as_millis() as u64, "stored index written");
    Ok(())
}
