//! One error type for the HTTP API, mapped exhaustively to status codes and to the one error
//! shape every endpoint uses: `{"error": {"code": "...", "message": "..."}}`.
//!
//! What a client sees is [`ApiError::public`]: a server-side failure ([`ApiError::Internal`])
//! answers only "internal error" and a reference, because its details (paths in the data
//! folder, SQLite's words) are for the operator, not for whoever sent the request. The error
//! carries what failed and its source; the answer made from it carries them on (a
//! [`LogCause`] in the response's extensions), and one layer, [`every_error_as_json`], the
//! outermost, logs them once with the same reference.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no snapshot with id {0}")]
    SnapshotNotFound(String),
    /// An allocation index past the end of the device's replay.
    #[error("snapshot {snapshot} has no allocation {index} on cuda:{device}")]
    AllocationNotFound {
        snapshot: String,
        index: u32,
        device: usize,
    },
    #[error("no snapshot is in the group {0:?}")]
    GroupNotFound(String),
    /// An address no route or page answers.
    #[error("nothing is at {0}")]
    PageNotFound(String),
    /// It was here: deleted (in the trash) or its file is lost; the message says what to do.
    #[error("{0}")]
    Gone(String),
    #[error("{0:?} is not a snapshot id (ids are 16 hex digits)")]
    BadId(String),
    #[error("{0}")]
    BadRequest(String),
    /// The upload is not a readable snapshot; the message is the reader's.
    #[error("{0}")]
    NotASnapshot(String),
    #[error("the upload is larger than this server's limit of {limit} bytes (--max-upload)")]
    TooLarge { limit: u64 },
    /// The client stopped sending its body for longer than `--body-timeout`.
    #[error(
        "the upload stalled: no bytes arrived for {} s (--body-timeout)",
        .0.as_secs_f64()
    )]
    BodyStalled(Duration),
    /// The upload arrived slower than `--min-upload-rate` once past its grace.
    #[error(
        "the upload was too slow: {received} bytes in {} s of waiting for it, below this server's minimum of {min_bytes_per_second} bytes/s (--min-upload-rate)",
        .waited.as_secs()
    )]
    UploadTooSlow {
        received: u64,
        waited: Duration,
        min_bytes_per_second: u64,
    },
    /// Every upload slot is taken (`--max-uploads`); the client should retry after a while.
    #[error("the server is receiving {0} uploads already (--max-uploads); retry in a few seconds")]
    Busy(usize),
    /// The snapshot's trace holds more events than `--max-events`.
    #[error("the trace has more than {0} events (--max-events)")]
    TooManyEvents(u64),
    /// The memory parses in flight share (`--parse-memory`) is held by others; the client
    /// should retry after a while. The message says so.
    #[error("{0}")]
    ParseBusy(String),
    /// Reading this one snapshot needs more than all of `--parse-memory`.
    #[error("{0}")]
    TooMuchMemory(String),
    /// This client address holds all its upload slots (`--max-uploads-per-client`).
    #[error(
        "this client address is sending {0} uploads already (--max-uploads-per-client); retry when one is done"
    )]
    ClientBusy(usize),
    /// No token, or one that does not grant what the request wants.
    #[error("{0}")]
    Unauthorized(String),
    /// A write sent by another site's page.
    #[error("{0}")]
    Forbidden(String),
    /// A Host this server does not answer to (DNS rebinding).
    #[error("{0}")]
    WrongHost(String),
    /// The `--user-header` sent by a peer that is not one of `--trusted-proxies`.
    #[error("{0}")]
    UntrustedHeader(String),
    /// An edit that met a delete: nothing changed, the message says what happened.
    #[error("{0}")]
    Conflict(String),
    /// The server's disk is full: nothing was stored, and the operator must make room. Said
    /// plainly (it names no path) because the uploader can do nothing else about it.
    #[error(
        "the server's disk is full, so the upload was not stored (nothing else changed); tell whoever runs this server"
    )]
    DiskFull,
    /// A remote backend (the database, object storage) cannot be reached now: the client may
    /// retry (503 with `Retry-After`); `/readyz` says the same to the load balancer.
    #[error("{what} is unavailable: {reason}; try again shortly")]
    StorageUnavailable { what: &'static str, reason: String },
    /// An import (`POST /api/snapshots/import`) the server would not or could not fetch; its
    /// status, code and message are the import's own (src/server/upload/import.rs).
    #[error("{message}")]
    Import {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
    /// A failure on the server's side: what failed and why, for the log only (they may name
    /// server paths); the client is told only the reference (see [`ApiError::internal`]).
    #[error("{context}")]
    Internal {
        /// What the server was doing.
        context: String,
        #[source]
        source: Cause,
        /// Made with the error, so each failure has its own; ties the answer to the log line.
        reference: String,
    },
}

/// Why an internal failure happened: any error (a text is one too: `"…".into()`).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An internal error's cause on its way to the log: put in the extensions of the answer made
/// from it, taken out and logged by [`every_error_as_json`].
#[derive(Debug, Clone)]
pub struct LogCause {
    pub reference: String,
    /// What failed, then each source in turn.
    pub chain: String,
}

/// What the client is told about an error.
pub struct PublicError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// The body of every error answer: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// Stable and machine-readable (`not_found`, `bad_request`, `gone`, ...).
    pub code: String,
    /// For a person; for a 5xx only a reference into the server's log.
    pub message: String,
}

