//! Snapshots the server has stored but not parsed (after a restart): `/s/{id}` answers at once
//! with the page that follows the parse, `GET /api/snapshots/{id}/status` says where the parse
//! stands and starts it, every request shares one parse, and a file that does not parse is
//! reported, once, and not parsed again in a loop.

use crate::common;

use common::backend::{index_exists, leftovers};
use common::served::{Served, wait_until};
use std::path::Path;
use std::time::Duration;

fn upload(server: &Served, fixture: &str) -> String {
    let bytes = std::fs::read(common::fixtures().join(fixture)).expect("fixture");
    let (status, body) = server.call(
        "POST",
        &format!("/api/snapshots?filename={fixture}"),
        Some(&bytes),
    );
    assert!(status == 201 || status == 200, "{status} {body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    view["id"].as_str().expect("id").to_owned()
}

fn status(server: &Served, id: &str) -> serde_json::Value {
    let (code, body) = server.call("GET", &format!("/api/snapshots/{id}/status"), None);
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Lines of the server's log that say a load of `id` began.
fn loads_of(server: &Served, id: &str) -> usize {
    server
        .log_text()
        .lines()
        .filter(|line| line.contains(&format!("loading a snapshot id={id}")))
        .count()
}

fn restart(server: Served, data: &Path) -> Served {
    drop(server);
    Served::start(data, &[])
}

#[test]
fn a_cold_snapshot_answers_its_page_at_once_and_loads_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let mlp = upload(&server, "mlp_small.pickle");
    let oom = upload(&server, "oom.pickle");
    // Uploading parsed them: ready at once, and asking starts nothing.
    assert_eq!(status(&server, &mlp)["state"], "ready");
    assert_eq!(loads_of(&server, &mlp), 0);

    let server = restart(server, &data);
    // The page of a cold snapshot does not wait for the parse: it is the page that follows it,
    // with the stored name and size.
    let (code, page) = server.call("GET", &format!("/s/{mlp}"), None);
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("data-load-state="),
        "the loading page: {page}"
    );
    assert!(page.contains("mlp_small.pickle"), "{page}");
    assert!(page.contains("/static/loading."), "its script: {page}");
    assert!(
        !page.contains("id=\"tab-timeline\""),
        "not the full page yet"
    );
    // Views asked for meanwhile wait for the same parse; status answers without waiting.
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let (code, body) = server.call(
                    "GET",
                    &format!("/api/snapshots/{mlp}/timeline?width=50"),
                    None,
                );
                assert_eq!(code, 200, "{body}");
            });
            scope.spawn(|| {
                let state = status(&server, &mlp);
                let known = ["queued", "reading", "analysing", "ready"];
                assert!(known.iter().any(|s| state["state"] == *s), "{state}");
            });
        }
    });
    wait_until("mlp is ready", Duration::from_secs(20), || {
        status(&server, &mlp)["state"] == "ready"
    });
    assert_eq!(
        loads_of(&server, &mlp),
        1,
        "one parse:\n{}",
        server.log_text()
    );
    let (code, page) = server.call("GET", &format!("/s/{mlp}"), None);
    assert_eq!(code, 200);
    assert!(
        page.contains("id=\"tab-timeline\""),
        "the full page once ready"
    );

    // Status alone starts a cold snapshot's load, in the background.
    let first = status(&server, &oom);
    assert_ne!(first["state"], "failed", "{first}");
    wait_until("oom is ready", Duration::from_secs(20), || {
        status(&server, &oom)["state"] == "ready"
    });
    assert_eq!(loads_of(&server, &oom), 1, "{}", server.log_text());

    // Not live: the usual errors, and nothing starts.
    let (code, _) = server.call("GET", "/api/snapshots/00000000000000aa/status", None);
    assert_eq!(code, 404);
    let (code, _) = server.call("GET", "/api/snapshots/nothex/status", None);
    assert_eq!(code, 400);
}

