//! The web server: `snapview serve`.
//!
//! An axum router over a [`Store`](store::Store) (blobs + SQLite) and an
//! [`AnalysisCache`](cache::AnalysisCache). Parsing and analysis run on blocking threads, never
//! on the async workers. Pages are askama templates; assets are embedded and served under
//! hashed names; every response carries a Content-Security-Policy that allows only this origin.

pub mod access;
pub mod analysed;
pub mod api;
pub mod assets;
pub mod budget;
pub mod cache;
pub mod compare;
pub mod connections;
pub mod error;
pub mod extract;
pub mod framing;
pub mod groups;
pub mod lease;
pub mod oom;
pub mod ops;
pub mod pages;
pub mod refusals;
pub mod role_rules;
pub mod store;
pub mod stored_index;
pub mod upload;
pub mod views;
pub mod wire;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, header};
use axum::routing::{get, post};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{DefaultPredicate, NotForContentType, Predicate};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
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
    /// How long a deleted snapshot stays in the trash (restorable) before it is removed for good.
    pub trash_days: u32,
    /// Rebuild the index from the stored blobs at start (`--reindex`).
    pub reindex: bool,
    /// Metadata in PostgreSQL at this URL (`--database`); `None`: SQLite in the data folder.
    pub database: Option<String>,
    /// Blobs in object storage at this `s3://bucket/prefix` (`--blobs`); `None`: the data
    /// folder.
    pub blobs: Option<String>,
    /// The local cache of remote blobs and indexes (`--cache-dir`); `None`: `DATA_DIR/cache`.
    pub cache_dir: Option<PathBuf>,
    /// Bytes that cache may hold (`--cache-size`).
    pub cache_size_bytes: u64,
    /// What slow or idle clients may hold, and for how long.
    pub limits: ConnectionLimits,
    /// Tokens, the trusted user header and the accepted Host names (see `access`).
    pub access: access::AccessConfig,
    /// Role rules for every snapshot (`serve --roles`, docs/roles.md): shared by the threads
    /// that load snapshots, so behind an `Arc`.
    pub roles: std::sync::Arc<crate::analysis::roles::UserRules>,
    /// What `POST /api/snapshots/import` may fetch, and for how long (`--import-allow`,
    /// `--import-timeout`).
    pub import: upload::import::ImportConfig,
}

impl ServeConfig {
    /// The trash's retention in milliseconds.
    pub fn trash_ms(&self) -> i64 {
        i64::from(self.trash_days) * 86_400_000
    }

    /// Where the store's backends are.
    pub fn store_options(&self) -> store::StoreOptions {
        store::StoreOptions {
            data_dir: self.data_dir.clone(),
            database: self.database.clone(),
            blobs: self.blobs.clone(),
            cache_dir: self.cache_dir.clone(),
            cache_bytes: self.cache_size_bytes,
        }
    }
}

/// Bounds on what clients can hold, so that no number of slow or stalled clients stops the
/// server from answering (`snapview serve --max-connections` and friends).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Open connections at most; past it a connection waiting on its client makes room for a
    /// new one, else the new one is answered 503 and closed (see `connections`).
    pub max_connections: usize,
    /// Open connections from one client address (the TCP peer) at most; 0: no limit.
    pub max_connections_per_client: usize,
    /// Uploads received at once at most; past it an upload is answered 503 with Retry-After.
    /// Each holds a parser thread and a parsed snapshot in memory while its bytes arrive.
    pub max_uploads: usize,
    /// Uploads received at once from one client address at most; 0: no limit.
    pub max_uploads_per_client: usize,
    /// Bytes per second an upload must arrive at, on average over the time spent waiting for
    /// it, once that time passes the grace (`upload::UPLOAD_RATE_GRACE`); 0: no minimum.
    pub min_upload_rate: u64,
    /// Time a client has to send a request's headers, and the longest a kept-alive connection
    /// may sit idle between requests.
    pub header_timeout: Duration,
    /// Longest wait for the next bytes of a request body before the request is dropped (408).
    pub body_timeout: Duration,
    /// Longest a response may wait for its client to accept any of its bytes before the
    /// connection is dropped.
    pub send_timeout: Duration,
    /// Bytes per second a client must accept of what it keeps the server waiting on, once that
    /// wait passes the grace (`connections::SEND_RATE_GRACE`); 0: no minimum.
    pub min_send_rate: u64,
    /// After SIGTERM or Ctrl-C, how long requests in flight may take before the server exits.
    pub shutdown_grace: Duration,
    /// Memory that parses and re-analyses in flight may hold together (`--parse-memory`, see
    /// `budget.rs`); what stays loaded afterwards is the cache's (`--cache`).
    pub parse_memory_bytes: u64,
    /// Trace events one snapshot may hold (`--max-events`); past it an upload is refused (413).
    pub max_events: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_client: 64,
            max_uploads: 8,
            max_uploads_per_client: 4,
            min_upload_rate: 64 * 1024,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(30),
            min_send_rate: 16 * 1024,
            shutdown_grace: Duration::from_secs(5),
            parse_memory_bytes: DEFAULT_PARSE_MEMORY_BYTES,
            max_events: crate::snapshot::DEFAULT_MAX_EVENTS,
        }
    }
}

