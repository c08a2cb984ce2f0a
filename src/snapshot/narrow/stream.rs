//! The CUDA stream column: a byte per event while a trace has at most 256 streams.

use crate::snapshot::Column;

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

    pub fn len(&self) -> usize {
        match self {
            Self::Coded { codes, .. } => codes.len(),
            Self::Raw(values) => values.len(),
        }
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

    /// Heap bytes held (by capacity).
    pub fn heap_bytes(&self) -> u64 {
        match self {
            Self::Coded { codes, streams } => codes.heap_bytes() + (streams.capacity() * 8) as u64,
            Self::Raw(values) => values.heap_bytes(),
        }
    }
}

event_column!(StreamColumn, u64);
