//! [`FileStore`]: blobs in a folder, metadata and the audit log in SQLite, and the writes that
//! keep the invariants the module above states. Start-up repairs are in `start_up.rs`.

use super::*;
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::Mutex;

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

    pub(super) fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (it has its own
        // transactions), so a poisoned lock is still usable.
        self.db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) const COLUMNS: &'static str =
        "id, name, filename, size_bytes, uploaded_at_ms, grp, summary, deleted_at_ms";

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
    pub(super) fn blob_files(&self) -> std::io::Result<Vec<(Option<SnapshotId>, PathBuf)>> {
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

/// Appends an entry to the audit log, inside the caller's transaction.
pub(super) fn audit(
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

pub(super) fn now_ms() -> i64 {
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
