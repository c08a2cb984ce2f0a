//! The stored index beside each blob (`snapview::index`): a server restarted on the same folder
//! answers from it exactly as from a fresh read, without reading the pickle; a damaged index is
//! refused (or, for a column, found by the check after opening) and rebuilt; racing loads and writers end with one valid index.

use crate::common;

use common::server::{TestServer, config_in};
use snapview::index::{BlobIdentity, Verify};
use snapview::server::AppState;
use snapview::server::store::SnapshotId;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A server on `dir` (kept by the caller), as `snapview serve --data-dir dir` starts it.
fn server_on(dir: &Path) -> TestServer {
    TestServer::on_state(AppState::open(config_in(dir)).expect("open"))
}

fn paths(state: &AppState, id: &str) -> (PathBuf, PathBuf) {
    let id = SnapshotId::parse(id).expect("id");
    (
        state.store.blob_file(&id).expect("blob"),
        state.store.index_path(&id),
    )
}

/// Waits (the index is written after answering, on a blocking thread) until the index of `id`
/// opens with every checksum right.
fn wait_for_valid_index(state: &AppState, id: &str) {
    let (blob, index) = paths(state, id);
    let identity = BlobIdentity {
        id,
        bytes: std::fs::metadata(&blob).expect("blob").len(),
    };
    let started = Instant::now();
    loop {
        // SAFETY: the server writes indexes by rename only and this test edits none in place
        // while the opened one lives (it is dropped at once).
        match unsafe { snapview::index::open(&index, identity, Verify::Everything) } {
            Ok(_) => return,
            Err(error) if started.elapsed() > Duration::from_secs(60) => {
                panic!("{id}: no valid index after a minute: {error}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Every answer the views give that the index must keep exactly: the summary, timeline
/// windows, segment maps at several moments, flame graphs, pages of events.
async fn answers(server: &TestServer, id: &str) -> Vec<(String, serde_json::Value)> {
    let detail = server.get(&format!("/api/snapshots/{id}")).await;
    let mut paths = vec![
        format!("/api/snapshots/{id}"),
        format!("/api/snapshots/{id}/oom"),
    ];
    for device in detail["analysis"]["devices"].as_array().expect("devices") {
        let d = device["device"].as_u64().expect("device");
        let events = device["trace_entries"].as_u64().expect("entries");
        let base = format!("/api/snapshots/{id}");
        paths.push(format!("{base}/flame?device={d}"));
        paths.push(format!("{base}/flame?device={d}&mode=reserved"));
        paths.push(format!("{base}/segments?device={d}"));
        paths.push(format!("{base}/roles?device={d}"));
        paths.push(format!("{base}/events?device={d}&limit=50"));
        if events > 0 {
            let (third, half, last) = (events / 3, events / 2, events - 1);
            paths.push(format!("{base}/timeline?device={d}&width=800"));
            paths.push(format!(
                "{base}/timeline?device={d}&start={third}&end={half}&width=300"
            ));
            for at in [0, third, half, last] {
                paths.push(format!("{base}/segments?device={d}&at={at}"));
                paths.push(format!("{base}/flame?device={d}&at={at}"));
            }
            paths.push(format!("{base}/events?device={d}&offset={half}&limit=100"));
            paths.push(format!("{base}/allocations/0?device={d}"));
        }
    }
    let mut answered = Vec::new();
    for path in paths {
        let (status, json) = server
            .call(
                axum::http::Request::get(&path)
                    .body(axum::body::Body::empty())
                    .expect("request"),
            )
            .await;
        answered.push((format!("{path} -> {status}"), json));
    }
    answered
}

/// The loaded snapshot `id` in `server`'s cache (it must be there).
async fn cached(
    server: &TestServer,
    id: &str,
) -> std::sync::Arc<snapview::server::analysed::AnalysedSnapshot> {
    let id = SnapshotId::parse(id).expect("id");
    server
        .state
        .cache
        .get_or_load(&id, 0, server.state.config.roles.fingerprint(), |_: &_| {
            Err("not cached".into())
        })
        .await
        .expect("cached")
}

/// Overwrites the blob with zeros of its size: reading it would fail, so an answer after this
/// came from the index.
fn make_blob_unreadable(state: &AppState, id: &str) {
    let (blob, _) = paths(state, id);
    let size = std::fs::metadata(&blob).expect("blob").len();
    std::fs::write(&blob, vec![0u8; size as usize]).expect("overwrite");
}

async fn restart_answers_as_fresh_read(name: &str, bytes: Vec<u8>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = server_on(dir.path());
    let (status, json) = first
        .upload(bytes, &format!("?filename={name}.pickle"))
        .await;
    assert!(status.is_success(), "{name}: {json}");
    let id = json["id"].as_str().expect("id").to_owned();
    // Answered from the upload's own parse: a fresh read.
    let fresh = answers(&first, &id).await;
    let fresh_heap = cached(&first, &id).await.approx_bytes();
    wait_for_valid_index(&first.state, &id);
    make_blob_unreadable(&first.state, &id);
    drop(first);

    let restarted = server_on(dir.path());
    let stored = answers(&restarted, &id).await;
    let loaded = cached(&restarted, &id).await;
    if loaded.snapshot.device_traces.iter().any(|t| !t.is_empty()) {
        // The cache's budget counts heap only: mapped columns are the OS's pages.
        assert!(loaded.approx_bytes() < fresh_heap, "{name}: heap counted");
    }
    assert_eq!(fresh.len(), stored.len());
    for ((path, fresh), (_, stored)) in fresh.iter().zip(&stored) {
        assert!(path.ends_with("200 OK"), "{name}: {path}: {fresh}");
        assert_eq!(
            fresh, stored,
            "{name}: {path} differs when read from the index"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_answers_the_same_from_its_index_after_a_restart_without_its_pickle() {
    for name in common::small_names() {
        let bytes = std::fs::read(common::path_of(&name)).expect("fixture");
        restart_answers_as_fresh_read(&name, bytes).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_answer_the_same_from_their_index_when_present() {
    for (name, path) in common::large_names() {
        restart_answers_as_fresh_read(&name, std::fs::read(path).expect("large file")).await;
    }
}

/// Damages the index of `id` in one way.
fn damage(index: &Path, how: &str) {
    let mut bytes = std::fs::read(index).expect("index");
    match how {
        // The blob's size, in the header.
        "header" => bytes[20] ^= 1,
        // The last byte: the end of the last column (checked when opened after a rebuild).
        "column" => *bytes.last_mut().expect("bytes") ^= 1,
        // Past the header and section table: the JSON section comes first.
        "small section" => {
            let sections = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
            let meta = 64 + sections as usize * 32;
            let at = meta.next_multiple_of(64) + 10;
            bytes[at] ^= 1;
        }
        "truncated" => bytes.truncate(bytes.len() - 1000),
        // An older format version (the header's checksum then fails too; either refuses it).
        "older version" => bytes[8..12].copy_from_slice(&0u32.to_le_bytes()),
        _ => unreachable!("{how}"),
    }
    std::fs::write(index, bytes).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_index_is_never_trusted_and_is_rebuilt_from_the_pickle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = server_on(dir.path());
    let id = first.upload_fixture("oom", "").await;
    let fresh = answers(&first, &id).await;
    wait_for_valid_index(&first.state, &id);
    let (_, index) = paths(&first.state, &id);
    let good = std::fs::read(&index).expect("index");
    drop(first);
    for how in ["header", "small section", "truncated", "older version"] {
        damage(&index, how);
        let restarted = server_on(dir.path());
        assert_eq!(answers(&restarted, &id).await, fresh, "{how}: answers");
        wait_for_valid_index(&restarted.state, &id);
        assert_eq!(
            std::fs::read(&index).expect("index"),
            good,
            "{how}: rebuilt"
        );
    }
    // A damaged column is caught by its checksum (the server checks the structure only when
    // it loads, see `stored_index::VERIFY_ON_LOAD`; `Verify::Everything` reads every byte).
    damage(&index, "column");
    let identity = BlobIdentity {
        id: &id,
        bytes: std::fs::metadata(paths(&server_on(dir.path()).state, &id).0)
            .expect("blob")
            .len(),
    };
    // SAFETY: nothing changes the file while it is open here (the result is dropped at once).
    let refused =
        unsafe { snapview::index::open(&index, identity, Verify::Everything) }.map(|_| ());
    assert!(
        matches!(refused, Err(snapview::index::IndexError::Checksum(_))),
        "{refused:?}"
    );
    // The server opens it (the structure is sound) and answers at once; its background check
    // then reads every column, deletes the index and drops the snapshot from the cache, so the
    // next answers come from the pickle and a sound index is written again.
    let restarted = server_on(dir.path());
    let _from_the_damaged_index = answers(&restarted, &id).await;
    let started = Instant::now();
    while index.exists() && std::fs::read(&index).expect("index") != good {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the damaged column was not found by the background check"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        answers(&restarted, &id).await,
        fresh,
        "answers after the check"
    );
    wait_for_valid_index(&restarted.state, &id);
    assert_eq!(std::fs::read(&index).expect("index"), good, "rebuilt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_cold_loads_and_writers_end_with_one_valid_index() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = server_on(dir.path());
    let id = first.upload_fixture("gpt2_adamw", "").await;
    let fresh = first.get(&format!("/api/snapshots/{id}")).await;
    wait_for_valid_index(&first.state, &id);
    let (blob, index) = paths(&first.state, &id);
    drop(first);
    std::fs::remove_file(&index).expect("remove the index");

    // Two servers on the same folder, each with several requests for the same cold snapshot.
    let (a, b) = (server_on(dir.path()), server_on(dir.path()));
    let path = format!("/api/snapshots/{id}");
    let answered = futures_util::future::join_all((0..8).map(|i| {
        if i % 2 == 0 {
            a.get(&path)
        } else {
            b.get(&path)
        }
    }))
    .await;
    for answer in answered {
        assert_eq!(answer, fresh);
    }
    wait_for_valid_index(&a.state, &id);

    // Writers racing on one index while a reader opens it: every open sees no file or a whole,
    // valid one, never half of one.
    let typed = SnapshotId::parse(&id).expect("id");
    let loaded = a
        .state
        .cache
        .get_or_load(&typed, 0, a.state.config.roles.fingerprint(), |_: &_| {
            Err("cached".into())
        })
        .await
        .expect("cached");
    let identity_bytes = std::fs::metadata(&blob).expect("blob").len();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let identity = BlobIdentity {
                id: &id,
                bytes: identity_bytes,
            };
            let mut opened = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: the server writes indexes by rename only and this test edits none in place
                // while the opened one lives (it is dropped at once).
                match unsafe { snapview::index::open(&index, identity, Verify::Everything) } {
                    Ok(_) => opened += 1,
                    Err(error) => panic!("a reader saw a broken index: {error}"),
                }
            }
            opened
        });
        let writers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let target = SnapshotId::parse(&id).expect("id");
                    for _ in 0..5 {
                        snapview::server::stored_index::write_now(
                            &target,
                            identity_bytes,
                            &index,
                            &loaded,
                        )
                        .expect("writes");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().expect("writer");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().expect("reader") > 0);
    });
    wait_for_valid_index(&a.state, &id);
    let leftovers: Vec<_> = std::fs::read_dir(index.parent().expect("folder"))
        .expect("folder")
        .filter_map(Result::ok)
        .filter(|e| e.path() != index)
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_a_snapshot_removes_its_index_and_start_up_sweeps_strays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = server_on(dir.path());
    let id = first.upload_fixture("oom", "").await;
    wait_for_valid_index(&first.state, &id);
    let (_, index) = paths(&first.state, &id);
    let stray = index.with_file_name(format!("{}.snapidx", "00000000000000ff"));
    std::fs::copy(&index, &stray).expect("stray");
    drop(first);
    let restarted = server_on(dir.path());
    assert!(index.exists(), "a live snapshot's index stays");
    assert!(!stray.exists(), "an index without its blob goes");
    let id_typed = SnapshotId::parse(&id).expect("id");
    restarted
        .state
        .store
        .delete(&id_typed, None)
        .expect("delete");
    restarted
        .state
        .store
        .purge_trashed_before(i64::MAX, None)
        .expect("purge");
    assert!(!index.exists(), "purged with its snapshot");
    // Where it is published, too (the same file on the folder; the object beside the blobs on
    // the shared backend, where `index` is the local cache's copy).
    assert!(
        !common::backend::index_exists(dir.path(), &id),
        "purged from the store with its snapshot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_summary_made_with_other_role_rules_is_made_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = server_on(dir.path());
    let id = first.upload_fixture("gpt2_adamw", "").await;
    wait_for_valid_index(&first.state, &id);
    let path = format!("/api/snapshots/{id}");
    let before = first.get(&path).await["analysis"]["devices"][0]["roles_at_peak"].clone();
    assert!(before.get("gpt2_model").is_none(), "{before}");
    make_blob_unreadable(&first.state, &id);
    drop(first);

    // The same folder, served with rules that name GPT-2's blocks: the stored summary was made
    // without them, so the summary comes from the mapped replay with them (the pickle is
    // unreadable, so it is not read again).
    let rules = "[[rule]]\nframe = \"modeling_gpt2\\\\.py\"\nrole = \"gpt2_model\"\n";
    let mut config = config_in(dir.path());
    config.roles =
        std::sync::Arc::new(snapview::analysis::roles::UserRules::parse(rules).expect("rules"));
    let ruled = TestServer::on_state(AppState::open(config).expect("open"));
    let after = ruled.get(&path).await["analysis"]["devices"][0]["roles_at_peak"].clone();
    assert!(
        after["gpt2_model"].as_u64().is_some_and(|bytes| bytes > 0),
        "{after}"
    );
}
