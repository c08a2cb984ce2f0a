//! The JSON API over stored snapshots.

use super::AppState;
use super::access::Actor;
use super::cache::Loaded;
use super::error::ApiError;
use super::store::{AuditEntry, Lookup, Record, SnapshotId, Unlisted};
use crate::analysis::Summary;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
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

/// Where `id` stands in the store, read on a blocking thread.
async fn lookup(state: &AppState, id: &SnapshotId) -> Result<Lookup, ApiError> {
    let store = state.store.clone();
    let target = id.clone();
    Ok(tokio::task::spawn_blocking(move || store.lookup(&target))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??)
}

/// The error for a snapshot that is not live: 404 when it was never here (or is purged), 410
/// with what to do when it is in the trash or its file is lost.
fn not_live(state: &AppState, id: &SnapshotId, lookup: Lookup) -> ApiError {
    match lookup {
        Lookup::Trashed { record, .. } => ApiError::Gone(format!(
            "snapshot {id} ({}) was deleted: it stays in the trash for {} days after its deletion and can be restored until then (Undo on the list, or POST /api/snapshots/{id}/restore)",
            record.name, state.config.trash_days
        )),
        Lookup::FileMissing(record) => ApiError::Gone(format!(
            "the stored file of snapshot {id} ({}) is missing from the server's disk; upload the same file again to repair it",
            record.name
        )),
        Lookup::Live(_) | Lookup::Absent => ApiError::NotFound(id.to_string()),
    }
}

/// The stored record of a live, readable snapshot `id`; else 404 or 410.
pub async fn record(state: &AppState, id: &SnapshotId) -> Result<Record, ApiError> {
    match lookup(state, id).await? {
        Lookup::Live(record) => Ok(record),
        other => Err(not_live(state, id, other)),
    }
}

/// Who made the request, for the audit log (set by the access layer, when there is one).
fn actor_name(actor: Option<Extension<Actor>>) -> Option<String> {
    actor.and_then(|Extension(Actor(name))| name)
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
    /// Rows that could not be listed (an unreadable summary, a lost file) and why; omitted when
    /// there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<Unlisted>,
}

/// `GET /api/snapshots`: every snapshot, newest first.
pub async fn list(State(state): State<AppState>) -> Result<Json<SnapshotList>, ApiError> {
    let store = state.store.clone();
    let listing = tokio::task::spawn_blocking(move || store.listing())
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    Ok(Json(SnapshotList {
        snapshots: listing
            .records
            .iter()
            .map(|r| SnapshotView::new(r, &state.config.public_url))
            .collect(),
        unlisted: listing.unlisted,
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

/// `DELETE /api/snapshots/{id}`: moves it to the trash (restorable for `--trash-days`).
pub async fn delete(
    State(state): State<AppState>,
    actor: Option<Extension<Actor>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    let store = state.store.clone();
    let target = id.clone();
    let actor = actor_name(actor);
    let before = tokio::task::spawn_blocking(move || store.delete(&target, actor.as_deref()))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    match before {
        Lookup::Live(_) | Lookup::FileMissing(_) => {
            state.cache.remove(&id);
            tracing::info!(%id, "snapshot moved to the trash");
            Ok(StatusCode::NO_CONTENT)
        }
        other => Err(not_live(&state, &id, other)),
    }
}

/// `POST /api/snapshots/{id}/restore`: brings a deleted snapshot back from the trash (a live one
/// answers as it is, so a second Undo is harmless).
pub async fn restore(
    State(state): State<AppState>,
    actor: Option<Extension<Actor>>,
    Path(id): Path<String>,
) -> Result<Json<SnapshotView>, ApiError> {
    let id = parse_id(&id)?;
    let store = state.store.clone();
    let target = id.clone();
    let actor = actor_name(actor);
    let now = tokio::task::spawn_blocking(move || store.restore(&target, actor.as_deref()))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    match now {
        Lookup::Live(record) => {
            tracing::info!(%id, "snapshot restored from the trash");
            Ok(Json(SnapshotView::new(&record, &state.config.public_url)))
        }
        other => Err(not_live(&state, &id, other)),
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
    actor: Option<Extension<Actor>>,
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
    let actor = actor_name(actor);
    let updated = tokio::task::spawn_blocking(move || {
        let actor = actor.as_deref();
        let mut record = None;
        if let Some(name) = patch.name {
            record = store.rename(&target, name.trim(), actor)?;
        }
        if let Some(group) = patch.group {
            record = store.set_group(&target, group.trim(), actor)?;
        }
        match record {
            Some(record) => Ok(Some(record)),
            None => store.get(&target),
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))??;
    match updated {
        Some(updated) => Ok(Json(SnapshotView::new(&updated, &state.config.public_url))),
        // Deleted between the check and the write.
        None => Err(not_live(&state, &id, lookup(&state, &id).await?)),
    }
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    pub limit: Option<String>,
}

#[derive(Serialize)]
pub struct AuditLog {
    pub entries: Vec<AuditEntry>,
}

/// Entries `GET /api/audit` returns unless `?limit=` says otherwise, and the most it returns.
const AUDIT_DEFAULT_LIMIT: usize = 100;
const AUDIT_MAX_LIMIT: usize = 10_000;

/// `GET /api/audit?limit=N`: the newest writes first (who, what, when), read-only.
pub async fn audit(
    State(state): State<AppState>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditLog>, ApiError> {
    let limit = match query.limit.as_deref() {
        None => AUDIT_DEFAULT_LIMIT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=AUDIT_MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit {text:?} must be a number from 1 to {AUDIT_MAX_LIMIT}"
                ))
            })?,
    };
    let store = state.store.clone();
    let entries = tokio::task::spawn_blocking(move || store.audit_log(limit))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    Ok(Json(AuditLog { entries }))
}
