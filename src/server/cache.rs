//! Parsed and analysed snapshots kept in memory, least recently used out past a byte budget.
//!
//! Parsing a large snapshot takes seconds and gigabytes, so it happens once per snapshot, in a
//! task of its own on a blocking thread, and every request for the same cold snapshot waits on
//! that one parse (single flight) instead of starting its own. While it runs, its progress
//! (bytes read, then analysing) is there for `GET /api/snapshots/{id}/status` and the page that
//! shows it; a failure is remembered for a while, so nothing retries it in a loop.
//!
//! An entry is good only for the role rules it was analysed with: each request names the
//! fingerprint of the rules its snapshot's record says apply now (`extract.rs`), and an entry
//! made with other rules (changed through another replica since, see `extract.rs`) is loaded
//! again as if absent.

use super::analysed::AnalysedSnapshot;
use super::store::SnapshotId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, watch};

/// How many snapshots are parsed at once at most. A parse keeps two cores busy (the reader and
/// the decoder) and holds its whole model in memory before the cache's budget sees it, so a
/// client asking for the status of many cold snapshots at once must not start as many parses:
/// the rest wait their turn (`queued`).
const LOADS_AT_ONCE: usize = 2;

/// How long a failed load is reported as failed before a request may try it again: a stored file
/// that does not parse will not parse a second later, and a page polling the status (or a
/// client retrying a view) must not start a parse four times a second.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(60);

/// Where a snapshot's load stands, as `GET /api/snapshots/{id}/status` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadState {
    /// Waiting for one of the [`LOADS_AT_ONCE`] loads running to end.
    Queued,
    /// Reading (and decoding) the stored file: `read` of its `total` bytes.
    Reading {
        read: u64,
        total: u64,
    },
    /// The file is read; the replay and the summary are being computed.
    Analysing,
    /// Another replica is reading this snapshot (it holds its parse lease): this one waits to
    /// open the index it will write (`stored_index::ColdLoad`).
    WaitingForAnotherServer,
    Ready,
    /// Why it failed, for a person (no server path in it).
    Failed(String),
}

/// The progress of one load: written by the loading thread (the reader's progress callback),
/// read by status requests, without a lock.
#[derive(Debug)]
pub struct LoadProgress {
    stage: AtomicU8,
    read: AtomicU64,
    total: u64,
}

impl LoadProgress {
    const QUEUED: u8 = 0;
    const READING: u8 = 1;
    const ANALYSING: u8 = 2;
    const WAITING: u8 = 3;

    fn new(total: u64) -> Self {
        Self {
            stage: AtomicU8::new(Self::QUEUED),
            read: AtomicU64::new(0),
            total,
        }
    }

    /// Reading the stored file begins (again, after a wait for another replica).
    pub fn begin_reading(&self) {
        self.stage.store(Self::READING, Ordering::Relaxed);
    }

    /// Another replica holds this snapshot's parse lease: the load waits for its index.
    pub fn waiting_for_another_server(&self) {
        self.stage.store(Self::WAITING, Ordering::Relaxed);
    }

    /// `bytes` of the file read so far (the loader's progress callback).
    pub fn read(&self, bytes: u64) {
        self.read.store(bytes, Ordering::Relaxed);
    }

    /// The file is read; what remains is analysis.
    pub fn analysing(&self) {
        self.stage.store(Self::ANALYSING, Ordering::Relaxed);
    }

    fn state(&self) -> LoadState {
        match self.stage.load(Ordering::Relaxed) {
            Self::QUEUED => LoadState::Queued,
            Self::READING => LoadState::Reading {
                // A compressed file's reader may count a little past the stored size.
                read: self.read.load(Ordering::Relaxed).min(self.total),
                total: self.total,
            },
            Self::WAITING => LoadState::WaitingForAnotherServer,
            _ => LoadState::Analysing,
        }
    }
}

/// How a load ended.
#[derive(Clone)]
enum Outcome {
    Ready(Arc<AnalysedSnapshot>),
    /// Why, for a person, and when (see [`RETRY_FAILED_AFTER`]).
    Failed(String, Instant),
}

/// One snapshot in the cache: loading (no outcome yet), ready or failed.
struct Entry {
    /// The fingerprint of the role rules it is (being) analysed with.
    rules_fingerprint: u64,
    progress: Arc<LoadProgress>,
    /// Set once, by the task that loads; waiters clone the receiver and wait for it.
    outcome: watch::Receiver<Option<Outcome>>,
    last_used: AtomicU64,
}

impl Entry {
    fn outcome(&self) -> Option<Outcome> {
        self.outcome.borrow().clone()
    }

    fn ready(&self) -> Option<Arc<AnalysedSnapshot>> {
        match &*self.outcome.borrow() {
            Some(Outcome::Ready(loaded)) => Some(loaded.clone()),
            _ => None,
        }
    }

