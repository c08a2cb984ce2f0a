//! Roles over time and at one moment: bytes per role per pixel column (the `/roles` window) and
//! the live allocations with their roles (`snapview live`).

use super::DeviceRoles;
use crate::analysis::DeviceAnalysis;
use crate::analysis::stacks::display_frames;
use crate::snapshot::{Snapshot, Trace};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Bytes per role after the last event of each column of a window.
#[derive(Debug, Serialize, PartialEq)]
pub struct RoleWindow {
    pub start: usize,
    pub end: usize,
    /// First event of each column, and one past the last column's end.
    pub column_start: Vec<usize>,
    /// Role names, in the order of `bytes`.
    pub roles: Vec<String>,
    /// `bytes[r][c]`: bytes of role `roles[r]` live after column `c`'s last event.
    pub bytes: Vec<Vec<u64>>,
}

/// Bytes per role per column over events `start..=end` split into `width` equal columns.
/// Costs the live set at `start` plus one step per event of the window, like the timeline's.
pub fn role_window(
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
    start: usize,
    end: usize,
    width: usize,
) -> RoleWindow {
    let replay = &device.replay;
    let names = roles.names().to_vec();
    let events = replay.len();
    if events == 0 {
        let live = replay.live_after(None);
        let mut bytes = vec![vec![0u64; 1]; names.len()];
        for id in live {
            let b = &mut bytes[roles.role_index_of(id) as usize][0];
            *b = b.wrapping_add(replay.allocations[id as usize].size);
        }
        return RoleWindow {
            start: 0,
            end: 0,
            column_start: vec![0, 1],
            roles: names,
            bytes,
        };
    }
    let end = end.min(events - 1);
    let start = start.min(end);
    let span = end + 1 - start;
    let width = width
        .clamp(1, crate::analysis::timeline::MAX_WIDTH)
        .min(span);
    let column_start: Vec<usize> = (0..=width)
        .map(|c| start + (span as u128 * c as u128 / width as u128) as usize)
        .collect();
    let mut current = vec![0u64; names.len()];
    let before = start.checked_sub(1);
    for id in replay.live_after(before) {
        let slot = &mut current[roles.role_index_of(id) as usize];
        *slot = slot.wrapping_add(replay.allocations[id as usize].size);
    }
    let mut bytes = vec![Vec::with_capacity(width); names.len()];
    for c in 0..width {
        for event in column_start[c]..column_start[c + 1] {
            apply_event(device, roles, event, &mut current);
        }
        for (r, value) in current.iter().enumerate() {
            bytes[r].push(*value);
        }
    }
    RoleWindow {
        start,
        end,
        column_start,
        roles: names,
        bytes,
    }
}

/// Adds or removes the allocation event `event` opens or closes.
fn apply_event(device: &DeviceAnalysis, roles: &DeviceRoles, event: usize, current: &mut [u64]) {
    let replay = &device.replay;
    let Some(id) = replay.allocation_at(event) else {
        return;
    };
    let allocation = &replay.allocations[id as usize];
    let slot = &mut current[roles.role_index_of(id) as usize];
    if allocation.start == Some(event as u32) {
        *slot = slot.wrapping_add(allocation.size);
    } else if allocation.end == Some(event as u32) {
        *slot = slot.wrapping_sub(allocation.size);
    }
}

/// What `snapview live` prints: the allocations live at one moment with their roles.
#[derive(Debug, Serialize)]
pub struct LiveReport {
    pub device: usize,
    /// The event after which they are live (`null`: before the first event).
    pub event: Option<usize>,
    pub roles: BTreeMap<String, u64>,
    pub allocations: Vec<LiveAllocation>,
}

#[derive(Debug, Serialize)]
pub struct LiveAllocation {
    pub address: u64,
    pub size: u64,
    pub role: String,
    pub because: String,
    /// Frames innermost first, as `file:line:name`, allocator internals left out.
    pub frames: Vec<String>,
}

