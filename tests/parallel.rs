//! The parallel decoder against the single-thread one: the same model (every field, compared
//! through `Debug`), byte-for-byte the same summary JSON, or the same error, on every corpus
//! fixture, the hostile files and fuzzed inputs, with the pickle re-framed so that chunks are a
//! few opcodes long and every boundary case (a chunk starting inside an entry, a frames list, a
//! string's memo put, between APPENDS batches) is met.

use crate::common;

use common::one_byte::OneByteAtATime;
use common::reframe::reframe;
use common::served::Served;
use snapview::analysis::{Analysis, Summary};
use snapview::pickle::Landing;
use snapview::snapshot::{
    LoadError, LoadOptions, Parallel, Snapshot, load_landing_mapped, load_reader,
    load_slice_following, parallel_splices,
};
use std::path::{Path, PathBuf};

/// Every `.pickle` under `dir`, recursively, sorted.
fn pickles_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(pickles_under(&path));
        } else if path.extension().is_some_and(|e| e == "pickle") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// What a load gives, as text: the model and the summary, or the error.
fn outcome(data: &[u8], parallel: Parallel) -> String {
    let options = LoadOptions {
        threads: parallel.threads,
        ..LoadOptions::default()
    };
    described(load_slice_following::<()>(data, options, parallel).map(|(snapshot, _)| snapshot))
}

/// A load's outcome as text: the model and the summary, or the error.
fn described(loaded: Result<Snapshot, LoadError>) -> String {
    match loaded {
        Ok(snapshot) => {
            let analysis = Analysis::new(&snapshot);
            let summary = Summary::new(&snapshot, &analysis);
            let json = serde_json::to_string(&summary).expect("summary serializes");
            format!("{snapshot:?}\n{json}")
        }
        Err(error) => format!("error: {error}"),
    }
}

const SEQUENTIAL: Parallel = Parallel {
    threads: 1,
    chunk_bytes: 1,
};

/// Compares both decoders on `data`; returns how many regions the parallel one spliced.
fn assert_same(name: &str, data: &[u8], threads: usize) -> u64 {
    let expected = outcome(data, SEQUENTIAL);
    let before = parallel_splices();
    let got = outcome(
        data,
        Parallel {
            threads,
            chunk_bytes: 1,
        },
    );
    let spliced = parallel_splices() - before;
    if expected != got {
        let at = expected
            .bytes()
            .zip(got.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.len().min(got.len()));
        let from = at.saturating_sub(200);
        panic!(
            "{name}: the parallel decoder differs at byte {at}:\nsequential: …{}\nparallel:   …{}",
            &expected[from..(at + 200).min(expected.len())],
            &got[from..(at + 200).min(got.len())]
        );
    }
    spliced
}

#[test]
fn every_fixture_decodes_the_same_with_chunks_of_a_few_opcodes() {
    let mut spliced = 0;
    let mut files = 0;
    for path in pickles_under(&common::fixtures()) {
        if path.components().any(|c| c.as_os_str() == "hostile") {
            continue;
        }
        let data = std::fs::read(&path).expect("fixture reads");
        let name = path.display().to_string();
        // As written (torch's 64 KiB frames: most fixtures are a few frames), and re-framed.
        spliced += assert_same(&name, &data, 3);
        for every in [1, 2, 3, 7, 64] {
            if let Some(framed) = reframe(&data, every) {
                spliced += assert_same(&format!("{name} (frames of {every})"), &framed, 3);
                files += 1;
            }
        }
    }
    assert!(files > 50, "only {files} re-framed fixtures");
    assert!(
        spliced > 1000,
        "the parallel path spliced only {spliced} regions"
    );
}

