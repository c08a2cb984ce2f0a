//! `/s/{id}`: one snapshot's summary and its interactive views; this URL is the one to share.

use super::loading::{LoadCard, LoadView, render_loads};
use super::{Assets, assets, error_page, render};
use crate::analysis::DeviceSummary;
use crate::analysis::findings::Finding;
use crate::analysis::roles::BUILTIN_ROLES;
use crate::format::{bytes, count, duration_us};
use crate::server::AppState;
use crate::server::analysed::AnalysedSnapshot;
use crate::server::cache::LoadState;
use crate::server::extract::StoredSnapshot;
use crate::snapshot::ActionCode;
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
    /// Every finding: the file's, then each device's (warnings first within each).
    findings: Vec<FindingView>,
    /// Whether any device has a trace to diagnose: without one, "No problems found" would
    /// claim more than was looked at.
    diagnosed: bool,
    /// OOM events on every device: with one, "No problems found" would sit under the OOM.
    ooms: usize,
    devices: Vec<DeviceView>,
    settings: Vec<(String, String)>,
    annotations: usize,
}

struct NoteView {
    code: String,
    /// The device a note is about (`cuda:0`, `host (pinned)`), or empty for the whole file:
    /// two devices' notes would otherwise read as one banner said twice.
    device: String,
    message: String,
}

struct DeviceView {
    device: usize,
    /// `cuda:N`, or `host (pinned)`.
    label: String,
    trace_entries: String,
    actions: String,
    peak: String,
    peak_at: String,
    peak_reserved: String,
    allocated_now: String,
    reserved_now: String,
    free_now: String,
    /// Requested bytes whose free waits on another stream at the snapshot ("" when none).
    pending_now: String,
    /// Pending bytes counted in the peak ("" when none).
    peak_pending: String,
    /// What the reserved bytes are: segments from cudaMalloc, or mapped ranges when the
    /// allocator grows expandable segments (one cudaMalloc-free range each).
    reserved_source: &'static str,
    /// "segment" or "segments", after `segments`.
    segments_word: &'static str,
    largest_free: String,
    rounding: String,
    /// Free bytes outside the largest free block, and their share of the free bytes.
    free_elsewhere: String,
    fragmentation: String,
    /// `warn` only when a finding is about fragmentation on this device: the card never looks
    /// worse than the findings say. Else `ok`.
    free_health: &'static str,
    /// Why the free bytes are or are not a problem, in a few words.
    free_verdict: String,
    segments: String,
    ooms: Vec<OomView>,
    stacks: Vec<StackView>,
    /// Memory by role at the peak and at the dump; empty when nothing was live.
    role_bars: Vec<RoleBarView>,
}

/// One finding as a card: what is wrong, how big, the fix, and where to look.
struct FindingView {
    code: String,
    severity: String,
    /// `cuda:N` when the file has several devices, else empty.
    device: String,
    bytes: String,
    message: String,
    /// The fix, split at backticks: `(true, text)` is code (`torch.no_grad()`).
    fix: Vec<(bool, String)>,
    /// Query strings of the views that show it (`?tab=timeline&device=0&at=123`), with a label.
    links: Vec<(String, String)>,
}

impl FindingView {
    fn new(finding: &Finding, device: Option<usize>, name_device: bool) -> Self {
        let fix = finding
            .fix
            .split('`')
            .enumerate()
            .filter(|(_, part)| !part.is_empty())
            .map(|(i, part)| (i % 2 == 1, part.to_owned()))
            .collect();
        let device_param = device.map(|d| format!("&device={d}")).unwrap_or_default();
        let at_param = finding
            .event
            .map(|e| format!("&at={e}"))
            .unwrap_or_default();
        let links = vec![
            (
                format!("?tab=timeline{device_param}{at_param}"),
                "Timeline".to_owned(),
            ),
            (
                format!("?tab=flame{device_param}{at_param}"),
                "Flame graph".to_owned(),
            ),
        ];
        Self {
            code: finding.code.to_owned(),
            severity: finding.severity.to_owned(),
            device: match device {
                Some(d) if name_device => format!("cuda:{d}"),
                _ => String::new(),
            },
            bytes: bytes(finding.bytes),
            message: finding.message.clone(),
            fix,
            links,
        }
    }
}

/// A stacked bar of live bytes by role at one moment, drawn against the reserved bytes.
struct RoleBarView {
    /// `peak` or `snapshot`.
    moment: String,
    label: String,
    total: String,
    total_bytes: u64,
    reserved: String,
    segments: Vec<RoleSegmentView>,
    /// Freed but waiting on another stream (`record_stream`), in percent of the bar, and bytes
    /// ("" when none).
    pending_width: String,
    pending: String,
    /// Reserved but neither allocated nor pending, in percent of the bar.
    unused_width: String,
    unused: String,
}

struct RoleSegmentView {
    role: String,
    bytes: String,
    bytes_exact: u64,
    share: String,
    /// Width in percent of the bar (the bar is the larger of reserved and allocated).
    width: String,
}

