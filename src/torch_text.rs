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

use crate::snapshot::{Block, BlockState, Segment, Snapshot, StackId};
use serde::Serialize;
use std::fmt::{self, Write};

/// torch's `PAGE_SIZE`: one character of the `segsum` page map stands for 20 MiB.
pub const PAGE_SIZE: u64 = 20 * 1024 * 1024;

/// Which of torch's two folded-stack reports [`folded`] prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldedKind {
    /// `segments(snapshot)`: lines prefixed `stream_{stream};seg_{address}`.
    Segments,
    /// `memory(snapshot)`: lines prefixed `stream_{stream}` only, so a flame graph merges
    /// the same stack across segments.
    Memory,
}

/// The `legend` string `segsum` appends, verbatim (it starts with an empty line).
const LEGEND: &str = "
Legend:
    [a     ] - a segment in the allocator
     ^-- a page 20.0MiB of memory in the segment
    a-z: pages filled with a single block's content
    ' ': page is completely free
    *: page if completely full with multiple blocks
    0-9: page is partially full with tensors of multiple blocks (9 == 90% full)
    (X% internal) - of the free memory, X% is free because we rounded the size of the allocation.
";

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

/// `segsum(snapshot)`, byte for byte: how the allocator has filled its segments.
///
/// Segments are visited in torch's order: a stable sort by `(total_size, calc_active)`. Only
/// segments of at least [`PAGE_SIZE`] get a page-map line, but every segment counts in the
/// totals. The page map places each `active_allocated` block at its offset in the segment (the
/// running sum of the *rounded* sizes of the blocks before it) with its *requested* length,
/// so rounding waste shows as free space. A page touched by one such block shows the block's
/// letter (`a` + its index among the segment's active blocks, mod 26); a page touched by
/// several shows the tenths of the page they fill (`0`-`9`, `*` when full), with the fraction
/// accumulated in floating point exactly as torch does.
///
/// A file whose segments are larger than any machine's memory (a hostile or corrupt size such
/// as 2^63) would need a page map of billions of characters, which torch itself cannot build
/// (it raises `MemoryError`); it is refused with [`ReportTooLarge`] before anything is sized by
/// it.
pub fn stats(snapshot: &Snapshot) -> Result<String, ReportTooLarge> {
    check_page_maps(snapshot)?;
    Ok(render(|out| write_stats(out, snapshot)))
}

/// Characters of `segsum` page maps a file may need in all: 2^24 pages of 20 MiB is 320 TiB of
/// reserved memory, a hundred times more than the largest machines hold.
const MAX_PAGE_MAP_CHARS: u128 = 1 << 24;

/// Page cells the blocks of a file may touch in all. Blocks of a real segment do not overlap,
/// so each page is touched once or twice; hostile requested sizes make every block span the
/// whole segment.
const MAX_PAGE_MAP_WORK: u128 = 1 << 26;

/// A report that would be too large to produce, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReportTooLarge(String);

/// The pages of a segment's map (0 for a segment below [`PAGE_SIZE`], which gets no map line
/// but still needs its pages counted: torch builds its map anyway).
fn page_count(total_size: u64) -> u128 {
    u128::from(total_size).div_ceil(u128::from(PAGE_SIZE))
}

/// Refuses a snapshot whose page maps would be absurdly large, before any is allocated.
fn check_page_maps(snapshot: &Snapshot) -> Result<(), ReportTooLarge> {
    let mut chars = 0u128;
    let mut work = 0u128;
    for segment in &snapshot.segments {
        let pages = page_count(segment.total_size);
        chars += pages;
        if chars > MAX_PAGE_MAP_CHARS {
            return Err(ReportTooLarge(format!(
                "the segments total more than {} (the segment at address {} alone is {} bytes); no machine has that much memory, so this snapshot's sizes are corrupt and `stats` refuses to draw their page maps",
                format_size_f64((MAX_PAGE_MAP_CHARS * u128::from(PAGE_SIZE)) as f64),
                segment.address,
                segment.total_size
            )));
        }
        for block in &segment.blocks {
            work += u128::from(block.requested_size)
                .div_ceil(u128::from(PAGE_SIZE))
                .min(pages)
                + 1;
        }
        if work > MAX_PAGE_MAP_WORK {
            return Err(ReportTooLarge(format!(
                "the blocks of the segment at address {} overlap far beyond its size (their requested sizes exceed it); this snapshot is corrupt and `stats` refuses to draw its page maps",
                segment.address
            )));
        }
    }
    Ok(())
}

