//! Pages of a device's trace, filtered, for the event list.

use super::Replay;
use super::ranked_bits::{BitsBuilder, RankedBits};
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
    /// With a frame filter: the innermost frame that matched it (`file:line name`), which may
    /// be deeper than `top_frame`, so the list can show why the event is in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched_frame: Option<String>,
}

/// One frame of an event's stack, innermost first.
#[derive(Debug, Serialize)]
pub struct EventFrame {
    pub name: String,
    pub filename: String,
    pub line: u64,
    /// A frame PyTorch's viewer hides (its own internals).
    pub hidden: bool,
    /// The frame filter's text is in this frame's file or function name.
    pub matched: bool,
}

/// `GET /api/snapshots/{id}/events/{index}`: one event with its whole stack.
#[derive(Debug, Serialize)]
pub struct EventStack {
    pub event: EventRow,
    pub frames: Vec<EventFrame>,
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
    let mut out = Vec::new();
    for_each_match(snapshot, trace, filter, |i| out.push(i as u32)).then_some(out)
}

/// Calls `found` with each event matching `filter`, in order; false (and no calls) when every
/// event matches.
fn for_each_match(
    snapshot: &Snapshot,
    trace: &Trace,
    filter: &EventFilter,
    mut found: impl FnMut(usize),
) -> bool {
    if filter.is_empty() {
        return false;
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
        return true;
    }
    let needle = filter.frame.as_ref().map(|f| f.to_lowercase());
    let mut stack_matches: Vec<Option<bool>> = vec![None; snapshot.stacks.len()];
    let mut stack_test = |stack: StackId| -> bool {
        let Some(needle) = &needle else { return true };
        let slot = &mut stack_matches[stack as usize];
        *slot.get_or_insert_with(|| {
            snapshot
                .stacks
                .get(stack)
                .iter()
                .any(|&f| frame_matches(snapshot.frames.get(f), needle))
        })
    };
    for i in 0..trace.len() {
        if (!codes.is_empty() && !codes.contains(&trace.action[i]))
            || trace.size.get(i) < filter.min_size
            || !stack_test(trace.stack.get(i))
        {
            continue;
        }
        found(i);
    }
    true
}

/// The events one filter matched, a bit per event (see [`RankedBits`]): the page at any
/// position (select) and the position of any event (rank) are found without a scan, for about
/// an eighth of a byte per event however many match (a list of matches costs up to four).
#[derive(Debug)]
struct Matches(RankedBits);

impl Matches {
    /// The matches of `filter`, or `None` when every event matches.
    fn of(snapshot: &Snapshot, trace: &Trace, filter: &EventFilter) -> Option<Self> {
        let mut bits = BitsBuilder::zeros(trace.len());
        let filtered = for_each_match(snapshot, trace, filter, |i| bits.set(i));
        filtered.then(|| Self(bits.ranked()))
    }

    fn heap_bytes(&self) -> u64 {
        self.0.heap_bytes()
    }

    /// Matching events in all.
    fn total(&self) -> usize {
        self.0.ones()
    }

    /// Matching events before event `event`.
    fn rank(&self, event: usize) -> usize {
        self.0.rank(event)
    }

    /// The event of the match at `position` (0-based), if there is one.
    fn nth(&self, position: usize) -> Option<usize> {
        self.0.select(position)
    }
}

/// The matches of the last few filters asked of one device's trace, so paging through a
/// filtered list (or jumping to an event in it) scans the trace once per filter, not once per
/// page. At most `MATCH_CACHE_FILTERS` filters, each about `events / 7` bytes.
#[derive(Debug, Default)]
pub struct MatchCache {
    /// Least recently used first.
    recent: std::sync::Mutex<Vec<(FilterKey, std::sync::Arc<Matches>)>>,
}

const MATCH_CACHE_FILTERS: usize = 4;

/// What decides a filter's matches: the set of actions, the size and the lowercased frame
/// text, and the trace's length (a cache belongs to one device's trace).
#[derive(Debug, PartialEq, Eq)]
struct FilterKey {
    actions: Vec<String>,
    min_size: u64,
    frame: Option<String>,
    events: usize,
}

impl FilterKey {
    fn new(filter: &EventFilter, events: usize) -> Self {
        let mut actions = filter.actions.clone();
        actions.sort_unstable();
        actions.dedup();
        Self {
            actions,
            min_size: filter.min_size,
            frame: filter.frame.as_ref().map(|f| f.to_lowercase()),
            events,
        }
    }
}

