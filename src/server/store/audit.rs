//! The audit log: one row per write, appended inside the write's own transaction; and the rows
//! of refused writes, one per client address and minute (`server::refusals`).
//!
//! Plain functions over a connection: the store (`file.rs`) holds the connection and its lock,
//! and calls these with it, so this file knows nothing of the store.

use super::{AuditEntry, MAX_REFUSED_ROWS, SnapshotId, StoreError, now_ms};
use rusqlite::{Connection, params};

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

/// The newest `limit` entries older than `before` (a `seq`; `None`: the newest), newest first.
pub(super) fn read(
    db: &Connection,
    limit: usize,
    before: Option<i64>,
) -> Result<Vec<AuditEntry>, StoreError> {
    let mut statement = db.prepare(
        "SELECT seq, at_ms, actor, action, snapshot_id, detail FROM audit
             WHERE seq < ?2 ORDER BY seq DESC LIMIT ?1",
    )?;
    let before = before.unwrap_or(i64::MAX);
    let rows = statement.query_map(params![limit as i64, before], |row| {
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

/// Writes the refused writes' row `row` (a `seq`), or a new one when it is `None` or was pruned,
/// keeping only the newest [`MAX_REFUSED_ROWS`]; returns the row's `seq`.
pub(super) fn write_refusals(
    db: &mut Connection,
    row: Option<i64>,
    actor: Option<&str>,
    detail: &serde_json::Value,
) -> Result<i64, StoreError> {
    let detail = serde_json::to_string(detail)?;
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
    let tx = db.transaction()?;
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
