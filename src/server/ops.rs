//! What an operator watches: liveness (`GET /healthz`), readiness (`GET /readyz`) and
//! Prometheus metrics (`GET /metrics`), and the small calls the rest of the server makes to
//! record them.
//!
//! - `/healthz` answers as long as the process serves requests; it touches no store, so a slow
//!   database never gets a replica restarted by its liveness probe. It is open whatever the
//!   tokens (see `access`).
//! - `/readyz` asks the store whether its database and blobs answer ([`Store::readiness`]), on
//!   a blocking thread, for at most [`READINESS_TIMEOUT`]; one check runs at a time, so probes
//!   of a hung database queue behind it instead of filling the blocking pool.
//! - `/metrics` renders what the `metrics` macros recorded, through one Prometheus recorder per
//!   process ([`install`]: idempotent, as tests run many servers in one process).
//!
//! Labels are bounded: a request is counted under its route template (`/api/snapshots/{id}`,
//! never the id), unmatched addresses under [`UNMATCHED`], statuses are the few HTTP codes.

use super::AppState;
use super::error::ApiError;
use super::store::{Store, StoreError};
use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Longest `/readyz` waits for the store's answer before it says the store did not answer
/// (503). Shorter than the usual probe timeouts (Kubernetes: 1 s by default, often raised;
/// load balancers: 5-10 s) would hide a slow store as a timeout of the probe itself.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(5);

/// `Retry-After` of a 503 from `/readyz`, in seconds.
pub const NOT_READY_RETRY_SECONDS: u64 = 5;

/// How often at most `/metrics` sums the stored snapshots' bytes (`snapview_stored_bytes`):
/// the store's listing reads every row, and scrapes come every few seconds from each scraper,
/// while the bytes stored change slowly.
pub const STORED_BYTES_EVERY: Duration = Duration::from_secs(300);

/// The route label of a request no route matched (a 404, or a page the fallback answers).
pub const UNMATCHED: &str = "unmatched";

/// How often the recorder's histograms are drained into their buckets when nothing scrapes
/// them, so that samples do not pile up in memory on a server nobody monitors.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Bucket bounds in seconds. Requests: most answer in milliseconds, a cold view waits for a
/// parse (seconds to minutes). Parses: a small file in tens of milliseconds, the 2.5 GB
/// ten-times file in minutes. Index writes: up to a few seconds per GB on a slow disk.
const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const PARSE_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0,
];
const INDEX_WRITE_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

pub const HTTP_REQUESTS: &str = "snapview_http_requests_total";
pub const HTTP_DURATION: &str = "snapview_http_request_duration_seconds";
pub const UPLOADS_IN_FLIGHT: &str = "snapview_uploads_in_flight";
pub const CACHE_HITS: &str = "snapview_cache_hits_total";
pub const CACHE_MISSES: &str = "snapview_cache_misses_total";
pub const CACHE_BYTES: &str = "snapview_cache_bytes";
pub const PARSE_SECONDS: &str = "snapview_parse_seconds";
pub const INDEX_WRITE_SECONDS: &str = "snapview_index_write_seconds";
pub const STORE_ERRORS: &str = "snapview_store_errors_total";
pub const STORED_BYTES: &str = "snapview_stored_bytes";

/// The process's Prometheus recorder, installed on the first call (later calls return the
/// same); `None` when another recorder was installed first (then nothing is exported here).
pub fn install() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match recorder() {
            Ok(handle) => {
                describe();
                let upkeep = handle.clone();
                let started = std::thread::Builder::new()
                    .name("snapview-metrics-upkeep".into())
                    .spawn(move || {
                        loop {
                            std::thread::sleep(UPKEEP_EVERY);
                            upkeep.run_upkeep();
                        }
                    });
                if let Err(error) = started {
                    tracing::warn!(%error, "cannot start the metrics upkeep thread: histograms are drained only when /metrics is read");
                }
                Some(handle)
            }
            Err(error) => {
                tracing::warn!(%error, "metrics are not recorded: /metrics answers 503");
                None
            }
        })
        .as_ref()
}

fn recorder() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(HTTP_DURATION.into()), REQUEST_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(PARSE_SECONDS.into()), PARSE_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(INDEX_WRITE_SECONDS.into()),
            INDEX_WRITE_BUCKETS,
        )?
        .install_recorder()
}

