//! Bytes in: encoding detection, bounded decompression, and a refilling buffer that tracks
//! offsets for error messages.

use super::PickleError;
use std::io::{self, Read};

/// Bounds on what untrusted input may cost.
///
/// The defaults suit the command line (a user's own files, possibly very large). A server that
/// accepts uploads should derive its limits from its upload limit with
/// [`Limits::for_input_limit`], so that a compressed upload can cost no more than an
/// uncompressed one may.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Decompressed bytes a gzip/zstd file may expand to before it is refused.
    pub max_decompressed_bytes: u64,
    /// Decompressed bytes allowed per compressed byte read so far (past
    /// [`Limits::expansion_allowance`]). Real snapshots compress about 20:1 with gzip and 35:1
    /// with `zstd -19` or xz (measured on the corpus); a bomb reaches 1000:1 (gzip) to 30000:1
    /// (zstd RLE blocks), so it is refused after a few MB instead of at the absolute limit.
    pub max_expansion_ratio: u64,
    /// Decompressed bytes always allowed regardless of the ratio, so a small file that happens
    /// to compress very well (an empty trace, a run of identical entries) still loads.
    pub expansion_allowance: u64,
    /// The longest single str, bytes or long integer a file may declare. The longest strings in
    /// a snapshot are file names, function names and compile contexts, kilobytes at most; a
    /// length field beyond this is refused before anything is read or allocated for it, so a
    /// compressed stream of zeros cannot be turned into one multi-GB allocation.
    pub max_string_bytes: u64,
    /// Open MARKs (nested containers under construction) at once.
    pub max_depth: usize,
}

/// 64 MiB: a thousand times the longest text a real snapshot holds (a C++ frame's symbol),
/// still small enough that a few of them cannot exhaust a server.
pub const MAX_STRING_BYTES: u64 = 64 << 20;

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Real snapshots reach several GB; a bomb expands by 1000x and more.
            max_decompressed_bytes: 64 << 30,
            max_expansion_ratio: 256,
            expansion_allowance: 16 << 20,
            max_string_bytes: MAX_STRING_BYTES,
            max_depth: 10_000,
        }
    }
}

impl Limits {
    /// Limits for a reader of at most `max_input_bytes` (a server's upload limit): decompressed
    /// data may not exceed what an uncompressed upload could be, nor the CLI's absolute bound.
    pub fn for_input_limit(max_input_bytes: u64) -> Self {
        let defaults = Self::default();
        Self {
            max_decompressed_bytes: max_input_bytes.min(defaults.max_decompressed_bytes),
            ..defaults
        }
    }
}

/// How a snapshot file is encoded, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Pickle,
    Gzip,
    Zstd,
    Json,
}

/// Tells the encoding from the first bytes of a file, or says what the file looks like instead.
pub fn detect_encoding(head: &[u8]) -> Result<Encoding, PickleError> {
    // JSON opens an object or array whose first token is a string, a nested container or
    // the end; `[package]` (TOML) or `{name}` (templates) is not JSON.
    let mut tokens = head.iter().filter(|b| !b.is_ascii_whitespace());
    let looks_like_json = matches!(
        (tokens.next(), tokens.next()),
        (Some(b'{'), Some(b'"' | b'}') | None) | (Some(b'['), Some(b'{' | b'[' | b']') | None)
    );
    match head {
        [0x80, 2..=5, ..] => Ok(Encoding::Pickle),
        // A lone PROTO byte: a pickle cut after its first byte.
        [0x80] => Err(PickleError::Truncated {
            offset: 1,
            what: "the pickle protocol number",
            needed: 1,
        }),
        // The start of a gzip or zstd magic number and nothing more: a compressed file cut short.
        [0x1f] => Err(PickleError::Truncated {
            offset: 0,
            what: "a gzip header",
            needed: 9,
        }),
        [0x28] | [0x28, 0xb5] | [0x28, 0xb5, 0x2f] => Err(PickleError::Truncated {
            offset: 0,
            what: "a zstd header",
            needed: 6 - head.len() as u64,
        }),
        [0x80, protocol, ..] => Err(PickleError::NotASnapshot(format!(
            "pickle protocol {protocol} is not supported (snapview reads protocols 2 to 5)"
        ))),
        [0x1f, 0x8b, ..] => Ok(Encoding::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Ok(Encoding::Zstd),
        [0xfd, b'7', b'z', b'X', b'Z', 0x00, ..] => Err(PickleError::NotASnapshot(
            "this is an xz-compressed file; decompress it first (`xz -d FILE`)".into(),
        )),
        [b'P', b'K', 3, 4, ..] => Err(PickleError::NotASnapshot(
            "this is a zip archive (a torch.save checkpoint?), not a memory snapshot; make one with torch.cuda.memory._dump_snapshot()".into(),
        )),
        [] => Err(PickleError::NotASnapshot("the file is empty".into())),
        _ if looks_like_json => Ok(Encoding::Json),
        _ => Err(PickleError::NotASnapshot(format!(
            "not a memory snapshot: it starts with {}, not a pickle (0x80), gzip, zstd or JSON",
            describe_start(head)
        ))),
    }
}

/// The first bytes of a file, as text when they are printable, else in hex.
fn describe_start(head: &[u8]) -> String {
    let start = &head[..head.len().min(12)];
    if start
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        format!("the text {:?}", String::from_utf8_lossy(start))
    } else {
        let hex: Vec<String> = start.iter().take(8).map(|b| hex::encode([*b])).collect();
        format!("bytes {}", hex.join(" "))
    }
}

