//! The event pass: one walk over the trace that pairs each free with the allocation it ends,
//! per address. It is the replay's hot loop, and a [`TraceFollower`] so the loader can run it
//! batch by batch while the trace is still read.

use super::event_allocations::EventAllocationsBuilder;
use super::{Allocation, AllocationId, Allocations, Origin};
use crate::snapshot::{ActionCode, FollowedEvent, FollowerOutcome, TraceFollower};

/// Replay state of one address.
#[derive(Debug, Clone, Copy)]
pub(super) struct Address {
    pub(super) open: AllocationId,
    pub(super) frees: u32,
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
pub(super) struct Addresses {
    last: hashbrown::HashTable<AllocationId>,
}

impl Addresses {
    fn hash(addr: u64) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(addr)
    }

    /// The last allocation made at `addr`, if any.
    fn last_at(&self, allocations: &Allocations, addr: u64) -> Option<AllocationId> {
        self.last
            .find(Self::hash(addr), |&id| {
                allocations.addr(id as usize) == addr
            })
            .copied()
    }

    /// The state of `addr`.
    pub(super) fn state(&self, allocations: &Allocations, addr: u64) -> Address {
        match self.last_at(allocations, addr) {
            None => Address::default(),
            Some(id) => state_after(allocations, id),
        }
    }

    /// The state of `addr` before allocation `id` (the next one, not yet in `allocations`)
    /// opens there, and `id` recorded as its last: one lookup where [`Addresses::state`] and
    /// [`Addresses::set_last`] take two (an allocation is a third of a trace's events).
    fn open(&mut self, allocations: &Allocations, addr: u64, id: AllocationId) -> Address {
        let entry = self.last.entry(
            Self::hash(addr),
            |&other| allocations.addr(other as usize) == addr,
            |&other| Self::hash(allocations.addr(other as usize)),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(mut last) => {
                let address = state_after(allocations, *last.get());
                *last.get_mut() = id;
                address
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(id);
                Address::default()
            }
        }
    }

    /// Records `id`, already in `allocations`, as the last allocation at its address.
    fn set_last(&mut self, allocations: &Allocations, id: AllocationId) {
        let addr = allocations.addr(id as usize);
        let hash = Self::hash(addr);
        match self
            .last
            .find_mut(hash, |&other| allocations.addr(other as usize) == addr)
        {
            Some(slot) => *slot = id,
            None => {
                self.last.insert_unique(hash, id, |&other| {
                    Self::hash(allocations.addr(other as usize))
                });
            }
        }
    }
}

/// The state of an address whose last allocation is `id`.
fn state_after(allocations: &Allocations, id: AllocationId) -> Address {
    let version = allocations.version(id as usize);
    match allocations.end(id as usize) {
        None => Address {
            open: id,
            frees: version,
        },
        Some(_) => Address {
            open: NO_ALLOCATION,
            frees: version + 1,
        },
    }
}

/// No allocation opens or closes at this event.
pub(super) const NO_ALLOCATION: AllocationId = AllocationId::MAX;

/// The event pass of a replay: which allocation each event opens or closes (which is the memory
/// curve too), and the lifetimes of the allocations the trace opens. It depends only on the trace, so it
/// can run while the trace is still being read (it is a [`TraceFollower`], which the loader runs
/// on a thread of its own); the rest of [`super::Replay::new`] needs the segments.
#[derive(Debug, Default)]
pub(crate) struct EventPass {
    pub(super) allocations: Allocations,
    /// Per event, the allocation it opens or closes (if any).
    pub(super) event_allocations: EventAllocationsBuilder,
    /// Per address: the allocation open there (if any) and how many frees it has seen.
    pub(super) addresses: Addresses,
    pub(super) freed_without_alloc: Vec<AllocationId>,
    /// Per address, the lone `free_requested` (one a `free_completed` does not follow at once:
    /// the block waits on another stream, after `record_stream`) not completed yet.
    pub(super) awaiting_completion: rustc_hash::FxHashMap<u64, u32>,
    /// `(request event, allocation)` of every lone `free_requested` completed so far, in the
    /// order of the completions.
    pub(super) pending_requests: Vec<(u32, AllocationId)>,
    /// A `free_requested` taken last, waiting for the next event: a `free_completed` of the
    /// same address right after it makes the two one free.
    held: Option<FollowedEvent>,
}

