//! The lifetime index: the interval tree over event indices that finds the allocations alive
//! at any event without copying live sets.

use super::pass::NO_ALLOCATION;
use super::{AllocationId, Allocations};
use crate::snapshot::Column;

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
    /// and freed, in the order of their frees. On up to `threads` threads, each sorting the
    /// allocations of its own run of buckets (so the index is the same on any number).
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
        // Each allocation's bucket, from one read of the allocations' starts and ends (the
        // largest vector here), with flags for the passes below. (Reading whole allocations,
        // eight columns, took half again as long as the rest of the index on a long trace.)
        let mut bucket = vec![0u32; allocations.len()];
        crate::threads::fill_on_threads(threads, &mut bucket, |id| {
            match allocations.start(id) {
                None => NOT_INDEXED,
                Some(first) => {
                    let end = allocations.end(id);
                    // Never freed: alive up to the last event, the last one a query asks about.
                    let last = end.map_or(events - 1, |end| end as usize - 1);
                    let (level, node) = node_of(first as usize, last);
                    let never_freed = if end.is_none() { NEVER_FREED } else { 0 };
                    (level_first[level as usize] + node as u32) | never_freed
                }
            }
        });

        // A counting sort by bucket: sizes (each thread counts the buckets of one run, from a
        // read of them all), then where each bucket begins.
        let mut bucket_first = vec![0u32; buckets + 1];
        let runs = threads.clamp(1, buckets);
        let per_run = buckets.div_ceil(runs);
        std::thread::scope(|scope| {
            for (run, sizes) in bucket_first[1..].chunks_mut(per_run).enumerate() {
                let bucket = &bucket;
                let mut count = move || {
                    let first = run * per_run;
                    for &flagged in bucket {
                        let b = (flagged & BUCKET) as usize;
                        if flagged != NOT_INDEXED && b >= first && b - first < sizes.len() {
                            sizes[b - first] += 1;
                        }
                    }
                };
                if runs == 1 {
                    count();
                } else {
                    scope.spawn(count);
                }
            }
        });
        for b in 0..buckets {
            bucket_first[b + 1] += bucket_first[b];
        }
        let indexed = bucket_first[buckets] as usize;

        // Then each thread places the allocations of a run of buckets holding about as many.
        // The front of a bucket's `by_start` and `by_end` fill up in start and end order; the
        // back of its `by_end` takes the never freed, which all end after every free (among
        // themselves, in no order a query needs).
        let mut run_first: Vec<usize> = (0..runs)
            .map(|run| bucket_first.partition_point(|&at| (at as usize) < run * indexed / runs))
            .collect();
        run_first.dedup();
        let mut by_start = vec![NO_ALLOCATION; indexed];
        let mut by_end = vec![NO_ALLOCATION; indexed];
        std::thread::scope(|scope| {
            let (mut starts, mut ends) = (by_start.as_mut_slice(), by_end.as_mut_slice());
            for (run, &first) in run_first.iter().enumerate() {
                let last = run_first.get(run + 1).copied().unwrap_or(buckets);
                let base = bucket_first[first] as usize;
                let len = bucket_first[last] as usize - base;
                let (run_starts, rest) = std::mem::take(&mut starts).split_at_mut(len);
                starts = rest;
                let (run_ends, rest) = std::mem::take(&mut ends).split_at_mut(len);
                ends = rest;
                let (bucket, bucket_first) = (&bucket, &bucket_first);
                let mut place = move || {
                    // Where the next id of each bucket goes, in the run's part.
                    let at = |b: usize| bucket_first[b] - base as u32;
                    let mut next: Vec<u32> = (first..last).map(at).collect();
                    let mut next_never_freed: Vec<u32> = (first..last).map(|b| at(b + 1)).collect();
                    let mine = |flagged: u32| {
                        let b = (flagged & BUCKET) as usize;
                        (flagged != NOT_INDEXED && (first..last).contains(&b)).then_some(b - first)
                    };
                    // Ids are given at the alloc, so id order is start order.
                    for (id, &flagged) in bucket.iter().enumerate() {
                        let Some(b) = mine(flagged) else { continue };
                        run_starts[next[b] as usize] = id as AllocationId;
                        next[b] += 1;
                        if flagged & NEVER_FREED != 0 {
                            next_never_freed[b] -= 1;
                            run_ends[next_never_freed[b] as usize] = id as AllocationId;
                        }
                    }
                    // The frees in event order (each of an indexed allocation that was freed).
                    next.clear();
                    next.extend((first..last).map(at));
                    for &id in closed {
                        let Some(&flagged) = bucket.get(id as usize) else {
                            continue;
                        };
                        let Some(b) = mine(flagged) else { continue };
                        if flagged & NEVER_FREED == 0 {
                            run_ends[next[b] as usize] = id;
                            next[b] += 1;
                        }
                    }
                };
                if runs == 1 {
                    place();
                } else {
                    scope.spawn(place);
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

/// Flags of an allocation's bucket while [`LifetimeIndex::new`] sorts: not in the index (alive
/// from the start), never freed; the bits below are the bucket, far fewer than 2^31 (two per
/// `2^LEAF_EVENTS_LOG2` events of at most 2^32).
const NOT_INDEXED: u32 = u32::MAX;
const NEVER_FREED: u32 = 1 << 31;
const BUCKET: u32 = NEVER_FREED - 1;

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
