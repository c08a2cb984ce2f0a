//! Reading a snapshot file end to end: detect the encoding, decompress within limits, decode,
//! build the model.

mod readers;
mod scratch;
mod zstd_frames;

pub use scratch::compressed_decoded_in_parallel;
pub use zstd_frames::frames_decompressed_in_parallel;

use super::build::{ShapeError, TraceCompactor, build};
use super::compact::parallel::{ChunkPlan, MappedFile, Parallel, Splicer, Splicing};
use super::follow::{FollowerOutcome, TraceFollower};
use super::{Compression, Snapshot, json};
use crate::pickle::{
    self, Chunks, Compactor, Decoded, Encoding, Landed, Landing, LandingReader, Limits, PickleError,
};
use readers::{Counting, READ_AHEAD_FROM, ReadAhead, ZstdFrames};
use std::io::{BufReader, Read};
use std::path::Path;

/// Why a file could not be loaded; each message says what was wrong with the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Pickle(#[from] PickleError),
    #[error("{0}")]
    Shape(#[from] ShapeError),
    #[error("invalid JSON snapshot: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    /// More trace events than [`LoadOptions::max_events`], counted as the model holds them
    /// (an entry the pickle references many times counts each time).
    #[error("the trace has more than {limit} events (--max-events)")]
    TooManyEvents { limit: u64 },
    /// The [`EventGate`] refused the memory the events found so far need; its words.
    #[error("{0}")]
    Refused(Refusal),
}

/// Why an [`EventGate`] stopped a load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Other loads hold the memory for now: the same load may succeed later.
    #[error("{0}")]
    Busy(String),
    /// This load alone needs more than the gate ever allows.
    #[error("{0}")]
    TooLarge(String),
}

/// Told how many trace events a load has found so far, as it finds them (every
/// [`EVENTS_PER_CHARGE`] and once more when the model is built), so a budget can be charged
/// before the memory is spent rather than after.
pub trait EventGate {
    fn events_found(&self, events: u64) -> Result<(), Refusal>;
}

/// How often a load tells its [`EventGate`] (and checks [`LoadOptions::max_events`]).
pub const EVENTS_PER_CHARGE: u64 = 1 << 16;

/// Trace events a snapshot may hold unless told otherwise: well above the largest real trace
/// seen (32 million events, `benches/scale.rs`), well below what exhausts a server's memory
/// (about 45 bytes each once analysed).
pub const DEFAULT_MAX_EVENTS: u64 = 50_000_000;

/// How to load: input bounds, the most trace events, an optional gate told of the events as
/// they are found, and an optional progress callback (bytes of the file read so far).
#[derive(Clone, Copy)]
pub struct LoadOptions<'a> {
    pub limits: Limits,
    pub max_events: u64,
    pub events: Option<&'a dyn EventGate>,
    pub progress: Option<&'a (dyn Fn(u64) + Sync)>,
    /// Threads that may decode a large uncompressed file (1: the single-thread decoder).
    pub threads: usize,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_events: DEFAULT_MAX_EVENTS,
            events: None,
            progress: None,
            threads: default_threads(),
        }
    }
}

