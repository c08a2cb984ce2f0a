//! A zstd file decompressed on several cores and decoded on every core. `pzstd` writes a frame
//! for every few MiB of input (and `cat a.zst b.zst` one per file), and a frame decompresses on
//! its own (libzstd, one context per worker), so:
//!
//! - [`FrameWalk`] finds the frames from their headers: a block's header gives its compressed
//!   size, so nothing is decompressed to find where a frame ends;
//! - [`ParallelFrames`] decompresses them on worker threads and yields their bytes in file
//!   order, as a [`Read`] (under the same [`Capped`] bounds as a single-thread decompressor);
//! - [`load`] lands those bytes in a scratch file in memory that the parallel pickle decoder
//!   reads as they land (as it reads an upload), at most a window ahead of its readers, and cuts
//!   out the pages the decoder has passed: memory stays a few windows, not the decompressed
//!   file.
//!
//! Anything the walk does not expect (a frame with a dictionary, a window or a frame beyond
//! the bounds below, a reserved bit, a cut header) ends the walk there: from that frame on the
//! single-thread decompressor reads the rest, so its errors and limits are the ones a user
//! gets, word for word.

use super::readers::{ZstdFrames, zstd_context, zstd_cut_short, zstd_failure};
use super::scratch::{Compressed, Decompressed, ReadFrom, Scratch};
use super::{LoadError, LoadOptions, WithFollowerOutcome};
use crate::pickle::CompressedCount;
use crate::snapshot::Compression;
use crate::snapshot::compact::parallel::Parallel;
use crate::snapshot::follow::TraceFollower;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

/// A frame's window (the history its decoder keeps) at most: `zstd -19` uses 8 MiB, pzstd's
/// levels up to 4 MiB. Each worker keeps one, so a frame declaring more is left to the
/// single-thread decompressor.
const MAX_WINDOW: u64 = 32 << 20;

/// A frame's compressed bytes at most (each worker holds its frame's whole): pzstd's are
/// under 1 MiB.
const MAX_FRAME_BYTES: u64 = 64 << 20;

/// Blocks per frame at most: a frame of full blocks (128 KiB each) holds 64 MiB this way
/// (pzstd's hold a few MiB). A frame of many tiny blocks (a bomb of RLE blocks) would make the
/// walk itself long, and the walk of an upload waits for a frame's last block to land: `zstd`
/// writes one frame of the whole file, left to the single-thread decompressor once this many of
/// its blocks are in.
const MAX_BLOCKS: usize = 512;

/// Bytes a worker hands over at a time.
const PIECE: usize = 1 << 20;

/// Pieces a worker may have decompressed ahead of the reader: a pzstd frame is 4-8 MiB, so a
/// worker ahead finishes its frame and starts the next one.
const PIECES_AHEAD: usize = 8;

/// Frames decompressed by worker threads in this process, so tests can tell that the parallel
/// path ran.
static FRAMES: AtomicU64 = AtomicU64::new(0);

/// Frames of zstd files decompressed on worker threads so far in this process.
pub fn frames_decompressed_in_parallel() -> u64 {
    FRAMES.load(Ordering::Relaxed)
}

/// One stretch of the compressed file for a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// A whole frame, `start..end`.
    Frame { start: u64, end: u64 },
    /// Everything from `start` on, for the single-thread decompressor.
    Rest { start: u64 },
}

/// Walks a zstd file's frames from their headers (see the module's comment).
struct FrameWalk<'a> {
    source: Compressed<'a>,
    at: u64,
    /// The rest was handed out (or the file ended): no more jobs.
    done: bool,
}

impl<'a> FrameWalk<'a> {
    fn new(source: Compressed<'a>) -> Self {
        Self {
            source,
            at: 0,
            done: false,
        }
    }

