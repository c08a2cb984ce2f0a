//! A seeded mutation fuzzer over the corpus, run on demand (it is `#[ignore]`d so the ordinary
//! `cargo test` stays quick; `.ci/run` runs it for a minute):
//!
//! ```sh
//! cargo test --release --test fuzz -- --ignored --nocapture
//! SNAPVIEW_FUZZ_SECS=600 SNAPVIEW_FUZZ_SEED=7 cargo test --release --test fuzz -- --ignored --nocapture
//! ```
//!
//! Inputs are the real snapshots in `tests/fixtures` (pickles, the hostile files, the JSON form,
//! gzip and zstd), mutated by byte-level and pickle-aware edits: bit flips, random bytes,
//! splices from other files, inserted opcodes, length fields set to edge values, memo references
//! pointed elsewhere, truncation, duplicated and deleted regions. Compressed inputs are mutated
//! either in their compressed bytes or inside (then compressed again). One input in eight is
//! generated instead: a trace that references memoized entries again and again (by BINGET or
//! DUP, its list named by many devices), read with `--max-events` 1M, mutated half the time.
//! Each input goes through
//! what the server and CLI do with a file: load, analysis, summary (and its JSON), notes, the
//! views (timeline, flame graphs, segment map, an events page, OOM reports), and torch's text
//! reports (`stats`, both folded-stack kinds, `compare`). A second run (`fuzz_the_rules_parser`,
//! a quarter of the time) mutates role rules files, TOML and JSON, on a thread with a small
//! stack, so that nesting the parser would recurse into past the bound overflows there first.
//!
//! Findings: a panic (caught, recorded, the run goes on), an input that runs longer than
//! `SNAPVIEW_FUZZ_INPUT_SECS` (default 5 s; a watchdog thread notices), and one whose live heap
//! grows past `SNAPVIEW_FUZZ_MEMORY_MB` (default 1024; the counting allocator below blocks the
//! allocation and the watchdog reports). Each finding is written to `target/fuzz-findings/` to
//! become a regression test; a hang or blow-up stops the run at once (the work cannot be
//! interrupted in-process), a panic fails the test at the end. The generator is seeded, so input
//! number N is the same in every run with the same seed and corpus.

mod common;

use common::counting_alloc;
use common::rng::Rng;
use common::shared_entries::SharedTrace;
use snapview::analysis::events::{EventFilter, page};
use snapview::analysis::flame::{FlameMode, flame};
use snapview::analysis::memory_map::memory_map;
use snapview::analysis::oom::oom_reports;
use snapview::analysis::timeline::{Axis, Window, timeline};
use snapview::analysis::{Analysis, Summary, notes};
use snapview::snapshot::{LoadOptions, load_reader};
use snapview::torch_text::{self, FoldedKind};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Memory: the counting allocator, with a limit per input that blocks (rather than refuses) an
// allocation past it, until the watchdog saves the input and ends the process.

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

// ---------------------------------------------------------------------------------------------
// Settings and the generator.

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// The corpus.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    Pickle,
    Json,
    Gzip,
    Zstd,
}

struct Seed {
    name: String,
    /// The uncompressed bytes (a pickle or JSON text).
    plain: Vec<u8>,
    form: Form,
    /// The file as loaded: `plain`, or it compressed.
    encoded: Vec<u8>,
}

