//! `/g/{name}`: the members of a group (ranks of one job) side by side.

use super::{Assets, CompareAssets, error_page, render};
use crate::analysis::groups::percent_from_median;
use crate::format::bytes;
use crate::server::AppState;
use crate::server::groups::group_members;
use crate::snapshot::short_frame_label;
use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;

#[derive(Template)]
#[template(path = "group.html")]
struct GroupPage {
    assets: Assets,
    extra: CompareAssets,
    name: String,
    median: String,
    median_bytes: u64,
    /// The member whose peak is nearest the median (the yardstick for outliers).
    typical_id: String,
    typical_name: String,
    outliers: usize,
    /// The highest and lowest peaks, `(name, bytes)` formatted.
    highest: (String, String),
    lowest: (String, String),
    /// Highest minus lowest, and that in percent of the median.
    spread: String,
    spread_percent: String,
    members: Vec<MemberRow>,
}

struct MemberRow {
    id: String,
    name: String,
    filename: String,
    devices: String,
    peak: String,
    peak_bytes: u64,
    reserved: String,
    oom: u64,
    top_stack: String,
    top_stack_full: String,
    /// "12.0 GiB at the peak", or empty.
    top_stack_bytes: String,
    /// "3.1 GiB with no Python frame", or empty.
    non_python: String,
    outlier: bool,
    /// `+12.5%` from the median peak.
    from_median: String,
    /// Bar length in percent of the largest peak.
    bar: String,
    /// Where the median falls on the bar, in percent of the largest peak.
    median_mark: String,
    uploaded_at_ms: i64,
}

/// `GET /g/{name}`: the members of a group (ranks of one job) side by side.
pub async fn group(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    let (answer, stats) = match group_members(&state, &name).await {
        Ok(found) => found,
        Err(e) => return error_page(e),
    };
    let members = &answer.members;
    let median = stats.median_peak_bytes;
    let largest = members[stats.highest].peak_allocated_bytes.max(1);
    let rows: Vec<MemberRow> = members
        .iter()
        .map(|m| {
            let distance = percent_from_median(m.peak_allocated_bytes, median).unwrap_or(0.0);
            let top = m.top_stack.clone().unwrap_or_default();
            MemberRow {
                id: m.view.record.id.to_string(),
                name: m.view.record.name.clone(),
                filename: m.view.record.filename.clone(),
                devices: m.view.summary().device_names().join(", "),
                peak: bytes(m.peak_allocated_bytes),
                peak_bytes: m.peak_allocated_bytes,
                reserved: bytes(m.peak_reserved_bytes),
                oom: m.oom_events,
                top_stack: short_frame_label(&top),
                top_stack_full: top,
                top_stack_bytes: if m.top_stack_bytes > 0 {
                    bytes(m.top_stack_bytes)
                } else {
                    String::new()
                },
                non_python: if m.non_python_bytes > 0 {
                    format!("{} with no Python frame", bytes(m.non_python_bytes))
                } else {
                    String::new()
                },
                outlier: m.outlier,
                from_median: if distance.abs() < 0.05 {
                    "median".to_owned()
                } else {
                    format!("{distance:+.1}%")
                },
                bar: format!(
                    "{:.1}",
                    m.peak_allocated_bytes as f64 * 100.0 / largest as f64
                ),
                median_mark: format!("{:.1}", median as f64 * 100.0 / largest as f64),
                uploaded_at_ms: m.view.record.uploaded_at_ms,
            }
        })
        .collect();
    let (high, low) = (&members[stats.highest], &members[stats.lowest]);
    let typical = &members[stats.typical];
    let spread_bytes = high.peak_allocated_bytes - low.peak_allocated_bytes;
    render(GroupPage {
        assets: Assets::new(),
        extra: CompareAssets::new(),
        highest: (
            high.view.record.name.clone(),
            bytes(high.peak_allocated_bytes),
        ),
        lowest: (
            low.view.record.name.clone(),
            bytes(low.peak_allocated_bytes),
        ),
        spread: bytes(spread_bytes),
        spread_percent: if median == 0 {
            "—".to_owned()
        } else {
            format!("{:.1}%", spread_bytes as f64 * 100.0 / median as f64)
        },
        name: answer.group.clone(),
        median: bytes(median),
        median_bytes: median,
        typical_id: typical.view.record.id.to_string(),
        typical_name: typical.view.record.name.clone(),
        outliers: rows.iter().filter(|m| m.outlier).count(),
        members: rows,
    })
}
