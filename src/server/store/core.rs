//! [`Snapshots`]: the one [`Store`], over any [`Metadata`] backend (SQLite, PostgreSQL) and any
//! [`Blobs`] backend (a folder, object storage). What a write means and the order of a blob's
//! and its row's changes (the invariants of the module above) are decided here, once, for
//! every pair of backends: uploads, renames and role rules in this file, the trash in
//! `trash.rs`, the start-up repairs in `start_up.rs`.
//!
//! A blob is stored before the write lock is taken (an upload to object storage is slow, and
//! every other write would wait on it), so between the blob's put and its row's write another
//! writer may remove it: a purge of a trashed row of the same bytes, an earlier upload of them
//! whose row failed, a replica's start-up sweep of what looked like an orphan. The write
//! therefore checks, holding the lock, that the blob is there, and puts it again when it is
//! not, from a second name of the uploaded file kept until the row is written (a hard link:
//! no copy). Whatever removes a blob does it holding the lock and only when no row points at
//! it, or (a purge) together with the row, so once the row is committed with its blob there,
//! the blob stays as long as the row does.

use super::blobs::Blobs;
use super::metadata::{Change, Metadata, StoredRow, Tx};
use super::*;
use serde_json::Value as Json;
use std::collections::HashSet;

/// What the writes to one live snapshot answer: its record after, `None` when it is not live.
type Answer = Result<Option<Record>, StoreError>;

/// A write to a live snapshot's row: see [`Snapshots::write_live`].
type LiveWork<'a> = &'a mut dyn FnMut(&mut dyn Tx, &mut Record) -> Result<(), StoreError>;

/// The snapshots: rows in `metadata`, bytes in `blobs`.
pub struct Snapshots {
    pub(super) metadata: Box<dyn Metadata>,
    pub(super) blobs: Box<dyn Blobs>,
    /// Who this process is in the leases table.
    holder: String,
}

impl Snapshots {
    pub fn new(metadata: Box<dyn Metadata>, blobs: Box<dyn Blobs>) -> Self {
        Self {
            metadata,
            blobs,
            holder: lease_holder(),
        }
    }

    /// Where a row stands: trashed, or live with or without its blob; `None`: absent.
    pub(super) fn classify(&self, row: Option<StoredRow>) -> Result<Lookup, StoreError> {
        let Some(row) = row else {
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
            None if self.blobs.exists(&record.id)? => Lookup::Live(record),
            None => Lookup::FileMissing(record),
        })
    }

    /// Removes `id`'s blob if no row (live or trashed) points at it, holding the write lock so
    /// that no row can be committed over it meanwhile; true when it went. A failure leaves the
    /// blob to the start-up sweep.
    pub(super) fn remove_if_unrowed(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        let mut removed = false;
        self.metadata.write(&mut |tx| {
            removed = false;
            if tx.row(id)?.is_none() {
                self.blobs.remove(id)?;
                removed = true;
            }
            Ok(())
        })?;
        Ok(removed)
    }

    /// Runs `work` on a live snapshot's record in one write transaction, and answers the
    /// record as `work` left it; `None`, with nothing written, when the snapshot is not live.
    fn write_live(&self, id: &SnapshotId, work: LiveWork<'_>) -> Answer {
        let mut after = None;
        self.metadata.write(&mut |tx| {
            after = None;
            let Lookup::Live(mut record) = self.classify(tx.row(id)?)? else {
                return Ok(());
            };
            work(tx, &mut record)?;
            after = Some(record);
            Ok(())
        })?;
        Ok(after)
    }

    /// Sets a text field of a live snapshot (its name, its group) and logs the change.
    fn update_live(
        &self,
        id: &SnapshotId,
        actor: Option<&str>,
        action: &str,
        value: &str,
        field: fn(&mut Record) -> &mut String,
        change: fn(String) -> Change,
    ) -> Answer {
        self.write_live(id, &mut |tx, record| {
            let slot = field(record);
            if slot != value {
                let detail = serde_json::json!({"from": slot, "to": value});
                tx.update(id, &change(value.to_owned()))?;
                tx.audit(actor, action, Some(id), &detail)?;
                *slot = value.to_owned();
            }
            Ok(())
        })
    }
}