    /// The next job, `None` once the file is handed out.
    fn next_job(&mut self) -> Option<Job> {
        if self.done {
            return None;
        }
        loop {
            if self.source.holds(self.at, 1) == 0 {
                self.done = true;
                return None;
            }
            match self.step() {
                Some(Step::Skipped(end)) => self.at = end,
                Some(Step::Frame(end)) => {
                    let job = Job::Frame {
                        start: self.at,
                        end,
                    };
                    self.at = end;
                    return Some(job);
                }
                None => {
                    self.done = true;
                    return Some(Job::Rest { start: self.at });
                }
            }
        }
    }

    /// The frame at `self.at`, if it is one a worker may take.
    fn step(&self) -> Option<Step> {
        let mut head = [0u8; 18];
        let n = self.read_at(self.at, &mut head)?;
        let head = &head[..n];
        let magic = u32::from_le_bytes(head.get(..4)?.try_into().ok()?);
        if magic & 0xffff_fff0 == 0x184d_2a50 {
            let length = u32::from_le_bytes(head.get(4..8)?.try_into().ok()?);
            let end = self.at.checked_add(8 + u64::from(length))?;
            return self
                .source
                .holds_until(self.at, end)
                .then_some(Step::Skipped(end));
        }
        if magic != 0xfd2f_b528 {
            return None;
        }
        let descriptor = *head.get(4)?;
        let (content_flag, single_segment) = (descriptor >> 6, descriptor & 0x20 != 0);
        let (reserved, checksum, dictionary) = (
            descriptor & 0x08 != 0,
            descriptor & 0x04 != 0,
            descriptor & 0x03,
        );
        if reserved || dictionary != 0 {
            return None;
        }
        let mut at = 5;
        let window = if single_segment {
            None
        } else {
            let descriptor = *head.get(at)?;
            at += 1;
            let base = 1u64 << (10 + u32::from(descriptor >> 3));
            Some(base + base / 8 * u64::from(descriptor & 7))
        };
        let content_bytes = match (content_flag, single_segment) {
            (0, false) => 0,
            (0, true) => 1,
            (1, _) => 2,
            (2, _) => 4,
            _ => 8,
        };
        let content = head.get(at..at + content_bytes)?;
        at += content_bytes;
        let content = content
            .iter()
            .rev()
            .fold(0u64, |sum, &byte| (sum << 8) | u64::from(byte))
            + if content_bytes == 2 { 256 } else { 0 };
        // A single-segment frame's window is its whole content.
        if window.unwrap_or(content) > MAX_WINDOW {
            return None;
        }
        let mut block = self.at + at as u64;
        for _ in 0..MAX_BLOCKS {
            let mut header = [0u8; 3];
            if self.read_at(block, &mut header)? < 3 {
                return None;
            }
            let header =
                u32::from(header[0]) | u32::from(header[1]) << 8 | u32::from(header[2]) << 16;
            let (last, kind, size) = (header & 1 != 0, (header >> 1) & 3, u64::from(header >> 3));
            let stored = match kind {
                0 | 2 => size,
                1 => 1,
                _ => return None,
            };
            block = block.checked_add(3 + stored)?;
            if last {
                let end = block + if checksum { 4 } else { 0 };
                let fits =
                    end - self.at <= MAX_FRAME_BYTES && self.source.holds_until(self.at, end);
                return fits.then_some(Step::Frame(end));
            }
            if block - self.at > MAX_FRAME_BYTES {
                return None;
            }
        }
        None
    }

    /// Reads what there is of `buf` at `offset`: `None` if the read fails.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Option<usize> {
        let want = usize::try_from(self.source.holds(offset, buf.len() as u64)).ok()?;
        self.source
            .file()
            .read_exact_at(&mut buf[..want], offset)
            .ok()
            .map(|()| want)
    }
}

enum Step {
    /// A skippable frame, ending here.
    Skipped(u64),
    /// A frame a worker may take, ending here.
    Frame(u64),
}

/// A frame handed to the reader: its compressed bytes (counted when its output is read) and
/// its output, piece by piece.
struct Output {
    compressed: u64,
    pieces: Receiver<std::io::Result<Vec<u8>>>,
    /// The single-thread decompressor's output, to the end of the file.
    rest: bool,
}

