//! Stacks of live memory: which code holds the bytes.

use super::replay::{AllocationId, Allocations};
use crate::snapshot::{Snapshot, StackId};
use serde::Serialize;

/// Bytes held by allocations with one stack.
/// (The stored index keeps `stack`, which the JSON skips, beside the summary.)
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct StackBytes {
    pub bytes: u64,
    pub allocations: usize,
    /// Display frames, innermost first, filtered like PyTorch's viewer, in
    /// [`FrameLabel`](crate::snapshot::FrameLabel)'s full form (`file:line:name`);
    /// `<non-python>` when none remain.
    pub frames: Vec<String>,
    #[serde(skip)]
    pub stack: StackId,
}

/// Frames of a stack as PyTorch's viewer shows them, innermost first.
pub fn display_frames(snapshot: &Snapshot, stack: StackId) -> Vec<String> {
    let frames: Vec<String> = snapshot
        .stacks
        .get(stack)
        .iter()
        .map(|&id| snapshot.frames.get(id))
        .filter(|frame| !frame.is_hidden())
        .map(|frame| frame.label().to_string())
        .collect();
    if frames.is_empty() {
        vec!["<non-python>".to_owned()]
    } else {
        frames
    }
}

/// The `limit` stacks holding the most bytes among `live`, largest first (ties by stack id, so
/// output is stable).
pub fn top_stacks(
    snapshot: &Snapshot,
    allocations: &Allocations,
    live: &[AllocationId],
    limit: usize,
) -> Vec<StackBytes> {
    let mut by_stack: rustc_hash::FxHashMap<StackId, (u64, usize)> = Default::default();
    for &id in live {
        let allocation = allocations.at(id as usize);
        let entry = by_stack.entry(allocation.stack).or_default();
        entry.0 += allocation.size;
        entry.1 += 1;
    }
    let mut ranked: Vec<(StackId, u64, usize)> = by_stack
        .into_iter()
        .map(|(stack, (bytes, count))| (stack, bytes, count))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
        .into_iter()
        .take(limit)
        .map(|(stack, bytes, allocations)| StackBytes {
            bytes,
            allocations,
            frames: display_frames(snapshot, stack),
            stack,
        })
        .collect()
}
