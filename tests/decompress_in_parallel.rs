//! A compressed file is decompressed on other threads and decoded on every core as its bytes
//! land (`src/snapshot/load/scratch.rs`): a zstd file's frames (pzstd's output, `cat a.zst
//! b.zst`, or one) on worker threads (`zstd_frames.rs`), gzip on one. Each must give the same
//! model and summary as its pickle read on one thread, or the same error as the single-thread
//! decompressor gives, with frames of a few KiB, pickle chunks of a few opcodes and a landing
//! window of a few KiB, so every hand-over between frames, pieces and regions is met.

use crate::common;

use common::reframe::reframe;
use snapview::analysis::{Analysis, Summary};
use snapview::pickle::scan::FRAME;
use snapview::pickle::{Landing, Limits};
use snapview::snapshot::{
    Compression, LoadError, LoadOptions, Parallel, Snapshot, compressed_decoded_in_parallel,
    frames_decompressed_in_parallel, load_compressed_in_parallel, load_compressed_landing,
    load_path,
};
use std::path::{Path, PathBuf};

const KB: usize = 1 << 10;
const MB: usize = 1 << 20;

/// Where each frame starts in a file of frames.
struct Framed {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

/// `data` compressed as a frame per `every` bytes, each after a skippable frame that gives its
/// size (as pzstd writes them) when `skippable`.
fn frames(data: &[u8], every: usize, skippable: bool) -> Framed {
    let mut framed = Framed {
        bytes: Vec::new(),
        starts: Vec::new(),
    };
    for chunk in data.chunks(every) {
        let frame = common::zstd::frame(chunk);
        if skippable {
            framed.bytes.extend(0x184d_2a50u32.to_le_bytes());
            framed.bytes.extend(4u32.to_le_bytes());
            framed.bytes.extend((frame.len() as u32).to_le_bytes());
        }
        framed.starts.push(framed.bytes.len());
        framed.bytes.extend(frame);
    }
    framed
}

/// A load's outcome as text: the model and the summary (its compression set aside, the one
/// field the forms differ in), or the error.
fn described(loaded: Result<Snapshot, LoadError>) -> String {
    match loaded {
        Ok(mut snapshot) => {
            snapshot.source.compression = Compression::None;
            let analysis = Analysis::new(&snapshot);
            let summary = Summary::new(&snapshot, &analysis);
            let json = serde_json::to_string(&summary).expect("summary serializes");
            format!("{snapshot:?}\n{json}")
        }
        Err(error) => format!("error: {error}"),
    }
}

fn options(threads: usize) -> LoadOptions<'static> {
    LoadOptions {
        threads,
        ..LoadOptions::default()
    }
}

/// The single-thread read of the file at `path` (its frames decompressed one after another).
fn sequential(path: &Path) -> Result<Snapshot, LoadError> {
    load_path(path, options(1))
}

/// The parallel read of the file at `path`, with regions of a few opcodes and a small window.
fn parallel(path: &Path, window: usize) -> Result<Snapshot, LoadError> {
    let parallel = Parallel {
        threads: 4,
        chunk_bytes: 1,
    };
    load_compressed_in_parallel(path, options(4), parallel, window).expect("a compressed file")
}

/// `bytes` read as an upload's as they land: written to a file a few KiB at a time by a thread
/// of their own (cut after `cut_at` bytes, when given), and decompressed and decoded on 4
/// threads as they land, with regions of a few opcodes and a landing window of `window`.
fn landing(bytes: &[u8], cut_at: Option<usize>, window: usize) -> Result<Snapshot, LoadError> {
    let file = tempfile::tempfile().expect("temp file");
    file.set_len(bytes.len() as u64).expect("sized");
    let landing = Landing::new();
    let parallel = Parallel {
        threads: 4,
        chunk_bytes: 1,
    };
    std::thread::scope(|scope| {
        scope.spawn(|| common::landing::land_in_pieces(&file, bytes, &landing, cut_at, 4096, 4));
        load_compressed_landing(
            &file,
            bytes.len() as u64,
            &landing,
            options(4),
            parallel,
            window,
        )
        .expect("compressed bytes")
    })
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

/// Every fixture pickle, as it is and cut into FRAMEs of a few opcodes.
fn fixture_pickles() -> Vec<(String, Vec<u8>)> {
    let mut pickles = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(common::fixtures())
        .expect("fixtures")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "pickle"))
        .collect();
    paths.sort();
    for path in paths {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let data = std::fs::read(&path).expect("reads");
        if let Some(cut) = reframe(&data, 5) {
            pickles.push((format!("{name}, a FRAME every 5 opcodes"), cut));
        }
        pickles.push((name, data));
    }
    pickles
}

