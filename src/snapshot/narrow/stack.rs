//! The stack of each event: two bytes while the stack ids fit them.

use crate::snapshot::Column;

/// The stack of each event: a `u16` per event while every stack id fits one (a program's
/// allocation sites number in the thousands), the `u32` ids past that.
#[derive(Debug, Clone, PartialEq)]
pub enum StackColumn {
    Narrow(Column<u16>),
    Wide(Column<u32>),
}

impl Default for StackColumn {
    fn default() -> Self {
        Self::Narrow(Column::default())
    }
}

impl StackColumn {
    /// The stack of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u32 {
        match self {
            Self::Narrow(ids) => u32::from(ids[event]),
            Self::Wide(ids) => ids[event],
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Narrow(ids) => ids.len(),
            Self::Wide(ids) => ids.len(),
        }
    }

    #[inline]
    pub fn push(&mut self, stack: u32) {
        match self {
            Self::Narrow(ids) => match u16::try_from(stack) {
                Ok(narrow) => ids.push(narrow),
                Err(_) => {
                    let mut wide: Vec<u32> = Vec::with_capacity(ids.len() * 2);
                    wide.extend(ids.iter().map(|&id| u32::from(id)));
                    wide.push(stack);
                    *self = Self::Wide(wide.into());
                }
            },
            Self::Wide(ids) => ids.push(stack),
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        match self {
            Self::Narrow(ids) => {
                let _ = ids.try_reserve(extra);
            }
            Self::Wide(ids) => {
                let _ = ids.try_reserve(extra);
            }
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match self {
            Self::Narrow(ids) => ids.truncate(len),
            Self::Wide(ids) => ids.truncate(len),
        }
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        match self {
            Self::Narrow(ids) => Self::Narrow(ids.split_off(start)),
            Self::Wide(ids) => Self::Wide(ids.split_off(start)),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            Self::Narrow(ids) => ids.shrink_to_fit(),
            Self::Wide(ids) => ids.shrink_to_fit(),
        }
    }

    /// The ids as stored: `u16`s or `u32`s.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Narrow(ids) => ids.as_bytes(),
            Self::Wide(ids) => ids.as_bytes(),
        }
    }

    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Narrow(ids) => ids.heap_bytes(),
            Self::Wide(ids) => ids.heap_bytes(),
        }
    }
}

event_column!(StackColumn, u32);
