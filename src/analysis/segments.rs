//! The allocator's segments and blocks at the snapshot, with fragmentation statistics.

use crate::snapshot::{BlockState, Segment};
use serde::Serialize;

/// Byte counts of one segment (or a sum of segments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SegmentStats {
    /// `total_size`: what cudaMalloc reserved.
    pub reserved: u64,
    /// Requested bytes of `active_allocated` blocks (what tensors asked for).
    pub allocated: u64,
    /// Rounding waste of active blocks: `size - requested_size`.
    pub internal_free: u64,
    /// Bytes of `inactive` blocks: cached, reusable.
    pub external_free: u64,
    /// Requested bytes of blocks freed by tensors but waiting on another stream
    /// (`active_pending_free`; their rounding counts in `internal_free`, as an allocated
    /// block's does), so allocated + pending + rounding + free is what is reserved.
    pub pending_free: u64,
    /// The largest single `inactive` block: the biggest request this segment could serve.
    pub largest_free_block: u64,
    pub blocks: usize,
}

impl SegmentStats {
    pub fn of(segment: &Segment) -> Self {
        let mut stats = SegmentStats {
            reserved: segment.total_size,
            blocks: segment.blocks.len(),
            ..Self::default()
        };
        for block in &segment.blocks {
            match block.state {
                BlockState::ActiveAllocated => {
                    stats.allocated += block.requested_size;
                    stats.internal_free += block.size.saturating_sub(block.requested_size);
                }
                BlockState::ActivePendingFree => {
                    stats.pending_free += block.requested_size;
                    stats.internal_free += block.size.saturating_sub(block.requested_size);
                }
                BlockState::Inactive => {
                    stats.external_free += block.size;
                    stats.largest_free_block = stats.largest_free_block.max(block.size);
                }
                BlockState::Unknown(_) => {}
            }
        }
        stats
    }

    /// Sums segment statistics (the largest free block is the largest of any).
    pub fn add(&mut self, other: &SegmentStats) {
        self.reserved += other.reserved;
        self.allocated += other.allocated;
        self.internal_free += other.internal_free;
        self.external_free += other.external_free;
        self.pending_free += other.pending_free;
        self.largest_free_block = self.largest_free_block.max(other.largest_free_block);
        self.blocks += other.blocks;
    }

    /// Share of free bytes that no single request can use: `1 - largest / free` (0 when there is
    /// no free memory, or all of it is one block).
    pub fn fragmentation(&self) -> f64 {
        if self.external_free == 0 {
            0.0
        } else {
            1.0 - self.largest_free_block as f64 / self.external_free as f64
        }
    }
}

/// Totals over a set of segments.
pub fn totals<'a>(segments: impl IntoIterator<Item = &'a Segment>) -> SegmentStats {
    let mut total = SegmentStats::default();
    for segment in segments {
        total.add(&SegmentStats::of(segment));
    }
    total
}
