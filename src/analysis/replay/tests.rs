//! The replay's tests: the event pass in pieces and whole, the seed handed from the loader,
//! live sets against a scan of lifetimes, and the versions that count frees per address.

use super::lifetimes::LEAF_EVENTS_LOG2;
use super::pass::EventPass;
use super::*;
use crate::analysis::extrema::RangeExtrema;

/// The loader runs the event pass batch by batch while the trace is read; wherever the
/// batches end (even between a `free_requested` and its `free_completed`), the result must
/// be the pass over the whole trace.
#[test]
fn the_event_pass_in_pieces_equals_the_pass_at_once() {
    let mut trace = Trace::default();
    let events = [
        (ActionCode::ALLOC, 0x10),
        (ActionCode::FREE_REQUESTED, 0x10),
        (ActionCode::FREE_COMPLETED, 0x10),
        (ActionCode::FREE_COMPLETED, 0x20),
        (ActionCode::SEGMENT_ALLOC, 0x30),
        (ActionCode::ALLOC, 0x10),
        (ActionCode::FREE_REQUESTED, 0x10),
        (ActionCode::ALLOC, 0x40),
        (ActionCode::FREE_COMPLETED, 0x10),
        (ActionCode::FREE_REQUESTED, 0x40),
    ];
    for (i, &(action, addr)) in events.iter().enumerate() {
        trace.push(action, addr, 8 + i as u64, 0, None, 0, 0, 0);
    }
    let mut whole = EventPass::default();
    whole.take(trace.followed_events(0));
    whole.finish();
    assert_eq!(whole.events(), events.len());
    for split in 0..=events.len() {
        let mut pieces = EventPass::default();
        pieces.take(trace.followed_events(0).take(split));
        pieces.take(std::iter::empty());
        pieces.take(trace.followed_events(split));
        pieces.finish();
        assert_eq!(pieces.allocations, whole.allocations, "split at {split}");
        assert_eq!(
            pieces.event_allocations, whole.event_allocations,
            "split at {split}"
        );
        assert_eq!(pieces.freed_without_alloc, whole.freed_without_alloc);
    }
}

/// A pickle of `{"segments": [], "device_traces": [[...]]}` with `events` allocs and frees of
/// device 0, written opcode by opcode (protocol 2).
fn pickle_of_alloc_free_trace(events: usize) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, text: &str) {
        out.push(b'X');
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    fn int(out: &mut Vec<u8>, value: i32) {
        out.push(b'J');
        out.extend_from_slice(&value.to_le_bytes());
    }
    let mut out = vec![0x80, 2, b'}', b'('];
    text(&mut out, "segments");
    out.push(b']');
    text(&mut out, "device_traces");
    out.extend_from_slice(b"](]("); // the list of devices, and device 0's list of events
    for i in 0..events {
        out.extend_from_slice(b"}(");
        text(&mut out, "action");
        text(
            &mut out,
            if i % 2 == 0 {
                "alloc"
            } else {
                "free_completed"
            },
        );
        text(&mut out, "addr");
        int(&mut out, 0x1000 * (i as i32 / 2 % 64 + 1));
        text(&mut out, "size");
        int(&mut out, 512);
        out.push(b'u');
    }
    out.extend_from_slice(b"eeu.");
    out
}

