//! The allocations live at one moment with their roles (`snapview live`; its text is the
//! CLI's, in cli/roles_commands.rs).

use super::DeviceRoles;
use crate::analysis::DeviceAnalysis;
use crate::analysis::stacks::display_frames;
use crate::snapshot::Snapshot;
use serde::Serialize;
use std::collections::BTreeMap;

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
    live.sort_by_key(|&id| (std::cmp::Reverse(replay.allocations.size(id as usize)), id));
    let allocations = live
        .iter()
        .map(|&id| {
            let allocation = replay.allocations.at(id as usize);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fixtures::analysed;
    use crate::analysis::roles::UserRules;

    /// A user rule renames what its frames made; everything else keeps its built-in role.
    #[test]
    fn user_rules_win_over_built_in_rules() {
        let (snapshot, analysis) = analysed("labelled/l_mlp_sgd_backward.pickle");
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
