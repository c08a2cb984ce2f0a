//! Stacking the chosen bands as PyTorch's viewer does: each allocation on the ones below it,
//! in allocation order, offsets recomputed from the lowest change.

use super::{Bands, Window, column_of};
use crate::analysis::replay::{AllocationId, Replay};

/// The bands of `chosen` (candidates in any order), at most `max_bands` of them,
/// stacked in the order PyTorch's viewer stacks them over the columns `bounds`, and the top of
/// the stack per column. `events` is the trace's length.
pub(super) fn stack_bands(
    replay: &Replay,
    events: usize,
    window: &Window,
    bounds: &[usize],
    mut chosen: Vec<AllocationId>,
    max_bands: usize,
) -> (Bands, Vec<u64>) {
    let width = bounds.len() - 1;
    if chosen.len() > max_bands {
        // A window showing a long run at once: keep the bands that cover the most pixels.
        let area = |id: AllocationId| {
            let a = replay.allocations.at(id as usize);
            let first = a.start.map_or(0, |s| s as usize).max(window.start);
            let last = a.end.map_or(events, |e| e as usize).min(window.end + 1);
            a.size as u128 * last.saturating_sub(first) as u128
        };
        // Ties broken by size, then id, so the bands kept do not depend on the candidates'
        // order (no need to sort them all first: a zoomed byte axis can have many).
        chosen.select_nth_unstable_by_key(max_bands, |&id| {
            (
                std::cmp::Reverse(area(id)),
                std::cmp::Reverse(replay.allocations.size(id as usize)),
                id,
            )
        });
        chosen.truncate(max_bands);
    }
    // Stacking order: alive-from-start first (as PyTorch's viewer), then by allocation order.
    chosen.sort_unstable_by_key(|&id| {
        let a = replay.allocations.at(id as usize);
        (a.start.is_some(), a.start, id)
    });

    let first_column = |id: AllocationId| {
        let a = replay.allocations.at(id as usize);
        column_of(
            bounds,
            a.start
                .map_or(window.start, |s| (s as usize).max(window.start)),
        )
    };
    let last_column = |id: AllocationId| {
        let a = replay.allocations.at(id as usize);
        match a.end {
            // Freed at event e: gone from the column holding e on (it was live before).
            Some(e) => column_of(bounds, (e as usize).min(window.end)),
            None => width - 1,
        }
    };
    let spans: Vec<(usize, usize)> = chosen
        .iter()
        .map(|&id| (first_column(id), last_column(id)))
        .collect();

    // Sweep columns; a band's offset is the sum of the chosen bands below it that are live.
    // `live` is in stacking order (ascending index into `chosen`) with each one's offset beside
    // it; a column only recomputes the offsets from the lowest band that started or ended
    // there, so a window of thousands of bands over thousands of columns costs its changes,
    // not bands times columns (most allocations end on top of the stack, where they began).
    let size_of = |i: usize| replay.allocations.size(chosen[i] as usize);
    let mut points: Vec<Vec<(usize, u64)>> = vec![Vec::new(); chosen.len()];
    let mut last_offset: Vec<Option<u64>> = vec![None; chosen.len()];
    let mut starting: Vec<Vec<usize>> = vec![Vec::new(); width];
    // Bands gone from column `c` on: their last column is `c - 1`.
    let mut ending: Vec<Vec<usize>> = vec![Vec::new(); width + 1];
    for (i, &(first, last)) in spans.iter().enumerate() {
        starting[first].push(i);
        // (A band ending before it starts still spans its first column, as it always did.)
        ending[(last.max(first) + 1).min(width)].push(i);
    }
    let mut live: Vec<usize> = Vec::new();
    let mut live_offset: Vec<u64> = Vec::new();
    let mut big_top = Vec::with_capacity(width);
    let mut top = 0u64;
    for c in 0..width {
        let mut first_changed = usize::MAX;
        for &i in &ending[c] {
            if let Ok(at) = live.binary_search(&i) {
                live.remove(at);
                live_offset.remove(at);
                first_changed = first_changed.min(at);
            }
        }
        for &i in &starting[c] {
            let at = live.partition_point(|&j| j < i);
            live.insert(at, i);
            live_offset.insert(at, 0);
            first_changed = first_changed.min(at);
        }
        if first_changed != usize::MAX {
            let mut offset = match first_changed.checked_sub(1) {
                Some(below) => live_offset[below] + size_of(live[below]),
                None => 0,
            };
            for k in first_changed..live.len() {
                let i = live[k];
                live_offset[k] = offset;
                if last_offset[i] != Some(offset) {
                    points[i].push((c, offset));
                    last_offset[i] = Some(offset);
                }
                offset += size_of(i);
            }
            top = offset;
        }
        big_top.push(top);
    }
    let mut bands = Bands::default();
    for (&id, points) in chosen.iter().zip(points) {
        let a = replay.allocations.at(id as usize);
        bands.id.push(id);
        bands.size.push(a.size);
        bands.start.push(a.start);
        bands.end.push(a.end);
        bands.points.push(
            points
                .into_iter()
                .flat_map(|(c, o)| [c as u64, o])
                .collect(),
        );
    }
    (bands, big_top)
}