impl Seed {
    fn new(name: String, plain: Vec<u8>, form: Form) -> Self {
        let encoded = match form {
            Form::Gzip => gzip(&plain),
            Form::Zstd => common::zstd::frame(&plain),
            Form::Pickle | Form::Json => plain.clone(),
        };
        Self {
            name,
            plain,
            form,
            encoded,
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

fn decompress_zstd(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(bytes)
        .ok()?
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

fn corpus() -> Vec<Seed> {
    let fixtures = common::fixtures();
    let mut paths: Vec<PathBuf> = Vec::new();
    for dir in [fixtures.clone(), fixtures.join("hostile")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            paths.push(entry.path());
        }
    }
    paths.sort();
    let mut seeds = Vec::new();
    for path in paths {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if name.ends_with(".pickle") {
            // Every pickle is also fuzzed compressed (the small ones: a compressed 700 KB file
            // costs more to re-encode than to load).
            if bytes.len() < 128 << 10 {
                for form in [Form::Gzip, Form::Zstd] {
                    seeds.push(Seed::new(format!("{name} ({form:?})"), bytes.clone(), form));
                }
            }
            seeds.push(Seed::new(name, bytes, Form::Pickle));
        } else if name.ends_with(".json") && !name.contains("facts") {
            seeds.push(Seed::new(name, bytes, Form::Json));
        } else if name.ends_with(".zst") {
            // The reference encoder's file as it is; inner mutations are compressed again. The
            // hostile 2 GB bomb is fuzzed only in its compressed bytes.
            let plain = decompress_zstd(&bytes).filter(|p| p.len() < 64 << 20);
            seeds.push(Seed {
                name,
                plain: plain.unwrap_or_else(|| bytes.clone()),
                form: Form::Zstd,
                encoded: bytes,
            });
        }
    }
    seeds
}

// ---------------------------------------------------------------------------------------------
// Mutations.

/// Opcodes with their argument sizes, to insert whole (data opcodes, code opcodes, containers).
const OPCODES: &[(u8, usize)] = &[
    (b'(', 0),
    (b']', 0),
    (b'}', 0),
    (b')', 0),
    (b'a', 0),
    (b'e', 0),
    (b's', 0),
    (b'u', 0),
    (b'l', 0),
    (b'd', 0),
    (b't', 0),
    (0x85, 0),
    (0x86, 0),
    (0x87, 0),
    (b'0', 0),
    (b'1', 0),
    (b'2', 0),
    (b'N', 0),
    (0x88, 0),
    (0x89, 0),
    (0x94, 0),
    (0x8f, 0),
    (0x90, 0),
    (0x91, 0),
    (b'.', 0),
    (b'K', 1),
    (b'M', 2),
    (b'J', 4),
    (b'G', 8),
    (b'q', 1),
    (b'h', 1),
    (b'r', 4),
    (b'j', 4),
    (0x8a, 1),
    (0x8c, 1),
    (b'C', 1),
    (b'X', 4),
    (b'B', 4),
    (0x8d, 8),
    (0x8e, 8),
    (0x95, 8),
    (b'c', 0),
    (b'R', 0),
    (0x93, 0),
    (b'b', 0),
];

/// Opcodes followed by a length field, and the field's width.
const LENGTH_OPCODES: &[(u8, usize)] = &[
    (0x8c, 1),
    (b'C', 1),
    (0x8a, 1),
    (b'U', 1),
    (b'X', 4),
    (b'B', 4),
    (b'T', 4),
    (0x8b, 4),
    (0x8d, 8),
    (0x8e, 8),
    (0x96, 8),
    (0x95, 8),
];

const EDGE_LENGTHS: &[u64] = &[
    0,
    1,
    7,
    8,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 26,
    (1 << 26) + 1,
    1 << 40,
    i64::MAX as u64,
    u64::MAX,
];

/// A position in `bytes` holding one of `opcodes` (by a random scan), if any.
fn find_opcode(rng: &mut Rng, bytes: &[u8], opcodes: &[u8]) -> Option<usize> {
    if bytes.is_empty() {
        return None;
    }
    let start = rng.below(bytes.len());
    (0..bytes.len().min(1 << 16))
        .map(|i| (start + i) % bytes.len())
        .find(|&i| opcodes.contains(&bytes[i]))
}

fn region(rng: &mut Rng, len: usize) -> (usize, usize) {
    let start = rng.below(len.max(1));
    let max = (len - start.min(len)).min(if rng.chance(4) { 1 << 16 } else { 64 });
    (start, start + rng.below(max + 1))
}

/// Integer values that break arithmetic: sizes and addresses near the top of `u64`, signs.
const EDGE_INTS: &[u64] = &[
    0,
    1,
    511,
    512,
    (1 << 31) - 1,
    1 << 31,
    (1 << 53) + 1,
    (1 << 59) - 1,
    1 << 59,
    1 << 62,
    1 << 63,
    u64::MAX - 511,
    u64::MAX,
];

/// Writes `field` over `bytes` from `at`, as far as `bytes` reaches.
fn overwrite(bytes: &mut [u8], at: usize, field: &[u8]) {
    for (byte, &value) in bytes.iter_mut().skip(at).zip(field) {
        *byte = value;
    }
}

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>, donors: &[Seed]) -> &'static str {
    let len = bytes.len();
    match rng.below(13) {
        // An integer argument set to an edge value: the file still decodes, and the hostile
        // number reaches the analysis (a block of 2^63 bytes once aborted `stats`).
        11 | 12 => {
            let Some(at) = find_opcode(rng, bytes, b"KMJ\x8a") else {
                return "integer (none)";
            };
            let value = EDGE_INTS[rng.below(EDGE_INTS.len())];
            let value = if rng.chance(4) {
                value.wrapping_neg()
            } else {
                value
            };
            let (start, width) = match bytes[at] {
                b'K' => (at + 1, 1),
                b'M' => (at + 1, 2),
                b'J' => (at + 1, 4),
                _ => (at + 2, usize::from(bytes.get(at + 1).copied().unwrap_or(0))),
            };
            overwrite(bytes, start, &value.to_le_bytes()[..width.min(8)]);
            "integer"
        }
        0 | 1 if len > 0 => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(len);
                bytes[at] ^= 1 << rng.below(8);
            }
            "bit flips"
        }
        2 if len > 0 => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(len);
                bytes[at] = rng.next() as u8;
            }
            "random bytes"
        }
        3 => {
            let donor = &donors[rng.below(donors.len())].plain;
            let (from, to) = region(rng, donor.len());
            let at = rng.below(len + 1);
            let piece = donor[from..to].to_vec();
            if rng.chance(2) {
                let end = (at + piece.len()).min(len);
                bytes.splice(at..end, piece);
            } else {
                bytes.splice(at..at, piece);
            }
            "splice"
        }
        4 => {
            let (opcode, args) = OPCODES[rng.below(OPCODES.len())];
            let mut insert = vec![opcode];
            for _ in 0..args {
                insert.push(if rng.chance(2) { 0 } else { rng.next() as u8 });
            }
            let at = rng.below(len + 1);
            bytes.splice(at..at, insert);
            "opcode inserted"
        }
        5 => {
            let opcodes: Vec<u8> = LENGTH_OPCODES.iter().map(|&(op, _)| op).collect();
            let Some(at) = find_opcode(rng, bytes, &opcodes) else {
                return "length field (none)";
            };
            let width = LENGTH_OPCODES
                .iter()
                .find(|&&(op, _)| op == bytes[at])
                .map_or(1, |&(_, w)| w);
            let value = match rng.below(3) {
                0 => EDGE_LENGTHS[rng.below(EDGE_LENGTHS.len())],
                _ => rng.next() >> rng.below(64),
            };
            overwrite(bytes, at + 1, &value.to_le_bytes()[..width]);
            "length field"
        }
        6 => {
            let Some(at) = find_opcode(rng, bytes, b"hjgqrp\x94") else {
                return "memo ref (none)";
            };
            match bytes[at] {
                b'h' | b'q' => {
                    if let Some(index) = bytes.get_mut(at + 1) {
                        *index = match rng.below(3) {
                            0 => index.wrapping_add(1),
                            1 => index.wrapping_sub(1),
                            _ => rng.next() as u8,
                        };
                    }
                }
                b'j' | b'r' => {
                    let index = rng.next() as u32 >> rng.below(32);
                    for (i, b) in index.to_le_bytes().into_iter().enumerate() {
                        if let Some(byte) = bytes.get_mut(at + 1 + i) {
                            *byte = b;
                        }
                    }
                }
                _ => {
                    // MEMOIZE or a text memo op: turn it into a reference to an earlier value.
                    bytes[at] = b'h';
                    bytes.insert(at + 1, rng.next() as u8);
                }
            }
            "memo ref"
        }
        7 => {
            bytes.truncate(rng.below(len + 1));
            "truncation"
        }
        8 | 9 => {
            let (from, to) = region(rng, len);
            let piece = bytes[from..to].to_vec();
            let copies = if rng.chance(8) { 1 + rng.below(64) } else { 1 };
            let at = rng.below(len + 1);
            for _ in 0..copies {
                bytes.splice(at..at, piece.iter().copied());
            }
            "duplication"
        }
        _ => {
            let (from, to) = region(rng, len);
            bytes.drain(from..to);
            "deletion"
        }
    }
}

