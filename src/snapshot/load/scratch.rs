//! A compressed snapshot decompressed on other threads and decoded on every core: what the
//! decompressors yield lands in a scratch file in memory, which the parallel pickle decoder
//! reads as it lands (as it reads an upload), at most a window ahead of its readers, cutting
//! out the pages it has passed: memory stays a few windows, not the decompressed file.
//!
//! zstd's frames are decompressed by workers (`zstd_frames`); gzip, whose members cannot be
//! found without inflating them, by one thread ([`load_gzip`]). Either way the decode is
//! parallel, and the decompressor's bounds ([`Capped`]) and errors are a single-thread read's.

use super::{LoadError, LoadOptions, WithFollowerOutcome};
use crate::pickle::{self, Capped, CompressedCount, Landing, PickleError};
use crate::snapshot::Compression;
use crate::snapshot::compact::parallel::Parallel;
use crate::snapshot::follow::TraceFollower;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::Scope;

/// Compressed inputs decoded in parallel from a scratch file in this process, so tests can tell
/// that the parallel path ran.
static DECODED: AtomicU64 = AtomicU64::new(0);

/// Compressed files and uploads decoded on several threads so far in this process.
pub fn compressed_decoded_in_parallel() -> u64 {
    DECODED.load(Ordering::Relaxed)
}

/// Bytes the landing thread reads from the decompressor at a time.
const PIECE: usize = 1 << 20;

/// Decompressed bytes landed at most past what the decoder has asked for: the pickle decoder's
/// workers ask a few regions ahead of the splice already (16 MiB and 32 MiB read the ten-times
/// file as fast on the 16-core host).
pub(super) const LANDING_WINDOW: usize = 16 << 20;

/// The compressed file: whole on disk, or still landing (an upload as it arrives), when every
/// read first waits for its bytes.
#[derive(Clone, Copy)]
pub(super) enum Compressed<'a> {
    Whole {
        file: &'a File,
        size: u64,
    },
    Landing {
        file: &'a File,
        landing: &'a Landing,
        /// The most bytes that will land (0: not known).
        room: u64,
    },
}

impl Compressed<'_> {
    /// The file's size at most.
    pub(super) fn bound(&self) -> u64 {
        match self {
            Self::Whole { size, .. } => *size,
            Self::Landing { room: 0, .. } => u64::MAX,
            Self::Landing { room, .. } => *room,
        }
    }

    pub(super) fn file(&self) -> &File {
        match self {
            Self::Whole { file, .. } | Self::Landing { file, .. } => file,
        }
    }

    /// The bytes from `offset` on that have landed, once at least `wanted` have (fewer only
    /// past the file's end).
    pub(super) fn landed_from(&self, offset: u64, wanted: u64) -> u64 {
        let end = match self {
            Self::Whole { size, .. } => *size,
            Self::Landing { landing, .. } => {
                let wanted = usize::try_from(offset.saturating_add(wanted)).unwrap_or(usize::MAX);
                landing.wait_for(wanted) as u64
            }
        };
        end.saturating_sub(offset)
    }

    /// How many of the `want` bytes from `offset` on the file holds (fewer only past its
    /// end), once they have landed.
    pub(super) fn holds(&self, offset: u64, want: u64) -> u64 {
        self.landed_from(offset, want).min(want)
    }

    /// Whether the file holds all of `offset..end`.
    pub(super) fn holds_until(&self, offset: u64, end: u64) -> bool {
        let want = end.saturating_sub(offset);
        self.holds(offset, want) == want
    }

    /// The readers are done with it: a worker still waiting for an upload's bytes stops.
    pub(super) fn stop_reading(&self) {
        if let Self::Landing { landing, .. } = self {
            landing.stop_reading();
        }
    }
}

/// The compressed file from `at` on, read in order with positioned reads (the workers share
/// the file), each read as soon as one byte of it has landed.
pub(super) struct ReadFrom<'a> {
    pub(super) source: Compressed<'a>,
    pub(super) at: u64,
}

