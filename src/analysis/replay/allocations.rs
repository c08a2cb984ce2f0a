//! The replay's allocations as columns. A long trace makes about one allocation per three
//! events, so their layout sets most of the replay's memory: as a `Vec<Allocation>` each took 56
//! bytes (three `u64`s, two `Option<u32>`s, padding); here each takes 24, in the trace's own
//! narrow columns (an address offset from a base per block, a `u32` size with the rare larger
//! ones aside, a one-byte stream code, a `u16` stack while the ids fit), with the start, end,
//! version and origin: a 32-million-event trace keeps about 300 MB less.
//!
//! Readers get an [`Allocation`] by value ([`Allocations::at`]), or one field when that is all
//! they need ([`Allocations::size`], [`Allocations::addr`], ...), in the hot loops.

use super::{Allocation, AllocationId, Origin};
use crate::snapshot::{AddrColumn, Column, SizeColumn, StackColumn, StackId, StreamColumn};

/// `start` or `end` not set: alive from the start, or still alive at the end. An event index
/// never reaches it (a trace of `u32::MAX` events would not fit the replay's `u32` ids).
pub(crate) const NOT_SET: u32 = u32::MAX;

/// (The stored index writes and maps these columns as they are: `src/index/`.)
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Allocations {
    pub(crate) addr: AddrColumn,
    pub(crate) size: SizeColumn,
    pub(crate) stream: StreamColumn,
    pub(crate) stack: StackColumn,
    pub(crate) start: Column<u32>,
    pub(crate) end: Column<u32>,
    pub(crate) version: Column<u32>,
    pub(crate) origin: Column<u8>,
}

impl Allocations {
    pub fn len(&self) -> usize {
        self.addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addr.is_empty()
    }

    /// Allocation `id`, if there is one.
    pub fn get(&self, id: usize) -> Option<Allocation> {
        (id < self.len()).then(|| self.at(id))
    }

    /// Allocation `id`. Panics past the end, as indexing a slice does. (Always inlined, so a
    /// caller that reads two fields loads two columns, not eight.)
    #[inline(always)]
    pub fn at(&self, id: usize) -> Allocation {
        Allocation {
            addr: self.addr.get(id),
            size: self.size.get(id),
            stream: self.stream.get(id),
            stack: self.stack.get(id),
            start: self.start(id),
            end: self.end(id),
            version: self.version[id],
            origin: origin_of(self.origin[id]),
        }
    }

    /// Every allocation, in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Allocation> + '_ {
        (0..self.len()).map(|id| self.at(id))
    }

    #[inline]
    pub fn addr(&self, id: usize) -> u64 {
        self.addr.get(id)
    }

    #[inline]
    pub fn size(&self, id: usize) -> u64 {
        self.size.get(id)
    }

    #[inline]
    pub fn stack(&self, id: usize) -> StackId {
        self.stack.get(id)
    }

    #[inline]
    pub fn start(&self, id: usize) -> Option<u32> {
        Some(self.start[id]).filter(|&start| start != NOT_SET)
    }

    #[inline]
    pub fn end(&self, id: usize) -> Option<u32> {
        Some(self.end[id]).filter(|&end| end != NOT_SET)
    }

    #[inline]
    pub fn origin(&self, id: usize) -> Origin {
        origin_of(self.origin[id])
    }

    #[inline]
    pub fn version(&self, id: usize) -> u32 {
        self.version[id]
    }

    /// Adds `allocation` and returns its id.
    pub fn push(&mut self, allocation: Allocation) -> AllocationId {
        let id = self.len() as AllocationId;
        self.addr.push(allocation.addr);
        self.size.push(allocation.size);
        self.stream.push(allocation.stream);
        self.stack.push(allocation.stack);
        self.start.push(allocation.start.unwrap_or(NOT_SET));
        self.end.push(allocation.end.unwrap_or(NOT_SET));
        self.version.push(allocation.version);
        self.origin.push(allocation.origin as u8);
        id
    }

    /// Ends allocation `id` at event `event`.
    pub(super) fn set_end(&mut self, id: usize, event: u32) {
        self.end.make_owned()[id] = event;
    }

    pub fn shrink_to_fit(&mut self) {
        self.addr.shrink_to_fit();
        self.size.shrink_to_fit();
        self.stream.shrink_to_fit();
        self.stack.shrink_to_fit();
        self.start.shrink_to_fit();
        self.end.shrink_to_fit();
        self.version.shrink_to_fit();
        self.origin.shrink_to_fit();
    }

    /// Heap bytes held (capacities).
    pub fn heap_bytes(&self) -> u64 {
        self.addr.heap_bytes()
            + self.size.heap_bytes()
            + self.stream.heap_bytes()
            + self.stack.heap_bytes()
            + self.start.heap_bytes()
            + self.end.heap_bytes()
            + self.version.heap_bytes()
            + self.origin.heap_bytes()
    }
}

impl FromIterator<Allocation> for Allocations {
    fn from_iter<I: IntoIterator<Item = Allocation>>(allocations: I) -> Self {
        let mut columns = Self::default();
        for allocation in allocations {
            columns.push(allocation);
        }
        columns
    }
}

fn origin_of(code: u8) -> Origin {
    match code {
        0 => Origin::Traced,
        1 => Origin::FreedWithoutAlloc,
        _ => Origin::Ghost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips_including_the_unset_and_the_wide() {
        let made = vec![
            Allocation {
                addr: 0x7f00_0000_0000,
                size: 512,
                stream: 0,
                stack: 3,
                start: Some(0),
                end: None,
                version: 0,
                origin: Origin::Traced,
            },
            Allocation {
                addr: 0x7f00_0000_0200,
                size: 5 << 32,
                stream: 94_000_000_000,
                stack: 0,
                start: None,
                end: Some(u32::MAX - 1),
                version: 7,
                origin: Origin::FreedWithoutAlloc,
            },
            Allocation {
                addr: 1,
                size: u64::from(u32::MAX),
                stream: 0,
                stack: StackId::MAX,
                start: None,
                end: None,
                version: u32::MAX,
                origin: Origin::Ghost,
            },
        ];
        let mut columns: Allocations = made.iter().copied().collect();
        assert_eq!(columns.iter().collect::<Vec<_>>(), made);
        columns.set_end(0, 9);
        assert_eq!(columns.end(0), Some(9));
        assert_eq!((columns.size(1), columns.addr(2)), (5 << 32, 1));
    }
}