/// A mutated input from `seed`, and the mutations applied.
fn mutant(rng: &mut Rng, seed: &Seed, donors: &[Seed]) -> (Vec<u8>, Vec<&'static str>) {
    let mut applied = Vec::new();
    let rounds = 1 + rng.below(4);
    let compressed = matches!(seed.form, Form::Gzip | Form::Zstd);
    // Half the compressed inputs are mutated inside, then compressed again.
    if compressed && rng.chance(2) {
        let mut plain = seed.plain.clone();
        for _ in 0..rounds {
            applied.push(mutate(rng, &mut plain, donors));
        }
        let bytes = match seed.form {
            Form::Gzip => gzip(&plain),
            _ => common::zstd::frame(&plain),
        };
        applied.push("then compressed");
        return (bytes, applied);
    }
    let mut bytes = seed.encoded.clone();
    for _ in 0..rounds {
        applied.push(mutate(rng, &mut bytes, donors));
    }
    (bytes, applied)
}

/// A trace that references memoized entries again and again (issue 18's shape): up to twice
/// [`MAX_EVENTS`] events by BINGET or DUP, its list named by up to 40 devices, mutated half
/// the time.
fn shared_entries(rng: &mut Rng, donors: &[Seed]) -> (Vec<u8>, String) {
    let events = match rng.below(3) {
        0 => rng.below(1000),
        1 => rng.below(200_000),
        _ => rng.below(2 * MAX_EVENTS as usize),
    };
    let trace = SharedTrace {
        events,
        entries: 1 + rng.below(3),
        by_dup: rng.chance(3),
        devices: 1 + if rng.chance(4) { rng.below(40) } else { 0 },
        addr: rng.below(1 << 30) as i32,
    };
    let mut bytes = trace.pickle();
    let mut what = format!("shared entries {trace:?}");
    if rng.chance(2) {
        what.push_str(": ");
        what.push_str(mutate(rng, &mut bytes, donors));
    }
    (bytes, what)
}

