//! `POST /api/snapshots/import` and `snapview upload s3://…` against a real `snapview serve`, a
//! real S3 server (s3s-fs, from `.ci/services up`) and a real TLS server on loopback: the import
//! stores what an upload of the same bytes stores, refuses what an upload refuses, and fetches
//! only from s3:// with the server's credentials or from https:// under `--import-allow`.

use crate::common;

use common::served::Served;
use object_store::ObjectStoreExt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The S3 test bucket and a key prefix of this test's own (`SNAPVIEW_TEST_BLOBS` and the AWS_*
/// variables `.ci/services up` prints).
struct Bucket {
    bucket: String,
    prefix: String,
}

fn bucket() -> Bucket {
    for name in [
        "SNAPVIEW_TEST_BLOBS",
        "AWS_ENDPOINT",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(
            std::env::var_os(name).is_some(),
            "{name} is not set: run `eval \"$(bash .ci/services up)\"` first (.ci/services up starts the S3 server these tests need)"
        );
    }
    let blobs = std::env::var("SNAPVIEW_TEST_BLOBS").expect("SNAPVIEW_TEST_BLOBS");
    let rest = blobs
        .strip_prefix("s3://")
        .unwrap_or_else(|| panic!("SNAPVIEW_TEST_BLOBS={blobs} is not s3://bucket/prefix"));
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).expect("random");
    Bucket {
        bucket: bucket.to_owned(),
        prefix: format!(
            "{}/import-{}",
            prefix.trim_end_matches('/'),
            hex::encode(random)
        )
        .trim_start_matches('/')
        .to_owned(),
    }
}

impl Bucket {
    /// Puts `bytes` at `name` under this test's prefix; returns its s3:// URL.
    fn put(&self, name: &str, bytes: Vec<u8>) -> String {
        let key = format!("{}/{name}", self.prefix);
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(&self.bucket)
            .build()
            .expect("object store from the AWS_* variables");
        let path = object_store::path::Path::from(key.as_str());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(store.put(&path, bytes.into()))
            .expect("put the test object");
        format!("s3://{}/{key}", self.bucket)
    }
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(common::fixtures().join(name)).expect("fixture")
}

/// `POST path` with a body and content type; the status and the JSON answer.
fn post(served: &Served, path: &str, content_type: &str, body: &[u8]) -> (u16, serde_json::Value) {
    post_with(served, path, content_type, None, body)
}

