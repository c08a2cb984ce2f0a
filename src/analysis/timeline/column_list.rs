//! What a click on a column's grey part lists: the allocations live during one column that
//! the answer does not draw as bands.

use super::{Detail, Window, timeline_detailed};
use crate::analysis::DeviceAnalysis;
use crate::analysis::replay::AllocationId;
use crate::snapshot::Trace;
use serde::Serialize;

/// Most rows of a column's list one request may ask for.
pub const MAX_COLUMN_ROWS: usize = 500;
/// Most events a listed column may span: the list reads each of its events once (the client's
/// columns are at most a 320th of the trace; a request for one column over a whole long trace
/// is refused rather than read).
pub const MAX_COLUMN_EVENTS: usize = 1 << 17;

/// The allocations of one column of a timeline answer that it does not draw as bands (the grey
/// part), largest first: what a click on the grey part lists.
#[derive(Debug, Serialize, PartialEq)]
pub struct ColumnAllocations {
    pub column: usize,
    /// The column's first and last event.
    pub first_event: usize,
    pub last_event: usize,
    /// How many allocations live during the column are not bands, and their bytes.
    pub total: usize,
    pub total_bytes: u64,
    /// The largest `limit` of them (ties by id).
    pub ids: Vec<AllocationId>,
}

/// Why a column cannot be listed.
#[derive(Debug, PartialEq, Eq)]
pub enum ColumnError {
    /// The window has no such column (it has `columns`).
    NoSuchColumn { column: usize, columns: usize },
    /// The column spans more events than [`MAX_COLUMN_EVENTS`].
    TooLong { events: usize },
}

/// The allocations live during column `column` of the answer to (`window`, `detail`) that are
/// not among its bands: alive when the column begins, or allocated during it. At most `limit`
/// ids (capped at [`MAX_COLUMN_ROWS`]) with the count and bytes of all of them.
pub fn column_allocations(
    device: &DeviceAnalysis,
    trace: &Trace,
    window: Window,
    detail: Detail,
    column: usize,
    limit: usize,
) -> Result<ColumnAllocations, ColumnError> {
    let answer = timeline_detailed(device, trace, window, detail);
    let columns = answer.column_start.len().saturating_sub(1);
    if column >= columns {
        return Err(ColumnError::NoSuchColumn { column, columns });
    }
    let (from, to) = (
        answer.column_start[column],
        answer.column_start[column + 1].max(answer.column_start[column] + 1),
    );
    if to - from > MAX_COLUMN_EVENTS {
        return Err(ColumnError::TooLong { events: to - from });
    }
    let replay = &device.replay;
    let mut live = replay.live_after(from.checked_sub(1));
    for event in from..to.min(trace.len()) {
        if let Some(id) = replay.allocation_at(event)
            && replay.allocations.start(id as usize) == Some(event as u32)
        {
            live.push(id);
        }
    }
    let mut bands = answer.bands.id.clone();
    bands.sort_unstable();
    live.retain(|id| bands.binary_search(id).is_err() && replay.allocations.size(*id as usize) > 0);
    let total = live.len();
    let total_bytes = live
        .iter()
        .map(|&id| replay.allocations.size(id as usize))
        .sum();
    let by_size =
        |&id: &AllocationId| (std::cmp::Reverse(replay.allocations.size(id as usize)), id);
    let limit = limit.min(MAX_COLUMN_ROWS);
    if live.len() > limit {
        live.select_nth_unstable_by_key(limit, by_size);
        live.truncate(limit);
    }
    live.sort_unstable_by_key(by_size);
    Ok(ColumnAllocations {
        column,
        first_event: from,
        last_event: to - 1,
        total,
        total_bytes,
        ids: live,
    })
}
