//! A large gzip or zstd file, read by path or uploaded, is decompressed ahead of the decoder on
//! a thread of its own (`src/snapshot/load/mod.rs`, `decode_inner_ahead`; a zstd upload on 3
//! threads or more by the frames' workers instead). Same model as the plain pickle, and a
//! bomb is refused with no more memory than the decoder itself holds: the thread runs at most a
//! few chunks ahead. One test in its own binary, so the process-wide peak the counting allocator
//! keeps is this work's alone (the decompressing thread's allocations are not the caller's).

mod common;

use common::counting_alloc;
use common::rng::Rng;
use snapview::pickle::{Landing, Limits};
use snapview::snapshot::{
    Compression, LoadError, LoadOptions, Snapshot, load_landing_following, load_path,
};
use std::io::Write;
use std::path::Path;

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

const MB: usize = 1 << 20;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

/// `len` bytes that do not compress, so a file holding them is large on disk too (files from
/// 16 MiB on are read, and decompressed, ahead).
fn noise(len: usize) -> Vec<u8> {
    let mut rng = Rng::new(23);
    (0..len).map(|_| rng.byte()).collect()
}

/// BINBYTES8 of `payload`: an item a pickle may hold anywhere a value goes.
fn binbytes8(payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x8e];
    bytes.extend((payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// The file at `path` read as an upload of it is, on `threads` threads (its bytes all landed):
/// on 2, a large compressed upload is decompressed ahead of the decoder as a file is; on 4, a
/// zstd one goes to the workers (`tests/zstd_frames.rs`).
fn load_as_upload(
    path: &Path,
    options: LoadOptions<'_>,
    threads: usize,
) -> Result<Snapshot, LoadError> {
    let file = std::fs::File::open(path).expect("open");
    let room = file.metadata().expect("metadata").len();
    let landing = Landing::new();
    landing.landed(room as usize);
    landing.end(true);
    let options = LoadOptions { threads, ..options };
    load_landing_following::<()>(&file, room, &landing, options).map(|(snapshot, _)| snapshot)
}

/// The ways a file is read here: by path, and as an upload on 2 and on 4 threads; with the
/// bytes each may hold beyond what the decompressor runs ahead.
type Reader = fn(&Path, LoadOptions<'_>) -> Result<Snapshot, LoadError>;
const READERS: [(&str, Reader, usize); 3] = [
    ("by path", load_path, 0),
    (
        "uploaded, 2 threads",
        |path, options| load_as_upload(path, options, 2),
        0,
    ),
    // The decompressing worker runs up to 8 pieces of 1 MiB ahead of the decoder (the ahead
    // thread 4 chunks), and its decompressor keeps what it decompressed as the frame's window
    // (this frame's is its whole content): about twice the 8 MiB ahead, plus the pieces.
    (
        "uploaded, 4 threads",
        |path, options| load_as_upload(path, options, 4),
        24 * MB,
    ),
];

/// The process's peak bytes while `work` runs, beyond what was live when it started.
fn process_peak_during<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let before = counting_alloc::reset_peak();
    let out = work();
    (out, counting_alloc::peak().saturating_sub(before))
}

#[test]
fn large_compressed_files_decompress_ahead_with_the_same_model_and_bounded_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plain_bytes = std::fs::read(common::path_of("mlp_small")).expect("mlp_small");
    let plain = common::load("mlp_small");

    // A real snapshot and 17 MiB of noise after its STOP (which pickle.load ignores): a large
    // file, on disk and decompressed.
    let mut padded = plain_bytes.clone();
    padded.extend(noise(17 * MB));
    for (form, data, compression) in [
        ("gzip", gzip(&padded), Compression::Gzip),
        ("zstd", common::zstd::frame(&padded), Compression::Zstd),
    ] {
        assert!(data.len() > 16 * MB, "{form}: {} bytes", data.len());
        let path = dir.path().join(format!("padded.{form}"));
        std::fs::write(&path, &data).expect("write");
        for (how, read, beyond) in READERS {
            let form = format!("{form}, {how}");
            let (loaded, peak) = process_peak_during(|| read(&path, LoadOptions::default()));
            let loaded: Snapshot = loaded.unwrap_or_else(|e| panic!("{form}: {e}"));
            assert_eq!(loaded.source.compression, compression, "{form}");
            assert_eq!(loaded.segments, plain.segments, "{form}");
            assert_eq!(loaded.device_traces.len(), plain.device_traces.len());
            for (device, trace) in plain.device_traces.iter().enumerate() {
                assert_eq!(loaded.trace(device).addr, trace.addr, "{form}");
                assert_eq!(loaded.trace(device).size, trace.size, "{form}");
                assert_eq!(loaded.trace(device).stack, trace.stack, "{form}");
            }
            assert_eq!(loaded.stacks.len(), plain.stacks.len(), "{form}");
            eprintln!("{form}, 17 MiB after STOP: peak {} KiB", peak >> 10);
            // The noise after STOP is decompressed (to check the stream) but never held.
            assert!(peak < 24 * MB + beyond, "{form}: peak {peak} bytes");
        }
    }

    // Bombs in large files: 17 MiB of noise in a string the decoder keeps, then 64 MiB of
    // PROTO opcodes (which accumulate nothing) that compress to almost nothing. Refused at the
    // limit, holding the string and what runs ahead, no more.
    let limit = 40 * MB;
    let mut bomb = vec![0x80, 4];
    bomb.extend(binbytes8(&noise(17 * MB)));
    bomb.extend(std::iter::repeat_n(0x80u8, 64 * MB));
    for (form, data) in [("gzip", gzip(&bomb)), ("zstd", common::zstd::frame(&bomb))] {
        assert!(data.len() > 16 * MB, "{form}: {} bytes", data.len());
        let path = dir.path().join(format!("bomb.{form}"));
        std::fs::write(&path, &data).expect("write");
        drop(data);
        let options = LoadOptions {
            limits: Limits {
                max_decompressed_bytes: limit as u64,
                ..Default::default()
            },
            ..LoadOptions::default()
        };
        for (how, read, beyond) in READERS {
            let form = format!("{form}, {how}");
            let started = std::time::Instant::now();
            let (result, peak) = process_peak_during(|| read(&path, options));
            let message = result.expect_err(&form).to_string();
            assert!(
                message.contains(&format!("exceeds the limit of {limit} bytes")),
                "{form}: {message}"
            );
            assert!(
                started.elapsed().as_secs() < 10,
                "{form}: {:?}",
                started.elapsed()
            );
            eprintln!("{form} bomb: peak {} KiB", peak >> 10);
            // The 17 MiB string (a growing vector may hold up to twice it), the few chunks of
            // 1 MiB the thread runs ahead and the decompressor's window.
            assert!(
                peak < 17 * MB * 2 + 12 * MB + beyond,
                "{form}: peak {peak} bytes"
            );
        }
    }
    drop(plain_bytes);
}
