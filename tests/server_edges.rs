//! The HTTP edges of `snapview serve`, over real TCP against the built binary (issue 18, items 8
//! and 10): who may frame the pages, the audit log's pages and its refused writes, the proxy's
//! user header, what a 421 says, one error shape for every answer, and edits racing a delete.

use crate::common;

use common::served::{Served, wait_until};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One request on its own connection: status, headers (lowercased names) and body.
fn send(
    served: &Served,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, String) {
    let address = served.url("").trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(request.as_bytes()).expect("send");
    stream.write_all(body).expect("send body");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn upload(served: &Served, fixture: &str) -> String {
    let bytes = std::fs::read(common::fixtures().join(fixture)).expect("fixture");
    let (status, _, body) = send(
        served,
        "POST",
        &format!("/api/snapshots?filename={fixture}"),
        &[],
        &bytes,
    );
    assert!(status == 201 || status == 200, "{status} {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    answer["id"].as_str().expect("an id").to_owned()
}

/// The one error shape, `{"error": {"code", "message"}}` and nothing else, as JSON.
fn assert_error_shape(what: &str, status: u16, headers: &[(String, String)], body: &str) {
    assert!(status >= 400, "{what}: {status} is not an error: {body}");
    assert!(
        header(headers, "content-type").is_some_and(|t| t.starts_with("application/json")),
        "{what}: {status} answered {:?}: {body}",
        header(headers, "content-type")
    );
    let value: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body}"));
    let object = value.as_object().expect("an object");
    assert_eq!(object.len(), 1, "{what}: {body}");
    let error = value["error"].as_object().expect("error");
    assert_eq!(error.len(), 2, "{what}: {body}");
    for field in ["code", "message"] {
        assert!(
            error[field].as_str().is_some_and(|s| !s.is_empty()),
            "{what}: no {field}: {body}"
        );
    }
}

// --- 8: frames ----------------------------------------------------------------------------------

#[test]
fn pages_are_unframeable_by_default_and_framed_only_by_the_origins_given() {
    let plain = Served::builder()
        .env_remove("SNAPVIEW_FRAME_ANCESTORS")
        .start();
    let (status, headers, _) = send(&plain, "GET", "/", &[], b"");
    assert_eq!(status, 200);
    let policy = header(&headers, "content-security-policy").expect("a policy");
    assert!(policy.ends_with("frame-ancestors 'none'"), "{policy}");
    assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));

    let framed = Served::builder()
        .env(
            "SNAPVIEW_FRAME_ANCESTORS",
            "http://127.0.0.1:*, vscode-webview:",
        )
        .start();
    let id = upload(&framed, "oom.pickle");
    for path in [
        "/".to_owned(),
        format!("/s/{id}"),
        "/api/snapshots".to_owned(),
    ] {
        let (status, headers, _) = send(&framed, "GET", &path, &[], b"");
        assert_eq!(status, 200, "{path}");
        let policy = header(&headers, "content-security-policy").expect("a policy");
        assert!(
            policy.ends_with("; frame-ancestors http://127.0.0.1:* vscode-webview:"),
            "{path}: {policy}"
        );
        // The rest of the policy stays as strict.
        assert!(
            policy.starts_with("default-src 'self'; script-src 'self';"),
            "{policy}"
        );
        // X-Frame-Options cannot name origins, and DENY would win over the list in some browsers.
        assert_eq!(header(&headers, "x-frame-options"), None, "{path}");
    }

    // A value that would add to the policy stops the server with a message.
    for bad in [
        "http://a.example;script-src *",
        "'unsafe-inline'",
        "http://a.example/x",
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(["serve", "--addr", "127.0.0.1:0", "--frame-ancestors", bad])
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--frame-ancestors"), "{bad}: {stderr}");
    }
}

// --- 10a: the audit log -------------------------------------------------------------------------

