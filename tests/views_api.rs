//! The views' endpoints agree with each other and with torch: for every corpus file, the flame
//! graph at the peak and the timeline's maximum equal the summary's peak, and the segment map at
//! the last event has the totals `snapview stats` (torch's segsum) prints.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use snapview::torch_text::format_size;

use common::server::TestServer;

async fn upload(state: &TestServer, bytes: Vec<u8>) -> String {
    let (status, json) = state.upload(bytes, "").await;
    assert!(status.is_success(), "{json}");
    json["id"].as_str().expect("id").to_owned()
}

async fn check_file(state: &TestServer, name: &str, bytes: Vec<u8>) {
    let id = upload(state, bytes).await;
    let detail = state.get(&format!("/api/snapshots/{id}")).await;
    for device in detail["analysis"]["devices"].as_array().expect("devices") {
        let d = device["device"].as_u64().expect("device");
        let peak = device["peak_allocated_bytes"].as_u64().expect("peak");
        let events = device["trace_entries"].as_u64().expect("entries");

        let flame = state
            .get(&format!("/api/snapshots/{id}/flame?device={d}"))
            .await;
        assert_eq!(
            flame["total"], peak,
            "{name} cuda:{d}: flame total at the peak"
        );
        assert_eq!(flame["nodes"][0]["bytes"], peak, "{name}: root node");

        if events > 0 {
            let timeline = state
                .get(&format!(
                    "/api/snapshots/{id}/timeline?device={d}&width=800"
                ))
                .await;
            let max = timeline["allocated_max"]
                .as_array()
                .expect("columns")
                .iter()
                .filter_map(serde_json::Value::as_u64)
                .max()
                .expect("some column");
            assert_eq!(max, peak, "{name} cuda:{d}: timeline maximum");
            assert!(timeline["allocated_max"].as_array().expect("cols").len() <= 800);
        }

        let map = state
            .get(&format!("/api/snapshots/{id}/segments?device={d}"))
            .await;
        assert_eq!(
            map["exact"], true,
            "{name}: the last event uses the snapshot's own blocks"
        );
        let totals = &map["totals"];
        let reserved = totals["reserved"].as_u64().expect("reserved");
        let allocated = totals["allocated"].as_u64().expect("allocated");
        let free = ["external_free", "pending_free", "internal_free"]
            .iter()
            .map(|k| totals[k].as_u64().expect("free"))
            .sum::<u64>();
        assert_eq!(
            reserved, device["reserved_bytes_at_snapshot"],
            "{name}: reserved"
        );
        if detail["analysis"]["devices"]
            .as_array()
            .expect("devices")
            .len()
            == 1
        {
            // torch's segsum sums every device; compare where there is one.
            let stats = common::oracle(&format!("{name}.segsum.txt")).expect("oracle");
            assert!(
                stats.contains(&format!("total_reserved: {}\n", format_size(reserved))),
                "{name}: reserved vs stats"
            );
            assert!(
                stats.contains(&format!("total_allocated: {}\n", format_size(allocated))),
                "{name}: allocated vs stats"
            );
            assert!(
                stats.contains(&format!("total_free: {}", format_size(free))),
                "{name}: free vs stats"
            );
        }
    }
}

#[tokio::test]
async fn views_agree_with_the_summary_and_torch_for_every_small_file() {
    let state = TestServer::new();
    for name in common::small_names() {
        if name == "ddp_rank_rank1" {
            continue; // no oracle of its own; its twin ddp_rank is checked
        }
        check_file(
            &state,
            &name,
            std::fs::read(common::path_of(&name)).expect("fixture"),
        )
        .await;
    }
}

#[tokio::test]
async fn views_agree_for_large_files_when_present() {
    let state = TestServer::new();
    for (name, path) in common::large_names() {
        check_file(&state, &name, std::fs::read(&path).expect("large file")).await;
    }
}

