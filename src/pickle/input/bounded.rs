//! Bounded decompression: counts the compressed bytes read and refuses decompressed output past
//! an absolute limit or an expansion ratio, so a gzip or zstd bomb stops after a few MB.

use super::Limits;
use crate::pickle::PickleError;
use std::io::{self, Read};

/// Compressed bytes read so far, shared between the reader that counts them (below the
/// decompressor) and the [`Capped`] reader above it that checks the expansion ratio. (Both
/// run on one thread, the decompressor's; atomic so that thread may be another than the
/// caller's.)
#[derive(Debug, Clone, Default)]
pub(crate) struct CompressedCount(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl CompressedCount {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.add_bytes(n as u64);
    }

    /// Counts `n` compressed bytes read elsewhere (a frame a worker thread decompressed).
    pub(crate) fn add_bytes(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// `reader`, counting what is read through it into this count.
    pub(crate) fn counting<R: Read>(&self, reader: R) -> CountedInput<R> {
        CountedInput {
            inner: reader,
            count: self.clone(),
        }
    }
}

/// A reader that adds what it yields to a [`CompressedCount`].
pub(crate) struct CountedInput<R> {
    inner: R,
    count: CompressedCount,
}

impl<R: Read> Read for CountedInput<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.add(n);
        Ok(n)
    }
}

/// A decompressed reader that refuses to yield more than `limit` bytes, or more than
/// `ratio` times the compressed bytes read so far (past an allowance), so a decompression bomb
/// stops early. It never buffers: bytes pass through to the pickle machine as they come.
pub(crate) struct Capped<R> {
    inner: R,
    remaining: u64,
    limit: u64,
    yielded: u64,
    /// The compressed input, its ratio bound and the allowance; `None` checks the limit only.
    ratio: Option<(CompressedCount, u64, u64)>,
}

impl<R> Capped<R> {
    /// The reader below.
    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    pub(crate) fn new(inner: R, limit: u64) -> Self {
        Self {
            inner,
            remaining: limit,
            limit,
            yielded: 0,
            ratio: None,
        }
    }

    /// A reader bounded by `limits`: the absolute limit and the ratio to `compressed`.
    pub(crate) fn with_ratio(inner: R, limits: &Limits, compressed: CompressedCount) -> Self {
        Self {
            ratio: Some((
                compressed,
                limits.max_expansion_ratio,
                limits.expansion_allowance,
            )),
            ..Self::new(inner, limits.max_decompressed_bytes)
        }
    }
}

/// The io error payload that marks "the decompressed size limit was hit".
#[derive(Debug)]
pub(crate) struct DecompressedTooLarge(pub u64);

impl std::fmt::Display for DecompressedTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "decompressed data exceeds {} bytes", self.0)
    }
}

impl std::error::Error for DecompressedTooLarge {}

/// The io error payload that marks "decompression expanded past the ratio".
#[derive(Debug)]
pub(crate) struct ExpansionTooHigh {
    ratio: u64,
    compressed: u64,
    decompressed: u64,
}

impl std::fmt::Display for ExpansionTooHigh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} compressed bytes expanded to {} (over {}:1)",
            self.compressed, self.decompressed, self.ratio
        )
    }
}

impl std::error::Error for ExpansionTooHigh {}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            // Only an error if there is in fact more data.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(DecompressedTooLarge(self.limit))),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.remaining -= n as u64;
        self.yielded += n as u64;
        if let Some((compressed, ratio, allowance)) = &self.ratio {
            let compressed = compressed.get();
            let allowed = compressed.saturating_mul(*ratio).saturating_add(*allowance);
            if self.yielded > allowed {
                return Err(io::Error::other(ExpansionTooHigh {
                    ratio: *ratio,
                    compressed,
                    decompressed: self.yielded,
                }));
            }
        }
        Ok(n)
    }
}

/// Maps io errors from the decompression stack to what the user should hear.
pub(crate) fn io_error(error: io::Error) -> PickleError {
    if let Some(too_large) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<DecompressedTooLarge>())
    {
        return PickleError::DecompressedTooLarge { limit: too_large.0 };
    }
    if let Some(expansion) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ExpansionTooHigh>())
    {
        return PickleError::ExpansionTooHigh {
            ratio: expansion.ratio,
            compressed: expansion.compressed,
            decompressed: expansion.decompressed,
        };
    }
    match error.kind() {
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => {
            PickleError::NotASnapshot(format!("the compressed data is corrupt: {error}"))
        }
        io::ErrorKind::UnexpectedEof => {
            PickleError::NotASnapshot(format!("the compressed data ends early: {error}"))
        }
        _ => PickleError::Io(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_reader_stops_a_bomb_but_passes_an_exact_fit() {
        let data = [7u8; 100];
        let mut exact = Capped::new(&data[..], 100);
        let mut out = Vec::new();
        assert!(exact.read_to_end(&mut out).is_ok());
        let mut over = Capped::new(&data[..], 99);
        let error = over.read_to_end(&mut Vec::new()).unwrap_err();
        assert!(matches!(
            io_error(error),
            PickleError::DecompressedTooLarge { limit: 99 }
        ));
    }
}
