//! Parsed and analysed snapshots kept in memory, least recently used out past a byte budget.
//!
//! Parsing a large snapshot takes a second and hundreds of MB, so it happens once per snapshot,
//! on a blocking thread, and concurrent requests for the same cold snapshot wait on the same
//! parse (single flight) instead of starting their own.

use super::store::SnapshotId;
use crate::analysis::{Analysis, Summary};
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// A snapshot with its analysis, ready to answer queries.
#[derive(Debug)]
pub struct Loaded {
    pub snapshot: Snapshot,
    pub analysis: Analysis,
    pub summary: Summary,
}

impl Loaded {
    pub fn new(snapshot: Snapshot) -> Self {
        let analysis = Analysis::new(&snapshot);
        let summary = Summary::new(&snapshot, &analysis);
        // Built now, on the loading thread, so the first timeline request is as fast as the rest.
        for device in &analysis.devices {
            device.allocations_by_size();
        }
        Self {
            snapshot,
            analysis,
            summary,
        }
    }

    /// An estimate of the memory this holds: the columns of every trace and the replay's
    /// per-event and per-allocation vectors dominate.
    pub fn approx_bytes(&self) -> u64 {
        let events: usize = self.snapshot.device_traces.iter().map(|t| t.len()).sum();
        let allocations: usize = self
            .analysis
            .devices
            .iter()
            .map(|d| d.replay.allocations.len())
            .sum();
        let blocks: usize = self.snapshot.segments.iter().map(|s| s.blocks.len()).sum();
        (events * 64 + allocations * 64 + blocks * 64 + 64 * 1024) as u64
    }
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
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Ids currently held and ready.
    pub fn ready_ids(&self) -> Vec<SnapshotId> {
        self.entries()
            .iter()
            .filter(|(_, e)| matches!(e.cell.get(), Some(Ok(_))))
            .map(|(id, _)| id.clone())
            .collect()
    }
}