/// Every entry of the audit log, page by page through `next`; checks the pages join up.
fn whole_audit(served: &Served, limit: usize) -> Vec<serde_json::Value> {
    let mut entries: Vec<serde_json::Value> = Vec::new();
    let mut path = format!("/api/audit?limit={limit}");
    for _ in 0..1000 {
        let (status, _, body) = send(served, "GET", &path, &[], b"");
        assert_eq!(status, 200, "{path}: {body}");
        let page: serde_json::Value = serde_json::from_str(&body).expect("json");
        let got = page["entries"].as_array().expect("entries");
        assert!(got.len() <= limit);
        entries.extend(got.iter().cloned());
        match page["next"].as_i64() {
            Some(next) => {
                assert_eq!(Some(next), got.last().and_then(|e| e["seq"].as_i64()));
                path = format!("/api/audit?limit={limit}&before={next}");
            }
            None => {
                assert!(page["next"].is_null(), "{body}");
                return entries;
            }
        }
    }
    panic!("the audit log did not end");
}

#[test]
fn the_audit_log_pages_past_any_flood_and_counts_refused_writes() {
    let token = "edges-write-token-0123456789";
    let served = Served::builder().env("SNAPVIEW_WRITE_TOKEN", token).start();
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let bytes = std::fs::read(common::fixtures().join("oom.pickle")).expect("fixture");
    let (status, _, body) = send(
        &served,
        "POST",
        "/api/snapshots?filename=oom.pickle",
        &auth,
        &bytes,
    );
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (status, _, _) = send(
        &served,
        "DELETE",
        &format!("/api/snapshots/{id}"),
        &auth,
        b"",
    );
    assert_eq!(status, 204);
    let (status, _, _) = send(
        &served,
        "POST",
        &format!("/api/snapshots/{id}/restore"),
        &auth,
        b"",
    );
    assert_eq!(status, 200);
    // More renames after the delete than one page holds.
    let renames = 25;
    for n in 0..renames {
        let body = format!(r#"{{"name": "run {n}"}}"#);
        let (status, _, answer) = send(
            &served,
            "PATCH",
            &format!("/api/snapshots/{id}"),
            &[auth[0], ("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(status, 200, "{answer}");
    }
    let everything = whole_audit(&served, 7);
    assert_eq!(
        everything.len(),
        3 + renames,
        "upload, delete, restore and the renames"
    );
    let seqs: Vec<i64> = everything
        .iter()
        .map(|e| e["seq"].as_i64().expect("seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] > w[1]),
        "newest first, no repeats: {seqs:?}"
    );
    assert!(
        everything.iter().any(|e| e["action"] == "delete"),
        "the delete is reachable"
    );
    // `offset` never did anything: it is refused, not ignored.
    let (status, headers, body) = send(&served, "GET", "/api/audit?offset=10", &[], b"");
    assert_eq!(status, 400);
    assert_error_shape("offset", status, &headers, &body);

    // Refused writes: no token (401), a wrong token (401), another site's page (403).
    let patch = format!("/api/snapshots/{id}");
    let json = ("Content-Type", "application/json");
    for _ in 0..40 {
        assert_eq!(
            send(&served, "PATCH", &patch, &[json], br#"{"name":"x"}"#).0,
            401
        );
    }
    for _ in 0..5 {
        let wrong = [("Authorization", "Bearer not-the-token-0123456789"), json];
        assert_eq!(send(&served, "DELETE", &patch, &wrong, b"").0, 401);
        let cross = [auth[0], json, ("Origin", "http://evil.example")];
        assert_eq!(
            send(&served, "PATCH", &patch, &cross, br#"{"name":"x"}"#).0,
            403
        );
    }
    let refused = || {
        whole_audit(&served, 100)
            .into_iter()
            .filter(|e| e["action"] == "refused")
            .collect::<Vec<_>>()
    };
    // Counted per address and minute; written every couple of seconds. A minute boundary during
    // the test may split them over two rows.
    wait_until(
        "the refused writes are in the audit log",
        Duration::from_secs(20),
        || {
            refused()
                .iter()
                .map(|e| e["detail"]["count"].as_u64().unwrap_or(0))
                .sum::<u64>()
                == 50
        },
    );
    let rows = refused();
    assert!(rows.len() <= 2, "aggregated, not one row each: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["detail"]["address"], "127.0.0.1");
    let requests = row["detail"]["requests"].as_array().expect("requests");
    assert!(requests.len() <= 8);
    assert!(
        requests.iter().any(|r| r["status"] == 403
            && r["route"] == format!("PATCH /api/snapshots/{id}").as_str()
            && r["why"]
                .as_str()
                .is_some_and(|why| why.contains("other sites"))),
        "{row}"
    );
    assert!(requests.iter().any(|r| r["status"] == 401), "{row}");
    // Nothing was changed by them.
    let (_, _, detail) = send(&served, "GET", &patch, &[], b"");
    assert!(
        detail.contains(&format!("\"name\":\"run {}\"", renames - 1)),
        "{detail}"
    );
}

// --- 10b: the proxy's user header ---------------------------------------------------------------

#[test]
fn the_user_header_is_believed_only_from_the_trusted_proxies() {
    let rename = |served: &Served, id: &str, user: Option<&str>| {
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(user) = user {
            headers.push(("X-Forwarded-User", user));
        }
        send(
            served,
            "PATCH",
            &format!("/api/snapshots/{id}"),
            &headers,
            br#"{"name":"renamed"}"#,
        )
    };
    // A proxy elsewhere: this client (loopback) is not it.
    let elsewhere = Served::builder()
        .args([
            "--user-header",
            "X-Forwarded-User",
            "--trusted-proxies",
            "10.9.9.9, 10.10.0.0/16",
        ])
        .start();
    let id = upload(&elsewhere, "oom.pickle");
    let (status, headers, body) = rename(&elsewhere, &id, Some("mallory"));
    assert_eq!(status, 403, "{body}");
    assert_error_shape("untrusted header", status, &headers, &body);
    assert!(
        body.contains("--trusted-proxies") && body.contains("127.0.0.1"),
        "{body}"
    );
    // Reads carrying it are refused too: the header is never silently believed or dropped.
    assert_eq!(
        send(
            &elsewhere,
            "GET",
            "/api/snapshots",
            &[("X-Forwarded-User", "mallory")],
            b""
        )
        .0,
        403
    );
    assert_eq!(rename(&elsewhere, &id, None).0, 200, "without the header");
    let log = elsewhere.log_text();
    assert!(
        log.contains("--user-header") && log.contains("10.10.0.0/16"),
        "{log}"
    );

    // Without --trusted-proxies: loopback only, and the start says so.
    let local = Served::builder()
        .args(["--user-header", "X-Forwarded-User"])
        .start();
    let id = upload(&local, "oom.pickle");
    let (status, _, body) = rename(&local, &id, Some("carol@example.com"));
    assert_eq!(status, 200, "{body}");
    let (_, _, audit) = send(&local, "GET", "/api/audit?limit=1", &[], b"");
    assert!(audit.contains("\"actor\":\"carol@example.com\""), "{audit}");
    let log = local.log_text();
    assert!(log.contains("loopback only"), "{log}");

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_snapview"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--trusted-proxies",
            "10.0.0.0/33",
        ])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(2));
}

// --- 10c: the 421 -------------------------------------------------------------------------------

#[test]
fn a_foreign_host_hears_which_flags_set_the_names_not_the_names() {
    let served = Served::builder()
        .args(["--allowed-hosts", "build-box.internal.corp"])
        .start();
    let (status, headers, body) = send(
        &served,
        "GET",
        "/api/snapshots",
        &[("Host", "evil.example")],
        b"",
    );
    assert_eq!(status, 421);
    assert_error_shape("421", status, &headers, &body);
    for secret in [
        "build-box",
        "internal.corp",
        "localhost",
        "127.0.0.1",
        "[::1]",
    ] {
        assert!(!body.contains(secret), "the 421 names {secret}: {body}");
    }
    assert!(body.contains("--allowed-hosts"), "{body}");
}

// --- 10d: one error shape -----------------------------------------------------------------------

/// `METHOD /path` of every row of docs/api.md's endpoint table, with the row's query names.
fn documented_routes() -> Vec<(String, String, Vec<String>)> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md"))
        .expect("docs/api.md");
    let mut routes = Vec::new();
    for line in docs.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((route, rest)) = rest.split_once('`') else {
            continue;
        };
        let Some((method, path)) = route.split_once(' ') else {
            continue;
        };
        if !path.starts_with("/api/") {
            continue;
        }
        // The query column: each `name` before a default in parentheses.
        let query_column = rest.split('|').nth(1).unwrap_or("");
        let names: Vec<String> = query_column
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .map(str::to_owned)
            .collect();
        routes.push((method.to_owned(), path.to_owned(), names));
    }
    routes
}

#[test]
fn every_documented_route_answers_bad_requests_in_the_one_error_shape() {
    let served = Served::builder().start();
    let id = upload(&served, "oom.pickle");
    let other = upload(&served, "mempool.pickle");
    let (status, _, _) = send(
        &served,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        &[("Content-Type", "application/json")],
        br#"{"group": "g"}"#,
    );
    assert_eq!(status, 200);
    let routes = documented_routes();
    assert!(routes.len() >= 20, "{routes:?}");
    let real = |path: &str| {
        path.replace("{id}", &id)
            .replace("{a}", &id)
            .replace("{b}", &other)
            .replace("{n}", "0")
            .replace("{name}", "g")
    };
    let mut checked = 0;
    for (method, path, query) in &routes {
        // Wrong method: one this path does not take.
        let taken: Vec<&str> = routes
            .iter()
            .filter(|(_, p, _)| p == path)
            .map(|(m, _, _)| m.as_str())
            .collect();
        let wrong = ["PUT", "POST", "PATCH", "DELETE", "GET"]
            .into_iter()
            .find(|m| !taken.contains(m))
            .expect("a method not taken");
        let (status, headers, body) = send(&served, wrong, &real(path), &[], b"");
        assert_eq!(status, 405, "{wrong} {path}: {body}");
        assert_error_shape(&format!("{wrong} {path}"), status, &headers, &body);
        checked += 1;

        // Bad path parameters: not ids, not numbers.
        if path.contains('{') && method != "DELETE" && method != "POST" {
            let bad = path
                .replace("{id}", "not-an-id")
                .replace("{a}", "zz")
                .replace("{b}", &other)
                .replace("{n}", "minus-one")
                .replace("{name}", "%FF%FE");
            let (status, headers, body) = send(&served, method, &bad, &[], b"");
            assert!(
                [400, 404].contains(&status),
                "{method} {bad}: {status} {body}"
            );
            assert_error_shape(&format!("{method} {bad}"), status, &headers, &body);
            checked += 1;
        }

        // Bad queries: every documented parameter with a value no parameter takes.
        if !query.is_empty() && method == "GET" {
            let garbage: Vec<String> = query.iter().map(|name| format!("{name}=%00x")).collect();
            let url = format!("{}?{}", real(path), garbage.join("&"));
            let (status, headers, body) = send(&served, method, &url, &[], b"");
            assert_eq!(status, 400, "{url}: {body}");
            assert_error_shape(&url, status, &headers, &body);
            checked += 1;
        }

        // Bad bodies, where a route reads one.
        if ["PATCH", "PUT", "POST"].contains(&method.as_str()) && !path.ends_with("/restore") {
            for (content_type, body) in [
                ("application/json", &b"{\"name\": 5"[..]),
                ("application/json", &b"{\"name\": 5}"[..]),
                ("text/plain", &b"[[[[ not a snapshot nor rules \xff"[..]),
            ] {
                let (status, headers, answer) = send(
                    &served,
                    method,
                    &real(path),
                    &[("Content-Type", content_type)],
                    body,
                );
                assert!(
                    (400..500).contains(&status),
                    "{method} {path} {content_type}: {status} {answer}"
                );
                assert_error_shape(&format!("{method} {path} body"), status, &headers, &answer);
                checked += 1;
            }
        }
    }
    // An address under /api that is no route.
    let (status, headers, body) = send(&served, "GET", "/api/nothing/here", &[], b"");
    assert_eq!(status, 404);
    assert_error_shape("/api/nothing/here", status, &headers, &body);
    // A query whose encoding is broken, a body past the rules' cap.
    let (status, headers, body) = send(&served, "GET", "/api/audit?limit=%ZZ", &[], b"");
    assert_error_shape("broken query", status, &headers, &body);
    let big = vec![b'#'; 70 * 1024];
    let (status, headers, body) = send(
        &served,
        "PUT",
        &format!("/api/snapshots/{id}/rules"),
        &[],
        &big,
    );
    assert_eq!(status, 413, "{body}");
    assert_error_shape("rules past the cap", status, &headers, &body);
    assert!(checked > 40, "{checked}");
    // Nothing of that changed what is stored.
    assert_eq!(served.stored().len(), 2);
}

// --- 10e: edits racing a delete and a restore ---------------------------------------------------

#[test]
fn edits_racing_a_delete_and_restore_never_answer_404_for_a_live_snapshot() {
    let served = Served::builder().start();
    let id = upload(&served, "oom.pickle");
    let served = &served;
    let id = id.as_str();
    let deadline = Instant::now() + Duration::from_secs(8);
    let statuses = std::thread::scope(|scope| {
        let flapper = scope.spawn(move || {
            let mut flaps = 0;
            while Instant::now() < deadline && flaps < 5000 {
                assert_eq!(
                    send(served, "DELETE", &format!("/api/snapshots/{id}"), &[], b"").0,
                    204
                );
                let (status, _, body) = send(
                    served,
                    "POST",
                    &format!("/api/snapshots/{id}/restore"),
                    &[],
                    b"",
                );
                assert_eq!(status, 200, "{body}");
                flaps += 1;
            }
            flaps
        });
        let editors: Vec<_> = (0..3)
            .map(|thread| {
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    let mut n = 0;
                    while Instant::now() < deadline && n < 5000 {
                        let body = format!(r#"{{"name": "t{thread} n{n}", "group": "g{n}"}}"#);
                        let (status, _, answer) = send(
                            served,
                            "PATCH",
                            &format!("/api/snapshots/{id}"),
                            &[("Content-Type", "application/json")],
                            body.as_bytes(),
                        );
                        seen.push((status, answer));
                        n += 1;
                    }
                    seen
                })
            })
            .collect();
        let flaps = flapper.join().expect("flapper");
        assert!(flaps > 10, "{flaps} deletes and restores");
        editors
            .into_iter()
            .flat_map(|e| e.join().expect("editor"))
            .collect::<Vec<_>>()
    });
    let mut counts = std::collections::BTreeMap::new();
    for (status, answer) in &statuses {
        *counts.entry(*status).or_insert(0) += 1;
        // 200: applied; 410: it was in the trash when asked; 409: deleted (or deleted and
        // restored) while the edit was made. Never 404: it was never gone for good.
        assert!(
            [200, 409, 410].contains(status),
            "{status} {answer} ({counts:?})"
        );
        if *status == 409 {
            assert!(
                answer.contains("meanwhile") || answer.contains("while this change"),
                "{answer}"
            );
        }
    }
    assert!(counts.get(&200).copied().unwrap_or(0) > 0, "{counts:?}");
    eprintln!("answers during the race: {counts:?}");
    assert_eq!(served.stored().len(), 1, "live at the end");
}
