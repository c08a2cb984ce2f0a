//! The count of trace events a load has found, against its limit and gate.

use crate::pickle::PickleError;
use crate::snapshot::load::{EVENTS_PER_CHARGE, EventGate, LoadError};

/// How many trace events a load has found, as the model will hold them: every entry dict
/// compacted is a row, and every reference to a row stored in a list is an event of some
/// device's trace. A pickle may reference one memoized entry millions of times (2 bytes of
/// input each, 16 and more of model), so the references count, not the bytes or the rows.
pub(in crate::snapshot) struct EventCount<'g> {
    /// Rows made from entry dicts.
    pub(super) rows: u64,
    /// Event records appended to lists (taken as a run or stored).
    pub(super) references: u64,
    /// At this many events, the limit and the gate are asked again.
    next_check: u64,
    max_events: u64,
    gate: Option<&'g dyn EventGate>,
    /// Why decoding was stopped, once it was.
    stop: Option<LoadError>,
}

impl std::fmt::Debug for EventCount<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EventCount({} rows, {} references, max {})",
            self.rows, self.references, self.max_events
        )
    }
}

impl Default for EventCount<'_> {
    fn default() -> Self {
        Self {
            rows: 0,
            references: 0,
            next_check: EVENTS_PER_CHARGE,
            max_events: u64::MAX,
            gate: None,
            stop: None,
        }
    }
}

impl<'g> EventCount<'g> {
    pub(in crate::snapshot) fn new(max_events: u64, gate: Option<&'g dyn EventGate>) -> Self {
        Self {
            max_events,
            gate,
            ..Self::default()
        }
    }

    /// Events found so far: an entry referenced by several lists is several events, and a
    /// row no list holds (yet) costs its columns all the same.
    #[inline]
    fn found(&self) -> u64 {
        self.rows.max(self.references)
    }

    /// Checks `events` against the limit and the gate; false (and the reason kept) when the load
    /// must stop.
    pub(in crate::snapshot) fn check(&mut self, events: u64) -> Result<(), LoadError> {
        if let Some(stop) = &self.stop {
            return Err(clone_stop(stop));
        }
        let result = if events > self.max_events {
            Err(LoadError::TooManyEvents {
                limit: self.max_events,
            })
        } else {
            match self.gate {
                Some(gate) => gate.events_found(events).map_err(LoadError::Refused),
                None => Ok(()),
            }
        };
        if let Err(stop) = &result {
            self.stop = Some(clone_stop(stop));
        }
        result
    }

    /// Counts what the machine just handed over; `Err(Stopped)` once a limit is reached.
    #[inline]
    pub(super) fn counted(&mut self) -> Result<(), PickleError> {
        let found = self.found();
        if found < self.next_check && self.stop.is_none() {
            return Ok(());
        }
        self.next_check = found.saturating_add(EVENTS_PER_CHARGE);
        self.check(found).map_err(|_| PickleError::Stopped)
    }

    pub(in crate::snapshot) fn take_stop(&mut self) -> Option<LoadError> {
        self.stop.take()
    }
}

/// A copy of a stop reason (only the two kinds a count makes).
fn clone_stop(stop: &LoadError) -> LoadError {
    match stop {
        LoadError::TooManyEvents { limit } => LoadError::TooManyEvents { limit: *limit },
        LoadError::Refused(refusal) => LoadError::Refused(refusal.clone()),
        other => LoadError::Pickle(PickleError::NotASnapshot(other.to_string())),
    }
}
