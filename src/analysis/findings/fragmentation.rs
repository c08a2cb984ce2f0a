//! The findings about the caching allocator's segments rather than the program's tensors:
//! memory reserved but in pieces too small to use, at an OOM or at the reserved peak.

use super::Finding;
use crate::analysis::DeviceAnalysis;
use crate::format::bytes as human_bytes;
use crate::snapshot::{ActionCode, Snapshot};

/// Reserved but unused bytes at the reserved peak must be at least this share of it...
const FRAGMENTED_SHARE: f64 = 0.2;
/// ...and at least this many bytes, for fragmentation near the peak to be worth a word.
const FRAGMENTED_MIN_BYTES: u64 = 1 << 30;
/// The caching allocator serves requests up to 1 MiB from its small pool (2 MiB segments),
/// larger ones from the large pool; neither pool's free blocks serve the other's requests.
const SMALL_POOL_MAX_REQUEST: u64 = 1 << 20;
/// The fix for memory cached in pieces, at an OOM or at the peak alike.
const FRAGMENTATION_FIX: &str = "set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` so free \
                                 memory can be joined, or call `torch.cuda.empty_cache()` before \
                                 the large allocation";

/// At each OOM of a large-pool request while the cache held at least the request's bytes
/// unused: the memory was there, in blocks too small for it.
pub(super) fn fragmentation_at_oom(snapshot: &Snapshot, device: &DeviceAnalysis) -> Vec<Finding> {
    let trace = snapshot.trace(device.device);
    let replay = &device.replay;
    trace
        .events_of(ActionCode::OOM)
        .filter_map(|event| {
            let requested = trace.size.get(event);
            let reserved = replay.reserved_after(Some(event));
            let allocated = replay.allocated_after(Some(event));
            let unused = reserved.saturating_sub(allocated);
            // Only when the cache held enough free bytes in total: then no single block fit.
            // A small-pool request can never use the large pool's free blocks, whose bytes
            // `unused` mostly are, and expandable segments would not change that.
            (requested > SMALL_POOL_MAX_REQUEST && unused >= requested).then(|| Finding {
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
                fix: FRAGMENTATION_FIX.to_owned(),
                event: Some(event),
            })
        })
        .collect()
}

/// The cache reached its most reserved bytes by making a new segment while a large share of
/// what it already held sat unused: the allocator only makes a segment when no cached block
/// fits the request, so the unused bytes were there but in pieces too small. Only at the
/// reserved peak (where it costs device memory) and only when the waste is large; expandable
/// segments (`segment_map`) are left alone, since they are the fix.
pub(super) fn fragmentation_at_reserved_peak(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
) -> Option<Finding> {
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
    // The small pool (requests up to 1 MiB, 2 MiB segments) is served only by its own
    // segments: the large pool's unused bytes could never have served this request, and
    // expandable segments would not help; judged per pool, this is no fragmentation.
    if request <= SMALL_POOL_MAX_REQUEST {
        return None;
    }
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
        fix: FRAGMENTATION_FIX.to_owned(),
        event: Some(event),
    })
}
