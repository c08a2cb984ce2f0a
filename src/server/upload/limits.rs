//! What bounds an upload's client: its address's share of the upload slots, and the pace its
//! bytes must keep.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Waiting for an upload's bytes that is forgiven before `--min-upload-rate` applies (a client
/// starting up, TCP's slow start, a pause on a busy laptop).
pub const UPLOAD_RATE_GRACE: Duration = Duration::from_secs(10);

/// Uploads being received per client address, at most `limit` each (0: no limit).
pub struct ClientSlots {
    limit: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl ClientSlots {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            held: Mutex::default(),
        }
    }

    /// One of `client`'s slots, or `None` when it holds them all.
    pub(super) fn take(self: &Arc<Self>, client: IpAddr) -> Option<ClientSlot> {
        if self.limit == 0 {
            return Some(ClientSlot(None));
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(client).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot(Some((self.clone(), client))))
    }
}

/// An upload slot of one client address, given back on drop.
pub(super) struct ClientSlot(Option<(Arc<ClientSlots>, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let Some((slots, client)) = self.0.take() else {
            return;
        };
        let mut held = slots.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&client) {
            *count -= 1;
            if *count == 0 {
                held.remove(&client);
            }
        }
    }
}

/// How fast an upload's bytes must keep arriving.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    /// The longest wait for the next bytes (`--body-timeout`).
    pub(super) stall_timeout: Duration,
    /// Bytes per second waited, once the wait passes [`UPLOAD_RATE_GRACE`]; 0: none.
    pub(super) min_bytes_per_second: u64,
}

impl Pace {
    /// How long to wait for the next bytes having received `size` bytes over `waited`, and
    /// whether that limit is the rate's (else the stall timeout's).
    pub(super) fn next_wait(&self, size: u64, waited: Duration) -> (Duration, bool) {
        if self.min_bytes_per_second == 0 {
            return (self.stall_timeout, false);
        }
        let earned = Duration::from_secs_f64(size as f64 / self.min_bytes_per_second as f64)
            .max(UPLOAD_RATE_GRACE)
            .saturating_sub(waited);
        if earned < self.stall_timeout {
            (earned, true)
        } else {
            (self.stall_timeout, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_applies_after_the_grace_and_grows_with_what_arrived() {
        let pace = Pace {
            stall_timeout: Duration::from_secs(30),
            min_bytes_per_second: 1000,
        };
        // Within the grace, a byte buys nothing more: the wait ends with the grace.
        assert_eq!(
            pace.next_wait(1, Duration::from_secs(4)),
            (Duration::from_secs(6), true)
        );
        // Past it, every 1000 bytes buy a second of waiting.
        assert_eq!(
            pace.next_wait(15_000, Duration::from_secs(12)),
            (Duration::from_secs(3), true)
        );
        assert_eq!(
            pace.next_wait(1_000, Duration::from_secs(12)),
            (Duration::ZERO, true)
        );
        // The stall timeout bounds a wait however much was sent; a rate of 0 is no rate.
        assert_eq!(
            pace.next_wait(1 << 30, Duration::from_secs(1)),
            (Duration::from_secs(30), false)
        );
        let no_rate = Pace {
            min_bytes_per_second: 0,
            ..pace
        };
        assert_eq!(
            no_rate.next_wait(0, Duration::from_secs(100)),
            (Duration::from_secs(30), false)
        );
    }
}
