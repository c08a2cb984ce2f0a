//! The pickle memo: dense, packed and sparse storage for the values MEMOIZE and PUT name.

use super::{KIND_SHIFT, Kind, Value};
use rustc_hash::FxHashMap;

/// The pickle memo, keyed like Python's (a dict of index to value). Indices written in order
/// (0, 1, 2, ... as CPython writes them) are dense; any other index goes to a sparse map, so
/// a hostile `LONG_BINPUT 4000000000`, or indices far apart, cost one map entry each rather than
/// room grown to reach them. No index is in both.
///
/// A long trace memoizes more objects than it has events (37 million in a 32-million-event
/// file) and the memo lives until the last byte is read, so it is a large part of the reader's
/// peak memory. The first [`Memo::HOT`] indices stay whole `Value`s: they hold what a trace
/// names again and again (the keys of every event, the common frames), read tens of times per
/// event. The rest are kept in blocks of 64 once they are [`Memo::OPEN`] entries old (younger
/// ones are still set again, as a container is replaced by what it became):
///
/// - Most entries of a trace are its events, and an event's record counts up from the one
///   before. A block keeps, of its entries, those that count up from the first record of one
///   kind as a bit each: entry `i` is `base` plus the number of such entries before it.
/// - Of the others, those equal to one of the block's two most repeated values take a bit each
///   too: a trace memoizes, beside each event, the same string ("N/A", its compile context)
///   and the same empty stack, again and again.
/// - The rest take five bytes each: the low 32 bits of the payload, then a byte with the kind
///   and a record's tag (its bits 56-58), or [`Memo::WIDE`] when the value does not pack and is
///   kept whole in `wide`.
///
/// The ten-times trace's memo (37 million entries) took about 40 MB with the first and last
/// only, 185 MB at five bytes each; the repeated values make the 287 MB trace's memo (9.6
/// million entries) 9 MB instead of 36, and spare the decoding thread packing them.
#[derive(Debug, Default)]
pub struct Memo {
    /// Indices `0..HOT`.
    hot: Vec<Value>,
    /// Dense indices from `HOT` on, 64 to a block.
    blocks: Vec<Block>,
    /// The blocks' entries that do not count up, in index order.
    packed: Vec<[u8; 5]>,
    /// The dense indices after the blocks, whole: fewer than `2 * OPEN`.
    open: Vec<Value>,
    wide: FxHashMap<u32, Value>,
    /// Entries of blocks set again after the block was made (rare: a PUT to an old index).
    rewritten: FxHashMap<u32, Value>,
    sparse: FxHashMap<u32, Value>,
    /// The record tag that counted up in the last block (most likely the next one's too).
    last_tag: u64,
}

/// A block of [`Memo::BLOCK`] entries laid out elsewhere (by a decode worker, see
/// [`Memo::extend_blocks`]): bit `i` of `counting` says entry `i` is `base` counted up by the
/// number of such entries before it; the other entries are given apart, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedBlock {
    pub counting: u64,
    pub base: Value,
}

/// 64 dense memo entries.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// Bit `i`: entry `i` is `base` counted up by the number of such entries before it.
    counting: u64,
    base: Value,
    /// Bit `i` of `repeats[k].0`: entry `i` is `repeats[k].1` (no bit is in two masks or in
    /// `counting`).
    repeats: [(u64, Value); 2],
    /// Where the other entries start in `packed`.
    packed_at: u32,
    /// Whether an entry was set again since (then `rewritten` holds it).
    rewritten: bool,
}

impl Memo {
    /// Indices below this stay whole values; blocks start here.
    pub const HOT: usize = 1 << 16;
    /// Entries to a block; blocks start at multiples of it.
    pub const BLOCK: usize = 64;
    /// Entries this recent stay whole (a container is set again when it is finished, at most a
    /// few puts later in any file torch writes).
    const OPEN: usize = 2 * Self::BLOCK;
    const WIDE: u8 = u8::MAX;
    const RECORD_TAG_SHIFT: u32 = 56;
    const RECORD_TAGS: u64 = 7 << Self::RECORD_TAG_SHIFT;

