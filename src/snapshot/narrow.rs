//! Trace columns narrower than their values. A long trace repeats a handful of streams, almost
//! never carries `compile_context` or `user_metadata`, asks for less than 4 GiB per block,
//! records times microseconds apart and addresses 512-byte aligned within a terabyte of each
//! other, and names a few thousand stacks; storing a `u64` stream, two `u32` text ids, a `u64`
//! size, an `i64` time, a `u64` address and a `u32` stack per event (40 of the 45 bytes an
//! event took) paid for little. These columns keep
//! every value exact and fall back to the wide form where a file needs it.

use super::Column;
use std::ops::Range;

/// The CUDA stream of each event: one byte per event indexing the distinct streams while there
/// are at most 256 of them (a program uses a handful), the raw values past that.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamColumn {
    Coded {
        codes: Column<u8>,
        streams: Vec<u64>,
    },
    Raw(Column<u64>),
}

impl Default for StreamColumn {
    fn default() -> Self {
        Self::Coded {
            codes: Column::default(),
            streams: Vec::new(),
        }
    }
}

impl StreamColumn {
    /// The stream of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u64 {
        match self {
            // A code past the table can only come from a damaged stored index (the parser
            // never writes one): it reads as stream 0 rather than failing the request.
            Self::Coded { codes, streams } => {
                streams.get(usize::from(codes[event])).copied().unwrap_or(0)
            }
            Self::Raw(values) => values[event],
        }
    }

    /// Every stream, in event order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|event| self.get(event))
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Coded { codes, .. } => codes.len(),
            Self::Raw(values) => values.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn push(&mut self, stream: u64) {
        match self {
            Self::Coded { codes, streams } => {
                // The last stream added is nearly always the one asked for.
                if let Some(code) = streams.iter().rposition(|&s| s == stream) {
                    codes.push(code as u8);
                } else if streams.len() <= usize::from(u8::MAX) {
                    codes.push(streams.len() as u8);
                    streams.push(stream);
                } else {
                    let mut raw: Vec<u64> = Vec::with_capacity(codes.len() * 2);
                    raw.extend(codes.iter().map(|&c| streams[usize::from(c)]));
                    raw.push(stream);
                    *self = Self::Raw(raw.into());
                }
            }
            Self::Raw(values) => values.push(stream),
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        match self {
            Self::Coded { codes, .. } => {
                let _ = codes.try_reserve(extra);
            }
            Self::Raw(values) => {
                let _ = values.try_reserve(extra);
            }
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match self {
            Self::Coded { codes, .. } => codes.truncate(len),
            Self::Raw(values) => values.truncate(len),
        }
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        match self {
            Self::Coded { codes, streams } => Self::Coded {
                codes: codes.split_off(start),
                streams: streams.clone(),
            },
            Self::Raw(values) => Self::Raw(values.split_off(start)),
        }
    }

    /// Heap bytes held (by capacity).
    /// The column as a stored index keeps it: the per-event bytes (codes, or raw `u64`s), and
    /// the distinct streams the codes index (`None` for raw values).
    pub(crate) fn parts(&self) -> (&[u8], Option<&[u64]>) {
        match self {
            Self::Coded { codes, streams } => (codes.as_bytes(), Some(streams)),
            Self::Raw(values) => (values.as_bytes(), None),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            Self::Coded { codes, .. } => codes.shrink_to_fit(),
            Self::Raw(values) => values.shrink_to_fit(),
        }
    }

    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Coded { codes, streams } => codes.heap_bytes() + (streams.capacity() * 8) as u64,
            Self::Raw(values) => values.heap_bytes(),
        }
    }
}

/// A text id per event (into `Trace::strings`, 0: none), stored only up to the last event that
/// has one: empty, and free, in the snapshots torch writes without them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SparseIds(Column<u32>);

impl SparseIds {
    /// The id of event `event` (0: none).
    #[inline]
    pub fn get(&self, event: usize) -> u32 {
        self.0.get(event).copied().unwrap_or(0)
    }

    /// Gives event `event` the id `id` (0 leaves it none).
    #[inline]
    pub fn set(&mut self, event: usize, id: u32) {
        if id == 0 && event >= self.0.len() {
            return;
        }
        if event >= self.0.len() {
            self.0.resize(event, 0);
            self.0.push(id);
        } else {
            self.0[event] = id;
        }
    }

