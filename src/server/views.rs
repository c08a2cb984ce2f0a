//! JSON for the interactive views (see `docs/api.md`). Each answer is computed from the cached
//! analysis on a blocking thread and is bounded by the request (pixel width, page size), not by
//! the trace. The handlers only read the request and call the analysis.

use super::analysed::AnalysedSnapshot;
use super::error::ApiError;
use super::extract::{DeviceChoice, DeviceMoment, LoadedSnapshot, one_of};
use super::wire::{
    AllocationView, BandRoles, ColumnAnswer, ColumnRow, FlameAnswer, FrameView, RolesAnswer,
    TimeSpan, TimelineAnswer,
};
use crate::analysis::DeviceAnalysis;
use crate::analysis::events::{EventFilter, EventPage, EventStack, event_stack, page};
use crate::analysis::flame::{FlameMode, flame, flame_by_role};
use crate::analysis::history::{History, history};
use crate::analysis::markers::{Columns, Markers, annotation_markers};
use crate::analysis::memory_map::{MemoryMap, memory_map};
use crate::analysis::moment::Moment;
use crate::analysis::roles::{DeviceRoles, UserRules, role_window};
use crate::analysis::segment_timeline::{SegmentTimeline, segment_timeline};
use crate::analysis::timeline::{
    Axis, ColumnError, Detail, MAX_BANDS, MAX_COLUMN_EVENTS, Window, column_allocations,
    timeline_detailed,
};
use axum::Json;
use axum::extract::{Path, Query};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct TimelineQuery {
    start: Option<usize>,
    end: Option<usize>,
    width: Option<usize>,
    height: Option<usize>,
    axis: Option<String>,
    /// The byte axis's zoom: bytes at the plot's bottom and top (both or neither).
    y0: Option<u64>,
    y1: Option<u64>,
    /// Most allocations drawn one by one (PyTorch's viewer's "detail").
    detail: Option<usize>,
}

impl TimelineQuery {
    /// The window asked for, with the defaults: the whole trace, 1600 by 400 pixels, by event.
    fn window(&self) -> Result<Window, ApiError> {
        let axis = one_of(
            "axis",
            self.axis.as_deref(),
            &[("event", Axis::Event), ("time", Axis::Time)],
        )?;
        Ok(Window {
            start: self.start.unwrap_or(0),
            end: self.end.unwrap_or(usize::MAX),
            width: self.width.unwrap_or(1600),
            height: self.height.unwrap_or(400),
            axis,
        })
    }

    /// The byte zoom and detail asked for (default: no zoom, `MAX_BANDS` bands).
    fn detail(&self) -> Result<Detail, ApiError> {
        let y_range = match (self.y0, self.y1) {
            (None, None) => None,
            (Some(low), Some(high)) if low < high => Some((low, high)),
            _ => {
                return Err(ApiError::BadRequest(
                    "y0 and y1 go together, with y0 < y1 (bytes at the bottom and top of the plot)"
                        .into(),
                ));
            }
        };
        Ok(Detail {
            y_range,
            max_bands: self.detail.unwrap_or(MAX_BANDS),
        })
    }
}

