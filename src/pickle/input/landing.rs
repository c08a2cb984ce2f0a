//! A pickle whose bytes are still arriving: an upload lands in a file as it is received, and
//! the decoder reads it there (through a map of the file, sized to the bytes the upload
//! announced) while the rest is on its way. Every read asks for the bytes it needs first and
//! waits until they have landed or the input has ended, so no reader ever sees a byte the
//! writer has not written.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// How far an input has landed, told by its one writer and waited on by any reader.
#[derive(Debug, Default)]
pub struct Landing {
    /// Bytes written so far (only ever grows).
    landed: AtomicUsize,
    /// Set once no more bytes will land.
    ended: AtomicBool,
    /// Set when the input ended before it was whole (the client went away), or outgrew the
    /// room it was given: what was decoded of it is not the file's.
    cut: AtomicBool,
    /// Set when the readers are done (their decode ended, or failed): none waits any more.
    unread: AtomicBool,
    /// The furthest byte a reader has waited for: a writer whose room costs memory (see
    /// [`Landing::room_until`]) keeps within a window past it.
    wanted: AtomicUsize,
    /// Bytes before this were read and handed back by the readers.
    released: AtomicUsize,
    /// Held only to wait and to wake: the counters above are read without it.
    lock: Mutex<()>,
    moved: Condvar,
}

impl Landing {
    pub fn new() -> Self {
        Self::default()
    }

    /// The first `bytes` bytes have landed (written where readers read them).
    pub fn landed(&self, bytes: usize) {
        self.landed.fetch_max(bytes, Ordering::Release);
        self.wake();
    }

    /// No more bytes will land: the input is whole (`whole`) or was cut short.
    pub fn end(&self, whole: bool) {
        if !whole {
            self.cut.store(true, Ordering::Release);
        }
        self.ended.store(true, Ordering::Release);
        self.wake();
    }

    /// Whether the input ended before it was whole: what readers made of it says nothing of
    /// the file.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Whether no more bytes will land.
    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// The readers are done: any still waiting for bytes (a decoding thread ahead of a decode
    /// that failed) gets what has landed at once, so the decode ends now, not when the rest of
    /// the upload has arrived.
    pub fn stop_reading(&self) {
        self.unread.store(true, Ordering::Release);
        self.wake();
    }

    /// The readers have read, and handed back, the first `bytes` bytes.
    pub fn released(&self, bytes: usize) {
        self.released.fetch_max(bytes, Ordering::Release);
        self.wake();
    }

    /// Waits until bytes past `landed` may land, and says how far: `window` past the furthest
    /// byte a reader has waited for or handed back. For a writer whose room costs memory (an
    /// input decompressed into memory), so it runs at most a window ahead of its readers and
    /// never holds back a byte a reader waits for. `None` once the readers are done (nothing
    /// more needs to land).
    pub fn room_until(&self, landed: usize, window: usize) -> Option<usize> {
        let until = || {
            let read = self
                .wanted
                .load(Ordering::Acquire)
                .max(self.released.load(Ordering::Acquire));
            Some(read.saturating_add(window.max(1))).filter(|&until| until > landed)
        };
        let done = || self.unread.load(Ordering::Acquire);
        if let Some(until) = until() {
            return (!done()).then_some(until);
        }
        let Ok(mut guard) = self.lock.lock() else {
            return None;
        };
        loop {
            if done() {
                return None;
            }
            if let Some(until) = until() {
                return Some(until);
            }
            guard = match self.moved.wait(guard) {
                Ok(guard) => guard,
                Err(_) => return None,
            };
        }
    }

    /// Whether readers wait no more: the input ended, or its readers are done.
    fn waits_no_more(&self) -> bool {
        self.ended.load(Ordering::Acquire) || self.unread.load(Ordering::Acquire)
    }

    /// The bytes landed, once at least `wanted` have or no more will (the input ended, or its
    /// readers are done).
    pub fn wait_for(&self, wanted: usize) -> usize {
        let landed = self.landed.load(Ordering::Acquire);
        if landed >= wanted || self.waits_no_more() {
            return landed;
        }
        // A writer held to a window past what readers wait for may now land these.
        if self.wanted.fetch_max(wanted, Ordering::AcqRel) < wanted {
            self.wake();
        }
        let Ok(mut guard) = self.lock.lock() else {
            return self.landed.load(Ordering::Acquire);
        };
        loop {
            // Checked under the lock the writer wakes under, so no wake is missed.
            let landed = self.landed.load(Ordering::Acquire);
            if landed >= wanted || self.waits_no_more() {
                return landed;
            }
            guard = match self.moved.wait(guard) {
                Ok(guard) => guard,
                Err(_) => return self.landed.load(Ordering::Acquire),
            };
        }
    }

    fn wake(&self) {
        drop(self.lock.lock());
        self.moved.notify_all();
    }
}

