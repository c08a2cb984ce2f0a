//! Allocator replay: allocation lifetimes and memory over time, by PyTorch's viewer's rules.
//!
//! MemoryViz.js ("Active Memory Timeline") is the tool users trust, so its rules are matched:
//!
//! 1. A `free_requested` immediately followed by the `free_completed` of the same address is one
//!    free, at the position of the request. A lone `free_requested` does not end a lifetime; the
//!    later `free_completed` does.
//! 2. `alloc` opens an allocation at its address; a free closes the one open there. A free with no
//!    open allocation (recorded before history started, or evicted from the ring buffer) is an
//!    allocation alive from the start until that free.
//! 3. Every `active_allocated` block of the snapshot not open at the end is alive from the start
//!    to the end (a "ghost"), sized by its requested size.
//! 4. Sizes are requested bytes.
//!
//! Unlike MemoryViz, the x axis here is the raw event index of the trace (every event, not only
//! allocs and frees), so one "moment" means the same thing in every view; the peak is the same.

use crate::snapshot::{ActionCode, BlockState, Snapshot, StackId, Trace};
use rustc_hash::FxHashMap;

/// Why an allocation is in the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Its `alloc` event is in the trace.
    Traced,
    /// Only its free is in the trace: it was allocated before recording started (or the ring
    /// buffer dropped its alloc), so it is alive from the start.
    FreedWithoutAlloc,
    /// Allocated in the snapshot's segments but never seen in the trace: alive throughout.
    Ghost,
}

/// One allocation's lifetime.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub addr: u64,
    /// Requested bytes.
    pub size: u64,
    pub stream: u64,
    pub stack: StackId,
    /// Event index of the `alloc`; `None` when alive from the start.
    pub start: Option<u32>,
    /// Event index of the free that ended it; `None` when still alive at the end.
    pub end: Option<u32>,
    /// How many times this address had been freed before (MemoryViz's block version).
    pub version: u32,
    pub origin: Origin,
}

impl Allocation {
    /// MemoryViz's stable id: `b{hex address}_{version}`.
    pub fn id(&self) -> String {
        format!("b{:x}_{}", self.addr, self.version)
    }

    /// Whether it is alive right after event `at` (`None`: before the first event).
    pub fn is_live_after(&self, at: Option<usize>) -> bool {
        let started = match (self.start, at) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(start), Some(at)) => start as usize <= at,
        };
        let ended = match (self.end, at) {
            (None, _) => false,
            (Some(_), None) => false,
            (Some(end), Some(at)) => end as usize <= at,
        };
        started && !ended
    }
}

pub type AllocationId = u32;

/// Replay state of one address.
#[derive(Debug, Clone, Copy)]
struct Address {
    open: AllocationId,
    frees: u32,
}

impl Default for Address {
    fn default() -> Self {
        Self {
            open: NO_ALLOCATION,
            frees: 0,
        }
    }
}

/// No allocation opens or closes at this event.
const NO_ALLOCATION: AllocationId = AllocationId::MAX;

/// Replay checkpoints are kept every this many events, so the live set at any event costs one
/// checkpoint copy plus at most this many steps.
const CHECKPOINT_EVERY: usize = 4096;

/// The replay of one device.
#[derive(Debug, Default)]
pub struct Replay {
    pub allocations: Vec<Allocation>,
    /// Requested bytes live after each event.
    pub allocated: Vec<u64>,
    /// Live before the first event: allocations freed without alloc, and ghosts.
    pub allocated_at_start: u64,
    /// Reserved bytes as a step function: `(event index, bytes after it)` at each change.
    pub reserved_steps: Vec<(u32, u64)>,
    pub reserved_at_start: u64,
    /// Per event, the allocation it opens or closes (or `NO_ALLOCATION`).
    event_allocation: Vec<AllocationId>,
    /// `(event index, traced allocations live after it, in no order)` every `CHECKPOINT_EVERY`
    /// events; the allocations alive from the start are added when a live set is asked for.
    checkpoints: Vec<(usize, Vec<AllocationId>)>,
    /// Allocations freed without alloc, in the order of their frees (so of their `end`).
    freed_without_alloc: Vec<AllocationId>,
    /// Allocations alive throughout.
    ghosts: Vec<AllocationId>,
}

/// A maximum of a memory curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Peak {
    pub bytes: u64,
    /// The event after which it was first reached; `None` when it holds before the first event.
    pub event_index: Option<usize>,
    pub time_us: Option<i64>,
}

