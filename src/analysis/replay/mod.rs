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
//!
//! The files, in the order the data flows: `pass.rs` is the event pass (the hot loop over the
//! trace, which the loader may run while reading), this file turns it into a [`Replay`] and
//! answers its queries, `lifetimes.rs` is the interval index behind the live sets.

mod allocations;
mod curve;
mod event_allocations;
mod lifetimes;
mod pass;
#[cfg(test)]
mod tests;

pub use allocations::Allocations;
pub(crate) use curve::StepExtremes;
pub use curve::{AllocatedOver, Curve};
pub use event_allocations::EventAllocations;
pub(crate) use pass::EventPass;
pub use pass::ReplaySeed;

use crate::snapshot::{ActionCode, BlockState, Column, Snapshot, StackId, Trace, TraceFollower};
pub(crate) use lifetimes::LifetimeIndex;
use pass::NO_ALLOCATION;

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
#[derive(Debug, Clone, Copy, PartialEq)]
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

/// The replay of one device.
#[derive(Debug, Default)]
pub struct Replay {
    pub allocations: Allocations,
    /// Requested bytes live after each event, read with [`Replay::allocated_over`] and
    /// [`Replay::allocated_after`].
    pub(crate) curve: Curve,
    /// Live before the first event: allocations freed without alloc, and ghosts.
    pub allocated_at_start: u64,
    /// Reserved bytes as a step function: `(event index, bytes after it)` at each change.
    pub reserved_steps: Vec<(u32, u64)>,
    pub reserved_at_start: u64,
    /// The event list's matches of the last filters asked (see `events::page`).
    pub(crate) event_matches: super::events::MatchCache,
    /// Per event, the allocation it opens or closes (if any).
    pub(crate) event_allocations: EventAllocations,
    /// The lifetimes of the traced allocations, indexed so the ones alive at an event are found
    /// without a scan; the allocations alive from the start are added when a live set is asked for.
    pub(crate) lifetimes: LifetimeIndex,
    /// Allocations freed without alloc, in the order of their frees (so of their `end`).
    pub(crate) freed_without_alloc: Column<AllocationId>,
    /// Allocations alive throughout.
    pub(crate) ghosts: Column<AllocationId>,
    /// Frees that waited: `(event of the lone free_requested, allocation)`, by request event.
    /// From the request to its `free_completed` the block is still the allocation's (MemoryViz
    /// counts it as allocated) but no tensor holds it: it is a pending free, as the snapshot's
    /// `active_pending_free` blocks are at the end.
    pub(crate) pending_requests: Vec<(u32, AllocationId)>,
    /// Requested bytes of pending frees as a step function: `(event index, bytes after it)`.
    pub pending_steps: Vec<(u32, u64)>,
    /// The highest allocated total and the event that first reached it, found once: the
    /// summary, the findings and the markers each ask, and on a long trace each scan is tens
    /// of milliseconds.
    pub(crate) peak: std::sync::OnceLock<(u64, Option<usize>)>,
    /// The curve's extremes step by step, from the walk that built it, until the views' index
    /// takes them ([`Replay::take_step_extremes`]; 16 bytes per 64 events). A replay opened
    /// from a stored index has none: its views' index walks the curve.
    pub(crate) step_extremes: std::sync::Mutex<Option<StepExtremes>>,
}

/// Events from which [`Replay::seeded`] runs its last passes on threads of their own (below,
/// starting them costs more than it saves).
pub(crate) const PASSES_ON_THREADS_FROM: usize = 1 << 20;

/// The highest value of a curve seen so far and the event that first reached it (`None`: the
/// value before the first event, which a later one must exceed).
struct FirstPeak((u64, Option<usize>));

impl FirstPeak {
    fn from(before_first: u64) -> Self {
        Self((before_first, None))
    }

    #[inline]
    fn see(&mut self, event: usize, bytes: u64) {
        if bytes > self.0.0 {
            self.0 = (bytes, Some(event));
        }
    }

    fn found(self) -> (u64, Option<usize>) {
        self.0
    }
}

