//! The counting allocator the memory tests share: the system allocator, keeping count of the
//! bytes live in the whole process (with its peak, and an optional limit) and on each thread
//! (with its peak), so a test measures what a piece of work holds or costs at its worst.
//!
//! A test binary makes it its allocator with
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;`; in the others it is never used.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The system allocator, counting.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Process-wide live bytes allowed; `usize::MAX`: no limit.
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Set by an allocation that would have passed the limit (see [`set_limit`]).
static OVER_LIMIT: AtomicBool = AtomicBool::new(false);
static OVER_LIMIT_REQUEST: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_LIVE: Cell<isize> = const { Cell::new(0) };
    static THREAD_PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Bytes live in the process now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The most bytes live in the process since [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new process-wide peak from what is live now, and returns that.
pub fn reset_peak() -> usize {
    let live = live();
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// Limits the process's live bytes (`usize::MAX`: no limit). An allocation that would pass it
/// is never made: its thread waits forever, without allocating, after [`over_limit`] says so
/// (returning null instead would abort the process before a test could report). Whoever set the
/// limit ends the process.
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::SeqCst);
}

/// The size of the allocation that would have passed the limit, once one has.
pub fn over_limit() -> Option<usize> {
    OVER_LIMIT
        .load(Ordering::SeqCst)
        .then(|| OVER_LIMIT_REQUEST.load(Ordering::Relaxed))
}

/// Runs `work` and returns its result with the peak bytes this thread had allocated beyond
/// what it held when it started (other threads' allocations do not count, so tests running in
/// parallel do not disturb the measure).
pub fn thread_peak_during<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let start = THREAD_LIVE.with(Cell::get);
    THREAD_PEAK.with(|peak| peak.set(start));
    let out = work();
    let peak = THREAD_PEAK.with(Cell::get);
    (out, usize::try_from(peak - start).unwrap_or(0))
}

/// Counts `size` more bytes before they are allocated, or waits forever past the limit.
fn admit(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    if live > LIMIT.load(Ordering::Relaxed) {
        LIVE.fetch_sub(size, Ordering::Relaxed);
        OVER_LIMIT_REQUEST.store(size, Ordering::Relaxed);
        OVER_LIMIT.store(true, Ordering::SeqCst);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    // A read first: most allocations set no new peak, and a write would contend across threads.
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

/// This thread's live bytes changed by `delta` (made).
fn note_thread(delta: isize) {
    // `try_with`: a thread's last frees run while its locals are torn down.
    let _ = THREAD_LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = THREAD_PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

/// An allocation of `size` bytes ended with `block`: counted for its thread when made, taken
/// back from the process's count when not.
fn allocated(block: *mut u8, size: usize) -> *mut u8 {
    if block.is_null() {
        LIVE.fetch_sub(size, Ordering::Relaxed);
    } else {
        note_thread(size as isize);
    }
    block
}

// SAFETY: every method forwards to `System` with the caller's own arguments, so `System`'s
// guarantees are this allocator's; the counting beside it touches only atomics and plain
// thread-locals (which never allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        admit(layout.size());
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        allocated(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        admit(layout.size());
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        allocated(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        unsafe { System.dealloc(block, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        note_thread(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old_size = layout.size();
        if new_size > old_size {
            admit(new_size - old_size);
        }
        // SAFETY: the caller's layout and pointer, as `GlobalAlloc` requires them, passed on.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if moved.is_null() {
            // The old block stays, as it was.
            if new_size > old_size {
                LIVE.fetch_sub(new_size - old_size, Ordering::Relaxed);
            }
        } else {
            if new_size < old_size {
                LIVE.fetch_sub(old_size - new_size, Ordering::Relaxed);
            }
            note_thread(new_size as isize - old_size as isize);
        }
        moved
    }
}