    pub fn len(&self) -> usize {
        self.dense_end() + self.sparse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index MEMOIZE uses: Python's `len(memo)`.
    pub fn next_index(&self) -> u32 {
        u32::try_from(self.len()).unwrap_or(u32::MAX)
    }

    /// The index after the dense ones.
    fn dense_end(&self) -> usize {
        self.hot.len() + self.blocks.len() * Self::BLOCK + self.open.len()
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

    /// Sets entry `index`, as Python's `memo[index] = value`.
    #[inline]
    pub fn set(&mut self, index: u32, value: Value) {
        // Nearly every set of a long trace, inlined: a put after the last entry, or a recent
        // one set again (a container replaced by what it became), both among the open entries.
        let blocked = Self::HOT + self.blocks.len() * Self::BLOCK;
        if let Some(open) = (index as usize).checked_sub(blocked)
            && self.hot.len() == Self::HOT
            && self.sparse.is_empty()
        {
            if let Some(slot) = self.open.get_mut(open) {
                *slot = value;
                return;
            }
            if open == self.open.len() {
                self.push_open(value);
                return;
            }
        }
        self.set_any(index, value);
    }

    /// [`Memo::set`] of any index.
    #[inline(never)]
    fn set_any(&mut self, index: u32, value: Value) {
        let i = index as usize;
        // The index MEMOIZE would use next.
        let next = self.dense_end();
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
        let blocked = Self::HOT + self.blocks.len() * Self::BLOCK;
        match i.checked_sub(blocked) {
            Some(open) => match self.open.get_mut(open) {
                Some(slot) => *slot = value,
                None => self.push_open(value),
            },
            None => {
                self.blocks[(i - Self::HOT) / Self::BLOCK].rewritten = true;
                self.rewritten.insert(index, value);
            }
        }
    }

    /// Sets the entries from [`Memo::next_index`] on to `values`, as [`Memo::set`] would one
    /// by one.
    pub fn extend(&mut self, values: impl ExactSizeIterator<Item = Value>) {
        if !self.sparse.is_empty() || self.hot.len() < Self::HOT {
            let first = self.next_index();
            for (index, value) in (first..).zip(values) {
                self.set(index, value);
            }
            return;
        }
        for value in values {
            self.push_open(value);
        }
    }

    /// Sets the entries from [`Memo::next_index`] on to `blocks`, as [`Memo::extend`] would one
    /// by one: each block's entries that count up from its base, the others taken in order
    /// from `others` (one for each bit a block leaves clear).
    ///
    /// When the next index starts a block past the hot entries (and no index is sparse), the
    /// blocks are taken as they are: the work a splice leaves the main thread is then one
    /// step per entry that does not count, instead of every entry laid out again. The open
    /// entries before them are closed into blocks first, since blocks follow one another;
    /// any of those set again later is kept apart, as for any old index.
    pub fn extend_blocks(
        &mut self,
        blocks: &[CountedBlock],
        mut others: impl Iterator<Item = Value>,
    ) {
        let at_block = (self.next_index() as usize).is_multiple_of(Self::BLOCK);
        if !(at_block && self.sparse.is_empty() && self.hot.len() == Self::HOT) {
            let mut index = self.next_index();
            for block in blocks {
                let mut counted = 0;
                for bit in 0..Self::BLOCK {
                    let value = if block.counting & (1 << bit) != 0 {
                        counted += 1;
                        Value(block.base.0 + counted - 1)
                    } else {
                        others.next().unwrap_or(Value::NONE)
                    };
                    self.set(index, value);
                    index = index.wrapping_add(1);
                }
            }
            return;
        }
        // Whole blocks only: the open entries end at a block's end, as the next index does.
        self.close_blocks(self.open.len());
        self.blocks.reserve(blocks.len());
        for block in blocks {
            self.push_block(block.counting, block.base, |_| {
                others.next().unwrap_or(Value::NONE)
            });
        }
    }

    /// Appends `value` after the last dense entry.
    #[inline]
    fn push_open(&mut self, value: Value) {
        self.open.push(value);
        if self.open.len() == 2 * Self::OPEN {
            self.close_blocks(Self::OPEN);
        }
    }

    /// Appends a block: the entries of `counting`'s bits count up from `base`, and
    /// `value_at(bit)` is each other one, packed (or kept whole when it does not pack).
    #[inline]
    fn push_block(&mut self, counting: u64, base: Value, mut value_at: impl FnMut(usize) -> Value) {
        let first = Self::HOT + self.blocks.len() * Self::BLOCK;
        let packed_at = u32::try_from(self.packed.len()).unwrap_or(u32::MAX);
        // Each other entry's value, asked once and in order.
        let mut values = [Value::NONE; Self::BLOCK];
        let mut others = !counting;
        while others != 0 {
            let bit = others.trailing_zeros() as usize;
            values[bit] = value_at(bit);
            others &= others - 1;
        }
        let repeats = Self::repeats(&values, !counting);
        let mut rest = !(counting | repeats[0].0 | repeats[1].0);
        while rest != 0 {
            let bit = rest.trailing_zeros() as usize;
            let value = values[bit];
            let entry = Self::pack(value).unwrap_or_else(|| {
                self.wide.insert((first + bit) as u32, value);
                [0, 0, 0, 0, Self::WIDE]
            });
            self.packed.push(entry);
            rest &= rest - 1;
        }
        if counting != 0 {
            self.last_tag = base.payload() & Self::RECORD_TAGS;
        }
        self.blocks.push(Block {
            counting,
            base,
            repeats,
            packed_at,
            rewritten: false,
        });
    }

    /// Two values that repeat among the entries of `values` that `among` marks, and where: of
    /// the first few distinct values in entry order, the first two found at two entries at
    /// least (one entry saves nothing). Not always the two most frequent, but in a trace's
    /// blocks, where the same two or three values alternate, it is.
    #[inline]
    fn repeats(values: &[Value; Self::BLOCK], among: u64) -> [(u64, Value); 2] {
        const TRIED: usize = 4;
        let mut repeats = [(0, Value::NONE); 2];
        let mut found = 0;
        let mut left = among;
        for _ in 0..TRIED {
            if left == 0 || found == repeats.len() {
                break;
            }
            let value = values[left.trailing_zeros() as usize];
            let at = values
                .iter()
                .enumerate()
                .fold(0u64, |at, (bit, &v)| at | (u64::from(v == value) << bit))
                & left;
            left &= !at;
            if at.count_ones() >= 2 {
                repeats[found] = (at, value);
                found += 1;
            }
        }
        repeats
    }

    /// Moves the oldest `count` whole entries (a multiple of [`Memo::BLOCK`]) into blocks.
    #[cold]
    fn close_blocks(&mut self, count: usize) {
        let open = std::mem::take(&mut self.open);
        for values in open[..count].chunks_exact(Self::BLOCK) {
            let (counting, base) = Self::counting(values, self.last_tag);
            self.push_block(counting, base, |bit| values[bit]);
        }
        self.open = open;
        self.open.drain(..count);
    }

    /// Which entries of `values` (a block's 64) count up, and from what: those of the record
    /// tag whose run from its first record is longest. `likely` (the tag that counted in the
    /// block before) is tried first, and kept when its run takes every record of the most
    /// frequent tag's count (no run can be longer); otherwise each tag present is tried.
    fn counting(values: &[Value], likely: u64) -> (u64, Value) {
        let mut records = [0u32; 8];
        for value in values.iter().filter(|value| value.is(Kind::Record)) {
            records[Self::tag_of(*value)] += 1;
        }
        let most = records.iter().copied().max().unwrap_or(0);
        // A run of one saves nothing.
        if most < 2 {
            return (0, Value::NONE);
        }
        let (counting, base) = Self::run_of(values, likely);
        if counting.count_ones() == most {
            return (counting, base);
        }
        (0..8u64)
            .filter(|&tag| records[tag as usize] > 1)
            .map(|tag| Self::run_of(values, tag << Self::RECORD_TAG_SHIFT))
            .max_by_key(|(counting, _)| counting.count_ones())
            .filter(|(counting, _)| counting.count_ones() > 1)
            .unwrap_or((0, Value::NONE))
    }

    /// A record's tag (bits 56-58 of its payload) as a number.
    #[inline]
    fn tag_of(record: Value) -> usize {
        ((record.payload() & Self::RECORD_TAGS) >> Self::RECORD_TAG_SHIFT) as usize
    }

    /// The entries of `values` that count up from the first record with tag bits `tag`.
    #[inline]
    fn run_of(values: &[Value], tag: u64) -> (u64, Value) {
        let mut counting = 0u64;
        let mut base = Value::NONE;
        let mut next = 0;
        for (bit, &value) in values.iter().enumerate() {
            if counting != 0 {
                if value.0 == next {
                    counting |= 1 << bit;
                    next = next.wrapping_add(1);
                }
            } else if value.is(Kind::Record) && value.payload() & Self::RECORD_TAGS == tag {
                counting = 1 << bit;
                base = value;
                next = value.0.wrapping_add(1);
            }
        }
        (counting, base)
    }

    #[inline(always)]
    pub fn get(&self, index: u32) -> Option<Value> {
        let i = index as usize;
        if let Some(&value) = self.hot.get(i) {
            return Some(value);
        }
        let Some(dense) = i.checked_sub(Self::HOT) else {
            return self.sparse.get(&index).copied();
        };
        let Some(block) = self.blocks.get(dense / Self::BLOCK) else {
            let open = dense - self.blocks.len() * Self::BLOCK;
            return match self.open.get(open) {
                Some(&value) => Some(value),
                None => self.sparse.get(&index).copied(),
            };
        };
        if block.rewritten
            && let Some(&value) = self.rewritten.get(&index)
        {
            return Some(value);
        }
        let bit = dense % Self::BLOCK;
        let below = (1u64 << bit) - 1;
        if block.counting & (1 << bit) != 0 {
            let before = block.counting & below;
            return Some(Value(block.base.0 + u64::from(before.count_ones())));
        }
        let [(first, first_value), (second, second_value)] = block.repeats;
        if first & (1 << bit) != 0 {
            return Some(first_value);
        }
        if second & (1 << bit) != 0 {
            return Some(second_value);
        }
        let before = (block.counting | first | second) & below;
        let at = block.packed_at as usize + bit - before.count_ones() as usize;
        match self.packed.get(at) {
            Some(&[.., Self::WIDE]) => self.wide.get(&index).copied(),
            Some(&entry) => Some(Self::unpack(entry)),
            None => None,
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

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Values of every form the memo stores differently: records of two kinds that count up
    /// (events and stacks, as a trace memoizes them), records that do not, strings, wide
    /// values (a negative int, a record index past 32 bits, a big index) and plain ones.
    fn some_value(rng: &mut Rng, events: &mut u64, stacks: &mut u64) -> Value {
        match rng.below(12) {
            0..=4 => {
                *events += 1;
                Value::record((1 << 56) | *events)
            }
            5 | 6 => {
                *stacks += 1 + rng.below(2);
                Value::record((2 << 56) | *stacks)
            }
            7 => Value::record((3 << 56) | rng.below(1000)),
            8 => Value::of(Kind::Str, rng.below(50) as usize),
            9 => int_value(-(rng.below(100) as i64) - 1),
            10 => match rng.below(3) {
                0 => Value::record((1 << 58) | (1 << 40) | rng.below(9)),
                1 => Value::of(Kind::Dict, (1 << 33) + rng.below(9) as usize),
                _ => Value::NONE,
            },
            _ => Value::bool(rng.below(2) == 1),
        }
    }

    #[test]
    fn the_memo_reads_back_what_was_set_in_any_order() {
        for seed in 1..=6u64 {
            let mut rng = Rng(seed * 0x9E37_79B9_7F4A_7C15);
            let (mut events, mut stacks) = (0, 0);
            let mut memo = Memo::default();
            let mut model: std::collections::HashMap<u32, Value> = Default::default();
            let puts = Memo::HOT as u32 + 20_000 + seed as u32 * 997;
            let mut next = 0u32;
            while next < puts {
                let value = some_value(&mut rng, &mut events, &mut stacks);
                let index = match rng.below(100) {
                    // Set again: a recent entry (a container replaced by what it became) or
                    // any earlier one (a PUT to an old index).
                    0..=5 if next > 0 => next - 1 - rng.below(u64::from(next.min(40))) as u32,
                    6 if next > 0 => rng.below(u64::from(next)) as u32,
                    // A hole: far past the end, then maybe filled in order later.
                    7 if seed % 2 == 0 => next + 1 + rng.below(300) as u32,
                    _ => next,
                };
                memo.set(index, value);
                model.insert(index, value);
                while model.contains_key(&next) {
                    next = next.wrapping_add(1);
                }
                assert_eq!(memo.next_index() as usize, model.len(), "seed {seed}");
            }
            for index in 0..next + 400 {
                assert_eq!(
                    memo.get(index),
                    model.get(&index).copied(),
                    "seed {seed}, index {index}"
                );
            }
            let extended = (0..500).map(|_| some_value(&mut rng, &mut events, &mut stacks));
            let extended: Vec<Value> = extended.collect();
            let first = memo.next_index();
            memo.extend(extended.iter().copied());
            for (index, &value) in (first..).zip(&extended) {
                if !model.contains_key(&index) {
                    assert_eq!(
                        memo.get(index),
                        Some(value),
                        "seed {seed}, extended {index}"
                    );
                }
            }
        }
    }

    /// `values` as whole blocks: the runs of records counting up from each block's first
    /// record of tag 1 (as a decode worker lays out its rows), and the others.
    fn laid_out(values: &[Value]) -> (Vec<CountedBlock>, Vec<Value>) {
        let mut blocks = Vec::new();
        let mut others = Vec::new();
        for block in values.chunks_exact(Memo::BLOCK) {
            let (counting, base) = Memo::run_of(block, 1 << 56);
            others.extend(
                (0..Memo::BLOCK)
                    .filter(|bit| counting & (1 << bit) == 0)
                    .map(|bit| block[bit]),
            );
            blocks.push(CountedBlock { counting, base });
        }
        (blocks, others)
    }

    #[test]
    fn blocks_laid_out_elsewhere_read_back_as_set_one_by_one() {
        // Memos ending at a block past the hot entries (taken whole, after the open entries
        // are closed), inside a block, inside the hot entries, and with a sparse index.
        let cases: [(&str, usize, bool); 5] = [
            ("at a block", Memo::HOT + 3 * Memo::BLOCK, false),
            ("at the first block", Memo::HOT, false),
            ("inside a block", Memo::HOT + 3 * Memo::BLOCK + 5, false),
            ("in the hot entries", Memo::HOT - 2 * Memo::BLOCK, false),
            ("with a sparse index", Memo::HOT + 3 * Memo::BLOCK, true),
        ];
        for (case, before, sparse) in cases {
            let mut rng = Rng(before as u64 * 31 + 7);
            let (mut events, mut stacks) = (0, 0);
            let mut by_blocks = Memo::default();
            let mut one_by_one = Memo::default();
            for index in 0..before as u32 {
                let value = some_value(&mut rng, &mut events, &mut stacks);
                by_blocks.set(index, value);
                one_by_one.set(index, value);
            }
            if sparse {
                by_blocks.set(4_000_000, Value::bool(true));
                one_by_one.set(4_000_000, Value::bool(true));
            }
            let values: Vec<Value> = (0..40 * Memo::BLOCK)
                .map(|_| some_value(&mut rng, &mut events, &mut stacks))
                .collect();
            let (blocks, others) = laid_out(&values);
            assert!(
                blocks.iter().filter(|block| block.counting != 0).count() > 30,
                "{case}: records should count up"
            );
            by_blocks.extend_blocks(&blocks, others.iter().copied());
            one_by_one.extend(values.iter().copied());
            // Then on as usual, an old entry set again among them.
            for memo in [&mut by_blocks, &mut one_by_one] {
                memo.extend(
                    (0..300u32).map(|i| Value::record((1 << 56) | (1 << 40) | u64::from(i))),
                );
                memo.set(before as u32 + 100, Value::bool(false));
            }
            assert_eq!(by_blocks.next_index(), one_by_one.next_index(), "{case}");
            for index in 0..by_blocks.next_index() + 10 {
                assert_eq!(
                    by_blocks.get(index),
                    one_by_one.get(index),
                    "{case}: index {index}"
                );
            }
            assert_eq!(
                by_blocks.get(4_000_000),
                one_by_one.get(4_000_000),
                "{case}"
            );
        }
    }

    /// A trace memoizes each event beside the same string and the same empty stack: both take
    /// a bit, nothing is packed, and a value seen once in a block (a new stack) is still read
    /// back, as is an entry set again after its block was made.
    #[test]
    fn values_repeated_in_a_block_take_a_bit_each() {
        let context = Value::of(Kind::Str, 7);
        let empty_stack = Value::record(2 << 56);
        let mut memo = Memo::default();
        let mut expected = Vec::new();
        for event in 0..100_000u64 {
            let stack = if event % 1000 == 0 {
                Value::record((2 << 56) | (event / 1000 + 1))
            } else {
                empty_stack
            };
            for value in [Value::record((1 << 56) | event), context, stack] {
                memo.set(memo.next_index(), value);
                expected.push(value);
            }
        }
        assert!(
            memo.packed.len() <= 100,
            "{} entries packed: the repeated ones should take a bit",
            memo.packed.len()
        );
        let old = Memo::HOT as u32 + 301;
        memo.set(old, Value::bool(true));
        expected[old as usize] = Value::bool(true);
        for (index, &value) in expected.iter().enumerate() {
            assert_eq!(memo.get(index as u32), Some(value), "index {index}");
        }
    }

    #[test]
    fn events_that_count_up_take_a_bit_each() {
        // A trace's pattern: each event's record, its stack's, and now and then a string.
        let mut memo = Memo::default();
        let mut rng = Rng(7);
        let (mut stacks, mut puts) = (0u64, 0usize);
        for event in 0..400_000u64 {
            let at = memo.next_index();
            memo.set(at, Value::record((1 << 56) | event));
            puts += 1;
            if rng.below(3) == 0 {
                stacks += 1 + rng.below(5);
                memo.set(memo.next_index(), Value::record((2 << 56) | stacks));
                puts += 1;
            }
        }
        let dense = puts - Memo::HOT;
        assert!(
            memo.packed.len() < dense / 3,
            "{} of {dense} entries packed: the events should count up",
            memo.packed.len()
        );
        let mut event = 0;
        for index in 0..memo.next_index() {
            let value = memo.get(index).expect("set");
            if value.payload() >> 56 == 1 {
                assert_eq!(value, Value::record((1 << 56) | event), "index {index}");
                event += 1;
            }
        }
        assert_eq!(event, 400_000);
    }
}
