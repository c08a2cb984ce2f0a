//! Event times: a base per block of events, a 32-bit offset per event.

use crate::snapshot::Column;
use std::ops::Range;

/// Event times in microseconds: per block of 65,536 events a base, per event a `u32` offset
/// from it (a block would have to span over an hour to overflow, and then the column keeps
/// `i64`s instead). Frame-of-reference coding keeps random access O(1), which the views need.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeColumn {
    Blocked {
        bases: Vec<i64>,
        offsets: Column<u32>,
    },
    Wide(Column<i64>),
}

impl Default for TimeColumn {
    fn default() -> Self {
        Self::Blocked {
            bases: Vec::new(),
            offsets: Column::default(),
        }
    }
}

const TIME_BLOCK_LOG2: u32 = 16;
/// A blocked time column from a stored index: `None` unless there is a base for every block.
pub(crate) fn blocked_times(bases: Vec<i64>, offsets: Column<u32>) -> Option<TimeColumn> {
    (bases.len() == offsets.len().div_ceil(1 << TIME_BLOCK_LOG2))
        .then_some(TimeColumn::Blocked { bases, offsets })
}

/// An offset is stored shifted by this, so times a little before the block's first one (clocks
/// of different threads) fit too.
const TIME_BIAS: i64 = 1 << 31;

impl TimeColumn {
    /// The time of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> i64 {
        match self {
            Self::Blocked { bases, offsets } => {
                bases[event >> TIME_BLOCK_LOG2] + i64::from(offsets[event]) - TIME_BIAS
            }
            Self::Wide(times) => times[event],
        }
    }

    pub fn first(&self) -> Option<i64> {
        self.at(0)
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Blocked { offsets, .. } => offsets.len(),
            Self::Wide(times) => times.len(),
        }
    }

    #[inline]
    pub fn push(&mut self, time: i64) {
        if let Self::Blocked { bases, offsets } = self {
            let event = offsets.len();
            if event & ((1 << TIME_BLOCK_LOG2) - 1) == 0 {
                bases.push(time);
            }
            let base = bases[event >> TIME_BLOCK_LOG2];
            if let Some(offset) = time
                .checked_sub(base)
                .and_then(|d| d.checked_add(TIME_BIAS))
                .and_then(|d| u32::try_from(d).ok())
            {
                offsets.push(offset);
                return;
            }
            let mut wide: Vec<i64> = Vec::with_capacity(offsets.len() * 2);
            wide.extend(
                (0..event).map(|e| bases[e >> TIME_BLOCK_LOG2] + i64::from(offsets[e]) - TIME_BIAS),
            );
            *self = Self::Wide(wide.into());
        }
        if let Self::Wide(times) = self {
            times.push(time);
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        match self {
            Self::Blocked { offsets, .. } => {
                let _ = offsets.try_reserve(extra);
            }
            Self::Wide(times) => {
                let _ = times.try_reserve(extra);
            }
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match self {
            Self::Blocked { bases, offsets } => {
                offsets.truncate(len);
                bases.truncate(len.div_ceil(1 << TIME_BLOCK_LOG2));
            }
            Self::Wide(times) => times.truncate(len),
        }
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        let tail = (start..self.len()).map(|event| self.get(event)).collect();
        self.truncate(start);
        tail
    }

    /// The first event of `events` whose time fails `before` (as `slice::partition_point` over
    /// those events' times, which are in order), counted from `events.start`.
    pub fn partition_point(&self, events: Range<usize>, before: impl Fn(i64) -> bool) -> usize {
        let (mut low, mut high) = (events.start, events.end.min(self.len()).max(events.start));
        while low < high {
            let middle = low + (high - low) / 2;
            if before(self.get(middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low - events.start
    }

    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Blocked { bases, offsets } => {
                (bases.capacity() * 8) as u64 + offsets.heap_bytes()
            }
            Self::Wide(times) => times.heap_bytes(),
        }
    }
}

event_column!(TimeColumn, i64);
