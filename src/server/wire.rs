//! The JSON the server sends and the pages read: one type per answer, so a field is added,
//! renamed or removed in one place. `docs/api.md` documents every endpoint with these types, and
//! `tests/api_contract.rs` checks each answer of a real server against the documented shapes.
//!
//! Types that are analysis results in their own right ([`Summary`], [`Flame`], [`MemoryMap`],
//! [`EventPage`], [`OomReport`], [`SnapshotDiff`], [`Markers`]) live beside the analysis that
//! makes them; this module composes them into answers.

use super::cache::LoadState;
use super::store::{AuditEntry, Record, Unlisted};
use crate::analysis::flame::{Flame, FlameMode};
use crate::analysis::markers::Markers;
use crate::analysis::roles::RoleWindow;
use crate::analysis::timeline::{Axis, Timeline};
use crate::analysis::{Origin, Summary};
use serde::{Deserialize, Serialize};

pub use super::compare::CompareAnswer;
pub use crate::analysis::events::EventPage;
pub use crate::analysis::memory_map::MemoryMap;
pub use crate::analysis::oom::OomReport;

/// A stored snapshot as the API lists it: its record, and the page to share.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotView {
    #[serde(flatten)]
    pub record: Record,
    /// The page to share.
    pub url: String,
}

impl SnapshotView {
    pub fn new(record: &Record, public_url: &str) -> Self {
        Self {
            record: record.clone(),
            url: format!("{public_url}/s/{}", record.id),
        }
    }

    /// The summary row stored with the record.
    pub fn summary(&self) -> SummaryRow {
        SummaryRow::from_stored(&self.record.summary)
    }
}

/// The short summary stored with each snapshot (SQLite keeps it as this type's JSON), so the
/// list, the picker and the group page need no parsing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, serde(deny_unknown_fields))]
pub struct SummaryRow {
    pub devices: Vec<DeviceRow>,
    /// The largest of the devices' peaks.
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Out-of-memory events on all devices.
    pub oom_events: u64,
    /// The codes of the snapshot's notes (`trace_incomplete`, `no_history`, ...).
    pub notes: Vec<String>,
}

/// One device's line of a [`SummaryRow`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, serde(deny_unknown_fields))]
pub struct DeviceRow {
    pub device: usize,
    pub trace_entries: usize,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub reserved_bytes_at_snapshot: u64,
    pub oom_events: u64,
    /// The innermost frame of the stack holding the most at the peak (`file:line:name`), of the
    /// stacks with a Python frame: `<non-python>` says nothing that tells ranks apart.
    pub top_stack: Option<String>,
    /// Bytes that stack holds at the peak.
    pub top_stack_bytes: u64,
    /// Bytes at the peak allocated with no Python frame on their stack (of the listed stacks).
    pub non_python_bytes: u64,
}

/// A stack the summary lists without any Python frame (allocated from C++ or CUDA graphs only).
fn is_non_python(frames: &[String]) -> bool {
    frames.iter().all(|f| f == "<non-python>")
}

impl SummaryRow {
    pub fn new(summary: &Summary) -> Self {
        let devices: Vec<DeviceRow> = summary
            .devices
            .iter()
            .map(|d| DeviceRow {
                device: d.device,
                trace_entries: d.trace_entries,
                peak_allocated_bytes: d.peak_allocated_bytes,
                peak_reserved_bytes: d.peak_reserved_bytes,
                reserved_bytes_at_snapshot: d.reserved_bytes_at_snapshot,
                oom_events: d.oom_events.len() as u64,
                top_stack: d
                    .top_stacks_at_peak
                    .iter()
                    .find(|s| !is_non_python(&s.frames))
                    .and_then(|s| s.frames.first())
                    .cloned(),
                top_stack_bytes: d
                    .top_stacks_at_peak
                    .iter()
                    .find(|s| !is_non_python(&s.frames))
                    .map_or(0, |s| s.bytes),
                non_python_bytes: d
                    .top_stacks_at_peak
                    .iter()
                    .filter(|s| is_non_python(&s.frames))
                    .map(|s| s.bytes)
                    .sum(),
            })
            .collect();
        Self {
            peak_allocated_bytes: devices
                .iter()
                .map(|d| d.peak_allocated_bytes)
                .max()
                .unwrap_or(0),
            peak_reserved_bytes: devices
                .iter()
                .map(|d| d.peak_reserved_bytes)
                .max()
                .unwrap_or(0),
            oom_events: devices.iter().map(|d| d.oom_events).sum(),
            notes: summary.notes.iter().map(|n| n.code.to_owned()).collect(),
            devices,
        }
    }

