//! The web server: `snapview serve`.
//!
//! An axum router over a [`Store`](store::Store) (blobs + SQLite) and an
//! [`AnalysisCache`](cache::AnalysisCache). Parsing and analysis run on blocking threads, never
//! on the async workers. Pages are askama templates; assets are embedded and served under
//! hashed names; every response carries a Content-Security-Policy that allows only this origin.

pub mod access;
pub mod api;
pub mod assets;
pub mod cache;
pub mod compare;
pub mod error;
pub mod pages;
pub mod store;
pub mod upload;
pub mod views;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, header};
use axum::routing::get;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

/// A validated `serve` configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub max_upload_bytes: u64,
    /// Memory the analysis cache may use before it drops the least recently used snapshot.
    pub cache_budget_bytes: u64,
    /// `http://host:port` as links should show it.
    pub public_url: String,
    /// Tokens, the trusted user header and the accepted Host names (see `access`).
    pub access: access::AccessConfig,
}

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn store::Store>,
    pub cache: Arc<cache::AnalysisCache>,
    pub config: Arc<ServeConfig>,
}

impl AppState {
    pub fn open(config: ServeConfig) -> Result<Self, store::StoreError> {
        let store = store::FileStore::open(&config.data_dir)?;
        Ok(Self {
            store: Arc::new(store),
            cache: Arc::new(cache::AnalysisCache::new(config.cache_budget_bytes)),
            config: Arc::new(config),
        })
    }
}

/// Only this origin's scripts, styles, images and connections; no plugins, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub fn router(state: AppState) -> Router {
    let upload_limit = usize::try_from(state.config.max_upload_bytes).unwrap_or(usize::MAX);
    let api = Router::new()
        .route(
            "/api/snapshots",
            get(api::list)
                .post(upload::upload)
                // The upload streams to disk and enforces --max-upload itself.
                .layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route(
            "/api/snapshots/{id}",
            get(api::get).delete(api::delete).patch(api::patch),
        )
        .route("/api/snapshots/{id}/raw", get(api::raw))
        .route("/api/snapshots/{id}/timeline", get(views::timeline_view))
        .route(
            "/api/snapshots/{id}/allocations/{n}",
            get(views::allocation),
        )
        .route("/api/snapshots/{id}/flame", get(views::flame_view))
        .route("/api/snapshots/{id}/segments", get(views::segments_view))
        .route("/api/snapshots/{id}/events", get(views::events_view))
        .route("/api/snapshots/{id}/oom", get(compare::oom))
        .route("/api/compare/{a}/{b}", get(compare::compare))
        .route("/api/groups/{name}", get(compare::group));
    Router::new()
        .route("/", get(pages::index))
        .route("/s/{id}", get(pages::snapshot))
        .route("/compare/{a}", get(pages::compare_picker))
        .route("/compare/{a}/{b}", get(pages::compare))
        .route("/g/{name}", get(pages::group))
        .route("/login", get(access::login_form).post(access::login))
        .route("/static/{*path}", get(assets::serve))
        .merge(api)
        .fallback(pages::not_found)
        // Before any handler (and the fallback) runs: Host, cross-site writes, tokens, Actor.
        .layer(axum::middleware::from_fn_with_state(
            access::Access::new(&state.config),
            access::check,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("x-content-type-options"),
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Runs the server until Ctrl-C or SIGTERM; `on_ready` gets the bound address (the port may have
/// been 0).
pub async fn serve(state: AppState, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
