//! Comparing two snapshots: the diff, and torch's `_memory_viz.py compare` text.

use super::AppState;
use super::error::{ApiError, blocking};
use super::extract::{LoadedSnapshot, StoredSnapshot};
use super::wire::SnapshotView;
use crate::analysis::diff::{Align, DiffOptions, SnapshotDiff, diff};
use crate::analysis::moment::Moment;
use crate::torch_text::{SegmentCompare, segment_compare};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Default)]
pub struct CompareQuery {
    /// `1`/`true`: align stacks without line numbers.
    pub ignore_lines: Option<String>,
    /// Moments to compare instead of each one's peak (`-1` or `start`: before the first event).
    pub at_a: Option<Moment>,
    pub at_b: Option<Moment>,
    /// `auto` (the default), `off`, or a number N: drop the N outermost frames of every stack.
    pub align: Option<String>,
}

/// `?align=`: `auto`, `off`, or how many outer frames to drop (at most `MAX_DROPPED_OUTER_FRAMES`).
fn align_param(value: Option<&str>) -> Result<Align, ApiError> {
    Align::parse(value.unwrap_or_default()).map_err(ApiError::BadRequest)
}

#[derive(Serialize)]
pub struct CompareAnswer {
    pub before: SnapshotView,
    pub after: SnapshotView,
    pub diff: SnapshotDiff,
    /// The segments in only one snapshot (torch's `_memory_viz.py compare`, as data; its text
    /// is `GET /api/compare/{a}/{b}/torch.txt`).
    pub segments: SegmentCompare,
}

/// `?ignore_lines=1` and its spellings.
pub fn query_flag_on(value: &Option<String>) -> bool {
    matches!(value.as_deref(), Some("1" | "true" | "yes" | "on"))
}

/// A moment as the diff takes it, per device: `None` for each device's peak, `Some(None)` before
/// the first event, else after an event (past the last is the last, so the end is `MAX`).
fn diff_moment(moment: Option<Moment>) -> Option<Option<usize>> {
    match moment? {
        Moment::Peak => None,
        Moment::Start => Some(None),
        Moment::Event(n) => Some(Some(n)),
        Moment::End => Some(Some(usize::MAX)),
    }
}

/// The two snapshots of a comparison, loaded at once: two cold ones are read side by side (as
/// the compare page shows them), and each is held from the moment it is ready, so a cache too
/// small for both cannot drop the first while the second is read and make it be read again.
async fn both(
    state: &AppState,
    a: &str,
    b: &str,
) -> Result<(LoadedSnapshot, LoadedSnapshot), ApiError> {
    // Found one after the other, so a link with two bad ids names the first.
    let before = StoredSnapshot::find(state, a).await?;
    let after = StoredSnapshot::find(state, b).await?;
    tokio::try_join!(before.load(state), after.load(state))
}

/// `GET /api/compare/{a}/{b}`.
pub async fn compare(
    State(state): State<AppState>,
    Path((a, b)): Path<(String, String)>,
    Query(query): Query<CompareQuery>,
) -> Result<Json<CompareAnswer>, ApiError> {
    // Checked before either snapshot is read: a bad link costs nothing.
    let align = align_param(query.align.as_deref())?;
    let (before, after) = both(&state, &a, &b).await?;
    let options = DiffOptions {
        ignore_lines: query_flag_on(&query.ignore_lines),
        align,
        at_before: diff_moment(query.at_a),
        at_after: diff_moment(query.at_b),
    };
    let (a, b) = (before.loaded.clone(), after.loaded.clone());
    let (diff, segments) = blocking(move || {
        let d = diff(
            (&a.snapshot, &a.analysis, &a.summary),
            (&b.snapshot, &b.analysis, &b.summary),
            options,
        );
        (d, segment_compare(&a.snapshot, &b.snapshot))
    })
    .await?;
    Ok(Json(CompareAnswer {
        before: SnapshotView::new(&before.stored.record, &state.config.public_url),
        after: SnapshotView::new(&after.stored.record, &state.config.public_url),
        diff,
        segments,
    }))
}

/// `GET /api/compare/{a}/{b}/torch.txt`: torch's `_memory_viz.py compare` text, byte for byte
/// (the two lists it prints, then the folded stacks it returns), as a download.
pub async fn torch_compare_text(
    State(state): State<AppState>,
    Path((a, b)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (before, after) = both(&state, &a, &b).await?;
    let (a, b) = (before.loaded.clone(), after.loaded.clone());
    let text = blocking(move || crate::torch_text::compare(&a.snapshot, &b.snapshot)).await?;
    let filename = format!(
        "compare-{}-{}.txt",
        before.stored.record.name, after.stored.record.name
    );
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                super::api::attachment_disposition(&filename),
            ),
        ],
        text,
    )
        .into_response())
}
