//! Uploads: streamed to a temporary file while hashed, parsed, and only then stored.
//!
//! Nothing is held whole in memory and nothing is stored until the file parses: an over-limit
//! body (413), a file that is not a snapshot (400, with the reader's message) or a client that
//! disconnects mid-upload leaves the store exactly as it was, because the temporary file is
//! a `tempfile` in the store's temp folder (the same filesystem as the blobs, so storing it is
//! one atomic rename), removed when dropped on every path that does not store it.
//!
//! Slow clients cannot stop the server: at most `--max-uploads` are received at once, and at
//! most `--max-uploads-per-client` from one client address (past either, 503 with Retry-After,
//! before a byte of the body is read); each parses on a thread of its own, never one of tokio's
//! blocking threads that file writes and the store need; and a body that sends nothing for
//! `--body-timeout`, or that arrives slower than `--min-upload-rate` on average once the server
//! has waited [`UPLOAD_RATE_GRACE`] for it, is dropped with 408, which also ends its parser
//! (the parser sees the end of its input). Without the rate, a byte every few seconds held a
//! slot for as long as the client liked.

use super::AppState;
use super::analysed::AnalysedSnapshot;
use super::api::{clean_group, clean_label};
use super::error::{ApiError, blocking};
use super::store::{NewSnapshot, SnapshotId};
use super::wire::{SnapshotView, SummaryRow};
use crate::analysis::roles::UserRules;
use crate::snapshot::LoadError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::multipart::MultipartError;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{StatusCode, header};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tempfile::TempPath;
use tokio::io::AsyncWriteExt;
use tokio_util::io::{StreamReader, SyncIoBridge};

/// Waiting for an upload's bytes that is forgiven before `--min-upload-rate` applies (a client
/// starting up, TCP's slow start, a pause on a busy laptop).
pub const UPLOAD_RATE_GRACE: Duration = Duration::from_secs(10);

/// Uploads being received per client address, at most `limit` each (0: no limit).
pub struct ClientSlots {
    limit: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl ClientSlots {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            held: Mutex::default(),
        }
    }

    /// One of `client`'s slots, or `None` when it holds them all.
    fn take(self: &Arc<Self>, client: IpAddr) -> Option<ClientSlot> {
        if self.limit == 0 {
            return Some(ClientSlot(None));
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(client).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot(Some((self.clone(), client))))
    }
}

/// An upload slot of one client address, given back on drop.
struct ClientSlot(Option<(Arc<ClientSlots>, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let Some((slots, client)) = self.0.take() else {
            return;
        };
        let mut held = slots.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&client) {
            *count -= 1;
            if *count == 0 {
                held.remove(&client);
            }
        }
    }
}

/// How fast an upload's bytes must keep arriving.
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// The longest wait for the next bytes (`--body-timeout`).
    stall_timeout: Duration,
    /// Bytes per second waited, once the wait passes [`UPLOAD_RATE_GRACE`]; 0: none.
    min_bytes_per_second: u64,
}

impl Pace {
    /// How long to wait for the next bytes having received `size` bytes over `waited`, and
    /// whether that limit is the rate's (else the stall timeout's).
    fn next_wait(&self, size: u64, waited: Duration) -> (Duration, bool) {
        if self.min_bytes_per_second == 0 {
            return (self.stall_timeout, false);
        }
        let earned = Duration::from_secs_f64(size as f64 / self.min_bytes_per_second as f64)
            .max(UPLOAD_RATE_GRACE)
            .saturating_sub(waited);
        if earned < self.stall_timeout {
            (earned, true)
        } else {
            (self.stall_timeout, false)
        }
    }
}

#[derive(Debug, Deserialize, Default)]
pub struct UploadParams {
    /// A display name; defaults to the file name.
    pub name: Option<String>,
    /// The original file name (raw uploads have none of their own).
    pub filename: Option<String>,
    /// A group label, e.g. the job whose ranks these are.
    pub group: Option<String>,
}