/// The `# HELP` lines.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by route template and status"
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "Time to answer a request (until its headers are sent), by route template"
    );
    describe_gauge!(UPLOADS_IN_FLIGHT, "Uploads being received now");
    describe_counter!(
        CACHE_HITS,
        "Snapshots asked for and found parsed in memory, by cache"
    );
    describe_counter!(
        CACHE_MISSES,
        "Snapshots asked for and not in memory (a load started), by cache"
    );
    describe_gauge!(
        CACHE_BYTES,
        Unit::Bytes,
        "Bytes held by the cache, by cache"
    );
    describe_histogram!(
        PARSE_SECONDS,
        Unit::Seconds,
        "Time to parse and analyse a snapshot, by source (upload: while its bytes arrive, so including their transfer; stored: a cold load)"
    );
    describe_histogram!(
        INDEX_WRITE_SECONDS,
        Unit::Seconds,
        "Time to write a snapshot's stored index"
    );
    describe_counter!(
        STORE_ERRORS,
        "Store failures answered to a request, by backend and kind of failure"
    );
    describe_gauge!(
        STORED_BYTES,
        Unit::Bytes,
        "Bytes of the live stored snapshots (summed from the store's listing at most every 5 minutes, when /metrics is read)"
    );
}

/// The operations routes: `/healthz`, `/readyz`, `/metrics`.
pub fn routes() -> Router<AppState> {
    let readiness = Arc::new(Semaphore::new(1));
    let stored_bytes = Arc::new(StoredBytes::default());
    Router::new()
        .route("/healthz", get(healthz))
        .route(
            "/readyz",
            get(move |State(state): State<AppState>| {
                let gate = readiness.clone();
                async move { readyz(state.store.clone(), gate).await }
            }),
        )
        .route(
            "/metrics",
            get(move |State(state): State<AppState>| {
                let stored_bytes = stored_bytes.clone();
                async move { metrics_text(state.store.clone(), &stored_bytes).await }
            }),
        )
}

/// `GET /healthz`: the process serves requests.
async fn healthz() -> Response {
    axum::Json(serde_json::json!({"status": "ok"})).into_response()
}

/// What a readiness check found: each check by name with `Ok` or why it failed.
pub type Checks = Vec<(&'static str, Result<(), String>)>;

/// Runs `check` on a blocking thread, one at a time (`gate`), for at most `limit` (waiting
/// for the gate included). A check that outlives `limit` keeps the gate until it ends, so a
/// hung store holds one blocking thread, not one per probe.
pub async fn check_within(
    gate: Arc<Semaphore>,
    limit: Duration,
    check: impl FnOnce() -> Checks + Send + 'static,
) -> Checks {
    let run = async move {
        let permit = gate.acquire_owned().await;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            check()
        })
        .await
    };
    match tokio::time::timeout(limit, run).await {
        Ok(Ok(checks)) => checks,
        Ok(Err(failed)) => vec![("store", Err(format!("the check failed: {failed}")))],
        Err(_) => vec![(
            "store",
            Err(format!(
                "the store did not answer within {} s",
                limit.as_secs_f64()
            )),
        )],
    }
}

/// `GET /readyz`: 200 when every check passes, else 503 with each failure's reason and
/// `Retry-After`.
async fn readyz(store: Arc<dyn Store>, gate: Arc<Semaphore>) -> Response {
    let checks = check_within(gate, READINESS_TIMEOUT, move || store.readiness()).await;
    readiness_answer(&checks)
}

/// The answer to a readiness check: `{"status": "ready"|"not_ready", "checks": {name: "ok" |
/// reason}}`.
pub fn readiness_answer(checks: &Checks) -> Response {
    let ready = checks.iter().all(|(_, result)| result.is_ok());
    let named: serde_json::Map<String, serde_json::Value> = checks
        .iter()
        .map(|(name, result)| {
            let said = match result {
                Ok(()) => "ok".to_owned(),
                Err(reason) => reason.clone(),
            };
            ((*name).to_owned(), serde_json::Value::String(said))
        })
        .collect();
    let body = serde_json::json!({
        "status": if ready { "ready" } else { "not_ready" },
        "checks": named,
    });
    if ready {
        return axum::Json(body).into_response();
    }
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|(name, result)| result.as_ref().err().map(|why| format!("{name}: {why}")))
        .collect();
    tracing::warn!(failed = %failed.join("; "), "not ready");
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(NOT_READY_RETRY_SECONDS),
    );
    response
}