#[test]
fn every_fixture_in_frames_loads_as_its_pickle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut checked = 0;
    for (name, pickle) in fixture_pickles() {
        let plain = write(dir.path(), "plain.pickle", &pickle);
        let expected = described(load_path(&plain, options(1)));
        assert!(!expected.starts_with("error"), "{name}: {expected}");
        for (every, skippable, window) in [(4 * KB + 7, false, 3 * KB), (64 * KB, true, MB)] {
            let framed = frames(&pickle, every, skippable);
            if framed.starts.len() < 2 {
                continue;
            }
            let path = write(dir.path(), "framed.zst", &framed.bytes);
            let before = frames_decompressed_in_parallel();
            let loaded = parallel(&path, window);
            assert!(
                frames_decompressed_in_parallel() > before,
                "{name}: no frame in parallel"
            );
            if let Ok(snapshot) = &loaded {
                assert_eq!(snapshot.source.compression, Compression::Zstd, "{name}");
            }
            let got = described(loaded);
            assert!(
                expected == got,
                "{name}, frames of {every} bytes: not the pickle's model"
            );
            // The single-thread decompressor reads the same frames to the same model.
            assert!(
                expected == described(sequential(&path)),
                "{name}: one thread differs"
            );
            // And so do the workers, as the frames land (an upload being received).
            assert!(
                expected == described(landing(&framed.bytes, None, window)),
                "{name}, frames of {every} bytes as they land: not the pickle's model"
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} framed files checked");
}

/// `load_path` takes the parallel path on 3 threads or more, for a file of frames or of one.
#[test]
fn load_path_decodes_frames_in_parallel_from_three_threads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pickle = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    let expected = described(load_path(&common::path_of("gpt2_adamw"), options(1)));
    let framed = write(
        dir.path(),
        "framed.zst",
        &frames(&pickle, 64 * KB, true).bytes,
    );
    let single = write(dir.path(), "single.zst", &common::zstd::frame(&pickle));
    for (path, threads, in_parallel) in [
        (&framed, 4, true),
        (&framed, 2, false),
        (&single, 4, true),
        (&single, 2, false),
    ] {
        let before = frames_decompressed_in_parallel();
        let got = described(load_path(path, options(threads)));
        let ran = frames_decompressed_in_parallel() > before;
        // Other tests of this binary raise the count too: only a rise is telling.
        assert!(ran || !in_parallel, "{}, {threads} threads", path.display());
        assert!(expected == got, "{}, {threads} threads", path.display());
    }
    let plain = common::path_of("gpt2_adamw");
    assert!(
        load_compressed_in_parallel(&plain, options(4), Parallel::with_threads(4), MB).is_none()
    );
}

/// Frames that hold JSON, or a pickle of protocol 2 (no FRAMEs to cut at), go as a stream.
#[test]
fn frames_of_json_or_an_old_protocol_load_as_a_stream() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = std::fs::read(common::fixtures().join("mlp_small.json")).expect("fixture");
    let plain = write(dir.path(), "plain.json", &json);
    let path = write(dir.path(), "json.zst", &frames(&json, 4 * KB, false).bytes);
    assert_eq!(
        described(load_path(&plain, options(1))),
        described(parallel(&path, KB))
    );
    // Protocol 2: PROTO 2, then the rest of a small snapshot dict.
    let old = b"\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01]q\x02X\x0d\x00\x00\x00device_tracesq\x03]q\x04u.";
    let plain = write(dir.path(), "old.pickle", old);
    let mut framed = common::zstd::frame(&old[..20]);
    framed.extend(common::zstd::frame(&old[20..]));
    let path = write(dir.path(), "old.zst", &framed);
    let expected = described(load_path(&plain, options(1)));
    assert!(!expected.starts_with("error"), "{expected}");
    assert_eq!(expected, described(parallel(&path, KB)));
}

