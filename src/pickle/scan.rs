//! Cheap passes over an in-memory pickle that find where it can be cut for parallel decoding,
//! without decoding it.
//!
//! Protocol 4 and 5 pickles are written in FRAMEs (about 64 KiB each) whose boundaries always
//! fall between opcodes, and each frame header says how long the frame is, so every boundary is
//! found by hopping from header to header. Between two boundaries, walking the opcodes (their
//! argument lengths only) counts the memo puts, which tells each chunk the memo index its first
//! put gets, so chunks can be decoded on different cores.

use super::input::Landed;

/// The FRAME opcode.
pub const FRAME: u8 = 0x95;
/// The MEMOIZE opcode: a memo put at index `len(memo)`.
pub const MEMOIZE: u8 = 0x94;

/// How an opcode's length is told, by opcode byte: `FIXED + n` for `n` argument bytes, a
/// length prefix of 1, 4 or 8 bytes, or not followed (text opcodes, explicit memo puts, code).
const NOT_FOLLOWED: u8 = 0;
const PREFIX_1: u8 = 1;
const PREFIX_4: u8 = 2;
const PREFIX_8: u8 = 3;
const FIXED: u8 = 4;

const LENGTH_RULES: [u8; 256] = {
    let mut rules = [NOT_FOLLOWED; 256];
    let no_argument: &[u8] = &[
        b'(', b')', b']', b'}', b'.', b'0', b'1', b'2', b'N', 0x88, 0x89, b'a', b'e', b'u', b's',
        b't', b'l', b'd', 0x85, 0x86, 0x87, MEMOIZE, 0x8f, 0x90, 0x91,
    ];
    let mut i = 0;
    while i < no_argument.len() {
        rules[no_argument[i] as usize] = FIXED;
        i += 1;
    }
    rules[b'K' as usize] = FIXED + 1;
    rules[b'h' as usize] = FIXED + 1;
    rules[0x80] = FIXED + 1;
    rules[b'M' as usize] = FIXED + 2;
    rules[b'J' as usize] = FIXED + 4;
    rules[b'j' as usize] = FIXED + 4;
    rules[b'G' as usize] = FIXED + 8;
    rules[FRAME as usize] = FIXED + 8;
    rules[0x8a] = PREFIX_1;
    rules[0x8c] = PREFIX_1;
    rules[b'U' as usize] = PREFIX_1;
    rules[b'C' as usize] = PREFIX_1;
    rules[b'X' as usize] = PREFIX_4;
    rules[b'B' as usize] = PREFIX_4;
    rules[0x8b] = PREFIX_4;
    rules[0x8d] = PREFIX_8;
    rules[0x8e] = PREFIX_8;
    rules[0x96] = PREFIX_8;
    rules
};

/// What one opcode occupies: its total length in bytes (opcode and argument) at `at`, or
/// `None` when it is not one a parallel decode handles (a text opcode, an explicit memo put,
/// an opcode that runs code, an unknown byte, or one cut short by the end of `data`).
#[inline]
pub fn opcode_len(data: &[u8], at: usize) -> Option<usize> {
    let len = opcode_span(data, at)?;
    (at.checked_add(len)? <= data.len()).then_some(len)
}

/// [`opcode_len`] read from the opcode's header alone (at most 9 bytes from `at`): the bytes it
/// spans need not be in `data`.
#[inline]
fn opcode_span(data: &[u8], at: usize) -> Option<usize> {
    let opcode = *data.get(at)?;
    let rule = LENGTH_RULES[usize::from(opcode)];
    if rule >= FIXED {
        return Some(1 + usize::from(rule - FIXED));
    }
    let width = match rule {
        PREFIX_1 => 1,
        PREFIX_4 => 4,
        PREFIX_8 => 8,
        _ => return None,
    };
    let bytes = data.get(at + 1..at + 1 + width)?;
    let mut buf = [0u8; 8];
    buf[..width].copy_from_slice(bytes);
    let len = usize::try_from(u64::from_le_bytes(buf)).ok()?;
    (1 + width).checked_add(len)
}

