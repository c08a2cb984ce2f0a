//! A server on a temporary data folder, driven through its router without sockets.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use snapview::server::{AppState, ServeConfig, router};
use std::net::SocketAddr;
use std::path::Path;
use tower::ServiceExt;

/// The configuration tests start from: loopback, the defaults of `snapview serve`, data in
/// `data_dir`, links to `http://snapview.test`; on the shared backend
/// (`SNAPVIEW_TEST_BACKEND=shared`), the database and prefix of `data_dir` (see
/// `common::backend`: the same ones for every server on that folder).
pub fn config_in(data_dir: &Path) -> ServeConfig {
    let shared = super::backend::shared_backend_for(data_dir);
    ServeConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: data_dir.to_owned(),
        max_upload_bytes: 1 << 32,
        cache_budget_bytes: 1 << 32,
        public_url: "http://snapview.test".into(),
        trash_days: 7,
        reindex: false,
        database: shared.as_ref().map(|shared| shared.database_url.clone()),
        blobs: shared.as_ref().map(|shared| shared.blobs_url.clone()),
        cache_dir: None,
        cache_size_bytes: snapview::server::store::DEFAULT_CACHE_BYTES,
        limits: Default::default(),
        access: Default::default(),
        roles: Default::default(),
        import: Default::default(),
    }
}

pub struct TestServer {
    pub state: AppState,
    /// The data folder, when this server owns it (removed with it).
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    pub fn new() -> Self {
        Self::with_limit(1 << 32)
    }

    pub fn with_limit(max_upload_bytes: u64) -> Self {
        Self::with_config(|config| config.max_upload_bytes = max_upload_bytes)
    }

    /// A server whose configuration is [`config_in`]'s, changed by `edit`.
    pub fn with_config(edit: impl FnOnce(&mut ServeConfig)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = config_in(dir.path());
        edit(&mut config);
        Self {
            state: AppState::open(config).expect("open"),
            _dir: Some(dir),
        }
    }

    /// A server over `state`, whose data folder the caller keeps (to restart on it).
    pub fn on_state(state: AppState) -> Self {
        Self { state, _dir: None }
    }

    pub async fn send(&self, request: Request<Body>) -> (StatusCode, Vec<u8>, HeaderMap) {
        let response = router(self.state.clone())
            .oneshot(request)
            .await
            .expect("response");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, body.to_vec(), headers)
    }

    /// `GET path`, whatever it answers.
    pub async fn send_get(&self, path: &str) -> (StatusCode, Vec<u8>, HeaderMap) {
        self.send(Request::get(path).body(Body::empty()).expect("request"))
            .await
    }

    /// Status and JSON body (`Null` when the body is not JSON).
    pub async fn call(&self, request: Request<Body>) -> (StatusCode, serde_json::Value) {
        let (status, body, _) = self.send(request).await;
        (
            status,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// `GET path`, which must answer 200 with JSON.
    pub async fn get(&self, path: &str) -> serde_json::Value {
        let (status, json) = self
            .call(Request::get(path).body(Body::empty()).expect("req"))
            .await;
        assert_eq!(status, StatusCode::OK, "{path}: {json}");
        json
    }

    /// Uploads raw bytes; `query` starts with `?` or is empty.
    pub async fn upload(&self, bytes: Vec<u8>, query: &str) -> (StatusCode, serde_json::Value) {
        let request = Request::post(format!("/api/snapshots{query}"))
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Body::from(bytes))
            .expect("request");
        self.call(request).await
    }

    /// Uploads a corpus fixture by name and returns its id; `extra` is more query (`&group=…`).
    pub async fn upload_fixture(&self, name: &str, extra: &str) -> String {
        let bytes = std::fs::read(super::path_of(name)).expect("fixture");
        let (status, json) = self
            .upload(bytes, &format!("?filename={name}.pickle{extra}"))
            .await;
        assert!(status.is_success(), "{json}");
        json["id"].as_str().expect("id").to_owned()
    }
}

pub fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("json: {}", String::from_utf8_lossy(body)))
}
