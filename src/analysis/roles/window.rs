//! Roles over time: bytes per role per pixel column (the `/roles` window), read from role
//! checkpoints. What is live at one moment is `live.rs`.

use super::DeviceRoles;
use crate::analysis::DeviceAnalysis;
use crate::analysis::replay::{AllocationId, Replay};
use crate::analysis::timeline::{Window, columns};
use crate::snapshot::Trace;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per role in each column of a timeline window, taken at the column's peak: the moment
/// the timeline's `allocated_max` shows, so a stacked area of these tops out exactly on the
/// timeline's memory line (a column holding thousands of events would otherwise show its last
/// moment, well under the spike drawn above it).
#[derive(Debug, Serialize, PartialEq)]
pub struct RoleWindow {
    pub start: usize,
    pub end: usize,
    /// First event of each column, and one past the last column's end (the timeline's columns
    /// for the same window and axis).
    pub column_start: Vec<usize>,
    /// Role names, in the order of `bytes`.
    pub roles: Vec<String>,
    /// `bytes[r][c]`: bytes of role `roles[r]` live at column `c`'s peak.
    pub bytes: Vec<Vec<u64>>,
    /// Per column, the event after which `bytes` is taken (`null`: before the window's first
    /// event, when nothing in the column rose above what it started with).
    pub at: Vec<Option<usize>>,
}

/// The window of a device with no events: one column, what is live from the start.
fn without_events(replay: &Replay, roles: &DeviceRoles, names: Vec<String>) -> RoleWindow {
    let mut bytes = vec![vec![0u64; 1]; names.len()];
    for id in replay.live_after(None) {
        let b = &mut bytes[roles.role_index_of(id) as usize][0];
        *b = b.wrapping_add(replay.allocations.size(id as usize));
    }
    RoleWindow {
        start: 0,
        end: 0,
        column_start: vec![0, 1],
        roles: names,
        bytes,
        at: vec![None],
    }
}

/// Bytes per role per column of `window` (the same columns as the timeline's for the same
/// window). Each column's peak is found in the view index and the bytes there from the nearest
/// role checkpoint (or the previous column's moment, when nearer), so a column costs at most
/// half of [`CHECKPOINT_EVENTS`] events however many it spans.
pub fn role_window(
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
    trace: &Trace,
    window: Window,
) -> RoleWindow {
    let replay = &device.replay;
    let names = roles.names().to_vec();
    let events = replay.len();
    if events == 0 || trace.is_empty() {
        return without_events(replay, roles, names);
    }
    let window = window.clamped(trace.len().min(events));
    let column_start = columns(&window, trace);
    let width = column_start.len() - 1;
    let index = device.views();
    let mut cursor = RoleCursor::new(device, roles);
    let mut bytes = vec![Vec::with_capacity(width); names.len()];
    let mut at = Vec::with_capacity(width);
    for c in 0..width {
        let from = column_start[c];
        // The timeline reads one event even from an empty column (a time axis gap), so this
        // does too: its peak is the larger of before and after that event.
        let to = column_start[c + 1].max(from + 1).min(events);
        let before = replay.allocated_after(from.checked_sub(1));
        // The first event where the column reaches its maximum; none when it never rises above
        // what it started with (the timeline's totals start from `before` too).
        let high = index.allocated.max(replay, from, to);
        let peak = (high > before)
            .then(|| index.allocated.first_at_least(replay, from, to, high))
            .flatten();
        let moment = peak.or(from.checked_sub(1));
        for (r, &value) in cursor.after(moment).iter().enumerate() {
            bytes[r].push(value);
        }
        at.push(moment);
    }
    RoleWindow {
        start: window.start,
        end: window.end,
        column_start,
        roles: names,
        bytes,
        at,
    }
}

/// log2 of the events between two role checkpoints: a `/roles` column replays at most half this
/// many events (each a read of a random allocation: ~128 keeps a whole-trace window of 1600 columns
/// to a few ms), and the checkpoints cost `8 * roles / CHECKPOINT_EVENTS` bytes per event.
const CHECKPOINT_EVENTS_LOG2: u32 = 7;
const CHECKPOINT_EVENTS: usize = 1 << CHECKPOINT_EVENTS_LOG2;

/// Bytes per role live before every `CHECKPOINT_EVENTS`-th event (wrapping sums, as the live
/// bytes are everywhere).
#[derive(Debug, Default, PartialEq)]
pub(super) struct RoleCheckpoints {
    roles: usize,
    /// `bytes[k * roles + r]`: bytes of role `r` live before event `k * CHECKPOINT_EVENTS`.
    bytes: Vec<u64>,
}