/// The allocations live after `event` on `device`, largest first, with their roles.
pub fn live_report(
    snapshot: &Snapshot,
    device: &DeviceAnalysis,
    roles: &DeviceRoles,
    event: Option<usize>,
) -> LiveReport {
    let replay = &device.replay;
    let mut live = replay.live_after(event);
    live.sort_by_key(|&id| (std::cmp::Reverse(replay.allocations[id as usize].size), id));
    let allocations = live
        .iter()
        .map(|&id| {
            let allocation = &replay.allocations[id as usize];
            LiveAllocation {
                address: allocation.addr,
                size: allocation.size,
                role: roles.role_of(id).to_owned(),
                because: roles.because(id).to_owned(),
                frames: display_frames(snapshot, allocation.stack),
            }
        })
        .collect();
    LiveReport {
        device: device.device,
        event,
        roles: roles.bytes_by_role(replay, &live),
        allocations,
    }
}

/// The text form of a [`LiveReport`]: bytes per role, then one line per allocation with its
/// role, why, and its innermost frames (short form; `--json` has them in full).
pub fn render_live_text(report: &LiveReport, trace: &Trace) -> String {
    use crate::format::{bytes, count};
    let mut out = String::new();
    let at = match report.event {
        Some(e) if e + 1 >= trace.len() => format!("after the last event ({})", count(e as u64)),
        Some(e) => format!("after event {}", count(e as u64)),
        None => "before the first event".to_owned(),
    };
    let total: u64 = report.roles.values().sum();
    let _ = writeln!(
        out,
        "device {}: {} allocations live {at}, {}",
        report.device,
        count(report.allocations.len() as u64),
        bytes(total)
    );
    let mut by_bytes: Vec<_> = report.roles.iter().collect();
    by_bytes.sort_by_key(|(_, b)| std::cmp::Reverse(**b));
    for (role, role_bytes) in by_bytes {
        let share = *role_bytes as f64 * 100.0 / total.max(1) as f64;
        let _ = writeln!(out, "  {role:<16} {:>10} {share:>5.1}%", bytes(*role_bytes));
    }
    let _ = writeln!(out);
    for a in &report.allocations {
        let _ = writeln!(
            out,
            "0x{:x} {:>10}  {:<16} {}",
            a.address,
            bytes(a.size),
            a.role,
            a.because
        );
        for frame in a.frames.iter().take(4) {
            let _ = writeln!(out, "    {}", crate::snapshot::short_frame_label(frame));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use crate::analysis::roles::UserRules;

    fn fixture(name: &str) -> Snapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        crate::snapshot::load_path(&path, Default::default()).expect("fixture loads")
    }

    /// At every event, the bytes of all roles add up to the live bytes the timeline draws.
    #[test]
    fn role_totals_equal_live_bytes_at_every_event() {
        for name in [
            "gpt2_adamw.pickle",
            "ring_wrap.pickle",
            "labelled/l_infer_grad.pickle",
            "mlp_cpp_frames.pickle",
        ] {
            let snapshot = fixture(name);
            let analysis = Analysis::new(&snapshot);
            for device in &analysis.devices {
                let roles = device.roles(&snapshot, &UserRules::default());
                let events = device.replay.len();
                assert!(events > 0, "{name}: no events");
                // One column per event: every event's totals.
                let window = role_window(device, roles, 0, events - 1, events);
                for (c, &first) in window.column_start[..window.column_start.len() - 1]
                    .iter()
                    .enumerate()
                {
                    let last = window.column_start[c + 1] - 1;
                    let sum = window.bytes.iter().fold(0u64, |s, r| s.wrapping_add(r[c]));
                    assert_eq!(
                        sum,
                        device.replay.allocated_after(Some(last)),
                        "{name} column {c} (events {first}..={last})"
                    );
                }
                // A window that starts mid-trace, in wide columns, agrees too.
                let start = events / 3;
                let window = role_window(device, roles, start, events - 1, 7);
                for c in 0..window.column_start.len() - 1 {
                    let last = window.column_start[c + 1] - 1;
                    let sum = window.bytes.iter().fold(0u64, |s, r| s.wrapping_add(r[c]));
                    assert_eq!(
                        sum,
                        device.replay.allocated_after(Some(last)),
                        "{name} wide column {c}"
                    );
                }
                // And the live report at the end names the same bytes.
                let report = live_report(&snapshot, device, roles, Some(events - 1));
                let total = report.roles.values().fold(0u64, |s, b| s.wrapping_add(*b));
                assert_eq!(
                    total,
                    device.replay.allocated_after(Some(events - 1)),
                    "{name} live report"
                );
                assert!(
                    report.allocations.iter().all(|a| !a.because.is_empty()),
                    "{name}: a role without a because"
                );
            }
        }
    }

    /// A user rule renames what its frames made; everything else keeps its built-in role.
    #[test]
    fn user_rules_win_over_built_in_rules() {
        let snapshot = fixture("labelled/l_mlp_sgd_backward.pickle");
        let analysis = Analysis::new(&snapshot);
        let device = &analysis.devices[0];
        let rules = UserRules::parse(
            "[[rule]]\nframe = 'torch/optim/sgd\\.py:_multi_tensor_sgd'\nrole = 'momentum'\n",
        )
        .expect("rules");
        let roles = device.roles(&snapshot, &rules);
        let report = live_report(&snapshot, device, roles, device.replay.len().checked_sub(1));
        assert!(
            report.roles.get("momentum").copied().unwrap_or(0) > 0,
            "{:?}",
            report.roles
        );
        assert!(
            !report.roles.contains_key("optimizer_state"),
            "{:?}",
            report.roles
        );
        assert!(report.roles.get("parameter").copied().unwrap_or(0) > 0);
        let momentum = report
            .allocations
            .iter()
            .find(|a| a.role == "momentum")
            .expect("a momentum block");
        assert!(
            momentum.because.contains("user rule"),
            "{}",
            momentum.because
        );
    }
}

#[cfg(test)]
mod speed {
    use super::*;
    use crate::analysis::Analysis;
    use crate::analysis::roles::UserRules;
    use crate::analysis::timeline::{Axis, Window, timeline};

    /// `cargo test --release --lib roles::window::speed -- --ignored --nocapture` with
    /// SNAPVIEW_LARGE_DIR set: a whole-trace `/roles` window against a timeline window.
    #[test]
    #[ignore = "a measurement on the large corpus, not a check"]
    fn role_window_costs_about_a_timeline_window() {
        let Ok(dir) = std::env::var("SNAPVIEW_LARGE_DIR") else {
            return;
        };
        let path = std::path::Path::new(&dir).join("gpt2_huge_trace.pickle");
        let snapshot = crate::snapshot::load_path(&path, Default::default()).expect("load");
        let analysis = Analysis::new(&snapshot);
        let device = &analysis.devices[0];
        let started = std::time::Instant::now();
        let roles = device.roles(&snapshot, &UserRules::default());
        println!("roles decided in {:?}", started.elapsed());
        let events = device.replay.len();
        for (start, end) in [(0, events - 1), (events / 2, events / 2 + events / 100)] {
            let started = std::time::Instant::now();
            let w = role_window(device, roles, start, end, 1600);
            let roles_time = started.elapsed();
            let started = std::time::Instant::now();
            let t = timeline(
                device,
                snapshot.trace(device.device),
                Window {
                    start,
                    end,
                    width: 1600,
                    height: 400,
                    axis: Axis::Event,
                },
            );
            let timeline_time = started.elapsed();
            println!(
                "events {start}..={end}: roles window {roles_time:?} ({} columns), timeline window {timeline_time:?} ({} columns)",
                w.column_start.len() - 1,
                t.column_start.len() - 1
            );
        }
    }
}