#[test]
fn hostile_files_fail_or_load_the_same() {
    let mut dirs = vec![common::fixtures().join("hostile")];
    dirs.push(PathBuf::from("/work/shared/hostile"));
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if !path.is_file() || std::fs::metadata(&path).map_or(true, |m| m.len() > 64 << 20) {
                continue;
            }
            let data = std::fs::read(&path).expect("reads");
            let name = path.display().to_string();
            assert_same(&name, &data, 2);
            for every in [1, 3] {
                if let Some(framed) = reframe(&data, every) {
                    assert_same(&format!("{name} (frames of {every})"), &framed, 2);
                }
            }
        }
    }
}

#[test]
fn fuzzed_inputs_fail_or_load_the_same() {
    let mut rng = common::rng::Rng::new(0x005e_ed23);
    let sources = ["mlp_small", "gpt2_adamw", "oom", "multi_device", "compile"];
    for source in sources {
        let data = std::fs::read(common::path_of(source)).expect("fixture");
        let Some(framed) = reframe(&data, 2) else {
            continue;
        };
        for round in 0..40 {
            let mut mutated = framed.clone();
            let flips = 1 + rng.below(4);
            for _ in 0..flips {
                let at = 2 + rng.below(mutated.len() - 2);
                mutated[at] = match rng.below(3) {
                    0 => rng.byte(),
                    1 => mutated[at].wrapping_add(1),
                    _ => [b'(', b'e', b'u', b'a', 0x94, b'h', b'j', b'}', b']'][rng.below(9)],
                };
            }
            assert_same(&format!("{source} fuzz round {round}"), &mutated, 2);
        }
    }
}

/// The machine's loop alone (its bytes handed over one at a time, so its flat-dict path, which
/// decodes a trace entry from the bytes buffered and offers it to the compactor before its dict
/// is stored, never runs) against the loop with that path (what every other load runs): the
/// same model and summary, or the same error, on every fixture, the hostile files and fuzzed
/// fixtures (with opcodes inserted that make a dict fetch itself, or stop it midway).
#[test]
fn the_pickle_loop_alone_decodes_what_its_flat_dict_path_does() {
    let one_at_a_time = |data: &[u8]| {
        let options = LoadOptions {
            threads: 1,
            ..LoadOptions::default()
        };
        described(load_reader(OneByteAtATime(data), options))
    };
    let mut paths = pickles_under(&common::fixtures());
    if let Ok(entries) = std::fs::read_dir("/work/shared/hostile") {
        paths.extend(entries.flatten().map(|e| e.path()));
    }
    let mut loaded = 0;
    for path in paths {
        if !path.is_file() || std::fs::metadata(&path).map_or(true, |m| m.len() > 16 << 20) {
            continue;
        }
        let data = std::fs::read(&path).expect("reads");
        let expected = outcome(&data, SEQUENTIAL);
        assert!(
            one_at_a_time(&data) == expected,
            "{}: the loop alone decodes it differently",
            path.display()
        );
        loaded += usize::from(!expected.starts_with("error: "));
    }
    assert!(loaded > 30, "only {loaded} files loaded");
    let mut rng = common::rng::Rng::new(0x0f1a_7d1c);
    for source in ["mlp_small", "gpt2_adamw", "oom", "compile"] {
        let data = std::fs::read(common::path_of(source)).expect("fixture");
        for round in 0..40 {
            let mut mutated = data.clone();
            for _ in 0..1 + rng.below(4) {
                let at = 2 + rng.below(mutated.len() - 2);
                mutated[at] = match rng.below(3) {
                    0 => rng.byte(),
                    1 => mutated[at].wrapping_add(1),
                    _ => {
                        [b'(', b'u', 0x94, b'h', b'j', b'K', 0x8a, 0x8c, b'}', b']'][rng.below(10)]
                    }
                };
            }
            assert!(
                one_at_a_time(&mutated) == outcome(&mutated, SEQUENTIAL),
                "{source} fuzz round {round}: the loop alone decodes it differently"
            );
        }
    }
}