/// When `snapview_stored_bytes` was last summed, and the one sum that may run at a time.
struct StoredBytes {
    last: Mutex<Option<Instant>>,
    running: Arc<Semaphore>,
}

impl Default for StoredBytes {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
            running: Arc::new(Semaphore::new(1)),
        }
    }
}

impl StoredBytes {
    /// Whether a sum is due at `now` (none yet, or the last one [`STORED_BYTES_EVERY`] ago);
    /// marks it started when it is.
    fn due(&self, now: Instant) -> bool {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let due = last.is_none_or(|at| now.duration_since(at) >= STORED_BYTES_EVERY);
        if due {
            *last = Some(now);
        }
        due
    }
}

/// `GET /metrics`: the Prometheus text, with `snapview_stored_bytes` summed first when due.
async fn metrics_text(store: Arc<dyn Store>, stored_bytes: &StoredBytes) -> Response {
    let Some(handle) = install() else {
        return ApiError::internal(
            "answering /metrics",
            "another metrics recorder was installed in this process",
        )
        .into_response();
    };
    if stored_bytes.due(Instant::now()) {
        // A semaphore of its own (not the readiness gate): a sum never runs twice at once,
        // and one that outlives the wait below still sets the gauge when it ends.
        if let Ok(permit) = stored_bytes.running.clone().try_acquire_owned() {
            let sum = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                match store.listing() {
                    Ok(listing) => {
                        let bytes: u64 = listing.records.iter().map(|r| r.size_bytes).sum();
                        metrics::gauge!(STORED_BYTES).set(bytes as f64);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "summing the stored bytes for /metrics failed");
                    }
                }
            });
            // Not waited for past the readiness bound: the scrape answers with the last sum.
            let _ = tokio::time::timeout(READINESS_TIMEOUT, sum).await;
        }
    }
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// The metrics layer: every request counted by route template and status, and timed.
pub async fn record_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |path| path.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!(HTTP_DURATION, "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!(HTTP_REQUESTS, "route" => route, "status" => status).increment(1);
    response
}

/// Counts an upload being received while it lives (`snapview_uploads_in_flight`).
pub struct UploadInFlight(());

impl UploadInFlight {
    pub fn begin() -> Self {
        metrics::gauge!(UPLOADS_IN_FLIGHT).increment(1.0);
        Self(())
    }
}

impl Drop for UploadInFlight {
    fn drop(&mut self) {
        metrics::gauge!(UPLOADS_IN_FLIGHT).decrement(1.0);
    }
}

/// Times a parse (`snapview_parse_seconds{source}`) until dropped, failed parses included.
pub struct ParseTimer {
    source: &'static str,
    started: Instant,
}

impl ParseTimer {
    /// `source`: `upload` or `stored` (a cold load).
    pub fn start(source: &'static str) -> Self {
        Self {
            source,
            started: Instant::now(),
        }
    }
}