// ---------------------------------------------------------------------------------------------
// One execution: everything the server and the CLI do with a file.

/// The fuzzer reads with `--max-events` at this: a shared-entry input of more events (2 bytes
/// each) would outgrow the per-input memory budget by design, and past it the refusal is what
/// is exercised.
const MAX_EVENTS: u64 = 1_000_000;

fn exercise(bytes: &[u8]) -> Result<(), String> {
    let options = LoadOptions {
        max_events: MAX_EVENTS,
        ..LoadOptions::default()
    };
    let snapshot = load_reader(bytes, options).map_err(|e| e.to_string())?;
    let analysis = Analysis::new(&snapshot);
    let summary = Summary::new(&snapshot, &analysis);
    let json = serde_json::to_string(&summary).map_err(|e| format!("summary JSON: {e}"))?;
    std::hint::black_box(json);
    std::hint::black_box(notes(&snapshot, &analysis));
    for device in &analysis.devices {
        let trace = snapshot.trace(device.device);
        let last = trace.len().saturating_sub(1);
        for axis in [Axis::Event, Axis::Time] {
            let window = Window {
                start: 0,
                end: last,
                width: 800,
                height: 400,
                axis,
            }
            .clamped(trace.len());
            std::hint::black_box(timeline(device, trace, window));
        }
        let middle = (!trace.is_empty()).then_some(last / 2);
        std::hint::black_box(flame(&snapshot, device, middle, FlameMode::Allocated, None));
        let map = memory_map(&snapshot, device, middle);
        std::hint::black_box(flame(
            &snapshot,
            device,
            middle,
            FlameMode::Reserved,
            Some(&map),
        ));
        std::hint::black_box(memory_map(&snapshot, device, None));
        std::hint::black_box(page(
            &snapshot,
            trace,
            &device.replay,
            &EventFilter::default(),
            last / 3,
            50,
            None,
        ));
        std::hint::black_box(oom_reports(&snapshot, device));
    }
    // stats may refuse sizes beyond any memory; that is an answer too.
    std::hint::black_box(torch_text::stats(&snapshot).ok());
    std::hint::black_box(torch_text::folded(&snapshot, FoldedKind::Segments).ok());
    std::hint::black_box(torch_text::folded(&snapshot, FoldedKind::Memory).ok());
    std::hint::black_box(torch_text::compare(&snapshot, &snapshot));
    std::hint::black_box(torch_text::segment_compare(
        &snapshot,
        &snapview::snapshot::Snapshot::default(),
    ));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The watchdog and findings.

fn findings_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-findings")
}