/// Past 65,536 events the loader runs the event pass on its follower thread and hands it over
/// beside the snapshot (no lock in the model); the replay started from it is the replay
/// that runs the pass itself.
#[test]
fn the_loaders_event_pass_is_handed_to_the_replay() {
    let events = 70_000;
    let bytes = pickle_of_alloc_free_trace(events);
    let (snapshot, mut seed) =
        crate::analysis::load_reader(&bytes[..], Default::default()).expect("loads");
    assert_eq!(snapshot.trace(0).len(), events);
    let followed = seed.0.as_ref().expect("the loader ran the event pass");
    assert_eq!((followed.device, followed.follower.events()), (0, events));
    // A pass is only for the trace it saw.
    assert!(seed.take(1, events).is_none());
    assert!(seed.take(0, events - 1).is_none());
    let pass = seed.take(0, events).expect("the pass of device 0");
    assert!(seed.take(0, events).is_none(), "taken once");

    let seeded = Replay::seeded(&snapshot, 0, Some(pass));
    let fresh = Replay::new(&snapshot, 0);
    assert_eq!(seeded.allocations, fresh.allocations);
    assert_eq!(seeded.event_allocations, fresh.event_allocations);
    assert_eq!(seeded.curve, fresh.curve);
    assert_eq!(
        seeded.live_after(Some(events / 2)),
        fresh.live_after(Some(events / 2))
    );
    assert_eq!(seeded.allocated_after(Some(0)), 512);
}

/// A ring-buffer trace spanning many levels of the lifetime index, whose frees of allocations made
/// before it began are spread through it: the live set at any moment equals a scan of
/// every allocation's lifetime.
#[test]
fn live_sets_across_checkpoints_keep_allocations_from_before_the_trace() {
    let mut snapshot = Snapshot::default();
    let mut trace = Trace::default();
    let event = |trace: &mut Trace, action, addr: u64| {
        trace.push(action, addr, 100 + addr, 0, None, 0, 0, 0);
    };
    for step in 0..6000u64 {
        // Allocations from before the trace, freed one by one every 600 events.
        if step % 600 == 0 {
            event(&mut trace, ActionCode::FREE_COMPLETED, 1_000_000 + step);
        }
        event(&mut trace, ActionCode::ALLOC, step % 50);
        if step % 3 != 0 {
            event(&mut trace, ActionCode::FREE_REQUESTED, step % 50);
            event(&mut trace, ActionCode::FREE_COMPLETED, step % 50);
        }
    }
    let n = trace.len();
    assert!(n > 64 << LEAF_EVENTS_LOG2);
    snapshot.device_traces.push(trace);
    let replay = Replay::new(&snapshot, 0);
    let from_start = replay.live_after(None).len();
    assert_eq!(
        from_start, 10,
        "allocations freed without alloc are live at the start"
    );
    for at in (0..n).step_by(37).chain([4095, 4096, 8191, 8192, n - 1]) {
        let scanned: Vec<AllocationId> = (0..replay.allocations.len() as AllocationId)
            .filter(|&id| replay.allocations.at(id as usize).is_live_after(Some(at)))
            .collect();
        assert_eq!(replay.live_after(Some(at)), scanned, "live after {at}");
        let bytes: u64 = scanned
            .iter()
            .map(|&id| replay.allocations.size(id as usize))
            .sum();
        assert_eq!(
            replay.allocated_after(Some(at)),
            bytes,
            "allocated after {at}"
        );
    }
}

/// A small deterministic generator (xorshift), so the traces below are the same every run.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The allocations live after `at` by a scan of every lifetime: the brute force the index
/// must agree with.
fn scanned(replay: &Replay, at: Option<usize>) -> Vec<AllocationId> {
    (0..replay.allocations.len() as AllocationId)
        .filter(|&id| replay.allocations.at(id as usize).is_live_after(at))
        .collect()
}

/// A snapshot of `trace` (device 0) whose one segment holds `ghosts` active blocks no event
/// allocated, requested sizes from `requested` up.
fn with_ghosts(trace: Trace, ghosts: u64, requested: u64) -> Snapshot {
    let mut snapshot = Snapshot::default();
    snapshot.segments.push(crate::snapshot::Segment {
        blocks: (0..ghosts)
            .map(|k| crate::snapshot::Block {
                address: 0x9000_0000 + k * 512,
                size: 512,
                requested_size: requested + k,
                state: BlockState::ActiveAllocated,
                stack: 0,
            })
            .collect(),
        ..Default::default()
    });
    snapshot.device_traces.push(trace);
    snapshot
}

