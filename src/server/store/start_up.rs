//! Start-up repairs of the [`Snapshots`]: the rows rebuilt from the blobs, orphan blobs swept,
//! unreadable summaries redone, the trash emptied by age, leftovers of interrupted work
//! removed. Written once over the two backends' traits, so every pair of backends is repaired
//! alike.

use super::blobs::BlobEntry;
use super::core::Snapshots;
use super::metadata::{Change, Tx};
use super::*;
use std::collections::HashSet;

impl Snapshots {
    /// Brings the blobs and the rows back in line after whatever happened while the server was
    /// down: rebuilds the rows from the blobs when asked (`--reindex`) or when there are none
    /// but blobs are stored; otherwise removes orphan blobs (a crash between a blob's put and
    /// its row) and summarises again rows whose summary is unreadable; empties the trash of
    /// what was deleted more than `trash_ms` ago; removes stored indexes whose blob is gone
    /// and what interrupted uploads and index writes left.
    pub fn start_up(
        &self,
        reindex: bool,
        trash_ms: i64,
        summarize: Summarize<'_>,
    ) -> Result<StartUpReport, StoreError> {
        let mut report = StartUpReport::default();
        let rows = self.metadata.count()?;
        let blobs = self.blobs.entries()?;
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
        // Orphan blobs were weighed above, holding the write lock for each (see `core.rs`):
        // the backend's sweep only takes the other leftovers.
        report.indexes_removed = self.blobs.sweep(&|_| false)?.1;
        Ok(report)
    }

    /// Indexes every blob again from its bytes. A row that exists keeps its name and group and
    /// gets a fresh summary; a blob without one gets its name and group from its last upload in
    /// the audit log, else its id. A blob that does not parse is reported and kept.
    fn reindex(
        &self,
        blobs: &[BlobEntry],
        summarize: Summarize<'_>,
        report: &mut StartUpReport,
    ) -> Result<(), StoreError> {
        let total = blobs.len();
        tracing::info!(blobs = total, "reindexing the stored snapshots");
        for (done, entry) in blobs.iter().enumerate() {
            let Some(id) = &entry.id else {
                report.unreadable_blobs.push((
                    PathBuf::from(&entry.location),
                    "not named by a snapshot id".into(),
                ));
                continue;
            };
            let summary = self
                .blobs
                .local(id)
                .map_err(|error| error.to_string())
                .and_then(|path| summarize(&path));
            let summary = match summary {
                Ok(summary) => summary,
                Err(error) => {
                    tracing::warn!(%id, %error, "a stored blob does not parse: kept, not indexed");
                    report
                        .unreadable_blobs
                        .push((PathBuf::from(&entry.location), error));
                    continue;
                }
            };
            let mut name = String::new();
            self.metadata.write(&mut |tx| {
                let known = tx.row(id)?;
                let (known_name, filename, group) = match &known {
                    Some(row) => (
                        row.record.name.clone(),
                        row.record.filename.clone(),
                        row.record.group.clone(),
                    ),
                    None => last_upload_names(tx, id)?,
                };
                tx.reindex(&Record {
                    id: id.clone(),
                    name: known_name.clone(),
                    filename,
                    size_bytes: entry.bytes,
                    uploaded_at_ms: entry.modified_ms,
                    group,
                    summary: summary.clone(),
                    roles: None,
                })?;
                tx.audit(
                    None,
                    "reindex",
                    Some(id),
                    &serde_json::json!({"name": known_name, "new_row": known.is_none()}),
                )?;
                name = known_name;
                Ok(())
            })?;
            report.reindexed += 1;
            tracing::info!(%id, name, "reindexed {}/{total}", done + 1);
        }
        Ok(())
    }

    /// Removes blobs that no row (live or trashed) points at. The rows are read once; each
    /// blob without one is weighed again, and removed, holding the write lock, so an upload
    /// of those bytes by another replica meanwhile keeps them.
    fn sweep_orphans(&self, blobs: &[BlobEntry]) -> Result<usize, StoreError> {
        let rowed: HashSet<SnapshotId> = self
            .metadata
            .all_summaries()?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut removed = 0;
        for id in blobs.iter().filter_map(|entry| entry.id.as_ref()) {
            if rowed.contains(id) {
                continue;
            }
            match self.remove_if_unrowed(id) {
                Ok(true) => {
                    tracing::info!(%id, "removed an orphan blob (an upload a crash interrupted)");
                    removed += 1;
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(%id, %error, "cannot remove an orphan blob"),
            }
        }
        Ok(removed)
    }

    /// Summarises again every row whose stored summary does not parse, from its blob.
    fn repair_summaries(&self, summarize: Summarize<'_>) -> Result<usize, StoreError> {
        let mut repaired = 0;
        for (id, summary) in self.metadata.all_summaries()? {
            if serde_json::from_str::<serde_json::Value>(&summary).is_ok() {
                continue;
            }
            let summary = self
                .blobs
                .local(&id)
                .map_err(|error| error.to_string())
                .and_then(|path| summarize(&path));
            match summary {
                Ok(summary) => {
                    let change = Change::Summary(summary);
                    self.metadata.write(&mut |tx| {
                        tx.update(&id, &change)?;
                        Ok(())
                    })?;
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

/// The name, file name and group an id's last upload had, from the audit log; the id itself
/// when the log has none.
fn last_upload_names(
    tx: &mut dyn Tx,
    id: &SnapshotId,
) -> Result<(String, String, String), StoreError> {
    let detail: serde_json::Value = tx
        .last_upload_detail(id)?
        .and_then(|d| serde_json::from_str(&d).ok())
        .unwrap_or_default();
    let text = |key: &str| detail[key].as_str().map(str::to_owned);
    Ok((
        text("name").unwrap_or_else(|| id.to_string()),
        text("filename").unwrap_or_else(|| format!("{id}.pickle")),
        text("group").unwrap_or_default(),
    ))
}
