//! Two `snapview serve` replicas on one data folder (one SQLite database, one blobs folder: a
//! supported set-up of the same shape as PostgreSQL + object storage): a snapshot uploaded
//! through one is opened by the other from the index the first wrote; rules, renames, deletes
//! and restores made through one are seen by the other at once; one snapshot is parsed by one
//! replica at a time (the parse lease), and a replica killed mid-parse hands the parse over to
//! the other once its lease expires.

use crate::common;

use common::served::{Served, wait_until};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A rule naming every block made under GPT-2's model code with a role of its own (as in
/// tests/server_roles.rs).
const RULES: &str = r#"
[[rule]]
frame = "modeling_gpt2\\.py"
role = "gpt2_model"
"#;

/// The parse lease's time to live in these tests (the test hook, see `server::lease`): long
/// enough that a live holder's renewals (every third of it) keep it on a busy machine, short
/// enough that a dead holder's lease expires within seconds.
const TEST_LEASE_TTL_MS: &str = "5000";

/// A temporary folder for the replicas' logs, and the data folder in it they share.
fn folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    (dir, data)
}

/// Two replicas on `data`, each with a log of its own in `dir`.
fn replicas(dir: &Path, data: &Path) -> (Served, Served) {
    (replica(dir, data, "a"), replica(dir, data, "b"))
}

fn replica(dir: &Path, data: &Path, name: &str) -> Served {
    static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Served::builder()
        .data_dir(data)
        .log(&dir.join(format!("{name}-{start}.log")))
        .env(
            snapview::server::lease::TEST_LEASE_TTL_MS,
            TEST_LEASE_TTL_MS,
        )
        .start()
}

/// An agent for long requests (an upload of the large file parses it before answering).
fn agent(limit: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(limit))
        .build()
        .into()
}

fn upload_file(server: &Served, path: &Path) -> String {
    let bytes = std::fs::read(path).expect("snapshot file");
    let name = path.file_name().expect("name").to_string_lossy();
    let mut response = agent(Duration::from_secs(600))
        .post(server.url(&format!("/api/snapshots?filename={name}")))
        .header("Content-Type", "application/octet-stream")
        .send(&bytes[..])
        .expect("answer");
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    assert!(status == 201 || status == 200, "{status}: {body}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("json");
    view["id"].as_str().expect("id").to_owned()
}

fn upload(server: &Served, fixture: &str) -> String {
    upload_file(server, &common::path_of(fixture))
}

/// `method` with a text body (PUT/DELETE of rules, POST restore), through ureq directly: the
/// helper's `call` knows no PUT.
fn send(server: &Served, method: &str, path: &str, body: &str) -> (u16, String) {
    let agent = agent(Duration::from_secs(60));
    let url = server.url(path);
    let mut response = match method {
        "PUT" => agent
            .put(&url)
            .header("Content-Type", "text/plain")
            .send(body),
        "PATCH" => agent
            .patch(&url)
            .header("Content-Type", "application/json")
            .send(body),
        "POST" => agent.post(&url).send(body),
        "DELETE" => agent.delete(&url).call(),
        other => panic!("no {other} here"),
    }
    .expect("answer");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, text)
}

fn detail(server: &Served, id: &str) -> (u16, serde_json::Value) {
    let (status, body) = server.call("GET", &format!("/api/snapshots/{id}"), None);
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
    (status, json)
}

/// The timeline view of `id` (its status and body): a view that needs the analysis.
fn timeline(server: &Served, id: &str) -> (u16, String) {
    server.call(
        "GET",
        &format!("/api/snapshots/{id}/timeline?width=50"),
        None,
    )
}

fn peak_roles(server: &Served, id: &str) -> serde_json::Value {
    let (status, detail) = detail(server, id);
    assert_eq!(status, 200, "{detail}");
    detail["analysis"]["devices"][0]["roles_at_peak"].clone()
}