    /// As the store keeps it.
    pub fn to_stored(&self) -> serde_json::Value {
        // A struct of numbers, strings and lists always serialises.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// A stored row. The store has checked it is JSON; a row of another shape (written by a
    /// different version) reads as empty rather than failing the whole list, and is logged.
    pub fn from_stored(stored: &serde_json::Value) -> Self {
        match Self::deserialize(stored) {
            Ok(row) => row,
            Err(error) => {
                tracing::warn!(%error, "a stored summary row has an unexpected shape");
                Self::default()
            }
        }
    }

    /// `cuda:0`, `cuda:1`, ...
    pub fn device_names(&self) -> Vec<String> {
        self.devices
            .iter()
            .map(|d| format!("cuda:{}", d.device))
            .collect()
    }
}

/// `GET /api/snapshots`.
#[derive(Serialize)]
pub struct SnapshotList {
    pub snapshots: Vec<SnapshotView>,
    /// Rows that could not be listed (an unreadable summary, a lost file) and why; omitted when
    /// there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<Unlisted>,
}

/// `GET /api/snapshots/{id}`.
#[derive(Serialize)]
pub struct SnapshotDetail {
    #[serde(flatten)]
    pub view: SnapshotView,
    /// The full summary: per device peaks, totals, OOM events, top stacks; notes; source.
    pub analysis: Summary,
    pub allocator_settings: serde_json::Value,
    pub external_annotations: usize,
    /// The device the views show when the page's URL names none (the first with a trace).
    pub default_device: usize,
}

/// `GET /api/snapshots/{id}/status`: where the snapshot's parse stands, without waiting for it
/// (asking starts it when the snapshot is not in memory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum LoadStatus {
    /// Waiting for other snapshots' loads to end (the server parses a few at a time).
    Queued,
    /// Reading the stored file: `read` of `total` bytes.
    Reading { read: u64, total: u64 },
    /// Read; computing the replay and the summary.
    Analysing,
    /// Another server (a replica on the same store) is reading this snapshot; this one opens
    /// the index it writes when it is done.
    Waiting,
    /// In memory: every view answers at once.
    Ready,
    /// The load failed, for the reason given (for a person); asked again within a minute, the
    /// same answer, after that the next request tries again.
    Failed { error: String },
}

impl From<LoadState> for LoadStatus {
    fn from(state: LoadState) -> Self {
        match state {
            LoadState::Queued => Self::Queued,
            LoadState::Reading { read, total } => Self::Reading { read, total },
            LoadState::Analysing => Self::Analysing,
            LoadState::WaitingForAnotherServer => Self::Waiting,
            LoadState::Ready => Self::Ready,
            LoadState::Failed(error) => Self::Failed { error },
        }
    }
}

/// `GET /api/snapshots/{id}/timeline`.
#[derive(Serialize)]
pub struct TimelineAnswer {
    /// The device shown (the server's default when the query named none).
    pub device: usize,
    #[serde(flatten)]
    pub timeline: Timeline,
    pub markers: Markers,
    /// `time_us` of the trace's first event and of the window's first and last events (`null`
    /// when the trace has no times): the time axis's labels.
    pub time_us: Option<TimeSpan>,
    /// The first event from which the history is complete, when the trace starts mid-run
    /// (frees without a matching alloc); `null` when it is complete.
    pub complete_from: Option<usize>,
    /// The role of each band (in `bands` order) and why: `timeline?…` colours by role from it.
    pub band_roles: BandRoles,
}

#[derive(Serialize)]
pub struct TimeSpan {
    pub first: i64,
    pub start: i64,
    pub end: i64,
}

/// `GET /api/snapshots/{id}/flame`: the flame graph and the mode it was made in.
#[derive(Serialize)]
pub struct FlameAnswer {
    #[serde(flatten)]
    pub flame: Flame,
    pub mode: FlameMode,
}

/// One frame of an allocation's stack.
#[derive(Serialize)]
pub struct FrameView {
    pub name: String,
    pub filename: String,
    pub line: u64,
    /// A frame PyTorch's viewer hides (its own internals).
    pub hidden: bool,
}

