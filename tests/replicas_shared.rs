//! Two real `snapview serve` processes (replicas A and B) on different ports over one
//! PostgreSQL database and one S3 prefix, as a team deploys them behind a load balancer
//! (issue 21): what one writes the other sees at once, a file uploaded through both at once is
//! stored once, a replica killed mid-upload or mid-parse leaves nothing half-done and hands its
//! work over, and an outage of object storage or of PostgreSQL is answered 503 and recovered
//! from without restarting snapview.
//!
//! These tests always run on the services of `.ci/services up` (whatever
//! `SNAPVIEW_TEST_BACKEND` says); without its variables they fail, saying to start them. The
//! outage tests start an S3 server or a PostgreSQL of their own, so stopping it harms no other
//! test.

use crate::common;

use common::backend::{BLOBS, DATABASE_URL, SharedBackend, service_var};
use common::served::{Served, wait_until};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test hook (`test-hooks` builds) that shortens the lease on a parse, so a dead holder's
/// lease runs out within a test.
const LEASE_TTL_MS: &str = "SNAPVIEW_TEST_LEASE_TTL_MS";
const SHORT_LEASE_MS: &str = "2000";

/// A replica on `shared`, with a data folder (its cache) of its own, its log at info level.
fn replica(shared: &SharedBackend, extra_env: &[(&str, &str)]) -> Served {
    replica_on(shared, None, extra_env)
}