    /// Whether no event has an id.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&id| id == 0)
    }

    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// Moves events `start..` into ids of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        Self(self.0.split_off(start.min(self.0.len())))
    }

    /// Heap bytes held (by capacity).
    pub fn heap_bytes(&self) -> u64 {
        self.0.heap_bytes()
    }

    /// The ids as stored: up to the last event that has one.
    pub(crate) fn column(&self) -> &Column<u32> {
        &self.0
    }

    /// Ids as a stored index keeps them (see [`SparseIds::column`]).
    pub(crate) fn from_column(ids: Column<u32>) -> Self {
        Self(ids)
    }
}

/// The values a narrow column keeps aside, exactly: `(event, value)` in event order, each
/// marked in the column by a reserved code. Shared by [`SizeColumn`] (sizes of 4 GiB or more)
/// and [`AddrColumn`] (addresses that fit no offset).
#[derive(Debug, Default, Clone, PartialEq)]
struct Aside(Vec<(usize, u64)>);

impl Aside {
    fn get(&self, event: usize) -> Option<u64> {
        self.0
            .binary_search_by_key(&event, |&(e, _)| e)
            .ok()
            .map(|i| self.0[i].1)
    }

    /// Adds the value of event `event`, past every event already aside.
    fn push(&mut self, event: usize, value: u64) {
        self.0.push((event, value));
    }

    /// Sets (or, with `None`, removes) the value of event `event`, anywhere.
    fn set(&mut self, event: usize, value: Option<u64>) {
        let at = self.0.partition_point(|&(e, _)| e < event);
        match (self.0.get(at).is_some_and(|&(e, _)| e == event), value) {
            (true, Some(value)) => self.0[at].1 = value,
            (true, None) => {
                self.0.remove(at);
            }
            (false, Some(value)) => self.0.insert(at, (event, value)),
            (false, None) => {}
        }
    }

    fn truncate(&mut self, len: usize) {
        let keep = self.0.partition_point(|&(e, _)| e < len);
        self.0.truncate(keep);
    }

    /// Moves events `start..` into an `Aside` of their own, counted from `start`.
    fn split_off(&mut self, start: usize) -> Self {
        let at = self.0.partition_point(|&(e, _)| e < start);
        Self(
            self.0
                .split_off(at)
                .into_iter()
                .map(|(e, value)| (e - start, value))
                .collect(),
        )
    }

    /// Whether these are in event order and all before `len` (as read from a stored index).
    fn fits(&self, len: usize) -> bool {
        let ordered = self.0.windows(2).all(|pair| pair[0].0 < pair[1].0);
        ordered && self.0.last().is_none_or(|&(event, _)| event < len)
    }

    fn events(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|&(e, _)| e)
    }

    fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }

    fn heap_bytes(&self) -> u64 {
        (self.0.capacity() * std::mem::size_of::<(usize, u64)>()) as u64
    }
}

/// Requested or segment bytes per event: 4 bytes each; the rare size of 4 GiB or more is kept
/// aside, in event order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SizeColumn {
    small: Column<u32>,
    /// Every size that does not fit a `u32` (marked `LARGE` in `small`).
    large: Aside,
}

impl SizeColumn {
    const LARGE: u32 = u32::MAX;

    /// The size at event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u64 {
        match self.small[event] {
            Self::LARGE => self.large.get(event).unwrap_or(u64::from(Self::LARGE)),
            small => u64::from(small),
        }
    }

    pub fn len(&self) -> usize {
        self.small.len()
    }

    /// Every size, in event order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|event| self.get(event))
    }

    pub fn is_empty(&self) -> bool {
        self.small.is_empty()
    }

    #[inline]
    pub fn push(&mut self, bytes: u64) {
        match u32::try_from(bytes) {
            Ok(small) if small != Self::LARGE => self.small.push(small),
            _ => {
                self.large.push(self.small.len(), bytes);
                self.small.push(Self::LARGE);
            }
        }
    }

    /// Sets the size at event `event` (tests build odd traces this way).
    pub fn set(&mut self, event: usize, bytes: u64) {
        match u32::try_from(bytes) {
            Ok(small) if small != Self::LARGE => {
                self.large.set(event, None);
                self.small[event] = small;
            }
            _ => {
                self.large.set(event, Some(bytes));
                self.small[event] = Self::LARGE;
            }
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        let _ = self.small.try_reserve(extra);
    }

    pub fn truncate(&mut self, len: usize) {
        self.small.truncate(len);
        self.large.truncate(len);
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        Self {
            small: self.small.split_off(start),
            large: self.large.split_off(start),
        }
    }

    pub fn shrink_to_fit(&mut self) {
        self.small.shrink_to_fit();
        self.large.shrink_to_fit();
    }

    pub fn heap_bytes(&self) -> u64 {
        self.small.heap_bytes() + self.large.heap_bytes()
    }

    /// The column as a stored index keeps it: 4 bytes per event, and the large sizes aside.
    pub(crate) fn parts(&self) -> (&Column<u32>, &[(usize, u64)]) {
        (&self.small, &self.large.0)
    }

    /// A column from [`SizeColumn::parts`]; `None` unless the large sizes are in event order
    /// and within the column.
    pub(crate) fn from_parts(small: Column<u32>, large: Vec<(usize, u64)>) -> Option<Self> {
        let large = Aside(large);
        large.fits(small.len()).then_some(Self { small, large })
    }
}