/// `GET /api/snapshots/{id}/timeline/column`: the allocations one timeline column draws in grey.
#[derive(Serialize)]
pub struct ColumnAnswer {
    pub device: usize,
    pub column: usize,
    pub first_event: usize,
    pub last_event: usize,
    /// Every allocation of the column not drawn as a band: how many, how many bytes.
    pub total: usize,
    pub total_bytes: u64,
    /// The largest of them (at most `limit`), largest first; `total - rows.len()` more.
    pub rows: Vec<ColumnRow>,
}

/// One allocation of a column's list: what the row shows, and its first visible frames.
#[derive(Serialize)]
pub struct ColumnRow {
    pub id: u32,
    pub block_id: String,
    pub size: u64,
    pub start: Option<u32>,
    pub end: Option<u32>,
    pub role: String,
    pub frames: Vec<FrameView>,
}

/// `GET /api/snapshots/{id}/allocations/{n}`.
#[derive(Serialize)]
pub struct AllocationView {
    pub id: u32,
    pub block_id: String,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub start: Option<u32>,
    pub end: Option<u32>,
    pub start_time_us: Option<i64>,
    pub end_time_us: Option<i64>,
    pub origin: Origin,
    pub frames: Vec<FrameView>,
    /// Why the memory is used (docs/roles.md): `parameter`, `activation`, ... or a custom role.
    pub role: String,
    /// The rule that decided `role`, in words.
    pub because: String,
}

// ---- Roles in the views (issue 11: the /roles window, band roles, flame by role) ----------

/// `GET /api/snapshots/{id}/roles`: bytes per role per column of a timeline window, at each
/// column's peak (the stacked area tops out on the timeline's `allocated_max`).
#[derive(Serialize)]
pub struct RolesAnswer {
    /// The device shown (the server's default when the query named none).
    pub device: usize,
    #[serde(flatten)]
    pub window: RoleWindow,
    pub axis: Axis,
}

/// The roles of a timeline answer's bands, as indices into small tables (a role name and a
/// rule's sentence repeat across thousands of bands).
#[derive(Serialize, Default)]
pub struct BandRoles {
    /// Role names; `role[i]` indexes it.
    pub names: Vec<String>,
    /// Per band, its role.
    pub role: Vec<u8>,
    /// The distinct `because` sentences; `because[i]` indexes it.
    pub reasons: Vec<String>,
    /// Per band, the rule that decided its role.
    pub because: Vec<u16>,
}

// ---- end of roles in the views ---------------------------------------------------------------

/// `GET /api/groups/{name}`.
#[derive(Serialize)]
pub struct GroupAnswer {
    pub group: String,
    /// Sorted by name.
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
    pub top_stack_bytes: u64,
    /// Bytes at the peak with no Python frame on their stack.
    pub non_python_bytes: u64,
    /// Peak more than 10% away from the group's median, or an OOM.
    pub outlier: bool,
}

/// `GET /api/audit`.
#[derive(Serialize)]
pub struct AuditLog {
    pub entries: Vec<AuditEntry>,
    /// `?before=` for the next, older page; `None` after the last.
    pub next: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_row_reads_back_what_was_stored() {
        let (snapshot, analysis) = crate::analysis::fixtures::analysed("oom.pickle");
        let summary = Summary::new(&snapshot, &analysis);
        let row = SummaryRow::new(&summary);
        assert!(row.oom_events > 0, "oom.pickle records an OOM");
        assert!(row.devices[0].top_stack.is_some());
        // Stored as JSON and read back (strictly, in this test build): the same row.
        let stored = row.to_stored();
        assert_eq!(SummaryRow::deserialize(&stored).expect("strict"), row);
        assert_eq!(SummaryRow::from_stored(&stored), row);
    }

    #[test]
    fn a_stored_row_of_another_shape_reads_as_empty_not_as_an_error() {
        let row = SummaryRow::from_stored(&serde_json::json!({"devices": "not a list"}));
        assert_eq!(row, SummaryRow::default());
        // Rows stored before a field existed still read (the field takes its default).
        let old = SummaryRow::from_stored(&serde_json::json!({"peak_allocated_bytes": 7}));
        assert_eq!(old.peak_allocated_bytes, 7);
    }
}