/// The shape of a leak: most allocations are never freed, the rest live for a few events
/// or for thousands (so lifetimes land at every level of the index), some frees are of
/// allocations from before the trace, and the segments hold ghosts. At many events, and
/// around every leaf boundary of the first leaves, the live set is the scan's and its bytes
/// are the memory curve's.
#[test]
fn live_sets_of_a_leak_trace_equal_a_scan_of_lifetimes() {
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let mut trace = Trace::default();
    let mut open: Vec<u64> = Vec::new();
    let mut next_addr = 0x1000u64;
    for _ in 0..30_000 {
        match dice.below(100) {
            0..=59 => {
                trace.push(
                    ActionCode::ALLOC,
                    next_addr,
                    16 + next_addr % 997,
                    0,
                    None,
                    0,
                    0,
                    0,
                );
                // One in four is freed later; the rest leak.
                if dice.below(4) == 0 {
                    open.push(next_addr);
                }
                next_addr += 512;
            }
            60..=79 if !open.is_empty() => {
                // Mostly the newest (short lifetimes), sometimes one from long ago.
                let pick = if dice.below(5) == 0 {
                    dice.below(open.len() as u64) as usize
                } else {
                    open.len() - 1
                };
                let addr = open.swap_remove(pick);
                trace.push(ActionCode::FREE_REQUESTED, addr, 0, 0, None, 0, 0, 0);
                trace.push(ActionCode::FREE_COMPLETED, addr, 0, 0, None, 0, 0, 0);
            }
            80..=81 => {
                // Allocated before the trace began.
                let addr = 0x7000_0000 + dice.below(1 << 20) * 512;
                trace.push(ActionCode::FREE_COMPLETED, addr, 64, 0, None, 0, 0, 0);
            }
            _ => trace.push(ActionCode::SEGMENT_ALLOC, 0, 0, 0, None, 0, 0, 0),
        }
    }
    let n = trace.len();
    let snapshot = with_ghosts(trace, 5, 100);
    let replay = Replay::new(&snapshot, 0);
    assert!(n > 64 << LEAF_EVENTS_LOG2, "{n} events span many levels");
    let never_freed = replay
        .allocations
        .iter()
        .filter(|a| a.origin == Origin::Traced && a.end.is_none())
        .count();
    assert!(never_freed > 10_000, "a leak: {never_freed} never freed");
    assert!(!replay.freed_without_alloc.is_empty() && replay.ghosts.len() == 5);

    let leaf = 1usize << LEAF_EVENTS_LOG2;
    let boundaries = (1..40).flat_map(|k| [k * leaf - 1, k * leaf, k * leaf + 1]);
    let moments = (0..n)
        .step_by(13)
        .chain(boundaries)
        .chain([n - 1, n, n + 100]);
    for at in moments.map(Some).chain([None]) {
        let live = replay.live_after(at);
        assert_eq!(
            live,
            scanned(&replay, at.map(|at| at.min(n - 1))),
            "live after {at:?}"
        );
        let bytes = live.iter().fold(0u64, |sum, &id| {
            sum.wrapping_add(replay.allocations.size(id as usize))
        });
        assert_eq!(replay.allocated_after(at), bytes, "allocated after {at:?}");
    }
}

