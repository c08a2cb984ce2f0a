//! The heap: interned strings, numbers and containers that [`Value`]s point at by index, the
//! reusable container slots a compactor retires, and the typed accessors readers use.

use super::{Kind, Memo, Value};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Storage for everything a [`Value`] points at.
#[derive(Debug, Default)]
pub struct Heap {
    strings: Vec<Arc<str>>,
    string_index: FxHashMap<Arc<str>, u32>,
    bytes: Vec<Box<[u8]>>,
    /// Little-endian two's complement, as LONG1/LONG4 write them.
    big_ints: Vec<Box<[u8]>>,
    floats: Vec<f64>,
    tuples: Vec<Box<[Value]>>,
    pub(crate) lists: Slots<Value>,
    pub(crate) dicts: Slots<(Value, Value)>,
    /// Bytes of floats and long integers decoded elsewhere (a parallel decode's regions), which
    /// a sequential decode would have kept here: [`Heap::footprint`] counts them the same.
    unstored: u64,
}

/// Containers that can be retired and their slot reused, so a stream of records that are
/// compacted as they arrive costs a bounded number of live containers.
#[derive(Debug)]
pub(crate) struct Slots<T> {
    items: Vec<Vec<T>>,
    /// The memo index that refers to each slot: `NOT_MEMOIZED`, one index, or `SHARED`.
    memo: Vec<u32>,
    /// Set once a container was fetched from the memo or duplicated: it may be referenced
    /// from several places, so it is never retired.
    shared: Vec<bool>,
    free: Vec<u32>,
}

const NOT_MEMOIZED: u32 = u32::MAX;
const MEMOIZED_TWICE: u32 = u32::MAX - 1;

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            memo: Vec::new(),
            shared: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    pub(crate) fn alloc(&mut self) -> usize {
        if let Some(slot) = self.free.pop() {
            return slot as usize;
        }
        self.items.push(Vec::new());
        self.memo.push(NOT_MEMOIZED);
        self.shared.push(false);
        self.items.len() - 1
    }

    pub(crate) fn get(&self, slot: usize) -> &[T] {
        self.items.get(slot).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn get_mut(&mut self, slot: usize) -> Option<&mut Vec<T>> {
        self.items.get_mut(slot)
    }

    pub(crate) fn note_memo(&mut self, slot: usize, memo_index: u32) {
        if let Some(entry) = self.memo.get_mut(slot) {
            *entry = if *entry == NOT_MEMOIZED {
                memo_index
            } else {
                MEMOIZED_TWICE
            };
        }
    }

    pub(crate) fn note_shared(&mut self, slot: usize) {
        if let Some(shared) = self.shared.get_mut(slot) {
            *shared = true;
        }
    }

    fn is_unshared(&self, slot: usize) -> bool {
        self.shared.get(slot) == Some(&false) && self.memo[slot] != MEMOIZED_TWICE
    }

    /// The memo index to redirect (if exactly one names the slot), and whether the slot was
    /// freed (only when unshared: a shared container may still be referenced from elsewhere).
    fn retire(&mut self, slot: usize) -> (Option<u32>, bool) {
        let Some(&memo) = self.memo.get(slot) else {
            return (None, false);
        };
        let memo_index = (memo != NOT_MEMOIZED && memo != MEMOIZED_TWICE).then_some(memo);
        if !self.is_unshared(slot) {
            return (memo_index, false);
        }
        self.items[slot].clear();
        self.memo[slot] = NOT_MEMOIZED;
        self.free.push(slot as u32);
        (memo_index, true)
    }
}

impl Heap {
    /// Interns a string: equal texts share one id (and one allocation).
    pub fn intern_str(&mut self, text: &str) -> Value {
        if let Some(&id) = self.string_index.get(text) {
            return Value::of(Kind::Str, id as usize);
        }
        let id = self.strings.len();
        let shared: Arc<str> = Arc::from(text);
        self.strings.push(shared.clone());
        self.string_index.insert(shared, id as u32);
        Value::of(Kind::Str, id)
    }

    /// The id of `text` if some string value with that text exists.
    pub fn find_str(&self, text: &str) -> Option<Value> {
        self.string_index
            .get(text)
            .map(|&id| Value::of(Kind::Str, id as usize))
    }