impl RoleCheckpoints {
    /// One read of `replay`'s allocations, range by range on the analysis's threads (ranges of
    /// `min_range` allocations at least); `role[id]` is allocation `id`'s role, below `roles`.
    /// An allocation adds its bytes to every checkpoint after its alloc and takes them from
    /// every checkpoint after its free (the events that open and close it, which
    /// [`event_change`] reads one by one): recorded as differences between neighbouring
    /// checkpoints, then summed, so no event is read at all. The differences are atomic adds,
    /// which wrap as the sums do: ranges of allocations touch the same checkpoints in any order.
    pub(super) fn new(replay: &Replay, role: &[u8], roles: usize, min_range: usize) -> Self {
        let checkpoints = replay.len().div_ceil(CHECKPOINT_EVENTS);
        let differences: Vec<AtomicU64> = (0..checkpoints * roles)
            .map(|_| AtomicU64::new(0))
            .collect();
        // The checkpoint right after `event`, if there is one.
        let slot_after = |event: u32, role: usize| {
            let k = (event as usize >> CHECKPOINT_EVENTS_LOG2) + 1;
            (k < checkpoints).then_some(k * roles + role)
        };
        let allocations = &replay.allocations;
        super::by_ranges(allocations.len(), min_range, |ids| {
            for id in ids {
                let role = role.get(id).copied().unwrap_or(super::Role::Unknown as u8) as usize;
                if role >= roles || checkpoints == 0 {
                    continue;
                }
                let size = allocations.size(id);
                // Alive from the start: in the first checkpoint.
                let opened = allocations
                    .start(id)
                    .map_or(Some(role), |start| slot_after(start, role));
                if let Some(slot) = opened {
                    differences[slot].fetch_add(size, Ordering::Relaxed);
                }
                if let Some(slot) = allocations.end(id).and_then(|end| slot_after(end, role)) {
                    differences[slot].fetch_sub(size, Ordering::Relaxed);
                }
            }
        });
        let mut bytes: Vec<u64> = differences.into_iter().map(AtomicU64::into_inner).collect();
        for k in 1..checkpoints {
            for r in 0..roles {
                bytes[k * roles + r] =
                    bytes[k * roles + r].wrapping_add(bytes[(k - 1) * roles + r]);
            }
        }
        Self { roles, bytes }
    }

    pub(super) fn heap_bytes(&self) -> u64 {
        (self.bytes.capacity() * std::mem::size_of::<u64>()) as u64
    }

    /// Checkpoint `k`'s bytes per role, if there is one for these roles.
    fn get(&self, k: usize, roles: usize) -> Option<&[u64]> {
        (self.roles == roles)
            .then(|| self.bytes.get(k * roles..(k + 1) * roles))
            .flatten()
    }
}

/// Whether an event adds or removes its allocation's bytes.
#[derive(Clone, Copy)]
enum Change {
    Add(u64),
    Remove(u64),
}

impl Change {
    /// The change that takes this one back.
    fn undone(self) -> Self {
        match self {
            Change::Add(size) => Change::Remove(size),
            Change::Remove(size) => Change::Add(size),
        }
    }

    fn apply(self, bytes: u64) -> u64 {
        match self {
            Change::Add(size) => bytes.wrapping_add(size),
            Change::Remove(size) => bytes.wrapping_sub(size),
        }
    }
}

/// The allocation event `event` opens or closes, and how.
fn event_change(replay: &Replay, event: usize) -> Option<(AllocationId, Change)> {
    let id = replay.allocation_at(event)?;
    let allocation = replay.allocations.at(id as usize);
    if allocation.start == Some(event as u32) {
        Some((id, Change::Add(allocation.size)))
    } else if allocation.end == Some(event as u32) {
        Some((id, Change::Remove(allocation.size)))
    } else {
        None
    }
}

/// Bytes per role after any event, reached from whichever is nearest of the last answer and the
/// checkpoints either side of the event (forward by applying events, backward by undoing them:
/// the sums wrap, so undoing is exact), so a column reads at most half a checkpoint interval.
struct RoleCursor<'a> {
    device: &'a DeviceAnalysis,
    roles: &'a DeviceRoles,
    bytes: Vec<u64>,
    /// Events applied: `bytes` holds the bytes after event `applied - 1`; `None` before the
    /// first answer.
    applied: Option<usize>,
}