/// The curve keeps one total per 64 events and replays the rest on read: a run read from any
/// event, of any length, and a peak found while it was built, equal the bytes of a scan of
/// every lifetime after each event, on a trace with merged and lone frees, frees of allocations
/// from before it, a free that never completes and ghosts in the segments.
#[test]
fn the_curve_read_from_anywhere_is_the_sum_of_the_lifetimes() {
    let mut dice = Dice(0x2545_f491_4f6c_dd1d);
    let mut trace = Trace::default();
    let mut open: Vec<u64> = Vec::new();
    let mut next_addr = 0x1000u64;
    let push = |trace: &mut Trace, action, addr, size| {
        trace.push(action, addr, size, 0, None, 0, 0, 0);
    };
    while trace.len() < 3000 {
        match dice.below(10) {
            0..=4 => {
                push(
                    &mut trace,
                    ActionCode::ALLOC,
                    next_addr,
                    1 + dice.below(1 << 30),
                );
                open.push(next_addr);
                next_addr += 512;
            }
            5..=6 if !open.is_empty() => {
                let addr = open.swap_remove(dice.below(open.len() as u64) as usize);
                push(&mut trace, ActionCode::FREE_REQUESTED, addr, 0);
                push(&mut trace, ActionCode::FREE_COMPLETED, addr, 0);
            }
            7 if !open.is_empty() => {
                // A lone request: another event comes before its completion.
                let addr = open.swap_remove(0);
                push(&mut trace, ActionCode::FREE_REQUESTED, addr, 0);
                push(&mut trace, ActionCode::SEGMENT_ALLOC, 0, 0);
                push(&mut trace, ActionCode::FREE_COMPLETED, addr, 0);
            }
            8 => {
                let addr = 0x7000_0000 + dice.below(1 << 20) * 512;
                push(
                    &mut trace,
                    ActionCode::FREE_COMPLETED,
                    addr,
                    1 + dice.below(1 << 20),
                );
            }
            _ => push(&mut trace, ActionCode::SEGMENT_ALLOC, 0, 0),
        }
    }
    if let Some(&addr) = open.last() {
        push(&mut trace, ActionCode::FREE_REQUESTED, addr, 0);
    }
    let n = trace.len();
    let snapshot = with_ghosts(trace, 3, 7);
    let replay = Replay::new(&snapshot, 0);
    assert!(!replay.freed_without_alloc.is_empty() && replay.ghosts.len() == 3);
    assert!(!replay.pending_requests.is_empty(), "lone requests");
    let bytes_after = |at: Option<usize>| {
        scanned(&replay, at).iter().fold(0u64, |sum, &id| {
            sum.wrapping_add(replay.allocations.size(id as usize))
        })
    };
    let expected: Vec<u64> = (0..n).map(|at| bytes_after(Some(at))).collect();
    assert_eq!(replay.allocated_at_start, bytes_after(None));
    assert_eq!(replay.allocated_over(0, n).collect::<Vec<_>>(), expected);
    for from in (0..200).chain(n - 70..=n) {
        for to in [
            from,
            from + 1,
            from + 63,
            from + 64,
            from + 65,
            from + 130,
            n + 5,
        ] {
            let run: Vec<u64> = replay.allocated_over(from, to).collect();
            assert_eq!(run, expected[from.min(n)..to.min(n)], "{from}..{to}");
        }
        let after = replay.allocated_after(Some(from));
        assert_eq!(after, expected[from.min(n - 1)], "after {from}");
    }
    assert_eq!(replay.allocated_after(None), replay.allocated_at_start);
    let high = expected.iter().copied().max().expect("events");
    let first = expected.iter().position(|&bytes| bytes == high);
    let peak = if high > replay.allocated_at_start {
        (high, first)
    } else {
        (replay.allocated_at_start, None)
    };
    assert_eq!(replay.first_peak(), peak);
    assert_eq!(replay.curve.before_step.len(), n.div_ceil(64));

    // The allocation of each event, which only the closing events keep: the one that starts
    // or ends there, by a scan; read one by one and in runs from any event.
    let mut at_event = vec![NO_ALLOCATION; n];
    for (id, allocation) in replay.allocations.iter().enumerate() {
        for event in [allocation.start, allocation.end].into_iter().flatten() {
            at_event[event as usize] = id as AllocationId;
        }
    }
    for (event, &id) in at_event.iter().enumerate() {
        let expected = Some(id).filter(|&id| id != NO_ALLOCATION);
        assert_eq!(replay.allocation_at(event), expected, "event {event}");
    }
    assert_eq!(replay.allocation_at(n), None);
    for from in (0..n).step_by(61).chain([n - 1, n]) {
        let run: Vec<AllocationId> = replay.event_allocations.from_event(from).collect();
        assert_eq!(run, at_event[from..], "from {from}");
    }
}