impl Read for ReadFrom<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let there = self.source.landed_from(self.at, 1);
        let want = buf.len().min(usize::try_from(there).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.source.file().read_at(&mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// What the landing thread reads: a decompressor's output.
pub(super) trait Decompressed: Read + Send {
    /// Once the decoder is done, reads what a single-thread read would still have read when
    /// it asked for one byte past the pickle, so a checksum there is checked.
    fn finish(&mut self) -> std::io::Result<()>;
}

/// gzip, inflated on the landing thread: one byte more, which checks the member's CRC and
/// length when the pickle ends it.
impl<R: std::io::BufRead + Send> Decompressed for flate2::bufread::MultiGzDecoder<R> {
    fn finish(&mut self) -> std::io::Result<()> {
        let mut byte = [0u8; 1];
        self.read(&mut byte).map(|_| ())
    }
}

/// Where the decompressed bytes land: a scratch file in memory sized to what the bounds let
/// the input decompress to, and how far they have landed.
pub(super) struct Scratch {
    /// `None` where none can be made: the bytes are then decoded as a stream.
    file: Option<File>,
    landing: Landing,
    room: u64,
}

impl Scratch {
    /// Room for what `source` may decompress to under `limits`.
    pub(super) fn new(source: &Compressed<'_>, limits: &pickle::Limits) -> Self {
        let room = limits.max_decompressed_bytes.min(
            source
                .bound()
                .saturating_mul(limits.max_expansion_ratio)
                .saturating_add(limits.expansion_allowance),
        );
        Self {
            file: scratch_file(room),
            landing: Landing::new(),
            room,
        }
    }

    /// Decodes what `decompressor` (started in `scope`, counting the compressed bytes it reads
    /// in `compressed`) decompresses from `source`: a framed pickle in parallel as `parallel`
    /// says, as it lands, at most `window` bytes past what the decoder has asked for; any other
    /// content (JSON, an older protocol) as a stream on this thread. The decompressor is
    /// bounded as on one thread: by the limits, and by its ratio to the compressed bytes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode<'scope, F: TraceFollower, D: Decompressed + 'scope>(
        &'scope self,
        scope: &'scope Scope<'scope, '_>,
        decompressor: D,
        compressed: CompressedCount,
        source: Compressed<'_>,
        compression: Compression,
        options: LoadOptions<'scope>,
        parallel: Parallel,
        window: usize,
    ) -> Result<WithFollowerOutcome<F>, LoadError> {
        // Dropped when this returns, before the scope waits for its threads: a reader still
        // waiting for an upload's bytes stops then.
        let _stops = StopsReading(source);
        // Progress is told in the file's bytes, as a read of the file tells it: the compressed
        // bytes the decompressor has taken, not the decompressed bytes the decoder has read.
        let progress = Progress {
            report: options.progress,
            compressed: compressed.clone(),
        };
        let options = LoadOptions {
            progress: None,
            ..options
        };
        let mut inner = Capped::with_ratio(decompressor, &options.limits, compressed);
        let mut head = Vec::with_capacity(super::SNIFF);
        (&mut inner)
            .take(super::SNIFF as u64)
            .read_to_end(&mut head)
            .map_err(pickle::io_error)?;
        // Protocol 4-5 with its first FRAME: what the parallel decoder cuts at, and so hands
        // the scratch file's pages back (an unframed pickle is read on one thread, which would
        // leave all of it in memory: it goes as a stream).
        let framed = matches!(head.get(..3), Some([0x80, 4..=5, 0x95]));
        let (true, Some(scratch)) = (framed, &self.file) else {
            let stream = std::io::Cursor::new(head).chain(inner);
            return super::decode_inner(stream, options, compression);
        };
        DECODED.fetch_add(1, Ordering::Relaxed);
        let (landing, room) = (&self.landing, self.room);
        let landed = scope.spawn(move || land(inner, head, scratch, landing, window, &progress));
        tracing::debug!(
            room,
            ?compression,
            "decompressed on other threads, decoded in parallel"
        );
        let loaded = super::load_landing_map(scratch, room, landing, options, parallel, true);
        landing.stop_reading();
        if loaded.is_err() {
            // Nothing more is wanted of an upload: its readers stop now, not when it ends. (A
            // decode that succeeded still has a checksum to read.)
            source.stop_reading();
        }
        let landed = landed
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("a decompressing thread failed")));
        match (loaded, landed) {
            (Ok((mut snapshot, followed)), Ok(())) => {
                snapshot.source.compression = compression;
                Ok((snapshot, followed))
            }
            // The decode read to where the decompressed bytes stopped: why they stopped is
            // the error (a corrupt frame, a bomb), as a single-thread read would have said.
            (Ok(_) | Err(LoadError::Pickle(PickleError::Truncated { .. })), Err(error)) => {
                Err(pickle::io_error(error).into())
            }
            (Err(error), _) => Err(error),
        }
    }
}