/// Threads [`LoadOptions::default`] gives a load: set once by `--threads`; 0 until then.
static DEFAULT_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Sets the threads every load that takes [`LoadOptions::default`] may use (`--threads`, for
/// the CLI's commands and the server alike).
pub fn set_default_threads(threads: usize) {
    DEFAULT_THREADS.store(threads.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// The threads a load may use: `--threads` if it was given, else the cores this process may
/// use, from its CPU affinity and, on Linux, its cgroup's CPU quota (what
/// `std::thread::available_parallelism` reads), 1 if that cannot be told.
pub fn default_threads() -> usize {
    match DEFAULT_THREADS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        threads => threads,
    }
}

/// A loaded snapshot, and what a [`TraceFollower`] made of its trace while it was read (`None`
/// when the trace was too short for the column thread, or not one device's in file order).
pub type WithFollowerOutcome<F> = (Snapshot, Option<FollowerOutcome<F>>);

/// Loads the snapshot at `path`.
pub fn load_path(path: &Path, options: LoadOptions<'_>) -> Result<Snapshot, LoadError> {
    load_path_following::<()>(path, options).map(|(snapshot, _)| snapshot)
}

/// Loads the snapshot at `path`, running `F` over its trace on a thread of its own.
pub fn load_path_following<F: TraceFollower>(
    path: &Path,
    options: LoadOptions<'_>,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    let file = std::fs::File::open(path).map_err(|source| LoadError::Open {
        path: path.display().to_string(),
        source,
    })?;
    let size = file.metadata().map_or(0, |metadata| metadata.len());
    if decodes_in_parallel(options.threads, size, None) {
        // SAFETY: a snapshot file is only read here; one truncated by another process while
        // it is mapped would make a read of a lost page raise SIGBUS, which no check can
        // prevent with a shared map. The server's stored snapshots are written once and
        // replaced only by rename (the map keeps the old inode); for a user's own file on the
        // command line the risk is theirs, as with any tool that maps its input.
        if let Ok(map) = unsafe { memmap2::Mmap::map(&file) }
            && matches!(map.get(..2), Some([0x80, 4..=5]))
        {
            let mapped = MappedFile {
                map: &map,
                file: &file,
                scratch: false,
            };
            return load_map_following(mapped, options, Parallel::with_threads(options.threads));
        }
    }
    // A compressed file is decompressed on other threads and decoded on every core: zstd's
    // frames on workers (one frame too: libzstd decompresses it faster than one thread decodes;
    // the 287 MB file as one frame, 16 threads, uploaded in 0.60-0.64 s this way, read in
    // 0.86-1.26 s decoded on one thread behind a read-ahead), gzip on one thread.
    if options.threads >= PARALLEL_THREADS {
        let source = scratch::Compressed::Whole { file: &file, size };
        let parallel = Parallel::with_threads(options.threads);
        let head = head_of(&file);
        if let Some(loaded) =
            load_compressed(source, &head, options, parallel, scratch::LANDING_WINDOW)
        {
            return loaded;
        }
    }
    if size < READ_AHEAD_FROM {
        return load_reader_following(file, options);
    }
    std::thread::scope(|scope| match ReadAhead::start(scope, file) {
        Ok(mut reader) => {
            // An uncompressed pickle is decoded in the read-ahead buffers themselves.
            let head = reader.head().map_err(PickleError::Io)?;
            match pickle::detect_encoding(head) {
                Ok(Encoding::Pickle) => {
                    let counted = Counting::new(reader, options.progress);
                    decode_pickle_chunks(counted, size, options)
                }
                _ => load_stream(reader, options, true),
            }
        }
        Err(file) => load_reader_following(file, options),
    })
}

/// Whether [`load_path`] with `threads` decodes a file of `size` bytes on several threads, as
/// far as its first bytes (`head`, when known) tell: an uncompressed protocol 4-5 pickle.
/// Below these, decoding it as it is read (an upload, as it arrives) is as fast.
pub fn decodes_in_parallel(threads: usize, size: u64, head: Option<&[u8]>) -> bool {
    let framed = head.is_none_or(|head| matches!(head.get(..2), Some([0x80, 4..=5])));
    threads >= PARALLEL_THREADS && size >= PARALLEL_FROM && framed
}

/// Loads the gzip or zstd file at `path` as [`load_path`] does on 3 threads or more
/// (decompressed on other threads, decoded as it lands), with `parallel`'s chunks and at most
/// `window` decompressed bytes ahead of the decoder: knobs for the tests, which force both
/// down. `None` when the file is neither.
pub fn load_compressed_in_parallel(
    path: &Path,
    options: LoadOptions<'_>,
    parallel: Parallel,
    window: usize,
) -> Option<Result<Snapshot, LoadError>> {
    let file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let source = scratch::Compressed::Whole { file: &file, size };
    load_compressed::<()>(source, &head_of(&file), options, parallel, window)
        .map(|loaded| loaded.map(|(snapshot, _)| snapshot))
}

/// The first bytes of `file`, as many as it has of 4.
fn head_of(file: &std::fs::File) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 4];
    let n = file.read_at(&mut head, 0).unwrap_or(0);
    head[..n].to_vec()
}

