//! Where the rows are kept: each snapshot's metadata, the audit log and the leases, in SQLite
//! (the data folder's `snapview.db`, the default) or PostgreSQL (`--database postgres://…`).
//!
//! A backend only stores and reads rows; what a write means (dedupe, the trash, repairs, the
//! order of a blob's and a row's changes) is decided once, in `core.rs`, for every backend.
//! Both backends keep the same schema at the same version (`MIGRATIONS`-style lists in each,
//! applied at open, numbered alike), so a change to what is stored is made in both.

use super::{AuditEntry, Record, SnapshotId, StoreError};

pub mod postgres;
pub mod sqlite;

/// The behaviour every backend must show, checked against each (tests only).
#[cfg(test)]
pub(crate) mod contract;

/// A row before its summary is parsed, so one unreadable summary is that row's problem, not
/// the whole list's.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRow {
    /// The record, its `summary` still `Null`: see [`StoredRow::decode`].
    pub record: Record,
    /// The summary as stored (JSON text).
    pub summary: String,
    /// Unix ms when it went to the trash; `None`: live.
    pub deleted_at_ms: Option<i64>,
}

impl StoredRow {
    /// The record with its summary; on an unreadable summary, the record without it (`Null`)
    /// and why.
    pub fn decode(self) -> (Record, Option<serde_json::Error>) {
        let mut record = self.record;
        match serde_json::from_str(&self.summary) {
            Ok(summary) => {
                record.summary = summary;
                (record, None)
            }
            Err(error) => (record, Some(error)),
        }
    }
}

/// One change to a stored row, made inside a [`Tx`].
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Name(String),
    Group(String),
    /// Into the trash (`Some(ms)`) or out of it (`None`).
    DeletedAt(Option<i64>),
    /// The snapshot's own role rules (`None`: the server's) with the summary row they make;
    /// the two always change together.
    Roles {
        roles: Option<String>,
        summary: serde_json::Value,
    },
    /// The summary row alone (a repair of an unreadable one).
    Summary(serde_json::Value),
}

/// The rows, inside one transaction of [`Metadata::write`]. Every method is one statement;
/// errors roll the whole transaction back.
pub trait Tx {
    /// `id`'s row, live or trashed.
    fn row(&mut self, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError>;
    /// Writes `record` as a live row with no rules of its own: inserted, or written over the
    /// row of the same id (a trashed one comes back as this upload made it).
    fn upsert(&mut self, record: &Record) -> Result<(), StoreError>;
    /// A row for a blob indexed again from its bytes: inserted as `record` when `id` has no
    /// row, else only its summary and size replaced (name, group, trash and rules kept).
    fn reindex(&mut self, record: &Record) -> Result<(), StoreError>;
    /// Applies `change` to `id`'s row; false when there is no such row.
    fn update(&mut self, id: &SnapshotId, change: &Change) -> Result<bool, StoreError>;
    /// Removes `id`'s row for good (a purge).
    fn remove(&mut self, id: &SnapshotId) -> Result<(), StoreError>;
    /// Appends an audit entry (at now, [`super::now_ms`]).
    fn audit(
        &mut self,
        actor: Option<&str>,
        action: &str,
        id: Option<&SnapshotId>,
        detail: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// The detail of `id`'s newest `upload` audit entry, as stored (JSON text).
    fn last_upload_detail(&mut self, id: &SnapshotId) -> Result<Option<String>, StoreError>;
}

/// The work of one write transaction: see [`Metadata::write`].
pub type TxWork<'a> = &'a mut dyn FnMut(&mut dyn Tx) -> Result<(), StoreError>;

/// A metadata backend. Methods block (they are called from blocking threads, plain sync code
/// and tests); a remote backend runs its async driver on its own runtime
/// (`super::runtime::BlockingRuntime`).
pub trait Metadata: Send + Sync {
    /// Runs `work` in one transaction holding the store's write lock: one writer at a time
    /// across every process on this database (SQLite: its write lock, taken at the start;
    /// PostgreSQL: a transaction-scoped advisory lock), from its first read to its commit.
    /// Commits when `work` returns `Ok`, rolls back otherwise. `work` may run again when the
    /// backend retries a transaction that failed to serialize, so it must not have effects
    /// outside the transaction that cannot be repeated.
    fn write(&self, work: TxWork<'_>) -> Result<(), StoreError>;
    /// `id`'s row, live or trashed (no lock).
    fn row(&self, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError>;
    /// The live rows (not in the trash), newest upload first, then by id.
    fn live_rows(&self) -> Result<Vec<StoredRow>, StoreError>;
    /// Every row's id and stored summary text, live or trashed (start-up's repairs).
    fn all_summaries(&self) -> Result<Vec<(SnapshotId, String)>, StoreError>;
    /// How many rows there are, live or trashed.
    fn count(&self) -> Result<u64, StoreError>;
    /// Whether any row has exactly this many bytes.
    fn has_size(&self, size_bytes: u64) -> Result<bool, StoreError>;
    /// Ids in the trash since `cutoff_ms` or before.
    fn trashed_before(&self, cutoff_ms: i64) -> Result<Vec<SnapshotId>, StoreError>;
    /// The newest `limit` audit entries older than `before` (a `seq`; `None`: the newest),
    /// newest first.
    fn audit_log(&self, limit: usize, before: Option<i64>) -> Result<Vec<AuditEntry>, StoreError>;
    /// See [`super::Store::record_refusals`].
    fn record_refusals(
        &self,
        row: Option<i64>,
        actor: Option<&str>,
        detail: &serde_json::Value,
    ) -> Result<i64, StoreError>;
    /// Takes the lease `name` for `holder` until `now + ttl_ms`, or extends it when `holder`
    /// has it already; true when `holder` holds it now. A lease whose holder let it expire
    /// (died, hung) goes to the next who asks.
    fn try_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<bool, StoreError>;
    /// Gives the lease `name` up, if `holder` has it.
    fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError>;
    /// Whether the database answers now (`/readyz`): a round trip, within a few seconds.
    fn check(&self) -> Result<(), StoreError>;
    /// `sqlite` or `postgres`, for logs and metrics.
    fn kind(&self) -> &'static str;
}
