//! `POST /api/snapshots/import`: the server fetches a snapshot from where a training job wrote
//! it, `s3://bucket/key` with the server's own object storage credentials (the standard AWS
//! variables, as `--blobs` reads them) or an `https://` URL under one of `--import-allow`'s
//! prefixes, and stores it exactly as an upload: the same slots, size limit, pace, reading
//! limits, refusals and audit, through the same `receive` and `ingest`.
//!
//! What the URL may reach is the point of this file. Only those two schemes: `http://` (which
//! anyone on the way could alter), `file://` and every other scheme are refused, so a request
//! can never make the server read its own files or run anything. An `https://` URL must be under
//! an allowed prefix by its parsed scheme, host, port and path segments (so
//! `https://good.example.com.evil.net/` is not under `https://good.example.com/`), and so must
//! every redirect it answers with, or the redirect is not followed. The object's declared size is
//! checked before any of its bytes are fetched, and again as they arrive (a source may lie), and
//! the whole fetch is bounded by `--import-timeout`.

use super::limits::Pace;
use super::parse::Reading;
use super::receive::{BodyError, Received, receive};
use super::{Labels, UploadParams, UploadSlots, ingest, maybe_duplicate, stored_answer};
use crate::server::AppState;
use crate::server::access::Actor;
use crate::server::error::ApiError;
use crate::server::wire::SnapshotView;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Extension, State};
use axum::http::StatusCode;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreExt};
use reqwest::Url;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The largest import request body: a URL and two labels fit many times over.
pub const MAX_IMPORT_REQUEST_BYTES: usize = 16 * 1024;

/// Redirects an `https://` import follows at most, each to an allowed prefix.
pub const MAX_IMPORT_REDIRECTS: usize = 5;

/// `--import-timeout`'s default: the longest one import may take to fetch and read its
/// snapshot. An 8 GiB snapshot (`--max-upload`'s default) needs 2.3 MB/s to make it.
pub const DEFAULT_IMPORT_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long the server waits to connect to a source before saying it cannot reach it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Retries of a failed request to object storage: few and short, so an unreachable endpoint is
/// said so in seconds rather than after object_store's default three minutes.
fn object_store_retries() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
        ..object_store::RetryConfig::default()
    }
}

/// What `serve` allows imports to fetch, and for how long.
#[derive(Debug, Clone)]
pub struct ImportConfig {
    /// `--import-allow`: the `https://` prefixes; none, and no `https://` import is allowed.
    pub allow: Vec<AllowedPrefix>,
    /// `--import-timeout`: the longest one import may take to fetch and read its snapshot.
    pub timeout: Duration,
}

impl Default for ImportConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            timeout: DEFAULT_IMPORT_TIMEOUT,
        }
    }
}

/// An `--import-allow` prefix: an `https://` URL with no query, fragment or credentials, kept
/// parsed so that URLs are compared by their parts, never as strings.
#[derive(Debug, Clone)]
pub struct AllowedPrefix(Url);