/// The event pass of a replay: which allocation each event opens or closes, and the memory
/// curve and live sets of the allocations the trace opens. It depends only on the trace, so it
/// can run while the trace is still being read ([`EventPass::advance`] takes the events appended
/// since its last call); the rest of [`Replay::new`] needs the segments.
#[derive(Debug, Default)]
pub(crate) struct EventPass {
    allocations: Vec<Allocation>,
    /// Per event, the allocation it opens or closes (or `NO_ALLOCATION`).
    event_allocation: Vec<AllocationId>,
    /// Per address: the allocation open there (if any) and how many frees it has seen.
    addresses: FxHashMap<u64, Address>,
    freed_without_alloc: Vec<AllocationId>,
    /// Per event, bytes allocated after it minus bytes alive from the start, as a wrapping sum
    /// (it dips below zero as allocations from before the trace are freed).
    allocated_change: Vec<u64>,
    change: u64,
    /// Allocations opened by the trace and not yet freed.
    live: LiveSet,
    checkpoints: Vec<(usize, Vec<AllocationId>)>,
}

impl EventPass {
    /// Events replayed so far.
    pub(crate) fn len(&self) -> usize {
        self.event_allocation.len()
    }

    /// Replays the events of `trace` not yet seen. Unless `complete`, a trailing `free_requested`
    /// waits for the next event (it may be half of a merged free).
    pub(crate) fn advance(&mut self, trace: &Trace, complete: bool) {
        let n = trace.len();
        let mut i = self.len();
        while i < n {
            let action = trace.action[i];
            let addr = trace.addr[i];
            match action {
                ActionCode::ALLOC => {
                    let id = self.allocations.len() as AllocationId;
                    let address = self.addresses.entry(addr).or_default();
                    self.allocations.push(Allocation {
                        addr,
                        size: trace.size[i],
                        stream: trace.stream[i],
                        stack: trace.stack[i],
                        start: Some(i as u32),
                        end: None,
                        version: address.frees,
                        origin: Origin::Traced,
                    });
                    address.open = id;
                    self.change = self.change.wrapping_add(trace.size[i]);
                    self.live.insert(id);
                    self.record(id);
                }
                ActionCode::FREE_REQUESTED | ActionCode::FREE_COMPLETED => {
                    if action == ActionCode::FREE_REQUESTED && i + 1 == n && !complete {
                        return;
                    }
                    let merged = action == ActionCode::FREE_REQUESTED
                        && i + 1 < n
                        && trace.action[i + 1] == ActionCode::FREE_COMPLETED
                        && trace.addr[i + 1] == addr;
                    if action == ActionCode::FREE_COMPLETED || merged {
                        let address = self.addresses.entry(addr).or_default();
                        let this_version = address.frees;
                        address.frees += 1;
                        let open = std::mem::replace(&mut address.open, NO_ALLOCATION);
                        let id = match open {
                            id if id != NO_ALLOCATION => {
                                self.allocations[id as usize].end = Some(i as u32);
                                self.live.remove(id);
                                id
                            }
                            _ => {
                                let id = self.allocations.len() as AllocationId;
                                self.allocations.push(Allocation {
                                    addr,
                                    size: trace.size[i],
                                    stream: trace.stream[i],
                                    stack: trace.stack[i],
                                    start: None,
                                    end: Some(i as u32),
                                    version: this_version,
                                    origin: Origin::FreedWithoutAlloc,
                                });
                                self.freed_without_alloc.push(id);
                                id
                            }
                        };
                        let size = self.allocations[id as usize].size;
                        self.change = self.change.wrapping_sub(size);
                        self.record(id);
                        if merged {
                            // The completion is part of this free; it changes nothing itself.
                            self.record(NO_ALLOCATION);
                            i += 1;
                        }
                    } else {
                        self.record(NO_ALLOCATION);
                    }
                }
                _ => self.record(NO_ALLOCATION),
            }
            i += 1;
        }
    }

    /// Ends the next event: what it opened or closed, the memory after it, a checkpoint.
    fn record(&mut self, id: AllocationId) {
        let event = self.event_allocation.len();
        self.event_allocation.push(id);
        self.allocated_change.push(self.change);
        if (event + 1).is_multiple_of(CHECKPOINT_EVERY) {
            // Unsorted: `live_after` sorts what it returns.
            self.checkpoints.push((event, self.live.members.clone()));
        }
    }
}

