//! The segment compare: which segments are in only one of two snapshots, as a structure for
//! the page and as torch's `compare(before['segments'], after['segments'])` text.

use super::folded::FoldedWriter;
use super::*;

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
