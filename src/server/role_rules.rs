//! A snapshot's own role rules (`PUT/GET/DELETE /api/snapshots/{id}/rules`, docs/roles.md): they
//! replace the server's (`serve --roles`) for that snapshot only, in every view and the list.
//!
//! Setting or removing them analyses the snapshot again with the rules that now apply before
//! anything is stored, so a file that cannot be used changes nothing, and the stored summary
//! row (the list, compare) and the cached analysis (the views) agree with the stored rules.

use super::AppState;
use super::access::Actor;
use super::analysed::AnalysedSnapshot;
use super::api::actor_name;
use super::error::{ApiError, blocking};
use super::extract::{StoredSnapshot, edit_refused, lookup, not_live};
use super::store::{Lookup, Record, SnapshotId};
use super::stored_index::ColdLoad;
use super::wire::{SnapshotView, SummaryRow};
use crate::analysis::roles::UserRules;
use crate::snapshot::{LoadError, LoadOptions};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;

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
    // Off the async workers: a hostile file costs this thread's time, not the server's
    // (its nesting is bounded before the parser recurses, see `UserRules::parse`).
    let (body, parsed) = blocking(move || {
        let parsed = UserRules::parse(&body);
        (body, parsed)
    })
    .await?;
    let rules = parsed.map_err(|e| ApiError::BadRequest(format!("rules file: {e}")))?;
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

/// Sets (`text` and its parsed `rules`) or removes (`None`, the server's rules) a snapshot's
/// rules: analyses it again with them, then stores both. Queued per snapshot (see
/// [`RulesQueue`]): one re-analysis of a snapshot runs at a time, and a change that a newer one
/// for the same snapshot overtook while it waited is not analysed at all; it waits for the
/// newer one and answers the snapshot as that left it.
async fn replace_rules(
    state: AppState,
    actor: Option<Extension<Actor>>,
    StoredSnapshot { id, record }: StoredSnapshot,
    text: Option<String>,
    rules: Arc<UserRules>,
) -> Result<Json<SnapshotView>, ApiError> {
    let place = state.rules_queue.enter(&id);
    let turn = place.turn.running.lock().await;
    if place.superseded() {
        drop(turn);
        place.newer_finished().await;
        return match lookup(&state, &id).await? {
            Lookup::Live(record) => Ok(Json(SnapshotView::new(&record, &state.config.public_url))),
            other => Err(not_live(&state, &id, other)),
        };
    }
    let loaded = reanalyse(&state, &record, rules).await?;
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
    state.cache.insert(&id, loaded);
    drop(turn);
    Ok(Json(SnapshotView::new(&updated, &state.config.public_url)))
}

/// The snapshot analysed with `rules`: from its stored index when it is there (its summary
/// made again with these rules), else parsed from its pickle, under the parse lease like a cold
/// load (`stored_index::ColdLoad`: a replica parsing it already is waited for). Holds a share of
/// the server's parse memory while it runs: the index's size (what opening and summarising it
/// touch) up front, or the events found as the pickle is parsed.
async fn reanalyse(
    state: &AppState,
    record: &Record,
    rules: Arc<UserRules>,
) -> Result<Arc<AnalysedSnapshot>, ApiError> {
    let cold = ColdLoad::new(state, record);
    let index = state.store.index_path(&record.id);
    let target = record.id.clone();
    let budget = state.parse_budget.clone();
    let max_events = state.config.limits.max_events;
    blocking(move || {
        let charge = budget.charge("re-analysing this snapshot");
        if let Ok(metadata) = std::fs::metadata(&index) {
            charge
                .grow_to(metadata.len())
                .map_err(|refusal| ApiError::unreadable(LoadError::Refused(refusal)))?;
        }
        let mut refused = None;
        let loaded = cold.run(
            &rules,
            || tracing::info!(id = %target, "another server is reading this snapshot: the rules change waits for it"),
            |path| {
                let options = LoadOptions {
                    max_events,
                    events: Some(&charge),
                    ..LoadOptions::default()
                };
                match crate::analysis::load_path(path, options) {
                    Ok(parsed) => Ok(AnalysedSnapshot::new(parsed, &rules)),
                    Err(error) => {
                        let message = error.to_string();
                        refused = Some(error);
                        Err(message)
                    }
                }
            },
        );
        loaded.map_err(|message| match refused {
            Some(error @ (LoadError::TooManyEvents { .. } | LoadError::Refused(_))) => {
                ApiError::unreadable(error)
            }
            _ => ApiError::internal(format!("re-analysing snapshot {target}"), message),
        })
    })
    .await?
}

/// Rules changes waiting, by snapshot. Each `PUT`/`DELETE .../rules` takes a number in its
/// snapshot's line; the re-analyses of one snapshot run one at a time (each holds hundreds of MB
/// on a large trace: 60 at once took the server down), and one whose number is not the latest
/// when its turn comes is skipped: the latest change wins, and memory goes to it alone.
#[derive(Debug, Default)]
pub struct RulesQueue {
    snapshots: std::sync::Mutex<HashMap<SnapshotId, Arc<Line>>>,
}

/// One snapshot's changes.
#[derive(Debug)]
struct Line {
    /// Held while a change is analysed and stored (tokio's mutex: waiters go in arrival order).
    running: tokio::sync::Mutex<()>,
    /// The number the latest change took.
    latest: AtomicU64,
    /// The highest number that has left the line (applied, failed, skipped or abandoned by its
    /// client).
    finished: watch::Sender<u64>,
}

/// A change's place in its snapshot's line; leaving (drop) marks it finished and forgets the
/// line once nobody is in it.
struct Place<'q> {
    queue: &'q RulesQueue,
    id: SnapshotId,
    turn: Arc<Line>,
    number: u64,
}

impl RulesQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SnapshotId, Arc<Line>>> {
        self.snapshots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enter(&self, id: &SnapshotId) -> Place<'_> {
        let turn = self
            .lock()
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(Line {
                    running: tokio::sync::Mutex::new(()),
                    latest: AtomicU64::new(0),
                    finished: watch::Sender::new(0),
                })
            })
            .clone();
        let number = turn.latest.fetch_add(1, Ordering::AcqRel) + 1;
        Place {
            queue: self,
            id: id.clone(),
            turn,
            number,
        }
    }
}

impl Place<'_> {
    /// Whether a newer change for the same snapshot came after this one.
    fn superseded(&self) -> bool {
        self.turn.latest.load(Ordering::Acquire) > self.number
    }

    /// Waits until the newest change seen now has left the line.
    async fn newer_finished(&self) {
        let newest = self.turn.latest.load(Ordering::Acquire);
        let mut finished = self.turn.finished.subscribe();
        // The sender lives in `turn`, which this place holds: the wait ends only by the value.
        let _ = finished.wait_for(|&done| done >= newest).await;
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let number = self.number;
        self.turn
            .finished
            .send_if_modified(|done| std::mem::replace(done, (*done).max(number)) < number);
        let mut snapshots = self.queue.lock();
        // The map's and this place's: nobody else is in the line.
        if Arc::strong_count(&self.turn) == 2 {
            snapshots.remove(&self.id);
        }
    }
}
