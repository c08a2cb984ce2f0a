//! The card a page shows while snapshots it needs are read (`templates/load-card.html`): one
//! line per snapshot not in memory, with its progress, which `static/views/loads.js` keeps up to
//! date from `GET /api/snapshots/{id}/status`. The snapshot page (`/s/{id}`) is this card alone
//! until its snapshot is ready; the compare page (`/compare/{a}/{b}`) shows it above the
//! comparison it is waiting for.

use super::render;
use crate::format::bytes;
use crate::server::AppState;
use crate::server::cache::LoadState;
use crate::server::error::ApiError;
use crate::server::extract::StoredSnapshot;
use askama::Template;
use axum::http::StatusCode;
use axum::response::Response;

/// One snapshot being read, as the card first shows it (the script takes over from there).
pub(crate) struct LoadView {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) filename: String,
    pub(crate) size_bytes: u64,
    /// `queued`, `waiting`, `reading`, `analysing` or `failed` (as the status endpoint says
    /// it).
    pub(crate) state: &'static str,
    pub(crate) read_bytes: u64,
    /// What the card says first, as the script words it on each poll.
    pub(crate) line: String,
    /// Why the load failed (for `failed`).
    pub(crate) error: String,
}

impl LoadView {
    pub(crate) fn new(stored: &StoredSnapshot, progress: LoadState) -> Self {
        let record = &stored.record;
        let (state, read_bytes, line, error) = match progress {
            LoadState::Queued => (
                "queued",
                0,
                "Waiting for other snapshots to finish loading…".to_owned(),
                String::new(),
            ),
            LoadState::WaitingForAnotherServer => (
                "waiting",
                0,
                "Waiting for another server to read this snapshot…".to_owned(),
                String::new(),
            ),
            LoadState::Reading { read, total } => (
                "reading",
                read,
                format!(
                    "Reading {}: {} of {}",
                    record.filename,
                    bytes(read),
                    bytes(total)
                ),
                String::new(),
            ),
            // Ready between the two looks at the cache: the script's first poll says so.
            LoadState::Analysing | LoadState::Ready => (
                "analysing",
                record.size_bytes,
                "Analysing…".to_owned(),
                String::new(),
            ),
            LoadState::Failed(why) => (
                "failed",
                0,
                failed_line(&record.filename, record.size_bytes),
                why,
            ),
        };
        Self {
            id: stored.id.to_string(),
            name: record.name.clone(),
            filename: record.filename.clone(),
            size_bytes: record.size_bytes,
            state,
            read_bytes,
            line,
            error,
        }
    }

    pub(crate) fn failed(&self) -> bool {
        self.state == "failed"
    }
}

/// The line above a failed load's reason (static/lib/load-status.js words it the same).
fn failed_line(filename: &str, size: u64) -> String {
    format!("The server could not read {filename} ({}).", bytes(size))
}

/// The card: a heading (another once a load failed), the snapshots still being read, and what
/// happens when they are ready.
pub(crate) struct LoadCard {
    pub(crate) heading: &'static str,
    pub(crate) failed_heading: &'static str,
    /// Why the page waits, and what it becomes.
    pub(crate) why: &'static str,
    /// Whether each load says which snapshot it is (not where the page's heading does).
    pub(crate) name_each: bool,
    pub(crate) loads: Vec<LoadView>,
}

impl LoadCard {
    /// Whether a load failed.
    pub(crate) fn failed(&self) -> bool {
        self.loads.iter().any(LoadView::failed)
    }
}

/// `page`, answered 500 when a load it shows `failed`, as the views' requests are.
pub(crate) fn render_loads(page: impl Template, failed: bool) -> Response {
    let mut response = render(page);
    if failed {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    }
    response
}

/// The snapshots of `stored` not in memory, each load started (in the background, once however
/// many ask) when none runs; empty when every one is ready. A snapshot named twice is listed
/// once.
pub(crate) fn not_ready(
    state: &AppState,
    stored: &[&StoredSnapshot],
) -> Result<Vec<LoadView>, ApiError> {
    let mut loads: Vec<LoadView> = Vec::new();
    for snapshot in stored {
        if loads.iter().any(|load| load.id == snapshot.id.as_str()) {
            continue;
        }
        if let Err(progress) = snapshot.ready_or_start(state)? {
            loads.push(LoadView::new(snapshot, progress));
        }
    }
    Ok(loads)
}
