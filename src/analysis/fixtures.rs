//! For unit tests: a fixture of `tests/fixtures`, parsed and analysed (real snapshots, not
//! hand-built ones, where a test needs a whole replay).

use super::Analysis;
use crate::snapshot::Snapshot;

/// `tests/fixtures/{name}` parsed and analysed.
pub(crate) fn analysed(name: &str) -> (Snapshot, Analysis) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let snapshot = crate::snapshot::load_path(&path, Default::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let analysis = Analysis::new(&snapshot);
    (snapshot, analysis)
}
