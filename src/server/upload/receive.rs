//! Receiving an upload's body: onto a temporary file, hashed, its chunks handed to the parser,
//! refused past the size limit, when it stalls or when it arrives too slowly.

use super::limits::Pace;
use super::parse::{
    Reading, SNIFF_BYTES, join_parser, refuse_wrong_file_type, refused, spawn_parser,
};
use crate::server::analysed::AnalysedSnapshot;
use crate::server::error::{ApiError, blocking};
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::multipart::MultipartError;
use axum::http::StatusCode;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Duration, Instant};
use tempfile::TempPath;
use tokio::io::AsyncWriteExt;

/// One upload: its bytes on disk, and the snapshot parsed from them as they arrived (unless the
/// upload was likely a duplicate: then it is parsed only if its hash says it is new).
pub(super) struct Received {
    /// Removed when dropped, unless the store took it.
    pub(super) file: TempPath,
    pub(super) size: u64,
    pub(super) digest: Vec<u8>,
    pub(super) loaded: Option<AnalysedSnapshot>,
}

/// An error from a request body on its way in.
pub(super) trait BodyError: std::fmt::Display {
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

/// Writes a byte stream to a temp file, hashing it and parsing it as it arrives (so a large
/// upload is analysed by the time its last byte lands, and a file that is not a snapshot is
/// refused after its first bytes), refusing it past `limit` bytes, when no bytes arrive for
/// `pace.stall_timeout` or when they arrive slower than `pace.min_bytes_per_second`.
pub(super) async fn receive<S, E>(
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
    // The parser starts at the first bytes, unless they say the file is better read once it
    // has all arrived (then `ingest` reads the stored file).
    let mut unstarted = parse;
    let (mut chunks, mut parser) = (None, None);
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
        if let Some(reading) = unstarted.take()
            && !reading.after_arrival(&head)
        {
            let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(PARSE_QUEUE);
            parser = Some(spawn_parser(receiver, reading)?);
            chunks = Some(sender);
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

pub(super) async fn receive_multipart(
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