impl AllowedPrefix {
    /// Reads one `--import-allow` value, or says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = Url::parse(text.trim())
            .map_err(|e| format!("--import-allow {text:?} is not a URL: {e}"))?;
        if url.scheme() != "https" {
            return Err(format!(
                "--import-allow {text:?} must be an https:// URL (s3:// imports need no allowing, and plain http:// is never fetched)"
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("--import-allow {text:?} names no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "--import-allow {text:?} has a query or fragment: give a prefix of paths"
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!("--import-allow {text:?} holds credentials"));
        }
        Ok(Self(url))
    }

    /// Whether `url` is under this prefix: the same scheme, host and port, and its path this
    /// path or below it by whole segments (`/runs` admits `/runs/a`, never `/runs-old/a`).
    fn admits(&self, url: &Url) -> bool {
        let prefix = &self.0;
        if url.scheme() != prefix.scheme()
            || url.host() != prefix.host()
            || url.port_or_known_default() != prefix.port_or_known_default()
        {
            return false;
        }
        let (allowed, path) = (prefix.path(), url.path());
        if allowed.ends_with('/') {
            path.starts_with(allowed)
        } else {
            path == allowed
                || path
                    .strip_prefix(allowed)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    }
}

impl std::fmt::Display for AllowedPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// The body of `POST /api/snapshots/import`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// `s3://bucket/key`, or `https://…` under an `--import-allow` prefix.
    pub url: String,
    /// A display name; defaults to the object's file name.
    pub name: Option<String>,
    /// A group label, as an upload takes.
    pub group: Option<String>,
}

/// `POST /api/snapshots/import`: the answer an upload of the same bytes gets (201 stored, 200
/// stored already).
pub async fn import(
    State(state): State<AppState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    actor: Option<Extension<Actor>>,
    Json(request): Json<ImportRequest>,
) -> Result<(StatusCode, Json<SnapshotView>), ApiError> {
    // Everything that needs no fetching is checked before a slot is taken.
    let params = UploadParams {
        name: request.name,
        filename: None,
        group: request.group,
    };
    let labels = Labels::from_params(&params)?;
    let source = Source::parse(&request.url, &state.config.import.allow)?;
    let _slots = UploadSlots::take(&state, peer.as_ref().map(|Extension(peer)| peer))?;
    let actor = actor.and_then(|Extension(Actor(name))| name);
    tracing::info!(source = %source.shown(), "importing");

    let timeout = state.config.import.timeout;
    let received = tokio::time::timeout(timeout, fetch(&state, &source))
        .await
        .map_err(|_| {
            refusal(
                StatusCode::GATEWAY_TIMEOUT,
                "source_timeout",
                format!(
                    "fetching {} took longer than this server's {} s for an import (--import-timeout); nothing was stored",
                    source.shown(),
                    timeout.as_secs()
                ),
            )
        })??;
    let filename = Some(source.filename());
    let (view, created) = ingest(&state, received, params, labels, filename, actor).await?;
    Ok(stored_answer(view, created))
}

fn refusal(status: StatusCode, code: &'static str, message: String) -> ApiError {
    ApiError::Import {
        status,
        code,
        message,
    }
}

fn bad_url(message: String) -> ApiError {
    refusal(StatusCode::BAD_REQUEST, "bad_request", message)
}

fn not_allowed(message: String) -> ApiError {
    refusal(StatusCode::FORBIDDEN, "import_not_allowed", message)
}

/// Where an import's bytes come from.
enum Source {
    S3 {
        bucket: String,
        key: object_store::path::Path,
    },
    Https(Url),
}

impl Source {
    /// Reads an import's URL, refusing what the server must not fetch.
    fn parse(text: &str, allow: &[AllowedPrefix]) -> Result<Self, ApiError> {
        let text = text.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(bad_url(format!(
                "{text:?} is not a URL: an import takes s3://bucket/key or an https:// URL"
            )));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "s3" => Self::parse_s3(text, rest),
            "https" => {
                let url = Url::parse(text)
                    .map_err(|e| bad_url(format!("{text:?} is not a URL: {e}")))?;
                if !url.username().is_empty() || url.password().is_some() {
                    return Err(bad_url(
                        "an import URL may not hold credentials: the server fetches with its own"
                            .into(),
                    ));
                }
                check_allowed(&url, allow, None)?;
                Ok(Source::Https(url))
            }
            "http" => Err(bad_url(format!(
                "{} is plain http://, which the server never fetches (anyone on the way could change the bytes): use https:// or s3://",
                shown_url_text(text)
            ))),
            "file" => Err(bad_url(
                "file:// is refused: an import never reads the server's own files (upload the file instead)".into(),
            )),
            other => Err(bad_url(format!(
                "{other}:// is refused: an import takes s3://bucket/key or an https:// URL"
            ))),
        }
    }

    fn parse_s3(text: &str, rest: &str) -> Result<Self, ApiError> {
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        // S3's bucket naming rules: a bucket is a host name's label, never a path.
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !bucket_ok {
            return Err(bad_url(format!(
                "{text:?} names no valid bucket (3 to 63 lowercase letters, digits, dots and hyphens)"
            )));
        }
        if key.is_empty() || key.ends_with('/') {
            return Err(bad_url(format!(
                "{text:?} names no object: give s3://{bucket}/path/to/snapshot.pickle"
            )));
        }
        let key = object_store::path::Path::parse(key).map_err(|e| {
            bad_url(format!(
                "{text:?} is not an object key this server reads: {e}"
            ))
        })?;
        Ok(Source::S3 {
            bucket: bucket.to_owned(),
            key,
        })
    }

    /// The URL as messages and the log show it: without an https URL's query, which in a
    /// pre-signed URL is a credential.
    fn shown(&self) -> String {
        match self {
            Source::S3 { bucket, key } => format!("s3://{bucket}/{key}"),
            Source::Https(url) => shown_url(url),
        }
    }

