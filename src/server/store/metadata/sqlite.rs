//! [`Sqlite`]: the rows in the data folder's `snapview.db`, one connection behind a lock, its
//! writes in `BEGIN IMMEDIATE` transactions (so a second process on the same folder waits for
//! the first's write to commit rather than interleave with it).
//!
//! The schema is versioned ([`SCHEMA_VERSION`], the `schema_version` table); [`MIGRATIONS`] are
//! applied in order at open, each in the transaction that records it. PostgreSQL keeps the same
//! numbering, so a change to what is stored is one new number in both.

use super::{Change, Metadata, StoredRow, Tx, TxWork};
use crate::server::store::{AuditEntry, MAX_REFUSED_ROWS, Record, SnapshotId, StoreError, now_ms};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value as Json;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// The schema version this build writes; PostgreSQL's migrations end at the same number.
/// 1: `snapshots` and `audit`; 2: `snapshots.deleted_at_ms` (the trash); 3: `snapshots.roles`
/// (per-snapshot role rules); 4: `leases`.
pub const SCHEMA_VERSION: i64 = 4;

/// What a call answers.
type Answer<T> = Result<T, StoreError>;

/// One step of the schema, numbered by its place in [`MIGRATIONS`] (from 1).
type Migration = fn(&Connection) -> rusqlite::Result<()>;

/// Every migration, in order. Each one is a no-op on a database that has what it makes
/// already, so a database from before the schema was versioned (no `schema_version` table:
/// its tables made with `IF NOT EXISTS` and its columns added as the code met them) is
/// brought up by running them all: each sees by the tables and columns what is there.
const MIGRATIONS: [Migration; SCHEMA_VERSION as usize] = [
    |db| {
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS snapshots (
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
             CREATE INDEX IF NOT EXISTS audit_snapshot ON audit (snapshot_id);
             CREATE INDEX IF NOT EXISTS audit_action ON audit (action, seq);",
        )
    },
    // The trash: when a snapshot was deleted; NULL while it is live.
    |db| add_column(db, "snapshots", "deleted_at_ms", "INTEGER"),
    // A snapshot's own role rules; NULL: the server's.
    |db| add_column(db, "snapshots", "roles", "TEXT"),
    // One replica at a time on a piece of work (Store::try_lease).
    |db| {
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS leases (
                 name TEXT PRIMARY KEY,
                 holder TEXT NOT NULL,
                 expires_at_ms INTEGER NOT NULL
             );",
        )
    },
];

/// Adds `column` to `table` unless it is there (a database from before versioning may have it).
fn add_column(db: &Connection, table: &str, column: &str, kind: &str) -> rusqlite::Result<()> {
    let there = db
        .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
        .exists(params![table, column])?;
    if !there {
        db.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
    }
    Ok(())
}

/// The version `db` is at: 0 when it is new or from before versioning.
fn schema_version(db: &Connection) -> rusqlite::Result<i64> {
    let versioned = db
        .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'")?
        .exists([])?;
    if !versioned {
        return Ok(0);
    }
    db.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_version",
        [],
        |row| row.get(0),
    )
}

/// Brings `db` to [`SCHEMA_VERSION`], one migration per transaction; `BEGIN IMMEDIATE` makes a
/// second process opening the same file at once wait and then find the work done.
fn migrate(db: &mut Connection) -> Result<(), StoreError> {
    loop {
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version = schema_version(&tx)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::Remote {
                what: "the database",
                reason: format!(
                    "its schema is at version {version}, newer than this snapview's \
                     {SCHEMA_VERSION}: run a snapview at least as new as the one that wrote it"
                ),
            });
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        let next = version + 1;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_version (
                 version INTEGER PRIMARY KEY,
                 applied_at_ms INTEGER NOT NULL
             );",
        )?;
        // `next` is 1..=SCHEMA_VERSION here, an index into MIGRATIONS.
        MIGRATIONS[(next - 1) as usize](&tx)?;
        tx.execute(
            "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, ?2)",
            params![next, now_ms()],
        )?;
        tx.commit()?;
        tracing::info!(version = next, "database schema migrated");
    }
}

/// Metadata in a SQLite file.
pub struct Sqlite {
    db: Mutex<Connection>,
}

