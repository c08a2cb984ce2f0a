//! Receiving an upload's body: onto a temporary file, hashed, parsed as it lands there, refused
//! past the size limit, when it stalls or when it arrives too slowly.

use super::limits::Pace;
use super::parse::{
    Reading, SNIFF_BYTES, join_parser, refuse_wrong_file_type, refused, spawn_parser,
};
use crate::pickle::Landing;
use crate::server::analysed::AnalysedSnapshot;
use crate::server::error::{ApiError, blocking};
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::multipart::MultipartError;
use axum::http::StatusCode;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempPath;

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

/// Chunks in flight from the network to the file writer and to the hasher (a few MB at most).
const QUEUE: usize = 64;

/// The upload's file, written on a thread of its own: each chunk as it comes, then the
/// landing told, so the parser reads only bytes that are in the file. Ends with the file, or
/// the first write's error.
fn spawn_writer(
    mut out: std::fs::File,
    landing: Arc<Landing>,
) -> Result<Stage<std::io::Result<std::fs::File>>, ApiError> {
    spawn_stage("snapview-upload-writer", move |mut chunks| {
        use std::io::Write as _;
        let (mut written, mut flushed) = (0usize, 0usize);
        while let Some(chunk) = chunks.blocking_recv() {
            out.write_all(&chunk)?;
            written += chunk.len();
            landing.landed(written);
            if written - flushed >= WRITE_BACK_EVERY {
                start_write_back(&out, flushed, written);
                flushed = written;
            }
        }
        Ok(out)
    })
}

/// Bytes written between two starts of their write-back (see [`start_write_back`]).
const WRITE_BACK_EVERY: usize = 32 << 20;

/// Starts writing `out[from..to]` to the disk, without waiting for it: the store makes a new
/// blob durable (fsync) before it lists it, and a 2.5 GB upload whose pages were all still
/// dirty then waited a second more for the disk. Started as the bytes land, the write-back
/// overlaps the upload and the parse. A hint: if the kernel refuses it, the fsync does it all.
fn start_write_back(out: &std::fs::File, from: usize, to: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
            return;
        };
        // SAFETY: a plain system call on a file descriptor this thread owns, with no memory
        // passed; it only schedules the write of pages the file already holds.
        unsafe {
            libc::sync_file_range(out.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (out, from, to);
}

/// The upload's SHA-256, on a thread of its own (it costs as much as the write).
fn spawn_hasher() -> Result<Stage<Vec<u8>>, ApiError> {
    spawn_stage("snapview-upload-hasher", |mut chunks| {
        let mut hasher = Sha256::new();
        while let Some(chunk) = chunks.blocking_recv() {
            hasher.update(&chunk);
        }
        hasher.finalize().to_vec()
    })
}

/// A thread that takes an upload's chunks in order, and what it makes of them once they end.
struct Stage<T> {
    chunks: Option<tokio::sync::mpsc::Sender<Bytes>>,
    done: tokio::sync::oneshot::Receiver<T>,
}

fn spawn_stage<T: Send + 'static>(
    name: &str,
    job: impl FnOnce(tokio::sync::mpsc::Receiver<Bytes>) -> T + Send + 'static,
) -> Result<Stage<T>, ApiError> {
    let (chunks, receiver) = tokio::sync::mpsc::channel(QUEUE);
    let (answer, done) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = answer.send(job(receiver));
        })
        .map_err(|e| ApiError::internal("cannot start an upload thread", e))?;
    Ok(Stage {
        chunks: Some(chunks),
        done,
    })
}

impl<T> Stage<T> {
    /// Hands `chunk` on; false if the thread has stopped (its result says why).
    async fn send(&self, chunk: Bytes) -> bool {
        match &self.chunks {
            Some(chunks) => chunks.send(chunk).await.is_ok(),
            None => false,
        }
    }

    /// Ends the chunks and waits for what the thread made of them.
    async fn finish(mut self) -> Result<T, ApiError> {
        self.chunks = None;
        self.done
            .await
            .map_err(|e| ApiError::internal("an upload thread stopped without an answer", e))
    }
}

/// Ends the landing as cut unless it ended whole: on every early return, the parser stops
/// waiting for bytes that will not come.
struct CutUnlessEnded(Arc<Landing>);

impl Drop for CutUnlessEnded {
    fn drop(&mut self) {
        if !self.0.has_ended() {
            self.0.end(false);
        }
    }
}