/// The longest opcode header [`opcode_span`] reads: the opcode and an 8-byte length.
const HEADER: usize = 9;

/// How [`header_step`] reads an opcode's length: `fixed` plus the bits of the eight bytes
/// after the opcode that its length prefix takes (`prefix_mask`). `fixed` is 0 for an opcode
/// [`opcode_len`] refuses.
#[derive(Clone, Copy)]
struct HeaderStep {
    fixed: u8,
    prefix_mask: u64,
}

const HEADER_STEPS: [HeaderStep; 256] = {
    let mut steps = [HeaderStep {
        fixed: 0,
        prefix_mask: 0,
    }; 256];
    let mut opcode = 0;
    while opcode < 256 {
        steps[opcode] = match LENGTH_RULES[opcode] {
            NOT_FOLLOWED => HeaderStep {
                fixed: 0,
                prefix_mask: 0,
            },
            PREFIX_1 => HeaderStep {
                fixed: 2,
                prefix_mask: 0xff,
            },
            PREFIX_4 => HeaderStep {
                fixed: 5,
                prefix_mask: 0xffff_ffff,
            },
            PREFIX_8 => HeaderStep {
                fixed: 9,
                prefix_mask: u64::MAX,
            },
            fixed => HeaderStep {
                fixed: 1 + (fixed - FIXED),
                prefix_mask: 0,
            },
        };
        opcode += 1;
    }
    steps
};

/// Where the frames of `bytes` start, in order, from the first frame after the PROTO opcode.
/// Stops at the first place it cannot follow (an unframed stretch it cannot walk, or the end).
/// With `file` (the file `bytes` maps), frame headers are read from the file rather than from
/// the map, so the walk maps no page (only an unframed stretch is walked in the map). Bytes
/// still landing are waited for, a header at a time.
pub fn frame_starts<'a>(bytes: Landed<'a>, file: Option<&'a std::fs::File>) -> FrameStarts<'a> {
    FrameStarts {
        bytes,
        file,
        // PROTO and its argument.
        at: 2,
        window: Vec::new(),
        window_at: 0,
    }
}

/// Bytes of the file read at once for frame headers: one page. A header per 64 KiB frame costs
/// one read of it; a file of tiny frames (9 bytes each, hostile) costs one read per page, not
/// one per frame.
const HEADER_WINDOW: usize = 4096;

/// The iterator [`frame_starts`] returns: it reads only frame headers (and the opcodes of
/// unframed stretches).
pub struct FrameStarts<'a> {
    bytes: Landed<'a>,
    file: Option<&'a std::fs::File>,
    at: usize,
    /// With `file`: the bytes of it from `window_at` last read.
    window: Vec<u8>,
    window_at: usize,
}

impl FrameStarts<'_> {
    /// The header at `at` (up to [`HEADER`] bytes; fewer at the end of the input), waiting for
    /// it to land.
    fn header(&mut self, at: usize) -> Option<&[u8]> {
        let landed = self.bytes.upto(at.checked_add(HEADER)?);
        let end = landed.len().min(at.checked_add(HEADER)?);
        match self.file {
            Some(file) => {
                if at < self.window_at || end > self.window_at + self.window.len() {
                    use std::os::unix::fs::FileExt as _;
                    let len = landed.len().checked_sub(at)?.min(HEADER_WINDOW);
                    self.window.resize(len, 0);
                    file.read_exact_at(&mut self.window, at as u64).ok()?;
                    self.window_at = at;
                }
                self.window.get(at - self.window_at..end - self.window_at)
            }
            None => landed.get(at..end),
        }
    }
}

impl Iterator for FrameStarts<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        loop {
            let at = self.at;
            let Some(header) = self.header(at).filter(|header| !header.is_empty()) else {
                break;
            };
            if header[0] == FRAME {
                let Some(next) = frame_end(header, at) else {
                    break;
                };
                self.at = next;
                return Some(at);
            }
            // CPython writes objects larger than a frame outside of frames: step over them
            // (once their bytes have landed, as a frame's are before the next header).
            let opcode = header[0];
            let Some(len) = opcode_span(header, 0) else {
                break;
            };
            match at.checked_add(len) {
                Some(next) if opcode != b'.' && next <= self.bytes.upto(next).len() => {
                    self.at = next;
                }
                _ => break,
            }
        }
        // Nothing more to follow: later calls end at once too.
        self.at = usize::MAX;
        None
    }
}