/// One upload: its bytes on disk, and the snapshot parsed from them as they arrived (unless the
/// upload was likely a duplicate: then it is parsed only if its hash says it is new).
struct Received {
    /// Removed when dropped, unless the store took it.
    file: TempPath,
    size: u64,
    digest: Vec<u8>,
    loaded: Option<AnalysedSnapshot>,
}

type ParseResult = Result<AnalysedSnapshot, LoadError>;

/// How an upload is read: a compressed upload may expand to no more than an uncompressed one
/// may be (`--max-upload`), besides the reader's ratio and string bounds; its trace may hold
/// `--max-events`; and the events it holds are charged to the server's `--parse-memory` as
/// they are found (`charge`, released when the parse and its analysis are done).
fn upload_load_options<'a>(
    reading: &Reading,
    charge: &'a super::budget::Charge,
) -> crate::snapshot::LoadOptions<'a> {
    crate::snapshot::LoadOptions {
        limits: crate::pickle::Limits::for_input_limit(reading.max_upload_bytes),
        max_events: reading.max_events,
        events: Some(charge),
        progress: None,
        ..crate::snapshot::LoadOptions::default()
    }
}

/// What reading an upload needs from the server: its limits, rules and memory budget.
#[derive(Clone)]
struct Reading {
    max_upload_bytes: u64,
    max_events: u64,
    rules: Arc<UserRules>,
    budget: Arc<super::budget::ParseBudget>,
}

impl Reading {
    fn of(state: &AppState) -> Self {
        Self {
            max_upload_bytes: state.config.max_upload_bytes,
            max_events: state.config.limits.max_events,
            rules: state.config.roles.clone(),
            budget: state.parse_budget.clone(),
        }
    }

    /// Parses (with `read`) and analyses under this server's limits, holding a share of its
    /// parse memory until done (the caller's thread: a parser thread or a blocking one).
    fn load(
        &self,
        read: impl FnOnce(
            crate::snapshot::LoadOptions<'_>,
        )
            -> Result<(crate::snapshot::Snapshot, crate::analysis::ReplaySeed), LoadError>,
    ) -> ParseResult {
        let charge = self.budget.charge("this upload");
        let parsed = read(upload_load_options(self, &charge))?;
        Ok(AnalysedSnapshot::new(parsed, &self.rules))
    }
}

/// Starts parsing what arrives on `chunks`, on a thread of its own: the parser blocks whenever
/// the client is slow, and on tokio's blocking pool enough such uploads would leave no thread
/// for the file writes and store calls every request needs (the server stopped answering at
/// ~513 slow uploads). Upload slots bound how many of these threads exist.
fn spawn_parser(
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
    reading: Reading,
) -> Result<tokio::sync::oneshot::Receiver<ParseResult>, ApiError> {
    let (answer, result) = tokio::sync::oneshot::channel();
    // The chunks as a blocking `Read` for the parser: a closed channel is the end of the input.
    // The bridge is made here, on the runtime, whose handle it uses to wait for the next chunk.
    let mut chunks = chunks;
    let stream = futures_util::stream::poll_fn(move |cx| {
        chunks.poll_recv(cx).map(|c| c.map(Ok::<_, std::io::Error>))
    });
    let reader = SyncIoBridge::new(StreamReader::new(stream));
    std::thread::Builder::new()
        .name("snapview-upload-parser".into())
        .spawn(move || {
            let parsed = reading.load(|options| crate::analysis::load_reader(reader, options));
            // The upload may have been dropped meanwhile; then nobody wants the answer.
            let _ = answer.send(parsed);
        })
        .map_err(|e| ApiError::internal("cannot start a parser thread", e))?;
    Ok(result)
}

async fn join_parser(
    parser: tokio::sync::oneshot::Receiver<ParseResult>,
) -> Result<ParseResult, ApiError> {
    parser
        .await
        .map_err(|e| ApiError::internal("the parser thread stopped without an answer", e))
}

