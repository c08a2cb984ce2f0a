//! Pages of a device's trace, filtered, for the event list.

use super::Replay;
use crate::snapshot::{ActionCode, Snapshot, StackId, Trace};
use serde::Serialize;

/// Which events to list.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Action names (as torch writes them); empty: all.
    pub actions: Vec<String>,
    pub min_size: u64,
    /// Case-insensitive text to find in a frame's file or function name.
    pub frame: Option<String>,
}

impl EventFilter {
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty() && self.min_size == 0 && self.frame.is_none()
    }
}

#[derive(Debug, Serialize)]
pub struct EventRow {
    pub index: usize,
    pub action: String,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub time_us: Option<i64>,
    /// The first frame PyTorch's viewer would show, `file:line name`.
    pub top_frame: Option<String>,
    /// The allocation an alloc or free opens or closes, and its id as PyTorch's viewer names
    /// it (`b{hex address}_{version}`).
    pub allocation: Option<u32>,
    pub block_id: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct EventPage {
    /// Events in the trace.
    pub total: usize,
    /// Events matching the filter.
    pub matching: usize,
    /// Position of the first row among the matching events.
    pub offset: usize,
    pub rows: Vec<EventRow>,
}

/// The matching event indices, or `None` when every event matches. One pass over the columns;
/// the frame test is decided once per distinct stack.
pub fn matching(snapshot: &Snapshot, trace: &Trace, filter: &EventFilter) -> Option<Vec<u32>> {
    if filter.is_empty() {
        return None;
    }
    let codes: Vec<ActionCode> = filter
        .actions
        .iter()
        .filter_map(|name| {
            ActionCode::known(name).or_else(|| {
                trace
                    .unknown_actions
                    .iter()
                    .position(|n| n == name)
                    .map(|i| ActionCode(ActionCode::FIRST_UNKNOWN + i as u8))
            })
        })
        .collect();
    if !filter.actions.is_empty() && codes.is_empty() {
        return Some(Vec::new());
    }
    let needle = filter.frame.as_ref().map(|f| f.to_lowercase());
    let mut stack_matches: Vec<Option<bool>> = vec![None; snapshot.stacks.len()];
    let mut stack_test = |stack: StackId| -> bool {
        let Some(needle) = &needle else { return true };
        let slot = &mut stack_matches[stack as usize];
        *slot.get_or_insert_with(|| {
            snapshot.stacks.get(stack).iter().any(|&f| {
                let frame = snapshot.frames.get(f);
                frame.name.to_lowercase().contains(needle)
                    || frame.filename.to_lowercase().contains(needle)
            })
        })
    };
    let mut out = Vec::new();
    for i in 0..trace.len() {
        if (!codes.is_empty() && !codes.contains(&trace.action[i]))
            || trace.size.get(i) < filter.min_size
            || !stack_test(trace.stack[i])
        {
            continue;
        }
        out.push(i as u32);
    }
    Some(out)
}

pub fn row(snapshot: &Snapshot, trace: &Trace, replay: &Replay, index: usize) -> EventRow {
    let top_frame = snapshot
        .stacks
        .get(trace.stack[index])
        .iter()
        .map(|&f| snapshot.frames.get(f))
        .find(|f| !f.is_hidden())
        .map(|f| f.label().short());
    let allocation = replay.allocation_at(index);
    EventRow {
        index,
        action: trace.action_name(trace.action[index]).to_owned(),
        addr: trace.addr[index],
        size: trace.size.get(index),
        stream: trace.stream(index),
        time_us: trace.has_time.then(|| trace.time_us.get(index)),
        top_frame,
        allocation,
        block_id: allocation.map(|id| replay.allocations[id as usize].id()),
    }
}

/// A page of `limit` matching events from matching position `offset`, or (with `find`) the page
/// holding event `find` (or the first match after it).
pub fn page(
    snapshot: &Snapshot,
    trace: &Trace,
    replay: &Replay,
    filter: &EventFilter,
    offset: usize,
    limit: usize,
    find: Option<usize>,
) -> EventPage {
    let limit = limit.clamp(1, 1000);
    let matches = matching(snapshot, trace, filter);
    let matching_count = matches.as_ref().map_or(trace.len(), Vec::len);
    let offset = match find {
        Some(event) => {
            let position = match &matches {
                None => event.min(trace.len().saturating_sub(1)),
                Some(list) => list.partition_point(|&i| (i as usize) < event),
            };
            position.min(matching_count.saturating_sub(1)) / limit * limit
        }
        None => offset.min(matching_count),
    };
    let end = (offset + limit).min(matching_count);
    let rows = (offset..end)
        .map(|position| {
            let index = match &matches {
                None => position,
                Some(list) => list[position] as usize,
            };
            row(snapshot, trace, replay, index)
        })
        .collect();
    EventPage {
        total: trace.len(),
        matching: matching_count,
        offset,
        rows,
    }
}
