//! Work that follows a device's trace while the loader is still reading it.
//!
//! A long trace is written into its columns on a second thread (see [`super::compact`]); a pass
//! over the events that needs only the trace is cheapest right there, while the new rows are in
//! cache. The model does not know what that pass computes: the loader runs any
//! [`TraceFollower`] it is given and hands the result back beside the [`Snapshot`], so the layer
//! that defined the follower takes it from there (the replay's event pass, in `analysis`).
//!
//! [`Snapshot`]: super::Snapshot

use super::Trace;

/// A pass over a trace that can take its events a batch at a time, as they are read.
pub trait TraceFollower: Default + Send + std::fmt::Debug + 'static {
    /// Takes the events of `trace` appended since the last call. Unless `complete`, more events
    /// may follow (a pass may hold back a trailing event that the next one could complete).
    fn advance(&mut self, trace: &Trace, complete: bool);

    /// Events taken so far.
    fn events(&self) -> usize;
}

/// No pass: loading the model only.
impl TraceFollower for () {
    fn advance(&mut self, _trace: &Trace, _complete: bool) {}

    fn events(&self) -> usize {
        0
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