    /// A failure old enough to try again.
    fn stale_failure(&self) -> bool {
        matches!(&*self.outcome.borrow(), Some(Outcome::Failed(_, at)) if at.elapsed() >= RETRY_FAILED_AFTER)
    }

    fn state(&self) -> LoadState {
        match self.outcome() {
            Some(Outcome::Ready(_)) => LoadState::Ready,
            Some(Outcome::Failed(why, _)) => LoadState::Failed(why),
            None => self.progress.state(),
        }
    }
}

/// What loads a snapshot: run on a blocking thread, it reports its progress into the
/// [`LoadProgress`] and returns the loaded snapshot or why it failed (for a person).
pub trait Loader:
    FnOnce(&LoadProgress) -> Result<Arc<AnalysedSnapshot>, String> + Send + 'static
{
}
impl<F: FnOnce(&LoadProgress) -> Result<Arc<AnalysedSnapshot>, String> + Send + 'static> Loader
    for F
{
}

pub struct AnalysisCache {
    budget_bytes: u64,
    entries: Mutex<HashMap<SnapshotId, Arc<Entry>>>,
    clock: AtomicU64,
    /// One permit per load running ([`LOADS_AT_ONCE`]).
    load_slots: Arc<Semaphore>,
}

impl AnalysisCache {
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            budget_bytes,
            entries: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            load_slots: Arc::new(Semaphore::new(LOADS_AT_ONCE)),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<SnapshotId, Arc<Entry>>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// The entry of `id` analysed with the rules of `rules_fingerprint`, starting its load
    /// with `load` when there is none (or only a failure old enough to try again, or one made
    /// with other rules, which it replaces). Deciding and starting happen under the entries'
    /// lock, so two requests never start two loads of one snapshot.
    fn entry_or_start(
        self: &Arc<Self>,
        id: &SnapshotId,
        total: u64,
        rules_fingerprint: u64,
        load: impl Loader,
    ) -> Arc<Entry> {
        let tick = self.tick();
        let mut entries = self.entries();
        if let Some(entry) = entries.get(id)
            && !entry.stale_failure()
        {
            if entry.rules_fingerprint == rules_fingerprint {
                entry.last_used.store(tick, Ordering::Relaxed);
                // A load in flight is joined: neither a hit nor a second miss.
                if entry.ready().is_some() {
                    super::ops::cache_lookup("analysis", true);
                }
                return entry.clone();
            }
            // Its rules were changed through another replica (this one replaces its entry as
            // it changes them): what was analysed with the old ones is no answer now.
            tracing::info!(%id, "the snapshot's role rules changed: analysing it again");
        }
        super::ops::cache_lookup("analysis", false);
        let progress = Arc::new(LoadProgress::new(total));
        let (sender, outcome) = watch::channel(None);
        let entry = Arc::new(Entry {
            rules_fingerprint,
            progress: progress.clone(),
            outcome,
            last_used: AtomicU64::new(tick),
        });
        entries.insert(id.clone(), entry.clone());
        drop(entries);
        // A free slot is taken now, so the first status already says "reading".
        let slot = self.load_slots.clone().try_acquire_owned().ok();
        if slot.is_some() {
            progress.begin_reading();
        }
        // The load runs in a task of its own, not in the request that started it: a client
        // that goes away (or a status request, which never waits) does not stop it, and the
        // requests that wait only watch its outcome.
        let cache = self.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let slot = match slot {
                Some(slot) => Ok(slot),
                None => cache.load_slots.clone().acquire_owned().await,
            };
            let began = Instant::now();
            tracing::info!(%id, bytes = total, "loading a snapshot");
            let outcome = match slot {
                Err(closed) => {
                    Outcome::Failed(format!("analysis failed: {closed}"), Instant::now())
                }
                Ok(slot) => {
                    let result = tokio::task::spawn_blocking(move || {
                        let _slot = slot;
                        progress.begin_reading();
                        load(&progress)
                    })
                    .await;
                    match result {
                        Ok(Ok(loaded)) => Outcome::Ready(loaded),
                        Ok(Err(why)) => Outcome::Failed(why, Instant::now()),
                        Err(e) => Outcome::Failed(format!("analysis failed: {e}"), Instant::now()),
                    }
                }
            };
            match &outcome {
                Outcome::Ready(_) => {
                    tracing::info!(%id, ms = began.elapsed().as_millis() as u64, "snapshot loaded");
                }
                Outcome::Failed(why, _) => {
                    tracing::warn!(%id, error = %why, "loading a snapshot failed");
                }
            }
            sender.send_replace(Some(outcome));
            cache.evict(&id);
        });
        entry
    }

    /// The loaded snapshot `id` if it is ready, else where its load stands; starts the load
    /// (in the background, see [`Self::get_or_load`]) when it is neither loaded nor loading.
    /// Never waits.
    pub fn ready_or_start(
        self: &Arc<Self>,
        id: &SnapshotId,
        total: u64,
        rules_fingerprint: u64,
        load: impl Loader,
    ) -> Result<Arc<AnalysedSnapshot>, LoadState> {
        let entry = self.entry_or_start(id, total, rules_fingerprint, load);
        entry.ready().ok_or_else(|| entry.state())
    }

    /// The loaded snapshot `id` analysed with the rules of `rules_fingerprint`, loading it
    /// with `load` on a blocking thread if it is not in memory so (`total`: the stored file's
    /// size, for the progress). Concurrent callers, and those of [`Self::ready_or_start`], share
    /// one load. A failure is reported to every caller for [`RETRY_FAILED_AFTER`], then the
    /// next caller tries again.
    pub async fn get_or_load(
        self: &Arc<Self>,
        id: &SnapshotId,
        total: u64,
        rules_fingerprint: u64,
        load: impl Loader,
    ) -> Result<Arc<AnalysedSnapshot>, String> {
        let entry = self.entry_or_start(id, total, rules_fingerprint, load);
        let mut outcome = entry.outcome.clone();
        match outcome.wait_for(Option::is_some).await {
            Ok(done) => match &*done {
                Some(Outcome::Ready(loaded)) => Ok(loaded.clone()),
                Some(Outcome::Failed(why, _)) => Err(why.clone()),
                None => Err("analysis failed: no outcome".to_owned()),
            },
            // The loading task ended without saying how: the runtime is shutting down.
            Err(_) => Err("analysis failed: the load was stopped".to_owned()),
        }
    }

    /// Puts an already loaded snapshot in (the upload path parsed it to validate it). It
    /// replaces whatever was there; a load still running for `id` ends for its own waiters.
    pub fn insert(&self, id: &SnapshotId, loaded: Arc<AnalysedSnapshot>) {
        let rules_fingerprint = loaded.rules_fingerprint;
        let (_, outcome) = watch::channel(Some(Outcome::Ready(loaded)));
        let entry = Arc::new(Entry {
            rules_fingerprint,
            progress: Arc::new(LoadProgress::new(0)),
            outcome,
            last_used: AtomicU64::new(self.tick()),
        });
        self.entries().insert(id.clone(), entry);
        self.evict(id);
    }

    pub fn remove(&self, id: &SnapshotId) {
        self.entries().remove(id);
        // What is left is counted again (`snapview_cache_bytes`).
        self.evict(id);
    }

    /// Drops least recently used entries until the ready ones fit the budget, and failures old
    /// enough to try again; `keep` stays. Loads in flight are not counted (nor dropped).
    fn evict(&self, keep: &SnapshotId) {
        let mut entries = self.entries();
        entries.retain(|_, entry| !entry.stale_failure());
        loop {
            let mut used = 0;
            let mut oldest: Option<(u64, SnapshotId)> = None;
            for (id, entry) in entries.iter() {
                let Some(loaded) = entry.ready() else {
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
                _ => {
                    super::ops::cache_bytes("analysis", used);
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::analysed::tests::fixture;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    /// The fingerprint of the rules [`fixture`] analyses with.
    fn rules() -> u64 {
        crate::analysis::roles::UserRules::default().fingerprint()
    }

    fn id(n: u8) -> SnapshotId {
        SnapshotId::parse(&format!("{n:016x}")).expect("id")
    }

    /// A loader that counts its runs, reports `read` bytes, then waits for `gate` (a send, or
    /// the sender dropped) before it succeeds or fails with `fail`.
    fn gated(
        runs: &Arc<AtomicUsize>,
        gate: mpsc::Receiver<()>,
        read: u64,
        fail: Option<&str>,
    ) -> impl Loader + use<> {
        let runs = runs.clone();
        let fail = fail.map(str::to_owned);
        move |progress: &LoadProgress| {
            runs.fetch_add(1, Ordering::SeqCst);
            progress.read(read);
            let _ = gate.recv();
            match fail {
                Some(why) => Err(why),
                None => Ok(Arc::new(fixture("mlp_small.pickle"))),
            }
        }
    }

    /// A loader that must not run.
    fn never(runs: &Arc<AtomicUsize>) -> impl Loader + use<> {
        let runs = runs.clone();
        move |_: &LoadProgress| {
            runs.fetch_add(1, Ordering::SeqCst);
            Err("a second load ran".to_owned())
        }
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_load_however_many_ask_and_its_progress_is_shared() {
        let cache = Arc::new(AnalysisCache::new(u64::MAX));
        let runs = Arc::new(AtomicUsize::new(0));
        let (open, gate) = mpsc::channel();
        let first = cache.ready_or_start(&id(1), 1000, rules(), gated(&runs, gate, 400, None));
        // A free slot: reading from the first answer on (the loader may have reported already).
        assert!(
            matches!(first, Err(LoadState::Reading { total: 1000, .. })),
            "{:?}",
            first.err()
        );
        until("the loader reports its bytes", || {
            cache
                .ready_or_start(&id(1), 1000, rules(), never(&runs))
                .err()
                == Some(LoadState::Reading {
                    read: 400,
                    total: 1000,
                })
        })
        .await;
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let cache = cache.clone();
                let runs = runs.clone();
                tokio::spawn(
                    async move { cache.get_or_load(&id(1), 1000, rules(), never(&runs)).await },
                )
            })
            .collect();
        open.send(()).expect("open the gate");
        let mut loaded = Vec::new();
        for waiter in waiters {
            loaded.push(waiter.await.expect("join").expect("loaded"));
        }
        assert!(
            loaded.iter().all(|l| Arc::ptr_eq(l, &loaded[0])),
            "one load shared"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the loader ran once");
        let ready = cache.ready_or_start(&id(1), 1000, rules(), never(&runs));
        assert!(ready.is_ok_and(|l| Arc::ptr_eq(&l, &loaded[0])));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_made_with_other_rules_is_loaded_again_and_then_kept() {
        let cache = Arc::new(AnalysisCache::new(u64::MAX));
        let runs = Arc::new(AtomicUsize::new(0));
        cache.insert(&id(3), Arc::new(fixture("mlp_small.pickle")));
        let kept = cache.get_or_load(&id(3), 10, rules(), never(&runs)).await;
        assert!(kept.is_ok(), "the same rules: the entry as it is");
        // The rules changed through another replica: the record names other rules.
        let other = rules().wrapping_add(1);
        let (open, gate) = mpsc::channel();
        drop(open);
        let again = cache
            .get_or_load(&id(3), 10, other, gated(&runs, gate, 0, None))
            .await;
        assert!(again.is_ok());
        assert_eq!(runs.load(Ordering::SeqCst), 1, "loaded again");
        let kept = cache.get_or_load(&id(3), 10, other, never(&runs)).await;
        assert!(kept.is_ok(), "then kept for those rules");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failure_is_reported_to_every_caller_and_not_tried_again_at_once() {
        let cache = Arc::new(AnalysisCache::new(u64::MAX));
        let runs = Arc::new(AtomicUsize::new(0));
        let (open, gate) = mpsc::channel();
        drop(open);
        let failed = cache
            .get_or_load(
                &id(2),
                10,
                rules(),
                gated(&runs, gate, 0, Some("not a snapshot")),
            )
            .await;
        assert_eq!(failed.err().as_deref(), Some("not a snapshot"));
        for _ in 0..5 {
            assert_eq!(
                cache
                    .ready_or_start(&id(2), 10, rules(), never(&runs))
                    .err(),
                Some(LoadState::Failed("not a snapshot".into()))
            );
            let again = cache.get_or_load(&id(2), 10, rules(), never(&runs)).await;
            assert_eq!(again.err().as_deref(), Some("not a snapshot"));
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the failed load is not retried"
        );
        // A new upload of the same bytes repairs it at once.
        cache.insert(&id(2), Arc::new(fixture("mlp_small.pickle")));
        assert!(
            cache
                .ready_or_start(&id(2), 10, rules(), never(&runs))
                .is_ok()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loads_past_the_limit_wait_their_turn() {
        let cache = Arc::new(AnalysisCache::new(u64::MAX));
        let runs = Arc::new(AtomicUsize::new(0));
        let mut gates = Vec::new();
        for n in 0..=LOADS_AT_ONCE as u8 {
            let (open, gate) = mpsc::channel();
            gates.push(open);
            let _ = cache.ready_or_start(&id(10 + n), 10, rules(), gated(&runs, gate, 1, None));
        }
        let last = id(10 + LOADS_AT_ONCE as u8);
        until("the loads within the limit run", || {
            runs.load(Ordering::SeqCst) == LOADS_AT_ONCE
        })
        .await;
        assert_eq!(
            cache.ready_or_start(&last, 10, rules(), never(&runs)).err(),
            Some(LoadState::Queued)
        );
        assert_eq!(runs.load(Ordering::SeqCst), LOADS_AT_ONCE, "no more run");
        let _ = gates.remove(0).send(());
        until("the queued load starts when one ends", || {
            matches!(
                cache.ready_or_start(&last, 10, rules(), never(&runs)),
                Err(LoadState::Reading { .. })
            )
        })
        .await;
        drop(gates);
        let loaded = cache.get_or_load(&last, 10, rules(), never(&runs)).await;
        assert!(loaded.is_ok());
        assert_eq!(runs.load(Ordering::SeqCst), LOADS_AT_ONCE + 1);
    }
}
