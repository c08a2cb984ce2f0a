//! Bytes landing in a file as an upload's do: written a piece at a time, each piece told to
//! the `Landing` a reader waits on.
#![allow(dead_code)]

use snapview::pickle::Landing;
use std::os::unix::fs::FileExt as _;

/// Writes `data` into `file` in pieces of 1 to `largest` bytes (seeded by its length), telling
/// `landing` after each and yielding the thread after about one in `yield_every`; stops at
/// `cut_at` when given, and ends the landing whole or cut.
pub fn land_in_pieces(
    file: &std::fs::File,
    data: &[u8],
    landing: &Landing,
    cut_at: Option<usize>,
    largest: usize,
    yield_every: usize,
) {
    let mut rng = super::rng::Rng::new(data.len() as u64);
    let end = cut_at.unwrap_or(data.len());
    let mut at = 0;
    while at < end {
        let piece = (1 + rng.below(largest)).min(end - at);
        file.write_all_at(&data[at..at + piece], at as u64)
            .expect("writes");
        at += piece;
        landing.landed(at);
        if rng.below(yield_every) == 0 {
            std::thread::yield_now();
        }
    }
    landing.end(cut_at.is_none());
}
