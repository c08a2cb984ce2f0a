//! One replica at a time on a piece of work, through the store's leases
//! ([`Store::try_lease`]): parsing a snapshot (`parse:<id>`, see `stored_index::ColdLoad`) and
//! the periodic jobs (`purge`, see `server::run_periodically`).
//!
//! A lease is taken for a time to live and renewed by a small thread every third of it while
//! the work runs ([`HeldLease`]); a holder that dies (kill -9, a box gone) stops renewing, and
//! the lease expires at most one time to live later, when another replica takes it over.
//!
//! Leases are held per process, not per thread: two pieces of work of one process under the
//! same name (a rules change and a view loading the same cold snapshot) both hold it, and the
//! first to finish releases it while the other still works; the other's next renewal takes it
//! again unless another replica took it in between, which then does the same work twice. That
//! costs time, never correctness: an index is written by rename and a purge row by row.

use super::store::{Store, StoreError};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a parse lease lives unless renewed: the longest another replica waits for the
/// snapshot after its holder died before taking it over. Renewed every third of it, so a
/// renewal delayed by a busy database or a paused process up to 20 s does not lose it.
pub const PARSE_LEASE_TTL: Duration = Duration::from_secs(30);

/// How often a replica waiting for another's parse looks for the index it will publish and for
/// the lease to come free.
pub const PARSE_WAIT_POLL: Duration = Duration::from_millis(250);

/// The longest a replica waits for another's parse (renewed all along) before parsing the
/// snapshot itself anyway: far past the minute the largest snapshot `--max-events` allows takes,
/// so it is reached only when the holder is stuck (a hung disk, a store that stopped answering
/// it but not us).
pub const PARSE_WAIT_LIMIT: Duration = Duration::from_secs(600);

/// The environment variable of a test hook: `SNAPVIEW_TEST_LEASE_TTL_MS=N` makes the parse
/// lease live `N` ms (and polls every tenth of that, at most [`PARSE_WAIT_POLL`]), so a test of
/// a holder killed mid-parse waits a second, not 30 (tests/replicas_local.rs). Only in a build
/// with the `test-hooks` feature (the tests' build): a build for users never reads it.
#[cfg(feature = "test-hooks")]
pub const TEST_LEASE_TTL_MS: &str = "SNAPVIEW_TEST_LEASE_TTL_MS";

/// How a lease is held and waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// The lease's time to live; renewed every third of it.
    pub ttl: Duration,
    /// How often a waiter looks again.
    pub poll: Duration,
    /// The longest a waiter waits before working without the lease.
    pub wait_limit: Duration,
}

impl LeaseTiming {
    /// The timing of parse leases: [`PARSE_LEASE_TTL`], [`PARSE_WAIT_POLL`],
    /// [`PARSE_WAIT_LIMIT`] (the time to live set by [`TEST_LEASE_TTL_MS`] in a test build).
    pub fn for_parse() -> Self {
        let timing = Self {
            ttl: PARSE_LEASE_TTL,
            poll: PARSE_WAIT_POLL,
            wait_limit: PARSE_WAIT_LIMIT,
        };
        #[cfg(feature = "test-hooks")]
        if let Some(ms) = std::env::var(TEST_LEASE_TTL_MS)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .filter(|&ms| ms > 0)
        {
            let ttl = Duration::from_millis(ms);
            return Self {
                ttl,
                poll: (ttl / 10).min(PARSE_WAIT_POLL),
                ..timing
            };
        }
        timing
    }
}