    pub fn push_bytes(&mut self, bytes: Vec<u8>) -> Value {
        self.bytes.push(bytes.into_boxed_slice());
        Value::of(Kind::Bytes, self.bytes.len() - 1)
    }

    pub fn push_float(&mut self, value: f64) -> Value {
        self.floats.push(value);
        Value::of(Kind::Float, self.floats.len() - 1)
    }

    /// The value of a LONG1/LONG4 integer's little-endian two's complement bytes when there are
    /// at most 8 of them (none is 0), else `None`. Shared by the decoder and the parallel
    /// pre-decoder, which must agree on which integers are stored inline.
    #[inline]
    pub fn long_within_i64(bytes: &[u8]) -> Option<i64> {
        let n = bytes.len();
        if n == 0 {
            return Some(0);
        }
        if n > 8 {
            return None;
        }
        // Assemble in a register (a copy through memory stalls on store forwarding), then shift
        // to the top and back down: the arithmetic shift sign-extends.
        let raw = bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte));
        let unused = 64 - 8 * n as u32;
        Some(((raw << unused) as i64) >> unused)
    }

    /// [`Heap::long_within_i64`] of the `n` bytes at `bytes[at..]`, as an inline value, when 8
    /// bytes can be read from there (all but the last few of a buffer): one load, its unused
    /// top bytes shifted out, with no call. The decoder's entry loop reads two per trace entry
    /// this way (address and time); `None` leaves the long to [`Heap::push_long`].
    #[inline(always)]
    pub(crate) fn inline_long_at(bytes: &[u8], at: usize, n: usize) -> Option<Value> {
        if !(1..=8).contains(&n) {
            return None;
        }
        let word: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
        let unused = 64 - 8 * n as u32;
        Value::small_int(((u64::from_le_bytes(word) << unused) as i64) >> unused)
    }

    /// An integer from its little-endian two's complement bytes (LONG1/LONG4).
    #[inline]
    pub fn push_long(&mut self, bytes: &[u8]) -> Value {
        if let Some(value) = Self::long_within_i64(bytes).and_then(Value::small_int) {
            return value;
        }
        self.big_ints.push(bytes.into());
        Value::of(Kind::BigInt, self.big_ints.len() - 1)
    }

    pub fn push_tuple(&mut self, items: Vec<Value>) -> Value {
        self.tuples.push(items.into_boxed_slice());
        Value::of(Kind::Tuple, self.tuples.len() - 1)
    }

    pub fn new_list(&mut self) -> Value {
        Value::of(Kind::List, self.lists.alloc())
    }

    pub fn new_dict(&mut self) -> Value {
        Value::of(Kind::Dict, self.dicts.alloc())
    }

    /// Appends to a list (for building values from other formats, such as JSON).
    pub fn list_push(&mut self, list: Value, item: Value) {
        if list.is(Kind::List)
            && let Some(items) = self.lists.get_mut(list.index())
        {
            items.push(item);
        }
    }

    /// Sets a key of a dict (for building values from other formats, such as JSON).
    pub fn dict_insert(&mut self, dict: Value, key: Value, value: Value) {
        if dict.is(Kind::Dict)
            && let Some(pairs) = self.dicts.get_mut(dict.index())
        {
            pairs.push((key, value));
        }
    }

    /// Counts bytes of values decoded elsewhere that a sequential decode keeps in the heap.
    pub fn count_unstored(&mut self, bytes: u64) {
        self.unstored = self.unstored.saturating_add(bytes);
    }

    /// The bytes of text and bytes values, each stored once however often the file refers to
    /// it.
    pub fn text_bytes(&self) -> u64 {
        let strings: usize = self.strings.iter().map(|s| s.len()).sum();
        let bytes: usize = self.bytes.iter().map(|b| b.len()).sum();
        (strings + bytes) as u64
    }

    /// About how many bytes the decoded values occupy: their text, bytes, numbers and container
    /// items, each stored once however often the file refers to it.
    pub fn footprint(&self) -> u64 {
        let value = std::mem::size_of::<Value>();
        let strings: usize = self.strings.iter().map(|s| s.len()).sum();
        let bytes: usize = self.bytes.iter().map(|b| b.len()).sum();
        let big_ints: usize = self.big_ints.iter().map(|b| b.len()).sum();
        let tuples: usize = self.tuples.iter().map(|t| t.len()).sum();
        let lists: usize = self.lists.items.iter().map(Vec::len).sum();
        let pairs: usize = self.dicts.items.iter().map(Vec::len).sum();
        let total = strings
            + bytes
            + big_ints
            + 8 * self.floats.len()
            + value * (tuples + lists + 2 * pairs);
        (total as u64).saturating_add(self.unstored)
    }

    // ---- reading ----

    pub fn str(&self, value: Value) -> Option<&str> {
        match value.kind() {
            Kind::Str => self.strings.get(value.index()).map(|s| &**s),
            _ => None,
        }
    }

    /// The shared text of a string value, borrowed.
    pub fn shared_str(&self, value: Value) -> Option<&Arc<str>> {
        match value.kind() {
            Kind::Str => self.strings.get(value.index()),
            _ => None,
        }
    }

    /// The shared text of a string value (cheap to clone into the model).
    pub fn arc_str(&self, value: Value) -> Option<Arc<str>> {
        match value.kind() {
            Kind::Str => self.strings.get(value.index()).cloned(),
            _ => None,
        }
    }

    pub fn bytes(&self, value: Value) -> Option<&[u8]> {
        match value.kind() {
            Kind::Bytes => self.bytes.get(value.index()).map(|b| &**b),
            _ => None,
        }
    }

    /// An integer stored inline (every integer that fits 60 bits), without a heap lookup.
    #[inline]
    pub fn small_int(&self, value: Value) -> Option<i64> {
        value.is(Kind::Int).then(|| value.inline_int())
    }

    /// Any integer (or bool) that fits an `i64`.
    pub fn i64(&self, value: Value) -> Option<i64> {
        match value.kind() {
            Kind::Int => Some(value.inline_int()),
            Kind::Bool => Some(value.payload() as i64),
            Kind::BigInt => {
                let bytes = self.big_ints.get(value.index())?;
                let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
                let fill = if negative { 0xff } else { 0 };
                if bytes.len() > 8 && bytes[8..].iter().any(|&b| b != fill) {
                    return None;
                }
                let mut buf = [fill; 8];
                let n = bytes.len().min(8);
                buf[..n].copy_from_slice(&bytes[..n]);
                let result = i64::from_le_bytes(buf);
                // The sign must survive the truncation.
                ((result < 0) == negative).then_some(result)
            }
            _ => None,
        }
    }

    /// Any non-negative integer that fits a `u64` (addresses, sizes, `u64::MAX` line numbers).
    pub fn u64(&self, value: Value) -> Option<u64> {
        match value.kind() {
            Kind::Int | Kind::Bool => u64::try_from(self.i64(value)?).ok(),
            Kind::BigInt => {
                let bytes = self.big_ints.get(value.index())?;
                if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                    return None;
                }
                if bytes.len() > 8 && bytes[8..].iter().any(|&b| b != 0) {
                    return None;
                }
                let mut buf = [0; 8];
                let n = bytes.len().min(8);
                buf[..n].copy_from_slice(&bytes[..n]);
                Some(u64::from_le_bytes(buf))
            }
            _ => None,
        }
    }

    pub fn f64(&self, value: Value) -> Option<f64> {
        match value.kind() {
            Kind::Float => self.floats.get(value.index()).copied(),
            Kind::Int | Kind::Bool | Kind::BigInt => self.i64(value).map(|v| v as f64),
            _ => None,
        }
    }

    pub fn bool(&self, value: Value) -> Option<bool> {
        match value.kind() {
            Kind::Bool => Some(value.payload() != 0),
            Kind::Int => Some(value.inline_int() != 0),
            _ => None,
        }
    }

    /// Items of a list or tuple (sets decode as lists).
    pub fn items(&self, value: Value) -> Option<&[Value]> {
        match value.kind() {
            Kind::List => Some(self.lists.get(value.index())),
            Kind::Tuple => self.tuples.get(value.index()).map(|t| &**t),
            _ => None,
        }
    }

    /// Key/value pairs of a dict, in the order they were set (a key set twice appears twice;
    /// [`Heap::get`] returns the last, as Python would keep).
    pub fn pairs(&self, value: Value) -> Option<&[(Value, Value)]> {
        match value.kind() {
            Kind::Dict => Some(self.dicts.get(value.index())),
            _ => None,
        }
    }

    /// The value under string key `key` in dict `dict`.
    pub fn get(&self, dict: Value, key: &str) -> Option<Value> {
        let key = self.find_str(key)?;
        self.pairs(dict)?
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Replaces a list or dict by a compact handle: the memo entry that named it yields
    /// `replacement` from now on, and its slot is freed for reuse when nothing else can refer to
    /// it. Returns whether the slot was freed.
    pub fn retire(&mut self, container: Value, replacement: Value, memo: &mut Memo) -> bool {
        let (memo_index, freed) = match container.kind() {
            Kind::List => self.lists.retire(container.index()),
            Kind::Dict => self.dicts.retire(container.index()),
            _ => return false,
        };
        if let Some(index) = memo_index {
            memo.set(index, replacement);
        }
        freed
    }

    /// Whether a container is referenced from one place only, so [`Heap::retire`] would free it.
    pub fn can_retire(&self, container: Value) -> bool {
        match container.kind() {
            Kind::List => self.lists.is_unshared(container.index()),
            Kind::Dict => self.dicts.is_unshared(container.index()),
            _ => false,
        }
    }

    #[inline]
    pub(crate) fn note_memo(&mut self, value: Value, index: u32) {
        if value.is(Kind::List) {
            self.lists.note_memo(value.index(), index);
        } else if value.is(Kind::Dict) {
            self.dicts.note_memo(value.index(), index);
        }
    }

    #[inline]
    pub(crate) fn note_shared(&mut self, value: Value) {
        if value.is(Kind::List) {
            self.lists.note_shared(value.index());
        } else if value.is(Kind::Dict) {
            self.dicts.note_shared(value.index());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pickle::value::{INLINE_MAX, INLINE_MIN};

    #[test]
    fn inline_ints_round_trip_at_the_edges() {
        let heap = Heap::default();
        for v in [0, 1, -1, INLINE_MIN, INLINE_MAX, 1_796_004_466_086_870] {
            let value = Value::small_int(v).expect("fits");
            assert_eq!(heap.i64(value), Some(v));
        }
        assert!(Value::small_int(INLINE_MAX + 1).is_none());
    }

    /// The one-load read of a LONG1 agrees with the byte-by-byte one on every length
    /// and at the edges of the inline range, whatever bytes follow it, and declines a long it
    /// cannot read whole in one load (near the buffer's end) or that is not inline.
    #[test]
    fn a_long1_read_in_one_load_is_the_long_read_byte_by_byte() {
        // Value's inline range is 60 bits: its edges, and one past them.
        let edges = [(1i64 << 59) - 1, 1 << 59, -(1 << 59), -(1 << 59) - 1];
        let values = [
            0i64,
            1,
            -1,
            127,
            128,
            -129,
            1 << 40,
            -(1 << 47),
            i64::MAX,
            i64::MIN,
        ];
        for value in values.into_iter().chain(edges) {
            for n in 1..=8usize {
                let long = &value.to_le_bytes()[..n];
                let mut bytes = long.to_vec();
                bytes.extend_from_slice(&[0xa5; 8]);
                let expected = Heap::long_within_i64(long).and_then(Value::small_int);
                assert_eq!(
                    Heap::inline_long_at(&bytes, 0, n),
                    expected,
                    "{value} in {n} bytes"
                );
                let whole = (n == 8).then_some(expected).flatten();
                assert_eq!(
                    Heap::inline_long_at(long, 0, n),
                    whole,
                    "only {n} bytes left"
                );
            }
        }
        assert_eq!(
            Heap::inline_long_at(&[0; 16], 0, 0),
            None,
            "LONG1 0 is left to the loop"
        );
        assert_eq!(Heap::inline_long_at(&[0; 16], 0, 9), None);
    }

    #[test]
    fn longs_beyond_i64_read_as_u64() {
        let mut heap = Heap::default();
        // 2**64 - 1 as pickle writes it: 9 bytes, the last a zero sign byte.
        let max = heap.push_long(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]);
        assert_eq!(heap.u64(max), Some(u64::MAX));
        assert_eq!(heap.i64(max), None);
        let minus_two = heap.push_long(&[0xfe]);
        assert_eq!(heap.i64(minus_two), Some(-2));
        assert_eq!(heap.u64(minus_two), None);
    }
}