impl Replay {
    /// Replays `device`'s trace against the snapshot's segments.
    pub fn new(snapshot: &Snapshot, device: usize) -> Self {
        let trace = snapshot.trace(device);
        // The loader may have run the event pass already, on its second thread while reading.
        let pass = match snapshot.take_event_pass(device, trace.len()) {
            Some(pass) => pass,
            None => {
                let mut pass = EventPass::default();
                pass.advance(trace, true);
                pass
            }
        };
        let EventPass {
            mut allocations,
            event_allocation,
            addresses,
            freed_without_alloc,
            allocated_change,
            checkpoints,
            ..
        } = pass;

        let mut ghosts = Vec::new();
        for segment in snapshot.device_segments(device) {
            for block in &segment.blocks {
                let address = addresses.get(&block.address).copied().unwrap_or_default();
                if block.state == BlockState::ActiveAllocated && address.open == NO_ALLOCATION {
                    let id = allocations.len() as AllocationId;
                    allocations.push(Allocation {
                        addr: block.address,
                        size: block.requested_size,
                        stream: segment.stream,
                        stack: block.stack,
                        start: None,
                        end: None,
                        version: address.frees,
                        origin: Origin::Ghost,
                    });
                    ghosts.push(id);
                }
            }
        }
        let allocated_at_start = freed_without_alloc
            .iter()
            .chain(&ghosts)
            .fold(0u64, |sum, &id| {
                sum.wrapping_add(allocations[id as usize].size)
            });
        // Every allocation the trace frees without its alloc is in the start total, so the sum
        // never goes below zero (and the vector is reused in place).
        let allocated = allocated_change
            .into_iter()
            .map(|change| allocated_at_start.wrapping_add(change))
            .collect();
        let (reserved_at_start, reserved_steps) = reserved_over_time(snapshot, device, trace);

        Self {
            allocations,
            allocated,
            allocated_at_start,
            reserved_steps,
            reserved_at_start,
            event_allocation,
            checkpoints,
            freed_without_alloc,
            ghosts,
        }
    }

    pub fn len(&self) -> usize {
        self.allocated.len()
    }

    pub fn is_empty(&self) -> bool {
        self.allocated.is_empty()
    }

    /// Requested bytes live after event `at` (`None`: before the first event).
    pub fn allocated_after(&self, at: Option<usize>) -> u64 {
        match at {
            None => self.allocated_at_start,
            Some(i) => self
                .allocated
                .get(i)
                .or(self.allocated.last())
                .copied()
                .unwrap_or(self.allocated_at_start),
        }
    }

    /// Reserved bytes after event `at` (`None`: before the first event).
    pub fn reserved_after(&self, at: Option<usize>) -> u64 {
        let Some(at) = at else {
            return self.reserved_at_start;
        };
        let steps = self
            .reserved_steps
            .partition_point(|&(event, _)| event as usize <= at);
        match steps {
            0 => self.reserved_at_start,
            k => self.reserved_steps[k - 1].1,
        }
    }

    /// The highest allocated total and where it was first reached.
    pub fn peak_allocated(&self, trace: &Trace) -> Peak {
        let mut peak = Peak {
            bytes: self.allocated_at_start,
            event_index: None,
            time_us: None,
        };
        for (i, &bytes) in self.allocated.iter().enumerate() {
            if bytes > peak.bytes {
                peak.bytes = bytes;
                peak.event_index = Some(i);
            }
        }
        peak.time_us = peak.event_index.and_then(|i| time_of(trace, i));
        peak
    }

    /// The highest reserved total and where it was first reached.
    pub fn peak_reserved(&self, trace: &Trace) -> Peak {
        let mut peak = Peak {
            bytes: self.reserved_at_start,
            event_index: None,
            time_us: None,
        };
        for &(event, bytes) in &self.reserved_steps {
            if bytes > peak.bytes {
                peak.bytes = bytes;
                peak.event_index = Some(event as usize);
            }
        }
        peak.time_us = peak.event_index.and_then(|i| time_of(trace, i));
        peak
    }

    /// Ids of the allocations live after event `at`, ascending. Costs one checkpoint copy plus
    /// at most `CHECKPOINT_EVERY` replay steps.
    /// The allocation that event `event` opens or closes (allocs and frees), if any.
    pub fn allocation_at(&self, event: usize) -> Option<AllocationId> {
        self.event_allocation
            .get(event)
            .copied()
            .filter(|&id| id != NO_ALLOCATION)
    }

