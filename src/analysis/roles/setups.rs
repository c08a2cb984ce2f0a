//! Roles the phase rules alone cannot name, from how PyTorch's libraries and common loops
//! behave: DDP's gradient buckets, FSDP2's all-gather and reduce-scatter buffers, cuBLAS
//! workspaces, KV caches and the outputs a program keeps. Run after the phase rules (whose
//! answer they refine) and before explicit labels (which still win). docs/roles.md gives each
//! rule and why.

use super::phases::{StackKind, StackKinds, StackTag};
use super::{BackwardStarts, Role, Rule, by_ranges};
use crate::analysis::replay::{Allocations, Origin, Replay};
use crate::snapshot::{ActionCode, Snapshot, StackId, Trace};
use fixedbitset::FixedBitSet;
use rustc_hash::{FxHashMap, FxHashSet};

/// Sizes of cuBLAS's workspace as torch sizes it by default (`CUBLAS_WORKSPACE_CONFIG` unset):
/// `:4096:8` (32 MiB) on Hopper and later, `:4096:2:16:8` (8 MiB + 128 KiB) before.
const CUBLAS_WORKSPACE_SIZES: [u64; 2] = [32 << 20, (4096 * 2 + 16 * 8) << 10];

/// cuBLASLt's workspace by default (`CUBLASLT_WORKSPACE_SIZE` unset: 1024 KiB), allocated by
/// the same first matmul right after cuBLAS's.
const CUBLASLT_WORKSPACE_SIZE: u64 = 1 << 20;

/// How far back to look for the matmul's output allocation just before a workspace: between
/// them the allocator may log a `segment_alloc` (the workspace's own segment).
const WORKSPACE_LOOKBACK_EVENTS: usize = 4;

/// Passes that a cache must outlive, with no backward on the device, to be told from a batch.
const CACHE_MIN_PASSES: usize = 2;

/// The forward passes of a device: when each began, and which allocations belong to which.
/// A pass's allocations run from its first allocation to the next pass's first, less those in
/// none (a bit each: a pass number per allocation cost 4 bytes, 55 MB at the role pass's peak on
/// a 32-million-event trace).
#[derive(Debug, Default)]
pub(super) struct Passes {
    starts: Vec<u32>,
    /// First allocation of each pass (by allocation id).
    first: Vec<u32>,
    /// Whether each allocation noted so far belongs to a pass.
    in_pass: FixedBitSet,
    /// Allocations noted so far.
    noted: usize,
    /// Last allocation of each pass (by allocation id).
    last: Vec<u32>,
    previous_forward: bool,
    /// The first forward stack of the current pass, and the last forward allocation.
    first_stack: Option<StackId>,
    last_forward: Option<u32>,
    /// Forward allocations right before the pass's first stack came again: where a call of the
    /// model ends when the loop calls it back to back (no batch made between); `outputs` keeps
    /// only those shaped like the pass's own output, since an `nn.Sequential`'s layers repeat
    /// stacks inside one call too.
    back_to_back: Vec<u32>,
}

impl Passes {
    /// Passes of `allocations` allocations, noted next in allocation-id order.
    pub(super) fn new(allocations: usize) -> Self {
        Self {
            in_pass: FixedBitSet::with_capacity(allocations),
            ..Self::default()
        }
    }

    /// Adds the next allocation (in allocation-id order): `start` is its alloc event when
    /// traced, `kind` its stack's phase, `forward_region` whether it is forward's or the loss's.
    /// A pass begins at a forward allocation after any other: the batch, the loss, backward or
    /// the step come between two calls of the model. (A stack seen again is no sign of a new
    /// pass: the layers of an `nn.Sequential` share their stacks.)
    pub(super) fn note(
        &mut self,
        start: Option<u32>,
        kind: StackKind,
        stack: StackId,
        forward_region: bool,
    ) {
        let id = self.noted;
        self.noted += 1;
        let Some(start) = start else {
            return;
        };
        if kind != StackKind::Forward {
            self.previous_forward = false;
            // The loss belongs to the pass it follows.
            if forward_region && !self.starts.is_empty() {
                self.mark_in_pass(id);
            }
            return;
        }
        let id32 = id as u32;
        if !self.previous_forward {
            self.starts.push(start);
            self.first.push(id32);
            self.last.push(id32);
            self.first_stack = Some(stack);
        } else if self.first_stack == Some(stack)
            && let Some(previous) = self.last_forward
        {
            self.back_to_back.push(previous);
        }
        self.last_forward = Some(id32);
        self.previous_forward = true;
        if let Some(last) = self.last.last_mut() {
            *last = id32;
        }
        self.mark_in_pass(id);
    }

