//! zstd frames for the tests: compressed by ruzstd (an encoder that shares no code with the
//! decoder under test, libzstd), or written by hand to say exactly what a frame declares.

/// One zstd frame of `bytes`, with a content checksum (ruzstd writes one).
pub fn frame(bytes: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(bytes, ruzstd::encoding::CompressionLevel::Fastest)
}

/// A frame by hand: its header (no content size, no checksum) declaring a window of
/// 2^`window_log` bytes (10 to 41), then its blocks.
fn header(window_log: u8) -> Vec<u8> {
    // Magic; frame header descriptor 0; window descriptor: the exponent above 10, mantissa 0.
    vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (window_log - 10) << 3]
}

fn block_header(out: &mut Vec<u8>, last: bool, kind: u32, size: u32) {
    let header = u32::from(last) | kind << 1 | size << 3;
    out.extend_from_slice(&header.to_le_bytes()[..3]);
}

/// `bytes` as raw blocks of at most 64 KiB, in a frame that declares a window of
/// 2^`window_log` bytes (at least 2^16, so each block fits).
pub fn raw_frame(bytes: &[u8], window_log: u8) -> Vec<u8> {
    let mut out = header(window_log);
    let blocks: Vec<&[u8]> = bytes.chunks(64 << 10).collect();
    for (i, block) in blocks.iter().enumerate() {
        block_header(&mut out, i + 1 == blocks.len(), 0, block.len() as u32);
        out.extend_from_slice(block);
    }
    out
}

/// A bomb: `prefix` as a raw block, then `blocks` RLE blocks of 128 KiB of `fill` (4 bytes
/// each on disk), in a frame with a 128 KiB window.
pub fn bomb(prefix: &[u8], fill: u8, blocks: usize) -> Vec<u8> {
    let mut out = header(17);
    block_header(&mut out, blocks == 0, 0, prefix.len() as u32);
    out.extend_from_slice(prefix);
    for i in 0..blocks {
        block_header(&mut out, i + 1 == blocks, 1, 128 << 10);
        out.push(fill);
    }
    out
}
