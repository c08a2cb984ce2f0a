//! Bad input, tested: truncated files, random and mutated bytes, pickles that would run code,
//! missing memo entries, absurd nesting, length fields larger than the file, decompression bombs
//! and files that are not snapshots at all. Each is an `Err` whose message says what is wrong,
//! never a panic, and the memory it costs stays bounded (measured by a counting allocator).
//! Also: the gzip, zstd and JSON forms of a snapshot give the same model as the plain pickle.
//!
//! Fixtures under `tests/fixtures/hostile/` come from `tests/fixtures/hostile/make.py`.

mod common;

use common::counting_alloc::{self, thread_peak_during as peak_during};
use common::one_byte::OneByteAtATime;
use common::rng::Rng;
use snapview::pickle::{self, CHUNK_HEADROOM, Chunks, Limits, MAX_STRING_BYTES};
use snapview::snapshot::{Compression, LoadError, LoadOptions, Snapshot, load_path, load_reader};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Memory accounting: the counting allocator, measured per thread so that a test can measure the
// peak a load costs even while other tests run in parallel threads.

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

const MB: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Helpers.

fn load_bytes(bytes: &[u8]) -> Result<Snapshot, LoadError> {
    load_reader(bytes, LoadOptions::default())
}

fn load_with_limit(bytes: &[u8], max_decompressed_bytes: u64) -> Result<Snapshot, LoadError> {
    let options = LoadOptions {
        limits: Limits {
            max_decompressed_bytes,
            ..Default::default()
        },
        progress: None,
        ..LoadOptions::default()
    };
    load_reader(bytes, options)
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Loads `bytes`, turning a panic into a test failure that shows the input.
fn load_no_panic(bytes: &[u8], case: &str) -> Result<Snapshot, LoadError> {
    match catch_unwind(AssertUnwindSafe(|| load_bytes(bytes))) {
        Ok(result) => result,
        Err(_) => panic!(
            "{case}: loading panicked on {} bytes: {}",
            bytes.len(),
            hex(&bytes[..bytes.len().min(256)])
        ),
    }
}

/// The error message for input that must not load.
fn error_of(bytes: &[u8]) -> String {
    match load_bytes(bytes) {
        Ok(_) => panic!(
            "{} loaded, but should be refused",
            hex(&bytes[..bytes.len().min(64)])
        ),
        Err(error) => error.to_string(),
    }
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(common::path_of(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn hostile(name: &str) -> PathBuf {
    common::fixtures().join("hostile").join(name)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

fn assert_truncation_message(message: &str, case: &str) {
    assert!(
        message.contains("ends early") && message.contains("truncated"),
        "{case}: {message}"
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Truncation.

/// Every prefix of `bytes` fails with a message that says the file ends early.
fn every_prefix_is_truncation(
    name: &str,
    bytes: &[u8],
    offsets: impl Iterator<Item = usize>,
) -> usize {
    let mut checked = 0;
    for n in offsets {
        let case = format!("{name} cut at {n} of {}", bytes.len());
        let message = match load_no_panic(&bytes[..n], &case) {
            Ok(_) => panic!("{case}: loaded"),
            Err(error) => error.to_string(),
        };
        if n == 0 {
            assert!(message.contains("empty"), "{case}: {message}");
        } else {
            assert_truncation_message(&message, &case);
        }
        checked += 1;
    }
    checked
}

/// Every offset in the first and last `edge` bytes, and every `step`-th one between.
fn cut_points(len: usize, edge: usize, step: usize) -> Vec<usize> {
    let mut offsets: Vec<usize> = (0..len.min(edge)).collect();
    offsets.extend((edge..len.saturating_sub(edge)).step_by(step));
    offsets.extend(len.saturating_sub(edge).max(edge)..len);
    offsets
}

#[test]
fn every_prefix_of_a_real_file_is_a_truncation_error() {
    for (name, step) in [("mlp_small", 37), ("streams", 41), ("no_history", 1)] {
        let started = Instant::now();
        let bytes = read_fixture(name);
        let checked = every_prefix_is_truncation(
            name,
            &bytes,
            cut_points(bytes.len(), 512, step).into_iter(),
        );
        eprintln!("{name}: {checked} prefixes in {:?}", started.elapsed());
    }
}

#[test]
fn every_prefix_of_a_compressed_or_json_file_is_an_error() {
    let bytes = read_fixture("mlp_small");
    let json = std::fs::read(common::fixtures().join("mlp_small.json")).expect("mlp_small.json");
    let forms = [
        ("gzip", gzip(&bytes), 512, 61),
        ("zstd", common::zstd::frame(&bytes), 512, 53),
        // JSON parses slowly in a debug build: fewer cuts.
        ("json", json, 64, 2003),
    ];
    for (form, data, edge, step) in forms {
        for n in cut_points(data.len(), edge, step) {
            let case = format!("{form} cut at {n} of {}", data.len());
            let message = match load_no_panic(&data[..n], &case) {
                Ok(_) => panic!("{case}: loaded"),
                Err(error) => error.to_string(),
            };
            let says_so = match n {
                0 => message.contains("the file is empty"),
                _ if form == "json" => message.contains("EOF while parsing"),
                _ => message.contains("ends early"),
            };
            assert!(says_so, "{case}: {message}");
        }
    }
}

/// Hands `bytes` over in buffers of pseudo-random sizes (1 byte to 9 KB, so cuts fall inside
/// opcodes and strings, and some buffers are shorter than their headroom), as the read-ahead
/// thread hands over a large file.
struct SmallChunks<'a> {
    rest: &'a [u8],
    rng: Rng,
}

impl Chunks for SmallChunks<'_> {
    fn next_chunk(&mut self, _spent: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let n = match self.rng.below(4) {
            0 => 1 + self.rng.below(8),
            1 => 1 + self.rng.below(300),
            _ => 1 + self.rng.below(9000),
        }
        .min(self.rest.len());
        let mut chunk = vec![0xEE; CHUNK_HEADROOM];
        chunk.extend_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(Some(chunk))
    }
}

fn decode_in_chunks(bytes: &[u8], seed: u64) -> Result<String, String> {
    let chunks = SmallChunks {
        rest: bytes,
        rng: Rng(seed),
    };
    pickle::decode_chunks(chunks, &Limits::default(), &mut ())
        .map(|decoded| format!("{:?} {:?}", decoded.root, decoded.heap))
        .map_err(|error| error.to_string())
}

fn decode_read(bytes: &[u8]) -> Result<String, String> {
    pickle::decode(bytes, &Limits::default(), &mut ())
        .map(|decoded| format!("{:?} {:?}", decoded.root, decoded.heap))
        .map_err(|error| error.to_string())
}

#[test]
fn decoding_handed_over_buffers_equals_reading_and_cuts_name_the_same_offset() {
    for name in ["mlp_small", "streams", "ring_wrap"] {
        let bytes = read_fixture(name);
        let read = decode_read(&bytes);
        assert!(read.is_ok(), "{name}: {read:?}");
        for seed in 1..=5 {
            assert_eq!(decode_in_chunks(&bytes, seed), read, "{name}, seed {seed}");
        }
    }
    let bytes = read_fixture("mlp_small");
    for n in cut_points(bytes.len(), 300, 97) {
        let read = decode_read(&bytes[..n]);
        assert!(read.is_err(), "cut at {n} decoded");
        assert_eq!(
            decode_in_chunks(&bytes[..n], n as u64 + 1),
            read,
            "cut at {n}"
        );
    }
}

/// A pickle of a snapshot with no segments and a `pad` key holding a `len`-byte string.
fn padded_snapshot(len: usize) -> Vec<u8> {
    padded_with(0x8d, &vec![b'x'; len])
}

/// A pickle of a snapshot with no segments and a `pad` key holding `payload`, written with
/// `opcode` (BINUNICODE8 or BINBYTES8).
fn padded_with(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x80, 4, b'}', b'('];
    for key in ["segments", "pad"] {
        bytes.extend([0x8c, key.len() as u8]);
        bytes.extend(key.as_bytes());
        if key == "segments" {
            bytes.push(b']');
        }
    }
    bytes.push(opcode);
    bytes.extend((payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes.extend([b'u', b'.']);
    bytes
}

/// Files of 16 MB and more are read ahead by a second thread and decoded in its buffers: the
/// result, progress reports and errors are those of reading the same bytes from memory.
#[test]
fn a_large_file_loads_from_read_ahead_buffers_as_from_memory() {
    let dir = std::env::temp_dir().join(format!("snapview-read-ahead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("large.pickle");

    // A real snapshot followed by 17 MB that pickle.load ignores (data after STOP).
    let mut bytes = read_fixture("mlp_small");
    bytes.extend(std::iter::repeat_n(0u8, 17 * MB));
    std::fs::write(&path, &bytes).expect("write");
    let from_file = load_path(&path, LoadOptions::default()).expect("loads");
    let from_memory = load_bytes(&bytes).expect("loads");
    assert_eq!(from_file.segments.len(), from_memory.segments.len());
    assert_eq!(
        from_file.trace(0).addr,
        from_memory.trace(0).addr,
        "the same trace"
    );

    // A 20 MB snapshot: progress is reported as it is read.
    let bytes = padded_snapshot(20 * MB);
    std::fs::write(&path, &bytes).expect("write");
    let reported = AtomicU64::new(0);
    let progress = |read: u64| reported.store(read, Ordering::Relaxed);
    let options = LoadOptions {
        progress: Some(&progress),
        ..Default::default()
    };
    assert!(load_path(&path, options).is_ok());
    let reported = reported.load(Ordering::Relaxed);
    assert!(reported >= 16 * MB as u64, "progress: {reported}");

    // Cut inside its long string, near its end, and one byte short.
    for cut in [17 * MB + 12_345, bytes.len() - 2, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).expect("write");
        let from_file = load_path(&path, LoadOptions::default()).map(|_| ());
        let from_memory = load_bytes(&bytes[..cut]).map(|_| ());
        let message = from_file.as_ref().map_err(ToString::to_string).unwrap_err();
        assert_truncation_message(&message, &format!("cut at {cut}"));
        assert_eq!(
            message,
            from_memory.map_err(|e| e.to_string()).unwrap_err(),
            "cut at {cut}"
        );
    }

    // A gzip file of 17 MB (its padding is random, so it does not shrink) is read through the
    // same read-ahead thread, copied out of its buffers; whole and cut, as from memory.
    let mut rng = Rng(7);
    let random: Vec<u8> = (0..17 * MB).map(|_| rng.byte()).collect();
    let compressed = gzip(&padded_with(0x8e, &random));
    assert!(compressed.len() >= 16 * MB);
    std::fs::write(&path, &compressed).expect("write");
    let from_file = load_path(&path, LoadOptions::default()).expect("loads");
    assert_eq!(from_file.source.compression, Compression::Gzip);
    assert_eq!(
        from_file.unknown_keys,
        load_bytes(&compressed).expect("loads").unknown_keys
    );
    let cut = compressed.len() - 5;
    std::fs::write(&path, &compressed[..cut]).expect("write");
    let from_file = load_path(&path, LoadOptions::default()).map(|_| ());
    assert_eq!(
        from_file.map_err(|e| e.to_string()).unwrap_err(),
        load_bytes(&compressed[..cut])
            .map(|_| ())
            .map_err(|e| e.to_string())
            .unwrap_err()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_gzip_with_a_bad_checksum_or_a_cut_trailer_is_refused() {
    let bytes = read_fixture("mlp_small");
    let good = gzip(&bytes);
    // The last 8 bytes are the CRC-32 and the length; the pickle itself is whole without them.
    let cut = &good[..good.len() - 4];
    let message = error_of(cut);
    assert!(message.contains("compressed data ends early"), "{message}");
    let mut bad_crc = good.clone();
    let at = bad_crc.len() - 8;
    bad_crc[at] ^= 0xff;
    let message = error_of(&bad_crc);
    assert!(message.contains("compressed data is corrupt"), "{message}");
    assert!(load_bytes(&good).is_ok());
}

#[test]
fn a_zstd_with_a_bad_checksum_is_refused() {
    let bytes = read_fixture("mlp_small");
    let mut bad = common::zstd::frame(&bytes);
    // ruzstd writes a content checksum: the last 4 bytes of the frame.
    let at = bad.len() - 2;
    bad[at] ^= 0xff;
    let message = error_of(&bad);
    assert!(
        message.contains("compressed data is corrupt") && message.contains("checksum"),
        "{message}"
    );
}

/// The window is what a frame makes the decoder keep, whatever the frame decompresses to: one
/// above 128 MiB (what `zstd --long=31` writes) is refused at the frame's header, and the
/// message says why. (libzstd allocates with C's malloc, which the counting allocator does not
/// see: its refusal before allocating is libzstd's, not measured here.)
#[test]
fn a_zstd_frame_asking_for_a_window_beyond_128_mib_is_refused() {
    let bytes = read_fixture("mlp_small");
    assert!(load_bytes(&common::zstd::raw_frame(&bytes, 27)).is_ok());
    for window_log in [28, 31, 41] {
        let frame = common::zstd::raw_frame(&bytes, window_log);
        let message = error_of(&frame);
        assert!(
            message.contains("compressed data is corrupt")
                && message.contains("window of more than 128 MiB"),
            "2^{window_log}: {message}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Random bytes.

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let headers: [&[u8]; 5] = [
        b"",
        b"\x80\x04",
        b"\x80\x02",
        b"\x80\x05\x95",
        b"\x1f\x8b\x08\x00",
    ];
    let mut loaded = 0;
    for case in 0..6000 {
        let header = headers[case % headers.len()];
        let len = rng.below(96);
        let mut bytes = header.to_vec();
        bytes.extend((0..len).map(|_| rng.byte()));
        match load_no_panic(&bytes, &format!("random case {case}")) {
            Ok(_) => loaded += 1,
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
    assert!(loaded < 60, "{loaded} random inputs loaded");
}

/// Snapshot-ish keys, so random pickles reach the model builder's paths too.
const KEYS: [&str; 24] = [
    "segments",
    "device_traces",
    "blocks",
    "frames",
    "action",
    "addr",
    "size",
    "filename",
    "line",
    "name",
    "allocator_settings",
    "external_annotations",
    "state",
    "total_size",
    "history",
    "real_size",
    "device",
    "segment_pool_id",
    "user_metadata",
    "time_us",
    "device_free",
    "compile_context",
    "stream",
    "alloc",
];

/// Appends one random data opcode (with plausible arguments) to `out`.
fn random_opcode(rng: &mut Rng, out: &mut Vec<u8>) {
    const SIMPLE: &[u8] = b"(]})aesultd\x85\x86\x8712N\x88\x89\x94\x8f\x90\x91.";
    match rng.below(10) {
        0..=4 => out.push(SIMPLE[rng.below(SIMPLE.len())]),
        5 => {
            let key = KEYS[rng.below(KEYS.len())];
            out.push(0x8c);
            out.push(key.len() as u8);
            out.extend_from_slice(key.as_bytes());
        }
        6 => out.extend_from_slice(&[b'K', rng.byte()]),
        7 => {
            let op = [b'q', b'h'][rng.below(2)];
            out.extend_from_slice(&[op, rng.below(8) as u8]);
        }
        8 => {
            out.push(b'J');
            out.extend_from_slice(&(rng.next() as u32).to_le_bytes());
        }
        _ => {
            let n = rng.below(10) as u8;
            out.extend_from_slice(&[0x8a, n]);
            out.extend((0..n).map(|_| rng.byte()));
        }
    }
}

#[test]
fn random_data_opcodes_never_panic() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut loaded = 0;
    for case in 0..20_000 {
        let mut bytes = vec![0x80, 4];
        for _ in 0..rng.below(40) {
            random_opcode(&mut rng, &mut bytes);
        }
        bytes.push(b'.');
        if load_no_panic(&bytes, &format!("opcode case {case}")).is_ok() {
            loaded += 1;
        }
    }
    eprintln!("{loaded} of 20000 random opcode streams loaded");
}

// ---------------------------------------------------------------------------------------------
// 3. Mutations of real files.

fn mutate(rng: &mut Rng, bytes: &[u8], skip_header: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = skip_header + rng.below(out.len() - skip_header);
        match rng.below(3) {
            0 => out[at] ^= 1 << rng.below(8),
            1 => out[at] = rng.byte(),
            _ => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                out.drain(at..end);
            }
        }
    }
    out
}

#[test]
fn mutated_real_files_never_panic() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut outcomes = [0usize; 2];
    for name in ["mlp_small", "mempool", "state_only", "no_history"] {
        let bytes = read_fixture(name);
        let cases = if name == "mlp_small" { 400 } else { 300 };
        for case in 0..cases {
            let mutated = mutate(&mut rng, &bytes, 2);
            let ok = load_no_panic(&mutated, &format!("{name} mutation {case}")).is_ok();
            outcomes[usize::from(ok)] += 1;
        }
    }
    let compressed = [
        gzip(&read_fixture("mempool")),
        common::zstd::frame(&read_fixture("mempool")),
    ];
    for (form, data) in ["gzip", "zstd"].iter().zip(compressed) {
        for case in 0..300 {
            let mutated = mutate(&mut rng, &data, 4);
            let ok = load_no_panic(&mutated, &format!("{form} mutation {case}")).is_ok();
            outcomes[usize::from(ok)] += 1;
        }
    }
    eprintln!("mutations: {} refused, {} loaded", outcomes[0], outcomes[1]);
}

// ---------------------------------------------------------------------------------------------
// 4. Pickles that would run code.

/// Where the os.system payload of the `reduce_system_*` fixtures would `touch` (see make.py).
const PWNED_PATH: &str = "/tmp/snapview_hostile_pwned";

#[test]
fn pickles_of_python_objects_are_refused_naming_the_opcode() {
    let _ = std::fs::remove_file(PWNED_PATH);
    // (fixture, opcode refused, its byte offset), offsets as `python3 -m pickletools` shows.
    let cases = [
        ("ordered_dict_p2.pickle", "GLOBAL", 2),
        ("ordered_dict_p4.pickle", "STACK_GLOBAL", 39),
        ("ordered_dict_p5.pickle", "STACK_GLOBAL", 39),
        ("reduce_system_p2.pickle", "GLOBAL", 2),
        ("reduce_system_p4.pickle", "STACK_GLOBAL", 28),
        ("reduce_system_p5.pickle", "STACK_GLOBAL", 28),
        ("datetime_p4.pickle", "STACK_GLOBAL", 33),
        ("instance_p2.pickle", "GLOBAL", 2),
        ("nested_evil_p4.pickle", "STACK_GLOBAL", 113),
    ];
    for (file, opcode, offset) in cases {
        let message = match load_path(&hostile(file), LoadOptions::default()) {
            Ok(_) => panic!("{file} loaded"),
            Err(error) => error.to_string(),
        };
        assert!(
            message.contains(&format!("opcode {opcode} ")),
            "{file}: {message}"
        );
        assert!(message.contains("data only"), "{file}: {message}");
        assert!(
            message.starts_with(&format!("byte {offset}: ")),
            "{file}: {message}"
        );
    }
    assert!(
        !std::path::Path::new(PWNED_PATH).exists(),
        "loading a reduce_system fixture ran its payload"
    );
}

#[test]
fn a_reduce_payload_is_never_executed() {
    // GLOBAL posix.system, then REDUCE with a command that would create a file in a temp dir.
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("pwned");
    let command = format!("touch {}", marker.display());
    let mut bytes = b"\x80\x02cposix\nsystem\nX".to_vec();
    bytes.extend_from_slice(&(command.len() as u32).to_le_bytes());
    bytes.extend_from_slice(command.as_bytes());
    bytes.extend_from_slice(b"\x85R.");
    let message = error_of(&bytes);
    assert!(message.contains("byte 2: opcode GLOBAL"), "{message}");
    assert!(!marker.exists());
    // The same without the GLOBAL: REDUCE itself is refused, whatever is on the stack.
    let mut bytes = b"\x80\x04\x8c\x06systemX".to_vec();
    bytes.extend_from_slice(&(command.len() as u32).to_le_bytes());
    bytes.extend_from_slice(command.as_bytes());
    let at = bytes.len() + 1;
    bytes.extend_from_slice(b"\x85R.");
    let message = error_of(&bytes);
    assert!(
        message.contains(&format!("byte {at}: opcode REDUCE")),
        "{message}"
    );
    assert!(!marker.exists());
}

#[test]
fn every_code_opcode_is_refused_by_name() {
    let opcodes: [(u8, &str); 13] = [
        (b'c', "GLOBAL"),
        (0x93, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
    ];
    for (opcode, name) in opcodes {
        // An empty list and an empty tuple on the stack, then the opcode at byte 4.
        let bytes = [0x80, 4, b']', b')', opcode, b'.'];
        let message = error_of(&bytes);
        assert!(
            message.starts_with(&format!(
                "byte 4: opcode {name} would import or call Python code"
            )),
            "{name}: {message}"
        );
        assert!(message.contains("data only"), "{name}: {message}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Memo references to missing entries.

#[test]
fn a_memo_reference_to_a_missing_index_names_the_index() {
    let cases: [(&[u8], &str); 4] = [
        (
            b"\x80\x04h\x07.",
            "byte 2: memo reference to index 7, which was never stored",
        ),
        (
            b"\x80\x04j\xff\xff\xff\xff.",
            "memo reference to index 4294967295",
        ),
        (b"\x80\x02g7\n.", "memo reference to index 7"),
        // Stored 0 and 1, fetched 2.
        (
            b"\x80\x04]\x94}\x94h\x02.",
            "byte 6: memo reference to index 2",
        ),
    ];
    for (bytes, expected) in cases {
        let message = error_of(bytes);
        assert!(message.contains(expected), "{}: {message}", hex(bytes));
    }
}

#[test]
fn a_memo_reference_into_a_hole_names_the_index() {
    // PUT 5 (indices 0-4 are never stored) then GET 3. CPython: "Memo value not found at index 3".
    let message = error_of(b"\x80\x04}q\x05(\x8c\x08segmentsh\x03u.");
    assert!(message.contains("index 3"), "{message}");
}

#[test]
fn memo_gaps_cost_memory_in_proportion_to_the_input() {
    // LONG_BINPUT at indices 1024 apart: 10,000 of them (50 KB) extend the dense memo table
    // by 10 million entries (measured: 129 MB).
    let mut bytes = vec![0x80, 4, b'}'];
    let mut index = 0u32;
    for _ in 0..10_000 {
        index += 1024;
        bytes.push(b'r');
        bytes.extend_from_slice(&index.to_le_bytes());
        index += 1;
    }
    bytes.extend_from_slice(b"(\x8c\x08segments]u.");
    let (result, peak) = peak_during(|| load_bytes(&bytes));
    assert!(result.is_ok(), "{:?}", result.err());
    assert!(
        peak < 16 * MB,
        "{} input bytes cost {peak} bytes",
        bytes.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Nesting 10^6 deep.

const DEEP: usize = 1_000_000;

fn assert_prompt(started: Instant, limit: Duration, case: &str) {
    let elapsed = started.elapsed();
    assert!(elapsed < limit, "{case} took {elapsed:?}");
}

#[test]
fn a_million_marks_are_refused() {
    let mut bytes = vec![0x80, 4];
    bytes.extend(std::iter::repeat_n(b'(', DEEP));
    bytes.push(b'.');
    let started = Instant::now();
    let (result, peak) = peak_during(|| load_bytes(&bytes));
    assert_prompt(started, Duration::from_secs(5), "10^6 MARKs");
    let message = result.expect_err("10^6 MARKs").to_string();
    assert!(
        message.contains("nesting deeper than 10000 levels"),
        "{message}"
    );
    eprintln!("10^6 MARKs: peak {} KiB", peak >> 10);
    assert!(peak < 16 * MB, "peak {peak} bytes");
}

#[test]
fn a_million_nested_lists_neither_overflow_nor_blow_up() {
    // `]` x 10^6 then `a` x (10^6 - 1): each list appended into the one below, 10^6 deep.
    let mut bytes = vec![0x80, 4];
    bytes.extend(std::iter::repeat_n(b']', DEEP));
    bytes.extend(std::iter::repeat_n(b'a', DEEP - 1));
    bytes.push(b'.');
    let started = Instant::now();
    let (result, peak) = peak_during(|| load_bytes(&bytes).map(|s| s.segments.len()));
    assert_prompt(started, Duration::from_secs(10), "10^6 nested lists");
    // The top level is a list (torch 1.13's bare segment list) whose item is no segment dict:
    // not "a snapshot with 0 segments".
    let message = result
        .expect_err("a deep list is not a snapshot")
        .to_string();
    assert!(
        message.contains("item 0 is a List, not a segment dict"),
        "{message}"
    );
    // About 60 bytes per list; the input alone is 2 MB.
    eprintln!("10^6 nested lists: peak {} KiB", peak >> 10);
    assert!(peak < 200 * MB, "peak {peak} bytes");

    // The same nesting as a value inside a snapshot dict (allocator_settings is turned into
    // JSON, recursively) and as a trace entry's user_metadata.
    for key in ["allocator_settings", "external_annotations"] {
        let mut bytes = b"\x80\x04}(\x8c".to_vec();
        bytes.push(key.len() as u8);
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend(std::iter::repeat_n(b']', DEEP));
        bytes.extend(std::iter::repeat_n(b'a', DEEP - 1));
        bytes.extend_from_slice(b"\x8c\x08segments]u.");
        let started = Instant::now();
        let result = load_no_panic(&bytes, key);
        assert_prompt(started, Duration::from_secs(10), key);
        assert!(result.is_ok(), "{key}: {:?}", result.err());
    }
    let mut bytes =
        b"\x80\x04}(\x8c\x0ddevice_traces]]}(\x8c\x06action\x8c\x05alloc\x8c\x0duser_metadata"
            .to_vec();
    bytes.extend(std::iter::repeat_n(b']', DEEP));
    bytes.extend(std::iter::repeat_n(b'a', DEEP - 1));
    bytes.extend_from_slice(b"uaau.");
    let snapshot = load_no_panic(&bytes, "deep user_metadata").expect("deep user_metadata");
    assert_eq!(snapshot.trace(0).len(), 1);
}

#[test]
fn a_million_nested_tuples_and_deep_json_are_handled() {
    // `)` then TUPLE1 x 10^6: ((((),),),)... 10^6 deep, not a snapshot.
    let mut bytes = vec![0x80, 4, b')'];
    bytes.extend(std::iter::repeat_n(0x85, DEEP));
    bytes.push(b'.');
    let message = error_of(&bytes);
    assert!(message.contains("top level is a Tuple"), "{message}");
    // JSON nested 10^6 deep stops at serde_json's recursion limit.
    let json: Vec<u8> = std::iter::repeat_n(b'[', DEEP)
        .chain(std::iter::repeat_n(b']', DEEP))
        .collect();
    let message = error_of(&json);
    assert!(
        message.contains("invalid JSON snapshot: recursion limit exceeded"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// 7. Length fields larger than the file.

#[test]
fn a_length_field_larger_than_the_file_fails_fast_without_allocating_it() {
    let tail = b"abc";
    // (opcode, its length field, the declared length)
    let cases: [(&str, Vec<u8>, u64); 7] = [
        (
            "BINUNICODE8",
            [&[0x8d][..], &(1u64 << 40).to_le_bytes()].concat(),
            1 << 40,
        ),
        (
            "BINBYTES8",
            [&[0x8e][..], &(1u64 << 40).to_le_bytes()].concat(),
            1 << 40,
        ),
        (
            "BYTEARRAY8",
            [&[0x96][..], &u64::MAX.to_le_bytes()].concat(),
            u64::MAX,
        ),
        (
            "BINUNICODE",
            [&[b'X'][..], &u32::MAX.to_le_bytes()].concat(),
            u32::MAX.into(),
        ),
        (
            "BINBYTES",
            [&[b'B'][..], &u32::MAX.to_le_bytes()].concat(),
            u32::MAX.into(),
        ),
        (
            "LONG4",
            [&[0x8b][..], &u32::MAX.to_le_bytes()].concat(),
            u32::MAX.into(),
        ),
        (
            "BINSTRING",
            [&[b'T'][..], &i32::MAX.to_le_bytes()].concat(),
            i32::MAX as u64,
        ),
    ];
    for (name, opcode, declared) in cases {
        let bytes = [&b"\x80\x04"[..], &opcode, tail].concat();
        let started = Instant::now();
        let (result, peak) = peak_during(|| load_bytes(&bytes));
        assert_prompt(started, Duration::from_millis(500), name);
        let message = result.expect_err(name).to_string();
        // The offset is where the declared bytes start, after the length field. Every length
        // here is beyond what a snapshot's strings need, so it is refused before reading.
        let data_at = 2 + opcode.len();
        assert_eq!(
            message,
            format!(
                "byte {data_at}: {name} declares {declared} bytes, more than the {MAX_STRING_BYTES} bytes any single string in a memory snapshot needs; refusing it before reading"
            ),
        );
        // Within that bound, a length beyond the end of the file is truncation.
        let mut within = bytes.clone();
        let field = &mut within[3..data_at];
        let length = 1u64 << 20;
        match field.len() {
            8 => field.copy_from_slice(&length.to_le_bytes()),
            _ => field.copy_from_slice(&(length as u32).to_le_bytes()),
        }
        let needed = length - tail.len() as u64;
        let (result, within_peak) = peak_during(|| load_bytes(&within));
        assert_eq!(
            result.expect_err(name).to_string(),
            format!(
                "the file ends early: byte {data_at} starts {name}, which needs {needed} more bytes (the file is truncated)"
            ),
        );
        assert!(within_peak < 8 * MB, "{name}: peak {within_peak} bytes");
        // The read buffers (about 1 MB), not the declared length.
        eprintln!("{}: peak {} KiB", name, peak >> 10);
        assert!(peak < 8 * MB, "{name}: peak {peak} bytes");
        // Through gzip the same, under the default limit.
        let message = error_of(&gzip(&bytes));
        assert!(
            message.contains(&format!("{name} declares {declared} bytes")),
            "{name} in gzip: {message}"
        );
        let message = error_of(&gzip(&within));
        assert!(
            message.contains(&format!("starts {name}")),
            "{name} in gzip: {message}"
        );
    }
    let message = error_of(b"\x80\x04T\xff\xff\xff\xffabc.");
    assert_eq!(message, "byte 2: BINSTRING with a negative length");
    // A FRAME length is only a hint: a huge one costs nothing.
    let mut bytes = vec![0x80, 4, 0x95];
    bytes.extend_from_slice(&u64::MAX.to_le_bytes());
    bytes.extend_from_slice(b"}.");
    let (result, peak) = peak_during(|| load_bytes(&bytes));
    let message = result.expect_err("an empty dict").to_string();
    assert!(
        message.contains("neither 'segments' nor 'device_traces'"),
        "{message}"
    );
    eprintln!("huge FRAME: peak {} KiB", peak >> 10);
    assert!(peak < 8 * MB, "FRAME: peak {peak} bytes");
    // Memo indices far apart go to a sparse map, not a 4-billion-entry table.
    let mut bytes = vec![0x80, 4, b'}'];
    for index in [4_000_000_000u32, 3_000_000_000, u32::MAX] {
        bytes.push(b'r');
        bytes.extend_from_slice(&index.to_le_bytes());
    }
    bytes.extend_from_slice(b"(\x8c\x08segments]u.");
    let (result, peak) = peak_during(|| load_bytes(&bytes));
    assert!(result.is_ok(), "{:?}", result.err());
    eprintln!("sparse LONG_BINPUT: peak {} KiB", peak >> 10);
    assert!(peak < 8 * MB, "LONG_BINPUT: peak {peak} bytes");
}

// ---------------------------------------------------------------------------------------------
// 8. Decompression bombs.

const BOMB_LIMIT: u64 = 10 << 20;
const BOMB_SIZE: usize = 64 << 20;

/// gzip of `prefix` followed by `BOMB_SIZE` bytes of `fill`.
fn gzip_bomb(prefix: &[u8], fill: u8) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(prefix).expect("gzip in memory");
    let chunk = vec![fill; MB];
    for _ in 0..BOMB_SIZE / MB {
        encoder.write_all(&chunk).expect("gzip in memory");
    }
    encoder.finish().expect("gzip in memory")
}

/// A pickle that never ends: BINBYTES8 declaring the longest string allowed, whose bytes the
/// bomb supplies (a longer one is refused at its length: see
/// `a_length_field_larger_than_the_file_fails_fast_without_allocating_it`).
fn huge_bytes_prefix() -> Vec<u8> {
    [&[0x80, 4, 0x8e][..], &MAX_STRING_BYTES.to_le_bytes()].concat()
}

/// The same, but streaming: 0x80 0x80 ... is a run of PROTO opcodes, so nothing accumulates.
fn endless_proto_prefix() -> Vec<u8> {
    vec![0x80, 4]
}

fn assert_bomb_refused(case: &str, bomb: &[u8], max_peak: usize) {
    let started = Instant::now();
    let (result, peak) = peak_during(|| load_with_limit(bomb, BOMB_LIMIT));
    assert_prompt(started, Duration::from_secs(5), case);
    let message = result.expect_err(case).to_string();
    assert_eq!(
        message,
        format!(
            "decompressed data exceeds the limit of {BOMB_LIMIT} bytes; refusing it (a compression bomb, or raise the limit)"
        ),
        "{case}"
    );
    eprintln!("{}: peak {} KiB", case, peak >> 10);
    assert!(peak < max_peak, "{case}: peak {peak} bytes");
}

#[test]
fn a_gzip_bomb_is_refused_at_the_limit() {
    let bomb = gzip_bomb(&huge_bytes_prefix(), 0);
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    // Bytes accumulate up to the limit (a growing Vec may hold twice that), no further.
    assert_bomb_refused("gzip BINBYTES8 bomb", &bomb, 48 * MB);
    let bomb = gzip_bomb(&endless_proto_prefix(), 0x80);
    assert_bomb_refused("gzip PROTO-stream bomb", &bomb, 8 * MB);
    // Many small members (MultiGzDecoder reads them all) count toward the same limit.
    let member = gzip(&vec![0x80; MB]);
    let mut bomb = gzip(&endless_proto_prefix());
    for _ in 0..64 {
        bomb.extend_from_slice(&member);
    }
    assert_bomb_refused("multi-member gzip bomb", &bomb, 8 * MB);
}

#[test]
fn a_zstd_bomb_is_refused_at_the_limit() {
    let blocks = BOMB_SIZE / (128 << 10);
    let bomb = common::zstd::bomb(&huge_bytes_prefix(), 0, blocks);
    assert!(bomb.len() < 4 * blocks + 64);
    assert_bomb_refused("zstd BINBYTES8 bomb", &bomb, 48 * MB);
    let bomb = common::zstd::bomb(&endless_proto_prefix(), 0x80, blocks);
    assert_bomb_refused("zstd PROTO-stream bomb", &bomb, 8 * MB);
    // The hand-made frame is valid zstd: a small one holding a whole pickle loads.
    let snapshot_bytes = b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces]u.";
    assert!(load_bytes(&common::zstd::bomb(snapshot_bytes, 0, 0)).is_ok());
}

#[test]
fn the_limit_counts_decompressed_bytes_exactly() {
    let bytes = read_fixture("mlp_small");
    let exact = bytes.len() as u64;
    for (form, data) in [
        ("gzip", gzip(&bytes)),
        ("zstd", common::zstd::frame(&bytes)),
    ] {
        assert!(
            load_with_limit(&data, exact).is_ok(),
            "{form}: an exact fit loads"
        );
        let message = load_with_limit(&data, exact - 1)
            .expect_err(form)
            .to_string();
        assert!(
            message.contains(&format!("exceeds the limit of {} bytes", exact - 1)),
            "{form}: {message}"
        );
    }
    // A plain pickle is not decompressed: the limit does not apply.
    assert!(load_with_limit(&bytes, 1).is_ok());
}

// ---------------------------------------------------------------------------------------------
// 9. The same snapshot in every encoding.

/// The model numbers that must not depend on the encoding.
#[derive(Debug, PartialEq)]
struct Numbers {
    segments: usize,
    blocks: usize,
    trace_lengths: Vec<usize>,
    reserved_bytes: u64,
    active_bytes: u64,
    frames: usize,
    stacks: usize,
    actions: Vec<String>,
    addresses: Vec<u64>,
    sizes: Vec<u64>,
    times: Vec<i64>,
}

fn numbers(snapshot: &Snapshot) -> Numbers {
    let traces = &snapshot.device_traces;
    Numbers {
        segments: snapshot.segments.len(),
        blocks: snapshot.segments.iter().map(|s| s.blocks.len()).sum(),
        trace_lengths: traces.iter().map(snapview::snapshot::Trace::len).collect(),
        reserved_bytes: snapshot.segments.iter().map(|s| s.total_size).sum(),
        active_bytes: snapshot.segments.iter().map(|s| s.active_size).sum(),
        frames: snapshot.frames.len(),
        stacks: snapshot.stacks.len(),
        actions: traces
            .iter()
            .flat_map(|t| t.action.iter().map(|&code| t.action_name(code).to_owned()))
            .collect(),
        addresses: traces.iter().flat_map(|t| t.addr.iter()).collect(),
        sizes: traces.iter().flat_map(|t| t.size.iter()).collect(),
        times: traces.iter().flat_map(|t| t.time_us.iter()).collect(),
    }
}

#[test]
fn gzip_zstd_and_json_forms_give_the_same_model() {
    let bytes = read_fixture("mlp_small");
    let plain = common::load("mlp_small");
    let expected = numbers(&plain);
    let facts = common::facts();
    assert_eq!(expected.segments as u64, facts["mlp_small"]["segments"]);
    assert_eq!(
        expected.reserved_bytes,
        facts["mlp_small"]["reserved_bytes"]
    );
    assert_eq!(plain.source.compression, Compression::None);

    let json = std::fs::read(common::fixtures().join("mlp_small.json")).expect("mlp_small.json");
    let cli_zstd = std::fs::read(common::fixtures().join("mlp_small.pickle.zst"))
        .expect("mlp_small.pickle.zst");
    // pzstd writes a skippable frame (the next frame's size) before each frame, the first too.
    let cli_pzstd = std::fs::read(common::fixtures().join("mlp_small.pickle.pzst"))
        .expect("mlp_small.pickle.pzst");
    assert_eq!(
        &cli_pzstd[1..4],
        &[0x2a, 0x4d, 0x18],
        "a skippable frame first"
    );
    // Two zstd frames, as pzstd or `cat a.zst b.zst` writes, with a skippable frame between.
    let mut two_frames = common::zstd::frame(&bytes[..20_000]);
    two_frames.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4]);
    two_frames.extend_from_slice(&common::zstd::frame(&bytes[20_000..]));
    let mut two_members = gzip(&bytes[..20_000]);
    two_members.extend_from_slice(&gzip(&bytes[20_000..]));
    let forms: [(&str, Vec<u8>, Compression, Option<u8>); 9] = [
        ("gzip", gzip(&bytes), Compression::Gzip, Some(4)),
        ("gzip, two members", two_members, Compression::Gzip, Some(4)),
        (
            "zstd (ruzstd)",
            common::zstd::frame(&bytes),
            Compression::Zstd,
            Some(4),
        ),
        ("zstd (zstd -19)", cli_zstd, Compression::Zstd, Some(4)),
        ("zstd (pzstd -19)", cli_pzstd, Compression::Zstd, Some(4)),
        ("zstd, two frames", two_frames, Compression::Zstd, Some(4)),
        ("json", json.clone(), Compression::None, None),
        ("gzip of json", gzip(&json), Compression::Gzip, None),
        (
            "zstd of json",
            common::zstd::frame(&json),
            Compression::Zstd,
            None,
        ),
    ];
    for (form, data, compression, protocol) in forms {
        let snapshot = load_bytes(&data).unwrap_or_else(|e| panic!("{form}: {e}"));
        assert_eq!(snapshot.source.compression, compression, "{form}");
        assert_eq!(snapshot.source.pickle_protocol, protocol, "{form}");
        assert_eq!(numbers(&snapshot), expected, "{form}");
        if protocol.is_some() {
            // Same pickle, same decoder: the segments are identical, stack ids included.
            assert_eq!(snapshot.segments, plain.segments, "{form}");
        }
        // A reader that hands out one byte per call still tells the encoding.
        let snapshot = load_reader(OneByteAtATime(&data), LoadOptions::default())
            .unwrap_or_else(|e| panic!("{form}, one byte at a time: {e}"));
        assert_eq!(numbers(&snapshot), expected, "{form}, one byte at a time");
    }
    let snapshot =
        load_reader(OneByteAtATime(&bytes), LoadOptions::default()).expect("one byte at a time");
    assert_eq!(numbers(&snapshot), expected);
}

#[test]
fn a_compressed_stream_of_nothing_says_so() {
    let skippable_only = [0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
    for (form, data) in [
        ("zstd, skippable frames only", skippable_only.to_vec()),
        ("zstd of nothing", common::zstd::frame(&[])),
        ("gzip of nothing", gzip(&[])),
    ] {
        let error = load_bytes(&data).expect_err(form).to_string();
        assert!(error.contains("stream holds no data"), "{form}: {error}");
    }
}

// ---------------------------------------------------------------------------------------------
// 10. Files that are not snapshots.

#[test]
fn wrong_file_types_get_a_human_message() {
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".to_vec();
    let xz = b"\xfd7zXZ\x00\x00\x04\xe6\xd6\xb4\x46".to_vec();
    let zip = b"PK\x03\x04\x14\x00\x00\x00\x08\x00".to_vec();
    let pickle = read_fixture("mlp_small");
    // (case, input, what the message must say: each part, in order)
    let not_a_snapshot = "not a memory snapshot: it starts with ";
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("empty", vec![], vec!["the file is empty"]),
        ("whitespace", b"  \n".to_vec(), vec![not_a_snapshot]),
        (
            "png",
            png,
            vec![
                not_a_snapshot,
                "89 50 4e 47",
                "not a pickle (0x80), gzip, zstd or JSON",
            ],
        ),
        (
            "text",
            b"hello".to_vec(),
            vec![
                not_a_snapshot,
                "hello",
                "not a pickle (0x80), gzip, zstd or JSON",
            ],
        ),
        (
            "zip",
            zip,
            vec![
                "this is a zip archive (a torch.save checkpoint?), not a memory snapshot; make one with torch.cuda.memory._dump_snapshot()",
            ],
        ),
        (
            "xz",
            xz,
            vec!["this is an xz-compressed file; decompress it first (`xz -d FILE`)"],
        ),
        (
            "protocol 0 pickle",
            b"(dp0\n.".to_vec(),
            vec![not_a_snapshot, "dp0"],
        ),
        (
            "protocol 6",
            b"\x80\x06}.".to_vec(),
            vec!["pickle protocol 6 is not supported (snapview reads protocols 2 to 5)"],
        ),
        (
            "gzip of text",
            gzip(b"hello"),
            vec![not_a_snapshot, "hello"],
        ),
        (
            "zstd of text",
            common::zstd::frame(b"hello"),
            vec![not_a_snapshot, "hello"],
        ),
        (
            "gzip of gzip",
            gzip(&gzip(&pickle)),
            vec!["the file is compressed twice; decompress it once first"],
        ),
        (
            "corrupt gzip",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage!".to_vec(),
            vec!["the compressed data is corrupt: "],
        ),
        // A valid frame header, then a block of the reserved type 3.
        (
            "corrupt zstd",
            b"\x28\xb5\x2f\xfd\x00\x38\x07\x00\x00 garbage garbage".to_vec(),
            vec!["the compressed data is corrupt: "],
        ),
        (
            "JSON of something else",
            br#"{"a": 1}"#.to_vec(),
            vec![
                "not a memory snapshot: the top-level dict has neither 'segments' nor 'device_traces' (keys: a)",
            ],
        ),
        (
            "bad JSON",
            b"{\"segments\": [}".to_vec(),
            vec!["invalid JSON snapshot: "],
        ),
        (
            "pickle of another dict",
            b"\x80\x04}\x8c\x01aK\x01s.".to_vec(),
            vec![
                "not a memory snapshot: the top-level dict has neither 'segments' nor 'device_traces' (keys: a)",
            ],
        ),
        (
            "pickle of an int",
            b"\x80\x04K\x01.".to_vec(),
            vec!["not a memory snapshot: the top level is a", "Int"],
        ),
        (
            "unknown opcode",
            b"\x80\x04\xff.".to_vec(),
            vec!["byte 2: unknown pickle opcode 0xff; the file is corrupt or not a pickle"],
        ),
        (
            "no STOP",
            b"\x80\x04}".to_vec(),
            vec![
                "the file ends early: byte 3 starts the next opcode (no STOP was reached), which needs 1 more bytes (the file is truncated)",
            ],
        ),
        (
            "out-of-band buffer",
            b"\x80\x05\x97.".to_vec(),
            vec!["byte 2: out-of-band pickle buffers"],
        ),
    ];
    for (case, bytes, parts) in cases {
        let message = error_of(&bytes);
        let mut rest = message.as_str();
        for part in parts {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => panic!("{case}: {message:?} does not say {part:?}"),
            }
        }
        if case != "no STOP" {
            eprintln!("{case}: {message}");
        }
    }
    let missing = common::fixtures().join("no_such_file.pickle");
    let message = load_path(&missing, LoadOptions::default())
        .expect_err("missing")
        .to_string();
    assert!(
        message.starts_with("cannot open ") && message.contains("no_such_file.pickle"),
        "{message}"
    );
    let message = load_path(&common::fixtures(), LoadOptions::default())
        .expect_err("a directory")
        .to_string();
    assert!(
        message.contains("reading failed") && message.contains("directory"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// 10. Shared-structure bombs, decompression ratios, sizes beyond any memory, lists that are not
// segment lists. The four files in `fixtures/hostile/` named in tests/fixtures/README.md broke
// earlier builds: each must now be answered at once, with bounded memory and one clear line.

/// Address space a CLI run may use (`ulimit -v`, in KiB): 1 GiB holds the binary, its threads'
/// stacks and arenas, and any bounded answer; the hostile files reached 2.1 GB and more before.
/// (A child's peak RSS cannot be read back reliably: `getrusage` counts the test binary's own
/// memory, which the child shares until it execs.)
const CLI_ADDRESS_SPACE_KIB: u64 = 1 << 20;

/// Runs the CLI with its address space capped: exit status, stdout, stderr and the wall time. A
/// run that needed more memory than the cap fails its allocation and aborts (not exit 2).
fn run_cli(args: &[&str]) -> (Option<i32>, String, String, Duration) {
    let started = Instant::now();
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {CLI_ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_snapview"))
        .args(args)
        .output()
        .expect("sh runs the snapview binary");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        started.elapsed(),
    )
}

/// Loads `bytes` in this process: the error message, the peak bytes allocated and the time.
fn refused_in_process(bytes: &[u8], case: &str) -> (String, usize, Duration) {
    let started = Instant::now();
    let (result, peak) = peak_during(|| load_no_panic(bytes, case).map(|s| s.segments.len()));
    let elapsed = started.elapsed();
    let message = match result {
        Ok(segments) => panic!("{case}: loaded ({segments} segments), but must be refused"),
        Err(error) => error.to_string(),
    };
    eprintln!(
        "{case}: refused in {:?}, peak {} KiB: {message}",
        elapsed,
        peak >> 10
    );
    (message, peak, elapsed)
}

const SHARED_BOMB_MESSAGE: &str = "expands to more data than the whole file holds (a value shared through the pickle memo many times, or a reference cycle); refusing it";

#[test]
fn the_hostile_files_are_refused_at_once_with_bounded_memory() {
    let cases: [(&str, &str); 3] = [
        (
            "cycle_settings.pickle",
            "not a memory snapshot: allocator_settings expands to more data",
        ),
        (
            "laughs_settings.pickle",
            "not a memory snapshot: allocator_settings expands to more data",
        ),
        (
            "bomb_bytes_2g.pickle.zst",
            "byte 11: BINBYTES8 declares 2147483648 bytes, more than the 67108864 bytes any single string in a memory snapshot needs; refusing it before reading",
        ),
    ];
    for (name, expected) in cases {
        let bytes = std::fs::read(hostile(name)).expect(name);
        let (message, peak, elapsed) = refused_in_process(&bytes, name);
        assert!(message.contains(expected), "{name}: {message}");
        // Before the fix: 400 MB/s without end (the settings) and 2.1 GB (the bomb).
        assert!(peak < 48 * MB, "{name}: peak {peak} bytes");
        assert!(elapsed < Duration::from_secs(2), "{name}: {elapsed:?}");
        for command in ["summary", "stats"] {
            let path = hostile(name);
            let (code, stdout, stderr, elapsed) =
                run_cli(&[command, path.to_str().expect("utf-8")]);
            assert_eq!(code, Some(2), "{command} {name}: {stderr}");
            assert!(stdout.is_empty(), "{command} {name}: {stdout}");
            assert_eq!(stderr.lines().count(), 1, "{command} {name}: {stderr}");
            assert!(stderr.contains(expected), "{command} {name}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
            assert!(
                elapsed < Duration::from_secs(5),
                "{command} {name}: {elapsed:?}"
            );
        }
    }
    // The 2^63-byte block: `stats` refuses it in one line (it aborted with a backtrace,
    // exit 134, allocating a page map for the size); `summary` reports the sizes.
    let path = hostile("stats_abort_size_2_63.pickle");
    let path = path.to_str().expect("utf-8");
    let (code, stdout, stderr, _) = run_cli(&["stats", path]);
    assert_eq!(code, Some(2), "stats: {stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no machine has that much memory, so this snapshot's sizes are corrupt"),
        "{stderr}"
    );
    let (code, stdout, stderr, _) = run_cli(&["summary", path]);
    assert_eq!(code, Some(0), "summary: {stderr}");
    assert!(!stdout.is_empty(), "summary printed nothing");
}

/// Pickle opcodes that leave one value on the stack: a list holding the next-inner list twice,
/// `levels` deep (2^levels leaves), memoized as indices `first..first + levels`.
fn laughs(first: u8, levels: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for level in 0..levels {
        out.extend_from_slice(&[b']', 0x94]);
        if level > 0 {
            let inner = first + level - 1;
            out.extend_from_slice(&[b'(', b'h', inner, b'h', inner, b'e']);
        }
        out.push(b'0');
    }
    out.extend_from_slice(&[b'h', first + levels - 1]);
    out
}

fn short_str(text: &str) -> Vec<u8> {
    let mut out = vec![0x8c, text.len() as u8];
    out.extend_from_slice(text.as_bytes());
    out
}

/// BINUNICODE of `len` copies of `x`, memoized as the next index.
fn long_str(len: usize) -> Vec<u8> {
    let mut out = vec![b'X'];
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend(std::iter::repeat_n(b'x', len));
    out.push(0x94);
    out
}

/// `count` references to memo index `index`, appended in APPENDS batches of 1000 to the list on
/// top of the stack.
fn appends_of(index: u8, count: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut left = count;
    while left > 0 {
        let batch = left.min(1000);
        out.push(b'(');
        for _ in 0..batch {
            out.extend_from_slice(&[b'h', index]);
        }
        out.push(b'e');
        left -= batch;
    }
    out
}

fn assert_shared_bomb_refused(case: &str, bytes: &[u8], expected: &str) {
    let (message, peak, elapsed) = refused_in_process(bytes, case);
    assert!(message.contains(expected), "{case}: {message}");
    assert!(message.contains(SHARED_BOMB_MESSAGE), "{case}: {message}");
    assert!(peak < 64 * MB, "{case}: peak {peak} bytes");
    assert!(elapsed < Duration::from_secs(3), "{case}: {elapsed:?}");
}

#[test]
fn values_shared_through_the_memo_cost_a_bounded_conversion_everywhere() {
    let prologue = b"\x80\x04".to_vec();
    let segments = [short_str("segments"), b"]".to_vec()].concat();
    // 2^40 leaves as an annotation's field and as a tuple dict key in the settings.
    let bytes = [
        &prologue[..],
        &laughs(0, 40),
        b"0}(",
        &segments,
        &short_str("external_annotations"),
        b"]}(",
        &short_str("name"),
        b"h\x27uau.",
    ]
    .concat();
    assert_shared_bomb_refused("laughs annotation", &bytes, "external_annotations");
    let bytes = [
        &prologue[..],
        &laughs(0, 40),
        b"0}(",
        &segments,
        &short_str("allocator_settings"),
        b"}(h\x27\x85K\x01uu.",
    ]
    .concat();
    assert_shared_bomb_refused("laughs dict key", &bytes, "allocator_settings");
    // The same as a trace entry's user_metadata, in each of 1000 entries.
    let entry = [
        &b"}("[..],
        &short_str("action"),
        &short_str("alloc"),
        &short_str("user_metadata"),
        b"h\x27u",
    ]
    .concat();
    let mut bytes = [
        &prologue[..],
        &laughs(0, 40),
        b"0}(",
        &segments,
        &short_str("device_traces"),
        b"]](",
    ]
    .concat();
    for _ in 0..1000 {
        bytes.extend_from_slice(&entry);
    }
    bytes.extend_from_slice(b"eau.");
    assert_shared_bomb_refused("laughs user_metadata", &bytes, "user_metadata");

    // A 1 MiB string referenced 100k times (2 bytes each): 100 GB if each reference is copied.
    let big = long_str(1 << 20);
    let references = 100_000;
    // (A dict with only "name" would read as a frame; "tag" keeps it an annotation.)
    let annotation = [&b"}\x94("[..], &short_str("tag"), b"h\x00u0"].concat();
    let bytes = [
        &prologue[..],
        &big,
        &annotation,
        b"}(",
        &segments,
        &short_str("external_annotations"),
        b"]",
        &appends_of(1, references),
        b"u.",
    ]
    .concat();
    assert_shared_bomb_refused("shared text in annotations", &bytes, "external_annotations");
    // The same text as every segment's type, then as every block's state.
    let shared = b"h\x00".to_vec();
    let (large, inactive) = (short_str("large"), short_str("inactive"));
    for (segment_type, state, expected) in [
        (&shared, &inactive, "segment_type"),
        (&large, &shared, "a block's state"),
    ] {
        let segment = [
            &b"}\x94("[..],
            &short_str("address"),
            b"K\x00",
            &short_str("segment_type"),
            segment_type,
            &short_str("blocks"),
            b"]}(",
            &short_str("size"),
            b"K\x00",
            &short_str("state"),
            state,
            b"uau0",
        ]
        .concat();
        let bytes = [
            &prologue[..],
            &big,
            &segment,
            b"}(",
            &short_str("segments"),
            b"]",
            &appends_of(1, references),
            b"u.",
        ]
        .concat();
        assert_shared_bomb_refused(expected, &bytes, expected);
    }
    // The same text as 100k unknown top-level keys (the last value of each is kept).
    let mut bytes = [&prologue[..], &big, b"}(", &segments].concat();
    for _ in 0..references {
        bytes.extend_from_slice(b"h\x00N");
    }
    bytes.extend_from_slice(b"u.");
    // A dict keeps one entry per key set, as Python's does not; each is named once.
    let (message, peak, elapsed) = refused_in_process(&bytes, "shared text as keys");
    assert!(message.contains("the top-level keys"), "{message}");
    assert!(peak < 64 * MB && elapsed < Duration::from_secs(3));
    // Without 'segments', the message names the keys, each cut to its first 40 characters.
    let mut bytes = [&prologue[..], &big, b"}("].concat();
    for _ in 0..8 {
        bytes.extend_from_slice(b"h\x00N");
    }
    bytes.extend_from_slice(b"u.");
    let (message, _, _) = refused_in_process(&bytes, "long keys");
    assert!(
        message.contains("neither 'segments' nor 'device_traces'"),
        "{message}"
    );
    assert!(message.len() < 1000, "{} bytes", message.len());
}

#[test]
fn a_compression_bomb_is_refused_by_its_ratio_long_before_the_limit() {
    // 64 MiB of PROTO opcodes in 2 KB of zstd (32768:1) and in 64 KB of gzip (1000:1), under
    // the default limits (64 GiB absolute): refused after the 16 MiB allowance.
    let blocks = BOMB_SIZE / (128 << 10);
    for (case, bomb) in [
        (
            "zstd",
            common::zstd::bomb(&endless_proto_prefix(), 0x80, blocks),
        ),
        ("gzip", {
            // At its best level gzip reaches its maximum ratio, about 1030:1.
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            encoder
                .write_all(&endless_proto_prefix())
                .expect("gzip in memory");
            let chunk = vec![0x80; MB];
            for _ in 0..BOMB_SIZE / MB {
                encoder.write_all(&chunk).expect("gzip in memory");
            }
            encoder.finish().expect("gzip in memory")
        }),
    ] {
        let started = Instant::now();
        let (result, peak) = peak_during(|| load_bytes(&bomb));
        assert_prompt(started, Duration::from_secs(3), case);
        let message = result.expect_err(case).to_string();
        assert!(
            message.contains("times its compressed size") && message.contains("compression bomb"),
            "{case}: {message}"
        );
        eprintln!("{case} ratio bomb: peak {} KiB: {message}", peak >> 10);
        assert!(peak < 8 * MB, "{case}: peak {peak} bytes");
    }
    // Real files compress far less: every corpus file loads through gzip and zstd under the
    // default ratio (checked in `gzip_zstd_and_json_forms_give_the_same_model` and here).
    let bytes = read_fixture("gpt2_adamw");
    assert!(load_bytes(&common::zstd::frame(&bytes)).is_ok());
    assert!(load_bytes(&gzip(&bytes)).is_ok());
    // A server passes its upload limit: decompressed data may not exceed it either.
    let limits = Limits::for_input_limit(1 << 19);
    assert_eq!(limits.max_decompressed_bytes, 1 << 19);
    let options = LoadOptions {
        limits,
        progress: None,
        ..LoadOptions::default()
    };
    let message = match load_reader(&gzip(&bytes)[..], options) {
        Ok(_) => panic!("gpt2_adamw is over 512 KiB"),
        Err(error) => error.to_string(),
    };
    assert!(
        message.contains("exceeds the limit of 524288 bytes"),
        "{message}"
    );
}

#[test]
fn a_top_level_list_must_hold_segments() {
    // `[1, 2, 3]` is not "a snapshot with 0 segments".
    let message = error_of(b"\x80\x04](K\x01K\x02K\x03e.");
    assert_eq!(
        message,
        "not a memory snapshot: the top level is a list (torch 1.13's list of segments), but item 0 is a Int, not a segment dict with 'address', 'total_size' and 'blocks'"
    );
    // A dict without a segment's keys is refused too.
    let message = error_of(b"\x80\x04](}(\x8c\x01aK\x01ue.");
    assert!(
        message.contains("item 0 is a Dict, not a segment dict"),
        "{message}"
    );
    // `[]` is what `torch.cuda.memory_snapshot()` of torch 1.13 returns when nothing was
    // allocated: a valid, empty legacy snapshot.
    let snapshot = load_bytes(b"\x80\x04].").expect("an empty segment list");
    assert!(snapshot.source.legacy_segment_list);
    assert!(snapshot.segments.is_empty());
    // A real segment list of that era loads.
    let segment = [
        &b"](}("[..],
        &short_str("address"),
        b"K\x00",
        &short_str("total_size"),
        b"M\x00\x02",
        &short_str("blocks"),
        b"]}(",
        &short_str("size"),
        b"M\x00\x02",
        &short_str("state"),
        &short_str("inactive"),
        b"uaue.",
    ]
    .concat();
    let snapshot = load_bytes(&[&b"\x80\x04"[..], &segment].concat()).expect("a legacy list");
    assert_eq!(snapshot.segments.len(), 1);
    assert_eq!(snapshot.segments[0].blocks.len(), 1);
}

#[test]
fn stats_refuses_sizes_beyond_any_memory_without_allocating_for_them() {
    use snapview::torch_text::stats;
    let path = hostile("stats_abort_size_2_63.pickle");
    let snapshot = load_path(&path, LoadOptions::default()).expect("the sizes are data");
    let (result, peak) = peak_during(|| stats(&snapshot));
    let message = result.expect_err("2^63 bytes").to_string();
    assert!(message.contains("sizes are corrupt"), "{message}");
    assert!(peak < MB, "peak {peak} bytes");
    // 1000 blocks of a 10 TiB segment (a map of 524288 pages, allowed), each claiming 2^62
    // requested bytes: every block would walk the whole map.
    let mut blocks = Vec::new();
    for _ in 0..1000 {
        blocks.extend_from_slice(b"}(");
        blocks.extend_from_slice(&short_str("size"));
        blocks.extend_from_slice(b"K\x00");
        blocks.extend_from_slice(&short_str("requested_size"));
        blocks.extend_from_slice(b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40");
        blocks.extend_from_slice(&short_str("state"));
        blocks.extend_from_slice(&short_str("active_allocated"));
        blocks.extend_from_slice(&short_str("frames"));
        blocks.extend_from_slice(b"]u");
    }
    let bytes = [
        &b"\x80\x04}("[..],
        &short_str("segments"),
        b"]}(",
        &short_str("address"),
        b"K\x00",
        &short_str("total_size"),
        b"\x8a\x06\x00\x00\x00\x00\x00\x0a",
        &short_str("blocks"),
        b"](",
        &blocks,
        b"euau.",
    ]
    .concat();
    let snapshot = load_bytes(&bytes).expect("overlapping blocks are data");
    let started = Instant::now();
    let message = stats(&snapshot)
        .expect_err("overlapping blocks")
        .to_string();
    assert!(message.contains("overlap far beyond its size"), "{message}");
    assert_prompt(started, Duration::from_secs(1), "overlapping blocks");
}

/// A snapshot of one segment with `blocks` blocks that all share one frames list holding
/// `depth` references to one frame whose name is `name_len` bytes.
fn shared_stack_snapshot(name_len: usize, depth: usize, blocks: usize) -> Vec<u8> {
    let frame = [
        &b"}\x94("[..],
        &short_str("filename"),
        &short_str("a.py"),
        &short_str("line"),
        b"K\x01",
        &short_str("name"),
        b"h\x00u0",
    ]
    .concat();
    let mut block_dicts = Vec::new();
    for _ in 0..blocks {
        block_dicts.extend_from_slice(b"}(");
        block_dicts.extend_from_slice(&short_str("size"));
        block_dicts.extend_from_slice(b"K\x00");
        block_dicts.extend_from_slice(&short_str("state"));
        block_dicts.extend_from_slice(&short_str("active_allocated"));
        block_dicts.extend_from_slice(&short_str("frames"));
        block_dicts.extend_from_slice(b"h\x02u");
    }
    [
        &b"\x80\x04"[..],
        &long_str(name_len),
        &frame,
        b"]\x94",
        &appends_of(1, depth),
        b"0}(",
        &short_str("segments"),
        b"]}(",
        &short_str("address"),
        b"K\x00",
        &short_str("blocks"),
        b"](",
        &block_dicts,
        b"euau.",
    ]
    .concat()
}

#[test]
fn folded_stacks_of_shared_stacks_are_refused_before_they_are_written() {
    use snapview::torch_text::{FoldedKind, compare, folded};
    // 1000 blocks x 1000 frames x 1 MiB names: 1 TB of text from a 1 MB file; and 1000 blocks
    // x 100k frames of 30 bytes: 3 GB from 200 KB.
    for (case, name_len, depth) in [("long names", 1 << 20, 1000), ("deep stack", 8, 100_000)] {
        let bytes = shared_stack_snapshot(name_len, depth, 1000);
        let snapshot = load_bytes(&bytes).expect(case);
        assert_eq!(snapshot.segments[0].blocks.len(), 1000, "{case}");
        let started = Instant::now();
        let (result, peak) = peak_during(|| folded(&snapshot, FoldedKind::Memory));
        assert_prompt(started, Duration::from_secs(1), case);
        let message = match result {
            Ok(text) => panic!("{case}: printed {} bytes", text.len()),
            Err(error) => error.to_string(),
        };
        assert!(message.contains("exceed 256.0MiB"), "{case}: {message}");
        eprintln!("{case}: folded refused, peak {} KiB", peak >> 10);
        assert!(peak < MB, "{case}: peak {peak} bytes");
        // compare (shown by the server) lists the addresses and says why the rest is missing.
        let (text, peak) = peak_during(|| compare(&snapshot, &Snapshot::default()));
        assert_eq!(text.lines().count(), 3, "{case}: {text}");
        assert!(
            text.ends_with("repeat beyond any real snapshot\n"),
            "{case}: {text}"
        );
        assert!(peak < MB, "{case}: compare peak {peak} bytes");
        // The structure the compare page draws has all of it, whatever the text's size.
        let started = Instant::now();
        let (only, peak) =
            peak_during(|| snapview::torch_text::segment_compare(&snapshot, &Snapshot::default()));
        assert_prompt(started, Duration::from_secs(1), case);
        assert_eq!(only.only_before.len(), 1, "{case}");
        assert_eq!(only.only_before[0].blocks, 1000, "{case}");
        assert!(only.folded_lines >= 1000, "{case}");
        assert!(peak < MB, "{case}: segment_compare peak {peak} bytes");
    }
    // Through the CLI: one line, exit 2.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("shared_stack.pickle");
    std::fs::write(&path, shared_stack_snapshot(8, 100_000, 1000)).expect("written");
    let (code, stdout, stderr, _) = run_cli(&["export", path.to_str().expect("utf-8")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("are not written"), "{stderr}");
}

#[test]
fn many_distinct_texts_in_a_trace_load_in_linear_time() {
    // 200k trace entries, each with its own compile_context and user_metadata text: the texts
    // are interned through a hash index (a scan of the texts so far per new text was quadratic:
    // 2 * 10^10 comparisons here).
    let entries = 200_000;
    let mut bytes = b"\x80\x04}(".to_vec();
    bytes.extend_from_slice(&short_str("device_traces"));
    bytes.extend_from_slice(b"]](");
    for i in 0..entries {
        bytes.extend_from_slice(b"}(");
        bytes.extend_from_slice(&short_str("action"));
        bytes.extend_from_slice(&short_str("alloc"));
        bytes.extend_from_slice(&short_str("compile_context"));
        bytes.extend_from_slice(&short_str(&format!("context {i:08}")));
        bytes.extend_from_slice(&short_str("user_metadata"));
        bytes.extend_from_slice(&short_str(&format!("metadata {i:08}")));
        bytes.push(b'u');
    }
    bytes.extend_from_slice(b"eau.");
    let started = Instant::now();
    let snapshot = load_bytes(&bytes).expect("distinct texts are data");
    let elapsed = started.elapsed();
    eprintln!(
        "{entries} distinct texts ({} KB): loaded in {elapsed:?}",
        bytes.len() >> 10
    );
    let trace = snapshot.trace(0);
    assert_eq!(trace.len(), entries);
    let last = trace.entry(entries - 1);
    assert_eq!(last.compile_context.as_deref(), Some("context 00199999"));
    assert_eq!(last.user_metadata.as_deref(), Some("metadata 00199999"));
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}