/// `POST path` with a body, content type and maybe a Bearer token.
fn post_with(
    served: &Served,
    path: &str,
    content_type: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut request = agent
        .post(served.url(path))
        .header("Content-Type", content_type);
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.send(body).expect("answer");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

fn import(served: &Served, request: serde_json::Value) -> (u16, serde_json::Value) {
    post(
        served,
        "/api/snapshots/import",
        "application/json",
        request.to_string().as_bytes(),
    )
}

fn import_url(served: &Served, url: &str) -> (u16, serde_json::Value) {
    import(served, serde_json::json!({ "url": url }))
}

fn upload(served: &Served, bytes: &[u8]) -> (u16, serde_json::Value) {
    post(
        served,
        "/api/snapshots?filename=x.pickle",
        "application/octet-stream",
        bytes,
    )
}

fn message(answer: &serde_json::Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {answer}"))
        .to_owned()
}

fn code(answer: &serde_json::Value) -> String {
    answer["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Nothing in the store: no snapshot listed, no blob and no temporary file left.
fn assert_nothing_stored(served: &Served) {
    assert!(served.stored().is_empty(), "{:?}", served.stored());
    let left = common::backend::leftovers(&served.data_dir);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn an_s3_object_is_stored_as_its_upload_would_be_and_once() {
    let bucket = bucket();
    let bytes = fixture("mlp_small.pickle");
    let url = bucket.put("runs/mlp_small.pickle", bytes.clone());
    let served = Served::start(&tempfile::tempdir().expect("dir").keep().join("data"), &[]);

    let (status, view) = import(&served, serde_json::json!({ "url": url, "group": "job-7" }));
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_str().expect("id").to_owned();
    assert_eq!(view["name"], "mlp_small", "{view}");
    assert_eq!(view["filename"], "mlp_small.pickle", "{view}");
    assert_eq!(view["group"], "job-7", "{view}");
    assert_eq!(view["size_bytes"], bytes.len(), "{view}");
    // Its pages and views work as an upload's do.
    for path in [
        format!("/api/snapshots/{id}"),
        format!("/api/snapshots/{id}/flame"),
        format!("/api/snapshots/{id}/timeline"),
        format!("/s/{id}"),
    ] {
        let (status, body) = served.call("GET", &path, None);
        assert_eq!(status, 200, "{path}: {body}");
    }
    // The same object again, and the same bytes uploaded: the snapshot stored already.
    let (status, again) = import_url(&served, &url);
    assert_eq!(
        (status, again["id"].as_str()),
        (200, Some(id.as_str())),
        "{again}"
    );
    let (status, uploaded) = upload(&served, &bytes);
    assert_eq!((status, uploaded["id"].as_str()), (200, Some(id.as_str())));
    assert_eq!(served.stored().len(), 1);
    // Audited as an upload is.
    let (status, audit) = served.call("GET", "/api/audit", None);
    assert_eq!(status, 200);
    let audit: serde_json::Value = serde_json::from_str(&audit).expect("json");
    let entries = audit["entries"].as_array().expect("entries");
    assert!(
        entries.iter().any(|e| e["snapshot_id"] == id.as_str()),
        "{audit}"
    );

    // `snapview upload s3://…` asks for the same import and prints its page.
    let other = bucket.put("runs/oom.pickle", fixture("oom.pickle"));
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args([
            "upload",
            &other,
            "--server",
            &served.url(""),
            "--name",
            "from s3",
        ])
        .output()
        .expect("run snapview upload");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.trim().starts_with(&served.url("/s/")), "{stdout}");
    assert!(
        served.stored().iter().any(|s| s["name"] == "from s3"),
        "{:?}",
        served.stored()
    );
    let missing = format!(
        "s3://{}/{}/runs/nothing.pickle",
        bucket.bucket, bucket.prefix
    );
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args(["upload", &missing, "--server", &served.url("")])
        .output()
        .expect("run snapview upload");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("no such object {missing}")),
        "{stderr}"
    );
}

#[test]
fn missing_oversized_and_unreadable_objects_are_refused_and_nothing_is_kept() {
    let bucket = bucket();
    // 40 KB: mlp_small (33 KB) fits, oom.pickle (52 KB) does not.
    let served = Served::start(
        &tempfile::tempdir().expect("dir").keep().join("data"),
        &["--max-upload", "40000"],
    );

    let missing = format!("s3://{}/{}/nothing.pickle", bucket.bucket, bucket.prefix);
    let (status, answer) = import_url(&served, &missing);
    assert_eq!(status, 404, "{answer}");
    assert_eq!(message(&answer), format!("no such object {missing}"));

    let large = bucket.put("oom.pickle", fixture("oom.pickle"));
    let (status, answer) = import_url(&served, &large);
    assert_eq!(
        (status, code(&answer).as_str()),
        (413, "too_large"),
        "{answer}"
    );
    assert!(message(&answer).contains("nothing was fetched"), "{answer}");

    // What an upload refuses, an import refuses the same way: not a snapshot at all, a pickle
    // cut short, and a compressed file that expands past --max-upload.
    let oversized_when_expanded = {
        let pickle = fixture("oom.pickle");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&pickle).expect("gzip");
        encoder.finish().expect("gzip")
    };
    assert!(oversized_when_expanded.len() < 40_000);
    let mut cut_short = fixture("mlp_small.pickle");
    cut_short.truncate(cut_short.len() / 2);
    for (name, bytes) in [
        (
            "notes.txt",
            b"these are not the bytes you are looking for\n".repeat(20),
        ),
        ("cut.pickle", cut_short),
        ("bomb.pickle.gz", oversized_when_expanded),
    ] {
        let url = bucket.put(name, bytes.clone());
        let (status, answer) = import_url(&served, &url);
        let (upload_status, upload_answer) = upload(&served, &bytes);
        assert!((400..500).contains(&status), "{name}: {answer}");
        assert_eq!(
            (status, code(&answer)),
            (upload_status, code(&upload_answer)),
            "{name}: the import answered {answer}, the upload {upload_answer}"
        );
        assert_eq!(message(&answer), message(&upload_answer), "{name}");
    }
    assert_nothing_stored(&served);

    // The request itself is bounded: 16 KiB of JSON.
    let long = format!("s3://{}/{}", bucket.bucket, "a".repeat(17 * 1024));
    let (status, answer) = import_url(&served, &long);
    assert_eq!(status, 413, "{answer}");
}

