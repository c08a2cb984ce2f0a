//! [`FileStore`]: blobs in a folder, metadata and the audit log in SQLite, and the writes that
//! keep the invariants the module above states. This file holds the SQLite index (rows, lookups,
//! uploads, renames); the blob files are in `blobs.rs`, the trash in `trash.rs`, the audit log
//! in `audit.rs` and the start-up repairs in `start_up.rs`.

use super::audit::{self, audit};
use super::file_blobs::{BLOB_SUFFIX, INDEX_DIR, sync_dir};
use super::trash::TrashMove;
use super::*;
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::Mutex;

/// Blobs in a folder, metadata in SQLite: `DIR/blobs/ab/abcdef….snapshot`, `DIR/snapview.db`;
/// each blob's stored index in `DIR/indexes/abcdef….snapidx`.
pub struct FileStore {
    pub(super) dir: PathBuf,
    db: Mutex<Connection>,
    /// Who this process is in the leases table.
    holder: String,
}

impl FileStore {
    /// Opens (or creates) the store in `dir`, migrating an older index and removing the
    /// leftovers of uploads a crash interrupted. See [`FileStore::start_up`] for the rest of the
    /// start-up repairs.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir.join("blobs"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::create_dir_all(dir.join(INDEX_DIR))?;
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
             CREATE INDEX IF NOT EXISTS audit_snapshot ON audit (snapshot_id);
             CREATE INDEX IF NOT EXISTS audit_action ON audit (action, seq);
             CREATE TABLE IF NOT EXISTS leases (
                 name TEXT PRIMARY KEY,
                 holder TEXT NOT NULL,
                 expires_at_ms INTEGER NOT NULL
             );",
        )?;
        // Indexes written before the trash existed lack its column.
        let has_trash_column = db
            .prepare("SELECT 1 FROM pragma_table_info('snapshots') WHERE name = 'deleted_at_ms'")?
            .exists([])?;
        if !has_trash_column {
            db.execute_batch("ALTER TABLE snapshots ADD COLUMN deleted_at_ms INTEGER")?;
        }
        // Indexes written before per-snapshot role rules lack their column (NULL: the server's).
        let has_roles_column = db
            .prepare("SELECT 1 FROM pragma_table_info('snapshots') WHERE name = 'roles'")?
            .exists([])?;
        if !has_roles_column {
            db.execute_batch("ALTER TABLE snapshots ADD COLUMN roles TEXT")?;
        }
        Ok(Self {
            dir: dir.to_owned(),
            db: Mutex::new(db),
            holder: super::lease_holder(),
        })
    }

    pub(super) fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (it has its own
        // transactions), so a poisoned lock is still usable.
        self.db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) const COLUMNS: &'static str =
        "id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms, roles";

    /// A row as stored: its summary still text, so one unreadable summary is this row's
    /// problem, not the whole list's.
    pub(super) fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRow> {
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
                roles: row.get(8)?,
            },
            summary: row.get(6)?,
            deleted_at_ms: row.get(7)?,
        })
    }

    pub(super) fn read_row(
        db: &Connection,
        id: &SnapshotId,
    ) -> Result<Option<StoredRow>, StoreError> {
        Ok(db
            .query_row(
                &format!("SELECT {} FROM snapshots WHERE id = ?1", Self::COLUMNS),
                params![id.as_str()],
                Self::row,
            )
            .optional()?)
    }

    /// Where `id` stands, read with the lock held by the caller.
    pub(super) fn lookup_locked(
        &self,
        db: &Connection,
        id: &SnapshotId,
    ) -> Result<Lookup, StoreError> {
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
}