    pub fn live_after(&self, at: Option<usize>) -> Vec<AllocationId> {
        // With no events, every moment is the start.
        let (Some(at), false) = (at, self.event_allocation.is_empty()) else {
            let mut live = self.live_from_start(None);
            live.sort_unstable();
            return live;
        };
        let at = at.min(self.len().saturating_sub(1));
        let k = self.checkpoints.partition_point(|(event, _)| *event <= at);
        let (mut live, from) = match k {
            0 => (self.live_from_start(None), 0),
            k => {
                let (event, traced) = &self.checkpoints[k - 1];
                let mut live = self.live_from_start(Some(*event));
                live.extend_from_slice(traced);
                (live, event + 1)
            }
        };
        let mut opened = Vec::new();
        let mut closed = rustc_hash::FxHashSet::default();
        for event in from..=at.min(self.event_allocation.len().saturating_sub(1)) {
            let id = self.event_allocation[event];
            if id == NO_ALLOCATION {
                continue;
            }
            let allocation = &self.allocations[id as usize];
            if allocation.start == Some(event as u32) {
                opened.push(id);
            } else if allocation.end == Some(event as u32) {
                closed.insert(id);
            }
        }
        live.extend(opened);
        live.retain(|id| !closed.contains(id));
        live.sort_unstable();
        live
    }

    /// The allocations alive from the start that are still alive after event `at` (`None`:
    /// before the first event): the ghosts, and those freed without alloc later than `at`.
    fn live_from_start(&self, at: Option<usize>) -> Vec<AllocationId> {
        let freed_later = match at {
            None => 0,
            Some(at) => self.freed_without_alloc.partition_point(|&id| {
                self.allocations[id as usize]
                    .end
                    .is_some_and(|end| end as usize <= at)
            }),
        };
        let mut live = self.freed_without_alloc[freed_later..].to_vec();
        live.extend_from_slice(&self.ghosts);
        live
    }

    /// The first event at or after `time_us` (for wall-time queries).
    pub fn event_at_time(trace: &Trace, time_us: i64) -> usize {
        trace.time_us.partition_point(|&t| t < time_us)
    }
}

fn time_of(trace: &Trace, event: usize) -> Option<i64> {
    trace
        .has_time
        .then(|| trace.time_us.get(event).copied())
        .flatten()
}

/// Reserved bytes over time. The trace says how reserved memory changed; the snapshot's segments
/// say where it ended; so the start is the end minus every change (at least 0: a ring buffer may
/// have dropped segment events).
fn reserved_over_time(snapshot: &Snapshot, device: usize, trace: &Trace) -> (u64, Vec<(u32, u64)>) {
    let at_end: u64 = snapshot.device_segments(device).map(|s| s.total_size).sum();
    let mut net: i128 = 0;
    let mut deltas = Vec::new();
    for (event, &action) in trace.action.iter().enumerate() {
        let size = i128::from(trace.size[event]);
        let delta = match action {
            ActionCode::SEGMENT_ALLOC | ActionCode::SEGMENT_MAP => size,
            ActionCode::SEGMENT_FREE | ActionCode::SEGMENT_UNMAP => -size,
            _ => continue,
        };
        net += delta;
        deltas.push((event as u32, delta));
    }
    let start = (i128::from(at_end) - net).max(0);
    let mut total = start;
    let steps = deltas
        .into_iter()
        .map(|(event, delta)| {
            total = (total + delta).max(0);
            (event, u64::try_from(total).unwrap_or(u64::MAX))
        })
        .collect();
    (u64::try_from(start).unwrap_or(u64::MAX), steps)
}

/// A set of allocation ids with O(1) insert and remove and a listable membership.
#[derive(Debug, Default)]
struct LiveSet {
    members: Vec<AllocationId>,
    /// Position of each id in `members`, or `NO_ALLOCATION` (grown as ids are inserted).
    position: Vec<AllocationId>,
}

impl LiveSet {
    fn insert(&mut self, id: AllocationId) {
        let slot = id as usize;
        if slot >= self.position.len() {
            self.position.resize(slot + 1, NO_ALLOCATION);
        }
        if self.position[slot] == NO_ALLOCATION {
            self.position[slot] = self.members.len() as AllocationId;
            self.members.push(id);
        }
    }