impl TraceFollower for EventPass {
    fn events(&self) -> usize {
        self.event_allocations.len()
    }

    /// Replays the next events. A trailing `free_requested` waits for the next event (it may be
    /// half of a merged free) or for [`TraceFollower::finish`].
    fn take(&mut self, events: impl Iterator<Item = FollowedEvent>) {
        for event in events {
            if let Some(request) = self.held.take() {
                let merged =
                    event.action == ActionCode::FREE_COMPLETED && event.addr == request.addr;
                self.free_requested(request, merged);
                if merged {
                    // The completion is part of this free; it changes nothing itself.
                    self.event_allocations.neither();
                    continue;
                }
            }
            self.event(event);
        }
    }

    fn finish(&mut self) {
        if let Some(request) = self.held.take() {
            self.free_requested(request, false);
        }
    }
}

impl EventPass {
    /// Replays one event that no held `free_requested` merges with.
    fn event(&mut self, event: FollowedEvent) {
        match event.action {
            ActionCode::ALLOC => {
                let id = self.allocations.len() as AllocationId;
                let address = self.addresses.open(&self.allocations, event.addr, id);
                self.allocations.push(Allocation {
                    addr: event.addr,
                    size: event.size,
                    stream: event.stream,
                    stack: event.stack,
                    start: Some(self.events() as u32),
                    end: None,
                    version: address.frees,
                    origin: Origin::Traced,
                });
                self.event_allocations.open();
            }
            ActionCode::FREE_REQUESTED => self.held = Some(event),
            ActionCode::FREE_COMPLETED => self.free(event, false),
            _ => self.event_allocations.neither(),
        }
    }

    /// A `free_requested`, with the `free_completed` of the same address right after it
    /// (`merged`: one free) or not (a lone request: the block waits on another stream).
    fn free_requested(&mut self, request: FollowedEvent, merged: bool) {
        if merged {
            self.free(request, true);
        } else {
            // The first request counts: the block is pending from then on.
            let event = self.events() as u32;
            self.awaiting_completion
                .entry(request.addr)
                .or_insert(event);
            self.event_allocations.neither();
        }
    }

    /// Frees the allocation open at the event's address (one freed without an allocation in
    /// the trace if none is), at the next event.
    fn free(&mut self, event: FollowedEvent, merged: bool) {
        let at = self.events() as u32;
        let address = self.addresses.state(&self.allocations, event.addr);
        let id = match address.open {
            // Still the last allocation at `addr`, now freed.
            id if id != NO_ALLOCATION => {
                self.allocations.set_end(id as usize, at);
                self.event_allocations.close(id);
                id
            }
            _ => {
                let id = self.allocations.len() as AllocationId;
                self.allocations.push(Allocation {
                    addr: event.addr,
                    size: event.size,
                    stream: event.stream,
                    stack: event.stack,
                    start: None,
                    end: Some(at),
                    version: address.frees,
                    origin: Origin::FreedWithoutAlloc,
                });
                self.addresses.set_last(&self.allocations, id);
                self.freed_without_alloc.push(id);
                // It opens (an id in event order) as it closes.
                self.event_allocations.open();
                id
            }
        };
        if !merged && let Some(request) = self.awaiting_completion.remove(&event.addr) {
            self.pending_requests.push((request, id));
        }
    }
}

/// The replay's event pass as the loader ran it while reading the trace (see
/// [`crate::analysis::load_path`]), handed to [`crate::analysis::Analysis::seeded`] so it is
/// not run twice. Empty when the loader did not run it (a short trace, or events of several
/// devices).
#[derive(Debug, Default)]
pub struct ReplaySeed(pub(super) Option<FollowerOutcome<EventPass>>);

impl ReplaySeed {
    pub(crate) fn new(followed: Option<FollowerOutcome<EventPass>>) -> Self {
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
