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

use crate::snapshot::{ActionCode, BlockState, Followed, Snapshot, StackId, Trace, TraceFollower};

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

/// Per address, the last allocation the replay made there, which says the address's state:
/// open if that allocation is, and the frees seen there are its version, plus one if it was
/// freed. A slot holds only the id (the address is the allocation's), so a leak of ten million
/// addresses costs 5 bytes a slot where a map from address to state costs 17.
#[derive(Debug, Default)]
struct Addresses {
    last: hashbrown::HashTable<AllocationId>,
}

impl Addresses {
    fn hash(addr: u64) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(addr)
    }

    /// The last allocation made at `addr`, if any.
    fn last_at(&self, allocations: &[Allocation], addr: u64) -> Option<AllocationId> {
        self.last
            .find(Self::hash(addr), |&id| {
                allocations[id as usize].addr == addr
            })
            .copied()
    }

    /// The state of `addr`.
    fn state(&self, allocations: &[Allocation], addr: u64) -> Address {
        match self.last_at(allocations, addr) {
            None => Address::default(),
            Some(id) => state_after(&allocations[id as usize], id),
        }
    }

    /// Records `id`, already in `allocations`, as the last allocation at its address.
    fn set_last(&mut self, allocations: &[Allocation], id: AllocationId) {
        let addr = allocations[id as usize].addr;
        let hash = Self::hash(addr);
        match self
            .last
            .find_mut(hash, |&other| allocations[other as usize].addr == addr)
        {
            Some(slot) => *slot = id,
            None => {
                self.last.insert_unique(hash, id, |&other| {
                    Self::hash(allocations[other as usize].addr)
                });
            }
        }
    }
}

/// The state of an address whose last allocation is `last` (with id `id`).
fn state_after(last: &Allocation, id: AllocationId) -> Address {
    match last.end {
        None => Address {
            open: id,
            frees: last.version,
        },
        Some(_) => Address {
            open: NO_ALLOCATION,
            frees: last.version + 1,
        },
    }
}

/// No allocation opens or closes at this event.
const NO_ALLOCATION: AllocationId = AllocationId::MAX;

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
    /// The lifetimes of the traced allocations, indexed so the ones alive at an event are found
    /// without a scan; the allocations alive from the start are added when a live set is asked for.
    lifetimes: LifetimeIndex,
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
/// can run while the trace is still being read (it is a [`TraceFollower`], which the loader runs
/// on its column thread); the rest of [`Replay::new`] needs the segments.
#[derive(Debug, Default)]
pub(crate) struct EventPass {
    allocations: Vec<Allocation>,
    /// Per event, the allocation it opens or closes (or `NO_ALLOCATION`).
    event_allocation: Vec<AllocationId>,
    /// Per address: the allocation open there (if any) and how many frees it has seen.
    addresses: Addresses,
    freed_without_alloc: Vec<AllocationId>,
    /// Per event, bytes allocated after it minus bytes alive from the start, as a wrapping sum
    /// (it dips below zero as allocations from before the trace are freed).
    allocated_change: Vec<u64>,
    change: u64,
}

impl TraceFollower for EventPass {
    fn events(&self) -> usize {
        self.event_allocation.len()
    }

