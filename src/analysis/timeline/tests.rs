use super::*;
use crate::analysis::fixtures::analysed;

/// The whole of `trace` on the event axis, `width` columns of the timeline's usual height.
fn whole_trace(trace: &Trace, width: usize) -> Window {
    Window {
        start: 0,
        end: trace.len() - 1,
        width,
        height: 336,
        axis: Axis::Event,
    }
}

/// The stacking as it was before offsets were recomputed only from the lowest change: every
/// live band's offset summed again in every column.
fn stack_every_column(
    replay: &Replay,
    bounds: &[usize],
    window: &Window,
    bands: &Bands,
) -> (Vec<Vec<u64>>, Vec<u64>) {
    let width = bounds.len() - 1;
    let span = |k: usize| {
        let first = column_of(
            bounds,
            bands.start[k].map_or(window.start, |s| (s as usize).max(window.start)),
        );
        let last = match bands.end[k] {
            Some(e) => column_of(bounds, (e as usize).min(window.end)),
            None => width - 1,
        };
        (first, last)
    };
    let mut points = vec![Vec::new(); bands.len()];
    let mut last_offset = vec![None; bands.len()];
    let mut big_top = Vec::new();
    // `bands` is in stacking order.
    for c in 0..width {
        let mut offset = 0;
        for k in 0..bands.len() {
            let (first, last) = span(k);
            if c < first || c > last.max(first) {
                continue;
            }
            if last_offset[k] != Some(offset) {
                points[k].extend([c as u64, offset]);
                last_offset[k] = Some(offset);
            }
            offset += replay.allocations.size(bands.id[k] as usize);
        }
        big_top.push(offset);
    }
    (points, big_top)
}

fn windows(events: usize) -> Vec<(Window, Detail)> {
    let mut out = Vec::new();
    for (start, end) in [
        (0, events - 1),
        (events / 3, events / 3 + 40),
        (events / 2, events / 2 + 900),
    ] {
        for y_range in [
            None,
            Some((0, 200_000_000)),
            Some((1 << 30, (1 << 30) + 50_000)),
        ] {
            for max_bands in [MAX_BANDS, 300, MAX_DETAIL] {
                out.push((
                    Window {
                        start,
                        end,
                        width: 1200,
                        height: 336,
                        axis: Axis::Event,
                    },
                    Detail { y_range, max_bands },
                ));
            }
        }
    }
    out
}

#[test]
fn stacking_from_the_lowest_change_matches_stacking_every_column() {
    let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
    let device = &analysis.devices[0];
    let trace = snapshot.trace(0);
    for (window, detail) in windows(trace.len()) {
        let answer = timeline_detailed(device, trace, window, detail);
        let clamped = window.clamped(trace.len());
        let (points, big_top) = stack_every_column(
            &device.replay,
            &answer.column_start,
            &clamped,
            &answer.bands,
        );
        assert_eq!(answer.bands.points, points, "{window:?} {detail:?}");
        assert_eq!(answer.big_top, big_top, "{window:?} {detail:?}");
    }
}

#[test]
fn zooming_the_bytes_lowers_the_threshold_and_draws_more_bands_up_to_the_detail() {
    let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
    let device = &analysis.devices[0];
    let trace = snapshot.trace(0);
    let window = whole_trace(trace, 1200);
    let whole = timeline(device, trace, window);
    assert_eq!(whole.y_range, [0, whole.y_max]);
    let zoomed = timeline_detailed(
        device,
        trace,
        window,
        Detail {
            y_range: Some((0, whole.y_max / 100)),
            max_bands: MAX_DETAIL,
        },
    );
    assert_eq!(zoomed.y_range, [0, whole.y_max / 100]);
    assert!(zoomed.threshold * 50 < whole.threshold);
    assert!(zoomed.bands.len() > 2 * whole.bands.len());
    // The columns' totals do not depend on the zoom.
    assert_eq!(zoomed.allocated_max, whole.allocated_max);
    let capped = timeline_detailed(
        device,
        trace,
        window,
        Detail {
            y_range: Some((0, whole.y_max / 100)),
            max_bands: 100,
        },
    );
    assert_eq!(capped.bands.len(), 100);
    assert_eq!(capped.detail, 100);
    // Out-of-range asks are clamped: no band count of 0 or over the maximum, a byte range of
    // at least a byte per row.
    let clamped = Detail {
        y_range: Some((500, 500)),
        max_bands: 0,
    }
    .clamped(336);
    assert_eq!(clamped.y_range, Some((500, 836)));
    assert_eq!(clamped.max_bands, 1);
    assert_eq!(
        Detail {
            y_range: None,
            max_bands: usize::MAX
        }
        .clamped(336)
        .max_bands,
        MAX_DETAIL
    );
}

#[test]
fn every_allocation_is_a_band_or_in_a_column_list() {
    let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
    let device = &analysis.devices[0];
    let trace = snapshot.trace(0);
    let window = whole_trace(trace, 800);
    let answer = timeline(device, trace, window);
    let mut seen = vec![false; device.replay.allocations.len()];
    for &id in &answer.bands.id {
        seen[id as usize] = true;
    }
    for column in 0..answer.width {
        let listed = column_allocations(
            device,
            trace,
            window,
            Detail::default(),
            column,
            MAX_COLUMN_ROWS,
        )
        .expect("a column of the window");
        assert!(listed.ids.len() <= MAX_COLUMN_ROWS);
        assert_eq!(listed.total, listed.ids.len(), "column {column} overflows");
        let sizes: Vec<u64> = listed
            .ids
            .iter()
            .map(|&id| device.replay.allocations.size(id as usize))
            .collect();
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first");
        assert_eq!(listed.total_bytes, sizes.iter().sum::<u64>());
        for &id in &listed.ids {
            assert!(!answer.bands.id.contains(&id), "a band listed as grey");
            seen[id as usize] = true;
        }
    }
    let missing: Vec<usize> = (0..seen.len())
        .filter(|&id| !seen[id] && device.replay.allocations.size(id) > 0)
        .collect();
    assert!(missing.is_empty(), "never reached: {missing:?}");
}

#[test]
fn a_column_list_is_bounded_and_refuses_what_it_cannot_answer() {
    let (snapshot, analysis) = analysed("gpt2_adamw.pickle");
    let device = &analysis.devices[0];
    let trace = snapshot.trace(0);
    let window = whole_trace(trace, 800);
    let busiest = (0..800)
        .filter_map(|c| column_allocations(device, trace, window, Detail::default(), c, 3).ok())
        .max_by_key(|listed| listed.total)
        .expect("columns");
    assert_eq!(busiest.ids.len(), 3);
    assert!(busiest.total > 3);
    assert_eq!(
        column_allocations(device, trace, window, Detail::default(), 800, 3),
        Err(ColumnError::NoSuchColumn {
            column: 800,
            columns: 800
        })
    );
    // One column over the whole trace reads every event: refused past MAX_COLUMN_EVENTS
    // (this trace is shorter, so it is answered).
    let one = Window { width: 1, ..window };
    assert!(column_allocations(device, trace, one, Detail::default(), 0, 10).is_ok());
    assert!(trace.len() < MAX_COLUMN_EVENTS);
}