    /// The object's file name, the snapshot's default name as an upload's is.
    fn filename(&self) -> String {
        let path = match self {
            Source::S3 { key, .. } => key.as_ref().to_owned(),
            Source::Https(url) => url.path().to_owned(),
        };
        let last = path.rsplit('/').next().unwrap_or_default();
        let decoded = percent_encoding::percent_decode_str(last).decode_utf8_lossy();
        if decoded.is_empty() {
            "snapshot.pickle".to_owned()
        } else {
            decoded.into_owned()
        }
    }
}

/// `url` without its query and fragment.
fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// A URL that did not parse, without what may be a query.
fn shown_url_text(text: &str) -> String {
    Url::parse(text).map_or_else(
        |_| text.split(['?', '#']).next().unwrap_or(text).to_owned(),
        |url| shown_url(&url),
    )
}

/// Refuses `url` unless it is under one of the `allow` prefixes; `redirected_from` names the URL
/// that redirected to it.
fn check_allowed(
    url: &Url,
    allow: &[AllowedPrefix],
    redirected_from: Option<&Url>,
) -> Result<(), ApiError> {
    if allow.is_empty() {
        return Err(not_allowed(
            "this server allows no https:// imports (it was started without --import-allow); import from s3:// or upload the file"
                .into(),
        ));
    }
    if allow.iter().any(|prefix| prefix.admits(url)) {
        return Ok(());
    }
    let allowed: Vec<String> = allow.iter().map(ToString::to_string).collect();
    Err(not_allowed(match redirected_from {
        Some(from) => format!(
            "{} redirects to {}, which is not under this server's --import-allow ({}); the redirect was not followed and nothing was stored",
            shown_url(from),
            shown_url(url),
            allowed.join(", ")
        ),
        None => format!(
            "{} is not under this server's --import-allow ({}); nothing was fetched",
            shown_url(url),
            allowed.join(", ")
        ),
    }))
}

/// An error from a source's bytes on their way in.
#[derive(Debug)]
struct SourceError(String);

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl BodyError for SourceError {}

/// A source opened: its declared size (checked already) and its bytes.
struct Opened {
    size: Option<u64>,
    bytes: BoxStream<'static, Result<Bytes, SourceError>>,
}

/// Fetches the source into a received upload, under the upload's limits and pace.
async fn fetch(state: &AppState, source: &Source) -> Result<Received, ApiError> {
    let limit = state.config.max_upload_bytes;
    let opened = match source {
        Source::S3 { bucket, key } => open_s3(state, bucket, key).await?,
        Source::Https(url) => open_https(state, url).await?,
    };
    if let Some(size) = opened.size.filter(|&size| size > limit) {
        return Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "{} is {size} bytes, larger than this server's limit of {limit} bytes (--max-upload); nothing was fetched",
                source.shown()
            ),
        ));
    }
    let parse = (!maybe_duplicate(state, opened.size).await).then(|| Reading::of(state));
    let pace = Pace {
        stall_timeout: state.config.limits.body_timeout,
        min_bytes_per_second: state.config.limits.min_upload_rate,
    };
    // Whether `receive` stopped on the source's error (502) rather than on the bytes (4xx).
    let failed = Arc::new(AtomicBool::new(false));
    let noted = failed.clone();
    let bytes = opened
        .bytes
        .inspect_err(move |_| noted.store(true, Ordering::Relaxed));
    let shown = source.shown();
    receive(bytes, &state.store.temp_dir(), limit, parse, pace)
        .await
        .map_err(|error| match error {
            ApiError::BadRequest(message) if failed.load(Ordering::Relaxed) => refusal(
                StatusCode::BAD_GATEWAY,
                "source_unreachable",
                format!("{message}; nothing was stored"),
            ),
            ApiError::BodyStalled(wait) => refusal(
                StatusCode::GATEWAY_TIMEOUT,
                "source_timeout",
                format!(
                    "{shown} sent nothing for {} s (--body-timeout); nothing was stored",
                    wait.as_secs()
                ),
            ),
            ApiError::UploadTooSlow {
                received,
                waited,
                min_bytes_per_second,
            } => refusal(
                StatusCode::GATEWAY_TIMEOUT,
                "source_timeout",
                format!(
                    "{shown} was too slow: {received} bytes in {} s, below this server's minimum of {min_bytes_per_second} bytes/s (--min-upload-rate); nothing was stored",
                    waited.as_secs()
                ),
            ),
            ApiError::TooLarge { limit } => refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "{shown} sent more than this server's limit of {limit} bytes (--max-upload); nothing was stored"
                ),
            ),
            other => other,
        })
}

