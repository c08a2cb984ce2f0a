//! The real `snapview serve` over real TCP against slow, stalled and malformed clients: a flood
//! of half-sent requests, a body that stops, SIGTERM mid-request, over-limit bodies in each
//! encoding, bad names, odd file names and a server-side failure.

use crate::common;

use common::backend::leftovers;
use common::served::{Served, wait_until};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// Sends `head` then `body` (from a second thread, so that an early answer is read even while
/// the body is refused) and returns what the server answered before closing.
fn exchange(address: &str, head: String, body: Vec<u8>) -> String {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        // The server may answer and close before the body is through; that is the point.
        let _ = writer.write_all(head.as_bytes());
        for piece in body.chunks(16 * 1024) {
            if writer.write_all(piece).is_err() {
                break;
            }
        }
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            // A reset after the answer arrived (the server closed with body unread).
            Err(_) => break,
        }
        if response_is_complete(&answer) {
            break;
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    String::from_utf8_lossy(&answer).into_owned()
}

/// How many of `sockets` have an answer waiting, looked at without reading it (so that a later
/// read still gets all of it).
fn answered(sockets: &[TcpStream]) -> usize {
    sockets
        .iter()
        .filter(|socket| {
            socket.set_nonblocking(true).expect("non-blocking");
            let waiting = matches!(socket.peek(&mut [0u8; 1]), Ok(n) if n > 0);
            socket.set_nonblocking(false).expect("blocking again");
            waiting
        })
        .count()
}

/// Whether `answer` holds a whole response with a Content-Length body.
fn response_is_complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let length = text[..end]
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
        })
        .unwrap_or(0);
    answer.len() >= end + 4 + length
}

/// What the server answered on `stream` (read until the response is whole, the stream ends or
/// its read timeout passes).
fn read_answer(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !response_is_complete(&answer) {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(common::path_of(name)).expect("fixture")
}

/// Chunked transfer encoding of `bytes`, in 8 KiB chunks.
fn chunked(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in bytes.chunks(8192) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

const BOUNDARY: &str = "snapviewboundary7d2f";

fn multipart(filename: &str, bytes: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

#[test]
fn six_hundred_slow_uploads_do_not_stop_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(
        &data,
        &[
            "--max-uploads",
            "4",
            // Long enough that the checks below run while the slots are still held, even on a
            // loaded 2-core CI machine running other tests at the same time.
            "--body-timeout",
            "8s",
            "--header-timeout",
            "8s",
            // All 700 sockets come from 127.0.0.1: this test is about the server-wide slots,
            // so the per-client ones (tests/server_slots.rs) are off.
            "--max-connections-per-client",
            "0",
            "--max-uploads-per-client",
            "0",
        ],
    );
    // 600 uploads that send their headers and one byte of body (before the fix, each parked
    // one of tokio's 512 blocking threads and the server answered nothing more, SIGTERM
    // included), and 100 connections that send one byte of a request line.
    let mut sockets = Vec::new();
    for i in 0..700 {
        let mut socket = TcpStream::connect(&server.address).expect("connect");
        if i < 600 {
            write!(
                socket,
                "POST /api/snapshots?name=slow{i} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n\x02"
            )
            .expect("partial upload");
        } else {
            socket.write_all(b"G").expect("one byte");
        }
        sockets.push(socket);
    }
    // Every upload slot is now held by a silent body; the rest were refused, each answered at
    // once. Once all of those answers are here, no upload is left to take a slot from the new
    // one below.
    wait_until(
        "every upload but the four holding a slot is refused",
        Duration::from_secs(5),
        || answered(&sockets[..600]) >= 596,
    );

    let started = Instant::now();
    let (status, list) = server.call("GET", "/api/snapshots", None);
    assert_eq!(status, 200, "{list}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a read took {:?} with 600 slow sockets open",
        started.elapsed()
    );
    let (status, page) = server.call("GET", "/", None);
    assert_eq!(status, 200, "{page}");

    // A new upload while the slots are full is told to come back, not made to wait.
    let bytes = fixture("mlp_small");
    let started = Instant::now();
    let (status, headers, body) =
        server.call_with_headers("POST", "/api/snapshots?name=new", Some(&bytes));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status, 503, "{body}");
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    assert!(body.contains("--max-uploads"), "{body}");

    // The silent bodies are dropped after --body-timeout; then uploads go through again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server.call("POST", "/api/snapshots?name=new", Some(&bytes));
        if status == 201 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(Instant::now() < deadline, "uploads never resumed");
        std::thread::sleep(Duration::from_millis(250));
    }
    // The uploads that held the slots were answered 408, all others 503 at once.
    let mut statuses = BTreeMap::new();
    for socket in &mut sockets[..600] {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let answer = read_answer(socket);
        *statuses.entry(status_of(&answer)).or_insert(0) += 1;
    }
    assert_eq!(statuses, BTreeMap::from([(408, 4), (503, 596)]));
    let stored = server.stored();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["name"], "new");
    wait_until("temp files are removed", Duration::from_secs(5), || {
        leftovers(&data).temps.is_empty()
    });
    drop(sockets);
}

