//! Comparing snapshots, explaining OOMs, and groups of snapshots (ranks of one job).

use super::AppState;
use super::error::{ApiError, blocking};
use super::extract::{LoadedSnapshot, StoredSnapshot};
use super::wire::{GroupAnswer, GroupMember, SnapshotView};
use crate::analysis::diff::{Align, DiffOptions, SnapshotDiff, diff};
use crate::analysis::groups::{GroupStats, MemberPeak, group_stats};
use crate::analysis::moment::Moment;
use crate::analysis::oom::{OomReport, oom_reports};
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
pub fn flag(value: &Option<String>) -> bool {
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
        ignore_lines: flag(&query.ignore_lines),
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

/// `GET /api/groups/{name}`: the snapshots labelled with a group, e.g. one per rank.
pub async fn group(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<GroupAnswer>, ApiError> {
    let (answer, _) = group_members(&state, &name).await?;
    Ok(Json(answer))
}

/// The members of group `name`, sorted by name, and their statistics; 404 when it has none.
pub async fn group_members(
    state: &AppState,
    name: &str,
) -> Result<(GroupAnswer, GroupStats), ApiError> {
    let store = state.store.clone();
    let records = blocking(move || store.list()).await??;
    let mut members: Vec<GroupMember> = records
        .iter()
        .filter(|r| r.group == name)
        .map(|r| {
            let view = SnapshotView::new(r, &state.config.public_url);
            let summary = view.summary();
            GroupMember {
                peak_allocated_bytes: summary.peak_allocated_bytes,
                peak_reserved_bytes: summary.peak_reserved_bytes,
                oom_events: summary.oom_events,
                top_stack: summary.devices.first().and_then(|d| d.top_stack.clone()),
                top_stack_bytes: summary.devices.first().map_or(0, |d| d.top_stack_bytes),
                non_python_bytes: summary.devices.first().map_or(0, |d| d.non_python_bytes),
                outlier: false,
                view,
            }
        })
        .collect();
    members.sort_by(|a, b| a.view.record.name.cmp(&b.view.record.name));
    let peaks: Vec<MemberPeak> = members
        .iter()
        .map(|m| MemberPeak {
            peak_allocated_bytes: m.peak_allocated_bytes,
            oom_events: m.oom_events,
        })
        .collect();
    let stats = group_stats(&peaks).ok_or_else(|| ApiError::GroupNotFound(name.to_owned()))?;
    for (member, &outlier) in members.iter_mut().zip(&stats.outliers) {
        member.outlier = outlier;
    }
    let answer = GroupAnswer {
        group: name.to_owned(),
        members,
        median_peak_bytes: stats.median_peak_bytes,
    };
    Ok((answer, stats))
}
