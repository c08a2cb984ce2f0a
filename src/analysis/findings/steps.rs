//! The findings about the training loop's steps: live memory that grows from one step to the
//! next, gradients kept through forward, and the optimizer state the first step creates at the
//! peak.

use super::{Finding, code_where};
use crate::analysis::DeviceAnalysis;
use crate::analysis::roles::{DeviceRoles, Role};
use crate::format::bytes as human_bytes;
use crate::snapshot::{ActionCode, Snapshot};

/// Steps (after the first, which creates optimizer state) needed to call memory growing.
const GROWTH_MIN_STEPS: usize = 3;

/// Optimizer state made in the first step and live at the peak must be at least this share of
/// the peak for it to be said to raise it.
const STATE_SHARE_OF_PEAK: f64 = 0.15;

pub(super) fn live_memory_grows_per_step(
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
        .map(|&(stack, bytes)| format!("{} at {}", human_bytes(bytes), code_where(snapshot, stack)))
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

pub(super) fn gradients_kept_between_steps(
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
) -> Option<Finding> {
    let replay = &device.replay;
    let &last_start = roles.forward_starts.get(1..)?.last()?;
    let before = (last_start as usize).checked_sub(1);
    let bytes: u64 = replay
        .live_after(before)
        .into_iter()
        .filter(|&id| roles.role_index_of(id) == Role::Gradient as u8 && !roles.is_ddp_bucket(id))
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

/// The peak is in the first optimizer step, and the state that step creates lazily (Adam's
/// `exp_avg` and `exp_avg_sq`: twice the parameters) is a large part of it. Worth knowing when
/// sizing a run; a warning only when an OOM happens in that step.
pub(super) fn optimizer_state_raises_peak(
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
    // By id, reading only the start: a whole allocation per id costs eight columns' reads.
    let first_state = (0..replay.allocations.len())
        .filter(|&id| {
            roles.role_index_of(id as u32) == state && roles.is_made_by_optimizer(id as u32)
        })
        .filter_map(|id| replay.allocations.start(id))
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