impl MatchCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(FilterKey, std::sync::Arc<Matches>)>> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The matches of `filter` (`None`: every event matches), from the cache or one scan.
    fn matches(
        &self,
        snapshot: &Snapshot,
        trace: &Trace,
        filter: &EventFilter,
    ) -> Option<std::sync::Arc<Matches>> {
        if filter.is_empty() {
            return None;
        }
        let key = FilterKey::new(filter, trace.len());
        {
            let mut recent = self.lock();
            if let Some(at) = recent.iter().position(|(k, _)| *k == key) {
                let entry = recent.remove(at);
                let matches = entry.1.clone();
                recent.push(entry);
                return Some(matches);
            }
        }
        // Scanned without the lock: another filter's page need not wait for this one.
        let matches = std::sync::Arc::new(Matches::of(snapshot, trace, filter)?);
        let mut recent = self.lock();
        if recent.len() >= MATCH_CACHE_FILTERS {
            recent.remove(0);
        }
        recent.push((key, matches.clone()));
        Some(matches)
    }

    /// Heap bytes held by the cached matches.
    pub fn heap_bytes(&self) -> u64 {
        self.lock().iter().map(|(_, m)| m.heap_bytes()).sum()
    }
}

/// Whether the frame filter's text (already lowercased) is in a frame's file or function name:
/// the one test the list's filter and the stack's highlight share.
fn frame_matches(frame: &crate::snapshot::Frame, needle: &str) -> bool {
    frame.name.to_lowercase().contains(needle) || frame.filename.to_lowercase().contains(needle)
}

/// The event at `index` as a list row; with `frame_filter`, its innermost matching frame too.
pub fn row_matching(
    snapshot: &Snapshot,
    trace: &Trace,
    replay: &Replay,
    index: usize,
    frame_filter: Option<&str>,
) -> EventRow {
    let mut event = row(snapshot, trace, replay, index);
    if let Some(needle) = frame_filter.map(str::to_lowercase) {
        event.matched_frame = snapshot
            .stacks
            .get(trace.stack.get(index))
            .iter()
            .map(|&f| snapshot.frames.get(f))
            .find(|f| frame_matches(f, &needle))
            .map(|f| f.label().short());
    }
    event
}

/// The event at `index` with every frame of its stack (innermost first, hidden ones marked),
/// the frames matching `frame_filter` marked; `None` past the trace's end. Its size is the
/// stack's, which the reader bounded by the file's.
pub fn event_stack(
    snapshot: &Snapshot,
    trace: &Trace,
    replay: &Replay,
    index: usize,
    frame_filter: Option<&str>,
) -> Option<EventStack> {
    if index >= trace.len() {
        return None;
    }
    let needle = frame_filter.map(str::to_lowercase);
    let frames = snapshot
        .stacks
        .get(trace.stack.get(index))
        .iter()
        .map(|&f| {
            let frame = snapshot.frames.get(f);
            EventFrame {
                name: frame.name.to_string(),
                filename: frame.filename.to_string(),
                line: frame.line,
                hidden: frame.is_hidden(),
                matched: needle.as_deref().is_some_and(|n| frame_matches(frame, n)),
            }
        })
        .collect();
    Some(EventStack {
        event: row_matching(snapshot, trace, replay, index, frame_filter),
        frames,
    })
}

pub fn row(snapshot: &Snapshot, trace: &Trace, replay: &Replay, index: usize) -> EventRow {
    let top_frame = snapshot
        .stacks
        .get(trace.stack.get(index))
        .iter()
        .map(|&f| snapshot.frames.get(f))
        .find(|f| !f.is_hidden())
        .map(|f| f.label().short());
    let allocation = replay.allocation_at(index);
    EventRow {
        index,
        action: trace.action_name(trace.action[index]).to_owned(),
        addr: trace.addr.get(index),
        size: trace.size.get(index),
        stream: trace.stream(index),
        time_us: trace.has_time.then(|| trace.time_us.get(index)),
        top_frame,
        allocation,
        block_id: allocation.map(|id| replay.allocations.at(id as usize).id()),
        matched_frame: None,
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
    let matches = replay.event_matches.matches(snapshot, trace, filter);
    let matching_count = matches.as_ref().map_or(trace.len(), |m| m.total());
    let offset = match find {
        Some(event) => {
            let position = match &matches {
                None => event.min(trace.len().saturating_sub(1)),
                Some(matches) => matches.rank(event),
            };
            position.min(matching_count.saturating_sub(1)) / limit * limit
        }
        None => offset.min(matching_count),
    };
    let end = (offset + limit).min(matching_count);
    let rows = (offset..end)
        .filter_map(|position| match &matches {
            None => Some(position),
            Some(matches) => matches.nth(position),
        })
        .map(|index| row_matching(snapshot, trace, replay, index, filter.frame.as_deref()))
        .collect();
    EventPage {
        total: trace.len(),
        matching: matching_count,
        offset,
        rows,
    }
}

/// The event list as it was before the match cache, for the tests only: the filter run over the
/// whole trace for every page. analysis/view_reference.rs compares the two.
#[cfg(test)]
pub(crate) mod reference {
    use super::{EventFilter, EventPage, matching, row_matching};
    use crate::analysis::Replay;
    use crate::snapshot::{Snapshot, Trace};

    /// A page of the event list, the filter run over the whole trace.
    pub(crate) fn page_scanning(
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
                row_matching(snapshot, trace, replay, index, filter.frame.as_deref())
            })
            .collect();
        EventPage {
            total: trace.len(),
            matching: matching_count,
            offset,
            rows,
        }
    }
}
