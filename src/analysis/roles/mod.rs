//! Why memory is used: one role for every allocation (parameter, gradient, optimizer state,
//! activation, temporary, input, unknown, or a user's own), with the rule that decided it.
//!
//! Decided from the whole trace, not one frame: the phase the allocating stack ran in
//! ([`phases`]), how long the block lived and which stack freed it (a `free_requested` carries
//! frames, so `zero_grad` and backward are visible), the sizes of the parameters (a `.grad` has
//! its parameter's size), and what the same stack's earlier blocks did. Explicit labels win:
//! torch's `annotate` events, then user rules ([`user_rules`]). docs/roles.md lists the rules.
//!
//! Storage is one byte of role and two of rule per allocation ([`DeviceRoles`]).

mod labels;
mod live;
pub mod phases;
mod setups;
pub mod user_rules;
mod window;

use labels::Labels;
pub use live::{LiveAllocation, LiveReport, live_report};
pub use user_rules::{MAX_RULES_FILE_BYTES, RulesError, UserRules};
#[cfg(test)]
pub(crate) use window::reference::role_window_scanning;
pub use window::{RoleWindow, role_window};

use super::replay::{AllocationId, Origin, Replay};
use crate::snapshot::{Snapshot, StackId};
use fixedbitset::FixedBitSet;
use phases::{AnnotatedPhases, StackKind, StackKinds};
use rustc_hash::FxHashSet;
use setups::Passes;
use std::collections::BTreeMap;

/// The built-in roles; custom roles from user rules or annotations follow them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Role {
    Parameter,
    Gradient,
    OptimizerState,
    CommBuffer,
    Activation,
    Output,
    KvCache,
    Workspace,
    Temporary,
    Input,
    Unknown,
}

/// In display order; a role's index here is its `Role as u8`.
pub const BUILTIN_ROLES: [Role; 11] = [
    Role::Parameter,
    Role::Gradient,
    Role::OptimizerState,
    Role::CommBuffer,
    Role::Activation,
    Role::Output,
    Role::KvCache,
    Role::Workspace,
    Role::Temporary,
    Role::Input,
    Role::Unknown,
];

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Self::Parameter => "parameter",
            Self::Gradient => "gradient",
            Self::OptimizerState => "optimizer_state",
            Self::CommBuffer => "comm_buffer",
            Self::Activation => "activation",
            Self::Output => "output",
            Self::KvCache => "kv_cache",
            Self::Workspace => "workspace",
            Self::Temporary => "temporary",
            Self::Input => "input",
            Self::Unknown => "unknown",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        BUILTIN_ROLES.into_iter().find(|role| role.name() == name)
    }
}

/// The built-in rules, in the order they are tried. Ids above these are user rules (then
/// annotations); each carries the sentence `because` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(super) enum Rule {
    Ghost,
    SetupKept,
    SetupFreed,
    OptimKept,
    OptimFreed,
    AccumulateGrad,
    BackwardFreedByZeroGrad,
    BackwardKeptParameterSize,
    BackwardFreedInBackward,
    BackwardKeptOther,
    ForwardFreedByBackward,
    ForwardFreedInForward,
    ForwardKept,
    ForwardKeptLikeEarlierTemporaries,
    ForwardFreedAfterBackward,
    LoopBeforeForward,
    EarlierFreedByBackward,
    EarlierFreedByZeroGrad,
    EarlierOther,
    DdpBucketIsGradient,
    DdpBucketCopiesGradients,
    FsdpAllGather,
    FsdpReducedGradient,
    LibraryWorkspace,
    KvCacheReplacedInForward,
    KvCacheLikeEarlier,
    KvCachePreallocated,
    OutputKeptAcrossPasses,
    OutputWithoutBackward,
    CublasWorkspaceFrames,
    PinnedHostMemory,
}