/// Lifetimes of every length from every start (short traces, so all pairs fit): each
/// lands in the bucket of its level, and the query finds it exactly where it is alive.
#[test]
fn lifetimes_of_every_length_are_found_where_they_are_alive() {
    for steps in [1usize, 2, 63, 64, 65, 200, 700] {
        // One allocation per (first step, last step) pair on a grid, each at its own
        // address; at each step the frees due come first, then the allocs.
        let stride = (steps / 40).max(1);
        let mut allocs: Vec<Vec<u64>> = vec![Vec::new(); steps + 1];
        let mut frees: Vec<Vec<u64>> = vec![Vec::new(); steps + 1];
        let mut addr = 0u64;
        for first in (0..steps).step_by(stride) {
            for last in (first + 1..=steps).step_by(stride) {
                addr += 1;
                allocs[first].push(addr);
                frees[last].push(addr);
            }
        }
        let mut trace = Trace::default();
        for step in 0..=steps {
            for &addr in &frees[step] {
                trace.push(ActionCode::FREE_COMPLETED, addr, 8, 0, None, 0, 0, 0);
            }
            for &addr in &allocs[step] {
                trace.push(ActionCode::ALLOC, addr, 8, 0, None, 0, 0, 0);
            }
        }
        let n = trace.len();
        let mut snapshot = Snapshot::default();
        snapshot.device_traces.push(trace);
        let replay = Replay::new(&snapshot, 0);
        for at in (0..n).map(Some).chain([None]) {
            assert_eq!(
                replay.live_after(at),
                scanned(&replay, at),
                "{steps} steps: live after {at:?}"
            );
        }
    }
}

/// Address reuse, a second alloc at an open address, and frees of unknown addresses give
/// the versions and lifetimes MemoryViz gives (the address table keeps only the last
/// allocation at each address).
#[test]
fn versions_count_the_frees_at_each_address() {
    let mut trace = Trace::default();
    let events = [
        (ActionCode::ALLOC, 0xa0),          // 0: a0 version 0
        (ActionCode::FREE_COMPLETED, 0xa0), // 1: frees it
        (ActionCode::ALLOC, 0xa0),          // 2: a0 version 1
        (ActionCode::FREE_COMPLETED, 0xb0), // 3: b0 freed without alloc, version 0
        (ActionCode::FREE_COMPLETED, 0xb0), // 4: again, version 1
        (ActionCode::ALLOC, 0xb0),          // 5: b0 version 2
        (ActionCode::ALLOC, 0xb0),          // 6: b0 version 2 again; 5 stays open
        (ActionCode::FREE_REQUESTED, 0xb0), // 7: frees 6 (merged with 8)
        (ActionCode::FREE_COMPLETED, 0xb0), // 8
        (ActionCode::FREE_COMPLETED, 0xb0), // 9: nothing open: freed without alloc, v3
        (ActionCode::ALLOC, 0xc0),          // 10: c0 version 0, open at the end
    ];
    for &(action, addr) in &events {
        trace.push(action, addr, 8, 0, None, 0, 0, 0);
    }
    let mut snapshot = Snapshot::default();
    snapshot.device_traces.push(trace);
    // Blocks at the end: c0 (open in the trace: not a ghost), a0 (open: not a ghost) and
    // d0 (never seen: a ghost of version 0); b0's block would be a ghost of version 4.
    snapshot.segments.push(crate::snapshot::Segment {
        blocks: [0xa0, 0xb0, 0xc0, 0xd0]
            .into_iter()
            .map(|address| crate::snapshot::Block {
                address,
                size: 512,
                requested_size: 8,
                state: BlockState::ActiveAllocated,
                stack: 0,
            })
            .collect(),
        ..Default::default()
    });
    let replay = Replay::new(&snapshot, 0);
    let lifetimes: Vec<_> = replay
        .allocations
        .iter()
        .map(|a| (a.addr, a.version, a.start, a.end, a.origin))
        .collect();
    use Origin::*;
    assert_eq!(
        lifetimes,
        [
            (0xa0, 0, Some(0), Some(1), Traced),
            (0xa0, 1, Some(2), None, Traced),
            (0xb0, 0, None, Some(3), FreedWithoutAlloc),
            (0xb0, 1, None, Some(4), FreedWithoutAlloc),
            (0xb0, 2, Some(5), None, Traced),
            (0xb0, 2, Some(6), Some(7), Traced),
            (0xb0, 3, None, Some(9), FreedWithoutAlloc),
            (0xc0, 0, Some(10), None, Traced),
            (0xb0, 4, None, None, Ghost),
            (0xd0, 0, None, None, Ghost),
        ]
    );
}

