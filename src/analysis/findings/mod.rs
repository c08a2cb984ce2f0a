//! Findings: diagnoses with their evidence, their size in bytes, and the fix in one sentence.
//!
//! Each fires only where the data shows the problem, so an ordinary training run gets none of
//! the warnings: `activations_kept_without_backward` needs a device with no backward at all and
//! kept forward blocks from many places in the model; `live_memory_grows_per_step` needs live
//! memory at the start of every step (after the first) to rise, step after step.

mod fragmentation;
mod steps;

use super::DeviceAnalysis;
use super::roles::{DeviceRoles, Role};
use crate::format::bytes as human_bytes;
use crate::snapshot::Snapshot;
use fragmentation::{fragmentation_at_oom, fragmentation_at_reserved_peak};
use serde::Serialize;
use steps::{
    gradients_kept_between_steps, live_memory_grows_per_step, optimizer_state_raises_peak,
};

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Finding {
    /// Stable identifier, e.g. `activations_kept_without_backward`.
    #[serde(deserialize_with = "super::intern_code")]
    pub code: super::InternedCode,
    /// `warning` (memory is wasted) or `info` (worth knowing, often intended).
    #[serde(deserialize_with = "super::intern_code")]
    pub severity: super::InternedCode,
    /// The bytes it is about.
    pub bytes: u64,
    pub message: String,
    /// The fix, in one sentence.
    pub fix: String,
    /// The event that shows it best (`null`: the whole trace).
    pub event: Option<usize>,
}

/// Kept forward blocks must come from at least this many stacks: a graph kept alive holds
/// tensors of every kind of layer, an inference loop's kept outputs come from one line.
const KEPT_GRAPH_MIN_STACKS: usize = 4;

