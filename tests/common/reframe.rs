//! A pickle cut into FRAMEs of a few opcodes, so a parallel decode meets every boundary case.

use snapview::pickle::scan::{FRAME, opcode_len};

/// `data` with its FRAME opcodes replaced by one frame every `every` opcodes; `None` when it is
/// not a protocol 4-5 pickle whose opcodes can be walked.
pub fn reframe(data: &[u8], every: usize) -> Option<Vec<u8>> {
    if data.len() < 2 || data[0] != 0x80 || data[1] < 4 {
        return None;
    }
    let mut opcodes = Vec::new();
    let mut at = 2;
    while at < data.len() {
        let len = opcode_len(data, at)?;
        if data[at] != FRAME {
            opcodes.push(&data[at..at + len]);
        }
        let stop = data[at] == b'.';
        at += len;
        if stop {
            break;
        }
    }
    let mut out = data[..2].to_vec();
    for group in opcodes.chunks(every) {
        let len: usize = group.iter().map(|op| op.len()).sum();
        out.push(FRAME);
        out.extend_from_slice(&(len as u64).to_le_bytes());
        for op in group {
            out.extend_from_slice(op);
        }
    }
    Some(out)
}