/// Both ways of sorting a live set (a sort for few ids, a bitmap for many) give the same.
#[test]
fn sorting_ids_by_bitmap_or_sort_agree() {
    let mut dice = Dice(7);
    for (count, picked) in [(10_000usize, 50usize), (10_000, 9_000), (64, 64), (65, 1)] {
        let mut ids: Vec<AllocationId> = (0..count as AllocationId).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, dice.below(i as u64 + 1) as usize);
        }
        ids.truncate(picked);
        let mut expected = ids.clone();
        expected.sort_unstable();
        sort_distinct_ids(&mut ids, count);
        assert_eq!(ids, expected, "{picked} of {count}");
    }
}

/// On a trace long enough for the last passes to run on threads of their own, the replay is
/// the one they make on one thread: the curve and its peak, the reserved and pending steps,
/// the lifetimes' index (compared by the live sets it gives).
#[test]
fn the_last_passes_on_threads_equal_them_on_one() {
    let mut snapshot = Snapshot::default();
    let mut trace = Trace::default();
    let mut step = 0u64;
    while trace.len() < PASSES_ON_THREADS_FROM + 1000 {
        let addr = (step % 97) * 512;
        if step.is_multiple_of(1000) {
            trace.push(
                ActionCode::SEGMENT_ALLOC,
                1 << 40 | step,
                2 << 20,
                0,
                None,
                0,
                0,
                0,
            );
        }
        trace.push(ActionCode::ALLOC, addr, 100 + step % 7, 0, None, 0, 0, 0);
        if !step.is_multiple_of(5) {
            trace.push(
                ActionCode::FREE_REQUESTED,
                addr,
                100 + step % 7,
                0,
                None,
                0,
                0,
                0,
            );
            if !step.is_multiple_of(11) {
                trace.push(
                    ActionCode::FREE_COMPLETED,
                    addr,
                    100 + step % 7,
                    0,
                    None,
                    0,
                    0,
                    0,
                );
            }
        }
        step += 1;
    }
    let events = trace.len();
    snapshot.device_traces.push(trace);
    let one = Replay::seeded_on(&snapshot, 0, None, 1);
    let three = Replay::seeded_on(&snapshot, 0, None, 3);
    assert_eq!(one.curve, three.curve);
    assert_eq!(one.peak.get(), three.peak.get());
    assert!(one.peak.get().is_some(), "found while the curve was built");
    assert_eq!(
        (one.reserved_at_start, &one.reserved_steps),
        (three.reserved_at_start, &three.reserved_steps)
    );
    assert!(!one.pending_steps.is_empty());
    assert_eq!(one.pending_steps, three.pending_steps);
    for at in [0, events / 3, events / 2, events - 1] {
        assert_eq!(
            one.live_after(Some(at)),
            three.live_after(Some(at)),
            "at {at}"
        );
    }
}

