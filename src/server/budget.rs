//! One memory budget for the work in flight across the whole server (`--parse-memory`): every
//! parse (uploads, cold loads) and every re-analysis (`PUT .../rules`) holds a [`Charge`] on
//! it, grown as the events it must hold are found, and released when the work ends (what is
//! kept afterwards is the analysis cache's, under `--cache`).
//!
//! A charge that does not fit waits for others to end, at most [`PARSE_MEMORY_WAIT`]; then, or
//! at once when every other holder is waiting too (nobody would free anything), it fails with
//! [`Refusal::Busy`], which the client sees as a 503 to retry. A charge larger than the whole
//! budget fails at once with [`Refusal::TooLarge`] (413). A parse thus never takes the process
//! past the budget, and never aborts it.

use crate::snapshot::{EventGate, Refusal};
use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What reading and analysing one event costs at the peak of a load, all parts together: the
/// trace's columns (16 bytes), the replay (12), the allocations (about 10 per event), the
/// lifetime and view indexes, the memo and the column thread's batches while decoding, and
/// a trace whose entries are shared its list of references (8) and the copy made from it.
/// Measured: 167 MB for the 3.2M events of `gpt2_huge_trace` (52 per event), 1.43 GB for the
/// 32M of its ten-times copy (45), 50 for a trace of one shared alloc and free, and 83 for one
/// of one shared alloc (every event an allocation).
pub const BYTES_PER_EVENT: u64 = 96;

/// The longest a parse waits for memory other parses hold before it answers busy.
pub const PARSE_MEMORY_WAIT: Duration = Duration::from_secs(20);

/// The server's budget for work in flight.
#[derive(Debug)]
pub struct ParseBudget {
    limit_bytes: u64,
    wait: Duration,
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    used_bytes: u64,
    /// Charges alive (holding memory or not).
    holders: usize,
    /// Charges waiting for memory now.
    waiting: usize,
}

impl ParseBudget {
    pub fn new(limit_bytes: u64) -> Self {
        Self::with_wait(limit_bytes, PARSE_MEMORY_WAIT)
    }

    pub fn with_wait(limit_bytes: u64, wait: Duration) -> Self {
        Self {
            limit_bytes,
            wait,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        }
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Bytes charged now, by every holder together.
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A charge of nothing yet, for one piece of work (`what` names it in refusals).
    pub fn charge(self: &Arc<Self>, what: &'static str) -> Charge {
        self.lock().holders += 1;
        Charge {
            budget: self.clone(),
            held_bytes: Cell::new(0),
            what,
        }
    }
}

/// One piece of work's share of a [`ParseBudget`]; released when dropped. Used by the thread
/// doing the work (it is told the events it finds through [`EventGate`]).
#[derive(Debug)]
pub struct Charge {
    budget: Arc<ParseBudget>,
    held_bytes: Cell<u64>,
    what: &'static str,
}

impl Charge {
    /// Grows the charge to `bytes` (never shrinks it), waiting for room as the budget allows.
    pub fn grow_to(&self, bytes: u64) -> Result<(), Refusal> {
        let held = self.held_bytes.get();
        if bytes <= held {
            return Ok(());
        }
        let budget = &self.budget;
        if bytes > budget.limit_bytes {
            return Err(Refusal::TooLarge(format!(
                "{} needs more memory than this server allows for reading at once ({} of --parse-memory {})",
                self.what,
                crate::format::bytes(bytes),
                crate::format::bytes(budget.limit_bytes)
            )));
        }
        let more = bytes - held;
        let deadline = Instant::now() + budget.wait;
        let mut state = budget.lock();
        loop {
            if state.used_bytes + more <= budget.limit_bytes {
                state.used_bytes += more;
                self.held_bytes.set(bytes);
                return Ok(());
            }
            let now = Instant::now();
            // When every other holder waits as well, nothing will be freed: this one gives up
            // at once (and frees what it holds), so the others can go on.
            if state.waiting + 1 >= state.holders || now >= deadline {
                tracing::info!(
                    what = self.what,
                    wanted = bytes,
                    used = state.used_bytes,
                    limit = budget.limit_bytes,
                    "the parse memory budget is exhausted: refusing"
                );
                return Err(Refusal::Busy(format!(
                    "the server is busy reading other snapshots; retry in a few seconds ({} needs {}, others hold {} of --parse-memory {})",
                    self.what,
                    crate::format::bytes(bytes),
                    crate::format::bytes(state.used_bytes.saturating_sub(held)),
                    crate::format::bytes(budget.limit_bytes)
                )));
            }
            state.waiting += 1;
            // Others re-check whether everyone now waits.
            budget.freed.notify_all();
            state = budget
                .freed
                .wait_timeout(state, deadline - now)
                .map(|(state, _)| state)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            state.waiting -= 1;
        }
    }

    /// Bytes this charge holds.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes.get()
    }
}

impl EventGate for Charge {
    fn events_found(&self, events: u64) -> Result<(), Refusal> {
        self.grow_to(events.saturating_mul(BYTES_PER_EVENT))
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        state.used_bytes = state.used_bytes.saturating_sub(self.held_bytes.get());
        state.holders -= 1;
        drop(state);
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_grow_within_the_limit_and_are_released_on_drop() {
        let budget = Arc::new(ParseBudget::with_wait(1000, Duration::from_millis(10)));
        let a = budget.charge("a");
        a.grow_to(600).expect("fits");
        a.grow_to(500).expect("never shrinks");
        assert_eq!(budget.used_bytes(), 600);
        let b = budget.charge("b");
        // `a` runs (it is not waiting), so `b` waits its time, then is told to retry.
        assert!(matches!(b.grow_to(500), Err(Refusal::Busy(_))));
        drop(a);
        b.grow_to(500).expect("room once a ended");
        assert!(matches!(b.grow_to(1001), Err(Refusal::TooLarge(_))));
        drop(b);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn a_waiting_charge_goes_on_when_another_ends_and_all_waiting_never_deadlocks() {
        let budget = Arc::new(ParseBudget::with_wait(1000, Duration::from_secs(20)));
        let a = budget.charge("a");
        a.grow_to(800).expect("fits");
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let b = budget.charge("b");
                let started = Instant::now();
                b.grow_to(500).map(|()| started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(a);
        let waited = waiter.join().expect("join").expect("b gets its memory");
        assert!(waited < Duration::from_secs(10), "{waited:?}");

        // Two that hold part each and both want more: one gives up at once, the other goes on.
        let (x, y) = (budget.charge("x"), budget.charge("y"));
        x.grow_to(400).expect("fits");
        y.grow_to(400).expect("fits");
        let other = std::thread::spawn(move || {
            let result = y.grow_to(900);
            drop(y);
            result
        });
        let mine = x.grow_to(900);
        drop(x);
        let theirs = other.join().expect("join");
        assert!(
            mine.is_ok() != theirs.is_ok(),
            "exactly one goes on: {mine:?} {theirs:?}"
        );
        assert_eq!(budget.used_bytes(), 0);
    }
}
