//! What is stored: snapshot files as content-addressed blobs, and their metadata in SQLite.
//!
//! A blob is written to a temporary file while it streams in, parsed, and only then fsync'd and
//! renamed into `blobs/` under its hash, so a crash or a refusal never leaves a partial blob and a
//! stored snapshot always parses. The metadata row is written after the blob; a blob without a
//! row (a crash between the two) is harmless and overwritten by the next upload of those bytes.

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
/// follow.
pub trait Store: Send + Sync {
    /// Moves a parsed temporary file into place and records it. Storing bytes already stored
    /// returns the existing record unchanged.
    fn put(&self, snapshot: NewSnapshot, temp_file: &Path) -> Result<(Record, bool), StoreError>;
    fn get(&self, id: &SnapshotId) -> Result<Option<Record>, StoreError>;
    /// Every record, newest first.
    fn list(&self) -> Result<Vec<Record>, StoreError>;
    /// Whether any stored snapshot has exactly this many bytes (a cheap hint that an upload may
    /// be a duplicate, checked by hash once it has arrived).
    fn has_size(&self, size_bytes: u64) -> Result<bool, StoreError>;
    /// Removes blob and row; false when there was none.
    fn delete(&self, id: &SnapshotId) -> Result<bool, StoreError>;
    fn rename(&self, id: &SnapshotId, name: &str) -> Result<Option<Record>, StoreError>;
    fn set_group(&self, id: &SnapshotId, group: &str) -> Result<Option<Record>, StoreError>;
    /// Where the bytes of a stored snapshot are.
    fn blob_path(&self, id: &SnapshotId) -> PathBuf;
    /// A folder for uploads in progress, on the same filesystem as the blobs (so the final
    /// rename is atomic).
    fn temp_dir(&self) -> PathBuf;
}

/// Blobs in a folder, metadata in SQLite: `DIR/blobs/ab/abcdef….pickle`, `DIR/snapview.db`.
pub struct FileStore {
    dir: PathBuf,
    db: Mutex<Connection>,
}

impl FileStore {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir.join("blobs"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        // Leftovers of uploads interrupted by a crash or a kill.
        for entry in std::fs::read_dir(dir.join("tmp"))?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        let db = Connection::open(dir.join("snapview.db"))?;
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
             CREATE INDEX IF NOT EXISTS snapshots_uploaded ON snapshots (uploaded_at_ms);",
        )?;
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

    fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, Record)> {
        let summary: String = row.get(6)?;
        let id: String = row.get(0)?;
        Ok((
            summary,
            Record {
                id: SnapshotId(id),
                name: row.get(1)?,
                filename: row.get(2)?,
                size_bytes: row.get::<_, i64>(3)?.max(0) as u64,
                uploaded_at_ms: row.get(4)?,
                group: row.get(5)?,
                summary: serde_json::Value::Null,
            },
        ))
    }

    fn finish((summary, mut record): (String, Record)) -> Result<Record, StoreError> {
        record.summary = serde_json::from_str(&summary)?;
        Ok(record)
    }

    const COLUMNS: &'static str = "id, name, filename, size_bytes, uploaded_at_ms, grp, summary";
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

impl Store for FileStore {
    fn put(&self, snapshot: NewSnapshot, temp_file: &Path) -> Result<(Record, bool), StoreError> {
        if let Some(existing) = self.get(&snapshot.id)? {
            std::fs::remove_file(temp_file)?;
            return Ok((existing, false));
        }
        let blob = self.blob_path(&snapshot.id);
        let folder = blob.parent().unwrap_or(&self.dir).to_owned();
        std::fs::create_dir_all(&folder)?;
        std::fs::File::open(temp_file)?.sync_all()?;
        std::fs::rename(temp_file, &blob)?;
        sync_dir(&folder)?;
        let record = Record {
            id: snapshot.id,
            name: snapshot.name,
            filename: snapshot.filename,
            size_bytes: snapshot.size_bytes,
            uploaded_at_ms: now_ms(),
            group: snapshot.group,
            summary: snapshot.summary,
        };
        self.db().execute(
            &format!(
                "INSERT INTO snapshots ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
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
        Ok((record, true))
    }

    fn get(&self, id: &SnapshotId) -> Result<Option<Record>, StoreError> {
        let row = self
            .db()
            .query_row(
                &format!("SELECT {} FROM snapshots WHERE id = ?1", Self::COLUMNS),
                params![id.as_str()],
                Self::row,
            )
            .optional()?;
        row.map(Self::finish).transpose()
    }

    fn list(&self) -> Result<Vec<Record>, StoreError> {
        let db = self.db();
        let mut statement = db.prepare(&format!(
            "SELECT {} FROM snapshots ORDER BY uploaded_at_ms DESC, id",
            Self::COLUMNS
        ))?;
        let rows = statement.query_map([], Self::row)?;
        rows.map(|row| Self::finish(row?)).collect()
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

    fn delete(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        let deleted = self
            .db()
            .execute("DELETE FROM snapshots WHERE id = ?1", params![id.as_str()])?;
        match std::fs::remove_file(self.blob_path(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        Ok(deleted > 0)
    }

    fn rename(&self, id: &SnapshotId, name: &str) -> Result<Option<Record>, StoreError> {
        self.db().execute(
            "UPDATE snapshots SET name = ?2 WHERE id = ?1",
            params![id.as_str(), name],
        )?;
        self.get(id)
    }

    fn set_group(&self, id: &SnapshotId, group: &str) -> Result<Option<Record>, StoreError> {
        self.db().execute(
            "UPDATE snapshots SET grp = ?2 WHERE id = ?1",
            params![id.as_str(), group],
        )?;
        self.get(id)
    }

    fn blob_path(&self, id: &SnapshotId) -> PathBuf {
        // Ids are validated hex, so joining them is safe.
        self.dir
            .join("blobs")
            .join(&id.as_str()[..2])
            .join(format!("{}.snapshot", id.as_str()))
    }

    fn temp_dir(&self) -> PathBuf {
        self.dir.join("tmp")
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

    #[test]
    fn put_get_list_rename_delete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).expect("open");
        let temp = store.temp_dir().join("upload");
        std::fs::write(&temp, b"bytes").expect("write");
        let id = SnapshotId::from_digest(&[0xab; 32]);
        let new = NewSnapshot {
            id: id.clone(),
            name: "run 1".into(),
            filename: "x.pickle".into(),
            size_bytes: 5,
            group: String::new(),
            summary: serde_json::json!({"devices": []}),
        };
        let (record, created) = store.put(new.clone(), &temp).expect("put");
        assert!(created);
        assert!(store.blob_path(&id).exists());
        assert!(!temp.exists());
        std::fs::write(&temp, b"bytes").expect("write");
        let (again, created) = store.put(new, &temp).expect("put again");
        assert!(!created);
        assert_eq!(again.id, record.id);
        assert_eq!(store.list().expect("list").len(), 1);
        let renamed = store
            .rename(&id, "better")
            .expect("rename")
            .expect("exists");
        assert_eq!(renamed.name, "better");
        assert!(store.delete(&id).expect("delete"));
        assert!(!store.blob_path(&id).exists());
        assert!(store.get(&id).expect("get").is_none());
    }
}