/// Event addresses: per block of 65,536 events a base (the block's first address), per event a
/// signed 32-bit offset from it in 512-byte units, the caching allocator's alignment (so
/// ±1 TiB around the base). An address that does not fit (unaligned, or farther away) is kept
/// aside exactly, as [`SizeColumn`] keeps large sizes. Random access stays O(1).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AddrColumn {
    bases: Vec<u64>,
    offsets: Column<i32>,
    /// Every address kept aside (marked `ASIDE` in `offsets`).
    aside: Aside,
}

const ADDR_BLOCK_LOG2: u32 = 16;
const ADDR_UNIT_LOG2: u32 = 9;

impl AddrColumn {
    const ASIDE: i32 = i32::MIN;

    /// The address of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u64 {
        match self.offsets[event] {
            Self::ASIDE => self.aside.get(event).unwrap_or(0),
            offset => self.bases[event >> ADDR_BLOCK_LOG2]
                .wrapping_add_signed(i64::from(offset) << ADDR_UNIT_LOG2),
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Every address, in event order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|event| self.get(event))
    }

    #[inline]
    pub fn push(&mut self, addr: u64) {
        let event = self.offsets.len();
        if event & ((1 << ADDR_BLOCK_LOG2) - 1) == 0 {
            self.bases.push(addr);
        }
        let from_base = addr.wrapping_sub(self.bases[event >> ADDR_BLOCK_LOG2]) as i64;
        let offset = (from_base & ((1 << ADDR_UNIT_LOG2) - 1) == 0)
            .then(|| i32::try_from(from_base >> ADDR_UNIT_LOG2).ok())
            .flatten()
            .filter(|&offset| offset != Self::ASIDE);
        match offset {
            Some(offset) => self.offsets.push(offset),
            None => {
                self.aside.push(event, addr);
                self.offsets.push(Self::ASIDE);
            }
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        let _ = self.offsets.try_reserve(extra);
    }

    pub fn truncate(&mut self, len: usize) {
        self.offsets.truncate(len);
        self.bases.truncate(len.div_ceil(1 << ADDR_BLOCK_LOG2));
        self.aside.truncate(len);
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        let mut tail = Self::default();
        for event in start..self.len() {
            tail.push(self.get(event));
        }
        self.truncate(start);
        tail
    }

    pub fn heap_bytes(&self) -> u64 {
        (self.bases.capacity() * 8) as u64 + self.aside.heap_bytes() + self.offsets.heap_bytes()
    }

    /// The bases, the offsets and the addresses kept aside, as the stored index holds them.
    pub(crate) fn parts(&self) -> (&[u64], &Column<i32>, &[(usize, u64)]) {
        (&self.bases, &self.offsets, &self.aside.0)
    }

    /// A column from a stored index's parts: `None` unless there is a base for every block
    /// and the addresses aside are in order, inside the column and marked.
    pub(crate) fn from_parts(
        bases: Vec<u64>,
        offsets: Column<i32>,
        aside: Vec<(usize, u64)>,
    ) -> Option<Self> {
        let aside = Aside(aside);
        let blocks = bases.len() == offsets.len().div_ceil(1 << ADDR_BLOCK_LOG2);
        let marked = aside.events().all(|e| offsets.get(e) == Some(&Self::ASIDE));
        (blocks && aside.fits(offsets.len()) && marked).then_some(Self {
            bases,
            offsets,
            aside,
        })
    }
}

