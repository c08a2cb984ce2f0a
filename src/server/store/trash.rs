//! The trash: a delete only marks the row, a restore clears the mark, and a purge by age removes
//! the blob inside the transaction that removes the row (so a failing disk keeps the snapshot
//! in the trash for the next purge).

use super::audit::audit;
use super::blobs::remove_if_there;
use super::file::now_ms;
use super::*;
use rusqlite::params;

impl FileStore {
    pub(super) fn move_to_trash(
        &self,
        id: &SnapshotId,
        actor: Option<&str>,
    ) -> Result<Lookup, StoreError> {
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

    pub(super) fn restore_from_trash(
        &self,
        id: &SnapshotId,
        actor: Option<&str>,
    ) -> Result<Lookup, StoreError> {
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