/// A pickle in memory: all of it, or the room its bytes are landing in.
#[derive(Debug, Clone, Copy)]
pub struct Landed<'a> {
    data: &'a [u8],
    landing: Option<&'a Landing>,
}

impl<'a> Landed<'a> {
    /// A pickle that is whole.
    pub fn whole(data: &'a [u8]) -> Self {
        Self {
            data,
            landing: None,
        }
    }

    /// The room `data` that `landing` says how much of has landed.
    pub fn landing(data: &'a [u8], landing: &'a Landing) -> Self {
        Self {
            data,
            landing: Some(landing),
        }
    }

    /// Every byte landed, once the first `wanted` have (or no more will): waits for them. A
    /// slice shorter than `wanted` is the whole input.
    #[inline]
    pub fn upto(&self, wanted: usize) -> &'a [u8] {
        match self.landing {
            None => self.data,
            Some(landing) => &self.data[..landing.wait_for(wanted).min(self.data.len())],
        }
    }

    /// The whole input: waits for its end.
    pub fn all(&self) -> &'a [u8] {
        self.upto(usize::MAX)
    }

    /// What tells how far the bytes have landed, unless they are whole.
    pub fn tracker(&self) -> Option<&'a Landing> {
        self.landing
    }

    /// The room the bytes land in (the whole input's size, when it is whole).
    pub fn room(&self) -> usize {
        self.data.len()
    }

    /// Whether the bytes were cut short (see [`Landing::is_cut`]); never for a whole input.
    pub fn is_cut(&self) -> bool {
        self.landing.is_some_and(Landing::is_cut)
    }

    /// The readers of these bytes are done (see [`Landing::stop_reading`]).
    pub fn stop_reading(&self) {
        if let Some(landing) = self.landing {
            landing.stop_reading();
        }
    }
}

/// Reads a landing input from its file as it lands: for a decoder that reads a stream (a
/// compressed upload, a small one), so it follows the bytes as they arrive.
pub struct LandingReader<'a> {
    file: &'a std::fs::File,
    landing: &'a Landing,
    at: u64,
}

impl<'a> LandingReader<'a> {
    pub fn new(file: &'a std::fs::File, landing: &'a Landing) -> Self {
        Self {
            file,
            landing,
            at: 0,
        }
    }
}

impl Read for LandingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt as _;
        if self.landing.is_cut() {
            // What has landed of a cut input is not read further: the decode ends now.
            return Ok(0);
        }
        let at = usize::try_from(self.at).unwrap_or(usize::MAX);
        let landed = self.landing.wait_for(at.saturating_add(1));
        let n = landed.saturating_sub(at).min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        let read = self.file.read_at(&mut buf[..n], self.at)?;
        self.at += read as u64;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_reader_waits_for_the_bytes_it_asks_and_sees_the_end() {
        let data = b"0123456789";
        let landing = Arc::new(Landing::new());
        let writer = {
            let landing = landing.clone();
            std::thread::spawn(move || {
                for landed in 1..=6 {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    landing.landed(landed);
                }
                landing.end(true);
            })
        };
        let landed = Landed::landing(data, &landing);
        assert!(landed.upto(4).len() >= 4);
        // Only six bytes ever land: asking more waits for the end and gets those six.
        assert_eq!(landed.upto(8), b"012345");
        assert_eq!(landed.all(), b"012345");
        assert!(!landing.is_cut());
        writer.join().unwrap();
    }

    #[test]
    fn a_cut_input_wakes_its_readers() {
        let landing = Arc::new(Landing::new());
        landing.landed(3);
        let reader = {
            let landing = landing.clone();
            std::thread::spawn(move || Landed::landing(b"abcdef", &landing).upto(6).len())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        landing.end(false);
        assert_eq!(reader.join().unwrap(), 3);
        assert!(landing.is_cut());
    }

    #[test]
    fn readers_that_stop_wake_whoever_still_waits() {
        let landing = Arc::new(Landing::new());
        landing.landed(2);
        let waiter = {
            let landing = landing.clone();
            std::thread::spawn(move || Landed::landing(b"abcdef", &landing).upto(6).len())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        Landed::landing(b"abcdef", &landing).stop_reading();
        assert_eq!(waiter.join().unwrap(), 2);
        assert!(!landing.is_cut(), "the input itself is not cut");
    }

    #[test]
    fn a_whole_input_never_waits() {
        assert_eq!(Landed::whole(b"abc").upto(10), b"abc");
    }

    #[test]
    fn the_file_reader_reads_only_what_landed() {
        use std::io::Write as _;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"hello world").unwrap();
        let landing = Landing::new();
        landing.landed(5);
        landing.end(true);
        let mut text = String::new();
        LandingReader::new(&file, &landing)
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hello");
    }
}