/// Compressed bytes read so far, shared between the reader that counts them (below the
/// decompressor) and the [`Capped`] reader above it that checks the expansion ratio.
#[derive(Debug, Clone, Default)]
pub(crate) struct CompressedCount(std::rc::Rc<std::cell::Cell<u64>>);

impl CompressedCount {
    pub(crate) fn get(&self) -> u64 {
        self.0.get()
    }

    fn add(&self, n: usize) {
        self.0.set(self.0.get().saturating_add(n as u64));
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

const BUFFER: usize = 1 << 20;

/// Unread space kept at the front of every buffer a [`Chunks`] supplier hands over: the last
/// few bytes of the previous buffer (an opcode cut by the buffer's end) are put there, so the
/// rest of the buffer is decoded where it is. Reads of a known size are at most 255 bytes
/// (longer strings are streamed).
pub const CHUNK_HEADROOM: usize = 4096;

/// A supplier of whole buffers, such as a file read ahead by another thread. The decoder
/// ([`decode_chunks`](super::decode_chunks)) reads each buffer where it is instead of copying
/// it out.
pub trait Chunks {
    /// The next buffer, its new bytes starting at [`CHUNK_HEADROOM`], or `None` at the end of
    /// input. `spent` is a buffer the source is done with, for reuse.
    fn next_chunk(&mut self, spent: Vec<u8>) -> io::Result<Option<Vec<u8>>>;
}

/// The buffered bytes of a [`Source`]: `buf[pos..end]` is unread.
pub(crate) struct Window {
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Stream offset of `buf[0]`, modulo 2^64: a buffer taken over from [`Chunks`] starts
    /// before the stream does, in its headroom.
    base: u64,
}

/// Where a [`Source`] gets more bytes: a reader, or whole buffers.
pub(crate) trait Supply {
    /// Makes `window` hold at least `n` unread bytes if the input has them; false if it ends
    /// first.
    fn refill(&mut self, window: &mut Window, n: usize) -> Result<bool, PickleError>;

    /// Passes over the next `n` bytes after the window without reading them; false if the input
    /// ends first or this supply cannot skip (only an in-memory supply can, and only it is ever
    /// asked: splicing pre-decoded regions needs the whole pickle in memory).
    fn skip(&mut self, _n: u64) -> bool {
        false
    }
}

/// Copies from a pickle held in memory (a mapped file) into the source's buffer.
pub(crate) struct InMemory<'a> {
    rest: &'a [u8],
}

impl Supply for InMemory<'_> {
    fn refill(&mut self, w: &mut Window, n: usize) -> Result<bool, PickleError> {
        if w.pos > 0 {
            w.buf.copy_within(w.pos..w.end, 0);
            w.base = w.base.wrapping_add(w.pos as u64);
            w.end -= w.pos;
            w.pos = 0;
        }
        let copied = (w.buf.len() - w.end).min(self.rest.len());
        w.buf[w.end..w.end + copied].copy_from_slice(&self.rest[..copied]);
        w.end += copied;
        self.rest = &self.rest[copied..];
        Ok(w.end >= n)
    }

    fn skip(&mut self, n: u64) -> bool {
        match usize::try_from(n) {
            Ok(n) if n <= self.rest.len() => {
                self.rest = &self.rest[n..];
                true
            }
            _ => false,
        }
    }
}

/// Reads into the source's own buffer.
pub(crate) struct Reading<R> {
    reader: R,
    eof: bool,
}