/// Writes a finding's input and returns where.
fn save_finding(kind: &str, index: u64, bytes: &[u8]) -> PathBuf {
    let dir = findings_dir();
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{kind}-{index}.bin"));
    let _ = std::fs::write(&path, bytes);
    path
}

/// What the watchdog knows about the input being run.
struct Current {
    index: u64,
    started: Instant,
    bytes: Vec<u8>,
    what: String,
}

fn start_watchdog(current: Arc<Mutex<Option<Current>>>, timeout: Duration) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let over_budget = counting_alloc::over_limit();
            let guard = current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(input) = guard.as_ref() else {
                continue;
            };
            let hung = input.started.elapsed() > timeout;
            if !(over_budget.is_some() || hung) {
                continue;
            }
            // Let this thread allocate the report whatever the budget says.
            counting_alloc::set_limit(usize::MAX);
            let kind = if over_budget.is_some() {
                "memory"
            } else {
                "hang"
            };
            let path = save_finding(kind, input.index, &input.bytes);
            eprintln!(
                "\nFUZZ FINDING ({kind}): input {} ({}, {} bytes) {}; saved to {}",
                input.index,
                input.what,
                input.bytes.len(),
                match over_budget {
                    Some(asking) => format!(
                        "went past the memory budget (live {} MB, asking {} MB more)",
                        counting_alloc::live() >> 20,
                        asking >> 20
                    ),
                    None => format!("ran longer than {timeout:?}"),
                },
                path.display()
            );
            // The work cannot be stopped in-process: end the run, failing it.
            std::process::exit(101);
        }
    });
}