#[test]
fn only_s3_and_allowed_https_urls_are_fetched() {
    let served = Served::start(&tempfile::tempdir().expect("dir").keep().join("data"), &[]);
    for url in [
        "file:///etc/passwd",
        "http://127.0.0.1:9/x.pickle",
        "ftp://127.0.0.1/x.pickle",
        "/etc/passwd",
        "s3://snapview",
        "s3://snapview/../../etc/passwd",
    ] {
        let (status, answer) = import_url(&served, url);
        assert_eq!(status, 400, "{url}: {answer}");
    }
    let (status, answer) = import_url(&served, "file:///etc/passwd");
    assert!(message(&answer).contains("file://"), "{status} {answer}");
    let (status, answer) = import_url(&served, "https://example.com/x.pickle");
    assert_eq!(status, 403, "{answer}");
    assert!(
        message(&answer).contains("allows no https:// imports"),
        "{answer}"
    );
    // Fields other than url, name and group are refused, not ignored.
    let (status, answer) = import(
        &served,
        serde_json::json!({ "url": "s3://snapview/x", "path": "/etc/passwd" }),
    );
    assert!((400..500).contains(&status), "{answer}");
    assert_nothing_stored(&served);
}

/// A TLS server on loopback for `localhost`, its certificate in a PEM file the snapview server
/// is told to trust (`SSL_CERT_FILE`); it answers each request with `answer(path)` and records
/// the paths asked for.
struct TlsSource {
    port: u16,
    cert_file: PathBuf,
    asked: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// What the TLS source sends: the head, then the body in chunks with a pause after each.
struct Answer {
    head: String,
    chunks: Vec<Vec<u8>>,
    pause: Duration,
}

impl Answer {
    fn ok(body: Vec<u8>) -> Self {
        Self {
            head: format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            ),
            chunks: vec![body],
            pause: Duration::ZERO,
        }
    }

