//! The segment map at every event, against a reference walk written here from the trace alone
//! (no replay code): each traced allocation is open from its `alloc`, pending from a lone
//! `free_requested` (one not followed at once by the `free_completed` of its address) and gone
//! at its `free_completed`. At the last event the walk must also agree with the snapshot's own
//! blocks, states included (`active_pending_free`), so the rule the walk follows is the
//! allocator's, not one this file made up.

mod common;

use snapview::analysis::Analysis;
use snapview::analysis::memory_map::memory_map;
use snapview::analysis::replay::Origin;
use snapview::snapshot::{ActionCode, BlockState, Snapshot};
use std::collections::BTreeMap;

/// What the reference walk knows of an address: the requested bytes and whether the free
/// waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    requested: u64,
    pending: bool,
}

/// The walk after each event: per event, the traced allocations open after it.
fn reference_walk(snapshot: &Snapshot, device: usize) -> Vec<BTreeMap<u64, Held>> {
    let trace = snapshot.trace(device);
    let mut open: BTreeMap<u64, Held> = BTreeMap::new();
    let mut after = Vec::with_capacity(trace.len());
    let mut i = 0;
    while i < trace.len() {
        let addr = trace.addr.get(i);
        match trace.action[i] {
            ActionCode::ALLOC => {
                open.insert(
                    addr,
                    Held {
                        requested: trace.size.get(i),
                        pending: false,
                    },
                );
            }
            ActionCode::FREE_REQUESTED => {
                let completed_next = i + 1 < trace.len()
                    && trace.action[i + 1] == ActionCode::FREE_COMPLETED
                    && trace.addr.get(i + 1) == addr;
                if completed_next {
                    open.remove(&addr);
                    after.push(open.clone());
                    i += 1;
                } else if let Some(held) = open.get_mut(&addr) {
                    held.pending = true;
                }
            }
            ActionCode::FREE_COMPLETED => {
                open.remove(&addr);
            }
            _ => {}
        }
        after.push(open.clone());
        i += 1;
    }
    after
}

/// The map's blocks of traced allocations after `at`: address -> what it holds.
fn traced_blocks(
    snapshot: &Snapshot,
    analysis: &Analysis,
    device: usize,
    at: usize,
) -> BTreeMap<u64, Held> {
    let device_analysis = analysis
        .devices
        .iter()
        .find(|d| d.device == device)
        .expect("device analysed");
    let map = memory_map(snapshot, device_analysis, Some(at));
    let mut blocks = BTreeMap::new();
    for segment in &map.segments {
        for block in &segment.blocks {
            let Some(id) = block.allocation else { continue };
            let allocation = device_analysis.replay.allocations.at(id as usize);
            if allocation.origin != Origin::Traced {
                continue;
            }
            blocks.insert(
                block.address,
                Held {
                    requested: allocation.size,
                    pending: block.state == "active_pending_free",
                },
            );
        }
    }
    blocks
}

/// The map at every event of every device agrees with the walk; returns how many pending
/// moments were seen (so a fixture said to have them is checked to have them).
fn map_agrees_at_every_event(name: &str) -> usize {
    let snapshot = common::load(name);
    let analysis = Analysis::new(&snapshot);
    let mut pending_moments = 0;
    for device in analysis.devices.iter().map(|d| d.device) {
        let walk = reference_walk(&snapshot, device);
        for (at, expected) in walk.iter().enumerate() {
            let got = traced_blocks(&snapshot, &analysis, device, at);
            // A block the map holds but the walk does not is an allocation alive from the
            // start; the traced ones must match exactly.
            assert_eq!(
                got, *expected,
                "{name} cuda:{device}: the map after event {at} differs from the walk"
            );
            if expected.values().any(|held| held.pending) {
                pending_moments += 1;
            }
        }
        // The walk's end is the snapshot's: every traced block open at the end is a block of
        // the segments with the same state and requested bytes.
        let Some(last) = walk.last() else { continue };
        let mut snapshot_blocks = BTreeMap::new();
        for segment in snapshot.device_segments(device) {
            for block in &segment.blocks {
                snapshot_blocks.insert(block.address, block.clone());
            }
        }
        for (addr, held) in last {
            let block = snapshot_blocks
                .get(addr)
                .unwrap_or_else(|| panic!("{name}: {addr:#x} open at the end but no block"));
            let state = if held.pending {
                BlockState::ActivePendingFree
            } else {
                BlockState::ActiveAllocated
            };
            assert_eq!(block.state, state, "{name}: state of {addr:#x} at the end");
            assert_eq!(block.requested_size, held.requested, "{name}: {addr:#x}");
        }
        let pending_in_snapshot = snapshot_blocks
            .values()
            .filter(|b| b.state == BlockState::ActivePendingFree)
            .count();
        assert_eq!(
            last.values().filter(|h| h.pending).count(),
            pending_in_snapshot,
            "{name}: pending blocks at the end"
        );
    }
    pending_moments
}

#[test]
fn side_stream_frees_map_agrees_with_the_walk_at_every_event() {
    let pending_moments = map_agrees_at_every_event("alloc_detail/side_stream_frees");
    assert!(
        pending_moments > 100,
        "frees wait on the side stream for much of the trace: {pending_moments} moments"
    );
}

#[test]
fn other_fixtures_map_agrees_with_the_walk_at_every_event() {
    for name in [
        "expandable",
        "streams",
        "gpt2_adamw",
        "mlp_small",
        "empty_cache",
    ] {
        map_agrees_at_every_event(name);
    }
}

#[test]
fn side_stream_frees_totals_say_allocated_pending_and_free_once() {
    let snapshot = common::load("alloc_detail/side_stream_frees");
    let analysis = Analysis::new(&snapshot);
    let device = &analysis.devices[0];
    let last = snapshot.trace(0).len() - 1;
    let map = memory_map(&snapshot, device, Some(last));
    let totals = map.totals.stats;
    // At the end the replay's pending bytes are the snapshot's pending blocks' requested bytes.
    assert!(totals.pending_free > 0);
    assert_eq!(device.replay.pending_after(Some(last)), totals.pending_free);
    // MemoryViz counts a pending block as allocated until its free completes; the map splits it.
    assert_eq!(
        device.replay.allocated_after(Some(last)),
        totals.allocated + totals.pending_free
    );
    assert_eq!(
        totals.allocated + totals.pending_free + totals.internal_free + totals.external_free,
        totals.reserved
    );
    // The pending curve agrees with the map at every event.
    for at in 0..=last {
        let map = memory_map(&snapshot, device, Some(at));
        assert_eq!(
            device.replay.pending_after(Some(at)),
            map.totals.stats.pending_free,
            "pending after event {at}"
        );
    }
}