/// Writes a byte stream to a temp file, hashing it and parsing it as it lands (so a large
/// upload is analysed about when its last byte lands, and a file that is not a snapshot is
/// refused after its first bytes), refusing it past `limit` bytes, when no bytes arrive for
/// `pace.stall_timeout` or when they arrive slower than `pace.min_bytes_per_second`. The
/// network, the write, the hash and the parse each run on their own thread.
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
    // The room the parser maps: the size the request announced (the file is that long, its
    // tail zeros, until the upload ends and it is cut to what came).
    let room = parse
        .as_ref()
        .and_then(Reading::expected_bytes)
        .filter(|&bytes| bytes <= limit)
        .unwrap_or(0);
    let created = blocking(move || {
        let created = tempfile::Builder::new()
            .prefix("upload-")
            .tempfile_in(dir)?;
        created.as_file().set_len(room)?;
        let reader = created.as_file().try_clone()?;
        Ok::<_, std::io::Error>((created, reader))
    })
    .await?
    .map_err(|e| ApiError::writing("cannot create a temporary file", e))?;
    let ((out, file), reader) = (created.0.into_parts(), created.1);
    let landing = Arc::new(Landing::new());
    let _cut_on_return = CutUnlessEnded(landing.clone());
    let writer = spawn_writer(out, landing.clone())?;
    let hasher = spawn_hasher()?;
    let mut unstarted = parse.map(|reading| (reading, reader));
    let mut parser = None;
    let taken = async {
        let mut parsed = None;
        let mut size = 0u64;
        let mut head = Vec::with_capacity(SNIFF_BYTES);
        // Only the time spent waiting for the client counts against its rate, not the time
        // this loop spends handing chunks on.
        let mut waited = Duration::ZERO;
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
            if let Some((reading, reader)) = unstarted.take() {
                parser = Some(spawn_parser(reading, reader, room, landing.clone())?);
            }
            size += chunk.len() as u64;
            if size > limit {
                return Err(ApiError::TooLarge { limit });
            }
            if room > 0 && size > room && !landing.has_ended() {
                // More than the request announced (it cannot happen with a true length): the
                // parser's map cannot hold it, so it stops, and the file is read once it is in.
                landing.end(false);
            }
            if !(hasher.send(chunk.clone()).await && writer.send(chunk).await) {
                // A stage stopped: only the writer can, on an error that finishing it tells.
                break;
            }
            if let Some(answer) = parser.as_mut().and_then(|parser| parser.try_recv().ok()) {
                parser = None;
                match answer {
                    // The parser stopped before the end of the upload: if it failed, the file
                    // is not a snapshot and is refused now, without reading the rest (unless it
                    // failed for want of bytes it was not given); if it succeeded, the rest is
                    // trailing data after the pickle's STOP, which Python ignores too.
                    Err(error) if !landing.is_cut() => return Err(refused(error)),
                    Err(_) => {}
                    Ok(loaded) => parsed = Some(loaded),
                }
            }
        }
        Ok((size, parsed))
    }
    .await;
    let digest = hasher.finish().await;
    let written = writer.finish().await;
    let taken = taken.and_then(|taken| {
        let written = written?.map_err(|e| ApiError::writing("cannot write the upload", e))?;
        Ok((taken, digest?, written))
    });
    let ((size, parsed), digest, written) = match taken {
        Ok(taken) => taken,
        Err(error) => {
            // The parser stops at its next read of the cut input; its end is waited for, so
            // that the file it holds open is gone (its disk space free) when the client hears
            // why, and no thread of this upload outlives it.
            landing.end(false);
            if let Some(parser) = parser {
                let _ = parser.await;
            }
            return Err(error);
        }
    };
    if size == 0 {
        return Err(ApiError::NotASnapshot("the upload is empty".into()));
    }
    landing.end(true);
    let loaded = match (parsed, parser) {
        (Some(loaded), _) => Some(loaded),
        (None, Some(handle)) => match join_parser(handle).await? {
            Ok(loaded) => Some(loaded),
            Err(error) if !landing.is_cut() => return Err(refused(error)),
            // Read from the file instead, now that it is whole.
            Err(_) => None,
        },
        (None, None) => None,
    };
    if size < room {
        // The parser is done with its map of the room: the file is cut to what came.
        blocking(move || written.set_len(size))
            .await?
            .map_err(|e| ApiError::writing("cannot write the upload", e))?;
    }
    Ok(Received {
        file,
        size,
        digest,
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