/// A maximum of a memory curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Peak {
    pub bytes: u64,
    /// The event after which it was first reached; `None` when it holds before the first event.
    pub event_index: Option<usize>,
    pub time_us: Option<i64>,
}

impl Replay {
    /// Replays `device`'s trace against the snapshot's segments.
    pub fn new(snapshot: &Snapshot, device: usize) -> Self {
        Self::seeded(snapshot, device, None)
    }

    /// [`Replay::new`], starting from `pass` when the loader ran the event pass already (on its
    /// follower thread, while reading).
    pub(crate) fn seeded(snapshot: &Snapshot, device: usize, pass: Option<EventPass>) -> Self {
        Self::seeded_on(snapshot, device, pass, crate::snapshot::default_threads())
    }

    /// [`Replay::seeded`] with its last passes on up to `threads` threads.
    fn seeded_on(
        snapshot: &Snapshot,
        device: usize,
        pass: Option<EventPass>,
        threads: usize,
    ) -> Self {
        let trace = snapshot.trace(device);
        let pass = match pass.filter(|pass| pass.events() == trace.len()) {
            Some(pass) => pass,
            None => {
                let mut pass = EventPass::default();
                pass.take(trace.followed_events(0));
                pass.finish();
                pass
            }
        };
        let EventPass {
            mut allocations,
            event_allocations,
            addresses,
            freed_without_alloc,
            awaiting_completion,
            mut pending_requests,
            ..
        } = pass;
        // Requests not completed by the end: the allocation still open at the address waits.
        for (addr, request) in awaiting_completion {
            let open = addresses.state(&allocations, addr).open;
            if open != NO_ALLOCATION {
                pending_requests.push((request, open));
            }
        }
        pending_requests.sort_unstable();

        let mut ghosts = Vec::new();
        for segment in snapshot.device_segments(device) {
            for block in &segment.blocks {
                let address = addresses.state(&allocations, block.address);
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
        // Freed before the index is built: on a leak trace both are large.
        drop(addresses);
        // The pass grew these by doubling; what is kept should cost what it holds (shrinking a
        // large block is a remap, not a copy).
        allocations.shrink_to_fit();
        let event_allocations = event_allocations.built();
        let allocated_at_start = freed_without_alloc
            .iter()
            .chain(&ghosts)
            .fold(0u64, |sum, &id| {
                sum.wrapping_add(allocations.size(id as usize))
            });
        let started = std::time::Instant::now();
        let timed = |what: &'static str| {
            tracing::debug!(ms = started.elapsed().as_millis() as u64, "replay: {what}");
        };
        let on_threads = threads >= 2 && trace.len() >= PASSES_ON_THREADS_FROM;
        let curve = || {
            // In parts, on every thread, when there are threads to spare for it: cut in parts,
            // the curve costs half as much again (each part's sum, then its walk), so on two
            // threads, which the other two passes keep busy, it is walked whole.
            let parts = if on_threads && threads >= 3 {
                2 * threads
            } else {
                1
            };
            let curve = Curve::build(
                allocated_at_start,
                &event_allocations,
                &allocations,
                parts,
                threads,
            );
            timed("curve");
            curve
        };
        let index = || {
            let index = LifetimeIndex::new(
                &allocations,
                event_allocations.len(),
                &event_allocations.closed,
                if trace.len() >= PASSES_ON_THREADS_FROM {
                    threads
                } else {
                    1
                },
            );
            timed("lifetime index");
            index
        };
        let steps = || {
            let reserved = reserved_over_time(snapshot, device, trace);
            let steps = (reserved, pending_over_time(&allocations, &pending_requests));
            timed("reserved and pending steps");
            steps
        };
        // Three passes over millions of events or allocations that need nothing of each other:
        // on threads of their own when the trace is long and two threads or more are allowed
        // (on two cores the lifetime index, the longest, runs beside the other two).
        let (
            (curve, peak, step_extremes),
            lifetimes,
            ((reserved_at_start, reserved_steps), pending_steps),
        ) = if on_threads {
            std::thread::scope(|scope| {
                let index = scope.spawn(index);
                let steps = scope.spawn(steps);
                let curve = curve();
                (
                    curve,
                    crate::threads::joined(index.join()),
                    crate::threads::joined(steps.join()),
                )
            })
        } else {
            (curve(), index(), steps())
        };

        Self {
            pending_requests,
            pending_steps,
            allocations,
            curve,
            allocated_at_start,
            event_matches: Default::default(),
            reserved_steps,
            reserved_at_start,
            event_allocations,
            lifetimes,
            freed_without_alloc: freed_without_alloc.into(),
            ghosts: ghosts.into(),
            peak: peak.found().into(),
            step_extremes: Some(step_extremes).into(),
        }
    }

    /// The curve's step extremes its walk found, once (see [`Replay::step_extremes`]).
    pub(crate) fn take_step_extremes(&self) -> Option<StepExtremes> {
        self.step_extremes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The trace's events.
    pub fn len(&self) -> usize {
        self.event_allocations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.event_allocations.is_empty()
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

    /// Requested bytes of pending frees after event `at` (`None`: before the first event).
    pub fn pending_after(&self, at: Option<usize>) -> u64 {
        let Some(at) = at else { return 0 };
        let steps = self
            .pending_steps
            .partition_point(|&(event, _)| event as usize <= at);
        steps.checked_sub(1).map_or(0, |k| self.pending_steps[k].1)
    }

    /// The allocations whose free was requested but not completed after event `at`, each with
    /// the event of its request, by request event. Costs the requests up to `at`.
    pub fn pending_frees_after(&self, at: Option<usize>) -> Vec<(u32, AllocationId)> {
        let Some(at) = at else { return Vec::new() };
        let requested = self
            .pending_requests
            .partition_point(|&(event, _)| event as usize <= at);
        self.pending_requests[..requested]
            .iter()
            .copied()
            .filter(|&(_, id)| {
                self.allocations
                    .end(id as usize)
                    .is_none_or(|end| end as usize > at)
            })
            .collect()
    }

    /// The highest allocated total and the event that first reached it (`None`: before the
    /// first event).
    pub(crate) fn first_peak(&self) -> (u64, Option<usize>) {
        *self.peak.get_or_init(|| {
            let mut peak = FirstPeak::from(self.allocated_at_start);
            for (event, bytes) in self.allocated_over(0, self.len()).enumerate() {
                peak.see(event, bytes);
            }
            peak.found()
        })
    }

    /// The highest allocated total and where it was first reached.
    pub fn peak_allocated(&self, trace: &Trace) -> Peak {
        let (bytes, event_index) = self.first_peak();
        Peak {
            bytes,
            event_index,
            time_us: event_index.and_then(|i| time_of(trace, i)),
        }
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

    /// The allocation that event `event` opens or closes (allocs and frees), if any.
    pub fn allocation_at(&self, event: usize) -> Option<AllocationId> {
        Some(self.event_allocations.get(event)).filter(|&id| id != NO_ALLOCATION)
    }

    /// Ids of the allocations live after event `at`, ascending. Costs O(log events +
    /// `LEAF_EVENTS` + live) and the sort of the answer, however long the trace.
    pub fn live_after(&self, at: Option<usize>) -> Vec<AllocationId> {
        // With no events, every moment is the start.
        let (Some(at), false) = (at, self.is_empty()) else {
            let mut live = self.live_from_start(None);
            live.sort_unstable();
            return live;
        };
        let at = at.min(self.len().saturating_sub(1));
        let mut live = self.live_from_start(Some(at));
        self.lifetimes.alive_at(at, &self.allocations, &mut live);
        sort_distinct_ids(&mut live, self.allocations.len());
        live
    }

    /// Heap bytes this replay holds (capacities, not lengths: what the process pays), so a
    /// cache of replays can keep to a byte budget.
    pub fn heap_bytes(&self) -> u64 {
        self.allocations.heap_bytes()
            + self.curve.heap_bytes()
            + vec_bytes(&self.reserved_steps) as u64
            + self.event_allocations.heap_bytes()
            + self.lifetimes.heap_bytes()
            + self.freed_without_alloc.heap_bytes()
            + self.ghosts.heap_bytes()
            + vec_bytes(&self.pending_requests) as u64
            + vec_bytes(&self.pending_steps) as u64
            + self
                .step_extremes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .map_or(0, |found| {
                    (vec_bytes(&found.min) + vec_bytes(&found.max)) as u64
                })
    }

    /// The allocations alive from the start that are still alive after event `at` (`None`:
    /// before the first event): the ghosts, and those freed without alloc later than `at`.
    fn live_from_start(&self, at: Option<usize>) -> Vec<AllocationId> {
        let freed_later = match at {
            None => 0,
            Some(at) => self.freed_without_alloc.partition_point(|&id| {
                self.allocations
                    .end(id as usize)
                    .is_some_and(|end| end as usize <= at)
            }),
        };
        let mut live = self.freed_without_alloc[freed_later..].to_vec();
        live.extend_from_slice(&self.ghosts);
        live
    }
}

fn time_of(trace: &Trace, event: usize) -> Option<i64> {
    trace.has_time.then(|| trace.time_us.at(event)).flatten()
}

/// Reserved bytes over time. The trace says how reserved memory changed; the snapshot's segments
/// say where it ended; so the start is the end minus every change (at least 0: a ring buffer may
/// have dropped segment events).
fn reserved_over_time(snapshot: &Snapshot, device: usize, trace: &Trace) -> (u64, Vec<(u32, u64)>) {
    let at_end: u64 = snapshot.device_segments(device).map(|s| s.total_size).sum();
    let mut net: i128 = 0;
    let mut deltas = Vec::new();
    for (event, &action) in trace.action.iter().enumerate() {
        let size = i128::from(trace.size.get(event));
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

/// Pending bytes over time from the requests (`(request event, allocation)`): each adds the
/// allocation's requested bytes at its request and takes them away at its completion (the
/// allocation's end). Ids past `allocations` (a damaged stored index) are passed over.
pub(crate) fn pending_over_time(
    allocations: &Allocations,
    requests: &[(u32, AllocationId)],
) -> Vec<(u32, u64)> {
    let mut changes: Vec<(u32, i128)> = Vec::with_capacity(requests.len() * 2);
    for &(request, id) in requests {
        let Some(allocation) = allocations.get(id as usize) else {
            continue;
        };
        changes.push((request, i128::from(allocation.size)));
        if let Some(end) = allocation.end {
            changes.push((end, -i128::from(allocation.size)));
        }
    }
    changes.sort_unstable_by_key(|&(event, _)| event);
    let mut steps: Vec<(u32, u64)> = Vec::with_capacity(changes.len());
    let mut total: i128 = 0;
    for (event, change) in changes {
        total = (total + change).max(0);
        let bytes = u64::try_from(total).unwrap_or(u64::MAX);
        match steps.last_mut() {
            Some(last) if last.0 == event => last.1 = bytes,
            _ => steps.push((event, bytes)),
        }
    }
    steps
}

/// Sorts `ids`, distinct ids below `count`, ascending. A leak's live set is most of the
/// allocations; then marking them in a bitmap and reading it back (O(count / 64 + ids)) beats
/// a sort of millions (O(ids log ids)).
fn sort_distinct_ids(ids: &mut Vec<AllocationId>, count: usize) {
    if ids.len() < count / 64 {
        ids.sort_unstable();
        return;
    }
    let mut bits = vec![0u64; count.div_ceil(64)];
    for &id in ids.iter() {
        bits[id as usize / 64] |= 1 << (id % 64);
    }
    debug_assert_eq!(
        bits.iter().map(|w| w.count_ones() as usize).sum::<usize>(),
        ids.len(),
        "ids are distinct"
    );
    ids.clear();
    for (word_index, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            ids.push((word_index * 64) as AllocationId + word.trailing_zeros());
            word &= word - 1;
        }
    }
}

/// Heap bytes a vector holds: its capacity, which is what the process pays for.
fn vec_bytes<T>(vector: &Vec<T>) -> usize {
    vector.capacity() * std::mem::size_of::<T>()
}