    fn redirect(location: &str) -> Self {
        Self {
            head: format!(
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
            chunks: Vec::new(),
            pause: Duration::ZERO,
        }
    }

    /// No Content-Length: the body runs until the connection closes.
    fn unmeasured(body: Vec<u8>, chunk: usize, pause: Duration) -> Self {
        Self {
            head: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".into(),
            chunks: body.chunks(chunk).map(<[u8]>::to_vec).collect(),
            pause,
        }
    }
}

impl TlsSource {
    fn start(answer: impl Fn(&str, u16) -> Answer + Send + Sync + 'static) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let certified =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        let cert_file = dir.path().join("source.pem");
        std::fs::write(&cert_file, certified.cert.pem()).expect("write the certificate");
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("protocols")
                .with_no_client_auth()
                .with_single_cert(vec![certified.cert.der().clone()], key)
                .expect("server config"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(answer);
        let recorded = asked.clone();
        // Runs until the test process ends; each connection on a thread of its own.
        std::thread::spawn(move || {
            for socket in listener.incoming() {
                let Ok(socket) = socket else { continue };
                let (config, answer, recorded) = (config.clone(), answer.clone(), recorded.clone());
                std::thread::spawn(move || {
                    let Ok(connection) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(connection, socket);
                    let mut reader = BufReader::new(&mut tls);
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).is_err() {
                        return;
                    }
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let path = request_line
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_owned();
                    recorded.lock().expect("lock").push(path.clone());
                    let reply = answer(&path, port);
                    if tls.write_all(reply.head.as_bytes()).is_err() {
                        return;
                    }
                    for chunk in reply.chunks {
                        if tls.write_all(&chunk).and_then(|()| tls.flush()).is_err() {
                            return;
                        }
                        std::thread::sleep(reply.pause);
                    }
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                    let mut rest = Vec::new();
                    let _ = tls.read_to_end(&mut rest);
                });
            }
        });
        Self {
            port,
            cert_file,
            asked,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("lock").clone()
    }

    /// A snapview server that trusts this source's certificate, with `flags`.
    fn serve(&self, data_dir: &Path, flags: &[&str]) -> Served {
        Served::builder()
            .data_dir(data_dir)
            .args(flags)
            .env("SSL_CERT_FILE", &self.cert_file)
            .start()
    }
}

#[test]
fn https_imports_come_only_from_allowed_prefixes_and_within_their_limits() {
    let snapshot = fixture("mlp_small.pickle");
    let larger = fixture("oom.pickle");
    let source = TlsSource::start(
        move |path, port| match path.split('?').next().unwrap_or(path) {
            "/runs/mlp_small.pickle" => Answer::ok(snapshot.clone()),
            "/runs/moved.pickle" => Answer::redirect("/runs/mlp_small.pickle"),
            "/runs/away.pickle" => Answer::redirect(&format!(
                "https://127.0.0.1:{port}/elsewhere/mlp_small.pickle"
            )),
            "/runs/unmeasured.pickle" => Answer::unmeasured(larger.clone(), 4096, Duration::ZERO),
            "/runs/slow.pickle" => {
                Answer::unmeasured(larger.clone(), 256, Duration::from_millis(200))
            }
            _ => Answer {
                head: "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .into(),
                chunks: Vec::new(),
                pause: Duration::ZERO,
            },
        },
    );
    let prefix = source.url("/runs/");
    // mlp_small (33 KB) fits in 40 KB, oom.pickle (52 KB) does not; 3 s for an import.
    let served = source.serve(
        &tempfile::tempdir().expect("dir").keep().join("data"),
        &[
            "--import-allow",
            &prefix,
            "--max-upload",
            "40000",
            "--import-timeout",
            "3s",
        ],
    );

    let (status, view) = import_url(&served, &source.url("/runs/mlp_small.pickle?sig=secret"));
    assert_eq!(status, 201, "{view}");
    assert_eq!(view["name"], "mlp_small");
    // A redirect within the allowed prefix is followed: the same snapshot.
    let (status, again) = import_url(&served, &source.url("/runs/moved.pickle"));
    assert_eq!((status, &again["id"]), (200, &view["id"]), "{again}");

    // A redirect to a host that is not allowed is not followed.
    let (status, answer) = import_url(&served, &source.url("/runs/away.pickle"));
    assert_eq!(status, 403, "{answer}");
    assert!(message(&answer).contains("not followed"), "{answer}");
    assert!(
        !source.asked().iter().any(|p| p.starts_with("/elsewhere")),
        "{:?}",
        source.asked()
    );
    // Nor is a URL outside the prefix, or on a host whose name only starts like it.
    for url in [
        source.url("/other/mlp_small.pickle"),
        format!("https://localhost.evil.net:{}/runs/x.pickle", source.port),
        format!("https://127.0.0.1:{}/runs/mlp_small.pickle", source.port),
        source.url("/runs/../other/x.pickle"),
    ] {
        let (status, answer) = import_url(&served, &url);
        assert_eq!(status, 403, "{url}: {answer}");
    }
    assert!(
        !source.asked().iter().any(|p| p.starts_with("/other")),
        "{:?}",
        source.asked()
    );

    let (status, answer) = import_url(&served, &source.url("/runs/none.pickle"));
    assert_eq!(status, 404, "{answer}");
    assert!(message(&answer).starts_with("no such object"), "{answer}");
    // No query in what is said: a pre-signed URL's signature is a credential.
    assert!(!answer.to_string().contains("secret"));

    // A source that declares no size is held to --max-upload as its bytes arrive.
    let (status, answer) = import_url(&served, &source.url("/runs/unmeasured.pickle"));
    assert_eq!(
        (status, code(&answer).as_str()),
        (413, "too_large"),
        "{answer}"
    );
    // One that keeps sending, slowly, meets --import-timeout.
    let (status, answer) = import_url(&served, &source.url("/runs/slow.pickle"));
    assert_eq!(
        (status, code(&answer).as_str()),
        (504, "source_timeout"),
        "{answer}"
    );
    assert!(message(&answer).contains("--import-timeout"), "{answer}");
    assert_eq!(served.stored().len(), 1, "{:?}", served.stored());
    let left = common::backend::leftovers(&served.data_dir);
    assert!(
        left.blobs.len() == 1 && left.temps.is_empty(),
        "one blob and no temporary file: {left:?}"
    );

    // `snapview upload https://…` asks the server for the same import.
    let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args([
            "upload",
            &source.url("/runs/away.pickle"),
            "--server",
            &served.url(""),
        ])
        .output()
        .expect("run snapview upload");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("not followed"), "{stderr}");
}

#[test]
fn an_import_holds_an_upload_slot_and_is_audited_with_its_writer() {
    let bucket = bucket();
    let url = bucket.put("mlp_small.pickle", fixture("mlp_small.pickle"));
    let slow = fixture("oom.pickle");
    let source = TlsSource::start(move |_, _| {
        Answer::unmeasured(slow.clone(), 1024, Duration::from_millis(100))
    });
    let dir = tempfile::tempdir().expect("dir").keep();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "training-job:import-token-0123456789abcdef\n").expect("tokens");
    let served = Arc::new(source.serve(
        &dir.join("data"),
        &[
            "--import-allow",
            &source.url("/"),
            "--max-uploads",
            "1",
            "--tokens-file",
            tokens.to_str().expect("utf-8"),
        ],
    ));
    let post_with_token = |served: &Served, request: serde_json::Value| {
        post_with(
            served,
            "/api/snapshots/import",
            "application/json",
            Some("import-token-0123456789abcdef"),
            request.to_string().as_bytes(),
        )
    };
    // An import is a write: without the token it is refused before anything is fetched.
    let (status, answer) = import_url(&served, &url);
    assert_eq!(status, 401, "{answer}");

