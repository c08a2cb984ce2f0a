//! Data-quality notes: what a snapshot cannot show, said plainly, so an empty chart or a
//! surprising number explains itself.

use super::Analysis;
use super::replay::Origin;
use crate::snapshot::{ActionCode, Snapshot, StackTable};
use serde::Serialize;

/// One thing a user should know before trusting the numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Note {
    /// A stable identifier: `no_history`, `state_only`, `trace_incomplete`,
    /// `allocations_without_frames`, `unknown_actions`, `unknown_keys`, `legacy_format`.
    #[serde(deserialize_with = "super::intern_code")]
    pub code: super::InternedCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<usize>,
    pub message: String,
}

const HOW_TO_RECORD: &str = "call torch.cuda.memory._record_memory_history(max_entries=100000) before the code you want to see";

pub fn notes(snapshot: &Snapshot, analysis: &Analysis) -> Vec<Note> {
    let mut notes = Vec::new();
    let any_alloc = snapshot
        .device_traces
        .iter()
        .any(|trace| trace.action.contains(&ActionCode::ALLOC));
    if !any_alloc {
        let block_stacks = snapshot
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .any(|b| b.stack != StackTable::EMPTY);
        notes.push(if block_stacks {
            Note {
                code: "state_only",
                device: None,
                message: format!(
                    "Recorded with enabled=\"state\": blocks carry stacks, but there is no allocation history, so no timeline. For one, {HOW_TO_RECORD} (enabled=\"all\")."
                ),
            }
        } else {
            Note {
                code: "no_history",
                device: None,
                message: format!(
                    "No allocation history was recorded: this snapshot holds the allocator's segments only, without stacks. To see which code allocated what, {HOW_TO_RECORD}."
                ),
            }
        });
    }
    for device in &analysis.devices {
        let trace = snapshot.trace(device.device);
        let replay = &device.replay;
        let orphan_frees = replay
            .allocations
            .iter()
            .filter(|a| a.origin == Origin::FreedWithoutAlloc)
            .count();
        if orphan_frees > 0 && any_alloc {
            let last_orphan = replay
                .allocations
                .iter()
                .filter(|a| a.origin == Origin::FreedWithoutAlloc)
                .filter_map(|a| a.end)
                .max()
                .unwrap_or(0);
            notes.push(Note {
                code: "trace_incomplete",
                device: Some(device.device),
                message: format!(
                    "The trace starts mid-run: {orphan_frees} frees have no matching alloc (the max_entries ring buffer wrapped, or recording started late). Those allocations are shown alive from the start; the history is complete from event {} on.",
                    last_orphan + 1
                ),
            });
        }
        let allocs = trace
            .action
            .iter()
            .filter(|&&a| a == ActionCode::ALLOC)
            .count();
        let frameless = trace
            .action
            .iter()
            .zip(trace.stack.iter())
            .filter(|&(&a, s)| a == ActionCode::ALLOC && s == StackTable::EMPTY)
            .count();
        if frameless > 0 {
            notes.push(Note {
                code: "allocations_without_frames",
                device: Some(device.device),
                message: if frameless == allocs {
                    format!("None of the {allocs} allocations carry a stack (recorded with stacks disabled); they are grouped as <non-python>.")
                } else {
                    format!("{frameless} of {allocs} allocations carry no stack; they are grouped as <non-python>.")
                },
            });
        }
        if !trace.unknown_actions.is_empty() {
            notes.push(Note {
                code: "unknown_actions",
                device: Some(device.device),
                message: format!(
                    "The trace has actions this version does not know ({}); they are listed but do not change memory totals.",
                    trace.unknown_actions.join(", ")
                ),
            });
        }
    }
    if !snapshot.unknown_keys.is_empty() {
        notes.push(Note {
            code: "unknown_keys",
            device: None,
            message: format!(
                "The snapshot has top-level keys this version does not read: {}.",
                snapshot.unknown_keys.join(", ")
            ),
        });
    }
    if snapshot.source.legacy_segment_list || snapshot.source.legacy_block_history {
        notes.push(Note {
            code: "legacy_format",
            device: None,
            message: "An old snapshot format (torch 2.0 or earlier): some fields are estimated from block history.".into(),
        });
    }
    notes
}
