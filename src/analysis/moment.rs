//! A moment of a device's history, as the views and the compare ask for one: before the first
//! event, right after a given event, at the peak, or when the snapshot was taken.
//!
//! The analysis functions take the resolved form, `Option<usize>` (`None`: before the first
//! event); this type is what a request says before it is resolved against a trace, so "the
//! start" has one spelling (`start`, or `-1` as the pages' URLs have always written it).

use super::replay::Replay;
use crate::snapshot::Trace;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Moment {
    /// Before the first event.
    Start,
    /// Right after event `n` (past the last event means the last).
    Event(usize),
    /// Right after the event at which the most memory was allocated.
    Peak,
    /// After the last event: what the snapshot itself holds.
    End,
}

impl Moment {
    /// The event after which the moment is (`None`: before the first event).
    pub fn resolve(self, trace: &Trace, replay: &Replay) -> Option<usize> {
        let last = trace.len().checked_sub(1);
        match self {
            Moment::Start => None,
            Moment::Event(n) => last.map(|last| n.min(last)),
            Moment::Peak => replay.peak_allocated(trace).event_index,
            Moment::End => last,
        }
    }
}

impl FromStr for Moment {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "start" | "-1" => Ok(Moment::Start),
            "peak" => Ok(Moment::Peak),
            "end" => Ok(Moment::End),
            number => number.parse().map(Moment::Event).map_err(|_| {
                format!(
                    "{text:?} is not a moment: an event number, -1 or start (before the first event), peak or end"
                )
            }),
        }
    }
}

impl TryFrom<String> for Moment {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Moment::Start => f.write_str("start"),
            Moment::Event(n) => write!(f, "{n}"),
            Moment::Peak => f.write_str("peak"),
            Moment::End => f.write_str("end"),
        }
    }
}

impl From<Moment> for String {
    fn from(moment: Moment) -> String {
        moment.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_to_one_moment_and_prints_back() {
        assert_eq!("-1".parse(), Ok(Moment::Start));
        assert_eq!("start".parse(), Ok(Moment::Start));
        assert_eq!("12".parse(), Ok(Moment::Event(12)));
        assert_eq!("peak".parse(), Ok(Moment::Peak));
        assert_eq!("end".parse(), Ok(Moment::End));
        for bad in ["-2", "1.5", "", "later"] {
            let error = bad.parse::<Moment>().expect_err(bad);
            assert!(error.contains("not a moment"), "{error}");
        }
        for moment in [Moment::Start, Moment::Event(3), Moment::Peak, Moment::End] {
            assert_eq!(moment.to_string().parse(), Ok(moment));
        }
    }

    #[test]
    fn moments_resolve_against_the_trace() {
        let (snapshot, analysis) = crate::analysis::fixtures::analysed("mlp_small.pickle");
        let device = &analysis.devices[0];
        let trace = snapshot.trace(device.device);
        let last = trace.len() - 1;
        assert_eq!(Moment::Start.resolve(trace, &device.replay), None);
        assert_eq!(Moment::End.resolve(trace, &device.replay), Some(last));
        assert_eq!(
            Moment::Event(last + 100).resolve(trace, &device.replay),
            Some(last)
        );
        assert_eq!(
            Moment::Peak.resolve(trace, &device.replay),
            device.replay.peak_allocated(trace).event_index
        );
        // An empty trace has only its start.
        let empty = Trace::default();
        assert_eq!(Moment::End.resolve(&empty, &device.replay), None);
        assert_eq!(Moment::Event(4).resolve(&empty, &device.replay), None);
    }
}