    // The slow source holds the server's one upload slot while its bytes trickle in (5 s).
    let holder = {
        let served = served.clone();
        let slow_url = source.url("/slow.pickle");
        std::thread::spawn(move || post_with_token(&served, serde_json::json!({ "url": slow_url })))
    };
    common::served::wait_until("the slow source is asked", Duration::from_secs(20), || {
        !source.asked().is_empty()
    });
    let (status, answer) = post_with_token(&served, serde_json::json!({ "url": url }));
    assert_eq!((status, code(&answer).as_str()), (503, "busy"), "{answer}");
    let (status, held) = holder.join().expect("the slow import");
    assert_eq!(status, 201, "{held}");

    let (status, view) = post_with_token(&served, serde_json::json!({ "url": url }));
    assert_eq!(status, 201, "{view}");
    let (status, audit) = served.call("GET", "/api/audit", None);
    assert_eq!(status, 200);
    let audit: serde_json::Value = serde_json::from_str(&audit).expect("json");
    let entry = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["snapshot_id"] == view["id"])
        .unwrap_or_else(|| panic!("no audit entry for {view}: {audit}"))
        .clone();
    assert_eq!(
        (entry["action"].as_str(), entry["actor"].as_str()),
        (Some("upload"), Some("training-job")),
        "{entry}"
    );
}
