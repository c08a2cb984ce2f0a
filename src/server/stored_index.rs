//! The server's use of stored indexes (`crate::index`): a cold load opens the snapshot's index
//! when it is there and sound, else parses the pickle; a snapshot parsed from its pickle (a
//! cold load, an upload) gets its index written afterwards, on a blocking thread, so the answer
//! does not wait for it; one opened from its index gets its columns checked the same way. A
//! graceful shutdown waits for the writes in flight ([`IndexWrites`]), so a snapshot read just
//! before a restart is not read again after it.

use super::AppState;
use super::analysed::{AnalysedSnapshot, IndexWork};
use super::lease::{HeldLease, LeaseTiming, Waited, find_or_lease};
use super::store::{Record, SnapshotId};
use crate::analysis::roles::UserRules;
use crate::index::{BlobIdentity, IndexError, Verify};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How much of an index a load checks. The header, section table and JSON section always; the
/// columns only by their bounds and lengths: checksumming them would read the whole file (as
/// large as the pickle) on every cold open, which costs the seconds the index is there to
/// save when the page cache is cold. A column corrupted on disk after it was written is then
/// not caught (see [`Verify::Structure`]); the file is rewritten by rename only, so this is
/// the disk's own corruption, which the pickle would suffer as well.
const VERIFY_ON_LOAD: Verify = Verify::Structure;

/// The snapshot `id` (`blob_bytes` long, as its record says), from its stored index at `index`
/// when that is sound, else by `parse` (what it loads is marked for its index to be written:
/// see [`maintain_in_background`]). Runs on a blocking thread. Opening never needs the blob: a
/// replica whose blobs are remote opens the index alone.
pub fn load(
    id: &SnapshotId,
    blob_bytes: u64,
    index: &Path,
    rules: &UserRules,
    parse: impl FnOnce() -> Result<AnalysedSnapshot, String>,
) -> Result<AnalysedSnapshot, String> {
    match open_sound(id, blob_bytes, index, rules) {
        Some(loaded) => Ok(loaded),
        None => parse(),
    }
}

/// The snapshot opened from its stored index at `index`, when that is there and sound; `None`
/// (saying why in the log) otherwise.
fn open_sound(
    id: &SnapshotId,
    blob_bytes: u64,
    index: &Path,
    rules: &UserRules,
) -> Option<AnalysedSnapshot> {
    let identity = BlobIdentity {
        id: id.as_str(),
        bytes: blob_bytes,
    };
    let started = std::time::Instant::now();
    // SAFETY: `index` is in the data folder's `indexes/` (or the local cache's), where this
    // server writes only by temporary file and rename (`crate::index::write`, and the store's
    // fetch), never in place, and the README tells operators never to edit or truncate those
    // files (deleting them is fine). A file truncated in place anyway makes a read past its new
    // end raise SIGBUS, which no check here can prevent; one edited in place changes, under the
    // map, numbers already checked.
    match unsafe { crate::index::open(index, identity, VERIFY_ON_LOAD) } {
        Ok(opened) => {
            let loaded = AnalysedSnapshot::from_index(opened, rules);
            tracing::info!(%id, ms = started.elapsed().as_millis() as u64, "opened from its stored index");
            Some(loaded)
        }
        Err(IndexError::Missing) => {
            tracing::debug!(%id, "no stored index yet: reading the snapshot");
            None
        }
        Err(error) => {
            tracing::warn!(%id, %error, "the stored index is not used: reading the snapshot, and writing it again");
            None
        }
    }
}

/// A cold load of one snapshot, shared by every replica on one store: what a request's load
/// (`extract.rs`) and a rules change (`role_rules.rs`) run on their blocking thread.
///
/// 1. The stored index, fetched from the store (`Store::fetch_index`) and opened when sound:
///    a replica that never parsed the snapshot opens it from the index another wrote.
/// 2. Else the lease `parse:<id>` ([`super::lease`]): the replica holding it fetches the blob
///    (`Store::blob_file`, which may download), parses and analyses it, and writes and
///    publishes the index afterwards, in the background, releasing the lease only once the
///    index is published; the others wait, looking for the index every
///    [`super::lease::PARSE_WAIT_POLL`], and open it when it appears, or take the lease over
///    when it comes free without one (its holder failed) or expires (its holder died), or parse
///    anyway past [`super::lease::PARSE_WAIT_LIMIT`].
pub struct ColdLoad {
    state: AppState,
    id: SnapshotId,
    blob_bytes: u64,
    timing: LeaseTiming,
}