/// The curve built in parts (each from the total the parts before it sum to) stores the totals
/// of one walk and finds its first peak, wherever the parts end: here the peak is reached
/// several times, first in the trace's middle, and a free of a block allocated before the
/// trace (taking bytes from the start's total) comes first.
#[test]
fn the_curve_in_parts_is_the_curve_of_one_walk() {
    let mut trace = Trace::default();
    let mut push = |action, addr: u64, size: u64| trace.push(action, addr, size, 0, None, 0, 0, 0);
    push(ActionCode::FREE_COMPLETED, 0x9000, 300);
    // 4,801 events: 76 steps, so the extrema have a level above the steps.
    for step in 0..1200u64 {
        let size = if step == 421 || step == 733 {
            900
        } else {
            100 + step % 13
        };
        push(ActionCode::ALLOC, 0x10, size);
        push(ActionCode::ALLOC, 0x20, 50);
        push(ActionCode::FREE_COMPLETED, 0x20, 50);
        push(ActionCode::FREE_COMPLETED, 0x10, size);
    }
    let mut snapshot = Snapshot::default();
    snapshot.device_traces.push(trace);
    let replay = Replay::seeded_on(&snapshot, 0, None, 1);
    let build = |parts, threads| {
        let (curve, peak, extremes) = Curve::build(
            replay.allocated_at_start,
            &replay.event_allocations,
            &replay.allocations,
            parts,
            threads,
        );
        (curve, peak.found(), extremes)
    };
    let one = build(1, 1);
    assert_eq!(
        one.1,
        (900 + 50 + 300 - 300, Some(1 + 421 * 4 + 1)),
        "{:?}",
        one.1
    );
    for parts in [2, 3, 7, 16, 63, 64, 500] {
        for threads in [1, 4] {
            assert_eq!(
                build(parts, threads),
                one,
                "{parts} parts on {threads} threads"
            );
        }
    }
    // The walk's extremes by step are the views' extrema's first level, as a walk of the
    // curve of its own finds them.
    let events = replay.len();
    let (min, max) = (one.2.min.clone(), one.2.max.clone());
    assert_eq!(
        RangeExtrema::from_blocks(events, min, max),
        RangeExtrema::new(events, replay.allocated_over(0, events))
    );
}

#[test]
fn the_lifetime_index_on_threads_is_the_index_on_one() {
    // Lifetimes short and long (in leaves and in nodes high up), some never freed, some alive
    // from the start (freed, never allocated), freed out of their order.
    let mut trace = Trace::default();
    let mut push = |action, addr: u64, size: u64| trace.push(action, addr, size, 0, None, 0, 0, 0);
    push(ActionCode::FREE_COMPLETED, 0x9000_0000, 300);
    let mut live: Vec<u64> = Vec::new();
    for step in 0..3000u64 {
        let addr = 0x1000 * (step + 1);
        push(ActionCode::ALLOC, addr, 64);
        live.push(addr);
        if step % 3 == 0 {
            // Free one of those alive, far back or recent, by a rule that mixes both.
            let at = (step as usize * 7919) % live.len();
            let freed = live.swap_remove(at);
            if !freed.is_multiple_of(0x5000) {
                push(ActionCode::FREE_COMPLETED, freed, 64);
            } else {
                live.push(freed);
            }
        }
    }
    let mut snapshot = Snapshot::default();
    snapshot.device_traces.push(trace);
    let replay = Replay::seeded_on(&snapshot, 0, None, 1);
    let build = |threads| {
        let index = LifetimeIndex::new(
            &replay.allocations,
            replay.event_allocations.len(),
            &replay.event_allocations.closed,
            threads,
        );
        (
            index.level_first.to_vec(),
            index.bucket_first.to_vec(),
            index.by_start.to_vec(),
            index.by_end.to_vec(),
        )
    };
    let one = build(1);
    assert!(
        one.2.len() == 3000 && one.1.len() > 100,
        "{} {}",
        one.2.len(),
        one.1.len()
    );
    for threads in [2, 3, 7, 16, 5000] {
        assert_eq!(build(threads), one, "{threads} threads");
    }
}
