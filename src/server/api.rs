//! The JSON API over stored snapshots.

use super::AppState;
use super::access::Actor;
use super::error::{ApiError, blocking};
use super::extract::{
    LoadedSnapshot, StoredSnapshot, default_device, edit_refused, not_live, parse_id,
};
use super::store::{Lookup, SnapshotId, Store, StoreError};
use super::wire::{AuditLog, LoadStatus, SnapshotDetail, SnapshotList, SnapshotView};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

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
    let encoded = percent_encoding::utf8_percent_encode(filename, RFC_5987_ATTR_CHAR);
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

/// What `filename*=` percent-encodes: every byte but RFC 5987's attr-char (letters, digits and
/// ``!#$&+-.^_`|~``).
const RFC_5987_ATTR_CHAR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// Who made the request, for the audit log (set by the access layer, when there is one).
pub(super) fn actor_name(actor: Option<Extension<Actor>>) -> Option<String> {
    actor.and_then(|Extension(Actor(name))| name)
}

/// `GET /api/snapshots`: every snapshot, newest first.
pub async fn list(State(state): State<AppState>) -> Result<Json<SnapshotList>, ApiError> {
    let store = state.store.clone();
    let listing = blocking(move || store.listing()).await??;
    Ok(Json(SnapshotList {
        snapshots: listing
            .records
            .iter()
            .map(|r| SnapshotView::new(r, &state.config.public_url))
            .collect(),
        unlisted: listing.unlisted,
    }))
}

/// `GET /api/snapshots/{id}`: the full summary.
pub async fn get(
    State(state): State<AppState>,
    snapshot: LoadedSnapshot,
) -> Result<Json<SnapshotDetail>, ApiError> {
    let loaded = &snapshot.loaded;
    Ok(Json(SnapshotDetail {
        view: SnapshotView::new(&snapshot.stored.record, &state.config.public_url),
        analysis: loaded.summary.clone(),
        allocator_settings: loaded.snapshot.allocator_settings.clone(),
        external_annotations: loaded.snapshot.external_annotations.len(),
        default_device: default_device(loaded).map_or(0, |d| d.device),
    }))
}

/// `GET /api/snapshots/{id}/status`: whether the snapshot is parsed, and how far its parse is;
/// starts the parse (in the background, once however often asked) when it is not in memory.
pub async fn status(
    State(state): State<AppState>,
    snapshot: StoredSnapshot,
) -> Result<Json<LoadStatus>, ApiError> {
    Ok(Json(match snapshot.ready_or_start(&state)? {
        Ok(_) => LoadStatus::Ready,
        Err(progress) => progress.into(),
    }))
}

/// `GET /api/snapshots/{id}/raw`: the original file, streamed.
pub async fn raw(
    State(state): State<AppState>,
    StoredSnapshot { id, record }: StoredSnapshot,
) -> Result<Response, ApiError> {
    let store = state.store.clone();
    let target = id.clone();
    // Remote blobs are fetched into the local cache first.
    let path = super::error::blocking(move || store.blob_file(&target)).await??;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ApiError::internal(format!("opening the stored file of {id}"), e))?;
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

/// A trash operation of the store (delete or restore), by `actor`.
type TrashOperation = fn(&dyn Store, &SnapshotId, Option<&str>) -> Result<Lookup, StoreError>;

/// Runs `operation` on the snapshot `id` names, on a blocking thread; where it stood (before a
/// delete, after a restore).
async fn trash_write(
    state: &AppState,
    actor: Option<Extension<Actor>>,
    id: &str,
    operation: TrashOperation,
) -> Result<(SnapshotId, Lookup), ApiError> {
    let id = parse_id(id)?;
    let store = state.store.clone();
    let target = id.clone();
    let actor = actor_name(actor);
    let lookup = blocking(move || operation(store.as_ref(), &target, actor.as_deref())).await??;
    Ok((id, lookup))
}

/// `DELETE /api/snapshots/{id}`: moves it to the trash (restorable for `--trash-days`).
pub async fn delete(
    State(state): State<AppState>,
    actor: Option<Extension<Actor>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (id, before) = trash_write(&state, actor, &id, |store, id, actor| {
        store.delete(id, actor)
    })
    .await?;
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
    let (id, now) = trash_write(&state, actor, &id, |store, id, actor| {
        store.restore(id, actor)
    })
    .await?;
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
    StoredSnapshot { id, .. }: StoredSnapshot,
    Json(patch): Json<Patch>,
) -> Result<Json<SnapshotView>, ApiError> {
    let name = patch
        .name
        .as_deref()
        .map(|name| clean_label("name", name))
        .transpose()?;
    let group = patch.group.as_deref().map(clean_group).transpose()?;
    let store = state.store.clone();
    let target = id.clone();
    let actor = actor_name(actor);
    let outcome = blocking(move || {
        let actor = actor.as_deref();
        // A delete and a restore may both land between the check above and this write (or
        // between the name and the group): the edit then applies to the snapshot as it is
        // now, a bounded number of times, or answers what happened (never 404 for a live one).
        for _ in 0..EDIT_TRIES {
            let mut record = None;
            let mut applied = true;
            if let Some(name) = &name {
                record = store.rename(&target, name, actor)?;
                applied = record.is_some();
            }
            if applied && let Some(group) = &group {
                record = store.set_group(&target, group, actor)?;
                applied = record.is_some();
            }
            if applied && let Some(record) = record {
                return Ok(Ok(record));
            }
            match store.lookup(&target)? {
                // No field to change: the snapshot as it is.
                Lookup::Live(record) if applied => return Ok(Ok(record)),
                // Restored since the write found it deleted: again, on the snapshot as it is.
                Lookup::Live(_) => continue,
                other => return Ok(Err(other)),
            }
        }
        Ok::<_, StoreError>(Err(store.lookup(&target)?))
    })
    .await??;
    match outcome {
        Ok(updated) => Ok(Json(SnapshotView::new(&updated, &state.config.public_url))),
        Err(now) => Err(edit_refused(&state, &id, now)),
    }
}

/// Tries of an edit whose snapshot is deleted and restored again under it.
const EDIT_TRIES: usize = 3;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    pub limit: Option<String>,
    /// The `next` of the previous page: entries older than this `seq`.
    pub before: Option<String>,
}

/// Entries `GET /api/audit` returns unless `?limit=` says otherwise, and the most it returns.
const AUDIT_DEFAULT_LIMIT: usize = 100;
const AUDIT_MAX_LIMIT: usize = 10_000;

/// `GET /api/audit?limit=N&before=SEQ`: the newest writes first (who, what, when), read-only,
/// a page at a time: `next` is the `before` of the next (older) page, `null` after the last.
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
    let before = match query.before.as_deref() {
        None => None,
        Some(text) => Some(text.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "before {text:?} must be an entry's seq (a number from 1 up): the `next` of the previous page"
            ))
        })?),
    };
    let store = state.store.clone();
    // One more than asked says whether an older page exists.
    let mut entries = blocking(move || store.audit_log(limit + 1, before)).await??;
    let next = if entries.len() > limit {
        entries.truncate(limit);
        entries.last().map(|entry| entry.seq)
    } else {
        None
    };
    Ok(Json(AuditLog { entries, next }))
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