impl RoleBarView {
    fn new(
        moment: &str,
        label: &str,
        roles: &std::collections::BTreeMap<String, u64>,
        pending: u64,
        reserved: u64,
    ) -> Option<Self> {
        let total: u64 = roles.values().sum();
        if total == 0 && pending == 0 {
            return None;
        }
        // Built-in roles in their fixed order (the same as static/lib/roles.js, so colours and
        // order match the timeline), then custom roles by name.
        let rank = |role: &str| {
            BUILTIN_ROLES
                .iter()
                .position(|r| r.name() == role)
                .unwrap_or(BUILTIN_ROLES.len())
        };
        let mut ordered: Vec<(&String, &u64)> = roles.iter().filter(|(_, b)| **b > 0).collect();
        ordered.sort_by(|a, b| (rank(a.0), a.0).cmp(&(rank(b.0), b.0)));
        let scale = reserved.max(total + pending).max(1) as f64;
        let unused = reserved.saturating_sub(total + pending);
        Some(Self {
            moment: moment.to_owned(),
            label: label.to_owned(),
            total: bytes(total),
            total_bytes: total,
            reserved: bytes(reserved),
            segments: ordered
                .into_iter()
                .map(|(role, b)| RoleSegmentView {
                    role: role.clone(),
                    bytes: bytes(*b),
                    bytes_exact: *b,
                    share: format!("{:.0}%", *b as f64 * 100.0 / total.max(1) as f64),
                    width: format!("{:.3}", *b as f64 * 100.0 / scale),
                })
                .collect(),
            pending_width: format!("{:.3}", pending as f64 * 100.0 / scale),
            pending: if pending > 0 {
                bytes(pending)
            } else {
                String::new()
            },
            unused_width: format!("{:.3}", unused as f64 * 100.0 / scale),
            unused: bytes(unused),
        })
    }
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
    /// The frame that tells this stack from others with the same innermost frame (empty when
    /// no other row shares it): five rows all named `linear.py:134 forward` say nothing apart.
    via: String,
    frames: Vec<String>,
}

/// Free bytes outside the largest free block matter only when they are a real share of what the
/// device reserves (1/this) and more than `FREE_BYTES_THAT_MATTER_FLOOR`: 95% fragmentation of a
/// few MiB is no warning, whatever the percentage says.
const FREE_BYTES_THAT_MATTER_DIVISOR: u64 = 20;
const FREE_BYTES_THAT_MATTER_FLOOR: u64 = 256 << 20;

/// The first frame (innermost first, after the shared innermost one) at which each stack parts
/// from the closest other stack with the same innermost frame; `None` for a stack alone.
fn distinguishing_frames(stacks: &[Vec<String>]) -> Vec<Option<usize>> {
    stacks
        .iter()
        .enumerate()
        .map(|(i, frames)| {
            stacks
                .iter()
                .enumerate()
                .filter(|&(j, other)| j != i && other.first() == frames.first())
                .map(|(_, other)| frames.iter().zip(other).take_while(|(a, b)| a == b).count())
                .max()
                .filter(|&index| index < frames.len())
        })
        .collect()
}

impl DeviceView {
    fn new(
        device: &DeviceSummary,
        trace: &crate::snapshot::Trace,
        source: &crate::snapshot::SourceInfo,
        expandable: bool,
    ) -> Self {
        let start = trace.time_us.first().unwrap_or(0);
        let at = |event: Option<usize>| match event {
            None => "before the first event".to_owned(),
            Some(i) if trace.has_time => format!(
                "event {} · {} in",
                count(i as u64),
                duration_us(trace.time_us.at(i).unwrap_or(start) - start)
            ),
            Some(i) => format!("event {}", count(i as u64)),
        };
        let stats = &device.segment_stats;
        // The card follows the findings: only a fragmentation finding makes it a warning.
        let fragmentation_finding = device.findings.iter().any(|f| f.code == "fragmentation");
        let labels: Vec<Vec<String>> = device
            .top_stacks_at_peak
            .iter()
            .map(|stack| stack.frames.iter().map(|f| short_frame_label(f)).collect())
            .collect();
        let vias = distinguishing_frames(&labels);
        let elsewhere = stats.external_free.saturating_sub(stats.largest_free_block);
        let largest = device
            .top_stacks_at_peak
            .first()
            .map_or(1, |s| s.bytes.max(1));
        Self {
            label: source.device_label(device.device),
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
            pending_now: nonzero_bytes(stats.pending_free),
            peak_pending: nonzero_bytes(device.pending_at_peak_bytes),
            reserved_source: if expandable {
                "mapped ranges of expandable segments"
            } else {
                "segments from cudaMalloc"
            },
            segments_word: if device.segments == 1 {
                "segment"
            } else {
                "segments"
            },
            largest_free: bytes(stats.largest_free_block),
            rounding: bytes(stats.internal_free),
            free_elsewhere: bytes(elsewhere),
            fragmentation: format!("{:.0}%", stats.fragmentation() * 100.0),
            free_health: if fragmentation_finding { "warn" } else { "ok" },
            free_verdict: if fragmentation_finding {
                "a finding above: fragmentation".to_owned()
            } else if stats.external_free == 0 {
                "nothing cached".to_owned()
            } else if elsewhere < FREE_BYTES_THAT_MATTER_FLOOR
                || elsewhere.saturating_mul(FREE_BYTES_THAT_MATTER_DIVISOR)
                    < stats.reserved.max(device.peak_reserved_bytes)
            {
                "too little to matter".to_owned()
            } else {
                "smaller requests reuse it; no finding".to_owned()
            },
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
                .zip(&vias)
                .map(|(stack, via)| StackView {
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
                    via: via
                        .and_then(|i| stack.frames.get(i))
                        .map(|f| short_frame_label(f))
                        .unwrap_or_default(),
                    frames: stack.frames.iter().map(|f| short_frame_label(f)).collect(),
                })
                .collect(),
            role_bars: [
                RoleBarView::new(
                    "peak",
                    "At the peak",
                    &device.roles_at_peak,
                    device.pending_at_peak_bytes,
                    device.peak_reserved_bytes,
                ),
                RoleBarView::new(
                    "snapshot",
                    "At the snapshot",
                    &device.roles_at_snapshot,
                    device.pending_bytes_at_snapshot,
                    device.reserved_bytes_at_snapshot,
                ),
            ]
            .into_iter()
            .flatten()
            .collect(),
        }
    }
}

