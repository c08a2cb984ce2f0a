//! The limit on failed token checks (`--max-token-failures`): an address that sends wrong tokens
//! faster than the limit gets 429 for every token it sends, right or wrong, until it slows down,
//! so a token cannot be found by trying; other addresses (and session cookies) are unaffected.
//!
//! The pace is counted by `governor` (GCRA, keyed by client). A check is refused *before* the
//! token is compared, else a 429 for a wrong token and a 200 for the right one would still
//! tell them apart at any speed; so besides the counter this keeps, per client out of tries,
//! when it may try again.

use governor::clock::DefaultClock;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// `--max-token-failures`' default: wrong tokens a client may send per minute (all at once, or
/// spread out); a person mistyping or a script with a stale token never gets near it.
pub const DEFAULT_MAX_TOKEN_FAILURES: u32 = 20;

/// Failures between two sweeps of the clients that have not failed for a while, so a flood
/// from many addresses costs memory for the recent ones only.
const SWEEP_EVERY: u32 = 1024;

/// Failures per client, telling after each how many tries are left.
type FailureCounter =
    RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, DefaultClock, StateInformationMiddleware>;

/// Failed token checks per client, and the clients out of tries.
pub(super) struct FailedChecks {
    failures: FailureCounter,
    /// Clients out of tries, and when they may send a token again.
    blocked: Mutex<HashMap<IpAddr, Instant>>,
    since_sweep: AtomicU32,
}

impl FailedChecks {
    /// `None` for a limit of 0: failures are not limited.
    pub(super) fn per_minute(limit: u32) -> Option<Self> {
        let limit = NonZeroU32::new(limit)?;
        Some(Self {
            failures: RateLimiter::keyed(Quota::per_minute(limit))
                .with_middleware::<StateInformationMiddleware>(),
            blocked: Mutex::new(HashMap::new()),
            since_sweep: AtomicU32::new(0),
        })
    }

    /// `Err(wait)` while `peer` is out of tries: its token must not even be compared.
    pub(super) fn may_try(&self, peer: Option<IpAddr>) -> Result<(), Duration> {
        let client = client_of(peer);
        let now = Instant::now();
        let blocked = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        match blocked.get(&client) {
            Some(&until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Counts a wrong token from `peer`; if that was its last try, it waits for the next.
    pub(super) fn failed(&self, peer: Option<IpAddr>) {
        let client = client_of(peer);
        let now = Instant::now();
        let until = match self.failures.check_key(&client) {
            // Tries are left: the next failure may come at once.
            Ok(state) if state.remaining_burst_capacity() > 0 => None,
            // That was the last one: the next comes with the next replenished try.
            Ok(state) => Some(now + state.quota().replenish_interval()),
            Err(not_until) => Some(not_until.earliest_possible()),
        };
        self.sweep_now_and_then(now);
        if let Some(until) = until {
            self.blocked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(client, until);
        }
    }

    fn sweep_now_and_then(&self, now: Instant) {
        if !self
            .since_sweep
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(SWEEP_EVERY)
        {
            return;
        }
        self.failures.retain_recent();
        self.failures.shrink_to_fit();
        self.blocked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, until| *until > now);
    }
}

/// The key a client's failures are counted under: as for the per-client connection limits (an
/// IPv6 client by its /64). Requests that did not come over a socket share one key.
fn client_of(peer: Option<IpAddr>) -> IpAddr {
    peer.map_or(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        crate::server::connections::client_of,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_out_of_tries_waits_and_others_do_not() {
        let checks = FailedChecks::per_minute(3).expect("a limit");
        let attacker = Some(IpAddr::from([192, 0, 2, 1]));
        let honest = Some(IpAddr::from([192, 0, 2, 2]));
        for _ in 0..3 {
            assert!(checks.may_try(attacker).is_ok());
            checks.failed(attacker);
        }
        let wait = checks
            .may_try(attacker)
            .expect_err("the third was the last");
        assert!(wait <= Duration::from_secs(20), "{wait:?}");
        assert!(checks.may_try(honest).is_ok());
        // One IPv6 host is its /64: another address in it shares the count.
        let (v6, same_64) = (
            "2001:db8:1:2::1".parse().ok(),
            "2001:db8:1:2::9".parse().ok(),
        );
        for _ in 0..3 {
            checks.failed(v6);
        }
        assert!(checks.may_try(same_64).is_err());
        assert!(FailedChecks::per_minute(0).is_none(), "0: no limit");
    }
}