/// `--parse-memory`'s default: room for the largest snapshot `--max-events` allows (50M events,
/// 4.8 GB at [`budget::BYTES_PER_EVENT`]), or for the ten-times file (32M events, 3.1 GB) with
/// a few small uploads beside it.
pub const DEFAULT_PARSE_MEMORY_BYTES: u64 = 5 << 30;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn store::Store>,
    pub cache: Arc<cache::AnalysisCache>,
    pub config: Arc<ServeConfig>,
    /// One permit per upload being received (`--max-uploads`).
    pub upload_slots: Arc<tokio::sync::Semaphore>,
    /// Uploads being received per client address (`--max-uploads-per-client`).
    pub client_upload_slots: Arc<upload::ClientSlots>,
    /// Stored index writes in flight, which a graceful shutdown waits for.
    pub index_writes: Arc<stored_index::IndexWrites>,
    /// The memory parses and re-analyses in flight share (`--parse-memory`).
    pub parse_budget: Arc<budget::ParseBudget>,
    /// Rules changes waiting for their snapshot's re-analysis (`role_rules.rs`).
    pub rules_queue: Arc<role_rules::RulesQueue>,
    /// Writes refused with 401/403, counted for the audit log.
    pub refusals: Arc<refusals::RefusedWrites>,
}

impl AppState {
    pub fn open(config: ServeConfig) -> Result<Self, store::StoreError> {
        let store = store::open(&config.store_options())?;
        let report = store.start_up(config.reindex, config.trash_ms(), &summarize_blob)?;
        let (metadata, blobs) = store::Store::kinds(&store);
        tracing::info!(
            metadata,
            blobs,
            reindexed = report.reindexed,
            unreadable_blobs = report.unreadable_blobs.len(),
            orphans_removed = report.orphans_removed,
            summaries_repaired = report.summaries_repaired,
            purged = report.purge.purged.len(),
            indexes_removed = report.indexes_removed,
            "the store is consistent"
        );
        let store: Arc<dyn store::Store> = Arc::new(store);
        // Before anything is recorded (the files `serve` imports at start included).
        ops::install();
        ops::set_store_kinds(store.kinds());
        Ok(Self {
            refusals: Arc::new(refusals::RefusedWrites::new(store.clone())),
            store,
            cache: Arc::new(cache::AnalysisCache::new(config.cache_budget_bytes)),
            upload_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.max_uploads)),
            client_upload_slots: Arc::new(upload::ClientSlots::new(
                config.limits.max_uploads_per_client,
            )),
            index_writes: Arc::default(),
            parse_budget: Arc::new(budget::ParseBudget::new(config.limits.parse_memory_bytes)),
            rules_queue: Arc::default(),
            config: Arc::new(config),
        })
    }
}

/// A stored blob's summary row, parsed and analysed again (to rebuild the index).
fn summarize_blob(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let (snapshot, seed) =
        crate::analysis::load_path(path, Default::default()).map_err(|e| e.to_string())?;
    let analysis = crate::analysis::Analysis::seeded(&snapshot, seed);
    let summary = crate::analysis::Summary::new(&snapshot, &analysis);
    Ok(wire::SummaryRow::new(&summary).to_stored())
}

/// How often the trash is checked for snapshots past `--trash-days` (also done at start).
const TRASH_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// How long the lease of a periodic job lives unless renewed (it is renewed every third of
/// it while the job runs, see `lease::HeldLease`): past anything one round of a job takes in
/// one step, and the longest the jobs stop for after a replica running one dies.
const PERIODIC_LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// Empties the trash by age, forever (the task is aborted when the server stops), on one
/// replica at a time: each round takes the lease `purge` and is skipped when another replica
/// holds it. Snapshots purged leave this replica's cache; another replica's cache may keep one
/// until it is evicted, but every request looks the record up first, so it answers 404 at once.
async fn empty_trash_periodically(state: AppState) {
    // The first tick is immediate, and start-up has just emptied the trash.
    run_periodically(state, "purge", TRASH_CHECK_EVERY, false, |state| {
        let cutoff = store::now_ms() - state.config.trash_ms();
        match state.store.purge_trashed_before(cutoff, None) {
            Ok(purge) => {
                for id in &purge.purged {
                    state.cache.remove(id);
                }
                for (id, error) in &purge.failed {
                    tracing::warn!(%id, %error, "a trashed snapshot could not be purged; trying again next time");
                }
            }
            Err(error) => tracing::warn!(%error, "emptying the trash failed"),
        }
    })
    .await;
}

