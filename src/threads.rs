//! Work shared out to a few threads of this process: the parallel decoder's pre-scan and the
//! analysis after it. `--threads` (see [`crate::snapshot::default_threads`]) bounds them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `work(0..n)` on up to `threads` threads (the caller's among them when there is one item),
/// results in order. A panic in `work` is raised again here.
pub fn map_on_threads<T: Send>(
    threads: usize,
    n: usize,
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    if n <= 1 || threads <= 1 {
        return (0..n).map(work).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(n) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let result = work(i);
                    let mut results = results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    results[i] = Some(result);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .flatten()
        .collect()
}

/// Sets each `slice[i]` to `value(i)`, in as many runs as `threads`, each on a thread of its
/// own (on the caller's alone for one).
pub fn fill_on_threads<T: Send>(
    threads: usize,
    slice: &mut [T],
    value: impl Fn(usize) -> T + Sync,
) {
    let per_run = slice.len().div_ceil(threads.max(1)).max(1);
    let fill = |run: usize, items: &mut [T]| {
        let first = run * per_run;
        for (i, item) in items.iter_mut().enumerate() {
            *item = value(first + i);
        }
    };
    if threads <= 1 || slice.len() <= per_run {
        return fill(0, slice);
    }
    std::thread::scope(|scope| {
        for (run, items) in slice.chunks_mut(per_run).enumerate() {
            let fill = &fill;
            scope.spawn(move || fill(run, items));
        }
    });
}

/// What a scoped thread returned, or its panic raised again on this thread.
pub fn joined<T>(result: std::thread::Result<T>) -> T {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Allocations of 1 MiB and more get pages of their own, returned to the kernel when freed.
/// glibc otherwise raises this threshold to the largest block freed so far (up to 32 MiB), and
/// the reader's and the analysis's temporary buffers of a few MiB then live in the arenas, whose
/// free memory goes back only from the top: the ten-times file's peak held 30-40 MB of such
/// freed buffers (2-core VM 1.02 -> 0.98 GB; 16-core host 995-1011 -> 965-968 MB). The cost is
/// page faults of buffers mapped afresh: about 2% of the 287 MB file's read on the host. (Not
/// 2 MiB or more: the same peak, no faster; nor a fixed trim threshold of 4 MiB or more, which
/// keeps more at each arena's top.) The binary sets it first thing, and so do the benches, so
/// that they measure what it does.
pub fn free_large_blocks_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets a tuning parameter, under glibc's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_the_threads() {
        for threads in [1, 2, 7] {
            let squares = map_on_threads(threads, 50, |i| i * i);
            assert_eq!(squares, (0..50).map(|i| i * i).collect::<Vec<_>>());
        }
        assert!(map_on_threads(4, 0, |i| i).is_empty());
    }

    #[test]
    fn every_item_is_filled_whatever_the_threads() {
        for threads in [0, 1, 2, 7, 60] {
            for len in [0, 1, 5, 49] {
                let mut items = vec![0; len];
                fill_on_threads(threads, &mut items, |i| i * 3 + 1);
                assert_eq!(items, (0..len).map(|i| i * 3 + 1).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn a_panic_in_the_work_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| map_on_threads(3, 10, |i| assert_ne!(i, 6)));
        assert!(caught.is_err());
    }
}
