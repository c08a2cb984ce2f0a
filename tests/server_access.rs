//! Who may change what: cross-site writes, write and read tokens, the login cookie, the Host
//! check and the Actor, through the router and through the real binary over TCP.

use crate::common;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use common::server::TestServer;
use http_body_util::BodyExt;
use snapview::server::ServeConfig;
use snapview::server::access::{AccessConfig, Actor, NamedToken};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use tower::ServiceExt;

const WRITE_TOKEN: &str = "write-token-0123456789abcdef";
const READ_TOKEN: &str = "read-token-0123456789abcdef";
const ALICE_TOKEN: &str = "alice-token-0123456789abcdef";

fn fixture() -> Vec<u8> {
    std::fs::read(common::path_of("mempool")).expect("fixture")
}

/// A router over a temporary data folder with the given access settings.
struct Server(TestServer);

impl Server {
    fn new(addr: SocketAddr, public_url: &str, access: AccessConfig) -> Self {
        Self(TestServer::with_config(|config| {
            config.addr = addr;
            config.public_url = public_url.into();
            config.access = access;
        }))
    }

    /// Bound to loopback, as `snapview serve` is by default.
    fn local(access: AccessConfig) -> Self {
        Self::new(
            SocketAddr::from(([127, 0, 0, 1], 7878)),
            "http://127.0.0.1:7878",
            access,
        )
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
        let (status, body, headers) = self.0.send(request).await;
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    fn stored(&self) -> usize {
        self.0.state.store.list().expect("list").len()
    }
}

fn upload_request(headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::post("/api/snapshots?filename=mempool.pickle")
        .header(header::HOST, "127.0.0.1:7878")
        .header(header::CONTENT_TYPE, "application/octet-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(fixture())).expect("request")
}

fn get(path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::get(path).header(header::HOST, "127.0.0.1:7878");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).expect("request")
}

fn error_code(body: &str) -> String {
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    json["error"]["code"].as_str().unwrap_or("").to_owned()
}

fn token(token: &str) -> Option<NamedToken> {
    Some(NamedToken {
        name: None,
        token: token.into(),
    })
}

fn with_write_token() -> AccessConfig {
    AccessConfig {
        write_tokens: vec![NamedToken {
            name: None,
            token: WRITE_TOKEN.into(),
        }],
        ..AccessConfig::default()
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn cross_site_writes_are_refused_and_store_nothing() {
    let server = Server::local(AccessConfig::default());
    let refused: &[&[(&str, &str)]] = &[
        &[("origin", "https://evil.example")],
        &[("origin", "null")],
        // Same host name, other port: another origin, maybe another user's server.
        &[("origin", "http://127.0.0.1:9999")],
        &[("sec-fetch-site", "cross-site")],
        &[("sec-fetch-site", "same-site")],
        &[
            ("origin", "http://127.0.0.1:7878"),
            ("sec-fetch-site", "cross-site"),
        ],
    ];
    for headers in refused {
        let (status, _, body) = server.send(upload_request(headers)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}: {body}");
        assert_eq!(error_code(&body), "cross_site");
        assert!(body.contains("other sites"), "{body}");
    }
    // A form a hostile page posts as text/plain: the same rule.
    let form = Request::post("/api/snapshots")
        .header(header::HOST, "127.0.0.1:7878")
        .header(header::ORIGIN, "https://evil.example")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(fixture()))
        .expect("request");
    assert_eq!(server.send(form).await.0, StatusCode::FORBIDDEN);
    assert_eq!(server.stored(), 0, "a refused write stored something");

    // Same origin, the browser's own "none" (typed URL) and scripts without Origin: accepted.
    let (status, _, body) = server
        .send(upload_request(&[
            ("origin", "http://127.0.0.1:7878"),
            ("sec-fetch-site", "same-origin"),
        ]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(server.send(upload_request(&[])).await.0, StatusCode::OK);
    assert_eq!(
        server
            .send(upload_request(&[("sec-fetch-site", "none")]))
            .await
            .0,
        StatusCode::OK
    );

    // A cross-site DELETE leaves the snapshot alone.
    let delete = Request::delete(format!("/api/snapshots/{id}"))
        .header(header::HOST, "127.0.0.1:7878")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::empty())
        .expect("request");
    assert_eq!(server.send(delete).await.0, StatusCode::FORBIDDEN);
    assert_eq!(server.stored(), 1);
    // Reads from anywhere are unaffected (the pages' CSP and the browser's same-origin policy
    // keep other sites from reading the answers).
    let (status, _, _) = server
        .send(get("/api/snapshots", &[("origin", "https://evil.example")]))
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn behind_a_proxy_the_public_origin_may_write() {
    // The proxy forwards to 127.0.0.1:7878 with its own Host; the browser's Origin is public.
    let server = Server::new(
        SocketAddr::from(([127, 0, 0, 1], 7878)),
        "https://snap.example.com",
        AccessConfig::default(),
    );
    let (status, _, body) = server
        .send(upload_request(&[("origin", "https://snap.example.com")]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, _) = server
        .send(upload_request(&[("origin", "http://snap.example.com")]))
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "the http:// origin is another"
    );
}

#[tokio::test]
async fn a_write_token_guards_writes_and_leaves_reads_open() {
    let server = Server::local(with_write_token());
    let (status, headers, body) = server.send(upload_request(&[])).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(error_code(&body), "unauthorized");
    assert!(
        headers[header::WWW_AUTHENTICATE]
            .to_str()
            .expect("ascii")
            .starts_with("Bearer"),
    );
    assert!(body.contains("SNAPVIEW_TOKEN"), "{body}");

    for wrong in [
        bearer("write-token-0123456789abcdeX"),
        bearer(""),
        WRITE_TOKEN.to_owned(),
        format!("Basic {WRITE_TOKEN}"),
    ] {
        let (status, _, body) = server
            .send(upload_request(&[("authorization", &wrong)]))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}: {body}");
    }
    assert_eq!(server.stored(), 0);

    let (status, _, body) = server
        .send(upload_request(&[("authorization", &bearer(WRITE_TOKEN))]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();

    // Reads need nothing.
    for path in ["/", "/api/snapshots", &format!("/s/{id}")] {
        assert_eq!(
            server.send(get(path, &[])).await.0,
            StatusCode::OK,
            "{path}"
        );
    }

    // PATCH and DELETE are writes too.
    let patch = |auth: Option<&str>| {
        let mut request = Request::patch(format!("/api/snapshots/{id}"))
            .header(header::HOST, "127.0.0.1:7878")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(auth) = auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        request
            .body(Body::from(r#"{"name": "renamed"}"#))
            .expect("request")
    };
    assert_eq!(server.send(patch(None)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        server.send(patch(Some(&bearer(WRITE_TOKEN)))).await.0,
        StatusCode::OK
    );
    let delete = |auth: Option<&str>| {
        let mut request =
            Request::delete(format!("/api/snapshots/{id}")).header(header::HOST, "127.0.0.1:7878");
        if let Some(auth) = auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        request.body(Body::empty()).expect("request")
    };
    assert_eq!(server.send(delete(None)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(server.stored(), 1, "an unauthorized delete removed it");
    assert!(
        server
            .send(delete(Some(&bearer(WRITE_TOKEN))))
            .await
            .0
            .is_success()
    );
}

fn with_read_token() -> AccessConfig {
    AccessConfig {
        read_token: token(READ_TOKEN),
        ..with_write_token()
    }
}

fn login_request(token: &str, next: &str) -> Request<Body> {
    Request::post("/login")
        .header(header::HOST, "127.0.0.1:7878")
        .header(header::ORIGIN, "http://127.0.0.1:7878")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!(
            "token={}&next={}",
            token,
            next.replace('/', "%2F")
                .replace('?', "%3F")
                .replace('=', "%3D")
        )))
        .expect("request")
}

#[tokio::test]
async fn a_read_token_guards_pages_and_api_and_the_cookie_opens_them() {
    let server = Server::local(with_read_token());
    let (status, _, body) = server
        .send(upload_request(&[("authorization", &bearer(WRITE_TOKEN))]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let page = format!("/s/{id}?tab=flame");

    // Pages send a person to the login form, and back afterwards.
    let (status, headers, _) = server.send(get(&page, &[])).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let location = headers[header::LOCATION]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(location, format!("/login?next=/s/{id}%3Ftab%3Dflame"));
    let (status, _, form) = server.send(get(&location, &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(form.contains(r#"name="token""#), "{form}");
    assert!(
        form.contains(&format!("value=\"/s/{id}?tab=flame\"")),
        "{form}"
    );

    // API reads: 401 without a token, 200 with the read token or a write token.
    let (status, headers, _) = server.send(get("/api/snapshots", &[])).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.contains_key(header::WWW_AUTHENTICATE));
    for good in [READ_TOKEN, WRITE_TOKEN] {
        let auth = bearer(good);
        let (status, _, _) = server
            .send(get("/api/snapshots", &[("authorization", &auth)]))
            .await;
        assert_eq!(status, StatusCode::OK, "{good}");
    }
    let wrong = bearer("read-token-0123456789abcdeX");
    let (status, _, _) = server
        .send(get("/api/snapshots", &[("authorization", &wrong)]))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // The read token may not write when write tokens exist.
    let (status, _, body) = server
        .send(upload_request(&[("authorization", &bearer(READ_TOKEN))]))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("may read but not change"), "{body}");

    // Static assets are public code.
    let (_, _, index) = server.send(get("/login", &[])).await;
    let css = index
        .split("href=\"")
        .map(|s| s.split('"').next().unwrap_or(""))
        .find(|href| href.starts_with("/static/") && href.ends_with(".css"))
        .expect("a stylesheet link")
        .to_owned();
    assert_eq!(server.send(get(&css, &[])).await.0, StatusCode::OK);

    // A wrong token: the form again, with an error, no cookie.
    let (status, headers, body) = server.send(login_request("nope", &page)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("not valid"), "{body}");
    assert!(!headers.contains_key(header::SET_COOKIE));

    // The right one: a cookie that is not the token, then back to the page.
    let (status, headers, _) = server.send(login_request(READ_TOKEN, &page)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], page.as_str());
    let cookie = headers[header::SET_COOKIE]
        .to_str()
        .expect("ascii")
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain http: a Secure cookie would never come back"
    );
    assert!(!cookie.contains(READ_TOKEN), "{cookie}");
    let pair = cookie.split(';').next().expect("pair").to_owned();
    for path in [page.as_str(), "/", "/api/snapshots"] {
        let (status, _, _) = server.send(get(path, &[("cookie", &pair)])).await;
        assert_eq!(status, StatusCode::OK, "{path} with the cookie");
    }
    // The cookie reads; it does not write (write tokens exist).
    let (status, _, _) = server.send(upload_request(&[("cookie", &pair)])).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A forged cookie, or the raw token as the cookie, opens nothing.
    let forged = format!("snapview_session={}", "0".repeat(64));
    let raw = format!("snapview_session={READ_TOKEN}");
    for cookie in [forged, raw] {
        let (status, _, _) = server.send(get("/", &[("cookie", &cookie)])).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{cookie}");
    }

    // The login form never sends anyone off-site.
    let (_, headers, _) = server
        .send(login_request(READ_TOKEN, "//evil.example/"))
        .await;
    assert_eq!(headers[header::LOCATION], "/");
}

#[tokio::test]
async fn the_cookie_is_secure_behind_https_and_writes_when_only_a_read_token_is_set() {
    let server = Server::new(
        SocketAddr::from(([127, 0, 0, 1], 7878)),
        "https://snap.example.com",
        AccessConfig {
            read_token: token(READ_TOKEN),
            ..AccessConfig::default()
        },
    );
    let request = Request::post("/login")
        .header(header::HOST, "snap.example.com")
        .header(header::ORIGIN, "https://snap.example.com")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={READ_TOKEN}&next=%2F")))
        .expect("request");
    let (status, headers, _) = server.send(request).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = headers[header::SET_COOKIE]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(cookie.contains("; Secure"), "{cookie}");
    let pair = cookie.split(';').next().expect("pair").to_owned();

    // Without write tokens, whoever may read may write (the pages' rename, say)…
    let (status, _, body) = server
        .send(upload_request(&[
            ("cookie", &pair),
            ("origin", "https://snap.example.com"),
        ]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // …but nobody else.
    assert_eq!(
        server.send(upload_request(&[])).await.0,
        StatusCode::UNAUTHORIZED
    );
    // A login from another site's form is a cross-site write.
    let request = Request::post("/login")
        .header(header::HOST, "snap.example.com")
        .header(header::ORIGIN, "https://evil.example")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={READ_TOKEN}")))
        .expect("request");
    assert_eq!(server.send(request).await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn loopback_answers_only_its_own_host_names() {
    let server = Server::local(AccessConfig::default());
    let with_host = |host: &str| {
        Request::get("/api/snapshots")
            .header(header::HOST, host)
            .body(Body::empty())
            .expect("request")
    };
    for host in [
        "evil.example",
        "evil.example:7878",
        "127.0.0.2:7878",
        "localhost.evil.example",
    ] {
        let (status, _, body) = server.send(with_host(host)).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{host}: {body}");
        assert_eq!(error_code(&body), "wrong_host");
        assert!(body.contains("--allowed-hosts"), "{body}");
    }
    // A rebinding page cannot write either.
    let upload = Request::post("/api/snapshots")
        .header(header::HOST, "evil.example:7878")
        .header(header::ORIGIN, "http://evil.example:7878")
        .body(Body::from(fixture()))
        .expect("request");
    assert_eq!(server.send(upload).await.0, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(server.stored(), 0);
    for host in [
        "localhost:7878",
        "LOCALHOST",
        "127.0.0.1:1",
        "[::1]:7878",
        "localhost.",
    ] {
        let (status, _, body) = server.send(with_host(host)).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }

    // Shared on all interfaces: any name, unless --allowed-hosts lists them.
    let open = Server::new(
        SocketAddr::from(([0, 0, 0, 0], 7878)),
        "http://localhost:7878",
        AccessConfig::default(),
    );
    assert_eq!(open.send(with_host("gpu-box:7878")).await.0, StatusCode::OK);
    let listed = Server::new(
        SocketAddr::from(([0, 0, 0, 0], 7878)),
        "https://snap.example.com",
        AccessConfig {
            allowed_hosts: AccessConfig::parse_hosts("gpu-box, GPU-BOX.lan:7878").expect("hosts"),
            ..AccessConfig::default()
        },
    );
    for (host, status) in [
        ("gpu-box:7878", StatusCode::OK),
        ("gpu-box.lan", StatusCode::OK),
        ("snap.example.com", StatusCode::OK),
        ("localhost:7878", StatusCode::OK),
        ("evil.example", StatusCode::MISDIRECTED_REQUEST),
    ] {
        assert_eq!(listed.send(with_host(host)).await.0, status, "{host}");
    }
}

/// The access layer in front of a route that answers with the request's Actor.
async fn actor_of(access: &AccessConfig, headers: &[(&str, &str)]) -> (StatusCode, String) {
    use axum::routing::post;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ServeConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 7878)),
        public_url: "http://127.0.0.1:7878".into(),
        access: access.clone(),
        ..common::server::config_in(dir.path())
    };
    let app = axum::Router::new()
        .route(
            "/who",
            post(
                |axum::Extension(Actor(who)): axum::Extension<Actor>| async move {
                    who.unwrap_or_else(|| "<nobody>".into())
                },
            ),
        )
        .layer(axum::middleware::from_fn_with_state(
            snapview::server::access::Access::new(&config),
            snapview::server::access::check,
        ));
    // From a proxy on this machine: the default --trusted-proxies (loopback).
    let mut request = Request::post("/who").extension(axum::extract::ConnectInfo(
        SocketAddr::from(([127, 0, 0, 1], 40_000)),
    ));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_actor_names_the_token_or_the_proxy_user() {
    let tokens = AccessConfig::parse_tokens(&format!(
        "# who may upload\nalice:{ALICE_TOKEN}\nbob: bob-token-0123456789abcdef\n"
    ))
    .expect("tokens file");
    let access = AccessConfig {
        write_tokens: tokens,
        user_header: Some(header::HeaderName::from_static("x-forwarded-user")),
        ..AccessConfig::default()
    };
    let alice = bearer(ALICE_TOKEN);
    let bob = bearer("bob-token-0123456789abcdef");
    assert_eq!(
        actor_of(&access, &[("authorization", &alice)]).await,
        (StatusCode::OK, "alice".into())
    );
    assert_eq!(
        actor_of(&access, &[("authorization", &bob)]).await,
        (StatusCode::OK, "bob".into())
    );
    // The token's name wins over a header anyone could have set.
    assert_eq!(
        actor_of(
            &access,
            &[("authorization", &alice), ("x-forwarded-user", "mallory")]
        )
        .await,
        (StatusCode::OK, "alice".into())
    );
    assert_eq!(actor_of(&access, &[]).await.0, StatusCode::UNAUTHORIZED);

    // Behind an SSO proxy without tokens: the proxy's user; without the header: nobody.
    let proxied = AccessConfig {
        user_header: Some(header::HeaderName::from_static("x-forwarded-user")),
        ..AccessConfig::default()
    };
    assert_eq!(
        actor_of(&proxied, &[("x-forwarded-user", "carol@example.com")]).await,
        (StatusCode::OK, "carol@example.com".into())
    );
    assert_eq!(
        actor_of(&proxied, &[]).await,
        (StatusCode::OK, "<nobody>".into())
    );
    // An unnamed --write-token: known to be allowed, not who.
    assert_eq!(
        actor_of(
            &with_write_token(),
            &[("authorization", &bearer(WRITE_TOKEN))]
        )
        .await,
        (StatusCode::OK, "<nobody>".into())
    );
}

// ---------------------------------------------------------------------------------------------
// The real binary over TCP.

/// The shared server starter on a fresh data folder, with this file's calls.
struct Served {
    server: common::served::Served,
    port: u16,
}

impl Served {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let server = common::served::Served::builder()
            .args(args)
            .env_remove("SNAPVIEW_TOKEN")
            .envs(env.iter().copied())
            .start();
        let port = server.port;
        Self { server, port }
    }

    fn url(&self) -> String {
        self.server.url("")
    }

    /// Sends raw HTTP/1.1 and returns the status line's code.
    fn raw_status(&self, request: &str) -> u16 {
        use std::io::{Read, Write};
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.write_all(request.as_bytes()).expect("send");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}"))
    }
}

fn snapview(args: &[&str], token: Option<&str>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_snapview"));
    command
        .args(args)
        .env_remove("SNAPVIEW_TOKEN")
        .env_remove("SNAPVIEW_SERVER");
    if let Some(token) = token {
        command.env("SNAPVIEW_TOKEN", token);
    }
    command.output().expect("run snapview")
}

#[test]
fn cli_upload_and_diff_send_snapview_token() {
    let served = Served::start(
        &["--read-token", READ_TOKEN],
        &[("SNAPVIEW_WRITE_TOKEN", WRITE_TOKEN)],
    );
    let url = served.url();
    let file = common::path_of("mempool");
    let file = file.to_str().expect("utf-8 path");

    let without = snapview(&["upload", file, "--server", &url], None);
    assert_eq!(without.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(
        stderr.contains("the server needs a token: set SNAPVIEW_TOKEN (or pass --token)"),
        "{stderr}"
    );

    let wrong = snapview(&["upload", file, "--server", &url], Some(READ_TOKEN));
    assert_eq!(wrong.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("refused the token"), "{stderr}");

    let mut ids = Vec::new();
    for (path, how) in [
        (common::path_of("mempool"), "env"),
        (common::path_of("no_history"), "flag"),
    ] {
        let path = path.to_str().expect("utf-8 path").to_owned();
        let output = if how == "env" {
            snapview(&["upload", &path, "--server", &url], Some(WRITE_TOKEN))
        } else {
            snapview(
                &["upload", &path, "--server", &url, "--token", WRITE_TOKEN],
                None,
            )
        };
        assert!(
            output.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        ids.push(printed.rsplit('/').next().expect("id").to_owned());
    }

    // diff --server reads with the token, and says what is missing without it.
    let diff_args = ["diff", &ids[0], &ids[1], "--server", &url];
    let denied = snapview(&diff_args, None);
    assert_eq!(denied.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("SNAPVIEW_TOKEN"));
    let read = snapview(&diff_args, Some(READ_TOKEN));
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert!(String::from_utf8_lossy(&read.stdout).contains("peak allocated"));
}

#[test]
fn over_tcp_cross_site_and_foreign_hosts_are_refused() {
    let served = Served::start(&[], &[]);
    let port = served.port;
    let body = "x";
    let post = |host: &str, origin: Option<&str>| {
        format!(
            "POST /api/snapshots HTTP/1.1\r\nHost: {host}\r\n{}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            origin.map_or(String::new(), |o| format!("Origin: {o}\r\n")),
            body.len()
        )
    };
    let local = format!("localhost:{port}");
    assert_eq!(
        served.raw_status(&post(&local, Some("https://evil.example"))),
        403
    );
    // Same origin gets through to the upload, which then refuses the body as no snapshot.
    assert_eq!(
        served.raw_status(&post(&local, Some(&format!("http://localhost:{port}")))),
        400
    );
    assert_eq!(served.raw_status(&post(&local, None)), 400);
    let get = |host: &str| format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    assert_eq!(
        served.raw_status(&get(&format!("evil.example:{port}"))),
        421
    );
    assert_eq!(served.raw_status(&get(&local)), 200);
    assert_eq!(served.raw_status(&get(&format!("127.0.0.1:{port}"))), 200);
}

#[test]
fn serve_refuses_weak_or_malformed_access_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice 0123456789abcdef0123\n").expect("write");
    let data = dir.path().join("data");
    let cases: [(&[&str], &str); 5] = [
        (&["--write-token", "short"], "at least 16 characters"),
        (
            &["--tokens-file", tokens.to_str().expect("utf-8")],
            "line 1",
        ),
        (&["--tokens-file", "/nonexistent/tokens"], "cannot read"),
        (&["--user-header", "bad header"], "not a header name"),
        (
            &["--write-token", WRITE_TOKEN, "--read-token", WRITE_TOKEN],
            "also a write token",
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .args(args)
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !stderr.contains(WRITE_TOKEN),
            "the error shows the token: {stderr}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_tokens_file_others_can_read_is_warned_about_and_still_works() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("# uploaders\nalice:{ALICE_TOKEN}\n")).expect("write");
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut served = common::served::Served::builder()
        .data_dir(&dir.path().join("data"))
        .arg("--tokens-file")
        .arg(&tokens)
        .env("RUST_LOG", "snapview=info")
        .start();
    let file = common::path_of("mempool");
    let url = served.url("");
    let output = snapview(
        &["upload", file.to_str().expect("utf-8"), "--server", &url],
        Some(ALICE_TOKEN),
    );
    // Stopped first, so the log holds everything the server wrote.
    let _ = served.child.kill();
    let _ = served.child.wait();
    let stderr = served.log_text();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stderr.contains("readable by other users"), "{stderr}");
    assert!(stderr.contains("writes need a write token"), "{stderr}");
    assert!(
        !stderr.contains(ALICE_TOKEN),
        "the log shows the token: {stderr}"
    );
}
