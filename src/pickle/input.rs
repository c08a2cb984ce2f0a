//! Bytes in: encoding detection, bounded decompression, and a refilling buffer that tracks
//! offsets for error messages.

mod bounded;
mod landing;
mod source;

use super::PickleError;
pub(crate) use bounded::{Capped, CompressedCount, io_error};
pub use landing::{Landed, Landing, LandingReader};
pub use source::{CHUNK_HEADROOM, Chunks};
pub(crate) use source::{InMemory, Source, Supply};

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
        // A zstd skippable frame first: `pzstd` writes one before each frame (its size).
        [0x50..=0x5f, 0x2a, 0x4d, 0x18, ..] => Ok(Encoding::Zstd),
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
}
