//! The readers under a load: a file read ahead by a second thread, every frame of a zstd
//! stream, and a count of the bytes read for the progress bar.

use super::SNIFF;
use crate::pickle::{CHUNK_HEADROOM, Chunks};
use std::io::{BufRead, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Files from this size on are read by a second thread (see [`ReadAhead`]).
pub(super) const READ_AHEAD_FROM: u64 = 16 << 20;

/// Bytes per chunk the read-ahead thread hands over: small enough to still be in the shared
/// cache when the decoder reads them, large enough that waking the thread (it waits whenever
/// it is four chunks ahead) is rare: on a 2-core VM 256 KB chunks cost 2% more time.
const READ_AHEAD_CHUNK: usize = 1 << 20;

/// A file read a few chunks ahead by a second thread, so the copy out of the page cache (a
/// twentieth of a large load) overlaps decoding; or a decompressor run ahead the same way, so
/// decompression (as long as the decoding itself) overlaps it too. Each chunk leaves [`CHUNK_HEADROOM`] bytes
/// free at its front, so the pickle decoder can take chunks over whole ([`Chunks`]); other
/// readers copy out of them ([`Read`]). Chunk buffers are handed back for reuse, so at most a
/// few exist at once; dropping the reader stops the thread.
pub(super) struct ReadAhead {
    chunks: Receiver<std::io::Result<Vec<u8>>>,
    spare: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
}

impl ReadAhead {
    /// Starts the thread in `scope`; gives the file back if the thread cannot be started.
    pub(super) fn start<'scope, R: Read + Send + 'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        file: R,
    ) -> Result<Self, R> {
        let (file_sender, file_receiver) = sync_channel::<R>(1);
        let (chunk_sender, chunks) = sync_channel(4);
        let (spare, spare_receiver) = sync_channel(4);
        let started = std::thread::Builder::new()
            .name("snapview-read".into())
            .spawn_scoped(scope, move || {
                if let Ok(file) = file_receiver.recv() {
                    read_ahead(file, &chunk_sender, &spare_receiver);
                }
            });
        if started.is_err() {
            return Err(file);
        }
        // The thread waits for the file; it can only be gone if it panicked.
        file_sender.send(file).map_err(|returned| returned.0)?;
        Ok(Self {
            chunks,
            spare,
            current: Vec::new(),
            pos: 0,
        })
    }

    /// The next chunk from the thread (`None` at the end of the file), handing `spent` back.
    fn receive(&mut self, spent: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        // If the thread has enough buffers, this one is simply freed.
        let _ = self.spare.try_send(spent);
        match self.chunks.recv() {
            Ok(Ok(chunk)) => Ok(Some(chunk)),
            Ok(Err(e)) => Err(e),
            // The thread ended: the end of the file.
            Err(_) => Ok(None),
        }
    }

    /// The first bytes of the file (fewer if it is shorter), to tell its encoding by. They are
    /// still read after this.
    pub(super) fn head(&mut self) -> std::io::Result<&[u8]> {
        if self.current.is_empty()
            && let Some(chunk) = self.receive(Vec::new())?
        {
            self.current = chunk;
            self.pos = CHUNK_HEADROOM;
        }
        let unread = self.current.get(self.pos..).unwrap_or(&[]);
        Ok(&unread[..unread.len().min(SNIFF)])
    }
}

/// The read-ahead thread: sends `file` in chunks until its end, an error, or the reader is gone.
fn read_ahead(
    mut file: impl Read,
    chunks: &SyncSender<std::io::Result<Vec<u8>>>,
    spare: &Receiver<Vec<u8>>,
) {
    loop {
        let mut chunk = spare.try_recv().unwrap_or_default();
        chunk.resize(CHUNK_HEADROOM + READ_AHEAD_CHUNK, 0);
        let mut filled = CHUNK_HEADROOM;
        while filled < chunk.len() {
            match file.read(&mut chunk[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = chunks.send(Err(e));
                    return;
                }
            }
        }
        chunk.truncate(filled);
        // At the end of the file, or when the reader was dropped (the load is over).
        if filled == CHUNK_HEADROOM || chunks.send(Ok(chunk)).is_err() {
            return;
        }
    }
}

impl Chunks for ReadAhead {
    fn next_chunk(&mut self, spent: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        // A chunk `head` received and nothing read yet goes first.
        if !self.current.is_empty() {
            self.pos = 0;
            return Ok(Some(std::mem::take(&mut self.current)));
        }
        self.receive(spent)
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.current.len() {
            let used = std::mem::take(&mut self.current);
            match self.receive(used)? {
                Some(chunk) => {
                    self.current = chunk;
                    self.pos = CHUNK_HEADROOM;
                }
                None => return Ok(0),
            }
        }
        let unread = &self.current[self.pos..];
        let n = buf.len().min(unread.len());
        buf[..n].copy_from_slice(&unread[..n]);
        self.pos += n;
        Ok(n)
    }
}