fn write_stats(out: &mut String, snapshot: &Snapshot) -> fmt::Result {
    let page = i128::from(PAGE_SIZE);
    writeln!(
        out,
        "Summary of segments >= {} in size",
        format_size(PAGE_SIZE)
    )?;
    let mut order: Vec<(&Segment, (u64, i128))> = snapshot
        .segments
        .iter()
        .map(|s| (s, (s.total_size, calc_active(s))))
        .collect();
    // `sort_by_key` is stable, like Python's `sorted`: equal keys keep file order.
    order.sort_by_key(|&(_, key)| key);

    let (mut total_reserved, mut total_allocated) = (0i128, 0i128);
    let (mut free_external, mut free_internal) = (0i128, 0i128);
    for (segment, _) in order {
        let total_size = i128::from(segment.total_size);
        total_reserved += total_size;

        let (mut seg_external, mut seg_internal, mut seg_allocated) = (0i128, 0i128, 0i128);
        // (offset in the segment, requested length) of each active block.
        let mut ranges: Vec<(i128, i128)> = Vec::new();
        let mut offset = 0i128;
        for block in &segment.blocks {
            let size = i128::from(block.size);
            if block.state == BlockState::ActiveAllocated {
                let allocated = accounted_size(block);
                ranges.push((offset, allocated));
                seg_allocated += allocated;
                seg_internal += size - allocated;
            } else {
                seg_external += size;
            }
            offset += size;
        }
        total_allocated += seg_allocated;
        free_external += seg_external;
        free_internal += seg_internal;

        // Python's `//` floors; with a positive divisor that is `div_euclid`.
        let pages = usize::try_from((total_size - 1).div_euclid(page) + 1).unwrap_or(0);
        let mut occupied = vec![' '; pages];
        let mut frac = vec![0.0f64; pages];
        for (i, &(start, size)) in ranges.iter().enumerate() {
            let finish = start + size;
            // Only pages inside the segment are drawn (see below), so the loop visits no
            // others: a block's size alone must not decide how long it runs.
            let first = start.div_euclid(page).max(0);
            let last = ((finish - 1).div_euclid(page) + 1).min(pages as i128);
            let letter = char::from(b'a' + (i % 26) as u8);
            for j in first..last {
                // torch would raise IndexError for blocks past the segment's end; skip them.
                let Some(slot) = usize::try_from(j).ok().filter(|&j| j < pages) else {
                    continue;
                };
                let s = start.max(j * page);
                let e = finish.min((j + 1) * page);
                frac[slot] += (e - s) as f64 / page as f64;
                if occupied[slot] != ' ' {
                    // `int()` truncates; an index past '*' would be torch's IndexError.
                    let tenths = (frac[slot] * 10.0) as usize;
                    occupied[slot] = "0123456789*".chars().nth(tenths).unwrap_or('*');
                } else {
                    occupied[slot] = letter;
                }
            }
        }
        if segment.total_size >= PAGE_SIZE {
            let body: String = occupied.into_iter().collect();
            let stream = if segment.stream != 0 {
                format!(" stream_{}", segment.stream)
            } else {
                String::new()
            };
            writeln!(
                out,
                "[{body}] {} allocated, {} free{stream}",
                bytes_repr(total_size),
                report_free(seg_external, seg_internal)
            )?;
        }
    }
    writeln!(out, "segments: {}", snapshot.segments.len())?;
    writeln!(out, "total_reserved: {}", bytes_repr(total_reserved))?;
    writeln!(out, "total_allocated: {}", bytes_repr(total_allocated))?;
    writeln!(
        out,
        "total_free: {}",
        report_free(free_external, free_internal)
    )?;
    out.push_str(LEGEND);
    Ok(())
}

/// torch's `segments(snapshot)` or `memory(snapshot)` output (with `format_flamegraph` replaced
/// by the identity): folded stacks for `flamegraph.pl`, in torch's order (segments in file
/// order, blocks in address order).
///
/// Each block gives `PREFIX;STATE;FRAMES REQUESTED` and, when its rounded size differs from
/// what was requested, `PREFIX;STATE;<gaps> SIZE-REQUESTED`. FRAMES is the block's stack root
/// first, each frame `basename:line:name`, with torch's `_frame_filter` applied; a block with no
/// frames at all gives `<non-python>`, while one whose frames are all filtered out gives an empty
/// fragment, as torch does (it tests the list before filtering).
///
/// A file can make this output far larger than itself: blocks that share one frames list
/// through the pickle memo each print the whole stack. Past [`MAX_FOLDED_BYTES`] it is refused
/// with [`ReportTooLarge`].
pub fn folded(snapshot: &Snapshot, kind: FoldedKind) -> Result<String, ReportTooLarge> {
    let mut writer = FoldedWriter::new(snapshot);
    let prefix = |segment: &Segment| match kind {
        FoldedKind::Segments => format!("stream_{};seg_{}", segment.stream, segment.address),
        FoldedKind::Memory => format!("stream_{}", segment.stream),
    };
    // Sized before anything is written, so a refused report costs no output at all.
    let size = snapshot.segments.iter().fold(0usize, |size, segment| {
        size.saturating_add(writer.size_bound(prefix(segment).len(), &segment.blocks))
    });
    writer.cut = size > MAX_FOLDED_BYTES;
    let text = match writer.cut {
        true => String::new(),
        false => render(|out| {
            for segment in &snapshot.segments {
                writer.write_blocks(out, &prefix(segment), &segment.blocks)?;
            }
            Ok(())
        }),
    };
    match writer.cut {
        false => Ok(text),
        true => Err(ReportTooLarge(format!(
            "the folded stacks of this snapshot exceed {} (its blocks repeat very long stacks; real snapshots print a few MB), so they are not written",
            format_size(MAX_FOLDED_BYTES as u64)
        ))),
    }
}

