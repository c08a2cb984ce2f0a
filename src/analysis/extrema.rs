//! Minimum and maximum of a series over any range of positions, without reading the range.
//!
//! A timeline column of a whole-trace window spans tens of thousands of events; reading each
//! one made a window cost the trace's length. This keeps the min and max of every block of
//! `BLOCK` positions, then of every block of `BLOCK` blocks, and so on up (a pyramid), so a
//! range costs at most `2 * BLOCK` reads per level: O(BLOCK log_BLOCK n) whatever its length, for
//! about `2 * 8 / BLOCK` bytes per position.
//!
//! The series itself is not copied: every query is handed an accessor for position `i` (the
//! replay's `allocated`, or the reserved steps' bytes), which must be the series the pyramid was
//! built from.

/// log2 of the positions per block: a query reads at most two partial blocks per level.
const BLOCK_LOG2: u32 = 6;
const BLOCK: usize = 1 << BLOCK_LOG2;

#[derive(Debug, Default)]
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

impl RangeExtrema {
    /// The pyramid of the series `value(0), .., value(len - 1)`.
    pub(crate) fn new(len: usize, value: impl Fn(usize) -> u64) -> Self {
        let mut min: Vec<Vec<u64>> = Vec::new();
        let mut max: Vec<Vec<u64>> = Vec::new();
        let mut below = len;
        while below > BLOCK {
            let blocks = below.div_ceil(BLOCK);
            let (mut level_min, mut level_max) =
                (Vec::with_capacity(blocks), Vec::with_capacity(blocks));
            for block in 0..blocks {
                let (from, to) = (block * BLOCK, ((block + 1) * BLOCK).min(below));
                let (mut lo, mut hi) = (u64::MAX, u64::MIN);
                match (min.last(), max.last()) {
                    (Some(under_min), Some(under_max)) => {
                        for i in from..to {
                            lo = lo.min(under_min[i]);
                            hi = hi.max(under_max[i]);
                        }
                    }
                    _ => {
                        for i in from..to {
                            let v = value(i);
                            lo = lo.min(v);
                            hi = hi.max(v);
                        }
                    }
                }
                level_min.push(lo);
                level_max.push(hi);
            }
            min.push(level_min);
            max.push(level_max);
            below = blocks;
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

    /// The smallest of `value(from..to)` (`u64::MAX` for an empty range).
    pub(crate) fn min(&self, value: &impl Fn(usize) -> u64, from: usize, to: usize) -> u64 {
        self.extreme(value, Extreme::Min, 0, from, to.min(self.len))
    }

    /// The largest of `value(from..to)` (0 for an empty range).
    pub(crate) fn max(&self, value: &impl Fn(usize) -> u64, from: usize, to: usize) -> u64 {
        self.extreme(value, Extreme::Max, 0, from, to.min(self.len))
    }

    /// The first position in `from..to` whose value is at least `bound`, if any.
    pub(crate) fn first_at_least(
        &self,
        value: &impl Fn(usize) -> u64,
        from: usize,
        to: usize,
        bound: u64,
    ) -> Option<usize> {
        self.first_at_least_on(value, 0, from, to.min(self.len), bound)
    }

    /// Entries of level `level` (0: the series itself; `k`: the blocks of pyramid level
    /// `k - 1`).
    fn entries(&self, level: usize) -> usize {
        match level {
            0 => self.len,
            k => self.max[k - 1].len(),
        }
    }

    /// Entry `i` of `level` as `extreme` sees it.
    fn entry(
        &self,
        value: &impl Fn(usize) -> u64,
        extreme: Extreme,
        level: usize,
        i: usize,
    ) -> u64 {
        match (level, extreme) {
            (0, _) => value(i),
            (k, Extreme::Min) => self.min[k - 1][i],
            (k, Extreme::Max) => self.max[k - 1][i],
        }
    }

    /// The extreme of entries `from..to` of `level`: the partial blocks at both ends read here,
    /// the whole blocks between them one level up.
    fn extreme(
        &self,
        value: &impl Fn(usize) -> u64,
        extreme: Extreme,
        level: usize,
        from: usize,
        to: usize,
    ) -> u64 {
        let fold = |from: usize, to: usize| {
            extreme.of((from..to).map(|i| self.entry(value, extreme, level, i)))
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
                value,
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
        value: &impl Fn(usize) -> u64,
        level: usize,
        from: usize,
        to: usize,
        bound: u64,
    ) -> Option<usize> {
        let scan = |from: usize, to: usize| {
            (from..to).find(|&i| self.entry(value, Extreme::Max, level, i) >= bound)
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
            value,
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
            let value = |i: usize| series[i];
            let pyramid = RangeExtrema::new(len, value);
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