#[test]
#[ignore = "a time-bounded fuzzing run: cargo test --release --test fuzz -- --ignored"]
fn fuzz_the_reader_analysis_and_reports() {
    let seconds = env_u64("SNAPVIEW_FUZZ_SECS", 60);
    let seed = env_u64("SNAPVIEW_FUZZ_SEED", 1);
    let per_input = Duration::from_secs(env_u64("SNAPVIEW_FUZZ_INPUT_SECS", 5));
    let budget_bytes = (env_u64("SNAPVIEW_FUZZ_MEMORY_MB", 1024) as usize) << 20;
    let seeds = corpus();
    assert!(seeds.len() >= 20, "the corpus is in tests/fixtures");
    eprintln!(
        "fuzzing {} seeds for {seconds} s (seed {seed}, {per_input:?} and {} MB per input)",
        seeds.len(),
        budget_bytes >> 20
    );

    // Each corpus file, unmutated, must go through everything (or be refused, for the hostile
    // ones) within the same bounds.
    let current: Arc<Mutex<Option<Current>>> = Arc::new(Mutex::new(None));
    start_watchdog(current.clone(), per_input);
    // Panics are findings, reported below; the default hook's message is kept for the log.
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut executions, mut loaded, mut refused) = (0u64, 0u64, 0u64);
    let mut panics: Vec<String> = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    let mut peak_max = 0usize;
    let mut index = 0u64;
    while Instant::now() < deadline {
        // The first pass runs every seed unmutated.
        let (bytes, what) = match seeds.get(index as usize) {
            Some(seed) => (seed.encoded.clone(), format!("{} unmutated", seed.name)),
            None if rng.chance(8) => shared_entries(&mut rng, &seeds),
            None => {
                let seed = &seeds[rng.below(seeds.len())];
                let (bytes, applied) = mutant(&mut rng, seed, &seeds);
                (bytes, format!("{}: {}", seed.name, applied.join(", ")))
            }
        };
        let baseline = counting_alloc::reset_peak();
        *current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Current {
            index,
            started: Instant::now(),
            bytes: bytes.clone(),
            what: what.clone(),
        });
        counting_alloc::set_limit(baseline.saturating_add(budget_bytes));
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| exercise(&bytes)));
        let elapsed = started.elapsed();
        counting_alloc::set_limit(usize::MAX);
        *current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        peak_max = peak_max.max(counting_alloc::peak().saturating_sub(baseline));
        executions += 1;
        match outcome {
            Ok(Ok(())) => loaded += 1,
            Ok(Err(message)) => {
                refused += 1;
                assert!(
                    !message.trim().is_empty(),
                    "input {index} ({what}): an empty error message"
                );
            }
            Err(_) => {
                let path = save_finding("panic", index, &bytes);
                eprintln!(
                    "FUZZ FINDING (panic): input {index} ({what}); saved to {}",
                    path.display()
                );
                panics.push(format!("input {index} ({what}): {}", path.display()));
            }
        }
        if elapsed > slowest.0 {
            slowest = (elapsed, what);
        }
        index += 1;
    }
    eprintln!(
        "fuzz: {executions} executions ({loaded} loaded and analysed, {refused} refused with a message), {} findings; slowest input {:?} ({}), largest peak {} MB",
        panics.len(),
        slowest.0,
        slowest.1,
        peak_max >> 20
    );
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The role rules parser (`UserRules::parse`: `--roles FILE`, `PUT /api/snapshots/{id}/rules`).

/// Rules files to start from: both forms, every string kind TOML has, comments, the limits'
/// edges (a nesting just under the cap), and pieces that a mutation can splice in.
fn rules_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<String> = vec![
        "[[rule]]\nframe = \"my_project/cache\\\\.py:.*allocate\"\nrole = \"kv_cache\"\n".into(),
        "# comment [[[\n[[rule]]\nframe = 'data/loader\\.py' # [[ also a comment\nrole = 'input'\n\n[[rule]]\nframe = '''multi\n[line]'''\nrole = \"x\"\n".into(),
        "rules = [{frame = \"\"\"a\"b\"\"\"\"\", role = \"q\"}, {frame = 'b', role = 'r'}]\n".into(),
        r#"{"rule": [{"frame": "my_project/cache\\.py:.*allocate", "role": "kv_cache"}, {"frame": "[x]{2}", "role": "y"}]}"#.into(),
        r#"{"rules": [{"frame": "a\"[[[", "role": "b"}]}"#.into(),
        format!("x = {}{}", "[".repeat(31), "]".repeat(31)),
        format!("{{\"rule\": {}{}}}", "[".repeat(30), "]".repeat(30)),
        format!("x = {}1{}", "{a = ".repeat(20), "}".repeat(20)),
        "[[rule]]\nframe = '(((((a)))))'\nrole = 'x'\n".repeat(20),
    ];
    seeds.push("[[rule]]\nframe = '\\w{100}\\w{100}'\nrole = 'big'\n".into());
    seeds.into_iter().map(String::into_bytes).collect()
}

