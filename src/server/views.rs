//! JSON for the interactive views (see `docs/views-api.md`). Each answer is computed from the
//! cached analysis on a blocking thread and is bounded by the request (pixel width, page size),
//! not by the trace.

use super::AppState;
use super::api::{loaded, parse_id};
use super::cache::Loaded;
use super::error::ApiError;
use crate::analysis::events::{EventFilter, EventPage, page};
use crate::analysis::flame::{Flame, FlameMode, flame};
use crate::analysis::memory_map::{MemoryMap, memory_map};
use crate::analysis::timeline::{Axis, Timeline, Window, timeline};
use crate::analysis::{DeviceAnalysis, Origin};
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Runs `work` on the loaded snapshot `id`'s device on a blocking thread.
async fn with_device<T, F>(
    state: &AppState,
    id: &str,
    device: Option<usize>,
    work: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Loaded, &DeviceAnalysis) -> Result<T, ApiError> + Send + 'static,
{
    let id = parse_id(id)?;
    let loaded: Arc<Loaded> = loaded(state, &id).await?;
    tokio::task::spawn_blocking(move || {
        let analysis = &loaded.analysis;
        let device = match device {
            Some(d) => analysis
                .device(d)
                .ok_or_else(|| ApiError::BadRequest(format!("this snapshot has no device {d}")))?,
            None => analysis
                .devices
                .iter()
                .find(|d| !loaded.snapshot.trace(d.device).is_empty())
                .or(analysis.devices.first())
                .ok_or_else(|| ApiError::BadRequest("this snapshot has no devices".into()))?,
        };
        work(&loaded, device)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
}

/// `at=-1` (or absent with a default) as a moment.
fn moment(at: Option<i64>) -> Option<usize> {
    at.and_then(|a| usize::try_from(a).ok())
}

#[derive(Debug, Deserialize)]
pub struct TimelineQuery {
    device: Option<usize>,
    start: Option<usize>,
    end: Option<usize>,
    width: Option<usize>,
    height: Option<usize>,
    axis: Option<String>,
}

#[derive(Serialize)]
pub struct TimelineAnswer {
    device: usize,
    #[serde(flatten)]
    timeline: Timeline,
    markers: Markers,
    /// `time_us` of the trace's first event and of the window's first and last events (`null`
    /// when the trace has no times): the time axis's labels.
    time_us: Option<TimeSpan>,
    /// The first event from which the history is complete, when the trace starts mid-run
    /// (frees without a matching alloc); `null` when it is complete.
    complete_from: Option<usize>,
}

#[derive(Serialize)]
struct TimeSpan {
    first: i64,
    start: i64,
    end: i64,
}

#[derive(Serialize)]
struct Markers {
    peak: serde_json::Value,
    ooms: Vec<serde_json::Value>,
    annotations: Vec<serde_json::Value>,
}

pub async fn timeline_view(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<TimelineAnswer>, ApiError> {
    let axis = match query.axis.as_deref() {
        None | Some("event") => Axis::Event,
        Some("time") => Axis::Time,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "axis must be event or time, not {other:?}"
            )));
        }
    };
    with_device(&state, &id, query.device, move |loaded, device| {
        let trace = loaded.snapshot.trace(device.device);
        let window = Window {
            start: query.start.unwrap_or(0),
            end: query.end.unwrap_or(usize::MAX),
            width: query.width.unwrap_or(1600),
            height: query.height.unwrap_or(400),
            axis,
        };
        let timeline = timeline(device, trace, window);
        let peak = device.replay.peak_allocated(trace);
        let ooms = trace
            .action
            .iter()
            .enumerate()
            .filter(|&(_, &a)| a == crate::snapshot::ActionCode::OOM)
            .map(|(i, _)| serde_json::json!({"event": i, "requested": trace.size[i], "device_free": trace.device_free.get(&i)}))
            .collect();
        let annotations = annotation_markers(&loaded.snapshot, trace, device.device, &timeline);
        let time_us = (trace.has_time && !trace.time_us.is_empty()).then(|| TimeSpan {
            first: trace.time_us[0],
            start: trace.time_us[timeline.start.min(trace.time_us.len() - 1)],
            end: trace.time_us[timeline.end.min(trace.time_us.len() - 1)],
        });
        let complete_from = device
            .replay
            .allocations
            .iter()
            .filter(|a| a.origin == Origin::FreedWithoutAlloc)
            .filter_map(|a| a.end)
            .max()
            .map(|end| end as usize + 1);
        Ok(TimelineAnswer {
            time_us,
            complete_from,
            device: device.device,
            timeline,
            markers: Markers {
                peak: serde_json::json!({"event": peak.event_index, "bytes": peak.bytes}),
                ooms,
                annotations,
            },
        })
    })
    .await
    .map(Json)
}

