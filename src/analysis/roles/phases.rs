//! What a stack says about the phase of training it ran in, from PyTorch's own frames.
//!
//! The rules read how PyTorch is built, not any one model: modules run under
//! `torch/nn/modules/module.py` (`_call_impl`) and a `forward` method; autograd's backward runs on
//! its own C++ thread, so a block it allocates has no Python frame at all (with `stacks="all"`
//! only C++ frames, `AccumulateGrad` for a `.grad`); optimizers live in `torch/optim/`; model
//! setup goes through `Module._apply` (`.to`/`.cuda`), `nn.init`, `load_state_dict` or
//! `from_pretrained`.

use crate::snapshot::{Annotation, FrameTable, StackId, StackTable};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The phase a stack belongs to. Checked in this order: the first kind that fits wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StackKind {
    /// Model setup: `.to()`/`.cuda()` (`Module._apply`), `nn.init`, `load_state_dict`,
    /// `torch.load`, `from_pretrained`, a module's `__init__`.
    ParamSetup,
    /// A C++ `AccumulateGrad` frame: autograd writing a `.grad` (only with `stacks="all"`).
    AccumulateGrad,
    /// `zero_grad` of an optimizer or a module.
    ZeroGrad,
    /// Inside `torch/optim/`: the optimizer step.
    Optimizer,
    /// Under a module's `forward`.
    Forward,
    /// Python's `backward` (`torch/_tensor.py`, `torch/autograd/`): the grad seed and friends.
    BackwardPython,
    /// No Python frame: autograd's engine thread (or an empty stack).
    NoPython,
    /// Python code that is none of the above: the training loop, the loss, data loading.
    Loop,
}

impl StackKind {
    /// Backward runs on autograd's thread or under Python's `backward`.
    pub fn is_backward(self) -> bool {
        matches!(
            self,
            Self::NoPython | Self::BackwardPython | Self::AccumulateGrad
        )
    }
}

const UNSET: u8 = u8::MAX;

/// What a library's own frames say a stack's block is for, beside its phase: the memory that
/// DDP, FSDP2 and library workspaces hold for themselves, which the phase rules alone would call
/// a temporary or the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StackTag {
    None,
    /// The innermost Python frame is in `torch/nn/parallel/distributed.py`: DDP's C++ reducer
    /// allocates its gradient buckets under the Python line that built it (`_ddp_init_helper`)
    /// or rebuilt it (`_pre_forward`'s `_rebuild_buckets`).
    DdpReducer,
    /// FSDP2's all-gather outputs (`alloc_storage`, `init_all_gather_outputs` in
    /// `torch/distributed/fsdp/`): the unsharded parameters, freed again by reshard.
    FsdpAllGather,
    /// FSDP2's reduce-scatter (`foreach_reduce`): the sharded gradients are views into the
    /// output it keeps.
    FsdpReduce,
    /// C++ frames (`stacks="all"`) of cuBLAS setting up its workspace:
    /// `at::cuda::setWorkspaceForHandle` (cuBLAS) or `at::cuda::getCUDABlasLtWorkspace`
    /// (cuBLASLt). Only the workspace is allocated under them; a matmul's output is allocated
    /// before, outside them.
    CublasWorkspace,
}

const TAGS: [StackTag; 5] = [
    StackTag::None,
    StackTag::DdpReducer,
    StackTag::FsdpAllGather,
    StackTag::FsdpReduce,
    StackTag::CublasWorkspace,
];

/// Each stack's kind, worked out once on first use (a trace repeats a few thousand stacks
/// millions of times).
pub struct StackKinds<'a> {
    frames: &'a FrameTable,
    stacks: &'a StackTable,
    kinds: Vec<u8>,
    tags: Vec<u8>,
}

impl<'a> StackKinds<'a> {
    pub fn new(frames: &'a FrameTable, stacks: &'a StackTable) -> Self {
        Self {
            frames,
            stacks,
            kinds: vec![UNSET; stacks.len()],
            tags: vec![UNSET; stacks.len()],
        }
    }