/// `source` decompressed on other threads and decoded on `parallel.threads` as it lands, if
/// its first bytes (`head`) say gzip or zstd: zstd's frames by workers (`zstd_frames`), gzip by
/// one thread (`scratch`).
fn load_compressed<F: TraceFollower>(
    source: scratch::Compressed<'_>,
    head: &[u8],
    options: LoadOptions<'_>,
    parallel: Parallel,
    window: usize,
) -> Option<Result<WithFollowerOutcome<F>, LoadError>> {
    match pickle::detect_encoding(head).ok()? {
        Encoding::Zstd => Some(zstd_frames::load(source, options, parallel, window)),
        Encoding::Gzip => Some(scratch::load_gzip(source, options, parallel, window)),
        Encoding::Pickle | Encoding::Json => None,
    }
}

/// An upload of gzip or zstd landing in `file` (see [`load_landing_following`]) as it loads on
/// 3 threads or more whatever its size: decompressed on other threads as it lands, with
/// `parallel`'s chunks and at most `window` decompressed bytes ahead of the decoder (knobs for
/// the tests, which force both down). `None` when its first bytes are neither.
pub fn load_compressed_landing(
    file: &std::fs::File,
    room: u64,
    landing: &Landing,
    options: LoadOptions<'_>,
    parallel: Parallel,
    window: usize,
) -> Option<Result<Snapshot, LoadError>> {
    let head = landing_head(file, landing);
    let source = scratch::Compressed::Landing {
        file,
        landing,
        room,
    };
    load_compressed::<()>(source, &head, options, parallel, window)
        .map(|loaded| loaded.map(|(snapshot, _)| snapshot))
}

/// The parallel decoder is used from this many threads on. Its workers spend about twice the
/// CPU time of the single-thread decoder (which already keeps two cores busy with its read-ahead,
/// column and follower threads), so on two cores it is slower: measured in `benches/core.rs`.
const PARALLEL_THREADS: usize = 3;

/// Uncompressed pickles from this size on are decoded on several threads when allowed: below
/// it, starting threads costs more than it saves.
const PARALLEL_FROM: u64 = 8 << 20;

/// Compressed uploads from this size on are decompressed and decoded on several threads as
/// they land when allowed (snapshots compress about tenfold, so as large as [`PARALLEL_FROM`]
/// decompressed).
const COMPRESSED_PARALLEL_FROM: u64 = 1 << 20;

/// Decodes a whole pickle held in memory, on `parallel.threads` worker threads when it is
/// framed (protocol 4-5), else on this one. The model is the same either way (tested in
/// `tests/parallel.rs`); `parallel.chunk_bytes` is a knob for those tests.
pub fn load_slice_following<F: TraceFollower>(
    data: &[u8],
    options: LoadOptions<'_>,
    parallel: Parallel,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    load_in_memory(Landed::whole(data), None, options, parallel)
}

/// [`load_slice_following`] of a mapped file, whose pages are handed back as they are passed.
fn load_map_following<F: TraceFollower>(
    mapped: MappedFile<'_>,
    options: LoadOptions<'_>,
    parallel: Parallel,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    load_in_memory(Landed::whole(mapped.map), Some(mapped), options, parallel)
}

/// The first 4 bytes of an upload landing in `file`, once they have landed (fewer only if the
/// input ends, or is cut, before them: the decode tells why).
fn landing_head(file: &std::fs::File, landing: &Landing) -> Vec<u8> {
    let mut head = Vec::with_capacity(4);
    let _ = LandingReader::new(file, landing)
        .take(4)
        .read_to_end(&mut head);
    head
}

