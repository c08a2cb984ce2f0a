fn main() {
    free_large_blocks_at_once();
    std::process::exit(snapview::cli::main());
}

/// Allocations of 1 MiB and more get pages of their own, returned to the kernel when freed.
/// glibc otherwise raises this threshold to the largest block freed so far (up to 32 MiB), and
/// the reader's and the analysis's temporary buffers of a few MiB then live in the arenas, whose
/// free memory goes back only from the top: the ten-times file's peak held 30-40 MB of such
/// freed buffers (2-core VM 1.02 -> 0.98 GB; 16-core host 995-1011 -> 965-968 MB). The cost is
/// page faults of buffers mapped afresh: about 2% of the 287 MB file's read on the host. (Not
/// 2 MiB or more: the same peak, no faster; nor a fixed trim threshold of 4 MiB or more, which
/// keeps more at each arena's top.)
fn free_large_blocks_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called before any other thread exists; `mallopt` only sets a tuning parameter.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
