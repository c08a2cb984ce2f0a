//! What the access and asset layer gained from well-kept crates: the limit on failed token
//! checks (governor), response compression (tower-http), `ETag`s on the static assets, the JS
//! unit tests left out of the binary, and the session cookie that a restart ends.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode, header};
use common::server::TestServer;
use http_body_util::BodyExt;
use snapview::server::access::{AccessConfig, NamedToken};
use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;
use tower::ServiceExt;

const WRITE_TOKEN: &str = "write-token-0123456789abcdef";
const READ_TOKEN: &str = "read-token-0123456789abcdef";
const HOST: &str = "snapview.test";

fn tokens(max_token_failures: u32) -> AccessConfig {
    AccessConfig {
        write_tokens: vec![NamedToken {
            name: None,
            token: WRITE_TOKEN.into(),
        }],
        read_token: Some(NamedToken {
            name: None,
            token: READ_TOKEN.into(),
        }),
        max_token_failures,
        ..AccessConfig::default()
    }
}

/// One router for the whole test, so what it counts is kept between requests (as in
/// `snapview serve`, which builds it once).
async fn send(router: &Router, mut request: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
    request
        .headers_mut()
        .insert(header::HOST, HOST.parse().expect("host"));
    let response = router.clone().oneshot(request).await.expect("response");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts.status, parts.headers, bytes.to_vec())
}

/// A request from the client at `peer`, as the server's socket would tag it.
fn from(peer: [u8; 4], request: axum::http::request::Builder) -> Request<Body> {
    let mut request = request.body(Body::empty()).expect("request");
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((peer, 40000))));
    request
}

fn read_with(token: &str) -> axum::http::request::Builder {
    Request::get("/api/snapshots").header(header::AUTHORIZATION, format!("Bearer {token}"))
}

fn login_request(peer: [u8; 4], token: &str) -> Request<Body> {
    let mut request = Request::post("/login")
        .header(header::ORIGIN, format!("http://{HOST}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={token}&next=%2F")))
        .expect("request");
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((peer, 40000))));
    request
}

