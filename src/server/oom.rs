//! Explaining a snapshot's OOMs: one report per `oom` event.

use super::error::{ApiError, blocking};
use super::extract::LoadedSnapshot;
use crate::analysis::oom::{OomReport, oom_reports};
use axum::Json;

/// `GET /api/snapshots/{id}/oom`: one report per `oom` event, per device.
pub async fn oom(snapshot: LoadedSnapshot) -> Result<Json<Vec<OomReport>>, ApiError> {
    let loaded = snapshot.loaded;
    let reports = blocking(move || {
        loaded
            .analysis
            .devices
            .iter()
            .flat_map(|device| oom_reports(&loaded.snapshot, device))
            .collect::<Vec<_>>()
    })
    .await?;
    Ok(Json(reports))
}
