//! The roles commands: reading a `--roles` file, `snapview live` and `export --kind roles`.
//! Here, not in analysis/, because they read files and print; the analysis only answers.

use crate::analysis::Analysis;
use crate::analysis::roles::{LiveReport, MAX_RULES_FILE_BYTES, UserRules, live_report};
use crate::analysis::stacks::display_frames;
use crate::format::{bytes, count};
use crate::snapshot::{Snapshot, Trace, short_frame_label};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Reads a rules file (`--roles`), refusing one over the size cap before reading it whole,
/// and reading no more than the cap plus one byte whatever its size claims (a FIFO or a file
/// growing as it is read says 0 bytes, or too few, to `metadata`).
pub(super) fn read_rules(path: Option<&Path>) -> Result<UserRules, String> {
    use std::io::Read;
    let Some(path) = path else {
        return Ok(UserRules::default());
    };
    let cap = MAX_RULES_FILE_BYTES;
    let cannot_read = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    let size = file.metadata().map_err(cannot_read)?.len();
    if size > cap as u64 {
        return Err(format!(
            "{}: the rules file is {size} bytes; at most {cap} are read",
            path.display()
        ));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() > cap {
        return Err(format!(
            "{}: the rules file is more than {cap} bytes; at most {cap} are read",
            path.display()
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("cannot read {}: not UTF-8 text: {e}", path.display()))?;
    UserRules::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `snapview live`: the allocations live at `at` (`peak`, `end` or an event index) on `device`
/// (default: the first), as text or JSON.
pub(super) fn live_command(
    snapshot: &Snapshot,
    device: Option<usize>,
    at: &str,
    json: bool,
    rules: &UserRules,
) -> Result<String, String> {
    let analysis = Analysis::new(snapshot);
    let device = match device {
        Some(d) => analysis.device(d).ok_or_else(|| {
            let have: Vec<String> = analysis
                .devices
                .iter()
                .map(|d| d.device.to_string())
                .collect();
            format!(
                "device {d} has no memory in this snapshot (devices: {})",
                if have.is_empty() {
                    "none".to_owned()
                } else {
                    have.join(", ")
                }
            )
        })?,
        None => analysis
            .devices
            .first()
            .ok_or("the snapshot has no device with memory")?,
    };
    let trace = snapshot.trace(device.device);
    let last = device.replay.len().checked_sub(1);
    let event = match at {
        "end" => last,
        "peak" => device.replay.peak_allocated(trace).event_index,
        number => {
            let event: usize = number
                .parse()
                .map_err(|_| format!("--at {number:?}: say peak, end or an event index"))?;
            match last {
                Some(last) if event <= last => Some(event),
                _ => {
                    return Err(format!(
                        "--at {event}: the trace of device {} has {} events",
                        device.device,
                        device.replay.len()
                    ));
                }
            }
        }
    };
    let roles = device.roles(snapshot, rules);
    let report = live_report(snapshot, device, roles, event);
    if json {
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())
    } else {
        Ok(render_live_text(&report, trace))
    }
}

/// Folded stacks rooted by role (`role;outermost;...;innermost bytes`), of what is live at the
/// dump on every device, for flamegraph.pl, inferno or speedscope.
pub(super) fn folded_by_role(snapshot: &Snapshot, rules: &UserRules) -> String {
    let analysis = Analysis::new(snapshot);
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for device in &analysis.devices {
        let roles = device.roles(snapshot, rules);
        let replay = &device.replay;
        for id in replay.live_after(replay.len().checked_sub(1)) {
            let allocation = replay.allocations.at(id as usize);
            let mut line = format!("device_{};{}", device.device, roles.role_of(id));
            for frame in display_frames(snapshot, allocation.stack).iter().rev() {
                line.push(';');
                line.push_str(&frame.replace(';', ","));
            }
            let bytes = lines.entry(line).or_default();
            *bytes = bytes.saturating_add(allocation.size);
        }
    }
    let mut out = String::new();
    for (line, bytes) in lines {
        let _ = writeln!(out, "{line} {bytes}");
    }
    out
}

/// The text form of a [`LiveReport`]: bytes per role, then one line per allocation with its
/// role, why, and its innermost frames (short form; `--json` has them in full).
fn render_live_text(report: &LiveReport, trace: &Trace) -> String {
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
            let _ = writeln!(out, "    {}", short_frame_label(frame));
        }
    }
    out
}
