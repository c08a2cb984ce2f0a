//! Event times: a base per block of events, a narrow offset per event.

use super::exceptions::Exceptions;
use crate::snapshot::Column;
use std::ops::Range;

/// Event times in microseconds, by frame-of-reference coding, which keeps random access O(1)
/// (the views need it):
///
/// - `Narrow`: per block of 64 events a base, per event a `u16` offset from it. Events of a
///   busy trace come microseconds apart, so 64 of them rarely span the 64 ms an offset
///   reaches (150 of the 3.2M events of the corpus's largest trace do not fit); a time that
///   does not is an exception, kept exactly. Two bytes an event and an eighth instead of four:
///   60 MB less for a 32M-event trace.
/// - `Blocked`: per block of 65,536 events a base, per event a `u32` offset, for a trace whose
///   events are too sparse for `Narrow` (more than one time in 16 an exception, past the
///   first 1,024).
/// - `Wide`: the `i64`s themselves, for a block of `Blocked` that spans over an hour.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeColumn {
    Narrow {
        bases: Column<i64>,
        offsets: Column<u16>,
        exceptions: Exceptions,
    },
    Blocked {
        bases: Vec<i64>,
        offsets: Column<u32>,
    },
    Wide(Column<i64>),
}

impl Default for TimeColumn {
    fn default() -> Self {
        Self::Narrow {
            bases: Column::default(),
            offsets: Column::default(),
            exceptions: Exceptions::default(),
        }
    }
}

const NARROW_BLOCK_LOG2: u32 = 6;
/// A narrow offset is stored shifted by this, so times a little before the block's first one
/// (clocks of different threads) fit too: from 1 ms before it to 64 ms after.
const NARROW_BIAS: i64 = 1 << 10;
/// Marks a narrow offset whose time is an exception.
const NARROW_EXCEPTION: u16 = u16::MAX;
/// A narrow column turns `Blocked` once more than one event in this many is an exception
/// (an exception takes 16 bytes, so `Narrow` would no longer be the smaller).
const EXCEPTIONS_AT_MOST: usize = 16;
/// Exceptions a narrow column takes before [`EXCEPTIONS_AT_MOST`] applies, so a trace that
/// starts sparse (a warm-up) is not widened by its first events.
const EXCEPTIONS_ALWAYS_ALLOWED: usize = 1024;

const TIME_BLOCK_LOG2: u32 = 16;
/// A blocked time column from a stored index: `None` unless there is a base for every block.
pub(crate) fn blocked_times(bases: Vec<i64>, offsets: Column<u32>) -> Option<TimeColumn> {
    (bases.len() == offsets.len().div_ceil(1 << TIME_BLOCK_LOG2))
        .then_some(TimeColumn::Blocked { bases, offsets })
}

/// A narrow time column from a stored index's parts: `None` unless there is a base for every
/// block and the exceptions are in order, inside the column and marked.
pub(crate) fn narrow_times(
    bases: Column<i64>,
    offsets: Column<u16>,
    exceptions: Vec<(usize, i64)>,
) -> Option<TimeColumn> {
    let exceptions = Exceptions(
        exceptions
            .into_iter()
            .map(|(event, time)| (event, time as u64))
            .collect(),
    );
    let blocks = bases.len() == offsets.len().div_ceil(1 << NARROW_BLOCK_LOG2);
    let marked = exceptions
        .events()
        .all(|e| offsets.get(e) == Some(&NARROW_EXCEPTION));
    (blocks && exceptions.fits(offsets.len()) && marked).then_some(TimeColumn::Narrow {
        bases,
        offsets,
        exceptions,
    })
}

/// An offset is stored shifted by this, so times a little before the block's first one (clocks
/// of different threads) fit too.
const TIME_BIAS: i64 = 1 << 31;

impl TimeColumn {
    /// The time of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> i64 {
        match self {
            Self::Narrow {
                bases,
                offsets,
                exceptions,
            } => match offsets[event] {
                NARROW_EXCEPTION => exceptions.get(event).map_or(0, |time| time as i64),
                offset => bases[event >> NARROW_BLOCK_LOG2] + i64::from(offset) - NARROW_BIAS,
            },
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
            Self::Narrow { offsets, .. } => offsets.len(),
            Self::Blocked { offsets, .. } => offsets.len(),
            Self::Wide(times) => times.len(),
        }
    }

    #[inline]
    pub fn push(&mut self, time: i64) {
        if let Self::Narrow {
            bases,
            offsets,
            exceptions,
        } = self
        {
            let event = offsets.len();
            if event & ((1 << NARROW_BLOCK_LOG2) - 1) == 0 {
                bases.push(time);
            }
            let base = bases[event >> NARROW_BLOCK_LOG2];
            let offset = time
                .checked_sub(base)
                .and_then(|d| d.checked_add(NARROW_BIAS))
                .and_then(|d| u16::try_from(d).ok())
                .filter(|&offset| offset != NARROW_EXCEPTION);
            match offset {
                Some(offset) => offsets.push(offset),
                None if exceptions.0.len()
                    < EXCEPTIONS_ALWAYS_ALLOWED + event / EXCEPTIONS_AT_MOST =>
                {
                    exceptions.push(event, time as u64);
                    offsets.push(NARROW_EXCEPTION);
                }
                None => {
                    self.widen_to_blocked();
                    self.push(time);
                }
            }
            return;
        }
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

    /// The exceptions of a `Narrow` column, `(event, time)`, as the stored index holds them.
    pub(crate) fn times_aside(&self) -> Option<Vec<(usize, i64)>> {
        match self {
            Self::Narrow { exceptions, .. } => Some(
                exceptions
                    .0
                    .iter()
                    .map(|&(event, time)| (event, time as i64))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// A narrow column as `Blocked` (too many of its times are exceptions).
    #[cold]
    fn widen_to_blocked(&mut self) {
        let mut blocked = Self::Blocked {
            bases: Vec::new(),
            offsets: Column::default(),
        };
        blocked.reserve(self.len() * 2);
        for event in 0..self.len() {
            blocked.push(self.get(event));
        }
        *self = blocked;
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        match self {
            Self::Narrow { offsets, .. } => {
                let _ = offsets.try_reserve(extra);
            }
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
            Self::Narrow {
                bases,
                offsets,
                exceptions,
            } => {
                offsets.truncate(len);
                bases.truncate(len.div_ceil(1 << NARROW_BLOCK_LOG2));
                exceptions.truncate(len);
            }
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
            Self::Narrow {
                bases,
                offsets,
                exceptions,
            } => bases.heap_bytes() + offsets.heap_bytes() + exceptions.heap_bytes(),
            Self::Blocked { bases, offsets } => {
                (bases.capacity() * 8) as u64 + offsets.heap_bytes()
            }
            Self::Wide(times) => times.heap_bytes(),
        }
    }
}

event_column!(TimeColumn, i64);