/// The frames of a zstd file, decompressed by worker threads and read in file order (see the
/// module's comment). Dropping it stops the workers (their sends fail).
pub(super) struct ParallelFrames {
    outputs: Receiver<Output>,
    current: Option<Output>,
    piece: Vec<u8>,
    at: usize,
    compressed: CompressedCount,
}

impl ParallelFrames {
    /// Starts `threads` workers in `scope` on the frames of `source`; the compressed bytes
    /// they take are added to `compressed` as their output is read.
    pub(super) fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        source: Compressed<'scope>,
        threads: usize,
        compressed: CompressedCount,
    ) -> Self {
        let walk = Arc::new(Mutex::new(FrameWalk::new(source)));
        // Each worker hands over one frame at a time, in the order it took them.
        let (sender, outputs) = sync_channel(threads);
        for _ in 0..threads.max(1) {
            let (walk, sender, compressed) = (walk.clone(), sender.clone(), compressed.clone());
            let spawned = std::thread::Builder::new()
                .name("snapview-unzstd".into())
                .spawn_scoped(scope, move || work(&walk, &sender, source, &compressed));
            if spawned.is_err() {
                break;
            }
        }
        Self {
            outputs,
            current: None,
            piece: Vec::new(),
            at: 0,
            compressed,
        }
    }
}

impl Decompressed for ParallelFrames {
    /// Reads the rest of the frame being read, checking it (its checksum): what a
    /// single-thread decompressor checks when its reader asks for one byte past the pickle.
    /// The single-thread decompressor's own output (one frame of the whole file, say) is read
    /// only as far as that byte: to its next piece, if the one read is spent, which checks the
    /// frame's end when it is there; bytes past it are not decompressed for nothing.
    fn finish(&mut self) -> std::io::Result<()> {
        let Some(output) = self.current.take() else {
            return Ok(());
        };
        if output.rest {
            if self.at == self.piece.len()
                && let Ok(piece) = output.pieces.recv()
            {
                piece?;
            }
            return Ok(());
        }
        for piece in &output.pieces {
            piece?;
        }
        Ok(())
    }
}

impl Read for ParallelFrames {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.at < self.piece.len() {
                let n = buf.len().min(self.piece.len() - self.at);
                buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            let output = match &self.current {
                Some(output) => output,
                None => match self.outputs.recv() {
                    Ok(output) => {
                        self.compressed.add_bytes(output.compressed);
                        self.current.insert(output)
                    }
                    // Every worker is done and every frame read.
                    Err(_) => return Ok(0),
                },
            };
            match output.pieces.recv() {
                Ok(piece) => {
                    self.piece = piece?;
                    self.at = 0;
                }
                Err(_) => self.current = None,
            }
        }
    }
}

