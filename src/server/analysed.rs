//! A parsed (or index-opened) snapshot with its analysis, ready to answer queries, and what
//! its stored index still needs after the load. The cache of them is `cache.rs`.

use crate::analysis::markers::{OomMarker, PeakMarker, complete_from, oom_markers};
use crate::analysis::roles::UserRules;
use crate::analysis::{Analysis, DeviceAnalysis, ReplaySeed, Summary};
use crate::snapshot::Snapshot;
use std::sync::atomic::{AtomicU8, Ordering};

/// A snapshot with its analysis, ready to answer queries.
#[derive(Debug)]
pub struct AnalysedSnapshot {
    pub snapshot: Snapshot,
    pub analysis: Analysis,
    pub summary: Summary,
    /// Per device (in the order of `analysis.devices`), what every timeline answer carries
    /// whatever its window.
    marks: Vec<TimelineMarks>,
    /// [`UserRules::fingerprint`] of the rules `summary` was made with (the stored index
    /// keeps it, to know when its summary applies).
    pub rules_fingerprint: u64,
    /// The [`IndexWork`] still to do, as its `u8` (see [`AnalysedSnapshot::take_index_work`]).
    index_work: AtomicU8,
}

/// The parts of a timeline answer that do not depend on its window: each is a pass over the
/// whole trace or every allocation (10 to 25 ms together on a 3.2M-event trace, as much as the
/// window itself), so they are found once, when the snapshot loads, not per request.
#[derive(Debug, Clone)]
pub struct TimelineMarks {
    pub peak: PeakMarker,
    pub ooms: Vec<OomMarker>,
    pub complete_from: Option<usize>,
}

impl TimelineMarks {
    fn new(snapshot: &Snapshot, device: &DeviceAnalysis) -> Self {
        let trace = snapshot.trace(device.device);
        let peak = device.replay.peak_allocated(trace);
        Self {
            peak: PeakMarker {
                event: peak.event_index,
                bytes: peak.bytes,
            },
            ooms: oom_markers(trace),
            complete_from: complete_from(&device.replay),
        }
    }
}

/// What a loaded snapshot's stored index needs after the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexWork {
    None,
    /// Parsed from its pickle: write the index.
    Write,
    /// Opened from its index, whose columns were not checksummed: check them.
    Check,
}

impl AnalysedSnapshot {
    /// Analyses `snapshot`, starting from the replay's first pass that loading made alongside
    /// the parse (see [`crate::analysis::load_path`]); `rules` are the server's role rules.
    pub fn new((snapshot, seed): (Snapshot, ReplaySeed), rules: &UserRules) -> Self {
        let (analysis, summary) = crate::analysis::analyse(&snapshot, seed, rules);
        // Parsed from its pickle: its stored index is still to be written.
        Self::assemble(snapshot, analysis, summary, rules, IndexWork::Write)
    }

    /// A snapshot opened from its stored index (`crate::index`): the stored summary when it
    /// was made with `rules`, else one made now from the mapped replay.
    pub fn from_index(opened: crate::index::Opened, rules: &UserRules) -> Self {
        let crate::index::Opened {
            snapshot,
            analysis,
            summary,
            rules_fingerprint,
        } = opened;
        // The views' index is built again in memory (not worth a format): now, so the first
        // view is as fast as the rest.
        let summary = if rules_fingerprint == rules.fingerprint() {
            analysis.index_views();
            summary
        } else {
            tracing::info!("the stored summary was made with other role rules: summarising again");
            crate::analysis::summarise_indexing_views(&snapshot, &analysis, rules)
        };
        // Opened with its columns' checksums unread: they are checked in the background.
        Self::assemble(snapshot, analysis, summary, rules, IndexWork::Check)
    }

    /// The parts, with what every timeline answer carries found once per device.
    fn assemble(
        snapshot: Snapshot,
        analysis: Analysis,
        summary: Summary,
        rules: &UserRules,
        index_work: IndexWork,
    ) -> Self {
        let marks = analysis
            .devices
            .iter()
            .map(|device| TimelineMarks::new(&snapshot, device))
            .collect();
        Self {
            snapshot,
            analysis,
            summary,
            marks,
            rules_fingerprint: rules.fingerprint(),
            index_work: AtomicU8::new(index_work as u8),
        }
    }

    /// What the caller should do about this snapshot's stored index, once: of many requests
    /// waiting on one load, one writes the index (parsed from its pickle) or checks it (opened
    /// from it); the others get [`IndexWork::None`].
    pub fn take_index_work(&self) -> IndexWork {
        match self
            .index_work
            .swap(IndexWork::None as u8, Ordering::AcqRel)
        {
            code if code == IndexWork::Write as u8 => IndexWork::Write,
            code if code == IndexWork::Check as u8 => IndexWork::Check,
            _ => IndexWork::None,
        }
    }

    /// The window-independent parts of `device`'s timeline answers.
    pub fn timeline_marks(&self, device: &DeviceAnalysis) -> TimelineMarks {
        self.analysis
            .devices
            .iter()
            .position(|d| d.device == device.device)
            .and_then(|index| self.marks.get(index))
            .cloned()
            // Every device of the analysis has its marks; this only keeps the answer right
            // if that ever changes.
            .unwrap_or_else(|| TimelineMarks::new(&self.snapshot, device))
    }

    /// The memory this holds, for the cache's byte budget: the trace columns, segments and
    /// interned tables of the snapshot, and everything the analysis keeps (the replay, its
    /// lifetime index and the per-device indexes), by the capacities actually allocated.
    pub fn approx_bytes(&self) -> u64 {
        self.snapshot.heap_bytes() + self.analysis.heap_bytes() + SMALL_PARTS_BYTES
    }
}

/// The summary, the tables' hash indexes and other parts too small to count one by one.
const SMALL_PARTS_BYTES: u64 = 64 * 1024;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fixture of `tests/fixtures`, parsed and analysed with the default rules.
    pub(crate) fn fixture(name: &str) -> AnalysedSnapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let parsed = crate::analysis::load_path(&path, Default::default()).expect("fixture");
        AnalysedSnapshot::new(parsed, &UserRules::default())
    }

    #[test]
    fn the_marks_found_at_load_are_the_markers_of_every_window() {
        for name in ["oom.pickle", "mlp_small.pickle", "ring_wrap.pickle"] {
            let loaded = fixture(name);
            for device in &loaded.analysis.devices {
                let trace = loaded.snapshot.trace(device.device);
                let columns = crate::analysis::markers::Columns {
                    start: 0,
                    end: 0,
                    column_start: &[],
                };
                let markers = crate::analysis::markers::markers(&[], trace, device, columns);
                let marks = loaded.timeline_marks(device);
                assert_eq!(marks.peak, markers.peak, "{name}");
                assert_eq!(marks.ooms, markers.ooms, "{name}");
                assert_eq!(marks.complete_from, complete_from(&device.replay), "{name}");
            }
        }
    }
}
