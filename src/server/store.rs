//! What is stored: snapshot files as content-addressed blobs, their metadata in SQLite, a trash
//! for deleted ones, and an audit log of every write.
//!
//! The invariants, and the order of operations that keeps them through races and crashes:
//!
//! - **A listed snapshot is readable.** A blob is streamed to `tmp/`, parsed, fsync'd and only
//!   then renamed into `blobs/` under its hash; the row that lists it is written after the
//!   rename. A crash between the two leaves a blob without a row (an orphan), which the start-up
//!   sweep removes and which never blocks an upload (the next upload of those bytes renames over
//!   it). A row whose blob went missing anyway (a disk fault, a hand-removed file) is not listed,
//!   answers 410 with what to do, and is repaired by uploading the same bytes again.
//! - **One writer at a time.** Every write holds the connection's lock from its first read to its
//!   commit, the blob rename included, so identical uploads racing each other all get the same
//!   row (`INSERT … ON CONFLICT` makes that true even for another process on the same folder),
//!   and an upload racing a delete of the same bytes ends either live or in the trash, never as a
//!   row without its file.
//! - **Nothing is lost to a mistaken click.** DELETE only sets `deleted_at_ms`: the row and the
//!   blob stay, a restore clears it. The trash is emptied by age; a purge removes the blob inside
//!   the transaction that removes the row, and rolls the row back when the blob cannot be
//!   removed, so a read-only or failing disk leaves the snapshot in the trash to retry later.
//! - **Every write is in the audit log**, in the same transaction as the write itself.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Self(hex[..Self::LEN].to_owned())
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
    /// `upload`, `repair`, `rename`, `group`, `delete`, `restore`, `purge` or `reindex`.
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
}

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
    /// Removes for good every snapshot trashed at or before `cutoff_ms` (Unix ms).
    fn purge_trashed_before(
        &self,
        cutoff_ms: i64,
        actor: Option<&str>,
    ) -> Result<Purge, StoreError>;
    /// The newest `limit` audit entries, newest first.
    fn audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError>;
    /// Where the bytes of a stored snapshot are.
    fn blob_path(&self, id: &SnapshotId) -> PathBuf;
    /// A folder for uploads in progress, on the same filesystem as the blobs (so the final
    /// rename is atomic).
    fn temp_dir(&self) -> PathBuf;
}

/// Blobs in a folder, metadata in SQLite: `DIR/blobs/ab/abcdef….snapshot`, `DIR/snapview.db`.
pub struct FileStore {
    dir: PathBuf,
    db: Mutex<Connection>,
}

const BLOB_SUFFIX: &str = ".snapshot";

