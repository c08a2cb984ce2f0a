//! Memory of the replay on a leak trace, measured by a counting allocator (not estimated):
//! it grows linearly with the never-freed allocations, and the analysis cache's
//! `Loaded::approx_bytes` says what a loaded snapshot really holds.
//!
//! Copying the live set at every checkpoint, as the replay once did, made a leak of n
//! allocations cost O(n^2) bytes: 10M never-freed allocations were killed at 23.5 GB.

use snapview::analysis::Analysis;
use snapview::server::cache::Loaded;
use snapview::snapshot::{ActionCode, Snapshot, Trace};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, keeping count of the bytes held.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's own arguments, so `System`'s
// guarantees are this allocator's; the counting beside it touches only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            HELD.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() {
            HELD.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        unsafe { System.dealloc(block, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() {
            HELD.fetch_add(new_size, Ordering::Relaxed);
            HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The count is process-wide: one measurement at a time.
static MEASURING: Mutex<()> = Mutex::new(());

fn held() -> usize {
    HELD.load(Ordering::Relaxed)
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
    let before = held();
    let analysis = Analysis::new(&snapshot);
    let kept = held() - before;
    let replayed = analysis.devices[0].replay.allocations.len();
    assert_eq!(replayed, allocations);
    // The replay's own account agrees with the allocator's.
    let counted = analysis.heap_bytes() as f64;
    assert!(
        (counted - kept as f64).abs() <= kept as f64 * 0.02,
        "the replay counts {counted} heap bytes, the allocator {kept}"
    );
    kept as f64 / allocations as f64
}

#[test]
fn replay_memory_is_linear_in_never_freed_allocations() {
    let _one_at_a_time = MEASURING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
    let _one_at_a_time = MEASURING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = held();
    let loaded = Loaded::new(
        (leak_snapshot(200_000), Default::default()),
        &Default::default(),
    );
    let kept = (held() - before) as f64;
    let counted = loaded.approx_bytes() as f64;
    assert!(
        counted >= kept * 0.95 && counted <= kept * 1.1,
        "approx_bytes says {counted}, the allocator holds {kept}"
    );
}