/// Runs `job` on a blocking thread every `every` (at once too when `at_start`), forever, each
/// round under the lease `lease` (see [`under_lease`]): the store's background work runs on one
/// replica at a time. A periodic job that calls store methods goes through here.
async fn run_periodically(
    state: AppState,
    lease: &'static str,
    every: Duration,
    at_start: bool,
    job: fn(&AppState),
) {
    let mut ticks = tokio::time::interval(every);
    // A round that took long (or a suspended machine) does not make the next ones run back to
    // back.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if !at_start {
        ticks.tick().await;
    }
    loop {
        ticks.tick().await;
        let round = state.clone();
        let store = state.store.clone();
        let ran = error::blocking(move || {
            under_lease(&store, lease, PERIODIC_LEASE_TTL, || job(&round));
        })
        .await;
        if let Err(error) = ran {
            tracing::warn!(lease, %error, "a periodic job failed");
        }
    }
}

/// Runs `job` holding the lease `name` (renewed while it runs, released after); skips it when
/// another replica holds the lease, or the store cannot be asked (the next round tries again).
/// True when it ran.
fn under_lease(
    store: &Arc<dyn store::Store>,
    name: &str,
    ttl: Duration,
    job: impl FnOnce(),
) -> bool {
    match lease::HeldLease::try_take(store, name, ttl) {
        Ok(Some(_held)) => {
            job();
            true
        }
        Ok(None) => {
            tracing::debug!(
                lease = name,
                "another server is doing this periodic job now: skipped here"
            );
            false
        }
        Err(error) => {
            tracing::warn!(lease = name, %error, "the lease of a periodic job cannot be taken: skipped this time");
            false
        }
    }
}