    /// Replays the events of `trace` not yet seen. Unless `complete`, a trailing `free_requested`
    /// waits for the next event (it may be half of a merged free).
    fn advance(&mut self, trace: &Trace, complete: bool) {
        let n = trace.len();
        let mut i = self.events();
        while i < n {
            let action = trace.action[i];
            let addr = trace.addr[i];
            match action {
                ActionCode::ALLOC => {
                    let id = self.allocations.len() as AllocationId;
                    let address = self.addresses.state(&self.allocations, addr);
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
                    self.addresses.set_last(&self.allocations, id);
                    self.change = self.change.wrapping_add(trace.size[i]);
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
                        let address = self.addresses.state(&self.allocations, addr);
                        let id = match address.open {
                            // Still the last allocation at `addr`, now freed.
                            id if id != NO_ALLOCATION => {
                                self.allocations[id as usize].end = Some(i as u32);
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
                                    version: address.frees,
                                    origin: Origin::FreedWithoutAlloc,
                                });
                                self.addresses.set_last(&self.allocations, id);
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
}

impl EventPass {
    /// Ends the next event: what it opened or closed, and the memory after it.
    fn record(&mut self, id: AllocationId) {
        self.event_allocation.push(id);
        self.allocated_change.push(self.change);
    }
}

/// The replay's event pass as the loader ran it while reading the trace (see
/// [`super::load_path`]), handed to [`super::Analysis::seeded`] so it is not run twice. Empty
/// when the loader did not run it (a short trace, or events of several devices).
#[derive(Debug, Default)]
pub struct ReplaySeed(Option<Followed<EventPass>>);

impl ReplaySeed {
    pub(crate) fn new(followed: Option<Followed<EventPass>>) -> Self {
        Self(followed)
    }

    /// The pass, if it is `device`'s and covers exactly its `events` (the trace as loaded).
    pub(crate) fn take(&mut self, device: usize, events: usize) -> Option<EventPass> {
        match self.0.take() {
            Some(followed) if followed.device == device && followed.follower.events() == events => {
                Some(followed.follower)
            }
            other => {
                self.0 = other;
                None
            }
        }
    }
}

impl Replay {
    /// Replays `device`'s trace against the snapshot's segments.
    pub fn new(snapshot: &Snapshot, device: usize) -> Self {
        Self::seeded(snapshot, device, None)
    }

    /// [`Replay::new`], starting from `pass` when the loader ran the event pass already (on its
    /// column thread, while reading).
    pub(crate) fn seeded(snapshot: &Snapshot, device: usize, pass: Option<EventPass>) -> Self {
        let trace = snapshot.trace(device);
        let pass = match pass.filter(|pass| pass.events() == trace.len()) {
            Some(pass) => pass,
            None => {
                let mut pass = EventPass::default();
                pass.advance(trace, true);
                pass
            }
        };
        let EventPass {
            mut allocations,
            mut event_allocation,
            addresses,
            freed_without_alloc,
            allocated_change,
            ..
        } = pass;

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
        event_allocation.shrink_to_fit();
        let lifetimes = LifetimeIndex::new(&allocations, &event_allocation);
        let allocated_at_start = freed_without_alloc
            .iter()
            .chain(&ghosts)
            .fold(0u64, |sum, &id| {
                sum.wrapping_add(allocations[id as usize].size)
            });
        // Every allocation the trace frees without its alloc is in the start total, so the sum
        // never goes below zero (and the vector is reused in place).
        let mut allocated: Vec<u64> = allocated_change
            .into_iter()
            .map(|change| allocated_at_start.wrapping_add(change))
            .collect();
        allocated.shrink_to_fit();
        let (reserved_at_start, reserved_steps) = reserved_over_time(snapshot, device, trace);

        Self {
            allocations,
            allocated,
            allocated_at_start,
            reserved_steps,
            reserved_at_start,
            event_allocation,
            lifetimes,
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

    /// The allocation that event `event` opens or closes (allocs and frees), if any.
    pub fn allocation_at(&self, event: usize) -> Option<AllocationId> {
        self.event_allocation
            .get(event)
            .copied()
            .filter(|&id| id != NO_ALLOCATION)
    }

    /// Ids of the allocations live after event `at`, ascending. Costs O(log events +
    /// `LEAF_EVENTS` + live) and the sort of the answer, however long the trace.
    pub fn live_after(&self, at: Option<usize>) -> Vec<AllocationId> {
        // With no events, every moment is the start.
        let (Some(at), false) = (at, self.event_allocation.is_empty()) else {
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
        (vec_bytes(&self.allocations)
            + vec_bytes(&self.allocated)
            + vec_bytes(&self.reserved_steps)
            + vec_bytes(&self.event_allocation)
            + self.lifetimes.heap_bytes()
            + vec_bytes(&self.freed_without_alloc)
            + vec_bytes(&self.ghosts)) as u64
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

/// log2 of the events per leaf of [`LifetimeIndex`]. A query scans the lifetimes that start and
/// end within its leaf (at most this many, one per event), so this bounds its extra work; the
/// index holds two buckets per leaf, so a leaf much smaller would cost memory for nothing.
const LEAF_EVENTS_LOG2: u32 = 6;

/// The lifetimes of the allocations the trace opened, as a centred interval tree over event
/// indices, so the ones alive at any event are found in O(log events + leaf + answer) while the
/// index holds two ids per allocation. (Copying the live set at regular checkpoints instead
/// costs memory quadratic in a leak: every never-freed allocation is in every later copy.)
///
/// Leaf `f` holds the events `f << LEAF_EVENTS_LOG2 ..`; a node of level `L >= 1` covers `2^L`
/// leaves and is split in halves at its middle event. Each lifetime is stored once, in a bucket
/// of the lowest node whose middle it spans, or of its leaf if it starts and ends there. The
/// nodes a lifetime spanning an event can be in are the ones over that event's leaf, one per
/// level; a lifetime in such a node spans its middle, so before the middle the ones alive are
/// those started by then (a prefix of the bucket by start), from the middle on, the ones not
/// yet freed (a suffix of the bucket by end).
#[derive(Debug, Default)]
struct LifetimeIndex {
    /// The first bucket of each level; level `L` has a bucket per node, nodes in event order.
    level_first: Vec<u32>,
    /// Bucket `k`'s allocations are `by_start[bucket_first[k]..bucket_first[k + 1]]`, by start,
    /// and the same ones in `by_end`, by end (the never freed last).
    bucket_first: Vec<u32>,
    by_start: Vec<AllocationId>,
    by_end: Vec<AllocationId>,
}

impl LifetimeIndex {
    /// Indexes the allocations with a `start` (the others are alive from the start and kept
    /// apart); `event_allocation` lists the frees in the order of their events.
    fn new(allocations: &[Allocation], event_allocation: &[AllocationId]) -> Self {
        let events = event_allocation.len();
        if events == 0 {
            return Self::default();
        }
        let leaves = ((events - 1) >> LEAF_EVENTS_LOG2) + 1;
        let top_level = usize::BITS - (leaves - 1).leading_zeros();
        let mut level_first = Vec::with_capacity(top_level as usize + 1);
        let mut buckets = 0usize;
        for level in 0..=top_level {
            level_first.push(buckets as u32);
            buckets += ((leaves - 1) >> level) + 1;
        }
        // Each allocation's bucket, from one read of the allocations (the largest vector here),
        // with flags for the passes below.
        let mut bucket: Vec<u32> = allocations
            .iter()
            .map(|allocation| match allocation.start {
                None => NOT_INDEXED,
                Some(first) => {
                    // Never freed: alive up to the last event, the last one a query asks about.
                    let last = allocation.end.map_or(events - 1, |end| end as usize - 1);
                    let (level, node) = node_of(first as usize, last);
                    let never_freed = if allocation.end.is_none() {
                        NEVER_FREED
                    } else {
                        0
                    };
                    (level_first[level as usize] + node as u32) | never_freed
                }
            })
            .collect();

        // A counting sort by bucket: sizes, then where each bucket begins.
        let mut bucket_first = vec![0u32; buckets + 1];
        for &flagged in &bucket {
            if flagged != NOT_INDEXED {
                bucket_first[(flagged & BUCKET) as usize + 1] += 1;
            }
        }
        for b in 0..buckets {
            bucket_first[b + 1] += bucket_first[b];
        }
        let indexed = bucket_first[buckets] as usize;
        let mut by_start = vec![NO_ALLOCATION; indexed];
        let mut by_end = vec![NO_ALLOCATION; indexed];
        // Where the next id of each bucket goes: the front of `by_start` and `by_end` fill up
        // in start and end order; the back of `by_end` takes the never freed, which all end
        // after every free (among themselves, in no order a query needs).
        let mut next = bucket_first[..buckets].to_vec();
        let mut next_never_freed = bucket_first[1..].to_vec();
        // Ids are given at the alloc, so id order is start order.
        for (id, &flagged) in bucket.iter().enumerate() {
            if flagged == NOT_INDEXED {
                continue;
            }
            let b = (flagged & BUCKET) as usize;
            by_start[next[b] as usize] = id as AllocationId;
            next[b] += 1;
            if flagged & NEVER_FREED != 0 {
                next_never_freed[b] -= 1;
                by_end[next_never_freed[b] as usize] = id as AllocationId;
            }
        }
        // The frees in event order. An indexed allocation's first event is its alloc, its
        // second its free.
        next.copy_from_slice(&bucket_first[..buckets]);
        for &id in event_allocation {
            let Some(flagged) = bucket.get_mut(id as usize) else {
                continue;
            };
            if *flagged == NOT_INDEXED || *flagged & NEVER_FREED != 0 {
                continue;
            }
            if *flagged & ALLOCATED == 0 {
                *flagged |= ALLOCATED;
                continue;
            }
            let b = (*flagged & BUCKET) as usize;
            by_end[next[b] as usize] = id;
            next[b] += 1;
        }
        Self {
            level_first,
            bucket_first,
            by_start,
            by_end,
        }
    }

    /// Appends the indexed allocations alive after event `at` (in no order).
    fn alive_at(&self, at: usize, allocations: &[Allocation], out: &mut Vec<AllocationId>) {
        let started = |id: &&AllocationId| {
            allocations[**id as usize]
                .start
                .is_some_and(|start| start as usize <= at)
        };
        let not_freed = |id: &&AllocationId| {
            allocations[**id as usize]
                .end
                .is_none_or(|end| end as usize > at)
        };
        let leaf = at >> LEAF_EVENTS_LOG2;
        for (level, &first) in self.level_first.iter().enumerate() {
            let node = leaf >> level;
            let bucket = first as usize + node;
            let (Some(&from), Some(&to)) = (
                self.bucket_first.get(bucket),
                self.bucket_first.get(bucket + 1),
            ) else {
                // Past the last event: no bucket, nothing alive in the index.
                return;
            };
            let (by_start, by_end) = (
                &self.by_start[from as usize..to as usize],
                &self.by_end[from as usize..to as usize],
            );
            if level == 0 {
                out.extend(by_start.iter().take_while(started).filter(not_freed));
                continue;
            }
            let middle = ((node << level) | (1 << (level - 1))) << LEAF_EVENTS_LOG2;
            if at < middle {
                out.extend(by_start.iter().take_while(started));
            } else {
                out.extend(by_end.iter().rev().take_while(not_freed));
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        vec_bytes(&self.level_first)
            + vec_bytes(&self.bucket_first)
            + vec_bytes(&self.by_start)
            + vec_bytes(&self.by_end)
    }
}

/// Flags of an allocation's bucket while [`LifetimeIndex::new`] sorts: not in the index (alive
/// from the start), never freed, its alloc already passed; the bits below are the bucket, far
/// fewer than 2^30 (two per `2^LEAF_EVENTS_LOG2` events of at most 2^32).
const NOT_INDEXED: u32 = u32::MAX;
const NEVER_FREED: u32 = 1 << 31;
const ALLOCATED: u32 = 1 << 30;
const BUCKET: u32 = ALLOCATED - 1;

/// The node of [`LifetimeIndex`] that holds a lifetime from event `first` to event `last`
/// (both alive): `(level, node within the level)`. Its leaves' highest differing bit says at
/// which level the halves they fall in part.
fn node_of(first: usize, last: usize) -> (u32, usize) {
    let (first_leaf, last_leaf) = (first >> LEAF_EVENTS_LOG2, last >> LEAF_EVENTS_LOG2);
    if first_leaf == last_leaf {
        return (0, first_leaf);
    }
    let level = usize::BITS - (first_leaf ^ last_leaf).leading_zeros();
    (level, first_leaf >> level)
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
        assert_eq!(whole.events(), events.len());
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
        }
    }

    /// A pickle of `{"segments": [], "device_traces": [[...]]}` with `events` allocs and frees of
    /// device 0, written opcode by opcode (protocol 2).
    fn pickle_of_alloc_free_trace(events: usize) -> Vec<u8> {
        fn text(out: &mut Vec<u8>, text: &str) {
            out.push(b'X');
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
        fn int(out: &mut Vec<u8>, value: i32) {
            out.push(b'J');
            out.extend_from_slice(&value.to_le_bytes());
        }
        let mut out = vec![0x80, 2, b'}', b'('];
        text(&mut out, "segments");
        out.push(b']');
        text(&mut out, "device_traces");
        out.extend_from_slice(b"](]("); // the list of devices, and device 0's list of events
        for i in 0..events {
            out.extend_from_slice(b"}(");
            text(&mut out, "action");
            text(
                &mut out,
                if i % 2 == 0 {
                    "alloc"
                } else {
                    "free_completed"
                },
            );
            text(&mut out, "addr");
            int(&mut out, 0x1000 * (i as i32 / 2 % 64 + 1));
            text(&mut out, "size");
            int(&mut out, 512);
            out.push(b'u');
        }
        out.extend_from_slice(b"eeu.");
        out
    }

    /// Past 65,536 events the loader runs the event pass on its column thread and hands it over
    /// beside the snapshot (no lock in the model); the replay started from it is the replay
    /// that runs the pass itself.
    #[test]
    fn the_loaders_event_pass_is_handed_to_the_replay() {
        let events = 70_000;
        let bytes = pickle_of_alloc_free_trace(events);
        let (snapshot, mut seed) =
            crate::analysis::load_reader(&bytes[..], Default::default()).expect("loads");
        assert_eq!(snapshot.trace(0).len(), events);
        let followed = seed.0.as_ref().expect("the loader ran the event pass");
        assert_eq!((followed.device, followed.follower.events()), (0, events));
        // A pass is only for the trace it saw.
        assert!(seed.take(1, events).is_none());
        assert!(seed.take(0, events - 1).is_none());
        let pass = seed.take(0, events).expect("the pass of device 0");
        assert!(seed.take(0, events).is_none(), "taken once");

        let seeded = Replay::seeded(&snapshot, 0, Some(pass));
        let fresh = Replay::new(&snapshot, 0);
        assert_eq!(seeded.allocations, fresh.allocations);
        assert_eq!(seeded.event_allocation, fresh.event_allocation);
        assert_eq!(seeded.allocated, fresh.allocated);
        assert_eq!(
            seeded.live_after(Some(events / 2)),
            fresh.live_after(Some(events / 2))
        );
        assert_eq!(seeded.allocated_after(Some(0)), 512);
    }

    /// A ring-buffer trace spanning many levels of the lifetime index, whose frees of allocations made
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
        assert!(n > 64 << LEAF_EVENTS_LOG2);
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

    /// A small deterministic generator (xorshift), so the traces below are the same every run.
    struct Dice(u64);

    impl Dice {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// The allocations live after `at` by a scan of every lifetime: the brute force the index
    /// must agree with.
    fn scanned(replay: &Replay, at: Option<usize>) -> Vec<AllocationId> {
        (0..replay.allocations.len() as AllocationId)
            .filter(|&id| replay.allocations[id as usize].is_live_after(at))
            .collect()
    }

    /// The shape of a leak: most allocations are never freed, the rest live for a few events
    /// or for thousands (so lifetimes land at every level of the index), some frees are of
    /// allocations from before the trace, and the segments hold ghosts. At many events, and
    /// around every leaf boundary of the first leaves, the live set is the scan's and its bytes
    /// are the memory curve's.
    #[test]
    fn live_sets_of_a_leak_trace_equal_a_scan_of_lifetimes() {
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
        let mut trace = Trace::default();
        let mut open: Vec<u64> = Vec::new();
        let mut next_addr = 0x1000u64;
        for _ in 0..30_000 {
            match dice.below(100) {
                0..=59 => {
                    trace.push(
                        ActionCode::ALLOC,
                        next_addr,
                        16 + next_addr % 997,
                        0,
                        None,
                        0,
                        0,
                        0,
                    );
                    // One in four is freed later; the rest leak.
                    if dice.below(4) == 0 {
                        open.push(next_addr);
                    }
                    next_addr += 512;
                }
                60..=79 if !open.is_empty() => {
                    // Mostly the newest (short lifetimes), sometimes one from long ago.
                    let pick = if dice.below(5) == 0 {
                        dice.below(open.len() as u64) as usize
                    } else {
                        open.len() - 1
                    };
                    let addr = open.swap_remove(pick);
                    trace.push(ActionCode::FREE_REQUESTED, addr, 0, 0, None, 0, 0, 0);
                    trace.push(ActionCode::FREE_COMPLETED, addr, 0, 0, None, 0, 0, 0);
                }
                80..=81 => {
                    // Allocated before the trace began.
                    let addr = 0x7000_0000 + dice.below(1 << 20) * 512;
                    trace.push(ActionCode::FREE_COMPLETED, addr, 64, 0, None, 0, 0, 0);
                }
                _ => trace.push(ActionCode::SEGMENT_ALLOC, 0, 0, 0, None, 0, 0, 0),
            }
        }
        let n = trace.len();
        let mut snapshot = Snapshot::default();
        snapshot.segments.push(crate::snapshot::Segment {
            blocks: (0..5)
                .map(|k| crate::snapshot::Block {
                    address: 0x9000_0000 + k * 512,
                    size: 512,
                    requested_size: 100 + k,
                    state: BlockState::ActiveAllocated,
                    stack: 0,
                })
                .collect(),
            ..Default::default()
        });
        snapshot.device_traces.push(trace);
        let replay = Replay::new(&snapshot, 0);
        assert!(n > 64 << LEAF_EVENTS_LOG2, "{n} events span many levels");
        let never_freed = replay
            .allocations
            .iter()
            .filter(|a| a.origin == Origin::Traced && a.end.is_none())
            .count();
        assert!(never_freed > 10_000, "a leak: {never_freed} never freed");
        assert!(!replay.freed_without_alloc.is_empty() && replay.ghosts.len() == 5);

        let leaf = 1usize << LEAF_EVENTS_LOG2;
        let boundaries = (1..40).flat_map(|k| [k * leaf - 1, k * leaf, k * leaf + 1]);
        let moments = (0..n)
            .step_by(13)
            .chain(boundaries)
            .chain([n - 1, n, n + 100]);
        for at in moments.map(Some).chain([None]) {
            let live = replay.live_after(at);
            assert_eq!(
                live,
                scanned(&replay, at.map(|at| at.min(n - 1))),
                "live after {at:?}"
            );
            let bytes = live.iter().fold(0u64, |sum, &id| {
                sum.wrapping_add(replay.allocations[id as usize].size)
            });
            assert_eq!(replay.allocated_after(at), bytes, "allocated after {at:?}");
        }
    }

    /// Lifetimes of every length from every start (short traces, so all pairs fit): each
    /// lands in the bucket of its level, and the query finds it exactly where it is alive.
    #[test]
    fn lifetimes_of_every_length_are_found_where_they_are_alive() {
        for steps in [1usize, 2, 63, 64, 65, 200, 700] {
            // One allocation per (first step, last step) pair on a grid, each at its own
            // address; at each step the frees due come first, then the allocs.
            let stride = (steps / 40).max(1);
            let mut allocs: Vec<Vec<u64>> = vec![Vec::new(); steps + 1];
            let mut frees: Vec<Vec<u64>> = vec![Vec::new(); steps + 1];
            let mut addr = 0u64;
            for first in (0..steps).step_by(stride) {
                for last in (first + 1..=steps).step_by(stride) {
                    addr += 1;
                    allocs[first].push(addr);
                    frees[last].push(addr);
                }
            }
            let mut trace = Trace::default();
            for step in 0..=steps {
                for &addr in &frees[step] {
                    trace.push(ActionCode::FREE_COMPLETED, addr, 8, 0, None, 0, 0, 0);
                }
                for &addr in &allocs[step] {
                    trace.push(ActionCode::ALLOC, addr, 8, 0, None, 0, 0, 0);
                }
            }
            let n = trace.len();
            let mut snapshot = Snapshot::default();
            snapshot.device_traces.push(trace);
            let replay = Replay::new(&snapshot, 0);
            for at in (0..n).map(Some).chain([None]) {
                assert_eq!(
                    replay.live_after(at),
                    scanned(&replay, at),
                    "{steps} steps: live after {at:?}"
                );
            }
        }
    }

    /// Address reuse, a second alloc at an open address, and frees of unknown addresses give
    /// the versions and lifetimes MemoryViz gives (the address table keeps only the last
    /// allocation at each address).
    #[test]
    fn versions_count_the_frees_at_each_address() {
        let mut trace = Trace::default();
        let events = [
            (ActionCode::ALLOC, 0xa0),          // 0: a0 version 0
            (ActionCode::FREE_COMPLETED, 0xa0), // 1: frees it
            (ActionCode::ALLOC, 0xa0),          // 2: a0 version 1
            (ActionCode::FREE_COMPLETED, 0xb0), // 3: b0 freed without alloc, version 0
            (ActionCode::FREE_COMPLETED, 0xb0), // 4: again, version 1
            (ActionCode::ALLOC, 0xb0),          // 5: b0 version 2
            (ActionCode::ALLOC, 0xb0),          // 6: b0 version 2 again; 5 stays open
            (ActionCode::FREE_REQUESTED, 0xb0), // 7: frees 6 (merged with 8)
            (ActionCode::FREE_COMPLETED, 0xb0), // 8
            (ActionCode::FREE_COMPLETED, 0xb0), // 9: nothing open: freed without alloc, v3
            (ActionCode::ALLOC, 0xc0),          // 10: c0 version 0, open at the end
        ];
        for &(action, addr) in &events {
            trace.push(action, addr, 8, 0, None, 0, 0, 0);
        }
        let mut snapshot = Snapshot::default();
        snapshot.device_traces.push(trace);
        // Blocks at the end: c0 (open in the trace: not a ghost), a0 (open: not a ghost) and
        // d0 (never seen: a ghost of version 0); b0's block would be a ghost of version 4.
        snapshot.segments.push(crate::snapshot::Segment {
            blocks: [0xa0, 0xb0, 0xc0, 0xd0]
                .into_iter()
                .map(|address| crate::snapshot::Block {
                    address,
                    size: 512,
                    requested_size: 8,
                    state: BlockState::ActiveAllocated,
                    stack: 0,
                })
                .collect(),
            ..Default::default()
        });
        let replay = Replay::new(&snapshot, 0);
        let lifetimes: Vec<_> = replay
            .allocations
            .iter()
            .map(|a| (a.addr, a.version, a.start, a.end, a.origin))
            .collect();
        use Origin::*;
        assert_eq!(
            lifetimes,
            [
                (0xa0, 0, Some(0), Some(1), Traced),
                (0xa0, 1, Some(2), None, Traced),
                (0xb0, 0, None, Some(3), FreedWithoutAlloc),
                (0xb0, 1, None, Some(4), FreedWithoutAlloc),
                (0xb0, 2, Some(5), None, Traced),
                (0xb0, 2, Some(6), Some(7), Traced),
                (0xb0, 3, None, Some(9), FreedWithoutAlloc),
                (0xc0, 0, Some(10), None, Traced),
                (0xb0, 4, None, None, Ghost),
                (0xd0, 0, None, None, Ghost),
            ]
        );
    }

    /// Both ways of sorting a live set (a sort for few ids, a bitmap for many) give the same.
    #[test]
    fn sorting_ids_by_bitmap_or_sort_agree() {
        let mut dice = Dice(7);
        for (count, picked) in [(10_000usize, 50usize), (10_000, 9_000), (64, 64), (65, 1)] {
            let mut ids: Vec<AllocationId> = (0..count as AllocationId).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, dice.below(i as u64 + 1) as usize);
            }
            ids.truncate(picked);
            let mut expected = ids.clone();
            expected.sort_unstable();
            sort_distinct_ids(&mut ids, count);
            assert_eq!(ids, expected, "{picked} of {count}");
        }
    }
}