/// A corrupt frame, a bad checksum, a cut file, a frame with a dictionary or too wide a
/// window: the same error as the single-thread decompressor gives.
#[test]
fn a_bad_frame_fails_as_on_one_thread() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pickle = std::fs::read(common::path_of("mlp_small")).expect("fixture");
    let good = frames(&pickle, 4 * KB, false);
    assert!(good.starts.len() > 4);
    let third = good.starts[2];
    let fourth = good.starts[3];
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut corrupt = good.bytes.clone();
    for byte in &mut corrupt[third + 12..third + 40] {
        *byte ^= 0x5a;
    }
    cases.push(("corrupt blocks in the third frame", corrupt));
    let mut checksum = good.bytes.clone();
    checksum[fourth - 1] ^= 0xff;
    cases.push(("a bad checksum on the third frame", checksum));
    cases.push((
        "cut inside the last frame",
        good.bytes[..good.bytes.len() - 9].to_vec(),
    ));
    cases.push((
        "cut inside the third frame",
        good.bytes[..third + 30].to_vec(),
    ));
    let mut dictionary = good.bytes.clone();
    dictionary[third + 4] |= 0x01;
    cases.push(("a dictionary id on the third frame", dictionary));
    // The third frame, its bytes the same, declaring a window beyond libzstd's limit.
    let mut wide = good.bytes.clone();
    let third_data = &pickle[2 * 4 * KB..3 * 4 * KB];
    wide.splice(third..fourth, common::zstd::raw_frame(third_data, 28));
    cases.push(("a window beyond 128 MiB on the third frame", wide));
    let mut garbage = good.bytes.clone();
    garbage.splice(fourth..fourth, *b"not zstd at all");
    cases.push(("garbage between frames", garbage));
    for (case, bytes) in cases {
        let path = write(dir.path(), "bad.zst", &bytes);
        let expected = described(sequential(&path));
        assert!(
            expected.starts_with("error"),
            "{case}: loaded on one thread"
        );
        let got = described(parallel(&path, 3 * KB));
        assert_eq!(expected, got, "{case}");
        let got = described(landing(&bytes, None, 3 * KB));
        assert_eq!(expected, got, "{case}, as it lands");
    }
}

/// A zstd upload of one frame (what `zstd` writes) is read by the single-thread decompressor
/// in a worker, its pickle still decoded in parallel as it lands; and an upload cut short, in
/// frames or in one, ends the load at once, with an error.
#[test]
fn an_upload_of_one_frame_or_cut_short_loads_as_it_lands() {
    let pickle = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    let expected = described(load_path(&common::path_of("gpt2_adamw"), options(1)));
    let single = common::zstd::frame(&pickle);
    assert_eq!(expected, described(landing(&single, None, 3 * KB)));
    let framed = frames(&pickle, 16 * KB, true).bytes;
    for bytes in [&single, &framed] {
        for cut_at in [bytes.len() / 3, bytes.len() - 2] {
            let started = std::time::Instant::now();
            let got = described(landing(bytes, Some(cut_at), 3 * KB));
            assert!(got.starts_with("error"), "cut at {cut_at}: {got}");
            assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
        }
    }
}

/// An upload of frames to the server (on 4 threads) is decompressed by the workers as it
/// lands, and its summary is the pickle's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_upload_to_the_server_decodes_its_frames_in_parallel() {
    snapview::snapshot::set_default_threads(4);
    let server = common::server::TestServer::new();
    let pickle = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    // Large enough to take the parallel path (1 MiB compressed): a skippable frame of 1 MiB
    // (what a writer may add, as pzstd adds its own small ones) before the pickle's frames.
    let mut framed = 0x184d_2a5eu32.to_le_bytes().to_vec();
    framed.extend((MB as u32).to_le_bytes());
    framed.extend(std::iter::repeat_n(0xa5, MB));
    framed.extend(frames(&pickle, 64 * KB, true).bytes);
    let (status, plain) = server.upload(pickle, "?filename=plain.pickle").await;
    assert!(status.is_success(), "{plain}");
    let before = frames_decompressed_in_parallel();
    // With its length, as browsers and curl send it: the room the workers' output may take.
    let request = axum::http::Request::post("/api/snapshots?filename=framed.pickle.zst")
        .header("content-type", "application/octet-stream")
        .header("content-length", framed.len())
        .body(axum::body::Body::from(framed))
        .expect("request");
    let (status, zstd) = server.call(request).await;
    assert!(status.is_success(), "{zstd}");
    assert!(
        frames_decompressed_in_parallel() > before,
        "no frame in parallel"
    );
    assert!(plain["summary"].is_object(), "{plain}");
    assert_eq!(plain["summary"], zstd["summary"]);
}