/// Loads a snapshot whose bytes are still landing in `file` (an upload as it is received),
/// reading each byte as soon as it has landed: a large uncompressed pickle on every core
/// through a map of the file (which its writer has sized to `room` bytes, the most that will
/// land), a large zstd file's frames on every core too (decompressed as each lands, see
/// `zstd_frames`), anything else as a stream. The load ends a chunk's decode after the last
/// byte lands.
/// If `landing` is cut, the load fails (or holds what the first bytes made): the caller must
/// not keep it.
pub fn load_landing_following<F: TraceFollower>(
    file: &std::fs::File,
    room: u64,
    landing: &Landing,
    options: LoadOptions<'_>,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    let head = landing_head(file, landing);
    if options.threads >= PARALLEL_THREADS && room >= COMPRESSED_PARALLEL_FROM {
        let source = scratch::Compressed::Landing {
            file,
            landing,
            room,
        };
        let parallel = Parallel::with_threads(options.threads);
        if let Some(loaded) =
            load_compressed(source, &head, options, parallel, scratch::LANDING_WINDOW)
        {
            return loaded;
        }
    }
    let head = (head.len() >= 2).then_some(&head[..]);
    let parallel = decodes_in_parallel(options.threads, room, head);
    tracing::debug!(
        room,
        threads = if parallel { options.threads } else { 1 },
        "decoding the bytes as they land"
    );
    if !parallel {
        // A large compressed upload is decompressed a few chunks ahead of the decoder on a
        // thread of its own, as a file is (`ReadAhead`).
        let ahead = room >= READ_AHEAD_FROM;
        return load_stream(LandingReader::new(file, landing), options, ahead);
    }
    let parallel = Parallel::with_threads(options.threads);
    load_landing_mapped(file, room, landing, options, parallel)
}

/// [`load_landing_following`] through a map of the file, decoded as `parallel` says whatever
/// its size (tests force chunks of a few opcodes); as a stream if the file cannot be mapped.
pub fn load_landing_mapped<F: TraceFollower>(
    file: &std::fs::File,
    room: u64,
    landing: &Landing,
    options: LoadOptions<'_>,
    parallel: Parallel,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    load_landing_map(file, room, landing, options, parallel, false)
}

/// [`load_landing_mapped`], of an upload's file or (`scratch`) of a scratch file in memory that
/// decompressed bytes land in (see `zstd_frames`), whose pages are cut out as the decode passes
/// them.
fn load_landing_map<F: TraceFollower>(
    file: &std::fs::File,
    room: u64,
    landing: &Landing,
    options: LoadOptions<'_>,
    parallel: Parallel,
    scratch: bool,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    // SAFETY: as for `load_path`; the file's writer (an upload's, or the thread that fills a
    // scratch file) sized it to `room` bytes before any read and shortens it only after this
    // load ends, so every page of the map is backed by the file while it is read (a page cut
    // out of a scratch file reads as zeros, not a fault).
    let map = usize::try_from(room)
        .ok()
        .and_then(|room| unsafe { memmap2::MmapOptions::new().len(room).map(file) }.ok());
    let Some(map) = map else {
        return load_reader_following(LandingReader::new(file, landing), options);
    };
    let mapped = MappedFile {
        map: &map,
        file,
        scratch,
    };
    load_in_memory(
        Landed::landing(&map, landing),
        Some(mapped),
        options,
        parallel,
    )
}

fn load_in_memory<F: TraceFollower>(
    bytes: Landed<'_>,
    mapped: Option<MappedFile<'_>>,
    options: LoadOptions<'_>,
    parallel: Parallel,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    let head = bytes.upto(SNIFF);
    if pickle::detect_encoding(&head[..head.len().min(SNIFF)])? != Encoding::Pickle {
        return load_reader_following(bytes.all(), options);
    }
    let started = std::time::Instant::now();
    tracing::debug!(threads = parallel.threads, "pickle decode started");
    let plan = (parallel.threads > 1)
        .then(|| {
            ChunkPlan::new(
                bytes,
                mapped.map(|mapped| mapped.file),
                parallel.chunk_bytes,
            )
        })
        .flatten();
    std::thread::scope(|scope| {
        let mut compactor = TraceCompactor::<F>::pipelined(scope)
            .expecting_bytes(Some(bytes.room() as u64))
            .counting_events(options.max_events, options.events);
        let limits = options.limits;
        let mut chunks = None;
        let decoded = match plan {
            Some(plan) => {
                let mut splicer = Splicer::new(scope, bytes, plan, parallel.threads, limits);
                if let Some(mapped) = mapped {
                    splicer = splicer.releasing(mapped);
                }
                let mut splicing = Splicing {
                    compactor: &mut compactor,
                    splicer,
                    progress: options.progress,
                };
                let decoded = pickle::decode_in_memory(bytes, &limits, &mut splicing);
                chunks = Some(splicing.splicer.planned());
                decoded
            }
            None => pickle::decode_in_memory(bytes, &limits, &mut compactor),
        };
        // Decoded, or failed: workers still waiting for bytes (ahead of a decode that failed,
        // or past a STOP with bytes after it) stop now, rather than when the rest lands.
        bytes.stop_reading();
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(error) => return Err(compactor.take_stop().unwrap_or(error.into())),
        };
        if let Some(progress) = options.progress {
            progress(decoded.bytes);
        }
        tracing::debug!(
            ms = started.elapsed().as_millis() as u64,
            threads = parallel.threads,
            chunks,
            "pickle decoded"
        );
        let (mut snapshot, followed) = build(decoded.root, decoded.heap, compactor)?;
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "snapshot built");
        snapshot.source.pickle_protocol = Some(decoded.protocol);
        snapshot.source.decoded_bytes = decoded.bytes;
        snapshot.source.compression = Compression::None;
        Ok((snapshot, followed))
    })
}