impl Drop for ParseTimer {
    fn drop(&mut self) {
        metrics::histogram!(PARSE_SECONDS, "source" => self.source)
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// A stored index was written in `took`.
pub fn index_written(took: Duration) {
    metrics::histogram!(INDEX_WRITE_SECONDS).record(took.as_secs_f64());
}

/// A lookup in the cache `kind` found what it asked for in memory (`hit`) or started a load.
pub fn cache_lookup(kind: &'static str, hit: bool) {
    if hit {
        metrics::counter!(CACHE_HITS, "kind" => kind).increment(1);
    } else {
        metrics::counter!(CACHE_MISSES, "kind" => kind).increment(1);
    }
}

/// The cache `kind` holds `bytes` now.
pub fn cache_bytes(kind: &'static str, bytes: u64) {
    metrics::gauge!(CACHE_BYTES, "kind" => kind).set(bytes as f64);
}

/// The backends' kinds, `(metadata, blobs)`, of the store this process serves, for the
/// `backend` label of store errors (which are counted where the store is out of reach).
static STORE_KINDS: OnceLock<(&'static str, &'static str)> = OnceLock::new();

/// Remembers the store's kinds for [`store_error`]; the first store opened in the process
/// names them (a server opens one).
pub fn set_store_kinds(kinds: (&'static str, &'static str)) {
    let _ = STORE_KINDS.set(kinds);
}

/// Counts a store failure answered to a request (`snapview_store_errors_total{backend,op}`):
/// `backend` is the store's metadata or blobs kind (`sqlite`, `postgres`, `folder`, `s3`; `store`
/// before one is known), `op` the kind of failure (`query`, `io`, `decode`, `unavailable`,
/// `remote`).
pub fn store_error(error: &StoreError) {
    let (backend, op) = store_error_labels(error, STORE_KINDS.get().copied());
    metrics::counter!(STORE_ERRORS, "backend" => backend, "op" => op).increment(1);
}

/// The labels [`store_error`] counts `error` under.
pub fn store_error_labels(
    error: &StoreError,
    kinds: Option<(&'static str, &'static str)>,
) -> (&'static str, &'static str) {
    let (metadata, blobs) = kinds.unwrap_or(("store", "store"));
    // A remote failure names what failed in words (`PostgreSQL`, `object storage`...).
    let backend_of = |what: &str| {
        let what = what.to_ascii_lowercase();
        let names_metadata = ["database", "postgres", "sqlite", "metadata"]
            .iter()
            .any(|word| what.contains(word));
        if names_metadata { metadata } else { blobs }
    };
    match error {
        StoreError::Database(_) => (metadata, "query"),
        StoreError::Json(_) => (metadata, "decode"),
        StoreError::Io(_) => (blobs, "io"),
        StoreError::Config(_) => ("store", "config"),
        StoreError::Unavailable { what, .. } => (backend_of(what), "unavailable"),
        StoreError::Remote { what, .. } => (backend_of(what), "remote"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_check_times_out_and_holds_one_thread_only() {
        let gate = Arc::new(Semaphore::new(1));
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let counted = runs.clone();
        let limit = Duration::from_millis(100);
        let first = check_within(gate.clone(), limit, move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = hold.recv();
            vec![("database", Ok(()))]
        })
        .await;
        assert_eq!(first.len(), 1);
        let (name, result) = &first[0];
        assert_eq!(*name, "store");
        let reason = result.as_ref().expect_err("timed out");
        assert!(reason.contains("did not answer within 0.1 s"), "{reason}");
        // The hung check still holds the gate: the next one waits and times out without
        // running (no second blocking thread).
        let counted = runs.clone();
        let second = check_within(gate.clone(), limit, move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            vec![("database", Ok(()))]
        })
        .await;
        assert!(second[0].1.is_err());
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Once it ends, checks run again.
        drop(release);
        let third = check_within(gate, Duration::from_secs(10), || {
            vec![("database", Ok(())), ("blobs", Err("gone".into()))]
        })
        .await;
        assert_eq!(third.len(), 2);
        let response = readiness_answer(&third);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(NOT_READY_RETRY_SECONDS))
        );
    }

    #[test]
    fn stored_bytes_are_summed_at_most_every_interval() {
        let stored = StoredBytes::default();
        let start = Instant::now();
        assert!(stored.due(start), "the first scrape sums");
        assert!(!stored.due(start + Duration::from_secs(1)));
        assert!(!stored.due(start + STORED_BYTES_EVERY - Duration::from_millis(1)));
        assert!(stored.due(start + STORED_BYTES_EVERY));
    }

    #[test]
    fn store_errors_are_labelled_by_backend_and_kind() {
        let kinds = Some(("postgres", "s3"));
        let unavailable = |what| StoreError::Unavailable {
            what,
            reason: "connection refused".into(),
        };
        assert_eq!(
            store_error_labels(&unavailable("object storage"), kinds),
            ("s3", "unavailable")
        );
        assert_eq!(
            store_error_labels(&unavailable("the database"), kinds),
            ("postgres", "unavailable")
        );
        assert_eq!(
            store_error_labels(&StoreError::Io(std::io::Error::other("x")), None),
            ("store", "io")
        );
        assert_eq!(
            store_error_labels(
                &StoreError::Database(rusqlite::Error::InvalidQuery),
                Some(("sqlite", "folder"))
            ),
            ("sqlite", "query")
        );
    }
}