impl From<Vec<u64>> for AddrColumn {
    fn from(addresses: Vec<u64>) -> Self {
        let mut column = Self::default();
        for addr in addresses {
            column.push(addr);
        }
        column
    }
}

impl FromIterator<u64> for AddrColumn {
    fn from_iter<I: IntoIterator<Item = u64>>(addresses: I) -> Self {
        let mut column = Self::default();
        for addr in addresses {
            column.push(addr);
        }
        column
    }
}

/// The stack of each event: a `u16` per event while every stack id fits one (a program's
/// allocation sites number in the thousands), the `u32` ids past that.
#[derive(Debug, Clone, PartialEq)]
pub enum StackColumn {
    Narrow(Column<u16>),
    Wide(Column<u32>),
}

impl Default for StackColumn {
    fn default() -> Self {
        Self::Narrow(Column::default())
    }
}

impl StackColumn {
    /// The stack of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u32 {
        match self {
            Self::Narrow(ids) => u32::from(ids[event]),
            Self::Wide(ids) => ids[event],
        }
    }

    /// The stack of event `event`, if there is one.
    pub fn at(&self, event: usize) -> Option<u32> {
        (event < self.len()).then(|| self.get(event))
    }

    /// Every stack, in event order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).map(|event| self.get(event))
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Narrow(ids) => ids.len(),
            Self::Wide(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn push(&mut self, stack: u32) {
        match self {
            Self::Narrow(ids) => match u16::try_from(stack) {
                Ok(narrow) => ids.push(narrow),
                Err(_) => {
                    let mut wide: Vec<u32> = Vec::with_capacity(ids.len() * 2);
                    wide.extend(ids.iter().map(|&id| u32::from(id)));
                    wide.push(stack);
                    *self = Self::Wide(wide.into());
                }
            },
            Self::Wide(ids) => ids.push(stack),
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        match self {
            Self::Narrow(ids) => {
                let _ = ids.try_reserve(extra);
            }
            Self::Wide(ids) => {
                let _ = ids.try_reserve(extra);
            }
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match self {
            Self::Narrow(ids) => ids.truncate(len),
            Self::Wide(ids) => ids.truncate(len),
        }
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        match self {
            Self::Narrow(ids) => Self::Narrow(ids.split_off(start)),
            Self::Wide(ids) => Self::Wide(ids.split_off(start)),
        }
    }

    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Narrow(ids) => ids.heap_bytes(),
            Self::Wide(ids) => ids.heap_bytes(),
        }
    }
}

impl From<Vec<u32>> for StackColumn {
    fn from(stacks: Vec<u32>) -> Self {
        let mut column = Self::default();
        for stack in stacks {
            column.push(stack);
        }
        column
    }
}

/// Event times in microseconds: per block of 65,536 events a base, per event a `u32` offset
/// from it (a block would have to span over an hour to overflow, and then the column keeps
/// `i64`s instead). Frame-of-reference coding keeps random access O(1), which the views need.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeColumn {
    Blocked {
        bases: Vec<i64>,
        offsets: Column<u32>,
    },
    Wide(Column<i64>),
}

impl Default for TimeColumn {
    fn default() -> Self {
        Self::Blocked {
            bases: Vec::new(),
            offsets: Column::default(),
        }
    }
}

const TIME_BLOCK_LOG2: u32 = 16;
/// A blocked time column from a stored index: `None` unless there is a base for every block.
pub(crate) fn blocked_times(bases: Vec<i64>, offsets: Column<u32>) -> Option<TimeColumn> {
    (bases.len() == offsets.len().div_ceil(1 << TIME_BLOCK_LOG2))
        .then_some(TimeColumn::Blocked { bases, offsets })
}

/// An offset is stored shifted by this, so times a little before the block's first one (clocks
/// of different threads) fit too.
const TIME_BIAS: i64 = 1 << 31;