/// The most folded-stack text one report may hold: 256 MiB, over a hundred times what the
/// largest real snapshot in the corpus prints (1.5 MB for 3.2 million events).
pub const MAX_FOLDED_BYTES: usize = 256 << 20;

/// The segments found in only one of two snapshots: the structure behind torch's
/// `compare(before['segments'], after['segments'])`, which [`compare`] renders as torch's text
/// and the compare page draws as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentCompare {
    /// Segments of `before` with no segment of the same address and size in `after`, in the
    /// order torch prints their addresses (CPython's set order), each `(address, size)` once.
    pub only_before: Vec<OnlySegment>,
    /// The same for `after`.
    pub only_after: Vec<OnlySegment>,
    /// Lines of folded stacks torch's text holds for those segments (a block and, where its
    /// requested size is not its size, a `<gaps>` line), so the page can say how long the
    /// download is without fetching it.
    pub folded_lines: u64,
}

/// One segment present in only one of the two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OnlySegment {
    pub address: u64,
    pub total_size: u64,
    /// Raw `cudaStream_t` value; 0 is the default stream.
    pub stream: u64,
    pub blocks: u64,
    /// Bytes in `active_allocated` and `active_pending_free` blocks (their rounded sizes).
    pub live_bytes: u64,
}

/// The segment-level match both [`segment_compare`] and [`compare`] start from.
///
/// Segments are matched by `(address, total_size)`, as torch does; the sets reproduce
/// CPython's so their differences iterate in the order Python prints.
struct SegmentMatch {
    before_set: py_set::PySet,
    after_set: py_set::PySet,
}

fn segment_key(segment: &Segment) -> py_set::Key {
    (segment.address, segment.total_size)
}

impl SegmentMatch {
    fn new(before: &Snapshot, after: &Snapshot) -> Self {
        let keys = |s: &Snapshot| s.segments.iter().map(segment_key).collect::<Vec<_>>();
        Self {
            before_set: py_set::PySet::from_keys(&keys(before)),
            after_set: py_set::PySet::from_keys(&keys(after)),
        }
    }

    /// The keys only in `before` (or, with `before_side` false, only in `after`), in torch's
    /// printed order.
    fn only_keys(&self, before_side: bool) -> Vec<py_set::Key> {
        let (mine, theirs) = self.sides(before_side);
        mine.difference(theirs).keys().collect()
    }

    /// The segments of `snapshot` (one side) absent from the other side, in file order: the
    /// order torch writes their folded stacks.
    fn only_segments<'a>(
        &'a self,
        snapshot: &'a Snapshot,
        before_side: bool,
    ) -> impl Iterator<Item = &'a Segment> + 'a {
        let (_, theirs) = self.sides(before_side);
        snapshot
            .segments
            .iter()
            .filter(move |segment| !theirs.contains(segment_key(segment)))
    }

    fn sides(&self, before_side: bool) -> (&py_set::PySet, &py_set::PySet) {
        if before_side {
            (&self.before_set, &self.after_set)
        } else {
            (&self.after_set, &self.before_set)
        }
    }
}

/// The segments in only one of the two snapshots, as data (see [`SegmentCompare`]).
pub fn segment_compare(before: &Snapshot, after: &Snapshot) -> SegmentCompare {
    let matched = SegmentMatch::new(before, after);
    let side = |snapshot: &Snapshot, before_side: bool| -> Vec<OnlySegment> {
        matched
            .only_keys(before_side)
            .into_iter()
            .filter_map(|key| {
                // A hostile file may repeat a key; the set lists it once, for its first segment.
                let segment = snapshot.segments.iter().find(|s| segment_key(s) == key)?;
                let live = segment.blocks.iter().filter(|b| {
                    matches!(
                        b.state,
                        BlockState::ActiveAllocated | BlockState::ActivePendingFree
                    )
                });
                Some(OnlySegment {
                    address: segment.address,
                    total_size: segment.total_size,
                    stream: segment.stream,
                    blocks: segment.blocks.len() as u64,
                    live_bytes: live.fold(0u64, |sum, b| sum.saturating_add(b.size)),
                })
            })
            .collect()
    };
    let folded_lines = [(before, true), (after, false)]
        .into_iter()
        .flat_map(|(snapshot, before_side)| matched.only_segments(snapshot, before_side))
        .flat_map(|segment| &segment.blocks)
        .map(|block| 1 + u64::from(i128::from(block.size) != accounted_size(block)))
        .sum();
    SegmentCompare {
        only_before: side(before, true),
        only_after: side(after, false),
        folded_lines,
    }
}