/// A reader's refusal as the client sees it (see [`ApiError::unreadable`]).
fn refused(error: crate::snapshot::LoadError) -> ApiError {
    ApiError::unreadable(error)
}

/// An error from a request body on its way in.
trait BodyError: std::fmt::Display {
    /// Whether the body went past a size limit before it reached the upload (a chunked
    /// multipart form over `--max-upload`: its length is known only as it arrives).
    fn is_too_large(&self) -> bool {
        false
    }
}

impl BodyError for axum::Error {}

impl BodyError for std::io::Error {}

impl BodyError for MultipartError {
    fn is_too_large(&self) -> bool {
        self.status() == StatusCode::PAYLOAD_TOO_LARGE
    }
}

fn interrupted(error: &impl BodyError, limit: u64) -> ApiError {
    if error.is_too_large() {
        ApiError::TooLarge { limit }
    } else {
        ApiError::BadRequest(format!("the upload was interrupted: {error}"))
    }
}

/// Chunks in flight between the network and the parser (a few MB at most).
const PARSE_QUEUE: usize = 64;

/// Bytes of an upload's start that tell a wrong file type (a PDF, a zip, text) for certain.
const SNIFF_BYTES: usize = 16;

/// Refuses an upload whose first bytes are no snapshot's, at once and in the handler itself, so
/// a large wrong file is refused from its start however fast its bytes arrive (the parser
/// thread would say the same, but only once it has been scheduled). A start that only looks
/// cut short is left to the parser.
fn refuse_wrong_file_type(head: &[u8]) -> Result<(), ApiError> {
    match crate::pickle::detect_encoding(head) {
        Err(error @ crate::pickle::PickleError::NotASnapshot(_)) => {
            Err(ApiError::NotASnapshot(error.to_string()))
        }
        _ => Ok(()),
    }
}

/// Writes a byte stream to a temp file, hashing it and parsing it as it arrives (so a large
/// upload is analysed by the time its last byte lands, and a file that is not a snapshot is
/// refused after its first bytes), refusing it past `limit` bytes, when no bytes arrive for
/// `pace.stall_timeout` or when they arrive slower than `pace.min_bytes_per_second`.
async fn receive<S, E>(
    mut stream: S,
    dir: &Path,
    limit: u64,
    parse: Option<Reading>,
    pace: Pace,
) -> Result<Received, ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: BodyError,
{
    let dir = dir.to_owned();
    let created = blocking(move || tempfile::Builder::new().prefix("upload-").tempfile_in(dir))
        .await?
        .map_err(|e| ApiError::writing("cannot create a temporary file", e))?;
    let (out, file) = created.into_parts();
    let mut out = tokio::fs::File::from_std(out);
    let (chunks, mut parser) = if let Some(reading) = parse {
        let (chunks, receiver) = tokio::sync::mpsc::channel::<Bytes>(PARSE_QUEUE);
        (Some(chunks), Some(spawn_parser(receiver, reading)?))
    } else {
        (None, None)
    };
    let mut parsed = None;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    // Only the time spent waiting for the client counts against its rate, not the time this
    // loop spends writing or waiting for the parser.
    let mut waited = Duration::ZERO;
    // On every early return below, `chunks` is dropped (the parser sees the end of its input
    // and stops) and so is `file` (the partial upload is removed).
    loop {
        let (wait, by_rate) = pace.next_wait(size, waited);
        let started = Instant::now();
        let next = tokio::time::timeout(wait, stream.next()).await;
        waited += started.elapsed();
        let chunk = match next {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) if by_rate => {
                return Err(ApiError::UploadTooSlow {
                    received: size,
                    waited,
                    min_bytes_per_second: pace.min_bytes_per_second,
                });
            }
            Err(_) => return Err(ApiError::BodyStalled(pace.stall_timeout)),
        };
        let chunk = chunk.map_err(|e| interrupted(&e, limit))?;
        if chunk.is_empty() {
            continue;
        }
        if head.len() < SNIFF_BYTES {
            let wanted = (SNIFF_BYTES - head.len()).min(chunk.len());
            head.extend_from_slice(&chunk[..wanted]);
            if head.len() == SNIFF_BYTES {
                refuse_wrong_file_type(&head)?;
            }
        }
        size += chunk.len() as u64;
        if size > limit {
            return Err(ApiError::TooLarge { limit });
        }
        hasher.update(&chunk);
        out.write_all(&chunk)
            .await
            .map_err(|e| ApiError::writing("cannot write the upload", e))?;
        let parser_stopped = chunks
            .as_ref()
            .is_some_and(tokio::sync::mpsc::Sender::is_closed);
        if let Some(handle) = parser.take_if(|_| parser_stopped) {
            // The parser stopped before the end of the upload: if it failed, the file is not a
            // snapshot and is refused now, without reading the rest; if it succeeded, the rest
            // is trailing data after the pickle's STOP, which Python ignores too.
            let result = join_parser(handle).await?;
            parsed = Some(result.map_err(refused)?);
        }
        if let (Some(chunks), Some(_)) = (&chunks, &parser) {
            // A send fails only when the parser has stopped; the next chunk checks why.
            let _ = chunks.send(chunk).await;
        }
    }
    drop(chunks);
    if size == 0 {
        return Err(ApiError::NotASnapshot("the upload is empty".into()));
    }
    let loaded = match (parsed, parser) {
        (Some(loaded), _) => Some(loaded),
        (None, Some(handle)) => Some(join_parser(handle).await?.map_err(refused)?),
        (None, None) => None,
    };
    out.flush()
        .await
        .map_err(|e| ApiError::writing("cannot write the upload", e))?;
    Ok(Received {
        file,
        size,
        digest: hasher.finalize().to_vec(),
        loaded,
    })
}