/// Loads a snapshot from any byte stream (a file, an upload, a decompressor).
pub fn load_reader(
    reader: impl Read + Send,
    options: LoadOptions<'_>,
) -> Result<Snapshot, LoadError> {
    load_reader_following::<()>(reader, options).map(|(snapshot, _)| snapshot)
}

/// Loads a snapshot from any byte stream, running `F` over its trace on a thread of its own.
pub fn load_reader_following<F: TraceFollower>(
    reader: impl Read + Send,
    options: LoadOptions<'_>,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    load_stream(reader, options, false)
}

/// [`load_reader_following`], with a gzip or zstd stream decompressed ahead on a thread of its
/// own when `ahead` (a large file: below that, the thread costs more than it saves).
fn load_stream<F: TraceFollower>(
    reader: impl Read + Send,
    options: LoadOptions<'_>,
    ahead: bool,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    // Compressed bytes are counted as they are read, so decompression can be bounded by its
    // ratio to them (a bomb is refused after a few MB, not at the absolute limit).
    let compressed = pickle::CompressedCount::default();
    let counted = compressed.counting(Counting::new(reader, options.progress));
    let (head, counted) = sniff(counted).map_err(PickleError::Io)?;
    let outer = BufReader::with_capacity(1 << 16, counted);
    let limits = &options.limits;
    match pickle::detect_encoding(&head)? {
        Encoding::Pickle => decode_pickle(outer, options, Compression::None),
        Encoding::Json => decode_json(outer, options, Compression::None),
        Encoding::Gzip => {
            let inner = pickle::Capped::with_ratio(
                flate2::read::MultiGzDecoder::new(outer),
                limits,
                compressed,
            );
            decode_inner_ahead(inner, options, Compression::Gzip, ahead)
        }
        Encoding::Zstd => {
            let inner = pickle::Capped::with_ratio(ZstdFrames::new(outer), limits, compressed);
            decode_inner_ahead(inner, options, Compression::Zstd, ahead)
        }
    }
}

/// [`decode_inner`], with the decompressor run a few chunks ahead on a thread of its own
/// ([`ReadAhead`]) when `ahead`: decompressing takes about as long as decoding, and then
/// overlaps it. The decompressor's bound still holds (it counts what it writes, ahead or not),
/// and what runs ahead is at most a few chunks of 1 MiB.
fn decode_inner_ahead<F: TraceFollower>(
    inner: impl Read + Send,
    options: LoadOptions<'_>,
    compression: Compression,
    ahead: bool,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    if !ahead {
        return decode_inner(inner, options, compression);
    }
    std::thread::scope(|scope| match ReadAhead::start(scope, inner) {
        Ok(ahead) => decode_inner(ahead, options, compression),
        Err(inner) => decode_inner(inner, options, compression),
    })
}