/// What a load of `data` gives when its bytes land in a file (sized to `room`, at least the
/// data's length) in pieces of every size from 1 byte to 8 KiB, a thread at a time, while
/// the decoder reads it on `parallel`'s threads; `cut_at`: the bytes stop there, cut short.
fn landing_outcome(data: &[u8], room: usize, parallel: Parallel, cut_at: Option<usize>) -> String {
    let file = tempfile::tempfile().expect("temp file");
    file.set_len(room as u64).expect("room");
    let landing = Landing::new();
    let options = LoadOptions {
        threads: parallel.threads,
        ..LoadOptions::default()
    };
    std::thread::scope(|scope| {
        scope.spawn(|| common::landing::land_in_pieces(&file, data, &landing, cut_at, 8192, 8));
        let loaded = load_landing_mapped::<()>(&file, room as u64, &landing, options, parallel);
        described(loaded.map(|(snapshot, _)| snapshot))
    })
}

/// A pickle decoded as its bytes land (an upload being received) is the pickle decoded whole,
/// on every fixture re-framed into chunks of a few opcodes, with the room larger than the
/// file (a multipart upload's announced length); cut short, the load fails without waiting.
#[test]
fn a_pickle_decodes_the_same_as_its_bytes_land() {
    let parallel = Parallel {
        threads: 3,
        chunk_bytes: 1,
    };
    let (mut files, mut spliced) = (0, 0);
    for path in pickles_under(&common::fixtures()) {
        if path.components().any(|c| c.as_os_str() == "hostile") {
            continue;
        }
        let data = std::fs::read(&path).expect("fixture reads");
        let Some(framed) = reframe(&data, 3) else {
            continue;
        };
        let name = path.display().to_string();
        let expected = outcome(&framed, SEQUENTIAL);
        let before = parallel_splices();
        let got = landing_outcome(&framed, framed.len() + 4096, parallel, None);
        assert!(expected == got, "{name}: differs when decoded as it lands");
        spliced += parallel_splices() - before;
        let cut = landing_outcome(&framed, framed.len(), parallel, Some(framed.len() / 2));
        assert!(cut.starts_with("error: "), "{name}: a cut upload loaded");
        files += 1;
    }
    assert!(files > 15, "only {files} fixtures");
    assert!(
        spliced > 1000,
        "only {spliced} regions spliced as they landed"
    );
}

/// The large corpus files, when present (`SNAPVIEW_LARGE_DIR`): the model and summary compared
/// with chunks of the real size.
#[test]
fn large_files_decode_the_same() {
    for (name, path) in common::large_names() {
        let data = std::fs::read(&path).expect("reads");
        let expected = outcome(&data, SEQUENTIAL);
        let before = parallel_splices();
        let got = outcome(&data, Parallel::with_threads(4));
        assert!(parallel_splices() > before, "{name}: nothing spliced");
        assert!(expected == got, "{name}: the parallel decoder differs");
    }
}

