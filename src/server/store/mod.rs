//! What is stored: snapshot files as content-addressed blobs (a folder, or object storage), their
//! metadata in a database (SQLite, or PostgreSQL), a trash for deleted ones, and an audit log of
//! every write. [`Snapshots`] (`core.rs`) keeps the invariants below once, over any pair of
//! backends ([`metadata::Metadata`], [`blobs::Blobs`]); [`open`] picks the pair from `serve`'s
//! flags.
//!
//! The invariants, and the order of operations that keeps them through races and crashes:
//!
//! - **A listed snapshot is readable.** A blob is streamed to `tmp/`, parsed, fsync'd and only
//!   then stored under its hash (renamed into `blobs/`, or uploaded); the row that lists it is
//!   written after. A crash between the two leaves a blob without a row (an orphan), which the
//!   start-up sweep removes and which never blocks an upload (the next upload of those bytes
//!   stores over it). A row whose blob went missing anyway (a disk fault, a hand-removed file)
//!   is not listed, answers 410 with what to do, and is repaired by uploading the same bytes
//!   again.
//! - **One writer at a time.** Every write runs in one transaction holding the database's write
//!   lock ([`metadata::Metadata::write`]) from its first read to its commit, so identical
//!   uploads racing each other all get the same row, even across processes and replicas. An
//!   upload's blob is stored before the lock (it may be slow); holding it, the upload checks the
//!   blob is still there and stores it again if a purge removed it meanwhile (see `core.rs`),
//!   so an upload racing a delete or a purge of the same bytes ends either live or in the trash,
//!   never as a row without its file. A blob whose row could not be written is removed, holding
//!   the lock, when no row points at it.
//! - **Nothing is lost to a mistaken click.** DELETE only sets `deleted_at_ms`: the row and the
//!   blob stay, a restore clears it. The trash is emptied by age; a purge removes the blob inside
//!   the transaction that removes the row, and rolls the row back when the blob cannot be
//!   removed, so a read-only or failing disk leaves the snapshot in the trash to retry later.
//! - **Every write is in the audit log**, in the same transaction as the write itself; writes
//!   refused with 401/403 too, counted per client address and minute (`server::refusals`).

pub mod blobs;
mod core;
pub mod metadata;
mod open;
pub mod runtime;
mod start_up;
#[cfg(test)]
mod tests;
mod trash;

pub use self::core::Snapshots;
pub use open::{
    BLOBS_SCHEMES, DATABASE_SCHEMES, DEFAULT_CACHE_BYTES, StoreOptions, check_blobs_url,
    check_database_url, open,
};

use serde::Serialize;
use std::path::{Path, PathBuf};

/// The wall clock as every stored time reads it (`uploaded_at_ms`, `deleted_at_ms`, the audit
/// log's `at_ms`, the trash's cutoff): Unix milliseconds; 0 on a clock set before 1970.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// This process's name in a leases table: host, process id and a random part, so a restarted
/// process (whose pid may repeat) never inherits its predecessor's leases.
pub(crate) fn lease_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let mut random = [0u8; 4];
    let _ = getrandom::fill(&mut random);
    format!("{host}:{}:{}", std::process::id(), hex::encode(random))
}

/// A snapshot id: the first 16 hex digits of the SHA-256 of the file's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SnapshotId(String);

impl SnapshotId {
    pub const LEN: usize = 16;

    /// Validates an id from a URL: exactly 16 lowercase hex digits, so it is safe to join to a
    /// path.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == Self::LEN && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(text.to_owned()))
    }

    /// The id of a file with this SHA-256 digest.
    pub fn from_digest(digest: &[u8]) -> Self {
        Self(hex::encode(&digest[..Self::LEN / 2]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One stored snapshot's metadata.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Record {
    pub id: SnapshotId,
    pub name: String,
    pub filename: String,
    pub size_bytes: u64,
    /// Unix milliseconds.
    pub uploaded_at_ms: i64,
    /// A group label (ranks of one job, before/after a change); empty when none.
    pub group: String,
    /// The summary row shown in lists (devices, peaks, OOMs, note codes), as JSON.
    pub summary: serde_json::Value,
    /// This snapshot's own role rules file (docs/roles.md), set by `PUT .../rules`; `None`: the
    /// server's. Not part of the record's JSON: `GET .../rules` answers it.
    #[serde(skip)]
    pub roles: Option<String>,
}

/// What the upload path hands to the store.
#[derive(Debug, Clone)]
pub struct NewSnapshot {
    pub id: SnapshotId,
    pub name: String,
    pub filename: String,
    pub size_bytes: u64,
    pub group: String,
    pub summary: serde_json::Value,
}

/// Where a snapshot id stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Listed, and its file is there.
    Live(Record),
    /// Deleted at `deleted_at_ms`: in the trash until purged; restorable.
    Trashed { record: Record, deleted_at_ms: i64 },
    /// Its row is live but its file is gone (a disk fault, a file removed by hand): not listed;
    /// uploading the same bytes again repairs it.
    FileMissing(Record),
    /// Never stored, or purged.
    Absent,
}

impl Lookup {
    /// The record when the snapshot is live and readable.
    pub fn live(self) -> Option<Record> {
        match self {
            Lookup::Live(record) => Some(record),
            _ => None,
        }
    }
}

/// A row left out of the list, and why (it is logged, not fatal to the list).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unlisted {
    pub id: SnapshotId,
    pub reason: String,
}