const RULE_TEXT: [&str; 31] = [
    "alive since before recording began and never freed: weights loaded before the recording",
    "made by model setup (.to/.cuda, nn.init, load_state_dict, from_pretrained) and kept",
    "made by model setup and freed before training used it",
    "made inside torch/optim and kept past the optimizer step",
    "made inside torch/optim and freed within the step",
    "made by autograd's AccumulateGrad: a .grad",
    "made in backward and freed by zero_grad: a .grad",
    "made in backward, kept past it, and the size of a parameter: a .grad",
    "made and freed within backward",
    "made in backward and kept past it, but no parameter has its size",
    "made in forward (or the loss) and freed by backward: saved for it",
    "made and freed within forward (or the loss)",
    "made in forward (or the loss) and never freed: still referenced (an output kept, or saved for a backward)",
    "made in forward and still alive, but this stack's earlier blocks were freed within forward",
    "made in forward (or the loss), kept through backward, freed by the training loop",
    "made by the training loop outside forward, backward and the step: the batch",
    "allocated before recording began, freed by backward: saved for it",
    "allocated before recording began, freed by zero_grad: a .grad",
    "allocated before recording began: its alloc is not in the trace",
    "made by DDP's reducer (torch/nn/parallel/distributed.py) and kept, with no .grad of autograd's alive beside it: a gradient bucket whose views are the .grad tensors (gradient_as_bucket_view)",
    "made by DDP's reducer and kept while autograd's own .grad tensors live too: a bucket holding a copy of the gradients for all-reduce",
    "made by FSDP's all-gather (torch/distributed/fsdp): the unsharded parameters, until reshard frees them",
    "made by FSDP's reduce-scatter (foreach_reduce) and kept past backward: the sharded gradients are views into it",
    "never freed, the size of a cuBLAS workspace, made by a matmul right after its output, the first such block of its stream: the library's workspace (one per stream and thread)",
    "made in forward on a device with no backward and freed by forward code of a later pass: a cache each step replaces (a KV cache grown by torch.cat)",
    "made in forward on a device with no backward, still alive, by the stack whose earlier blocks were a cache each step replaced",
    "made by an object's constructor (__init__) outside torch before the forward passes and kept through them, on a device with no backward: a preallocated cache",
    "the last block a forward pass made that outlived the next pass whole, not freed by backward: an output the program keeps",
    "the last block a forward pass made, still alive, where no backward ran or the same stack's earlier outputs were kept across passes: an output the program keeps",
    "made under cuBLAS setting up its workspace (at::cuda::setWorkspaceForHandle or getCUDABlasLtWorkspace in the C++ frames): the library's workspace",
    "pinned host memory: the built-in roles read CUDA memory's phases and are not guessed for host buffers (user rules and annotations still apply)",
];

const FIRST_USER_RULE: u16 = 256;

/// Each allocation's role and the rule that decided it, for one device.
#[derive(Debug, Default)]
pub struct DeviceRoles {
    /// By allocation id: index into [`DeviceRoles::names`].
    role: Vec<u8>,
    /// By allocation id: a built-in rule, or `FIRST_USER_RULE + i`: `extra_because[i]` (the
    /// profiler's categories, then user rules, then annotations).
    rule: Vec<u16>,
    /// Role names: the built-in ones, then custom ones in order of first use.
    names: Vec<String>,
    /// `because` texts of profiler categories, user rules and annotations, from
    /// `FIRST_USER_RULE` on.
    extra_because: Vec<String>,
    /// The device ran a backward at all (autograd allocated or freed something).
    pub saw_backward: bool,
    /// Event of the first allocation of each forward pass (a training or inference step), in
    /// order.
    pub forward_starts: Vec<u32>,
    /// Event of the first allocation of each call of the model (a run of forward allocations
    /// that anything else ends), in order: finer than `forward_starts` in inference loops,
    /// which never leave the forward phase.
    pub pass_starts: Vec<u32>,
    /// Bytes per role at regular events, so the `/roles` window reads a few events per column.
    checkpoints: window::RoleCheckpoints,
}

impl DeviceRoles {
    /// Decides every allocation of `replay` (one device of `snapshot`).
    pub fn new(snapshot: &Snapshot, replay: &Replay, device: usize, rules: &UserRules) -> Self {
        Self::in_ranges(snapshot, replay, device, rules, MIN_RANGE)
    }