impl ColdLoad {
    /// The cold load of `record`'s snapshot.
    pub fn new(state: &AppState, record: &Record) -> Self {
        Self {
            state: state.clone(),
            id: record.id.clone(),
            blob_bytes: record.size_bytes,
            timing: LeaseTiming::for_parse(),
        }
    }

    /// The lease a parse of `id` holds.
    pub fn lease_name(id: &SnapshotId) -> String {
        format!("parse:{id}")
    }

    /// Loads the snapshot analysed with `rules` (see [`ColdLoad`]); `waiting` is called once
    /// if another replica is reading it and this one waits; `parse` reads the blob at the path
    /// it is given. Runs on a blocking thread. Its error is for a person.
    pub fn run(
        self,
        rules: &UserRules,
        waiting: impl FnOnce(),
        parse: impl FnOnce(&Path) -> Result<AnalysedSnapshot, String>,
    ) -> Result<Arc<AnalysedSnapshot>, String> {
        let Self {
            state,
            id,
            blob_bytes,
            timing,
        } = self;
        let store = state.store.clone();
        let index = store.index_path(&id);
        let find = || {
            match store.fetch_index(&id) {
                Ok(true) => open_sound(&id, blob_bytes, &index, rules),
                Ok(false) => None,
                // Not fatal: the snapshot can still be parsed from its blob.
                Err(error) => {
                    tracing::warn!(%id, %error, "fetching the stored index failed");
                    None
                }
            }
        };
        let lease = match find_or_lease(&store, &Self::lease_name(&id), timing, find, waiting) {
            Waited::Found(loaded) => return Ok(Arc::new(loaded)),
            Waited::Holding(lease) => Some(lease),
            Waited::Without => None,
        };
        let blob = store.blob_file(&id).map_err(|error| {
            tracing::warn!(%id, %error, "the stored file cannot be had");
            format!("the server cannot read its stored file: {error}")
        })?;
        // The line tests/replicas_local.rs counts: one per parse, whichever replica.
        tracing::info!(%id, leased = lease.is_some(), "parsing the stored file");
        let loaded = Arc::new(parse(&blob)?);
        // The lease goes with the write: released once the index is published (or the write
        // failed), so a replica waiting meanwhile opens the index rather than parsing again.
        if loaded.take_index_work() == IndexWork::Write {
            start_write(&state, &id, Some(blob_bytes), &loaded, lease);
        }
        Ok(loaded)
    }
}

/// After a load, on a blocking thread, what its stored index needs, if nobody has started it
/// yet: written when the snapshot was parsed from its pickle; when it was opened from the
/// index, its columns checked against their checksums (which the open skipped, see
/// [`VERIFY_ON_LOAD`]), and a corrupt index deleted and the snapshot dropped from the cache,
/// so the next request reads the pickle and writes a sound index. A failed write is logged:
/// the index is a cache, and the next cold load tries again.
pub fn maintain_in_background(state: &AppState, id: &SnapshotId, loaded: &Arc<AnalysedSnapshot>) {
    match loaded.take_index_work() {
        IndexWork::None => {}
        // The blob's size is read from its file (an upload's, on this machine).
        IndexWork::Write => start_write(state, id, None, loaded, None),
        IndexWork::Check => {
            let (state, id) = (state.clone(), id.clone());
            tokio::task::spawn_blocking(move || check_now(&state, &id));
        }
    }
}

/// Checks the columns of `id`'s stored index against their checksums; a corrupt index is
/// removed (here and beside the blob) and the snapshot dropped from the cache.
fn check_now(state: &AppState, id: &SnapshotId) {
    let started = std::time::Instant::now();
    match crate::index::verify_sections(&state.store.index_path(id)) {
        Ok(()) => {
            tracing::debug!(%id, ms = started.elapsed().as_millis() as u64, "stored index checked");
        }
        Err(error) => {
            tracing::warn!(%id, %error, "the stored index is corrupt: deleting it and reading the snapshot again on the next request");
            if let Err(error) = state.store.remove_index(id) {
                tracing::warn!(%id, %error, "deleting the corrupt stored index failed");
            }
            state.cache.remove(id);
        }
    }
}

