//! `snapview upload` behind redirects and impostors (issue 18, item 9): the real binary against
//! tiny HTTP servers in the test (std `TcpListener` threads answering one canned response per
//! connection) and a real `snapview serve`. It reports success only when a snapshot was
//! stored: 307/308 are followed with the file sent again, 301/302/303 and answers that name no
//! snapshot fail with a message, and the exit status says so (which the Python package turns
//! into `SnapviewError`).

use crate::common;

use common::served::Served;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request a fake server received: its request line and headers, lowercased names.
#[derive(Debug, Clone)]
struct Received {
    line: String,
    headers: Vec<(String, String)>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request target (`/api/snapshots?…`).
    fn target(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or("/")
    }
}

/// A one-thread HTTP server on a free loopback port answering each connection with
/// `answer(request)` (a whole response, head and body) and closing it; it stops after 20
/// connections or 60 s, whichever comes first.
struct Fake {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Fake {
    fn start(answer: impl Fn(&Received, u16) -> String + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut served = 0;
            while served < 20 && Instant::now() < deadline {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                served += 1;
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let mut lines = text.lines();
                let request = Received {
                    line: lines.next().unwrap_or_default().to_owned(),
                    headers: lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect(),
                };
                let response = answer(&request, port);
                log.lock().expect("log").push(request);
                let _ = stream.write_all(response.as_bytes());
                let _ = stream.flush();
                // The client may still be sending the file; it learns from the close.
                let _ = stream.shutdown(std::net::Shutdown::Write);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self { port, received }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().expect("log").clone()
    }
}

/// A response with `status`, extra header lines and `body`.
fn response(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn redirect(status: &str, location: &str) -> String {
    response(status, &format!("Location: {location}\r\n"), "")
}

/// `snapview upload FIXTURE --server SERVER` (with `token` as SNAPVIEW_TOKEN), waited for 60 s
/// at most.
fn upload(server: &str, token: Option<&str>) -> Output {
    let file = common::path_of("streams");
    let mut command = Command::new(env!("CARGO_BIN_EXE_snapview"));
    command
        .arg("upload")
        .arg(&file)
        .args(["--server", server])
        .env_remove("SNAPVIEW_TOKEN")
        .env_remove("SNAPVIEW_MAX_REDIRECTS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        command.env("SNAPVIEW_TOKEN", token);
    }
    let mut child = command.spawn().expect("run snapview upload");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("snapview upload to {server} ran past 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts the upload failed with a message (not a signal, not an empty success) that holds
/// every one of `words`.
fn assert_failed(output: &Output, words: &[&str]) {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.code().is_some_and(|code| code != 0),
        "exit {:?}, stdout {stdout:?}, stderr {stderr:?}",
        output.status
    );
    assert!(
        stdout.trim().is_empty(),
        "nothing printed as a URL: {stdout:?}"
    );
    for word in words {
        assert!(stderr.contains(word), "{word:?} in {stderr:?}");
    }
}

#[test]
fn redirects_that_drop_the_body_fail_and_name_where_they_point() {
    let real = Served::builder().start();
    for status in ["301 Moved Permanently", "302 Found", "303 See Other"] {
        // Pointing at a real snapview, as an http -> https redirect or a proxy would: followed
        // as a GET, it answers the list, which is no upload.
        let target = real.url("");
        let fake = Fake::start(move |request, _| {
            redirect(status, &format!("{target}{}", request.target()))
        });
        let output = upload(&fake.url(), None);
        let code = &status[..3];
        assert_failed(
            &output,
            &[
                code,
                "Location",
                &real.url("/api/snapshots"),
                "nothing was stored",
            ],
        );
        assert_eq!(fake.received().len(), 1, "{status}: not followed");
    }
    assert!(real.stored().is_empty(), "nothing reached the real server");
}

#[test]
fn answers_that_name_no_snapshot_are_not_success() {
    let cases = [
        ("an empty 200", response("200 OK", "", "")),
        (
            "an HTML 200",
            response(
                "200 OK",
                "Content-Type: text/html\r\n",
                "<html><body>Welcome to nginx!</body></html>",
            ),
        ),
        (
            "JSON without id and url",
            response(
                "200 OK",
                "Content-Type: application/json\r\n",
                r#"{"snapshots": []}"#,
            ),
        ),
        (
            "a 201 with an empty url",
            response(
                "201 Created",
                "Content-Type: application/json\r\n",
                r#"{"id": "0123456789abcdef", "url": ""}"#,
            ),
        ),
        (
            "a redirect without Location",
            response("307 Temporary Redirect", "", ""),
        ),
        (
            "a redirect to another scheme",
            redirect("307 Temporary Redirect", "ftp://127.0.0.1/x"),
        ),
    ];
    for (what, answer) in cases {
        let fake = Fake::start(move |_, _| answer.clone());
        let output = upload(&fake.url(), None);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(
            output.status.code().is_some_and(|code| code != 0) && stdout.trim().is_empty(),
            "{what}: exit {:?}, stdout {stdout:?}, stderr {stderr:?}",
            output.status
        );
        assert!(
            stderr.contains("snapview: error:") && stderr.len() > 30,
            "{what}: a message: {stderr:?}"
        );
    }
}

#[test]
fn temporary_and_permanent_redirects_resend_the_file_and_keep_the_token_on_its_host() {
    const TOKEN: &str = "write-token-0123456789abcdef";
    let real = Served::builder().env("SNAPVIEW_WRITE_TOKEN", TOKEN).start();
    // 308 to a second fake, which answers 307 to the real server: both keep the method and
    // the body, on the same host (127.0.0.1, other ports), so the token goes along.
    let real_url = real.url("");
    let second = Fake::start(move |request, _| {
        redirect(
            "307 Temporary Redirect",
            &format!("{real_url}{}", request.target()),
        )
    });
    let second_url = second.url();
    let first = Fake::start(move |request, _| {
        redirect(
            "308 Permanent Redirect",
            &format!("{second_url}{}", request.target()),
        )
    });
    let output = upload(&first.url(), Some(TOKEN));
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stderr}");
    let stored = real.stored();
    assert_eq!(stored.len(), 1, "{stderr}");
    let id = stored[0]["id"].as_str().expect("id");
    assert_eq!(stdout.trim(), real.url(&format!("/s/{id}")), "{stderr}");
    for fake in [&first, &second] {
        let received = fake.received();
        assert_eq!(received.len(), 1);
        assert!(received[0].line.starts_with("POST "), "{:?}", received[0]);
        assert_eq!(
            received[0].header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
    }
}

#[test]
fn redirects_are_bounded_and_the_token_stays_on_its_host() {
    // A loop: each answer sends the upload back to the same place.
    let looping = Fake::start(|request, port| {
        redirect(
            "307 Temporary Redirect",
            &format!("http://127.0.0.1:{port}{}", request.target()),
        )
    });
    let output = upload(&looping.url(), None);
    assert_failed(&output, &["more than 5", "nothing was stored"]);
    assert_eq!(
        looping.received().len(),
        6,
        "the first request and 5 redirects"
    );

    // To another host name (the same machine, called `localhost`): followed without the token.
    let elsewhere = Fake::start(|_, _| response("401 Unauthorized", "", ""));
    let elsewhere_url = format!("http://localhost:{}", elsewhere.port);
    let first = Fake::start(move |request, _| {
        redirect(
            "307 Temporary Redirect",
            &format!("{elsewhere_url}{}", request.target()),
        )
    });
    let output = upload(&first.url(), Some("write-token-0123456789abcdef"));
    assert!(!output.status.success());
    assert!(first.received()[0].header("authorization").is_some());
    let received = elsewhere.received();
    assert_eq!(received.len(), 1, "{}", text(&output.stderr));
    assert_eq!(received[0].header("authorization"), None, "{received:?}");
}

/// A server whose upload slots are all taken answers 503 with `Retry-After` (the ranks of one
/// node uploading at once, over `--max-uploads-per-client`): `upload` sends the file again
/// after the wait it names instead of failing the job's upload, and says so on stderr; a 503
/// without `Retry-After` is reported at once, as any other refusal.
#[test]
fn a_busy_server_is_asked_again_after_the_wait_it_names() {
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = answered.clone();
    let busy = r#"{"error":{"code":"busy","message":"this client address is sending 4 uploads already (--max-uploads-per-client); retry when one is done"}}"#;
    let fake = Fake::start(move |_, port| {
        if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            response(
                "503 Service Unavailable",
                "Retry-After: 1\r\nContent-Type: application/json\r\n",
                busy,
            )
        } else {
            let body = format!(r#"{{"id":"0123abcd","url":"http://127.0.0.1:{port}/s/0123abcd"}}"#);
            response("201 Created", "Content-Type: application/json\r\n", &body)
        }
    });
    let started = Instant::now();
    let output = upload(&fake.url(), None);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "stdout {stdout:?}, stderr {stderr:?}"
    );
    assert_eq!(stdout.trim(), format!("{}/s/0123abcd", fake.url()));
    assert!(stderr.contains("busy"), "the waits are said: {stderr:?}");
    assert_eq!(fake.received().len(), 3, "sent twice more after two 503s");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited the second the server named, twice"
    );

    let refusing = Fake::start(move |_, _| {
        response(
            "503 Service Unavailable",
            "Content-Type: application/json\r\n",
            busy,
        )
    });
    let output = upload(&refusing.url(), None);
    assert_failed(&output, &["--max-uploads-per-client"]);
    assert_eq!(
        refusing.received().len(),
        1,
        "no Retry-After: not sent again"
    );
}