fn replica_on(
    shared: &SharedBackend,
    data_dir: Option<&Path>,
    extra_env: &[(&str, &str)],
) -> Served {
    let mut options = Served::builder()
        .args(shared.serve_args())
        .env("AWS_ENDPOINT", &shared.endpoint)
        .env("RUST_LOG", "snapview=info")
        .env(LEASE_TTL_MS, SHORT_LEASE_MS)
        .envs(extra_env.iter().copied());
    if let Some(dir) = data_dir {
        options = options.data_dir(dir);
    }
    options.start()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// A real snapshot (`mlp_small`) made unique by trailing bytes after the pickle's STOP (which
/// readers ignore): each call with a new tag is a new snapshot.
fn unique_snapshot(tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(common::path_of("mlp_small")).expect("fixture");
    bytes.extend_from_slice(format!("replicas {tag} {}", std::process::id()).as_bytes());
    bytes
}

/// Uploads `bytes` through `server`: the status and the answer.
fn upload(server: &Served, bytes: &[u8], query: &str) -> (u16, serde_json::Value) {
    let (status, text) = server.call("POST", &format!("/api/snapshots{query}"), Some(bytes));
    (status, serde_json::from_str(&text).unwrap_or_default())
}

fn upload_fixture(server: &Served, name: &str, query: &str) -> String {
    let bytes = std::fs::read(common::path_of(name)).expect("fixture");
    let (status, answer) = upload(server, &bytes, &format!("?filename={name}.pickle{query}"));
    assert_eq!(status, 201, "{answer}");
    answer["id"].as_str().expect("id").to_owned()
}

fn get_json(server: &Served, path: &str) -> serde_json::Value {
    let (status, text) = server.call("GET", path, None);
    assert_eq!(status, 200, "{path} through {}: {text}", server.address);
    json(&text)
}

fn listed_ids(server: &Served) -> Vec<String> {
    let mut ids: Vec<String> = server
        .stored()
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect();
    ids.sort();
    ids
}

/// The harness itself (tests/common/backend.rs) against the real services: a fresh database
/// and prefix of its own, objects written, listed, read and removed, and both gone after drop.
#[test]
fn each_shared_backend_is_fresh_and_removed_after() {
    let admin = SharedBackend::fresh();
    let (database, prefix_url) = {
        let shared = SharedBackend::fresh();
        assert_ne!(shared.database_url, admin.database_url);
        assert_ne!(shared.blobs_url, admin.blobs_url);
        assert_eq!(shared.count_rows("snapshots"), 0, "an empty database");
        shared.execute("CREATE TABLE probe (id text); INSERT INTO probe VALUES ('a'), ('b')");
        assert_eq!(shared.count_rows("probe"), 2);
        assert!(shared.keys("").is_empty(), "an empty prefix");
        shared.write_object("blobs/00000000000000aa.snapshot", b"bytes");
        shared.write_object("uploads/x.json", b"{}");
        assert!(shared.object_exists("blobs/00000000000000aa.snapshot"));
        assert_eq!(shared.read_object("uploads/x.json"), b"{}");
        assert_eq!(
            shared.keys(""),
            ["blobs/00000000000000aa.snapshot", "uploads/x.json"]
        );
        assert_eq!(shared.keys("blobs"), ["blobs/00000000000000aa.snapshot"]);
        assert!(admin.keys("").is_empty(), "prefixes do not overlap");
        shared.remove_object("uploads/x.json");
        assert!(!shared.object_exists("uploads/x.json"));
        let database = shared
            .database_url
            .rsplit('/')
            .next()
            .expect("name")
            .to_owned();
        (database, shared.blobs_url.clone())
    };
    let left = admin.query_texts(&format!(
        "SELECT datname FROM pg_database WHERE datname = '{database}'"
    ));
    assert!(left.is_empty(), "{database} dropped with its backend");
    assert!(
        admin.keys_at(&prefix_url).is_empty(),
        "{prefix_url} emptied with its backend"
    );
}

#[test]
fn upload_through_a_then_view_compare_and_group_through_b() {
    let shared = SharedBackend::fresh();
    let (a, b) = (replica(&shared, &[]), replica(&shared, &[]));
    let mlp = upload_fixture(&a, "mlp_small", "&group=runs");
    let oom = upload_fixture(&a, "oom", "");
    assert_eq!(listed_ids(&b), {
        let mut both = vec![mlp.clone(), oom.clone()];
        both.sort();
        both
    });

    // B never parsed either: it opens them from what A stored (the blob, the index).
    let detail = get_json(&b, &format!("/api/snapshots/{mlp}"));
    assert_eq!(
        detail["summary"]["peak_allocated_bytes"], 84153548u64,
        "MemoryViz's peak for mlp_small: {detail}"
    );
    let (status, page) = b.call("GET", &format!("/s/{mlp}"), None);
    assert_eq!(status, 200, "{page}");
    let (status, headers, _) =
        b.call_with_headers("GET", &format!("/api/snapshots/{oom}/raw"), None);
    assert_eq!(status, 200);
    let length = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let stored = std::fs::metadata(common::path_of("oom"))
        .expect("fixture")
        .len();
    assert_eq!(length, Some(stored), "the stored file, whole: {headers:?}");
    let events = get_json(&b, &format!("/api/snapshots/{mlp}/events?device=0&limit=5"));
    assert!(events.is_object(), "{events}");
    let comparison = get_json(&b, &format!("/api/compare/{mlp}/{oom}"));
    assert!(comparison.is_object(), "{comparison}");
    let (status, page) = b.call("GET", &format!("/compare/{mlp}/{oom}"), None);
    assert_eq!(status, 200, "{page}");

    // Grouping through B: the group A's upload made, and one B's edit makes.
    let group = get_json(&b, "/api/groups/runs");
    assert_eq!(
        group["members"].as_array().expect("members").len(),
        1,
        "{group}"
    );
    let (status, text) = b.call(
        "PATCH",
        &format!("/api/snapshots/{oom}"),
        Some(br#"{"group": "runs"}"#),
    );
    assert_eq!(status, 200, "{text}");
    for server in [&a, &b] {
        let group = get_json(server, "/api/groups/runs");
        assert_eq!(
            group["members"].as_array().expect("members").len(),
            2,
            "through {}: {group}",
            server.address
        );
    }
    let (status, page) = b.call("GET", "/g/runs", None);
    assert_eq!(status, 200, "{page}");
}

#[test]
fn rename_rules_delete_and_restore_through_b_are_seen_at_once_through_a() {
    let shared = SharedBackend::fresh();
    let (a, b) = (replica(&shared, &[]), replica(&shared, &[]));
    let id = upload_fixture(&a, "gpt2_adamw", "&name=before");
    let path = format!("/api/snapshots/{id}");
    // A has it in memory and has answered from it: what follows must not be answered stale.
    let before = get_json(&a, &path);
    assert_eq!(before["name"], "before");
    assert!(
        before["analysis"]["devices"][0]["roles_at_peak"]
            .get("gpt2_model")
            .is_none(),
        "{}",
        before["analysis"]["devices"][0]["roles_at_peak"]
    );

    let (status, text) = b.call("PATCH", &path, Some(br#"{"name": "after"}"#));
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        get_json(&a, &path)["name"],
        "after",
        "the rename, through A"
    );
    let listed = a.stored();
    assert_eq!(listed[0]["name"], "after", "A's list: {listed:?}");

    let rules = "[[rule]]\nframe = \"modeling_gpt2\\\\.py\"\nrole = \"gpt2_model\"\n";
    let (status, text) = b.call("PUT", &format!("{path}/rules"), Some(rules.as_bytes()));
    assert_eq!(status, 200, "{text}");
    let (status, stored_rules) = a.call("GET", &format!("{path}/rules"), None);
    assert_eq!(status, 200);
    assert_eq!(stored_rules, rules, "the rules, through A");
    let roles = get_json(&a, &path)["analysis"]["devices"][0]["roles_at_peak"].clone();
    assert!(
        roles["gpt2_model"].as_u64().is_some_and(|bytes| bytes > 0),
        "A answers with B's rules: {roles}"
    );

    let (status, text) = b.call("DELETE", &path, None);
    assert_eq!(status, 204, "{text}");
    for gone in [path.clone(), format!("{path}/raw"), format!("/s/{id}")] {
        let (status, text) = a.call("GET", &gone, None);
        assert_eq!(status, 410, "deleted through B, through A: {gone}: {text}");
    }
    assert!(listed_ids(&a).is_empty());

    let (status, text) = b.call("POST", &format!("{path}/restore"), None);
    assert_eq!(status, 200, "{text}");
    let restored = get_json(&a, &path);
    assert_eq!(restored["name"], "after", "restored through B, through A");
    assert_eq!(listed_ids(&a), [id.as_str()]);
    let actions: Vec<String> = get_json(&a, "/api/audit")["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["action"].as_str().expect("action").to_owned())
        .collect();
    assert_eq!(
        actions,
        ["restore", "delete", "set_roles", "rename", "upload"],
        "one audit log for both replicas"
    );
}

#[test]
fn the_same_file_uploaded_through_both_at_once_is_stored_once() {
    let shared = SharedBackend::fresh();
    let (a, b) = (replica(&shared, &[]), replica(&shared, &[]));
    const ROUNDS: usize = 5;
    const EACH: usize = 3;
    for round in 0..ROUNDS {
        let bytes = unique_snapshot(&format!("both-{round}"));
        let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..EACH * 2)
                .map(|n| {
                    let server = if n % 2 == 0 { &a } else { &b };
                    let bytes = &bytes;
                    scope.spawn(move || upload(server, bytes, "?name=same"))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("thread"))
                .collect()
        });
        for (status, answer) in &answers {
            assert!(
                *status == 200 || *status == 201,
                "round {round}: {status} {answer}"
            );
        }
        let created = answers.iter().filter(|(status, _)| *status == 201).count();
        assert_eq!(created, 1, "round {round}: one stores, the others find it");
        let ids: std::collections::BTreeSet<&str> = answers
            .iter()
            .map(|(_, answer)| answer["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
    }
    assert_eq!(shared.count_rows("snapshots"), ROUNDS, "one row per file");
    assert_eq!(
        shared.keys("blobs").len(),
        ROUNDS,
        "one object per file: {:?}",
        shared.keys("")
    );
    assert!(shared.keys("uploads").is_empty(), "{:?}", shared.keys(""));
    assert_eq!(listed_ids(&a), listed_ids(&b));
    assert_eq!(listed_ids(&a).len(), ROUNDS);
}

#[test]
fn a_replica_killed_mid_upload_leaves_nothing_after_its_start_up_sweep() {
    let shared = SharedBackend::fresh();
    let root = tempfile::tempdir().expect("tempdir");
    let a_data = root.path().join("a");
    let mut a = replica_on(&shared, Some(&a_data), &[]);
    let b = replica(&shared, &[]);
    // 64 MiB announced, 24 MiB sent in pieces with pauses, then A is killed with the rest
    // unsent. An upload is received into A's local cache (`cache/tmp`) while it is parsed, and
    // goes to object storage only once whole and parsed, so this is the kill that leaves
    // something behind: a local temporary file. (A kill during the multipart upload to object
    // storage, which leaves unfinished parts, is the object backend's sweep test.)
    const ANNOUNCED: usize = 64 << 20;
    const SENT: usize = 24 << 20;
    let mut body = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    body.resize(ANNOUNCED, b'x');
    let mut stream = std::net::TcpStream::connect(&a.address).expect("connect");
    write!(
        stream,
        "POST /api/snapshots?name=interrupted HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {ANNOUNCED}\r\n\r\n"
    )
    .expect("head");
    for piece in body[..SENT].chunks(1 << 20) {
        stream.write_all(piece).expect("a piece of the body");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until(
        "the upload is in flight (a temporary file in A's cache)",
        Duration::from_secs(30),
        || !common::served::files_under(&a_data.join("cache").join("tmp")).is_empty(),
    );
    a.child.kill().expect("kill -9 A");
    a.child.wait().expect("reap A");
    drop(stream);

    // Nothing of it is visible, through B or in the database.
    assert!(listed_ids(&b).is_empty());
    assert_eq!(shared.count_rows("snapshots"), 0, "no row");
    assert!(shared.keys("blobs").is_empty(), "{:?}", shared.keys(""));

    // A again, on its folder: its sweep at start removes what the killed upload left. Started
    // after the short lease has run out, so a sweep that spares the uploads of live replicas
    // (by their lease) knows this one's holder is gone.
    std::thread::sleep(Duration::from_millis(
        SHORT_LEASE_MS.parse::<u64>().expect("ms") + 500,
    ));
    let a = replica_on(&shared, Some(&a_data), &[]);
    wait_until(
        "A's start-up sweep removes the interrupted upload",
        Duration::from_secs(30),
        || shared.keys("").is_empty(),
    );
    assert_eq!(shared.count_rows("snapshots"), 0, "no row");
    assert!(listed_ids(&a).is_empty() && listed_ids(&b).is_empty());
    let left = common::backend::leftovers(&a_data);
    assert!(left.temps.is_empty(), "A's local temp files: {left:?}");
    // And both still store.
    let (status, answer) = upload(&b, &unique_snapshot("after the kill"), "");
    assert_eq!(status, 201, "{answer}");
}

#[test]
fn a_replica_killed_while_parsing_hands_its_lease_to_the_other() {
    let Some(large) = common::large_file("gpt2_huge_trace") else {
        eprintln!(
            "gpt2_huge_trace.pickle is not in {}: skipped",
            common::large_dir().display()
        );
        return;
    };
    let shared = SharedBackend::fresh();
    // Stored through a first replica, whose index is then removed: the next view must parse.
    let id = {
        let first = replica(&shared, &[]);
        let bytes = std::fs::read(&large).expect("large file");
        let (status, text) = first.call_within(
            "POST",
            "/api/snapshots?filename=gpt2_huge_trace.pickle",
            Some(&bytes),
            Duration::from_secs(600),
        );
        assert_eq!(status, 201, "{text}");
        let id = json(&text)["id"].as_str().expect("id").to_owned();
        wait_until("the index is published", Duration::from_secs(300), || {
            shared.object_exists(&format!("indexes/{id}.snapidx"))
        });
        id
    };
    shared.remove_object(&format!("indexes/{id}.snapidx"));

    // A and B, both with empty caches. A is asked first, takes the lease and parses; it is
    // killed while it does.
    let mut a = replica(&shared, &[]);
    let b = replica(&shared, &[]);
    let path = format!("/api/snapshots/{id}");
    let a_url = a.url(&path);
    let asking_a = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(600)))
            .build()
            .into();
        // A dies before answering: the error is expected.
        let _ = agent.get(&a_url).call();
    });
    wait_until(
        "A starts loading the snapshot",
        Duration::from_secs(120),
        || {
            a.log_text()
                .contains(&format!("loading a snapshot id={id}"))
        },
    );
    a.child.kill().expect("kill -9 A");
    a.child.wait().expect("reap A");
    let _ = asking_a.join();

    let started = Instant::now();
    let (status, text) = b.call_within("GET", &path, None, Duration::from_secs(600));
    assert_eq!(
        status,
        200,
        "B serves it after A's lease ran out: {text}\n{}",
        b.log_text()
    );
    let detail = json(&text);
    assert!(
        detail["summary"]["peak_allocated_bytes"]
            .as_u64()
            .is_some_and(|peak| peak > 0),
        "{detail}"
    );
    eprintln!(
        "B answered {:.1} s after A was killed mid-parse",
        started.elapsed().as_secs_f64()
    );
    assert!(
        b.log_text()
            .contains(&format!("loading a snapshot id={id}")),
        "B parsed it itself: {}",
        b.log_text()
    );
    wait_until(
        "B publishes the index A never finished",
        Duration::from_secs(300),
        || shared.object_exists(&format!("indexes/{id}.snapidx")),
    );
}

/// A port nobody listens on now (the system's pick, released at once: a race with other tests
/// is possible but harmless, since a taken port fails the start loudly).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

/// An S3 server of this test's own (`s3s-fs`, as `.ci/services` runs it), so stopping it
/// harms no other test. Killed on drop.
struct OwnS3 {
    child: Option<Child>,
    port: u16,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl OwnS3 {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("s3");
        // The bucket of SNAPVIEW_TEST_BLOBS is a folder of s3s-fs's root.
        let blobs = service_var(BLOBS);
        let bucket = blobs
            .trim_start_matches("s3://")
            .split('/')
            .next()
            .expect("bucket")
            .to_owned();
        std::fs::create_dir_all(root.join(bucket)).expect("bucket folder");
        let mut s3 = Self {
            child: None,
            port: free_port(),
            root,
            _dir: dir,
        };
        s3.resume();
        s3
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and folder, and waits until it accepts connections.
    fn resume(&mut self) {
        let child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", &service_var("AWS_ACCESS_KEY_ID")])
            .args(["--secret-key", &service_var("AWS_SECRET_ACCESS_KEY")])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("s3s-fs (built by `.ci/services up`, on PATH) does not start: {e}")
            });
        self.child = Some(child);
        let address = format!("127.0.0.1:{}", self.port);
        wait_until("s3s-fs listens", Duration::from_secs(20), || {
            std::net::TcpStream::connect(&address).is_ok()
        });
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnS3 {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long a request during an outage may take to be answered: the store's own retries must
/// give up well within it.
const OUTAGE_ANSWER_LIMIT: Duration = Duration::from_secs(60);

#[test]
fn object_storage_down_answers_503_and_both_replicas_recover() {
    let mut s3 = OwnS3::start();
    let shared = SharedBackend::fresh_on(
        &service_var(DATABASE_URL),
        &service_var(BLOBS),
        &s3.endpoint(),
    );
    let (a, b) = (replica(&shared, &[]), replica(&shared, &[]));
    // Stored through A (which has it cached); B has never read it.
    let id = upload_fixture(&a, "oom", "");
    for server in [&a, &b] {
        let (status, text) = server.call("GET", "/readyz", None);
        assert_eq!(status, 200, "ready before the outage: {text}");
    }

    s3.stop();
    let (status, text) = b.call_within(
        "GET",
        &format!("/api/snapshots/{id}"),
        None,
        OUTAGE_ANSWER_LIMIT,
    );
    assert_eq!(status, 503, "a read of an uncached snapshot: {text}");
    assert!(
        text.to_lowercase().contains("object storage"),
        "the message says what is down: {text}"
    );
    let (status, text) = a.call_within(
        "POST",
        "/api/snapshots?name=during",
        Some(&unique_snapshot("during the outage")),
        OUTAGE_ANSWER_LIMIT,
    );
    assert_eq!(status, 503, "an upload: {text}");
    assert!(text.to_lowercase().contains("object storage"), "{text}");
    for server in [&a, &b] {
        let (status, text) = server.call_within("GET", "/readyz", None, OUTAGE_ANSWER_LIMIT);
        assert_eq!(status, 503, "not ready: {text}");
        assert!(
            text.to_lowercase().contains("object storage"),
            "/readyz names object storage: {text}"
        );
        let (status, text) = server.call("GET", "/healthz", None);
        assert_eq!(status, 200, "alive all the same: {text}");
    }

    s3.resume();
    for server in [&a, &b] {
        wait_until("ready again", Duration::from_secs(60), || {
            server.call("GET", "/readyz", None).0 == 200
        });
    }
    let detail = get_json(&b, &format!("/api/snapshots/{id}"));
    assert_eq!(detail["id"], id.as_str());
    let (status, answer) = upload(&a, &unique_snapshot("after the outage"), "");
    assert_eq!(status, 201, "{answer}");
    assert_eq!(listed_ids(&a).len(), 2);
    assert!(shared.keys("uploads").is_empty(), "{:?}", shared.keys(""));
}

/// A PostgreSQL of this test's own (Debian's 15, as `.ci/services` runs it), so restarting it
/// harms no other test. Stopped and removed on drop.
struct OwnPostgres {
    folder: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// `program` of PostgreSQL's, as the `postgres` user when this is root (PostgreSQL refuses
/// to run as root).
fn pg_command(program: &str) -> Command {
    let program = format!("{PG_BIN}/{program}");
    assert!(
        Path::new(&program).exists(),
        "{program} is missing: `.ci/services up` installs Debian's postgresql"
    );
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--", &program]);
        command
    } else {
        Command::new(program)
    }
}

/// Whether this process runs as root (from /proc, without unsafe code).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next().map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

fn run_ok(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl OwnPostgres {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("pg");
        std::fs::create_dir_all(&folder).expect("pg folder");
        if is_root() {
            run_ok(
                Command::new("chown")
                    .args(["-R", "postgres:"])
                    .arg(dir.path()),
                "chown to postgres",
            );
        }
        run_ok(
            pg_command("initdb")
                .arg("-D")
                .arg(&folder)
                .args(["-U", "snapview", "--auth=trust"]),
            "initdb",
        );
        let postgres = Self {
            folder,
            port: free_port(),
            _dir: dir,
        };
        run_ok(
            pg_command("pg_ctl")
                .arg("-D")
                .arg(&postgres.folder)
                .arg("-l")
                .arg(postgres.folder.join("log"))
                .args(["-w", "-o"])
                .arg(format!(
                    "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100",
                    postgres.port,
                    postgres.folder.display()
                ))
                .arg("start"),
            "pg_ctl start",
        );
        postgres
    }

    fn admin_url(&self) -> String {
        format!("postgres://snapview@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl restart`: every connection is dropped, and the server is back when it returns.
    fn restart(&self) {
        run_ok(
            // `-l`: the new server's output goes to its log, not to this test's pipes, which
            // `output()` would otherwise wait on for as long as the server runs.
            pg_command("pg_ctl")
                .arg("-D")
                .arg(&self.folder)
                .arg("-l")
                .arg(self.folder.join("log"))
                .args(["-m", "fast", "-w", "restart"]),
            "pg_ctl restart",
        );
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = pg_command("pg_ctl")
            .arg("-D")
            .arg(&self.folder)
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

#[test]
fn a_postgres_restart_is_survived_without_restarting_snapview() {
    let postgres = OwnPostgres::start();
    let shared = SharedBackend::fresh_on(
        &postgres.admin_url(),
        &service_var(BLOBS),
        &service_var("AWS_ENDPOINT"),
    );
    let (a, b) = (replica(&shared, &[]), replica(&shared, &[]));
    let id = upload_fixture(&a, "mlp_small", "&name=before");
    assert_eq!(listed_ids(&b), [id.as_str()]);

    // Requests keep arriving while PostgreSQL restarts: during the outage they may be refused
    // with 503 (never anything else); after it, every one must succeed.
    let restarting = std::sync::atomic::AtomicBool::new(true);
    let during: Vec<(u16, String)> = std::thread::scope(|scope| {
        let asking = scope.spawn(|| {
            let mut answers = Vec::new();
            while restarting.load(std::sync::atomic::Ordering::Relaxed) {
                for server in [&a, &b] {
                    answers.push(server.call_within(
                        "GET",
                        "/api/snapshots",
                        None,
                        OUTAGE_ANSWER_LIMIT,
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            answers
        });
        postgres.restart();
        restarting.store(false, std::sync::atomic::Ordering::Relaxed);
        asking.join().expect("asking thread")
    });
    let refused = during.iter().filter(|(status, _)| *status == 503).count();
    for (status, text) in &during {
        assert!(
            *status == 200 || *status == 503,
            "during the restart only 200 or 503: {status} {text}"
        );
    }
    eprintln!(
        "during the restart: {} answers, {refused} of them 503",
        during.len()
    );

    // After: reads and writes through both, at once, with no restart of either replica.
    for server in [&a, &b] {
        assert_eq!(
            listed_ids(server),
            [id.as_str()],
            "through {}",
            server.address
        );
        let (status, text) = server.call("GET", "/readyz", None);
        assert_eq!(status, 200, "{text}");
    }
    let (status, text) = b.call(
        "PATCH",
        &format!("/api/snapshots/{id}"),
        Some(br#"{"name": "after"}"#),
    );
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        get_json(&a, &format!("/api/snapshots/{id}"))["name"],
        "after"
    );
    let (status, answer) = upload(&a, &unique_snapshot("after the restart"), "");
    assert_eq!(status, 201, "{answer}");
    assert_eq!(listed_ids(&b).len(), 2);
}