/// `bytes`, or "" for none (a figure the page leaves out).
fn nonzero_bytes(value: u64) -> String {
    if value == 0 {
        String::new()
    } else {
        bytes(value)
    }
}

/// `GET /s/{id}`: one snapshot; this URL is the one to share. A snapshot not in memory (after a
/// restart, or dropped for others) answers at once with a page that shows its parse (which this
/// starts) and becomes the full page when it is ready.
pub async fn snapshot(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    // Not the extractor: a bad link must get this page, not the API's JSON error.
    let stored = match StoredSnapshot::find(&state, &id).await {
        Ok(stored) => stored,
        Err(e) => return error_page(e),
    };
    match stored.ready_or_start(&state) {
        Ok(Ok(loaded)) => render(snapshot_page(&state, stored, &loaded)),
        Ok(Err(progress)) => loading_page(stored, progress),
        Err(e) => error_page(e),
    }
}

/// The page of a snapshot being parsed: its stored name and size, and the card of its load
/// (`LoadCard`), whose script (`static/loading.js`) reloads into the full page when it is ready.
#[derive(Template)]
#[template(path = "loading.html")]
struct LoadingPage {
    assets: Assets,
    loading_js: String,
    name: String,
    filename: String,
    size: String,
    uploaded_at_ms: i64,
    card: LoadCard,
}

fn loading_page(stored: StoredSnapshot, progress: LoadState) -> Response {
    let card = LoadCard {
        heading: "Opening this snapshot",
        failed_heading: "This snapshot could not be opened",
        why: "The server reads a snapshot once after it starts, or after it made room for others; this page becomes the snapshot's page when it is ready.",
        // Its name is the page's heading.
        name_each: false,
        loads: vec![LoadView::new(&stored, progress)],
    };
    let failed = card.failed();
    let record = stored.record;
    render_loads(
        LoadingPage {
            assets: Assets::new(),
            loading_js: assets::url("loading.js"),
            name: record.name,
            filename: record.filename,
            size: bytes(record.size_bytes),
            uploaded_at_ms: record.uploaded_at_ms,
            card,
        },
        failed,
    )
}

/// The full page of a parsed snapshot.
fn snapshot_page(
    state: &AppState,
    stored: StoredSnapshot,
    loaded: &AnalysedSnapshot,
) -> SnapshotPage {
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
    let name_device = summary.devices.len() > 1;
    let findings = summary
        .findings
        .iter()
        .map(|f| FindingView::new(f, None, false))
        .chain(summary.devices.iter().flat_map(|d| {
            d.findings
                .iter()
                .map(move |f| FindingView::new(f, Some(d.device), name_device))
        }))
        .collect();
    SnapshotPage {
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
                device: n
                    .device
                    .filter(|_| summary.devices.len() > 1)
                    .map(|d| snapshot.source.device_label(d))
                    .unwrap_or_default(),
                message: n.message.clone(),
            })
            .collect(),
        findings,
        diagnosed: summary.devices.iter().any(|d| d.trace_entries > 0),
        ooms: summary.devices.iter().map(|d| d.oom_events.len()).sum(),
        devices: summary
            .devices
            .iter()
            .map(|d| {
                let trace = snapshot.trace(d.device);
                let expandable = snapshot.device_segments(d.device).any(|s| s.is_expandable)
                    || [ActionCode::SEGMENT_MAP, ActionCode::SEGMENT_UNMAP]
                        .into_iter()
                        .any(|action| trace.events_of(action).next().is_some());
                DeviceView::new(d, trace, &snapshot.source, expandable)
            })
            .collect(),
        settings,
        annotations: snapshot.external_annotations.len(),
    }
}