/// An error and its causes in one line, each said once.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

async fn open_s3(
    state: &AppState,
    bucket: &str,
    key: &object_store::path::Path,
) -> Result<Opened, ApiError> {
    let shown = format!("s3://{bucket}/{key}");
    let builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(object_store_retries())
        // object_store's 30 s default bounds a whole request, body included: too short for a
        // large snapshot. The import's own timeout bounds it instead.
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            format!("{}s", state.config.import.timeout.as_secs().max(1)),
        )
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            format!("{}s", CONNECT_TIMEOUT.as_secs()),
        );
    let endpoint = builder
        .get_config_value(&AmazonS3ConfigKey::Endpoint)
        .unwrap_or_else(|| {
            let region = builder
                .get_config_value(&AmazonS3ConfigKey::Region)
                .unwrap_or_else(|| "us-east-1".into());
            format!("AWS S3 ({region})")
        });
    let store = builder.build().map_err(|e| {
        refusal(
            StatusCode::BAD_GATEWAY,
            "source_unreachable",
            format!(
                "the server's object storage settings (the AWS_* variables) do not work for {shown}: {}",
                with_causes(&e)
            ),
        )
    })?;
    let explain = |error: object_store::Error| -> ApiError {
        match error {
            object_store::Error::NotFound { .. } => refusal(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no such object {shown}"),
            ),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => refusal(
                StatusCode::BAD_GATEWAY,
                "source_refused",
                format!(
                    "object storage refused the server's credentials for {shown} (the AWS_* variables of the server: ask whoever runs it to grant it read access)"
                ),
            ),
            other => refusal(
                StatusCode::BAD_GATEWAY,
                "source_unreachable",
                format!(
                    "the server could not reach object storage at {endpoint} for {shown}: {}",
                    with_causes(&other)
                ),
            ),
        }
    };
    let meta = store.head(key).await.map_err(explain)?;
    if meta.size > state.config.max_upload_bytes {
        return Ok(Opened {
            size: Some(meta.size),
            bytes: futures_util::stream::empty().boxed(),
        });
    }
    // The bytes fetched are the object the HEAD measured, not one written over it since.
    let options = object_store::GetOptions {
        if_match: meta.e_tag.clone(),
        ..object_store::GetOptions::default()
    };
    let got = store.get_opts(key, options).await.map_err(explain)?;
    let stream_shown = shown.clone();
    let bytes = got
        .into_stream()
        .map_err(move |e| {
            SourceError(format!(
                "fetching {stream_shown} failed: {}",
                with_causes(&e)
            ))
        })
        .boxed();
    Ok(Opened {
        size: Some(meta.size),
        bytes,
    })
}

