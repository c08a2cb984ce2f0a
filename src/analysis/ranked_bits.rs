//! A bit per event with the count of set bits before every `WORDS_PER_COUNT * 64`-th, so the
//! set bits before any event (rank) and the event of the `n`th set bit (select) are found
//! without a scan, for about an eighth of a byte per event however many are set.
//!
//! The event list keeps one per filter asked (its matches), the replay two (the events that
//! open and that close an allocation). The words can be a stored index's mapped section; the
//! counts are recomputed on open (a pass over an eighth of a byte per event).

use crate::snapshot::Column;

const WORDS_PER_COUNT: usize = 8;

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct RankedBits {
    words: Column<u64>,
    /// `counts[k]`: set bits in `words[..k * WORDS_PER_COUNT]`.
    counts: Vec<u32>,
    /// Bits (events) held; the last word's bits past it are 0.
    len: usize,
    ones: usize,
}

impl RankedBits {
    /// The bits of `words`, `len` of them. `None` when the words do not hold `len` bits or
    /// have a bit set past it (a damaged stored index).
    pub(crate) fn from_words(words: Column<u64>, len: usize) -> Option<Self> {
        if words.len() != len.div_ceil(64) {
            return None;
        }
        if let Some(&last) = words.last()
            && !len.is_multiple_of(64)
            && last >> (len % 64) != 0
        {
            return None;
        }
        let mut counts = Vec::with_capacity(words.len() / WORDS_PER_COUNT + 1);
        let mut before = 0usize;
        for chunk in words.chunks(WORDS_PER_COUNT) {
            counts.push(u32::try_from(before).ok()?);
            before += chunk.iter().map(|w| w.count_ones() as usize).sum::<usize>();
        }
        Some(Self {
            words,
            counts,
            len,
            ones: before,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Set bits in all.
    pub(crate) fn ones(&self) -> usize {
        self.ones
    }

    /// The words as stored.
    pub(crate) fn words(&self) -> &Column<u64> {
        &self.words
    }

    /// Whether bit `i` is set (false past the end).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// Set bits before bit `i` (all of them from the end on).
    pub(crate) fn rank(&self, i: usize) -> usize {
        if i >= self.len {
            return self.ones;
        }
        let word = i / 64;
        let k = word / WORDS_PER_COUNT;
        let whole: u32 = self.words[k * WORDS_PER_COUNT..word]
            .iter()
            .map(|w| w.count_ones())
            .sum();
        let partial = (self.words[word] & ((1u64 << (i % 64)) - 1)).count_ones();
        (self.counts[k] + whole + partial) as usize
    }

    /// The position of set bit `n` (0-based), if there is one.
    pub(crate) fn select(&self, n: usize) -> Option<usize> {
        if n >= self.ones {
            return None;
        }
        let k = self
            .counts
            .partition_point(|&c| c as usize <= n)
            .checked_sub(1)?;
        let mut left = n - self.counts[k] as usize;
        for (offset, &word) in self.words[k * WORDS_PER_COUNT..].iter().enumerate() {
            let ones = word.count_ones() as usize;
            if left < ones {
                let mut word = word;
                for _ in 0..left {
                    word &= word - 1;
                }
                return Some((k * WORDS_PER_COUNT + offset) * 64 + word.trailing_zeros() as usize);
            }
            left -= ones;
        }
        None
    }

    pub(crate) fn heap_bytes(&self) -> u64 {
        self.words.heap_bytes() + (self.counts.capacity() * std::mem::size_of::<u32>()) as u64
    }
}

/// Bits appended one at a time, then ranked.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct BitsBuilder {
    words: Vec<u64>,
    len: usize,
}

impl BitsBuilder {
    /// `len` bits, all clear, to set at will.
    pub(crate) fn zeros(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn push(&mut self, bit: bool) {
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        if bit {
            self.words[self.len / 64] |= 1 << (self.len % 64);
        }
        self.len += 1;
    }

    /// Sets bit `i`, which must be below the length.
    #[inline]
    pub(crate) fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub(crate) fn ranked(mut self) -> RankedBits {
        self.words.shrink_to_fit();
        RankedBits::from_words(self.words.into(), self.len)
            .unwrap_or_else(|| unreachable!("a builder's words hold its bits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank and select of bit patterns of lengths around the word and count boundaries agree
    /// with a scan; words with a bit past the length, or too few, are refused.
    #[test]
    fn rank_and_select_agree_with_a_scan() {
        let mut state = 0x9e37_79b9u64;
        for len in [0, 1, 63, 64, 65, 511, 512, 513, 1000, 4097] {
            for density in [0, 1, 5, 64] {
                let mut bits = BitsBuilder::default();
                let mut set = Vec::new();
                for i in 0..len {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let bit = density == 64 || (density > 0 && state % 64 < density);
                    bits.push(bit);
                    if bit {
                        set.push(i);
                    }
                }
                let bits = bits.ranked();
                assert_eq!((bits.len(), bits.ones()), (len, set.len()));
                for i in 0..=len + 1 {
                    assert_eq!(bits.rank(i), set.partition_point(|&s| s < i), "rank {i}");
                    assert_eq!(bits.get(i), set.binary_search(&i).is_ok(), "get {i}");
                }
                for (n, &at) in set.iter().enumerate() {
                    assert_eq!(bits.select(n), Some(at), "select {n}");
                }
                assert_eq!(bits.select(set.len()), None);
            }
        }
        let words: Column<u64> = vec![0b100].into();
        assert!(
            RankedBits::from_words(words.clone(), 2).is_none(),
            "a bit past the end"
        );
        assert!(RankedBits::from_words(words.clone(), 3).is_some());
        assert!(RankedBits::from_words(words, 65).is_none(), "too few words");
    }
}
