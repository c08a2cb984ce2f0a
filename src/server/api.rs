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

/// Most characters a name or group may have.
pub const LABEL_MAX_CHARS: usize = 200;

/// The one rule for a snapshot's `name` and `group`, wherever they come from (upload query,
/// PATCH): trimmed, not empty, at most [`LABEL_MAX_CHARS`] characters, no control characters
/// (they would break the list's layout, the log's lines and the headers names end up in).
pub fn clean_label(field: &str, value: &str) -> Result<String, ApiError> {
    let trimmed = value.trim();
    let chars = trimmed.chars().count();
    if chars == 0 {
        return Err(ApiError::BadRequest(format!("the {field} is empty")));
    }
    if chars > LABEL_MAX_CHARS {
        return Err(ApiError::BadRequest(format!(
            "the {field} has {chars} characters; at most {LABEL_MAX_CHARS} are allowed"
        )));
    }
    if let Some(control) = trimmed.chars().find(|c| c.is_control()) {
        return Err(ApiError::BadRequest(format!(
            "the {field} contains the control character U+{:04X}",
            u32::from(control)
        )));
    }
    Ok(trimmed.to_owned())
}

/// A group by [`clean_label`]'s rule, except that an empty (or blank) group is allowed: it
/// means "in no group", which is how the list's dialog takes a snapshot out of its group.
pub fn clean_group(value: &str) -> Result<String, ApiError> {
    if value.trim().is_empty() {
        Ok(String::new())
    } else {
        clean_label("group", value)
    }
}

/// A `Content-Disposition` for downloading `filename`: an ASCII `filename="..."` for old
/// clients (quotes, backslashes and anything not printable ASCII become `_`) and, per RFC 6266
/// and RFC 5987, `filename*=UTF-8''...` with the exact name percent-encoded.
pub fn attachment_disposition(filename: &str) -> String {
    let fallback: String = filename
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() && c != '"' && c != '\\') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::with_capacity(filename.len());
    for byte in filename.bytes() {
        // RFC 5987's attr-char: these go as they are, every other byte percent-encoded.
        if byte.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
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
        // The cause (which may name a server path) goes to the log, with the snapshot it
        // concerns; the client gets a generic 500.
        .map_err(|e| ApiError::Internal(format!("snapshot {id}: {e}")))
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
        .map_err(|e| ApiError::Internal(format!("the stored file of {id} is unreadable: {e}")))?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, record.size_bytes.to_string()),
            (
                header::CONTENT_DISPOSITION,
                attachment_disposition(&record.filename),
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
    let name = patch
        .name
        .as_deref()
        .map(|name| clean_label("name", name))
        .transpose()?;
    let group = patch.group.as_deref().map(clean_group).transpose()?;
    let store = state.store.clone();
    let target = id.clone();
    let actor = actor_name(actor);
    let updated = tokio::task::spawn_blocking(move || {
        let actor = actor.as_deref();
        let mut record = None;
        if let Some(name) = name {
            record = store.rename(&target, &name, actor)?;
        }
        if let Some(group) = group {
            record = store.set_group(&target, &group, actor)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_groups_follow_one_rule() {
        assert_eq!(clean_label("name", "  run 42 ").expect("ok"), "run 42");
        assert_eq!(
            clean_label("name", "ünïcødé 名前").expect("ok"),
            "ünïcødé 名前"
        );
        let longest = "é".repeat(LABEL_MAX_CHARS);
        assert_eq!(clean_label("name", &longest).expect("ok"), longest);
        for bad in [
            "",
            "   ",
            "a\nb",
            "tab\there",
            "nul\0",
            "esc\u{1b}[31m",
            "del\u{7f}",
        ] {
            let error = clean_label("name", bad).expect_err(bad);
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad:?}");
            assert!(error.to_string().contains("name"), "{error}");
        }
        let too_long = clean_label("group", &"x".repeat(LABEL_MAX_CHARS + 1)).expect_err("long");
        assert!(
            too_long.to_string().contains("201 characters"),
            "{too_long}"
        );
        // A group may be cleared; otherwise it follows the same rule.
        assert_eq!(clean_group("  ").expect("clear"), "");
        assert_eq!(clean_group(" job42 ").expect("ok"), "job42");
        assert!(clean_group("a\rb").is_err());
    }

    #[test]
    fn download_names_are_encoded_for_old_and_new_clients() {
        assert_eq!(
            attachment_disposition("run.pickle"),
            "attachment; filename=\"run.pickle\"; filename*=UTF-8''run.pickle"
        );
        assert_eq!(
            attachment_disposition("my \"best\" run€.pickle"),
            "attachment; filename=\"my _best_ run_.pickle\"; filename*=UTF-8''my%20%22best%22%20run%E2%82%AC.pickle"
        );
        assert_eq!(
            attachment_disposition("a\\b;c.pickle"),
            "attachment; filename=\"a_b;c.pickle\"; filename*=UTF-8''a%5Cb%3Bc.pickle"
        );
    }
}
