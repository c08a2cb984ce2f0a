//! The audit log: one row per write, appended inside the write's own transaction.

use super::file::now_ms;
use super::*;
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

impl FileStore {
    pub(super) fn read_audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
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
}
