//! Roles against the truth: real snapshots whose training script recorded every live tensor's
//! role (tests/fixtures/labelled, made by gen_labelled.py on a GPU, and tests/fixtures/setups,
//! made by tests/gpu/gen_setups.py: DDP, FSDP2, torch.compile, checkpointing, retained graphs,
//! LoRA, Adafactor, KV caches, kept outputs, workspaces). On every file the bytes we name with
//! their true role must be >= 98% (inputs aside; a `buffer` may be called `parameter`).

use snapview::analysis::Analysis;
use snapview::analysis::roles::UserRules;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(serde::Deserialize)]
struct Truth {
    device: usize,
    storages: Vec<Storage>,
}

#[derive(serde::Deserialize)]
struct Storage {
    addr: u64,
    role: String,
}

/// Bytes right and total over the file's labelled storages, and the confusion (truth, ours).
fn score(path: &Path) -> (u64, u64, BTreeMap<(String, String), u64>) {
    let truth_path = path.with_extension("").with_extension("truth.json");
    let truth: Truth =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).expect("truth")).expect("json");
    let snapshot = snapview::snapshot::load_path(path, Default::default()).expect("load");
    let analysis = Analysis::new(&snapshot);
    let device = analysis.device(truth.device).expect("device");
    let roles = device.roles(&snapshot, &UserRules::default());
    let replay = &device.replay;
    // The truth is taken at the dump: the allocations live after the last event.
    let live = replay.live_after(replay.len().checked_sub(1));
    let by_addr: BTreeMap<u64, u32> = live
        .iter()
        .map(|&id| (replay.allocations.addr(id as usize), id))
        .collect();
    let (mut right, mut total) = (0u64, 0u64);
    let mut confusion = BTreeMap::new();
    for storage in truth.storages.iter().filter(|s| s.role != "input") {
        let id = *by_addr.get(&storage.addr).unwrap_or_else(|| {
            panic!(
                "{}: no live allocation at {:#x}",
                path.display(),
                storage.addr
            )
        });
        let size = replay.allocations.size(id as usize);
        let ours = roles.role_of(id).to_owned();
        let expected = if storage.role == "buffer" {
            "parameter"
        } else {
            storage.role.as_str()
        };
        total += size;
        if ours == expected {
            right += size;
        }
        *confusion.entry((storage.role.clone(), ours)).or_insert(0) += size;
    }
    (right, total, confusion)
}

/// The labelled snapshots of one fixtures folder, in name order.
fn labelled_files(folder: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(folder);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("labelled dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pickle"))
        .filter(|p| p.with_extension("").with_extension("truth.json").exists())
        .collect();
    files.sort();
    files
}

/// Scores every file, prints the table, and fails with the confusion of each file under 98%.
fn assert_roles_match(files: &[std::path::PathBuf]) {
    let mut failures = Vec::new();
    println!(
        "{:<36} {:>14} {:>14} {:>7}  confusion (truth -> ours: bytes)",
        "file", "right", "total", "%"
    );
    for file in files {
        let (right, total, confusion) = score(file);
        let fraction = if total == 0 {
            1.0
        } else {
            right as f64 / total as f64
        };
        let wrong: Vec<String> = confusion
            .iter()
            .filter(|((truth, ours), _)| {
                truth != ours && !(truth == "buffer" && ours == "parameter")
            })
            .map(|((truth, ours), bytes)| format!("{truth}->{ours}: {bytes}"))
            .collect();
        let name = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        println!(
            "{name:<36} {right:>14} {total:>14} {:>6.2}%  {}",
            fraction * 100.0,
            wrong.join(", ")
        );
        if fraction < 0.98 {
            failures.push(format!(
                "{name}: {:.2}% ({})",
                fraction * 100.0,
                wrong.join(", ")
            ));
        }
    }
    assert!(failures.is_empty(), "files under 98%: {failures:#?}");
}

#[test]
fn roles_match_the_truth_of_every_labelled_file() {
    let files = labelled_files("labelled");
    assert!(files.len() >= 7, "labelled fixtures missing");
    assert_roles_match(&files);
}

/// The set-ups teams train with (issue 19): each file 98% or more, like the eager loops.
#[test]
fn roles_match_the_truth_of_every_setup() {
    let files = labelled_files("setups");
    assert!(files.len() >= 20, "set-up fixtures missing");
    assert_roles_match(&files);
}

/// The same set-ups with a wider model (6 layers of 384, batches of 4 x 192, vocabulary 8192)
/// from a script at another path: made after the rules were written and scored by them before
/// anyone looked (100% on each), so they check the rules follow PyTorch, not the files above.
#[test]
fn roles_match_the_truth_of_every_setup_with_a_wider_model() {
    let files = labelled_files("setups_wide");
    assert!(files.len() >= 20, "wide set-up fixtures missing");
    assert_roles_match(&files);
}