impl Sqlite {
    /// Opens (or creates) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut db = Connection::open(path)?;
        // Another process on the same folder (a `serve` being replaced) waits rather than fails.
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")?;
        migrate(&mut db)?;
        Ok(Self { db: Mutex::new(db) })
    }

    /// Opens `path` with only the first `version` migrations applied: an older database, for
    /// the tests of the migrations.
    #[cfg(test)]
    pub(crate) fn create_at_version(path: &Path, version: i64) -> Result<(), StoreError> {
        let db = Connection::open(path)?;
        db.execute_batch(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL);",
        )?;
        for (index, migration) in MIGRATIONS.iter().enumerate().take(version as usize) {
            migration(&db)?;
            db.execute(
                "INSERT INTO schema_version (version, applied_at_ms) VALUES (?1, 0)",
                params![index as i64 + 1],
            )?;
        }
        Ok(())
    }

    /// The version the open database is at.
    pub fn version(&self) -> Result<i64, StoreError> {
        Ok(schema_version(&self.lock())?)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (it has its own
        // transactions), so a poisoned lock is still usable.
        self.db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

const COLUMNS: &str =
    "id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms, roles";

fn stored_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRow> {
    let id: String = row.get(0)?;
    Ok(StoredRow {
        record: Record {
            // Written only from validated ids; one that is not is shown as it is stored.
            id: SnapshotId::parse(&id).unwrap_or(SnapshotId(id)),
            name: row.get(1)?,
            filename: row.get(2)?,
            size_bytes: row.get::<_, i64>(3)?.max(0) as u64,
            uploaded_at_ms: row.get(4)?,
            group: row.get(5)?,
            summary: serde_json::Value::Null,
            roles: row.get(8)?,
        },
        summary: row.get(6)?,
        deleted_at_ms: row.get(7)?,
    })
}

fn read_row(db: &Connection, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError> {
    Ok(db
        .query_row(
            &format!("SELECT {COLUMNS} FROM snapshots WHERE id = ?1"),
            params![id.as_str()],
            stored_row,
        )
        .optional()?)
}

fn append_audit(
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

/// Inserts `record` as a live row with no rules of its own; on a row of the same id, sets what
/// `on_conflict` says instead (SQL of this file's own, never a client's text).
fn insert_row(db: &Connection, record: &Record, on_conflict: &str) -> Result<(), StoreError> {
    db.execute(
        &format!(
            "INSERT INTO snapshots ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL)
             ON CONFLICT (id) DO UPDATE SET {on_conflict}"
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
    Ok(())
}

/// One write transaction's view of the rows.
struct SqliteTx<'a> {
    db: &'a Connection,
}

impl Tx for SqliteTx<'_> {
    fn row(&mut self, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError> {
        read_row(self.db, id)
    }

    fn upsert(&mut self, record: &Record) -> Result<(), StoreError> {
        // A trashed row, or one with rules of its own, comes back as this upload made it.
        insert_row(
            self.db,
            record,
            "name = excluded.name, filename = excluded.filename,
             size_bytes = excluded.size_bytes, uploaded_at_ms = excluded.uploaded_at_ms,
             grp = excluded.grp, summary = excluded.summary, deleted_at_ms = NULL, roles = NULL",
        )
    }

    fn reindex(&mut self, record: &Record) -> Result<(), StoreError> {
        // Name, group, trash and rules are the row's own; the bytes give the rest.
        insert_row(
            self.db,
            record,
            "summary = excluded.summary, size_bytes = excluded.size_bytes",
        )
    }

    fn update(&mut self, id: &SnapshotId, change: &Change) -> Result<bool, StoreError> {
        let id = id.as_str();
        let changed = match change {
            Change::Name(name) => self.db.execute(
                "UPDATE snapshots SET name = ?2 WHERE id = ?1",
                params![id, name],
            )?,
            Change::Group(group) => self.db.execute(
                "UPDATE snapshots SET grp = ?2 WHERE id = ?1",
                params![id, group],
            )?,
            Change::DeletedAt(at_ms) => self.db.execute(
                "UPDATE snapshots SET deleted_at_ms = ?2 WHERE id = ?1",
                params![id, at_ms],
            )?,
            Change::Roles { roles, summary } => self.db.execute(
                "UPDATE snapshots SET roles = ?2, summary = ?3 WHERE id = ?1",
                params![id, roles, serde_json::to_string(summary)?],
            )?,
            Change::Summary(summary) => self.db.execute(
                "UPDATE snapshots SET summary = ?2 WHERE id = ?1",
                params![id, serde_json::to_string(summary)?],
            )?,
        };
        Ok(changed == 1)
    }

    fn remove(&mut self, id: &SnapshotId) -> Result<(), StoreError> {
        self.db
            .execute("DELETE FROM snapshots WHERE id = ?1", params![id.as_str()])?;
        Ok(())
    }

    fn audit(
        &mut self,
        actor: Option<&str>,
        action: &str,
        id: Option<&SnapshotId>,
        detail: &Json,
    ) -> Result<(), StoreError> {
        append_audit(self.db, actor, action, id, detail)
    }

    fn last_upload_detail(&mut self, id: &SnapshotId) -> Result<Option<String>, StoreError> {
        Ok(self
            .db
            .query_row(
                "SELECT detail FROM audit WHERE snapshot_id = ?1 AND action = 'upload'
                 ORDER BY seq DESC LIMIT 1",
                params![id.as_str()],
                |row| row.get(0),
            )
            .optional()?)
    }
}

impl Metadata for Sqlite {
    fn write(&self, work: TxWork<'_>) -> Result<(), StoreError> {
        let mut db = self.lock();
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        work(&mut SqliteTx { db: &tx })?;
        tx.commit()?;
        Ok(())
    }

    fn row(&self, id: &SnapshotId) -> Result<Option<StoredRow>, StoreError> {
        read_row(&self.lock(), id)
    }

    fn live_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        let db = self.lock();
        let mut statement = db.prepare(&format!(
            "SELECT {COLUMNS} FROM snapshots WHERE deleted_at_ms IS NULL
             ORDER BY uploaded_at_ms DESC, id"
        ))?;
        let rows = statement.query_map([], stored_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn all_summaries(&self) -> Result<Vec<(SnapshotId, String)>, StoreError> {
        let db = self.lock();
        let mut statement = db.prepare("SELECT id, summary FROM snapshots ORDER BY id")?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?;
        let mut found = Vec::new();
        for row in rows {
            let (id, summary) = row?;
            found.push((SnapshotId::parse(&id).unwrap_or(SnapshotId(id)), summary));
        }
        Ok(found)
    }

    fn count(&self) -> Result<u64, StoreError> {
        let rows: i64 = self
            .lock()
            .query_row("SELECT COUNT(*) FROM snapshots", [], |row| row.get(0))?;
        Ok(rows.max(0) as u64)
    }

    fn has_size(&self, size_bytes: u64) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .prepare("SELECT 1 FROM snapshots WHERE size_bytes = ?1 LIMIT 1")?
            .exists(params![size_bytes as i64])?)
    }

    fn trashed_before(&self, cutoff_ms: i64) -> Result<Vec<SnapshotId>, StoreError> {
        let db = self.lock();
        let mut statement = db.prepare(
            "SELECT id FROM snapshots WHERE deleted_at_ms IS NOT NULL AND deleted_at_ms <= ?1
             ORDER BY id",
        )?;
        let rows = statement.query_map(params![cutoff_ms], |row| row.get::<_, String>(0))?;
        let mut due = Vec::new();
        for id in rows {
            let id = id?;
            due.push(SnapshotId::parse(&id).unwrap_or(SnapshotId(id)));
        }
        Ok(due)
    }

    fn audit_log(&self, limit: usize, before: Option<i64>) -> Result<Vec<AuditEntry>, StoreError> {
        let db = self.lock();
        let mut statement = db.prepare(
            "SELECT seq, at_ms, actor, action, snapshot_id, detail FROM audit
                 WHERE seq < ?2 ORDER BY seq DESC LIMIT ?1",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = statement.query_map(params![limit, before.unwrap_or(i64::MAX)], |row| {
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

    fn record_refusals(&self, row: Option<i64>, actor: Option<&str>, detail: &Json) -> Answer<i64> {
        let detail = serde_json::to_string(detail)?;
        let mut db = self.lock();
        if let Some(seq) = row {
            let updated = db.execute(
                "UPDATE audit SET detail = ?2, actor = COALESCE(actor, ?3)
                     WHERE seq = ?1 AND action = 'refused'",
                params![seq, detail, actor],
            )?;
            if updated == 1 {
                return Ok(seq);
            }
            // Pruned meanwhile: written again as a new row.
        }
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO audit (at_ms, actor, action, snapshot_id, detail)
                 VALUES (?1, ?2, 'refused', NULL, ?3)",
            params![now_ms(), actor, detail],
        )?;
        let seq = tx.last_insert_rowid();
        tx.execute(
            "DELETE FROM audit WHERE action = 'refused' AND seq <= (
                     SELECT seq FROM audit WHERE action = 'refused'
                     ORDER BY seq DESC LIMIT 1 OFFSET ?1)",
            params![MAX_REFUSED_ROWS],
        )?;
        tx.commit()?;
        Ok(seq)
    }

    fn try_lease(&self, name: &str, holder: &str, ttl_ms: i64) -> Result<bool, StoreError> {
        let now = now_ms();
        let taken = self.lock().execute(
            "INSERT INTO leases (name, holder, expires_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,
                 expires_at_ms = excluded.expires_at_ms
             WHERE leases.holder = excluded.holder OR leases.expires_at_ms <= ?4",
            params![name, holder, now.saturating_add(ttl_ms), now],
        )?;
        Ok(taken == 1)
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        self.lock().execute(
            "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
            params![name, holder],
        )?;
        Ok(())
    }

    fn check(&self) -> Result<(), StoreError> {
        self.lock().query_row("SELECT 1", [], |_| Ok(()))?;
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "sqlite"
    }
}

#[cfg(test)]
mod tests;