    /// What library frames say the stack's block is for ([`StackTag`]).
    pub fn tag(&mut self, stack: StackId) -> StackTag {
        let Some(&cached) = self.tags.get(stack as usize) else {
            return self.compute_tag(stack);
        };
        if cached != UNSET {
            return TAGS[cached as usize];
        }
        let tag = self.compute_tag(stack);
        self.tags[stack as usize] = tag as u8;
        tag
    }

    fn compute_tag(&self, stack: StackId) -> StackTag {
        let ids = self.stacks.get(stack);
        let mut innermost_python = true;
        for frame in ids.iter().map(|&id| self.frames.get(id)) {
            let file: &str = &frame.filename;
            let name: &str = &frame.name;
            if !file.ends_with(".py") {
                if name.contains("setWorkspaceForHandle") || name.contains("getCUDABlasLtWorkspace")
                {
                    return StackTag::CublasWorkspace;
                }
                continue;
            }
            if innermost_python && file.ends_with("torch/nn/parallel/distributed.py") {
                return StackTag::DdpReducer;
            }
            innermost_python = false;
            if file.contains("torch/distributed/fsdp/") {
                if name == "alloc_storage" || name == "init_all_gather_outputs" {
                    return StackTag::FsdpAllGather;
                }
                if name == "foreach_reduce" {
                    return StackTag::FsdpReduce;
                }
            }
        }
        StackTag::None
    }

    pub fn kind(&mut self, stack: StackId) -> StackKind {
        let Some(&cached) = self.kinds.get(stack as usize) else {
            return self.compute(stack);
        };
        if cached != UNSET {
            return KINDS[cached as usize];
        }
        let kind = self.compute(stack);
        self.kinds[stack as usize] = kind as u8;
        kind
    }

    /// The kind of every stack of the table, by id.
    pub fn all(&mut self) -> Vec<StackKind> {
        (0..self.stacks.len() as StackId)
            .map(|stack| self.kind(stack))
            .collect()
    }

    /// The kind of `stack`, not cached (an id past the table reads as the empty stack).
    pub(super) fn compute(&self, stack: StackId) -> StackKind {
        let ids = self.stacks.get(stack);
        let frames = ids.iter().map(|&id| self.frames.get(id));
        let mut has_python = false;
        // The outermost Python frame: autograd's engine thread enters Python only through a
        // Python autograd Function's backward (`torch/autograd/function.py` `apply`), so a stack
        // that starts there runs in backward whatever `forward` frames lie above it (compiled
        // backward graphs, reentrant checkpoint's recomputation, FSDP2's post-backward hooks).
        let mut outermost_python: Option<(&str, &str)> = None;
        // Index of the outermost `forward` and of the outermost Python `backward` frame
        // (frames are innermost first): a backward called outside every forward is a backward
        // (compiled autograd runs graphs with `forward` frames under `loss.backward()`).
        let (mut forward_at, mut backward_at) = (None, None);
        let (mut setup, mut accumulate, mut zero_grad, mut optim, mut forward, mut backward) =
            (false, false, false, false, false, false);
        for (index, frame) in frames.enumerate() {
            let file: &str = &frame.filename;
            let name: &str = &frame.name;
            let python = file.ends_with(".py");
            has_python |= python;
            if !python {
                accumulate |= name.contains("AccumulateGrad");
                continue;
            }
            outermost_python = Some((file, name));
            setup |= is_setup_frame(file, name);
            zero_grad |= name == "zero_grad";
            optim |= file.contains("torch/optim/");
            if name == "forward"
                || (file.ends_with("torch/nn/modules/module.py") && name.ends_with("call_impl"))
            {
                forward = true;
                forward_at = Some(index);
            }
            if name == "backward"
                && (file.ends_with("torch/_tensor.py") || file.contains("torch/autograd/"))
            {
                backward = true;
                backward_at = Some(index);
            }
        }
        // Also non-reentrant checkpoint's recomputation: the engine unpacks a saved tensor
        // through the hook `torch/utils/checkpoint.py` registered, which reruns forward.
        let engine_thread = outermost_python.is_some_and(|(file, name)| {
            (file.ends_with("torch/autograd/function.py") && name == "apply")
                || file.ends_with("torch/utils/checkpoint.py")
        });
        let backward_outside_forward = match (backward_at, forward_at) {
            (Some(b), Some(f)) => b > f,
            _ => false,
        };
        if setup {
            StackKind::ParamSetup
        } else if accumulate {
            StackKind::AccumulateGrad
        } else if engine_thread || backward_outside_forward {
            StackKind::BackwardPython
        } else if zero_grad {
            StackKind::ZeroGrad
        } else if optim {
            StackKind::Optimizer
        } else if forward {
            StackKind::Forward
        } else if backward {
            StackKind::BackwardPython
        } else if !has_python {
            StackKind::NoPython
        } else {
            StackKind::Loop
        }
    }
}

