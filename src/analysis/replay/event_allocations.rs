//! Per event, the allocation it opens or closes, in about 1.5 bytes an event where a list of
//! ids costs 4 (a 32-million-event trace keeps 70 MB less).
//!
//! The replay gives allocation ids in the order of the events that open them (an alloc, or the
//! free of an allocation from before the trace), so an opening event's id is the count of
//! opening events before it: a bit per event says which events open, its rank is the id. Only
//! the events that close one the trace opened (its free) keep an id, in event order, behind a
//! second bit per event. Every other event opens and closes nothing.

use super::AllocationId;
use super::pass::NO_ALLOCATION;
use crate::analysis::ranked_bits::{BitsBuilder, RankedBits};
use crate::snapshot::Column;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct EventAllocations {
    /// The events that open an allocation (their rank is its id).
    pub(crate) opens: RankedBits,
    /// The events that close an allocation the trace opened.
    pub(crate) closes: RankedBits,
    /// The allocation each closing event closes, in event order.
    pub(crate) closed: Column<AllocationId>,
}

impl EventAllocations {
    /// A table from a stored index's parts: `None` unless both bit vectors cover the same
    /// events, no event both opens and closes, and every closing event has its id.
    pub(crate) fn from_parts(
        opens: RankedBits,
        closes: RankedBits,
        closed: Column<AllocationId>,
    ) -> Option<Self> {
        let disjoint = opens
            .words()
            .iter()
            .zip(closes.words().iter())
            .all(|(open, close)| open & close == 0);
        (opens.len() == closes.len() && disjoint && closes.ones() == closed.len()).then_some(Self {
            opens,
            closes,
            closed,
        })
    }

    /// Events.
    pub fn len(&self) -> usize {
        self.opens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocations the events open (ids `0..opened()` are theirs, in event order).
    pub(crate) fn opened(&self) -> usize {
        self.opens.ones()
    }

    /// The allocation event `event` opens or closes, or `NO_ALLOCATION`.
    pub fn get(&self, event: usize) -> AllocationId {
        if self.opens.get(event) {
            self.opens.rank(event) as AllocationId
        } else if self.closes.get(event) {
            self.closed[self.closes.rank(event)]
        } else {
            NO_ALLOCATION
        }
    }

    /// The allocations of events `from..`, one per event (`NO_ALLOCATION` for none), in order.
    pub fn from_event(&self, from: usize) -> Ids<'_> {
        Ids {
            table: self,
            event: from,
            opened: self.opens.rank(from),
            closed: self.closes.rank(from),
        }
    }

    pub(crate) fn heap_bytes(&self) -> u64 {
        self.opens.heap_bytes() + self.closes.heap_bytes() + self.closed.heap_bytes()
    }
}

/// See [`EventAllocations::from_event`].
pub struct Ids<'a> {
    table: &'a EventAllocations,
    event: usize,
    /// Opening and closing events before `event`.
    opened: usize,
    closed: usize,
}

impl Iterator for Ids<'_> {
    type Item = AllocationId;

    #[inline]
    fn next(&mut self) -> Option<AllocationId> {
        let event = self.event;
        if event >= self.table.len() {
            return None;
        }
        self.event += 1;
        if self.table.opens.get(event) {
            self.opened += 1;
            Some((self.opened - 1) as AllocationId)
        } else if self.table.closes.get(event) {
            self.closed += 1;
            Some(self.table.closed[self.closed - 1])
        } else {
            Some(NO_ALLOCATION)
        }
    }
}

/// The table as the event pass fills it, an event at a time.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct EventAllocationsBuilder {
    opens: BitsBuilder,
    closes: BitsBuilder,
    closed: Vec<AllocationId>,
}

impl EventAllocationsBuilder {
    pub(crate) fn len(&self) -> usize {
        self.opens.len()
    }

    /// The next event opens the next allocation.
    #[inline]
    pub(crate) fn open(&mut self) {
        self.opens.push(true);
        self.closes.push(false);
    }

    /// The next event closes allocation `id`, which an earlier event opened.
    #[inline]
    pub(crate) fn close(&mut self, id: AllocationId) {
        self.opens.push(false);
        self.closes.push(true);
        self.closed.push(id);
    }

    /// The next event opens and closes nothing.
    #[inline]
    pub(crate) fn neither(&mut self) {
        self.opens.push(false);
        self.closes.push(false);
    }

    pub(crate) fn built(mut self) -> EventAllocations {
        self.closed.shrink_to_fit();
        EventAllocations {
            opens: self.opens.ranked(),
            closes: self.closes.ranked(),
            closed: self.closed.into(),
        }
    }
}