/// `snapview summary` of a large file a second time opens the cached index (the same text and
/// JSON as a read), `--no-cache` reads it again, and `--threads` gives the same answer.
#[test]
fn the_cli_caches_what_a_read_computed() {
    let Some((_, path)) = common::large_names().into_iter().next() else {
        return;
    };
    let cache = std::env::temp_dir().join(format!("snapview-cli-cache-{}", std::process::id()));
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_snapview"))
            .args(args)
            .arg(&path)
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .expect("snapview runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    let first = run(&["summary", "--json"]);
    let indexes = std::fs::read_dir(cache.join("snapview"))
        .expect("the cache folder")
        .count();
    assert_eq!(indexes, 1, "one index written");
    assert_eq!(run(&["summary", "--json"]), first, "from the cache");
    assert_eq!(run(&["--no-cache", "summary", "--json"]), first);
    assert_eq!(
        run(&["--no-cache", "--threads", "4", "summary", "--json"]),
        first
    );
    assert_eq!(run(&["summary"]), run(&["--no-cache", "summary"]));
    let _ = std::fs::remove_dir_all(&cache);
}

/// The hostile-input limits hold with every thread busy: a trace with more events than
/// `--max-events` allows is refused by the parallel decoder with the single-thread one's
/// error, however far ahead its workers decoded, and one within the limit loads the same.
#[test]
fn the_event_limit_refuses_the_same_on_every_thread() {
    for source in ["mlp_small", "gpt2_adamw"] {
        let data = std::fs::read(common::path_of(source)).expect("fixture");
        let framed = reframe(&data, 2).expect("re-framed");
        let read = |parallel: Parallel, max_events: u64| {
            let options = LoadOptions {
                threads: parallel.threads,
                max_events,
                ..LoadOptions::default()
            };
            match load_slice_following::<()>(&framed, options, parallel) {
                Ok((snapshot, _)) => format!("{snapshot:?}"),
                Err(error) => format!("error: {error}"),
            }
        };
        let (snapshot, _) = load_slice_following::<()>(&framed, LoadOptions::default(), SEQUENTIAL)
            .expect("the fixture loads");
        let events: u64 = snapshot.device_traces.iter().map(|t| t.len() as u64).sum();
        assert!(events > 100, "{source}: {events} events");
        for max_events in [1, events / 2, events - 1, events] {
            let expected = read(SEQUENTIAL, max_events);
            assert_eq!(
                expected.contains("(--max-events)"),
                max_events < events,
                "{source}, --max-events {max_events}: {}",
                &expected[..expected.len().min(200)]
            );
            for threads in [2, 8] {
                let parallel = Parallel {
                    threads,
                    chunk_bytes: 1,
                };
                assert!(
                    read(parallel, max_events) == expected,
                    "{source}, --max-events {max_events}, {threads} threads: not the same"
                );
            }
        }
    }
}

/// A large uncompressed upload to a server with several threads is decoded on every thread as
/// its bytes land; it is analysed as the same file streamed into a one-thread server (which
/// decodes it on one thread as it lands), and as the CLI reads it.
#[test]
fn a_large_upload_is_read_on_every_thread_as_it_lands() {
    let Some((name, path)) = common::large_names().into_iter().next() else {
        return;
    };
    let bytes = std::fs::read(&path).expect("large file");
    let dir = tempfile::tempdir().expect("tempdir");
    let analysis = |threads: &str| {
        let log = dir.path().join(format!("log-{threads}"));
        let server = Served::builder()
            .data_dir(&dir.path().join(format!("data-{threads}")))
            .log(&log)
            .args(["--threads", threads])
            .env("RUST_LOG", "snapview=debug")
            .start();
        let (status, body) = server.call(
            "POST",
            &format!("/api/snapshots?filename={name}.pickle"),
            Some(&bytes),
        );
        assert_eq!(status, 201, "{body}");
        let view: serde_json::Value = serde_json::from_str(&body).expect("json");
        let id = view["id"].as_str().expect("id").to_owned();
        let (status, body) = server.call("GET", &format!("/api/snapshots/{id}"), None);
        assert_eq!(status, 200, "{body}");
        let detail: serde_json::Value = serde_json::from_str(&body).expect("json");
        let log = server.log_text();
        let as_it_lands = log
            .lines()
            .find(|line| line.contains("decoding the bytes as they land"))
            .map(|line| line.contains(&format!("threads={threads}")));
        let after_arrival = log.contains("reading the upload from its file");
        (detail["analysis"].clone(), as_it_lands, after_arrival)
    };
    let (parallel, as_it_lands, after_arrival) = analysis("4");
    assert_eq!(
        (as_it_lands, after_arrival),
        (Some(true), false),
        "the four-thread server decoded the upload on four threads as it landed"
    );
    let (streamed, as_it_lands, _) = analysis("1");
    assert_eq!(
        as_it_lands,
        Some(true),
        "the one-thread server decoded it as it landed"
    );
    assert_eq!(parallel, streamed);
    assert!(parallel["devices"][0]["allocations"].as_u64().unwrap_or(0) > 10_000);
}
