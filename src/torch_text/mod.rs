//! The text reports of torch's own `torch/cuda/_memory_viz.py`, reproduced from our model.
//!
//! Users already trust (and script against) what `python -m torch.cuda._memory_viz` prints, so
//! these functions print the same bytes rather than a look-alike:
//!
//! - [`stats`] is `segsum(snapshot)`: a page map per segment of at least 20 MiB, then totals.
//! - [`folded`] is `segments(snapshot)` / `memory(snapshot)` before `flamegraph.pl` sees them:
//!   folded stacks, one line per block plus a `<gaps>` line for its rounding waste.
//! - [`compare`] is `compare(before['segments'], after['segments'])`: the two lists torch
//!   `print`s, then the folded stacks of the segments found in only one of the snapshots.
//!
//! Every number torch computes with Python integers is computed here in `i128`, so sums of
//! `u64` sizes cannot overflow and a block whose requested size exceeds its size (which torch
//! never writes, but which Python would happily subtract) gives the same negative gap.
//!
//! One file per report: `stats.rs` (`segsum`), `folded.rs` (`segments` / `memory`),
//! `segments.rs` (`compare`, and the structured segment compare the page draws), with
//! `py_set.rs` reproducing CPython's set order for it. This file holds the number formatting
//! they share.

mod folded;
mod py_set;
mod segments;
mod stats;
#[cfg(test)]
mod tests;

pub use folded::{FoldedKind, MAX_FOLDED_BYTES, folded};
pub use segments::{OnlySegment, SegmentCompare, compare, segment_compare};
pub use stats::{PAGE_SIZE, stats};

use crate::snapshot::{Block, BlockState, Segment, Snapshot, StackId};
use serde::Serialize;
use std::fmt::{self, Write};

/// Runs a writer against a fresh `String`. Writing into a `String` cannot fail; the
/// `fmt::Result` only lets the writers use `?` with `write!`.
fn render(write: impl FnOnce(&mut String) -> fmt::Result) -> String {
    let mut out = String::new();
    let _ = write(&mut out);
    out
}

/// torch's `_format_size` (what `Bytes.__repr__` prints): binary units, one decimal, at least
/// three characters wide (`0.0B`, `1023.0B`, `1.5KiB`, `20.0MiB`).
pub fn format_size(bytes: u64) -> String {
    format_size_f64(bytes as f64)
}

/// `_format_size` on a Python number. Python formats an `int` with `:3.1f` by converting it to
/// the nearest float, and Rust's `{:3.1}` rounds the exact binary value half-to-even as Python
/// does, so the digits agree.
fn format_size_f64(mut num: f64) -> String {
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"] {
        if num.abs() < 1024.0 {
            return format!("{num:3.1}{unit}B");
        }
        num /= 1024.0;
    }
    format!("{num:.1}YiB")
}

/// A Python integer (held as `i128`) as `Bytes(...)` prints it.
fn bytes_repr(num: i128) -> String {
    format_size_f64(num as f64)
}

/// torch's `_report_free`: the free total, and which share of it is rounding waste.
fn report_free(free_external: i128, free_internal: i128) -> String {
    let total = free_external + free_internal;
    let mut text = bytes_repr(total);
    if total != 0 {
        // Python's int / int is correctly rounded; both operands are exact in f64 below 2^53.
        let pct = (free_internal as f64 / total as f64) * 100.0;
        text.push_str(&format!(" ({pct:.1}% internal)"));
    }
    text
}

/// torch's `calc_active`: the rounded bytes of a segment's `active_allocated` blocks. It is only
/// the tie-breaker of the `segsum` order.
fn calc_active(segment: &Segment) -> i128 {
    segment
        .blocks
        .iter()
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| i128::from(b.size))
        .sum()
}

/// The bytes torch's `_block_extra` reports as allocated for a block: `requested_size`, or for
/// torch <= 2.0 files `history[0]['real_size']`, which our loader already stores there.
fn accounted_size(block: &Block) -> i128 {
    i128::from(block.requested_size)
}

/// A report that would be too large to produce, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReportTooLarge(String);