/// The live snapshots, newest first, and the rows that could not be listed.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub records: Vec<Record>,
    pub unlisted: Vec<Unlisted>,
}

/// What emptying the trash did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Purge {
    pub purged: Vec<SnapshotId>,
    /// Snapshots left in the trash because their file could not be removed, with the error.
    pub failed: Vec<(SnapshotId, String)>,
}

/// One write, as the audit log keeps it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditEntry {
    /// Increases with every entry: the order writes happened in.
    pub seq: i64,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// Who made the request, when the server knows (an access token's name, say).
    pub actor: Option<String>,
    /// `upload`, `repair`, `rename`, `group`, `delete`, `restore`, `purge`, `reindex`,
    /// `set_roles`, `remove_roles`, or `refused` (writes refused with 401/403, counted per
    /// client address and minute).
    pub action: String,
    pub snapshot_id: Option<String>,
    /// What changed, as JSON (names before and after, the file name and size of an upload…).
    pub detail: serde_json::Value,
}

/// What start-up did to bring the folder and its index back in line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartUpReport {
    /// Blobs indexed again from their bytes (`--reindex`, or an empty index over stored blobs).
    pub reindexed: usize,
    /// Blobs that failed to parse while reindexing: kept, not indexed.
    pub unreadable_blobs: Vec<(PathBuf, String)>,
    /// Blobs without a row removed by the sweep.
    pub orphans_removed: usize,
    /// Rows whose stored summary was unreadable, summarised again from their blob.
    pub summaries_repaired: usize,
    pub purge: Purge,
    /// Stored indexes whose blob is gone, and dead writers' temporary files, removed.
    pub indexes_removed: usize,
}

/// Refused-write rows (`refused`) the audit log keeps at most, the oldest going first: a flood
/// of refused writes from ever new addresses costs at most this many rows (a few MB).
pub const MAX_REFUSED_ROWS: i64 = 50_000;