/// Writes `loaded`'s stored index and publishes it for the other replicas, on a blocking thread
/// of its own, counted for a graceful shutdown, then drops `lease` (the parse lease, when the
/// parse held one). `blob_bytes`: the blob's size, else read from its file.
fn start_write(
    state: &AppState,
    id: &SnapshotId,
    blob_bytes: Option<u64>,
    loaded: &Arc<AnalysedSnapshot>,
    lease: Option<HeldLease>,
) {
    let store = state.store.clone();
    let index = store.index_path(id);
    // Counted before the thread starts, so a shutdown that begins now already waits for it.
    let running = state.index_writes.begin(id);
    let (id, loaded) = (id.clone(), loaded.clone());
    let write = move || {
        let _running = running;
        let _lease = lease;
        #[cfg(feature = "test-hooks")]
        wait_at_test_gate();
        let written = match blob_bytes {
            Some(bytes) => Ok(bytes),
            None => store
                .blob_file(&id)
                .and_then(|blob| Ok(std::fs::metadata(blob)?.len()))
                .map_err(std::io::Error::other),
        }
        .and_then(|bytes| write_now(&id, bytes, &index, &loaded))
        .and_then(|()| store.publish_index(&id).map_err(std::io::Error::other));
        if let Err(error) = written {
            tracing::warn!(%id, %error, "writing the stored index failed; the next cold load reads the snapshot again");
        }
    };
    // From a load's blocking thread or a request's task alike: both run inside the runtime.
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(write)),
        Err(_) => write(),
    }
}

/// How long a graceful shutdown waits for the stored index writes in flight: a write is the
/// size of the snapshot's columns (about 27 bytes per event, 851 MB for 32M events), written and
/// fsync'd in a few seconds, so this is room for a slow disk, not a wait anyone should see.
pub const INDEX_WRITE_GRACE: Duration = Duration::from_secs(30);

/// The stored index writes running, by snapshot, so a graceful shutdown can wait for them
/// ([`IndexWrites::finish`]): stopped during a write, the server would leave no index (the write
/// goes to a temporary name, renamed when whole) and read that snapshot again at its next start.
#[derive(Debug)]
pub struct IndexWrites {
    running: watch::Sender<Vec<SnapshotId>>,
}

impl Default for IndexWrites {
    fn default() -> Self {
        Self {
            running: watch::Sender::new(Vec::new()),
        }
    }
}

/// One write in flight; it ends (for [`IndexWrites::finish`]) when this is dropped, whether the
/// write succeeded, failed or panicked.
#[derive(Debug)]
pub struct RunningWrite {
    writes: Arc<IndexWrites>,
    id: SnapshotId,
}

impl Drop for RunningWrite {
    fn drop(&mut self) {
        self.writes.running.send_modify(|running| {
            if let Some(at) = running.iter().position(|id| *id == self.id) {
                running.swap_remove(at);
            }
        });
    }
}

impl IndexWrites {
    /// Counts a write of `id`'s index until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>, id: &SnapshotId) -> RunningWrite {
        self.running.send_modify(|running| running.push(id.clone()));
        RunningWrite {
            writes: self.clone(),
            id: id.clone(),
        }
    }

    /// The snapshots whose index is being written now.
    pub fn running(&self) -> Vec<SnapshotId> {
        self.running.borrow().clone()
    }

    /// Waits until no write runs, at most `limit`, saying in the log what it waits for; true
    /// when none is left. Writes started meanwhile are waited for too.
    pub async fn finish(&self, limit: Duration) -> bool {
        let running = self.running();
        if running.is_empty() {
            return true;
        }
        let ids: Vec<&str> = running.iter().map(SnapshotId::as_str).collect();
        tracing::info!(
            writes = running.len(),
            ids = %ids.join(","),
            limit_s = limit.as_secs_f64(),
            "waiting for stored index writes to finish before stopping"
        );
        let started = Instant::now();
        let mut changes = self.running.subscribe();
        match tokio::time::timeout(limit, changes.wait_for(Vec::is_empty)).await {
            Ok(_) => {
                tracing::info!(
                    ms = started.elapsed().as_millis() as u64,
                    "stored index writes finished"
                );
                true
            }
            Err(_) => {
                let left: Vec<String> = self.running().iter().map(ToString::to_string).collect();
                tracing::warn!(
                    ids = %left.join(","),
                    "stopping with stored index writes unfinished: those snapshots are read from their pickle at the next start"
                );
                false
            }
        }
    }
}

