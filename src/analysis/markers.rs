//! What the timeline marks on its axis: the peak, each out-of-memory event, and the
//! `external_annotations` (profiler stages) mapped onto events. Plain functions of the trace and
//! the replay, so the server's handler only asks for them.

use super::replay::Replay;
use super::{DeviceAnalysis, Origin};
use crate::snapshot::{ActionCode, Annotation, Trace};
use serde::{Deserialize, Serialize};

/// Every marker of one device's timeline window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Markers {
    pub peak: PeakMarker,
    pub ooms: Vec<OomMarker>,
    pub annotations: Vec<AnnotationMarker>,
}

/// The most allocated memory: right after `event` (`null`: before the first event, when the
/// trace never rises above its start).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakMarker {
    pub event: Option<usize>,
    pub bytes: u64,
}

/// An `oom` event: what was asked for, and what CUDA said was free (when recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OomMarker {
    pub event: usize,
    pub requested: u64,
    pub device_free: Option<u64>,
}

/// An annotation placed at the first event at or after its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotationMarker {
    pub event: usize,
    pub time_us: i64,
    pub stage: Option<String>,
    pub name: Option<String>,
}

/// The events a timeline window covers and where each of its pixel columns starts.
#[derive(Debug, Clone, Copy)]
pub struct Columns<'a> {
    pub start: usize,
    pub end: usize,
    pub column_start: &'a [usize],
}

/// The markers of `device` within `columns`.
pub fn markers(
    annotations: &[Annotation],
    trace: &Trace,
    device: &DeviceAnalysis,
    columns: Columns<'_>,
) -> Markers {
    let peak = device.replay.peak_allocated(trace);
    Markers {
        peak: PeakMarker {
            event: peak.event_index,
            bytes: peak.bytes,
        },
        ooms: oom_markers(trace),
        annotations: annotation_markers(annotations, trace, device.device, columns),
    }
}

/// Every `oom` event of the trace, in order (few: a run stops soon after one).
pub fn oom_markers(trace: &Trace) -> Vec<OomMarker> {
    trace
        .events_of(ActionCode::OOM)
        .map(|event| OomMarker {
            event,
            requested: trace.size.get(event),
            device_free: trace.device_free.get(&event).copied(),
        })
        .collect()
}

/// The annotations of `device` inside the window, at most one per column: a long run records a
/// START/END pair per step, far more than a window can show. Without times (or columns) there is
/// nothing to place them by.
pub fn annotation_markers(
    annotations: &[Annotation],
    trace: &Trace,
    device: usize,
    columns: Columns<'_>,
) -> Vec<AnnotationMarker> {
    if !trace.has_time || columns.column_start.is_empty() {
        return Vec::new();
    }
    let mut last_column = None;
    let mut markers = Vec::new();
    for annotation in annotations {
        if usize::try_from(annotation.device).ok() != Some(device) {
            continue;
        }
        let event = trace
            .time_us
            .partition_point(0..trace.len(), |t| t < annotation.time_us);
        if event < columns.start || event > columns.end {
            continue;
        }
        let column = columns.column_start.partition_point(|&b| b <= event);
        if last_column == Some(column) {
            continue;
        }
        last_column = Some(column);
        markers.push(AnnotationMarker {
            event,
            time_us: annotation.time_us,
            stage: annotation.fields.get("stage").cloned(),
            name: annotation.fields.get("name").cloned(),
        });
    }
    markers
}

/// The first event from which the history is complete when the trace starts mid-run (blocks
/// freed that it never saw allocated): one past the last such free. `None` when complete.
pub fn complete_from(replay: &Replay) -> Option<usize> {
    replay
        .allocations
        .iter()
        .filter(|a| a.origin == Origin::FreedWithoutAlloc)
        .filter_map(|a| a.end)
        .max()
        .map(|end| end as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace_with_times(times: &[i64]) -> Trace {
        Trace {
            action: vec![ActionCode::ALLOC; times.len()].into(),
            size: vec![512; times.len()].into(),
            time_us: times.to_vec().into(),
            has_time: true,
            ..Trace::default()
        }
    }

    fn annotation(device: i64, time_us: i64, stage: &str) -> Annotation {
        Annotation {
            device,
            time_us,
            fields: [("stage".to_owned(), stage.to_owned())].into(),
        }
    }

    #[test]
    fn ooms_are_marked_with_what_was_asked_and_what_was_free() {
        let mut trace = trace_with_times(&[10, 20, 30]);
        trace.action[1] = ActionCode::OOM;
        trace.size.set(1, 1 << 30);
        trace.device_free.insert(1, 4096);
        assert_eq!(
            oom_markers(&trace),
            vec![OomMarker {
                event: 1,
                requested: 1 << 30,
                device_free: Some(4096),
            }]
        );
    }

    #[test]
    fn annotations_land_on_the_next_event_once_per_column_and_only_on_their_device() {
        let trace = trace_with_times(&[10, 20, 30, 40, 50, 60]);
        let annotations = [
            annotation(0, 15, "START"), // → event 1, column 0
            annotation(0, 19, "END"),   // → event 1 again: same column, dropped
            annotation(1, 35, "START"), // another device
            annotation(0, 45, "START"), // → event 4, column 1
            annotation(0, 99, "END"),   // past the window's end
        ];
        let columns = Columns {
            start: 0,
            end: 5,
            column_start: &[0, 3],
        };
        let marked = annotation_markers(&annotations, &trace, 0, columns);
        let events: Vec<usize> = marked.iter().map(|m| m.event).collect();
        assert_eq!(events, vec![1, 4]);
        assert_eq!(marked[0].stage.as_deref(), Some("START"));
        assert_eq!(marked[0].name, None);
        // A trace without times cannot place them.
        let untimed = Trace {
            has_time: false,
            ..trace
        };
        assert!(annotation_markers(&annotations, &untimed, 0, columns).is_empty());
    }

    #[test]
    fn a_trace_that_starts_mid_run_is_complete_after_its_last_orphan_free() {
        let (_, analysis) = crate::analysis::fixtures::analysed("ring_wrap.pickle");
        let device = &analysis.devices[0];
        let orphans: Vec<u32> = device
            .replay
            .allocations
            .iter()
            .filter(|a| a.origin == Origin::FreedWithoutAlloc)
            .filter_map(|a| a.end)
            .collect();
        assert!(
            !orphans.is_empty(),
            "ring_wrap lost the start of its history"
        );
        let from = complete_from(&device.replay).expect("incomplete");
        assert_eq!(from, *orphans.iter().max().expect("some") as usize + 1);
    }
}