fn decode_inner<F: TraceFollower>(
    inner: impl Read,
    options: LoadOptions<'_>,
    compression: Compression,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    let (head, inner) = sniff(inner).map_err(pickle::io_error)?;
    if head.is_empty() {
        let format = if compression == Compression::Gzip {
            "gzip"
        } else {
            "zstd"
        };
        return Err(PickleError::NotASnapshot(format!(
            "the {format} stream holds no data (it decompresses to nothing)"
        ))
        .into());
    }
    let inner = BufReader::with_capacity(1 << 16, inner);
    match pickle::detect_encoding(&head)? {
        Encoding::Pickle => decode_pickle(inner, options, compression),
        Encoding::Json => decode_json(inner, options, compression),
        Encoding::Gzip | Encoding::Zstd => Err(PickleError::NotASnapshot(
            "the file is compressed twice; decompress it once first".into(),
        )
        .into()),
    }
}

/// The first bytes of `reader` (fewer only at the end of input), to tell the encoding by, and a
/// reader that still yields them. Reads until it has them: a pipe or a decompressor may hand
/// out one byte at a time.
fn sniff<R: Read>(mut reader: R) -> std::io::Result<(Vec<u8>, impl Read)> {
    let mut head = Vec::with_capacity(SNIFF);
    (&mut reader).take(SNIFF as u64).read_to_end(&mut head)?;
    Ok((head.clone(), std::io::Cursor::new(head).chain(reader)))
}

/// Enough for every magic number, and for JSON after some leading whitespace.
const SNIFF: usize = 256;

fn decode_pickle<F: TraceFollower>(
    mut reader: impl Read,
    options: LoadOptions<'_>,
    compression: Compression,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    assemble(options, compression, None, |limits, compactor| {
        let decoded = pickle::decode(&mut reader, limits, compactor)?;
        if compression != Compression::None {
            // The pickle ended at STOP; one more read lets the decompressor check its trailer (a
            // gzip CRC and length), so a corrupt or cut compressed file does not load silently.
            // Data after the pickle is ignored, as Python's pickle.load ignores it.
            reader.read(&mut [0u8; 1]).map_err(pickle::io_error)?;
        }
        Ok(decoded)
    })
}

/// Decodes an uncompressed pickle in the buffers `chunks` hands over.
fn decode_pickle_chunks<F: TraceFollower>(
    chunks: impl Chunks,
    bytes: u64,
    options: LoadOptions<'_>,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    assemble(
        options,
        Compression::None,
        Some(bytes),
        |limits, compactor| pickle::decode_chunks(chunks, limits, compactor),
    )
}

/// Runs `decode` with the snapshot compactor and builds the model from what it decoded;
/// `bytes` is the pickle's size when known.
fn assemble<F: TraceFollower>(
    options: LoadOptions<'_>,
    compression: Compression,
    bytes: Option<u64>,
    decode: impl FnOnce(&Limits, &mut dyn Compactor) -> Result<Decoded, PickleError>,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    // Trace columns are filled by a second thread while this one decodes (see TraceCompactor).
    std::thread::scope(|scope| {
        let mut compactor = TraceCompactor::<F>::pipelined(scope)
            .expecting_bytes(bytes)
            .counting_events(options.max_events, options.events);
        let decoded = match decode(&options.limits, &mut compactor) {
            Ok(decoded) => decoded,
            // The compactor stopped the machine: its reason, not the machine's.
            Err(error) => return Err(compactor.take_stop().unwrap_or(error.into())),
        };
        let (mut snapshot, followed) = build(decoded.root, decoded.heap, compactor)?;
        snapshot.source.pickle_protocol = Some(decoded.protocol);
        snapshot.source.decoded_bytes = decoded.bytes;
        snapshot.source.compression = compression;
        Ok((snapshot, followed))
    })
}

fn decode_json<F>(
    reader: impl Read,
    options: LoadOptions<'_>,
    compression: Compression,
) -> Result<WithFollowerOutcome<F>, LoadError> {
    let value: serde_json::Value =
        serde_json::from_reader(reader).map_err(|e| match e.io_error_kind() {
            Some(_) => LoadError::Pickle(pickle::io_error(e.into())),
            None => LoadError::Json(e),
        })?;
    let mut snapshot = json::from_json(&value, &options)?;
    snapshot.source.compression = compression;
    // The JSON form is small and built inline: no column thread, nothing followed.
    Ok((snapshot, None))
}