    fn mark_in_pass(&mut self, id: usize) {
        if id >= self.in_pass.len() {
            self.in_pass.grow(id + 1);
        }
        self.in_pass.insert(id);
    }

    /// When each pass began (its first allocation's event), in order.
    pub(super) fn starts(&self) -> &[u32] {
        &self.starts
    }

    /// The pass allocation `id` belongs to, if any: the last to begin at or before it.
    fn pass(&self, id: usize) -> Option<usize> {
        if !self.in_pass.contains(id) {
            return None;
        }
        self.first
            .partition_point(|&first| first as usize <= id)
            .checked_sub(1)
    }

    /// Whether allocation `id` (of a pass) is still alive when the pass `later` passes after
    /// its own begins; `false` when there is no such pass.
    pub(super) fn outlives(&self, id: usize, end: Option<u32>, later: usize) -> bool {
        let Some(pass) = self.pass(id) else {
            return false;
        };
        match self.starts.get(pass + later) {
            Some(&start) => end.is_none_or(|e| e > start),
            None => false,
        }
    }

    /// How many passes began after `start` while the allocation was alive.
    fn passes_within(&self, start: u32, end: Option<u32>) -> usize {
        let from = self.starts.partition_point(|&s| s <= start);
        let to = end.map_or(self.starts.len(), |e| {
            self.starts.partition_point(|&s| s < e)
        });
        to.saturating_sub(from)
    }
}

/// What the phase rules worked out, for the rules here.
pub(super) struct Facts<'a> {
    pub trace: &'a Trace,
    pub snapshot: &'a Snapshot,
    pub replay: &'a Replay,
    pub allocations: &'a Allocations,
    pub alloc_kind: &'a [StackKind],
    pub free_kinds: &'a [Option<StackKind>],
    pub passes: &'a Passes,
    pub backward_starts: &'a [u32],
    pub parameter_sizes: &'a FxHashSet<u64>,
    pub saw_backward: bool,
    /// Allocations per range at least where a rule scans every allocation on several threads.
    pub min_range: usize,
}

fn set(role: &mut [u8], rule: &mut [u16], id: usize, r: Role, why: Rule) {
    role[id] = r as u8;
    rule[id] = why as u16;
}

/// Refines the phase rules' roles where a library's frames or a loop's lifetimes say more.
pub(super) fn refine(
    facts: &Facts<'_>,
    kinds: &mut StackKinds<'_>,
    role: &mut [u8],
    rule: &mut [u16],
) {
    libraries(facts, kinds, role, rule);
    // Both workspace rules look only at blocks never freed: found once, on every thread.
    let kept = by_ranges(facts.allocations.len(), facts.min_range, |ids| {
        ids.filter(|&id| {
            facts.allocations.end(id).is_none() && facts.allocations.origin(id) == Origin::Traced
        })
        .collect::<Vec<usize>>()
    })
    .concat();
    workspaces(facts, &kept, role, rule);
    engine_thread_lt_workspaces(facts, &kept, role, rule);
    if !facts.saw_backward {
        caches(facts, role, rule);
    }
    outputs(facts, role, rule);
}

