//! Text ids per event that are nearly always none (`compile_context`, `user_metadata`).

use crate::snapshot::Column;

/// A text id per event (into `Trace::strings`, 0: none), stored only up to the last event that
/// has one: empty, and free, in the snapshots torch writes without them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SparseIds(Column<u32>);

impl SparseIds {
    /// The id of event `event` (0: none).
    #[inline]
    pub fn get(&self, event: usize) -> u32 {
        self.0.get(event).copied().unwrap_or(0)
    }

    /// Gives event `event` the id `id` (0 leaves it none).
    #[inline]
    pub fn set(&mut self, event: usize, id: u32) {
        if id == 0 && event >= self.0.len() {
            return;
        }
        if event >= self.0.len() {
            self.0.resize(event, 0);
            self.0.push(id);
        } else {
            self.0[event] = id;
        }
    }

    /// Whether no event has an id.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&id| id == 0)
    }

    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// Moves events `start..` into ids of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        Self(self.0.split_off(start.min(self.0.len())))
    }

    /// Heap bytes held (by capacity).
    pub fn heap_bytes(&self) -> u64 {
        self.0.heap_bytes()
    }

    /// The ids as stored: up to the last event that has one.
    pub(crate) fn column(&self) -> &Column<u32> {
        &self.0
    }

    /// Ids as a stored index keeps them (see [`SparseIds::column`]).
    pub(crate) fn from_column(ids: Column<u32>) -> Self {
        Self(ids)
    }
}
