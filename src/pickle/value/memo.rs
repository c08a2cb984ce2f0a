//! The pickle memo: dense, packed and sparse storage for the values MEMOIZE and PUT name.

use super::{KIND_SHIFT, Kind, Value};
use rustc_hash::FxHashMap;

/// The pickle memo, keyed like Python's (a dict of index to value). Indices written in order
/// (0, 1, 2, ... as CPython writes them) go to a dense vector; any other index to a sparse map, so
/// a hostile `LONG_BINPUT 4000000000`, or indices far apart, cost one map entry each rather than
/// a vector grown to reach them. No index is in both.
///
/// Past the first [`Memo::HOT`] indices, a dense entry takes five bytes, not a [`Value`]'s
/// eight: a long trace memoizes more objects than it has events (37 million in a
/// 32-million-event file) and the memo lives until the last byte is read, so it is a large
/// part of the reader's peak memory. An entry packs when its payload fits 32 bits, or when it
/// is a record whose index does (a compactor's tag bits 56-58 go beside the kind); any other
/// value is kept whole in `wide`. The first indices stay whole `Value`s: they hold what a
/// trace names again and again (the keys of every event, the common frames), read tens of
/// times per event, and unpacking those reads cost 8% of a read.
#[derive(Debug, Default)]
pub struct Memo {
    /// Indices `0..HOT`.
    hot: Vec<Value>,
    /// Per index from `HOT` on, the low 32 bits of the payload (little-endian), then a byte: bits 0-3 the
    /// kind, bits 4-6 a record's tag, or [`Memo::WIDE`] when the value is in `wide`. (One
    /// vector of 5-byte entries: one bounds check and one cache line per read.)
    dense: Vec<[u8; 5]>,
    wide: FxHashMap<u32, Value>,
    sparse: FxHashMap<u32, Value>,
}

impl Memo {
    const HOT: usize = 1 << 16;
    const WIDE: u8 = u8::MAX;
    const RECORD_TAG_SHIFT: u32 = 56;
    const RECORD_TAGS: u64 = 7 << Self::RECORD_TAG_SHIFT;

    pub fn len(&self) -> usize {
        self.hot.len() + self.dense.len() + self.sparse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index MEMOIZE uses: Python's `len(memo)`.
    pub fn next_index(&self) -> u32 {
        u32::try_from(self.len()).unwrap_or(u32::MAX)
    }

    #[inline]
    fn pack(value: Value) -> Option<[u8; 5]> {
        let kind = (value.0 >> KIND_SHIFT) as u8;
        let payload = value.payload();
        let (tag, rest) = if value.is(Kind::Record) {
            (
                (payload & Self::RECORD_TAGS) >> Self::RECORD_TAG_SHIFT,
                payload & !Self::RECORD_TAGS,
            )
        } else {
            (0, payload)
        };
        let [a, b, c, d] = u32::try_from(rest).ok()?.to_le_bytes();
        Some([a, b, c, d, kind | (tag as u8) << 4])
    }

    #[inline]
    fn unpack([a, b, c, d, high]: [u8; 5]) -> Value {
        let low = u32::from_le_bytes([a, b, c, d]);
        let kind = u64::from(high & 0xf);
        let tag = u64::from(high >> 4) << Self::RECORD_TAG_SHIFT;
        Value((kind << KIND_SHIFT) | tag | u64::from(low))
    }

    #[inline]
    pub fn set(&mut self, index: u32, value: Value) {
        let i = index as usize;
        // The index MEMOIZE would use next; dense entries exist only once the hot part is full.
        let next = self.hot.len() + self.dense.len();
        if i > next {
            self.sparse.insert(index, value);
            return;
        }
        if i == next && !self.sparse.is_empty() {
            self.sparse.remove(&index);
        }
        if i < Self::HOT {
            match self.hot.get_mut(i) {
                Some(slot) => *slot = value,
                None => self.hot.push(value),
            }
            return;
        }
        let entry = Self::pack(value).unwrap_or([0, 0, 0, 0, Self::WIDE]);
        match self.dense.get_mut(i - Self::HOT) {
            Some(slot) => {
                if slot[4] == Self::WIDE {
                    self.wide.remove(&index);
                }
                *slot = entry;
            }
            None => self.dense.push(entry),
        }
        if entry[4] == Self::WIDE {
            self.wide.insert(index, value);
        }
    }

    #[inline(always)]
    pub fn get(&self, index: u32) -> Option<Value> {
        let i = index as usize;
        if let Some(&value) = self.hot.get(i) {
            return Some(value);
        }
        match i.checked_sub(Self::HOT).and_then(|i| self.dense.get(i)) {
            Some(&[.., Self::WIDE]) => self.wide.get(&index).copied(),
            Some(&entry) => Some(Self::unpack(entry)),
            None => self.sparse.get(&index).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_memo_indices_do_not_allocate_dense_space() {
        let mut memo = Memo::default();
        memo.set(4_000_000_000, Value::bool(true));
        assert_eq!(memo.next_index(), 1, "len(memo), as Python counts it");
        assert_eq!(memo.get(4_000_000_000), Some(Value::bool(true)));
        assert_eq!(memo.get(0), None, "a hole is not a value");
        memo.set(5, Value::NONE);
        assert_eq!(memo.get(3), None);
        memo.set(0, Value::bool(false));
        assert_eq!(memo.next_index(), 3);
    }

    fn int_value(v: i64) -> Value {
        Value::small_int(v).expect("fits")
    }

    #[test]
    fn memo_entries_pack_and_the_others_stay_whole() {
        let mut memo = Memo::default();
        for index in 0..Memo::HOT as u32 {
            memo.set(index, int_value(i64::from(index)));
        }
        assert_eq!(memo.get(7), Some(int_value(7)), "a hot entry");
        let at = |i: usize| (Memo::HOT + i) as u32;
        let int = |v: i64| Value::small_int(v).expect("fits");
        let values = [
            Value::NONE,
            Value::bool(true),
            int(7),
            int(-7),
            Value::record((1 << 56) | 12_345),
            Value::record((1 << 58) | u64::from(u32::MAX)),
            Value::record((1 << 57) | (1 << 40)),
            Value::of(Kind::Str, 3),
            Value::of(Kind::Dict, 1 << 33),
        ];
        for (i, &value) in values.iter().enumerate() {
            memo.set(at(i), value);
        }
        for (i, &value) in values.iter().enumerate() {
            assert_eq!(memo.get(at(i)), Some(value), "entry {i}");
        }
        assert_eq!(
            memo.wide.len(),
            3,
            "a negative int, a record index past 32 bits, a big index"
        );
        // Overwriting moves an entry between the packed and the whole form.
        memo.set(at(3), Value::bool(false));
        memo.set(at(4), int(-1));
        assert_eq!(
            (memo.get(at(3)), memo.get(at(4))),
            (Some(Value::bool(false)), Some(int(-1)))
        );
        assert_eq!(memo.wide.len(), 3);
        assert_eq!(memo.next_index() as usize, Memo::HOT + values.len());
        // Past the hot part before it is full: out of order, so sparse.
        let mut early = Memo::default();
        early.set(at(0), int(1));
        assert_eq!((early.get(at(0)), early.next_index()), (Some(int(1)), 1));
    }
}