#[tokio::test]
async fn a_client_guessing_tokens_is_slowed_and_nobody_else_is() {
    let limit = 10;
    let server = TestServer::with_config(|config| config.access = tokens(limit));
    let router = snapview::server::router(server.state.clone());
    let attacker = [192, 0, 2, 66];
    let honest = [192, 0, 2, 7];

    let mut statuses = Vec::new();
    for n in 0..200 {
        let guess = format!("guess-{n:04}-0123456789abcdef");
        let (status, headers, body) = send(&router, from(attacker, read_with(&guess))).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            let json: serde_json::Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(json["error"]["code"], "too_many_failures");
            let message = json["error"]["message"].as_str().unwrap_or("");
            assert!(message.contains("too many wrong tokens"), "{message}");
            assert!(message.contains("--max-token-failures"), "{message}");
            let wait: u64 = headers[header::RETRY_AFTER]
                .to_str()
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("Retry-After in seconds");
            assert!((1..=60).contains(&wait), "{wait}");
        }
        statuses.push(status);
    }
    let limit = usize::try_from(limit).expect("small");
    assert!(
        statuses[..limit]
            .iter()
            .all(|&s| s == StatusCode::UNAUTHORIZED),
        "the first {limit} wrong tokens are plain 401s: {statuses:?}"
    );
    // One more try comes back every 6 s (10 a minute): a slow machine may see one or two.
    let let_through = statuses[limit..]
        .iter()
        .filter(|&&s| s != StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert!(
        let_through <= 2,
        "{let_through} of the later tries were compared: {statuses:?}"
    );

    // Out of tries, even the right token is not compared (else 429 and 200 would tell).
    let (status, _, _) = send(&router, from(attacker, read_with(READ_TOKEN))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The login form too, as a page.
    let (status, headers, body) = send(&router, login_request(attacker, READ_TOKEN)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(!headers.contains_key(header::SET_COOKIE));
    let page = String::from_utf8_lossy(&body);
    assert!(page.contains("too many wrong tokens"), "{page}");
    // Public paths are not token checks: the app's code still loads.
    let (status, _, _) = send(
        &router,
        from(
            attacker,
            Request::get("/static/app.css").header(header::AUTHORIZATION, "Bearer x"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Another client: untouched, by Bearer header and by the login form.
    for token in [READ_TOKEN, WRITE_TOKEN] {
        let (status, _, body) = send(&router, from(honest, read_with(token))).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    let (status, headers, _) = send(&router, login_request(honest, READ_TOKEN)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(headers.contains_key(header::SET_COOKIE));
}

#[tokio::test]
async fn wrong_tokens_in_the_login_form_count_too() {
    let server = TestServer::with_config(|config| config.access = tokens(5));
    let router = snapview::server::router(server.state.clone());
    let guesser = [198, 51, 100, 9];
    for n in 0..5 {
        let (status, _, _) = send(&router, login_request(guesser, &format!("wrong-{n}"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "try {n}");
    }
    let (status, headers, _) = send(&router, login_request(guesser, READ_TOKEN)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers.contains_key(header::RETRY_AFTER));
    // …and shut the Bearer header of the same address.
    let (status, _, _) = send(&router, from(guesser, read_with(WRITE_TOKEN))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_limit_of_zero_limits_nothing() {
    let server = TestServer::with_config(|config| config.access = tokens(0));
    let router = snapview::server::router(server.state.clone());
    for n in 0..100 {
        let guess = format!("guess-{n:04}-0123456789abcdef");
        let (status, _, _) = send(&router, from([192, 0, 2, 1], read_with(&guess))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "try {n}");
    }
    let (status, _, _) = send(&router, from([192, 0, 2, 1], read_with(READ_TOKEN))).await;
    assert_eq!(status, StatusCode::OK);
}

/// The plain and hashed URLs of one ES module the pages import, from the index page.
async fn a_module(server: &TestServer) -> (String, String) {
    let (_, page, _) = server.send_get("/").await;
    let page = String::from_utf8_lossy(&page).into_owned();
    let hashed: String = page
        .split('"')
        .find(|s| s.starts_with("/static/") && s.ends_with(".js"))
        .map(str::to_owned)
        .expect("a script on the index page");
    // `index.0123456789.js` → `index.js`
    let (stem, _) = hashed.rsplit_once('.').expect("ext");
    let (plain_stem, _) = stem.rsplit_once('.').expect("hash");
    (format!("{plain_stem}.js"), hashed)
}

#[tokio::test]
async fn assets_carry_an_etag_and_a_current_copy_gets_304() {
    let server = TestServer::new();
    let (plain, hashed) = a_module(&server).await;

    let (status, body, headers) = server.send_get(&plain).await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    let etag = headers[header::ETAG].to_str().expect("ascii").to_owned();
    assert!(
        etag.len() == 66 && etag.starts_with('"') && !etag.starts_with("W/"),
        "a strong ETag of the SHA-256: {etag}"
    );
    assert!(!body.is_empty());

    let revalidate = |tag: &str| {
        Request::get(plain.as_str())
            .header(header::IF_NONE_MATCH, tag)
            .body(Body::empty())
            .expect("request")
    };
    let (status, body, headers) = server.send(revalidate(&etag)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty(), "a 304 has no body");
    assert_eq!(headers[header::ETAG], etag.as_str());
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    // In a list, or weak as a browser may send it back after a compressed answer: current.
    for tag in [
        format!("\"other\", {etag}"),
        format!("W/{etag}"),
        "*".into(),
    ] {
        assert_eq!(
            server.send(revalidate(&tag)).await.0,
            StatusCode::NOT_MODIFIED,
            "{tag}"
        );
    }
    // Another version's tag: the file again.
    let (status, body, _) = server.send(revalidate("\"0123\"")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());

    // The hashed name is the same bytes, cached for good.
    let (status, _, headers) = server.send_get(&hashed).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::ETAG], etag.as_str());
    assert_eq!(
        headers[header::CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
}

#[tokio::test]
async fn js_unit_tests_are_not_in_the_binary() {
    let server = TestServer::new();
    let tests: Vec<String> = std::fs::read_dir("static/lib")
        .expect("static/lib")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".test.js"))
        .collect();
    assert!(!tests.is_empty(), "static/lib has unit tests");
    for name in &tests {
        let (status, _, _) = server.send_get(&format!("/static/lib/{name}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{name} is served");
        // What it tests is served.
        let module = name.split('.').next().expect("stem");
        let (status, _, _) = server.send_get(&format!("/static/lib/{module}.js")).await;
        assert_eq!(status, StatusCode::OK, "lib/{module}.js");
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

#[tokio::test]
async fn json_and_assets_are_compressed_as_accepted_and_downloads_are_not() {
    let server = TestServer::new();
    let id = server.upload_fixture("mempool", "").await;
    let get = |path: &str, accept: &str| {
        Request::get(path)
            .header(header::ACCEPT_ENCODING, accept)
            .body(Body::empty())
            .expect("request")
    };
    let flame = format!("/api/snapshots/{id}/flame");
    let (status, plain, _) = server.send(get(&flame, "identity")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, gzipped, headers) = server.send(get(&flame, "gzip")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    assert!(
        gzipped.len() < plain.len(),
        "{} >= {}",
        gzipped.len(),
        plain.len()
    );
    assert_eq!(gunzip(&gzipped), plain, "the same JSON");
    let (_, _, headers) = server.send(get(&flame, "br;q=1.0, gzip;q=0.5")).await;
    assert_eq!(headers[header::CONTENT_ENCODING], "br");

    let (module, _) = a_module(&server).await;
    let (status, _, headers) = server.send(get(&module, "gzip, br")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.contains_key(header::CONTENT_ENCODING), "{module}");
    assert!(headers.contains_key(header::ETAG));
    assert!(
        headers
            .get_all(header::VARY)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.contains("accept-encoding"))),
        "caches keep the encodings apart"
    );

    // The stored file: as stored, with its exact length.
    let raw = format!("/api/snapshots/{id}/raw");
    let (status, body, headers) = server.send(get(&raw, "gzip, br")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!headers.contains_key(header::CONTENT_ENCODING));
    assert_eq!(
        headers[header::CONTENT_LENGTH],
        body.len().to_string().as_str()
    );
    let fixture = std::fs::read(common::path_of("mempool")).expect("fixture");
    assert_eq!(body, fixture);
}

#[test]
fn a_session_cookie_from_before_a_restart_is_refused() {
    use common::served::Served;
    let dir = tempfile::tempdir().expect("tempdir");
    let start = || {
        Served::builder()
            .data_dir(dir.path())
            .env("SNAPVIEW_READ_TOKEN", READ_TOKEN)
            .start()
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let page_with = |server: &Served, cookie: &str| {
        agent
            .get(&server.url("/"))
            .header("Cookie", cookie)
            .call()
            .expect("answer")
            .status()
            .as_u16()
    };
    let mut server = start();
    let response = agent
        .post(&server.url("/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("token={READ_TOKEN}&next=%2F").as_bytes())
        .expect("answer");
    assert_eq!(response.status().as_u16(), 303);
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let (name, value) = cookie.split_once('=').expect("name=value");
    assert_eq!(name, "snapview_session");
    assert!(
        value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()),
        "lowercase hex of HMAC-SHA256, as before: {value}"
    );
    assert_eq!(page_with(&server, &cookie), 200);

    let _ = server.child.kill();
    let _ = server.child.wait();
    server = start();
    assert_eq!(
        page_with(&server, &cookie),
        303,
        "a restart draws a new key: the old cookie signs nobody in"
    );
}