/// Stops `server` and damages the one stored file under `data`, `id`'s, where it is stored (it
/// stays there, so its snapshot is live). Its stored index goes too: written after the upload's
/// answer, it would let the next load open the snapshot without reading the damaged file (the
/// tests that use this failed whenever the index landed before the server stopped).
fn stop_with_the_only_blob_cut_in_half(server: Served, data: &Path, id: &str) {
    wait_until("the stored index", Duration::from_secs(20), || {
        index_exists(data, id)
    });
    drop(server);
    common::backend::remove_index(data, id);
    let left = leftovers(data);
    assert_eq!(left.blobs.len(), 1, "{left:?}");
    let bytes = common::backend::read_blob(data, id);
    common::backend::overwrite_blob(data, id, &bytes[..bytes.len() / 2]);
}

#[test]
fn a_stored_file_that_does_not_parse_is_reported_and_not_parsed_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let id = upload(&server, "mlp_small.pickle");
    // The stored file damaged on disk (it is there, so the snapshot is live).
    stop_with_the_only_blob_cut_in_half(server, &data, &id);
    let server = Served::start(&data, &[]);

    let mut answer = status(&server, &id);
    wait_until("the load fails", Duration::from_secs(20), || {
        answer = status(&server, &id);
        answer["state"] == "failed"
    });
    let error = answer["error"].as_str().expect("error text");
    assert!(error.contains("does not read as a snapshot"), "{error}");
    assert!(
        !error.contains(&*data.to_string_lossy()),
        "no server path: {error}"
    );
    // Asked again (a page polling, views retried): the same answer, no new parse.
    for _ in 0..5 {
        assert_eq!(status(&server, &id), answer);
        let (code, _) = server.call("GET", &format!("/api/snapshots/{id}/flame"), None);
        assert_eq!(code, 500);
    }
    let (code, page) = server.call("GET", &format!("/s/{id}"), None);
    assert_eq!(code, 500);
    assert!(page.contains("could not be opened"), "{page}");
    assert!(
        page.contains("does not read as a snapshot"),
        "the reason: {page}"
    );
    assert_eq!(loads_of(&server, &id), 1, "{}", server.log_text());
}

#[test]
fn a_compare_of_cold_snapshots_answers_at_once_with_their_loads_then_the_comparison() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let mlp = upload(&server, "mlp_small.pickle");
    let oom = upload(&server, "oom.pickle");
    let server = restart(server, &data);

    // Both cold: the page answers without waiting, names both with where each stands, and has
    // started both loads.
    let (code, page) = server.call("GET", &format!("/compare/{mlp}/{oom}"), None);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("id=\"load-card\""), "the loads' card: {page}");
    assert!(page.contains("Opening both snapshots"), "{page}");
    for (id, file) in [(&mlp, "mlp_small.pickle"), (&oom, "oom.pickle")] {
        assert!(
            page.contains(&format!(
                "class=\"load\" data-id=\"{id}\" data-filename=\"{file}\""
            )),
            "{file} listed: {page}"
        );
    }
    assert!(
        page.contains("id=\"compare\""),
        "the comparison's page: {page}"
    );
    assert!(page.contains("/static/compare/main."), "its script: {page}");
    wait_until("both are ready", Duration::from_secs(20), || {
        status(&server, &mlp)["state"] == "ready" && status(&server, &oom)["state"] == "ready"
    });
    assert_eq!(loads_of(&server, &mlp), 1, "{}", server.log_text());
    assert_eq!(loads_of(&server, &oom), 1, "{}", server.log_text());

    // Ready: the comparison alone, and its data answers.
    let (code, page) = server.call("GET", &format!("/compare/{mlp}/{oom}"), None);
    assert_eq!(code, 200, "{page}");
    assert!(
        !page.contains("id=\"load-card\""),
        "no card once ready: {page}"
    );
    let (code, body) = server.call("GET", &format!("/api/compare/{mlp}/{oom}"), None);
    assert_eq!(code, 200, "{body}");

    // One side cold (a restart, then one opened): only that one is listed.
    let server = restart(server, &data);
    let (code, _) = server.call("GET", &format!("/api/snapshots/{mlp}"), None);
    assert_eq!(code, 200);
    let (code, page) = server.call("GET", &format!("/compare/{mlp}/{oom}"), None);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("Opening one of the snapshots"), "{page}");
    assert!(page.contains("<p class=\"load-name\">"), "named: {page}");
    assert!(page.contains(&format!("data-id=\"{oom}\"")), "{page}");
    assert!(
        !page.contains(&format!("class=\"load\" data-id=\"{mlp}\"")),
        "{page}"
    );
    // A snapshot compared with itself is read (and listed) once.
    let server = restart(server, &data);
    let (code, page) = server.call("GET", &format!("/compare/{mlp}/{mlp}"), None);
    assert_eq!(code, 200, "{page}");
    assert_eq!(page.matches("class=\"load\" data-id=").count(), 1, "{page}");
}