/// `POST /api/snapshots`: the raw file as the body (`curl --data-binary @x.pickle`), or a
/// multipart form with a `file` field (the page's file picker).
pub async fn upload(
    State(state): State<AppState>,
    Query(params): Query<UploadParams>,
    request: Request,
) -> Result<(StatusCode, Json<SnapshotView>), ApiError> {
    let limit = state.config.max_upload_bytes;
    // Checked before a byte of the body is read, so a refused upload costs nothing.
    let labels = Labels::from_params(&params)?;
    // Per client first, so that one client holding its share is told so, and costs no one a
    // slot of the server's. Requests that did not come over TCP (the router in tests) have no
    // address and only the server's limit.
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| super::connections::client_of(peer.ip()));
    let _client_slot = match client {
        Some(client) => Some(state.client_upload_slots.take(client).ok_or(
            ApiError::ClientBusy(state.config.limits.max_uploads_per_client),
        )?),
        None => None,
    };
    let _slot = state
        .upload_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::Busy(state.config.limits.max_uploads))?;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge { limit });
    }
    let is_multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    // Who uploads, for the audit log (the access layer puts it there, when there is one).
    let actor = request
        .extensions()
        .get::<super::access::Actor>()
        .and_then(|actor| actor.0.clone());
    let temp_dir = state.store.temp_dir();
    // Parsed as it arrives (with the server's role rules), unless it may be a duplicate.
    let parse = (!maybe_duplicate(&state, declared).await).then(|| Reading::of(&state));
    let pace = Pace {
        stall_timeout: state.config.limits.body_timeout,
        min_bytes_per_second: state.config.limits.min_upload_rate,
    };
    let (received, part_filename) = if is_multipart {
        receive_multipart(request, &temp_dir, limit, parse, pace).await?
    } else {
        let stream = request.into_body().into_data_stream();
        (receive(stream, &temp_dir, limit, parse, pace).await?, None)
    };

    let (view, created) = ingest(&state, received, params, labels, part_filename, actor).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// Imports a local file (the FILEs of `snapview serve FILE...`) exactly as an upload.