/// Memo puts (MEMOIZE) in `data[start..end]`, walking its opcodes; `None` when the walk does not
/// land exactly on `end` or meets an opcode [`opcode_len`] refuses (then the file is decoded on
/// one thread).
///
/// The workers' count of every chunk walks each opcode of the file once, and was a fifth of
/// their time: each opcode's start depends on the length before it, so one walk waits on a
/// load, a table and an add per opcode. The chunk is cut at its frames (which start between
/// opcodes) into [`LANES`] spans walked side by side, each checked to land on the next.
pub fn count_memo_puts(data: &[u8], start: usize, end: usize) -> Option<u32> {
    let cuts = lane_cuts(data, start, end);
    let mut at: [usize; LANES] = std::array::from_fn(|lane| cuts[lane]);
    let ends: [usize; LANES] = std::array::from_fn(|lane| cuts[lane + 1]);
    // Where a whole header can be read without a bounds check per byte.
    let headers_end = data.len().saturating_sub(HEADER);
    let fast_ends = ends.map(|end| end.min(headers_end));
    let mut puts: u64 = 0;
    'side_by_side: while at.iter().zip(&fast_ends).all(|(at, end)| at < end) {
        for at in &mut at {
            let Some((len, put)) = header_step(data, *at) else {
                break 'side_by_side;
            };
            *at += len;
            puts += u64::from(put);
        }
    }
    let mut puts = u32::try_from(puts).ok()?;
    for ((mut at, fast_end), end) in at.into_iter().zip(fast_ends).zip(ends) {
        while at < fast_end {
            let Some((len, put)) = header_step(data, at) else {
                break;
            };
            at += len;
            puts = puts.checked_add(u32::from(put))?;
        }
        // The last opcodes, and any the step above leaves: checked one by one.
        while at < end {
            let len = opcode_len(data, at)?;
            if data[at] == MEMOIZE {
                puts = puts.checked_add(1)?;
            }
            at += len;
        }
        if at != end {
            return None;
        }
    }
    Some(puts)
}

/// Where the frame whose header (a FRAME opcode at `at`) is `header` ends, from its 8-byte
/// length; `None` when the header is cut short or the end overflows.
fn frame_end(header: &[u8], at: usize) -> Option<usize> {
    let length = <[u8; 8]>::try_from(header.get(1..HEADER)?).ok()?;
    let len = usize::try_from(u64::from_le_bytes(length)).ok()?;
    at.checked_add(HEADER)?.checked_add(len)
}

/// Spans [`count_memo_puts`] walks side by side.
const LANES: usize = 4;

/// Where the lanes of `data[start..end]` start (and the last ends): at the frames nearest to
/// equal parts, found by hopping from frame to frame from `start` (a few dozen hops in a
/// chunk). Where frames stop (an opcode outside any, or none at all), the lanes after take
/// nothing.
fn lane_cuts(data: &[u8], start: usize, end: usize) -> [usize; LANES + 1] {
    let mut cuts = [end; LANES + 1];
    cuts[0] = start;
    let part = end.saturating_sub(start) / LANES;
    let mut lane = 1;
    let mut at = start;
    while lane < LANES && at < end {
        if at >= start + lane * part {
            cuts[lane] = at;
            lane += 1;
            continue;
        }
        let next = data
            .get(at..at + HEADER)
            .filter(|header| header[0] == FRAME)
            .and_then(|header| frame_end(header, at));
        match next {
            Some(next) if next <= end => at = next,
            _ => break,
        }
    }
    cuts
}

