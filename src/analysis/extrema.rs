//! Minimum and maximum of a series over any range of positions, without reading the range.
//!
//! A timeline column of a whole-trace window spans tens of thousands of events; reading each
//! one made a window cost the trace's length. This keeps the min and max of every block of
//! `BLOCK` positions, then of every block of `BLOCK` blocks, and so on up (a pyramid), so a
//! range costs at most `2 * BLOCK` reads per level: O(BLOCK log_BLOCK n) whatever its length, for
//! about `2 * 8 / BLOCK` bytes per position.
//!
//! The series itself is not copied: every query is handed a [`Series`] that reads it (the
//! replay's curve, or the reserved steps' bytes), which must be the series the pyramid was built
//! from.

/// log2 of the positions per block: a query reads at most two partial blocks per level.
const BLOCK_LOG2: u32 = 6;
pub(crate) const BLOCK: usize = 1 << BLOCK_LOG2;

#[derive(Debug, Default, PartialEq)]
pub(crate) struct RangeExtrema {
    /// Positions in the series.
    len: usize,
    /// `min[k][j]`: the minimum of block `j` of level `k`, where level 0's blocks are `BLOCK`
    /// positions of the series and level `k + 1`'s are `BLOCK` blocks of level `k`.
    min: Vec<Vec<u64>>,
    max: Vec<Vec<u64>>,
}

/// Which extreme a walk over the pyramid is after.
#[derive(Clone, Copy)]
enum Extreme {
    Min,
    Max,
}

impl Extreme {
    /// This extreme of `values`; of none, the value that changes neither (`u64::MAX` for the
    /// minimum, 0 for the maximum).
    fn of(self, values: impl Iterator<Item = u64>) -> u64 {
        match self {
            Extreme::Min => values.fold(u64::MAX, u64::min),
            Extreme::Max => values.fold(u64::MIN, u64::max),
        }
    }
}

/// A series a pyramid is built from, as its queries read it: in runs of consecutive positions,
/// never longer than a block (the replay's curve is cheap to read in runs, dear one position at
/// a time).
pub(crate) trait Series {
    /// The values at positions `from..to`, in order.
    fn values(&self, from: usize, to: usize) -> impl Iterator<Item = u64>;
}

/// A series read one position at a time.
pub(crate) struct ByPosition<F>(pub(crate) F);

impl<F: Fn(usize) -> u64> Series for ByPosition<F> {
    fn values(&self, from: usize, to: usize) -> impl Iterator<Item = u64> {
        (from..to).map(&self.0)
    }
}

