//! Parsed and analysed snapshots kept in memory, least recently used out past a byte budget.
//!
//! Parsing a large snapshot takes a second and hundreds of MB, so it happens once per snapshot,
//! on a blocking thread, and concurrent requests for the same cold snapshot wait on the same
//! parse (single flight) instead of starting their own.

use super::store::SnapshotId;
use crate::analysis::roles::UserRules;
use crate::analysis::{Analysis, ReplaySeed, Summary};
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// A snapshot with its analysis, ready to answer queries.
#[derive(Debug)]
pub struct Loaded {
    pub snapshot: Snapshot,
    pub analysis: Analysis,
    pub summary: Summary,
    /// [`UserRules::fingerprint`] of the rules `summary` was made with (the stored index
    /// keeps it, to know when its summary applies).
    pub rules_fingerprint: u64,
    /// Parsed from the pickle and its stored index not yet written (see
    /// [`Loaded::take_index_write`]).
    index_pending: AtomicBool,
}

impl Loaded {
    /// Analyses `snapshot`, starting from the replay's first pass that loading made alongside
    /// the parse (see [`crate::analysis::load_path`]); `rules` are the server's role rules.
    pub fn new((snapshot, seed): (Snapshot, ReplaySeed), rules: &UserRules) -> Self {
        let analysis = Analysis::seeded(&snapshot, seed);
        let summary = Summary::with_rules(&snapshot, &analysis, rules);
        // Built now, on the loading thread, so the first timeline request is as fast as the rest.
        for device in &analysis.devices {
            device.allocations_by_size();
        }
        Self {
            snapshot,
            analysis,
            summary,
            rules_fingerprint: rules.fingerprint(),
            index_pending: AtomicBool::new(true),
        }
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
        let summary = if rules_fingerprint == rules.fingerprint() {
            summary
        } else {
            tracing::info!("the stored summary was made with other role rules: summarising again");
            Summary::with_rules(&snapshot, &analysis, rules)
        };
        Self {
            snapshot,
            analysis,
            summary,
            rules_fingerprint: rules.fingerprint(),
            index_pending: AtomicBool::new(false),
        }
    }

    /// Whether the caller should write this snapshot's stored index: true once for a snapshot
    /// parsed from its pickle, so that of many requests waiting on one parse, one writes it.
    pub fn take_index_write(&self) -> bool {
        self.index_pending.swap(false, Ordering::AcqRel)
    }

    /// The memory this holds, for the cache's byte budget: the trace columns, segments and
    /// interned tables of the snapshot, and everything the analysis keeps (the replay, its
    /// lifetime index and the per-device indexes), by the capacities actually allocated.
    pub fn approx_bytes(&self) -> u64 {
        snapshot_heap_bytes(&self.snapshot) + self.analysis.heap_bytes() + SMALL_PARTS_BYTES
    }
}

/// The summary, the tables' hash indexes and other parts too small to count one by one.
const SMALL_PARTS_BYTES: u64 = 64 * 1024;

/// Heap bytes a vector holds (its capacity).
fn vec_bytes<T>(vector: &Vec<T>) -> u64 {
    (vector.capacity() * std::mem::size_of::<T>()) as u64
}