/// A lease this process holds, renewed every third of its time to live by a thread of its own
/// until dropped; dropping it stops the renewals and releases the lease (a failed release is
/// logged: the lease then expires by itself).
pub struct HeldLease {
    name: String,
    store: Arc<dyn Store>,
    /// Dropped to stop the renewals (the renewer waits on the other end).
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLease")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl HeldLease {
    /// Takes the lease `name` for `ttl` when it is free, expired or this process's already;
    /// `None` when another process holds it.
    pub fn try_take(
        store: &Arc<dyn Store>,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<Self>, StoreError> {
        if !store.try_lease(name, ttl)? {
            return Ok(None);
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let renewing = store.clone();
        let lease = name.to_owned();
        let every = ttl / 3;
        let renewer = std::thread::Builder::new()
            .name("snapview-lease".to_owned())
            .spawn(move || {
                // Ends when the sender is dropped (a message is never sent).
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    match renewing.try_lease(&lease, ttl) {
                        Ok(true) => {}
                        Ok(false) => tracing::warn!(
                            lease,
                            "a lease expired before it was renewed and another server took it: this work may be done twice"
                        ),
                        Err(error) => {
                            tracing::warn!(lease, %error, "renewing a lease failed; trying again");
                        }
                    }
                }
            });
        let renewer = match renewer {
            Ok(renewer) => Some(renewer),
            Err(error) => {
                // Held without renewals: it lasts one time to live, then another server may
                // repeat the work.
                tracing::warn!(lease = name, %error, "the thread renewing a lease cannot start");
                None
            }
        };
        Ok(Some(Self {
            name: name.to_owned(),
            store: store.clone(),
            stop: Some(stop),
            renewer,
        }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            // Promptly: the renewer wakes on the disconnect; at most one renewal is in flight.
            let _ = renewer.join();
        }
        if let Err(error) = self.store.release_lease(&self.name) {
            tracing::warn!(lease = %self.name, %error, "releasing a lease failed; it expires by itself");
        }
    }
}

/// What [`find_or_lease`] came to.
#[derive(Debug)]
pub enum Waited<T> {
    /// What the work makes was found (made by another replica, or before).
    Found(T),
    /// Not found, and the lease is this process's: do the work, then drop the lease.
    Holding(HeldLease),
    /// Not found, and the lease was not had: the store could not be asked, or another
    /// replica held it past the wait limit. Do the work without it.
    Without,
}

/// Looks for what a piece of work makes (`find`), else takes the lease `name` to make it;
/// while another replica holds the lease, waits for it to make it: looks again every
/// `timing.poll`, until `find` finds it, the lease comes free or expires (taken then), or
/// `timing.wait_limit` passes. `waiting` is called once, when the wait begins (the progress a
/// status request sees). Runs on a blocking thread.
pub fn find_or_lease<T>(
    store: &Arc<dyn Store>,
    name: &str,
    timing: LeaseTiming,
    mut find: impl FnMut() -> Option<T>,
    waiting: impl FnOnce(),
) -> Waited<T> {
    let started = Instant::now();
    let mut waiting = Some(waiting);
    loop {
        if let Some(found) = find() {
            if waiting.is_none() {
                after_waiting(name, started, "another server finished the work waited for");
            }
            return Waited::Found(found);
        }
        match HeldLease::try_take(store, name, timing.ttl) {
            Ok(Some(held)) => {
                // The holder before may have finished between the look and the take.
                if let Some(found) = find() {
                    return Waited::Found(found);
                }
                if waiting.is_none() {
                    after_waiting(
                        name,
                        started,
                        "the lease came free (its holder finished without result, or died): doing the work here",
                    );
                }
                return Waited::Holding(held);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(lease = name, %error, "the lease cannot be taken: doing the work without it");
                return Waited::Without;
            }
        }
        if started.elapsed() >= timing.wait_limit {
            tracing::warn!(
                lease = name,
                waited_s = started.elapsed().as_secs(),
                "another server has held this lease past the wait limit: doing the work here anyway"
            );
            return Waited::Without;
        }
        if let Some(waiting) = waiting.take() {
            tracing::info!(
                lease = name,
                "another server is doing this work: waiting for it"
            );
            waiting();
        }
        std::thread::sleep(timing.poll);
    }
}

/// How a wait for the lease `name`, begun at `started`, ended, in the log.
fn after_waiting(name: &str, started: Instant, how: &str) {
    tracing::info!(
        lease = name,
        ms = started.elapsed().as_millis() as u64,
        "{how}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::store::{StoreOptions, open};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Two replicas: two stores (two lease holders) on one folder.
    fn replicas() -> (tempfile::TempDir, Arc<dyn Store>, Arc<dyn Store>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let a: Arc<dyn Store> = Arc::new(open(&StoreOptions::local(dir.path())).expect("a"));
        let b: Arc<dyn Store> = Arc::new(open(&StoreOptions::local(dir.path())).expect("b"));
        (dir, a, b)
    }

    /// The lease `parse:x`, taken by `store` for a minute.
    fn held_by(store: &Arc<dyn Store>) -> HeldLease {
        HeldLease::try_take(store, "parse:x", Duration::from_secs(60))
            .expect("the store answers")
            .expect("free")
    }

    fn timing(ttl_ms: u64, wait_limit_ms: u64) -> LeaseTiming {
        LeaseTiming {
            ttl: Duration::from_millis(ttl_ms),
            poll: Duration::from_millis(10),
            wait_limit: Duration::from_millis(wait_limit_ms),
        }
    }

    #[test]
    fn a_free_lease_is_taken_at_once_and_released_on_drop() {
        let (_dir, a, b) = replicas();
        let waits = AtomicUsize::new(0);
        let got = find_or_lease(
            &a,
            "parse:x",
            timing(60_000, 60_000),
            || None::<()>,
            || {
                waits.fetch_add(1, Ordering::SeqCst);
            },
        );
        let Waited::Holding(held) = got else {
            panic!("not held: {got:?}")
        };
        assert_eq!(waits.load(Ordering::SeqCst), 0, "no wait for a free lease");
        assert!(!b.try_lease("parse:x", Duration::from_secs(60)).expect("b"));
        drop(held);
        assert!(
            b.try_lease("parse:x", Duration::from_secs(60)).expect("b"),
            "released"
        );
    }

    #[test]
    fn what_the_holder_makes_ends_the_wait_without_taking_the_lease() {
        let (_dir, a, b) = replicas();
        let held = held_by(&a);
        let looks = AtomicUsize::new(0);
        let waits = AtomicUsize::new(0);
        // Found on the fourth look: the holder published meanwhile.
        let got = find_or_lease(
            &b,
            "parse:x",
            timing(60_000, 60_000),
            || (looks.fetch_add(1, Ordering::SeqCst) >= 3).then_some("index"),
            || {
                waits.fetch_add(1, Ordering::SeqCst);
            },
        );
        assert!(matches!(got, Waited::Found("index")), "{got:?}");
        assert_eq!(waits.load(Ordering::SeqCst), 1, "told once that it waits");
        drop(held);
    }

    #[test]
    fn a_lease_renewed_outlives_its_ttl_and_one_not_renewed_is_taken_over() {
        let (_dir, a, b) = replicas();
        let ttl = Duration::from_millis(300);
        let held = HeldLease::try_take(&a, "parse:x", ttl)
            .expect("a")
            .expect("free");
        std::thread::sleep(ttl * 3);
        assert!(
            !b.try_lease("parse:x", ttl).expect("b"),
            "renewed: still a's after three times its ttl"
        );
        drop(held);
        // A holder that dies: taken, never renewed nor released.
        assert!(a.try_lease("parse:y", ttl).expect("a"));
        let started = Instant::now();
        let got = find_or_lease(&b, "parse:y", timing(300, 60_000), || None::<()>, || {});
        assert!(matches!(got, Waited::Holding(_)), "{got:?}");
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "waited for the expiry"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "taken over within about one ttl"
        );
    }

    #[test]
    fn past_the_wait_limit_the_work_is_done_without_the_lease() {
        let (_dir, a, b) = replicas();
        let held = held_by(&a);
        let started = Instant::now();
        let got = find_or_lease(&b, "parse:x", timing(60_000, 200), || None::<()>, || {});
        assert!(matches!(got, Waited::Without), "{got:?}");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(held);
    }

    #[test]
    fn a_lease_of_this_process_is_not_waited_for() {
        let (_dir, a, _b) = replicas();
        let first = held_by(&a);
        let got = find_or_lease(
            &a,
            "parse:x",
            timing(60_000, 60_000),
            || None::<()>,
            || panic!("waited for itself"),
        );
        assert!(matches!(got, Waited::Holding(_)), "{got:?}");
        drop(first);
    }
}