/// The length of the opcode at `at` and whether it is a memo put, where `data` holds
/// [`HEADER`] bytes from `at`: from [`HEADER_STEPS`] and the eight bytes after the opcode, without
/// a branch on its length rule (which the mix of opcodes in a trace mispredicts). `None` for
/// an opcode [`opcode_len`] refuses or a length past any data (which an eight-byte one can
/// overflow): the checked walk says which.
#[inline(always)]
fn header_step(data: &[u8], at: usize) -> Option<(usize, bool)> {
    let opcode = data[at];
    let mut argument = [0u8; 8];
    argument.copy_from_slice(&data[at + 1..at + HEADER]);
    let step = HEADER_STEPS[usize::from(opcode)];
    let prefixed = u64::from_le_bytes(argument) & step.prefix_mask;
    if step.fixed == 0 || prefixed > data.len() as u64 {
        return None;
    }
    Some((
        usize::from(step.fixed) + prefixed as usize,
        opcode == MEMOIZE,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count as [`opcode_len`] walks it, one checked opcode at a time.
    fn puts_walked(data: &[u8], start: usize, end: usize) -> Option<u32> {
        let (mut at, mut puts) = (start, 0u32);
        while at < end {
            puts += u32::from(data[at] == MEMOIZE);
            at += opcode_len(data, at)?;
        }
        (at == end).then_some(puts)
    }

    #[test]
    fn memo_puts_are_counted_as_the_opcodes_are_walked() {
        // Opcodes of every length rule (and one refused), with arguments of assorted lengths;
        // every span between two offsets, and every truncation of the data.
        let mut data = vec![];
        let mut seed = 12345u32;
        for _ in 0..120 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            match (seed >> 16) % 9 {
                0 | 1 => data.push(MEMOIZE),
                2 => data.extend([b'K', 7]),
                3 => data.extend([0x8c, 3, b'a', MEMOIZE, b'c']),
                4 => data.extend([b'X', 2, 0, 0, 0, MEMOIZE, MEMOIZE]),
                5 => data.extend([0x8e, 1, 0, 0, 0, 0, 0, 0, 0, MEMOIZE]),
                6 => data.extend([b'J', 1, 2, 3, 4]),
                7 if seed.is_multiple_of(7) => data.push(b'p'),
                _ => data.push(b'}'),
            }
        }
        for len in [data.len(), data.len() - 3, 40, 9, 3] {
            let data = &data[..len];
            for start in 0..len.min(60) {
                for end in start..=len {
                    assert_eq!(
                        count_memo_puts(data, start, end),
                        puts_walked(data, start, end),
                        "data[{start}..{end}] of {len}"
                    );
                }
            }
        }
        // A length past the end, and one that overflows.
        let huge = [0x8e, 255, 255, 255, 255, 255, 255, 255, 255, MEMOIZE, 0, 0];
        assert_eq!(count_memo_puts(&huge, 0, huge.len()), None);
    }

    /// Opcodes of every length rule, `count` of them, from `seed`.
    fn some_opcodes(seed: &mut u32, count: usize) -> Vec<u8> {
        let mut data = vec![];
        for _ in 0..count {
            *seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            match (*seed >> 16) % 8 {
                0 | 1 => data.push(MEMOIZE),
                2 => data.extend([b'K', 7]),
                3 => data.extend([0x8c, 3, b'a', MEMOIZE, b'c']),
                4 => data.extend([b'X', 2, 0, 0, 0, MEMOIZE, MEMOIZE]),
                5 => data.extend([0x8e, 1, 0, 0, 0, 0, 0, 0, 0, MEMOIZE]),
                6 => data.extend([b'J', 1, 2, 3, 4]),
                _ => data.push(b'}'),
            }
        }
        data
    }

    #[test]
    fn framed_chunks_are_counted_in_lanes_as_walked() {
        // Frames of assorted sizes (some empty, some a single opcode), as a chunk of a
        // protocol 4 pickle: every span from a frame to a later one (what the workers count),
        // and every span at all, counts as the walk does.
        let mut seed = 99u32;
        let mut data = vec![];
        let mut frames = vec![];
        for size in [0, 1, 30, 7, 120, 2, 64, 0, 45, 300, 5, 9, 80] {
            let body = some_opcodes(&mut seed, size);
            frames.push(data.len());
            data.push(FRAME);
            data.extend((body.len() as u64).to_le_bytes());
            data.extend(body);
        }
        frames.push(data.len());
        for (i, &start) in frames.iter().enumerate() {
            for &end in &frames[i..] {
                let walked = puts_walked(&data, start, end);
                assert!(walked.is_some());
                assert_eq!(count_memo_puts(&data, start, end), walked, "{start}..{end}");
            }
        }
        for start in 0..data.len() {
            for end in (start..=data.len()).step_by(7) {
                let counted = count_memo_puts(&data, start, end);
                assert_eq!(counted, puts_walked(&data, start, end), "{start}..{end}");
            }
        }
        // A frame whose length ends inside an opcode: the lane after it cannot land where the
        // lane before began, and the chunk is refused (decoded on one thread), never miscounted.
        let mut lying = data.clone();
        let second = frames[2];
        lying[second + 1] += 1;
        let walked = puts_walked(&lying, 0, lying.len());
        let counted = count_memo_puts(&lying, 0, lying.len());
        assert!(
            counted.is_none() || counted == walked,
            "{counted:?} {walked:?}"
        );
    }

    #[test]
    fn frames_are_found_by_their_headers() {
        // Two frames: `}` then `.` (a real file holds 64 KiB per frame).
        let mut data = vec![0x80, 4];
        data.extend([FRAME, 1, 0, 0, 0, 0, 0, 0, 0, b'}']);
        data.extend([FRAME, 1, 0, 0, 0, 0, 0, 0, 0, b'.']);
        assert_eq!(
            frame_starts(Landed::whole(&data), None).collect::<Vec<_>>(),
            [2, 12]
        );
        assert_eq!(count_memo_puts(&data, 2, 12), Some(0));
    }

    #[test]
    fn headers_read_from_the_file_give_the_same_starts() {
        // Frames, an unframed string between them (walked in the data), and every truncation
        // (a header cut short, a frame running past the end).
        let mut data = vec![0x80, 4];
        data.extend([FRAME, 2, 0, 0, 0, 0, 0, 0, 0, b'}', MEMOIZE]);
        data.extend([0x8c, 3, b'a', b'b', b'c']);
        data.extend([FRAME, 1, 0, 0, 0, 0, 0, 0, 0, b'.']);
        for len in 0..=data.len() {
            let data = &data[..len];
            let mut file = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut file, data).unwrap();
            let from_memory: Vec<usize> = frame_starts(Landed::whole(data), None).collect();
            let from_file: Vec<usize> = frame_starts(Landed::whole(data), Some(&file)).collect();
            assert_eq!(from_file, from_memory, "{len} bytes");
        }
        let whole: Vec<usize> = frame_starts(Landed::whole(&data), None).collect();
        assert_eq!(whole, [2, 18]);
    }

    #[test]
    fn tiny_frames_across_many_windows_read_the_same_from_the_file() {
        // Empty frames of 9 bytes: headers straddle the read windows (9 does not divide a page).
        let mut data = vec![0x80, 4];
        for _ in 0..3 * HEADER_WINDOW / 9 {
            data.extend([FRAME, 0, 0, 0, 0, 0, 0, 0, 0]);
        }
        data.extend([FRAME, 1, 0, 0, 0, 0, 0, 0, 0, b'.']);
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &data).unwrap();
        let from_memory: Vec<usize> = frame_starts(Landed::whole(&data), None).collect();
        let from_file: Vec<usize> = frame_starts(Landed::whole(&data), Some(&file)).collect();
        assert_eq!(from_memory.len(), 3 * HEADER_WINDOW / 9 + 1);
        assert_eq!(from_file, from_memory);
    }

    #[test]
    fn walks_count_puts_and_refuse_what_they_cannot_follow() {
        let data = [b'}', MEMOIZE, 0x8c, 1, b'a', MEMOIZE, b'q', 0];
        assert_eq!(count_memo_puts(&data, 0, 6), Some(2));
        // An explicit put, and a walk that overshoots the end.
        assert_eq!(count_memo_puts(&data, 0, 8), None);
        assert_eq!(count_memo_puts(&data, 0, 4), None);
        // A length beyond the data.
        assert_eq!(opcode_len(&[0x8c, 9, b'a'], 0), None);
    }
}