const KINDS: [StackKind; 8] = [
    StackKind::ParamSetup,
    StackKind::AccumulateGrad,
    StackKind::ZeroGrad,
    StackKind::Optimizer,
    StackKind::Forward,
    StackKind::BackwardPython,
    StackKind::NoPython,
    StackKind::Loop,
];

/// Frames that make or move a model's weights.
fn is_setup_frame(file: &str, name: &str) -> bool {
    let module_file = file.contains("torch/nn/modules/");
    (module_file && (name == "_apply" || name == "__init__" || name == "reset_parameters"))
        || file.ends_with("torch/nn/init.py")
        // torch.load(map_location="cuda"): a checkpoint's tensors, the weights once assigned.
        || file.ends_with("torch/serialization.py")
        || name == "load_state_dict"
        || name == "_load_from_state_dict"
        || name == "from_pretrained"
        || name == "to_empty"
        // FSDP2's `fully_shard` replaces each parameter by its local shard (a DTensor's).
        || (file.contains("torch/distributed/") && name == "fully_shard")
        || name == "_init_weights"
        || name == "init_weights"
}

/// Phases from `external_annotations`: the START/END times of `record_function` ranges that
/// name a phase (`Optimizer.step#AdamW.step`, `Optimizer.zero_grad#…`, `…forward`,
/// `…backward`). A second source of phases, for stacks whose frames cannot say: C++-only or
/// empty stacks (`NoPython`) and Python stacks with no module frame (`Loop`).
#[derive(Debug, Default)]
pub struct AnnotatedPhases {
    /// `(from_us, phase)` by time: from each moment on (until the next), the innermost open
    /// range's phase. Flattened once, so a lookup is at most one binary search however many steps the
    /// trace annotates (a scan of the ranges per allocation was quadratic on long traces).
    changes: Vec<(i64, Option<StackKind>)>,
    /// Where the last lookup landed: the role pass asks in time order, so the next answer is
    /// nearly always there or one further (see [`super::partition_point_near`]).
    /// (An atomic only so that threads can share the phases to clone them; each clone is asked
    /// by one thread.)
    hint: AtomicUsize,
}

impl Clone for AnnotatedPhases {
    /// The same phases, with a hint of their own.
    fn clone(&self) -> Self {
        Self {
            changes: self.changes.clone(),
            hint: AtomicUsize::new(0),
        }
    }
}

