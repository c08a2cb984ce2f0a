//! Groups of snapshots (ranks of one job, before/after a change): their members side by side,
//! with the outliers marked.

use super::AppState;
use super::error::{ApiError, blocking};
use super::wire::{GroupAnswer, GroupMember, SnapshotView};
use crate::analysis::groups::{GroupStats, MemberPeak, group_stats};
use axum::Json;
use axum::extract::{Path, State};

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