    /// [`DeviceRoles::new`], with the passes that go range by range cutting ranges of at least
    /// `min_range` allocations (tests cut them small to show the roles do not depend on it).
    fn in_ranges(
        snapshot: &Snapshot,
        replay: &Replay,
        device: usize,
        rules: &UserRules,
        min_range: usize,
    ) -> Self {
        let started = std::time::Instant::now();
        let trace = snapshot.trace(device);
        let mut kinds = StackKinds::new(&snapshot.frames, &snapshot.stacks);
        // Where frames cannot tell the phase, the annotated ranges (by time) may.
        let annotated = if trace.has_time {
            AnnotatedPhases::new(&snapshot.external_annotations, device)
        } else {
            AnnotatedPhases::default()
        };
        let allocations = &replay.allocations;
        let n = allocations.len();
        let mut names: Vec<String> = BUILTIN_ROLES.iter().map(|r| r.name().to_owned()).collect();
        let mut extra_because = Vec::new();
        let mut role = vec![Role::Unknown as u8; n];
        let mut rule = vec![Rule::EarlierOther as u16; n];

        // The phase of each allocation's alloc and of its free, by its stacks (and the
        // annotations at their times): each allocation's own, so found range by range at once.
        let stack_kinds = kinds.all();
        let kind_of = |stack: StackId| {
            stack_kinds
                .get(stack as usize)
                .copied()
                .unwrap_or_else(|| kinds.compute(stack))
        };
        // Written in place, range by range (a vector per range, copied into these, held both at
        // once: 2 bytes an allocation more at the role pass's peak).
        let mut alloc_kind = vec![StackKind::Loop; n];
        let mut free_kinds: Vec<Option<StackKind>> = vec![None; n];
        fill_by_ranges(
            &mut alloc_kind,
            &mut free_kinds,
            min_range,
            |ids, allocs, frees| {
                let annotated = annotated.clone();
                let kind_at = |stack: StackId, event: u32| {
                    let kind = kind_of(stack);
                    if annotated.is_empty() {
                        return kind;
                    }
                    match trace.time_us.at(event as usize) {
                        Some(time) => annotated.refine(kind, time),
                        None => kind,
                    }
                };
                for ((i, alloc), free) in ids.zip(allocs).zip(frees) {
                    let stack = allocations.stack(i);
                    *alloc = match allocations.start(i) {
                        Some(start) => kind_at(stack, start),
                        None => kind_of(stack),
                    };
                    *free = allocations
                        .end(i)
                        .map(|e| kind_at(trace.stack.at(e as usize).unwrap_or(0), e));
                }
            },
        );

        tracing::debug!(ms = started.elapsed().as_millis() as u64, "roles: phases");
        // Pass 1: which stacks' blocks forward freed itself or left to backward (the replay
        // lists traced allocations in the order of their alloc events), where backward began,
        // and the forward passes.
        let mut in_forward_region = FixedBitSet::with_capacity(n);
        // Forward passes (one call of the model each): a run of forward allocations, begun anew
        // after any other allocation (the batch, backward, the step) or when the stack of the
        // pass's first allocation comes again (back-to-back calls). `passes` also says which pass
        // each allocation belongs to.
        let mut passes = Passes::new(n);
        let mut batch_stacks: FxHashSet<StackId> = FxHashSet::default();
        let mut backward_starts: Vec<u32> = Vec::new();
        let mut forward_starts: Vec<u32> = Vec::new();
        let mut last_phase: Option<StackKind> = None;
        let mut saw_backward = false;
        // By stack id (a few thousand stacks; a vector, not a map, in this hot loop).
        let mut stack_history: Vec<(u32, u32)> = vec![(0, 0); snapshot.stacks.len()];
        let mut backward = BackwardStarts::default();
        for (i, &kind) in alloc_kind.iter().enumerate() {
            // The three fields this walk reads, not a whole `Allocation` (eight columns).
            let traced = allocations.origin(i) == Origin::Traced;
            let (start, stack) = (allocations.start(i), allocations.stack(i));

            if traced {
                let phase = match kind {
                    StackKind::AccumulateGrad | StackKind::BackwardPython | StackKind::NoPython => {
                        Some(StackKind::NoPython)
                    }
                    StackKind::Forward | StackKind::Optimizer | StackKind::ZeroGrad => Some(kind),
                    _ => None,
                };
                if let Some(phase) = phase {
                    if phase == StackKind::NoPython && last_phase != Some(StackKind::NoPython) {
                        backward_starts.push(start.unwrap_or(0));
                    }
                    if phase == StackKind::Forward && last_phase != Some(StackKind::Forward) {
                        forward_starts.push(start.unwrap_or(0));
                    }
                    last_phase = Some(phase);
                }
            }
            // The loss is computed by the loop after forward, before backward; but a line of
            // the loop that made a batch before any forward makes batches after one too (an
            // inference loop never leaves the forward phase): same stack, same role.
            let batch_stack = kind == StackKind::Loop && batch_stacks.contains(&stack);
            let forward_region = kind == StackKind::Forward
                || (kind == StackKind::Loop
                    && last_phase == Some(StackKind::Forward)
                    && !batch_stack);
            if traced && kind == StackKind::Loop && !forward_region {
                batch_stacks.insert(stack);
            }
            in_forward_region.set(i, forward_region);
            passes.note(
                traced.then_some(start).flatten(),
                kind,
                stack,
                forward_region,
            );
            let freed_by = free_kinds[i];
            if freed_by.is_some_and(StackKind::is_backward) {
                saw_backward = true;
            }
            if kind.is_backward() && traced {
                saw_backward = true;
            }
            if forward_region
                && traced
                && let Some(freed_by) = freed_by
            {
                // (freed within forward, freed by backward) per stack: the stack's history.
                let Some(entry) = stack_history.get_mut(stack as usize) else {
                    continue;
                };
                if freed_by.is_backward() {
                    entry.1 += 1;
                } else if !backward.between(&backward_starts, start, allocations.end(i)) {
                    entry.0 += 1;
                }
            }
        }

        tracing::debug!(ms = started.elapsed().as_millis() as u64, "roles: pass 1");
        // The passes below decide each allocation from pass 1's facts alone, so they run on
        // ranges of allocations at once (`by_ranges`); what they gather is summed or merged
        // in range order, and each decision is the one a single walk would make.

        // Per stack, forward blocks that outlived the start of the next pass: a stack whose
        // blocks are kept across passes (a retained graph, kept outputs) is not one whose blocks
        // forward frees, whatever the pass in progress at the dump shows.
        let mut kept_across: Vec<u32> = vec![0; snapshot.stacks.len()];
        for counts in by_ranges(n, min_range, |ids| {
            let mut counts: Vec<(StackId, u32)> = Vec::new();
            for i in ids {
                if passes.outlives(i, allocations.end(i), 1)
                    && !free_kinds[i].is_some_and(StackKind::is_backward)
                {
                    counts.push((allocations.stack(i), 1));
                }
            }
            counts
        }) {
            for (stack, count) in counts {
                if let Some(kept) = kept_across.get_mut(stack as usize) {
                    *kept += count;
                }
            }
        }

        // Parameters first: a gradient is recognised by its parameter's size.
        let decide_parameter = |i: usize, backward: &mut BackwardStarts| match (
            allocations.origin(i),
            alloc_kind[i],
        ) {
            (Origin::Ghost, _) => Some((Role::Parameter, Rule::Ghost)),
            (Origin::Traced, StackKind::ParamSetup) => {
                let end = allocations.end(i);
                let used =
                    end.is_none() || backward.between(&backward_starts, allocations.start(i), end);
                Some(if used {
                    (Role::Parameter, Rule::SetupKept)
                } else {
                    (Role::Temporary, Rule::SetupFreed)
                })
            }
            _ => None,
        };
        let mut parameter_sizes: FxHashSet<u64> = FxHashSet::default();
        let decided = by_ranges(n, min_range, |ids| {
            let mut backward = BackwardStarts::default();
            ids.filter_map(|i| decide_parameter(i, &mut backward).map(|d| (i, d)))
                .collect::<Vec<_>>()
        });
        for (i, (r, why)) in decided.into_iter().flatten() {
            if r == Role::Parameter {
                parameter_sizes.insert(allocations.size(i));
            }
            role[i] = r as u8;
            rule[i] = why as u16;
        }

        let decide = |i: usize, backward: &mut BackwardStarts| -> Option<(Role, Rule)> {
            let kind = alloc_kind[i];
            let allocation = allocations.at(i);
            if allocation.origin == Origin::Ghost
                || (allocation.origin == Origin::Traced && kind == StackKind::ParamSetup)
            {
                return None;
            }
            let freed_by = free_kinds[i];
            Some(if allocation.origin == Origin::FreedWithoutAlloc {
                match freed_by {
                    Some(k) if k.is_backward() => (Role::Activation, Rule::EarlierFreedByBackward),
                    Some(StackKind::ZeroGrad) => (Role::Gradient, Rule::EarlierFreedByZeroGrad),
                    _ => (Role::Unknown, Rule::EarlierOther),
                }
            } else {
                match kind {
                    StackKind::Optimizer | StackKind::ZeroGrad => match freed_by {
                        Some(StackKind::Optimizer | StackKind::ZeroGrad) => {
                            (Role::Temporary, Rule::OptimFreed)
                        }
                        _ => (Role::OptimizerState, Rule::OptimKept),
                    },
                    StackKind::AccumulateGrad => (Role::Gradient, Rule::AccumulateGrad),
                    StackKind::NoPython | StackKind::BackwardPython => match freed_by {
                        Some(k) if k.is_backward() => {
                            (Role::Temporary, Rule::BackwardFreedInBackward)
                        }
                        Some(StackKind::ZeroGrad) => {
                            (Role::Gradient, Rule::BackwardFreedByZeroGrad)
                        }
                        _ if parameter_sizes.contains(&allocation.size) => {
                            (Role::Gradient, Rule::BackwardKeptParameterSize)
                        }
                        _ => (Role::Unknown, Rule::BackwardKeptOther),
                    },
                    _ if in_forward_region.contains(i) => match freed_by {
                        Some(k) if k.is_backward() => {
                            (Role::Activation, Rule::ForwardFreedByBackward)
                        }
                        Some(_) => {
                            if backward.between(&backward_starts, allocation.start, allocation.end)
                            {
                                (Role::Activation, Rule::ForwardFreedAfterBackward)
                            } else {
                                (Role::Temporary, Rule::ForwardFreedInForward)
                            }
                        }
                        None => match stack_history.get(allocation.stack as usize) {
                            // Only a stack backward never freed from, in a trace that has a
                            // backward: a stack whose block is sometimes saved stays activation.
                            Some(&(freed_in_forward, 0))
                                if freed_in_forward > 0
                                    && saw_backward
                                    && kept_across
                                        .get(allocation.stack as usize)
                                        .is_none_or(|&k| k == 0) =>
                            {
                                (Role::Temporary, Rule::ForwardKeptLikeEarlierTemporaries)
                            }
                            _ => (Role::Activation, Rule::ForwardKept),
                        },
                    },
                    _ => (Role::Input, Rule::LoopBeforeForward),
                }
            })
        };
        fill_by_ranges(&mut role, &mut rule, min_range, |ids, roles, rules| {
            let mut backward = BackwardStarts::default();
            let first = ids.start;
            for i in ids {
                if let Some((r, why)) = decide(i, &mut backward) {
                    roles[i - first] = r as u8;
                    rules[i - first] = why as u16;
                }
            }
        });

        tracing::debug!(ms = started.elapsed().as_millis() as u64, "roles: decided");
        setups::refine(
            &setups::Facts {
                trace,
                snapshot,
                replay,
                allocations,
                alloc_kind: &alloc_kind,
                free_kinds: &free_kinds,
                passes: &passes,
                backward_starts: &backward_starts,
                parameter_sizes: &parameter_sizes,
                saw_backward,
                min_range,
            },
            &mut kinds,
            &mut role,
            &mut rule,
        );

        tracing::debug!(ms = started.elapsed().as_millis() as u64, "roles: refined");
        // Pinned host buffers are staging for copies, not tensors of the model's phases: a buffer
        // filled during forward is not an activation. Rather than a confident wrong role, none.
        if snapshot.source.host_device == Some(device) {
            role.fill(Role::Unknown as u8);
            rule.fill(Rule::PinnedHostMemory as u16);
        }
        // The profiler's categories override the built-in rules; user rules override both, and
        // annotations override everything.
        let mut labels = Labels {
            names: &mut names,
            extra_because: &mut extra_because,
            role: &mut role,
            rule: &mut rule,
        };
        labels.apply_categories(trace, replay);
        if !rules.is_empty() {
            // User rule `i`'s because text sits after the categories' texts.
            let first_user_because =
                FIRST_USER_RULE.saturating_add(labels.extra_because.len() as u16);
            let mut matched: rustc_hash::FxHashMap<u32, Option<usize>> = Default::default();
            for (i, allocation) in allocations.iter().enumerate() {
                let hit = *matched.entry(allocation.stack).or_insert_with(|| {
                    let frames = snapshot.stacks.get(allocation.stack);
                    rules.first_match(frames.iter().map(|&f| {
                        let frame = snapshot.frames.get(f);
                        (&*frame.filename, &*frame.name)
                    }))
                });
                if let Some(index) = hit {
                    let user = &rules.rules()[index];
                    labels.role[i] = role_index(labels.names, &user.role);
                    labels.rule[i] = first_user_because.saturating_add(index as u16);
                }
            }
            labels.extra_because.extend(
                rules
                    .rules()
                    .iter()
                    .map(|user| format!("user rule {:?} -> {}", user.pattern, user.role)),
            );
        }
        labels.apply_annotations(trace, replay);

        tracing::debug!(ms = started.elapsed().as_millis() as u64, "roles: labelled");
        let checkpoints = window::RoleCheckpoints::new(replay, &role, names.len(), min_range);
        tracing::debug!(
            ms = started.elapsed().as_millis() as u64,
            "roles: checkpoints"
        );
        Self {
            role,
            rule,
            names,
            extra_because,
            saw_backward,
            forward_starts,
            pass_starts: passes.starts().to_vec(),
            checkpoints,
        }
    }

