//! The replay agrees with PyTorch's own viewer: for every corpus file, the peak of the
//! "Active Memory Timeline" and its number of allocations equal what MemoryViz.js computed
//! (`oracle/memoryviz_peaks.json`).

use crate::common;

use snapview::analysis::{Analysis, Summary};
use snapview::snapshot::Snapshot;

fn check_peaks(name: &str, snapshot: &Snapshot) {
    let text = common::oracle("memoryviz_peaks.json").expect("memoryviz_peaks.json");
    let oracle: serde_json::Value = serde_json::from_str(&text).expect("json");
    let expected = oracle[name]
        .as_array()
        .unwrap_or_else(|| panic!("{name} in oracle"));
    let analysis = Analysis::new(snapshot);
    for device in expected {
        let ordinal = device["device"].as_u64().expect("device") as usize;
        // ddp_rank_rank1 was recorded on device 1 but its file holds only device 0's list
        // position; MemoryViz was pointed at its one non-empty trace.
        let replay = analysis
            .device(ordinal)
            .or_else(|| analysis.devices.first())
            .map(|d| &d.replay)
            .unwrap_or_else(|| panic!("{name}: device {ordinal}"));
        let trace = snapshot.trace(ordinal);
        assert_eq!(
            replay.peak_allocated(trace).bytes,
            device["peak_allocated_bytes"].as_u64().expect("peak"),
            "{name} device {ordinal}: peak"
        );
        assert_eq!(
            replay.allocations.len() as u64,
            device["allocations"].as_u64().expect("allocations"),
            "{name} device {ordinal}: allocations"
        );
    }
}

#[test]
fn peaks_match_memoryviz_for_every_small_file() {
    for name in common::small_names() {
        check_peaks(&name, &common::load(&name));
    }
}

#[test]
fn peaks_match_memoryviz_for_large_files_when_present() {
    for (name, path) in common::large_names() {
        let snapshot = snapview::snapshot::load_path(&path, Default::default()).expect("load");
        check_peaks(&name, &snapshot);
    }
}

#[test]
fn live_set_at_the_peak_sums_to_the_peak() {
    for name in common::small_names() {
        let snapshot = common::load(&name);
        let analysis = Analysis::new(&snapshot);
        for device in &analysis.devices {
            let trace = snapshot.trace(device.device);
            let peak = device.replay.peak_allocated(trace);
            let live = device.replay.live_after(peak.event_index);
            let sum: u64 = live
                .iter()
                .map(|&id| device.replay.allocations.size(id as usize))
                .sum();
            assert_eq!(sum, peak.bytes, "{name}: live set at the peak");
            // And at a few other moments, against the running total.
            for at in [0, trace.len() / 3, trace.len().saturating_sub(1)] {
                if trace.is_empty() {
                    break;
                }
                let live = device.replay.live_after(Some(at));
                let sum: u64 = live
                    .iter()
                    .map(|&id| device.replay.allocations.size(id as usize))
                    .sum();
                assert_eq!(
                    sum,
                    device.replay.allocated_after(Some(at)),
                    "{name}: live after {at}"
                );
            }
        }
    }
}

/// The live set from the checkpoints equals a scan of every allocation's lifetime, at moments
/// on both sides of each checkpoint (every 4096 events) and between them.
#[test]
fn live_sets_equal_a_scan_of_lifetimes() {
    let check = |name: &str, snapshot: &snapview::snapshot::Snapshot, step: usize| {
        let analysis = Analysis::new(snapshot);
        for device in &analysis.devices {
            let replay = &device.replay;
            let n = snapshot.trace(device.device).len();
            let mut moments: Vec<Option<usize>> = vec![None];
            moments.extend((0..n).step_by(step).map(Some));
            moments.extend(
                (4095..n)
                    .step_by(4096)
                    .flat_map(|c| [c - 1, c, c + 1])
                    .map(Some),
            );
            for at in moments {
                let scanned: Vec<u32> = (0..replay.allocations.len() as u32)
                    .filter(|&id| replay.allocations.at(id as usize).is_live_after(at))
                    .collect();
                assert_eq!(replay.live_after(at), scanned, "{name}: live after {at:?}");
            }
        }
    };
    for name in common::small_names() {
        check(&name, &common::load(&name), 97);
    }
    for (name, path) in common::large_names() {
        // Large enough that the loader replays it on its second thread while reading.
        if name == "gpt2_big_trace" {
            let snapshot = snapview::snapshot::load_path(&path, Default::default()).expect("load");
            check(&name, &snapshot, 20011);
        }
    }
}

#[test]
fn summary_reports_oom_and_notes() {
    let oom = common::load("oom");
    let summary = Summary::new(&oom, &Analysis::new(&oom));
    let events = &summary.devices[0].oom_events;
    assert_eq!(events.len(), 1);
    assert!(events[0].requested_bytes > 0);
    assert!(events[0].device_free_bytes.is_some());

    let none = common::load("no_history");
    let summary = Summary::new(&none, &Analysis::new(&none));
    assert!(
        summary.notes.iter().any(|n| n.code == "no_history"),
        "{:?}",
        summary.notes
    );

    let state = common::load("state_only");
    let summary = Summary::new(&state, &Analysis::new(&state));
    assert!(
        summary.notes.iter().any(|n| n.code == "state_only"),
        "{:?}",
        summary.notes
    );

    let ring = common::load("ring_wrap");
    let summary = Summary::new(&ring, &Analysis::new(&ring));
    assert!(
        summary.notes.iter().any(|n| n.code == "trace_incomplete"),
        "{:?}",
        summary.notes
    );

    let clean = common::load("mlp_small");
    let summary = Summary::new(&clean, &Analysis::new(&clean));
    assert!(
        !summary
            .notes
            .iter()
            .any(|n| n.code == "trace_incomplete" || n.code == "no_history"),
        "{:?}",
        summary.notes
    );
}

#[test]
fn moments_in_a_snapshot_without_history_are_the_start() {
    let snapshot = common::load("no_history");
    let analysis = Analysis::new(&snapshot);
    let replay = &analysis.devices[0].replay;
    let at_start = replay.live_after(None);
    assert_eq!(replay.live_after(Some(0)), at_start);
    assert_eq!(replay.live_after(Some(12345)), at_start);
    assert_eq!(at_start.len(), 13, "the 13 active blocks, alive throughout");
}
