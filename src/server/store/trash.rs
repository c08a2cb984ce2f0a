//! The trash: a delete only marks the row, a restore clears the mark, and a purge by age removes
//! the blob inside the transaction that removes the row (so a failing disk keeps the snapshot
//! in the trash for the next purge).

use super::audit::audit;
use super::file::set_audited;
use super::file_blobs::remove_if_there;
use super::*;
use rusqlite::params;

/// Which way a snapshot moves between the list and the trash.
#[derive(Debug, Clone, Copy)]
pub(super) enum TrashMove {
    /// A live snapshot (or one whose file is missing) into the trash.
    Delete,
    /// A trashed snapshot back into the list, if its file is still there.
    Restore,
}

impl FileStore {
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
        let mut db = self.db();
        let before = self.lookup_locked(&db, id)?;
        let (action, deleted_at_ms, answer) = match (move_, before) {
            (TrashMove::Delete, before @ (Lookup::Live(_) | Lookup::FileMissing(_))) => {
                ("delete", Some(now_ms()), before)
            }
            (TrashMove::Restore, Lookup::Trashed { record, .. }) => {
                if !self.blob_path(id).is_file() {
                    return Ok(Lookup::FileMissing(record));
                }
                ("restore", None, Lookup::Live(record))
            }
            (_, unmoved) => return Ok(unmoved),
        };
        // Both moves answer with the snapshot's record.
        let (Lookup::Live(record) | Lookup::FileMissing(record)) = &answer else {
            return Ok(answer);
        };
        let detail = serde_json::json!({ "name": record.name });
        set_audited(
            &mut db,
            id,
            "deleted_at_ms",
            &deleted_at_ms,
            actor,
            action,
            &detail,
        )?;
        Ok(answer)
    }

    pub(super) fn purge_trash_before(
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
                    // Derived from the blob just removed; a failure leaves it to start-up's sweep.
                    let _ = remove_if_there(&self.index_path(&id));
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
}
