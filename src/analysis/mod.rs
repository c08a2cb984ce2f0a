//! Analysis: pure functions of a [`Snapshot`], no I/O.
//!
//! [`Analysis::new`] replays every device once and keeps the indexes that later questions need
//! (memory after every event, an interval index of lifetimes for the live set, reserved-memory
//! steps, and [`view_index`]: the memory curve's min/max over any range and the timeline's band
//! candidates), each built in time linear in the trace, so each question costs time
//! proportional to its answer (and a window's pixel width), not to the trace.

pub mod diff;
pub mod events;
mod extrema;
pub mod findings;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod flame;
pub mod groups;
pub mod history;
pub mod markers;
pub mod memory_map;
pub mod moment;
mod notes;
pub mod oom;
pub(crate) mod ranked_bits;
pub mod replay;
pub mod roles;
pub mod segment_timeline;
pub mod segments;
pub mod stacks;
mod summary;
pub mod timeline;
pub mod view_index;
#[cfg(test)]
mod view_reference;

pub use notes::{Note, notes};
pub use replay::{Allocation, AllocationId, Origin, Peak, Replay, ReplaySeed};
pub use segments::SegmentStats;
pub use stacks::{StackBytes, display_frames, top_stacks};
pub use summary::{DeviceSummary, OomEvent, Summary};

use crate::snapshot::{LoadError, LoadOptions, Snapshot};
use replay::EventPass;

/// Loads the snapshot at `path` (as [`crate::snapshot::load_path`]) and runs the replay's event
/// pass over its trace on the loader's follower thread, while the rest of the file is decoded;
/// [`Analysis::seeded`] takes it from there.
pub fn load_path(
    path: &std::path::Path,
    options: LoadOptions<'_>,
) -> Result<(Snapshot, ReplaySeed), LoadError> {
    crate::snapshot::load_path_following::<EventPass>(path, options)
        .map(|(snapshot, followed)| (snapshot, ReplaySeed::new(followed)))
}

/// [`load_path`] for any byte stream (an upload, a decompressor).
pub fn load_reader(
    reader: impl std::io::Read + Send,
    options: LoadOptions<'_>,
) -> Result<(Snapshot, ReplaySeed), LoadError> {
    crate::snapshot::load_reader_following::<EventPass>(reader, options)
        .map(|(snapshot, followed)| (snapshot, ReplaySeed::new(followed)))
}

/// [`load_path`] of a file whose bytes are still landing (an upload as it is received; see
/// [`crate::snapshot::load_landing_following`]).
pub fn load_landing(
    file: &std::fs::File,
    room: u64,
    landing: &crate::pickle::Landing,
    options: LoadOptions<'_>,
) -> Result<(Snapshot, ReplaySeed), LoadError> {
    crate::snapshot::load_landing_following::<EventPass>(file, room, landing, options)
        .map(|(snapshot, followed)| (snapshot, ReplaySeed::new(followed)))
}

/// Everything a server computes for a freshly read snapshot before its first view: the
/// replay, the summary under `rules` (each device, and its role pass, on threads of their own)
/// and, beside the summary, the views' index.
pub fn analyse(
    snapshot: &Snapshot,
    seed: ReplaySeed,
    rules: &roles::UserRules,
) -> (Analysis, Summary) {
    let started = std::time::Instant::now();
    let analysis = Analysis::seeded(snapshot, seed);
    let replayed_ms = started.elapsed().as_millis() as u64;
    let summary = summarise_indexing_views(snapshot, &analysis, rules);
    tracing::debug!(
        replayed_ms,
        ms = started.elapsed().as_millis() as u64,
        "analysed"
    );
    (analysis, summary)
}

/// The summary under `rules`, with the views' index built beside it on a thread of its own, so
/// the first view of the snapshot finds it ready.
pub fn summarise_indexing_views(
    snapshot: &Snapshot,
    analysis: &Analysis,
    rules: &roles::UserRules,
) -> Summary {
    std::thread::scope(|scope| {
        scope.spawn(|| analysis.index_views());
        Summary::with_rules(snapshot, analysis, rules)
    })
}

