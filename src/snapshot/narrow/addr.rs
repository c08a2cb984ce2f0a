//! Event addresses: a base per block of events, a 32-bit offset per event.

use super::exceptions::Exceptions;
use crate::snapshot::Column;

/// Event addresses: per block of 65,536 events a base (the block's first address), per event a
/// signed 32-bit offset from it in 512-byte units, the caching allocator's alignment (so
/// ±1 TiB around the base). An address that does not fit (unaligned, or farther away) is an
/// exception, kept exactly, as [`SizeColumn`](super::SizeColumn) keeps large sizes. Random
/// access stays O(1).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AddrColumn {
    bases: Vec<u64>,
    offsets: Column<i32>,
    /// Every address that fits no offset (marked `EXCEPTION` in `offsets`).
    exceptions: Exceptions,
}

const ADDR_BLOCK_LOG2: u32 = 16;
const ADDR_UNIT_LOG2: u32 = 9;

impl AddrColumn {
    const EXCEPTION: i32 = i32::MIN;

    /// The address of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u64 {
        match self.offsets[event] {
            Self::EXCEPTION => self.exceptions.get(event).unwrap_or(0),
            offset => self.bases[event >> ADDR_BLOCK_LOG2]
                .wrapping_add_signed(i64::from(offset) << ADDR_UNIT_LOG2),
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    #[inline]
    pub fn push(&mut self, addr: u64) {
        let event = self.offsets.len();
        if event & ((1 << ADDR_BLOCK_LOG2) - 1) == 0 {
            self.bases.push(addr);
        }
        let from_base = addr.wrapping_sub(self.bases[event >> ADDR_BLOCK_LOG2]) as i64;
        let offset = (from_base & ((1 << ADDR_UNIT_LOG2) - 1) == 0)
            .then(|| i32::try_from(from_base >> ADDR_UNIT_LOG2).ok())
            .flatten()
            .filter(|&offset| offset != Self::EXCEPTION);
        match offset {
            Some(offset) => self.offsets.push(offset),
            None => {
                self.exceptions.push(event, addr);
                self.offsets.push(Self::EXCEPTION);
            }
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        let _ = self.offsets.try_reserve(extra);
    }

    pub fn truncate(&mut self, len: usize) {
        self.offsets.truncate(len);
        self.bases.truncate(len.div_ceil(1 << ADDR_BLOCK_LOG2));
        self.exceptions.truncate(len);
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        let tail = (start..self.len()).map(|event| self.get(event)).collect();
        self.truncate(start);
        tail
    }

    pub fn shrink_to_fit(&mut self) {
        self.bases.shrink_to_fit();
        self.offsets.shrink_to_fit();
        self.exceptions.shrink_to_fit();
    }

    pub fn heap_bytes(&self) -> u64 {
        (self.bases.capacity() * 8) as u64
            + self.exceptions.heap_bytes()
            + self.offsets.heap_bytes()
    }

    /// The bases, the offsets and the exceptions, as the stored index holds them.
    pub(crate) fn parts(&self) -> (&[u64], &Column<i32>, &[(usize, u64)]) {
        (&self.bases, &self.offsets, &self.exceptions.0)
    }

    /// A column from a stored index's parts: `None` unless there is a base for every block
    /// and the exceptions are in order, inside the column and marked.
    pub(crate) fn from_parts(
        bases: Vec<u64>,
        offsets: Column<i32>,
        exceptions: Vec<(usize, u64)>,
    ) -> Option<Self> {
        let exceptions = Exceptions(exceptions);
        let blocks = bases.len() == offsets.len().div_ceil(1 << ADDR_BLOCK_LOG2);
        let marked = exceptions
            .events()
            .all(|e| offsets.get(e) == Some(&Self::EXCEPTION));
        (blocks && exceptions.fits(offsets.len()) && marked).then_some(Self {
            bases,
            offsets,
            exceptions,
        })
    }
}

event_column!(AddrColumn, u64);