/// A worker: takes the next job (in file order, under the walk's lock, which is also when its
/// output joins the reader's queue) until there is none or the reader is gone.
fn work(
    walk: &Mutex<FrameWalk<'_>>,
    outputs: &SyncSender<Output>,
    source: Compressed<'_>,
    compressed: &CompressedCount,
) {
    loop {
        let (pieces, receiver) = sync_channel(PIECES_AHEAD);
        let job = {
            let Ok(mut walk) = walk.lock() else { return };
            let Some(job) = walk.next_job() else { return };
            let (counted, rest) = match job {
                Job::Frame { start, end } => (end - start, false),
                // The single-thread decompressor counts what it reads itself.
                Job::Rest { .. } => (0, true),
            };
            let output = Output {
                compressed: counted,
                pieces: receiver,
                rest,
            };
            if outputs.send(output).is_err() {
                return;
            }
            job
        };
        let sent = match job {
            Job::Frame { start, end } => {
                FRAMES.fetch_add(1, Ordering::Relaxed);
                decompress_frame(source.file(), start, end, &pieces)
            }
            Job::Rest { start } => decompress_rest(source, start, compressed, &pieces),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The reader is gone: the worker stops.
struct Gone;

/// Decompresses the frame at `start..end` and sends it piece by piece, then its error if it
/// fails (after what it decompressed before failing, as a single-thread decompressor would
/// have yielded it).
fn decompress_frame(
    file: &File,
    start: u64,
    end: u64,
    pieces: &SyncSender<std::io::Result<Vec<u8>>>,
) -> Result<(), Gone> {
    let send = |piece| pieces.send(piece).map_err(|_| Gone);
    let mut compressed = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
    if let Err(error) = file.read_exact_at(&mut compressed, start) {
        return send(Err(error));
    }
    let mut context = zstd_context();
    let mut input = zstd_safe::InBuffer::around(&compressed);
    loop {
        let mut piece = vec![0u8; PIECE];
        let mut output = zstd_safe::OutBuffer::around(&mut piece[..]);
        let decoded = context.decompress_stream(&mut output, &mut input);
        let produced = output.pos();
        piece.truncate(produced);
        // What it decompressed before failing goes first, as one thread would have read it.
        if !piece.is_empty() {
            send(Ok(piece))?;
        }
        match decoded {
            Err(code) => return send(Err(zstd_failure(code))),
            Ok(0) if input.pos() < compressed.len() => {
                return send(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a zstd frame ends before its last block",
                )));
            }
            Ok(0) => return Ok(()),
            // Output owed and no room was left for it, or input left: go on.
            Ok(_) if produced == PIECE || input.pos() < compressed.len() => {}
            Ok(_) => return send(Err(zstd_cut_short())),
        }
    }
}

/// Decompresses `source` from `start` on with the single-thread decompressor, sending what it
/// yields piece by piece, then its error if it fails.
fn decompress_rest(
    source: Compressed<'_>,
    start: u64,
    compressed: &CompressedCount,
    pieces: &SyncSender<std::io::Result<Vec<u8>>>,
) -> Result<(), Gone> {
    let rest = ReadFrom { source, at: start };
    let mut rest = ZstdFrames::new(BufReader::with_capacity(1 << 16, compressed.counting(rest)));
    loop {
        let mut piece = vec![0u8; PIECE];
        let mut filled = 0;
        let ended = loop {
            match rest.read(&mut piece[filled..]) {
                Ok(0) => break Ok(true),
                Ok(n) => {
                    filled += n;
                    if filled == piece.len() {
                        break Ok(false);
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => break Err(error),
            }
        };
        piece.truncate(filled);
        if !piece.is_empty() {
            pieces.send(Ok(piece)).map_err(|_| Gone)?;
        }
        match ended {
            Ok(false) => {}
            Ok(true) => return Ok(()),
            Err(error) => return pieces.send(Err(error)).map_err(|_| Gone),
        }
    }
}

/// Threads that decompress for a load on `threads`: three quarters of them (at least two, at
/// most twelve). On the 16-core host (pzstd's frames, level 3), 4, 6, 8 and 12 decompressors
/// read the ten-times file in 2.90-2.95, 2.76-2.83, 2.65-2.93 and 2.25-2.35 s with ruzstd:
/// decompressing, one frame at a time, set the pace below that. Each costs its window and the pieces
/// it runs ahead: the 287 MB file peaked at 204-210, 210-222, 227-235 and 250-261 MB.
fn decompressors(threads: usize) -> usize {
    (threads * 3).div_ceil(4).clamp(2, 12)
}

/// Loads the zstd file `source` on `options.threads` threads: its frames decompressed in
/// parallel (where the walk finds them; the single-thread decompressor in a worker from where
/// it does not, and for a file of one frame), their pickle decoded on every core as it lands
/// (see [`Scratch::decode`]).
pub(super) fn load<F: TraceFollower>(
    source: Compressed<'_>,
    options: LoadOptions<'_>,
    parallel: Parallel,
    window: usize,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    // Made before the threads that share it.
    let scratch = Scratch::new(&source, &options.limits);
    std::thread::scope(|scope| {
        let compressed = CompressedCount::default();
        let threads = decompressors(options.threads);
        let frames = ParallelFrames::start(scope, source, threads, compressed.clone());
        let form = Compression::Zstd;
        scratch.decode(
            scope, frames, compressed, source, form, options, parallel, window,
        )
    })
}