/// Reads a text that the program writes as a `&'static str` (a note's or finding's code, a
/// severity) back from a stored summary, interned: those texts are a handful of constants, so
/// each distinct one is kept once for the life of the process; past [`MAX_INTERNED_CODES`] of
/// them, or a text longer than a code, the stored summary is refused (and then computed again).
pub(crate) fn intern_code<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<&'static str, D::Error> {
    use serde::Deserialize as _;
    use serde::de::Error as _;
    static KEPT: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let text = String::deserialize(deserializer)?;
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&known) = kept.iter().find(|&&known| known == text) {
        return Ok(known);
    }
    if kept.len() >= MAX_INTERNED_CODES || text.len() > 64 {
        return Err(D::Error::custom(
            "more distinct codes than this program writes",
        ));
    }
    let leaked: &'static str = Box::leak(text.into_boxed_str());
    kept.push(leaked);
    Ok(leaked)
}

/// A code or severity read back by the interner [`intern_code`]: a `&'static str`, named so
/// that serde's derive does not take it for text borrowed from its input.
pub type InternedCode = &'static str;

/// Distinct codes and severities [`intern_code`] keeps at most (there are about twenty).
const MAX_INTERNED_CODES: usize = 256;

/// Everything computed once per snapshot.
#[derive(Debug)]
pub struct Analysis {
    /// One replay per device that has segments or a trace, ascending by device.
    pub devices: Vec<DeviceAnalysis>,
}

/// The replay of one device, and indexes built from it on first use.
#[derive(Debug)]
pub struct DeviceAnalysis {
    pub device: usize,
    pub replay: Replay,
    /// What the views read instead of the trace, built on first use (the server builds it
    /// beside the summary with [`Analysis::index_views`], so its first request is as fast as
    /// the rest; the command line's summary never needs it).
    views: std::sync::OnceLock<view_index::ViewIndex>,
    /// Every allocation's role, decided on first use (by [`Analysis::roles`]).
    roles: std::sync::OnceLock<roles::DeviceRoles>,
}

impl DeviceAnalysis {
    fn new(snapshot: &Snapshot, device: usize, pass: Option<EventPass>) -> Self {
        Self::from_replay(device, Replay::seeded(snapshot, device, pass))
    }

    /// A device as a stored index keeps it: its replay (mapped), with the views' index built
    /// again in memory on first use (a tenth of a second on 32 million events; not worth a
    /// format).
    pub(crate) fn from_stored(device: usize, replay: Replay) -> Self {
        Self::from_replay(device, replay)
    }

    fn from_replay(device: usize, replay: Replay) -> Self {
        Self {
            device,
            replay,
            views: std::sync::OnceLock::new(),
            roles: std::sync::OnceLock::new(),
        }
    }

    /// Heap bytes held: the replay and the indexes built so far (mapped columns count nothing:
    /// their pages are the OS's).
    pub fn heap_bytes(&self) -> u64 {
        let roles = self.roles.get().map_or(0, roles::DeviceRoles::heap_bytes);
        self.replay.heap_bytes()
            + self.replay.event_matches.heap_bytes()
            + self
                .views
                .get()
                .map_or(0, view_index::ViewIndex::heap_bytes)
            + roles
    }

    /// The indexes the views read (built on the first call).
    pub fn views(&self) -> &view_index::ViewIndex {
        self.views
            .get_or_init(|| view_index::ViewIndex::new(&self.replay))
    }

    /// Every allocation's role, decided on the first call with these `rules` (later calls get
    /// the same answer: one snapshot is read with one set of rules).
    pub fn roles(&self, snapshot: &Snapshot, rules: &roles::UserRules) -> &roles::DeviceRoles {
        self.roles
            .get_or_init(|| roles::DeviceRoles::new(snapshot, &self.replay, self.device, rules))
    }
}

impl Analysis {
    /// Replays every device of `snapshot`.
    pub fn new(snapshot: &Snapshot) -> Self {
        Self::seeded(snapshot, ReplaySeed::default())
    }

    /// [`Analysis::new`], reusing the event pass the loader ran (see [`load_path`]).
    pub fn seeded(snapshot: &Snapshot, mut seed: ReplaySeed) -> Self {
        let devices = snapshot
            .devices()
            .into_iter()
            .map(|device| {
                let pass = seed.take(device, snapshot.trace(device).len());
                DeviceAnalysis::new(snapshot, device, pass)
            })
            .collect();
        Self { devices }
    }

    /// Builds every device's views' index now (see [`DeviceAnalysis::views`]).
    pub fn index_views(&self) {
        for device in &self.devices {
            device.views();
        }
    }

    /// Heap bytes held by every device's replay and indexes.
    pub fn heap_bytes(&self) -> u64 {
        self.devices.iter().map(DeviceAnalysis::heap_bytes).sum()
    }

    pub fn device(&self, device: usize) -> Option<&DeviceAnalysis> {
        self.devices.iter().find(|d| d.device == device)
    }
}
