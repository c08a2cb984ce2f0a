//! `/`: the snapshot list and the drop zone. Its [`Row`] is also the compare picker's.

use super::{Assets, CompareAssets, error_page, render};
use crate::format::bytes;
use crate::server::AppState;
use crate::server::error::blocking;
use crate::server::wire::SnapshotView;
use askama::Template;
use axum::extract::State;
use axum::response::Response;

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    assets: Assets,
    extra: CompareAssets,
    rows: Vec<Row>,
    /// Every group label in use, for the "Group…" dialog's suggestions.
    groups: Vec<String>,
    max_upload: String,
    /// How long a deleted snapshot can be restored (`--trash-days`).
    trash_days: u32,
}

/// One line of the snapshot list.
pub(super) struct Row {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) filename: String,
    pub(super) size: String,
    pub(super) uploaded_at_ms: i64,
    pub(super) group: String,
    pub(super) devices: String,
    pub(super) peak: String,
    pub(super) reserved: String,
    pub(super) oom: u64,
    pub(super) notes: Vec<String>,
}

impl Row {
    pub(super) fn new(view: &SnapshotView) -> Self {
        let summary = view.summary();
        Self {
            id: view.record.id.to_string(),
            name: view.record.name.clone(),
            filename: view.record.filename.clone(),
            size: bytes(view.record.size_bytes),
            uploaded_at_ms: view.record.uploaded_at_ms,
            group: view.record.group.clone(),
            devices: summary.device_names().join(", "),
            peak: bytes(summary.peak_allocated_bytes),
            reserved: bytes(summary.peak_reserved_bytes),
            oom: summary.oom_events,
            notes: summary.notes,
        }
    }
}

/// `GET /`: the snapshot list and the drop zone.
pub async fn index(State(state): State<AppState>) -> Response {
    let store = state.store.clone();
    let records = match blocking(move || store.list()).await {
        Ok(Ok(records)) => records,
        Ok(Err(e)) => return error_page(e.into()),
        Err(e) => return error_page(e),
    };
    let mut groups: Vec<String> = records
        .iter()
        .map(|r| r.group.clone())
        .filter(|g| !g.is_empty())
        .collect();
    groups.sort();
    groups.dedup();
    render(IndexPage {
        assets: Assets::new(),
        extra: CompareAssets::new(),
        rows: records
            .iter()
            .map(|r| Row::new(&SnapshotView::new(r, &state.config.public_url)))
            .collect(),
        groups,
        max_upload: bytes(state.config.max_upload_bytes),
        trash_days: state.config.trash_days,
    })
}
