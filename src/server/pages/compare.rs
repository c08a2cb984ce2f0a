//! `/compare/{a}` (pick the other snapshot) and `/compare/{a}/{b}` (what changed).

use super::index::Row;
use super::loading::{LoadCard, not_ready, render_loads};
use super::{Assets, CompareAssets, error_page, render};
use crate::server::AppState;
use crate::server::compare::{CompareQuery, query_flag_on};
use crate::server::error::{ApiError, blocking};
use crate::server::extract::StoredSnapshot;
use crate::server::store::Record;
use crate::server::wire::SnapshotView;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;

/// One side of a comparison as the page header shows it.
struct Side {
    id: String,
    name: String,
    filename: String,
    group: String,
    uploaded_at_ms: i64,
}

impl Side {
    fn new(record: &Record) -> Self {
        Self {
            id: record.id.to_string(),
            name: record.name.clone(),
            filename: record.filename.clone(),
            group: record.group.clone(),
            uploaded_at_ms: record.uploaded_at_ms,
        }
    }
}

#[derive(Template)]
#[template(path = "compare.html")]
struct ComparePage {
    assets: Assets,
    extra: CompareAssets,
    before: Side,
    /// `None` on the picker (`/compare/{a}`).
    after: Option<Side>,
    ignore_lines: bool,
    /// The picker's candidates: every other snapshot, newest first.
    candidates: Vec<Row>,
    /// The snapshots of the comparison still being read, if any.
    load_card: Option<LoadCard>,
}

/// `GET /compare/{a}/{b}`: what changed from `a` to `b`. The data comes from
/// `/api/compare/{a}/{b}`; the page checks the ids so a bad link gets the error page. It never
/// waits for a parse: a snapshot not in memory has its load started here and shown on the page
/// (the card of `loading.rs`) while the data request waits for it; a load that failed makes
/// the page a 500 that says why.
pub async fn compare(
    State(state): State<AppState>,
    Path((a, b)): Path<(String, String)>,
    Query(query): Query<CompareQuery>,
) -> Response {
    let page = async {
        let before = StoredSnapshot::find(&state, &a).await?;
        let after = StoredSnapshot::find(&state, &b).await?;
        let loads = not_ready(&state, &[&before, &after])?;
        let load_card = if loads.is_empty() {
            None
        } else {
            Some(LoadCard {
                heading: if loads.len() > 1 {
                    "Opening both snapshots"
                } else {
                    "Opening one of the snapshots"
                },
                failed_heading: "These snapshots cannot be compared",
                why: "The server reads a snapshot once after it starts, or after it made room for others; the comparison shows here when they are ready.",
                name_each: true,
                loads,
            })
        };
        Ok::<_, ApiError>(ComparePage {
            assets: Assets::new(),
            extra: CompareAssets::new(),
            before: Side::new(&before.record),
            after: Some(Side::new(&after.record)),
            ignore_lines: query_flag_on(&query.ignore_lines),
            candidates: Vec::new(),
            load_card,
        })
    };
    match page.await {
        Ok(page) => {
            let failed = page.load_card.as_ref().is_some_and(LoadCard::failed);
            render_loads(page, failed)
        }
        Err(e) => error_page(e),
    }
}

/// `GET /compare/{a}`: pick the snapshot to compare `a` with.
pub async fn compare_picker(State(state): State<AppState>, Path(a): Path<String>) -> Response {
    let page = async {
        let StoredSnapshot {
            id: a,
            record: before,
        } = StoredSnapshot::find(&state, &a).await?;
        let store = state.store.clone();
        let records = blocking(move || store.list()).await??;
        let candidates = records
            .iter()
            .filter(|r| r.id != a)
            .map(|r| Row::new(&SnapshotView::new(r, &state.config.public_url)))
            .collect();
        Ok::<_, ApiError>(ComparePage {
            assets: Assets::new(),
            extra: CompareAssets::new(),
            before: Side::new(&before),
            after: None,
            ignore_lines: false,
            candidates,
            load_card: None,
        })
    };
    match page.await {
        Ok(page) => render(page),
        Err(e) => error_page(e),
    }
}