impl AnnotatedPhases {
    /// The phase ranges of `device` among `annotations`; an END pairs with the latest open
    /// START of the same name, and a START never closed runs to the end of time.
    pub fn new(annotations: &[Annotation], device: usize) -> Self {
        let mut open: Vec<(&str, i64, StackKind)> = Vec::new();
        let mut ranges = Vec::new();
        for annotation in annotations
            .iter()
            .filter(|a| usize::try_from(a.device).is_ok_and(|d| d == device))
        {
            let Some(name) = annotation.fields.get("name") else {
                continue;
            };
            let Some(kind) = phase_of_range(name) else {
                continue;
            };
            match annotation.fields.get("stage").map(String::as_str) {
                Some("START") => open.push((name, annotation.time_us, kind)),
                Some("END") => {
                    if let Some(at) = open.iter().rposition(|(n, _, _)| n == name) {
                        let (_, start, kind) = open.remove(at);
                        ranges.push((start, annotation.time_us, kind));
                    }
                }
                _ => {}
            }
        }
        ranges.extend(
            open.into_iter()
                .map(|(_, start, kind)| (start, i64::MAX, kind)),
        );
        // Sweep the starts and ends in time order (an end just after its last microsecond),
        // keeping the open ranges by start: the last one open is the innermost.
        let mut points: Vec<(i64, bool, usize)> = Vec::with_capacity(2 * ranges.len());
        for (index, &(start, end, _)) in ranges.iter().enumerate() {
            points.push((start, true, index));
            points.push((end.saturating_add(1), false, index));
        }
        points.sort_unstable();
        let mut inside: Vec<usize> = Vec::new();
        let mut changes: Vec<(i64, Option<StackKind>)> = Vec::new();
        for (time, starts, index) in points {
            if starts {
                let at = inside.partition_point(|&i| ranges[i].0 <= ranges[index].0);
                inside.insert(at, index);
            } else if let Some(at) = inside.iter().position(|&i| i == index) {
                inside.remove(at);
            }
            let phase = inside.last().map(|&i| ranges[i].2);
            match changes.last_mut() {
                Some(last) if last.0 == time => last.1 = phase,
                _ => changes.push((time, phase)),
            }
        }
        Self {
            changes,
            hint: AtomicUsize::new(0),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The innermost annotated phase covering `time_us`, if any.
    pub fn at(&self, time_us: i64) -> Option<StackKind> {
        let after = super::partition_point_near(
            &self.changes,
            self.hint.load(Ordering::Relaxed),
            |&(from, _)| from <= time_us,
        );
        self.hint.store(after, Ordering::Relaxed);
        after.checked_sub(1).and_then(|i| self.changes[i].1)
    }
    /// `kind` refined by the annotated phase at `time_us` where the frames could not tell
    /// (no Python frame, or Python with no module frame). Autograd's thread does not run inside
    /// an optimizer step, so a frameless block there is the optimizer's.
    pub fn refine(&self, kind: StackKind, time_us: i64) -> StackKind {
        if self.changes.is_empty() || !matches!(kind, StackKind::NoPython | StackKind::Loop) {
            return kind;
        }
        match self.at(time_us) {
            // A frameless block in backward is what the frames already say.
            Some(StackKind::NoPython) | None => kind,
            Some(annotated) => annotated,
        }
    }
}

/// The phase a `record_function` range name stands for: torch names optimizer ranges
/// `Optimizer.step#<class>.step` and `Optimizer.zero_grad#<class>.zero_grad`, DDP's forward
/// `DistributedDataParallel.forward`, and users name theirs `forward`/`backward`.
fn phase_of_range(name: &str) -> Option<StackKind> {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("optimizer.zero_grad") || lower.ends_with("zero_grad") {
        Some(StackKind::ZeroGrad)
    } else if lower.starts_with("optimizer.step") {
        Some(StackKind::Optimizer)
    } else if lower.contains("backward") {
        Some(StackKind::NoPython)
    } else if lower.contains("forward") {
        Some(StackKind::Forward)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Frame;

    fn stack_of(frames: &mut FrameTable, stacks: &mut StackTable, f: &[(&str, &str)]) -> StackId {
        let ids: Vec<_> = f
            .iter()
            .map(|(file, name)| {
                frames.intern(Frame {
                    filename: (*file).into(),
                    line: 1,
                    name: (*name).into(),
                })
            })
            .collect();
        stacks.intern(&ids)
    }

    #[test]
    fn kinds_follow_pytorch_frames() {
        let mut frames = FrameTable::default();
        let mut stacks = StackTable::default();
        let m = "/x/torch/nn/modules/module.py";
        let setup = stack_of(&mut frames, &mut stacks, &[(m, "<lambda>"), (m, "_apply")]);
        let optim = stack_of(
            &mut frames,
            &mut stacks,
            &[("/x/torch/optim/adam.py", "_init_group")],
        );
        let fwd = stack_of(
            &mut frames,
            &mut stacks,
            &[("/x/a/model.py", "forward"), (m, "_call_impl")],
        );
        let cpp = stack_of(
            &mut frames,
            &mut stacks,
            &[("??", "torch::autograd::AccumulateGrad::apply")],
        );
        let cpp_other = stack_of(&mut frames, &mut stacks, &[("??", "at::native::mm")]);
        let zero = stack_of(
            &mut frames,
            &mut stacks,
            &[("/x/torch/optim/optimizer.py", "zero_grad")],
        );
        let loop_ = stack_of(&mut frames, &mut stacks, &[("/home/me/train.py", "main")]);
        let mut kinds = StackKinds::new(&frames, &stacks);
        assert_eq!(kinds.kind(setup), StackKind::ParamSetup);
        assert_eq!(kinds.kind(optim), StackKind::Optimizer);
        assert_eq!(kinds.kind(fwd), StackKind::Forward);
        assert_eq!(kinds.kind(cpp), StackKind::AccumulateGrad);
        assert_eq!(kinds.kind(cpp_other), StackKind::NoPython);
        assert_eq!(kinds.kind(StackTable::EMPTY), StackKind::NoPython);
        assert_eq!(kinds.kind(zero), StackKind::ZeroGrad);
        assert_eq!(kinds.kind(loop_), StackKind::Loop);
        // Cached answers are the same answers.
        assert_eq!(kinds.kind(fwd), StackKind::Forward);
    }

    fn annotation(name: &str, stage: &str, time_us: i64, device: i64) -> Annotation {
        Annotation {
            device,
            time_us,
            fields: [("name", name), ("stage", stage)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }

    #[test]
    fn annotated_ranges_give_phases_where_frames_cannot() {
        let annotations = [
            annotation("ProfilerStep#1", "START", 0, 0),
            annotation("my_model.forward", "START", 10, 0),
            annotation("my_model.forward", "END", 20, 0),
            annotation("Optimizer.step#Adam.step", "START", 30, 0),
            annotation("Optimizer.step#Adam.step", "END", 40, 0),
            annotation("Optimizer.zero_grad#Adam.zero_grad", "START", 50, 0),
            annotation("Optimizer.zero_grad#Adam.zero_grad", "END", 60, 0),
            // Another device's ranges are not this one's.
            annotation("Optimizer.step#Adam.step", "START", 70, 1),
            annotation("Optimizer.step#Adam.step", "END", 80, 1),
            // Never closed: to the end of time.
            annotation("loss.backward", "START", 90, 0),
        ];
        let phases = AnnotatedPhases::new(&annotations, 0);
        assert_eq!(phases.at(5), None, "ProfilerStep is a step, not a phase");
        assert_eq!(phases.at(15), Some(StackKind::Forward));
        assert_eq!(phases.at(35), Some(StackKind::Optimizer));
        assert_eq!(phases.at(55), Some(StackKind::ZeroGrad));
        assert_eq!(phases.at(75), None);
        assert_eq!(phases.at(1_000), Some(StackKind::NoPython));
        // Only frameless or loop stacks are refined; frames that name a phase win.
        assert_eq!(phases.refine(StackKind::NoPython, 35), StackKind::Optimizer);
        assert_eq!(phases.refine(StackKind::Loop, 15), StackKind::Forward);
        assert_eq!(phases.refine(StackKind::Loop, 55), StackKind::ZeroGrad);
        assert_eq!(phases.refine(StackKind::Forward, 35), StackKind::Forward);
        assert_eq!(phases.refine(StackKind::NoPython, 25), StackKind::NoPython);
        assert_eq!(phases.refine(StackKind::Loop, 1_000), StackKind::Loop);
    }

    #[test]
    fn nested_ranges_answer_with_the_innermost() {
        let annotations = [
            annotation("DistributedDataParallel.forward", "START", 0, 0),
            annotation("Optimizer.step#SGD.step", "START", 10, 0),
            annotation("Optimizer.step#SGD.step", "END", 20, 0),
            annotation("DistributedDataParallel.forward", "END", 30, 0),
        ];
        let phases = AnnotatedPhases::new(&annotations, 0);
        assert_eq!(phases.at(5), Some(StackKind::Forward));
        assert_eq!(phases.at(15), Some(StackKind::Optimizer));
        assert_eq!(phases.at(25), Some(StackKind::Forward));
        assert!(AnnotatedPhases::new(&[], 0).is_empty());
    }
}
