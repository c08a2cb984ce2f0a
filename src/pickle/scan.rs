//! Cheap passes over an in-memory pickle that find where it can be cut for parallel decoding,
//! without decoding it.
//!
//! Protocol 4 and 5 pickles are written in FRAMEs (about 64 KiB each) whose boundaries always
//! fall between opcodes, and each frame header says how long the frame is, so every boundary is
//! found by hopping from header to header. Between two boundaries, walking the opcodes (their
//! argument lengths only) counts the memo puts, which tells each chunk the memo index its first
//! put gets, so chunks can be decoded on different cores.

/// The FRAME opcode.
pub const FRAME: u8 = 0x95;
/// The MEMOIZE opcode: a memo put at index `len(memo)`.
pub const MEMOIZE: u8 = 0x94;

/// What one opcode occupies: its total length in bytes (opcode and argument) at `at`, or
/// `None` when it is not one a parallel decode handles (a text opcode, an explicit memo put,
/// an opcode that runs code, an unknown byte, or one cut short by the end of `data`).
#[inline]
pub fn opcode_len(data: &[u8], at: usize) -> Option<usize> {
    let opcode = *data.get(at)?;
    let fixed = |arg: usize| Some(1 + arg);
    let counted = |width: usize| -> Option<usize> {
        let bytes = data.get(at + 1..at + 1 + width)?;
        let mut buf = [0u8; 8];
        buf[..width].copy_from_slice(bytes);
        let len = usize::try_from(u64::from_le_bytes(buf)).ok()?;
        1usize.checked_add(width)?.checked_add(len)
    };
    let len = match opcode {
        // No argument.
        b'('
        | b')'
        | b']'
        | b'}'
        | b'.'
        | b'0'
        | b'1'
        | b'2'
        | b'N'
        | 0x88
        | 0x89
        | b'a'
        | b'e'
        | b'u'
        | b's'
        | b't'
        | b'l'
        | b'd'
        | 0x85..=0x87
        | MEMOIZE
        | 0x8f
        | 0x90
        | 0x91 => fixed(0),
        b'K' | b'h' | 0x80 => fixed(1),
        b'M' => fixed(2),
        b'J' | b'j' => fixed(4),
        b'G' | FRAME => fixed(8),
        0x8a | 0x8c | b'U' | b'C' => counted(1),
        b'X' | b'B' | 0x8b => counted(4),
        0x8d | 0x8e | 0x96 => counted(8),
        // BINSTRING's length is signed; the rest (text opcodes, explicit puts, code) are left
        // to the sequential decoder.
        _ => None,
    }?;
    (at.checked_add(len)? <= data.len()).then_some(len)
}

/// Where the frames of `data` start, in order, from the first frame after the PROTO opcode.
/// Stops at the first place it cannot follow (an unframed stretch it cannot walk, or the end).
pub fn frame_starts(data: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    // PROTO and its argument.
    let mut at = 2;
    while at < data.len() {
        if data[at] == FRAME {
            let Some(header) = data.get(at + 1..at + 9) else {
                break;
            };
            let mut len = [0u8; 8];
            len.copy_from_slice(header);
            let Some(next) = usize::try_from(u64::from_le_bytes(len))
                .ok()
                .and_then(|len| at.checked_add(9)?.checked_add(len))
            else {
                break;
            };
            starts.push(at);
            at = next;
        } else {
            // CPython writes objects larger than a frame outside of frames: step over them.
            match opcode_len(data, at) {
                Some(len) if data[at] != b'.' => at += len,
                _ => break,
            }
        }
    }
    starts
}

/// Memo puts (MEMOIZE) in `data[start..end]`, walking its opcodes; `None` when the walk does not
/// land exactly on `end` or meets an opcode [`opcode_len`] refuses (then the file is decoded on
/// one thread).
pub fn count_memo_puts(data: &[u8], start: usize, end: usize) -> Option<u32> {
    let mut at = start;
    let mut puts: u32 = 0;
    while at < end {
        let len = opcode_len(data, at)?;
        if data[at] == MEMOIZE {
            puts = puts.checked_add(1)?;
        }
        at += len;
    }
    (at == end).then_some(puts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_found_by_their_headers() {
        // Two frames: `}` then `.` (a real file holds 64 KiB per frame).
        let mut data = vec![0x80, 4];
        data.extend([FRAME, 1, 0, 0, 0, 0, 0, 0, 0, b'}']);
        data.extend([FRAME, 1, 0, 0, 0, 0, 0, 0, 0, b'.']);
        assert_eq!(frame_starts(&data), [2, 12]);
        assert_eq!(count_memo_puts(&data, 2, 12), Some(0));
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