impl FileStore {
    /// Opens (or creates) the store in `dir`, migrating an older index and removing the
    /// leftovers of uploads a crash interrupted. See [`FileStore::start_up`] for the rest of the
    /// start-up repairs.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir.join("blobs"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        // Leftovers of uploads interrupted by a crash or a kill.
        for entry in std::fs::read_dir(dir.join("tmp"))?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        let db = Connection::open(dir.join("snapview.db"))?;
        // Another process on the same folder (a `serve` being replaced) waits rather than fails.
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS snapshots (
                 id TEXT PRIMARY KEY,
                 name TEXT NOT NULL,
                 filename TEXT NOT NULL,
                 size_bytes INTEGER NOT NULL,
                 uploaded_at_ms INTEGER NOT NULL,
                 grp TEXT NOT NULL DEFAULT '',
                 summary TEXT NOT NULL
             );
             CREATE INDEX IF NOT EXISTS snapshots_uploaded ON snapshots (uploaded_at_ms);
             CREATE TABLE IF NOT EXISTS audit (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT,
                 at_ms INTEGER NOT NULL,
                 actor TEXT,
                 action TEXT NOT NULL,
                 snapshot_id TEXT,
                 detail TEXT NOT NULL DEFAULT '{}'
             );
             CREATE INDEX IF NOT EXISTS audit_snapshot ON audit (snapshot_id);",
        )?;
        // Indexes written before the trash existed lack its column.
        let has_trash_column = db
            .prepare("SELECT 1 FROM pragma_table_info('snapshots') WHERE name = 'deleted_at_ms'")?
            .exists([])?;
        if !has_trash_column {
            db.execute_batch("ALTER TABLE snapshots ADD COLUMN deleted_at_ms INTEGER")?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            db: Mutex::new(db),
        })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (it has its own
        // transactions), so a poisoned lock is still usable.
        self.db
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    const COLUMNS: &'static str =
        "id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms";

    /// A row as stored: its summary still text, so one unreadable summary is this row's
    /// problem, not the whole list's.
    fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRow> {
        let id: String = row.get(0)?;
        Ok(StoredRow {
            record: Record {
                id: SnapshotId(id),
                name: row.get(1)?,
                filename: row.get(2)?,
                size_bytes: row.get::<_, i64>(3)?.max(0) as u64,
                uploaded_at_ms: row.get(4)?,
                group: row.get(5)?,
                summary: serde_json::Value::Null,
            },
            summary: row.get(6)?,
            deleted_at_ms: row.get(7)?,
        })
    }

    fn read_row(db: &Connection, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError> {
        Ok(db
            .query_row(
                &format!("SELECT {} FROM snapshots WHERE id = ?1", Self::COLUMNS),
                params![id.as_str()],
                Self::row,
            )
            .optional()?)
    }

    /// Where `id` stands, read with the lock held by the caller.
    fn lookup_locked(&self, db: &Connection, id: &SnapshotId) -> Result<Lookup, StoreError> {
        let Some(row) = Self::read_row(db, id)? else {
            return Ok(Lookup::Absent);
        };
        let deleted_at_ms = row.deleted_at_ms;
        let (record, error) = row.decode();
        if let Some(error) = error {
            // The snapshot itself is still readable from its blob; only the list's summary row
            // is lost, and the next start-up rebuilds it.
            tracing::warn!(id = %record.id, %error, "a stored summary is unreadable");
        }
        Ok(match deleted_at_ms {
            Some(deleted_at_ms) => Lookup::Trashed {
                record,
                deleted_at_ms,
            },
            None if self.blob_path(id).is_file() => Lookup::Live(record),
            None => Lookup::FileMissing(record),
        })
    }

    /// Every blob file in `blobs/`, with its id when its name is one.
    fn blob_files(&self) -> std::io::Result<Vec<(Option<SnapshotId>, PathBuf)>> {
        let mut found = Vec::new();
        for folder in std::fs::read_dir(self.dir.join("blobs"))? {
            let folder = folder?.path();
            if !folder.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(&folder)? {
                let path = entry?.path();
                let id = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(BLOB_SUFFIX))
                    .and_then(SnapshotId::parse);
                found.push((id, path));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Brings the folder and its index back in line after whatever happened while the server
    /// was down: rebuilds the index from the blobs when asked (`--reindex`) or when it is empty
    /// but blobs are there; otherwise removes orphan blobs (a crash between a blob's rename and
    /// its row); summarises again rows whose summary is unreadable; empties the trash of what
    /// was deleted more than `trash_ms` ago.
    pub fn start_up(
        &self,
        reindex: bool,
        trash_ms: i64,
        summarize: Summarize<'_>,
    ) -> Result<StartUpReport, StoreError> {
        let mut report = StartUpReport::default();
        let rows: i64 = self
            .db()
            .query_row("SELECT COUNT(*) FROM snapshots", [], |row| row.get(0))?;
        let blobs = self.blob_files()?;
        if reindex || (rows == 0 && !blobs.is_empty()) {
            if !reindex {
                tracing::warn!(
                    blobs = blobs.len(),
                    "the index is empty but blobs are stored: rebuilding it from them"
                );
            }
            self.reindex(&blobs, summarize, &mut report)?;
        } else {
            report.orphans_removed = self.sweep_orphans(&blobs)?;
            report.summaries_repaired = self.repair_summaries(summarize)?;
        }
        report.purge = self.purge_trashed_before(now_ms() - trash_ms, None)?;
        Ok(report)
    }

    /// Indexes every blob again from its bytes. A row that exists keeps its name and group and
    /// gets a fresh summary; a blob without one gets its name and group from its last upload in
    /// the audit log, else its id. A blob that does not parse is reported and kept.
    fn reindex(
        &self,
        blobs: &[(Option<SnapshotId>, PathBuf)],
        summarize: Summarize<'_>,
        report: &mut StartUpReport,
    ) -> Result<(), StoreError> {
        let total = blobs.len();
        tracing::info!(blobs = total, "reindexing the stored snapshots");
        for (done, (id, path)) in blobs.iter().enumerate() {
            let Some(id) = id else {
                report
                    .unreadable_blobs
                    .push((path.clone(), "not named by a snapshot id".into()));
                continue;
            };
            let summary = match summarize(path) {
                Ok(summary) => summary,
                Err(error) => {
                    tracing::warn!(%id, %error, "a stored blob does not parse: kept, not indexed");
                    report.unreadable_blobs.push((path.clone(), error));
                    continue;
                }
            };
            let metadata = std::fs::metadata(path)?;
            let modified_ms = metadata
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64)
                .unwrap_or_else(now_ms);
            let mut db = self.db();
            let tx = db.transaction()?;
            let known = Self::read_row(&tx, id)?;
            let (name, filename, group) = match &known {
                Some(row) => (
                    row.record.name.clone(),
                    row.record.filename.clone(),
                    row.record.group.clone(),
                ),
                None => Self::last_upload_names(&tx, id)?,
            };
            tx.execute(
                &format!(
                    "INSERT INTO snapshots ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)
                     ON CONFLICT (id) DO UPDATE SET summary = excluded.summary,
                         size_bytes = excluded.size_bytes",
                    Self::COLUMNS
                ),
                params![
                    id.as_str(),
                    name,
                    filename,
                    metadata.len() as i64,
                    modified_ms,
                    group,
                    serde_json::to_string(&summary)?,
                ],
            )?;
            audit(
                &tx,
                None,
                "reindex",
                Some(id),
                &serde_json::json!({"name": name, "new_row": known.is_none()}),
            )?;
            tx.commit()?;
            report.reindexed += 1;
            tracing::info!(%id, name, "reindexed {}/{total}", done + 1);
        }
        Ok(())
    }

    /// The name, file name and group an id's last upload had, from the audit log; the id
    /// itself when the log has none.
    fn last_upload_names(
        db: &Connection,
        id: &SnapshotId,
    ) -> Result<(String, String, String), StoreError> {
        let detail: Option<String> = db
            .query_row(
                "SELECT detail FROM audit WHERE snapshot_id = ?1 AND action = 'upload'
                 ORDER BY seq DESC LIMIT 1",
                params![id.as_str()],
                |row| row.get(0),
            )
            .optional()?;
        let detail: serde_json::Value = detail
            .and_then(|d| serde_json::from_str(&d).ok())
            .unwrap_or_default();
        let text = |key: &str| detail[key].as_str().map(str::to_owned);
        Ok((
            text("name").unwrap_or_else(|| id.to_string()),
            text("filename").unwrap_or_else(|| format!("{id}.pickle")),
            text("group").unwrap_or_default(),
        ))
    }

    /// Removes blobs that no row (live or trashed) points at.
    fn sweep_orphans(&self, blobs: &[(Option<SnapshotId>, PathBuf)]) -> Result<usize, StoreError> {
        let db = self.db();
        let mut removed = 0;
        for (id, path) in blobs {
            let Some(id) = id else { continue };
            if Self::read_row(&db, id)?.is_none() {
                match std::fs::remove_file(path) {
                    Ok(()) => {
                        tracing::info!(%id, "removed an orphan blob (an upload a crash interrupted)");
                        removed += 1;
                    }
                    Err(error) => tracing::warn!(%id, %error, "cannot remove an orphan blob"),
                }
            }
        }
        Ok(removed)
    }

    /// Summarises again every row whose stored summary does not parse, from its blob.
    fn repair_summaries(&self, summarize: Summarize<'_>) -> Result<usize, StoreError> {
        let broken: Vec<SnapshotId> = {
            let db = self.db();
            let mut statement = db.prepare("SELECT id, summary FROM snapshots")?;
            let rows = statement.query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?;
            let mut broken = Vec::new();
            for row in rows {
                let (id, summary) = row?;
                if serde_json::from_str::<serde_json::Value>(&summary).is_err() {
                    broken.push(SnapshotId(id));
                }
            }
            broken
        };
        let mut repaired = 0;
        for id in broken {
            let path = self.blob_path(&id);
            match summarize(&path) {
                Ok(summary) => {
                    self.db().execute(
                        "UPDATE snapshots SET summary = ?2 WHERE id = ?1",
                        params![id.as_str(), serde_json::to_string(&summary)?],
                    )?;
                    tracing::info!(%id, "summarised again a row whose summary was unreadable");
                    repaired += 1;
                }
                Err(error) => {
                    tracing::warn!(%id, %error, "a row's summary is unreadable and so is its blob")
                }
            }
        }
        Ok(repaired)
    }
}

/// A row before its summary is parsed.
struct StoredRow {
    record: Record,
    summary: String,
    deleted_at_ms: Option<i64>,
}

impl StoredRow {
    /// The record with its summary; on an unreadable summary, the record without it (`Null`)
    /// and why.
    fn decode(self) -> (Record, Option<serde_json::Error>) {
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

/// Appends an entry to the audit log, inside the caller's transaction.
fn audit(
    db: &Connection,
    actor: Option<&str>,
    action: &str,
    id: Option<&SnapshotId>,
    detail: &serde_json::Value,
) -> Result<(), StoreError> {
    db.execute(
        "INSERT INTO audit (at_ms, actor, action, snapshot_id, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            now_ms(),
            actor,
            action,
            id.map(SnapshotId::as_str),
            serde_json::to_string(detail)?,
        ],
    )?;
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Makes a rename durable: fsync of the folder that holds the new name.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Store for FileStore {
    fn put(
        &self,
        snapshot: NewSnapshot,
        temp_file: &Path,
        actor: Option<&str>,
    ) -> Result<(Record, bool), StoreError> {
        // The slow part, before taking the lock that every other write waits on.
        std::fs::File::open(temp_file)?.sync_all()?;
        let mut db = self.db();
        let before = self.lookup_locked(&db, &snapshot.id)?;
        if let Lookup::Live(existing) = before {
            std::fs::remove_file(temp_file)?;
            return Ok((existing, false));
        }
        // The fresh upload's bytes are parsed and complete, so they replace whatever is at the
        // blob's path: an orphan a crash or a full disk left (possibly cut short) never blocks.
        let blob = self.blob_path(&snapshot.id);
        let folder = blob.parent().unwrap_or(&self.dir).to_owned();
        std::fs::create_dir_all(&folder)?;
        std::fs::rename(temp_file, &blob)?;
        sync_dir(&folder)?;
        let written = (|| {
            let tx = db.transaction()?;
            let outcome = match before {
                Lookup::FileMissing(record) => {
                    audit(
                        &tx,
                        actor,
                        "repair",
                        Some(&record.id),
                        &serde_json::json!({"size_bytes": snapshot.size_bytes}),
                    )?;
                    (record, false)
                }
                Lookup::Trashed { .. } | Lookup::Absent | Lookup::Live(_) => {
                    let was_trashed = matches!(before, Lookup::Trashed { .. });
                    let record = Record {
                        id: snapshot.id.clone(),
                        name: snapshot.name,
                        filename: snapshot.filename,
                        size_bytes: snapshot.size_bytes,
                        uploaded_at_ms: now_ms(),
                        group: snapshot.group,
                        summary: snapshot.summary,
                    };
                    // A trashed row comes back as this upload made it.
                    tx.execute(
                        &format!(
                            "INSERT INTO snapshots ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)
                             ON CONFLICT (id) DO UPDATE SET name = excluded.name,
                                 filename = excluded.filename, size_bytes = excluded.size_bytes,
                                 uploaded_at_ms = excluded.uploaded_at_ms, grp = excluded.grp,
                                 summary = excluded.summary, deleted_at_ms = NULL",
                            Self::COLUMNS
                        ),
                        params![
                            record.id.as_str(),
                            record.name,
                            record.filename,
                            record.size_bytes as i64,
                            record.uploaded_at_ms,
                            record.group,
                            serde_json::to_string(&record.summary)?,
                        ],
                    )?;
                    audit(
                        &tx,
                        actor,
                        "upload",
                        Some(&record.id),
                        &serde_json::json!({
                            "name": record.name,
                            "filename": record.filename,
                            "group": record.group,
                            "size_bytes": record.size_bytes,
                            "was_in_trash": was_trashed,
                        }),
                    )?;
                    (record, true)
                }
            };
            tx.commit()?;
            Ok::<_, StoreError>(outcome)
        })();
        if written.is_err() && !self.blob_has_row(&db, &snapshot.id) {
            // No row points at the blob just placed: remove it rather than leave an orphan (the
            // start-up sweep removes it if this fails too).
            let _ = std::fs::remove_file(&blob);
        }
        written
    }

    fn lookup(&self, id: &SnapshotId) -> Result<Lookup, StoreError> {
        let db = self.db();
        self.lookup_locked(&db, id)
    }

    fn listing(&self) -> Result<Listing, StoreError> {
        let db = self.db();
        let mut statement = db.prepare(&format!(
            "SELECT {} FROM snapshots WHERE deleted_at_ms IS NULL
             ORDER BY uploaded_at_ms DESC, id",
            Self::COLUMNS
        ))?;
        let mut listing = Listing::default();
        for row in statement.query_map([], Self::row)? {
            let record = match row?.decode() {
                (record, None) => record,
                (record, Some(error)) => {
                    tracing::warn!(id = %record.id, %error, "left out of the list: its stored summary is unreadable");
                    listing.unlisted.push(Unlisted {
                        id: record.id,
                        reason: format!("its stored summary is unreadable ({error}); restart the server (or `serve --reindex`) to rebuild it"),
                    });
                    continue;
                }
            };
            if !self.blob_path(&record.id).is_file() {
                tracing::warn!(id = %record.id, "left out of the list: its stored file is missing");
                listing.unlisted.push(Unlisted {
                    id: record.id,
                    reason: "its stored file is missing; upload the same file again to repair it"
                        .into(),
                });
                continue;
            }
            listing.records.push(record);
        }
        Ok(listing)
    }

    fn has_size(&self, size_bytes: u64) -> Result<bool, StoreError> {
        let found = self
            .db()
            .query_row(
                "SELECT 1 FROM snapshots WHERE size_bytes = ?1 LIMIT 1",
                params![size_bytes as i64],
                |_| Ok(()),
            )
            .optional()?;
        Ok(found.is_some())
    }

    fn delete(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError> {
        let mut db = self.db();
        let before = self.lookup_locked(&db, id)?;
        if let Lookup::Live(record) | Lookup::FileMissing(record) = &before {
            let tx = db.transaction()?;
            tx.execute(
                "UPDATE snapshots SET deleted_at_ms = ?2 WHERE id = ?1",
                params![id.as_str(), now_ms()],
            )?;
            audit(
                &tx,
                actor,
                "delete",
                Some(id),
                &serde_json::json!({"name": record.name}),
            )?;
            tx.commit()?;
        }
        Ok(before)
    }

    fn restore(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError> {
        let mut db = self.db();
        let before = self.lookup_locked(&db, id)?;
        let Lookup::Trashed { record, .. } = before else {
            return Ok(before);
        };
        if !self.blob_path(id).is_file() {
            return Ok(Lookup::FileMissing(record));
        }
        let tx = db.transaction()?;
        tx.execute(
            "UPDATE snapshots SET deleted_at_ms = NULL WHERE id = ?1",
            params![id.as_str()],
        )?;
        audit(
            &tx,
            actor,
            "restore",
            Some(id),
            &serde_json::json!({"name": record.name}),
        )?;
        tx.commit()?;
        Ok(Lookup::Live(record))
    }

    fn rename(
        &self,
        id: &SnapshotId,
        name: &str,
        actor: Option<&str>,
    ) -> Result<Option<Record>, StoreError> {
        self.update_live(id, actor, "rename", "name", name)
    }

    fn set_group(
        &self,
        id: &SnapshotId,
        group: &str,
        actor: Option<&str>,
    ) -> Result<Option<Record>, StoreError> {
        self.update_live(id, actor, "group", "grp", group)
    }

    fn purge_trashed_before(
        &self,
        cutoff_ms: i64,
        actor: Option<&str>,
    ) -> Result<Purge, StoreError> {
        let mut db = self.db();
        let due: Vec<SnapshotId> = {
            let mut statement = db.prepare(
                "SELECT id FROM snapshots WHERE deleted_at_ms IS NOT NULL AND deleted_at_ms <= ?1",
            )?;
            let rows = statement.query_map(params![cutoff_ms], |row| row.get::<_, String>(0))?;
            rows.map(|id| id.map(SnapshotId))
                .collect::<Result<_, _>>()?
        };
        let mut purge = Purge::default();
        for id in due {
            let tx = db.transaction()?;
            tx.execute("DELETE FROM snapshots WHERE id = ?1", params![id.as_str()])?;
            audit(&tx, actor, "purge", Some(&id), &serde_json::json!({}))?;
            // The blob goes inside the transaction: if it cannot, the row is rolled back and the
            // snapshot stays in the trash (listed nowhere, restorable) for the next purge.
            match remove_if_there(&self.blob_path(&id)) {
                Ok(()) => {
                    tx.commit()?;
                    tracing::info!(%id, "purged from the trash");
                    purge.purged.push(id);
                }
                Err(error) => {
                    drop(tx);
                    tracing::warn!(%id, %error, "cannot remove a trashed snapshot's file: kept in the trash");
                    purge.failed.push((id, error.to_string()));
                }
            }
        }
        Ok(purge)
    }

    fn audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let db = self.db();
        let mut statement = db.prepare(
            "SELECT seq, at_ms, actor, action, snapshot_id, detail FROM audit
             ORDER BY seq DESC LIMIT ?1",
        )?;
        let rows = statement.query_map(params![limit as i64], |row| {
            let detail: String = row.get(5)?;
            Ok(AuditEntry {
                seq: row.get(0)?,
                at_ms: row.get(1)?,
                actor: row.get(2)?,
                action: row.get(3)?,
                snapshot_id: row.get(4)?,
                detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn blob_path(&self, id: &SnapshotId) -> PathBuf {
        // Ids are validated hex, so joining them is safe.
        self.dir
            .join("blobs")
            .join(&id.as_str()[..2])
            .join(format!("{}{BLOB_SUFFIX}", id.as_str()))
    }

    fn temp_dir(&self) -> PathBuf {
        self.dir.join("tmp")
    }
}

impl FileStore {
    /// Whether any row (live or trashed) points at `id`'s blob; true when unsure, so a blob is
    /// never removed on a guess.
    fn blob_has_row(&self, db: &Connection, id: &SnapshotId) -> bool {
        !matches!(Self::read_row(db, id), Ok(None))
    }

    /// Sets one text column of a live snapshot and logs the change.
    fn update_live(
        &self,
        id: &SnapshotId,
        actor: Option<&str>,
        action: &str,
        column: &'static str,
        value: &str,
    ) -> Result<Option<Record>, StoreError> {
        let mut db = self.db();
        let Lookup::Live(before) = self.lookup_locked(&db, id)? else {
            return Ok(None);
        };
        let old = if column == "name" {
            &before.name
        } else {
            &before.group
        };
        if old != value {
            let tx = db.transaction()?;
            tx.execute(
                &format!("UPDATE snapshots SET {column} = ?2 WHERE id = ?1"),
                params![id.as_str(), value],
            )?;
            audit(
                &tx,
                actor,
                action,
                Some(id),
                &serde_json::json!({"from": old, "to": value}),
            )?;
            tx.commit()?;
        }
        Ok(self.lookup_locked(&db, id)?.live())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated_before_touching_paths() {
        assert!(SnapshotId::parse("0123456789abcdef").is_some());
        for bad in [
            "",
            "../../etc/passwd",
            "0123456789ABCDEF",
            "0123456789abcde",
            "0123456789abcdefg",
        ] {
            assert!(SnapshotId::parse(bad).is_none(), "{bad}");
        }
    }

    fn new_snapshot(id: &SnapshotId, name: &str) -> NewSnapshot {
        NewSnapshot {
            id: id.clone(),
            name: name.into(),
            filename: format!("{name}.pickle"),
            size_bytes: 5,
            group: String::new(),
            summary: serde_json::json!({"devices": []}),
        }
    }

    fn put_bytes(store: &FileStore, id: &SnapshotId, name: &str) -> (Record, bool) {
        let temp = store.temp_dir().join(format!("upload-{name}"));
        std::fs::write(&temp, b"bytes").expect("write");
        store
            .put(new_snapshot(id, name), &temp, Some("tester"))
            .expect("put")
    }

    fn actions(store: &FileStore) -> Vec<String> {
        let mut log = store.audit_log(100).expect("audit");
        log.reverse();
        log.into_iter().map(|e| e.action).collect()
    }

    #[test]
    fn put_get_list_rename_delete_restore_purge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        let id = SnapshotId::from_digest(&[0xab; 32]);
        let (record, created) = put_bytes(&store, &id, "run1");
        assert!(created);
        assert!(store.blob_path(&id).exists());
        assert_eq!(std::fs::read_dir(store.temp_dir()).expect("tmp").count(), 0);
        let (again, created) = put_bytes(&store, &id, "other");
        assert!(!created);
        assert_eq!(again, record, "the same bytes keep the first record");
        assert_eq!(store.list().expect("list").len(), 1);
        let renamed = store
            .rename(&id, "better", Some("tester"))
            .expect("rename")
            .expect("exists");
        assert_eq!(renamed.name, "better");

        assert!(matches!(
            store.delete(&id, Some("tester")).expect("delete"),
            Lookup::Live(_)
        ));
        assert!(
            store.blob_path(&id).exists(),
            "a deleted snapshot's file is kept in the trash"
        );
        assert!(store.get(&id).expect("get").is_none());
        assert!(store.list().expect("list").is_empty());
        assert!(matches!(
            store.lookup(&id).expect("lookup"),
            Lookup::Trashed { .. }
        ));
        assert!(
            store.rename(&id, "x", None).expect("rename").is_none(),
            "no rename in the trash"
        );
        assert!(matches!(
            store.delete(&id, None).expect("delete"),
            Lookup::Trashed { .. }
        ));

        let restored = store.restore(&id, Some("tester")).expect("restore");
        assert_eq!(restored.live().expect("live").name, "better");
        assert_eq!(store.list().expect("list").len(), 1);

        store.delete(&id, None).expect("delete");
        // Deleted now: a purge of what was trashed a day ago leaves it; one up to now takes it.
        let day_ago = now_ms() - 86_400_000;
        assert_eq!(
            store.purge_trashed_before(day_ago, None).expect("purge"),
            Purge::default()
        );
        assert!(store.blob_path(&id).exists());
        let purge = store.purge_trashed_before(now_ms(), None).expect("purge");
        assert_eq!(purge.purged, vec![id.clone()]);
        assert!(!store.blob_path(&id).exists());
        assert_eq!(store.lookup(&id).expect("lookup"), Lookup::Absent);
        assert_eq!(
            actions(&store),
            ["upload", "rename", "delete", "restore", "delete", "purge"]
        );
        let log = store.audit_log(2).expect("audit");
        assert_eq!(log.len(), 2, "the limit holds");
        assert_eq!(log[0].action, "purge", "newest first");
        assert_eq!(store.audit_log(100).expect("audit")[1].actor, None);
        assert_eq!(
            store.audit_log(100).expect("audit")[2].actor.as_deref(),
            Some("tester")
        );
    }

    #[test]
    fn uploading_trashed_bytes_makes_them_live_with_the_new_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        let id = SnapshotId::from_digest(&[0x12; 32]);
        put_bytes(&store, &id, "first");
        store.delete(&id, None).expect("delete");
        let (record, created) = put_bytes(&store, &id, "second");
        assert!(created);
        assert_eq!(record.name, "second");
        assert_eq!(store.get(&id).expect("get"), Some(record));
        let log = store.audit_log(1).expect("audit");
        assert_eq!(log[0].detail["was_in_trash"], true);
    }

    #[test]
    fn a_missing_blob_is_unlisted_and_repaired_by_the_same_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        let id = SnapshotId::from_digest(&[0x34; 32]);
        put_bytes(&store, &id, "run");
        std::fs::remove_file(store.blob_path(&id)).expect("remove");
        let listing = store.listing().expect("listing");
        assert!(listing.records.is_empty());
        assert_eq!(listing.unlisted.len(), 1);
        assert!(matches!(
            store.lookup(&id).expect("lookup"),
            Lookup::FileMissing(_)
        ));
        let (record, created) = put_bytes(&store, &id, "again");
        assert!(!created);
        assert_eq!(record.name, "run", "the repair keeps the record");
        assert!(store.get(&id).expect("get").is_some());
        assert_eq!(actions(&store), ["upload", "repair"]);
    }

    #[test]
    fn a_bad_summary_row_is_left_out_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        let good = SnapshotId::from_digest(&[0x01; 32]);
        let bad = SnapshotId::from_digest(&[0x02; 32]);
        put_bytes(&store, &good, "good");
        put_bytes(&store, &bad, "bad");
        store
            .db()
            .execute(
                "UPDATE snapshots SET summary = '{not json' WHERE id = ?1",
                params![bad.as_str()],
            )
            .expect("corrupt");
        let listing = store.listing().expect("the list still answers");
        assert_eq!(listing.records.len(), 1);
        assert_eq!(listing.records[0].id, good);
        assert_eq!(listing.unlisted[0].id, bad);
        // The snapshot itself is still reachable; start-up rebuilds its summary.
        assert!(store.get(&bad).expect("get").is_some());
        let report = store
            .start_up(false, 86_400_000, &|_| {
                Ok(serde_json::json!({"devices": [1]}))
            })
            .expect("start up");
        assert_eq!(report.summaries_repaired, 1);
        assert_eq!(store.list().expect("list").len(), 2);
    }

    #[test]
    fn start_up_sweeps_orphans_and_reindexes_an_empty_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = SnapshotId::from_digest(&[0x56; 32]);
        let orphan = SnapshotId::from_digest(&[0x78; 32]);
        {
            let store = FileStore::open(dir.path()).expect("open");
            put_bytes(&store, &kept, "kept");
            std::fs::create_dir_all(store.blob_path(&orphan).parent().expect("folder"))
                .expect("folder");
            std::fs::write(store.blob_path(&orphan), b"half").expect("orphan");
            std::fs::write(store.temp_dir().join("upload-1-1"), b"partial").expect("temp");
        }
        let store = FileStore::open(dir.path()).expect("open");
        assert_eq!(std::fs::read_dir(store.temp_dir()).expect("tmp").count(), 0);
        let summarize = |_: &Path| Ok(serde_json::json!({"devices": []}));
        let report = store
            .start_up(false, 86_400_000, &summarize)
            .expect("start");
        assert_eq!(report.orphans_removed, 1);
        assert!(!store.blob_path(&orphan).exists());
        assert!(store.blob_path(&kept).exists());

        // The index lost: the blobs rebuild it, names from the audit log when it survived.
        store
            .db()
            .execute("DELETE FROM snapshots", [])
            .expect("lose rows");
        let report = store
            .start_up(false, 86_400_000, &summarize)
            .expect("start");
        assert_eq!(report.reindexed, 1);
        assert_eq!(store.get(&kept).expect("get").expect("back").name, "kept");
        // With the audit log gone too, the id names it; a blob that does not parse is kept.
        store
            .db()
            .execute_batch("DELETE FROM snapshots; DELETE FROM audit;")
            .expect("lose all");
        std::fs::write(store.blob_path(&orphan), b"junk").expect("junk blob");
        let picky = |path: &Path| {
            if path.ends_with(format!("{orphan}{BLOB_SUFFIX}")) {
                Err("not a snapshot".to_owned())
            } else {
                Ok(serde_json::json!({"devices": []}))
            }
        };
        let report = store.start_up(false, 86_400_000, &picky).expect("start");
        assert_eq!(report.reindexed, 1);
        assert_eq!(report.unreadable_blobs.len(), 1);
        assert!(
            store.blob_path(&orphan).exists(),
            "an unreadable blob is kept"
        );
        assert_eq!(
            store.get(&kept).expect("get").expect("back").name,
            kept.as_str()
        );
    }

    #[test]
    fn an_orphan_blob_cut_short_is_replaced_by_the_next_upload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        let id = SnapshotId::from_digest(&[0x9a; 32]);
        std::fs::create_dir_all(store.blob_path(&id).parent().expect("folder")).expect("folder");
        std::fs::write(store.blob_path(&id), b"by").expect("orphan");
        let (_, created) = put_bytes(&store, &id, "run");
        assert!(created);
        assert_eq!(std::fs::read(store.blob_path(&id)).expect("blob"), b"bytes");
    }

    #[test]
    fn an_index_without_the_trash_column_is_migrated() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = Connection::open(dir.path().join("snapview.db")).expect("db");
            db.execute_batch(
                "CREATE TABLE snapshots (id TEXT PRIMARY KEY, name TEXT NOT NULL,
                 filename TEXT NOT NULL, size_bytes INTEGER NOT NULL,
                 uploaded_at_ms INTEGER NOT NULL, grp TEXT NOT NULL DEFAULT '',
                 summary TEXT NOT NULL);
                 INSERT INTO snapshots VALUES ('0123456789abcdef', 'old', 'old.pickle', 5, 1, '', '{}');",
            )
            .expect("old schema");
        }
        let store = FileStore::open(dir.path()).expect("open migrates");
        let id = SnapshotId::parse("0123456789abcdef").expect("id");
        assert!(matches!(
            store.lookup(&id).expect("lookup"),
            Lookup::FileMissing(_)
        ));
    }
}
