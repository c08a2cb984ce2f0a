//! The segment map at every event, against a reference walk written here from the trace alone
//! (no replay code): each traced allocation is open from its `alloc`, pending from a lone
//! `free_requested` (one not followed at once by the `free_completed` of its address) and gone
//! at its `free_completed`. At the last event the walk must also agree with the snapshot's own
//! blocks, states included (`active_pending_free`), so the rule the walk follows is the
//! allocator's, not one this file made up.

use crate::common;

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

mod api {
    use super::common;
    use super::common::server::TestServer;
    use serde_json::Value;

    fn numbers(value: &Value) -> Vec<u64> {
        value
            .as_array()
            .expect("array")
            .iter()
            .map(|v| v.as_u64().expect("number"))
            .collect()
    }

    /// The cached segment timeline's reserved total is the allocation timeline's reserved curve
    /// at every column, over the whole trace and zoomed in, on both axes; and its bands sum to it.
    async fn segment_timeline_agrees(state: &TestServer, name: &str, bytes: Vec<u8>) {
        let (status, json) = state.upload(bytes, "").await;
        assert!(status.is_success(), "{json}");
        let id = json["id"].as_str().expect("id").to_owned();
        let detail = state.get(&format!("/api/snapshots/{id}")).await;
        for device in detail["analysis"]["devices"].as_array().expect("devices") {
            let d = device["device"].as_u64().expect("device");
            let events = device["trace_entries"].as_u64().expect("entries");
            if events == 0 {
                continue;
            }
            let windows = [
                String::new(),
                format!(
                    "&start={}&end={}",
                    events / 3,
                    events / 3 + events / 10 + 20
                ),
                "&axis=time".to_owned(),
            ];
            for (width, window) in [(800, &windows[0]), (300, &windows[1]), (640, &windows[2])] {
                let query = format!("device={d}&width={width}{window}");
                let timeline = state
                    .get(&format!("/api/snapshots/{id}/timeline?{query}"))
                    .await;
                if timeline.get("reserved").is_none() {
                    continue; // a time axis refused on a trace without times
                }
                let segments = state
                    .get(&format!("/api/snapshots/{id}/segment-timeline?{query}"))
                    .await;
                assert_eq!(
                    numbers(&segments["reserved"]),
                    numbers(&timeline["reserved"]),
                    "{name} cuda:{d} {query}: reserved per column"
                );
                assert_eq!(segments["column_start"], timeline["column_start"]);
                // The bands and `other` stack to the total in every column.
                let reserved = numbers(&segments["reserved"]);
                let other = numbers(&segments["other"]);
                let bands = &segments["bands"];
                let sizes = numbers(&bands["size"]);
                let mut top = other.clone();
                for (band, points) in bands["points"]
                    .as_array()
                    .expect("points")
                    .iter()
                    .enumerate()
                {
                    let points = numbers(points);
                    let first = points[0] as usize;
                    let last = reserved.len().min(
                        1 + segments["column_start"]
                            .as_array()
                            .expect("columns")
                            .iter()
                            .position(|c| c == &bands["end"][band])
                            .expect("end column"),
                    );
                    for (c, column_top) in top.iter_mut().enumerate().take(last).skip(first) {
                        let offset = points
                            .chunks(2)
                            .take_while(|p| p[0] as usize <= c)
                            .last()
                            .map_or(0, |p| p[1]);
                        *column_top = (*column_top).max(offset + sizes[band] + other[c]);
                    }
                }
                for (c, (&total, &stack_top)) in reserved.iter().zip(&top).enumerate() {
                    assert!(stack_top <= total, "{name} {query}: column {c} overflows");
                }
            }
        }
    }

    #[tokio::test]
    async fn segment_timeline_reserved_is_the_timelines_for_every_small_file() {
        let state = TestServer::new();
        for name in common::small_names() {
            segment_timeline_agrees(
                &state,
                &name,
                std::fs::read(common::path_of(&name)).expect("fixture"),
            )
            .await;
        }
        let name = "alloc_detail/side_stream_frees";
        segment_timeline_agrees(
            &state,
            name,
            std::fs::read(common::path_of(name)).expect("fixture"),
        )
        .await;
    }

    #[tokio::test]
    async fn segment_timeline_agrees_for_large_files_when_present() {
        let state = TestServer::new();
        for (name, path) in common::large_names() {
            segment_timeline_agrees(&state, &name, std::fs::read(&path).expect("large")).await;
        }
    }

    #[tokio::test]
    async fn history_lists_the_events_around_the_moment_with_short_streams() {
        let state = TestServer::new();
        let name = "alloc_detail/side_stream_frees";
        let (_, json) = state
            .upload(std::fs::read(common::path_of(name)).expect("fixture"), "")
            .await;
        let id = json["id"].as_str().expect("id");
        let history = state
            .get(&format!(
                "/api/snapshots/{id}/history?at=100&before=5&after=7"
            ))
            .await;
        let rows = history["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 13);
        assert_eq!(rows[0]["index"], 95);
        assert_eq!(history["selected"]["index"], 100);
        for row in rows {
            let stream = row["stream"].as_str().expect("stream");
            assert!(stream.starts_with("stream "), "{stream}");
            assert!(stream.len() < 12, "a short id, not a pointer: {stream}");
        }
        let streams: std::collections::BTreeSet<&str> = state
            .get(&format!(
                "/api/snapshots/{id}/history?at=300&before=200&after=200"
            ))
            .await["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["stream"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .leak()
            .iter()
            .map(String::as_str)
            .collect();
        assert!(streams.contains("stream 1"), "{streams:?}");
        // Bounded: asking for more gets MAX_AROUND on each side.
        let wide = state
            .get(&format!(
                "/api/snapshots/{id}/history?at=250&before=100000&after=100000"
            ))
            .await;
        assert!(wide["rows"].as_array().expect("rows").len() <= 401);
        // The selected event's totals: allocated + pending is PyTorch's viewer's curve.
        let selected = &history["selected"];
        let reserved = selected["reserved"].as_u64().expect("reserved");
        let held = selected["allocated"].as_u64().expect("allocated")
            + selected["pending"].as_u64().expect("pending");
        assert!(held <= reserved, "{held} of {reserved}");
    }
}