impl RangeExtrema {
    /// The pyramid of a series of `len` values, read once in order.
    pub(crate) fn new(len: usize, values: impl IntoIterator<Item = u64>) -> Self {
        if len <= BLOCK {
            return Self::from_blocks(len, Vec::new(), Vec::new());
        }
        let blocks = len.div_ceil(BLOCK);
        let (mut level_min, mut level_max) =
            (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
        let mut values = values.into_iter().take(len);
        for _ in 0..blocks {
            let (lo, hi) = values
                .by_ref()
                .take(BLOCK)
                .fold((u64::MAX, u64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
            level_min.push(lo);
            level_max.push(hi);
        }
        Self::from_blocks(len, level_min, level_max)
    }

    /// The pyramid of a series of `len` values whose blocks' minima and maxima are known
    /// (`len.div_ceil(BLOCK)` of each; a series of one block or less keeps none).
    pub(crate) fn from_blocks(len: usize, block_min: Vec<u64>, block_max: Vec<u64>) -> Self {
        let mut min: Vec<Vec<u64>> = Vec::new();
        let mut max: Vec<Vec<u64>> = Vec::new();
        if len > BLOCK {
            min.push(block_min);
            max.push(block_max);
        }
        // Each level above from the one below it.
        while let (Some(below_min), Some(below_max)) = (min.last(), max.last()) {
            let below = below_min.len();
            if below <= BLOCK {
                break;
            }
            let blocks = below.div_ceil(BLOCK);
            let (mut level_min, mut level_max) =
                (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
            for block in 0..blocks {
                let (from, to) = (block * BLOCK, ((block + 1) * BLOCK).min(below));
                level_min.push(below_min[from..to].iter().copied().fold(u64::MAX, u64::min));
                level_max.push(below_max[from..to].iter().copied().fold(u64::MIN, u64::max));
            }
            min.push(level_min);
            max.push(level_max);
        }
        Self { len, min, max }
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> u64 {
        self.min
            .iter()
            .chain(&self.max)
            .map(|level| (level.capacity() * std::mem::size_of::<u64>()) as u64)
            .sum::<u64>()
            + ((self.min.capacity() + self.max.capacity()) * std::mem::size_of::<Vec<u64>>()) as u64
    }

    /// The smallest of the series' values at `from..to` (`u64::MAX` for an empty range).
    pub(crate) fn min(&self, series: &impl Series, from: usize, to: usize) -> u64 {
        self.extreme(series, Extreme::Min, 0, from, to.min(self.len))
    }

    /// The largest of the series' values at `from..to` (0 for an empty range).
    pub(crate) fn max(&self, series: &impl Series, from: usize, to: usize) -> u64 {
        self.extreme(series, Extreme::Max, 0, from, to.min(self.len))
    }

    /// The first position in `from..to` whose value is at least `bound`, if any.
    pub(crate) fn first_at_least(
        &self,
        series: &impl Series,
        from: usize,
        to: usize,
        bound: u64,
    ) -> Option<usize> {
        self.first_at_least_on(series, 0, from, to.min(self.len), bound)
    }

    /// Entries of level `level` (0: the series itself; `k`: the blocks of pyramid level
    /// `k - 1`).
    fn entries(&self, level: usize) -> usize {
        match level {
            0 => self.len,
            k => self.max[k - 1].len(),
        }
    }

    /// Entries `from..to` of `level` as `extreme` sees them.
    fn entries_between(
        &self,
        series: &impl Series,
        extreme: Extreme,
        level: usize,
        from: usize,
        to: usize,
    ) -> impl Iterator<Item = u64> {
        let (series_run, level_run) = match (level, extreme) {
            (0, _) => (Some(series.values(from, to)), None),
            (k, Extreme::Min) => (None, Some(&self.min[k - 1][from..to])),
            (k, Extreme::Max) => (None, Some(&self.max[k - 1][from..to])),
        };
        series_run
            .into_iter()
            .flatten()
            .chain(level_run.into_iter().flatten().copied())
    }

    /// The extreme of entries `from..to` of `level`: the partial blocks at both ends read here,
    /// the whole blocks between them one level up.
    fn extreme(
        &self,
        series: &impl Series,
        extreme: Extreme,
        level: usize,
        from: usize,
        to: usize,
    ) -> u64 {
        let fold = |from: usize, to: usize| {
            extreme.of(self.entries_between(series, extreme, level, from, to))
        };
        let inner_from = from.next_multiple_of(BLOCK);
        let inner_to = to / BLOCK * BLOCK;
        if level == self.min.len() || inner_from >= inner_to {
            return fold(from, to);
        }
        let ends = [
            fold(from, inner_from),
            fold(inner_to, to),
            self.extreme(
                series,
                extreme,
                level + 1,
                inner_from >> BLOCK_LOG2,
                inner_to >> BLOCK_LOG2,
            ),
        ];
        extreme.of(ends.into_iter())
    }

    /// The first entry in `from..to` of `level` whose maximum is at least `bound`.
    fn first_at_least_on(
        &self,
        series: &impl Series,
        level: usize,
        from: usize,
        to: usize,
        bound: u64,
    ) -> Option<usize> {
        let scan = |from: usize, to: usize| {
            self.entries_between(series, Extreme::Max, level, from, to)
                .position(|v| v >= bound)
                .map(|p| from + p)
        };
        let inner_from = from.next_multiple_of(BLOCK);
        let inner_to = to / BLOCK * BLOCK;
        if level == self.max.len() || inner_from >= inner_to {
            return scan(from, to);
        }
        if let Some(i) = scan(from, inner_from) {
            return Some(i);
        }
        if let Some(block) = self.first_at_least_on(
            series,
            level + 1,
            inner_from >> BLOCK_LOG2,
            inner_to >> BLOCK_LOG2,
            bound,
        ) {
            // The block's maximum reaches `bound`, so one of its entries does.
            let block_from = block << BLOCK_LOG2;
            return scan(block_from, (block_from + BLOCK).min(self.entries(level)));
        }
        scan(inner_to, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range of a few series (lengths around the block sizes, values with repeats) gets
    /// the min, max and first position at least a bound that a plain scan gets.
    #[test]
    fn ranges_agree_with_a_scan() {
        let mut state = 12345u64;
        for len in [0, 1, 2, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 9000] {
            let series: Vec<u64> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    (state >> 58) * 1000
                })
                .collect();
            let value = ByPosition(|i: usize| series[i]);
            let pyramid = RangeExtrema::new(len, series.iter().copied());
            let mut ranges = Vec::new();
            for from in (0..len).step_by(len / 37 + 1) {
                for to in (from + 1..=len).step_by(len / 23 + 1) {
                    ranges.push((from, to));
                }
                ranges.push((from, len));
                ranges.push((from, from + 1));
            }
            for (from, to) in ranges {
                let slice = &series[from..to];
                assert_eq!(
                    pyramid.min(&value, from, to),
                    slice.iter().copied().min().unwrap_or(u64::MAX),
                    "len {len} min {from}..{to}"
                );
                let max = slice.iter().copied().max().unwrap_or(0);
                assert_eq!(
                    pyramid.max(&value, from, to),
                    max,
                    "len {len} max {from}..{to}"
                );
                for bound in [0, max, max.saturating_sub(1000), max + 1] {
                    assert_eq!(
                        pyramid.first_at_least(&value, from, to, bound),
                        slice.iter().position(|&v| v >= bound).map(|p| from + p),
                        "len {len} first >= {bound} in {from}..{to}"
                    );
                }
            }
        }
    }
}