/// Bombs in frames the workers take (and in one too long for them, left to the single-thread
/// decompressor): refused by the same bounds, at once.
#[test]
fn a_bomb_in_frames_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    // PROTO 4 and a FRAME, then a run of PROTO opcodes (0x80 0x80 ...), which accumulate
    // nothing: the decompressor's bounds, not the decoder's, must stop it.
    let mut prefix = vec![0x80, 4, FRAME];
    prefix.extend(2u64.to_le_bytes());
    for (case, blocks, limits) in [
        ("the ratio", 500, Limits::default()),
        (
            "the limit",
            500,
            Limits {
                max_decompressed_bytes: 10 << 20,
                ..Limits::default()
            },
        ),
        ("a frame too long for the workers", 600, Limits::default()),
    ] {
        // The first bomb frame is one the workers take; the next two are `blocks` long.
        let mut bytes = common::zstd::bomb(&prefix, 0x80, 0);
        bytes.extend(common::zstd::bomb(&[], 0x80, 500));
        for _ in 0..2 {
            bytes.extend(common::zstd::bomb(&[], 0x80, blocks));
        }
        let path = write(dir.path(), "bomb.zst", &bytes);
        let options = LoadOptions {
            threads: 4,
            limits,
            ..LoadOptions::default()
        };
        let started = std::time::Instant::now();
        let loaded = load_compressed_in_parallel(&path, options, Parallel::with_threads(4), MB)
            .expect("frames");
        let message = loaded.expect_err(case).to_string();
        assert!(message.contains("compression bomb"), "{case}: {message}");
        assert!(
            started.elapsed().as_secs() < 10,
            "{case}: {:?}",
            started.elapsed()
        );
    }
}