/// DDP's buckets and FSDP2's buffers, told by the library frames that made them.
fn libraries(facts: &Facts<'_>, kinds: &mut StackKinds<'_>, role: &mut [u8], rule: &mut [u16]) {
    let allocations = facts.allocations;
    // Most blocks have no library frame: the tags, by stack, are read before the rest, and
    // the blocks of tagged stacks are found on every thread.
    let tags: Vec<StackTag> = (0..facts.snapshot.stacks.len() as StackId)
        .map(|stack| kinds.tag(stack))
        .collect();
    let tag_of = |id: usize| {
        tags.get(allocations.stack(id) as usize)
            .copied()
            .unwrap_or(StackTag::None)
    };
    let tagged = by_ranges(allocations.len(), facts.min_range, |ids| {
        ids.filter(|&id| tag_of(id) != StackTag::None && allocations.origin(id) == Origin::Traced)
            .collect::<Vec<usize>>()
    })
    .concat();
    if tagged.is_empty() {
        return;
    }
    // Lifetimes of the .grad tensors autograd itself made: beside DDP buckets they mean the
    // buckets hold copies.
    let autograd_grads: Vec<(u32, u32)> = (0..allocations.len())
        .filter(|&id| {
            role[id] == Role::Gradient as u8
                && matches!(
                    rule[id],
                    r if r == Rule::AccumulateGrad as u16
                        || r == Rule::BackwardFreedByZeroGrad as u16
                        || r == Rule::BackwardKeptParameterSize as u16
                )
        })
        .map(|id| {
            let (start, end) = (allocations.start(id), allocations.end(id));
            (start.unwrap_or(0), end.unwrap_or(u32::MAX))
        })
        .collect();
    let mut backward = BackwardStarts::default();
    for id in tagged {
        let tag = tag_of(id);
        let allocation = allocations.at(id);
        let kept_past_backward = allocation.end.is_none()
            || backward.between(facts.backward_starts, allocation.start, allocation.end);
        match tag {
            StackTag::None => {}
            StackTag::DdpReducer if kept_past_backward => {
                let (from, to) = (
                    allocation.start.unwrap_or(0),
                    allocation.end.unwrap_or(u32::MAX),
                );
                let copies = autograd_grads.iter().any(|&(s, e)| s < to && e > from);
                if copies {
                    set(
                        role,
                        rule,
                        id,
                        Role::CommBuffer,
                        Rule::DdpBucketCopiesGradients,
                    );
                } else {
                    set(role, rule, id, Role::Gradient, Rule::DdpBucketIsGradient);
                }
            }
            StackTag::DdpReducer => {}
            StackTag::FsdpAllGather => {
                set(role, rule, id, Role::CommBuffer, Rule::FsdpAllGather);
            }
            StackTag::CublasWorkspace => {
                set(role, rule, id, Role::Workspace, Rule::CublasWorkspaceFrames);
            }
            StackTag::FsdpReduce => {
                let freed_in_backward = facts.free_kinds[id].is_some_and(StackKind::is_backward);
                if !freed_in_backward {
                    set(role, rule, id, Role::Gradient, Rule::FsdpReducedGradient);
                }
            }
        }
    }
}

/// cuBLAS allocates its workspace from the caching allocator inside the first matmul a thread
/// runs on a stream, right after the matmul's output, and never frees it. Only a block that
/// does all of that, at one of torch's default workspace sizes, and only the first per stream
/// and per thread (a Python stack: the main thread; none: autograd's), is called a workspace:
/// a real tensor rarely shares all of it, and where it could (a `.grad` of a parameter that
/// size) the rule stands back.
/// `kept`: the traced blocks never freed, in order.
fn workspaces(facts: &Facts<'_>, kept: &[usize], role: &mut [u8], rule: &mut [u16]) {
    let trace = facts.trace;
    let mut seen: FxHashSet<(u64, bool)> = FxHashSet::default();
    let allocations = facts.allocations;
    for &id in kept {
        if !CUBLAS_WORKSPACE_SIZES.contains(&allocations.size(id)) {
            continue;
        }
        let allocation = allocations.at(id);
        let Some(start) = allocation.start.map(|s| s as usize) else {
            continue;
        };
        let stream = trace.stream(start);
        let python = !facts.snapshot.stacks.get(allocation.stack).is_empty();
        if seen.contains(&(stream, python)) {
            continue;
        }
        let after_output = (start.saturating_sub(WORKSPACE_LOOKBACK_EVENTS)..start)
            .rev()
            .find(|&e| trace.action.get(e) == Some(&ActionCode::ALLOC) && trace.stream(e) == stream)
            .is_some_and(|e| trace.stack.at(e) == Some(allocation.stack));
        if !after_output || (!python && facts.parameter_sizes.contains(&allocation.size)) {
            continue;
        }
        seen.insert((stream, python));
        set(role, rule, id, Role::Workspace, Rule::LibraryWorkspace);
        // cuBLASLt's own workspace (1 MiB by default, `CUBLASLT_WORKSPACE_SIZE`) comes next,
        // from the same call.
        let lt = (start + 1..(start + 1 + WORKSPACE_LOOKBACK_EVENTS).min(trace.len()))
            .find(|&e| trace.action.get(e) == Some(&ActionCode::ALLOC) && trace.stream(e) == stream)
            .and_then(|e| facts.replay.allocation_at(e));
        if let Some(lt) = lt.map(|lt| lt as usize)
            && let Some(next) = facts.allocations.get(lt)
            && next.size == CUBLASLT_WORKSPACE_SIZE
            && next.end.is_none()
            && next.stack == allocation.stack
        {
            set(role, rule, lt, Role::Workspace, Rule::LibraryWorkspace);
        }
    }
}

