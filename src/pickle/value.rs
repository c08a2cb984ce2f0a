//! Decoded pickle values and the heap that owns their contents.
//!
//! A [`Value`] is 8 bytes: a 4-bit kind and a 60-bit payload (an inline integer or an index into
//! the [`Heap`]). The memo of a long trace holds millions of values, so their size matters.
//! Containers live in the heap and are referred to by index, which is how memo identity is kept:
//! a frame dict written once and fetched 100k times is one heap dict.

mod heap;
mod memo;

pub use heap::Heap;
pub use memo::{CountedBlock, Memo};

const KIND_SHIFT: u32 = 60;
const PAYLOAD_MASK: u64 = (1 << KIND_SHIFT) - 1;
const INLINE_MIN: i64 = -(1 << 59);
const INLINE_MAX: i64 = (1 << 59) - 1;

/// The kinds of value a data-only pickle can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    None,
    Bool,
    Int,
    BigInt,
    Float,
    Str,
    Bytes,
    List,
    Dict,
    Tuple,
    /// A value the [`Compactor`](super::Compactor) replaced with its own handle.
    Record,
}

const KINDS: [Kind; 11] = [
    Kind::None,
    Kind::Bool,
    Kind::Int,
    Kind::BigInt,
    Kind::Float,
    Kind::Str,
    Kind::Bytes,
    Kind::List,
    Kind::Dict,
    Kind::Tuple,
    Kind::Record,
];

/// One decoded value: a kind and an inline payload.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(u64);

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}({})", self.kind(), self.payload())
    }
}

impl Value {
    pub const NONE: Value = Value(0);

    fn new(kind: Kind, payload: u64) -> Self {
        Value(((kind as u64) << KIND_SHIFT) | (payload & PAYLOAD_MASK))
    }

    pub fn kind(self) -> Kind {
        // Values are only made by `new`, so the tag is always a valid index.
        KINDS
            .get((self.0 >> KIND_SHIFT) as usize)
            .copied()
            .unwrap_or(Kind::None)
    }

    pub fn payload(self) -> u64 {
        self.0 & PAYLOAD_MASK
    }

    pub(crate) fn index(self) -> usize {
        self.payload() as usize
    }

    pub fn bool(value: bool) -> Self {
        Self::new(Kind::Bool, u64::from(value))
    }

    /// A record handle chosen by a compactor (60 bits are available).
    pub fn record(handle: u64) -> Self {
        Self::new(Kind::Record, handle)
    }

    pub(crate) fn of(kind: Kind, index: usize) -> Self {
        Self::new(kind, index as u64)
    }

    /// An inline integer, if `value` fits in 60 bits.
    pub fn small_int(value: i64) -> Option<Self> {
        (INLINE_MIN..=INLINE_MAX)
            .contains(&value)
            .then(|| Self::new(Kind::Int, value as u64))
    }

    fn inline_int(self) -> i64 {
        ((self.0 << 4) as i64) >> 4
    }

    /// Whether `values` are the records `handle`, `handle + 1`, ... (a compactor's numbered
    /// records, appended in order). Compares every item without stopping early, so the loop
    /// vectorizes (a trace's list holds millions of them).
    pub fn is_record_run(values: &[Value], handle: u64) -> bool {
        let first = Value::record(handle).0;
        values
            .iter()
            .zip(first..)
            .fold(true, |all, (value, expected)| all & (value.0 == expected))
            && handle
                .checked_add(values.len() as u64)
                .is_some_and(|end| end <= PAYLOAD_MASK)
    }

    /// Compares the tag directly (no table lookup): the decoder asks this for every value.
    #[inline]
    pub fn is(self, kind: Kind) -> bool {
        self.0 >> KIND_SHIFT == kind as u64
    }
}
