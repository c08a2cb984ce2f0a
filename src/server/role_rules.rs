//! A snapshot's own role rules (`PUT/GET/DELETE /api/snapshots/{id}/rules`, docs/roles.md): they
//! replace the server's (`serve --roles`) for that snapshot only, in every view and the list.
//!
//! Setting or removing them analyses the snapshot again with the rules that now apply before
//! anything is stored, so a file that cannot be used changes nothing, and the stored summary
//! row (the list, compare) and the cached analysis (the views) agree with the stored rules.

use super::AppState;
use super::access::Actor;
use super::api::actor_name;
use super::cache::Loaded;
use super::error::{ApiError, blocking};
use super::extract::{StoredSnapshot, edit_refused, lookup};
use super::wire::{SnapshotView, SummaryRow};
use crate::analysis::roles::UserRules;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use std::sync::Arc;

/// `GET`: the snapshot's rules file as it was sent; an empty body when it has none (the
/// server's rules apply).
pub async fn get_rules(stored: StoredSnapshot) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        stored.record.roles.unwrap_or_default(),
    )
        .into_response()
}

/// `PUT` with the rules file (TOML or JSON) as the body: 400 with the parser's message when it
/// is not a valid rules file, and then nothing changes.
pub async fn put_rules(
    State(state): State<AppState>,
    actor: Option<Extension<Actor>>,
    stored: StoredSnapshot,
    body: String,
) -> Result<Json<SnapshotView>, ApiError> {
    let rules =
        UserRules::parse(&body).map_err(|e| ApiError::BadRequest(format!("rules file: {e}")))?;
    replace_rules(state, actor, stored, Some(body), Arc::new(rules)).await
}

/// `DELETE`: back to the server's rules.
pub async fn delete_rules(
    State(state): State<AppState>,
    actor: Option<Extension<Actor>>,
    stored: StoredSnapshot,
) -> Result<Json<SnapshotView>, ApiError> {
    let rules = state.config.roles.clone();
    replace_rules(state, actor, stored, None, rules).await
}

async fn replace_rules(
    state: AppState,
    actor: Option<Extension<Actor>>,
    StoredSnapshot { id, .. }: StoredSnapshot,
    text: Option<String>,
    rules: Arc<UserRules>,
) -> Result<Json<SnapshotView>, ApiError> {
    let path = state.store.blob_path(&id);
    let index = state.store.index_path(&id);
    let target = id.clone();
    // From the stored index when it is there (its summary is made again with these rules).
    let loaded = blocking(move || {
        super::stored_index::load(&target, &path, &index, &rules, || {
            crate::analysis::load_path(&path, Default::default())
                .map(|parsed| Loaded::new(parsed, &rules))
                .map_err(|e| e.to_string())
        })
    })
    .await?
    .map_err(|e| ApiError::Internal(format!("snapshot {id}: {e}")))?;
    let summary = SummaryRow::new(&loaded.summary).to_stored();
    let store = state.store.clone();
    let target = id.clone();
    let actor = actor_name(actor);
    let updated =
        blocking(move || store.set_roles(&target, text.as_deref(), &summary, actor.as_deref()))
            .await??;
    let Some(updated) = updated else {
        // Deleted between the check and the write.
        return Err(edit_refused(&state, &id, lookup(&state, &id).await?));
    };
    // The analysis by the old rules goes; the new one is ready for the next view.
    state.cache.remove(&id);
    state.cache.insert(&id, Arc::new(loaded));
    Ok(Json(SnapshotView::new(&updated, &state.config.public_url)))
}
