//! The memory curve: requested bytes live after each event.
//!
//! It follows from what each event opens or closes (an alloc adds its allocation's size, the
//! free that ends one takes it away, every other event changes nothing), which the replay keeps
//! anyway ([`Replay::event_allocations`] and the allocations). So the curve is not stored event
//! by event (8 bytes each: 255 MB of a 32-million-event trace): only its total before every
//! `STEP`th event, and a read replays the few events from the nearest such total. A run of
//! values costs one step from there per value, a single value at most `STEP`.

use super::event_allocations::{EventAllocations, Ids};
use super::{AllocationId, Allocations, FirstPeak, Replay, pass::NO_ALLOCATION};
use crate::snapshot::Column;

/// log2 of the events between two stored totals. 64 matches the views' extrema blocks, whose
/// partial reads are at most a block long.
const STEP_LOG2: u32 = 6;
const STEP: usize = 1 << STEP_LOG2;
const _: () = assert!(STEP == crate::analysis::extrema::BLOCK);

/// The curve's stored totals: `before_step[k]` is the total before event `k * STEP` (after
/// event `k * STEP - 1`; entry 0 is the total alive from the start).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Curve {
    pub(crate) before_step: Column<u64>,
}

impl Curve {
    /// The stored totals a trace of `events` events has.
    pub(crate) fn steps_for(events: usize) -> usize {
        events.div_ceil(STEP)
    }

    /// The curve of events whose allocations are `events`, from `at_start` bytes alive before
    /// the first, and its peak (found on the way, not by a scan of its own), in `parts` runs
    /// of whole steps on up to `threads` threads. With more than one part, each part's net
    /// change is summed first (a read of its events), so each knows the total it starts from;
    /// then each stores its totals and finds its first maximum, and the first of the parts'
    /// maxima to exceed all before it is the curve's first peak, as one walk finds it.
    pub(super) fn build(
        at_start: u64,
        events: &EventAllocations,
        allocations: &Allocations,
        parts: usize,
        threads: usize,
    ) -> (Self, FirstPeak, StepExtremes) {
        let steps = Self::steps_for(events.len());
        let steps_per_part = steps.div_ceil(parts.max(1)).max(1);
        let parts = steps.div_ceil(steps_per_part).max(1);
        let part_events = |part: usize| {
            let from = (part * steps_per_part * STEP).min(events.len());
            from..((part + 1) * steps_per_part * STEP).min(events.len())
        };
        let changes = |part: usize| {
            let range = part_events(part);
            let ids = events.from_event(range.start).take(range.len());
            range
                .zip(ids)
                .map(|(event, id)| change(allocations, event, id))
        };
        let mut starts = vec![at_start];
        if parts > 1 {
            let sums = crate::threads::map_on_threads(threads, parts - 1, |part| {
                changes(part).fold(0u64, u64::wrapping_add)
            });
            for sum in sums {
                let last = starts.last().copied().unwrap_or(at_start);
                starts.push(last.wrapping_add(sum));
            }
        }
        let walked = crate::threads::map_on_threads(threads, parts, |part| {
            let mut before_step = Vec::with_capacity(steps_per_part);
            let mut extremes = StepExtremes::with_capacity(steps_per_part);
            // Totals of 0 never exceed `at_start`, so a part's search may start from 0.
            let mut peak = FirstPeak::from(0);
            let mut total = starts[part];
            let (mut low, mut high) = (u64::MAX, u64::MIN);
            let end = part_events(part).end;
            for (event, change) in part_events(part).zip(changes(part)) {
                if event % STEP == 0 {
                    before_step.push(total);
                }
                total = total.wrapping_add(change);
                peak.see(event, total);
                (low, high) = (low.min(total), high.max(total));
                if (event + 1) % STEP == 0 || event + 1 == end {
                    extremes.min.push(low);
                    extremes.max.push(high);
                    (low, high) = (u64::MAX, u64::MIN);
                }
            }
            (before_step, extremes, peak.found())
        });
        let mut before_step = Vec::with_capacity(steps);
        let mut extremes = StepExtremes::with_capacity(steps);
        let mut peak = FirstPeak::from(at_start);
        for (stored, part_extremes, (bytes, event)) in walked {
            before_step.extend(stored);
            extremes.min.extend(part_extremes.min);
            extremes.max.extend(part_extremes.max);
            if let Some(event) = event {
                peak.see(event, bytes);
            }
        }
        let curve = Self {
            before_step: before_step.into(),
        };
        (curve, peak, extremes)
    }

    pub(crate) fn heap_bytes(&self) -> u64 {
        self.before_step.heap_bytes()
    }
}

/// The smallest and largest total after the events of each step of the curve (`STEP` events,
/// the last step fewer), found by [`Curve::build`]'s walk: the first level of the views'
/// extrema (their blocks are steps), so the views' index need not walk the curve again.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct StepExtremes {
    pub(crate) min: Vec<u64>,
    pub(crate) max: Vec<u64>,
}

impl StepExtremes {
    fn with_capacity(steps: usize) -> Self {
        Self {
            min: Vec::with_capacity(steps),
            max: Vec::with_capacity(steps),
        }
    }
}

/// How event `event`, which opens or closes allocation `id`, changes the total (wrapping: a
/// free takes the size away).
#[inline(always)]
fn change(allocations: &Allocations, event: usize, id: AllocationId) -> u64 {
    if id == NO_ALLOCATION {
        return 0;
    }
    let size = allocations.size(id as usize);
    if allocations.start(id as usize) == Some(event as u32) {
        size
    } else {
        size.wrapping_neg()
    }
}

/// The totals after a run of events, in order (see [`Replay::allocated_over`]).
pub struct AllocatedOver<'a> {
    replay: &'a Replay,
    ids: Ids<'a>,
    next: usize,
    to: usize,
    total: u64,
}

impl Iterator for AllocatedOver<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.next >= self.to {
            return None;
        }
        let id = self.ids.next()?;
        self.total = self
            .total
            .wrapping_add(change(&self.replay.allocations, self.next, id));
        self.next += 1;
        Some(self.total)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.to - self.next.min(self.to);
        (left, Some(left))
    }
}

impl ExactSizeIterator for AllocatedOver<'_> {}

/// The curve as the views' extrema read it.
impl crate::analysis::extrema::Series for Replay {
    fn values(&self, from: usize, to: usize) -> impl Iterator<Item = u64> {
        self.allocated_over(from, to)
    }
}

impl Replay {
    /// Requested bytes live after each event of `from..to` (clamped to the trace), in order.
    pub fn allocated_over(&self, from: usize, to: usize) -> AllocatedOver<'_> {
        let to = to.min(self.len());
        let from = from.min(to);
        let step = from >> STEP_LOG2;
        let mut run = AllocatedOver {
            replay: self,
            ids: self.event_allocations.from_event(step << STEP_LOG2),
            next: step << STEP_LOG2,
            to: from,
            total: self
                .curve
                .before_step
                .get(step)
                .copied()
                .unwrap_or(self.allocated_at_start),
        };
        // The events between the stored total and `from`.
        for _ in run.by_ref() {}
        run.to = to;
        run
    }

    /// Requested bytes live after event `at` (`None`: before the first event; past the end: at
    /// the end).
    pub fn allocated_after(&self, at: Option<usize>) -> u64 {
        match at {
            None => self.allocated_at_start,
            Some(i) => {
                let i = i.min(self.len().saturating_sub(1));
                self.allocated_over(i, i + 1)
                    .next()
                    .unwrap_or(self.allocated_at_start)
            }
        }
    }
}