/// Decompresses every frame of a zstd stream (`pzstd` and `cat a.zst b.zst` write several, with
/// skippable frames between) with libzstd, which checks each frame's checksum. Errors carry the
/// io kind [`pickle::io_error`] words for the user: cut short (`UnexpectedEof`) or corrupt.
pub(super) struct ZstdFrames<R> {
    source: R,
    context: zstd_safe::DCtx<'static>,
    /// Between the first byte of a frame and its last flushed byte: the input may not end here.
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    pub(super) fn new(source: R) -> Self {
        Self {
            source,
            context: zstd_context(),
            in_frame: false,
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let input = self.source.fill_buf()?;
            let ended = input.is_empty();
            if ended && !self.in_frame {
                return Ok(0);
            }
            let mut input = zstd_safe::InBuffer::around(input);
            let mut output = zstd_safe::OutBuffer::around(&mut *buf);
            // Called with no input too: libzstd may still hold output of the frame to flush.
            let owed = self
                .context
                .decompress_stream(&mut output, &mut input)
                .map_err(zstd_failure)?;
            let (consumed, produced) = (input.pos(), output.pos());
            self.source.consume(consumed);
            // 0: the frame is decoded and flushed; the next byte starts another, or the end.
            self.in_frame = owed != 0;
            if produced > 0 {
                return Ok(produced);
            }
            if ended {
                return Err(zstd_cut_short());
            }
        }
    }
}

/// Windows above 2^27 bytes (128 MiB, libzstd's own default limit and what `zstd` writes at
/// most without `--long`) are refused: the window is the memory a frame may make the decoder
/// keep, whatever it decompresses to.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// A libzstd decompression context with the window bounded.
pub(super) fn zstd_context() -> zstd_safe::DCtx<'static> {
    let mut context = zstd_safe::DCtx::create();
    // Setting a parameter in its range cannot fail; a context that refused it would keep
    // libzstd's default, which is the same limit.
    let _ = context.set_parameter(zstd_safe::DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX));
    context
}

/// libzstd's error `code` as an io error the user can read (all of them `InvalidData`: an input
/// that ends early is told apart by the caller, [`zstd_cut_short`]).
pub(super) fn zstd_failure(code: zstd_safe::ErrorCode) -> std::io::Error {
    use zstd_safe::zstd_sys::ZSTD_ErrorCode;
    // libzstd's codes are the negated values of its error enum.
    let which = 0usize.wrapping_sub(code);
    let message = if which == ZSTD_ErrorCode::ZSTD_error_checksum_wrong as usize {
        "a zstd frame's checksum does not match its data".to_owned()
    } else if which == ZSTD_ErrorCode::ZSTD_error_frameParameter_windowTooLarge as usize {
        format!(
            "a zstd frame asks for a window of more than {} MiB (written with `zstd --long`?)",
            1u64 << (ZSTD_WINDOW_LOG_MAX - 20)
        )
    } else {
        format!("zstd: {}", zstd_safe::get_error_name(code).to_lowercase())
    };
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// The input ended inside a zstd frame.
pub(super) fn zstd_cut_short() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the input ends inside a zstd frame",
    )
}

/// Counts bytes read from the file and reports progress every few megabytes.
pub(super) struct Counting<'a, R> {
    inner: R,
    read: u64,
    reported: u64,
    progress: Option<&'a (dyn Fn(u64) + Sync)>,
}

const PROGRESS_STEP: u64 = 4 << 20;

impl<'a, R> Counting<'a, R> {
    pub(super) fn new(inner: R, progress: Option<&'a (dyn Fn(u64) + Sync)>) -> Self {
        Self {
            inner,
            read: 0,
            reported: 0,
            progress,
        }
    }

    /// Adds `n` bytes read (0 at the end) and reports them if it is time.
    fn count(&mut self, n: usize) {
        self.read += n as u64;
        if let Some(progress) = self.progress
            && (self.read - self.reported >= PROGRESS_STEP || n == 0)
        {
            self.reported = self.read;
            progress(self.read);
        }
    }
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count(n);
        Ok(n)
    }
}

impl<C: Chunks> Chunks for Counting<'_, C> {
    fn next_chunk(&mut self, spent: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        let chunk = self.inner.next_chunk(spent)?;
        let n = chunk
            .as_ref()
            .map_or(0, |c| c.len().saturating_sub(CHUNK_HEADROOM));
        self.count(n);
        Ok(chunk)
    }
}