/// Loads the gzip file or upload `source`: inflated on one thread (gzip's members cannot be
/// found without inflating them), its pickle decoded on `parallel.threads` as it lands (see
/// [`Scratch::decode`]).
pub(super) fn load_gzip<F: TraceFollower>(
    source: Compressed<'_>,
    options: LoadOptions<'_>,
    parallel: Parallel,
    window: usize,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    let scratch = Scratch::new(&source, &options.limits);
    std::thread::scope(|scope| {
        let compressed = CompressedCount::default();
        let read = compressed.counting(ReadFrom { source, at: 0 });
        let gzip = flate2::bufread::MultiGzDecoder::new(BufReader::with_capacity(1 << 16, read));
        let form = Compression::Gzip;
        scratch.decode(
            scope, gzip, compressed, source, form, options, parallel, window,
        )
    })
}

/// The load's progress callback, told the compressed bytes taken so far.
struct Progress<'a> {
    report: Option<&'a (dyn Fn(u64) + Sync)>,
    compressed: CompressedCount,
}

impl Progress<'_> {
    fn tell(&self) {
        if let Some(report) = self.report {
            report(self.compressed.get());
        }
    }
}

/// Stops the readers of an upload when dropped (see [`Compressed::stop_reading`]).
struct StopsReading<'a>(Compressed<'a>);

impl Drop for StopsReading<'_> {
    fn drop(&mut self) {
        self.0.stop_reading();
    }
}

/// Writes what `inner` decompresses (after `head`, read already) into `scratch` and tells
/// `landing` how far, at most a window ahead of what the decoder asks for. Once the decoder is
/// done, it reads on to the end of the frame it is in, so that frame's checksum is checked.
fn land<D: Decompressed>(
    mut inner: Capped<D>,
    head: Vec<u8>,
    scratch: &File,
    landing: &Landing,
    window: usize,
    progress: &Progress<'_>,
) -> std::io::Result<()> {
    let landed = land_all(&mut inner, head, scratch, landing, window, progress);
    // Whole even on an error: what landed is what the frames gave before it, which the decoder
    // reads to its end, as it would a single-thread decompressor's (the error is told after).
    landing.end(true);
    match landed {
        Ok(true) => Ok(()),
        Ok(false) => inner.get_mut().finish(),
        Err(error) => Err(error),
    }
}

/// [`land`]'s loop: `true` once every byte landed, `false` if the decoder was done first.
fn land_all<D: Decompressed>(
    inner: &mut Capped<D>,
    head: Vec<u8>,
    scratch: &File,
    landing: &Landing,
    window: usize,
    progress: &Progress<'_>,
) -> std::io::Result<bool> {
    let mut at = 0;
    let mut buf = head;
    loop {
        let mut written = 0;
        while written < buf.len() {
            let Some(until) = landing.room_until(at, window) else {
                return Ok(false);
            };
            let part = &buf[written..buf.len().min(written + (until - at))];
            scratch.write_all_at(part, at as u64)?;
            (at, written) = (at + part.len(), written + part.len());
            landing.landed(at);
        }
        buf.resize(PIECE, 0);
        let n = loop {
            match inner.read(&mut buf) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                read => break read?,
            }
        };
        progress.tell();
        if n == 0 {
            return Ok(true);
        }
        buf.truncate(n);
    }
}

/// A file in memory, sized to `room` bytes (sparse: a page takes memory once written), for the
/// decompressed bytes to land in; `None` where none can be made (the caller then decodes them
/// as a stream).
fn scratch_file(room: u64) -> Option<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: a plain system call with a valid C string; the descriptor it returns is
        // this process's, owned by the `File` made of it and closed when that is dropped.
        let fd = unsafe { libc::memfd_create(c"snapview-unzstd".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(room).ok()?;
        Some(file)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = room;
        None
    }
}