/// The large corpus files in frames, with a window of a few pages: the decode hands the
/// scratch file's pages back as it passes them (in steps of 16 MiB), and nothing it still
/// reads is among them.
#[test]
fn large_files_in_frames_load_as_their_pickles() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, path) in common::large_names() {
        if name.contains("huge") {
            // 287 MB to compress on one thread: the big file crosses the steps as well.
            continue;
        }
        let pickle = std::fs::read(&path).expect("reads");
        let expected = described(load_path(&path, options(1)));
        let framed = write(
            dir.path(),
            "large.zst",
            &frames(&pickle, 4 * MB, true).bytes,
        );
        drop(pickle);
        for window in [64 * KB, 16 * MB] {
            let loaded =
                load_compressed_in_parallel(&framed, options(4), Parallel::with_threads(4), window)
                    .expect("frames");
            assert!(
                expected == described(loaded),
                "{name}, window {window}: differs"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// gzip: inflated on one thread (its members cannot be found without inflating them), decoded
// on every core as it lands.

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

#[test]
fn every_fixture_as_gzip_loads_as_its_pickle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut checked = 0;
    for (name, pickle) in fixture_pickles() {
        let plain = write(dir.path(), "plain.pickle", &pickle);
        let expected = described(load_path(&plain, options(1)));
        assert!(!expected.starts_with("error"), "{name}: {expected}");
        let gz = gzip(&pickle);
        let path = write(dir.path(), "plain.pickle.gz", &gz);
        for window in [3 * KB, MB] {
            let before = compressed_decoded_in_parallel();
            let loaded = parallel(&path, window);
            if let Ok(snapshot) = &loaded {
                assert_eq!(snapshot.source.compression, Compression::Gzip, "{name}");
            }
            assert!(expected == described(loaded), "{name}, window {window}");
            // A framed pickle (what torch writes, and the re-framed ones) is decoded in
            // parallel; an unframed one as a stream.
            if pickle.get(..3) == Some(&[0x80, 4, FRAME][..]) {
                assert!(
                    compressed_decoded_in_parallel() > before,
                    "{name}: not in parallel"
                );
            }
            assert!(
                expected == described(landing(&gz, None, window)),
                "{name}, window {window}, as it lands"
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} gzip files checked");
}

/// A bad CRC or length, a cut member, corrupt deflate data, bytes after the member, and two
/// members (which load): the same outcome as on one thread, by path and as it lands.
#[test]
fn a_bad_gzip_fails_as_on_one_thread() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pickle = std::fs::read(common::path_of("mlp_small")).expect("fixture");
    let pickle = reframe(&pickle, 5).expect("a pickle to re-frame");
    let good = gzip(&pickle);
    let mut cases: Vec<(&str, Vec<u8>, bool)> = Vec::new();
    let mut crc = good.clone();
    let at = crc.len() - 8;
    crc[at] ^= 0xff;
    cases.push(("a bad CRC", crc, false));
    let mut length = good.clone();
    let at = length.len() - 1;
    length[at] ^= 0x01;
    cases.push(("a bad length", length, false));
    cases.push(("cut in its trailer", good[..good.len() - 4].to_vec(), false));
    cases.push(("cut in the middle", good[..good.len() / 2].to_vec(), false));
    let mut corrupt = good.clone();
    let middle = corrupt.len() / 2;
    for byte in &mut corrupt[middle..middle + 24] {
        *byte ^= 0x5a;
    }
    cases.push(("corrupt deflate data", corrupt, false));
    let mut after = good.clone();
    after.extend_from_slice(b"not gzip at all");
    cases.push(("bytes after the member", after, false));
    let (first, second) = pickle.split_at(pickle.len() / 3);
    let two = [gzip(first), gzip(second)].concat();
    cases.push(("two members", two, true));
    for (case, bytes, loads) in cases {
        let path = write(dir.path(), "bad.pickle.gz", &bytes);
        let expected = described(sequential(&path));
        assert_eq!(!expected.starts_with("error"), loads, "{case}: {expected}");
        assert_eq!(expected, described(parallel(&path, 3 * KB)), "{case}");
        assert_eq!(
            expected,
            described(landing(&bytes, None, 3 * KB)),
            "{case}, as it lands"
        );
    }
}

/// A gzip bomb is refused by the decompressor's bounds (its ratio to the bytes read, and the
/// absolute limit) in the single-thread read's words, at once; and an upload cut short fails
/// within seconds.
#[test]
fn a_gzip_bomb_or_a_cut_upload_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    // PROTO 4 and a FRAME, then a run of PROTO opcodes (0x80 0x80 ...), which accumulate
    // nothing: the decompressor's bounds, not the decoder's, must stop it.
    let mut bomb = vec![0x80, 4, FRAME];
    bomb.extend(64u64.to_le_bytes());
    bomb.resize(64 << 20, 0x80);
    // At the best level deflate reaches about 1000:1 on one byte repeated.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut encoder, &bomb).expect("gzip in memory");
    let bomb = encoder.finish().expect("gzip in memory");
    assert!(bomb.len() < 128 << 10, "{} bytes", bomb.len());
    let path = write(dir.path(), "bomb.pickle.gz", &bomb);
    let limit = LoadOptions {
        limits: Limits {
            max_decompressed_bytes: 16 << 20,
            ..Limits::default()
        },
        ..options(1)
    };
    for (case, options) in [("the ratio", options(1)), ("the limit", limit)] {
        let expected = described(load_path(&path, options));
        assert!(expected.contains("compression bomb"), "{case}: {expected}");
        let started = std::time::Instant::now();
        let parallel = Parallel {
            threads: 4,
            chunk_bytes: 1 << 20,
        };
        let options = LoadOptions {
            threads: 4,
            ..options
        };
        let got =
            described(load_compressed_in_parallel(&path, options, parallel, MB).expect("gzip"));
        // The same words; the bytes it got to (in the parentheses) depend on the reads' sizes.
        let words = |message: &str| message.split(" (").next().unwrap_or_default().to_owned();
        assert!(got.contains("compression bomb"), "{case}: {got}");
        assert_eq!(words(&expected), words(&got), "{case}");
        assert!(
            started.elapsed().as_secs() < 10,
            "{case}: {:?}",
            started.elapsed()
        );
    }
    let pickle = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    let gz = gzip(&pickle);
    for cut_at in [gz.len() / 3, gz.len() - 2] {
        let started = std::time::Instant::now();
        let got = described(landing(&gz, Some(cut_at), 3 * KB));
        assert!(got.starts_with("error"), "cut at {cut_at}: {got}");
        assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    }
}

/// `load_path` inflates a gzip file beside the parallel decode on 3 threads or more, and reads
/// it on one thread below.
#[test]
fn load_path_decodes_gzip_in_parallel_from_three_threads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = common::path_of("gpt2_adamw");
    let expected = described(load_path(&plain, options(1)));
    let path = write(
        dir.path(),
        "gpt2_adamw.pickle.gz",
        &gzip(&std::fs::read(&plain).expect("fixture")),
    );
    for (threads, in_parallel) in [(4, true), (2, false)] {
        let before = compressed_decoded_in_parallel();
        let got = described(load_path(&path, options(threads)));
        let ran = compressed_decoded_in_parallel() > before;
        // Other tests of this binary raise the count too: only a rise is telling.
        assert!(ran || !in_parallel, "{threads} threads");
        assert!(expected == got, "{threads} threads");
    }
}

/// A gzip upload to the server (on 4 threads) is inflated beside the parallel decode as it
/// lands, and its summary is the pickle's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_upload_to_the_server_decodes_in_parallel() {
    snapview::snapshot::set_default_threads(4);
    let server = common::server::TestServer::new();
    let pickle = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    // Large enough to take the parallel path (1 MiB compressed): a FRAME every 2 opcodes (the
    // same model) stored, not compressed (gzip level 0).
    let pickle = reframe(&pickle, 2).expect("a pickle to re-frame");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    std::io::Write::write_all(&mut encoder, &pickle).expect("gzip in memory");
    let stored = encoder.finish().expect("gzip in memory");
    assert!(stored.len() >= MB, "{} bytes", stored.len());
    let (status, plain) = server.upload(pickle, "?filename=plain.pickle").await;
    assert!(status.is_success(), "{plain}");
    let before = compressed_decoded_in_parallel();
    let request = axum::http::Request::post("/api/snapshots?filename=stored.pickle.gz")
        .header("content-type", "application/octet-stream")
        .header("content-length", stored.len())
        .body(axum::body::Body::from(stored))
        .expect("request");
    let (status, gz) = server.call(request).await;
    assert!(status.is_success(), "{gz}");
    assert!(compressed_decoded_in_parallel() > before, "not in parallel");
    assert!(plain["summary"].is_object(), "{plain}");
    assert_eq!(plain["summary"], gz["summary"]);
}

