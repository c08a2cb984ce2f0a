//! The explicit labels, which win over the built-in rules: the profiler's categories and torch's
//! `annotate` events.

use super::{FIRST_USER_RULE, Role, role_index};
use crate::analysis::replay::Replay;
use crate::snapshot::{ActionCode, Trace};

/// What the explicit labels (the profiler's categories, torch's annotations) write over the
/// rules' answer: a role and a because text per allocation, each name and text added the first
/// time it is used.
pub(super) struct Labels<'a> {
    pub(super) names: &'a mut Vec<String>,
    pub(super) extra_because: &'a mut Vec<String>,
    pub(super) role: &'a mut [u8],
    pub(super) rule: &'a mut [u16],
}

impl Labels<'_> {
    /// Snapshots written by torch's profiler label every entry with a `category` (its own
    /// classification of the tensor): an explicit label, so it wins over the built-in rules.
    /// The alloc's entry decides; an allocation whose alloc is not in the trace takes its
    /// free's. `unknown` means the profiler could not tell, so the rules' answer stays.
    pub(super) fn apply_categories(&mut self, trace: &Trace, replay: &Replay) {
        if trace.category.is_empty() {
            return;
        }
        // By category id: the (role index, rule) it gives, decided once per category.
        let mut decided: Vec<Option<(u8, u16)>> = vec![None; trace.categories.len()];
        for (id, allocation) in replay.allocations.iter().enumerate() {
            let Some(event) = allocation.start.or(allocation.end) else {
                continue;
            };
            let category = trace.category.get(event as usize).copied().unwrap_or(0);
            if category == 0 {
                continue;
            }
            let slot = &mut decided[usize::from(category)];
            if slot.is_none() {
                let label = trace.categories[usize::from(category)].as_str();
                if label == "unknown" {
                    continue;
                }
                let index = role_index(self.names, &label_role_name(label));
                let because = format!("labelled `{label}` by the profiler");
                *slot = Some((index, because_index(self.extra_because, because)));
            }
            if let Some((index, why)) = *slot {
                self.role[id] = index;
                self.rule[id] = why;
            }
        }
    }

    /// torch 2.11's `annotate` action labels the live allocation at `addr` with
    /// `user_metadata`: an explicit label, so it wins over every rule.
    pub(super) fn apply_annotations(&mut self, trace: &Trace, replay: &Replay) {
        let Some(code) = trace
            .unknown_actions
            .iter()
            .position(|name| name == "annotate")
            .map(|i| ActionCode(ActionCode::FIRST_UNKNOWN + i as u8))
        else {
            return;
        };
        for event in trace.events_of(code) {
            let label = trace
                .strings
                .get(trace.user_metadata.get(event) as usize)
                .map_or("", String::as_str);
            if label.is_empty() {
                continue;
            }
            let addr = trace.addr.get(event);
            let Some(id) = replay
                .allocations
                .iter()
                .position(|a| a.addr == addr && a.is_live_after(Some(event)))
            else {
                continue;
            };
            let name = label_role_name(label);
            self.role[id] = role_index(self.names, &name);
            let because = format!("annotated {name:?} by torch.cuda.memory annotate");
            self.rule[id] = because_index(self.extra_because, because);
        }
    }
}

/// The role a label names: a built-in role's own name, or the label itself (cut to 40
/// characters) as a custom role.
fn label_role_name(label: &str) -> String {
    match Role::from_name(label) {
        Some(role) => role.name().to_owned(),
        None => label.chars().take(40).collect(),
    }
}

/// The rule id of an extra `because` text, adding the text if new.
fn because_index(extra_because: &mut Vec<String>, because: String) -> u16 {
    let index = extra_because
        .iter()
        .position(|b| *b == because)
        .unwrap_or_else(|| {
            extra_because.push(because);
            extra_because.len() - 1
        });
    FIRST_USER_RULE.saturating_add(index as u16)
}
