//! Start-up repairs of a [`FileStore`]: the index rebuilt from the blobs, orphan blobs swept,
//! unreadable summaries redone, the trash emptied by age.

use super::audit::audit;
use super::file::FileStore;
use super::*;
use rusqlite::{Connection, OptionalExtension, params};

impl FileStore {
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
        report.indexes_removed = self.sweep_indexes()?;
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
                    "INSERT INTO snapshots ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL)
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
                    tracing::warn!(%id, %error, "a row's summary is unreadable and so is its blob");
                }
            }
        }
        Ok(repaired)
    }
}