    /// The role of an allocation, by index into [`DeviceRoles::names`].
    pub fn role_index_of(&self, id: AllocationId) -> u8 {
        self.role
            .get(id as usize)
            .copied()
            .unwrap_or(Role::Unknown as u8)
    }

    /// The role's name for an allocation (`"parameter"`, ..., or a custom name).
    pub fn role_of(&self, id: AllocationId) -> &str {
        &self.names[self.role_index_of(id) as usize]
    }

    /// Why the allocation has its role: the rule that decided it, in words.
    pub fn because(&self, id: AllocationId) -> &str {
        let rule = self
            .rule
            .get(id as usize)
            .copied()
            .unwrap_or(Rule::EarlierOther as u16);
        if rule >= FIRST_USER_RULE {
            self.extra_because
                .get((rule - FIRST_USER_RULE) as usize)
                .map_or("", String::as_str)
        } else {
            RULE_TEXT.get(rule as usize).copied().unwrap_or("")
        }
    }

    /// Whether the allocation is a forward block that nothing freed (kept for a backward that
    /// never came, or still in use at the dump).
    pub fn is_kept_forward(&self, id: AllocationId) -> bool {
        self.rule.get(id as usize) == Some(&(Rule::ForwardKept as u16))
    }

    /// Whether the allocation is a DDP bucket holding a copy of the gradients (DDP without
    /// `gradient_as_bucket_view`).
    pub fn is_ddp_gradient_copy(&self, id: AllocationId) -> bool {
        self.rule.get(id as usize) == Some(&(Rule::DdpBucketCopiesGradients as u16))
    }