fn status(server: &Served, id: &str) -> serde_json::Value {
    let (code, body) = server.call("GET", &format!("/api/snapshots/{id}/status"), None);
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

fn index_file(data: &Path, id: &str) -> PathBuf {
    data.join("indexes")
        .join(format!("{id}{}", snapview::index::FILE_SUFFIX))
}

/// Lines of a replica's log saying it parsed `id` from its stored file.
fn parses_of(server: &Served, id: &str) -> usize {
    count(server, &format!("parsing the stored file id={id}"))
}

fn count(server: &Served, text: &str) -> usize {
    server
        .log_text()
        .lines()
        .filter(|line| line.contains(text))
        .count()
}

/// Uploads `path` through a replica of its own on `data` and leaves it stored with no index
/// and no replica running: the state after a restart of a store whose index was lost.
fn stored_without_index(dir: &Path, data: &Path, path: &Path) -> String {
    let writer = replica(dir, data, "writer");
    let id = upload_file(&writer, path);
    // The index is written after the upload answers; let it finish so none lands later.
    wait_until(
        "the upload's index is written",
        Duration::from_secs(300),
        || index_file(data, &id).exists(),
    );
    drop(writer);
    std::fs::remove_file(index_file(data, &id)).expect("remove the index");
    id
}

#[test]
fn a_snapshot_uploaded_through_one_replica_is_opened_by_the_other_from_its_index() {
    let (dir, data) = folder();
    let (a, b) = replicas(dir.path(), &data);
    let id = upload(&a, "infer_grad");
    let other = upload(&a, "gpt2_adamw");
    wait_until("A writes the index", Duration::from_secs(60), || {
        index_file(&data, &id).exists() && index_file(&data, &other).exists()
    });
    // B lists, views, compares and groups what A stored.
    let listed: Vec<String> = b
        .stored()
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect();
    assert!(
        listed.contains(&id) && listed.contains(&other),
        "{listed:?}"
    );
    let (code, body) = timeline(&b, &id);
    assert_eq!(code, 200, "{body}");
    let (code, body) = b.call("GET", &format!("/api/compare/{id}/{other}"), None);
    assert_eq!(code, 200, "{body}");
    let (code, body) = send(
        &b,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        r#"{"group":"pair"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = a.call("GET", "/api/groups/pair", None);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&id), "A sees the group set through B: {body}");
    // B opened both from A's indexes, and parsed nothing.
    assert_eq!(
        count(&b, &format!("opened from its stored index id={id}")),
        1,
        "{}",
        b.log_text()
    );
    assert_eq!(parses_of(&b, &id), 0, "{}", b.log_text());
    assert_eq!(parses_of(&b, &other), 0, "{}", b.log_text());
}

#[test]
fn rules_renames_deletes_and_restores_through_one_replica_are_seen_by_the_other_at_once() {
    let (dir, data) = folder();
    let (a, b) = replicas(dir.path(), &data);
    let id = upload(&a, "infer_grad");
    // A's cache holds the analysis with the built-in roles.
    assert!(peak_roles(&a, &id).get("gpt2_model").is_none());

    let rules = format!("/api/snapshots/{id}/rules");
    let (code, body) = send(&b, "PUT", &rules, RULES);
    assert_eq!(code, 200, "{body}");
    let roles = peak_roles(&a, &id);
    assert!(
        roles["gpt2_model"].as_u64().unwrap_or(0) > 1 << 30,
        "A answers with the rules set through B: {roles}"
    );
    let (code, body) = send(&b, "DELETE", &rules, "");
    assert_eq!(code, 200, "{body}");
    assert!(
        peak_roles(&a, &id).get("gpt2_model").is_none(),
        "and with the server's again once B removed them"
    );

    let (code, body) = send(
        &b,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        r#"{"name":"renamed through b"}"#,
    );
    assert_eq!(code, 200, "{body}");
    let (code, shown) = detail(&a, &id);
    assert_eq!(code, 200);
    assert_eq!(shown["name"], "renamed through b", "{shown}");

    let (code, body) = send(&b, "DELETE", &format!("/api/snapshots/{id}"), "");
    assert!(code == 200 || code == 204, "{code}: {body}");
    let (code, answer) = detail(&a, &id);
    assert_eq!(
        code, 410,
        "deleted through B: gone through A at once: {answer}"
    );
    assert_eq!(timeline(&a, &id).0, 410, "every view, not only the record");
    assert!(
        a.stored().iter().all(|s| s["id"] != id.as_str()),
        "nor listed"
    );

    let (code, body) = send(&b, "POST", &format!("/api/snapshots/{id}/restore"), "");
    assert_eq!(code, 200, "{body}");
    let (code, answer) = detail(&a, &id);
    assert_eq!(
        code, 200,
        "restored through B: served by A at once: {answer}"
    );
    let (code, body) = timeline(&a, &id);
    assert_eq!(code, 200, "{body}");
}

#[test]
fn two_cold_requests_one_to_each_replica_make_one_parse() {
    let (dir, data) = folder();
    // The largest small fixture: its parse takes long enough for the requests to meet.
    let id = stored_without_index(dir.path(), &data, &common::path_of("compile"));
    let (a, b) = replicas(dir.path(), &data);
    std::thread::scope(|scope| {
        for server in [&a, &b] {
            let id = &id;
            scope.spawn(move || {
                let (code, body) = timeline(server, id);
                assert_eq!(code, 200, "{body}");
            });
        }
    });
    let parses = parses_of(&a, &id) + parses_of(&b, &id);
    assert_eq!(
        parses,
        1,
        "one parse in the two logs:\nA:\n{}\nB:\n{}",
        a.log_text(),
        b.log_text()
    );
    // The other opened the index the parse wrote.
    let opened = count(&a, &format!("opened from its stored index id={id}"))
        + count(&b, &format!("opened from its stored index id={id}"));
    assert_eq!(opened, 1, "A:\n{}\nB:\n{}", a.log_text(), b.log_text());
}

#[test]
fn a_replica_killed_while_it_parses_hands_the_snapshot_over_once_its_lease_expires() {
    let Some(large) = common::large_file("gpt2_huge_trace") else {
        eprintln!("skipped: gpt2_huge_trace.pickle is not in the large corpus folder");
        return;
    };
    let (dir, data) = folder();
    let id = stored_without_index(dir.path(), &data, &large);
    let (mut a, b) = replicas(dir.path(), &data);

    // A starts the parse (status never waits) and is killed while it reads the file.
    assert_ne!(status(&a, &id)["state"], "ready");
    wait_until("A reads the file", Duration::from_secs(120), || {
        let now = status(&a, &id);
        now["state"] == "reading" && now["read"].as_u64().unwrap_or(0) > 0
    });
    assert_eq!(parses_of(&a, &id), 1, "{}", a.log_text());
    a.child.kill().expect("kill -9 A");
    a.child.wait().expect("A ends");

    // B, asked at once, finds A's lease held: it waits (its status says so), then takes the
    // lease over once it expires, and parses the snapshot itself.
    let mut seen_waiting = false;
    wait_until("B serves the snapshot", Duration::from_secs(300), || {
        let now = status(&b, &id);
        seen_waiting |= now["state"] == "waiting";
        now["state"] == "ready"
    });
    assert!(seen_waiting, "B's status said it waits for another server");
    let (code, body) = timeline(&b, &id);
    assert_eq!(code, 200, "{body}");
    let log = b.log_text();
    assert_eq!(parses_of(&b, &id), 1, "B parsed it, once:\n{log}");
    assert!(
        log.contains("another server is doing this work: waiting for it"),
        "{log}"
    );
    assert!(log.contains("the lease came free"), "{log}");
    wait_until("B writes the index", Duration::from_secs(300), || {
        index_file(&data, &id).exists()
    });
}