impl<'a> RoleCursor<'a> {
    fn new(device: &'a DeviceAnalysis, roles: &'a DeviceRoles) -> Self {
        Self {
            device,
            roles,
            bytes: vec![0; roles.names().len()],
            applied: None,
        }
    }

    /// Bytes per role live after event `at` (`None`: before the first event).
    fn after(&mut self, at: Option<usize>) -> &[u64] {
        let replay = &self.device.replay;
        let target = at.map_or(0, |e| e + 1).min(replay.len());
        // The checkpoints at or before `target` and after it, where there are those (the last
        // checkpoint is before the last event; `target` may be one past it).
        let last = replay.len().saturating_sub(1) >> CHECKPOINT_EVENTS_LOG2;
        let below = (target >> CHECKPOINT_EVENTS_LOG2).min(last);
        let above = (below + 1).min(last);
        let distance = |from: usize| from.abs_diff(target);
        let mut start = self.applied.map(|applied| (distance(applied), None));
        for k in [below, above] {
            let checkpoint = distance(k << CHECKPOINT_EVENTS_LOG2);
            if start.is_none_or(|(best, _)| checkpoint < best) {
                start = Some((checkpoint, Some(k)));
            }
        }
        if let Some((_, Some(k))) = start {
            match self.roles.checkpoints.get(k, self.bytes.len()) {
                Some(bytes) => {
                    self.bytes.copy_from_slice(bytes);
                    self.applied = Some(k << CHECKPOINT_EVENTS_LOG2);
                }
                None => {
                    // No checkpoints for these roles (not built from this replay): from the
                    // live set before the first event.
                    self.bytes.fill(0);
                    for id in replay.live_after(None) {
                        self.add(id, Change::Add(replay.allocations.size(id as usize)));
                    }
                    self.applied = Some(0);
                }
            }
        }
        let mut applied = self.applied.unwrap_or(0);
        while applied < target {
            if let Some((id, change)) = event_change(replay, applied) {
                self.add(id, change);
            }
            applied += 1;
        }
        while applied > target {
            applied -= 1;
            if let Some((id, change)) = event_change(replay, applied) {
                self.add(id, change.undone());
            }
        }
        self.applied = Some(applied);
        &self.bytes
    }

    fn add(&mut self, id: AllocationId, change: Change) {
        if let Some(slot) = self.bytes.get_mut(self.roles.role_index_of(id) as usize) {
            *slot = change.apply(*slot);
        }
    }
}

/// The `/roles` window as it was before the role checkpoints, for the tests only: each column
/// replayed event by event. analysis/view_reference.rs compares the two.
#[cfg(test)]
pub(crate) mod reference {
    use super::{RoleWindow, without_events};
    use crate::analysis::DeviceAnalysis;
    use crate::analysis::roles::DeviceRoles;
    use crate::analysis::timeline::{Window, columns};
    use crate::snapshot::Trace;

    /// The `/roles` window, each column replayed event by event.
    pub(crate) fn role_window_scanning(
        device: &DeviceAnalysis,
        roles: &DeviceRoles,
        trace: &Trace,
        window: Window,
    ) -> RoleWindow {
        let replay = &device.replay;
        let names = roles.names().to_vec();
        let events = replay.len();
        if events == 0 || trace.is_empty() {
            return without_events(replay, roles, names);
        }
        let window = window.clamped(trace.len().min(events));
        let column_start = columns(&window, trace);
        let width = column_start.len() - 1;
        let mut current = vec![0u64; names.len()];
        for id in replay.live_after(window.start.checked_sub(1)) {
            let slot = &mut current[roles.role_index_of(id) as usize];
            *slot = slot.wrapping_add(replay.allocations.size(id as usize));
        }
        let mut bytes = vec![Vec::with_capacity(width); names.len()];
        let mut at = Vec::with_capacity(width);
        let mut applied = window.start;
        for c in 0..width {
            let from = column_start[c];
            // The timeline reads one event even from an empty column (a time axis gap), so this
            // does too: its peak is the larger of before and after that event.
            let to = column_start[c + 1].max(from + 1).min(events);
            let before = replay.allocated_after(from.checked_sub(1));
            // The first event where the column reaches its maximum; none when it never rises above
            // what it started with (the timeline's fold starts from `before` too).
            let mut peak: Option<usize> = None;
            let mut high = before;
            for (offset, value) in replay.allocated_over(from, to).enumerate() {
                if value > high {
                    high = value;
                    peak = Some(from + offset);
                }
            }
            let mut sample = |current: &[u64], event: Option<usize>| {
                for (r, value) in current.iter().enumerate() {
                    bytes[r].push(*value);
                }
                at.push(event);
            };
            match peak {
                None => sample(&current, from.checked_sub(1)),
                Some(event) if event >= column_start[c + 1] => {
                    // An empty column's look-ahead: peek at the next column's first event without
                    // applying it (that column applies it).
                    let mut peek = current.clone();
                    apply_event(device, roles, event, &mut peek);
                    sample(&peek, Some(event));
                }
                Some(event) => {
                    while applied <= event {
                        apply_event(device, roles, applied, &mut current);
                        applied += 1;
                    }
                    sample(&current, Some(event));
                }
            }
            while applied < column_start[c + 1] {
                apply_event(device, roles, applied, &mut current);
                applied += 1;
            }
        }
        RoleWindow {
            start: window.start,
            end: window.end,
            column_start,
            roles: names,
            bytes,
            at,
        }
    }