/// What torch prints for `compare(before['segments'], after['segments'])`: a rendering of
/// [`segment_compare`]'s match.
///
/// The first two lines are the ones torch `print`s to stdout, `only_before = [...]` and
/// `only_after = [...]`: addresses in the iteration order of the Python set difference it
/// builds, which the private `py_set` module reproduces from CPython's set implementation. The
/// rest is the string torch returns: the folded stacks (as in [`folded`]) of the segments only
/// in `before`, prefixed `only_before;stream_S;seg_A`, then of those only in `after`, each in
/// file order.
pub fn compare(before: &Snapshot, after: &Snapshot) -> String {
    let matched = SegmentMatch::new(before, after);
    let mut before_writer = FoldedWriter::new(before);
    let mut after_writer = FoldedWriter::new(after);
    // The folded stacks of the segments in only one snapshot, sized before any is written.
    let mut size = 0usize;
    for segment in matched.only_segments(before, true) {
        size = size.saturating_add(before_writer.size_bound(64, &segment.blocks));
    }
    for segment in matched.only_segments(after, false) {
        size = size.saturating_add(after_writer.size_bound(64, &segment.blocks));
    }
    let too_large = size > MAX_FOLDED_BYTES;
    let mut text = render(|out| {
        for (label, before_side) in [("only_before", true), ("only_after", false)] {
            let addresses: Vec<String> = matched
                .only_keys(before_side)
                .iter()
                .map(|(a, _)| a.to_string())
                .collect();
            writeln!(out, "{label} = [{}]", addresses.join(", "))?;
        }
        if too_large {
            return Err(fmt::Error);
        }
        for (label, snapshot, writer, before_side) in [
            ("only_before", before, &mut before_writer, true),
            ("only_after", after, &mut after_writer, false),
        ] {
            for segment in matched.only_segments(snapshot, before_side) {
                let prefix = format!("{label};stream_{};seg_{}", segment.stream, segment.address);
                writer.write_blocks(out, &prefix, &segment.blocks)?;
            }
        }
        Ok(())
    });
    if too_large || before_writer.cut || after_writer.cut {
        // Shown as text, so the reason goes where the rest would have been.
        text.push_str(&format!(
            "... cut at {}: the stacks of these segments repeat beyond any real snapshot\n",
            format_size(MAX_FOLDED_BYTES as u64)
        ));
    }
    text
}

/// torch's `_write_blocks`, with the formatted frames of each stack computed once: a long run
/// has thousands of blocks but few distinct stacks.
struct FoldedWriter<'a> {
    snapshot: &'a Snapshot,
    fragments: Vec<Option<String>>,
    /// A bound on each fragment's length, by stack (filled on first use).
    fragment_lens: Vec<Option<usize>>,
    /// Set when a line would have taken the output past [`MAX_FOLDED_BYTES`]; writing stops.
    cut: bool,
}

impl<'a> FoldedWriter<'a> {
    fn new(snapshot: &'a Snapshot) -> Self {
        Self {
            snapshot,
            fragments: vec![None; snapshot.stacks.len()],
            fragment_lens: Vec::new(),
            cut: false,
        }
    }

    /// torch's `frames_fragment`: `<non-python>` for an empty stack, else the kept frames root
    /// first, joined by `;`. `None` if it alone would pass [`MAX_FOLDED_BYTES`] (a stack can
    /// repeat one frame with a long name a million times); its length is summed first, so such
    /// a fragment is never built.
    fn fragment(&mut self, stack: StackId) -> Option<&str> {
        let snapshot = self.snapshot;
        let kept = move || {
            snapshot
                .stacks
                .get(stack)
                .iter()
                .rev()
                .map(|&id| snapshot.frames.get(id))
                .filter(|frame| !frame.is_hidden())
        };
        let build = || {
            let frames = snapshot.stacks.get(stack);
            if frames.is_empty() {
                return Some("<non-python>".to_owned());
            }
            // basename, name, `:`, `:`, `;` and at most 20 digits of line number.
            let length: usize = kept()
                .map(|frame| frame.basename().len() + frame.name.len() + 23)
                .sum();
            if length > MAX_FOLDED_BYTES {
                return None;
            }
            let mut text = String::new();
            // torch's `_frame_filter` uses the same two lists as MemoryViz.js, which is what
            // `Frame::is_hidden` implements.
            for frame in kept() {
                if !text.is_empty() {
                    text.push(';');
                }
                let _ = write!(text, "{}:{}:{}", frame.basename(), frame.line, frame.name);
            }
            Some(text)
        };
        match self.fragments.get_mut(stack as usize) {
            Some(slot) => {
                if slot.is_none() {
                    *slot = Some(build()?);
                }
                slot.as_deref()
            }
            // An id outside the table reads as the empty stack (`StackTable::get`).
            None => Some("<non-python>"),
        }
    }