pub async fn import_path(state: &AppState, path: &Path) -> Result<SnapshotView, ApiError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ApiError::BadRequest(format!("cannot read {}: {e}", path.display())))?;
    let size = file.metadata().await.ok().map(|m| m.len());
    let parse = (!maybe_duplicate(state, size).await).then(|| Reading::of(state));
    let stream = tokio_util::io::ReaderStream::new(file);
    let received = receive(
        stream,
        &state.store.temp_dir(),
        state.config.max_upload_bytes,
        parse,
        // A local file: no client to be slow.
        Pace {
            stall_timeout: state.config.limits.body_timeout,
            min_bytes_per_second: 0,
        },
    )
    .await?;
    let filename = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let (view, _) = ingest(
        state,
        received,
        UploadParams::default(),
        Labels::default(),
        filename,
        None,
    )
    .await?;
    Ok(view)
}

/// An upload's `name` and `group`, by the rules PATCH uses too.
#[derive(Default)]
struct Labels {
    name: Option<String>,
    group: String,
}

impl Labels {
    fn from_params(params: &UploadParams) -> Result<Self, ApiError> {
        Ok(Self {
            name: params
                .name
                .as_deref()
                .map(|name| clean_label("name", name))
                .transpose()?,
            group: params
                .group
                .as_deref()
                .map(clean_group)
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// Parses a received file and, if it is a snapshot, stores it: returns its view and whether it
/// was new (the same bytes uploaded twice give the same id).
async fn ingest(
    state: &AppState,
    received: Received,
    params: UploadParams,
    labels: Labels,
    part_filename: Option<String>,
    actor: Option<String>,
) -> Result<(SnapshotView, bool), ApiError> {
    let filename = sanitize_filename(
        &params
            .filename
            .clone()
            .or(part_filename)
            .or_else(|| labels.name.clone())
            .unwrap_or_else(|| "snapshot.pickle".to_owned()),
    );
    let name = labels.name.unwrap_or_else(|| display_name(&filename));
    let id = SnapshotId::from_digest(&received.digest);

    let store = state.store.clone();
    let lookup = id.clone();
    let existing = blocking(move || store.get(&lookup)).await??;
    if let Some(record) = existing {
        // The same bytes are stored already: same id, nothing new to keep.
        return Ok((SnapshotView::new(&record, &state.config.public_url), false));
    }
    let loaded = match received.loaded {
        // Parsed while it arrived: analysed already, so opening its page right after is instant.
        Some(loaded) => loaded,
        None => {
            let path = received.file.to_path_buf();
            let reading = Reading::of(state);
            blocking(move || reading.load(|options| crate::analysis::load_path(&path, options)))
                .await?
                .map_err(refused)?
        }
    };
    let loaded = Arc::new(loaded);

    let new = NewSnapshot {
        id: id.clone(),
        name,
        filename,
        size_bytes: received.size,
        group: labels.group,
        summary: SummaryRow::new(&loaded.summary).to_stored(),
    };
    let temp_path = received.file;
    let store = state.store.clone();
    let stored = blocking(move || {
        let result = store.put(new, &temp_path, actor.as_deref());
        if result.is_ok() {
            // The store renamed the file into place (or removed it, as a duplicate): its old
            // path must not be removed on drop, since a new upload's file may take the name.
            let _ = temp_path.keep();
        }
        // Else the temporary file is removed as `temp_path` drops.
        result
    })
    .await?;
    let (record, created) = stored?;
    super::stored_index::maintain_in_background(state, &record.id, &loaded);
    state.cache.insert(&record.id, loaded);
    tracing::info!(id = %record.id, size = record.size_bytes, created, "snapshot uploaded");
    Ok((
        SnapshotView::new(&record, &state.config.public_url),
        created,
    ))
}

/// Whether a stored snapshot has the declared size: then the upload is hashed first and parsed
/// only if new, rather than parsed while it arrives (which would hold a second copy of a large
/// snapshot in memory just to find it was stored already).
async fn maybe_duplicate(state: &AppState, declared_size: Option<u64>) -> bool {
    let Some(size) = declared_size else {
        return false;
    };
    let store = state.store.clone();
    matches!(blocking(move || store.has_size(size)).await, Ok(Ok(true)))
}

async fn receive_multipart(
    request: Request,
    dir: &Path,
    limit: u64,
    parse: Option<Reading>,
    pace: Pace,
) -> Result<(Received, Option<String>), ApiError> {
    use axum::extract::FromRequest;
    let mut multipart = axum::extract::Multipart::from_request(request, &())
        .await
        .map_err(|e| ApiError::BadRequest(format!("unreadable multipart form: {e}")))?;
    // Fields other than `file` are read through while waiting for the next one; they are small
    // form values, so that whole wait is bounded like one chunk's.
    while let Some(field) = tokio::time::timeout(pace.stall_timeout, multipart.next_field())
        .await
        .map_err(|_| ApiError::BodyStalled(pace.stall_timeout))?
        .map_err(|e| interrupted(&e, limit))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let filename = field.file_name().map(str::to_owned);
        let received = receive(field, dir, limit, parse, pace).await?;
        return Ok((received, filename));
    }
    Err(ApiError::BadRequest(
        "the multipart form has no `file` field".into(),
    ))
}

/// `gpt2_run.pickle` → `gpt2_run`.
fn display_name(filename: &str) -> String {
    let base = filename.rsplit(['/', '\\']).next().unwrap_or(filename);
    let mut name = base;
    for suffix in [".gz", ".zst", ".pickle", ".pkl", ".json"] {
        name = name.strip_suffix(suffix).unwrap_or(name);
    }
    if name.is_empty() { base } else { name }.to_owned()
}

/// The last path component, without control characters, at most 200 characters (it is shown,
/// and sent back encoded in `Content-Disposition`).
fn sanitize_filename(filename: &str) -> String {
    let base = filename.rsplit(['/', '\\']).next().unwrap_or(filename);
    let clean: String = base.chars().filter(|c| !c.is_control()).take(200).collect();
    if clean.is_empty() {
        "snapshot.pickle".to_owned()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_file_names() {
        assert_eq!(display_name("runs/gpt2_run.pickle"), "gpt2_run");
        assert_eq!(display_name("x.pickle.gz"), "x");
        assert_eq!(display_name(".pickle"), ".pickle");
        assert_eq!(sanitize_filename("../../a\"b\n.pickle"), "a\"b.pickle");
    }

    #[test]
    fn the_rate_applies_after_the_grace_and_grows_with_what_arrived() {
        let pace = Pace {
            stall_timeout: Duration::from_secs(30),
            min_bytes_per_second: 1000,
        };
        // Within the grace, a byte buys nothing more: the wait ends with the grace.
        assert_eq!(
            pace.next_wait(1, Duration::from_secs(4)),
            (Duration::from_secs(6), true)
        );
        // Past it, every 1000 bytes buy a second of waiting.
        assert_eq!(
            pace.next_wait(15_000, Duration::from_secs(12)),
            (Duration::from_secs(3), true)
        );
        assert_eq!(
            pace.next_wait(1_000, Duration::from_secs(12)),
            (Duration::ZERO, true)
        );
        // The stall timeout bounds a wait however much was sent; a rate of 0 is no rate.
        assert_eq!(
            pace.next_wait(1 << 30, Duration::from_secs(1)),
            (Duration::from_secs(30), false)
        );
        let no_rate = Pace {
            min_bytes_per_second: 0,
            ..pace
        };
        assert_eq!(
            no_rate.next_wait(0, Duration::from_secs(100)),
            (Duration::from_secs(30), false)
        );
    }
}