/// Progress is told in the file's bytes (what the progress bar's total is), not in the
/// decompressed bytes the decoder reads, which run past the file's size.
#[test]
fn progress_counts_the_compressed_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pickle = std::fs::read(common::path_of("gpt2_adamw")).expect("fixture");
    let forms = [
        ("gzip", gzip(&pickle)),
        ("zstd frames", frames(&pickle, 16 * KB, true).bytes),
        ("one zstd frame", common::zstd::frame(&pickle)),
    ];
    for (form, bytes) in forms {
        let path = write(dir.path(), "progress", &bytes);
        let told = std::sync::Mutex::new(Vec::new());
        let progress = |read: u64| told.lock().expect("not poisoned").push(read);
        let options = LoadOptions {
            progress: Some(&progress),
            ..options(4)
        };
        let parallel = Parallel {
            threads: 4,
            chunk_bytes: 1,
        };
        let loaded = load_compressed_in_parallel(&path, options, parallel, 3 * KB);
        assert!(loaded.expect(form).is_ok(), "{form}");
        let told = told.into_inner().expect("not poisoned");
        let size = bytes.len() as u64;
        assert!(!told.is_empty(), "{form}: no progress");
        assert!(told.windows(2).all(|w| w[0] <= w[1]), "{form}: {told:?}");
        let last = told.last().copied().unwrap_or_default();
        assert!(last <= size && last >= size / 2, "{form}: {last} of {size}");
    }
}