#[test]
fn a_compare_with_a_snapshot_that_does_not_parse_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let broken = upload(&server, "mlp_small.pickle");
    // The stored file damaged on disk, before the second upload (so it is the only blob).
    stop_with_the_only_blob_cut_in_half(server, &data, &broken);
    let server = Served::start(&data, &[]);
    let sound = upload(&server, "oom.pickle");

    let (code, page) = server.call("GET", &format!("/compare/{broken}/{sound}"), None);
    assert!(code == 200 || code == 500, "{code} {page}");
    wait_until("the load fails", Duration::from_secs(20), || {
        status(&server, &broken)["state"] == "failed"
    });
    let (code, page) = server.call("GET", &format!("/compare/{broken}/{sound}"), None);
    assert_eq!(code, 500, "{page}");
    assert!(
        page.contains("These snapshots cannot be compared"),
        "{page}"
    );
    assert!(
        page.contains("does not read as a snapshot"),
        "the reason: {page}"
    );
    assert!(
        page.contains("The server could not read mlp_small.pickle"),
        "which one: {page}"
    );
    assert!(
        page.contains("Back to the snapshot list"),
        "a way back: {page}"
    );
    assert!(
        !page.contains(&format!("data-id=\"{sound}\"")),
        "the sound one is ready: {page}"
    );
    assert_eq!(loads_of(&server, &broken), 1, "{}", server.log_text());
}

#[test]
fn a_graceful_shutdown_waits_for_the_stored_index_being_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // The test hook holds each index write until the gate exists (src/server/stored_index.rs).
    let gate = dir.path().join("gate");
    let mut waiting = gate.clone().into_os_string();
    waiting.push(".waiting");
    let waiting = std::path::PathBuf::from(waiting);
    let mut server = Served::builder()
        .data_dir(&data)
        .env(snapview::server::stored_index::TEST_INDEX_WRITE_GATE, &gate)
        .start();
    // Uploading parses it, and its index is written after the answer.
    let id = upload(&server, "mlp_small.pickle");
    wait_until("the index write starts", Duration::from_secs(20), || {
        waiting.exists()
    });
    assert!(!index_exists(&data, &id), "held at the gate");

    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(stopped.success());
    wait_until(
        "the server says it waits for the write",
        Duration::from_secs(20),
        || {
            server
                .log_text()
                .contains("waiting for stored index writes to finish")
        },
    );
    let log = server.log_text();
    assert!(log.contains(&format!("ids={id}")), "names it: {log}");
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "still running while the write is held: {log}"
    );
    std::fs::write(&gate, b"").expect("open the gate");
    let mut exited = None;
    wait_until("the server exits", Duration::from_secs(20), || {
        exited = server.child.try_wait().expect("wait");
        exited.is_some()
    });
    assert!(
        exited.is_some_and(|status| status.success()),
        "{exited:?}\n{}",
        server.log_text()
    );
    assert!(
        index_exists(&data, &id),
        "the index was written before exiting:\n{}",
        server.log_text()
    );
    assert!(
        server.log_text().contains("stored index writes finished"),
        "{}",
        server.log_text()
    );
    // The folder writes an index beside its final name; the cache, in its tmp/.
    let mut temps: Vec<String> = common::served::files_under(&data.join("indexes"))
        .into_iter()
        .filter(|file| file.to_string_lossy().contains(".tmp-"))
        .map(|file| file.display().to_string())
        .collect();
    temps.extend(leftovers(&data).temps);
    assert!(temps.is_empty(), "no temporary file left: {temps:?}");

    // The next start opens the snapshot from that index: it is whole and sound.
    let server = Served::start(&data, &[]);
    wait_until("it is ready", Duration::from_secs(20), || {
        status(&server, &id)["state"] == "ready"
    });
    let log = server.log_text();
    assert!(log.contains("opened from its stored index"), "{log}");
    assert!(!log.contains("the stored index is not used"), "{log}");
}
