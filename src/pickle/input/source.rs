//! The refilling input buffer the pickle machine reads from, with the stream offset of every
//! byte for error messages, fed by a reader, a pickle in memory, or whole buffers ([`Chunks`]).

use super::bounded::io_error;
use super::landing::Landed;
use crate::pickle::PickleError;
use std::io::{self, Read};

const BUFFER: usize = 1 << 20;

/// Unread space kept at the front of every buffer a [`Chunks`] supplier hands over: the last
/// few bytes of the previous buffer (an opcode cut by the buffer's end) are put there, so the
/// rest of the buffer is decoded where it is. Reads of a known size are at most 255 bytes
/// (longer strings are streamed).
pub const CHUNK_HEADROOM: usize = 4096;

/// A supplier of whole buffers, such as a file read ahead by another thread. The decoder
/// ([`decode_chunks`](crate::pickle::decode_chunks)) reads each buffer where it is instead of
/// copying it out.
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

impl Window {
    /// Moves the unread bytes to the buffer's start, so that a refill has the room after them.
    fn move_unread_to_front(&mut self) {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base = self.base.wrapping_add(self.pos as u64);
            self.end -= self.pos;
            self.pos = 0;
        }
    }
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

/// Copies from a pickle held in memory (a mapped file, whole or still landing) into the
/// source's buffer.
pub(crate) struct InMemory<'a> {
    bytes: Landed<'a>,
    /// Offset of the next byte to copy.
    at: usize,
}

impl Supply for InMemory<'_> {
    fn refill(&mut self, w: &mut Window, n: usize) -> Result<bool, PickleError> {
        w.move_unread_to_front();
        if self.bytes.is_cut() {
            // What has landed of a cut input is not decoded further: the decode ends now.
            return Ok(w.end >= n);
        }
        let data = self
            .bytes
            .upto(self.at.saturating_add(n.saturating_sub(w.end)));
        let rest = data.get(self.at..).unwrap_or_default();
        let copied = (w.buf.len() - w.end).min(rest.len());
        w.buf[w.end..w.end + copied].copy_from_slice(&rest[..copied]);
        w.end += copied;
        self.at += copied;
        Ok(w.end >= n)
    }

    fn skip(&mut self, n: u64) -> bool {
        match usize::try_from(n).ok().and_then(|n| self.at.checked_add(n)) {
            Some(end) if end <= self.bytes.upto(end).len() => {
                self.at = end;
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
        w.move_unread_to_front();
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
                w.move_unread_to_front();
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
    pub(in crate::pickle) fn new(reader: R) -> Self {
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
    /// A source over a pickle in memory (whole or landing), which can skip what was decoded
    /// elsewhere.
    pub(in crate::pickle) fn in_memory(bytes: Landed<'a>) -> Self {
        Self {
            supply: InMemory { bytes, at: 0 },
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
    pub(in crate::pickle) fn chunked(chunks: C) -> Self {
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
    pub(in crate::pickle) fn offset(&self) -> u64 {
        self.window.base.wrapping_add(self.window.pos as u64)
    }

    /// Moves on to `offset` (at or after the current one) without decoding what lies between.
    pub(in crate::pickle) fn skip_to(&mut self, offset: u64) -> Result<(), PickleError> {
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
    pub(in crate::pickle) fn take(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&[u8], PickleError> {
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

    /// The bytes already buffered and not yet read (possibly none), for a caller that decodes
    /// several opcodes at once and then [`Source::consume`]s what it decoded.
    #[inline]
    pub(in crate::pickle) fn buffered(&self) -> &[u8] {
        &self.window.buf[self.window.pos..self.window.end]
    }

    /// Marks `n` buffered bytes (at most [`Source::buffered`]'s length) as read.
    #[inline]
    pub(in crate::pickle) fn consume(&mut self, n: usize) {
        self.window.pos = (self.window.pos + n).min(self.window.end);
    }

    /// The `n` bytes just taken (n no more than the last `take`).
    pub(in crate::pickle) fn last(&self, n: usize) -> &[u8] {
        &self.window.buf[self.window.pos.saturating_sub(n)..self.window.pos]
    }

    #[inline]
    pub(in crate::pickle) fn u32_le(&mut self, what: &'static str) -> Result<u32, PickleError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub(in crate::pickle) fn u64_le(&mut self, what: &'static str) -> Result<u64, PickleError> {
        let b = self.take(8, what)?;
        let mut buf = [0u8; 8];
        buf.copy_from_slice(b);
        Ok(u64::from_le_bytes(buf))
    }

    #[inline]
    pub(in crate::pickle) fn byte(&mut self, what: &'static str) -> Result<u8, PickleError> {
        if self.window.pos < self.window.end {
            let b = self.window.buf[self.window.pos];
            self.window.pos += 1;
            return Ok(b);
        }
        Ok(self.take(1, what)?[0])
    }

    /// The next byte, or `None` at a clean end of input.
    #[inline]
    pub(in crate::pickle) fn next_opcode(&mut self) -> Result<Option<u8>, PickleError> {
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
    pub(in crate::pickle) fn take_vec(
        &mut self,
        n: u64,
        what: &'static str,
    ) -> Result<Vec<u8>, PickleError> {
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
    pub(in crate::pickle) fn take_line(
        &mut self,
        what: &'static str,
    ) -> Result<Vec<u8>, PickleError> {
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
