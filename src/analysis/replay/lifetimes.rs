//! The lifetime index: the interval tree over event indices that finds the allocations alive
//! at any event without copying live sets.

use super::{AllocationId, Allocations};
use crate::snapshot::Column;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// log2 of the events per leaf of [`LifetimeIndex`]. A query scans the lifetimes that start and
/// end within its leaf (at most this many, one per event), so this bounds its extra work; the
/// index holds two buckets per leaf, so a leaf much smaller would cost memory for nothing.
pub(super) const LEAF_EVENTS_LOG2: u32 = 6;

/// The lifetimes of the allocations the trace opened, as a centred interval tree over event
/// indices, so the ones alive at any event are found in O(log events + leaf + answer) while the
/// index holds two ids per allocation. (Copying the live set at regular checkpoints instead
/// costs memory quadratic in a leak: every never-freed allocation is in every later copy.)
///
/// Leaf `f` holds the events `f << LEAF_EVENTS_LOG2 ..`; a node of level `L >= 1` covers `2^L`
/// leaves and is split in halves at its middle event. Each lifetime is stored once, in a bucket
/// of the lowest node whose middle it spans, or of its leaf if it starts and ends there. The
/// nodes a lifetime spanning an event can be in are the ones over that event's leaf, one per
/// level; a lifetime in such a node spans its middle, so before the middle the ones alive are
/// those started by then (a prefix of the bucket by start), from the middle on, the ones not
/// yet freed (a suffix of the bucket by end).
#[derive(Debug, Default)]
pub(crate) struct LifetimeIndex {
    /// The first bucket of each level; level `L` has a bucket per node, nodes in event order.
    pub(crate) level_first: Column<u32>,
    /// Bucket `k`'s allocations are `by_start[bucket_first[k]..bucket_first[k + 1]]`, by start,
    /// and the same ones in `by_end`, by end (the never freed last).
    pub(crate) bucket_first: Column<u32>,
    pub(crate) by_start: Column<AllocationId>,
    pub(crate) by_end: Column<AllocationId>,
}