pub fn router(state: AppState) -> Router {
    let upload_limit = usize::try_from(state.config.max_upload_bytes).unwrap_or(usize::MAX);
    let framing = &state.config.access.frame_ancestors;
    let (content_security_policy, x_frame_options) =
        (framing.content_security_policy(), framing.x_frame_options());
    let body_timeout = state.config.limits.body_timeout;
    let api = Router::new()
        .route(
            "/api/snapshots",
            get(api::list)
                .post(upload::upload)
                // The upload streams to disk and enforces --max-upload itself.
                .layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route(
            "/api/snapshots/import",
            post(upload::import::import)
                // The request is a small JSON body; the import's own bytes come from its source.
                .layer::<_, std::convert::Infallible>(RequestBodyTimeoutLayer::new(body_timeout))
                .layer(DefaultBodyLimit::max(
                    upload::import::MAX_IMPORT_REQUEST_BYTES,
                )),
        )
        .route(
            "/api/snapshots/{id}",
            get(api::get)
                .delete(api::delete)
                .patch(api::patch)
                // A PATCH body that stops arriving must not hold its connection forever (the
                // upload has its own, per-chunk, timeout).
                .layer(RequestBodyTimeoutLayer::new(body_timeout)),
        )
        .route("/api/snapshots/{id}/restore", post(api::restore))
        .route("/api/snapshots/{id}/raw", get(api::raw))
        .route("/api/snapshots/{id}/status", get(api::status))
        .route("/api/snapshots/{id}/timeline", get(views::timeline_view))
        .route(
            "/api/snapshots/{id}/timeline/column",
            get(views::timeline_column_view),
        )
        .route("/api/snapshots/{id}/roles", get(views::roles_view))
        .route(
            "/api/snapshots/{id}/rules",
            get(role_rules::get_rules)
                .put(role_rules::put_rules)
                .delete(role_rules::delete_rules)
                .layer::<_, std::convert::Infallible>(RequestBodyTimeoutLayer::new(body_timeout))
                // Past the rules file's cap is a 413 before any of it is kept.
                .layer(DefaultBodyLimit::max(
                    crate::analysis::roles::MAX_RULES_FILE_BYTES,
                )),
        )
        .route(
            "/api/snapshots/{id}/allocations/{n}",
            get(views::allocation),
        )
        .route("/api/snapshots/{id}/flame", get(views::flame_view))
        .route("/api/snapshots/{id}/segments", get(views::segments_view))
        .route("/api/snapshots/{id}/history", get(views::history_view))
        .route(
            "/api/snapshots/{id}/segment-timeline",
            get(views::segment_timeline_view),
        )
        .route("/api/snapshots/{id}/events", get(views::events_view))
        .route("/api/snapshots/{id}/events/{index}", get(views::event_view))
        .route("/api/snapshots/{id}/oom", get(oom::oom))
        .route("/api/compare/{a}/{b}", get(compare::compare))
        .route(
            "/api/compare/{a}/{b}/torch.txt",
            get(compare::torch_compare_text),
        )
        .route("/api/groups/{name}", get(groups::group))
        .route("/api/audit", get(api::audit));
    Router::new()
        .route("/", get(pages::index))
        .route("/s/{id}", get(pages::snapshot))
        .route("/compare/{a}", get(pages::compare_picker))
        .route("/compare/{a}/{b}", get(pages::compare))
        .route("/g/{name}", get(pages::group))
        .route("/login", get(access::login_form).post(access::login))
        .route("/static/{*path}", get(assets::serve))
        .merge(api)
        // /healthz, /readyz, /metrics.
        .merge(ops::routes())
        .fallback(pages::not_found)
        // Before any handler (and the fallback) runs: Host, cross-site writes, tokens, Actor.
        .layer(axum::middleware::from_fn_with_state(
            access::Access::new(&state.config).recording_refusals(state.refusals.clone()),
            access::check,
        ))
        // Outside every handler and the access layer: the framework's own refusals too.
        .layer(axum::middleware::from_fn(error::every_error_as_json))
        // Only this origin's scripts, styles, images and connections; no plugins; framed only
        // by --frame-ancestors.
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            content_security_policy,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            x_frame_options,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("x-content-type-options"),
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        // gzip or brotli as the client accepts, for JSON, pages and assets. Not for the stored
        // snapshot files (`/raw`, octet-stream): mostly compressed already, and their download
        // keeps its exact Content-Length.
        .layer(CompressionLayer::new().compress_when(
            DefaultPredicate::new().and(NotForContentType::const_new("application/octet-stream")),
        ))
        // A 5xx is logged once, with its details and reference, by `error::every_error_as_json`;
        // the trace layer's own failure line would only repeat it.
        .layer(TraceLayer::new_for_http().on_failure(()))
        // Outermost, so a request is timed and counted with the status it left with. A
        // `Router::layer` runs after routing: the route template (`MatchedPath`) is there.
        .layer(axum::middleware::from_fn(ops::record_request))
        .with_state(state)
}

/// Runs the server until Ctrl-C or SIGTERM (`signals`), then gives the requests in flight
/// `--shutdown-grace` to finish, and the stored index writes in flight up to
/// [`stored_index::INDEX_WRITE_GRACE`] (a second Ctrl-C or SIGTERM stops waiting), and returns.
pub async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    mut signals: StopSignals,
) -> std::io::Result<()> {
    let limits = state.config.limits.clone();
    let index_writes = state.index_writes.clone();
    let trash = tokio::spawn(empty_trash_periodically(state.clone()));
    let refusals = state.refusals.clone();
    let counting = tokio::spawn(refusals::flush_periodically(refusals.clone()));
    let served = connections::serve(listener, router(state), &limits, signals.next()).await;
    trash.abort();
    counting.abort();
    // The refused writes of the last seconds.
    if let Err(error) = error::blocking(move || refusals.flush()).await {
        tracing::warn!(%error, "recording refused writes failed");
    }
    tokio::select! {
        _ = index_writes.finish(stored_index::INDEX_WRITE_GRACE) => {},
        () = signals.next() => {
            tracing::warn!("asked again to stop: not waiting for the stored index writes");
        },
    }
    served
}

/// Ctrl-C and SIGTERM, listened for from the moment this is made. The server makes it before it
/// says where it serves: a signal sent as soon as that line is read then stops it gracefully,
/// where before a listener exists the signal's default action kills it mid-write.
pub struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening (inside the runtime).
    pub fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The next Ctrl-C or SIGTERM (one received since the last call counts).
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {},
            _ = self.terminate.recv() => {},
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_periodic_job_runs_on_one_replica_at_a_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a: Arc<dyn store::Store> =
            Arc::new(store::open(&store::StoreOptions::local(dir.path())).expect("a"));
        let b: Arc<dyn store::Store> =
            Arc::new(store::open(&store::StoreOptions::local(dir.path())).expect("b"));
        let ttl = Duration::from_secs(60);
        let mut ran_on_b = false;
        // While a's round runs, b's is skipped.
        let ran_on_a = under_lease(&a, "purge", ttl, || {
            ran_on_b = under_lease(&b, "purge", ttl, || {});
        });
        assert!(ran_on_a);
        assert!(!ran_on_b, "skipped while a holds the lease");
        // Released after a's round: b's next round runs.
        assert!(under_lease(&b, "purge", ttl, || {}));
    }
}