/// The environment variable of a test hook: with `SNAPVIEW_TEST_INDEX_WRITE_GATE=PATH`, each
/// index write first creates `PATH.waiting`, then waits (a minute at most) until `PATH` exists,
/// so a test can stop the server while a write is in flight without racing it (see
/// tests/server_cold.rs). Only in a build with the `test-hooks` feature (the tests' build): a
/// build for users never reads it.
#[cfg(feature = "test-hooks")]
pub const TEST_INDEX_WRITE_GATE: &str = "SNAPVIEW_TEST_INDEX_WRITE_GATE";

#[cfg(feature = "test-hooks")]
fn wait_at_test_gate() {
    let Some(gate) = std::env::var_os(TEST_INDEX_WRITE_GATE).map(std::path::PathBuf::from) else {
        return;
    };
    let mut waiting = gate.clone().into_os_string();
    waiting.push(".waiting");
    if let Err(error) = std::fs::write(&waiting, b"") {
        tracing::warn!(%error, "the index write gate (a test hook) cannot be marked");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !gate.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A stored index takes at most this many times the bytes of the pickle it was read from
/// (after decompression), plus [`INDEX_ALLOWANCE_BYTES`]. A real trace's pickle takes about 90
/// bytes per event and its index 27, so real files stay far below; a pickle that references one
/// entry again and again (2 bytes per event) would get an index 20 times its size. Past the
/// bound the index is not written (the log says why): the snapshot stays viewable, read from
/// its pickle at each cold load.
pub const INDEX_BYTES_PER_PICKLE_BYTE: u64 = 2;

/// What any stored index may take whatever its pickle's size (the JSON section, tables, a small
/// trace's columns).
pub const INDEX_ALLOWANCE_BYTES: u64 = 64 << 20;

/// Writes the index now (the caller's thread): what [`maintain_in_background`] runs. Skipped,
/// with a log line, when the index would take more than its bound (see
/// [`INDEX_BYTES_PER_PICKLE_BYTE`]).
pub fn write_now(
    id: &SnapshotId,
    blob_bytes: u64,
    index: &Path,
    loaded: &AnalysedSnapshot,
) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let identity = BlobIdentity {
        id: id.as_str(),
        bytes: blob_bytes,
    };
    // The index holds the columns and the analysis as they are in memory, so their size in
    // memory is the index's, known before a byte is written.
    let pickle_bytes = identity.bytes.max(loaded.snapshot.source.decoded_bytes);
    let bound = pickle_bytes
        .saturating_mul(INDEX_BYTES_PER_PICKLE_BYTE)
        .saturating_add(INDEX_ALLOWANCE_BYTES);
    let expected = loaded.approx_bytes();
    if expected > bound {
        tracing::warn!(
            %id,
            pickle_bytes,
            index_bytes = expected,
            bound,
            "not writing the stored index: it would take more than {INDEX_BYTES_PER_PICKLE_BYTE} times the pickle's bytes plus {} MiB; the snapshot is read from its pickle at each cold load",
            INDEX_ALLOWANCE_BYTES >> 20
        );
        return Ok(());
    }
    let bytes = crate::index::write(
        index,
        identity,
        &loaded.snapshot,
        &loaded.analysis,
        &loaded.summary,
        loaded.rules_fingerprint,
    )?;
    super::ops::index_written(started.elapsed());
    tracing::info!(%id, bytes, ms = started.elapsed().as_millis() as u64, "stored index written");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> SnapshotId {
        SnapshotId::parse(&format!("{n:016x}")).expect("id")
    }

    #[tokio::test]
    async fn finishing_waits_for_every_write_in_flight_and_no_longer_than_its_limit() {
        let writes = Arc::new(IndexWrites::default());
        assert!(writes.finish(Duration::ZERO).await, "nothing to wait for");
        let first = writes.begin(&id(1));
        let second = writes.begin(&id(2));
        // The same snapshot twice (an upload and a cold load): each write counts.
        let again = writes.begin(&id(1));
        assert_eq!(writes.running().len(), 3);
        assert!(
            !writes.finish(Duration::from_millis(20)).await,
            "gives up after its limit"
        );
        drop(again);
        assert_eq!(writes.running(), vec![id(1), id(2)]);
        let ending = tokio::spawn(async move {
            drop(first);
            tokio::task::yield_now().await;
            drop(second);
        });
        assert!(
            writes.finish(Duration::from_secs(20)).await,
            "ends when the last write does"
        );
        ending.await.expect("join");
        assert!(writes.running().is_empty());
    }
}