    /// Adds or removes the allocation event `event` opens or closes.
    fn apply_event(
        device: &DeviceAnalysis,
        roles: &DeviceRoles,
        event: usize,
        current: &mut [u64],
    ) {
        let replay = &device.replay;
        let Some(id) = replay.allocation_at(event) else {
            return;
        };
        let allocation = replay.allocations.at(id as usize);
        let slot = &mut current[roles.role_index_of(id) as usize];
        if allocation.start == Some(event as u32) {
            *slot = slot.wrapping_add(allocation.size);
        } else if allocation.end == Some(event as u32) {
            *slot = slot.wrapping_sub(allocation.size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use crate::analysis::roles::{UserRules, live_report};
    use crate::analysis::timeline::{Axis, timeline};
    use crate::snapshot::Snapshot;

    fn fixture(name: &str) -> Snapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        crate::snapshot::load_path(&path, Default::default()).expect("fixture loads")
    }

    /// In every column, the bytes of all roles add up to the live bytes the timeline draws
    /// there (its column maximum), so the role area's top is the timeline's memory line.
    #[test]
    fn role_totals_equal_the_timeline_in_every_column() {
        for name in [
            "gpt2_adamw.pickle",
            "ring_wrap.pickle",
            "labelled/l_infer_grad.pickle",
            "mlp_cpp_frames.pickle",
        ] {
            let snapshot = fixture(name);
            let analysis = Analysis::new(&snapshot);
            for device in &analysis.devices {
                let roles = device.roles(&snapshot, &UserRules::default());
                let events = device.replay.len();
                assert!(events > 0, "{name}: no events");
                let trace = snapshot.trace(device.device);
                // Every column of every window, on both axes, tops out on the timeline's
                // maximum for that column: one column per event, a few wide ones, a window
                // mid-trace, and the time axis (whose columns can be empty).
                let start = events / 3;
                for (from, width, axis) in [
                    (0, events, Axis::Event),
                    (0, 7, Axis::Event),
                    (start, 7, Axis::Event),
                    (start, 13, Axis::Time),
                    (0, events * 2, Axis::Time),
                ] {
                    let window = Window {
                        start: from,
                        end: events - 1,
                        width,
                        height: 400,
                        axis,
                    };
                    let roles_window = role_window(device, roles, trace, window);
                    let line = timeline(device, trace, window);
                    assert_eq!(roles_window.column_start, line.column_start, "{name}");
                    for (c, max) in line.allocated_max.iter().enumerate() {
                        let sum = roles_window
                            .bytes
                            .iter()
                            .fold(0u64, |s, r| s.wrapping_add(r[c]));
                        assert_eq!(
                            sum, *max,
                            "{name} {axis:?} from {from} width {width}: column {c}"
                        );
                        let at = roles_window.at[c];
                        assert_eq!(
                            device.replay.allocated_after(at),
                            *max,
                            "{name}: column {c}'s moment"
                        );
                    }
                }
                // And the live report at the end names the same bytes.
                let report = live_report(&snapshot, device, roles, Some(events - 1));
                let total = report.roles.values().fold(0u64, |s, b| s.wrapping_add(*b));
                assert_eq!(
                    total,
                    device.replay.allocated_after(Some(events - 1)),
                    "{name} live report"
                );
                assert!(
                    report.allocations.iter().all(|a| !a.because.is_empty()),
                    "{name}: a role without a because"
                );
            }
        }
    }
}
