//! What happened at an out-of-memory error, from the numbers at that event.
//!
//! The verdict follows from the segment map at the `oom` event: if the allocator's cached free
//! blocks on the request's stream add up to the request but none of them is big enough, memory was
//! there but in pieces (fragmentation); otherwise the allocator had run out of what it may reserve
//! (exhaustion). `device_free`, what CUDA reported, tells whether the cap was the GPU or a limit
//! below it (a memory fraction, another process).

use super::memory_map::memory_map;
use super::{DeviceAnalysis, StackBytes, top_stacks};
use crate::format::bytes;
use crate::snapshot::{ActionCode, Snapshot};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Enough free bytes were cached, but no single block could hold the request.
    Fragmentation,
    /// The allocator could not reserve more: its cached free space was less than the request.
    Exhaustion,
}

#[derive(Debug, Clone, Serialize)]
pub struct OomReport {
    pub device: usize,
    pub event_index: usize,
    pub time_us: Option<i64>,
    pub stream: u64,
    pub requested_bytes: u64,
    /// What CUDA reported free on the device.
    pub device_free_bytes: Option<u64>,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// Cached free bytes in segments (inactive blocks), and rounding waste of live blocks.
    pub free_in_segments_bytes: u64,
    pub rounding_bytes: u64,
    /// Free space per stream and pool: where the request could have been served from.
    pub free_by_pool: Vec<PoolFree>,
    pub verdict: Verdict,
    /// One sentence that says why.
    pub explanation: String,
    pub hints: Vec<String>,
    /// Stacks holding the most memory at that moment.
    pub top_stacks: Vec<StackBytes>,
    pub allocator_settings: serde_json::Value,
    /// Whether the segment map is the snapshot's own (the snapshot was dumped at the OOM).
    pub map_exact: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PoolFree {
    pub stream: u64,
    pub pool: (i64, i64),
    pub free_bytes: u64,
    pub largest_free_block: u64,
    pub segments: usize,
}

/// Reports for every `oom` event of `device`.
pub fn oom_reports(snapshot: &Snapshot, device: &DeviceAnalysis) -> Vec<OomReport> {
    let trace = snapshot.trace(device.device);
    trace
        .events_of(ActionCode::OOM)
        .map(|event| report(snapshot, device, event))
        .collect()
}

fn report(snapshot: &Snapshot, device: &DeviceAnalysis, event: usize) -> OomReport {
    let trace = snapshot.trace(device.device);
    let requested = trace.size.get(event);
    let stream = trace.stream(event);
    let device_free = trace.device_free.get(&event).copied();
    let map = memory_map(snapshot, device, Some(event));

    let mut pools: BTreeMap<(u64, (i64, i64)), PoolFree> = BTreeMap::new();
    for segment in &map.segments {
        let entry = pools
            .entry((segment.stream, segment.pool))
            .or_insert_with(|| PoolFree {
                stream: segment.stream,
                pool: segment.pool,
                free_bytes: 0,
                largest_free_block: 0,
                segments: 0,
            });
        entry.free_bytes += segment.stats.external_free;
        entry.largest_free_block = entry
            .largest_free_block
            .max(segment.stats.largest_free_block);
        entry.segments += 1;
    }
    let free_by_pool: Vec<PoolFree> = pools.into_values().collect();
    // The request is served from its stream's default pool.
    let own = free_by_pool
        .iter()
        .find(|p| p.stream == stream && p.pool == (0, 0));
    let (own_free, own_largest) = own.map_or((0, 0), |p| (p.free_bytes, p.largest_free_block));
    let totals = &map.totals.stats;

    let verdict = if own_free >= requested && own_largest < requested {
        Verdict::Fragmentation
    } else {
        Verdict::Exhaustion
    };
    let explanation = match verdict {
        Verdict::Fragmentation => format!(
            "Fragmentation: {} was free in cached segments on this stream, more than the {} requested, but the largest free block was {}, so no block could hold it.",
            bytes(own_free),
            bytes(requested),
            bytes(own_largest)
        ),
        Verdict::Exhaustion => format!(
            "Exhaustion: {} was requested with {} reserved ({} allocated) and only {} free in cached segments on this stream; the allocator could not reserve more.",
            bytes(requested),
            bytes(totals.reserved),
            bytes(totals.allocated),
            bytes(own_free)
        ),
    };

    let settings = &snapshot.allocator_settings;
    let expandable = settings["expandable_segments"].as_bool().unwrap_or(false);
    let mut hints = Vec::new();
    match verdict {
        Verdict::Fragmentation => {
            if !expandable {
                hints.push("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments then grow in place instead of leaving gaps between fixed-size ones.".to_owned());
            }
            hints.push(format!(
                "Or cap block splitting with max_split_size_mb (e.g. PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{}), so large blocks are not carved up by small requests.",
                (requested >> 20).max(1)
            ));
        }
        Verdict::Exhaustion => {
            if let Some(free) = device_free
                && free >= requested
            {
                hints.push(format!(
                    "CUDA reported {} free on the device, more than the request: the cap was a limit below the GPU (torch.cuda.set_per_process_memory_fraction, or memory held by another process), not the GPU itself.",
                    bytes(free)
                ));
            }
            hints.push("Reduce what is live at this moment: a smaller batch or sequence length, activation checkpointing (torch.utils.checkpoint), or torch.no_grad()/torch.inference_mode() where gradients are not needed.".to_owned());
        }
    }
    if totals.internal_free > requested / 4 && totals.internal_free > (64 << 20) {
        hints.push(format!(
            "{} is lost to rounding (requests rounded up to the allocator's block sizes); roundup_power2_divisions in PYTORCH_CUDA_ALLOC_CONF can reduce it.",
            bytes(totals.internal_free)
        ));
    }
    let live = device.replay.live_after(Some(event));
    OomReport {
        device: device.device,
        event_index: event,
        time_us: trace.has_time.then(|| trace.time_us.get(event)),
        stream,
        requested_bytes: requested,
        device_free_bytes: device_free,
        reserved_bytes: totals.reserved,
        allocated_bytes: totals.allocated,
        free_in_segments_bytes: totals.external_free,
        rounding_bytes: totals.internal_free,
        free_by_pool,
        verdict,
        explanation,
        hints,
        top_stacks: top_stacks(snapshot, &device.replay.allocations, &live, 10),
        allocator_settings: settings.clone(),
        map_exact: map.exact,
    }
}
