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
//! before a byte of the body is read); each is written, hashed and parsed on threads of its
//! own, never tokio's blocking threads that file writes and the store need; and a body that sends nothing for
//! `--body-timeout`, or that arrives slower than `--min-upload-rate` on average once the server
//! has waited [`UPLOAD_RATE_GRACE`] for it, is dropped with 408, which also ends its parser
//! (its input is cut, and it stops waiting for more). Without the rate, a byte every few
//! seconds held a slot for as long as the client liked.
//!
//! Split by job: `limits` (the per-client slots and the pace an upload must keep), `receive`
//! (the body onto disk and hashed, each on a thread of its own, the parser told as bytes land),
//! `parse` (the parser thread and the server's reading limits); this file is the handlers and
//! the storing.

pub mod import;
mod limits;
mod parse;
mod receive;

pub use limits::{ClientSlots, UPLOAD_RATE_GRACE};

use super::AppState;
use super::api::{clean_group, clean_label};
use super::error::{ApiError, blocking};
use super::store::{NewSnapshot, SnapshotId};
use super::wire::{SnapshotView, SummaryRow};
use axum::Json;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{StatusCode, header};
use limits::Pace;
use parse::{Reading, refused};
use receive::{Received, receive, receive_multipart};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Deserialize, Default)]
pub struct UploadParams {
    /// A display name; defaults to the file name.
    pub name: Option<String>,
    /// The original file name (raw uploads have none of their own).
    pub filename: Option<String>,
    /// A group label, e.g. the job whose ranks these are.
    pub group: Option<String>,
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
    let _slots = UploadSlots::take(
        &state,
        request.extensions().get::<ConnectInfo<SocketAddr>>(),
    )?;
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
    // Parsed as it lands (with the server's role rules), unless it may be a duplicate.
    let parse =
        (!maybe_duplicate(&state, declared).await).then(|| Reading::of(&state).expecting(declared));
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
    Ok(stored_answer(view, created))
}

/// An upload's answer: 201 when stored, 200 when the same bytes were stored already.
fn stored_answer(view: SnapshotView, created: bool) -> (StatusCode, Json<SnapshotView>) {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(view))
}

/// An upload's share of the server: one of its slots (`--max-uploads`) and one of its client
/// address's (`--max-uploads-per-client`), given back on drop. Imports hold the same.
struct UploadSlots {
    _client: Option<limits::ClientSlot>,
    _server: tokio::sync::OwnedSemaphorePermit,
    /// Counted in `snapview_uploads_in_flight` while held.
    _in_flight: super::ops::UploadInFlight,
}

impl UploadSlots {
    /// Per client first, so that one client holding its share is told so, and costs no one a
    /// slot of the server's. Requests that did not come over TCP (the router in tests) have no
    /// address and only the server's limit.
    fn take(state: &AppState, peer: Option<&ConnectInfo<SocketAddr>>) -> Result<Self, ApiError> {
        let client = peer.map(|ConnectInfo(peer)| super::connections::client_of(peer.ip()));
        let client = match client {
            Some(client) => Some(state.client_upload_slots.take(client).ok_or(
                ApiError::ClientBusy(state.config.limits.max_uploads_per_client),
            )?),
            None => None,
        };
        let server = state
            .upload_slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::Busy(state.config.limits.max_uploads))?;
        Ok(Self {
            _client: client,
            _server: server,
            _in_flight: super::ops::UploadInFlight::begin(),
        })
    }
}

/// Imports a local file (the FILEs of `snapview serve FILE...`) exactly as an upload.
pub async fn import_path(state: &AppState, path: &Path) -> Result<SnapshotView, ApiError> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ApiError::BadRequest(format!("cannot read {}: {e}", path.display())))?;
    let size = file.metadata().await.ok().map(|m| m.len());
    let parse = (!maybe_duplicate(state, size).await).then(|| Reading::of(state).expecting(size));
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
            tracing::debug!(
                bytes = received.size,
                threads = crate::snapshot::default_threads(),
                "reading the upload from its file"
            );
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
}