#[tokio::test]
async fn a_moment_moves_the_flame_graph_and_the_map() {
    let state = TestServer::new();
    let id = upload(
        &state,
        std::fs::read(common::path_of("gpt2_adamw")).expect("fixture"),
    )
    .await;
    let at_peak = state.get(&format!("/api/snapshots/{id}/flame")).await;
    let early = state
        .get(&format!("/api/snapshots/{id}/flame?at=100"))
        .await;
    assert!(early["total"].as_u64() < at_peak["total"].as_u64());
    let timeline = state
        .get(&format!(
            "/api/snapshots/{id}/timeline?start=100&end=100&width=10"
        ))
        .await;
    assert_eq!(
        timeline["allocated_max"][0], early["total"],
        "the timeline after event 100 is the flame total"
    );

    let map = state
        .get(&format!("/api/snapshots/{id}/segments?at=100"))
        .await;
    assert_eq!(map["exact"], false);
    assert_eq!(
        map["totals"]["allocated"], early["total"],
        "the rebuilt map holds the live allocations"
    );

    let reserved = state
        .get(&format!("/api/snapshots/{id}/flame?mode=reserved&at=100"))
        .await;
    assert_eq!(
        reserved["total"], map["totals"]["reserved"],
        "reserved mode covers every segment byte"
    );

    // One allocation, from a band.
    let bands = &state
        .get(&format!("/api/snapshots/{id}/timeline?width=400"))
        .await["bands"];
    let allocation = state
        .get(&format!(
            "/api/snapshots/{id}/allocations/{}",
            bands["id"][0]
        ))
        .await;
    assert_eq!(allocation["size"], bands["size"][0]);
    assert!(
        allocation["block_id"]
            .as_str()
            .expect("id")
            .starts_with('b')
    );

    // The event list: all rows reachable, filters, find.
    let page = state
        .get(&format!("/api/snapshots/{id}/events?offset=7200&limit=500"))
        .await;
    assert_eq!(page["total"], 7294);
    assert_eq!(page["rows"].as_array().expect("rows").len(), 94);
    let oom_free = state
        .get(&format!(
            "/api/snapshots/{id}/events?action=segment_alloc&limit=1000"
        ))
        .await;
    assert_eq!(oom_free["matching"], 87);
    let big = state
        .get(&format!("/api/snapshots/{id}/events?min_size=100000000"))
        .await;
    assert!(
        big["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["size"].as_u64() >= Some(100_000_000))
    );
    let adam = state
        .get(&format!("/api/snapshots/{id}/events?frame=adam.py&limit=5"))
        .await;
    assert!(adam["matching"].as_u64() > Some(0));
    let found = state
        .get(&format!("/api/snapshots/{id}/events?find=5000&limit=100"))
        .await;
    assert_eq!(found["offset"], 5000);
    assert_eq!(found["rows"][0]["index"], 5000);

    // Allocs and frees name the allocation they open or close, with its block id.
    let allocs = state
        .get(&format!("/api/snapshots/{id}/events?action=alloc&limit=3"))
        .await;
    for row in allocs["rows"].as_array().expect("rows") {
        let n = row["allocation"]
            .as_u64()
            .expect("an alloc opens an allocation");
        let allocation = state
            .get(&format!("/api/snapshots/{id}/allocations/{n}"))
            .await;
        assert_eq!(allocation["start"], row["index"]);
        assert_eq!(row["block_id"], allocation["block_id"]);
    }
    let segments = state
        .get(&format!(
            "/api/snapshots/{id}/events?action=segment_alloc&limit=1"
        ))
        .await;
    assert!(segments["rows"][0]["allocation"].is_null());
}

#[tokio::test]
async fn timeline_payloads_stay_bounded_by_width() {
    for (name, path) in common::large_names() {
        let state = TestServer::new();
        let id = upload(&state, std::fs::read(&path).expect("large")).await;
        for query in [
            "width=1600",
            "width=1600&axis=time",
            "start=1000000&end=1100000&width=1600",
            "start=5000&end=5400&width=1600",
        ] {
            let (status, json) = state
                .call(
                    Request::get(format!("/api/snapshots/{id}/timeline?{query}"))
                        .body(Body::empty())
                        .expect("req"),
                )
                .await;
            assert_eq!(status, StatusCode::OK);
            let size = json.to_string().len();
            assert!(size <= 300_000, "{name} {query}: {size} bytes of JSON");
        }
    }
}

/// The `/roles` window stacks up to the timeline's curve in every column (both axes, zoomed or
/// not), the bands and allocations carry their role, and the flame graph by role has the roles
/// as the root's children with the same total as the flame by stack.
#[tokio::test]
async fn roles_agree_with_the_timeline_flame_and_allocations() {
    let state = TestServer::new();
    for name in ["gpt2_adamw", "mlp_cpp_frames", "ring_wrap"] {
        let id = upload(
            &state,
            std::fs::read(common::path_of(name)).expect("fixture"),
        )
        .await;
        let detail = state.get(&format!("/api/snapshots/{id}")).await;
        let events = detail["analysis"]["devices"][0]["trace_entries"]
            .as_u64()
            .expect("entries");
        for query in [
            "width=300".to_owned(),
            "width=7".to_owned(),
            format!("start={}&end={}&width=40", events / 3, events / 2),
            "width=120&axis=time".to_owned(),
            format!("start={}&width=5000&axis=time", events / 4),
        ] {
            let timeline = state
                .get(&format!("/api/snapshots/{id}/timeline?{query}"))
                .await;
            let roles = state
                .get(&format!("/api/snapshots/{id}/roles?{query}"))
                .await;
            assert_eq!(
                roles["column_start"], timeline["column_start"],
                "{name} {query}: the same columns"
            );
            let max = timeline["allocated_max"].as_array().expect("columns");
            let bytes = roles["bytes"].as_array().expect("roles");
            assert_eq!(bytes.len(), roles["roles"].as_array().expect("names").len());
            for (c, expected) in max.iter().enumerate() {
                let sum: u64 = bytes
                    .iter()
                    .map(|row| row[c].as_u64().expect("bytes"))
                    .sum();
                assert_eq!(Some(sum), expected.as_u64(), "{name} {query} column {c}");
            }
            let bands = timeline["bands"]["id"].as_array().expect("bands").len();
            let band_roles = &timeline["band_roles"];
            assert_eq!(band_roles["role"].as_array().expect("roles").len(), bands);
            assert_eq!(band_roles["because"].as_array().expect("why").len(), bands);
            for reason in band_roles["because"].as_array().expect("why") {
                let index = reason.as_u64().expect("index") as usize;
                assert!(
                    !band_roles["reasons"][index]
                        .as_str()
                        .expect("text")
                        .is_empty()
                );
            }
        }

        let by_stack = state.get(&format!("/api/snapshots/{id}/flame")).await;
        let by_role = state
            .get(&format!("/api/snapshots/{id}/flame?by=role"))
            .await;
        assert_eq!(by_role["total"], by_stack["total"], "{name}: same bytes");
        let names: Vec<&str> = snapview::analysis::roles::BUILTIN_ROLES
            .iter()
            .map(|role| role.name())
            .collect();
        let nodes = by_role["nodes"].as_array().expect("nodes");
        let children: Vec<&serde_json::Value> = nodes.iter().filter(|n| n["parent"] == 0).collect();
        assert!(!children.is_empty(), "{name}: the root has roles below it");
        for child in children {
            let role = child["name"].as_str().expect("name");
            assert!(names.contains(&role), "{name}: {role} is not a role");
        }

        let allocation = state
            .get(&format!("/api/snapshots/{id}/allocations/0"))
            .await;
        assert!(names.contains(&allocation["role"].as_str().expect("role")));
        assert!(!allocation["because"].as_str().expect("because").is_empty());
    }

    // Reserved bytes that no allocation holds have no role: refused, saying why.
    let id = upload(
        &state,
        std::fs::read(common::path_of("gpt2_adamw")).expect("fixture"),
    )
    .await;
    let (status, body) = state
        .call(
            Request::get(format!("/api/snapshots/{id}/flame?by=role&mode=reserved"))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("mode=allocated"), "{body}");
    let (status, body) = state
        .call(
            Request::get(format!("/api/snapshots/{id}/flame?by=frame"))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}