#[test]
fn a_stalled_body_is_answered_408_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &["--body-timeout", "1s"]);
    let bytes = fixture("gpt2_adamw");
    for multipart_form in [false, true] {
        let (content_type, body) = if multipart_form {
            (
                format!("multipart/form-data; boundary={BOUNDARY}"),
                multipart("gpt2_adamw.pickle", &bytes),
            )
        } else {
            ("application/octet-stream".to_owned(), bytes.clone())
        };
        let mut stream = TcpStream::connect(&server.address).expect("connect");
        write!(
            stream,
            "POST /api/snapshots HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .expect("head");
        stream.write_all(&body[..body.len() / 2]).expect("half");
        wait_until("the upload starts", Duration::from_secs(5), || {
            !leftovers(&data).is_empty()
        });
        let started = Instant::now();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let answer = read_answer(&mut stream);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"body_timeout\""), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        wait_until(
            "the partial upload is removed",
            Duration::from_secs(5),
            || leftovers(&data).is_empty(),
        );
    }
    assert!(server.stored().is_empty());
    // A PATCH whose body never arrives does not hold its connection either.
    let id = {
        let (status, body) = server.call("POST", "/api/snapshots", Some(&fixture("mlp_small")));
        assert_eq!(status, 201, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let mut stream = TcpStream::connect(&server.address).expect("connect");
    write!(
        stream,
        "PATCH /api/snapshots/{id} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"na"
    )
    .expect("partial patch");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let started = Instant::now();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[test]
fn sigterm_with_half_sent_requests_exits_within_the_grace_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // Timeouts far longer than the test: only the grace period can end these requests.
    let mut server = Served::start(
        &data,
        &[
            "--shutdown-grace",
            "1s",
            "--header-timeout",
            "5m",
            "--body-timeout",
            "5m",
        ],
    );
    let bytes = fixture("gpt2_adamw");
    let mut half_upload = TcpStream::connect(&server.address).expect("connect");
    write!(
        half_upload,
        "POST /api/snapshots HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        bytes.len()
    )
    .expect("head");
    half_upload
        .write_all(&bytes[..bytes.len() / 2])
        .expect("half");
    let mut half_headers = TcpStream::connect(&server.address).expect("connect");
    half_headers
        .write_all(b"GET /api/snapshots HTTP/1.1\r\nHost: localhost\r\n")
        .expect("half headers");
    let idle = TcpStream::connect(&server.address).expect("connect");
    wait_until("the upload starts", Duration::from_secs(5), || {
        !leftovers(&data).is_empty()
    });

    let started = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = started + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 5 s after SIGTERM; log:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}\n{}", server.log_text());
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
    // The interrupted upload is not left behind.
    let left = leftovers(&data);
    assert!(left.is_empty(), "{left:?}");
    drop((half_upload, half_headers, idle));
}

#[test]
fn over_limit_bodies_are_413_in_every_encoding_and_store_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &["--max-upload", "100KB"]);
    let bytes = fixture("gpt2_adamw");
    assert!(bytes.len() > 300_000);
    let form = multipart("gpt2_adamw.pickle", &bytes);
    let form_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let cases = [
        (
            "raw, Content-Length",
            "application/octet-stream",
            false,
            bytes.clone(),
        ),
        (
            "raw, chunked",
            "application/octet-stream",
            true,
            bytes.clone(),
        ),
        (
            "multipart, Content-Length",
            form_type.as_str(),
            false,
            form.clone(),
        ),
        ("multipart, chunked", form_type.as_str(), true, form),
    ];
    for (what, content_type, is_chunked, body) in cases {
        let (framing, body) = if is_chunked {
            ("Transfer-Encoding: chunked".to_owned(), chunked(&body))
        } else {
            (format!("Content-Length: {}", body.len()), body)
        };
        let head = format!(
            "POST /api/snapshots HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n{framing}\r\nConnection: close\r\n\r\n"
        );
        let answer = exchange(&server.address, head, body);
        assert_eq!(status_of(&answer), 413, "{what}: {answer}");
        assert!(answer.contains("\"too_large\""), "{what}: {answer}");
        wait_until(
            "the refused upload is removed",
            Duration::from_secs(5),
            || leftovers(&data).is_empty(),
        );
    }
    assert!(server.stored().is_empty());
}