/// A row before its summary is parsed.
pub(super) struct StoredRow {
    pub(super) record: Record,
    pub(super) summary: String,
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
                        // A new upload (or one back from the trash) starts with the server's.
                        roles: None,
                    };
                    // A trashed row comes back as this upload made it.
                    tx.execute(
                        &format!(
                            "INSERT INTO snapshots ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL)
                             ON CONFLICT (id) DO UPDATE SET name = excluded.name,
                                 filename = excluded.filename, size_bytes = excluded.size_bytes,
                                 uploaded_at_ms = excluded.uploaded_at_ms, grp = excluded.grp,
                                 summary = excluded.summary, deleted_at_ms = NULL,
                                 roles = NULL",
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
        self.move_in_trash(id, actor, TrashMove::Delete)
    }

    fn restore(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError> {
        self.move_in_trash(id, actor, TrashMove::Restore)
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

    fn set_roles(
        &self,
        id: &SnapshotId,
        roles: Option<&str>,
        summary: &serde_json::Value,
        actor: Option<&str>,
    ) -> Result<Option<Record>, StoreError> {
        let mut db = self.db();
        let Lookup::Live(before) = self.lookup_locked(&db, id)? else {
            return Ok(None);
        };
        let tx = db.transaction()?;
        // The rules and the summary they made change together, so the list never shows one
        // snapshot's roles by rules it no longer has.
        tx.execute(
            "UPDATE snapshots SET roles = ?2, summary = ?3 WHERE id = ?1",
            params![id.as_str(), roles, serde_json::to_string(summary)?],
        )?;
        audit(
            &tx,
            actor,
            if roles.is_some() {
                "set_roles"
            } else {
                "remove_roles"
            },
            Some(id),
            &serde_json::json!({
                "had_rules": before.roles.is_some(),
                "rules_bytes": roles.map(str::len),
            }),
        )?;
        tx.commit()?;
        Ok(self.lookup_locked(&db, id)?.live())
    }

    fn purge_trashed_before(
        &self,
        cutoff_ms: i64,
        actor: Option<&str>,
    ) -> Result<Purge, StoreError> {
        self.purge_trash_before(cutoff_ms, actor)
    }

    fn audit_log(&self, limit: usize, before: Option<i64>) -> Result<Vec<AuditEntry>, StoreError> {
        audit::read(&self.db(), limit, before)
    }

    fn record_refusals(
        &self,
        row: Option<i64>,
        actor: Option<&str>,
        detail: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        audit::write_refusals(&mut self.db(), row, actor, detail)
    }

    fn blob_file(&self, id: &SnapshotId) -> Result<PathBuf, StoreError> {
        Ok(self.blob_path(id))
    }

    fn index_path(&self, id: &SnapshotId) -> PathBuf {
        // Ids are validated hex, so joining them is safe.
        self.dir
            .join(INDEX_DIR)
            .join(format!("{}{}", id.as_str(), crate::index::FILE_SUFFIX))
    }

    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        Ok(self.index_path(id).is_file())
    }

    fn publish_index(&self, _id: &SnapshotId) -> Result<(), StoreError> {
        // The index is written where every process on this folder reads it.
        Ok(())
    }

    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        Ok(super::file_blobs::remove_if_there(&self.index_path(id))?)
    }

    fn temp_dir(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    fn try_lease(&self, name: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        let now = now_ms();
        let expires = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let taken = self.db().execute(
            "INSERT INTO leases (name, holder, expires_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,
                 expires_at_ms = excluded.expires_at_ms
             WHERE leases.holder = excluded.holder OR leases.expires_at_ms <= ?4",
            params![name, self.holder, expires, now],
        )?;
        Ok(taken == 1)
    }

    fn release_lease(&self, name: &str) -> Result<(), StoreError> {
        self.db().execute(
            "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
            params![name, self.holder],
        )?;
        Ok(())
    }

    fn readiness(&self) -> Vec<(&'static str, Result<(), String>)> {
        let database = self
            .db()
            .query_row("SELECT 1", [], |_| Ok(()))
            .map_err(|e| e.to_string());
        let blobs = match std::fs::metadata(self.dir.join("blobs")) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err("the blobs folder is not a folder".to_owned()),
            Err(e) => Err(format!("the blobs folder cannot be read: {e}")),
        };
        vec![("database", database), ("blobs", blobs)]
    }

    fn kinds(&self) -> (&'static str, &'static str) {
        ("sqlite", "folder")
    }
}

impl FileStore {
    /// Where the bytes of a stored snapshot are.
    pub fn blob_path(&self, id: &SnapshotId) -> PathBuf {
        // Ids are validated hex, so joining them is safe.
        self.dir
            .join("blobs")
            .join(&id.as_str()[..2])
            .join(format!("{}{BLOB_SUFFIX}", id.as_str()))
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
            let detail = serde_json::json!({"from": old, "to": value});
            set_audited(&mut db, id, column, &value, actor, action, &detail)?;
        }
        Ok(self.lookup_locked(&db, id)?.live())
    }
}

/// Sets `column` of `id`'s row to `value` and writes its audit entry (`actor`, `action`,
/// `detail`), in one transaction. `column` is one of this store's own column names, never a
/// client's text.
pub(super) fn set_audited(
    db: &mut Connection,
    id: &SnapshotId,
    column: &str,
    value: &dyn rusqlite::ToSql,
    actor: Option<&str>,
    action: &str,
    detail: &serde_json::Value,
) -> Result<(), StoreError> {
    let tx = db.transaction()?;
    tx.execute(
        &format!("UPDATE snapshots SET {column} = ?2 WHERE id = ?1"),
        params![id.as_str(), value],
    )?;
    audit(&tx, actor, action, Some(id), detail)?;
    tx.commit()?;
    Ok(())
}
