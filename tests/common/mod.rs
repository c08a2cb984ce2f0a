//! Shared helpers for integration tests: where the corpus is and how to load it.
#![allow(dead_code)]

use snapview::snapshot::{LoadOptions, Snapshot, load_path};
pub mod backend;
pub mod counting_alloc;
pub mod landing;
pub mod one_byte;
pub mod reframe;
pub mod rng;
pub mod served;
pub mod server;
pub mod shared_entries;
pub mod zstd;

use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Names of every small corpus snapshot copied into the fixtures.
pub fn small_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".pickle").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// The large corpus files, by name (`<name>.pickle` in [`large_dir`]).
pub const LARGE_NAMES: [&str; 3] = ["gpt2_cpp_trace", "gpt2_big_trace", "gpt2_huge_trace"];

/// Set (to anything but `0`) where the large corpus files must be present, as `.ci/run` does:
/// a test over them then fails on a missing file instead of passing having checked nothing.
pub const REQUIRE_LARGE: &str = "SNAPVIEW_REQUIRE_LARGE";

/// Whether the environment variable `name` asks for something to be required: set, and not `0`
/// (the convention of `SNAPVIEW_REQUIRE_BROWSER` too).
pub fn required(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|value| value != "0")
}

/// Where the decompressed large corpus files are: `SNAPVIEW_LARGE_DIR`, default
/// `/tmp/snapview-large` (where `.ci/run` and the benchmarks put them).
pub fn large_dir() -> PathBuf {
    std::env::var_os("SNAPVIEW_LARGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/snapview-large"))
}

/// The decompressed large corpus file `name`, if it is in [`large_dir`]. Tests over it skip
/// when it is absent, unless [`REQUIRE_LARGE`] is set: then this panics, naming the file and how
/// to get it. Every test over the large files goes through here (or [`large_names`]), so none
/// can forget the requirement.
pub fn large_file(name: &str) -> Option<PathBuf> {
    let path = large_dir().join(format!("{name}.pickle"));
    if path.exists() {
        return Some(path);
    }
    assert!(
        !required(REQUIRE_LARGE),
        "{REQUIRE_LARGE} is set but the large corpus file {path} is missing. Decompress it from \
         the corpus as .ci/run does (`xz -dc ../shared/corpus/large/{name}.pickle.xz > {path}`), \
         or point SNAPVIEW_LARGE_DIR at a folder that holds {name}.pickle, or unset \
         {REQUIRE_LARGE} to skip the tests over the large files.",
        path = path.display()
    );
    None
}

/// Every large corpus file that is present, by name (see [`large_file`]: with
/// [`REQUIRE_LARGE`] set, a missing one panics instead of leaving the list short).
pub fn large_names() -> Vec<(String, PathBuf)> {
    LARGE_NAMES
        .iter()
        .filter_map(|name| large_file(name).map(|path| (name.to_string(), path)))
        .collect()
}

pub fn path_of(name: &str) -> PathBuf {
    fixtures().join(format!("{name}.pickle"))
}

pub fn load(name: &str) -> Snapshot {
    load_path(&path_of(name), LoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn facts() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("facts.json")).expect("facts.json");
    serde_json::from_str(&text).expect("facts.json parses")
}

pub fn oracle(file: &str) -> Option<String> {
    std::fs::read_to_string(fixtures().join("oracle").join(file)).ok()
}