#[test]
fn names_and_groups_follow_one_rule_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let bytes = fixture("mlp_small");
    let long = "x".repeat(201);
    for query in [
        "?name=",
        "?name=%20%20",
        "?name=a%0Ab",
        "?name=%1B%5B31mred",
        &format!("?name={long}"),
        "?group=job%0D42",
        &format!("?group={long}"),
    ] {
        let (status, body) = server.call("POST", &format!("/api/snapshots{query}"), Some(&bytes));
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains("\"bad_request\""), "{query}: {body}");
    }
    assert!(server.stored().is_empty(), "a refused name stores nothing");

    let (status, body) = server.call(
        "POST",
        "/api/snapshots?name=%20run%2042%20&group=%20job42%20",
        Some(&bytes),
    );
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(created["name"], "run 42");
    assert_eq!(created["group"], "job42");
    let id = created["id"].as_str().expect("id");
    let path = format!("/api/snapshots/{id}");
    for patch in [
        r#"{"name": ""}"#.to_owned(),
        r#"{"name": "a\u0007b"}"#.to_owned(),
        format!(r#"{{"name": "{long}"}}"#),
        r#"{"group": "tab\there"}"#.to_owned(),
        format!(r#"{{"group": "{long}"}}"#),
    ] {
        let (status, body) = server.call("PATCH", &path, Some(patch.as_bytes()));
        assert_eq!(status, 400, "{patch}: {body}");
    }
    let (status, body) = server.call("PATCH", &path, Some(br#"{"name": "  renamed  "}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""name":"renamed""#), "{body}");
    // An empty group takes the snapshot out of its group.
    let (status, body) = server.call("PATCH", &path, Some(br#"{"group": " "}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""group":"""#), "{body}");
}

#[test]
fn downloads_name_unicode_and_quoted_files_safely() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let (status, body) = server.call(
        "POST",
        "/api/snapshots?filename=r%C3%A9sum%C3%A9%20%22best%22%20%E2%82%AC.pickle",
        Some(&fixture("mlp_small")),
    );
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, headers, _) =
        server.call_with_headers("GET", &format!("/api/snapshots/{id}/raw"), None);
    assert_eq!(status, 200);
    let disposition = headers
        .get("content-disposition")
        .expect("content-disposition")
        .to_str()
        .expect("an ASCII header");
    assert_eq!(
        disposition,
        "attachment; filename=\"r_sum_ _best_ _.pickle\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22best%22%20%E2%82%AC.pickle"
    );
}

#[test]
fn a_server_failure_answers_500_without_paths_and_logs_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &[]);
    let (status, body) = server.call("POST", "/api/snapshots", Some(&fixture("mlp_small")));
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // The stored file is damaged behind the server's back (a disk problem, an operator), so
    // reading it fails on the server's side. (A file that is simply missing is 410, repairable
    // by uploading it again: see tests/server_store.rs.)
    drop(server);
    common::backend::overwrite_blob(&data, &id, b"not a snapshot any more");
    // A restart, so the snapshot is read from its file rather than from memory.
    let server = Served::start(&data, &[]);
    let (status, body) = server.call("GET", &format!("/api/snapshots/{id}"), None);
    assert_eq!(status, 500, "{body}");
    let data_dir = data.to_string_lossy();
    assert!(!body.contains(&*data_dir), "a server path in {body}");
    assert!(!body.contains("blobs"), "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["error"]["code"], "internal");
    let message = json["error"]["message"].as_str().expect("message");
    let reference = message
        .strip_prefix("internal error (reference ")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("{message}"));
    // The details are in the log, once, under the same reference.
    wait_until("the failure is logged", Duration::from_secs(5), || {
        server.log_text().contains(reference)
    });
    let log = server.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains(reference), "{log}");
    assert!(lines[0].contains(&id), "the log says which snapshot: {log}");
}