/// Seconds a refused upload is told to wait before it tries again.
pub const RETRY_AFTER_SECONDS: u64 = 5;

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::SnapshotNotFound(_)
            | ApiError::AllocationNotFound { .. }
            | ApiError::GroupNotFound(_)
            | ApiError::PageNotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::BadId(_) | ApiError::BadRequest(_) | ApiError::NotASnapshot(_) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::TooLarge { .. } | ApiError::TooManyEvents(_) | ApiError::TooMuchMemory(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::BodyStalled(_) | ApiError::UploadTooSlow { .. } => {
                StatusCode::REQUEST_TIMEOUT
            }
            ApiError::Busy(_)
            | ApiError::ParseBusy(_)
            | ApiError::ClientBusy(_)
            | ApiError::StorageUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::UntrustedHeader(_) => StatusCode::FORBIDDEN,
            ApiError::WrongHost(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Import { status, .. } => *status,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            // One code for every 404: the message says what was not found.
            ApiError::SnapshotNotFound(_)
            | ApiError::AllocationNotFound { .. }
            | ApiError::GroupNotFound(_)
            | ApiError::PageNotFound(_) => "not_found",
            ApiError::Gone(_) => "gone",
            ApiError::BadId(_) => "bad_id",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::NotASnapshot(_) => "not_a_snapshot",
            ApiError::TooLarge { .. } | ApiError::TooMuchMemory(_) => "too_large",
            ApiError::TooManyEvents(_) => "too_many_events",
            ApiError::BodyStalled(_) => "body_timeout",
            ApiError::UploadTooSlow { .. } => "too_slow",
            ApiError::Busy(_) | ApiError::ParseBusy(_) | ApiError::ClientBusy(_) => "busy",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "cross_site",
            ApiError::WrongHost(_) => "wrong_host",
            ApiError::UntrustedHeader(_) => "untrusted_header",
            ApiError::Conflict(_) => "conflict",
            ApiError::DiskFull => "disk_full",
            ApiError::StorageUnavailable { .. } => "storage_unavailable",
            ApiError::Import { code, .. } => code,
            ApiError::Internal { .. } => "internal",
        }
    }

    /// A failure on the server's side while doing `context`, because of `source`; it gets a
    /// fresh reference, which its answer tells the client and its log line repeats.
    pub fn internal(context: impl Into<String>, source: impl Into<Cause>) -> Self {
        ApiError::Internal {
            context: context.into(),
            source: source.into(),
            reference: incident_reference(),
        }
    }

    /// The status, code and message to send (for an internal error only its reference).
    pub fn public(&self) -> PublicError {
        let message = match self {
            ApiError::Internal { reference, .. } => format!(
                "internal error (reference {reference}; the details are in the server's log)"
            ),
            other => other.to_string(),
        };
        PublicError {
            status: self.status(),
            code: self.code(),
            message,
        }
    }
}

impl ApiError {
    /// What the log is to say of this error: for an internal one its reference and its whole
    /// chain of causes; nothing for the others (their answer says all there is).
    pub fn log_cause(&self) -> Option<LogCause> {
        let ApiError::Internal { reference, .. } = self else {
            return None;
        };
        let mut chain = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            chain.push_str(": ");
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        Some(LogCause {
            reference: reference.clone(),
            chain,
        })
    }

    /// `response`, the answer made from this error, carrying its cause to the layer that logs
    /// it ([`every_error_as_json`]).
    pub fn with_log_cause(&self, mut response: Response) -> Response {
        if let Some(cause) = self.log_cause() {
            response.extensions_mut().insert(cause);
        }
        response
    }
}

