//! `/s/{id}`: one snapshot's summary and its interactive views; this URL is the one to share.

use super::{Assets, error_page, render};
use crate::analysis::DeviceSummary;
use crate::format::{bytes, count, duration_us};
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::extract::LoadedSnapshot;
use crate::snapshot::short_frame_label;
use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;

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
                        .map(|f| short_frame_label(f))
                        .unwrap_or_default(),
                    frames: stack.frames.iter().map(|f| short_frame_label(f)).collect(),
                })
                .collect(),
        }
    }
}

/// `GET /s/{id}`: one snapshot; this URL is the one to share.
pub async fn snapshot(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    // Not the extractor: a bad link must get this page, not the API's JSON error.
    match snapshot_page(&state, &id).await {
        Ok(page) => render(page),
        Err(e) => error_page(e),
    }
}

async fn snapshot_page(state: &AppState, id: &str) -> Result<SnapshotPage, ApiError> {
    let LoadedSnapshot { stored, loaded } = LoadedSnapshot::find(state, id).await?;
    let (id, record) = (stored.id, stored.record);
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
