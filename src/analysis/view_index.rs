//! The indexes behind the views, so a timeline window costs its pixel width and its answer, not
//! the trace's length: built once per device (see [`crate::analysis::DeviceAnalysis`]).
//!
//! - the min and max of the allocated total over any event range ([`RangeExtrema`] over
//!   the replay's curve), for the timeline's columns and the `/roles` window's column peaks;
//! - the max of the reserved total over any range of its steps;
//! - [`BandIndex`]: the allocations that can be a timeline band, grouped so that a window only
//!   reads the groups whose sizes and lifetimes can pass its tests.
//!
//! The segment map needs no index of its own: the replay's reserved steps are one per segment
//! event, which is all it undoes.

use super::extrema::{BLOCK, RangeExtrema};
use super::replay::{Allocation, AllocationId, Allocations, Replay};

#[derive(Debug, Default)]
pub struct ViewIndex {
    /// Over the replay's curve ([`Replay::allocated_over`]), by event.
    pub(crate) allocated: RangeExtrema,
    /// Over the bytes of `Replay::reserved_steps`, by step.
    pub(crate) reserved: RangeExtrema,
    pub(crate) bands: BandIndex,
}

impl ViewIndex {
    /// The indexes of `replay` (what [`crate::analysis::DeviceAnalysis`] builds with it).
    pub fn new(replay: &Replay) -> Self {
        let events = replay.len();
        let steps = &replay.reserved_steps;
        // The curve's extremes by block, as the walk that built the curve found them (its
        // steps are these blocks); else the curve walked again.
        let found = replay
            .take_step_extremes()
            .filter(|found| found.min.len() == events.div_ceil(BLOCK));
        let walks = found.is_none();
        let allocated = || match found {
            Some(found) => RangeExtrema::from_blocks(events, found.min, found.max),
            None => RangeExtrema::new(events, replay.allocated_over(0, events)),
        };
        let bands = || BandIndex::new(&replay.allocations, events);
        // When the curve must be walked (a replay opened from a stored index), two passes over
        // millions of events and allocations: on two threads when allowed and the trace is long
        // (16 and 9 ms on the 3.2M-event file, one after the other).
        let (allocated, bands) = if walks
            && crate::snapshot::default_threads() >= 2
            && events >= super::replay::PASSES_ON_THREADS_FROM
        {
            std::thread::scope(|scope| {
                let bands = scope.spawn(bands);
                (allocated(), crate::threads::joined(bands.join()))
            })
        } else {
            (allocated(), bands())
        };
        Self {
            allocated,
            reserved: RangeExtrema::new(steps.len(), steps.iter().map(|step| step.1)),
            bands,
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> u64 {
        self.allocated.heap_bytes() + self.reserved.heap_bytes() + self.bands.heap_bytes()
    }
}

/// Size and lifetime classes: class `c > 0` holds the values in `2^(c-1) .. 2^c`, class 0 the
/// zeros; 65 classes cover every `u64`.
const CLASSES: usize = 65;

fn class_of(value: u64) -> usize {
    (u64::BITS - value.leading_zeros()) as usize
}

/// The largest value of class `class`.
fn class_max(class: usize) -> u64 {
    match class {
        0 => 0,
        c if c >= 64 => u64::MAX,
        c => (1u64 << c) - 1,
    }
}

/// The allocations that can be timeline bands, in buckets by (size class, lifetime class), each
/// bucket ordered by first event. A band must be tall, wide and large enough for its window;
/// a bucket whose largest size and longest lifetime cannot pass those tests is skipped whole,
/// and in the others only the allocations whose first event can reach the window are read.
///
/// Lifetimes are counted as the timeline counts them: from the alloc (event 0 when alive from
/// the start) to the free (the trace's length when never freed). A lifetime under two events
/// can never be two columns wide, so those are left out.
#[derive(Debug, Default)]
pub(crate) struct BandIndex {
    /// Events in the trace the lifetimes were counted against.
    events: usize,
    /// Bucket `b = size_class * CLASSES + lifetime_class` holds
    /// `ids[bucket_first[b]..bucket_first[b + 1]]`.
    bucket_first: Vec<u32>,
    ids: Vec<AllocationId>,
}

/// An allocation's first event and the event ending its lifetime, as the timeline counts them.
pub(crate) fn band_extent(start: Option<u32>, end: Option<u32>, events: usize) -> (usize, usize) {
    let first = start.map_or(0, |s| s as usize);
    let last = end.map_or(events, |e| e as usize);
    (first, last)
}

impl BandIndex {
    fn bucket_of(allocation: &Allocation, events: usize) -> Option<usize> {
        let (first, last) = band_extent(allocation.start, allocation.end, events);
        let lifetime = last.saturating_sub(first) as u64;
        (allocation.size > 0 && lifetime >= 2)
            .then(|| class_of(allocation.size) * CLASSES + class_of(lifetime))
    }

    fn new(allocations: &Allocations, events: usize) -> Self {
        // A counting sort by bucket, ids ascending within each. Each bucket is kept as two
        // parts, side by side: the allocations alive from the start (first event 0), then the
        // traced ones, which the replay numbers in the order of their allocs, so both parts are
        // in first-event order as placed; a part found out of order is sorted.
        const PARTS: usize = 2 * CLASSES * CLASSES;
        const NONE: u16 = u16::MAX;
        let mut part_of = Vec::with_capacity(allocations.len());
        let mut part_first = vec![0u32; PARTS + 1];
        let mut last_start = vec![0u32; PARTS];
        let mut unsorted = vec![false; PARTS];
        for allocation in allocations.iter() {
            let part = match Self::bucket_of(&allocation, events) {
                None => NONE,
                Some(bucket) => {
                    let part = 2 * bucket + usize::from(allocation.start.is_some());
                    if let Some(start) = allocation.start {
                        unsorted[part] |= start < last_start[part];
                        last_start[part] = start;
                    }
                    part_first[part + 1] += 1;
                    part as u16
                }
            };
            part_of.push(part);
        }
        for p in 0..PARTS {
            part_first[p + 1] += part_first[p];
        }
        let mut next = part_first.clone();
        let mut ids = vec![0 as AllocationId; part_first[PARTS] as usize];
        for (id, &part) in part_of.iter().enumerate() {
            if part != NONE {
                ids[next[part as usize] as usize] = id as AllocationId;
                next[part as usize] += 1;
            }
        }
        for p in (0..PARTS).filter(|&p| unsorted[p]) {
            let part = &mut ids[part_first[p] as usize..part_first[p + 1] as usize];
            // Stable: ids stay ascending among equal first events.
            part.sort_by_key(|&id| allocations.start(id as usize).unwrap_or(0));
        }
        // Bucket `b` is parts `2b` and `2b + 1`.
        let bucket_first = part_first.into_iter().step_by(2).collect();
        Self {
            events,
            bucket_first,
            ids,
        }
    }

    pub(crate) fn heap_bytes(&self) -> u64 {
        ((self.bucket_first.capacity() + self.ids.capacity()) * std::mem::size_of::<u32>()) as u64
    }

    /// Calls `visit` with every allocation of at least `min_size` bytes that overlaps events
    /// `window_start..=window_end` and whose bucket `may_pass(largest size, longest visible
    /// events)` lets through, plus some that do not overlap (the caller tests each one exactly).
    /// `events` is the trace's length; `None` when it is not the one the index was built for
    /// (then nothing can be told from the index).
    pub(crate) fn visit(
        &self,
        allocations: &Allocations,
        events: usize,
        min_size: u64,
        (window_start, window_end): (usize, usize),
        may_pass: impl Fn(u64, usize) -> bool,
        mut visit: impl FnMut(AllocationId),
    ) -> Option<()> {
        if events != self.events || self.bucket_first.is_empty() {
            return None;
        }
        let span = window_end + 1 - window_start;
        for size_class in class_of(min_size)..CLASSES {
            for lifetime_class in 2..CLASSES {
                let longest = usize::try_from(class_max(lifetime_class)).unwrap_or(usize::MAX);
                if !may_pass(class_max(size_class), longest.min(span)) {
                    continue;
                }
                let b = size_class * CLASSES + lifetime_class;
                let bucket =
                    &self.ids[self.bucket_first[b] as usize..self.bucket_first[b + 1] as usize];
                if bucket.is_empty() {
                    continue;
                }
                // A lifetime of at most `longest` events that reaches the window started at
                // most `longest` events before it.
                let first_of =
                    |id: &AllocationId| allocations.start(*id as usize).map_or(0, |s| s as usize);
                let from = bucket
                    .partition_point(|id| first_of(id) < window_start.saturating_sub(longest));
                let to = bucket.partition_point(|id| first_of(id) <= window_end);
                for &id in bucket.get(from..to).unwrap_or(&[]) {
                    visit(id);
                }
            }
        }
        Some(())
    }
}