/// Same stack, same lifetime: same role. The kept outputs of an inference loop come from one
/// stack (the model's last layer), are all alive at the dump, and are all `output`; none is
/// called `temporary` or `activation` because of when the dump was taken.
#[test]
fn blocks_of_one_stack_alive_together_share_a_role() {
    for name in [
        "setups/s_nograd_keep_outputs_end.pickle",
        "setups/s_grad_keep_outputs_end.pickle",
        "labelled/l_infer_grad.pickle",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let snapshot = snapview::snapshot::load_path(&path, Default::default()).expect("load");
        let analysis = Analysis::new(&snapshot);
        let device = analysis.device(0).expect("device");
        let roles = device.roles(&snapshot, &UserRules::default());
        let replay = &device.replay;
        let live = replay.live_after(replay.len().checked_sub(1));
        // The kept logits, one per batch: the blocks of one stack and one size that hold the
        // most bytes together (a workspace is larger, but alone).
        let mut groups: BTreeMap<(u32, u64), Vec<u32>> = BTreeMap::new();
        for &id in &live {
            let key = (
                replay.allocations.stack(id as usize),
                replay.allocations.size(id as usize),
            );
            groups.entry(key).or_default().push(id);
        }
        for ids in groups.values() {
            let named: Vec<&str> = ids.iter().map(|&id| roles.role_of(id)).collect();
            assert!(
                named.iter().all(|role| *role == named[0]),
                "{name}: blocks of one stack and size, all alive, named {named:?}"
            );
        }
        // The logits the loop keeps, one per batch, are outputs (the split called one
        // `temporary` and one `activation`).
        if name.starts_with("setups/") {
            let logits = groups
                .into_values()
                .filter(|ids| ids.len() >= 4)
                .max_by_key(|ids| replay.allocations.size(ids[0] as usize))
                .expect("kept logits");
            assert!(
                logits.iter().all(|&id| roles.role_of(id) == "output"),
                "{name}: the kept logits are not all outputs"
            );
        }
    }
}

/// A snapshot shaped like torch's profiler's (tests/fixtures/profiler/make.py): each entry's
/// `category` is the role, over what the rules would say from its (empty) frames; `unknown`
/// leaves the rules' answer.
#[test]
fn profiler_categories_decide_roles() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/profiler/profiler_categories.pickle");
    let snapshot = snapview::snapshot::load_path(&path, Default::default()).expect("load");
    assert_eq!(
        snapshot.trace(0).category_of(0),
        Some("parameter"),
        "the category column is kept"
    );
    let analysis = Analysis::new(&snapshot);
    let device = analysis.device(0).expect("device");
    let roles = device.roles(&snapshot, &UserRules::default());
    let replay = &device.replay;
    let live = replay.live_after(replay.len().checked_sub(1));
    let by_addr: BTreeMap<u64, u32> = live
        .iter()
        .map(|&id| (replay.allocations.addr(id as usize), id))
        .collect();
    let mib = 1u64 << 20;
    let base = 0x7F00_0000_0000u64;
    // Addresses as make.py lays them out: each allocation right after the one before.
    let expected = [
        (0, "parameter"),
        (4, "parameter"),
        (8, "input"),
        (14, "activation"),
        (16, "gradient"),
        (20, "gradient"),
        (24, "autograd_detail"),
        (25, "optimizer_state"),
        (29, "optimizer_state"),
    ];
    for (offset, role) in expected {
        let id = by_addr[&(base + offset * mib)];
        assert_eq!(roles.role_of(id), role, "at +{offset} MiB");
        assert_eq!(
            roles.because(id),
            format!("labelled `{role}` by the profiler")
        );
    }
    let mystery = by_addr[&(base + 33 * mib)];
    assert!(
        !roles.because(mystery).contains("profiler"),
        "`unknown` from the profiler leaves the rules' answer"
    );
}

/// cuBLAS workspaces are named, and only they: on `s_workspace` the script measured the main
/// thread's and autograd's thread's workspaces (its `notes`), and the live `workspace` bytes are
/// exactly those; with C++ frames (`mlp_cpp_frames`) the frames under which cuBLAS and
/// cuBLASLt set their workspaces up name them, and nothing else is called a workspace.
#[test]
fn cublas_workspaces_are_named_and_nothing_else() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let live_roles = |name: &str| {
        let snapshot =
            snapview::snapshot::load_path(&root.join(name), Default::default()).expect("load");
        let analysis = Analysis::new(&snapshot);
        let device = analysis.device(0).expect("device");
        let roles = device.roles(&snapshot, &UserRules::default());
        let replay = &device.replay;
        let live = replay.live_after(replay.len().checked_sub(1));
        let mut named: Vec<(u64, String, Vec<String>)> = live
            .iter()
            .map(|&id| {
                let stack = replay.allocations.stack(id as usize);
                let frames = snapshot
                    .stacks
                    .get(stack)
                    .iter()
                    .map(|&f| snapshot.frames.get(f).name.to_string())
                    .collect();
                (
                    replay.allocations.size(id as usize),
                    roles.role_of(id).to_owned(),
                    frames,
                )
            })
            .collect();
        named.sort();
        named
    };
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("setups/s_workspace.truth.json")).expect("truth"),
    )
    .expect("json");
    let measured = truth["notes"]["cublas_workspace_main_thread_bytes"]
        .as_u64()
        .expect("main")
        + truth["notes"]["cublas_workspace_backward_thread_bytes"]
            .as_u64()
            .expect("backward");
    let workspace: u64 = live_roles("setups/s_workspace.pickle")
        .iter()
        .filter(|(_, role, _)| role == "workspace")
        .map(|(size, _, _)| size)
        .sum();
    assert_eq!(workspace, measured, "s_workspace: the measured workspaces");

    let cpp = live_roles("mlp_cpp_frames.pickle");
    let under_cublas = |frames: &[String]| {
        frames
            .iter()
            .any(|f| f.contains("setWorkspaceForHandle") || f.contains("getCUDABlasLtWorkspace"))
    };
    assert!(cpp.iter().any(|(_, _, frames)| under_cublas(frames)));
    for (size, role, frames) in &cpp {
        assert_eq!(
            role == "workspace",
            under_cublas(frames),
            "mlp_cpp_frames: a {size}-byte block named {role}"
        );
    }
}