impl<R: Read> Supply for Reading<R> {
    fn refill(&mut self, w: &mut Window, n: usize) -> Result<bool, PickleError> {
        if w.pos > 0 {
            w.buf.copy_within(w.pos..w.end, 0);
            w.base = w.base.wrapping_add(w.pos as u64);
            w.end -= w.pos;
            w.pos = 0;
        }
        while w.end < n && !self.eof {
            match self.reader.read(&mut w.buf[w.end..]) {
                Ok(0) => self.eof = true,
                Ok(read) => w.end += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
        Ok(w.end >= n)
    }
}

/// Takes over whole buffers from [`Chunks`].
pub(crate) struct Chunked<C> {
    chunks: C,
    /// The buffer given up at the last swap, to hand back with the next request.
    spent: Vec<u8>,
    eof: bool,
}

impl<C: Chunks> Supply for Chunked<C> {
    fn refill(&mut self, w: &mut Window, n: usize) -> Result<bool, PickleError> {
        while w.end - w.pos < n && !self.eof {
            let spent = std::mem::take(&mut self.spent);
            let Some(mut chunk) = self.chunks.next_chunk(spent).map_err(io_error)? else {
                self.eof = true;
                break;
            };
            let unread = w.end - w.pos;
            if unread <= CHUNK_HEADROOM && chunk.len() >= CHUNK_HEADROOM {
                // The usual case: the few unread bytes move into the new buffer's headroom.
                let start = CHUNK_HEADROOM - unread;
                chunk[start..CHUNK_HEADROOM].copy_from_slice(&w.buf[w.pos..w.end]);
                w.base = w.base.wrapping_add(w.pos as u64).wrapping_sub(start as u64);
                self.spent = std::mem::replace(&mut w.buf, chunk);
                w.pos = start;
                w.end = w.buf.len();
            } else {
                // More unread bytes than the headroom holds (or a buffer without headroom, so
                // without new bytes either): append what is new to the current buffer.
                w.buf.copy_within(w.pos..w.end, 0);
                w.base = w.base.wrapping_add(w.pos as u64);
                w.end -= w.pos;
                w.pos = 0;
                w.buf.truncate(w.end);
                w.buf
                    .extend_from_slice(chunk.get(CHUNK_HEADROOM..).unwrap_or(&[]));
                w.end = w.buf.len();
                self.spent = chunk;
            }
        }
        Ok(w.end - w.pos >= n)
    }
}

/// A refilling input buffer, with the offset of every byte.
pub(crate) struct Source<S> {
    supply: S,
    window: Window,
}

impl<R: Read> Source<Reading<R>> {
    pub(super) fn new(reader: R) -> Self {
        Self {
            supply: Reading { reader, eof: false },
            window: Window {
                buf: vec![0; BUFFER],
                pos: 0,
                end: 0,
                base: 0,
            },
        }
    }
}

impl<'a> Source<InMemory<'a>> {
    /// A source over a whole pickle in memory, which can skip what was decoded elsewhere.
    pub(super) fn in_memory(data: &'a [u8]) -> Self {
        Self {
            supply: InMemory { rest: data },
            window: Window {
                buf: vec![0; BUFFER],
                pos: 0,
                end: 0,
                base: 0,
            },
        }
    }
}

impl<C: Chunks> Source<Chunked<C>> {
    /// A source that decodes the buffers of `chunks` where they are.
    pub(super) fn chunked(chunks: C) -> Self {
        Self {
            supply: Chunked {
                chunks,
                spent: Vec::new(),
                eof: false,
            },
            window: Window {
                buf: Vec::new(),
                pos: 0,
                end: 0,
                base: 0,
            },
        }
    }
}

impl<S: Supply> Source<S> {
    /// Offset of the next unread byte.
    #[inline]
    pub(super) fn offset(&self) -> u64 {
        self.window.base.wrapping_add(self.window.pos as u64)
    }

    /// Moves on to `offset` (at or after the current one) without decoding what lies between.
    pub(super) fn skip_to(&mut self, offset: u64) -> Result<(), PickleError> {
        let truncated = || PickleError::Truncated {
            offset,
            what: "a region decoded in parallel",
            needed: 1,
        };
        let n = offset.checked_sub(self.offset()).ok_or_else(truncated)?;
        let w = &mut self.window;
        let buffered = (w.end - w.pos) as u64;
        if n <= buffered {
            w.pos += n as usize;
            return Ok(());
        }
        w.base = w.base.wrapping_add(w.end as u64);
        w.pos = 0;
        w.end = 0;
        let beyond = n - buffered;
        if !self.supply.skip(beyond) {
            return Err(truncated());
        }
        self.window.base = self.window.base.wrapping_add(beyond);
        Ok(())
    }

    /// Refills so that at least `n` bytes (n <= 1 MiB) are available; false at end of input.
    #[cold]
    fn refill(&mut self, n: usize) -> Result<bool, PickleError> {
        self.supply.refill(&mut self.window, n)
    }

    /// The next `n` bytes (n <= 1 MiB), consumed.
    #[inline]
    pub(super) fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], PickleError> {
        if self.window.end - self.window.pos < n && !self.refill(n)? {
            return Err(PickleError::Truncated {
                offset: self.offset(),
                what,
                needed: (n - (self.window.end - self.window.pos)) as u64,
            });
        }
        let start = self.window.pos;
        self.window.pos += n;
        Ok(&self.window.buf[start..start + n])
    }

    /// The `n` bytes just taken (n no more than the last `take`).
    pub(super) fn last(&self, n: usize) -> &[u8] {
        &self.window.buf[self.window.pos.saturating_sub(n)..self.window.pos]
    }

    #[inline]
    pub(super) fn u32_le(&mut self, what: &'static str) -> Result<u32, PickleError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub(super) fn u64_le(&mut self, what: &'static str) -> Result<u64, PickleError> {
        let b = self.take(8, what)?;
        let mut buf = [0u8; 8];
        buf.copy_from_slice(b);
        Ok(u64::from_le_bytes(buf))
    }

    #[inline]
    pub(super) fn byte(&mut self, what: &'static str) -> Result<u8, PickleError> {
        if self.window.pos < self.window.end {
            let b = self.window.buf[self.window.pos];
            self.window.pos += 1;
            return Ok(b);
        }
        Ok(self.take(1, what)?[0])
    }

    /// The next byte, or `None` at a clean end of input.
    #[inline]
    pub(super) fn next_opcode(&mut self) -> Result<Option<u8>, PickleError> {
        if self.window.pos < self.window.end || self.refill(1)? {
            let b = self.window.buf[self.window.pos];
            self.window.pos += 1;
            Ok(Some(b))
        } else {
            Ok(None)
        }
    }

    /// Reads `n` bytes of any size. Memory grows only with bytes that actually arrive, so a
    /// length field larger than the file fails at the end of the file, not at allocation.
    pub(super) fn take_vec(&mut self, n: u64, what: &'static str) -> Result<Vec<u8>, PickleError> {
        let start_offset = self.offset();
        let mut out = Vec::with_capacity(usize::try_from(n.min(BUFFER as u64)).unwrap_or(0));
        let mut remaining = n;
        while remaining > 0 {
            if self.window.pos == self.window.end && !self.refill(1)? {
                return Err(PickleError::Truncated {
                    offset: start_offset,
                    what,
                    needed: remaining,
                });
            }
            let chunk = (self.window.end - self.window.pos)
                .min(usize::try_from(remaining).unwrap_or(usize::MAX));
            out.extend_from_slice(&self.window.buf[self.window.pos..self.window.pos + chunk]);
            self.window.pos += chunk;
            remaining -= chunk as u64;
        }
        Ok(out)
    }

    /// Bytes up to and excluding the next newline (text opcodes of protocol 0/1).
    pub(super) fn take_line(&mut self, what: &'static str) -> Result<Vec<u8>, PickleError> {
        let start_offset = self.offset();
        let mut out = Vec::new();
        loop {
            let b = self.byte(what).map_err(|_| PickleError::Truncated {
                offset: start_offset,
                what,
                needed: 1,
            })?;
            if b == b'\n' {
                return Ok(out);
            }
            if out.len() >= 4096 {
                return Err(PickleError::malformed(
                    start_offset,
                    format!("{what} has no newline within 4096 bytes"),
                ));
            }
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_encoding_and_names_impostors() {
        assert_eq!(
            detect_encoding(&[0x80, 4, 0x95]).ok(),
            Some(Encoding::Pickle)
        );
        assert_eq!(detect_encoding(&[0x1f, 0x8b, 8]).ok(), Some(Encoding::Gzip));
        assert_eq!(
            detect_encoding(&[0x28, 0xb5, 0x2f, 0xfd]).ok(),
            Some(Encoding::Zstd)
        );
        assert_eq!(
            detect_encoding(b"  {\"segments\"").ok(),
            Some(Encoding::Json)
        );
        let zip = detect_encoding(b"PK\x03\x04rest").unwrap_err().to_string();
        assert!(zip.contains("zip archive"), "{zip}");
        let png = detect_encoding(b"\x89PNG\r\n").unwrap_err().to_string();
        assert!(png.contains("89 50 4e 47"), "{png}");
        let old = detect_encoding(&[0x80, 1]).unwrap_err().to_string();
        assert!(old.contains("protocol 1"), "{old}");
    }

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
