//! Comparing snapshots, explaining OOMs, and groups of snapshots (ranks of one job).

use super::AppState;
use super::api::{SnapshotView, loaded, parse_id, record};
use super::error::ApiError;
use crate::analysis::diff::{DiffOptions, SnapshotDiff, diff};
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
    /// Moments to compare instead of each one's peak (`-1`: before the first event).
    pub at_a: Option<i64>,
    pub at_b: Option<i64>,
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

fn flag(value: &Option<String>) -> bool {
    matches!(value.as_deref(), Some("1" | "true" | "yes" | "on"))
}

/// `GET /api/compare/{a}/{b}`.
pub async fn compare(
    State(state): State<AppState>,
    Path((a, b)): Path<(String, String)>,
    Query(query): Query<CompareQuery>,
) -> Result<Json<CompareAnswer>, ApiError> {
    let (a, b) = (parse_id(&a)?, parse_id(&b)?);
    let (record_a, record_b) = (record(&state, &a).await?, record(&state, &b).await?);
    let (before, after) = (loaded(&state, &a).await?, loaded(&state, &b).await?);
    let moment = |at: Option<i64>| at.map(|v| usize::try_from(v).ok());
    let options = DiffOptions {
        ignore_lines: flag(&query.ignore_lines),
        at_before: moment(query.at_a),
        at_after: moment(query.at_b),
    };
    let (diff, segments) = tokio::task::spawn_blocking(move || {
        let d = diff(
            (&before.snapshot, &before.analysis, &before.summary),
            (&after.snapshot, &after.analysis, &after.summary),
            options,
        );
        (d, segment_compare(&before.snapshot, &after.snapshot))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Json(CompareAnswer {
        before: SnapshotView::new(&record_a, &state.config.public_url),
        after: SnapshotView::new(&record_b, &state.config.public_url),
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
    let (a, b) = (parse_id(&a)?, parse_id(&b)?);
    let (record_a, record_b) = (record(&state, &a).await?, record(&state, &b).await?);
    let (before, after) = (loaded(&state, &a).await?, loaded(&state, &b).await?);
    let text = tokio::task::spawn_blocking(move || {
        crate::torch_text::compare(&before.snapshot, &after.snapshot)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    // The file is named for both snapshots; anything but a safe character becomes `_`, so the
    // header cannot be broken by a name.
    let safe = |name: &str| -> String {
        name.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let filename = format!(
        "compare-{}-{}.txt",
        safe(&record_a.name),
        safe(&record_b.name)
    );
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        text,
    )
        .into_response())
}

/// `GET /api/snapshots/{id}/oom`: one report per `oom` event, per device.
pub async fn oom(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<OomReport>>, ApiError> {
    let id = parse_id(&id)?;
    let loaded = loaded(&state, &id).await?;
    let reports = tokio::task::spawn_blocking(move || {
        loaded
            .analysis
            .devices
            .iter()
            .flat_map(|device| oom_reports(&loaded.snapshot, device))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Json(reports))
}

#[derive(Serialize)]
pub struct GroupAnswer {
    pub group: String,
    pub members: Vec<GroupMember>,
    /// Median peak of the members, the yardstick for outliers.
    pub median_peak_bytes: u64,
}

#[derive(Serialize)]
pub struct GroupMember {
    #[serde(flatten)]
    pub view: SnapshotView,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub oom_events: u64,
    pub top_stack: Option<String>,
    /// Peak more than 10% away from the group's median.
    pub outlier: bool,
}

/// `GET /api/groups/{name}`: the snapshots labelled with a group, e.g. one per rank.
pub async fn group(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<GroupAnswer>, ApiError> {
    Ok(Json(group_members(&state, &name).await?))
}

pub async fn group_members(state: &AppState, name: &str) -> Result<GroupAnswer, ApiError> {
    let store = state.store.clone();
    let records = tokio::task::spawn_blocking(move || store.list())
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    let mut members: Vec<GroupMember> = records
        .iter()
        .filter(|r| r.group == name)
        .map(|r| {
            let view = SnapshotView::new(r, &state.config.public_url);
            let number = |key: &str| view.record.summary[key].as_u64().unwrap_or(0);
            GroupMember {
                peak_allocated_bytes: number("peak_allocated_bytes"),
                peak_reserved_bytes: number("peak_reserved_bytes"),
                oom_events: number("oom_events"),
                top_stack: view.record.summary["devices"][0]["top_stack"]
                    .as_str()
                    .map(str::to_owned),
                outlier: false,
                view,
            }
        })
        .collect();
    if members.is_empty() {
        return Err(ApiError::NotFound(format!("group {name:?}")));
    }
    members.sort_by(|a, b| a.view.record.name.cmp(&b.view.record.name));
    let mut peaks: Vec<u64> = members.iter().map(|m| m.peak_allocated_bytes).collect();
    peaks.sort_unstable();
    let median = peaks[peaks.len() / 2];
    // With two members there is no majority to stray from; an OOM always stands out.
    let has_majority = peaks.len() > 2;
    for member in &mut members {
        let distance = member.peak_allocated_bytes.abs_diff(median) as f64;
        member.outlier = (has_majority && distance > median as f64 * 0.1) || member.oom_events > 0;
    }
    Ok(GroupAnswer {
        group: name.to_owned(),
        members,
        median_peak_bytes: median,
    })
}