/// `GET /api/snapshots/{id}/timeline`.
pub async fn timeline_view(
    snapshot: LoadedSnapshot,
    Query(device): Query<DeviceChoice>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<TimelineAnswer>, ApiError> {
    let window = query.window()?;
    let detail = query.detail()?;
    snapshot
        .on_device(device, move |loaded, device| {
            let trace = loaded.snapshot.trace(device.device);
            let timeline = timeline_detailed(device, trace, window, detail);
            let columns = Columns {
                start: timeline.start,
                end: timeline.end,
                column_start: &timeline.column_start,
            };
            let marks = loaded.timeline_marks(device);
            let markers = Markers {
                peak: marks.peak,
                ooms: marks.ooms,
                annotations: annotation_markers(
                    &loaded.snapshot.external_annotations,
                    trace,
                    device.device,
                    columns,
                ),
            };
            let time_us = (trace.has_time && !trace.time_us.is_empty()).then(|| TimeSpan {
                first: trace.time_us.get(0),
                start: trace
                    .time_us
                    .get(timeline.start.min(trace.time_us.len() - 1)),
                end: trace.time_us.get(timeline.end.min(trace.time_us.len() - 1)),
            });
            let band_roles = band_roles(device_roles(loaded, device), &timeline.bands.id);
            Ok(TimelineAnswer {
                device: device.device,
                time_us,
                complete_from: marks.complete_from,
                markers,
                timeline,
                band_roles,
            })
        })
        .await
        .map(Json)
}

/// The roles the views show for `device`: decided once per loaded snapshot (the summary did it
/// when the snapshot loaded, with the server's `--roles` rules: the first rules win, so the
/// default rules given here are not applied again), so every view agrees with the overview.
fn device_roles<'a>(loaded: &'a AnalysedSnapshot, device: &'a DeviceAnalysis) -> &'a DeviceRoles {
    device.roles(&loaded.snapshot, &UserRules::default())
}

/// The role and rule of each band, as indices into the names and sentences used.
fn band_roles(roles: &DeviceRoles, bands: &[crate::analysis::replay::AllocationId]) -> BandRoles {
    let mut answer = BandRoles {
        names: roles.names().to_vec(),
        ..BandRoles::default()
    };
    let mut reason_index: std::collections::HashMap<&str, u16> = Default::default();
    for &id in bands {
        answer.role.push(roles.role_index_of(id));
        let because = roles.because(id);
        let next = reason_index.len() as u16;
        let index = *reason_index.entry(because).or_insert_with(|| {
            answer.reasons.push(because.to_owned());
            next
        });
        answer.because.push(index);
    }
    answer
}

/// `GET /api/snapshots/{id}/roles`: bytes per role per column of the window the timeline query
/// names (same parameters, same columns; `height` is ignored).
pub async fn roles_view(
    snapshot: LoadedSnapshot,
    Query(device): Query<DeviceChoice>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<RolesAnswer>, ApiError> {
    let window = query.window()?;
    snapshot
        .on_device(device, move |loaded, device| {
            let trace = loaded.snapshot.trace(device.device);
            let roles = device_roles(loaded, device);
            Ok(RolesAnswer {
                device: device.device,
                window: role_window(device, roles, trace, window),
                axis: window.axis,
            })
        })
        .await
        .map(Json)
}

#[derive(Debug, Deserialize)]
pub struct ColumnQuery {
    column: usize,
    limit: Option<usize>,
}

/// `GET /api/snapshots/{id}/timeline/column`: the allocations a column of the timeline answer
/// to the same query draws in grey, largest first, with their roles and first frames.
pub async fn timeline_column_view(
    snapshot: LoadedSnapshot,
    Query(device): Query<DeviceChoice>,
    Query(query): Query<TimelineQuery>,
    Query(column): Query<ColumnQuery>,
) -> Result<Json<ColumnAnswer>, ApiError> {
    let window = query.window()?;
    let detail = query.detail()?;
    snapshot
        .on_device(device, move |loaded, device| {
            let snapshot = &loaded.snapshot;
            let trace = snapshot.trace(device.device);
            let listed = column_allocations(
                device,
                trace,
                window,
                detail,
                column.column,
                column.limit.unwrap_or(50),
            )
            .map_err(|error| match error {
                ColumnError::NoSuchColumn { column, columns } => ApiError::BadRequest(format!(
                    "column {column} is not in this window (it has {columns} columns)"
                )),
                ColumnError::TooLong { events } => ApiError::BadRequest(format!(
                    "the column spans {events} events; ask for a narrower window or more columns \
                     (a listed column spans at most {MAX_COLUMN_EVENTS} events)"
                )),
            })?;
            let roles = device_roles(loaded, device);
            let allocations = &device.replay.allocations;
            // A row shows the first few frames that PyTorch's viewer would show.
            const ROW_FRAMES: usize = 3;
            let rows = listed
                .ids
                .iter()
                .map(|&id| {
                    let a = allocations.at(id as usize);
                    ColumnRow {
                        id,
                        block_id: a.id(),
                        size: a.size,
                        start: a.start,
                        end: a.end,
                        role: roles.role_of(id).to_owned(),
                        frames: snapshot
                            .stacks
                            .get(a.stack)
                            .iter()
                            .map(|&f| snapshot.frames.get(f))
                            .filter(|frame| !frame.is_hidden())
                            .take(ROW_FRAMES)
                            .map(|frame| FrameView {
                                name: frame.name.to_string(),
                                filename: frame.filename.to_string(),
                                line: frame.line,
                                hidden: false,
                            })
                            .collect(),
                    }
                })
                .collect();
            Ok(ColumnAnswer {
                device: device.device,
                column: listed.column,
                first_event: listed.first_event,
                last_event: listed.last_event,
                total: listed.total,
                total_bytes: listed.total_bytes,
                rows,
            })
        })
        .await
        .map(Json)
}

/// `GET /api/snapshots/{id}/allocations/{n}`.
pub async fn allocation(
    snapshot: LoadedSnapshot,
    Path((_, n)): Path<(String, u32)>,
    Query(device): Query<DeviceChoice>,
) -> Result<Json<AllocationView>, ApiError> {
    let snapshot_id = snapshot.stored.id.to_string();
    snapshot
        .on_device(device, move |loaded, device| {
            let a =
                device
                    .replay
                    .allocations
                    .get(n as usize)
                    .ok_or(ApiError::AllocationNotFound {
                        snapshot: snapshot_id,
                        index: n,
                        device: device.device,
                    })?;
            let snapshot = &loaded.snapshot;
            let trace = snapshot.trace(device.device);
            let time = |event: Option<u32>| {
                event.and_then(|e| {
                    trace
                        .has_time
                        .then(|| trace.time_us.at(e as usize))
                        .flatten()
                })
            };
            let roles = device_roles(loaded, device);
            Ok(AllocationView {
                role: roles.role_of(n).to_owned(),
                because: roles.because(n).to_owned(),
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

/// Runs `work` on the device `at` picks, with the event its moment resolves to (`default`
/// when the request names none; `None`: before the first event).
async fn at_moment<T, F>(
    snapshot: &LoadedSnapshot,
    at: DeviceMoment,
    default: Moment,
    work: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&AnalysedSnapshot, &DeviceAnalysis, Option<usize>) -> Result<T, ApiError>
        + Send
        + 'static,
{
    let moment = at.moment_or(default);
    snapshot
        .on_device(at.device, move |loaded, device| {
            let trace = loaded.snapshot.trace(device.device);
            work(loaded, device, moment.resolve(trace, &device.replay))
        })
        .await
}

#[derive(Debug, Deserialize)]
pub struct FlameQuery {
    mode: Option<String>,
    /// `stack` (default) or `role`: the role as the first frame of every stack.
    by: Option<String>,
}

/// `GET /api/snapshots/{id}/flame`: live memory by stack at a moment (default: the peak).
pub async fn flame_view(
    snapshot: LoadedSnapshot,
    at: DeviceMoment,
    Query(query): Query<FlameQuery>,
) -> Result<Json<FlameAnswer>, ApiError> {
    let mode = one_of(
        "mode",
        query.mode.as_deref(),
        &[
            ("allocated", FlameMode::Allocated),
            ("reserved", FlameMode::Reserved),
        ],
    )?;
    let by_role = one_of(
        "by",
        query.by.as_deref(),
        &[("stack", false), ("role", true)],
    )?;
    if by_role && mode == FlameMode::Reserved {
        return Err(ApiError::BadRequest(
            "by=role shows live allocations by role; use it with mode=allocated (reserved bytes that no allocation holds have no role)".into(),
        ));
    }
    at_moment(&snapshot, at, Moment::Peak, move |loaded, device, at| {
        if by_role {
            let roles = device_roles(loaded, device);
            return Ok(FlameAnswer {
                flame: flame_by_role(&loaded.snapshot, device, at, roles),
                mode,
            });
        }
        let map = (mode == FlameMode::Reserved).then(|| memory_map(&loaded.snapshot, device, at));
        Ok(FlameAnswer {
            flame: flame(&loaded.snapshot, device, at, mode, map.as_ref()),
            mode,
        })
    })
    .await
    .map(Json)
}

/// `GET /api/snapshots/{id}/segments`: the segment map at a moment (default: the snapshot's).
pub async fn segments_view(
    snapshot: LoadedSnapshot,
    at: DeviceMoment,
) -> Result<Json<MemoryMap>, ApiError> {
    at_moment(&snapshot, at, Moment::End, move |loaded, device, at| {
        Ok(memory_map(&loaded.snapshot, device, at))
    })
    .await
    .map(Json)
}

#[derive(Debug, Deserialize)]
pub struct HistoryQuery {
    before: Option<usize>,
    after: Option<usize>,
}

/// `GET /api/snapshots/{id}/history`: the events around a moment (default: the last), with the
/// moment's stack and totals: the Allocator State History beside the segment map.
pub async fn history_view(
    snapshot: LoadedSnapshot,
    at: DeviceMoment,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<History>, ApiError> {
    at_moment(&snapshot, at, Moment::End, move |loaded, device, at| {
        Ok(history(
            &loaded.snapshot,
            device,
            at,
            query.before.unwrap_or(20),
            query.after.unwrap_or(20),
        ))
    })
    .await
    .map(Json)
}

/// `GET /api/snapshots/{id}/segment-timeline`: the reserved ranges over the window, one band
/// each (the Active Cached Segment Timeline), bounded by the width like the timeline.
pub async fn segment_timeline_view(
    snapshot: LoadedSnapshot,
    Query(device): Query<DeviceChoice>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<SegmentTimeline>, ApiError> {
    let window = query.window()?;
    snapshot
        .on_device(device, move |loaded, device| {
            Ok(segment_timeline(&loaded.snapshot, device, window))
        })
        .await
        .map(Json)
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    offset: Option<usize>,
    limit: Option<usize>,
    action: Option<String>,
    min_size: Option<u64>,
    frame: Option<String>,
    find: Option<usize>,
}

/// `GET /api/snapshots/{id}/events`: one page of the device's events, filtered.
pub async fn events_view(
    snapshot: LoadedSnapshot,
    Query(device): Query<DeviceChoice>,
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
    snapshot
        .on_device(device, move |loaded, device| {
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

#[derive(Debug, Deserialize)]
pub struct EventStackQuery {
    /// The list's frame filter, so the frames it matched are marked.
    frame: Option<String>,
}

/// `GET /api/snapshots/{id}/events/{index}`: one event of the device's trace with its whole
/// stack; 404 past the trace's end.
pub async fn event_view(
    snapshot: LoadedSnapshot,
    Path((_, index)): Path<(String, usize)>,
    Query(device): Query<DeviceChoice>,
    Query(query): Query<EventStackQuery>,
) -> Result<Json<EventStack>, ApiError> {
    let frame = query.frame.filter(|f| !f.trim().is_empty());
    snapshot
        .on_device(device, move |loaded, device| {
            let trace = loaded.snapshot.trace(device.device);
            event_stack(
                &loaded.snapshot,
                trace,
                &device.replay,
                index,
                frame.as_deref(),
            )
            .ok_or_else(|| {
                ApiError::PageNotFound(format!(
                    "event {index} (the trace of {} has {} events)",
                    loaded.snapshot.source.device_label(device.device),
                    trace.len()
                ))
            })
        })
        .await
        .map(Json)
}
