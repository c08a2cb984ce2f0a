//! Block sizes per event in 4 bytes, the rare larger ones kept exactly beside.

use super::exceptions::Exceptions;
use crate::snapshot::Column;

/// Requested or segment bytes per event: 4 bytes each; the rare size of 4 GiB or more is an
/// exception, kept in event order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SizeColumn {
    small: Column<u32>,
    /// Every size that does not fit a `u32` (marked `LARGE` in `small`).
    large: Exceptions,
}

impl SizeColumn {
    const LARGE: u32 = u32::MAX;

    /// The size at event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u64 {
        match self.small[event] {
            Self::LARGE => self.large.get(event).unwrap_or(u64::from(Self::LARGE)),
            small => u64::from(small),
        }
    }

    pub fn len(&self) -> usize {
        self.small.len()
    }

    #[inline]
    pub fn push(&mut self, bytes: u64) {
        match u32::try_from(bytes) {
            Ok(small) if small != Self::LARGE => self.small.push(small),
            _ => {
                self.large.push(self.small.len(), bytes);
                self.small.push(Self::LARGE);
            }
        }
    }

    /// Sets the size at event `event` (tests build odd traces this way).
    pub fn set(&mut self, event: usize, bytes: u64) {
        match u32::try_from(bytes) {
            Ok(small) if small != Self::LARGE => {
                self.large.set(event, None);
                self.small[event] = small;
            }
            _ => {
                self.large.set(event, Some(bytes));
                self.small[event] = Self::LARGE;
            }
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        let _ = self.small.try_reserve(extra);
    }

    pub fn truncate(&mut self, len: usize) {
        self.small.truncate(len);
        self.large.truncate(len);
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        Self {
            small: self.small.split_off(start),
            large: self.large.split_off(start),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        self.small.shrink_to_fit();
        self.large.shrink_to_fit();
    }

    pub fn heap_bytes(&self) -> u64 {
        self.small.heap_bytes() + self.large.heap_bytes()
    }

    /// The column as a stored index keeps it: 4 bytes per event, and the large sizes apart.
    pub(crate) fn parts(&self) -> (&Column<u32>, &[(usize, u64)]) {
        (&self.small, &self.large.0)
    }

    /// A column from [`SizeColumn::parts`]; `None` unless the large sizes are in event order
    /// and within the column.
    pub(crate) fn from_parts(small: Column<u32>, large: Vec<(usize, u64)>) -> Option<Self> {
        let large = Exceptions(large);
        large.fits(small.len()).then_some(Self { small, large })
    }
}

event_column!(SizeColumn, u64);
