//! Work that follows a device's trace while the loader is still reading it.
//!
//! A long trace is written into its columns on a second thread (see [`super::compact`]); a pass
//! over the events that needs only the trace is cheapest right there, while the new rows are in
//! cache. The model does not know what that pass computes: the loader runs any
//! [`TraceFollower`] it is given and hands the result back beside the [`Snapshot`], so the layer
//! that defined the follower takes it from there (the replay's event pass, in `analysis`).
//!
//! [`Snapshot`]: super::Snapshot

use super::{ActionCode, StackId, Trace};

/// What a follower reads of one trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowedEvent {
    pub action: ActionCode,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub stack: StackId,
}

/// A pass over a trace that takes its events a batch at a time, as they are read. It sees the
/// events themselves, not the trace's columns, so it runs on a thread of its own beside the one
/// that writes them.
pub trait TraceFollower: Default + Send + std::fmt::Debug + 'static {
    /// Whether the pass does anything (the loader starts no thread for one that does not).
    const FOLLOWS: bool = true;

    /// Takes the next events of the trace, in order.
    fn take(&mut self, events: impl Iterator<Item = FollowedEvent>);

    /// No event follows (a pass may hold back a trailing event that the next one could
    /// complete until then).
    fn finish(&mut self);

    /// Events done so far (after [`TraceFollower::finish`], every one taken).
    fn events(&self) -> usize;
}

/// No pass: loading the model only.
impl TraceFollower for () {
    const FOLLOWS: bool = false;

    fn take(&mut self, _events: impl Iterator<Item = FollowedEvent>) {}

    fn finish(&mut self) {}

    fn events(&self) -> usize {
        0
    }
}

impl Trace {
    /// Events `from..` as a [`TraceFollower`] takes them.
    pub fn followed_events(&self, from: usize) -> impl Iterator<Item = FollowedEvent> + '_ {
        (from..self.len()).map(|event| FollowedEvent {
            action: self.action[event],
            addr: self.addr.get(event),
            size: self.size.get(event),
            stream: self.stream(event),
            stack: self.stack.get(event),
        })
    }
}

/// What a follower made of one device's trace, as loaded: it saw every event of
/// `snapshot.trace(device)` when `follower.events()` equals that trace's length.
#[derive(Debug)]
pub struct FollowerOutcome<F> {
    /// The device whose trace the follower saw (a file's events are all one device's in every
    /// file torch writes; the loader hands no result back otherwise).
    pub device: usize,
    /// The follower, after the last event.
    pub follower: F,
}
