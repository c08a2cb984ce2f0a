//! Findings: diagnoses with their evidence, their size in bytes, and the fix in one sentence.
//!
//! Each fires only where the data shows the problem, so an ordinary training run gets none of
//! the warnings: `activations_kept_without_backward` needs a device with no backward at all and
//! kept forward blocks from many places in the model; `live_memory_grows_per_step` needs live
//! memory at the start of every step (after the first) to rise, step after step.

use super::DeviceAnalysis;
use super::roles::{DeviceRoles, Role};
use super::stacks::display_frames;
use crate::format::bytes as human_bytes;
use crate::snapshot::{ActionCode, Snapshot};
use serde::Serialize;

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Finding {
    /// Stable identifier, e.g. `activations_kept_without_backward`.
    #[serde(deserialize_with = "super::static_text")]
    pub code: super::StaticText,
    /// `warning` (memory is wasted) or `info` (worth knowing, often intended).
    #[serde(deserialize_with = "super::static_text")]
    pub severity: super::StaticText,
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
/// Steps (after the first, which creates optimizer state) needed to call memory growing.
const GROWTH_MIN_STEPS: usize = 3;

/// Reserved but unused bytes at the reserved peak must be at least this share of it...
const FRAGMENTED_SHARE: f64 = 0.2;
/// ...and at least this many bytes, for fragmentation near the peak to be worth a word.
const FRAGMENTED_MIN_BYTES: u64 = 1 << 30;
/// Optimizer state made in the first step and live at the peak must be at least this share of
/// the peak for it to be said to raise it.
const STATE_SHARE_OF_PEAK: f64 = 0.15;

/// Every finding of one device, warnings first.
pub fn device_findings(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.extend(activations_kept_without_backward(device, roles));
    findings.extend(live_memory_grows_per_step(snapshot, device, roles));
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

fn activations_kept_without_backward(
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    if roles.saw_backward {
        return None;
    }
    let replay = &device.replay;
    let end = last_event(device);
    let kept: Vec<u32> = replay
        .live_after(end)
        .into_iter()
        .filter(|&id| roles.is_kept_forward(id))
        .collect();
    let mut stacks: Vec<u32> = kept
        .iter()
        .map(|&id| replay.allocations.stack(id as usize))
        .collect();
    stacks.sort_unstable();
    stacks.dedup();
    if stacks.len() < KEPT_GRAPH_MIN_STACKS {
        return None;
    }
    let bytes: u64 = kept
        .iter()
        .map(|&id| replay.allocations.size(id as usize))
        .sum();
    Some(Finding {
        code: "activations_kept_without_backward",
        severity: "warning",
        bytes,
        message: format!(
            "{} of activations made in forward are still alive and no backward ran: autograd \
             keeps them for a backward that never comes ({} blocks from {} places in the model)",
            human_bytes(bytes),
            kept.len(),
            stacks.len()
        ),
        fix: format!(
            "wrap inference in `torch.no_grad()` or `torch.inference_mode()`; {} of activations \
             are kept",
            human_bytes(bytes)
        ),
        event: end,
    })
}

fn live_memory_grows_per_step(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    let replay = &device.replay;
    // Live bytes just before each step's forward, from the second step on (the first creates
    // optimizer state and gradients that every later step keeps).
    let starts = roles.forward_starts.get(1..)?;
    if starts.len() < GROWTH_MIN_STEPS {
        return None;
    }
    let live: Vec<u64> = starts
        .iter()
        .map(|&s| replay.allocated_after((s as usize).checked_sub(1)))
        .collect();
    if !live.windows(2).all(|w| w[1] > w[0]) {
        return None;
    }
    let growth = live[live.len() - 1] - live[0];
    let per_step = growth / (live.len() as u64 - 1);
    // The blocks alive at the last step's start that have outlived at least one whole step
    // (made between the second and the last but one step's start) hold the growth; the batch
    // of the step about to run is newer.
    let (from, until, to) = (
        starts[0],
        starts[starts.len() - 2],
        starts[starts.len() - 1],
    );
    let mut by_stack: rustc_hash::FxHashMap<u32, u64> = Default::default();
    for id in replay.live_after(Some(to as usize).and_then(|t| t.checked_sub(1))) {
        let allocation = replay.allocations.at(id as usize);
        if allocation.start.is_some_and(|s| s >= from && s < until) {
            *by_stack.entry(allocation.stack).or_default() += allocation.size;
        }
    }
    let mut holders: Vec<(u32, u64)> = by_stack.into_iter().collect();
    holders.sort_by_key(|&(stack, bytes)| (std::cmp::Reverse(bytes), stack));
    let named: Vec<String> = holders
        .iter()
        .take(3)
        .map(|&(stack, bytes)| {
            let frames = display_frames(snapshot, stack);
            let top = frames.first().map_or_else(
                || "<non-python>".to_owned(),
                |frame| crate::snapshot::short_frame_label(frame),
            );
            format!("{} at {top}", human_bytes(bytes))
        })
        .collect();
    Some(Finding {
        code: "live_memory_grows_per_step",
        severity: "warning",
        bytes: growth,
        message: format!(
            "live memory at the start of each step grows by {} per step ({} over {} steps); held by: {}",
            human_bytes(per_step),
            human_bytes(growth),
            live.len() - 1,
            if named.is_empty() {
                "blocks alive from before".to_owned()
            } else {
                named.join("; ")
            }
        ),
        fix: "keep numbers, not tensors, across steps (`loss.item()`, `out.detach().cpu()`), and \
              empty caches that grow every step"
            .to_owned(),
        event: Some(to as usize),
    })
}

fn fragmentation_at_oom(snapshot: &Snapshot, device: &DeviceAnalysis) -> Vec<Finding> {
    let trace = snapshot.trace(device.device);
    let replay = &device.replay;
    trace
        .action
        .iter()
        .enumerate()
        .filter(|&(_, &a)| a == ActionCode::OOM)
        .filter_map(|(event, _)| {
            let requested = trace.size.get(event);
            let reserved = replay.reserved_after(Some(event));
            let allocated = replay.allocated_after(Some(event));
            let unused = reserved.saturating_sub(allocated);
            // Only when the cache held enough free bytes in total: then no single block fit.
            (requested > 0 && unused >= requested).then(|| Finding {
                code: "fragmentation",
                severity: "warning",
                bytes: unused,
                message: format!(
                    "out of memory asking for {} while {} were reserved but unused ({} reserved, {} allocated): \
                     no free block was big enough",
                    human_bytes(requested),
                    human_bytes(unused),
                    human_bytes(reserved),
                    human_bytes(allocated)
                ),
                fix: "set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` so free memory can be \
                      joined, or call `torch.cuda.empty_cache()` before the large allocation"
                    .to_owned(),
                event: Some(event),
            })
        })
        .collect()
}

fn gradients_kept_between_steps(device: &DeviceAnalysis, roles: &DeviceRoles) -> Option<Finding> {
    let replay = &device.replay;
    let &last_start = roles.forward_starts.get(1..)?.last()?;
    let before = (last_start as usize).checked_sub(1);
    let bytes: u64 = replay
        .live_after(before)
        .into_iter()
        .filter(|&id| roles.role_index_of(id) == Role::Gradient as u8)
        .map(|id| replay.allocations.size(id as usize))
        .sum();
    (bytes > 0).then(|| Finding {
        code: "gradients_kept_between_steps",
        severity: "info",
        bytes,
        message: format!(
            "{} of `.grad` tensors stay allocated through forward (zero_grad(set_to_none=False), or \
             gradient accumulation)",
            human_bytes(bytes)
        ),
        fix: "unless you accumulate gradients, `optimizer.zero_grad(set_to_none=True)` (the \
              default since torch 2.0) frees them before forward"
            .to_owned(),
        event: before,
    })
}

/// The cache reached its most reserved bytes by making a new segment while a large share of
/// what it already held sat unused: the allocator only makes a segment when no cached block
/// fits the request, so the unused bytes were there but in pieces too small. Only at the
/// reserved peak (where it costs device memory) and only when the waste is large; expandable
/// segments (`segment_map`) are left alone, since they are the fix.
fn fragmentation_at_reserved_peak(snapshot: &Snapshot, device: &DeviceAnalysis) -> Option<Finding> {
    let trace = snapshot.trace(device.device);
    let replay = &device.replay;
    let peak = replay.peak_reserved(trace);
    let event = peak.event_index?;
    if trace.action.get(event) != Some(&ActionCode::SEGMENT_ALLOC) {
        return None;
    }
    let before = event.checked_sub(1);
    let unused = replay
        .reserved_after(before)
        .saturating_sub(replay.allocated_after(before));
    // The request the new segment was made for: the next alloc on the same stream.
    let stream = trace.stream(event);
    let request = (event + 1..trace.len().min(event + 64))
        .find(|&e| trace.action[e] == ActionCode::ALLOC && trace.stream(e) == stream)
        .map(|e| trace.size.get(e))?;
    let large = unused as f64 >= FRAGMENTED_SHARE * peak.bytes as f64
        && unused >= FRAGMENTED_MIN_BYTES
        && unused >= request;
    large.then(|| Finding {
        code: "fragmentation",
        severity: "warning",
        bytes: unused,
        message: format!(
            "reserved memory peaked at {} when a new {} segment was made for a {} request while \
             {} of the cache was reserved but unused: no free block was big enough",
            human_bytes(peak.bytes),
            human_bytes(trace.size.get(event)),
            human_bytes(request),
            human_bytes(unused)
        ),
        fix: "set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` so free memory can be \
              joined, or call `torch.cuda.empty_cache()` before the large allocation"
            .to_owned(),
        event: Some(event),
    })
}

/// The peak is in the first optimizer step, and the state that step creates lazily (Adam's
/// `exp_avg` and `exp_avg_sq`: twice the parameters) is a large part of it. Worth knowing when
/// sizing a run; a warning only when an OOM happens in that step.
fn optimizer_state_raises_peak(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    let trace = snapshot.trace(device.device);
    let replay = &device.replay;
    let peak = replay.peak_allocated(trace);
    let at = peak.event_index?;
    let state = Role::OptimizerState as u8;
    // Where the first state was made: the first step.
    let first_state = replay
        .allocations
        .iter()
        .enumerate()
        .filter(|(id, _)| {
            roles.role_index_of(*id as u32) == state && roles.is_made_by_optimizer(*id as u32)
        })
        .filter_map(|(_, a)| a.start)
        .min()? as usize;
    // That step ends where the next forward begins.
    let step_end = roles
        .forward_starts
        .iter()
        .map(|&s| s as usize)
        .find(|&s| s > first_state)
        .unwrap_or(replay.len());
    let peak_in_step = at >= first_state && at < step_end;
    let made_by_optimizer = replay
        .allocation_at(at)
        .is_some_and(|id| roles.is_made_by_optimizer(id));
    if !peak_in_step || !made_by_optimizer {
        return None;
    }
    let state_bytes: u64 = replay
        .live_after(Some(at))
        .into_iter()
        .filter(|&id| {
            let allocation = replay.allocations.at(id as usize);
            roles.role_index_of(id) == state
                && allocation.start.is_some_and(|s| s as usize >= first_state)
        })
        .map(|id| replay.allocations.size(id as usize))
        .sum();
    if (state_bytes as f64) < STATE_SHARE_OF_PEAK * peak.bytes as f64 {
        return None;
    }
    let oom = (first_state..step_end).find(|&e| trace.action.get(e) == Some(&ActionCode::OOM));
    Some(Finding {
        code: "optimizer_state_raises_peak",
        severity: if oom.is_some() { "warning" } else { "info" },
        bytes: state_bytes,
        message: format!(
            "the peak ({}) is in the first optimizer step, which creates the optimizer's state: \
             {} of it ({:.0}% of the peak){}",
            human_bytes(peak.bytes),
            human_bytes(state_bytes),
            100.0 * state_bytes as f64 / peak.bytes.max(1) as f64,
            if oom.is_some() {
                "; the out-of-memory happened in this step"
            } else {
                ""
            }
        ),
        fix: "the first step allocates the optimizer's state (2x the parameters for Adam): budget \
              for it, or create the state before the run, or use a lighter optimizer (8-bit Adam, \
              Adafactor, SGD)"
            .to_owned(),
        event: Some(at),
    })
}