/// A short reference that ties a client's "internal error" to its line in the log: the
/// process's start time and a counter, so references from a restarted server do not repeat.
fn incident_reference() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static EPOCH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    format!(
        "{:x}-{}",
        epoch & 0xff_ffff,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A blocking task that panicked or was cancelled: a server-side failure.
impl From<tokio::task::JoinError> for ApiError {
    fn from(error: tokio::task::JoinError) -> Self {
        ApiError::internal("a blocking task failed", error)
    }
}

/// Runs `work` on tokio's blocking threads (parsing, analysis, SQLite must never hold an async
/// worker); a panic in it becomes an internal error instead of tearing the connection down.
pub async fn blocking<T, F>(work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    Ok(tokio::task::spawn_blocking(work).await?)
}

impl From<super::store::StoreError> for ApiError {
    fn from(error: super::store::StoreError) -> Self {
        use super::store::StoreError;
        super::ops::store_error(&error);
        let disk_full = match &error {
            StoreError::Io(io) => io.kind() == std::io::ErrorKind::StorageFull,
            StoreError::Database(rusqlite::Error::SqliteFailure(failure, _)) => {
                failure.code == rusqlite::ErrorCode::DiskFull
            }
            _ => false,
        };
        if disk_full {
            tracing::error!(%error, "the disk is full");
            return ApiError::DiskFull;
        }
        if let StoreError::Unavailable { what, reason } = error {
            // Said to the client as it is (it names a service, not a server path), and logged
            // here, as no internal error carries it to the log.
            tracing::warn!(what, %reason, "a request failed: the store is unavailable");
            return ApiError::StorageUnavailable { what, reason };
        }
        // Logged with its answer (`every_error_as_json`), not here: once per failure.
        ApiError::internal("storage failed", error)
    }
}

impl ApiError {
    /// Why a snapshot could not be read, as the client sees it: a file that cannot be opened is
    /// the server's problem (and its message names a server path); a limit is the limit's
    /// answer; anything else is the file's (its reader's message).
    pub fn unreadable(error: crate::snapshot::LoadError) -> Self {
        use crate::snapshot::{LoadError, Refusal};
        match error {
            LoadError::Open { .. } => ApiError::internal("reading a stored snapshot", error),
            LoadError::TooManyEvents { limit } => ApiError::TooManyEvents(limit),
            LoadError::Refused(Refusal::Busy(why)) => ApiError::ParseBusy(why),
            LoadError::Refused(Refusal::TooLarge(why)) => ApiError::TooMuchMemory(why),
            other => ApiError::NotASnapshot(other.to_string()),
        }
    }

    /// A failure to write an upload's temporary file: a full disk is said so, anything else is
    /// internal.
    pub fn writing(what: &str, error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::StorageFull {
            tracing::error!(%error, "the disk is full: {what}");
            ApiError::DiskFull
        } else {
            ApiError::internal(what, error)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let public = self.public();
        let body = ErrorBody {
            error: ErrorDetail {
                code: public.code.to_owned(),
                message: public.message,
            },
        };
        let mut response = (public.status, Json(body)).into_response();
        if matches!(
            self,
            ApiError::Busy(_)
                | ApiError::ParseBusy(_)
                | ApiError::ClientBusy(_)
                | ApiError::StorageUnavailable { .. }
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        self.with_log_cause(response)
    }
}

/// Most bytes of a framework's plain-text error answer read to make its JSON one.
const PLAIN_ERROR_BYTES: usize = 4096;

/// The outermost layer of the router: every 4xx or 5xx answer leaves in the one error shape,
/// and every internal failure's cause is logged here, once.
/// Handlers answer with [`ApiError`] already; this rewrites what the framework answers by
/// itself in plain text (a query, path or body its extractors refuse, a method a route does not
/// take, a body past its limit) or with no body at all. Pages keep their HTML error page.
pub async fn every_error_as_json(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let path: String = request.uri().path().chars().take(200).collect();
    let mut response = next.run(request).await;
    if let Some(cause) = response.extensions_mut().remove::<LogCause>() {
        log(&cause);
    }
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/json") || content_type.starts_with("text/html") {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, PLAIN_ERROR_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let (code, message) = plain_error(status, &method, &path, &parts.headers, &text);
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.to_owned(),
            message,
        },
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The one log line of an internal failure.
fn log(cause: &LogCause) {
    tracing::error!(reference = %cause.reference, error = %cause.chain, "request failed");
}

/// The code and a person's message for a plain-text (or empty) error answer of the framework.
fn plain_error(
    status: StatusCode,
    method: &axum::http::Method,
    path: &str,
    headers: &axum::http::HeaderMap,
    text: &str,
) -> (&'static str, String) {
    // axum's rejections start with what failed; said as this API says things.
    let reworded = [
        (
            "Failed to deserialize query string: ",
            "the query string is not right: ",
        ),
        (
            "Failed to buffer the request body: ",
            "the request body could not be read: ",
        ),
        (
            "Failed to parse the request body as JSON: ",
            "the body is not valid JSON: ",
        ),
        (
            "Failed to deserialize the JSON body into the target type: ",
            "the JSON body is not right: ",
        ),
        ("Invalid URL: ", "the address is not right: "),
        ("Failed to deserialize form: ", "the form is not right: "),
    ]
    .iter()
    .find_map(|(prefix, said)| {
        text.strip_prefix(prefix)
            .map(|rest| format!("{said}{rest}"))
    });
    let text = reworded.unwrap_or_else(|| text.to_owned());
    let or = |fallback: String| {
        if text.is_empty() {
            fallback
        } else {
            text.clone()
        }
    };
    match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = headers
                .get(header::ALLOW)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.is_empty())
                // axum adds the header after this layer has run: it is in the answer still.
                .map_or_else(
                    || " (the Allow header lists the methods it answers)".to_owned(),
                    |value| format!("; it answers {value}"),
                );
            (
                "method_not_allowed",
                format!("{method} is not allowed on {path}{allowed}"),
            )
        }
        StatusCode::NOT_FOUND => ("not_found", or(format!("nothing is at {path}"))),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "too_large",
            or("the request body is larger than this address accepts".into()),
        ),
        StatusCode::REQUEST_TIMEOUT => (
            "body_timeout",
            or("the request body stopped arriving (--body-timeout)".into()),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            or("the body's Content-Type is not one this address reads".into()),
        ),
        status if status.is_server_error() => {
            let error = ApiError::internal(
                format!("answering {method} {path}"),
                format!("{status}: {text}"),
            );
            if let Some(cause) = error.log_cause() {
                log(&cause);
            }
            let public = error.public();
            (public.code, public.message)
        }
        status => (
            "bad_request",
            or(status
                .canonical_reason()
                .unwrap_or("the request is not right")
                .to_owned()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_tell_the_client_nothing_of_the_server() {
        let failure = || {
            ApiError::internal(
                "cannot open /srv/snapview/blobs/ab/abcdef.pickle",
                std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            )
        };
        let error = failure();
        let public = error.public();
        assert_eq!(public.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(public.message.starts_with("internal error (reference "));
        assert!(!public.message.contains("/srv"), "{}", public.message);
        // Each failure gets its own reference.
        assert_ne!(failure().public().message, public.message);
        // The log gets what failed and why, under the answer's reference.
        let cause = error.log_cause().expect("an internal error is logged");
        assert!(public.message.contains(&cause.reference));
        assert!(
            cause.chain.starts_with("cannot open /srv/"),
            "{}",
            cause.chain
        );
        assert!(cause.chain.contains("permission denied"), "{}", cause.chain);
        // Its answer carries the cause to the layer that logs it.
        let response = failure().into_response();
        assert!(response.extensions().get::<LogCause>().is_some());
    }

    #[tokio::test]
    async fn a_panicking_blocking_task_is_an_internal_error() {
        let error = blocking(|| -> u32 { panic!("boom") })
            .await
            .expect_err("the panic is caught");
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(blocking(|| 7).await.expect("ok"), 7);
    }

    #[test]
    fn not_found_says_what_was_not_found() {
        let allocation = ApiError::AllocationNotFound {
            snapshot: "00000000000000aa".into(),
            index: 9,
            device: 1,
        };
        assert_eq!(allocation.status(), StatusCode::NOT_FOUND);
        assert!(
            allocation.to_string().contains("allocation 9"),
            "{allocation}"
        );
        assert!(!allocation.to_string().contains("no snapshot"));
        let group = ApiError::GroupNotFound("job7".into()).to_string();
        assert!(group.contains("group \"job7\""), "{group}");
        let page = ApiError::PageNotFound("/nowhere".into()).to_string();
        assert!(!page.contains("snapshot"), "{page}");
    }

    #[test]
    fn an_unavailable_store_answers_503_with_retry_after() {
        let error = ApiError::from(crate::server::store::StoreError::Unavailable {
            what: "object storage",
            reason: "connection refused".into(),
        });
        let public = error.public();
        assert_eq!(public.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(public.code, "storage_unavailable");
        assert_eq!(
            public.message,
            "object storage is unavailable: connection refused; try again shortly"
        );
        let response = error.into_response();
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(RETRY_AFTER_SECONDS))
        );
    }

    #[test]
    fn busy_answers_carry_retry_after() {
        let response = ApiError::Busy(4).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(RETRY_AFTER_SECONDS))
        );
    }
}
