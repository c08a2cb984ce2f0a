//! Where the bytes are kept: each snapshot's file (its blob, named by its content's hash) and
//! its stored index (`crate::index`), in the data folder (the default) or in S3-compatible
//! object storage (`--blobs s3://bucket/prefix`) behind a bounded local cache.
//!
//! Readers map files, so every backend hands out local paths: the folder its own files, object
//! storage its cache's copies, fetched on first use.

use super::{SnapshotId, StoreError};
use std::path::{Path, PathBuf};

mod cache;
pub mod folder;
pub mod object;

/// One blob the backend holds, as a listing finds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlobEntry {
    /// `None` when its name is not a snapshot id (something else left there).
    pub id: Option<SnapshotId>,
    /// Where it is, for reports and logs: a path or an object's URL.
    pub location: String,
    pub bytes: u64,
    /// Unix ms of its last change.
    pub modified_ms: i64,
}

/// A blob backend. Methods block, as [`super::metadata::Metadata`]'s do.
pub trait Blobs: Send + Sync {
    /// A local folder for uploads in progress, on the filesystem that [`Blobs::put`] moves
    /// them from (so the folder backend's move is a rename).
    fn temp_dir(&self) -> PathBuf;
    /// Stores the complete, parsed file at `temp_file` as `id`'s blob and consumes it (renamed
    /// into place; or uploaded, then kept as the cache's copy). Putting bytes already stored is
    /// harmless (the content is the same by its hash). An interrupted put leaves no blob
    /// visible under `id` and nothing that the next [`Blobs::sweep`] does not remove.
    fn put(&self, id: &SnapshotId, temp_file: &Path) -> Result<(), StoreError>;
    /// Whether `id`'s blob is stored.
    fn exists(&self, id: &SnapshotId) -> Result<bool, StoreError>;
    /// Every stored blob (one listing, for the list of snapshots and start-up's sweeps).
    fn entries(&self) -> Result<Vec<BlobEntry>, StoreError>;
    /// Removes `id`'s blob and its stored index; fine when already gone.
    fn remove(&self, id: &SnapshotId) -> Result<(), StoreError>;
    /// A local file holding `id`'s bytes, fetched into the cache first when remote; the file
    /// may be removed by the cache later, but an open or mapped one stays readable.
    fn local(&self, id: &SnapshotId) -> Result<PathBuf, StoreError>;
    /// The local file a reader opens `id`'s stored index from and a writer writes it to.
    fn index_path(&self, id: &SnapshotId) -> PathBuf;
    /// Brings the stored index of `id` into [`Blobs::index_path`] when the store has one and
    /// the local file is missing; true when the local file is there afterwards.
    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError>;
    /// Stores the index just written at [`Blobs::index_path`] beside the blob, so another
    /// replica opens it instead of parsing (nothing to do for the folder).
    fn publish_index(&self, id: &SnapshotId) -> Result<(), StoreError>;
    /// Removes `id`'s stored index (a corrupt one), local copy and stored one.
    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError>;
    /// Removes what interrupted work left: temporary files, indexes whose blob is gone,
    /// unfinished uploads, and the blobs `orphan` says no row points at (given a listing
    /// entry). Returns (orphan blobs removed, other leftovers removed).
    fn sweep(&self, orphan: &dyn Fn(&BlobEntry) -> bool) -> Result<(usize, usize), StoreError>;
    /// Whether the store answers now (`/readyz`): a round trip, within a few seconds.
    fn check(&self) -> Result<(), StoreError>;
    /// `folder` or `s3` (`gs`, `az`, …), for logs and metrics.
    fn kind(&self) -> &'static str;
}