/// cuBLASLt allocates its own workspace lazily, on the first cuBLASLt call of a thread (a
/// `linear` with a bias), which on autograd's thread can be a matmul that checkpointing reruns
/// in backward, far from the thread's cuBLAS workspace. Such a recomputation's blocks are freed
/// within backward; a never-freed block of cuBLASLt's size made right after one of them, by
/// the same stack, on a stack autograd's engine runs, is that workspace (the first per stream).
/// `kept`: the traced blocks never freed, in order.
fn engine_thread_lt_workspaces(
    facts: &Facts<'_>,
    kept: &[usize],
    role: &mut [u8],
    rule: &mut [u16],
) {
    let trace = facts.trace;
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    let allocations = facts.allocations;
    for &id in kept {
        if allocations.size(id) != CUBLASLT_WORKSPACE_SIZE
            || facts.alloc_kind[id] != StackKind::BackwardPython
            || role[id] == Role::Workspace as u8
        {
            continue;
        }
        let allocation = allocations.at(id);
        let Some(start) = allocation.start.map(|s| s as usize) else {
            continue;
        };
        let stream = trace.stream(start);
        if seen.contains(&stream) {
            continue;
        }
        let output = (start.saturating_sub(WORKSPACE_LOOKBACK_EVENTS)..start)
            .rev()
            .find(|&e| trace.action.get(e) == Some(&ActionCode::ALLOC) && trace.stream(e) == stream)
            .filter(|&e| trace.stack.at(e) == Some(allocation.stack))
            .and_then(|e| facts.replay.allocation_at(e));
        // A module's call on the engine's thread is checkpointing rerunning forward; a
        // compiled backward graph runs generated code without one (its kept blocks are the
        // gradients).
        let recomputed = runs_a_module(facts.snapshot, allocation.stack)
            && output.is_some_and(|output| {
                facts.free_kinds[output as usize].is_some_and(StackKind::is_backward)
            });
        if recomputed {
            seen.insert(stream);
            set(role, rule, id, Role::Workspace, Rule::LibraryWorkspace);
        }
    }
}

/// Whether a stack runs inside a module's call (`Module._call_impl`).
fn runs_a_module(snapshot: &Snapshot, stack: StackId) -> bool {
    snapshot.stacks.get(stack).iter().any(|&f| {
        let frame = snapshot.frames.get(f);
        frame.filename.ends_with("torch/nn/modules/module.py") && frame.name.ends_with("call_impl")
    })
}

/// KV caches of generation loops (devices with no backward).
fn caches(facts: &Facts<'_>, role: &mut [u8], rule: &mut [u16]) {
    let allocations = facts.allocations;
    let passes = facts.passes;
    // A cache grown by concatenation: the model's forward makes the new cache and frees the old
    // one in the next step's forward. Outputs and batches are freed by the loop instead.
    let mut cache_stacks: FxHashSet<StackId> = FxHashSet::default();
    // (The cheap columns first, and only the fields read: these loops see every allocation.)
    for id in 0..allocations.len() {
        if facts.alloc_kind[id] == StackKind::Forward
            && facts.free_kinds[id] == Some(StackKind::Forward)
            && role[id] != Role::Workspace as u8
            && passes.outlives(id, allocations.end(id), 1)
        {
            set(
                role,
                rule,
                id,
                Role::KvCache,
                Rule::KvCacheReplacedInForward,
            );
            cache_stacks.insert(allocations.stack(id));
        }
    }
    for id in 0..allocations.len() {
        // Only the current step's blocks are the cache now; older ones never freed by such a
        // stack are something else (a workspace, a first step's block).
        if facts.alloc_kind[id] == StackKind::Forward
            && allocations.end(id).is_none()
            && cache_stacks.contains(&allocations.stack(id))
            && role[id] != Role::Workspace as u8
            && passes
                .pass(id)
                .is_some_and(|p| p + 1 == passes.starts.len())
        {
            set(role, rule, id, Role::KvCache, Rule::KvCacheLikeEarlier);
        }
    }
    // A preallocated cache: a cache object's constructor makes one block per layer and per key
    // and value, all of one size, before generation, and every step writes into them.
    let mut by_stack_size: FxHashMap<(StackId, u64), Vec<usize>> = FxHashMap::default();
    for id in 0..allocations.len() {
        if facts.alloc_kind[id] == StackKind::Loop
            && allocations.origin(id) == Origin::Traced
            && allocations
                .start(id)
                .is_some_and(|s| passes.passes_within(s, allocations.end(id)) >= CACHE_MIN_PASSES)
            && made_by_constructor(facts.snapshot, allocations.stack(id))
        {
            by_stack_size
                .entry((allocations.stack(id), allocations.size(id)))
                .or_default()
                .push(id);
        }
    }
    for ids in by_stack_size.into_values().filter(|ids| ids.len() >= 2) {
        for id in ids {
            set(role, rule, id, Role::KvCache, Rule::KvCachePreallocated);
        }
    }
}