/// Heap bytes of a snapshot: its numeric columns and vectors exactly, its texts and interned
/// frames and stacks by count (a trace repeats a few thousand of them, so they are small).
fn snapshot_heap_bytes(snapshot: &Snapshot) -> u64 {
    /// Per text, interned frame or stack: the text or frame ids, and the index entry.
    const PER_TABLE_ENTRY: u64 = 128;
    /// Per entry of a `BTreeMap`: key, value and the node's share.
    const PER_MAP_ENTRY: u64 = 48;
    let traces: u64 = snapshot
        .device_traces
        .iter()
        .map(|trace| {
            trace.action.heap_bytes()
                + trace.addr.heap_bytes()
                + trace.size.heap_bytes()
                + trace.stream.heap_bytes()
                + trace.time_us.heap_bytes()
                + trace.stack.heap_bytes()
                + trace.compile_context.heap_bytes()
                + trace.user_metadata.heap_bytes()
                + trace.category.heap_bytes()
                + (trace.strings.len() + trace.unknown_actions.len() + trace.categories.len())
                    as u64
                    * PER_TABLE_ENTRY
                + trace.device_free.len() as u64 * PER_MAP_ENTRY
        })
        .sum();
    let segments: u64 = vec_bytes(&snapshot.segments)
        + snapshot
            .segments
            .iter()
            .map(|segment| vec_bytes(&segment.blocks) + segment.segment_type.capacity() as u64)
            .sum::<u64>();
    let tables = (snapshot.frames.len() + snapshot.stacks.len()) as u64 * PER_TABLE_ENTRY
        + vec_bytes(&snapshot.external_annotations)
        + snapshot
            .external_annotations
            .iter()
            .map(|annotation| annotation.fields.len() as u64 * PER_TABLE_ENTRY)
            .sum::<u64>();
    vec_bytes(&snapshot.device_traces) + traces + segments + tables
}

struct Entry {
    cell: OnceCell<Result<Arc<Loaded>, String>>,
    last_used: AtomicU64,
}

pub struct AnalysisCache {
    budget_bytes: u64,
    entries: Mutex<HashMap<SnapshotId, Arc<Entry>>>,
    clock: AtomicU64,
}

impl AnalysisCache {
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            budget_bytes,
            entries: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<SnapshotId, Arc<Entry>>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn entry(&self, id: &SnapshotId) -> Arc<Entry> {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let entry = self
            .entries()
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(Entry {
                    cell: OnceCell::new(),
                    last_used: AtomicU64::new(tick),
                })
            })
            .clone();
        entry.last_used.store(tick, Ordering::Relaxed);
        entry
    }

    /// The loaded snapshot `id`, parsing it with `load` on a blocking thread if it is not in
    /// memory. Concurrent callers share one parse. A failure is not cached.
    pub async fn get_or_load<F>(&self, id: &SnapshotId, load: F) -> Result<Arc<Loaded>, String>
    where
        F: FnOnce() -> Result<Loaded, String> + Send + 'static,
    {
        let entry = self.entry(id);
        let result = entry
            .cell
            .get_or_init(|| async {
                match tokio::task::spawn_blocking(load).await {
                    Ok(result) => result.map(Arc::new),
                    Err(e) => Err(format!("analysis failed: {e}")),
                }
            })
            .await
            .clone();
        match &result {
            Ok(_) => self.evict(id),
            Err(_) => {
                self.entries().remove(id);
            }
        }
        result
    }

    /// Puts an already loaded snapshot in (the upload path parsed it to validate it).
    pub fn insert(&self, id: &SnapshotId, loaded: Arc<Loaded>) {
        let entry = self.entry(id);
        let _ = entry.cell.set(Ok(loaded));
        self.evict(id);
    }

    pub fn remove(&self, id: &SnapshotId) {
        self.entries().remove(id);
    }

    /// Drops least recently used entries until the ready ones fit the budget; `keep` stays.
    fn evict(&self, keep: &SnapshotId) {
        let mut entries = self.entries();
        loop {
            let mut used = 0;
            let mut oldest: Option<(u64, SnapshotId)> = None;
            for (id, entry) in entries.iter() {
                let Some(Ok(loaded)) = entry.cell.get() else {
                    continue;
                };
                used += loaded.approx_bytes();
                let age = entry.last_used.load(Ordering::Relaxed);
                if id != keep && oldest.as_ref().is_none_or(|(t, _)| age < *t) {
                    oldest = Some((age, id.clone()));
                }
            }
            match oldest {
                Some((_, id)) if used > self.budget_bytes => {
                    tracing::debug!(%id, used, budget = self.budget_bytes, "evicting from the analysis cache");
                    entries.remove(&id);
                }
                _ => break,
            }
        }
    }
}
