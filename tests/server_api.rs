//! The HTTP API through the router (no sockets), every route and error case.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};

use common::server::{TestServer as Server, json};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(common::path_of(name)).expect("fixture")
}

/// Files in the data dir (blobs and temp files), to show refusals store nothing; on the
/// shared backend, its blobs and uploads in flight, and the local temp files.
fn stored_files(server: &Server) -> Vec<String> {
    let data_dir = &server.state.config.data_dir;
    if common::backend::shared_requested() {
        let left = common::backend::leftovers(data_dir);
        let mut files: Vec<String> = left.blobs.into_iter().chain(left.temps).collect();
        files.sort();
        return files;
    }
    let mut files = Vec::new();
    let mut stack = vec![data_dir.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                // Stored indexes are a derived cache, written in the background after an
                // upload (tests/stored_index.rs covers them): not what these tests count.
                if !path.ends_with("indexes") {
                    stack.push(path);
                }
            } else if !path.to_string_lossy().contains("snapview.db") {
                files.push(path.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    files
}

#[tokio::test]
async fn upload_then_every_read_route() {
    let server = Server::new();
    let (status, created) = server
        .upload(fixture("oom"), "?name=first%20oom&filename=oom.pickle")
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(id.len(), 16);
    assert_eq!(created["url"], format!("http://snapview.test/s/{id}"));
    assert_eq!(created["name"], "first oom");
    assert_eq!(created["summary"]["oom_events"], 1);
    assert_eq!(created["summary"]["peak_allocated_bytes"], 2768683020u64);

    // Same bytes again: same id, not created twice.
    let (status, again) = server.upload(fixture("oom"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["id"], id.as_str());

    let (status, body, _) = server.send_get("/api/snapshots").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["snapshots"].as_array().expect("list").len(), 1);

    let (status, body, _) = server.send_get(&format!("/api/snapshots/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    let detail = json(&body);
    assert_eq!(
        detail["analysis"]["devices"][0]["peak_allocated_bytes"],
        2768683020u64
    );
    assert_eq!(
        detail["analysis"]["devices"][0]["oom_events"][0]["requested_bytes"],
        524288000u64
    );
    assert_eq!(detail["allocator_settings"]["expandable_segments"], false);

    let (status, body, headers) = server.send_get(&format!("/api/snapshots/{id}/raw")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, fixture("oom"), "the original bytes come back");
    assert!(
        headers[header::CONTENT_DISPOSITION]
            .to_str()
            .expect("ascii")
            .contains("oom.pickle")
    );

    let patch = Request::patch(format!("/api/snapshots/{id}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"name": "renamed"}"#))
        .expect("req");
    let (status, body, _) = server.send(patch).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["name"], "renamed");

    let (status, body, headers) = server.send_get(&format!("/s/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    let page = String::from_utf8_lossy(&body);
    assert!(page.contains("renamed"));
    assert!(page.contains("2.58 GiB"), "the peak is on the page");
    assert!(
        headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("csp")
            .contains("default-src 'self'")
    );

    let (status, body, _) = server.send_get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains(&format!("/s/{id}")));

    let (status, _, _) = server
        .send(
            Request::delete(format!("/api/snapshots/{id}"))
                .body(Body::empty())
                .expect("req"),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        stored_files(&server).len(),
        1,
        "the blob is kept in the trash, restorable"
    );
    let (status, body, _) = server.send_get(&format!("/api/snapshots/{id}")).await;
    assert_eq!(status, StatusCode::GONE);
    assert_eq!(json(&body)["error"]["code"], "gone");
    assert!(
        json(&body)["error"]["message"]
            .as_str()
            .expect("message")
            .contains("restore"),
        "{}",
        json(&body)
    );
}

#[tokio::test]
async fn ids_are_validated_and_unknown_ones_are_404() {
    let server = Server::new();
    for (path, status, code) in [
        (
            "/api/snapshots/not-an-id",
            StatusCode::BAD_REQUEST,
            "bad_id",
        ),
        (
            "/api/snapshots/..%2F..%2Fetc%2Fpasswd",
            StatusCode::BAD_REQUEST,
            "bad_id",
        ),
        (
            "/api/snapshots/0123456789abcdef",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "/api/snapshots/0123456789abcdef/raw",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ] {
        let (got, body, _) = server.send_get(path).await;
        assert_eq!(got, status, "{path}");
        assert_eq!(json(&body)["error"]["code"], code, "{path}");
    }
    let (status, _, _) = server
        .send(
            Request::delete("/api/snapshots/0123456789abcdef")
                .body(Body::empty())
                .expect("req"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body, _) = server.send_get("/s/0123456789abcdef").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        String::from_utf8_lossy(&body).contains("not found"),
        "a human 404 page"
    );
    // An unknown address is not a missing snapshot: the page says what is missing.
    let (status, body, _) = server.send_get("/nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let page = String::from_utf8_lossy(&body);
    assert!(page.contains("Page not found"), "{page}");
    assert!(page.contains("/nowhere"), "{page}");
    assert!(!page.contains("no snapshot"), "{page}");
    // So do the API's 404s: an allocation, a group.
    for (path, what) in [
        ("/api/groups/nobody", "group \"nobody\""),
        (
            "/api/snapshots/0123456789abcdef/flame",
            "no snapshot with id 0123456789abcdef",
        ),
    ] {
        let (status, body, _) = server.send_get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        let message = json(&body)["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(what), "{path}: {message}");
    }
    // A moment is one of its spellings; anything else is refused, not read as the start.
    let id = server.upload_fixture("mlp_small", "").await;
    for (at, status) in [
        ("-1", 200),
        ("start", 200),
        ("peak", 200),
        ("end", 200),
        ("3", 200),
        ("-2", 400),
        ("soon", 400),
    ] {
        let (got, body, _) = server
            .send_get(&format!("/api/snapshots/{id}/segments?at={at}"))
            .await;
        assert_eq!(
            got.as_u16(),
            status,
            "at={at}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let (_, body, _) = server
        .send_get(&format!("/api/snapshots/{id}/allocations/4000000"))
        .await;
    let message = json(&body)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("no allocation 4000000 on cuda:0"),
        "{message}"
    );
}

#[tokio::test]
async fn refusals_store_nothing_and_harm_nothing() {
    let server = Server::with_limit(100_000);
    let (status, kept) = server.upload(fixture("mlp_small"), "").await;
    assert_eq!(status, StatusCode::CREATED);
    let before = stored_files(&server);

    // Truncated: 400 with the reader's message.
    let mut truncated = fixture("mlp_small");
    truncated.truncate(10_000);
    let (status, body) = server.upload(truncated, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "not_a_snapshot");
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("truncated"),
        "{body}"
    );

    // A pickle that would run code.
    let evil =
        std::fs::read(common::fixtures().join("hostile/reduce_system_p4.pickle")).expect("fixture");
    let (status, body) = server.upload(evil, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("data only"),
        "{body}"
    );

    // Not a snapshot at all, and empty.
    let (status, body) = server.upload(b"%PDF-1.7 not a snapshot".to_vec(), "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A large wrong file is refused from its first bytes, before the limit is reached.
    let chunks = futures_util::stream::iter(
        (0..20).map(|_| Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b'%'; 10_000]))),
    );
    let request = Request::post("/api/snapshots")
        .body(Body::from_stream(chunks))
        .expect("request");
    let (status, body, _) = server.send(request).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(String::from_utf8_lossy(&body).contains("not a memory snapshot"));
    let (status, _) = server.upload(Vec::new(), "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Over the limit: 413, whether declared or streamed.
    let (status, body) = server.upload(fixture("ring_wrap"), "").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["code"], "too_large");
    // A stream with no declared length whose start is a valid pickle (a string declared 60 MB
    // long, under the reader's 64 MiB bound for one string), so only the byte count can stop it.
    let mut head = vec![0x80u8, 4, 0x8d];
    head.extend_from_slice(&60_000_000u64.to_le_bytes());
    let chunks = futures_util::stream::iter(
        std::iter::once(head)
            .chain((0..20).map(|_| vec![b'a'; 10_000]))
            .map(|chunk| Ok::<_, std::io::Error>(axum::body::Bytes::from(chunk))),
    );
    let request = Request::post("/api/snapshots")
        .body(Body::from_stream(chunks))
        .expect("request");
    let (status, _, _) = server.send(request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    assert_eq!(
        stored_files(&server),
        before,
        "nothing stored, nothing removed"
    );
    let (status, body, _) = server
        .send_get(&format!(
            "/api/snapshots/{}",
            kept["id"].as_str().expect("id")
        ))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the earlier snapshot is intact: {}",
        String::from_utf8_lossy(&body)
    );
}

#[tokio::test]
async fn multipart_uploads_and_bad_patches() {
    let server = Server::new();
    let boundary = "snapviewboundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"runs/streams.pickle\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend(fixture("streams"));
    body.extend(format!("\r\n--{boundary}--\r\n").into_bytes());
    let request = Request::post("/api/snapshots")
        .header(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(body))
        .expect("request");
    let (status, body, _) = server.send(request).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let created = json(&body);
    assert_eq!(created["name"], "streams");
    assert_eq!(created["filename"], "streams.pickle");
    let id = created["id"].as_str().expect("id");

    let patch = |body: &'static str| {
        Request::patch(format!("/api/snapshots/{id}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("req")
    };
    let (status, body, _) = server.send(patch(r#"{"name": "   "}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json(&body)["error"]["code"], "bad_request");
    let (status, body, _) = server.send(patch(r#"{"group": "job-42"}"#)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["group"], "job-42");
}

#[tokio::test]
async fn assets_are_hashed_immutable_and_pages_link_them() {
    let server = Server::new();
    let (_, body, _) = server.send_get("/").await;
    let page = String::from_utf8_lossy(&body).into_owned();
    let css = page
        .split('"')
        .find(|s| s.starts_with("/static/app.") && s.ends_with(".css"))
        .expect("hashed css link")
        .to_owned();
    let (status, _, headers) = server.send_get(&css).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CACHE_CONTROL]
            .to_str()
            .expect("ascii")
            .contains("immutable")
    );
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .expect("ascii")
            .starts_with("text/css")
    );
    let (status, _, _) = server.send_get("/static/nope.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