/// A second name for an upload's file, beside it, so its bytes can be put again if the blob
/// is removed before its row is written (see the module's doc); `None` when the file system
/// cannot link (the upload then fails in that race, and is retried by its client).
fn spare_link(temp_file: &Path) -> Option<PathBuf> {
    let mut spare = temp_file.as_os_str().to_owned();
    spare.push(".spare");
    let spare = PathBuf::from(spare);
    let _ = std::fs::remove_file(&spare);
    match std::fs::hard_link(temp_file, &spare) {
        Ok(()) => Some(spare),
        Err(error) => {
            tracing::debug!(%error, "no spare link to an upload's file");
            None
        }
    }
}

impl Store for Snapshots {
    fn put(
        &self,
        snapshot: NewSnapshot,
        temp_file: &Path,
        actor: Option<&str>,
    ) -> Result<(Record, bool), StoreError> {
        let id = &snapshot.id;
        // Bytes already stored and readable: nothing to store (checked without the lock; a
        // delete racing this answer is ordered after it).
        let before = self.classify(self.metadata.row(id)?)?;
        if let Lookup::Live(existing) = before {
            std::fs::remove_file(temp_file)?;
            return Ok((existing, false));
        }
        let was_missing = matches!(before, Lookup::FileMissing(_));
        let spare = spare_link(temp_file);
        // The slow part (a rename here, an upload to object storage), before the lock that
        // every other write waits on.
        if let Err(error) = self.blobs.put(id, temp_file) {
            if let Some(spare) = &spare {
                let _ = std::fs::remove_file(spare);
            }
            return Err(error);
        }
        let mut outcome = None;
        let written = self.metadata.write(&mut |tx| {
            outcome = None;
            let row = tx.row(id)?;
            if !self.blobs.exists(id)? {
                // Removed since it was put (see the module's doc): put again, lock held.
                tracing::info!(%id, "a blob went while its upload was recorded: putting it again");
                match spare.as_deref().filter(|spare| spare.is_file()) {
                    Some(spare) => self.blobs.put(id, spare)?,
                    None => {
                        return Err(StoreError::Remote {
                            what: "the upload",
                            reason: "its file was removed while it was stored (the same bytes \
                                     were purged from the trash meanwhile); upload it again"
                                .to_owned(),
                        });
                    }
                }
            }
            outcome = Some(match row {
                Some(row) if row.deleted_at_ms.is_none() => {
                    let (record, _) = row.decode();
                    if was_missing {
                        tx.audit(
                            actor,
                            "repair",
                            Some(id),
                            &serde_json::json!({"size_bytes": snapshot.size_bytes}),
                        )?;
                    }
                    // Otherwise an upload of the same bytes recorded them meanwhile: its row.
                    (record, false)
                }
                row => {
                    let was_trashed = row.is_some();
                    let record = Record {
                        id: id.clone(),
                        name: snapshot.name.clone(),
                        filename: snapshot.filename.clone(),
                        size_bytes: snapshot.size_bytes,
                        uploaded_at_ms: now_ms(),
                        group: snapshot.group.clone(),
                        summary: snapshot.summary.clone(),
                        // A new upload (or one back from the trash) starts with the server's.
                        roles: None,
                    };
                    // A trashed row comes back as this upload made it.
                    tx.upsert(&record)?;
                    tx.audit(
                        actor,
                        "upload",
                        Some(id),
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
            });
            Ok(())
        });
        if let Some(spare) = &spare {
            let _ = std::fs::remove_file(spare);
        }
        if let Err(error) = written {
            // No row points at the blob just placed: remove it rather than leave an orphan (the
            // start-up sweep removes it if this fails too).
            let _ = self.remove_if_unrowed(id);
            return Err(error);
        }
        outcome.ok_or_else(|| StoreError::Remote {
            what: "the upload",
            reason: "its transaction committed without an answer".to_owned(),
        })
    }

    fn lookup(&self, id: &SnapshotId) -> Result<Lookup, StoreError> {
        self.classify(self.metadata.row(id)?)
    }

    fn listing(&self) -> Result<Listing, StoreError> {
        let rows = self.metadata.live_rows()?;
        // One listing of the blobs rather than a question per row (a round trip each, for
        // object storage). Rows first: a blob purged in between is reported missing once,
        // where the other order would report a fresh upload missing.
        let stored: HashSet<SnapshotId> = if rows.is_empty() {
            HashSet::new()
        } else {
            self.blobs
                .entries()?
                .into_iter()
                .filter_map(|entry| entry.id)
                .collect()
        };
        let mut listing = Listing::default();
        for row in rows {
            let record = match row.decode() {
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
            if !stored.contains(&record.id) {
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
        self.metadata.has_size(size_bytes)
    }

    fn delete(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError> {
        self.move_in_trash(id, actor, trash::TrashMove::Delete)
    }

    fn restore(&self, id: &SnapshotId, actor: Option<&str>) -> Result<Lookup, StoreError> {
        self.move_in_trash(id, actor, trash::TrashMove::Restore)
    }

    fn rename(&self, id: &SnapshotId, name: &str, actor: Option<&str>) -> Answer {
        let field: fn(&mut Record) -> &mut String = |record| &mut record.name;
        self.update_live(id, actor, "rename", name, field, Change::Name)
    }

    fn set_group(&self, id: &SnapshotId, group: &str, actor: Option<&str>) -> Answer {
        let field: fn(&mut Record) -> &mut String = |record| &mut record.group;
        self.update_live(id, actor, "group", group, field, Change::Group)
    }

    fn set_roles(
        &self,
        id: &SnapshotId,
        roles: Option<&str>,
        summary: &Json,
        actor: Option<&str>,
    ) -> Answer {
        self.write_live(id, &mut |tx, record| {
            // The rules and the summary they made change together, so the list never shows
            // one snapshot's roles by rules it no longer has.
            let change = Change::Roles {
                roles: roles.map(str::to_owned),
                summary: summary.clone(),
            };
            tx.update(id, &change)?;
            let action = if roles.is_some() {
                "set_roles"
            } else {
                "remove_roles"
            };
            let detail = serde_json::json!({
                "had_rules": record.roles.is_some(),
                "rules_bytes": roles.map(str::len),
            });
            tx.audit(actor, action, Some(id), &detail)?;
            record.roles = roles.map(str::to_owned);
            record.summary = summary.clone();
            Ok(())
        })
    }

    fn purge_trashed_before(
        &self,
        cutoff_ms: i64,
        actor: Option<&str>,
    ) -> Result<Purge, StoreError> {
        self.purge_trash_before(cutoff_ms, actor)
    }

    fn audit_log(&self, limit: usize, before: Option<i64>) -> Result<Vec<AuditEntry>, StoreError> {
        self.metadata.audit_log(limit, before)
    }

    fn record_refusals(
        &self,
        row: Option<i64>,
        actor: Option<&str>,
        detail: &Json,
    ) -> Result<i64, StoreError> {
        self.metadata.record_refusals(row, actor, detail)
    }

    fn blob_file(&self, id: &SnapshotId) -> Result<PathBuf, StoreError> {
        self.blobs.local(id)
    }

    fn index_path(&self, id: &SnapshotId) -> PathBuf {
        self.blobs.index_path(id)
    }

    fn fetch_index(&self, id: &SnapshotId) -> Result<bool, StoreError> {
        self.blobs.fetch_index(id)
    }

    fn publish_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.blobs.publish_index(id)
    }

    fn remove_index(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.blobs.remove_index(id)
    }

    fn temp_dir(&self) -> PathBuf {
        self.blobs.temp_dir()
    }

    fn try_lease(&self, name: &str, ttl: std::time::Duration) -> Result<bool, StoreError> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.metadata.try_lease(name, &self.holder, ttl_ms)
    }

    fn release_lease(&self, name: &str) -> Result<(), StoreError> {
        self.metadata.release_lease(name, &self.holder)
    }

    fn readiness(&self) -> Vec<(&'static str, Result<(), String>)> {
        vec![
            ("database", self.metadata.check().map_err(|e| e.to_string())),
            ("blobs", self.blobs.check().map_err(|e| e.to_string())),
        ]
    }

    fn kinds(&self) -> (&'static str, &'static str) {
        (self.metadata.kind(), self.blobs.kind())
    }
}