    fn remove(&mut self, id: AllocationId) -> bool {
        let Some(&at) = self.position.get(id as usize) else {
            return false;
        };
        if at == NO_ALLOCATION {
            return false;
        }
        self.members.swap_remove(at as usize);
        if let Some(&moved) = self.members.get(at as usize) {
            self.position[moved as usize] = at;
        }
        self.position[id as usize] = NO_ALLOCATION;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loader runs the event pass batch by batch while the trace is read; wherever the
    /// batches end (even between a `free_requested` and its `free_completed`), the result must
    /// be the pass over the whole trace.
    #[test]
    fn the_event_pass_in_pieces_equals_the_pass_at_once() {
        let mut trace = Trace::default();
        let events = [
            (ActionCode::ALLOC, 0x10),
            (ActionCode::FREE_REQUESTED, 0x10),
            (ActionCode::FREE_COMPLETED, 0x10),
            (ActionCode::FREE_COMPLETED, 0x20),
            (ActionCode::SEGMENT_ALLOC, 0x30),
            (ActionCode::ALLOC, 0x10),
            (ActionCode::FREE_REQUESTED, 0x10),
            (ActionCode::ALLOC, 0x40),
            (ActionCode::FREE_COMPLETED, 0x10),
            (ActionCode::FREE_REQUESTED, 0x40),
        ];
        for (i, &(action, addr)) in events.iter().enumerate() {
            trace.push(action, addr, 8 + i as u64, 0, None, 0, 0, 0);
        }
        let mut whole = EventPass::default();
        whole.advance(&trace, true);
        assert_eq!(whole.len(), events.len());
        for split in 0..=events.len() {
            let mut partial = trace.clone();
            partial.action.truncate(split);
            partial.addr.truncate(split);
            partial.size.truncate(split);
            partial.stream.truncate(split);
            partial.time_us.truncate(split);
            partial.stack.truncate(split);
            let mut pieces = EventPass::default();
            pieces.advance(&partial, false);
            pieces.advance(&trace, false);
            pieces.advance(&trace, true);
            assert_eq!(pieces.allocations, whole.allocations, "split at {split}");
            assert_eq!(
                pieces.event_allocation, whole.event_allocation,
                "split at {split}"
            );
            assert_eq!(pieces.freed_without_alloc, whole.freed_without_alloc);
            assert_eq!(pieces.allocated_change, whole.allocated_change);
            assert_eq!(pieces.checkpoints, whole.checkpoints);
        }
    }

    /// A ring-buffer trace longer than several checkpoints, whose frees of allocations made
    /// before it began are spread through it: the live set at any moment equals a scan of
    /// every allocation's lifetime.
    #[test]
    fn live_sets_across_checkpoints_keep_allocations_from_before_the_trace() {
        let mut snapshot = Snapshot::default();
        let mut trace = Trace::default();
        let event = |trace: &mut Trace, action, addr: u64| {
            trace.push(action, addr, 100 + addr, 0, None, 0, 0, 0);
        };
        for step in 0..6000u64 {
            // Allocations from before the trace, freed one by one every 600 events.
            if step % 600 == 0 {
                event(&mut trace, ActionCode::FREE_COMPLETED, 1_000_000 + step);
            }
            event(&mut trace, ActionCode::ALLOC, step % 50);
            if step % 3 != 0 {
                event(&mut trace, ActionCode::FREE_REQUESTED, step % 50);
                event(&mut trace, ActionCode::FREE_COMPLETED, step % 50);
            }
        }
        let n = trace.len();
        assert!(n > 3 * CHECKPOINT_EVERY);
        snapshot.device_traces.push(trace);
        let replay = Replay::new(&snapshot, 0);
        let from_start = replay.live_after(None).len();
        assert_eq!(
            from_start, 10,
            "allocations freed without alloc are live at the start"
        );
        for at in (0..n).step_by(37).chain([4095, 4096, 8191, 8192, n - 1]) {
            let scanned: Vec<AllocationId> = (0..replay.allocations.len() as AllocationId)
                .filter(|&id| replay.allocations[id as usize].is_live_after(Some(at)))
                .collect();
            assert_eq!(replay.live_after(Some(at)), scanned, "live after {at}");
            let bytes: u64 = scanned
                .iter()
                .map(|&id| replay.allocations[id as usize].size)
                .sum();
            assert_eq!(
                replay.allocated_after(Some(at)),
                bytes,
                "allocated after {at}"
            );
        }
    }
}