/// One edit of a rules file: the delimiters the nesting scan must follow (brackets, quotes of
/// each kind, comment marks, escapes, line breaks) inserted singly or in runs, and the usual
/// byte-level edits.
fn mutate_rules(rng: &mut Rng, bytes: &mut Vec<u8>, donors: &[Vec<u8>]) {
    const PIECES: &[&[u8]] = &[
        b"[",
        b"]",
        b"{",
        b"}",
        b"\"",
        b"'",
        b"\"\"\"",
        b"'''",
        b"#",
        b"\\",
        b"\n",
        b"=",
        b",",
        b"[[rule]]\n",
        b"x = ",
        b"frame = ",
        b"role = ",
        b"\\\"",
        b"\"\"\"\"\"",
    ];
    let at = rng.below(bytes.len() + 1);
    match rng.below(7) {
        0 => {
            let piece = PIECES[rng.below(PIECES.len())];
            let times = if rng.chance(4) {
                1 + rng.below(4000)
            } else {
                1
            };
            let run: Vec<u8> = piece.repeat(times);
            bytes.splice(at..at, run);
        }
        1 if !bytes.is_empty() => {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
        }
        2 if !bytes.is_empty() => {
            let (from, to) = region(rng, bytes.len());
            bytes.drain(from..to);
        }
        3 if !bytes.is_empty() => {
            let (from, to) = region(rng, bytes.len());
            let copy = bytes[from..to].to_vec();
            bytes.splice(at..at, copy);
        }
        4 => {
            let donor = &donors[rng.below(donors.len())];
            let (from, to) = region(rng, donor.len().max(1));
            let piece = donor.get(from..to.min(donor.len())).unwrap_or_default();
            bytes.splice(at..at, piece.iter().copied());
        }
        5 => {
            // Brackets opened in one place and closed in another, around whatever is there.
            let depth = 1 + rng.below(200);
            let close = at + rng.below(bytes.len() - at + 1);
            bytes.splice(close..close, b"]".repeat(depth));
            bytes.splice(at..at, b"[".repeat(depth));
        }
        _ => bytes.insert(at, rng.byte()),
    }
}

/// Stack for the thread that parses the mutated rules files: far less than any thread the
/// server or the CLI parses on (2 MiB for tokio's blocking threads, 8 MiB for the main one),
/// so nesting that slips past the scan overflows here first, and aborts the run.
const RULES_FUZZ_STACK: usize = 256 * 1024;

#[test]
#[ignore = "a time-bounded fuzzing run: cargo test --release --test fuzz -- --ignored"]
fn fuzz_the_rules_parser() {
    // A quarter of the run's time: the rules parser is small and each input takes microseconds.
    let seconds = env_u64("SNAPVIEW_FUZZ_SECS", 60).div_ceil(4);
    let seed = env_u64("SNAPVIEW_FUZZ_SEED", 1);
    eprintln!(
        "fuzzing the rules parser for {seconds} s (seed {seed}); a stack overflow aborts the run: rerun with the same seed, input numbers are printed every 10,000"
    );
    let worker = std::thread::Builder::new()
        .name("rules-fuzz".into())
        .stack_size(RULES_FUZZ_STACK)
        .spawn(move || {
            let seeds = rules_seeds();
            let mut rng = Rng::new(seed);
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let (mut executions, mut accepted) = (0u64, 0u64);
            let mut panics = Vec::new();
            let mut slowest = Duration::ZERO;
            while Instant::now() < deadline {
                let mut bytes = seeds[rng.below(seeds.len())].clone();
                for _ in 0..1 + rng.below(4) {
                    mutate_rules(&mut rng, &mut bytes, &seeds);
                }
                // The parser takes text, as every caller has it: the server's `String` body,
                // the CLI's UTF-8 check.
                let text = String::from_utf8_lossy(&bytes).into_owned();
                if executions % 10_000 == 0 {
                    eprintln!("rules fuzz: input {executions}");
                }
                let started = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    snapview::analysis::roles::UserRules::parse(&text)
                        .map(|rules| rules.rules().len())
                        .map_err(|e| e.to_string())
                }));
                slowest = slowest.max(started.elapsed());
                match outcome {
                    Ok(Ok(_)) => accepted += 1,
                    Ok(Err(message)) => assert!(!message.trim().is_empty(), "input {executions}"),
                    Err(_) => {
                        let path = save_finding("rules-panic", executions, text.as_bytes());
                        panics.push(format!("input {executions}: {}", path.display()));
                    }
                }
                executions += 1;
            }
            eprintln!(
                "rules fuzz: {executions} executions ({accepted} accepted), {} panics, slowest {slowest:?}",
                panics.len()
            );
            assert!(
                slowest < Duration::from_secs(2),
                "a rules file took {slowest:?}"
            );
            panics
        })
        .expect("rules fuzz thread");
    let panics = worker.join().expect("the rules fuzz thread");
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));
}
