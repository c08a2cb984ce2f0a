//! The real server binary over real TCP: upload, read back, restart, disconnects.

use crate::common;

use common::served::blobs_and_temps;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The shared server starter, with this file's one call.
struct Served {
    /// Held for its drop, which stops the server.
    _server: common::served::Served,
    url: String,
}

impl Served {
    fn start(data_dir: &Path) -> Self {
        // The log is not read here, and a file next to a temporary data folder would outlive it.
        let server = common::served::Served::builder()
            .data_dir(data_dir)
            .log(Path::new("/dev/null"))
            .start();
        let url = server.url("");
        Self {
            _server: server,
            url,
        }
    }

    fn get(&self, path: &str) -> (u16, String) {
        let mut response = ureq::get(&format!("{}{path}", self.url))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .expect("GET");
        let status = response.status().as_u16();
        (status, response.body_mut().read_to_string().expect("body"))
    }
}

#[test]
fn upload_over_tcp_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(common::path_of("mlp_small")).expect("fixture");
    let id = {
        let server = Served::start(dir.path());
        let mut response = ureq::post(&format!(
            "{}/api/snapshots?filename=mlp_small.pickle",
            server.url
        ))
        .header("Content-Type", "application/octet-stream")
        .send(&bytes[..])
        .expect("upload");
        assert_eq!(response.status().as_u16(), 201);
        let created: serde_json::Value =
            serde_json::from_str(&response.body_mut().read_to_string().expect("body"))
                .expect("json");
        let id = created["id"].as_str().expect("id").to_owned();
        assert_eq!(created["url"], format!("{}/s/{id}", server.url));
        let (status, page) = server.get(&format!("/s/{id}"));
        assert_eq!(status, 200);
        assert!(page.contains("mlp_small"));
        let (status, json) = server.get(&format!("/api/snapshots/{id}"));
        assert_eq!(status, 200);
        assert!(json.contains("84153548"), "MemoryViz's peak for mlp_small");
        id
    };
    // A new process on the same data dir: the snapshot is still there, parsed again on demand.
    let server = Served::start(dir.path());
    let (status, list) = server.get("/api/snapshots");
    assert_eq!(status, 200);
    assert!(list.contains(&id), "{list}");
    let (status, json) = server.get(&format!("/api/snapshots/{id}"));
    assert_eq!(status, 200);
    assert!(json.contains("84153548"));
    let (status, page) = server.get(&format!("/s/{id}"));
    assert_eq!(status, 200);
    assert!(
        page.contains("80.3 MiB"),
        "the peak on the page after a restart"
    );
}

#[test]
fn a_client_that_disconnects_mid_upload_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Served::start(dir.path());
    let bytes = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    let address = server.url.trim_start_matches("http://").to_owned();
    {
        let mut stream = TcpStream::connect(&address).expect("connect");
        write!(
            stream,
            "POST /api/snapshots HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            bytes.len()
        )
        .expect("headers");
        stream
            .write_all(&bytes[..bytes.len() / 3])
            .expect("part of the body");
        stream.flush().expect("flush");
        // The upload is under way: its temporary file exists.
        let deadline = Instant::now() + Duration::from_secs(10);
        while blobs_and_temps(dir.path()).is_empty() {
            assert!(Instant::now() < deadline, "the upload never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Dropped here: the connection closes with two thirds of the body unsent.
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = blobs_and_temps(dir.path());
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partial upload left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, list) = server.get("/api/snapshots");
    assert_eq!(status, 200);
    assert_eq!(list, r#"{"snapshots":[]}"#);

    // The server still works afterwards.
    let mut stream = TcpStream::connect(&address).expect("connect");
    write!(
        stream,
        "GET /api/snapshots HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn diff_works_on_server_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Served::start(dir.path());
    let mut ids = Vec::new();
    for name in ["infer_nograd", "infer_grad"] {
        let upload = Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args([
                "upload",
                &common::path_of(name).to_string_lossy(),
                "--server",
                &server.url,
                "--name",
                name,
            ])
            .output()
            .expect("upload");
        assert!(
            upload.status.success(),
            "{}",
            String::from_utf8_lossy(&upload.stderr)
        );
        let url = String::from_utf8_lossy(&upload.stdout).trim().to_owned();
        assert!(url.starts_with(&format!("{}/s/", server.url)), "{url}");
        ids.push(url.rsplit('/').next().expect("id").to_owned());
    }
    let diff = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args([
            "diff",
            &ids[0],
            &ids[1],
            "--server",
            &server.url,
            "--max-peak-growth",
            "5",
        ])
        .output()
        .expect("diff");
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(text.contains("before: infer_nograd"), "{text}");
    let same = Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args([
            "diff",
            &ids[1],
            &ids[1],
            "--server",
            &server.url,
            "--max-peak-growth",
            "5",
        ])
        .output()
        .expect("diff");
    assert_eq!(same.status.code(), Some(0));
}

/// The shared starter reports a server that exits before serving with its log, at once, rather
/// than waiting out its limit or talking to whatever else listens.
#[test]
fn a_server_that_cannot_start_fails_the_test_with_its_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let failure = std::panic::catch_unwind(|| {
        common::served::Served::start(&dir.path().join("data"), &["--max-upload", "lots"])
    })
    .err()
    .expect("the start fails");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("exited before serving"), "{message}");
    assert!(
        message.contains("lots"),
        "the server's own error: {message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{message}");
}