#[test]
fn connections_are_bounded_and_idle_ones_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // The header timeout leaves room for a loaded CI machine between the connects and the check.
    let server = Served::start(&data, &["--max-connections", "3", "--header-timeout", "3s"]);
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(&server.address).expect("connect"))
        .collect();
    // Every slot is held by a connection that says nothing: the next one is told so at once.
    // No wait is needed for the three to count: each `connect` above returned, so each is in the
    // listener's queue ahead of the next, and the server admits connections one at a time in
    // that order (src/server/connections.rs, `serve`). A wait would only risk the three being
    // quiet for QUIET_BEFORE_EVICTABLE (1 s), after which one of them is closed for the next.
    let answer = exchange(
        &server.address,
        "GET /api/snapshots HTTP/1.1\r\nHost: localhost\r\n\r\n".to_owned(),
        Vec::new(),
    );
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(answer.contains("Retry-After: "), "{answer}");
    assert!(answer.contains("--max-connections"), "{answer}");
    // The header timeout closes connections that send nothing, which frees their slots.
    let started = Instant::now();
    for mut socket in idle {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest);
    }
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    // A kept-alive connection left idle after its request is closed the same way.
    let mut kept = TcpStream::connect(&server.address).expect("connect");
    kept.write_all(b"GET /api/snapshots HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("request");
    kept.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let started = Instant::now();
    let mut everything = Vec::new();
    let _ = kept.read_to_end(&mut everything);
    let everything = String::from_utf8_lossy(&everything);
    assert!(everything.starts_with("HTTP/1.1 200"), "{everything}");
    let idle_for = started.elapsed();
    assert!(
        idle_for > Duration::from_secs(1) && idle_for < Duration::from_secs(6),
        "closed after {idle_for:?}"
    );
    let (status, _) = server.call("GET", "/api/snapshots", None);
    assert_eq!(status, 200);
}

#[test]
fn hostile_files_are_refused_in_milliseconds_and_the_server_stays_small() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &["--max-upload", "64MiB"]);
    let (status, kept) = server.call("POST", "/api/snapshots?name=kept", Some(&fixture("oom")));
    assert_eq!(status, 201, "{kept}");
    // Before the fix, each of these grew the server's memory without limit (the shared-value
    // bombs) or to 2.1 GB (the zstd stream of one 2 GB bytes object).
    for name in [
        "hostile/laughs_settings.pickle",
        "hostile/cycle_settings.pickle",
        "hostile/bomb_bytes_2g.pickle.zst",
    ] {
        let bytes = std::fs::read(common::fixtures().join(name)).expect("hostile fixture");
        let started = Instant::now();
        let (status, body) = server.call("POST", "/api/snapshots", Some(&bytes));
        assert_eq!(status, 400, "{name}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{name} took {:?}",
            started.elapsed()
        );
        let json: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(json["error"]["code"], "not_a_snapshot", "{name}: {body}");
    }
    // A block of 2^63 bytes is a valid file: it is stored, and every view of it answers.
    let bytes = std::fs::read(common::fixtures().join("hostile/stats_abort_size_2_63.pickle"))
        .expect("hostile fixture");
    let (status, body) = server.call("POST", "/api/snapshots", Some(&bytes));
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    for view in ["", "/segments", "/flame", "/timeline?width=800", "/events"] {
        let (status, body) = server.call("GET", &format!("/api/snapshots/{id}{view}"), None);
        assert!(status == 200 || status == 400, "{view}: {status} {body}");
    }
    let (status, _) = server.call("GET", &format!("/s/{id}"), None);
    assert_eq!(status, 200);
    let peak = server.peak_rss();
    assert!(peak < 200 << 20, "the server peaked at {} MB", peak >> 20);
    // Nothing stored before was harmed.
    assert_eq!(server.stored().len(), 2);
}