/// Every finding of one device, warnings first.
pub fn device_findings(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Vec<Finding> {
    // Every finding reads the CUDA caching allocator's behaviour (its pools, its segments, the
    // training loop's phases); pinned host memory has another allocator, so nothing is said of
    // it rather than something unproven.
    if snapshot.source.host_device == Some(device.device) {
        return Vec::new();
    }
    let mut findings = Vec::new();
    findings.extend(activations_kept_without_backward(snapshot, device, roles));
    let retained = graph_retained_across_steps(snapshot, device, roles);
    // Growth that the retained graphs hold in full is the same leak told twice: the graphs'
    // finding names its cause and fix, so the growth says nothing more.
    let growth = live_memory_grows_per_step(snapshot, device, roles).filter(|growth| {
        retained
            .as_ref()
            .is_none_or(|graphs| graphs.bytes < growth.bytes)
    });
    findings.extend(retained);
    findings.extend(growth);
    findings.extend(outputs_kept_across_steps(snapshot, device, roles));
    findings.extend(ddp_gradients_copied(snapshot, device, roles));
    let at_oom = fragmentation_at_oom(snapshot, device);
    if at_oom.is_empty() {
        findings.extend(fragmentation_at_reserved_peak(snapshot, device));
    }
    findings.extend(at_oom);
    findings.extend(optimizer_state_raises_peak(snapshot, device, roles));
    findings.extend(gradients_kept_between_steps(device, roles));
    findings.sort_by_key(|f| f.severity != "warning");
    findings
}

fn last_event(device: &DeviceAnalysis) -> Option<usize> {
    device.replay.len().checked_sub(1)
}

/// The allocations live after event `at` (`None`: before the first) that `keep` accepts.
fn live_at(
    replay: &super::replay::Replay,
    at: Option<usize>,
    keep: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let mut live = replay.live_after(at);
    live.retain(|&id| keep(id));
    live
}

/// The last event, and the allocations live after it that `keep` accepts: what the program
/// still holds when the trace ends.
fn live_at_end(device: &DeviceAnalysis, keep: impl Fn(u32) -> bool) -> (Option<usize>, Vec<u32>) {
    let end = last_event(device);
    (end, live_at(&device.replay, end, keep))
}

fn activations_kept_without_backward(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    if roles.saw_backward {
        return None;
    }
    let replay = &device.replay;
    let end = last_event(device);
    let live = replay.live_after(end);
    // What autograd saved: forward blocks nothing freed (the outputs the program keeps, caches
    // and workspaces have roles of their own and are not counted).
    let kept: Vec<u32> = live
        .iter()
        .copied()
        .filter(|&id| roles.is_kept_forward(id))
        .collect();
    let stacks = stacks_by_bytes(replay, &kept);
    if stacks.len() < KEPT_GRAPH_MIN_STACKS {
        return None;
    }
    let saved: u64 = sizes(replay, &kept);
    // Batches of earlier calls still alive: the loop dropped them, the saved graph (an
    // embedding saves its indices) keeps them; no_grad frees them too.
    let last_call = roles.pass_starts.last().copied();
    let batches = of_role_started(replay, roles, &live, Role::Input, |start| {
        last_call.is_some_and(|last| start < last)
    });
    let batch_bytes = sizes(replay, &batches);
    let bytes = saved + batch_bytes;
    let batch_text = if batches.is_empty() {
        String::new()
    } else {
        format!(
            " and {} of {} earlier batches they keep",
            human_bytes(batch_bytes),
            batches.len()
        )
    };
    Some(Finding {
        code: "activations_kept_without_backward",
        severity: "warning",
        bytes,
        message: format!(
            "no backward ran, yet autograd keeps {} for one: {} of activations saved by {} \
             places in the model ({} blocks){batch_text}; largest: {}",
            human_bytes(bytes),
            human_bytes(saved),
            stacks.len(),
            kept.len(),
            named_stacks(snapshot, &stacks, 2)
        ),
        fix: format!(
            "wrap inference in `torch.no_grad()` or `torch.inference_mode()`: that frees {} \
             (the outputs you keep stay)",
            human_bytes(bytes)
        ),
        event: end,
    })
}

/// The FAQ leak: a loss or output summed or stored across steps keeps each step's graph, and
/// with it every tensor that graph saved. Seen as forward blocks no backward freed, still
/// alive after later calls of the model began, from many places in the model, on a device that
/// does run backward (so it is not inference).
fn graph_retained_across_steps(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    if !roles.saw_backward {
        return None;
    }
    let replay = &device.replay;
    let end = last_event(device);
    let starts = &roles.pass_starts;
    let &last_call = starts.last()?;
    let live = replay.live_after(end);
    // Saved blocks of calls before the last one: nothing will free them.
    let retained: Vec<u32> = live
        .iter()
        .copied()
        .filter(|&id| {
            roles.is_kept_forward(id)
                && replay
                    .allocations
                    .start(id as usize)
                    .is_some_and(|s| s < last_call)
        })
        .collect();
    let stacks = stacks_by_bytes(replay, &retained);
    if stacks.len() < KEPT_GRAPH_MIN_STACKS {
        return None;
    }
    let call_of = |id: u32| {
        let start = replay.allocations.start(id as usize).unwrap_or(0);
        starts.partition_point(|&s| s <= start)
    };
    let mut calls: Vec<usize> = retained.iter().map(|&id| call_of(id)).collect();
    calls.sort_unstable();
    calls.dedup();
    if calls.len() < 2 {
        return None;
    }
    // The last call's blocks from the same places are its graph, kept alike.
    let places: rustc_hash::FxHashSet<u32> = stacks.iter().map(|&(stack, _)| stack).collect();
    let mut current = of_role_started(replay, roles, &live, Role::Activation, |start| {
        start >= last_call
    });
    current.retain(|&id| places.contains(&replay.allocations.stack(id as usize)));
    let steps = calls.len() + usize::from(!current.is_empty());
    let bytes = sizes(replay, &retained) + sizes(replay, &current);
    let per_step = bytes / steps as u64;
    // The loop's last live tensor made outside the model after the last call: where a summed
    // loss or a list of outputs hangs the graphs.
    let holder = live
        .iter()
        .copied()
        .filter(|&id| {
            let allocation = replay.allocations.at(id as usize);
            allocation.start.is_some_and(|s| s >= last_call)
                && !made_in_module(snapshot, allocation.stack)
        })
        .max_by_key(|&id| replay.allocations.start(id as usize))
        .map(|id| {
            let stack = replay.allocations.stack(id as usize);
            format!(
                "; the loop's last tensor still held was made at {}",
                innermost_user_frame(snapshot, stack).unwrap_or_else(|| "<non-python>".into())
            )
        })
        .unwrap_or_default();
    Some(Finding {
        code: "graph_retained_across_steps",
        severity: "warning",
        bytes,
        message: format!(
            "the graphs of {steps} steps are still alive, {} per step, {} in all: tensors saved \
             for a backward that never runs (largest: {}){holder}",
            human_bytes(per_step),
            human_bytes(bytes),
            named_stacks(snapshot, &stacks, 1)
        ),
        fix: format!(
            "keep numbers, not tensors, across steps: `total += loss.item()` (or `loss.detach()`) \
             frees {} per step",
            human_bytes(per_step)
        ),
        event: end,
    })
}

/// Outputs the program keeps (a list of each batch's logits): intended or not, they are memory
/// it holds, and usually only numbers from them are needed.
fn outputs_kept_across_steps(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    let (end, outputs) = live_at_end(device, |id| roles.role_index_of(id) == Role::Output as u8);
    let replay = &device.replay;
    if outputs.len() < 2 {
        return None;
    }
    let bytes = sizes(replay, &outputs);
    let stacks = stacks_by_bytes(replay, &outputs);
    Some(Finding {
        code: "outputs_kept_across_steps",
        severity: "info",
        bytes,
        message: format!(
            "{} batches of outputs, {} ({} each on average), are kept (largest: {})",
            outputs.len(),
            human_bytes(bytes),
            human_bytes(bytes / outputs.len() as u64),
            named_stacks(snapshot, &stacks, 1)
        ),
        fix: format!(
            "keep `.cpu()` copies or the numbers you need (`.argmax(-1)`, `.item()`) instead of \
             the outputs: that frees up to {}",
            human_bytes(bytes)
        ),
        event: end,
    })
}

/// DDP without `gradient_as_bucket_view` keeps every gradient twice: autograd's `.grad` and the
/// reducer's bucket it is copied into for all-reduce.
fn ddp_gradients_copied(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    let (end, buckets) = live_at_end(device, |id| roles.is_ddp_gradient_copy(id));
    let replay = &device.replay;
    let bytes = sizes(replay, &buckets);
    if bytes == 0 {
        return None;
    }
    let stacks = stacks_by_bytes(replay, &buckets);
    Some(Finding {
        code: "ddp_gradients_copied",
        severity: "info",
        bytes,
        message: format!(
            "DDP keeps the gradients twice: besides the `.grad` tensors, {} buckets hold {} of \
             copies for all-reduce ({})",
            buckets.len(),
            human_bytes(bytes),
            named_stacks(snapshot, &stacks, 1)
        ),
        fix: format!(
            "`DistributedDataParallel(model, gradient_as_bucket_view=True)` makes the `.grad` \
             tensors views into the buckets: that saves {}",
            human_bytes(bytes)
        ),
        event: end,
    })
}

/// Those of `ids` that have role `role` and whose alloc event passes `started` (a block alive
/// from before the trace has none, and is left out).
fn of_role_started(
    replay: &super::replay::Replay,
    roles: &DeviceRoles,
    ids: &[u32],
    role: Role,
    started: impl Fn(u32) -> bool,
) -> Vec<u32> {
    ids.iter()
        .copied()
        .filter(|&id| {
            roles.role_index_of(id) == role as u8
                && replay.allocations.start(id as usize).is_some_and(&started)
        })
        .collect()
}

fn sizes(replay: &super::replay::Replay, ids: &[u32]) -> u64 {
    ids.iter()
        .map(|&id| replay.allocations.size(id as usize))
        .sum()
}

/// The stacks of `ids` with their bytes, most bytes first.
fn stacks_by_bytes(replay: &super::replay::Replay, ids: &[u32]) -> Vec<(u32, u64)> {
    let mut by_stack: rustc_hash::FxHashMap<u32, u64> = Default::default();
    for &id in ids {
        *by_stack
            .entry(replay.allocations.stack(id as usize))
            .or_default() += replay.allocations.size(id as usize);
    }
    let mut stacks: Vec<(u32, u64)> = by_stack.into_iter().collect();
    stacks.sort_by_key(|&(stack, bytes)| (std::cmp::Reverse(bytes), stack));
    stacks
}

/// The first `n` stacks as "`bytes` at `where`", joined.
fn named_stacks(snapshot: &Snapshot, stacks: &[(u32, u64)], n: usize) -> String {
    stacks
        .iter()
        .take(n)
        .map(|&(stack, bytes)| format!("{} at {}", human_bytes(bytes), code_where(snapshot, stack)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn is_torch_file(file: &str) -> bool {
    file.contains("/torch/") || file.starts_with("torch/")
}

fn is_module_call(file: &str, name: &str) -> bool {
    file.ends_with("torch/nn/modules/module.py") && name.ends_with("call_impl")
}

fn short_file(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// Whether a stack runs inside a module's call (the model made it).
fn made_in_module(snapshot: &Snapshot, stack: crate::snapshot::StackId) -> bool {
    snapshot.stacks.get(stack).iter().any(|&f| {
        let frame = snapshot.frames.get(f);
        is_module_call(&frame.filename, &frame.name)
    })
}

/// The innermost Python frame outside torch, as `file.py:line name`.
fn innermost_user_frame(snapshot: &Snapshot, stack: crate::snapshot::StackId) -> Option<String> {
    snapshot
        .stacks
        .get(stack)
        .iter()
        .map(|&f| snapshot.frames.get(f))
        .find(|frame| frame.filename.ends_with(".py") && !is_torch_file(&frame.filename))
        .map(|frame| {
            format!(
                "{}:{} {}",
                short_file(&frame.filename),
                frame.line,
                frame.name
            )
        })
}

/// Where a stack's code is, for a reader: the line that called the model, the model's own
/// `forward` frames from the outside in (its module path), and the innermost frame (often
/// torch's, shared by every layer of a kind). E.g. "train.py:705 keep_outputs_run → model
/// train.py:294 forward › train.py:273 forward → linear.py:134 forward". Plain text: the pages
/// show a finding's message as text.
fn code_where(snapshot: &Snapshot, stack: crate::snapshot::StackId) -> String {
    let frames: Vec<&crate::snapshot::Frame> = snapshot
        .stacks
        .get(stack)
        .iter()
        .map(|&f| snapshot.frames.get(f))
        .filter(|frame| frame.filename.ends_with(".py"))
        .collect();
    let Some(innermost) = frames.first() else {
        return "<non-python> (autograd's thread)".to_owned();
    };
    let label = |frame: &crate::snapshot::Frame| {
        format!(
            "{}:{} {}",
            short_file(&frame.filename),
            frame.line,
            frame.name
        )
    };
    // Frames are innermost first: the outermost module call is the last one.
    let outermost_call = frames
        .iter()
        .rposition(|frame| is_module_call(&frame.filename, &frame.name));
    let Some(outermost_call) = outermost_call else {
        // Not inside a model: the innermost frame outside torch says where.
        return innermost_user_frame(snapshot, stack).unwrap_or_else(|| label(innermost));
    };
    let caller = frames[outermost_call + 1..]
        .iter()
        .find(|frame| !is_torch_file(&frame.filename))
        .map(|frame| label(frame));
    // The innermost frame is named last on its own; when it is the model's code, not torch's,
    // it ends the path instead.
    let inner_is_user = !is_torch_file(&innermost.filename);
    let path: Vec<String> = frames[usize::from(inner_is_user)..outermost_call]
        .iter()
        .rev()
        .filter(|frame| !is_torch_file(&frame.filename))
        .map(|frame| label(frame))
        .collect();
    let mut text = String::new();
    if let Some(caller) = caller {
        text.push_str(&caller);
        text.push_str(" → ");
    }
    if !path.is_empty() {
        text.push_str("model ");
        text.push_str(&path.join(" › "));
        text.push_str(" → ");
    }
    text.push_str(&label(innermost));
    text
}
