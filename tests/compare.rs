//! Compare, OOM explainer, groups, and `snapview diff` as a CI gate.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use std::process::Command;

use common::server::TestServer;

fn frames_text(stack: &serde_json::Value) -> String {
    stack["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter_map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(";")
}

#[tokio::test]
async fn no_grad_vs_grad_shows_the_activations_kept_alive() {
    let state = TestServer::new();
    let nograd = state.upload_fixture("infer_nograd", "").await;
    let grad = state.upload_fixture("infer_grad", "").await;
    let answer = state.get(&format!("/api/compare/{nograd}/{grad}")).await;
    let device = &answer["diff"]["devices"][0];
    assert!(device["peak_growth_percent"].as_f64().expect("growth") > 200.0);
    // The top growing stacks are GPT-2's forward pass holding activations.
    let growing: Vec<&serde_json::Value> = device["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .filter(|s| s["delta_bytes"].as_i64() > Some(0))
        .take(5)
        .collect();
    assert_eq!(growing.len(), 5);
    for stack in &growing {
        let frames = frames_text(stack);
        assert!(
            frames.contains("modeling_gpt2.py") && frames.contains("forward"),
            "{frames}"
        );
    }
    let tree = device["tree"].as_array().expect("tree");
    assert_eq!(tree[0]["after_bytes"], device["after"]["live_bytes_at"]);
    assert!(device["before_curve"].as_array().expect("curve").len() > 10);
    // Each side says how long its trace is (the page turns a click on a curve into an event),
    // and another moment can be asked for: a few events in, less is live than at the peak.
    let facts = common::facts();
    assert_eq!(
        device["before"]["events"],
        facts["infer_nograd"]["device_traces"][0]
    );
    assert_eq!(
        device["after"]["events"],
        facts["infer_grad"]["device_traces"][0]
    );
    let early = state
        .get(&format!("/api/compare/{nograd}/{grad}?at_a=-1&at_b=100"))
        .await;
    let early = &early["diff"]["devices"][0];
    assert_eq!(early["before"]["at"], serde_json::Value::Null);
    assert_eq!(early["after"]["at"], 100);
    assert!(early["after"]["live_bytes_at"].as_u64() < device["after"]["live_bytes_at"].as_u64());

    // The segment-level part is torch's `compare`: its text, line for line, is a download (the
    // oracle compared grad against no_grad) ...
    let reverse = state.get(&format!("/api/compare/{grad}/{nograd}")).await;
    let (status, text, headers) = state
        .send_get(&format!("/api/compare/{grad}/{nograd}/torch.txt"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    let disposition = headers["content-disposition"].to_str().expect("ascii");
    assert!(
        disposition.starts_with("attachment; filename=\"compare-")
            && disposition.contains(".txt\"; filename*=UTF-8''compare-")
            && disposition.ends_with(".txt"),
        "{disposition}"
    );
    let text = String::from_utf8(text).expect("utf-8");
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("only_before = ") && !l.starts_with("only_after = "))
        .collect();
    let oracle = common::oracle("infer_grad_vs_nograd.compare.txt").expect("oracle");
    let mut theirs: Vec<&str> = oracle.lines().collect();
    let mut ours_sorted = ours.clone();
    ours_sorted.sort();
    theirs.sort();
    assert_eq!(ours_sorted, theirs);

    // ... and the JSON the page draws is the same structure: torch's two printed lists, in its
    // order, with each segment's size, stream, blocks and live bytes from its folded lines.
    let segments = &reverse["segments"];
    for side in ["only_before", "only_after"] {
        let listed = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{side} = [")))
            .and_then(|l| l.strip_suffix(']'))
            .expect("the printed list");
        let addresses: Vec<String> = segments[side]
            .as_array()
            .expect("a list")
            .iter()
            .map(|s| s["address"].to_string())
            .collect();
        assert_eq!(addresses.join(", "), listed, "{side}");
        for segment in segments[side].as_array().expect("a list") {
            let prefix = format!(
                "{side};stream_{};seg_{};",
                segment["stream"], segment["address"]
            );
            let lines: Vec<&str> = ours
                .iter()
                .copied()
                .filter(|l| l.starts_with(&prefix))
                .collect();
            let bytes = |line: &&str| -> i64 {
                line.rsplit(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("bytes")
            };
            let sum = |active: bool| -> i64 {
                lines
                    .iter()
                    .filter(|l| !active || l[prefix.len()..].starts_with("active"))
                    .map(bytes)
                    .sum()
            };
            assert_eq!(segment["total_size"].as_i64(), Some(sum(false)), "{prefix}");
            assert_eq!(segment["live_bytes"].as_i64(), Some(sum(true)), "{prefix}");
            let blocks = lines.iter().filter(|l| !l.contains(";<gaps> ")).count();
            assert_eq!(segment["blocks"].as_u64(), Some(blocks as u64), "{prefix}");
        }
    }
    assert!(!segments["only_before"].as_array().expect("list").is_empty());
    assert_eq!(segments["folded_lines"].as_u64(), Some(ours.len() as u64));
    assert!(
        reverse.get("torch_compare").is_none(),
        "the text is a download, not part of the JSON"
    );
    // An unknown snapshot is a 404 with a message, as for the JSON.
    let (status, body, _) = state
        .send_get(&format!("/api/compare/{grad}/0123456789abcdef/torch.txt"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let error = common::server::json(&body);
    assert!(error["error"]["message"].is_string(), "{error}");
}

/// Rows that grew and rows that shrank by the same bytes at the same leaf frame: what a changed
/// outer caller made of one unchanged allocation ("+3.91 GiB linear.py:134 forward" and
/// "−3.91 GiB linear.py:134 forward").
fn mirrored_rows(device: &serde_json::Value) -> Vec<String> {
    let stacks = device["stacks"].as_array().expect("stacks");
    let leaf = |s: &serde_json::Value| {
        s["frames"]
            .as_array()
            .and_then(|f| f.last())
            .and_then(|f| f.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let delta = |s: &serde_json::Value| s["delta_bytes"].as_i64().expect("delta");
    stacks
        .iter()
        .filter(|grew| delta(grew) > 0)
        .filter(|grew| {
            stacks
                .iter()
                .any(|shrank| delta(shrank) == -delta(grew) && leaf(shrank) == leaf(grew))
        })
        .map(leaf)
        .collect()
}

#[tokio::test]
async fn a_changed_outer_caller_is_aligned_from_the_leaf_side() {
    let state = TestServer::new();
    let grad = state.upload_fixture("infer_grad", "").await;
    let nograd = state.upload_fixture("infer_nograd", "").await;

    // Frame for frame, the same lm_head output sits under `w_infer_grad` on one side and
    // `w_infer_nograd` on the other: one allocation listed as grown and as shrunk.
    let off = state
        .get(&format!("/api/compare/{grad}/{nograd}?align=off"))
        .await;
    let off = &off["diff"]["devices"][0];
    assert!(off["alignment"].is_null());
    assert!(
        mirrored_rows(off).contains(&"linear.py:134 forward".to_owned()),
        "{:?}",
        mirrored_rows(off)
    );

    // Aligned (the default): the two callers are paired and said so ...
    let answer = state.get(&format!("/api/compare/{grad}/{nograd}")).await;
    assert_eq!(answer["diff"]["align"], "auto");
    let device = &answer["diff"]["devices"][0];
    let aligned = &device["alignment"];
    let frames = |side: &str| -> Vec<String> {
        aligned[side]
            .as_array()
            .expect("frames")
            .iter()
            .map(|f| f.as_str().expect("frame").to_owned())
            .collect()
    };
    assert_eq!(aligned["shared_frames"], 2, "{aligned}");
    assert!(
        frames("before_frames")[2].ends_with("w_infer_grad"),
        "{aligned}"
    );
    assert!(
        frames("after_frames")[2].ends_with("w_infer_nograd"),
        "{aligned}"
    );
    assert!(aligned["matched_stacks"].as_u64() >= Some(3));
    // ... the unchanged output is no row at all, nothing is listed both ways ...
    assert_eq!(mirrored_rows(device), Vec::<String>::new());
    let stacks = device["stacks"].as_array().expect("stacks");
    assert!(!stacks.is_empty());
    for stack in stacks {
        let frames = frames_text(stack);
        assert!(!frames.ends_with("linear.py:134 forward"), "{frames}");
        // ... and what no_grad saves is what is left: activations freed early, nothing grows.
        assert!(stack["delta_bytes"].as_i64() < Some(0), "{frames}");
    }
    // The flame graph is one trunk under the paired frames, not a red half and a blue half.
    let tree = device["tree"].as_array().expect("tree");
    let root = &tree[0];
    let paired = tree
        .iter()
        .find(|n| {
            n["name"]
                .as_str()
                .is_some_and(|n| n.contains("w_infer_grad ⇄ "))
        })
        .expect("a node for the paired callers");
    for side in ["before_bytes", "after_bytes"] {
        let (under, all) = (
            paired[side].as_u64().expect("bytes"),
            root[side].as_u64().expect("bytes"),
        );
        assert!(under * 100 >= all * 95, "{side}: {under} of {all}");
    }
    // The bytes are the same bytes whichever way they line up.
    assert_eq!(root["before_bytes"], off["tree"][0]["before_bytes"]);
    assert_eq!(root["after_bytes"], off["tree"][0]["after_bytes"]);

    // Dropping the 4 outer frames by hand lines them up too, and says what merged.
    let dropped = state
        .get(&format!("/api/compare/{grad}/{nograd}?align=4"))
        .await;
    assert_eq!(dropped["diff"]["align"]["drop_outer"], 4);
    let dropped = &dropped["diff"]["devices"][0];
    assert!(dropped["alignment"].is_null());
    assert_eq!(mirrored_rows(dropped), Vec::<String>::new());
    assert!(dropped["merged_by_drop"].as_array().is_some());
    // Client input is bounded and checked before anything is read.
    for bad in ["sideways", "257", "-1"] {
        let (status, _, _) = state
            .send_get(&format!("/api/compare/{grad}/{nograd}?align={bad}"))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test]
async fn different_models_are_never_aligned() {
    let state = TestServer::new();
    let resnet = state.upload_fixture("resnet18_amp", "").await;
    let gpt2 = state.upload_fixture("gpt2_adamw", "").await;
    let mlp = state.upload_fixture("mlp_small", "").await;
    // Each pair shares the script's entry and torch's own `Module.cuda` stacks, but not the model.
    for (a, b) in [
        (&resnet, &gpt2),
        (&gpt2, &resnet),
        (&resnet, &mlp),
        (&mlp, &gpt2),
        (&mlp, &mlp),
    ] {
        let auto = state.get(&format!("/api/compare/{a}/{b}")).await;
        let off = state.get(&format!("/api/compare/{a}/{b}?align=off")).await;
        for (auto, off) in auto["diff"]["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .zip(off["diff"]["devices"].as_array().expect("devices"))
        {
            assert!(
                auto["alignment"].is_null(),
                "{a} {b}: {}",
                auto["alignment"]
            );
            assert_eq!(auto["further_alignments"], serde_json::json!([]));
            assert_eq!(auto["stacks"], off["stacks"]);
            assert_eq!(auto["tree"], off["tree"]);
        }
    }
}

#[tokio::test]
async fn the_oom_explainer_matches_the_event_and_the_map() {
    let state = TestServer::new();
    let id = state.upload_fixture("oom", "").await;
    let reports = state.get(&format!("/api/snapshots/{id}/oom")).await;
    let report = &reports[0];
    let event = report["event_index"].as_u64().expect("event");
    let snapshot = common::load("oom");
    let trace = snapshot.trace(0);
    assert_eq!(report["requested_bytes"], trace.size.get(event as usize));
    assert_eq!(
        report["device_free_bytes"],
        *trace
            .device_free
            .get(&(event as usize))
            .expect("device_free")
    );
    // The verdict follows from the segment map at that event: fragmentation exactly when the
    // request's stream had enough cached free bytes but no block big enough.
    let map = state
        .get(&format!("/api/snapshots/{id}/segments?at={event}"))
        .await;
    let stream = report["stream"].as_u64().expect("stream");
    let (mut free, mut largest) = (0u64, 0u64);
    for segment in map["segments"].as_array().expect("segments") {
        if segment["stream"] == stream && segment["pool"] == serde_json::json!([0, 0]) {
            free += segment["stats"]["external_free"].as_u64().expect("free");
            largest = largest.max(
                segment["stats"]["largest_free_block"]
                    .as_u64()
                    .expect("largest"),
            );
        }
    }
    let requested = report["requested_bytes"].as_u64().expect("requested");
    let expected = if free >= requested && largest < requested {
        "fragmentation"
    } else {
        "exhaustion"
    };
    assert_eq!(report["verdict"], expected);
    assert_eq!(
        report["map_exact"], true,
        "the snapshot was dumped at the OOM"
    );
    // This run capped the process at 2% of the GPU: the explainer says the cap was not the GPU.
    let hints = report["hints"].as_array().expect("hints");
    assert!(
        hints
            .iter()
            .any(|h| h.as_str().is_some_and(|t| t.contains("memory_fraction"))),
        "{hints:?}"
    );
    assert!(!report["top_stacks"].as_array().expect("stacks").is_empty());

    let none = state.upload_fixture("mlp_small", "").await;
    assert_eq!(
        state.get(&format!("/api/snapshots/{none}/oom")).await,
        serde_json::json!([])
    );
}

#[tokio::test]
async fn ranks_of_one_job_form_a_group() {
    let state = TestServer::new();
    let rank0 = state
        .upload_fixture("ddp_rank", "&group=ddp-job&name=rank0")
        .await;
    let rank1 = state
        .upload_fixture("ddp_rank_rank1", "&group=ddp-job&name=rank1")
        .await;
    state.upload_fixture("mlp_small", "").await;
    let group = state.get("/api/groups/ddp-job").await;
    let members = group["members"].as_array().expect("members");
    assert_eq!(members.len(), 2);
    assert_eq!(members[0]["id"], rank0.as_str());
    assert_eq!(members[1]["id"], rank1.as_str());
    for member in members {
        assert_eq!(
            member["peak_allocated_bytes"], 3680751624u64,
            "MemoryViz's peak for each rank"
        );
    }
    let (status, _) = state
        .call(
            Request::get("/api/groups/nope")
                .body(Body::empty())
                .expect("req"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

fn snapview(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(args)
        .output()
        .expect("run")
}

#[test]
fn diff_gates_ci_on_peak_growth() {
    let nograd = common::path_of("infer_nograd");
    let grad = common::path_of("infer_grad");
    let (nograd, grad) = (nograd.to_string_lossy(), grad.to_string_lossy());
    let regression = snapview(&["diff", &nograd, &grad, "--max-peak-growth", "5"]);
    assert_eq!(
        regression.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&regression.stderr)
    );
    let text = String::from_utf8_lossy(&regression.stdout);
    assert!(text.contains("memory regression"), "{text}");
    assert!(text.contains("modeling_gpt2.py"), "{text}");

    let same = snapview(&["diff", &grad, &grad, "--max-peak-growth", "5"]);
    assert_eq!(same.status.code(), Some(0));

    let json = snapview(&["diff", &nograd, &grad, "--json"]);
    assert_eq!(json.status.code(), Some(0), "no limit given: no gate");
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert!(parsed["devices"][0]["peak_growth_percent"].as_f64() > Some(200.0));

    let bad = snapview(&["diff", &nograd, "/nonexistent.pickle"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn diff_aligns_outer_callers_and_says_so_unless_told_not_to() {
    let fixture = |name: &str| {
        format!(
            "{}/tests/fixtures/{name}.pickle",
            env!("CARGO_MANIFEST_DIR")
        )
    };
    let (grad, nograd) = (fixture("infer_grad"), fixture("infer_nograd"));
    let text = |output: std::process::Output| {
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).expect("utf-8")
    };
    let aligned = text(snapview(&["diff", "--top", "20", &grad, &nograd]));
    assert!(
        aligned.contains("aligned: ") && aligned.contains("w_infer_grad"),
        "{aligned}"
    );
    assert!(!aligned.contains("linear.py:134 forward ←"), "{aligned}");
    let off = text(snapview(&[
        "diff", "--top", "20", "--align", "off", &grad, &nograd,
    ]));
    assert!(!off.contains("aligned: "), "{off}");
    assert_eq!(off.matches("linear.py:134 forward ←").count(), 2, "{off}");
    let refused = snapview(&["diff", "--align", "sideways", &grad, &nograd]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--align"));
}
