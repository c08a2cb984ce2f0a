//! Findings on real snapshots: each fires where the problem is, and an ordinary training run gets
//! none of the warnings. Through the CLI (`summary --json`, `live`, `export --kind roles`), the
//! way users meet them.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn snapview(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(args)
        .output()
        .expect("run snapview");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn summary(path: &Path) -> Value {
    let (ok, out, err) = snapview(&["summary", "--json", path.to_str().expect("utf-8 path")]);
    assert!(ok, "summary {}: {err}", path.display());
    serde_json::from_str(&out).expect("summary JSON")
}

/// Codes of every finding of every device (and the file-wide ones).
fn codes(summary: &Value) -> Vec<String> {
    let devices = summary["devices"].as_array().expect("devices");
    devices
        .iter()
        .flat_map(|d| d["findings"].as_array().cloned().unwrap_or_default())
        .chain(summary["findings"].as_array().cloned().unwrap_or_default())
        .map(|f| f["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

const LEAK_WARNINGS: [&str; 3] = [
    "activations_kept_without_backward",
    "live_memory_grows_per_step",
    "fragmentation",
];

#[test]
fn inference_with_autograd_on_is_told_to_use_no_grad() {
    for name in ["infer_grad.pickle", "labelled/l_infer_grad.pickle"] {
        let summary = summary(&fixture(name));
        let device = &summary["devices"][0];
        let finding = device["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .find(|f| f["code"] == "activations_kept_without_backward")
            .unwrap_or_else(|| panic!("{name}: no activations_kept_without_backward in {device}"));
        assert_eq!(finding["severity"], "warning");
        assert!(
            finding["fix"]
                .as_str()
                .unwrap_or_default()
                .contains("torch.no_grad()")
        );
        let bytes = finding["bytes"].as_u64().expect("bytes");
        // Most of what is live at the dump is those activations.
        let at_snapshot: u64 = device["roles_at_snapshot"]
            .as_object()
            .expect("roles_at_snapshot")
            .values()
            .filter_map(Value::as_u64)
            .sum();
        assert!(bytes * 2 > at_snapshot, "{name}: {bytes} of {at_snapshot}");
        assert!(device["roles_at_peak"]["activation"].as_u64().unwrap_or(0) > 0);
    }
    // The same model and loop under torch.no_grad(): no such finding.
    let nograd = codes(&summary(&fixture("infer_nograd.pickle")));
    assert!(
        !nograd
            .iter()
            .any(|c| c == "activations_kept_without_backward"),
        "{nograd:?}"
    );
}

#[test]
fn a_loop_that_keeps_each_steps_output_is_found() {
    let summary = summary(&fixture("labelled/h_mlp_keeps_outputs_step.pickle"));
    let finding = summary["devices"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["code"] == "live_memory_grows_per_step")
        .cloned()
        .unwrap_or_else(|| panic!("no growth finding: {}", summary["devices"][0]["findings"]));
    // Each step keeps its 128x10 float32 output: 5,120 bytes, over the 6 steps between the
    // starts of steps 2 and 8.
    assert_eq!(finding["bytes"].as_u64(), Some(6 * 5120), "{finding}");
    let message = finding["message"].as_str().unwrap_or_default();
    assert!(message.contains("5.00 KiB per step"), "{message}");
    // The stack holding the growth is the last layer's forward that made the outputs.
    let held_by = message.split("held by: ").nth(1).unwrap_or_default();
    assert!(
        held_by.starts_with("25.0 KiB at ") && held_by.contains("linear.py"),
        "{message}"
    );
}

#[test]
fn ordinary_training_gets_no_leak_warning() {
    let mut files = vec![
        fixture("gpt2_adamw.pickle"),
        fixture("resnet18_amp.pickle"),
        fixture("mlp_small.pickle"),
        fixture("expandable.pickle"),
        fixture("empty_cache.pickle"),
        fixture("oom.pickle"),
    ];
    for entry in std::fs::read_dir(fixture("labelled")).expect("labelled") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let training =
            name.ends_with(".pickle") && !name.contains("infer") && !name.contains("keeps_outputs");
        if training {
            files.push(path);
        }
    }
    if let Ok(dir) = std::env::var("SNAPVIEW_LARGE_DIR") {
        for name in [
            "gpt2_big_trace.pickle",
            "gpt2_cpp_trace.pickle",
            "gpt2_huge_trace.pickle",
        ] {
            let path = Path::new(&dir).join(name);
            if path.exists() {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 18, "{files:?}");
    for path in files {
        let codes = codes(&summary(&path));
        // Info at most, and only where the peak really is the first optimizer step.
        let peak_in_first_step = ["empty_cache", "h_mlp_foreach_adam"]
            .iter()
            .any(|name| path.to_string_lossy().contains(name));
        assert_eq!(
            codes.iter().any(|c| c == "optimizer_state_raises_peak"),
            peak_in_first_step,
            "{}: {codes:?}",
            path.display()
        );
        for warning in LEAK_WARNINGS {
            assert!(
                !codes.iter().any(|c| c == warning),
                "{}: {codes:?}",
                path.display()
            );
        }
    }
}

#[test]
fn zero_grad_without_set_to_none_is_noticed_but_not_alarmed() {
    let summary = summary(&fixture("labelled/h_mlp_zero_grad_keep_forward.pickle"));
    let findings = summary["devices"][0]["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let kept = findings
        .iter()
        .find(|f| f["code"] == "gradients_kept_between_steps")
        .unwrap_or_else(|| panic!("{findings:?}"));
    assert_eq!(kept["severity"], "info");
    // The MLP's parameters: 1024x4096 + 4096 + 4096x4096 + 4096 + 4096x10 + 10 float32.
    let parameters = 4 * (1024 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10);
    assert_eq!(kept["bytes"].as_u64(), Some(parameters));
    // With set_to_none=True (every other training file), nothing is said.
    let other = codes(&summary_of("labelled/l_mlp_sgd_forward.pickle"));
    assert!(
        !other.iter().any(|c| c == "gradients_kept_between_steps"),
        "{other:?}"
    );
}

fn summary_of(name: &str) -> Value {
    summary(&fixture(name))
}

#[test]
fn live_lists_allocations_with_role_because_and_frames() {
    let file = fixture("labelled/l_gpt2_adamw_step.pickle");
    let (ok, out, err) = snapview(&["live", "--json", file.to_str().expect("utf-8")]);
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    let allocations = report["allocations"].as_array().expect("allocations");
    assert!(!allocations.is_empty());
    for a in allocations {
        for key in ["address", "size", "role", "because", "frames"] {
            assert!(!a[key].is_null(), "{key} missing in {a}");
        }
    }
    let roles = report["roles"].as_object().expect("roles");
    for role in ["parameter", "gradient", "optimizer_state"] {
        assert!(
            roles.get(role).and_then(Value::as_u64).unwrap_or(0) > 0,
            "{role}: {roles:?}"
        );
    }
    // AdamW keeps two states per parameter: twice the parameters' bytes.
    assert_eq!(
        roles["optimizer_state"].as_u64().map(|b| b / 2),
        roles["parameter"].as_u64()
    );

    let (ok, text, _) = snapview(&["live", "--at", "peak", file.to_str().expect("utf-8")]);
    assert!(ok && text.contains("optimizer_state"), "{text}");
    let (ok, _, err) = snapview(&["live", "--at", "soon", file.to_str().expect("utf-8")]);
    assert!(!ok && err.contains("peak, end or an event index"), "{err}");

    // A user rule renames the optimizer's blocks; a bad rules file is refused with the reason.
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nframe = 'torch/optim/adamw?\\.py'\nrole = 'adam_moments'\n",
    )
    .expect("write");
    let (ok, out, err) = snapview(&[
        "live",
        "--json",
        "--roles",
        rules.to_str().expect("utf-8"),
        file.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert!(
        report["roles"]["adam_moments"].as_u64().unwrap_or(0) > 0,
        "{}",
        report["roles"]
    );
    std::fs::write(&rules, "[[rule]]\nframe = '('\nrole = 'x'\n").expect("write");
    let (ok, _, err) = snapview(&[
        "live",
        "--roles",
        rules.to_str().expect("utf-8"),
        file.to_str().expect("utf-8"),
    ]);
    assert!(
        !ok && err.contains("rule 1") && err.contains("regex"),
        "{err}"
    );

    // Folded by role: every line starts with the device and a role, and ends with its bytes.
    let (ok, folded, err) = snapview(&["export", "--kind", "roles", file.to_str().expect("utf-8")]);
    assert!(ok, "{err}");
    let total: u64 = folded
        .lines()
        .map(|line| {
            assert!(line.starts_with("device_0;"), "{line}");
            line.rsplit(' ')
                .next()
                .and_then(|b| b.parse::<u64>().ok())
                .expect("bytes")
        })
        .sum();
    assert_eq!(
        total,
        report["roles"]
            .as_object()
            .expect("roles")
            .values()
            .filter_map(Value::as_u64)
            .sum::<u64>()
    );
}

/// A summary's findings with this code, from every device.
fn findings_with(summary: &Value, code: &str) -> Vec<Value> {
    summary["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .flat_map(|d| d["findings"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["code"] == code)
        .collect()
}

#[test]
fn fragmentation_at_the_reserved_peak_is_found() {
    // Made by tests/fixtures/synthetic/make.py: 1.17 GiB free in 100 MiB pieces when a new
    // segment is made for 500 MiB.
    let summary = summary(&fixture("synthetic/fragmented_peak.pickle"));
    let found = findings_with(&summary, "fragmentation");
    assert_eq!(found.len(), 1, "{summary}");
    let finding = &found[0];
    assert_eq!(finding["bytes"].as_u64(), Some(12 * 100 * (1 << 20)));
    assert_eq!(
        finding["event"].as_u64(),
        Some(49),
        "the second segment_alloc"
    );
    assert!(
        finding["fix"]
            .as_str()
            .is_some_and(|f| f.contains("expandable_segments:True")),
        "{finding}"
    );
    assert!(
        finding["message"]
            .as_str()
            .is_some_and(|m| m.contains("500 MiB request") && m.contains("1.17 GiB")),
        "{finding}"
    );
    // gpt2_adamw's cache holds 300 MiB unused at its reserved peak: nothing to say.
    assert!(findings_with(&summary_of("gpt2_adamw.pickle"), "fragmentation").is_empty());
}

#[test]
fn optimizer_state_made_at_the_peak_is_told_as_info() {
    // empty_cache.pickle: Adam on a 64 MiB model; the peak (390 MiB) is in the first step's
    // optimizer step, where exp_avg and exp_avg_sq (128 MiB) are made.
    let summary = summary_of("empty_cache.pickle");
    let found = findings_with(&summary, "optimizer_state_raises_peak");
    assert_eq!(found.len(), 1, "{summary}");
    let finding = &found[0];
    assert_eq!(finding["severity"], "info");
    let state = finding["bytes"].as_u64().expect("bytes");
    let roles_at_peak = &summary["devices"][0]["roles_at_peak"];
    assert_eq!(
        Some(state),
        roles_at_peak["optimizer_state"].as_u64(),
        "all the state live at the peak was made in that step"
    );
    assert!(
        finding["fix"]
            .as_str()
            .is_some_and(|f| f.contains("budget")),
        "{finding}"
    );
}
