//! `segments(snapshot)` and `memory(snapshot)`: folded stacks for `flamegraph.pl`, one line
//! per block plus its rounding waste, with each stack formatted once.

use super::*;

/// Which of torch's two folded-stack reports [`folded`] prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldedKind {
    /// `segments(snapshot)`: lines prefixed `stream_{stream};seg_{address}`.
    Segments,
    /// `memory(snapshot)`: lines prefixed `stream_{stream}` only, so a flame graph merges
    /// the same stack across segments.
    Memory,
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

/// torch's `_write_blocks`, with the formatted frames of each stack computed once: a long run
/// has thousands of blocks but few distinct stacks.
pub(super) struct FoldedWriter<'a> {
    snapshot: &'a Snapshot,
    fragments: Vec<Option<String>>,
    /// A bound on each fragment's length, by stack (filled on first use).
    fragment_lens: Vec<Option<usize>>,
    /// Set when a line would have taken the output past [`MAX_FOLDED_BYTES`]; writing stops.
    pub(super) cut: bool,
}

impl<'a> FoldedWriter<'a> {
    pub(super) fn new(snapshot: &'a Snapshot) -> Self {
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
    pub(super) fn size_bound(&mut self, prefix_len: usize, blocks: &[Block]) -> usize {
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
    pub(super) fn write_blocks(
        &mut self,
        out: &mut String,
        prefix: &str,
        blocks: &[Block],
    ) -> fmt::Result {
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
