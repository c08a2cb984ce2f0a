//! HTML pages (askama templates in `templates/`). Pages render what the server already knows;
//! the scripts in `static/` add uploading, renaming and, later, the interactive views.

use super::AppState;
use super::api::{SnapshotView, loaded, parse_id, record};
use super::assets;
use super::error::ApiError;
use crate::analysis::DeviceSummary;
use crate::format::{bytes, count, duration_us};
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// Asset URLs every page links (hashed names).
pub struct Assets {
    pub css: String,
    pub index_js: String,
    pub snapshot_js: String,
    pub icon: String,
}

impl Assets {
    pub(crate) fn new() -> Self {
        Self {
            css: assets::url("app.css"),
            index_js: assets::url("index.js"),
            snapshot_js: assets::url("snapshot.js"),
            icon: assets::url("icon.svg"),
        }
    }
}

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
struct Row {
    id: String,
    name: String,
    filename: String,
    size: String,
    uploaded_at_ms: i64,
    group: String,
    devices: String,
    peak: String,
    reserved: String,
    oom: u64,
    notes: Vec<String>,
}

/// `cuda:0`, `cuda:1`, … of a stored summary row.
fn device_names(summary: &serde_json::Value) -> Vec<String> {
    summary["devices"]
        .as_array()
        .map(|devices| {
            devices
                .iter()
                .filter_map(|d| d["device"].as_u64())
                .map(|d| format!("cuda:{d}"))
                .collect()
        })
        .unwrap_or_default()
}