impl LifetimeIndex {
    /// Indexes the allocations with a `start` (the others are alive from the start and kept
    /// apart) over a trace of `events` events; `closed` lists the allocations the trace opened
    /// and freed, in the order of their frees. On up to `threads` threads, each sorting a range
    /// of the allocations and of `closed` (the ranges' parts laid out in their order, so the
    /// index is the same on any number).
    pub(super) fn new(
        allocations: &Allocations,
        events: usize,
        closed: &[AllocationId],
        threads: usize,
    ) -> Self {
        if events == 0 {
            return Self::default();
        }
        let leaves = ((events - 1) >> LEAF_EVENTS_LOG2) + 1;
        let top_level = usize::BITS - (leaves - 1).leading_zeros();
        let mut level_first = Vec::with_capacity(top_level as usize + 1);
        let mut buckets = 0usize;
        for level in 0..=top_level {
            level_first.push(buckets as u32);
            buckets += ((leaves - 1) >> level) + 1;
        }
        // Each allocation's node, from one read of the allocations' starts and ends (the
        // largest vector here), with a flag for the passes below. (Reading whole allocations,
        // eight columns, took half again as long as the rest of the index on a long trace.)
        let mut placed = vec![0u32; allocations.len()];
        crate::threads::fill_on_threads(threads, &mut placed, |id| {
            match allocations.start(id) {
                None => NOT_INDEXED,
                Some(first) => {
                    let end = allocations.end(id);
                    // Never freed: alive up to the last event, the last one a query asks about.
                    let last = end.map_or(events - 1, |end| end as usize - 1);
                    let (level, node) = node_of(first as usize, last);
                    Placed::new(level, node, end.is_none()).0
                }
            }
        });
        let placed: &[u32] = &placed;
        let indexed = |&flagged: &u32| (flagged != NOT_INDEXED).then_some(Placed(flagged));

        // A counting sort by bucket, on `threads` ranges of the allocations (in id order, which
        // is start order) and of `closed` (in end order), each range on a thread of its own. A
        // range of lifetimes in start or in end order falls, at each level, in a run of
        // neighbouring nodes (a node holds lifetimes that start and end within it), so a range
        // counts into a vector per level as long as the run it spans, and no thread reads
        // another's range. (Each thread reading every allocation for a run of buckets made this
        // the longest step of the replay on 16 cores: sixteen reads of the whole.)
        let ranges = threads.max(1);
        let part = |len: usize, range: usize| {
            let per_range = len.div_ceil(ranges).max(1);
            (range * per_range).min(len)..((range + 1) * per_range).min(len)
        };
        let ids_of = |range: usize| part(placed.len(), range);
        let frees_of = |range: usize| part(closed.len(), range);
        let mut tallies = crate::threads::map_on_threads(threads, ranges, |range| {
            let mut tally = RangeTally::default();
            for at in placed[ids_of(range)].iter().filter_map(indexed) {
                tally.starts.count(at);
                if at.never_freed() {
                    tally.never_freed.count(at);
                }
            }
            let placed_of_id = |&id: &AllocationId| placed.get(id as usize).and_then(indexed);
            for at in closed[frees_of(range)].iter().filter_map(placed_of_id) {
                if !at.never_freed() {
                    tally.frees.count(at);
                }
            }
            tally
        });

        // Where each bucket begins, then where each range's part of it begins: the ranges in
        // order, so a bucket lists its lifetimes by start and by end as one walk would. The
        // never freed fill the back of `by_end`, from its last place down.
        let mut bucket_first = vec![0u32; buckets + 1];
        for tally in &tallies {
            tally.starts.add_to(&level_first, &mut bucket_first[1..]);
        }
        for b in 0..buckets {
            bucket_first[b + 1] += bucket_first[b];
        }
        let indexed_count = bucket_first[buckets] as usize;
        let mut next = bucket_first[..buckets].to_vec();
        for tally in &mut tallies {
            tally
                .starts
                .count_to_places(&level_first, &mut next, |next, count| *next += count);
        }
        next.copy_from_slice(&bucket_first[1..]);
        for tally in &mut tallies {
            tally
                .never_freed
                .count_to_places(&level_first, &mut next, |next, count| *next -= count);
        }
        next.copy_from_slice(&bucket_first[..buckets]);
        for tally in &mut tallies {
            tally
                .frees
                .count_to_places(&level_first, &mut next, |next, count| *next += count);
        }
        drop(next);

        // Each range writes its own places, scattered among the others' (atomics only so that
        // the threads may share the vectors: relaxed, they are plain stores). Every place is
        // written once, so the vectors start zeroed: the kernel maps their pages as the
        // threads first write them, on every thread at once.
        let (mut by_start, mut by_end) = (vec![0; indexed_count], vec![0; indexed_count]);
        let (by_start_places, by_end_places) = (as_atomics(&mut by_start), as_atomics(&mut by_end));
        let tallies: Vec<Mutex<RangeTally>> = tallies.into_iter().map(Mutex::new).collect();
        crate::threads::map_on_threads(threads, ranges, |range| {
            let mut tally = tallies[range]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let ids = ids_of(range);
            for (id, &flagged) in ids.clone().zip(&placed[ids]) {
                let Some(at) = indexed(&flagged) else {
                    continue;
                };
                let id = id as AllocationId;
                let place = tally.starts.take(at, |place| *place += 1);
                by_start_places[place as usize].store(id, Ordering::Relaxed);
                if at.never_freed() {
                    let place = tally.never_freed.take(at, |place| *place -= 1);
                    by_end_places[place as usize - 1].store(id, Ordering::Relaxed);
                }
            }
            for &id in &closed[frees_of(range)] {
                match placed.get(id as usize).and_then(indexed) {
                    Some(at) if !at.never_freed() => {
                        let place = tally.frees.take(at, |place| *place += 1);
                        by_end_places[place as usize].store(id, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        });
        Self {
            level_first: level_first.into(),
            bucket_first: bucket_first.into(),
            by_start: by_start.into(),
            by_end: by_end.into(),
        }
    }

    /// Appends the indexed allocations alive after event `at` (in no order).
    pub(super) fn alive_at(
        &self,
        at: usize,
        allocations: &Allocations,
        out: &mut Vec<AllocationId>,
    ) {
        let started = |id: &&AllocationId| {
            allocations
                .start(**id as usize)
                .is_some_and(|start| start as usize <= at)
        };
        let not_freed = |id: &&AllocationId| {
            allocations
                .end(**id as usize)
                .is_none_or(|end| end as usize > at)
        };
        let leaf = at >> LEAF_EVENTS_LOG2;
        for (level, &first) in self.level_first.iter().enumerate() {
            let node = leaf >> level;
            let bucket = first as usize + node;
            let (Some(&from), Some(&to)) = (
                self.bucket_first.get(bucket),
                self.bucket_first.get(bucket + 1),
            ) else {
                // Past the last event: no bucket, nothing alive in the index.
                return;
            };
            let (by_start, by_end) = (
                &self.by_start[from as usize..to as usize],
                &self.by_end[from as usize..to as usize],
            );
            if level == 0 {
                out.extend(by_start.iter().take_while(started).filter(not_freed));
                continue;
            }
            let middle = ((node << level) | (1 << (level - 1))) << LEAF_EVENTS_LOG2;
            if at < middle {
                out.extend(by_start.iter().take_while(started));
            } else {
                out.extend(by_end.iter().rev().take_while(not_freed));
            }
        }
    }

    pub(super) fn heap_bytes(&self) -> u64 {
        self.level_first.heap_bytes()
            + self.bucket_first.heap_bytes()
            + self.by_start.heap_bytes()
            + self.by_end.heap_bytes()
    }
}

/// `values` as atomics, for threads to share (each storing its own places).
fn as_atomics(values: &mut [u32]) -> &[AtomicU32] {
    const _: () = assert!(std::mem::align_of::<AtomicU32>() == std::mem::align_of::<u32>());
    // SAFETY: `AtomicU32` has the size and bit validity of `u32` and, as asserted above, its
    // alignment here; the slice is borrowed exclusively for as long as the atomics are, so no
    // access to it other than through them can happen meanwhile (what the unstable
    // `AtomicU32::from_mut_slice` does).
    unsafe { &*(std::ptr::from_mut::<[u32]>(values) as *const [AtomicU32]) }
}

/// An allocation not in the index (alive from the start), where [`Placed`] would be.
const NOT_INDEXED: u32 = u32::MAX;

/// Where [`LifetimeIndex::new`] puts an allocation: its node's level (5 bits: at most 26, as
/// event indices are `u32`, so a level holds at most 2^26 leaves), whether it was never freed,
/// and the node within the level (26 bits). Never all ones: that is [`NOT_INDEXED`].
#[derive(Debug, Clone, Copy)]
struct Placed(u32);

impl Placed {
    const NEVER_FREED: u32 = 1 << 26;
    const NODE: u32 = Self::NEVER_FREED - 1;

    fn new(level: u32, node: usize, never_freed: bool) -> Self {
        debug_assert!(level <= 26 && node <= Self::NODE as usize);
        let never_freed = if never_freed { Self::NEVER_FREED } else { 0 };
        Self((level << 27) | never_freed | node as u32)
    }

    fn level(self) -> usize {
        (self.0 >> 27) as usize
    }

    fn node(self) -> u32 {
        self.0 & Self::NODE
    }

    fn never_freed(self) -> bool {
        self.0 & Self::NEVER_FREED != 0
    }
}

/// One range's counts, for by start, for the never freed at the back of by end, and for the
/// frees at its front.
#[derive(Debug, Default)]
struct RangeTally {
    starts: Tally,
    never_freed: Tally,
    frees: Tally,
}

/// What one range of lifetimes holds in each node it falls in: per level, a number for each
/// of a run of neighbouring nodes from a first one (first a count, then, once
/// [`Tally::count_to_places`] has run, where the range's next one goes).
#[derive(Debug, Default)]
struct Tally {
    runs: Vec<(u32, Vec<u32>)>,
}

impl Tally {
    /// Counts one more lifetime at `at`. A range's nodes at a level only rise (its lifetimes
    /// come in start or in end order), so its run grows at the back; one out of order would
    /// grow it at the front, slower but as right.
    fn count(&mut self, at: Placed) {
        let (level, node) = (at.level(), at.node());
        if self.runs.len() <= level {
            self.runs.resize_with(level + 1, Default::default);
        }
        let (first, counts) = &mut self.runs[level];
        if counts.is_empty() {
            *first = node;
        } else if node < *first {
            counts.splice(0..0, std::iter::repeat_n(0, (*first - node) as usize));
            *first = node;
        }
        let k = (node - *first) as usize;
        if k >= counts.len() {
            counts.resize(k + 1, 0);
        }
        counts[k] += 1;
    }

    /// Adds the counts to `totals`, by bucket.
    fn add_to(&self, level_first: &[u32], totals: &mut [u32]) {
        for (level, (first, counts)) in self.runs.iter().enumerate() {
            let from = (level_first[level] + first) as usize;
            for (total, &count) in totals[from..].iter_mut().zip(counts) {
                *total += count;
            }
        }
    }

    /// Turns the counts into where the range's first goes in each bucket: `next`'s, by bucket,
    /// which `step` then moves past the range's count (for the ranges after it).
    fn count_to_places(
        &mut self,
        level_first: &[u32],
        next: &mut [u32],
        step: impl Fn(&mut u32, u32),
    ) {
        for (level, (first, counts)) in self.runs.iter_mut().enumerate() {
            let from = (level_first[level] + *first) as usize;
            for (slot, next) in counts.iter_mut().zip(&mut next[from..]) {
                let count = *slot;
                *slot = *next;
                step(next, count);
            }
        }
    }

    /// Where the range's next lifetime at `at` goes, moving it on by `step`.
    fn take(&mut self, at: Placed, step: impl Fn(&mut u32)) -> u32 {
        let (first, places) = &mut self.runs[at.level()];
        let place = &mut places[(at.node() - *first) as usize];
        let taken = *place;
        step(place);
        taken
    }
}

/// The node of [`LifetimeIndex`] that holds a lifetime from event `first` to event `last`
/// (both alive): `(level, node within the level)`. Its leaves' highest differing bit says at
/// which level the halves they fall in part.
fn node_of(first: usize, last: usize) -> (u32, usize) {
    let (first_leaf, last_leaf) = (first >> LEAF_EVENTS_LOG2, last >> LEAF_EVENTS_LOG2);
    if first_leaf == last_leaf {
        return (0, first_leaf);
    }
    let level = usize::BITS - (first_leaf ^ last_leaf).leading_zeros();
    (level, first_leaf >> level)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range's nodes met out of order (which start or end order never gives) are counted as
    /// in order: the run grows at its front.
    #[test]
    fn a_tally_counts_nodes_in_any_order() {
        let level_first = [0, 100, 150];
        let nodes = [
            (0, 40),
            (0, 41),
            (1, 7),
            (0, 12),
            (2, 3),
            (0, 41),
            (1, 2),
            (0, 0),
        ];
        let totals = |order: &mut dyn Iterator<Item = &(u32, usize)>| {
            let mut tally = Tally::default();
            for &(level, node) in order {
                tally.count(Placed::new(level, node, false));
            }
            let mut totals = vec![0; 200];
            tally.add_to(&level_first, &mut totals);
            totals
        };
        let in_order = totals(&mut nodes.iter());
        assert_eq!(in_order, totals(&mut nodes.iter().rev()));
        let expected: Vec<u32> = (0..200)
            .map(|b| match b {
                0 | 12 | 40 | 102 | 107 | 153 => 1,
                41 => 2,
                _ => 0,
            })
            .collect();
        assert_eq!(in_order, expected);
    }
}