/// `external_annotations` inside the window, at most one per column (a long run records a
/// START/END pair per step, far more than a window can show).
fn annotation_markers(
    snapshot: &crate::snapshot::Snapshot,
    trace: &crate::snapshot::Trace,
    device: usize,
    timeline: &Timeline,
) -> Vec<serde_json::Value> {
    if !trace.has_time || timeline.column_start.is_empty() {
        return Vec::new();
    }
    let mut last_column = None;
    let mut markers = Vec::new();
    for annotation in &snapshot.external_annotations {
        if usize::try_from(annotation.device).ok() != Some(device) {
            continue;
        }
        let event = trace.time_us.partition_point(|&t| t < annotation.time_us);
        if event < timeline.start || event > timeline.end {
            continue;
        }
        let column = timeline.column_start.partition_point(|&b| b <= event);
        if last_column == Some(column) {
            continue;
        }
        last_column = Some(column);
        markers.push(serde_json::json!({
            "event": event,
            "time_us": annotation.time_us,
            "stage": annotation.fields.get("stage"),
            "name": annotation.fields.get("name"),
        }));
    }
    markers
}

#[derive(Debug, Deserialize)]
pub struct DeviceQuery {
    device: Option<usize>,
}

#[derive(Serialize)]
pub struct FrameView {
    name: String,
    filename: String,
    line: u64,
    hidden: bool,
}

#[derive(Serialize)]
pub struct AllocationView {
    id: u32,
    block_id: String,
    addr: u64,
    size: u64,
    stream: u64,
    start: Option<u32>,
    end: Option<u32>,
    start_time_us: Option<i64>,
    end_time_us: Option<i64>,
    origin: Origin,
    frames: Vec<FrameView>,
}

pub async fn allocation(
    State(state): State<AppState>,
    Path((id, n)): Path<(String, u32)>,
    Query(query): Query<DeviceQuery>,
) -> Result<Json<AllocationView>, ApiError> {
    with_device(&state, &id, query.device, move |loaded, device| {
        let a = device.replay.allocations.get(n as usize).ok_or_else(|| {
            ApiError::NotFound(format!("allocation {n} on device {}", device.device))
        })?;
        let snapshot = &loaded.snapshot;
        let trace = snapshot.trace(device.device);
        let time = |event: Option<u32>| {
            event.and_then(|e| {
                trace
                    .has_time
                    .then(|| trace.time_us.get(e as usize).copied())
                    .flatten()
            })
        };
        Ok(AllocationView {
            id: n,
            block_id: a.id(),
            addr: a.addr,
            size: a.size,
            stream: a.stream,
            start: a.start,
            end: a.end,
            start_time_us: time(a.start),
            end_time_us: time(a.end),
            origin: a.origin,
            frames: snapshot
                .stacks
                .get(a.stack)
                .iter()
                .map(|&f| {
                    let frame = snapshot.frames.get(f);
                    FrameView {
                        name: frame.name.to_string(),
                        filename: frame.filename.to_string(),
                        line: frame.line,
                        hidden: frame.is_hidden(),
                    }
                })
                .collect(),
        })
    })
    .await
    .map(Json)
}

#[derive(Debug, Deserialize)]
pub struct MomentQuery {
    device: Option<usize>,
    at: Option<i64>,
    mode: Option<String>,
}

pub async fn flame_view(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<MomentQuery>,
) -> Result<Json<Flame>, ApiError> {
    let mode = match query.mode.as_deref() {
        None | Some("allocated") => FlameMode::Allocated,
        Some("reserved") => FlameMode::Reserved,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "mode must be allocated or reserved, not {other:?}"
            )));
        }
    };
    with_device(&state, &id, query.device, move |loaded, device| {
        let trace = loaded.snapshot.trace(device.device);
        let at = match query.at {
            Some(at) => moment(Some(at)),
            None => device.replay.peak_allocated(trace).event_index,
        };
        let map = (mode == FlameMode::Reserved).then(|| memory_map(&loaded.snapshot, device, at));
        Ok(flame(&loaded.snapshot, device, at, mode, map.as_ref()))
    })
    .await
    .map(Json)
}

pub async fn segments_view(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<MomentQuery>,
) -> Result<Json<MemoryMap>, ApiError> {
    with_device(&state, &id, query.device, move |loaded, device| {
        let last = loaded.snapshot.trace(device.device).len().checked_sub(1);
        let at = match query.at {
            Some(at) => moment(Some(at)),
            None => last,
        };
        Ok(memory_map(&loaded.snapshot, device, at))
    })
    .await
    .map(Json)
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    device: Option<usize>,
    offset: Option<usize>,
    limit: Option<usize>,
    action: Option<String>,
    min_size: Option<u64>,
    frame: Option<String>,
    find: Option<usize>,
}

pub async fn events_view(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Result<Json<EventPage>, ApiError> {
    let filter = EventFilter {
        actions: query
            .action
            .as_deref()
            .map(|a| {
                a.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        min_size: query.min_size.unwrap_or(0),
        frame: query.frame.filter(|f| !f.trim().is_empty()),
    };
    with_device(&state, &id, query.device, move |loaded, device| {
        let trace = loaded.snapshot.trace(device.device);
        Ok(page(
            &loaded.snapshot,
            trace,
            &device.replay,
            &filter,
            query.offset.unwrap_or(0),
            query.limit.unwrap_or(200),
            query.find,
        ))
    })
    .await
    .map(Json)
}
