//! The trash: a delete only marks the row, a restore clears the mark, and a purge by age removes
//! the blob inside the transaction that removes the row (so a failing disk or an unreachable
//! bucket keeps the snapshot in the trash for the next purge).

use super::core::Snapshots;
use super::metadata::Change;
use super::*;

/// Which way a snapshot moves between the list and the trash.
#[derive(Debug, Clone, Copy)]
pub(super) enum TrashMove {
    /// A live snapshot (or one whose file is missing) into the trash.
    Delete,
    /// A trashed snapshot back into the list, if its file is still there.
    Restore,
}

impl Snapshots {
    /// Moves `id` into the trash or out of it, audited, and answers: for a delete where it stood
    /// before; for a restore where it stands after (`FileMissing` when its file is gone, and
    /// nothing changes). A snapshot that is not where the move starts from is left as it is,
    /// and its lookup answered.
    pub(super) fn move_in_trash(
        &self,
        id: &SnapshotId,
        actor: Option<&str>,
        move_: TrashMove,
    ) -> Result<Lookup, StoreError> {
        let mut answer = Lookup::Absent;
        self.metadata.write(&mut |tx| {
            let before = self.classify(tx.row(id)?)?;
            let (action, deleted_at_ms, after) = match (move_, before) {
                (TrashMove::Delete, before @ (Lookup::Live(_) | Lookup::FileMissing(_))) => {
                    ("delete", Some(now_ms()), before)
                }
                (TrashMove::Restore, Lookup::Trashed { record, .. }) => {
                    if !self.blobs.exists(id)? {
                        answer = Lookup::FileMissing(record);
                        return Ok(());
                    }
                    ("restore", None, Lookup::Live(record))
                }
                (_, unmoved) => {
                    answer = unmoved;
                    return Ok(());
                }
            };
            // Both moves answer with the snapshot's record.
            if let Lookup::Live(record) | Lookup::FileMissing(record) = &after {
                tx.update(id, &Change::DeletedAt(deleted_at_ms))?;
                tx.audit(
                    actor,
                    action,
                    Some(id),
                    &serde_json::json!({ "name": record.name }),
                )?;
            }
            answer = after;
            Ok(())
        })?;
        Ok(answer)
    }

    pub(super) fn purge_trash_before(
        &self,
        cutoff_ms: i64,
        actor: Option<&str>,
    ) -> Result<Purge, StoreError> {
        let mut purge = Purge::default();
        for id in self.metadata.trashed_before(cutoff_ms)? {
            let mut blob_error = None;
            let mut purged = false;
            let written = self.metadata.write(&mut |tx| {
                (blob_error, purged) = (None, false);
                // Restored, or purged by another replica, since the list was read: not due.
                let due = tx
                    .row(&id)?
                    .and_then(|row| row.deleted_at_ms)
                    .is_some_and(|deleted_at_ms| deleted_at_ms <= cutoff_ms);
                if !due {
                    return Ok(());
                }
                tx.remove(&id)?;
                tx.audit(actor, "purge", Some(&id), &serde_json::json!({}))?;
                // The blob goes inside the transaction: if it cannot, the row is rolled back
                // and the snapshot stays in the trash (listed nowhere, restorable) for the next
                // purge. Removing a blob already gone is fine, so a retried transaction, or a
                // commit that failed after the blob went, is purged by the next one.
                if let Err(error) = self.blobs.remove(&id) {
                    blob_error = Some(error.to_string());
                    return Err(error);
                }
                purged = true;
                Ok(())
            });
            match (written, blob_error) {
                (Err(_), Some(error)) => {
                    tracing::warn!(%id, %error, "cannot remove a trashed snapshot's file: kept in the trash");
                    purge.failed.push((id, error));
                }
                (Err(error), None) => return Err(error),
                (Ok(()), _) if purged => {
                    tracing::info!(%id, "purged from the trash");
                    purge.purged.push(id);
                }
                (Ok(()), _) => {}
            }
        }
        Ok(purge)
    }
}