/// Whether an object's constructor outside torch made the block: a frame `__init__` in a
/// file that is not torch's own.
fn made_by_constructor(snapshot: &Snapshot, stack: StackId) -> bool {
    snapshot.stacks.get(stack).iter().any(|&f| {
        let frame = snapshot.frames.get(f);
        &*frame.name == "__init__"
            && frame.filename.ends_with(".py")
            && !frame.filename.contains("/torch/")
    })
}

/// The output of a forward pass is the last block it makes; kept by the program (a list of
/// logits, a summed loss) it outlives the next pass whole. A block the next pass frees is an
/// ordinary `out = model(x)` that rebinding frees; one backward frees was saved for it.
fn outputs(facts: &Facts<'_>, role: &mut [u8], rule: &mut [u16]) {
    let passes = facts.passes;
    // Stacks whose earlier outputs were kept across passes: their last output, still alive at
    // the dump, is kept alike (same stack, same lifetime so far, same role).
    let mut output_stacks: FxHashSet<StackId> = FxHashSet::default();
    for &last in &passes.last {
        let id = last as usize;
        let Some(allocation) = facts.allocations.get(id) else {
            continue;
        };
        let by_phase_rules = rule[id] == Rule::ForwardKept as u16
            || rule[id] == Rule::ForwardFreedAfterBackward as u16
            || rule[id] == Rule::ForwardKeptLikeEarlierTemporaries as u16;
        if !by_phase_rules || facts.free_kinds[id].is_some_and(StackKind::is_backward) {
            continue;
        }
        if passes.outlives(id, allocation.end, 2) {
            set(role, rule, id, Role::Output, Rule::OutputKeptAcrossPasses);
            output_stacks.insert(allocation.stack);
        } else if allocation.end.is_none()
            && (!facts.saw_backward || output_stacks.contains(&allocation.stack))
        {
            set(role, rule, id, Role::Output, Rule::OutputWithoutBackward);
            output_stacks.insert(allocation.stack);
        }
    }
    // Calls back to back: the block that ended an earlier call, never freed and shaped like
    // the outputs (same stack, same size), is an output kept alike.
    for &id in &passes.back_to_back {
        let id = id as usize;
        let Some(allocation) = facts.allocations.get(id) else {
            continue;
        };
        let shaped_like_output = passes
            .pass(id)
            .and_then(|p| passes.last.get(p))
            .is_some_and(|&last| {
                let last = last as usize;
                role[last] == Role::Output as u8
                    && facts.allocations.stack(last) == allocation.stack
                    && facts.allocations.size(last) == allocation.size
            });
        if shaped_like_output && allocation.end.is_none() && rule[id] == Rule::ForwardKept as u16 {
            set(role, rule, id, Role::Output, Rule::OutputWithoutBackward);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_allocation_is_in_the_pass_begun_last_or_in_none() {
        use StackKind::{Forward, Loop, NoPython};
        // (alloc event, phase, stack, forward region): a batch, a call of the model and its
        // loss, backward, an untraced block, then two calls back to back.
        let noted = [
            (Some(1), Loop, 9, false),
            (Some(2), Forward, 1, true),
            (Some(3), Forward, 2, true),
            (Some(4), Loop, 8, true),
            (Some(5), NoPython, 7, false),
            (None, Forward, 1, true),
            (Some(7), Forward, 1, true),
            (Some(8), Forward, 2, true),
            (Some(9), Forward, 1, true),
            (Some(10), Loop, 8, false),
        ];
        let mut passes = Passes::new(noted.len());
        for (start, kind, stack, forward_region) in noted {
            passes.note(start, kind, stack, forward_region);
        }
        let of: Vec<Option<usize>> = (0..noted.len() + 1).map(|id| passes.pass(id)).collect();
        let expected = [
            None,
            Some(0),
            Some(0),
            Some(0),
            None,
            None,
            Some(1),
            Some(1),
            Some(1),
            None,
            None,
        ];
        assert_eq!(of, expected);
        assert_eq!(passes.starts(), [2, 7]);
        assert_eq!(passes.last, [2, 8]);
        // The model's first stack came again at allocation 8: 7 ended the call before it.
        assert_eq!(passes.back_to_back, [7]);
        // Allocation 2 (pass 0) freed at event 8 outlived the start of pass 1 (event 7).
        assert!(passes.outlives(2, Some(8), 1));
        assert!(!passes.outlives(2, Some(6), 1));
        assert!(!passes.outlives(6, None, 1), "no pass after the last");
        assert!(!passes.outlives(4, None, 1), "in no pass");
    }
}
