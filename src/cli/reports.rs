//! The text reports: `summary` and `diff` as people read them.

use crate::analysis::Summary;
use crate::format::{bytes, count, duration_us};
use crate::snapshot::{Snapshot, short_frame_label};
use std::path::Path;

/// The human-readable summary.
pub(super) fn summary_text(file: &Path, snapshot: &Snapshot, summary: &Summary) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let encoding = match snapshot.source.pickle_protocol {
        Some(protocol) => format!("pickle protocol {protocol}"),
        None => "JSON".to_owned(),
    };
    let _ = writeln!(
        s,
        "{} — {}, {}{}",
        file.display(),
        encoding,
        bytes(size),
        match snapshot.source.compression {
            crate::snapshot::Compression::None => "",
            crate::snapshot::Compression::Gzip => ", gzip",
            crate::snapshot::Compression::Zstd => ", zstd",
        }
    );
    let _ = writeln!(
        s,
        "segments {}, blocks {}",
        count(summary.segments as u64),
        count(summary.blocks as u64)
    );
    for device in &summary.devices {
        let trace = snapshot.trace(device.device);
        let start = trace.time_us.first().unwrap_or(0);
        let at = |event: Option<usize>| match event {
            None => "before the first event".to_owned(),
            Some(i) if trace.has_time => format!(
                "at event {} ({} into the trace)",
                count(i as u64),
                duration_us(trace.time_us.get(i) - start)
            ),
            Some(i) => format!("at event {}", count(i as u64)),
        };
        if snapshot.source.host_device == Some(device.device) {
            let _ = writeln!(
                s,
                "\n{} (device {})",
                crate::snapshot::HOST_LABEL,
                device.device
            );
        } else {
            let _ = writeln!(s, "\ndevice {}", device.device);
        }
        let actions: Vec<String> = device
            .actions
            .iter()
            .map(|(name, n)| format!("{name} {}", count(*n as u64)))
            .collect();
        let _ = writeln!(
            s,
            "  trace entries    {}{}",
            count(device.trace_entries as u64),
            if actions.is_empty() {
                String::new()
            } else {
                format!("  ({})", actions.join(", "))
            }
        );
        let _ = writeln!(
            s,
            "  peak allocated   {}  {}",
            bytes(device.peak_allocated_bytes),
            at(device.peak_event_index)
        );
        let _ = writeln!(
            s,
            "  peak reserved    {}  {}",
            bytes(device.peak_reserved_bytes),
            at(device.peak_reserved_event_index)
        );
        let stats = &device.segment_stats;
        let _ = writeln!(
            s,
            "  at the snapshot  allocated {}, reserved {} in {} segments, free {} (largest block {}), rounding waste {}",
            bytes(device.allocated_bytes_at_snapshot),
            bytes(device.reserved_bytes_at_snapshot),
            count(device.segments as u64),
            bytes(stats.external_free),
            bytes(stats.largest_free_block),
            bytes(stats.internal_free)
        );
        if device.oom_events.is_empty() {
            let _ = writeln!(s, "  OOM events       none");
        } else {
            for oom in &device.oom_events {
                let _ = writeln!(
                    s,
                    "  OOM              {} requested, {} free on the device, {}",
                    bytes(oom.requested_bytes),
                    oom.device_free_bytes.map_or("unknown".to_owned(), bytes),
                    at(Some(oom.event_index))
                );
            }
        }
        if !device.roles_at_peak.is_empty() {
            let _ = writeln!(
                s,
                "  by role at peak  {}",
                roles_line(&device.roles_at_peak)
            );
        }
        for finding in &device.findings {
            let _ = writeln!(
                s,
                "  {:<16} {}\n  {:<16} fix: {}",
                finding.severity, finding.message, "", finding.fix
            );
        }
        if !device.top_stacks_at_peak.is_empty() && device.peak_allocated_bytes > 0 {
            let _ = writeln!(s, "  top stacks at the peak:");
            for stack in &device.top_stacks_at_peak {
                let share = stack.bytes as f64 * 100.0 / device.peak_allocated_bytes as f64;
                let frames: Vec<String> = stack
                    .frames
                    .iter()
                    .take(4)
                    .map(|f| short_frame_label(f))
                    .collect();
                let more = stack.frames.len().saturating_sub(4);
                let _ = writeln!(
                    s,
                    "    {:>10} {:>5.1}% {:>7} allocs  {}{}",
                    bytes(stack.bytes),
                    share,
                    count(stack.allocations as u64),
                    frames.join(" ← "),
                    if more > 0 {
                        format!(" ← … {more} more")
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    if !summary.notes.is_empty() {
        let _ = writeln!(s, "\nnotes:");
        for note in &summary.notes {
            let _ = writeln!(s, "  - {}", note.message);
        }
    }
    s
}

pub(super) fn diff_text(
    before: &str,
    after: &str,
    diff: &crate::analysis::diff::SnapshotDiff,
    top: usize,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "before: {before}\nafter:  {after}");
    let signed = |delta: i64| {
        if delta >= 0 {
            format!("+{}", bytes(delta as u64))
        } else {
            format!("-{}", bytes(delta.unsigned_abs()))
        }
    };
    for device in &diff.devices {
        let _ = writeln!(
            s,
            "\ncuda:{} → cuda:{}",
            device.before_device, device.after_device
        );
        let row = |s: &mut String, label: &str, b: u64, a: u64| {
            let pct = if b > 0 {
                format!("  ({:+.1}%)", (a as f64 - b as f64) * 100.0 / b as f64)
            } else {
                String::new()
            };
            let _ = writeln!(s, "  {label:<17}{:>10} → {:<10}{pct}", bytes(b), bytes(a));
        };
        row(
            &mut s,
            "peak allocated",
            device.before.peak_allocated_bytes,
            device.after.peak_allocated_bytes,
        );
        row(
            &mut s,
            "peak reserved",
            device.before.peak_reserved_bytes,
            device.after.peak_reserved_bytes,
        );
        row(
            &mut s,
            "allocated at end",
            device.before.allocated_bytes_at_snapshot,
            device.after.allocated_bytes_at_snapshot,
        );
        row(
            &mut s,
            "reserved at end",
            device.before.reserved_bytes_at_snapshot,
            device.after.reserved_bytes_at_snapshot,
        );
        let _ = writeln!(
            s,
            "  {:<17}{:>10} → {}",
            "allocations",
            count(device.before.allocations as u64),
            count(device.after.allocations as u64)
        );
        // Why it changed: bytes per role, largest change first (the diff sorts them).
        if !device.roles.is_empty() {
            let _ = writeln!(s, "  by role:");
            for role in &device.roles {
                let _ = writeln!(
                    s,
                    "    {:<17}{:>11}  {} → {}",
                    role.role,
                    if role.delta_bytes == 0 {
                        "±0".to_owned()
                    } else {
                        signed(role.delta_bytes)
                    },
                    bytes(role.before_bytes),
                    bytes(role.after_bytes)
                );
            }
        }
        // Say when outer frames were paired, so rows that merged across callers are not a surprise.
        if let Some(aligned) = &device.alignment {
            let outer = |frames: &[String]| frames[aligned.shared_frames..].join(" › ");
            let _ = writeln!(
                s,
                "  aligned: {} (before) with {} (after), {} stacks below continue alike",
                outer(&aligned.before_frames),
                outer(&aligned.after_frames),
                aligned.matched_stacks
            );
        }
        for (title, growing) in [
            ("grew most at the peak", true),
            ("shrank most at the peak", false),
        ] {
            let listed: Vec<_> = device
                .stacks
                .iter()
                .filter(|st| (st.delta_bytes > 0) == growing)
                .take(top)
                .collect();
            if listed.is_empty() {
                continue;
            }
            let _ = writeln!(s, "  {title}:");
            for stack in listed {
                // Innermost frames say most: show the last few, innermost first.
                let frames: Vec<&str> = stack
                    .frames
                    .iter()
                    .rev()
                    .take(4)
                    .map(String::as_str)
                    .collect();
                let more = stack.frames.len().saturating_sub(4);
                let _ = writeln!(
                    s,
                    "    {:>11}  {} → {}  {}{}",
                    signed(stack.delta_bytes),
                    bytes(stack.before_bytes),
                    bytes(stack.after_bytes),
                    frames.join(" ← "),
                    if more > 0 {
                        format!(" ← … {more} more")
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    s
}

/// `activation 6.00 GiB (61%) · parameter 3.10 GiB (32%) · …`, largest first.
fn roles_line(roles: &std::collections::BTreeMap<String, u64>) -> String {
    let total: u64 = roles.values().sum();
    let mut by_bytes: Vec<_> = roles.iter().filter(|(_, b)| **b > 0).collect();
    by_bytes.sort_by_key(|(_, b)| std::cmp::Reverse(**b));
    by_bytes
        .iter()
        .map(|(role, b)| {
            let share = **b as f64 * 100.0 / total.max(1) as f64;
            format!("{role} {} ({share:.0}%)", bytes(**b))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}