    /// Whether the allocation is a DDP bucket that the `.grad` tensors are views into: it lives
    /// as long as DDP does, whatever `zero_grad` does.
    pub fn is_ddp_bucket(&self, id: AllocationId) -> bool {
        self.rule.get(id as usize) == Some(&(Rule::DdpBucketIsGradient as u16))
    }

    /// Whether the allocation was made inside `torch/optim` (optimizer state, or a temporary of
    /// the step), as the built-in rules saw it.
    pub fn is_made_by_optimizer(&self, id: AllocationId) -> bool {
        matches!(
            self.rule.get(id as usize),
            Some(&r) if r == Rule::OptimKept as u16 || r == Rule::OptimFreed as u16
        )
    }

    /// Every role name, built-in first; [`DeviceRoles::role_index_of`] indexes it.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Bytes per role of the given allocations (roles with no bytes left out).
    pub fn bytes_by_role(&self, replay: &Replay, ids: &[AllocationId]) -> BTreeMap<String, u64> {
        let mut bytes = vec![0u64; self.names.len()];
        for &id in ids {
            let size = replay.allocations.size(id as usize);
            let slot = &mut bytes[self.role_index_of(id) as usize];
            *slot = slot.wrapping_add(size);
        }
        self.names
            .iter()
            .zip(bytes)
            .filter(|(_, b)| *b > 0)
            .map(|(name, b)| (name.clone(), b))
            .collect()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> u64 {
        (self.role.capacity() + self.rule.capacity() * 2) as u64 + self.checkpoints.heap_bytes()
    }
}

/// Whether a backward phase began after an allocation's start and at or before its end (an
/// open end: ever after), for many allocations in a row, remembering where the last answer was:
/// the role passes ask in the order of the allocations' events, so the answer's position is
/// nearly always the last one or the next, and the search (half of the role pass's time on a
/// 32-million-event trace) is skipped.
#[derive(Debug, Default)]
pub(super) struct BackwardStarts {
    hint: usize,
}

impl BackwardStarts {
    /// `backward_starts` is sorted (the events backward began at).
    pub(super) fn between(
        &mut self,
        backward_starts: &[u32],
        start: Option<u32>,
        end: Option<u32>,
    ) -> bool {
        let from = start.map_or(0, |s| s as usize + 1);
        self.hint = partition_point_near(backward_starts, self.hint, |&b| (b as usize) < from);
        match (backward_starts.get(self.hint), end) {
            (Some(&b), Some(end)) => b <= end,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// Allocations per range at least where the role pass goes range by range: below that a thread
/// costs more than it saves.
const MIN_RANGE: usize = 1 << 16;

/// `work` over ranges of `0..n` (of `min_range` or more) on the analysis's threads, results in
/// range order.
fn by_ranges<T: Send>(
    n: usize,
    min_range: usize,
    work: impl Fn(std::ops::Range<usize>) -> T + Sync,
) -> Vec<T> {
    let (threads, size) = ranges_of(n, min_range);
    crate::threads::map_on_threads(threads, n.div_ceil(size), |chunk| {
        work(chunk * size..((chunk + 1) * size).min(n))
    })
}

/// The threads and the range size [`by_ranges`] and [`fill_by_ranges`] cut `n` allocations
/// into: four ranges a thread, none below `min_range`.
fn ranges_of(n: usize, min_range: usize) -> (usize, usize) {
    let threads = crate::snapshot::default_threads();
    (threads, n.div_ceil(threads * 4).max(min_range).max(1))
}

/// [`by_ranges`] for work that fills two vectors of one value per allocation (a role and its
/// rule, a phase at alloc and at free): each range writes its own part of both in place (a copy
/// of both per range, then merged, cost their size again at the role pass's peak).
fn fill_by_ranges<A: Send, B: Send>(
    a: &mut [A],
    b: &mut [B],
    min_range: usize,
    work: impl Fn(std::ops::Range<usize>, &mut [A], &mut [B]) + Sync,
) {
    let (threads, size) = ranges_of(a.len(), min_range);
    // Each range's slices, taken once by the thread that works on it.
    type Part<'p, A, B> = std::sync::Mutex<Option<(&'p mut [A], &'p mut [B])>>;
    let parts: Vec<Part<'_, A, B>> = a
        .chunks_mut(size)
        .zip(b.chunks_mut(size))
        .map(|part| std::sync::Mutex::new(Some(part)))
        .collect();
    crate::threads::map_on_threads(threads, parts.len(), |k| {
        let taken = parts[k]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some((a, b)) = taken {
            work(k * size..k * size + a.len(), a, b);
        }
    });
}

/// `sorted.partition_point(is_before)`, trying `hint` and the position after it before
/// searching: a position is the partition point exactly when the item before it is before and
/// the item at it is not, so a right guess is checked in two comparisons.
pub(super) fn partition_point_near<T>(
    sorted: &[T],
    hint: usize,
    is_before: impl Fn(&T) -> bool,
) -> usize {
    let is_point = |i: usize| {
        i <= sorted.len()
            && (i == 0 || is_before(&sorted[i - 1]))
            && sorted.get(i).is_none_or(|item| !is_before(item))
    };
    if is_point(hint) {
        hint
    } else if is_point(hint + 1) {
        hint + 1
    } else {
        sorted.partition_point(is_before)
    }
}

fn role_index(names: &mut Vec<String>, name: &str) -> u8 {
    if let Some(i) = names.iter().position(|n| n == name) {
        return i as u8;
    }
    // Past 255 roles, the rest are unknown: names are capped by the rules file anyway.
    if names.len() >= u8::MAX as usize {
        return Role::Unknown as u8;
    }
    names.push(name.to_owned());
    (names.len() - 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_near_a_hint_finds_the_partition_point_whatever_the_hint() {
        // Sorted values with repeats, every threshold and every hint (right, off by one, far
        // off, past the end): the answer is always the binary search's.
        let sorted = [1u32, 3, 3, 3, 7, 9, 12, 12, 20];
        for threshold in 0..=21 {
            let is_before = |&b: &u32| b < threshold;
            let expected = sorted.partition_point(is_before);
            for hint in 0..=sorted.len() + 2 {
                assert_eq!(
                    partition_point_near(&sorted, hint, is_before),
                    expected,
                    "threshold {threshold}, hint {hint}"
                );
            }
        }
        assert_eq!(partition_point_near(&[] as &[u32], 3, |_| true), 0);
    }

    #[test]
    fn backward_starts_answer_as_a_fresh_search_in_any_order() {
        let starts = [10u32, 40, 41, 90];
        let mut remembered = BackwardStarts::default();
        let questions = [
            (Some(5), Some(9)),
            (Some(5), Some(10)),
            (Some(39), Some(41)),
            (Some(40), None),
            (Some(3), Some(95)),
            (Some(91), None),
            (None, Some(10)),
            (Some(89), Some(90)),
            (Some(10), Some(39)),
        ];
        for (start, end) in questions {
            let fresh = BackwardStarts::default().between(&starts, start, end);
            assert_eq!(
                remembered.between(&starts, start, end),
                fresh,
                "{start:?}..{end:?}"
            );
        }
        // Expected answers, so the two cannot agree on a wrong one.
        let answers: Vec<bool> = questions
            .iter()
            .map(|&(s, e)| BackwardStarts::default().between(&starts, s, e))
            .collect();
        assert_eq!(
            answers,
            [false, true, true, true, true, false, true, true, false]
        );
    }

    /// The passes that go range by range decide every allocation as one walk does: on every
    /// labelled and set-up fixture, ranges of 7 allocations give the roles, rules and role
    /// checkpoints of one range.
    #[test]
    fn roles_do_not_depend_on_the_ranges_the_passes_cut() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut checked = 0;
        for folder in ["labelled", "setups", "setups_wide"] {
            let mut files: Vec<_> = std::fs::read_dir(root.join(folder))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.extension().is_some_and(|e| e == "pickle"))
                .collect();
            files.sort();
            for path in files {
                let snapshot =
                    crate::snapshot::load_path(&path, crate::snapshot::LoadOptions::default())
                        .unwrap();
                for device in snapshot.devices() {
                    let replay = Replay::new(&snapshot, device);
                    let rules = UserRules::default();
                    let whole = DeviceRoles::in_ranges(&snapshot, &replay, device, &rules, n_max());
                    let cut = DeviceRoles::in_ranges(&snapshot, &replay, device, &rules, 7);
                    assert_eq!(cut.role, whole.role, "{}", path.display());
                    assert_eq!(cut.rule, whole.rule, "{}", path.display());
                    assert_eq!(cut.checkpoints, whole.checkpoints, "{}", path.display());
                    // Many ranges, so every pass meets range ends.
                    checked += usize::from(whole.role.len() > 10 * 7);
                }
            }
        }
        assert!(checked >= 20, "only {checked} devices checked");
    }

    /// A range longer than any fixture's allocations: one range.
    fn n_max() -> usize {
        usize::MAX / 2
    }
}
