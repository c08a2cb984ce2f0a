//! Memory of the replay on a leak trace, measured by a counting allocator (not estimated):
//! it grows linearly with the never-freed allocations, and the analysis cache's
//! `AnalysedSnapshot::approx_bytes` says what a loaded snapshot really holds.
//!
//! Copying the live set at every checkpoint, as the replay once did, made a leak of n
//! allocations cost O(n^2) bytes: 10M never-freed allocations were killed at 23.5 GB.

mod common;

use common::counting_alloc;
use snapview::analysis::Analysis;
use snapview::server::analysed::AnalysedSnapshot;
use snapview::snapshot::{ActionCode, Snapshot, Trace};
use std::sync::Mutex;

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

/// The count is process-wide: one measurement at a time.
static MEASURING: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MEASURING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What `make` returns, and the heap bytes it holds (allocated by it and not freed).
fn held_by<T>(make: impl FnOnce() -> T) -> (T, f64) {
    let before = counting_alloc::live();
    let made = make();
    (made, (counting_alloc::live() - before) as f64)
}

/// The shape `gen_leak_allocs.py` writes, plus some frees: `allocations` allocs at distinct
/// addresses, of which one in eight is freed a few hundred events later.
fn leak_snapshot(allocations: usize) -> Snapshot {
    let mut trace = Trace::default();
    let addr = |i: usize| 0x7f00_0000_0000 + i as u64 * 512;
    for i in 0..allocations {
        trace.push(ActionCode::ALLOC, addr(i), 16, 0, Some(i as i64), 0, 0, 0);
        if i % 8 == 0 && i >= 800 {
            let freed = addr(i - 800);
            trace.push(ActionCode::FREE_REQUESTED, freed, 16, 0, None, 0, 0, 0);
            trace.push(ActionCode::FREE_COMPLETED, freed, 16, 0, None, 0, 0, 0);
        }
    }
    let mut snapshot = Snapshot::default();
    snapshot.device_traces.push(trace);
    snapshot
}

/// Heap bytes the analysis of a leak of `allocations` keeps, per allocation.
fn analysis_bytes_per_allocation(allocations: usize) -> f64 {
    let snapshot = leak_snapshot(allocations);
    let (analysis, kept) = held_by(|| Analysis::new(&snapshot));
    let replayed = analysis.devices[0].replay.allocations.len();
    assert_eq!(replayed, allocations);
    // The replay's own account agrees with the allocator's.
    let counted = analysis.heap_bytes() as f64;
    assert!(
        (counted - kept).abs() <= kept * 0.02,
        "the replay counts {counted} heap bytes, the allocator {kept}"
    );
    kept / allocations as f64
}

#[test]
fn replay_memory_is_linear_in_never_freed_allocations() {
    let _one_at_a_time = one_at_a_time();
    let small = analysis_bytes_per_allocation(100_000);
    let large = analysis_bytes_per_allocation(300_000);
    // An allocation's lifetime (56 bytes), its two events (alloc and memory after it, 12
    // bytes each) and its two ids in the lifetime index (8): about 90 bytes, whatever the
    // length. Copies of the live set per checkpoint cost 120 more per allocation at 100k, 150
    // at 300k, and grow on.
    assert!(
        large < 100.0,
        "{large:.1} heap bytes per allocation at 300k allocations"
    );
    assert!(
        large < small * 1.1,
        "bytes per allocation grow with the trace: {small:.1} at 100k, {large:.1} at 300k"
    );
}

#[test]
fn the_cache_counts_what_a_loaded_leak_holds() {
    let _one_at_a_time = one_at_a_time();
    let (loaded, kept) = held_by(|| {
        AnalysedSnapshot::new(
            (leak_snapshot(200_000), Default::default()),
            &Default::default(),
        )
    });
    let counted = loaded.approx_bytes() as f64;
    assert!(
        counted >= kept * 0.95 && counted <= kept * 1.1,
        "approx_bytes says {counted}, the allocator holds {kept}"
    );
}

/// A trace of `events` with every column filled: times, streams, stacks, compile contexts,
/// user metadata, categories and an `oom`'s free bytes.
fn trace_with_every_column(events: usize) -> Trace {
    let mut trace = Trace {
        strings: vec![String::new(), "compiled".into(), "step 7".into()],
        ..Trace::default()
    };
    for i in 0..events {
        let addr = 0x7f00_0000_0000 + i as u64 * 4096;
        let stream = (i % 3) as u64 * 0x5555;
        let compile_context = (i % 5 == 0) as u32;
        let user_metadata = 2 * (i % 7 == 0) as u32;
        trace.push(
            ActionCode::ALLOC,
            addr,
            512 + i as u64,
            stream,
            Some(1_700_000_000_000_000 + i as i64 * 1000),
            (i % 97) as u32,
            compile_context,
            user_metadata,
        );
        if i % 11 == 0 {
            trace.set_category(i, if i % 2 == 0 { "forward" } else { "backward" });
        }
    }
    trace.push(ActionCode::OOM, 0, 1 << 30, 0, None, 0, 0, 0);
    trace.device_free.insert(trace.len() - 1, 1 << 20);
    trace
}

#[test]
fn a_snapshot_counts_the_heap_of_every_column() {
    let _one_at_a_time = one_at_a_time();
    let (snapshot, kept) = held_by(|| Snapshot {
        device_traces: vec![trace_with_every_column(200_000)],
        ..Snapshot::default()
    });
    let counted = snapshot.heap_bytes() as f64;
    // The columns are exact; the small tables (frames, stacks, texts) are counted by entry.
    assert!(
        counted >= kept * 0.95 && counted <= kept * 1.05,
        "heap_bytes says {counted}, the allocator holds {kept}"
    );
}