    /// At least as many bytes as [`FoldedWriter::write_blocks`] writes for `blocks` (without
    /// building any of it): a line and a `<gaps>` line per block.
    fn size_bound(&mut self, prefix_len: usize, blocks: &[Block]) -> usize {
        let mut size = 0usize;
        for block in blocks {
            let fragment = self.fragment_len(block.stack);
            let line = (prefix_len + block.state.name().len() + 48).saturating_add(fragment);
            size = size.saturating_add(line.saturating_mul(2));
        }
        size
    }

    /// At least the length of [`FoldedWriter::fragment`], from the frames' texts alone.
    fn fragment_len(&mut self, stack: StackId) -> usize {
        let snapshot = self.snapshot;
        let index = stack as usize;
        if self.fragment_lens.len() < self.fragments.len() {
            self.fragment_lens = vec![None; self.fragments.len()];
        }
        match self.fragment_lens.get_mut(index) {
            Some(Some(length)) => *length,
            Some(slot) => {
                // basename, name, `:`, `:`, `;` and at most 20 digits of line number.
                let length = snapshot
                    .stacks
                    .get(stack)
                    .iter()
                    .map(|&id| snapshot.frames.get(id))
                    .fold(16usize, |sum, frame| {
                        sum.saturating_add(frame.basename().len() + frame.name.len() + 23)
                    });
                *slot = Some(length);
                length
            }
            None => 16,
        }
    }

    /// One line per block and a `<gaps>` line for its rounding waste. torch <= 2.0 blocks keep
    /// a `history` list; our model holds its first entry, which is the block's allocation.
    fn write_blocks(&mut self, out: &mut String, prefix: &str, blocks: &[Block]) -> fmt::Result {
        for block in blocks {
            let state = block.state.name();
            let accounted = accounted_size(block);
            // A line is the prefix, state and fragment plus at most 48 bytes of numbers and
            // separators; checked before writing, so no line is built past the bound.
            let fragment = self.fragment(block.stack);
            let line = fragment.map_or(usize::MAX, |f| prefix.len() + state.len() + f.len() + 48);
            let Some(fragment) = fragment
                .filter(|_| out.len().saturating_add(line.saturating_mul(2)) <= MAX_FOLDED_BYTES)
            else {
                self.cut = true;
                return Err(fmt::Error);
            };
            writeln!(out, "{prefix};{state};{fragment} {accounted}")?;
            let gaps = i128::from(block.size) - accounted;
            if gaps != 0 {
                writeln!(out, "{prefix};{state};<gaps> {gaps}")?;
            }
        }
        Ok(())
    }
}

/// Just enough of CPython's `set` (Objects/setobject.c, 3.8 to 3.13) to reproduce the order in
/// which `compare` lists the addresses of `before_segs - after_segs`.
///
/// A set's iteration order is its hash table's slot order, which follows from the hashes, the
/// table size and the insertion order. torch builds each set with a set comprehension
/// (one-by-one adds, resizing as the table fills) and subtracts with `set.__sub__`, which either
/// adds the survivors to a fresh set or, when the left set is over four times the size of the
/// right one, copies the left set and deletes the common keys. Both paths are modelled here.
mod py_set {
    /// A `(address, total_size)` tuple of Python ints.
    pub(super) type Key = (u64, u64);

    const MIN_SIZE: usize = 8;
    const LINEAR_PROBES: usize = 9;
    const PERTURB_SHIFT: u32 = 5;

    /// `_PyHASH_MODULUS`: Python hashes a non-negative int as its value modulo 2^61 - 1.
    const HASH_MODULUS: u64 = (1 << 61) - 1;
    const XXPRIME_1: u64 = 11_400_714_785_074_694_791;
    const XXPRIME_2: u64 = 14_029_467_366_897_019_727;
    const XXPRIME_5: u64 = 2_870_177_450_012_600_261;

