//! What the CLI's `live` and `export --kind roles` print; cli.rs only parses and dispatches.

use super::{UserRules, live_report, render_live_text};
use crate::analysis::Analysis;
use crate::analysis::stacks::display_frames;
use crate::snapshot::Snapshot;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Reads a rules file (`--roles`), refusing one over the size cap before reading it whole,
/// and reading no more than the cap plus one byte whatever its size claims (a FIFO or a file
/// growing as it is read says 0 bytes, or too few, to `metadata`).
pub fn read_rules(path: Option<&Path>) -> Result<UserRules, String> {
    use std::io::Read;
    let Some(path) = path else {
        return Ok(UserRules::default());
    };
    let cap = super::user_rules::MAX_RULES_FILE_BYTES;
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
pub fn live_command(
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
pub fn folded_by_role(snapshot: &Snapshot, rules: &UserRules) -> String {
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