impl TimeColumn {
    /// The time of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> i64 {
        match self {
            Self::Blocked { bases, offsets } => {
                bases[event >> TIME_BLOCK_LOG2] + i64::from(offsets[event]) - TIME_BIAS
            }
            Self::Wide(times) => times[event],
        }
    }

    /// The time of event `event`, if there is one.
    pub fn at(&self, event: usize) -> Option<i64> {
        (event < self.len()).then(|| self.get(event))
    }

    pub fn first(&self) -> Option<i64> {
        self.at(0)
    }

    /// Every time, in event order.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        (0..self.len()).map(|event| self.get(event))
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Blocked { offsets, .. } => offsets.len(),
            Self::Wide(times) => times.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn push(&mut self, time: i64) {
        if let Self::Blocked { bases, offsets } = self {
            let event = offsets.len();
            if event & ((1 << TIME_BLOCK_LOG2) - 1) == 0 {
                bases.push(time);
            }
            let base = bases[event >> TIME_BLOCK_LOG2];
            if let Some(offset) = time
                .checked_sub(base)
                .and_then(|d| d.checked_add(TIME_BIAS))
                .and_then(|d| u32::try_from(d).ok())
            {
                offsets.push(offset);
                return;
            }
            let mut wide: Vec<i64> = Vec::with_capacity(offsets.len() * 2);
            wide.extend(
                (0..event).map(|e| bases[e >> TIME_BLOCK_LOG2] + i64::from(offsets[e]) - TIME_BIAS),
            );
            *self = Self::Wide(wide.into());
        }
        if let Self::Wide(times) = self {
            times.push(time);
        }
    }

    pub(crate) fn reserve(&mut self, extra: usize) {
        match self {
            Self::Blocked { offsets, .. } => {
                let _ = offsets.try_reserve(extra);
            }
            Self::Wide(times) => {
                let _ = times.try_reserve(extra);
            }
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match self {
            Self::Blocked { bases, offsets } => {
                offsets.truncate(len);
                bases.truncate(len.div_ceil(1 << TIME_BLOCK_LOG2));
            }
            Self::Wide(times) => times.truncate(len),
        }
    }

    /// Moves events `start..` into a column of their own.
    pub(crate) fn split_off(&mut self, start: usize) -> Self {
        let mut tail = Self::default();
        for event in start..self.len() {
            tail.push(self.get(event));
        }
        self.truncate(start);
        tail
    }

    /// The first event of `events` whose time fails `before` (as `slice::partition_point` over
    /// those events' times, which are in order), counted from `events.start`.
    pub fn partition_point(&self, events: Range<usize>, before: impl Fn(i64) -> bool) -> usize {
        let (mut low, mut high) = (events.start, events.end.min(self.len()).max(events.start));
        while low < high {
            let middle = low + (high - low) / 2;
            if before(self.get(middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low - events.start
    }

    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Blocked { bases, offsets } => {
                (bases.capacity() * 8) as u64 + offsets.heap_bytes()
            }
            Self::Wide(times) => times.heap_bytes(),
        }
    }
}

impl From<Vec<u64>> for StreamColumn {
    fn from(streams: Vec<u64>) -> Self {
        let mut column = Self::default();
        for stream in streams {
            column.push(stream);
        }
        column
    }
}

impl From<Vec<u64>> for SizeColumn {
    fn from(sizes: Vec<u64>) -> Self {
        let mut column = Self::default();
        for size in sizes {
            column.push(size);
        }
        column
    }
}

impl From<Vec<i64>> for TimeColumn {
    fn from(times: Vec<i64>) -> Self {
        let mut column = Self::default();
        for time in times {
            column.push(time);
        }
        column
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_4_gib_and_more_are_kept_exactly() {
        let mut sizes = SizeColumn::default();
        let values = [
            0,
            512,
            u64::from(u32::MAX) - 1,
            u64::from(u32::MAX),
            5 << 30,
            7,
            1 << 40,
        ];
        for &v in &values {
            sizes.push(v);
        }
        let read: Vec<u64> = (0..values.len()).map(|e| sizes.get(e)).collect();
        assert_eq!(read, values);
        sizes.set(1, 9 << 30);
        sizes.set(4, 3);
        assert_eq!((sizes.get(1), sizes.get(4)), (9 << 30, 3));
        let tail = sizes.split_off(3);
        assert_eq!((tail.get(0), tail.get(3)), (u64::from(u32::MAX), 1 << 40));
        assert_eq!(sizes.len(), 3);
    }

    #[test]
    fn times_are_exact_in_blocks_and_wide_when_a_block_spans_too_long() {
        let mut times = TimeColumn::default();
        let first = 1_700_000_000_000_000i64;
        let values: Vec<i64> = (0..200_000i64).map(|e| first + e * 37 - (e % 5)).collect();
        for &t in &values {
            times.push(t);
        }
        assert!(matches!(times, TimeColumn::Blocked { .. }));
        assert!((0..values.len()).all(|e| times.get(e) == values[e]));
        assert_eq!(times.partition_point(10..1000, |t| t < values[500]), 490);
        let tail = times.split_off(70_000);
        assert_eq!(
            (tail.get(0), tail.len(), times.len()),
            (values[70_000], 130_000, 70_000)
        );
        // A jump of more than an hour inside a block: the column widens, values unchanged.
        times.push(first + 3 * 3_600_000_000);
        assert!(matches!(times, TimeColumn::Wide(_)));
        assert_eq!(times.get(69_999), values[69_999]);
        assert_eq!(times.get(70_000), first + 3 * 3_600_000_000);
    }

    #[test]
    fn streams_are_coded_until_there_are_too_many() {
        let mut column = StreamColumn::default();
        for event in 0..300u64 {
            column.push(event % 3 * 1000);
        }
        assert!(matches!(column, StreamColumn::Coded { .. }));
        assert_eq!(column.get(4), 1000);
        for stream in 0..300u64 {
            column.push(stream + 7);
        }
        assert!(matches!(column, StreamColumn::Raw(_)));
        assert_eq!(column.len(), 600);
        assert_eq!(column.get(4), 1000);
        assert_eq!(column.get(599), 306);
        let tail = column.split_off(598);
        assert_eq!((column.len(), tail.get(0), tail.get(1)), (598, 305, 306));
    }

    #[test]
    fn sparse_ids_cost_nothing_until_one_is_set() {
        let mut ids = SparseIds::default();
        for event in 0..1000 {
            ids.set(event, 0);
        }
        assert_eq!(ids.heap_bytes(), 0);
        ids.set(10, 7);
        ids.set(12, 0);
        assert_eq!((ids.get(9), ids.get(10), ids.get(500)), (0, 7, 0));
        let tail = ids.split_off(5);
        assert_eq!((ids.get(10), tail.get(5)), (0, 7));
    }

    #[test]
    fn addresses_round_trip_near_far_unaligned_and_across_blocks() {
        let base = 0x7fb1_1400_0000u64;
        let mut made = vec![
            base,
            base + 512,
            base - (1 << 30),
            base + 3,
            0,
            u64::MAX,
            base + (1 << 41),
            base - (1 << 39),
        ];
        // A second block starting far away.
        made.extend((0..(1 << 16) + 10).map(|i| base + (i % 7) * 4096));
        made.push(0x1000);
        let column: AddrColumn = made.iter().copied().collect();
        assert_eq!(column.iter().collect::<Vec<_>>(), made);
        let (bases, offsets, aside) = column.parts();
        assert_eq!(bases.len(), 2);
        assert!(
            aside.iter().any(|&(_, a)| a == base + 3),
            "unaligned kept aside"
        );
        assert!(
            aside.iter().any(|&(_, a)| a == base + (1 << 41)),
            "2 TiB away kept aside"
        );
        let rebuilt = AddrColumn::from_parts(bases.to_vec(), offsets.clone(), aside.to_vec())
            .expect("valid parts");
        assert_eq!(rebuilt, column);
        let mut tail = column.clone();
        let split = tail.split_off(5);
        assert_eq!(tail.iter().collect::<Vec<_>>(), made[..5]);
        assert_eq!(split.iter().collect::<Vec<_>>(), made[5..]);
        assert!(AddrColumn::from_parts(vec![], offsets.clone(), aside.to_vec()).is_none());
    }

    #[test]
    fn stacks_stay_narrow_until_an_id_needs_more() {
        let mut column = StackColumn::from(vec![0, 7, u32::from(u16::MAX)]);
        assert!(matches!(column, StackColumn::Narrow(_)));
        column.push(1 << 20);
        column.push(3);
        assert!(matches!(column, StackColumn::Wide(_)));
        assert_eq!(
            column.iter().collect::<Vec<_>>(),
            [0, 7, 65_535, 1 << 20, 3]
        );
        assert_eq!((column.at(4), column.at(5)), (Some(3), None));
        let tail = column.split_off(3);
        assert_eq!(tail.iter().collect::<Vec<_>>(), [1 << 20, 3]);
        assert_eq!(column.len(), 3);
    }
}