impl Row {
    fn new(view: &SnapshotView) -> Self {
        let summary = &view.record.summary;
        let number = |key: &str| summary[key].as_u64().unwrap_or(0);
        let devices = device_names(summary);
        Self {
            id: view.record.id.to_string(),
            name: view.record.name.clone(),
            filename: view.record.filename.clone(),
            size: bytes(view.record.size_bytes),
            uploaded_at_ms: view.record.uploaded_at_ms,
            group: view.record.group.clone(),
            devices: devices.join(", "),
            peak: bytes(number("peak_allocated_bytes")),
            reserved: bytes(number("peak_reserved_bytes")),
            oom: number("oom_events"),
            notes: summary["notes"]
                .as_array()
                .map(|n| {
                    n.iter()
                        .filter_map(|c| c.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "snapshot.html")]
struct SnapshotPage {
    assets: Assets,
    id: String,
    name: String,
    filename: String,
    size: String,
    uploaded_at_ms: i64,
    group: String,
    share_url: String,
    source: String,
    notes: Vec<NoteView>,
    devices: Vec<DeviceView>,
    settings: Vec<(String, String)>,
    annotations: usize,
}

struct NoteView {
    code: String,
    message: String,
}

struct DeviceView {
    device: usize,
    trace_entries: String,
    actions: String,
    peak: String,
    peak_at: String,
    peak_reserved: String,
    allocated_now: String,
    reserved_now: String,
    free_now: String,
    largest_free: String,
    rounding: String,
    fragmentation: String,
    segments: String,
    ooms: Vec<OomView>,
    stacks: Vec<StackView>,
}

struct OomView {
    requested: String,
    device_free: String,
    at: String,
}

struct StackView {
    bytes: String,
    share: String,
    /// Width of the bar, in percent of the largest stack.
    bar: String,
    allocations: String,
    top: String,
    frames: Vec<String>,
}

impl DeviceView {
    fn new(device: &DeviceSummary, trace: &crate::snapshot::Trace) -> Self {
        let start = trace.time_us.first().copied().unwrap_or(0);
        let at = |event: Option<usize>| match event {
            None => "before the first event".to_owned(),
            Some(i) if trace.has_time => format!(
                "event {} · {} in",
                count(i as u64),
                duration_us(trace.time_us.get(i).copied().unwrap_or(start) - start)
            ),
            Some(i) => format!("event {}", count(i as u64)),
        };
        let stats = &device.segment_stats;
        let largest = device
            .top_stacks_at_peak
            .first()
            .map_or(1, |s| s.bytes.max(1));
        Self {
            device: device.device,
            trace_entries: count(device.trace_entries as u64),
            actions: device
                .actions
                .iter()
                .map(|(name, n)| format!("{name} {}", count(*n as u64)))
                .collect::<Vec<_>>()
                .join(" · "),
            peak: bytes(device.peak_allocated_bytes),
            peak_at: at(device.peak_event_index),
            peak_reserved: bytes(device.peak_reserved_bytes),
            allocated_now: bytes(device.allocated_bytes_at_snapshot),
            reserved_now: bytes(device.reserved_bytes_at_snapshot),
            free_now: bytes(stats.external_free),
            largest_free: bytes(stats.largest_free_block),
            rounding: bytes(stats.internal_free),
            fragmentation: format!("{:.0}%", stats.fragmentation() * 100.0),
            segments: count(device.segments as u64),
            ooms: device
                .oom_events
                .iter()
                .map(|oom| OomView {
                    requested: bytes(oom.requested_bytes),
                    device_free: oom.device_free_bytes.map_or("unknown".into(), bytes),
                    at: at(Some(oom.event_index)),
                })
                .collect(),
            stacks: device
                .top_stacks_at_peak
                .iter()
                .map(|stack| StackView {
                    bytes: bytes(stack.bytes),
                    share: format!(
                        "{:.1}%",
                        stack.bytes as f64 * 100.0 / device.peak_allocated_bytes.max(1) as f64
                    ),
                    bar: format!("{:.1}", stack.bytes as f64 * 100.0 / largest as f64),
                    allocations: count(stack.allocations as u64),
                    top: stack
                        .frames
                        .first()
                        .map(|f| short_frame(f))
                        .unwrap_or_default(),
                    frames: stack.frames.iter().map(|f| short_frame(f)).collect(),
                })
                .collect(),
        }
    }
}

/// `…/site-packages/torch/nn/modules/linear.py:134:forward` → `linear.py:134 forward`.
fn short_frame(frame: &str) -> String {
    let mut parts = frame.rsplitn(3, ':');
    let (name, line, file) = (parts.next(), parts.next(), parts.next());
    match (file, line, name) {
        (Some(file), Some(line), Some(name)) => {
            let base = file.rsplit('/').next().unwrap_or(file);
            format!("{base}:{line} {name}")
        }
        _ => frame.to_owned(),
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    assets: Assets,
    title: String,
    message: String,
}

pub(crate) fn render(page: impl Template) -> Response {
    match page.render() {
        // Pages show live data (names, new uploads): Back and Forward must revalidate.
        Ok(html) => ([(header::CACHE_CONTROL, "no-cache")], Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "page rendering failed").into_response()
        }
    }
}

/// An API error as a page a person can read.
fn error_page(error: ApiError) -> Response {
    let public = error.public();
    let status = public.status;
    let title = match status {
        StatusCode::NOT_FOUND => "Snapshot not found",
        StatusCode::GONE => "Snapshot deleted",
        StatusCode::BAD_REQUEST => "That link is not right",
        _ => "Something went wrong",
    };
    let mut response = render(ErrorPage {
        assets: Assets::new(),
        title: title.to_owned(),
        message: public.message,
    });
    *response.status_mut() = status;
    response
}

/// `GET /`: the snapshot list and the drop zone.
pub async fn index(State(state): State<AppState>) -> Response {
    let store = state.store.clone();
    let records = match tokio::task::spawn_blocking(move || store.list()).await {
        Ok(Ok(records)) => records,
        Ok(Err(e)) => return error_page(e.into()),
        Err(e) => return error_page(ApiError::Internal(e.to_string())),
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

/// `GET /s/{id}`: one snapshot; this URL is the one to share.
pub async fn snapshot(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match snapshot_page(&state, &id).await {
        Ok(page) => render(page),
        Err(e) => error_page(e),
    }
}

async fn snapshot_page(state: &AppState, id: &str) -> Result<SnapshotPage, ApiError> {
    let id = parse_id(id)?;
    let record = record(state, &id).await?;
    let loaded = loaded(state, &id).await?;
    let snapshot = &loaded.snapshot;
    let summary = &loaded.summary;
    let source = &snapshot.source;
    let mut source_text = match source.pickle_protocol {
        Some(p) => format!("pickle protocol {p}"),
        None => "JSON".to_owned(),
    };
    match source.compression {
        crate::snapshot::Compression::None => {}
        crate::snapshot::Compression::Gzip => source_text.push_str(", gzip"),
        crate::snapshot::Compression::Zstd => source_text.push_str(", zstd"),
    }
    let settings = match &snapshot.allocator_settings {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) if s.is_empty() => "(empty)".to_owned(),
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), text)
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(SnapshotPage {
        assets: Assets::new(),
        id: id.to_string(),
        name: record.name.clone(),
        filename: record.filename.clone(),
        size: bytes(record.size_bytes),
        uploaded_at_ms: record.uploaded_at_ms,
        group: record.group.clone(),
        share_url: format!("{}/s/{}", state.config.public_url, id),
        source: source_text,
        notes: summary
            .notes
            .iter()
            .map(|n| NoteView {
                code: n.code.to_owned(),
                message: n.message.clone(),
            })
            .collect(),
        devices: summary
            .devices
            .iter()
            .map(|d| DeviceView::new(d, snapshot.trace(d.device)))
            .collect(),
        settings,
        annotations: snapshot.external_annotations.len(),
    })
}

// ---------------------------------------------------------------------------------------------
// Compare and group pages.

/// The stylesheet and script of the compare, picker and group pages (besides `Assets`).
struct CompareAssets {
    css: String,
    compare_js: String,
    group_js: String,
}

impl CompareAssets {
    fn new() -> Self {
        Self {
            css: assets::url("compare.css"),
            compare_js: assets::url("compare/main.js"),
            group_js: assets::url("group.js"),
        }
    }
}

/// One side of a comparison as the page header shows it.
struct Side {
    id: String,
    name: String,
    filename: String,
    group: String,
    uploaded_at_ms: i64,
}

impl Side {
    fn new(record: &super::store::Record) -> Self {
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
}

/// `GET /compare/{a}/{b}`: what changed from `a` to `b`. The data comes from
/// `/api/compare/{a}/{b}`; the page checks the ids so a bad link gets the error page.
pub async fn compare(
    State(state): State<AppState>,
    Path((a, b)): Path<(String, String)>,
    Query(query): Query<super::compare::CompareQuery>,
) -> Response {
    let page = async {
        let (a, b) = (parse_id(&a)?, parse_id(&b)?);
        let (before, after) = (record(&state, &a).await?, record(&state, &b).await?);
        Ok::<_, ApiError>(ComparePage {
            assets: Assets::new(),
            extra: CompareAssets::new(),
            before: Side::new(&before),
            after: Some(Side::new(&after)),
            ignore_lines: matches!(
                query.ignore_lines.as_deref(),
                Some("1" | "true" | "yes" | "on")
            ),
            candidates: Vec::new(),
        })
    };
    match page.await {
        Ok(page) => render(page),
        Err(e) => error_page(e),
    }
}

/// `GET /compare/{a}`: pick the snapshot to compare `a` with.
pub async fn compare_picker(State(state): State<AppState>, Path(a): Path<String>) -> Response {
    let page = async {
        let a = parse_id(&a)?;
        let before = record(&state, &a).await?;
        let store = state.store.clone();
        let records = tokio::task::spawn_blocking(move || store.list())
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
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
        })
    };
    match page.await {
        Ok(page) => render(page),
        Err(e) => error_page(e),
    }
}

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
    let answer = match super::compare::group_members(&state, &name).await {
        Ok(answer) => answer,
        Err(ApiError::NotFound(_)) => {
            let mut response = render(ErrorPage {
                assets: Assets::new(),
                title: "Snapshot not found".to_owned(),
                message: format!("no snapshot is in the group {name:?}"),
            });
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        }
        Err(e) => return error_page(e),
    };
    let median = answer.median_peak_bytes;
    let largest = answer
        .members
        .iter()
        .map(|m| m.peak_allocated_bytes)
        .max()
        .unwrap_or(0)
        .max(1);
    let typical = answer
        .members
        .iter()
        .min_by_key(|m| (m.outlier, m.peak_allocated_bytes.abs_diff(median)))
        .map(|m| (m.view.record.id.to_string(), m.view.record.name.clone()))
        .unwrap_or_default();
    let members: Vec<MemberRow> = answer
        .members
        .iter()
        .map(|m| {
            let devices = device_names(&m.view.record.summary);
            let distance = if median == 0 {
                0.0
            } else {
                (m.peak_allocated_bytes as f64 - median as f64) * 100.0 / median as f64
            };
            let top = m.top_stack.clone().unwrap_or_default();
            MemberRow {
                id: m.view.record.id.to_string(),
                name: m.view.record.name.clone(),
                filename: m.view.record.filename.clone(),
                devices: devices.join(", "),
                peak: bytes(m.peak_allocated_bytes),
                peak_bytes: m.peak_allocated_bytes,
                reserved: bytes(m.peak_reserved_bytes),
                oom: m.oom_events,
                top_stack: short_frame(&top),
                top_stack_full: top,
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
    let extreme = |highest: bool| {
        let pick = if highest {
            answer.members.iter().max_by_key(|m| m.peak_allocated_bytes)
        } else {
            answer.members.iter().min_by_key(|m| m.peak_allocated_bytes)
        };
        pick.map(|m| (m.view.record.name.clone(), m.peak_allocated_bytes))
            .unwrap_or_default()
    };
    let (high, low) = (extreme(true), extreme(false));
    let spread_bytes = high.1 - low.1;
    render(GroupPage {
        assets: Assets::new(),
        extra: CompareAssets::new(),
        highest: (high.0, bytes(high.1)),
        lowest: (low.0, bytes(low.1)),
        spread: bytes(spread_bytes),
        spread_percent: if median == 0 {
            "—".to_owned()
        } else {
            format!("{:.1}%", spread_bytes as f64 * 100.0 / median as f64)
        },
        name: answer.group.clone(),
        median: bytes(median),
        median_bytes: median,
        typical_id: typical.0,
        typical_name: typical.1,
        outliers: members.iter().filter(|m| m.outlier).count(),
        members,
    })
}

/// Any other path.
pub async fn not_found() -> Response {
    error_page(ApiError::NotFound("at this address".into()))
}

#[cfg(test)]
mod tests {
    use super::short_frame;

    #[test]
    fn frames_shorten_to_file_line_name() {
        assert_eq!(
            short_frame("/opt/torch/nn/modules/linear.py:134:forward"),
            "linear.py:134 forward"
        );
        assert_eq!(short_frame("<non-python>"), "<non-python>");
    }
}
