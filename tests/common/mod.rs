//! Shared helpers for integration tests: where the corpus is and how to load it.
#![allow(dead_code)]

use snapview::snapshot::{LoadOptions, Snapshot, load_path};
pub mod counting_alloc;
pub mod rng;
pub mod served;
pub mod server;
pub mod shared_entries;

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

/// The decompressed large corpus files, if a benchmark or the developer put them in
/// `SNAPVIEW_LARGE_DIR` (default `/tmp/snapview-large`). Tests over them skip when absent.
pub fn large_names() -> Vec<(String, PathBuf)> {
    let dir = std::env::var_os("SNAPVIEW_LARGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/snapview-large"));
    ["gpt2_cpp_trace", "gpt2_big_trace", "gpt2_huge_trace"]
        .iter()
        .map(|name| (name.to_string(), dir.join(format!("{name}.pickle"))))
        .filter(|(_, path)| path.exists())
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
