//! The JSON API over stored snapshots.

use super::AppState;
use super::cache::Loaded;
use super::error::ApiError;
use super::store::{Record, SnapshotId};
use crate::analysis::Summary;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A stored snapshot as the API lists it: its record, and the page to share.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotView {
    #[serde(flatten)]
    pub record: Record,
    /// The page to share.
    pub url: String,
}

impl SnapshotView {
    pub fn new(record: &Record, public_url: &str) -> Self {
        Self {
            record: record.clone(),
            url: format!("{public_url}/s/{}", record.id),
        }
    }
}

/// The short summary stored with each snapshot, so the list needs no parsing.
pub fn summary_row(summary: &Summary) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = summary
        .devices
        .iter()
        .map(|d| {
            serde_json::json!({
                "device": d.device,
                "trace_entries": d.trace_entries,
                "peak_allocated_bytes": d.peak_allocated_bytes,
                "peak_reserved_bytes": d.peak_reserved_bytes,
                "reserved_bytes_at_snapshot": d.reserved_bytes_at_snapshot,
                "oom_events": d.oom_events.len(),
                "top_stack": d.top_stacks_at_peak.first().and_then(|s| s.frames.first()),
            })
        })
        .collect();
    serde_json::json!({
        "devices": devices,
        "peak_allocated_bytes": summary.devices.iter().map(|d| d.peak_allocated_bytes).max().unwrap_or(0),
        "peak_reserved_bytes": summary.devices.iter().map(|d| d.peak_reserved_bytes).max().unwrap_or(0),
        "oom_events": summary.devices.iter().map(|d| d.oom_events.len()).sum::<usize>(),
        "notes": summary.notes.iter().map(|n| n.code).collect::<Vec<_>>(),
    })
}

pub fn parse_id(text: &str) -> Result<SnapshotId, ApiError> {
    SnapshotId::parse(text).ok_or_else(|| ApiError::BadId(text.chars().take(64).collect()))
}

/// The stored record of `id`, or 404.
pub async fn record(state: &AppState, id: &SnapshotId) -> Result<Record, ApiError> {
    let store = state.store.clone();
    let lookup = id.clone();
    tokio::task::spawn_blocking(move || store.get(&lookup))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??
        .ok_or_else(|| ApiError::NotFound(id.to_string()))
}

/// The parsed and analysed snapshot `id`, from the cache or parsed now.
pub async fn loaded(state: &AppState, id: &SnapshotId) -> Result<Arc<Loaded>, ApiError> {
    record(state, id).await?;
    let path = state.store.blob_path(id);
    state
        .cache
        .get_or_load(id, move || {
            crate::snapshot::load_path(&path, Default::default())
                .map(Loaded::new)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(ApiError::Internal)
}

#[derive(Serialize)]
pub struct SnapshotList {
    pub snapshots: Vec<SnapshotView>,
}

/// `GET /api/snapshots`: every snapshot, newest first.
pub async fn list(State(state): State<AppState>) -> Result<Json<SnapshotList>, ApiError> {
    let store = state.store.clone();
    let records = tokio::task::spawn_blocking(move || store.list())
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    Ok(Json(SnapshotList {
        snapshots: records
            .iter()
            .map(|r| SnapshotView::new(r, &state.config.public_url))
            .collect(),
    }))
}

#[derive(Serialize)]
pub struct SnapshotDetail {
    #[serde(flatten)]
    pub view: SnapshotView,
    /// The full summary: per device peaks, totals, OOM events, top stacks; notes; source.
    pub analysis: Summary,
    pub allocator_settings: serde_json::Value,
    pub external_annotations: usize,
}

/// `GET /api/snapshots/{id}`: the full summary.
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SnapshotDetail>, ApiError> {
    let id = parse_id(&id)?;
    let record = record(&state, &id).await?;
    let loaded = loaded(&state, &id).await?;
    Ok(Json(SnapshotDetail {
        view: SnapshotView::new(&record, &state.config.public_url),
        analysis: loaded.summary.clone(),
        allocator_settings: loaded.snapshot.allocator_settings.clone(),
        external_annotations: loaded.snapshot.external_annotations.len(),
    }))
}

/// `GET /api/snapshots/{id}/raw`: the original file, streamed.
pub async fn raw(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let record = record(&state, &id).await?;
    let file = tokio::fs::File::open(state.store.blob_path(&id))
        .await
        .map_err(|e| ApiError::Internal(format!("the stored file is unreadable: {e}")))?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, record.size_bytes.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", record.filename),
            ),
        ],
        body,
    )
        .into_response())
}

/// `DELETE /api/snapshots/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    let store = state.store.clone();
    let target = id.clone();
    let deleted = tokio::task::spawn_blocking(move || store.delete(&target))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    state.cache.remove(&id);
    if deleted {
        tracing::info!(%id, "snapshot deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(id.to_string()))
    }
}

#[derive(Debug, Deserialize)]
pub struct Patch {
    pub name: Option<String>,
    pub group: Option<String>,
}

/// `PATCH /api/snapshots/{id}` with `{"name": "..."}` and/or `{"group": "..."}`.
pub async fn patch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(patch): Json<Patch>,
) -> Result<Json<SnapshotView>, ApiError> {
    let id = parse_id(&id)?;
    record(&state, &id).await?;
    if let Some(name) = &patch.name {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 200 {
            return Err(ApiError::BadRequest(
                "a name must have 1 to 200 characters".into(),
            ));
        }
    }
    let store = state.store.clone();
    let target = id.clone();
    let updated = tokio::task::spawn_blocking(move || {
        let mut record = None;
        if let Some(name) = patch.name {
            record = store.rename(&target, name.trim())?;
        }
        if let Some(group) = patch.group {
            record = store.set_group(&target, group.trim())?;
        }
        match record {
            Some(record) => Ok(Some(record)),
            None => store.get(&target),
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??
    .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
    Ok(Json(SnapshotView::new(&updated, &state.config.public_url)))
}