/// Parses a blob and returns its summary row; the store calls it to rebuild an index without
/// knowing how snapshots are read.
pub type Summarize<'a> = &'a dyn Fn(&Path) -> Result<serde_json::Value, String>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("storage error: {0}")]
    Io(#[from] std::io::Error),
    #[error("stored summary is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    /// A remote backend (PostgreSQL, object storage) cannot be reached or refuses service now:
    /// answered 503 with `what` and `reason`, and retried by the client later.
    #[error("{what} is unavailable: {reason}")]
    Unavailable { what: &'static str, reason: String },
    /// Any other failure of a remote backend, in its own words.
    #[error("{what} failed: {reason}")]
    Remote { what: &'static str, reason: String },
    /// The store cannot be made as configured (a URL of an unknown scheme, a backend not
    /// built in): a sentence for the person starting the server.
    #[error("{0}")]
    Config(String),
}

/// Storage of snapshots, behind a trait so another backend (object storage, Postgres) can
/// follow. `actor` is who asked for a write, recorded in the audit log.
pub trait Store: Send + Sync {
    /// Moves a parsed temporary file into place and records it. Storing bytes already stored
    /// and readable returns the existing record unchanged (`false`); bytes whose file went
    /// missing put the file back (`false`); bytes in the trash become live again with this
    /// upload's name and group (`true`, as for new bytes).
    fn put(
        &self,
        snapshot: NewSnapshot,
        temp_file: &Path,
        actor: Option<&str>,
    ) -> Result<(Record, bool), StoreError>;
    /// Where `id` stands: live, trashed, live without its file, or absent.
    fn lookup(&self, id: &SnapshotId) -> Result<Lookup, StoreError>;
    /// A live snapshot whose file is there.
    fn get(&self, id: &SnapshotId) -> Result<Option<Record>, StoreError> {
        Ok(self.lookup(id)?.live())
    }
    /// The live, readable snapshots, newest first, and the rows left out.
    fn listing(&self) -> Result<Listing, StoreError>;
    /// Every live, readable snapshot, newest first.
    fn list(&self) -> Result<Vec<Record>, StoreError> {
        Ok(self.listing()?.records)
    }
    /// Whether any stored snapshot has exactly this many bytes (a cheap hint that an upload may
    /// be a duplicate, checked by hash once it has arrived).
    fn has_size(&self, size_bytes: u64) -> Result<bool, StoreError>;
    /// Moves a live snapshot to the trash; returns where it stood before (only `Live` and
    /// `FileMissing` are moved).
    fn delete(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError>;
    /// Brings a trashed snapshot back; returns where it stands now (`FileMissing` when its file
    /// is gone, so it cannot be).
    fn restore(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError>;
    /// `None` when the snapshot is not live.
    fn rename(
        &self,
        id: &SnapshotId,
        name: &str,
        actor: Option<&str>,
    ) -> Result<Option<Record>, StoreError>;
    fn set_group(
        &self,
        id: &SnapshotId,
        group: &str,
        actor: Option<&str>,
    ) -> Result<Option<Record>, StoreError>;
    /// Sets (`None`: removes) the snapshot's role rules with the summary row they make, audited;
    /// `None` when the snapshot is not live.
    fn set_roles(
        &self,
        id: &SnapshotId,
        roles: Option<&str>,
        summary: &serde_json::Value,
        actor: Option<&str>,
    ) -> Result<Option<Record>, StoreError>;
    /// Removes for good every snapshot trashed at or before `cutoff_ms` (Unix ms).
    fn purge_trashed_before(
        &self,
        cutoff_ms: i64,
        actor: Option<&str>,
    ) -> Result<Purge, StoreError>;
    /// The newest `limit` audit entries older than `before` (a `seq`; `None`: the newest),
    /// newest first.
    fn audit_log(&self, limit: usize, before: Option<i64>) -> Result<Vec<AuditEntry>, StoreError>;
    /// Records refused writes (`server::refusals`) as one `refused` audit row: a new one when
    /// `row` is `None`, else that row's detail brought up to date; returns the row. Only the
    /// newest [`MAX_REFUSED_ROWS`] refused rows are kept.
    fn record_refusals(
        &self,
        row: Option<i64>,
        actor: Option<&str>,
        detail: &serde_json::Value,
    ) -> Result<i64, StoreError>;
    /// A local file holding the bytes of a stored snapshot (fetched into the local cache first
    /// when blobs are remote; see [`blobs::Blobs::local`]).
    fn blob_file(&self, id: &SnapshotId) -> Result<PathBuf, StoreError>;
    /// Where a snapshot's stored index (`crate::index`) is read from and written to: a local
    /// file, derived from the blob and rebuilt whenever it is missing or not to be trusted.
    /// Purging a snapshot removes it; start-up removes those whose blob is gone.
    fn index_path(&self, id: &SnapshotId) -> PathBuf;
    /// Brings a stored index written by another replica to [`Store::index_path`] when there is
    /// one; true when the local file is there afterwards.
    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError>;
    /// Stores the index just written at [`Store::index_path`] beside the blob, for the other
    /// replicas.
    fn publish_index(&self, id: &SnapshotId) -> Result<(), StoreError>;
    /// Removes a corrupt stored index, here and beside the blob.
    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError>;
    /// A folder for uploads in progress, on the local filesystem the blobs backend moves them
    /// from.
    fn temp_dir(&self) -> PathBuf;
    /// Takes (or extends) the lease `name` for this process for `ttl`; true when this process
    /// holds it now. Leases keep one replica at a time on a piece of work (parsing a snapshot,
    /// emptying the trash); one whose holder died expires.
    fn try_lease(&self, name: &str, ttl: std::time::Duration) -> Result<bool, StoreError>;
    /// Gives up a lease this process holds.
    fn release_lease(&self, name: &str) -> Result<(), StoreError>;
    /// Whether the database and the blobs answer now, each by name (`database`, `blobs`), with
    /// the reason when one does not (`/readyz`).
    fn readiness(&self) -> Vec<(&'static str, Result<(), String>)>;
    /// The backends' kinds, `(metadata, blobs)`: `("sqlite", "folder")`, `("postgres", "s3")`.
    fn kinds(&self) -> (&'static str, &'static str);
}