async fn open_https(state: &AppState, url: &Url) -> Result<Opened, ApiError> {
    let client = reqwest::Client::builder()
        // Each redirect comes back here, to be followed only to an allowed prefix.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| ApiError::internal("cannot make the import's HTTP client", e))?;
    let mut target = url.clone();
    let mut redirects = 0;
    loop {
        let shown = shown_url(&target);
        let response = client
            .get(target.clone())
            // The bytes as stored: the upload's reader undoes gzip and zstd itself, within its
            // limits, where a transparently decoded body would escape them.
            .header(reqwest::header::ACCEPT_ENCODING, "identity")
            .send()
            .await
            .map_err(|e| {
                let host = target.host_str().unwrap_or_default();
                refusal(
                    StatusCode::BAD_GATEWAY,
                    "source_unreachable",
                    format!(
                        "the server could not reach {host} for {shown}: {}",
                        with_causes(&e)
                    ),
                )
            })?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|location| target.join(location).ok());
            let Some(next) = location else {
                return Err(refusal(
                    StatusCode::BAD_GATEWAY,
                    "source_refused",
                    format!(
                        "{shown} answered {status} with no usable Location; nothing was stored"
                    ),
                ));
            };
            if next.scheme() != "https" {
                return Err(not_allowed(format!(
                    "{shown} redirects to {}, which is not https://; the redirect was not followed and nothing was stored",
                    shown_url(&next)
                )));
            }
            check_allowed(&next, &state.config.import.allow, Some(&target))?;
            if redirects == MAX_IMPORT_REDIRECTS {
                return Err(refusal(
                    StatusCode::BAD_GATEWAY,
                    "source_refused",
                    format!(
                        "{} redirected more than {MAX_IMPORT_REDIRECTS} times; nothing was stored",
                        shown_url(url)
                    ),
                ));
            }
            redirects += 1;
            target = next;
            continue;
        }
        if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::GONE {
            return Err(refusal(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no such object {shown} (its server answered {status})"),
            ));
        }
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(refusal(
                StatusCode::BAD_GATEWAY,
                "source_refused",
                format!("{shown} refused the server ({status}); nothing was stored"),
            ));
        }
        if !status.is_success() {
            return Err(refusal(
                StatusCode::BAD_GATEWAY,
                "source_refused",
                format!("{shown} answered {status}; nothing was stored"),
            ));
        }
        let size = response.content_length();
        let bytes = response
            .bytes_stream()
            .map_err(move |e| SourceError(format!("fetching {shown} failed: {}", with_causes(&e))))
            .boxed();
        return Ok(Opened { size, bytes });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(prefixes: &[&str]) -> Vec<AllowedPrefix> {
        prefixes
            .iter()
            .map(|p| AllowedPrefix::parse(p).expect("prefix"))
            .collect()
    }

    fn allowed(url: &str, prefixes: &[&str]) -> bool {
        let url = Url::parse(url).expect("url");
        allow(prefixes).iter().any(|p| p.admits(&url))
    }

    #[test]
    fn prefixes_compare_by_host_port_and_whole_path_segments() {
        let good = &["https://good.example.com/"];
        assert!(allowed("https://good.example.com/a/b.pickle", good));
        assert!(allowed("https://GOOD.example.com:443/a", good));
        assert!(!allowed("https://good.example.com.evil.net/a", good));
        assert!(!allowed("https://good.example.com:8443/a", good));
        assert!(!allowed("https://evil.net/good.example.com/a", good));
        let runs = &["https://good.example.com/runs"];
        assert!(allowed("https://good.example.com/runs/1.pickle", runs));
        assert!(!allowed("https://good.example.com/runs-old/1.pickle", runs));
        // Dot segments are resolved before the comparison, encoded or not.
        assert!(!allowed("https://good.example.com/runs/../etc/x", runs));
        assert!(!allowed("https://good.example.com/runs/%2e%2e/etc/x", runs));
        let with_slash = &["https://good.example.com/runs/"];
        assert!(!allowed("https://good.example.com/runs", with_slash));
        assert!(allowed("https://good.example.com/runs/x?sig=1", with_slash));
    }

    #[test]
    fn only_https_prefixes_without_queries_or_credentials_are_allowed() {
        for bad in [
            "http://good.example.com/",
            "s3://bucket/",
            "https://good.example.com/?a=1",
            "https://user:pw@good.example.com/",
            "file:///etc/",
            "not a url",
        ] {
            assert!(AllowedPrefix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_s3_and_allowed_https_urls_are_sources() {
        let none: &[AllowedPrefix] = &[];
        let status = |url: &str, allow: &[AllowedPrefix]| match Source::parse(url, allow) {
            Ok(_) => StatusCode::OK,
            Err(e) => e.status(),
        };
        assert_eq!(status("s3://bucket/runs/a.pickle", none), StatusCode::OK);
        for bad in [
            "file:///etc/passwd",
            "http://good.example.com/a",
            "ftp://x/y",
            "/etc/passwd",
            "s3://bucket",
            "s3://bucket/",
            "s3://Bucket/a",
            "s3://../a",
            "s3://bucket/a//b",
            "s3://bucket/../a",
        ] {
            assert_eq!(status(bad, none), StatusCode::BAD_REQUEST, "{bad}");
        }
        assert_eq!(
            status("https://good.example.com/a", none),
            StatusCode::FORBIDDEN
        );
        let good = allow(&["https://good.example.com/"]);
        assert_eq!(status("https://good.example.com/a", &good), StatusCode::OK);
        assert_eq!(
            status("https://good.example.com.evil.net/a", &good),
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn file_names_come_from_the_last_segment() {
        let source = Source::parse("s3://bucket/runs/job%201/rank0.pickle", &[]).expect("s3");
        assert_eq!(source.filename(), "rank0.pickle");
        let good = allow(&["https://good.example.com/"]);
        let source = Source::parse("https://good.example.com/x/gpt2%20run.pickle?sig=s", &good)
            .expect("https");
        assert_eq!(source.filename(), "gpt2 run.pickle");
        assert_eq!(
            source.shown(),
            "https://good.example.com/x/gpt2%20run.pickle"
        );
    }
}
