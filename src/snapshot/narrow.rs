//! Trace columns narrower than their values: a long trace repeats a handful of streams and
//! almost never carries `compile_context` or `user_metadata`, so storing a `u64` stream and two
//! `u32` text ids per event (16 of the 45 bytes an event took) paid for nothing.

/// The CUDA stream of each event: one byte per event indexing the distinct streams while there
/// are at most 256 of them (a program uses a handful), the raw values past that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamColumn {
    Coded { codes: Vec<u8>, streams: Vec<u64> },
    Raw(Vec<u64>),
}

impl Default for StreamColumn {
    fn default() -> Self {
        Self::Coded {
            codes: Vec::new(),
            streams: Vec::new(),
        }
    }
}

impl StreamColumn {
    /// The stream of event `event`.
    #[inline]
    pub fn get(&self, event: usize) -> u64 {
        match self {
            Self::Coded { codes, streams } => streams[usize::from(codes[event])],
            Self::Raw(values) => values[event],
        }
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
                    let mut raw: Vec<u64> = Vec::with_capacity(codes.capacity());
                    raw.extend(codes.iter().map(|&c| streams[usize::from(c)]));
                    raw.push(stream);
                    *self = Self::Raw(raw);
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
    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Coded { codes, streams } => (codes.capacity() + streams.capacity() * 8) as u64,
            Self::Raw(values) => (values.capacity() * 8) as u64,
        }
    }
}

/// A text id per event (into `Trace::strings`, 0: none), stored only up to the last event that
/// has one: empty, and free, in the snapshots torch writes without them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SparseIds(Vec<u32>);

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
        (self.0.capacity() * 4) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