#[test]
fn a_compressed_upload_expands_no_further_than_the_upload_limit() {
    use flate2::write::GzEncoder;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // gpt2_adamw is 659 KiB; gzipped it is well under the limit, but unpacked it is over.
    let server = Served::start(&data, &["--max-upload", "256KiB"]);
    let plain = fixture("gpt2_adamw");
    let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&plain).expect("gzip");
    let packed = encoder.finish().expect("gzip");
    assert!(packed.len() < 256 << 10, "{} bytes packed", packed.len());
    let (status, body) = server.call("POST", "/api/snapshots", Some(&packed));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("decompress") || body.contains("expand"),
        "{body}"
    );
    assert!(server.stored().is_empty());
    // The same file within the limit unpacked is fine.
    let small = fixture("mlp_small");
    let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&small).expect("gzip");
    let (status, body) = server.call(
        "POST",
        "/api/snapshots",
        Some(&encoder.finish().expect("gzip")),
    );
    assert_eq!(status, 201, "{body}");
}

/// Threads of the server that read an upload: its writer, hasher and parser, and the decoding
/// and column threads of a parse (Linux keeps 15 bytes of a thread's name).
fn upload_threads(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| {
            ["snapview-upload", "snapview-decode", "snapview-follow"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
        })
        .collect()
}

/// An upload that announces four times the bytes it sends (the parser maps that much and
/// decodes on every thread as the bytes land) and then stalls is answered 408, and everything
/// that read it stops: no writer, hasher, parser or decoding thread is left waiting for the
/// bytes that will not come, and nothing is kept.
#[test]
fn a_large_upload_cut_short_stops_every_thread_that_read_it() {
    let Some(path) = common::large_file("gpt2_cpp_trace") else {
        return;
    };
    let bytes = std::fs::read(path).expect("large file");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &["--body-timeout", "1s", "--threads", "4"]);
    let pid = server.child.id();
    let mut stream = TcpStream::connect(&server.address).expect("connect");
    write!(
        stream,
        "POST /api/snapshots HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        bytes.len() * 4
    )
    .expect("head");
    stream.write_all(&bytes[..bytes.len() / 2]).expect("half");
    wait_until(
        "regions are decoded as they land",
        Duration::from_secs(20),
        || {
            upload_threads(pid)
                .iter()
                .any(|name| name == "snapview-decode")
        },
    );
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let answer = read_answer(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    wait_until(
        "every thread that read the upload stops",
        Duration::from_secs(5),
        || upload_threads(pid).is_empty(),
    );
    wait_until(
        "the partial upload is removed",
        Duration::from_secs(5),
        || leftovers(&data).is_empty(),
    );
    assert!(server.stored().is_empty());
}

/// A large upload that turns into code a third of the way in is refused at that opcode while
/// the rest is still on its way: decoded on every thread as it lands, it is not read to its end
/// first. Its threads stop and nothing is kept.
#[test]
fn a_large_upload_is_refused_at_its_first_bad_opcode_before_its_end() {
    let Some(path) = common::large_file("gpt2_cpp_trace") else {
        return;
    };
    let mut bytes = std::fs::read(path).expect("large file");
    // A trace entry's start (EMPTY_DICT, MEMOIZE, MARK) a third of the way in, made a GLOBAL.
    let bad_at = bytes.len() / 3
        + bytes[bytes.len() / 3..]
            .windows(3)
            .position(|w| w == [b'}', 0x94, b'('])
            .expect("an entry");
    bytes[bad_at] = b'c';
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Served::start(&data, &["--threads", "4"]);
    let pid = server.child.id();
    let mut stream = TcpStream::connect(&server.address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let (sent, bytes) = (sent.clone(), bytes.clone());
        std::thread::spawn(move || {
            let head = format!(
                "POST /api/snapshots HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                bytes.len()
            );
            let _ = writer.write_all(head.as_bytes());
            // Quickly up to a little past the bad opcode, then 64 KiB every 20 ms (the rest
            // would take seconds).
            let quick = bad_at + (1 << 20);
            for piece in bytes.chunks(64 << 10) {
                if writer.write_all(piece).is_err() {
                    return;
                }
                let total = sent.fetch_add(piece.len(), std::sync::atomic::Ordering::SeqCst);
                if total > quick {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        })
    };
    let answer = read_answer(&mut stream);
    let sent_when_answered = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("GLOBAL"), "{answer}");
    assert!(
        sent_when_answered < bytes.len() * 3 / 4,
        "refused only after {sent_when_answered} of {} bytes",
        bytes.len()
    );
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    wait_until(
        "every thread that read the upload stops",
        Duration::from_secs(5),
        || upload_threads(pid).is_empty(),
    );
    wait_until(
        "the refused upload is removed",
        Duration::from_secs(5),
        || leftovers(&data).is_empty(),
    );
    assert!(server.stored().is_empty());
}