    /// `hash((a, b))` for non-negative ints, as the unsigned bits of `Py_hash_t` (the xxHash-based
    /// `tuplehash` of Python >= 3.8).
    pub(super) fn hash(key: Key) -> u64 {
        let mut acc = XXPRIME_5;
        for lane in [key.0 % HASH_MODULUS, key.1 % HASH_MODULUS] {
            acc = acc.wrapping_add(lane.wrapping_mul(XXPRIME_2));
            acc = acc.rotate_left(31);
            acc = acc.wrapping_mul(XXPRIME_1);
        }
        acc = acc.wrapping_add(2 ^ (XXPRIME_5 ^ 3_527_539));
        if acc == u64::MAX { 1_546_275_796 } else { acc }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Slot {
        Empty,
        /// A deleted entry: still occupies its slot for probing, skipped by iteration.
        Dummy,
        Active(u64, Key),
    }

    /// A set of keys laid out as CPython would lay them out.
    #[derive(Debug, Clone)]
    pub(super) struct PySet {
        slots: Vec<Slot>,
        /// Active plus dummy slots.
        fill: usize,
        /// Active slots.
        used: usize,
    }

    /// The slots CPython visits for `hash` in a table of `mask + 1` slots: at each stop, the
    /// slot itself and (when they fit before the end) the next `LINEAR_PROBES` ones; then the
    /// perturbed jump `i = i * 5 + 1 + perturb`.
    fn probe(hash: u64, mask: usize, mut visit: impl FnMut(usize) -> bool) -> usize {
        let mut perturb = hash;
        let mut i = (hash as usize) & mask;
        loop {
            let run = if i + LINEAR_PROBES <= mask {
                LINEAR_PROBES
            } else {
                0
            };
            for slot in i..=i + run {
                if visit(slot) {
                    return slot;
                }
            }
            perturb >>= PERTURB_SHIFT;
            i = (i
                .wrapping_mul(5)
                .wrapping_add(1)
                .wrapping_add(perturb as usize))
                & mask;
        }
    }

    impl PySet {
        /// `set()`: an empty table of `PySet_MINSIZE` slots.
        pub(super) fn new() -> Self {
            Self {
                slots: vec![Slot::Empty; MIN_SIZE],
                fill: 0,
                used: 0,
            }
        }

        /// `{k for k in keys}`.
        pub(super) fn from_keys(keys: &[Key]) -> Self {
            let mut set = Self::new();
            for &key in keys {
                set.add(key);
            }
            set
        }

        fn mask(&self) -> usize {
            self.slots.len() - 1
        }

        /// Keys in iteration order.
        pub(super) fn keys(&self) -> impl Iterator<Item = Key> + '_ {
            self.slots.iter().filter_map(|slot| match slot {
                Slot::Active(_, key) => Some(*key),
                _ => None,
            })
        }

        pub(super) fn len(&self) -> usize {
            self.used
        }

        /// `set_lookkey`: the slot holding `key`, if any.
        fn find(&self, key: Key) -> Option<usize> {
            let hash = hash(key);
            let slot = probe(hash, self.mask(), |i| match self.slots[i] {
                Slot::Empty => true,
                Slot::Active(h, k) => h == hash && k == key,
                Slot::Dummy => false,
            });
            matches!(self.slots[slot], Slot::Active(..)).then_some(slot)
        }

        pub(super) fn contains(&self, key: Key) -> bool {
            self.find(key).is_some()
        }

        /// `set_insert_clean`: place a key known to be absent in a table without dummies.
        fn insert_clean(slots: &mut [Slot], hash: u64, key: Key) {
            let mask = slots.len() - 1;
            let slot = probe(hash, mask, |i| slots[i] == Slot::Empty);
            slots[slot] = Slot::Active(hash, key);
        }

        /// `set_table_resize`: the smallest power of two above `min_used` (at least 8), the
        /// active keys re-placed in old slot order, dummies dropped.
        fn resize(&mut self, min_used: usize) {
            let mut size = MIN_SIZE;
            while size <= min_used {
                size <<= 1;
            }
            let old = std::mem::replace(&mut self.slots, vec![Slot::Empty; size]);
            for slot in old {
                if let Slot::Active(hash, key) = slot {
                    Self::insert_clean(&mut self.slots, hash, key);
                }
            }
            self.fill = self.used;
        }

        /// `set_add_entry`, on a table without dummies (the only kind torch adds to here).
        pub(super) fn add(&mut self, key: Key) {
            let hash = hash(key);
            let mask = self.mask();
            let slots = &self.slots;
            let slot = probe(hash, mask, |i| match slots[i] {
                Slot::Empty => true,
                Slot::Active(h, k) => h == hash && k == key,
                Slot::Dummy => false,
            });
            if self.slots[slot] != Slot::Empty {
                return;
            }
            self.slots[slot] = Slot::Active(hash, key);
            self.fill += 1;
            self.used += 1;
            if self.fill * 5 >= mask * 3 {
                self.resize(if self.used > 50_000 {
                    self.used * 2
                } else {
                    self.used * 4
                });
            }
        }

        /// `set_discard_entry`: leave a dummy behind.
        fn discard(&mut self, key: Key) {
            if let Some(slot) = self.find(key) {
                self.slots[slot] = Slot::Dummy;
                self.used -= 1;
            }
        }

        /// `set.copy()` (`make_new_set` + `set_merge` into an empty set).
        fn copy(&self) -> Self {
            let mut copy = Self::new();
            if self.used == 0 {
                return copy;
            }
            if (copy.fill + self.used) * 5 >= copy.mask() * 3 {
                copy.resize((copy.used + self.used) * 2);
            }
            if copy.mask() == self.mask() && self.fill == self.used {
                // Same size and no dummies: CPython copies the table slot for slot.
                copy.slots.clone_from(&self.slots);
            } else {
                for slot in &self.slots {
                    if let Slot::Active(hash, key) = *slot {
                        Self::insert_clean(&mut copy.slots, hash, key);
                    }
                }
            }
            copy.fill = self.used;
            copy.used = self.used;
            copy
        }

        /// `self - other` (`set_difference`).
        pub(super) fn difference(&self, other: &Self) -> Self {
            if (self.len() >> 2) > other.len() {
                // `set_copy_and_difference` + `set_difference_update_internal`. (Its swap of a
                // much larger `other` for the intersection cannot happen on this path.)
                let mut result = self.copy();
                for key in other.keys() {
                    result.discard(key);
                }
                if result.fill - result.used > result.mask() / 4 {
                    result.resize(if result.used > 50_000 {
                        result.used * 2
                    } else {
                        result.used * 4
                    });
                }
                return result;
            }
            let mut result = Self::new();
            for key in self.keys() {
                if !other.contains(key) {
                    result.add(key);
                }
            }
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::py_set::{self, PySet};
    use super::*;

    /// A hostile file can hold two segments with one address and size: Python's set (and so
    /// the list torch prints) has the key once, while torch writes the blocks of both.
    #[test]
    fn segment_compare_lists_a_repeated_segment_once_and_counts_all_its_lines() {
        let block = |size, requested_size, state| Block {
            address: 0,
            size,
            requested_size,
            state,
            stack: 0,
        };
        let segment = |address, blocks| Segment {
            address,
            total_size: 100,
            stream: 7,
            blocks,
            ..Segment::default()
        };
        let before = Snapshot {
            segments: vec![
                segment(
                    1,
                    vec![
                        block(60, 50, BlockState::ActiveAllocated),
                        block(40, 40, BlockState::Inactive),
                    ],
                ),
                segment(1, vec![block(100, 100, BlockState::ActivePendingFree)]),
                segment(2, vec![block(100, 100, BlockState::ActiveAllocated)]),
            ],
            ..Snapshot::default()
        };
        let after = Snapshot {
            segments: vec![segment(2, Vec::new())],
            ..Snapshot::default()
        };
        let only = segment_compare(&before, &after);
        assert_eq!(
            only.only_before,
            vec![OnlySegment {
                address: 1,
                total_size: 100,
                stream: 7,
                blocks: 2,
                live_bytes: 60,
            }]
        );
        assert!(only.only_after.is_empty());
        // Three blocks and the first one's `<gaps>` line, as torch's text has them.
        assert_eq!(only.folded_lines, 4);
        let text = compare(&before, &after);
        assert!(
            text.starts_with("only_before = [1]\nonly_after = []\n"),
            "{text}"
        );
        assert_eq!(text.lines().count() - 2, 4, "{text}");
    }

    /// Cases and expected strings from Python's own `_format_size`.
    #[test]
    fn format_size_matches_python() {
        let cases: [(u64, &str); 17] = [
            (0, "0.0B"),
            (1, "1.0B"),
            (512, "512.0B"),
            (1023, "1023.0B"),
            (1024, "1.0KiB"),
            (1075, "1.0KiB"),
            (1076, "1.1KiB"),
            (1280, "1.2KiB"), // 1.25 exactly: Python rounds half to even
            (1536, "1.5KiB"),
            (104_857, "102.4KiB"),
            (1_048_524, "1023.9KiB"),
            (PAGE_SIZE, "20.0MiB"),
            (1_073_741_823, "1024.0MiB"),
            (2_684_354_560, "2.5GiB"),
            (1 << 63, "8.0EiB"),
            (u64::MAX, "16.0EiB"),
            (2816, "2.8KiB"),
        ];
        for (bytes, expected) in cases {
            assert_eq!(format_size(bytes), expected, "{bytes}");
        }
        assert_eq!(bytes_repr(3 * (1i128 << 80)), "3.0YiB");
    }

    #[test]
    fn report_free_matches_python() {
        assert_eq!(report_free(0, 0), "0.0B");
        assert_eq!(report_free(7, 1), "8.0B (12.5% internal)");
        // 0.25% exactly: half to even, as Python prints it.
        assert_eq!(report_free(399, 1), "400.0B (0.2% internal)");
        assert_eq!(report_free(397, 3), "400.0B (0.8% internal)");
        assert_eq!(report_free(2, 1), "3.0B (33.3% internal)");
    }

    /// Hashes printed by Python 3.11's `hash(...)`, as unsigned bits.
    #[test]
    fn tuple_hash_matches_python() {
        for (key, expected) in [
            (
                (139_732_499_562_496, 2_097_152),
                -7_379_835_831_677_852_320i64,
            ),
            ((0, 0), -8_458_139_203_682_520_985),
            ((1, 2), -3_550_055_125_485_641_917),
        ] {
            assert_eq!(py_set::hash(key), expected as u64, "{key:?}");
        }
    }

    fn addresses(set: &PySet) -> Vec<u64> {
        set.keys().map(|(a, _)| a).collect()
    }

    /// Orders printed by Python 3.11 for `[a for a, _ in (set(before) - set(after))]`.
    #[test]
    fn set_difference_order_matches_python() {
        const BASE: u64 = 139_732_499_562_496;
        let before: Vec<py_set::Key> = (0..30).map(|i| (BASE + i * 2_097_152, 2_097_152)).collect();
        let mut after: Vec<py_set::Key> = before[..5].to_vec();
        after.extend((0..10).map(|i| (BASE + (100 + i) * 20_971_520, 20_971_520)));
        let (b, a) = (PySet::from_keys(&before), PySet::from_keys(&after));
        let expected: Vec<u64> = vec![
            139732533116928,
            139732558282752,
            139732547796992,
            139732543602688,
            139732526825472,
            139732522631168,
            139732512145408,
            139732537311232,
            139732516339712,
            139732551991296,
            139732545699840,
            139732541505536,
            139732531019776,
            139732556185600,
            139732520534016,
            139732510048256,
            139732535214080,
            139732560379904,
            139732539408384,
            139732524728320,
            139732554088448,
            139732549894144,
            139732518436864,
            139732514242560,
            139732528922624,
        ];
        assert_eq!(addresses(&b.difference(&a)), expected);
        let expected: Vec<u64> = vec![
            139734743515136,
            139734680600576,
            139734617686016,
            139734785458176,
            139734701572096,
            139734722543616,
            139734638657536,
            139734659629056,
            139734596714496,
            139734764486656,
        ];
        assert_eq!(addresses(&a.difference(&b)), expected);
    }

    /// The copy-then-discard path, taken when the left set is over 4x the right one.
    #[test]
    fn set_copy_and_difference_order_matches_python() {
        const BASE: u64 = 139_732_499_562_496;
        let before: Vec<py_set::Key> = (0..40)
            .map(|i| (BASE + i * 2_097_152 * 3, 2_097_152 * (1 + i % 3)))
            .collect();
        let after = vec![before[3], before[17], (BASE - 2_097_152, 2_097_152)];
        let (b, a) = (PySet::from_keys(&before), PySet::from_keys(&after));
        let expected: Vec<u64> = vec![
            139732675723264,
            139732524728320,
            139732682014720,
            139732531019776,
            139732612808704,
            139732600225792,
            139732688306176,
            139732537311232,
            139732619100160,
            139732625391616,
            139732694597632,
            139732543602688,
            139732700889088,
            139732549894144,
            139732631683072,
            139732707180544,
            139732562477056,
            139732556185600,
            139732719763456,
            139732568768512,
            139732637974528,
            139732644265984,
            139732726054912,
            139732713472000,
            139732575059968,
            139732650557440,
            139732499562496,
            139732732346368,
            139732512145408,
            139732581351424,
            139732738637824,
            139732587642880,
            139732669431808,
            139732656848896,
            139732663140352,
            139732744929280,
            139732505853952,
            139732593934336,
        ];
        assert_eq!(addresses(&b.difference(&a)), expected);
        assert_eq!(addresses(&a.difference(&b)), vec![139732497465344]);
    }

    #[test]
    fn empty_snapshot_prints_torch_skeleton() {
        let text = stats(&Snapshot::default()).expect("an empty snapshot has no page maps");
        assert!(text.starts_with("Summary of segments >= 20.0MiB in size\nsegments: 0\n"));
        assert!(text.contains("total_free: 0.0B\n\nLegend:\n"));
        assert_eq!(
            folded(&Snapshot::default(), FoldedKind::Segments).expect("nothing to print"),
            ""
        );
        assert_eq!(
            compare(&Snapshot::default(), &Snapshot::default()),
            "only_before = []\nonly_after = []\n"
        );
    }
}
